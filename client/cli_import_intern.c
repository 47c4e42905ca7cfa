/*
 * cli_import_intern.c — see cli_import_intern.h.
 */
#include "cli_import_intern.h"

#include <stdlib.h>
#include <string.h>

uint64_t intern_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* Doubles the hash table (keeping it at most half full). 0 or -1. */
static int intern_grow(struct intern *t)
{
    size_t ns = t->nslot ? t->nslot * 2 : 256, i;
    uint32_t *slot = calloc(ns, sizeof(*slot));

    if (slot == NULL)
        return -1;
    for (size_t k = 0; k < t->n; k++) {
        i = intern_hash(t->v[k], t->len[k]) & (ns - 1);
        while (slot[i])
            i = (i + 1) & (ns - 1);
        slot[i] = (uint32_t)k + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->nslot = ns;
    return 0;
}

static int intern_reserve(struct intern *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **v;
    size_t *len;

    if (t->n < t->cap)
        return 0;
    if ((v = realloc(t->v, cap * sizeof(*v))) == NULL)
        return -1;
    t->v = v;
    if ((len = realloc(t->len, cap * sizeof(*len))) == NULL)
        return -1;
    t->len = len;
    t->cap = cap;
    return 0;
}

uint32_t intern_get(struct intern *t, const void *s, size_t n)
{
    size_t i;

    if ((t->n + 1) * 2 > t->nslot && intern_grow(t) < 0)
        return INTERN_NONE;
    i = intern_hash(s, n) & (t->nslot - 1);
    while (t->slot[i]) {
        uint32_t k = t->slot[i] - 1;
        if (t->len[k] == n && memcmp(t->v[k], s, n) == 0)
            return k;
        i = (i + 1) & (t->nslot - 1);
    }
    if (t->n >= INTERN_NONE - 1 || intern_reserve(t) < 0)
        return INTERN_NONE;
    if ((t->v[t->n] = malloc(n + 1)) == NULL)
        return INTERN_NONE;
    memcpy(t->v[t->n], s, n);
    t->v[t->n][n] = '\0';
    t->len[t->n] = n;
    t->slot[i] = (uint32_t)t->n + 1;
    return (uint32_t)t->n++;
}

uint32_t intern_str(struct intern *t, const char *s)
{
    return intern_get(t, s, strlen(s));
}

void intern_deinit(struct intern *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    free(t->len);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}
