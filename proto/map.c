/* map.c — see map.h. FNV-1a for byte keys, a multiplicative hash for integers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u32(uint32_t k)
{
    return (uint64_t)k * 0x9e3779b97f4a7c15ull >> 16;
}

void strmap_init(struct strmap *m)
{
    memset(m, 0, sizeof(*m));
}

void strmap_deinit(struct strmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static size_t strmap_slot(const struct strmap *m, const char *key, size_t len)
{
    size_t i = hash_bytes(key, len) & (m->cap - 1);

    while (m->keys[i] != NULL && !(m->lens[i] == len && memcmp(m->keys[i], key, len) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

bool strmap_get(const struct strmap *m, const char *key, size_t len, uint32_t *val)
{
    size_t i;

    if (m->cap == 0)
        return false;
    i = strmap_slot(m, key, len);
    if (m->keys[i] == NULL)
        return false;
    *val = m->vals[i];
    return true;
}

static int strmap_grow(struct strmap *m)
{
    struct strmap n = {.cap = m->cap ? m->cap * 2 : 16};

    n.keys = calloc(n.cap, sizeof(*n.keys));
    n.lens = calloc(n.cap, sizeof(*n.lens));
    n.vals = calloc(n.cap, sizeof(*n.vals));
    if (n.keys == NULL || n.lens == NULL || n.vals == NULL) {
        free(n.keys);
        free(n.lens);
        free(n.vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] != NULL) {
            size_t j = strmap_slot(&n, m->keys[i], m->lens[i]);
            n.keys[j] = m->keys[i];
            n.lens[j] = m->lens[i];
            n.vals[j] = m->vals[i];
        }
    }
    n.len = m->len;
    free(m->keys);
    free(m->lens);
    free(m->vals);
    *m = n;
    return 0;
}

int strmap_put(struct strmap *m, const char *key, size_t len, uint32_t val)
{
    size_t i;
    char *k;

    if ((m->len + 1) * 2 > m->cap && strmap_grow(m) < 0)
        return -ENOMEM;
    k = malloc(len + 1);
    if (k == NULL)
        return -ENOMEM;
    memcpy(k, key, len);
    k[len] = '\0';
    i = strmap_slot(m, key, len);
    m->keys[i] = k;
    m->lens[i] = len;
    m->vals[i] = val;
    m->len++;
    return 0;
}

void u32map_init(struct u32map *m)
{
    memset(m, 0, sizeof(*m));
}

void u32map_deinit(struct u32map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof(*m));
}

static size_t u32map_slot(const struct u32map *m, uint32_t key)
{
    size_t i = hash_u32(key) & (m->cap - 1);

    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

bool u32map_get(const struct u32map *m, uint32_t key, uint32_t *val)
{
    size_t i;

    if (m->cap == 0)
        return false;
    i = u32map_slot(m, key);
    if (!m->used[i])
        return false;
    *val = m->vals[i];
    return true;
}

static int u32map_grow(struct u32map *m)
{
    struct u32map n = {.cap = m->cap ? m->cap * 2 : 16};

    n.keys = calloc(n.cap, sizeof(*n.keys));
    n.vals = calloc(n.cap, sizeof(*n.vals));
    n.used = calloc(n.cap, sizeof(*n.used));
    if (n.keys == NULL || n.vals == NULL || n.used == NULL) {
        u32map_deinit(&n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->used[i]) {
            size_t j = u32map_slot(&n, m->keys[i]);
            n.used[j] = true;
            n.keys[j] = m->keys[i];
            n.vals[j] = m->vals[i];
        }
    }
    n.len = m->len;
    u32map_deinit(m);
    *m = n;
    return 0;
}

int u32map_put(struct u32map *m, uint32_t key, uint32_t val)
{
    size_t i;

    if ((m->len + 1) * 2 > m->cap && u32map_grow(m) < 0)
        return -ENOMEM;
    i = u32map_slot(m, key);
    if (!m->used[i]) {
        m->used[i] = true;
        m->keys[i] = key;
        m->len++;
    }
    m->vals[i] = val;
    return 0;
}
