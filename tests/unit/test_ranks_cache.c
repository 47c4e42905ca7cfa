/*
 * test_ranks_cache.c — ranks.c's look-up caches under load: many processes, two
 * devices each, steps spanning commits and both devices, hundreds of
 * collective instances open at once (the instance hash's slots shifting as
 * they close), a transaction rolled back mid-session and the file reopened
 * mid-session. Every row of rk_ops, rk_steps, rk_devsteps, rk_coll and
 * rk_coll_ranks is checked against sums computed here from the entries sent.
 *
 * The timeline: process p, group g (step g / 4, device 1 + g % 2: a step's
 * groups on a device straddle commits), base time
 * T = T0 + 1000 g + 10 p:
 *   matmul    (compute)    [T,       T + 100)
 *   allreduce (collective) [T + 50,  T + 250)  overlapped 50 + 50: exposed 100
 *   matmul    (compute)    [T + 200, T + 300)
 *   memcpy    (memory)     [T + 300, T + 350)
 *   isend     (p2p comm)   [T + 400, T + 500)  exposed 100
 *   broadcast (collective) [T + 600, T + 700)  exposed 100, matched by ext comm
 *                                              (one per group, scattered) + seq 0
 * Process p sends its groups LAG * p rounds after process 0, so each
 * collective instance (matched by occurrence) waits for process NP - 1, the
 * last to arrive, 10 ns after process NP - 2. Up to 770 instances are open
 * at once, some of their keys in the same hash slots.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "proto.h"
#include "ranks.h"
#include "schema.h"

TestSuite(ranks_cache, .timeout = 120);

#define NP  12  /* processes 0..NP-1 */
#define NG  400 /* groups per process */
#define NSt (NG / 4)
#define LAG 35      /* rounds process p lags behind process p - 1 */
#define T0  1000000 /* no start is 0: 0 marks a sum not begun */

enum { OP_MATMUL = 1, OP_ALLREDUCE, OP_ISEND, OP_MEMCPY, OP_BCAST, NOPS };

/* What the tables must hold, computed from the entries sent and committed. */
struct xop {
    int64_t calls, total, exposed, begin, end;
};
struct xstep {
    int64_t begin, end, cat[PROTO_NCAT], exposed, coll, waited, last, caused;
};
struct xdstep {
    int64_t begin, end, cat[PROTO_NCAT], exposed, first, last;
};
struct xcoll {
    int64_t instances, skew;
};
struct xcollr {
    int64_t instances, waited, last;
};

static struct xop xops[NP][3][NOPS];
static struct xstep xsteps[NP][NSt];
static struct xdstep xdsteps[NP][NSt][3];
static struct xcoll xcoll[NOPS][NSt];
static struct xcollr xcollr[NOPS][NP][NSt];
static int64_t rowid;

static enum proto_cat cat_of(int op)
{
    return op == OP_MATMUL   ? PROTO_CAT_COMPUTE
           : op == OP_MEMCPY ? PROTO_CAT_MEMORY
                             : PROTO_CAT_COMM;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Sends one entry; counts it in the expected sums when it is to be committed. */
static void entry(struct ranks *r, int p, int g, int op, int64_t start, int64_t dur, bool counted)
{
    int st = g / 4, dev = 1 + g % 2;
    struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ,
                          .comm = ((uint64_t)g + 1) * 0x9e3779b97f4a7c15ull >> 3,
                          .seq = 0};
    enum proto_cat c = cat_of(op);
    struct proto_entry e = {.op_id = (uint32_t)op,
                            .step = (uint64_t)st,
                            .start_ns = (uint64_t)start,
                            .dur_ns = (uint64_t)dur};
    int64_t exposed = c == PROTO_CAT_COMM ? 100 : 0;

