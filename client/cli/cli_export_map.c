/*
 * cli_export_map — (a, b) → value hash map (see cli_export_map.h).
 */
#include "cli_export_map.h"

#include <stdlib.h>

void cli_export_map_init(struct cli_export_map *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

void cli_export_map_deinit(struct cli_export_map *m)
{
    free(m->slots);
    cli_export_map_init(m);
}

/* splitmix64's finalizer: ids are small and dense, so they need mixing. */
static uint64_t cli_export_map_hash(uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x9e3779b97f4a7c15u ^ b;

    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static struct cli_export_slot *cli_export_map_find(struct cli_export_slot *slots, size_t cap,
                                                   uint64_t a, uint64_t b)
{
    size_t i = (size_t)cli_export_map_hash(a, b) & (cap - 1);

    while (slots[i].used && (slots[i].a != a || slots[i].b != b))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

uint64_t *cli_export_map_get(const struct cli_export_map *m, uint64_t a, uint64_t b)
{
    struct cli_export_slot *s;

    if (m->cap == 0)
        return NULL;
    s = cli_export_map_find(m->slots, m->cap, a, b);
    return s->used ? &s->val : NULL;
}

static int cli_export_map_grow(struct cli_export_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    struct cli_export_slot *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].used)
            *cli_export_map_find(slots, cap, m->slots[i].a, m->slots[i].b) = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

uint64_t *cli_export_map_upsert(struct cli_export_map *m, uint64_t a, uint64_t b, bool *created)
{
    struct cli_export_slot *s;
    uint64_t *v = cli_export_map_get(m, a, b);

    if (created != NULL)
        *created = v == NULL;
    if (v != NULL)
        return v;
    if ((m->n + 1) * 2 > m->cap && cli_export_map_grow(m) != 0)
        return NULL;
    s = cli_export_map_find(m->slots, m->cap, a, b);
    s->used = true;
    s->a = a;
    s->b = b;
    s->val = 0;
    m->n++;
    return &s->val;
}
