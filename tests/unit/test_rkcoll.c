/*
 * test_rkcoll.c — collective matching (daemon/writer/rkcoll.c) when one rank's
 * entries run far ahead of another's, when arrivals are lost, when the file
 * is reopened with tens of thousands of instances open, and at the cap of
 * RANKS_OPEN open instances (issue 27 item 1).
 *
 * Two processes (world 2) make N collectives of one op, keyed by ext comm 5
 * + seq i; process 0 starts collective i at T0 + 1000 i, process 1 GAP ns
 * later, each lasting DUR: process 0 waits GAP in each, process 1 arrives
 * last and causes GAP. Process 0 sends all of its entries before process 1
 * sends any, so every instance is open at once before the first completes.
 * The expected figures are worked out here from that timeline.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <msgpack.h>

#include "harness.h"
#include "proto.h"
#include "ranks.h"
#include "ranks_query.h"
#include "schema.h"

TestSuite(ranks_match, .timeout = 120);

#define T0   1000000
#define GAP  7
#define DUR  100
#define COMM 5

static int64_t rowid;

static sqlite3 *two_procs_db(void)
{
    sqlite3 *db;

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    harness_db_exec(db, "INSERT INTO ops VALUES (1, 'allreduce', 'comm')");
    harness_db_exec(db, "INSERT INTO processes(id, rank, world, started_ns) VALUES (0, 0, 2, 0),"
                        " (1, 1, 2, 0)");
    rowid = 0;
    return db;
}

static struct ranks *open_ranks(sqlite3 *db, bool fresh)
{
    struct ranks *r = ranks_new(db);

    cr_assert_not_null(r);
    harness_db_exec(db, "BEGIN");
    if (fresh)
        cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    return r;
}

/* Process p's arrival at collective i. */
static void arrive(struct ranks *r, int p, int64_t i)
{
    struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ | PROTO_EXT_COMM_SIZE,
                          .comm = COMM,
                          .seq = (uint64_t)i,
                          .comm_size = 2};
    struct proto_entry e = {
        .op_id = 1, .step = 0, .start_ns = (uint64_t)(T0 + 1000 * i + GAP * p), .dur_ns = DUR};

    cr_assert_eq(ranks_entry(r, p, &e, 0, &x, ++rowid), 0);
}

/* Process p's arrivals at collectives from..to-1, committing every `every`. */
static void arrive_all(struct ranks *r, sqlite3 *db, int p, int64_t from, int64_t to, int every)
{
    for (int64_t i = from; i < to; i++) {
        arrive(r, p, i);
        if ((i + 1) % every == 0) {
            cr_assert_eq(ranks_flush(r), 0);
            harness_db_exec(db, "COMMIT");
            harness_db_exec(db, "BEGIN");
        }
    }
}

static void finish(struct ranks *r, sqlite3 *db)
{
    cr_assert_eq(ranks_finish(r), 0);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 0);
}

/* rk_coll's instances and partial, both processes' waits, process 1's caused time. */
static void expect_figures(sqlite3 *db, int64_t instances, int64_t partial, int64_t complete,
                           int64_t capped)
{
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), instances);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), partial);
    /* a complete instance: process 0 waited GAP, process 1 arrived last and caused GAP */
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 0"),
                 GAP * complete);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 1"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = 1"),
                 GAP * complete);
    cr_expect_eq(harness_db_one(db, "SELECT sum(last_count) FROM rk_steps WHERE process_id = 1"),
                 complete);
    cr_expect_eq(
        harness_db_one(db, "SELECT coalesce(max(value), 0) FROM info WHERE key = 'ranks_capped'"),
        capped);
}

/* The value of key in map m, or NULL. */
static const msgpack_object *get(const msgpack_object *m, const char *key)
{
    if (m == NULL || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    return NULL;
}

/* The report's queries' satsum() (query.c registers it on its connections): a plain sum here. */
static void satsum_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    int64_t *s = sqlite3_aggregate_context(ctx, sizeof(*s));

    (void)argc;
    if (s != NULL)
        *s += sqlite3_value_int64(argv[0]);
}

