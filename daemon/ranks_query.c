/*
 * ranks_query.c — the analysis sections of a report; see ranks_query.h.
 *
 * Reads rk_steps (or rk_devsteps with a device filter), rk_coll,
 * rk_coll_ranks, processes, rk_ops and agg_ops: tables whose size grows with
 * ranks x steps (x devices), never with entries. One figure reads entries:
 * the throughput per op with a step filter (rk_ops has no steps), only those
 * between the first and last rowid of those steps (rk_devsteps). Sums
 * saturate like every report sum; shares and ratios are doubles.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "ranks.h"
#include "ranks_query.h"
#include "verdict.h"

#define RQ_CAP     ((uint64_t)INT64_MAX)
#define RQ_LATE    0.10 /* a step's late rank is named when it cost >= this of the step */
#define RQ_STEPS   1000 /* steps listed at most: the most caused time, then the longest */
#define RQ_MISSING 1000 /* missing ranks listed one by one at most (all in ranges) */
#define RQ_HB      130  /* half-octave buckets of a step's held-up time (rq_hbucket) */

struct rq_rank {
    int64_t rank; /* -1: processes without a rank */
    uint64_t dropped, processes;
    uint64_t unclosed; /* processes that ended without bye while the daemon ran */
    uint64_t steps, step_ns, cat[PROTO_NCAT], exposed, coll, waited, last, caused, slowest, late;
    uint64_t untracked, late_first, late_last; /* late_*: the first and last step it was late */
    /* 2 x RQ_HB: the held-up time of the steps it was late in, then of those it held the others
     * up most in without being named late (under RQ_LATE); NULL: no such step */
    uint64_t *hlate;
};

struct rq_row {
    uint64_t step, begin, end, cat[PROTO_NCAT], exposed, coll, waited, last, caused;
    uint64_t covered; /* the union of its processes' top-level entries (rk_steps.covered_ns) */
    size_t ri;        /* index into ranks */
};

/* A step kept for `steps`: its figures, its ranks' times (ri: index into ranks). */
struct rq_time {
    size_t ri;
    uint64_t t;
};

struct rq_shown {
    uint64_t step, min, max, mean, waited, caused, untracked;
    size_t n, slow, last, late; /* last, late: SIZE_MAX none */
    struct rq_time *times;
};

/* A process and the index of its rank in ranks (SIZE_MAX: filtered out). */
struct rq_proc {
    int64_t id;
    size_t ri;
};

struct rq {
    sqlite3 *db;
    const struct ranks_filter *f;
    char *err;
    size_t errlen;
    int state;  /* info.ranks: 0 absent, 1 exact, 2 inexact */
    bool cover; /* untracked time known: rk_steps.covered_ns in every row read, no filter on
                 * device or category (it is per process and step, of every category) */
    uint64_t late_entries, n_steps;
    uint64_t capped;             /* info.ranks_capped: instances closed at RANKS_OPEN */
    uint64_t world, world_given; /* the largest hello world, clamped (RANKS_MAX_WORLD); not */
    struct rq_rank *ranks;
    size_t n_ranks;
    struct rq_proc *procs; /* by id ascending: a map, never an array indexed by id */
    size_t n_procs, cap_procs;
    struct rq_row *rows; /* the rows of the step being read (rq_read_steps) */
    size_t n_rows, cap_rows;
    struct rq_shown *shown; /* the steps to list: a heap, the least wide at its root */
    size_t n_shown;
    unsigned __int128 step_sum; /* all ranks' step times, of step_cnt (rank, step) pairs */
    uint64_t step_cnt;
    uint64_t hall[RQ_HB]; /* the held-up time (largest caused time) of every step with one */
};

static uint64_t rq_sat(uint64_t a, uint64_t b)
{
    return a > RQ_CAP - b ? RQ_CAP : a + b;
}

/* A stored sum as satsum() counts it: anything negative as 0. */
static uint64_t rq_pos(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

static int rq_fail(struct rq *q, int rc, const char *what)
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

static bool rq_rank_wanted(const struct rq *q, int64_t rank)
{
    if (q->f->ranks == NULL)
        return true;
    for (size_t i = 0; i < q->f->n_ranks; i++)
        if (q->f->ranks[i] == rank)
            return true;
    return false;
}

/* The ranks of the session (distinct ranks of its processes), sorted, and the process map. */
static int rq_processes(struct rq *q)
{
    sqlite3_stmt *st;
    int64_t *rk = NULL;
    size_t n = 0, cap = 0;
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
        for (i = 0; i < q->n_ranks && q->ranks[i].rank != rank; i++)
            ;
        if (i == q->n_ranks) {
            struct rq_rank *r = realloc(q->ranks, (q->n_ranks + 1) * sizeof(*r));
            if (r == NULL)
                goto nomem;
            q->ranks = r;
            memset(&r[i], 0, sizeof(r[i]));
            r[i].rank = rank;
            q->n_ranks++;
        }
        q->ranks[i].processes++;
        q->ranks[i].dropped = rq_sat(q->ranks[i].dropped, (uint64_t)sqlite3_column_int64(st, 3));
        q->ranks[i].unclosed += sqlite3_column_int(st, 4) != 0;
        /* ascending ids (ORDER BY id); i is provisional: the index before sorting */
        q->procs[q->n_procs++] = (struct rq_proc){id, i};
        (void)cap;
        (void)rk;
        (void)n;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rq_fail(q, rc, "processes");
    /* sort ranks, then remap */
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
    }
    /* the ranks a filter leaves out are not listed at all */
    if (q->f->ranks != NULL) {
        size_t *to = malloc((q->n_ranks + 1) * sizeof(*to)), k = 0;
        if (to == NULL)
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
    }
    return 0;
nomem:
    sqlite3_finalize(st);
    return rq_fail(q, SQLITE_NOMEM, "processes");
}

