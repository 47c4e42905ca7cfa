/*
 * ranks_query.c — the analysis sections of a report; see ranks_query.h.
 *
 * Reads rk_steps (or rk_devsteps with a device filter), rk_coll,
 * rk_coll_ranks, processes, rk_ops and agg_ops: tables whose size grows with
 * ranks x steps (x devices), never with entries. One figure reads entries:
 * the throughput per op with a step filter (rk_ops has no steps), only those
 * between the first and last rowid of those steps (rk_devsteps). Sums
 * saturate like every report sum; shares and ratios are doubles.
 *
 * This file: the entry points, the processes and their ranks, and reading
 * rk_steps step by step; the rest is in the rq_*.c files rq.h lists.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "rq.h"

int rq_fail(struct rq *q, int rc, const char *what)
{
    if (q->errlen > 0)
        snprintf(q->err, q->errlen, "report: %s: %s", what,
                 rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(q->db));
    return rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int rq_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

bool rq_rank_wanted(const struct rq *q, int64_t rank)
{
    if (q->f->ranks == NULL)
        return true;
    for (size_t i = 0; i < q->f->n_ranks; i++)
        if (q->f->ranks[i] == rank)
            return true;
    return false;
}

/* The index of rank in q->ranks, added (with nothing counted) when new; SIZE_MAX: no memory. */
static size_t rq_rank_index(struct rq *q, int64_t rank)
{
    size_t i;

    for (i = 0; i < q->n_ranks && q->ranks[i].rank != rank; i++)
        ;
    if (i == q->n_ranks) {
        struct rq_rank *r = realloc(q->ranks, (q->n_ranks + 1) * sizeof(*r));
        if (r == NULL)
            return SIZE_MAX;
        q->ranks = r;
        memset(&r[i], 0, sizeof(r[i]));
        r[i].rank = rank;
        q->n_ranks++;
    }
    return i;
}

/* Sorts q->ranks by rank and remaps the processes to the sorted indexes (SIZE_MAX: a rank
 * the filter leaves out). 0 or -ENOMEM. */
static int rq_sort_ranks(struct rq *q)
{
    size_t *order = malloc((q->n_ranks + 1) * sizeof(*order));
    struct rq_rank *sorted = malloc((q->n_ranks + 1) * sizeof(*sorted));

    if (order == NULL || sorted == NULL) {
        free(order);
        free(sorted);
        return rq_fail(q, SQLITE_NOMEM, "ranks");
    }
    if (q->n_ranks > 0) /* a file without processes: q->ranks is NULL */
        memcpy(sorted, q->ranks, q->n_ranks * sizeof(*sorted));
    qsort(sorted, q->n_ranks, sizeof(*sorted), rq_cmp_i64); /* rank is the first field */
    for (size_t i = 0; i < q->n_ranks; i++)
        for (size_t j = 0; j < q->n_ranks; j++)
            if (sorted[j].rank == q->ranks[i].rank)
                order[i] = j;
    for (size_t p = 0; p < q->n_procs; p++)
        q->procs[p].ri = rq_rank_wanted(q, sorted[order[q->procs[p].ri]].rank)
                             ? order[q->procs[p].ri]
                             : SIZE_MAX;
    free(q->ranks);
    free(order);
    q->ranks = sorted;
    return 0;
}

/* Drops the ranks a filter leaves out (they are not listed at all). 0 or -ENOMEM. */
static int rq_drop_unwanted(struct rq *q)
{
    size_t *to, k = 0;

    if (q->f->ranks == NULL)
        return 0;
    if ((to = malloc((q->n_ranks + 1) * sizeof(*to))) == NULL)
        return rq_fail(q, SQLITE_NOMEM, "ranks");
    for (size_t i = 0; i < q->n_ranks; i++) {
        to[i] = rq_rank_wanted(q, q->ranks[i].rank) ? k : SIZE_MAX;
        if (to[i] != SIZE_MAX)
            q->ranks[k++] = q->ranks[i];
    }
    for (size_t p = 0; p < q->n_procs; p++)
        if (q->procs[p].ri != SIZE_MAX)
            q->procs[p].ri = to[q->procs[p].ri];
    q->n_ranks = k;
    free(to);
    return 0;
}