static void satsum_final(sqlite3_context *ctx)
{
    int64_t *s = sqlite3_aggregate_context(ctx, 0);

    sqlite3_result_int64(ctx, s != NULL ? *s : 0);
}

/* The report's completeness.collectives_closed_at_cap, and whether its verdict says so. */
static void expect_report_says_capped(sqlite3 *db, uint64_t capped)
{
    struct ranks_filter f = {0};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked u;
    const msgpack_object *v, *c;
    char err[256] = "", want[128];

    cr_assert_eq(sqlite3_create_function(db, "satsum", 1, SQLITE_UTF8, NULL, NULL, satsum_step,
                                         satsum_final),
                 SQLITE_OK);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, RANKS_QUERY_KEYS);
    cr_assert_eq(ranks_query(db, &f, &pk, err, sizeof(err)), 0, "%s", err);
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    c = get(get(&u.data, "completeness"), "collectives_closed_at_cap");
    cr_assert_not_null(c);
    cr_expect_eq(c->via.u64, capped);
    c = get(get(&u.data, "completeness"), "collectives_open_cap");
    cr_assert_not_null(c);
    cr_expect_eq(c->via.u64, RANKS_OPEN);
    v = get(&u.data, "verdict");
    cr_assert(v != NULL && v->type == MSGPACK_OBJECT_STR);
    snprintf(want, sizeof(want), "%llu collective instances closed unfinished",
             (unsigned long long)capped);
    cr_expect_eq(memmem(v->via.str.ptr, v->via.str.size, want, strlen(want)) != NULL, capped > 0,
                 "verdict: %.*s", (int)v->via.str.size, v->via.str.ptr);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* 60,000 open at once (the old matcher closed them past 1,024): all complete, exact. */
Test(ranks_match, one_rank_sixty_thousand_ahead)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r = open_ranks(db, true);

    arrive_all(r, db, 0, 0, 60000, 5000);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 60000);
    arrive_all(r, db, 1, 0, 60000, 5000);
    finish(r, db);
    expect_figures(db, 60000, 0, 60000, 0);
    expect_report_says_capped(db, 0);
    ranks_free(r);
    sqlite3_close(db);
}

/* The same with the file closed and reopened (rk_open read back) while 50,000 are open, and
 * again halfway through process 1's arrivals. */
Test(ranks_match, reopened_with_fifty_thousand_open)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r = open_ranks(db, true);

    arrive_all(r, db, 0, 0, 50000, 1000);
    harness_db_exec(db, "COMMIT");
    ranks_free(r);
    r = open_ranks(db, false);
    arrive_all(r, db, 1, 0, 25000, 1000);
    harness_db_exec(db, "COMMIT");
    ranks_free(r);
    r = open_ranks(db, false);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 25000);
    arrive_all(r, db, 1, 25000, 50000, 1000);
    finish(r, db);
    expect_figures(db, 50000, 0, 50000, 0);
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks'"), 1,
                 "still exact");
    ranks_free(r);
    sqlite3_close(db);
}

/* Process 1's entries of every 7th collective lost: those instances are partial (closed at the
 * end), the others exact. */
Test(ranks_match, lost_arrivals_leave_partial_instances)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r = open_ranks(db, true);
    int64_t n = 10000, lost = 0;

    arrive_all(r, db, 0, 0, n, 1000);
    for (int64_t i = 0; i < n; i++) {
        if (i % 7 == 3) {
            lost++;
            continue;
        }
        arrive(r, 1, i);
    }
    finish(r, db);
    expect_figures(db, n, lost, n - lost, 0);
    ranks_free(r);
    sqlite3_close(db);
}

/*
 * RANKS_OPEN + 1 open at once: the oldest (collective 0) is closed at the cap, partial, and
 * counted; process 1's arrivals at the others complete them. Its late arrival at collective 0
 * opens an instance of its own, partial too: never paired with another collective's.
 */
