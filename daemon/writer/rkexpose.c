/* rkexpose.c — exposed communication; see rkexpose.h. */
#include "rkexpose.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rkdelta.h"

/* rkexpose_add's other cases (apart: the common ones are inlined). */
static __attribute__((noinline)) int rkexpose_insert(struct rk_dev *d, uint64_t b, uint64_t e)
{
    size_t lo = 0, hi = d->n_cu, j;
    struct rk_iv *last = d->n_cu > 0 ? &d->cu[d->n_cu - 1] : NULL;

    if (last == NULL || b > last->e) {
        if (rkmap_grow((void **)&d->cu, &d->cap_cu, d->n_cu, sizeof(*d->cu)) < 0)
            return -ENOMEM;
        d->cu[d->n_cu++] = (struct rk_iv){b, e};
        return 0;
    }

    /* the first interval that ends at or after b */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->cu[mid].e < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    j = lo;
    while (j < d->n_cu && d->cu[j].b <= e) {
        if (d->cu[j].b < b)
            b = d->cu[j].b;
        if (d->cu[j].e > e)
            e = d->cu[j].e;
        j++;
    }
    if (j > lo) { /* [lo, j) merge into one */
        d->cu[lo] = (struct rk_iv){b, e};
        memmove(d->cu + lo + 1, d->cu + j, (d->n_cu - j) * sizeof(*d->cu));
        d->n_cu -= j - lo - 1;
        return 0;
    }
    if (rkmap_grow((void **)&d->cu, &d->cap_cu, d->n_cu, sizeof(*d->cu)) < 0)
        return -ENOMEM;
    memmove(d->cu + lo + 1, d->cu + lo, (d->n_cu - lo) * sizeof(*d->cu));
    d->cu[lo] = (struct rk_iv){b, e};
    d->n_cu++;
    return 0;
}

/* Adds [b, e) to the merged, sorted compute intervals of d. */
static inline int rkexpose_add(struct rk_dev *d, uint64_t b, uint64_t e)
{
    struct rk_iv *last = d->n_cu > 0 ? &d->cu[d->n_cu - 1] : NULL;

    /* entries come nearly in time order: most start after the last interval, or in it */
    if (last != NULL && b >= last->b && b <= last->e) {
        if (e > last->e)
            last->e = e;
        return 0;
    }
    if (last != NULL && b > last->e && d->n_cu < d->cap_cu) {
        d->cu[d->n_cu++] = (struct rk_iv){b, e};
        return 0;
    }
    return rkexpose_insert(d, b, e);
}

int rkexpose_add_compute(struct rk_dev *d, uint64_t b, uint64_t e)
{
    return rkexpose_add(d, b, e);
}

int rkexpose_add_comm(struct rk_dev *d, uint64_t b, uint64_t e, uint64_t step, uint32_t op_id)
{
    if (rkmap_grow((void **)&d->pc, &d->cap_pc, d->n_pc, sizeof(*d->pc)) < 0)
        return -ENOMEM;
    d->pc[d->n_pc++] = (struct rk_pend){b, e, step, op_id};
    return 0;
}

/* The length of [b, e) covered by the compute intervals of d. */
static uint64_t rkexpose_overlap(const struct rk_dev *d, uint64_t b, uint64_t e, size_t *hint)
{
    size_t lo = 0, hi = d->n_cu;
    uint64_t sum = 0;

    /* the comm entries come nearly in time order: the previous one's place, a few further
     * (found there, no search) */
    if (*hint <= d->n_cu && (*hint == 0 || d->cu[*hint - 1].e <= b)) {
        lo = *hint;
        for (int k = 0; k < 8 && lo < hi && d->cu[lo].e <= b; k++)
            lo++;
        if (lo == hi || d->cu[lo].e > b)
            hi = lo;
    }
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->cu[mid].e <= b)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t j = lo; j < d->n_cu && d->cu[j].b < e; j++) {
        uint64_t x = d->cu[j].b > b ? d->cu[j].b : b, y = d->cu[j].e < e ? d->cu[j].e : e;
        if (y > x)
            sum += y - x;
    }
    *hint = lo;
    return sum;
}

