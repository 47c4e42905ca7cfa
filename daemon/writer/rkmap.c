/* rkmap.c — the rank aggregates' index of integer triples; see rkmap.h. */
#include "rkmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t rkmap_home(const struct rkmap *m, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full ^ c * 0x165667b19e3779f9ull;

    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return (size_t)h & (m->cap - 1);
}

ssize_t rkmap_get(const struct rkmap *m, uint64_t a, uint64_t b, uint64_t c)
{
    if (m->cap == 0)
        return -1;
    for (size_t i = rkmap_home(m, a, b, c);; i = (i + 1) & (m->cap - 1)) {
        const struct rkmap_slot *sl = &m->s[i];
        if (sl->v1 == 0)
            return -1;
        if (sl->a == a && sl->b == b && sl->c == c)
            return (ssize_t)sl->v1 - 1;
    }
}

static void rkmap_place(struct rkmap *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v1)
{
    size_t i = rkmap_home(m, a, b, c);

    while (m->s[i].v1 != 0)
        i = (i + 1) & (m->cap - 1);
    m->s[i] = (struct rkmap_slot){a, b, c, v1};
    m->len++;
}

int rkmap_put(struct rkmap *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v)
{
    if ((m->len + 1) * 2 > m->cap) {
        struct rkmap g = {calloc(m->cap ? m->cap * 2 : 64, sizeof(*m->s)), m->cap ? m->cap * 2 : 64,
                          0};
        if (g.s == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].v1 != 0)
                rkmap_place(&g, m->s[i].a, m->s[i].b, m->s[i].c, m->s[i].v1);
        free(m->s);
        *m = g;
    }
    rkmap_place(m, a, b, c, v + 1);
    return 0;
}

void rkmap_clear(struct rkmap *m)
{
    if (m->len > 0)
        memset(m->s, 0, m->cap * sizeof(*m->s));
    m->len = 0;
}

void rkmap_free(struct rkmap *m)
{
    free(m->s);
    *m = (struct rkmap){NULL, 0, 0};
}

int rkmap_grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    size_t c;
    void *p;

    if (n < *cap)
        return 0;
    c = *cap ? *cap * 2 : 64;
    if ((p = realloc(*arr, c * sz)) == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

void *rkmap_find(struct rkmap *m, uint64_t a, uint64_t b, uint64_t c, void **arr, size_t *n,
                 size_t *cap, size_t sz, const void *init)
{
    ssize_t i = rkmap_get(m, a, b, c);
    char *el;

    if (i >= 0)
        return (char *)*arr + (size_t)i * sz;
    if (*n >= UINT32_MAX || rkmap_grow(arr, cap, *n, sz) < 0 ||
        rkmap_put(m, a, b, c, (uint32_t)*n) < 0)
        return NULL;
    el = (char *)*arr + *n * sz;
    memcpy(el, init, sz);
    (*n)++;
    return el;
}