Test(ranks_match, the_cap_closes_the_oldest_and_counts_it)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r = open_ranks(db, true);

    arrive_all(r, db, 0, 0, RANKS_OPEN + 1, 8192);
    arrive_all(r, db, 1, 1, RANKS_OPEN + 1, 8192);
    cr_assert_eq(ranks_flush(r), 0);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 0);
    arrive(r, 1, 0);
    finish(r, db);
    /* process 1's lone arrival at collective 0: last (alone), caused nothing */
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), RANKS_OPEN + 2);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 2);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 0"),
                 GAP * (int64_t)RANKS_OPEN);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = 1"),
                 GAP * (int64_t)RANKS_OPEN);
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks_capped'"), 1);
    expect_report_says_capped(db, 1);
    ranks_free(r);
    sqlite3_close(db);
}

/* ---- non-blocking collectives: waits in their completion calls -------------------- */

enum { NB_IALLREDUCE = 2, NB_WAIT, NB_COMPLETED, NB_WAITALL };

/* An entry of process p: op, [start, start + dur), ext comm 9 + seq (seq < 0: none), id,
 * parent (0: none). */
static void nb_entry(struct ranks *r, int p, int op, int64_t start, int64_t dur, int64_t seq,
                     uint64_t id, uint64_t parent)
{
    struct proto_ext x = {.comm = 9, .comm_size = 2, .id = id, .parent = parent};
    struct proto_entry e = {
        .op_id = (uint32_t)op, .step = 0, .start_ns = (uint64_t)start, .dur_ns = (uint64_t)dur};

    if (seq >= 0) {
        x.has = PROTO_EXT_COMM | PROTO_EXT_SEQ | PROTO_EXT_COMM_SIZE;
        x.seq = (uint64_t)seq;
    }
    x.has |= (id != 0 ? PROTO_EXT_ID : 0) | (parent != 0 ? PROTO_EXT_PARENT : 0);
    cr_assert_eq(ranks_entry(r, p, &e, 0, x.has != 0 ? &x : NULL, ++rowid), 0);
}

static struct ranks *nb_reopen(struct ranks *r, sqlite3 *db)
{
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    ranks_free(r);
    return open_ranks(db, false);
}

/*
 * Four MPI_Iallreduce on 2 processes: process 0 early, waiting in its completion calls
 * (an MPI_Wait; an MPI_Waitall completing two, the second as a tcmpi.completed whose parent
 * is the Waitall), process 1 late. Each rank's wait is the part of its completion call
 * before the last arrival; the late rank caused the longest wait of the other. The file is
 * reopened with instances open in every state (completed arrival saved, completion owed).
 */
