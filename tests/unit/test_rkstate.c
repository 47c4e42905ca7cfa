/*
 * test_rkstate.c — the rank aggregates' state saved at each commit
 * (rkstate.c): it stops at RK_SAVE_PEND intervals per device and says so,
 * and a writer that opens the file again goes on where the last commit left
 * off (open collective instances with their comm_size and arrivals).
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

TestSuite(ranks_state, .timeout = 60);

/*
 * The pending intervals are saved at each commit up to RK_SAVE_PEND per
 * device: a comm entry over 5,000 compute entries is not (info.ranks_state
 * 2: a reopen would mark the aggregates inexact) until it is counted.
 */
Test(ranks_state, too_many_pending_intervals_are_not_saved_and_say_so)
{
    sqlite3 *db;
    struct ranks *r;
    struct proto_entry e = {.op_id = 2, .step = 0, .start_ns = 0, .dur_ns = 10000000};
    int64_t row = 1;

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_op(r, 1, "matmul", "compute"), 0);
    cr_assert_eq(ranks_op(r, 2, "send", "comm"), 0); /* point-to-point: no collective */
    cr_assert_eq(ranks_process(r, 1, 1), 0);
    cr_assert_eq(ranks_entry(r, 1, &e, 1, NULL, row++), 0);
    for (uint64_t i = 1; i <= 5000; i++) {
        struct proto_entry c = {.op_id = 1, .start_ns = 1000 * i + 10, .dur_ns = 500};
        cr_assert_eq(ranks_entry(r, 1, &c, 1, NULL, row++), 0);
    }
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks_state'"), 2);
    /* the devices' rows (device -1 holds the process's union of top-level entries, rkcover) */
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_pend WHERE device_id >= 0"), 0);
    /* an entry after the comm entry's end: it is counted, the intervals dropped */
    harness_db_exec(db, "BEGIN");
    e = (struct proto_entry){.op_id = 1, .start_ns = 20000000, .dur_ns = 500};
    cr_assert_eq(ranks_entry(r, 1, &e, 1, NULL, row++), 0);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT value FROM info WHERE key = 'ranks_state'"), 1);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_pend WHERE device_id >= 0"), 1);
    cr_expect_eq(harness_db_one(db, "SELECT exposed_ns FROM rk_ops WHERE op_id = 2"),
                 10000000 - 5000 * 500);
    ranks_free(r);
    sqlite3_close(db);
}

/* One arrival of process pid at the collective (comm 9, seq 0); comm_size 0: not given. */
static void arrive(struct ranks *r, int64_t pid, uint64_t start, uint64_t comm_size, int64_t row)
{
    struct proto_entry e = {.op_id = 2, .step = 0, .start_ns = start, .dur_ns = 1000};
    struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ, .comm = 9, .seq = 0};

    if (comm_size != 0) {
        x.has |= PROTO_EXT_COMM_SIZE;
        x.comm_size = comm_size;
    }
    cr_assert_eq(ranks_entry(r, pid, &e, 1, &x, row), 0);
}

/* A file of three processes of a world of 3 and the ops matmul, allreduce. */
static sqlite3 *three_procs_db(void)
{
    sqlite3 *db;

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    harness_db_exec(db, "INSERT INTO ops VALUES (1, 'matmul', 'compute'), (2, 'allreduce', 'comm');"
                        "INSERT INTO processes(id, rank, world, started_ns) VALUES (1, 0, 3, 0),"
                        " (2, 1, 3, 0), (3, 2, 3, 0)");
    return db;
}

/*
 * An instance of a communicator of 2 (ext comm_size) in a world of 3: one
 * arrival saved at a commit, the file reopened, the second arrival completes
 * it (not partial) because rk_open kept the size it expects.
 */
Test(ranks_state, an_open_instance_keeps_its_comm_size_across_a_reopen)
{
    sqlite3 *db = three_procs_db();
    struct ranks *r;

    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    arrive(r, 1, 1000, 2, 1);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT comm_size FROM rk_open"), 2);
    ranks_free(r);

    cr_assert_not_null(r = ranks_new(db));
    cr_assert_eq(ranks_load(r), 0);
    harness_db_exec(db, "BEGIN");
    arrive(r, 2, 1500, 2, 2);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 1);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    /* process 1 started 500 ns before process 2 and lasted longer: it waited 500 ns */
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_coll_ranks"), 500);
    ranks_free(r);
    sqlite3_close(db);
}