    cr_assert_eq(ranks_entry(r, p, &e, (uint32_t)dev, op == OP_BCAST ? &x : NULL, ++rowid), 0);
    if (!counted)
        return;
    struct xop *o = &xops[p][dev][op];
    struct xstep *s = &xsteps[p][st];
    struct xdstep *d = &xdsteps[p][st][dev];
    o->begin = o->calls++ == 0 ? start : min64(o->begin, start);
    o->end = max64(o->end, start + dur);
    o->total += dur;
    o->exposed += exposed;
    s->begin = s->begin == 0 ? start : min64(s->begin, start);
    s->end = max64(s->end, start + dur);
    s->cat[c] += dur;
    s->exposed += exposed;
    d->begin = d->begin == 0 ? start : min64(d->begin, start);
    d->end = max64(d->end, start + dur);
    d->cat[c] += dur;
    d->exposed += exposed;
    d->first = d->first == 0 ? rowid : min64(d->first, rowid);
    d->last = max64(d->last, rowid);
    if (op == OP_ALLREDUCE || op == OP_BCAST) {
        /* the last arrival is process NP - 1's, 10 (NP - 1 - p) ns later */
        int64_t wait = min64(10 * (NP - 1 - p), dur), skew = 10 * (NP - 1);
        s->coll++;
        s->waited += wait;
        xcollr[op][p][st].instances++;
        xcollr[op][p][st].waited += wait;
        if (p == NP - 1) {
            s->last++;
            s->caused += min64(skew, dur); /* process 0's wait, the longest */
            xcollr[op][p][st].last++;
            xcoll[op][st].instances++;
            xcoll[op][st].skew += skew;
        }
    }
}

static void group(struct ranks *r, int p, int g)
{
    int64_t t = T0 + 1000 * (int64_t)g + 10 * (int64_t)p;

    entry(r, p, g, OP_MATMUL, t, 100, true);
    entry(r, p, g, OP_ALLREDUCE, t + 50, 200, true);
    entry(r, p, g, OP_MATMUL, t + 200, 100, true);
    entry(r, p, g, OP_MEMCPY, t + 300, 50, true);
    entry(r, p, g, OP_ISEND, t + 400, 100, true);
    entry(r, p, g, OP_BCAST, t + 600, 100, true);
}

static sqlite3 *many_procs_db(void)
{
    sqlite3 *db;
    char sql[256];

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    harness_db_exec(db, "INSERT INTO ops VALUES (1, 'matmul', 'compute'), (2, 'allreduce', 'comm'),"
                        " (3, 'isend', 'comm'), (4, 'memcpy', 'memory'), (5, 'broadcast', 'comm')");
    for (int p = 0; p < NP; p++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO processes(id, rank, world, started_ns) VALUES (%d, %d, %d, 0)", p, p,
                 NP);
        harness_db_exec(db, sql);
    }
    return db;
}