/* The index in ranks of process pid's rank; SIZE_MAX when unknown or filtered out. */
static size_t rq_proc_rank(const struct rq *q, int64_t pid)
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
static void rq_bind_steps(const struct rq *q, sqlite3_stmt *st)
{
    sqlite3_bind_int64(st, 1, q->f->steps ? (int64_t)q->f->step_min : 0);
    sqlite3_bind_int64(st, 2, q->f->steps ? (int64_t)q->f->step_max : INT64_MAX);
}

static bool rq_cat_wanted(const struct rq *q, enum proto_cat c)
{
    return q->f->category == NULL || proto_cat_code(q->f->category) == c;
}

static int rq_step_done(struct rq *q);

/*
 * Reads the per-step rows, in step order, and folds each step as its rows
 * end (rq_step_done): the memory a report holds follows the ranks (one
 * step's rows, and the RQ_STEPS steps it lists), never the steps.
 */
static int rq_read_steps(struct rq *q)
{
    static const char all[] =
        "SELECT process_id, step, begin_ns, end_ns, compute_ns, comm_ns, memory_ns, wait_ns,"
        " other_ns, exposed_ns, coll, waited_ns, last_count, caused_ns, covered_ns FROM rk_steps"
        " WHERE step BETWEEN ?1 AND ?2 ORDER BY step";
    static const char all_steps[] =
        "SELECT process_id, step, begin_ns, end_ns, compute_ns, comm_ns, memory_ns, wait_ns,"
        " other_ns, exposed_ns, coll, waited_ns, last_count, caused_ns, covered_ns FROM rk_steps"
        " ORDER BY step";
    static const char by_dev[] =
        "SELECT r.process_id, r.step, r.begin_ns, r.end_ns, r.compute_ns, r.comm_ns, r.memory_ns,"
        " r.wait_ns, r.other_ns, r.exposed_ns FROM rk_devsteps r"
        " JOIN devices d ON d.id = r.device_id WHERE r.step BETWEEN ?1 AND ?2 AND d.name = ?3"
        " ORDER BY r.step";
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

static int rq_row_cmp(const void *pa, const void *pb)
{
    const struct rq_row *a = pa, *b = pb;

    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->ri < b->ri ? -1 : a->ri > b->ri;
}

/* Sorts the rows by (step, rank) and merges rows of one rank and step (several processes). */
static void rq_merge_rows(struct rq *q)
{
    size_t k = 0;

    if (q->n_rows == 0)
        return;
    qsort(q->rows, q->n_rows, sizeof(*q->rows), rq_row_cmp);
    for (size_t i = 0; i < q->n_rows; i++) {
        struct rq_row *a = &q->rows[i];
        if (k > 0 && q->rows[k - 1].step == a->step && q->rows[k - 1].ri == a->ri) {
            struct rq_row *m = &q->rows[k - 1];
            if (a->begin < m->begin)
                m->begin = a->begin;
            if (a->end > m->end)
                m->end = a->end;
            for (int c = 0; c < PROTO_NCAT; c++)
                m->cat[c] = rq_sat(m->cat[c], a->cat[c]);
            m->exposed = rq_sat(m->exposed, a->exposed);
            m->coll += a->coll;
            m->waited = rq_sat(m->waited, a->waited);
            m->last += a->last;
            m->caused = rq_sat(m->caused, a->caused);
            m->covered = rq_sat(m->covered, a->covered); /* processes of a rank: covers add */
        } else {
            q->rows[k++] = *a;
        }
    }
    q->n_rows = k;
}

static uint64_t rq_span(const struct rq_row *w)
{
    return w->end > w->begin ? w->end - w->begin : 0;
}

/* A rank's step time in no top-level entry: its span less their union (0 when they cover it
 * all; more only through late entries, rkcover.h). */
static uint64_t rq_untracked(const struct rq_row *w)
{
    uint64_t t = rq_span(w);

    return w->covered < t ? t - w->covered : 0;
}

/* ---- packing helpers ------------------------------------------------------ */

static int pk_str(msgpack_packer *pk, const char *s)
{
    size_t n;

    if (s == NULL)
        return msgpack_pack_nil(pk);
    n = strlen(s);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static int pk_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return pk_str(pk, k) || msgpack_pack_uint64(pk, v);
}

static int pk_f64(msgpack_packer *pk, const char *k, double v)
{
    return pk_str(pk, k) || msgpack_pack_double(pk, v);
}

static int pk_rank(msgpack_packer *pk, const char *k, int64_t rank)
{
    return pk_str(pk, k) || (rank < 0 ? msgpack_pack_nil(pk) : msgpack_pack_int64(pk, rank));
}

/* v, or nil when it is not known */
static int pk_known(msgpack_packer *pk, const char *k, uint64_t v, bool known)
{
    return pk_str(pk, k) || (known ? msgpack_pack_uint64(pk, v) : msgpack_pack_nil(pk));
}

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

/* ---- sections ------------------------------------------------------------- */

/*
 * The missing ranks: those of 0..world-1 (within the ranks filter) no process
 * said, as ranges [first, last] ascending, each given to emit (which may be
 * NULL); returns how many ranks. The cost follows the ranks seen (and the
 * filter's), never the world: the gaps between the sorted ranks are the ranges.
 */
static uint64_t rq_missing(const struct rq *q, int (*emit)(void *, uint64_t, uint64_t), void *arg,
                           int *err)
{
    uint64_t n = 0, next = 0;

    *err = 0;
    if (q->f->ranks != NULL) { /* the filter's ranks no process gave (q->ranks: the others) */
        uint64_t first = 0, last = 0;
        bool open = false;
        for (uint64_t r = 0; r < q->world && *err == 0; r = next) {
            bool found = false;
            next = UINT64_MAX; /* the smallest wanted rank above r */
            for (size_t i = 0; i < q->f->n_ranks; i++)
                if ((uint64_t)q->f->ranks[i] > r && (uint64_t)q->f->ranks[i] < next)
                    next = (uint64_t)q->f->ranks[i];
            if (!rq_rank_wanted(q, (int64_t)r))
                continue;
            for (size_t i = 0; i < q->n_ranks && !found; i++)
                found = q->ranks[i].rank == (int64_t)r;
            if (found)
                continue;
            n++;
            if (open && r == last + 1) {
                last = r;
                continue;
            }
            if (open && emit != NULL)
                *err = emit(arg, first, last);
            first = last = r;
            open = true;
        }
        if (open && emit != NULL && *err == 0)
            *err = emit(arg, first, last);
        return n;
    }
    for (size_t i = 0; i <= q->n_ranks && *err == 0; i++) { /* q->ranks ascending */
        uint64_t r = i < q->n_ranks ? (uint64_t)q->ranks[i].rank : q->world;
        if (i < q->n_ranks && (q->ranks[i].rank < 0 || r < next))
            continue;
        if (r > q->world)
            r = q->world;
        if (r > next) {
            n += r - next;
            if (emit != NULL)
                *err = emit(arg, next, r - 1);
        }
        next = r + 1;
        if (next > q->world)
            break;
    }
    return n;
}

static int rq_pack_range(void *pk, uint64_t first, uint64_t last)
{
    return msgpack_pack_array(pk, 2) || msgpack_pack_uint64(pk, first) ||
           msgpack_pack_uint64(pk, last);
}

/* Packs the ranks of a range, RQ_MISSING at most in all (*left counts down). */
struct rq_list {
    msgpack_packer *pk;
    uint64_t left;
};

static int rq_pack_listed(void *arg, uint64_t first, uint64_t last)
{
    struct rq_list *l = arg;

    for (uint64_t r = first; r <= last && l->left > 0; r++, l->left--)
        if (msgpack_pack_uint64(l->pk, r))
            return -1;
    return 0;
}

static int rq_count_range(void *arg, uint64_t first, uint64_t last)
{
    (void)first;
    (void)last;
    ++*(size_t *)arg;
    return 0;
}

/* `missing_ranks` (the first RQ_MISSING), `missing_rank_count`, `missing_rank_ranges`. */
static int rq_pack_missing(struct rq *q, msgpack_packer *pk)
{
    size_t ranges = 0;
    int err;
    uint64_t n = rq_missing(q, rq_count_range, &ranges, &err);
    struct rq_list l = {pk, n < RQ_MISSING ? n : RQ_MISSING};

    if (pk_str(pk, "missing_ranks") || msgpack_pack_array(pk, (uint32_t)l.left))
        return -1;
    rq_missing(q, rq_pack_listed, &l, &err);
    if (err != 0 || pk_u64(pk, "missing_rank_count", n) || pk_str(pk, "missing_rank_ranges") ||
        msgpack_pack_array(pk, (uint32_t)ranges))
        return -1;
    rq_missing(q, rq_pack_range, pk, &err);
    return err;
}

/*
 * `clients`: each process whose producer sent its own counters
 * (process_counters; PROTOCOL.md Part 3), by process id: what it said, what
 * this file holds of it (`stored`: its rank aggregates' calls when exact,
 * else a count of its entries), and of what it sent unacknowledged
 * (`unconfirmed` = sent - acked) how many are stored (`unconfirmed_stored`
 * = stored - acked). A file without the table has none.
 */
static const char rq_clients_sql[] =
    "SELECT c.process_id, coalesce(p.rank, -1), c.recorded, c.dropped, c.sent, c.acked, c.final, "
    "%s FROM process_counters c LEFT JOIN processes p ON p.id = c.process_id "
    "ORDER BY c.process_id";

static int rq_pack_client(msgpack_packer *pk, sqlite3_stmt *st)
{
    uint64_t sent = rq_pos(sqlite3_column_int64(st, 4)),
             acked = rq_pos(sqlite3_column_int64(st, 5));
    uint64_t stored = rq_pos(sqlite3_column_int64(st, 7));

    return msgpack_pack_map(pk, 10) || pk_rank(pk, "rank", sqlite3_column_int64(st, 1)) ||
           pk_u64(pk, "process_id", rq_pos(sqlite3_column_int64(st, 0))) ||
           pk_u64(pk, "recorded", rq_pos(sqlite3_column_int64(st, 2))) ||
           pk_u64(pk, "dropped", rq_pos(sqlite3_column_int64(st, 3))) || pk_u64(pk, "sent", sent) ||
           pk_u64(pk, "acked", acked) || pk_u64(pk, "stored", stored) ||
           pk_u64(pk, "unconfirmed", sent > acked ? sent - acked : 0) ||
           pk_u64(pk, "unconfirmed_stored", stored > acked ? stored - acked : 0) ||
           pk_str(pk, "final") ||
           (sqlite3_column_int(st, 6) ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

static int rq_pack_clients(struct rq *q, msgpack_packer *pk)
{
    char sql[sizeof(rq_clients_sql) + 128];
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int rc;

    snprintf(sql, sizeof(sql), rq_clients_sql,
             q->state == 1 ? "(SELECT coalesce(sum(calls), 0) FROM rk_ops r"
                             " WHERE r.process_id = c.process_id)"
                           : "(SELECT count(*) FROM entries e WHERE e.process_id = c.process_id)");
    if (pk_str(pk, "clients"))
        return -1;
    if ((rc = sqlite3_prepare_v2(q->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        sqlite3_finalize(st);
        return rq_fail(q, rc, "process counters");
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        n += rq_rank_wanted(q, sqlite3_column_int64(st, 1));
    sqlite3_reset(st);
    if (rc != SQLITE_DONE || msgpack_pack_array(pk, (uint32_t)n)) {
        sqlite3_finalize(st);
        return rc != SQLITE_DONE ? rq_fail(q, rc, "process counters") : -1;
    }
    /* A second pass over the same rows: nothing writes this read transaction's snapshot. */
    while (n > 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!rq_rank_wanted(q, sqlite3_column_int64(st, 1)))
            continue;
        n--;
        if (rq_pack_client(pk, st)) {
            sqlite3_finalize(st);
            return -1;
        }
    }
    sqlite3_finalize(st);
    return n == 0 ? 0 : rq_fail(q, rc, "process counters");
}

/*
 * `ended_without_bye`: the ranks (ascending) with a process that ended without `bye` while
 * the daemon ran (processes.bye 0 with an end): it died or exited without closing its client
 * (MPI_Abort, a crash, an exit without MPI_Finalize or tc_close), so its figures may lack its
 * last entries. A daemon's stop (bye 2) or kill (no end recorded) does not count.
 */
static int rq_pack_unclosed(struct rq *q, msgpack_packer *pk)
{
    size_t n = 0;

    for (size_t i = 0; i < q->n_ranks; i++)
        n += q->ranks[i].unclosed > 0 && rq_rank_wanted(q, q->ranks[i].rank);
    if (pk_str(pk, "ended_without_bye") || msgpack_pack_array(pk, (uint32_t)n))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++)
        if (q->ranks[i].unclosed > 0 && rq_rank_wanted(q, q->ranks[i].rank) &&
            (q->ranks[i].rank < 0 ? msgpack_pack_nil(pk)
                                  : msgpack_pack_int64(pk, q->ranks[i].rank)))
            return -1;
    return 0;
}

static int rq_pack_completeness(struct rq *q, msgpack_packer *pk)
{
    size_t dropping = 0;

    for (size_t i = 0; i < q->n_ranks; i++)
        dropping += q->ranks[i].dropped > 0 && rq_rank_wanted(q, q->ranks[i].rank);
    if (pk_str(pk, "completeness") || msgpack_pack_map(pk, 14) || pk_u64(pk, "world", q->world) ||
        pk_u64(pk, "world_given", q->world_given) || pk_u64(pk, "steps", q->n_steps) ||
        rq_pack_missing(q, pk) != 0)
        return -1;
    if (pk_str(pk, "dropped") || msgpack_pack_array(pk, dropping))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++) {
        const struct rq_rank *r = &q->ranks[i];
        if (r->dropped > 0 && rq_rank_wanted(q, r->rank) &&
            (msgpack_pack_map(pk, 2) || pk_rank(pk, "rank", r->rank) ||
             pk_u64(pk, "dropped", r->dropped)))
            return -1;
    }
    if (rq_pack_unclosed(q, pk) != 0 || rq_pack_clients(q, pk) != 0)
        return -1;
    return pk_str(pk, "aggregates") ||
           pk_str(pk, q->state == 1   ? "exact"
                      : q->state == 2 ? "inexact"
                                      : "absent") ||
           pk_u64(pk, "late_entries", q->late_entries) ||
           pk_u64(pk, "collectives_closed_at_cap", q->capped) ||
           pk_u64(pk, "collectives_open_cap", RANKS_OPEN) || pk_str(pk, "collectives_matched_by") ||
           pk_str(pk, "ext comm+seq (complete at ext comm_size arrivals, else at world), else "
                      "(op, process_group metadata, occurrence per rank)");
}

/* True when step a is listed after b: less caused time, as much but a shorter slowest rank,
 * or both equal and later. */
static bool rq_shown_after(const struct rq_shown *a, const struct rq_shown *b)
{
    if (a->caused != b->caused)
        return a->caused < b->caused;
    if (a->max != b->max)
        return a->max < b->max;
    return a->step > b->step;
}

static void rq_shown_swap(struct rq_shown *a, struct rq_shown *b)
{
    struct rq_shown t = *a;

    *a = *b;
    *b = t;
}

/* Restores the heap (the step listed last at the root) from node k down. */
static void rq_shown_down(struct rq *q, size_t k)
{
    for (;;) {
        size_t l = 2 * k + 1, m = k;
        if (l < q->n_shown && rq_shown_after(&q->shown[l], &q->shown[m]))
            m = l;
        if (l + 1 < q->n_shown && rq_shown_after(&q->shown[l + 1], &q->shown[m]))
            m = l + 1;
        if (m == k)
            return;
        rq_shown_swap(&q->shown[k], &q->shown[m]);
        k = m;
    }
}

/* Keeps step st (its rows in q->rows) among the RQ_STEPS widest, if it is one. */
static int rq_step_keep(struct rq *q, struct rq_shown *st)
{
    size_t k;

    if (q->n_shown == RQ_STEPS && !rq_shown_after(&q->shown[0], st))
        return 0;
    if ((st->times = malloc(st->n * sizeof(*st->times))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < st->n; i++)
        st->times[i] = (struct rq_time){q->rows[i].ri, rq_span(&q->rows[i])};
    if (q->shown == NULL && (q->shown = malloc(RQ_STEPS * sizeof(*q->shown))) == NULL) {
        free(st->times);
        return -ENOMEM;
    }
    if (q->n_shown == RQ_STEPS) { /* it takes the place of the step listed last */
        free(q->shown[0].times);
        q->shown[0] = *st;
        rq_shown_down(q, 0);
        return 0;
    }
    q->shown[k = q->n_shown++] = *st;
    for (; k > 0 && rq_shown_after(&q->shown[(k - 1) / 2], &q->shown[k]); k = (k - 1) / 2)
        rq_shown_swap(&q->shown[k], &q->shown[(k - 1) / 2]);
    return 0;
}

/* The half-octave bucket of v: 0 for 0, else 1 + 2 x log2(v) + the bit below the top one. */
static size_t rq_hbucket(uint64_t v)
{
    int msb;

    if (v == 0)
        return 0;
    msb = 63 - __builtin_clzll(v);
    return 1 + 2 * (size_t)msb + (msb > 0 ? (v >> (msb - 1)) & 1 : 0);
}

/* The least value of bucket b. */
static uint64_t rq_hvalue(size_t b)
{
    size_t msb = (b - 1) / 2;

    if (b == 0)
        return 0;
    return ((uint64_t)1 << msb) + ((b - 1) % 2 ? (uint64_t)1 << msb >> 1 : 0);
}

/*
 * The lower median of the counts h minus sub (RQ_HB each, when not NULL) and minus sub2 (the
 * same), as its bucket's least value; 0 when they count nothing. *n: how many they count.
 */
static uint64_t rq_hmedian(const uint64_t *h, const uint64_t *sub, const uint64_t *sub2,
                           uint64_t *n)
{
    uint64_t seen = 0;

    *n = 0;
    for (size_t b = 0; b < RQ_HB; b++)
        *n += h[b] - (sub ? sub[b] : 0) - (sub2 ? sub2[b] : 0);
    for (size_t b = 0; b < RQ_HB; b++) {
        seen += h[b] - (sub ? sub[b] : 0) - (sub2 ? sub2[b] : 0);
        if (*n > 0 && seen >= (*n + 1) / 2)
            return rq_hvalue(b);
    }
    return 0;
}

/*
 * Rows without a span (begin after end: only a forked worker's entries, which the writer
 * keeps in no step's span, ranks.c) count in their rank's totals and in no step: folds
 * them and leaves q->rows with the others. Returns how many are left.
 */
static size_t rq_drop_spanless(struct rq *q)
{
    size_t k = 0;

    for (size_t j = 0; j < q->n_rows; j++) {
        const struct rq_row *w = &q->rows[j];
        struct rq_rank *r = &q->ranks[w->ri];
        if (w->begin <= w->end) {
            q->rows[k++] = *w;
            continue;
        }
        for (int c = 0; c < PROTO_NCAT; c++)
            r->cat[c] = rq_sat(r->cat[c], w->cat[c]);
        r->exposed = rq_sat(r->exposed, w->exposed);
    }
    q->n_rows = k;
    return k;
}

/*
 * The rows of one step are all read (q->rows): merges those of one rank,
 * folds them into the per-rank sums, keeps the step's summary if it is to
 * be listed, and empties q->rows for the next step. 0 or -ENOMEM.
 */
static int rq_step_done(struct rq *q)
{
    struct rq_shown st = {.step = q->rows[0].step, .min = UINT64_MAX};
    size_t slow = 0, lastr = 0, late = 0;
    unsigned __int128 sum = 0;
    bool named;

    rq_merge_rows(q); /* one step: by rank */
    if (rq_drop_spanless(q) == 0)
        return 0; /* only workers' entries: in no step */
    for (size_t j = 0; j < q->n_rows; j++) {
        struct rq_row *w = &q->rows[j];
        struct rq_rank *r = &q->ranks[w->ri];
        uint64_t t = rq_span(w);

        r->steps++;
        r->step_ns = rq_sat(r->step_ns, t);
        for (int c = 0; c < PROTO_NCAT; c++)
            r->cat[c] = rq_sat(r->cat[c], w->cat[c]);
        r->exposed = rq_sat(r->exposed, w->exposed);
        r->coll += w->coll;
        r->waited = rq_sat(r->waited, w->waited);
        r->last += w->last;
        r->caused = rq_sat(r->caused, w->caused);
        r->untracked = rq_sat(r->untracked, rq_untracked(w));
        sum += t;
        st.waited = rq_sat(st.waited, w->waited);
        st.caused = rq_sat(st.caused, w->caused);
        st.untracked = rq_sat(st.untracked, rq_untracked(w));
        if (t < st.min)
            st.min = t;
        if (t > st.max || j == 0) {
            st.max = t;
            slow = j;
        }
        if (w->last > q->rows[lastr].last)
            lastr = j;
        if (w->caused > q->rows[late].caused)
            late = j;
    }
    st.n = q->n_rows;
    st.mean = (uint64_t)(sum / st.n);
    named = q->rows[late].caused > 0 && st.n > 1 &&
            (double)q->rows[late].caused >= RQ_LATE * (double)st.mean;
    st.slow = q->rows[slow].ri;
    st.last = q->rows[lastr].last > 0 ? q->rows[lastr].ri : SIZE_MAX;
    st.late = named ? q->rows[late].ri : SIZE_MAX;
    q->ranks[st.slow].slowest++;
    if (q->rows[late].caused > 0) { /* the held-up time: whose it is, named late or not */
        struct rq_rank *lr = &q->ranks[q->rows[late].ri];
        size_t b = rq_hbucket(q->rows[late].caused);
        if (lr->hlate == NULL && (lr->hlate = calloc(2 * RQ_HB, sizeof(*lr->hlate))) == NULL)
            return -ENOMEM;
        q->hall[b]++;
        lr->hlate[named ? b : RQ_HB + b]++;
    }
    if (named) {
        struct rq_rank *lr = &q->ranks[st.late];
        if (lr->late++ == 0)
            lr->late_first = st.step;
        lr->late_last = st.step; /* the steps come in order */
    }
    q->step_sum += sum;
    q->step_cnt += st.n;
    q->n_steps++;
    q->n_rows = 0;
    return rq_step_keep(q, &st);
}

static int rq_shown_step_cmp(const void *pa, const void *pb)
{
    const struct rq_shown *a = pa, *b = pb;

    return a->step < b->step ? -1 : a->step > b->step;
}

static int64_t rq_rank_of(const struct rq *q, size_t ri)
{
    return ri == SIZE_MAX ? -1 : q->ranks[ri].rank;
}

static int rq_pack_step(struct rq *q, msgpack_packer *pk, const struct rq_shown *st)
{
    if (msgpack_pack_map(pk, 13) || pk_u64(pk, "step", st->step) || pk_u64(pk, "ranks", st->n) ||
        pk_u64(pk, "min_ns", st->min) || pk_u64(pk, "max_ns", st->max) ||
        pk_u64(pk, "mean_ns", st->mean) || pk_u64(pk, "spread_ns", st->max - st->min) ||
        pk_rank(pk, "slowest_rank", rq_rank_of(q, st->slow)) ||
        pk_rank(pk, "last_rank", rq_rank_of(q, st->last)) ||
        pk_rank(pk, "late_rank", rq_rank_of(q, st->late)) || pk_u64(pk, "waited_ns", st->waited) ||
        pk_u64(pk, "caused_ns", st->caused) ||
        pk_known(pk, "untracked_ns", st->untracked, q->cover) || pk_str(pk, "times_ns") ||
        msgpack_pack_array(pk, st->n))
        return -1;
    for (size_t k = 0; k < st->n; k++) {
        int64_t rank = q->ranks[st->times[k].ri].rank;
        if (msgpack_pack_array(pk, 2) ||
            (rank < 0 ? msgpack_pack_nil(pk) : msgpack_pack_int64(pk, rank)) ||
            msgpack_pack_uint64(pk, st->times[k].t))
            return -1;
    }
    return 0;
}

/*
 * Packs `steps`: every step when there are at most RQ_STEPS, else the
 * RQ_STEPS with the widest spread (ties: the earlier), by step, so that
 * neither the reply nor the memory grows with the session's length.
 */
static int rq_pack_steps(struct rq *q, msgpack_packer *pk, uint64_t *mean_step_out)
{
    if (q->n_shown > 1)
        qsort(q->shown, q->n_shown, sizeof(*q->shown), rq_shown_step_cmp);
    if (pk_str(pk, "steps") || msgpack_pack_array(pk, q->n_shown))
        return -1;
    for (size_t k = 0; k < q->n_shown; k++)
        if (rq_pack_step(q, pk, &q->shown[k]))
            return -1;
    *mean_step_out = q->step_cnt ? (uint64_t)(q->step_sum / q->step_cnt) : 0;
    return 0;
}

static uint64_t rq_total(const struct rq_rank *r)
{
    uint64_t t = 0;

    for (int c = 0; c < PROTO_NCAT; c++)
        t = rq_sat(t, r->cat[c]);
    return t;
}

static int rq_pack_ranks(struct rq *q, msgpack_packer *pk)
{
    if (pk_str(pk, "ranks") || msgpack_pack_array(pk, q->n_ranks))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++) {
        const struct rq_rank *r = &q->ranks[i];
        uint64_t in_comm = rq_sat(r->cat[PROTO_CAT_COMM], r->cat[PROTO_CAT_WAIT]);
        double comm_share = r->step_ns ? (double)in_comm / (double)r->step_ns : 0;
        if (msgpack_pack_map(pk, 23) || pk_rank(pk, "rank", r->rank) ||
            pk_u64(pk, "processes", r->processes) || pk_u64(pk, "dropped", r->dropped) ||
            pk_u64(pk, "steps", r->steps) || pk_u64(pk, "step_ns", r->step_ns) ||
            pk_u64(pk, "step_mean_ns", r->steps ? r->step_ns / r->steps : 0) ||
            pk_u64(pk, "total_ns", rq_total(r)) ||
            pk_u64(pk, "compute_ns", r->cat[PROTO_CAT_COMPUTE]) ||
            pk_u64(pk, "comm_ns", r->cat[PROTO_CAT_COMM]) ||
            pk_u64(pk, "memory_ns", r->cat[PROTO_CAT_MEMORY]) ||
            pk_u64(pk, "wait_ns", r->cat[PROTO_CAT_WAIT]) ||
            pk_u64(pk, "other_ns", r->cat[PROTO_CAT_OTHER]) ||
            pk_u64(pk, "exposed_comm_ns", r->exposed) || pk_u64(pk, "collectives", r->coll) ||
            pk_u64(pk, "waited_ns", r->waited) || pk_u64(pk, "arrived_last", r->last) ||
            pk_u64(pk, "caused_ns", r->caused) || pk_u64(pk, "slowest_steps", r->slowest) ||
            pk_u64(pk, "late_steps", r->late) ||
            pk_known(pk, "late_first_step", r->late_first, r->late > 0) ||
            pk_known(pk, "late_last_step", r->late_last, r->late > 0) ||
            pk_known(pk, "untracked_ns", r->untracked, q->cover) ||
            pk_f64(pk, "comm_share", comm_share < 1 ? comm_share : 1))
            return -1;
    }
    return 0;
}

/* `imbalance_by_category` goes in `categories`: per category over ranks. */
static int rq_pack_categories(struct rq *q, msgpack_packer *pk)
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

struct rq_coll {
    int64_t op_id;
    char *op;
    uint64_t instances, partial, skew, skew_max, waited;
    uint64_t *last; /* by rank index */
};

static int rq_pack_collectives(struct rq *q, msgpack_packer *pk, size_t *n_out,
                               struct rq_coll **out)
{
    sqlite3_stmt *st;
    struct rq_coll *cs = NULL;
    size_t n = 0, ci = 0;
    int rc;

    *out = NULL;
    *n_out = 0;
    if (!rq_cat_wanted(q, PROTO_CAT_COMM)) /* collectives are comm: none in another category */
        return pk_str(pk, "collectives") || msgpack_pack_array(pk, 0) ? -ENOMEM : 0;
    rc = sqlite3_prepare_v2(
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
    if (rc != SQLITE_DONE)
        return rq_fail(q, rc, "rk_coll");
    /* summed here, row by row: rk_coll_ranks is keyed by step first (schema/ranks.sql), and a
     * GROUP BY (op, process) would sort every row of the steps asked */
    rc = sqlite3_prepare_v2(q->db,
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
    if (rc != SQLITE_DONE)
        return rq_fail(q, rc, "rk_coll_ranks");
    if (pk_str(pk, "collectives") || msgpack_pack_array(pk, n))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct rq_coll *c = &cs[i];
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
                   c->instances && q->n_ranks ? (double)c->last[top] / (double)c->instances
                                              : 0.0) ||
            pk_str(pk, "arrived_last") || msgpack_pack_array(pk, q->n_ranks))
            return -ENOMEM;
        for (size_t k = 0; k < q->n_ranks; k++)
            if (msgpack_pack_uint64(pk, c->last[k]))
                return -ENOMEM;
    }
    return 0;
}

/*
 * The ops' sums: without a filter the session's agg_ops rows; with one, rk_ops
 * folded per op and process (rank, device and category filters), except with
 * a step filter: rk_ops has no steps, so the entries of those steps are read,
 * between the first and the last rowid rk_devsteps holds for them per process.
 */
static int rq_pack_throughput(struct rq *q, msgpack_packer *pk)
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
    struct row {
        char *op;
        uint64_t calls, total, elements;
    } *rows = NULL;
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
            struct row *p = realloc(rows, (n + 1) * sizeof(*rows));
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
    if (rc != SQLITE_DONE)
        err = rq_fail(q, rc, "throughput");
    else if (pk_str(pk, "throughput") || msgpack_pack_array(pk, n))
        err = -ENOMEM;
    for (size_t i = 0; err == 0 && i < n; i++) {
        double s = (double)rows[i].total / 1e9;
        if (msgpack_pack_map(pk, 5) || pk_str(pk, "op") || pk_str(pk, rows[i].op) ||
            pk_u64(pk, "calls", rows[i].calls) || pk_u64(pk, "total_ns", rows[i].total) ||
            pk_u64(pk, "elements", rows[i].elements) ||
            pk_f64(pk, "elements_per_s", s > 0 ? (double)rows[i].elements / s : 0.0))
            err = -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        free(rows[i].op);
    free(rows);
    return err;
}

/* ---- verdict -------------------------------------------------------------- */

/* The verdict's figures of the ranks (vr: q->n_ranks of them). */
static void rq_verdict_ranks(const struct rq *q, struct verdict_rank *vr)
{
    uint64_t named[RQ_HB] = {0}; /* the held-up time of the steps a late rank was named in */

    for (size_t i = 0; i < q->n_ranks; i++)
        for (size_t b = 0; q->ranks[i].hlate != NULL && b < RQ_HB; b++)
            named[b] += q->ranks[i].hlate[b];
    for (size_t i = 0; i < q->n_ranks; i++) {
        const struct rq_rank *r = &q->ranks[i];
        uint64_t n, m;

        vr[i] = (struct verdict_rank){.rank = r->rank,
                                      .step_ns = r->step_ns,
                                      .compute = r->cat[PROTO_CAT_COMPUTE],
                                      .comm = r->cat[PROTO_CAT_COMM],
                                      .untracked = r->untracked,
                                      .caused = r->caused,
                                      .waited = r->waited,
                                      .dropped = r->dropped,
                                      .unclosed = r->unclosed,
                                      .late_steps = r->late,
                                      .late_first = r->late_first,
                                      .late_last = r->late_last};
        /* its late steps against those another rank was named late in, or held the others up
         * most in under RQ_LATE: the larger median of the two with a baseline (verdict.h) */
        if (r->hlate != NULL)
            vr[i].late_median = rq_hmedian(r->hlate, NULL, NULL, &n);
        vr[i].other_median =
            rq_hmedian(q->hall, r->hlate, r->hlate ? r->hlate + RQ_HB : NULL, &vr[i].other_steps);
        m = rq_hmedian(named, r->hlate, NULL, &n);
        if (n >= VERDICT_BASELINE &&
            (vr[i].other_steps < VERDICT_BASELINE || m > vr[i].other_median)) {
            vr[i].other_median = m;
            vr[i].other_steps = n;
        }
    }
}

/* The verdict (verdict.c) from the ranks' figures. */
static int rq_pack_verdict(struct rq *q, msgpack_packer *pk, const struct rq_coll *cs,
                           size_t n_coll)
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
static int rq_late_instances(struct rq *q, uint64_t *n)
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

/* Frees what q holds. */
static void rq_free(struct rq *q)
{
    for (size_t i = 0; i < q->n_ranks; i++)
        free(q->ranks[i].hlate);
    free(q->ranks);
    free(q->procs);
    free(q->rows);
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
        if (msgpack_pack_map(pk, 4) || pk_rank(pk, "rank", r->rank) ||
            pk_u64(pk, "arrived_last", r->last) || pk_u64(pk, "caused_ns", r->caused) ||
            pk_u64(pk, "waited_ns", r->waited))
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
