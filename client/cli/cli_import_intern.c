/*
 * cli_import_intern.c — see cli_import_intern.h.
 */
#include "cli_import_intern.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int intern_reserve(struct intern *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **v;
    size_t *len;

    if (t->n < t->cap)
        return 0;
    if ((v = realloc(t->v, cap * sizeof(*v))) == NULL)
        return -ENOMEM;
    t->v = v;
    if ((len = realloc(t->len, cap * sizeof(*len))) == NULL)
        return -ENOMEM;
    t->len = len;
    t->cap = cap;
    return 0;
}

uint32_t intern_get(struct intern *t, const void *s, size_t n)
{
    uint32_t k;

    if (strmap_get(&t->index, s, n, &k))
        return k;
    if (t->n >= INTERN_NONE - 1 || intern_reserve(t) < 0)
        return INTERN_NONE;
    if ((t->v[t->n] = malloc(n + 1)) == NULL)
        return INTERN_NONE;
    memcpy(t->v[t->n], s, n);
    t->v[t->n][n] = '\0';
    t->len[t->n] = n;
    if (strmap_put(&t->index, s, n, (uint32_t)t->n) < 0) {
        free(t->v[t->n]);
        return INTERN_NONE;
    }
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
    strmap_deinit(&t->index);
    memset(t, 0, sizeof(*t));
}
