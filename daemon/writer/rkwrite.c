/* rkwrite.c — writing the rank aggregates' deltas; see rkwrite.h. */
#include "rkwrite.h"

#include <stdlib.h>
#include <string.h>

/* "col = col + ?N" saturating at INT64_MAX, as in agg.c */
#define SAT_SET(col, p)                                                                            \
    col " = CASE WHEN " col " > 9223372036854775807 - " p " THEN 9223372036854775807"              \
        " ELSE " col " + " p " END"

/*
 * The upserts: what follows "INSERT INTO table VALUES (...), ..." (struct
 * rksql_up). The new values are excluded.*, so that one statement writes up
 * to RKSQL_BATCH rows.
 */
/* clang-format off */
#define X(col)   "excluded." col
#define ADD(col) SAT_SET(col, X(col))
/* the span and the time per category of rk_devsteps and rk_steps */
#define STEP_SUMS \
    "begin_ns = min(begin_ns, " X("begin_ns") "), end_ns = max(end_ns, " X("end_ns") "), " \
    ADD("compute_ns") ", " ADD("comm_ns") ", " ADD("memory_ns") ", " ADD("wait_ns") ", " \
    ADD("other_ns") ", " ADD("exposed_ns")

static const char rk_up_ops_sql[] =
    " ON CONFLICT(process_id, device_id, op_id) DO UPDATE SET "
    ADD("calls") ", " ADD("total_ns") ", " ADD("elements") ", " ADD("exposed_ns") ", "
    "begin_ns = min(begin_ns, " X("begin_ns") "), end_ns = max(end_ns, " X("end_ns") ")";

static const char rk_up_dsteps_sql[] =
    " ON CONFLICT(step, process_id, device_id) DO UPDATE SET "
    STEP_SUMS ", "
    "first_row = min(first_row, " X("first_row") "), last_row = max(last_row, " X("last_row") ")";

static const char rk_up_steps_sql[] =
    " ON CONFLICT(step, process_id) DO UPDATE SET "
    STEP_SUMS ", "
    ADD("coll") ", " ADD("waited_ns") ", " ADD("last_count") ", " ADD("caused_ns") ", "
    ADD("covered_ns") ", " ADD("cpu_wait_ns");

static const char rk_up_coll_sql[] =
    " ON CONFLICT(op_id, step) DO UPDATE SET "
    ADD("instances") ", " ADD("partial") ", " ADD("skew_ns") ", "
    "skew_max_ns = max(skew_max_ns, " X("skew_max_ns") ")";

static const char rk_up_collr_sql[] =
    " ON CONFLICT(step, op_id, process_id) DO UPDATE SET "
    ADD("instances") ", " ADD("waited_ns") ", " ADD("last_count");
/* clang-format on */
#undef STEP_SUMS
#undef ADD
#undef X

int rkwrite_prepare(struct ranks *r)
{
    int rc;

    if ((rc = rksql_up_prepare(r->db, &r->up_ops, "INSERT INTO rk_ops VALUES", 9, rk_up_ops_sql)) !=
            0 ||
        (rc = rksql_up_prepare(r->db, &r->up_dsteps, "INSERT INTO rk_devsteps VALUES", 13,
                               rk_up_dsteps_sql)) != 0 ||
        (rc = rksql_up_prepare(r->db, &r->up_steps, "INSERT INTO rk_steps VALUES", 16,
                               rk_up_steps_sql)) != 0 ||
        (rc = rksql_up_prepare(r->db, &r->up_coll, "INSERT INTO rk_coll VALUES", 6,
                               rk_up_coll_sql)) != 0)
        return rc;
    return rksql_up_prepare(r->db, &r->up_collr, "INSERT INTO rk_coll_ranks VALUES", 6,
                            rk_up_collr_sql);
}

void rkwrite_free(struct ranks *r)
{
    rksql_up_free(&r->up_ops);
    rksql_up_free(&r->up_dsteps);
    rksql_up_free(&r->up_steps);
    rksql_up_free(&r->up_coll);
    rksql_up_free(&r->up_collr);
    free(r->kv);
    free(r->sorted);
}

static int rk_ops_cmp(const void *x, const void *y)
{
    const struct rk_opsum *a = x, *b = y;
    int c = rk_cmp_i64(a->process_id, b->process_id);

    if (c == 0)
        c = rk_cmp_u64(a->device_id, b->device_id);
    return c != 0 ? c : rk_cmp_u64(a->op_id, b->op_id);
}

static int rk_dsteps_cmp(const void *x, const void *y)
{
    const struct rk_devstep *a = x, *b = y;
    int c = rk_cmp_u64(a->step, b->step);

    if (c == 0)
        c = rk_cmp_i64(a->process_id, b->process_id);
    return c != 0 ? c : rk_cmp_u64(a->device_id, b->device_id);
}