Test(ranks_match, nonblocking_waits_are_in_their_completion_calls)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r;

    harness_db_exec(db,
                    "INSERT INTO ops VALUES (2, 'MPI_Iallreduce', 'comm'), (3, 'MPI_Wait', 'wait'),"
                    " (4, 'tcmpi.completed', 'wait'), (5, 'MPI_Waitall', 'wait')");
    r = open_ranks(db, true);
    /* seq 0: p0 arrives at 1000, waits in [1100, 6000); p1 arrives at 5000, waits from 5020 */
    nb_entry(r, 0, NB_IALLREDUCE, 1000, 10, 0, 0, 0);
    nb_entry(r, 1, NB_IALLREDUCE, 5000, 10, 0, 0, 0);
    nb_entry(r, 0, NB_WAIT, 1100, 4900, 0, 0, 0); /* waited 5000 - 1100 = 3900 */
    nb_entry(r, 0, NB_WAIT, 1100, 4900, 0, 0, 0); /* the same again: no second completion */
    nb_entry(r, 1, NB_WAIT, 5020, 980, -1, 0, 0); /* names no collective: no completion */
    r = nb_reopen(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 2,
                 "seq 0 owes p1's completion");
    nb_entry(r, 1, NB_WAIT, 5020, 980, 0, 0, 0); /* waited 0: after the last arrival */
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_coll"), 0, "not yet flushed");
    /* seq 1, 2: p0 at 10000 and 10010, one Waitall [10100, 20000) completes both */
    nb_entry(r, 0, NB_IALLREDUCE, 10000, 10, 1, 0, 0);
    nb_entry(r, 0, NB_IALLREDUCE, 10010, 10, 2, 0, 0);
    nb_entry(r, 0, NB_WAITALL, 10100, 9900, 1, 7, 0); /* waited 15000 - 10100 = 4900 */
    nb_entry(r, 0, NB_COMPLETED, 20000, 0, 2, 0, 7);  /* waited 16000 - 10100 = 5900 */
    nb_entry(r, 0, NB_COMPLETED, 20000, 0, 2, 0, 7);  /* again: nothing */
    nb_entry(r, 1, NB_IALLREDUCE, 15000, 10, 1, 0, 0);
    r = nb_reopen(r, db);
    nb_entry(r, 1, NB_WAIT, 15100, 1900, 1, 0, 0);
    nb_entry(r, 1, NB_IALLREDUCE, 16000, 10, 2, 0, 0);
    nb_entry(r, 1, NB_WAIT, 17000, 1000, 2, 0, 0);
    nb_entry(r, 1, NB_WAIT, 17000, 1000, 4, 0, 0); /* an instance never opened: nothing */
    /* seq 3: p0's arrival saved, then its completion (the saved row written again), then the
     * file reopened before p1 comes */
    nb_entry(r, 0, NB_IALLREDUCE, 30000, 10, 3, 0, 0);
    cr_assert_eq(ranks_flush(r), 0);
    nb_entry(r, 0, NB_WAIT, 30100, 9900, 3, 0, 0); /* waited 35000 - 30100 = 4900 */
    r = nb_reopen(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT flags FROM rk_open WHERE k2 = 3"), 3,
                 "completed, saved");
    nb_entry(r, 1, NB_IALLREDUCE, 35000, 10, 3, 0, 0);
    nb_entry(r, 1, NB_WAIT, 35100, 900, 3, 0, 0);
    finish(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 4);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(skew_ns) FROM rk_coll"), 4000 + 5000 + 5990 + 5000);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 0"),
                 3900 + 4900 + 5900 + 4900);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 1"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = 1"),
                 3900 + 4900 + 5900 + 4900);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = 0"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(last_count) FROM rk_steps WHERE process_id = 1"),
                 4);
    cr_expect_eq(
        harness_db_one(db, "SELECT sum(waited_ns) FROM rk_coll_ranks WHERE process_id = 0"),
        3900 + 4900 + 5900 + 4900);
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks'"), 1,
                 "still exact");
    ranks_free(r);
    sqlite3_close(db);
}

/*
 * The torch bridge's DDP buckets: a name ending in "_async" is a non-blocking arrival (its
 * launch), completed by the wait entry with its comm + seq (its share of DDP's finalize).
 * Process 0 launches two buckets at 1000 and 2000 and waits from 3000: [3000, 8000) for
 * bucket 0, [8000, 9000) for bucket 1; process 1 launches them at 7000 and 7500 and waits
 * [7600, 8000), [8000, 9000). Only p0's wait for bucket 0 before p1's launch is a wait:
 * 7000 - 3000; the time p0 computed after its launches (1000..3000) is none, nor is bucket
 * 1's (p1 launched it before p0 waited for it). "allreduce" without the suffix: blocking.
 */
Test(ranks_match, an_async_launch_waits_in_its_wait_entry)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r;

    harness_db_exec(db, "INSERT INTO ops VALUES (2, 'allreduce_async', 'comm'),"
                        " (3, 'allreduce_wait', 'wait')"); /* 1: allreduce */
    r = open_ranks(db, true);
    nb_entry(r, 0, 2, 1000, 30, 0, 0, 0);
    nb_entry(r, 0, 2, 2000, 30, 1, 0, 0);
    nb_entry(r, 1, 2, 7000, 30, 0, 0, 0);
    nb_entry(r, 1, 2, 7500, 30, 1, 0, 0);
    cr_assert_eq(ranks_flush(r), 0); /* saved: closing them below deletes the rows */
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 4, "every rank's wait owed");
    nb_entry(r, 0, 3, 3000, 5000, 0, 0, 0);
    nb_entry(r, 0, 3, 8000, 1000, 1, 0, 0);
    nb_entry(r, 1, 3, 7600, 400, 0, 0, 0);
    nb_entry(r, 1, 3, 8000, 1000, 1, 0, 0);
    /* seq 2, blocking: p0 [10000, 12000), p1 [11000, 12000): p0 waited 1000 */
    nb_entry(r, 0, 1, 10000, 2000, 2, 0, 0);
    nb_entry(r, 1, 1, 11000, 1000, 2, 0, 0);
    finish(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 3);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 0"),
                 4000 + 1000);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = 1"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = 1"),
                 4000 + 1000);
    ranks_free(r);
    sqlite3_close(db);
}