int rkexpose_settle(struct ranks *r, struct rk_dev *d, uint64_t w)
{
    size_t keep = 0, drop = 0, hint = 0;
    uint64_t low = w;

    for (size_t i = 0; i < d->n_pc; i++) {
        struct rk_pend *p = &d->pc[i];
        if (p->e <= w) {
            uint64_t exp = (p->e - p->b) - rkexpose_overlap(d, p->b, p->e, &hint);
            struct rk_opsum *o = rkdelta_opsum_c(r, d, p->op_id);
            struct rk_devstep *ds = rkdelta_devstep_c(r, d, p->step);
            struct rk_stepsum *s = rkdelta_step_c(r, d->process_id, p->step);
            if (o == NULL || ds == NULL || s == NULL)
                return -ENOMEM;
            o->exposed = rk_sat(o->exposed, exp);
            ds->exposed = rk_sat(ds->exposed, exp);
            s->exposed = rk_sat(s->exposed, exp);
            if (p->e > d->fin_end)
                d->fin_end = p->e;
        } else {
            if (p->b < low)
                low = p->b;
            d->pc[keep++] = *p;
        }
    }
    if (keep != d->n_pc)
        d->dirty = true;
    d->n_pc = keep;
    /* compute intervals that end before every pending and future comm entry (they are
     * disjoint and sorted: their ends go up, the last dropped ends latest) */
    for (size_t hi = d->n_cu; drop < hi;) {
        size_t mid = (drop + hi) / 2;
        if (d->cu[mid].e <= low)
            drop = mid + 1;
        else
            hi = mid;
    }
    if (drop > 0) {
        if (d->cu[drop - 1].e > d->drop_end)
            d->drop_end = d->cu[drop - 1].e;
        d->dirty = true;
        memmove(d->cu, d->cu + drop, (d->n_cu - drop) * sizeof(*d->cu));
        d->n_cu -= drop;
    }
    return 0;
}

int rkexpose_settle_live(struct ranks *r, struct rk_dev *d)
{
    const struct rk_proc *p = rkdelta_proc_known(r, d->process_id);
    uint64_t margin = d->disorder > UINT64_MAX / 2 ? UINT64_MAX : 2 * d->disorder;

    if (p != NULL && p->replay)
        return 0;
    return rkexpose_settle(r, d, d->max_start > margin ? d->max_start - margin : 0);
}

int rkexpose_entry(struct ranks *r, struct rk_dev *d, const struct proto_entry *e,
                   enum proto_cat cat)
{
    uint64_t end = e->start_ns + e->dur_ns;

    if ((cat != PROTO_CAT_COMPUTE && cat != PROTO_CAT_COMM) || e->dur_ns == 0)
        return 0;
    d->dirty = true;
    /* too late to be counted exactly: a compute entry over a comm entry already counted,
     * a comm entry over compute intervals already dropped */
    if (e->start_ns < (cat == PROTO_CAT_COMPUTE ? d->fin_end : d->drop_end))
        r->late++;
    if (e->start_ns > d->max_start)
        d->max_start = e->start_ns;
    else if (d->max_start - e->start_ns > d->disorder)
        d->disorder = d->max_start - e->start_ns;
    if (d->n_cu >= RANKS_PENDING || d->n_pc >= RANKS_PENDING) {
        /* a comm entry open over too many others (a peer could make it endless): count
         * what is pending now, and flag the session's exposure as inexact */
        int rc = rkexpose_settle(r, d, UINT64_MAX);
        r->late++;
        if (rc != 0)
            return rc;
    }
    if (cat == PROTO_CAT_COMPUTE)
        return rkexpose_add(d, e->start_ns, end);
    return rkexpose_add_comm(d, e->start_ns, end, e->step, e->op_id);
}