static int rk_steps_cmp(const void *x, const void *y)
{
    const struct rk_stepsum *a = x, *b = y;
    int c = rk_cmp_u64(a->step, b->step);

    return c != 0 ? c : rk_cmp_i64(a->process_id, b->process_id);
}

/* rk_coll's (process -1) first, each table's rows in its key's order: (op, step) for rk_coll,
 * (step, op, process) for rk_coll_ranks */
static int rk_coll_cmp(const void *x, const void *y)
{
    const struct rk_collsum *a = x, *b = y;
    int c = rk_cmp_i64(b->process_id < 0, a->process_id < 0);

    if (c == 0 && a->process_id >= 0)
        c = rk_cmp_u64(a->step, b->step);
    if (c == 0)
        c = rk_cmp_u64(a->op_id, b->op_id);
    if (c == 0)
        c = rk_cmp_i64(a->process_id, b->process_id);
    return c != 0 ? c : rk_cmp_u64(a->step, b->step);
}

/*
 * The deltas in their table's key order, sorted by a radix sort when every
 * key packs into 64 bits in that order (key() says false when one does
 * not: qsort with cmp then): a few passes over the rows, where qsort
 * calls cmp ~n log n times. The keys are unique (the maps' keys).
 */

/* p's bits at shift, when p < 2^bits; false otherwise */
static bool rk_pack(uint64_t *k, uint64_t p, int bits, int shift)
{
    if (p >> bits != 0)
        return false;
    *k |= p << shift;
    return true;
}

static bool rk_ops_key(const void *x, uint64_t *k)
{
    const struct rk_opsum *o = x;

    *k = 0; /* process ids are < 2^25 (rk_proc) */
    return rk_pack(k, (uint64_t)o->process_id, 25, 39) && rk_pack(k, o->device_id, 19, 20) &&
           rk_pack(k, o->op_id, 20, 0);
}

static bool rk_dsteps_key(const void *x, uint64_t *k)
{
    const struct rk_devstep *d = x;

    *k = 0;
    return rk_pack(k, d->step, 27, 37) && rk_pack(k, (uint64_t)d->process_id, 25, 12) &&
           rk_pack(k, d->device_id, 12, 0);
}

static bool rk_steps_key(const void *x, uint64_t *k)
{
    const struct rk_stepsum *s = x;

    *k = 0;
    return rk_pack(k, s->step, 39, 25) && rk_pack(k, (uint64_t)s->process_id, 25, 0);
}

/* rk_coll's rows (process -1), (op, step), before rk_coll_ranks' (bit 63), (step, op, process) */
static bool rk_coll_key(const void *x, uint64_t *k)
{
    const struct rk_collsum *c = x;

    *k = 0;
    if (c->process_id < 0)
        return rk_pack(k, c->op_id, 16, 47) && rk_pack(k, c->step, 47, 0);
    *k = 1ull << 63;
    return rk_pack(k, c->step, 22, 41) && rk_pack(k, c->op_id, 16, 25) &&
           rk_pack(k, (uint64_t)c->process_id, 25, 0);
}