/* A completion that never comes (the request freed): the instance closes when the session
 * ends, complete (every rank arrived), that rank's wait 0. */
Test(ranks_match, a_completion_that_never_comes)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r;

    harness_db_exec(
        db, "INSERT INTO ops VALUES (2, 'MPI_Iallreduce', 'comm'), (3, 'MPI_Wait', 'wait')");
    r = open_ranks(db, true);
    nb_entry(r, 0, NB_IALLREDUCE, 1000, 10, 0, 0, 0);
    nb_entry(r, 1, NB_IALLREDUCE, 5000, 10, 0, 0, 0);
    nb_entry(r, 1, NB_WAIT, 5020, 980, 0, 0, 0);
    cr_assert_eq(ranks_flush(r), 0);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 2,
                 "open: p0's completion owed");
    finish(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 1);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_steps"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(caused_ns) FROM rk_steps"), 0);
    ranks_free(r);
    sqlite3_close(db);
}

/* ---- randomized: the matcher against the rule applied here ------------------------- */

#define RND_N      3000 /* collectives */
#define RND_P      3    /* processes, world 3 */
#define RND_EVENTS (2 * RND_N * RND_P)

struct rnd_ev {
    int p;
    int64_t i;
    bool completion;
};

struct rnd_coll {
    bool nb, lost[RND_P], nodone[RND_P];
    int64_t start[RND_P], dur[RND_P], wb[RND_P], we[RND_P];
};

static struct rnd_coll rc[RND_N];
static struct rnd_ev stream[RND_P][2 * RND_N], merged[RND_EVENTS];

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(uint64_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state % n;
}

/* The figures the rule gives (PROTOCOL.md "report option analysis"). */
static void rnd_expect(int64_t *instances, int64_t *partial, int64_t waited[RND_P],
                       int64_t caused[RND_P])
{
    for (int64_t i = 0; i < RND_N; i++) {
        const struct rnd_coll *c = &rc[i];
        int64_t first = INT64_MAX, last = -1, w[RND_P] = {0}, most = 0;
        int li = -1, n = 0;

        for (int p = 0; p < RND_P; p++) {
            if (c->lost[p])
                continue;
            n++;
            first = c->start[p] < first ? c->start[p] : first;
            if (c->start[p] > last)
                last = c->start[p], li = p;
        }
        (*instances)++;
        *partial += n < RND_P;
        for (int p = 0; p < RND_P; p++) {
            if (c->lost[p])
                continue;
            if (!c->nb)
                w[p] = last - c->start[p] < c->dur[p] ? last - c->start[p] : c->dur[p];
            else if (!c->nodone[p] && last > c->wb[p])
                w[p] = (last < c->we[p] ? last : c->we[p]) - c->wb[p];
            waited[p] += w[p];
            if (p != li && w[p] > most)
                most = w[p];
        }
        caused[li] += most; /* the longest wait of the others, blocking or not */
    }
}

/*
 * 3,000 collectives on 2 communicators of 3 processes, a third of them non-blocking, each
 * process's entries in its own order (a completion 0 to 3 collectives after its I* call),
 * the three streams interleaved in runs of up to 3,000 entries (so thousands of instances
 * are open at once), 1 % of process 2's arrivals lost, 1 % of process 1's completions
 * lost, the file committed and reopened at random points: every figure as the rule says.
 */
