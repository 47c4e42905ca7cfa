/* rkcover.c — the union of top-level entries per (process, step); see rkcover.h. */
#include "rkcover.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The first interval of c that ends after b (they are disjoint and sorted: ends go up). */
static size_t rkcover_find(const struct rk_cover *c, uint64_t b)
{
    size_t lo = 0, hi = c->n;

    /* entries come nearly in time order: most start in or after the last interval */
    if (hi > 0 && c->iv[hi - 1].e <= b)
        return hi;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->iv[mid].e <= b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Adds [b, e) to c's merged intervals; returns the length of [b, e) no interval covered
 * before, or UINT64_MAX when out of memory (c unchanged).
 */
static uint64_t rkcover_add(struct rk_cover *c, uint64_t b, uint64_t e)
{
    struct rk_iv *last = c->n > 0 ? &c->iv[c->n - 1] : NULL;
    size_t lo, j;
    uint64_t covered = 0, nb = b, ne = e;

    /* entries come nearly in time order: most start in or after the last interval */
    if (last != NULL && b >= last->b && b <= last->e) {
        uint64_t add = e > last->e ? e - last->e : 0;
        if (e > last->e)
            last->e = e;
        return add;
    }
    if (last != NULL && b > last->e && c->n < c->cap) {
        c->iv[c->n++] = (struct rk_iv){b, e};
        return e - b;
    }
    lo = j = rkcover_find(c, b);

    /* [lo, j): the intervals [b, e) overlaps or touches, merged into one */
    while (j < c->n && c->iv[j].b <= e) {
        uint64_t x = c->iv[j].b > b ? c->iv[j].b : b, y = c->iv[j].e < e ? c->iv[j].e : e;
        if (y > x)
            covered += y - x;
        if (c->iv[j].b < nb)
            nb = c->iv[j].b;
        if (c->iv[j].e > ne)
            ne = c->iv[j].e;
        j++;
    }
    if (j > lo) {
        c->iv[lo] = (struct rk_iv){nb, ne};
        memmove(c->iv + lo + 1, c->iv + j, (c->n - j) * sizeof(*c->iv));
        c->n -= j - lo - 1;
        return (e - b) - covered;
    }
    if (rkmap_grow((void **)&c->iv, &c->cap, c->n, sizeof(*c->iv)) < 0)
        return UINT64_MAX;
    memmove(c->iv + lo + 1, c->iv + lo, (c->n - lo) * sizeof(*c->iv));
    c->iv[lo] = (struct rk_iv){b, e};
    c->n++;
    return e - b;
}

struct rk_cover rkcover_none[RK_WAYS] = {
    {.tail = UINT64_MAX}, {.tail = UINT64_MAX}, {.tail = UINT64_MAX}, {.tail = UINT64_MAX}};
_Static_assert(RK_WAYS == 4, "rkcover_none has RK_WAYS slots");

/* p's slots, allocated at its first top-level entry: none used, none appended to. */
static bool rkcover_alloc(struct rk_proc *p)
{
    if (p->cover != NULL && p->cover != rkcover_none)
        return true;
    if ((p->cover = calloc(RK_WAYS, sizeof(*p->cover))) == NULL)
        return false;
    for (int k = 0; k < RK_WAYS; k++)
        p->cover[k].tail = UINT64_MAX;
    return true;
}

int rkcover_entry_slow(struct ranks *r, struct rk_proc *p, const struct proto_entry *e,
                       struct rk_stepsum *s)
{
    uint64_t end = e->start_ns + e->dur_ns, add;
    struct rk_cover *c;

    if (e->dur_ns == 0)
        return 0;
    if (!rkcover_alloc(p))
        return -ENOMEM;
    if (e->start_ns > p->cover_max_start)
        p->cover_max_start = e->start_ns;
    else if (p->cover_max_start - e->start_ns > p->cover_disorder)
        p->cover_disorder = p->cover_max_start - e->start_ns;
    p->cover_dirty = true;
    c = &p->cover[e->step % RK_WAYS];
    if (!c->used || c->step != e->step) {
        /* a later step takes the slot; an entry of a step whose slot a later one took is
         * late: what it overlaps of that step's dropped intervals counts twice */
        if (c->used && c->step > e->step)
            r->late++;
        c->used = true;
        c->step = e->step;
        c->n = 0;
        c->drop_end = 0;
    } else if (e->start_ns < c->drop_end) {
        r->late++;
    }
    if (c->n >= RANKS_PENDING) { /* one step of endless disjoint entries: a bound */
        c->drop_end = c->iv[c->n - 1].e;
        c->n = 0;
        r->late++;
    }
    add = rkcover_add(c, e->start_ns, end);
    rkcover_retail(c);
    if (add == UINT64_MAX)
        return -ENOMEM;
    s->covered = rk_sat(s->covered, add);
    return 0;
}

/* The least margin before a process's latest start that settle keeps: the disorder is learnt
 * only once an entry came late, and the first late ones should not find their step's
 * intervals gone (threads of one process flush their rings at different times). */
#define RKCOVER_SLACK 100000000ull /* 100 ms */

void rkcover_settle(struct rk_proc *p)
{
    uint64_t margin = p->cover_disorder > UINT64_MAX / 2 ? UINT64_MAX : 2 * p->cover_disorder;
    uint64_t w;

    if (margin < RKCOVER_SLACK)
        margin = RKCOVER_SLACK;
    w = p->cover_max_start > margin ? p->cover_max_start - margin : 0;

    if (p->cover == NULL || p->cover == rkcover_none ||
        p->replay) /* an import comes in file order: kept to the end */
        return;
    for (int k = 0; k < RK_WAYS; k++) {
        struct rk_cover *c = &p->cover[k];
        size_t drop = c->used ? rkcover_find(c, w) : 0;
        if (drop == 0)
            continue;
        if (c->iv[drop - 1].e > c->drop_end)
            c->drop_end = c->iv[drop - 1].e;
        memmove(c->iv, c->iv + drop, (c->n - drop) * sizeof(*c->iv));
        c->n -= drop;
        rkcover_retail(c);
        p->cover_dirty = true;
    }
}

int rkcover_load(struct rk_proc *p, uint32_t slot, uint64_t step, bool head, uint64_t b, uint64_t e)
{
    struct rk_cover *c;

    if (slot >= RK_WAYS)
        return 0; /* not a slot this writer makes */
    if (!rkcover_alloc(p))
        return -ENOMEM;
    c = &p->cover[slot];
    c->used = true;
    c->step = step;
    if (head) {
        c->drop_end = b;
        rkcover_retail(c);
        return 0;
    }
    if (rkmap_grow((void **)&c->iv, &c->cap, c->n, sizeof(*c->iv)) < 0)
        return -ENOMEM;
    c->iv[c->n++] = (struct rk_iv){b, e};
    rkcover_retail(c);
    return 0;
}

void rkcover_free(struct rk_proc *p)
{
    if (p->cover == NULL || p->cover == rkcover_none)
        return;
    for (int k = 0; k < RK_WAYS; k++)
        free(p->cover[k].iv);
    free(p->cover);
    p->cover = rkcover_none;
}
