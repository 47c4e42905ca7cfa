/*
 * rq.h — private to the report's analysis (ranks_query.c and its rq_*.c parts); see
 * ranks_query.h for what the report asks of it.
 *
 * One struct rq per report, on the query worker thread that runs the report, inside its
 * read transaction; it lives from ranks_query()/ranks_late() to their rq_free(). The parts:
 *   ranks_query.c  the entry points; the processes and their ranks; reading rk_steps
 *   rq_steps.c     folding one step's rows (per-rank sums, the steps listed, the held-up
 *                  medians) and the `steps` and `ranks` sections; the verdict's rank figures
 *   rq_complete.c  the `completeness` section (missing ranks, drops, clients)
 *   rq_sections.c  `categories`, `collectives`, `throughput` and the verdict
 * Every rq_pack_* appends one key and its value to pk (the caller packs the map header) and
 * returns 0. On failure rq_pack_collectives and rq_pack_throughput return a negative errno
 * (q->err set by rq_fail(), or -ENOMEM when msgpack fails); the others return nonzero, and
 * ranks_query() reports -ENOMEM (with q->err when rq_fail() set it: rq_pack_completeness reads
 * process_counters). Sums saturate at RQ_CAP (rq_sat) like every report sum.
 */
#ifndef TRACECTLD_RQ_H
#define TRACECTLD_RQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <msgpack.h>
#include <sqlite3.h>

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
    uint64_t cpu_wait;                         /* run-queue delay its producers reported */
    uint64_t late_caused, late_cpu;            /* verdict_rank's */
    /* 2 x RQ_HB: the held-up time of the steps it was late in, then of those it held the others
     * up most in without being named late (under RQ_LATE); NULL: no such step */
    uint64_t *hlate;
};

struct rq_row {
    uint64_t step, begin, end, cat[PROTO_NCAT], exposed, coll, waited, last, caused;
    uint64_t covered;  /* the union of its processes' top-level entries (rk_steps.covered_ns) */
    uint64_t cpu_wait; /* rk_steps.cpu_wait_ns */
    size_t ri;         /* index into ranks */
};

/* A step kept for `steps`: its figures, its ranks' times (ri: index into ranks). */
struct rq_time {
    size_t ri;
    uint64_t t;
    uint64_t cpu; /* its CPU wait in the step */
};

struct rq_shown {
    uint64_t step, min, max, mean, waited, caused, untracked, cpu_wait;
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
    /* each rank's run-queue delay in the step folded last (prev_step), 0 without a row there;
     * NULL until the first step (n_ranks of them) */
    uint64_t *cw_prev;
    uint64_t prev_step;
};

struct rq_coll {
    int64_t op_id;
    char *op;
    uint64_t instances, partial, skew, skew_max, waited;
    uint64_t *last; /* by rank index */
};

static inline uint64_t rq_sat(uint64_t a, uint64_t b)
{
    return a > RQ_CAP - b ? RQ_CAP : a + b;
}

/* A stored sum as satsum() counts it: anything negative as 0. */
static inline uint64_t rq_pos(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

static inline int pk_str(msgpack_packer *pk, const char *s)
{
    size_t n;

    if (s == NULL)
        return msgpack_pack_nil(pk);
    n = strlen(s);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static inline int pk_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return pk_str(pk, k) || msgpack_pack_uint64(pk, v);
}

static inline int pk_f64(msgpack_packer *pk, const char *k, double v)
{
    return pk_str(pk, k) || msgpack_pack_double(pk, v);
}

static inline int pk_rank(msgpack_packer *pk, const char *k, int64_t rank)
{
    return pk_str(pk, k) || (rank < 0 ? msgpack_pack_nil(pk) : msgpack_pack_int64(pk, rank));
}

/* v, or nil when it is not known */
static inline int pk_known(msgpack_packer *pk, const char *k, uint64_t v, bool known)
{
    return pk_str(pk, k) || (known ? msgpack_pack_uint64(pk, v) : msgpack_pack_nil(pk));
}

/* ranks_query.c */

/* Sets q->err ("report: <what>: ...") from SQLite code rc; returns -ENOMEM or -EIO. */
int rq_fail(struct rq *q, int rc, const char *what);
/* True when the ranks filter keeps rank (always without a filter). */
bool rq_rank_wanted(const struct rq *q, int64_t rank);
/* The index in ranks of process pid's rank; SIZE_MAX when unknown or filtered out. */
size_t rq_proc_rank(const struct rq *q, int64_t pid);
/* Binds ?1..?2, the steps asked (every step without a step filter). */
void rq_bind_steps(const struct rq *q, sqlite3_stmt *st);
/* True when the category filter keeps c (always without one). */
bool rq_cat_wanted(const struct rq *q, enum proto_cat c);

/* rq_steps.c */

/* Folds the step whose rows q->rows holds (all of one step) and empties them. 0 or -ENOMEM. */
int rq_step_done(struct rq *q);
/* `steps`; *mean_step_out: the mean step time over every (rank, step) pair. */
int rq_pack_steps(struct rq *q, msgpack_packer *pk, uint64_t *mean_step_out);
/* The `ranks` row of rank r (ranks_query.h). */
void rq_rank_row(const struct rq *q, const struct rq_rank *r, struct ranks_row *o);
/* `ranks`: one map per rank kept. */
int rq_pack_ranks(struct rq *q, msgpack_packer *pk);
/* Fills vr (q->n_ranks of them) with the verdict's figures of each rank. */
void rq_verdict_ranks(const struct rq *q, struct verdict_rank *vr);

/* rq_complete.c */

/* The missing ranks (each range given to emit, which may be NULL); returns how many. */
uint64_t rq_missing(const struct rq *q, int (*emit)(void *, uint64_t, uint64_t), void *arg,
                    int *err);
/* `completeness`. */
int rq_pack_completeness(struct rq *q, msgpack_packer *pk);

/* rq_sections.c */

int rq_pack_categories(struct rq *q, msgpack_packer *pk);
/* `collectives`; *out (n_out of them, each op and last to free) even on error. */
int rq_pack_collectives(struct rq *q, msgpack_packer *pk, size_t *n_out, struct rq_coll **out);
int rq_pack_throughput(struct rq *q, msgpack_packer *pk);
/* `verdict`: verdict_text() from the ranks' figures and the collectives cs. */
int rq_pack_verdict(struct rq *q, msgpack_packer *pk, const struct rq_coll *cs, size_t n_coll);
/* *n: the collective instances of every op in the steps asked. */
int rq_late_instances(struct rq *q, uint64_t *n);

#endif
