/* map.c — see map.h. FNV-1a for byte keys, splitmix64's finalizer for integers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"

uint64_t map_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 14695981039346656037ull; /* FNV-1a's 64-bit offset basis */

    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull; /* and its prime */
    return h;
}

/* splitmix64's finalizer: ids are small and dense, so they need mixing. */
static uint64_t map_hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 31);
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
    size_t i = map_hash_bytes(key, len) & (m->cap - 1);

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
    size_t i = map_hash_u64(key) & (m->cap - 1);

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

void pairmap_init(struct pairmap *m)
{
    memset(m, 0, sizeof(*m));
}

void pairmap_deinit(struct pairmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

static struct pairmap_slot *pairmap_slot(struct pairmap_slot *slots, size_t cap, uint64_t a,
                                         uint64_t b)
{
    size_t i = map_hash_u64(a * 0x9e3779b97f4a7c15u ^ b) & (cap - 1);

    while (slots[i].used && (slots[i].a != a || slots[i].b != b))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

uint64_t *pairmap_get(const struct pairmap *m, uint64_t a, uint64_t b)
{
    struct pairmap_slot *s;

    if (m->cap == 0)
        return NULL;
    s = pairmap_slot(m->slots, m->cap, a, b);
    return s->used ? &s->val : NULL;
}

static int pairmap_grow(struct pairmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    struct pairmap_slot *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].used)
            *pairmap_slot(slots, cap, m->slots[i].a, m->slots[i].b) = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

uint64_t *pairmap_upsert(struct pairmap *m, uint64_t a, uint64_t b, bool *created)
{
    struct pairmap_slot *s;
    uint64_t *v = pairmap_get(m, a, b);

    if (created != NULL)
        *created = v == NULL;
    if (v != NULL)
        return v;
    if ((m->len + 1) * 2 > m->cap && pairmap_grow(m) < 0)
        return NULL;
    s = pairmap_slot(m->slots, m->cap, a, b);
    s->used = true;
    s->a = a;
    s->b = b;
    s->val = 0;
    m->len++;
    return &s->val;
}