/* The ranks of the session (distinct ranks of its processes), sorted, and the process map. */
static int rq_processes(struct rq *q)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(q->db,
                                "SELECT id, coalesce(rank, -1), coalesce(world, 0), dropped,"
                                " ended_ns IS NOT NULL AND bye = 0 FROM processes ORDER BY id",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "processes");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), rank = sqlite3_column_int64(st, 1);
        uint64_t world = (uint64_t)sqlite3_column_int64(st, 2);
        size_t i;

        if (world > q->world_given)
            q->world_given = world;
        q->world = q->world_given < RANKS_MAX_WORLD ? q->world_given : RANKS_MAX_WORLD;
        if (id < 0)
            continue;
        if (q->n_procs == q->cap_procs) {
            size_t nn = q->cap_procs ? 2 * q->cap_procs : 64;
            struct rq_proc *p = realloc(q->procs, nn * sizeof(*p));
            if (p == NULL)
                goto nomem;
            q->procs = p;
            q->cap_procs = nn;
        }
        if ((i = rq_rank_index(q, rank)) == SIZE_MAX)
            goto nomem;
        q->ranks[i].processes++;
        q->ranks[i].dropped = rq_sat(q->ranks[i].dropped, (uint64_t)sqlite3_column_int64(st, 3));
        q->ranks[i].unclosed += sqlite3_column_int(st, 4) != 0;
        /* ascending ids (ORDER BY id); i is provisional: the index before sorting */
        q->procs[q->n_procs++] = (struct rq_proc){id, i};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rq_fail(q, rc, "processes");
    if ((rc = rq_sort_ranks(q)) < 0)
        return rc;
    return rq_drop_unwanted(q);
nomem:
    sqlite3_finalize(st);
    return rq_fail(q, SQLITE_NOMEM, "processes");
}