/* Process pid's arrival at (comm 9, seq) of op 2, its entry lasting 1,000 ns. */
static void arrive_seq(struct ranks *r, int64_t pid, uint64_t seq, uint64_t start)
{
    struct proto_entry e = {.op_id = 2, .step = 0, .start_ns = start, .dur_ns = 1000};
    struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ, .comm = 9, .seq = seq};

    cr_assert_eq(ranks_entry(r, pid, &e, 1, &x, (int64_t)start), 0);
}

static void commit_ranks(sqlite3 *db, struct ranks *r)
{
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
}

/*
 * rk_open across commits that insert among its rows and delete closed
 * instances' (light ones) and commits that rewrite it (busy ones: more new
 * arrivals and closed instances than open ones): the same rows either way,
 * and a reopened file completes every instance exactly. World of 3, no
 * comm_size: each (comm 9, seq) completes at its third arrival.
 */
Test(ranks_state, rk_open_rewritten_or_updated_holds_the_open_arrivals)
{
    sqlite3 *db = three_procs_db();
    struct ranks *r;

    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    for (uint64_t s = 0; s < 5; s++) /* process 1 opens seq 0..4 at 1000, 1100, ... */
        arrive_seq(r, 1, s, 1000 + 100 * s);
    commit_ranks(db, r);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 5);
    cr_expect_eq(harness_db_one(db, "SELECT sum(start_ns) FROM rk_open"), 6000);
    cr_expect_eq(harness_db_one(db, "SELECT sum(arrival) FROM rk_open"), 0);

    /* light: one arrival more */
    harness_db_exec(db, "BEGIN");
    arrive_seq(r, 2, 0, 1050);
    commit_ranks(db, r);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 6);
    cr_expect_eq(harness_db_one(db, "SELECT arrival FROM rk_open WHERE k2 = 0 AND process_id = 2"),
                 1);

    /* busy: seq 0 and 1 close, process 2 opens seq 5..9 at 2000, 2100, ... */
    harness_db_exec(db, "BEGIN");
    arrive_seq(r, 3, 0, 1080);
    arrive_seq(r, 2, 1, 1150);
    arrive_seq(r, 3, 1, 1160);
    for (uint64_t s = 5; s < 10; s++)
        arrive_seq(r, 2, s, 2000 + 100 * (s - 5));
    commit_ranks(db, r);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 8);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open WHERE k2 < 2"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open WHERE process_id = 1"), 3);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open WHERE process_id = 2"), 5);
    cr_expect_eq(harness_db_one(db, "SELECT sum(start_ns) FROM rk_open"),
                 1200 + 1300 + 1400 + 11000);
    cr_expect_eq(harness_db_one(db, "SELECT sum(arrival) FROM rk_open"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 2);

    /* light: seq 2 closes (its row deleted), nothing new */
    harness_db_exec(db, "BEGIN");
    arrive_seq(r, 2, 2, 1250);
    arrive_seq(r, 3, 2, 1260);
    commit_ranks(db, r);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 7);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open WHERE k2 = 2"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 3);
    ranks_free(r);

    /* reopened: the rest complete from what rk_open kept */
    cr_assert_not_null(r = ranks_new(db));
    cr_assert_eq(ranks_load(r), 0);
    harness_db_exec(db, "BEGIN");
    for (uint64_t s = 3; s < 5; s++) {
        arrive_seq(r, 2, s, 1050 + 100 * s);
        arrive_seq(r, 3, s, 1060 + 100 * s);
    }
    for (uint64_t s = 5; s < 10; s++) {
        arrive_seq(r, 1, s, 2030 + 100 * (s - 5));
        arrive_seq(r, 3, s, 2060 + 100 * (s - 5));
    }
    commit_ranks(db, r);
    cr_expect_eq(harness_db_one(db, "SELECT count(*) FROM rk_open"), 0);
    cr_expect_eq(harness_db_one(db, "SELECT sum(instances) FROM rk_coll"), 10);
    cr_expect_eq(harness_db_one(db, "SELECT sum(partial) FROM rk_coll"), 0);
    /* waits: seq 0 80 + 30, seq 1..4 60 + 10 each, seq 5..9 60 + 30 each */
    cr_expect_eq(harness_db_one(db, "SELECT sum(waited_ns) FROM rk_coll_ranks"),
                 110 + 4 * 70 + 5 * 90);
    /* skew: seq 0 80, the others 60 */
    cr_expect_eq(harness_db_one(db, "SELECT sum(skew_ns) FROM rk_coll"), 80 + 9 * 60);
    cr_expect_eq(
        harness_db_one(db, "SELECT sum(instances) FROM rk_coll_ranks WHERE process_id = 3"), 10);
    ranks_free(r);
    sqlite3_close(db);
}