static void check_tables(sqlite3 *db)
{
    sqlite3_stmt *st;
    int n = 0, want = 0;

    /* rk_ops */
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT process_id, device_id, op_id, calls, total_ns,"
                                    " exposed_ns, begin_ns, end_ns FROM rk_ops",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const struct xop *o =
            &xops[sqlite3_column_int(st, 0)][sqlite3_column_int(st, 1)][sqlite3_column_int(st, 2)];
        cr_expect_eq(sqlite3_column_int64(st, 3), o->calls);
        cr_expect_eq(sqlite3_column_int64(st, 4), o->total);
        cr_expect_eq(sqlite3_column_int64(st, 5), o->exposed);
        cr_expect_eq(sqlite3_column_int64(st, 6), o->begin);
        cr_expect_eq(sqlite3_column_int64(st, 7), o->end);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NP * 2 * (NOPS - 1));

    /* rk_steps */
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT process_id, step, begin_ns, end_ns, compute_ns,"
                                    " comm_ns, memory_ns, exposed_ns, coll, waited_ns,"
                                    " last_count, caused_ns FROM rk_steps",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const struct xstep *s = &xsteps[sqlite3_column_int(st, 0)][sqlite3_column_int(st, 1)];
        cr_expect_eq(sqlite3_column_int64(st, 2), s->begin);
        cr_expect_eq(sqlite3_column_int64(st, 3), s->end);
        cr_expect_eq(sqlite3_column_int64(st, 4), s->cat[PROTO_CAT_COMPUTE]);
        cr_expect_eq(sqlite3_column_int64(st, 5), s->cat[PROTO_CAT_COMM]);
        cr_expect_eq(sqlite3_column_int64(st, 6), s->cat[PROTO_CAT_MEMORY]);
        cr_expect_eq(sqlite3_column_int64(st, 7), s->exposed);
        cr_expect_eq(sqlite3_column_int64(st, 8), s->coll);
        cr_expect_eq(sqlite3_column_int64(st, 9), s->waited);
        cr_expect_eq(sqlite3_column_int64(st, 10), s->last);
        cr_expect_eq(sqlite3_column_int64(st, 11), s->caused);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NP * NSt);

    /* rk_devsteps */
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT process_id, step, device_id, begin_ns, end_ns,"
                                    " compute_ns, comm_ns, memory_ns, exposed_ns, first_row,"
                                    " last_row FROM rk_devsteps",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const struct xdstep *d = &xdsteps[sqlite3_column_int(st, 0)][sqlite3_column_int(st, 1)]
                                         [sqlite3_column_int(st, 2)];
        cr_expect_eq(sqlite3_column_int64(st, 3), d->begin);
        cr_expect_eq(sqlite3_column_int64(st, 4), d->end);
        cr_expect_eq(sqlite3_column_int64(st, 5), d->cat[PROTO_CAT_COMPUTE]);
        cr_expect_eq(sqlite3_column_int64(st, 6), d->cat[PROTO_CAT_COMM]);
        cr_expect_eq(sqlite3_column_int64(st, 7), d->cat[PROTO_CAT_MEMORY]);
        cr_expect_eq(sqlite3_column_int64(st, 8), d->exposed);
        cr_expect_eq(sqlite3_column_int64(st, 9), d->first);
        cr_expect_eq(sqlite3_column_int64(st, 10), d->last);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NP * NSt * 2);

    /* rk_coll: every instance complete */
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT op_id, step, instances, partial, skew_ns, skew_max_ns"
                                    " FROM rk_coll",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const struct xcoll *c = &xcoll[sqlite3_column_int(st, 0)][sqlite3_column_int(st, 1)];
        cr_expect_eq(sqlite3_column_int64(st, 2), c->instances);
        cr_expect_eq(sqlite3_column_int64(st, 3), 0);
        cr_expect_eq(sqlite3_column_int64(st, 4), c->skew);
        cr_expect_eq(sqlite3_column_int64(st, 5), 10 * (NP - 1));
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, 2 * NSt);

    /* rk_coll_ranks */
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT op_id, process_id, step, instances, waited_ns,"
                                    " last_count FROM rk_coll_ranks",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const struct xcollr *c = &xcollr[sqlite3_column_int(st, 0)][sqlite3_column_int(st, 1)]
                                        [sqlite3_column_int(st, 2)];
        cr_expect_eq(sqlite3_column_int64(st, 3), c->instances);
        cr_expect_eq(sqlite3_column_int64(st, 4), c->waited);
        cr_expect_eq(sqlite3_column_int64(st, 5), c->last);
        n++;
    }
    sqlite3_finalize(st);
    for (int op = 0; op < NOPS; op++)
        for (int p = 0; p < NP; p++)
            for (int s = 0; s < NSt; s++)
                want += xcollr[op][p][s].instances > 0;
    cr_expect_eq(n, want);
    cr_expect_eq(want, 2 * NP * NSt);
}

/*
 * Rounds: in round k process p sends its group k - LAG p. A commit every 7
 * rounds (a step spans commits), a transaction rolled back at round 100 (its
 * entries, compute and memory only, never reach the tables: exposure is not
 * affected, being apart from every comm entry in time), the file reopened at
 * round 150.
 */