/* The index in ranks of process pid's rank; SIZE_MAX when unknown or filtered out. */
size_t rq_proc_rank(const struct rq *q, int64_t pid)
{
    size_t lo = 0, hi = q->n_procs;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (q->procs[mid].id < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < q->n_procs && q->procs[lo].id == pid ? q->procs[lo].ri : SIZE_MAX;
}

static struct rq_row *rq_row_new(struct rq *q)
{
    if (q->n_rows == q->cap_rows) {
        size_t c = q->cap_rows ? q->cap_rows * 2 : 256;
        struct rq_row *p = realloc(q->rows, c * sizeof(*p));
        if (p == NULL)
            return NULL;
        q->rows = p;
        q->cap_rows = c;
    }
    memset(&q->rows[q->n_rows], 0, sizeof(q->rows[0]));
    return &q->rows[q->n_rows++];
}

/* The filters every per-step query shares: ?1..?2 the steps. A statement read row by row
 * has no WHERE on the steps without a step filter: the rows scanned are the same, without
 * a comparison each. */
void rq_bind_steps(const struct rq *q, sqlite3_stmt *st)
{
    sqlite3_bind_int64(st, 1, q->f->steps ? (int64_t)q->f->step_min : 0);
    sqlite3_bind_int64(st, 2, q->f->steps ? (int64_t)q->f->step_max : INT64_MAX);
}

bool rq_cat_wanted(const struct rq *q, enum proto_cat c)
{
    return q->f->category == NULL || proto_cat_code(q->f->category) == c;
}

/*
 * Reads the per-step rows, in step order, and folds each step as its rows
 * end (rq_step_done): the memory a report holds follows the ranks (one
 * step's rows, and the RQ_STEPS steps it lists), never the steps.
 */
static int rq_read_steps(struct rq *q)
{
    static const char all[] =
        "SELECT process_id, step, begin_ns, end_ns, compute_ns, comm_ns, memory_ns, wait_ns,"
        " other_ns, exposed_ns, coll, waited_ns, last_count, caused_ns, covered_ns, cpu_wait_ns "
        "FROM rk_steps"
        " WHERE step BETWEEN ?1 AND ?2 ORDER BY step";
    static const char all_steps[] =
        "SELECT process_id, step, begin_ns, end_ns, compute_ns, comm_ns, memory_ns, wait_ns,"
        " other_ns, exposed_ns, coll, waited_ns, last_count, caused_ns, covered_ns, cpu_wait_ns "
        "FROM rk_steps"
        " ORDER BY step";
    /* A step's CPU wait is its process's (the step thread's run-queue delay), whatever the
     * devices its entries ran on: a process with entries on the device in a step keeps its
     * whole CPU wait of that step (column 10, as the step's row in rk_steps has it). */
    static const char by_dev[] =
        "SELECT r.process_id, r.step, r.begin_ns, r.end_ns, r.compute_ns, r.comm_ns, r.memory_ns,"
        " r.wait_ns, r.other_ns, r.exposed_ns, coalesce(s.cpu_wait_ns, 0) FROM rk_devsteps r"
        " JOIN devices d ON d.id = r.device_id"
        " LEFT JOIN rk_steps s ON s.step = r.step AND s.process_id = r.process_id"
        " WHERE r.step BETWEEN ?1 AND ?2 AND d.name = ?3 ORDER BY r.step";
    const char *sql = q->f->device == NULL ? (q->f->steps ? all : all_steps) : by_dev;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(q->db, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rq_fail(q, rc, "rk_steps");
    rq_bind_steps(q, st);
    if (q->f->device != NULL)
        sqlite3_bind_text(st, 3, q->f->device, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t ri = rq_proc_rank(q, sqlite3_column_int64(st, 0));
        uint64_t step = (uint64_t)sqlite3_column_int64(st, 1);
        struct rq_row *w;

        if (ri == SIZE_MAX)
            continue;
        /* the rows come by step: one step's rows in memory at a time */
        if ((q->n_rows > 0 && q->rows[0].step != step && rq_step_done(q) < 0) ||
            (w = rq_row_new(q)) == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        w->ri = ri;
        w->step = step;
        w->begin = (uint64_t)sqlite3_column_int64(st, 2);
        w->end = (uint64_t)sqlite3_column_int64(st, 3);
        for (int c = 0; c < PROTO_NCAT; c++)
            if (rq_cat_wanted(q, (enum proto_cat)c))
                w->cat[c] = (uint64_t)sqlite3_column_int64(st, 4 + c);
        w->exposed = rq_cat_wanted(q, PROTO_CAT_COMM) ? (uint64_t)sqlite3_column_int64(st, 9) : 0;
        if (q->f->device == NULL) {
            w->covered = rq_pos(sqlite3_column_int64(st, 14));
            w->cpu_wait = rq_pos(sqlite3_column_int64(st, 15));
        } else {
            w->cpu_wait = rq_pos(sqlite3_column_int64(st, 10));
        }
        if (q->f->device != NULL || !rq_cat_wanted(q, PROTO_CAT_COMM))
            continue; /* collectives are per rank, not per device, and comm */
        w->coll = (uint64_t)sqlite3_column_int64(st, 10);
        w->waited = (uint64_t)sqlite3_column_int64(st, 11);
        w->last = (uint64_t)sqlite3_column_int64(st, 12);
        w->caused = (uint64_t)sqlite3_column_int64(st, 13);
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE && q->n_rows > 0 && rq_step_done(q) < 0)
        rc = SQLITE_NOMEM;
    return rc == SQLITE_DONE ? 0 : rq_fail(q, rc, "rk_steps");
}

/* Frees what q holds. */
static void rq_free(struct rq *q)
{
    for (size_t i = 0; i < q->n_ranks; i++)
        free(q->ranks[i].hlate);
    free(q->ranks);
    free(q->procs);
    free(q->rows);
    free(q->cw_prev);
    for (size_t i = 0; i < q->n_shown; i++)
        free(q->shown[i].times);
    free(q->shown);
}

int ranks_late(sqlite3 *db, const struct ranks_filter *f, msgpack_packer *pk, char *err,
               size_t errlen)
{
    struct rq q = {.db = db, .f = f, .err = err, .errlen = errlen};
    struct verdict_rank *vr = NULL;
    struct verdict_in in = {0};
    size_t culprit = SIZE_MAX;
    uint64_t instances = 0;
    int rc;

    q.state = (int)info_int(q.db, "ranks", 0);
    q.cover = f->device == NULL && f->category == NULL;
    if ((rc = rq_processes(&q)) < 0)
        goto out;
    /* As in the analysis: collectives are comm, and kept per rank, not per device; the
     * steps are folded as the report folds them, for the verdict's rule. */
    if (q.state != 0 && rq_cat_wanted(&q, PROTO_CAT_COMM)) {
        if ((rc = rq_late_instances(&q, &instances)) < 0 ||
            (f->device == NULL && (rc = rq_read_steps(&q)) < 0))
            goto out;
    }
    rc = -ENOMEM;
    if ((vr = calloc(q.n_ranks + 1, sizeof(*vr))) == NULL)
        goto out;
    rq_verdict_ranks(&q, vr);
    in.ranks = vr;
    in.n_ranks = q.n_ranks;
    culprit = verdict_culprit(&in);
    if (msgpack_pack_map(pk, 3) || pk_u64(pk, "instances", instances) ||
        pk_rank(pk, "culprit", culprit == SIZE_MAX ? -1 : q.ranks[culprit].rank) ||
        pk_str(pk, "ranks") || msgpack_pack_array(pk, q.n_ranks))
        goto out;
    for (size_t i = 0; i < q.n_ranks; i++) {
        const struct rq_rank *r = &q.ranks[i];
        if (msgpack_pack_map(pk, 5) || pk_rank(pk, "rank", r->rank) ||
            pk_u64(pk, "arrived_last", r->last) || pk_u64(pk, "caused_ns", r->caused) ||
            pk_u64(pk, "waited_ns", r->waited) || pk_u64(pk, "cpu_wait_ns", r->cpu_wait))
            goto out;
    }
    rc = 0;
out:
    if (rc == -ENOMEM && q.errlen > 0 && q.err[0] == '\0')
        snprintf(q.err, q.errlen, "report: late: out of memory");
    free(vr);
    rq_free(&q);
    return rc;
}

int ranks_rows(sqlite3 *db, struct ranks_row **rows, size_t *n_rows, char *err, size_t errlen)
{
    static const struct ranks_filter none = {0};
    struct rq q = {.db = db, .f = &none, .err = err, .errlen = errlen};
    int rc;

    *rows = NULL;
    *n_rows = 0;
    /* as ranks_query() sets up q, so that each row is the one it packs */
    q.state = (int)info_int(q.db, "ranks", 0);
    q.late_entries = (uint64_t)info_int(q.db, "ranks_late", 0);
    q.capped = (uint64_t)info_int(q.db, "ranks_capped", 0);
    q.cover = true;
    if ((rc = rq_processes(&q)) < 0 || (q.state != 0 && (rc = rq_read_steps(&q)) < 0))
        goto out;
    if (q.n_ranks > 0 && (*rows = calloc(q.n_ranks, sizeof(**rows))) == NULL) {
        rc = rq_fail(&q, SQLITE_NOMEM, "ranks");
        goto out;
    }
    for (size_t i = 0; i < q.n_ranks; i++)
        rq_rank_row(&q, &q.ranks[i], &(*rows)[i]);
    *n_rows = q.n_ranks;
out:
    rq_free(&q);
    return rc;
}

int ranks_query(sqlite3 *db, const struct ranks_filter *f, msgpack_packer *pk, char *err,
                size_t errlen)
{
    struct rq q = {.db = db, .f = f, .err = err, .errlen = errlen};
    struct rq_coll *cs = NULL;
    size_t n_coll = 0;
    uint64_t mean_step = 0;
    msgpack_sbuffer tail;
    msgpack_packer tp;
    int rc;

    msgpack_sbuffer_init(&tail);
    msgpack_packer_init(&tp, &tail, msgpack_sbuffer_write);
    q.state = (int)info_int(q.db, "ranks", 0);
    q.late_entries = (uint64_t)info_int(q.db, "ranks_late", 0);
    q.capped = (uint64_t)info_int(q.db, "ranks_capped", 0);
    q.cover = f->device == NULL && f->category == NULL;
    if ((rc = rq_processes(&q)) < 0)
        goto out;
    if (q.state != 0 && (rc = rq_read_steps(&q)) < 0)
        goto out;
    /* The verdict comes first but rests on the sections: pack those aside, then it. */
    rc = -ENOMEM;
    if (rq_pack_steps(&q, &tp, &mean_step) || rq_pack_ranks(&q, &tp) || rq_pack_categories(&q, &tp))
        goto out;
    if (q.state != 0) {
        if ((rc = rq_pack_collectives(&q, &tp, &n_coll, &cs)) < 0)
            goto out;
        if ((rc = rq_pack_throughput(&q, &tp)) < 0)
            goto out;
    } else if (pk_str(&tp, "collectives") || msgpack_pack_array(&tp, 0) ||
               pk_str(&tp, "throughput") || msgpack_pack_array(&tp, 0)) {
        goto out;
    }
    if (rq_pack_verdict(&q, pk, cs, n_coll) || rq_pack_completeness(&q, pk) ||
        pk->callback(pk->data, tail.data, tail.size))
        goto out;
    rc = 0;
out:
    if (rc == -ENOMEM && q.errlen > 0 && q.err[0] == '\0')
        snprintf(q.err, q.errlen, "report: analysis: out of memory");
    for (size_t i = 0; i < n_coll; i++) {
        free(cs[i].op);
        free(cs[i].last);
    }
    free(cs);
    msgpack_sbuffer_destroy(&tail);
    rq_free(&q);
    return rc;
}