Test(ranks_match, random_interleavings_losses_and_reopens)
{
    sqlite3 *db = two_procs_db();
    struct ranks *r;
    size_t len[RND_P] = {0}, pos[RND_P] = {0}, n = 0;
    int64_t instances = 0, partial = 0, waited[RND_P] = {0}, caused[RND_P] = {0};
    char sql[128];

    harness_db_exec(
        db, "INSERT INTO ops VALUES (2, 'MPI_Iallreduce', 'comm'), (3, 'MPI_Wait', 'wait')");
    harness_db_exec(db, "UPDATE processes SET world = 3");
    harness_db_exec(db, "INSERT INTO processes(id, rank, world, started_ns) VALUES (2, 2, 3, 0)");
    for (int64_t i = 0; i < RND_N; i++) {
        struct rnd_coll *c = &rc[i];
        c->nb = rnd(3) == 0;
        for (int p = 0; p < RND_P; p++) {
            c->start[p] = i * 100000 + 3 * (int64_t)rnd(1000) + p; /* no ties */
            c->dur[p] = c->nb ? 20 : 1 + (int64_t)rnd(4000);
            c->wb[p] = c->start[p] + 50 + (int64_t)rnd(2000);
            c->we[p] = c->wb[p] + (int64_t)rnd(5000);
            c->lost[p] = p == 2 && rnd(100) == 0;
            c->nodone[p] = c->nb && (c->lost[p] || (p == 1 && rnd(100) == 0));
        }
    }
    /* each process's stream: its arrivals in order, each completion a few later */
    for (int p = 0; p < RND_P; p++) {
        int64_t owed[RND_N], n_owed = 0;
        for (int64_t i = 0; i < RND_N; i++) {
            if (!rc[i].lost[p])
                stream[p][len[p]++] = (struct rnd_ev){p, i, false};
            if (rc[i].nb && !rc[i].nodone[p])
                owed[n_owed++] = i;
            for (int64_t k = 0; k < n_owed;)
                if (owed[k] + (int64_t)rnd(4) <= i || i == RND_N - 1) {
                    stream[p][len[p]++] = (struct rnd_ev){p, owed[k], true};
                    owed[k] = owed[--n_owed];
                } else {
                    k++;
                }
        }
    }
    while (pos[0] < len[0] || pos[1] < len[1] || pos[2] < len[2]) {
        int p = (int)rnd(RND_P);
        size_t run = 1 + rnd(rnd(4) == 0 ? 3000 : 50);
        for (; run > 0 && pos[p] < len[p]; run--)
            merged[n++] = stream[p][pos[p]++];
    }
    rnd_expect(&instances, &partial, waited, caused);

    r = open_ranks(db, true);
    for (size_t k = 0; k < n; k++) {
        const struct rnd_ev *ev = &merged[k];
        const struct rnd_coll *c = &rc[ev->i];
        struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ | PROTO_EXT_COMM_SIZE,
                              .comm = 1 + (uint64_t)ev->i % 2,
                              .seq = (uint64_t)ev->i / 2,
                              .comm_size = RND_P};
        struct proto_entry e = {.op_id = ev->completion ? 3 : c->nb ? 2 : 1};

        e.start_ns = (uint64_t)(ev->completion ? c->wb[ev->p] : c->start[ev->p]);
        e.dur_ns = (uint64_t)(ev->completion ? c->we[ev->p] - c->wb[ev->p] : c->dur[ev->p]);
        cr_assert_eq(ranks_entry(r, ev->p, &e, 0, &x, ++rowid), 0);
        if (rnd(1500) == 0) {
            cr_assert_eq(ranks_flush(r), 0);
            harness_db_exec(db, "COMMIT");
            if (rnd(2) == 0) {
                ranks_free(r);
                r = open_ranks(db, false);
            } else {
                harness_db_exec(db, "BEGIN");
            }
        }
    }
    finish(r, db);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), instances);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), partial);
    for (int p = 0; p < RND_P; p++) {
        snprintf(sql, sizeof(sql), "SELECT sum(waited_ns) FROM rk_steps WHERE process_id = %d", p);
        cr_expect_eq(harness_db_one(db, sql), waited[p], "process %d waited", p);
        snprintf(sql, sizeof(sql), "SELECT sum(caused_ns) FROM rk_steps WHERE process_id = %d", p);
        cr_expect_eq(harness_db_one(db, sql), caused[p], "process %d caused", p);
    }
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks'"), 1,
                 "still exact");
    cr_expect_gt(partial, 10, "some arrivals were lost");
    ranks_free(r);
    sqlite3_close(db);
}