Test(ranks_cache, many_ranks_devices_steps_a_rollback_and_a_reopen)
{
    sqlite3 *db = many_procs_db();
    struct ranks *r;
    int rounds = NG + LAG * (NP - 1);

    memset(xops, 0, sizeof(xops));
    memset(xsteps, 0, sizeof(xsteps));
    memset(xdsteps, 0, sizeof(xdsteps));
    memset(xcoll, 0, sizeof(xcoll));
    memset(xcollr, 0, sizeof(xcollr));
    rowid = 0;
    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    for (int k = 0; k < rounds; k++) {
        for (int p = 0; p < NP; p++)
            if (k - LAG * p >= 0 && k - LAG * p < NG)
                group(r, p, k - LAG * p);
        if (k % 7 == 6 || k == 99 || k == 149) {
            cr_assert_eq(ranks_flush(r), 0);
            harness_db_exec(db, "COMMIT");
            harness_db_exec(db, "BEGIN");
        }
        if (k == 99) { /* rolled back: [T + 800, T + 950) of each group sent this round */
            for (int p = 0; p < NP; p++) {
                int g = k - LAG * p;
                int64_t t = T0 + 1000 * (int64_t)g + 10 * (int64_t)p;
                if (g < 0 || g >= NG)
                    continue;
                entry(r, p, g, OP_MATMUL, t + 800, 100, false);
                entry(r, p, g, OP_MEMCPY, t + 900, 50, false);
            }
            harness_db_exec(db, "ROLLBACK");
            ranks_discard(r);
            harness_db_exec(db, "BEGIN");
        }
        if (k == 149) { /* reopened: what the commits saved goes on */
            harness_db_exec(db, "COMMIT");
            ranks_free(r);
            cr_assert_not_null(r = ranks_new(db));
            cr_assert_eq(ranks_load(r), 0);
            harness_db_exec(db, "BEGIN");
        }
    }
    cr_assert_eq(ranks_finish(r), 0);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    check_tables(db);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 0);
    cr_expect_eq(
        harness_db_one(db, "SELECT coalesce(max(value), 0) FROM info WHERE key = 'ranks_late'"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks'"),
                 2); /* the rollback */
    ranks_free(r);
    sqlite3_close(db);
}

/*
 * Keys too wide for the flush's radix sort (steps past 2^40, op ids past
 * 2^16, a device id past 2^20: qsort then): every row still written once,
 * with its sums. Three processes, ten steps, a compute entry and a
 * collective per step each.
 */
Test(ranks_cache, wide_keys_are_sorted_too)
{
    sqlite3 *db;
    struct ranks *r;
    const uint64_t s0 = 1ull << 40;
    const uint32_t dev = 1u << 21;
    int64_t row = 0;

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    harness_db_exec(
        db, "INSERT INTO ops VALUES (70001, 'matmul', 'compute'), (70002, 'allreduce', 'comm');"
            "INSERT INTO processes(id, rank, world, started_ns) VALUES (1, 0, 3, 0),"
            " (2, 1, 3, 0), (3, 2, 3, 0)");
    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    for (uint64_t s = 0; s < 10; s++)
        for (int64_t p = 1; p <= 3; p++) {
            struct proto_entry c = {
                .op_id = 70001, .step = s0 + s, .start_ns = T0 + 1000 * s, .dur_ns = 100};
            struct proto_entry a = {
                .op_id = 70002, .step = s0 + s, .start_ns = T0 + 1000 * s + 500, .dur_ns = 100};
            cr_assert_eq(ranks_entry(r, p, &c, dev, NULL, ++row), 0);
            cr_assert_eq(ranks_entry(r, p, &a, dev, NULL, ++row), 0);
        }
    cr_assert_eq(ranks_finish(r), 0);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_ops"), 6);
    cr_expect_eq(harness_db_one(db, "SELECT sum(calls) FROM rk_ops"), 60);
    cr_expect_eq(harness_db_one(db, "SELECT sum(exposed_ns) FROM rk_ops"), 3000);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_steps"), 30);
    cr_expect_eq(harness_db_one(db, "SELECT sum(compute_ns + comm_ns) FROM rk_steps"), 6000);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_devsteps"), 30);
    cr_expect_eq(harness_db_one(db, "SELECT min(step) FROM rk_devsteps"), (int64_t)s0);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_coll"), 10);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 10);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_coll_ranks"), 30);
    cr_expect_eq(harness_db_one(db, "SELECT sum(last_count) FROM rk_coll_ranks"), 10);
    ranks_free(r);
    sqlite3_close(db);
}