static void rkwrite_sort(struct ranks *r, void *a, size_t n, size_t sz,
                         bool (*key)(const void *, uint64_t *),
                         int (*cmp)(const void *, const void *))
{
    struct rk_kv *kv, *tmp;
    uint64_t any = 0, all = UINT64_MAX;
    char *out;

    if (n < 2)
        return;
    if (n > r->cap_kv) {
        void *p = realloc(r->kv, 2 * n * sizeof(*r->kv));
        if (p == NULL)
            goto fallback;
        r->kv = p;
        r->cap_kv = n;
    }
    if (n * sz > r->cap_sorted) {
        void *p = realloc(r->sorted, n * sz);
        if (p == NULL)
            goto fallback;
        r->sorted = p;
        r->cap_sorted = n * sz;
    }
    kv = r->kv;
    tmp = r->kv + n;
    for (size_t i = 0; i < n; i++) {
        if (!key((const char *)a + i * sz, &kv[i].k))
            goto fallback;
        kv[i].i = i;
        any |= kv[i].k;
        all &= kv[i].k;
    }
    /* least significant byte first, skipping the bytes every key has the same */
    for (int shift = 0; shift < 64; shift += 8) {
        size_t pos[256] = {0}, sum = 0;
        if (((any ^ all) >> shift & 0xff) == 0)
            continue;
        for (size_t i = 0; i < n; i++)
            pos[kv[i].k >> shift & 0xff]++;
        for (int d = 0; d < 256; d++) {
            size_t c = pos[d];
            pos[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[pos[kv[i].k >> shift & 0xff]++] = kv[i];
        struct rk_kv *t = kv;
        kv = tmp;
        tmp = t;
    }
    out = r->sorted;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * sz, (const char *)a + kv[i].i * sz, sz);
    memcpy(a, out, n * sz);
    return;
fallback:
    qsort(a, n, sz, cmp);
}

int rkwrite_ops(struct ranks *r)
{
    int rc;

    rkwrite_sort(r, r->ops, r->n_ops, sizeof(*r->ops), rk_ops_key, rk_ops_cmp);
    rkwrite_sort(r, r->dsteps, r->n_dsteps, sizeof(*r->dsteps), rk_dsteps_key, rk_dsteps_cmp);
    for (size_t i = 0; i < r->n_ops; i++) {
        const struct rk_opsum *o = &r->ops[i];
        int64_t v[9] = {o->process_id,       o->device_id,      o->op_id,
                        (int64_t)o->calls,   (int64_t)o->total, (int64_t)o->elements,
                        (int64_t)o->exposed, (int64_t)o->begin, (int64_t)o->end};
        if (o->calls == 0) { /* only exposure: begin/end must not move */
            v[7] = INT64_MAX;
            v[8] = 0;
        }
        if ((rc = rksql_up_add(&r->up_ops, v)) != 0)
            return rc;
    }
    if ((rc = rksql_up_end(&r->up_ops)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_dsteps; i++) {
        const struct rk_devstep *d = &r->dsteps[i];
        int64_t v[13] = {d->process_id,
                         (int64_t)d->step,
                         d->device_id,
                         d->begin == UINT64_MAX ? INT64_MAX : (int64_t)d->begin,
                         (int64_t)d->end,
                         (int64_t)d->cat[PROTO_CAT_COMPUTE],
                         (int64_t)d->cat[PROTO_CAT_COMM],
                         (int64_t)d->cat[PROTO_CAT_MEMORY],
                         (int64_t)d->cat[PROTO_CAT_WAIT],
                         (int64_t)d->cat[PROTO_CAT_OTHER],
                         (int64_t)d->exposed,
                         d->first_row,
                         d->last_row};
        if ((rc = rksql_up_add(&r->up_dsteps, v)) != 0)
            return rc;
    }
    return rksql_up_end(&r->up_dsteps);
}

int rkwrite_steps(struct ranks *r)
{
    int rc;

    rkwrite_sort(r, r->steps, r->n_steps, sizeof(*r->steps), rk_steps_key, rk_steps_cmp);
    rkwrite_sort(r, r->coll, r->n_coll, sizeof(*r->coll), rk_coll_key, rk_coll_cmp);
    for (size_t i = 0; i < r->n_steps; i++) {
        const struct rk_stepsum *s = &r->steps[i];
        int64_t v[16] = {s->process_id,
                         (int64_t)s->step,
                         s->begin == UINT64_MAX ? INT64_MAX : (int64_t)s->begin,
                         (int64_t)s->end,
                         (int64_t)s->cat[PROTO_CAT_COMPUTE],
                         (int64_t)s->cat[PROTO_CAT_COMM],
                         (int64_t)s->cat[PROTO_CAT_MEMORY],
                         (int64_t)s->cat[PROTO_CAT_WAIT],
                         (int64_t)s->cat[PROTO_CAT_OTHER],
                         (int64_t)s->exposed,
                         (int64_t)s->coll,
                         (int64_t)s->waited,
                         (int64_t)s->last_count,
                         (int64_t)s->caused,
                         (int64_t)s->covered,
                         (int64_t)s->cpu_wait};
        if ((rc = rksql_up_add(&r->up_steps, v)) != 0)
            return rc;
    }
    if ((rc = rksql_up_end(&r->up_steps)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_coll; i++) {
        const struct rk_collsum *c = &r->coll[i];
        if (c->process_id < 0) {
            int64_t v[6] = {
                c->op_id,         (int64_t)c->step,    (int64_t)c->instances, (int64_t)c->partial,
                (int64_t)c->skew, (int64_t)c->skew_max};
            rc = rksql_up_add(&r->up_coll, v);
        } else {
            int64_t v[6] = {c->op_id,           c->process_id,
                            (int64_t)c->step,   (int64_t)c->instances,
                            (int64_t)c->waited, (int64_t)c->last_count};
            rc = rksql_up_add(&r->up_collr, v);
        }
        if (rc != 0)
            return rc;
    }
    if ((rc = rksql_up_end(&r->up_coll)) != 0)
        return rc;
    return rksql_up_end(&r->up_collr);
}
