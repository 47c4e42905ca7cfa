/*
 * test_rkcover.c — the union of top-level entries per (process, step)
 * (daemon/writer/rkcover.c) through the writer's API (ranks.h) on an in-memory
 * session file: rk_steps.covered_ns against the union computed here by
 * brute force (a bitmap of microseconds), with a commit after every entry,
 * a reopen of the file mid-step (the intervals are saved at each commit),
 * entries out of order, nested entries (ext parent) and two steps overlapping
 * in time.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "proto.h"
#include "ranks.h"
#include "schema.h"

TestSuite(rkcover, .timeout = 60);

#define NE   400  /* entries */
#define SPAN 3000 /* microseconds of each step */
#define US   1000 /* ns */
#define T0   1000000000ull

struct ent {
    uint64_t step, start, dur; /* in US, start from the step's own origin */
    bool nested;
};

/* A fixed pseudo-random script: two steps whose times overlap (step 1 starts at 2,000 us of
 * step 0's 3,000), entries of each in nearly increasing order, some nested, some zero-length. */
static void script(struct ent *e)
{
    uint64_t x = 88172645463325252ull;

    for (int i = 0; i < NE; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        e[i].step = (uint64_t)(i % 2);
        e[i].start = (uint64_t)i * (SPAN - 100) / NE + x % 37;
        e[i].dur = x % 5 == 0 ? 0 : 1 + (x >> 8) % 60;
        e[i].nested = (x >> 20) % 4 == 0;
    }
}

static uint64_t origin(uint64_t step)
{
    return step == 0 ? 0 : 2000;
}

/* The union of step's top-level entries, by a bitmap of microseconds. */
static uint64_t brute(const struct ent *e, uint64_t step)
{
    static bool on[2 * SPAN + 2000];
    uint64_t n = 0;

    memset(on, 0, sizeof(on));
    for (int i = 0; i < NE; i++)
        if (e[i].step == step && !e[i].nested)
            for (uint64_t t = 0; t < e[i].dur; t++)
                on[origin(step) + e[i].start + t] = true;
    for (size_t t = 0; t < sizeof(on); t++)
        n += on[t];
    return n * US;
}

static void run(bool reopen_mid_step)
{
    struct ent e[NE];
    struct ranks *r;
    sqlite3 *db;

    script(e);
    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    harness_db_exec(db, schema_session_sql);
    harness_db_exec(db, "INSERT INTO ops VALUES (1, 'matmul', 'compute')");
    harness_db_exec(db, "INSERT INTO processes(id, rank, world, started_ns) VALUES (1, 0, 1, 0)");
    cr_assert_not_null(r = ranks_new(db));
    harness_db_exec(db, "BEGIN");
    cr_assert_eq(ranks_init_file(r), 0);
    cr_assert_eq(ranks_load(r), 0);
    for (int i = 0; i < NE; i++) {
        struct proto_entry pe = {.op_id = 1,
                                 .step = e[i].step,
                                 .start_ns = T0 + (origin(e[i].step) + e[i].start) * US,
                                 .dur_ns = e[i].dur * US};
        struct proto_ext x = {.has = PROTO_EXT_PARENT, .parent = 7};

        cr_assert_eq(ranks_entry(r, 1, &pe, 0, e[i].nested ? &x : NULL, i + 1), 0);
        cr_assert_eq(ranks_flush(r), 0); /* a commit after each entry */
        harness_db_exec(db, "COMMIT");
        if (reopen_mid_step && i == NE / 2) { /* another writer goes on from the file */
            ranks_free(r);
            cr_assert_not_null(r = ranks_new(db));
            cr_assert_eq(ranks_load(r), 0);
        }
        harness_db_exec(db, "BEGIN");
    }
    cr_assert_eq(ranks_finish(r), 0);
    cr_assert_eq(ranks_flush(r), 0);
    harness_db_exec(db, "COMMIT");
    cr_expect_eq(harness_db_one(db, "SELECT covered_ns FROM rk_steps WHERE step = 0"),
                 (int64_t)brute(e, 0));
    cr_expect_eq(harness_db_one(db, "SELECT covered_ns FROM rk_steps WHERE step = 1"),
                 (int64_t)brute(e, 1));
    cr_expect_eq(
        harness_db_one(db, "SELECT coalesce(max(value), 0) FROM info WHERE key = 'ranks_late'"), 0);
    ranks_free(r);
    sqlite3_close(db);
}

Test(rkcover, the_union_across_commits)
{
    run(false);
}

Test(rkcover, the_union_across_a_reopen_mid_step)
{
    run(true);
}
