/*
 * rq_sections.c — the report's sections read beyond the steps (see rq.h): `categories`
 * (the imbalance of each category over the ranks), `collectives` (rk_coll, rk_coll_ranks),
 * `throughput` (agg_ops, rk_ops, or the entries of the steps asked) and the `verdict`, the
 * one sentence verdict.c writes from the ranks' figures.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "rq.h"

/* ---- imbalance ------------------------------------------------------------ */

struct rq_imb {
    double max_vs_mean, max_vs_median; /* (max - mean) / mean, max / median */
    uint64_t max, mean, median;
    size_t argmax;
};

static int rq_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void rq_imbalance(const uint64_t *v, size_t n, uint64_t *tmp, struct rq_imb *out)
{
    unsigned __int128 sum = 0;

    memset(out, 0, sizeof(*out));
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > out->max) {
            out->max = v[i];
            out->argmax = i;
        }
        tmp[i] = v[i];
    }
    qsort(tmp, n, sizeof(*tmp), rq_u64_cmp);
    out->mean = (uint64_t)(sum / n);
    out->median = tmp[(n - 1) / 2];
    if (sum > 0)
        out->max_vs_mean = ((double)out->max - (double)sum / (double)n) / ((double)sum / (double)n);
    out->max_vs_median = out->median > 0 ? (double)out->max / (double)out->median : 0.0;
}

/* `imbalance_by_category` goes in `categories`: per category over ranks. */
int rq_pack_categories(struct rq *q, msgpack_packer *pk)
{
    uint64_t *v = calloc(2 * (q->n_ranks + 1), sizeof(*v)), total = 0, sums[PROTO_NCAT] = {0};
    int rc = -1;

    if (v == NULL)
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++)
        for (int c = 0; c < PROTO_NCAT; c++)
            sums[c] = rq_sat(sums[c], q->ranks[i].cat[c]);
    for (int c = 0; c < PROTO_NCAT; c++)
        total = rq_sat(total, sums[c]);
    if (pk_str(pk, "categories") || msgpack_pack_array(pk, PROTO_NCAT))
        goto out;
    for (int c = 0; c < PROTO_NCAT; c++) {
        struct rq_imb im;
        for (size_t i = 0; i < q->n_ranks; i++)
            v[i] = q->ranks[i].cat[c];
        rq_imbalance(v, q->n_ranks, v + q->n_ranks + 1, &im);
        if (msgpack_pack_map(pk, 7) || pk_str(pk, "category") ||
            pk_str(pk, proto_cat_name((enum proto_cat)c)) || pk_u64(pk, "total_ns", sums[c]) ||
            pk_f64(pk, "share", total ? (double)sums[c] / (double)total : 0.0) ||
            pk_f64(pk, "imbalance", im.max_vs_mean) ||
            pk_f64(pk, "max_vs_median", im.max_vs_median) ||
            pk_rank(pk, "max_rank", q->n_ranks ? q->ranks[im.argmax].rank : -1) ||
            pk_str(pk, "per_rank_ns") || msgpack_pack_array(pk, q->n_ranks))
            goto out;
        for (size_t i = 0; i < q->n_ranks; i++)
            if (msgpack_pack_uint64(pk, q->ranks[i].cat[c]))
                goto out;
    }
    rc = 0;
out:
    free(v);
    return rc;
}

/* Reads each op's rk_coll sums in the steps asked into *out (*n_out of them, to free even on
 * an error), the most skew first. 0 or a negative errno. */
static int rq_coll_read(struct rq *q, size_t *n_out, struct rq_coll **out)
{
    sqlite3_stmt *st;
    struct rq_coll *cs = NULL;
    size_t n = 0;
    int rc = sqlite3_prepare_v2(
        q->db,
        "SELECT c.op_id, o.name, satsum(instances), satsum(partial), satsum(skew_ns),"
        " max(skew_max_ns) FROM rk_coll c JOIN ops o ON o.id = c.op_id"
        " WHERE step BETWEEN ?1 AND ?2 GROUP BY c.op_id"
        " ORDER BY satsum(skew_ns) DESC, o.name",
        -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "rk_coll");
    rq_bind_steps(q, st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct rq_coll *p = realloc(cs, (n + 1) * sizeof(*cs));
        if (p == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        cs = p;
        memset(&cs[n], 0, sizeof(cs[n]));
        cs[n].op_id = sqlite3_column_int64(st, 0);
        cs[n].op = strdup((const char *)sqlite3_column_text(st, 1));
        cs[n].last = calloc(q->n_ranks + 1, sizeof(uint64_t));
        cs[n].instances = (uint64_t)sqlite3_column_int64(st, 2);
        cs[n].partial = (uint64_t)sqlite3_column_int64(st, 3);
        cs[n].skew = (uint64_t)sqlite3_column_int64(st, 4);
        cs[n].skew_max = (uint64_t)sqlite3_column_int64(st, 5);
        n++;
        if (cs[n - 1].op == NULL || cs[n - 1].last == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    *out = cs;
    *n_out = n;
    return rc == SQLITE_DONE ? 0 : rq_fail(q, rc, "rk_coll");
}

/* Adds rk_coll_ranks' waits and last arrivals (by rank) to the ops cs. 0 or a negative errno. */
static int rq_coll_ranks(struct rq *q, struct rq_coll *cs, size_t n)
{
    sqlite3_stmt *st;
    size_t ci = 0;
    /* summed here, row by row: rk_coll_ranks is keyed by step first (schema/ranks.sql), and a
     * GROUP BY (op, process) would sort every row of the steps asked */
    int rc = sqlite3_prepare_v2(q->db,
                                q->f->steps ? "SELECT op_id, process_id, waited_ns, last_count"
                                              " FROM rk_coll_ranks WHERE step BETWEEN ?1 AND ?2"
                                            : "SELECT op_id, process_id, waited_ns, last_count"
                                              " FROM rk_coll_ranks",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "rk_coll_ranks");
    rq_bind_steps(q, st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t op = sqlite3_column_int64(st, 0);
        size_t ri = rq_proc_rank(q, sqlite3_column_int64(st, 1));
        if (ri == SIZE_MAX)
            continue;
        if (ci >= n || cs[ci].op_id != op)
            for (ci = 0; ci < n && cs[ci].op_id != op; ci++)
                ;
        if (ci < n) {
            cs[ci].waited = rq_sat(cs[ci].waited, rq_pos(sqlite3_column_int64(st, 2)));
            cs[ci].last[ri] += rq_pos(sqlite3_column_int64(st, 3));
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rq_fail(q, rc, "rk_coll_ranks");
}

/* One op of `collectives`. 0 or -1. */
static int rq_pack_coll(const struct rq *q, msgpack_packer *pk, const struct rq_coll *c)
{
    size_t top = 0;

    for (size_t k = 1; k < q->n_ranks; k++)
        if (c->last[k] > c->last[top])
            top = k;
    if (msgpack_pack_map(pk, 10) || pk_str(pk, "op") || pk_str(pk, c->op) ||
        pk_u64(pk, "instances", c->instances) || pk_u64(pk, "partial", c->partial) ||
        pk_u64(pk, "skew_mean_ns", c->instances ? c->skew / c->instances : 0) ||
        pk_u64(pk, "skew_max_ns", c->skew_max) || pk_u64(pk, "waited_ns", c->waited) ||
        pk_rank(pk, "last_rank", q->n_ranks && c->last[top] > 0 ? q->ranks[top].rank : -1) ||
        pk_u64(pk, "last_rank_count", q->n_ranks ? c->last[top] : 0) ||
        pk_f64(pk, "last_rank_share",
               c->instances && q->n_ranks ? (double)c->last[top] / (double)c->instances : 0.0) ||
        pk_str(pk, "arrived_last") || msgpack_pack_array(pk, q->n_ranks))
        return -1;
    for (size_t k = 0; k < q->n_ranks; k++)
        if (msgpack_pack_uint64(pk, c->last[k]))
            return -1;
    return 0;
}

int rq_pack_collectives(struct rq *q, msgpack_packer *pk, size_t *n_out, struct rq_coll **out)
{
    int rc;

    *out = NULL;
    *n_out = 0;
    if (!rq_cat_wanted(q, PROTO_CAT_COMM)) /* collectives are comm: none in another category */
        return pk_str(pk, "collectives") || msgpack_pack_array(pk, 0) ? -ENOMEM : 0;
    if ((rc = rq_coll_read(q, n_out, out)) < 0 || (rc = rq_coll_ranks(q, *out, *n_out)) < 0)
        return rc;
    if (pk_str(pk, "collectives") || msgpack_pack_array(pk, *n_out))
        return -ENOMEM;
    for (size_t i = 0; i < *n_out; i++)
        if (rq_pack_coll(q, pk, &(*out)[i]))
            return -ENOMEM;
    return 0;
}

/*
 * The ops' sums: without a filter the session's agg_ops rows; with one, rk_ops
 * folded per op and process (rank, device and category filters), except with
 * a step filter: rk_ops has no steps, so the entries of those steps are read,
 * between the first and the last rowid rk_devsteps holds for them per process.
 */
/* An op's sums in `throughput`. */
struct rq_tput {
    char *op;
    uint64_t calls, total, elements;
};

/* Packs `throughput` from the ops' sums rows (n of them). 0 or -ENOMEM. */
static int rq_pack_tput(msgpack_packer *pk, const struct rq_tput *rows, size_t n)
{
    if (pk_str(pk, "throughput") || msgpack_pack_array(pk, n))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        double s = (double)rows[i].total / 1e9;
        if (msgpack_pack_map(pk, 5) || pk_str(pk, "op") || pk_str(pk, rows[i].op) ||
            pk_u64(pk, "calls", rows[i].calls) || pk_u64(pk, "total_ns", rows[i].total) ||
            pk_u64(pk, "elements", rows[i].elements) ||
            pk_f64(pk, "elements_per_s", s > 0 ? (double)rows[i].elements / s : 0.0))
            return -ENOMEM;
    }
    return 0;
}

int rq_pack_throughput(struct rq *q, msgpack_packer *pk)
{
    static const char all[] =
        "SELECT o.name, a.calls, a.total_ns, a.elements FROM agg_ops a JOIN ops o ON o.id = a.op_id"
        " ORDER BY a.total_ns DESC, o.name";
    static const char by_op[] =
        "SELECT o.name, r.process_id, satsum(r.calls), satsum(r.total_ns), satsum(r.elements),"
        " o.category"
        " FROM rk_ops r JOIN ops o ON o.id = r.op_id LEFT JOIN devices d ON d.id = r.device_id"
        " WHERE ?3 IS NULL OR d.name = ?3"
        " GROUP BY r.op_id, r.process_id ORDER BY o.name";
    static const char by_entries[] =
        "WITH b AS (SELECT process_id, min(first_row) AS lo, max(last_row) AS hi"
        " FROM rk_devsteps WHERE step BETWEEN ?1 AND ?2 GROUP BY process_id)"
        " SELECT o.name, e.process_id, count(*), satsum(e.dur_ns),"
        " satsum(coalesce(e.elements, s.elements, 0)), o.category"
        " FROM b CROSS JOIN entries e ON e.process_id = b.process_id"
        " AND e.rowid BETWEEN b.lo AND b.hi"
        " JOIN ops o ON o.id = e.op_id LEFT JOIN shapes s ON s.id = e.shape_id"
        " LEFT JOIN devices d ON d.id = e.device_id"
        " WHERE e.step BETWEEN ?1 AND ?2 AND (?3 IS NULL OR d.name = ?3)"
        " GROUP BY e.op_id, e.process_id ORDER BY o.name";
    bool filter = q->f->ranks != NULL || q->f->steps || q->f->device || q->f->category ||
                  q->state != 1 || info_int(q->db, "aggregates", 0) != 1;
    const char *sql = !filter ? all : q->f->steps ? by_entries : by_op;
    sqlite3_stmt *st;
    struct rq_tput *rows = NULL;
    size_t n = 0;
    int rc = sqlite3_prepare_v2(q->db, sql, -1, &st, NULL), err = 0;

    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "throughput");
    if (filter) {
        rq_bind_steps(q, st);
        if (q->f->device)
            sqlite3_bind_text(st, 3, q->f->device, -1, SQLITE_STATIC);
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int base = filter ? 2 : 1;
        if (filter) {
            if (rq_proc_rank(q, sqlite3_column_int64(st, 1)) == SIZE_MAX ||
                !rq_cat_wanted(q, proto_cat_code((const char *)sqlite3_column_text(st, 5))))
                continue;
        }
        if (n == 0 || strcmp(rows[n - 1].op, name) != 0) {
            struct rq_tput *p = realloc(rows, (n + 1) * sizeof(*rows));
            if (p == NULL || (p[n].op = strdup(name)) == NULL) {
                rows = p != NULL ? p : rows;
                rc = SQLITE_NOMEM;
                break;
            }
            rows = p;
            rows[n].calls = rows[n].total = rows[n].elements = 0;
            n++;
        }
        rows[n - 1].calls += (uint64_t)sqlite3_column_int64(st, base);
        rows[n - 1].total = rq_sat(rows[n - 1].total, (uint64_t)sqlite3_column_int64(st, base + 1));
        rows[n - 1].elements =
            rq_sat(rows[n - 1].elements, (uint64_t)sqlite3_column_int64(st, base + 2));
    }
    sqlite3_finalize(st);
    err = rc != SQLITE_DONE ? rq_fail(q, rc, "throughput") : rq_pack_tput(pk, rows, n);
    for (size_t i = 0; i < n; i++)
        free(rows[i].op);
    free(rows);
    return err;
}

/* The verdict (verdict.c) from the ranks' figures. */
int rq_pack_verdict(struct rq *q, msgpack_packer *pk, const struct rq_coll *cs, size_t n_coll)
{
    struct verdict_rank *vr = calloc(q->n_ranks + 1, sizeof(*vr));
    uint64_t *scratch = calloc(q->n_ranks + 1, sizeof(*scratch));
    struct verdict_in in = {.ranks = vr,
                            .n_ranks = q->n_ranks,
                            .n_steps = q->n_steps,
                            .world = q->world,
                            .untracked_known = q->cover,
                            .inexact = q->state == 2,
                            .absent = q->state == 0,
                            .scratch = scratch};
    char v[2048];
    int err, rc = -1;

    if (vr == NULL || scratch == NULL)
        goto out;
    for (size_t i = 0; i < n_coll; i++)
        in.instances += cs[i].instances;
    in.missing = rq_missing(q, NULL, NULL, &err);
    in.capped = q->capped;
    in.open_cap = RANKS_OPEN;
    rq_verdict_ranks(q, vr);
    verdict_text(&in, v, sizeof(v));
    rc = pk_str(pk, "verdict") || pk_str(pk, v) ? -1 : 0;
out:
    free(vr);
    free(scratch);
    return rc;
}

/* The collective instances of every op in the steps asked (the verdict's "of M"). */
int rq_late_instances(struct rq *q, uint64_t *n)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        q->db, "SELECT satsum(instances) FROM rk_coll WHERE step BETWEEN ?1 AND ?2", -1, &st, NULL);

    *n = 0;
    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "rk_coll");
    rq_bind_steps(q, st);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        *n = (uint64_t)sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rq_fail(q, rc, "rk_coll");
}
