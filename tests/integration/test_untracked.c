/*
 * test_untracked.c — untracked time (PROTOCOL.md "report analysis": a rank's
 * step span less the union of its top-level entries) against a real tracectld
 * fed by libtracectl producers with nested entries (ext id/parent), parents
 * sent after their children, overlapping top-level entries on two devices,
 * and entries out of time order. The expected figures are worked out by hand
 * below, in microseconds, from the script alone.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

#define US 1000ull /* the script's unit */

struct uent {
    int rank;
    uint64_t step;
    const char *op, *dev; /* dev NULL: the producer's */
    uint64_t start, dur;  /* in US */
    uint64_t id, parent;  /* 0: none */
};

/*
 * Rank 0, step 0: "fwd" [0, 100) with id 1, sent after its children "mm" [10, 40) and
 * "relu" [50, 90) (parent 1); "opt" [130, 150) on cpu:0 and "opt2" [140, 170) on cpu:9
 * (they overlap: [130, 170)); "tail" [300, 310). Span [0, 310) = 310; union 100 + 40 + 10
 * = 150; untracked 160.
 * Rank 0, step 1: "a" [400, 450), "b" [420, 480) (overlap: [400, 480)); "c" [500, 520)
 * nested in "d" [490, 560) (id 7), "d" sent after "c"; "z" [430, 431) nested in 7 too.
 * Span [400, 560) = 160; union 80 + 70 = 150; untracked 10.
 * Rank 1, step 0: "fwd" [0, 200): untracked 0. Step 1: "a" [400, 500), "a" [600, 700):
 * span 300, union 200, untracked 100.
 */
static const struct uent script[] = {
    {0, 0, "mm", NULL, 10, 30, 0, 1},       {0, 0, "relu", NULL, 50, 40, 0, 1},
    {0, 0, "fwd", NULL, 0, 100, 1, 0},      {0, 0, "opt", NULL, 130, 20, 0, 0},
    {0, 0, "opt2", "cpu:9", 140, 30, 0, 0}, {0, 0, "tail", NULL, 300, 10, 0, 0},
    {0, 1, "b", NULL, 420, 60, 0, 0},       {0, 1, "a", NULL, 400, 50, 0, 0},
    {0, 1, "c", NULL, 500, 20, 0, 7},       {0, 1, "z", NULL, 430, 1, 0, 7},
    {0, 1, "d", NULL, 490, 70, 7, 0},       {1, 0, "fwd", NULL, 0, 200, 0, 0},
    {1, 1, "a", NULL, 400, 100, 0, 0},      {1, 1, "a", NULL, 600, 100, 0, 0},
};
#define N_SCRIPT (sizeof(script) / sizeof(script[0]))

static const uint64_t want_rank[2] = {170 * US, 100 * US}; /* per rank */
static const uint64_t want_step[2] = {160 * US, 110 * US}; /* per step, ranks summed */
static const uint64_t want_rank_step[2][2] = {{160 * US, 10 * US}, {0, 100 * US}};

static struct tdaemon d;
static bool flush_each; /* a commit after every entry */

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(untracked, .fini = fini, .timeout = 120);

static void child(const char *session, int rank)
{
    tc_options o;
    tc_client *c;
    uint64_t step = 0;
    char dev[16];
    int err = 0;

    snprintf(dev, sizeof(dev), "cpu:%d", rank);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = 2;
    o.device = dev;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL || err != 0)
        _exit(2);
    for (size_t i = 0; i < N_SCRIPT; i++) {
        const struct uent *e = &script[i];
        tc_ext x = {.has = (e->id ? TC_EXT_ID : 0) | (e->parent ? TC_EXT_PARENT : 0),
                    .id = e->id,
                    .parent = e->parent};

        if (e->rank != rank)
            continue;
        while (step < e->step) {
            tc_step(c);
            step++;
        }
        tc_record_ext(c, tc_op_cat(c, e->op, "compute"), 1000000 * US + e->start * US, e->dur * US,
                      0, TC_ELEMENTS_NONE, NULL, NULL, 0, e->dev, &x);
        if (flush_each && tc_flush(c, -1) != 0)
            _exit(4);
    }
    _exit(tc_close(c) == 0 ? 0 : 3);
}

static long long run(const char *session)
{
    pid_t pids[2];
    long long id;

    for (int k = 0; k < 2; k++) {
        pids[k] = fork();
        cr_assert_geq(pids[k], 0);
        if (pids[k] == 0)
            child(session, k);
    }
    for (int k = 0; k < 2; k++) {
        int st;
        cr_assert_eq(waitpid(pids[k], &st, 0), pids[k]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer %d failed", k);
    }
    id = raw_session_id(d.sock, session);
    raw_wait_state(d.sock, id, "ended", 30);
    return id;
}

/* The analysis, restricted to rank (-1: all) and step (-1: all); the reply stays in *r. */
static const msgpack_object *analysis(long long id, int rank, int step, struct proto_reader *r)
{
    struct proto_request req;
    const msgpack_object *o;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    if (rank >= 0) {
        req.analysis.ranks[0] = rank;
        req.analysis.n_ranks = 1;
    }
    if (step >= 0) {
        req.analysis.steps = true;
        req.analysis.step_min = req.analysis.step_max = (uint64_t)step;
    }
    o = raw_control(d.sock, PROTO_REPORT, &req, r, &fd);
    close(fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report failed");
    return &o->via.array.ptr[1];
}

static void check(long long id, const char *what)
{
    struct proto_reader r;
    const msgpack_object *a = analysis(id, -1, -1, &r), *ranks, *steps;

    ranks = obj_get(a, "ranks");
    steps = obj_get(a, "steps");
    cr_assert_eq(ranks->via.array.size, 2, "%s", what);
    cr_assert_eq(steps->via.array.size, 2, "%s", what);
    for (uint32_t i = 0; i < 2; i++) {
        cr_expect_eq(obj_u64(obj_get(&ranks->via.array.ptr[i], "untracked_ns")), want_rank[i],
                     "%s: rank %u untracked", what, i);
        cr_expect_eq(obj_u64(obj_get(&steps->via.array.ptr[i], "untracked_ns")), want_step[i],
                     "%s: step %u untracked", what, i);
    }
    proto_reader_deinit(&r);
    for (int rank = 0; rank < 2; rank++)
        for (int step = 0; step < 2; step++) {
            a = analysis(id, rank, step, &r);
            ranks = obj_get(a, "ranks");
            cr_assert_eq(ranks->via.array.size, 1);
            cr_expect_eq(obj_u64(obj_get(&ranks->via.array.ptr[0], "untracked_ns")),
                         want_rank_step[rank][step], "%s: rank %d step %d untracked", what, rank,
                         step);
            proto_reader_deinit(&r);
        }
}

Test(untracked, nested_entries_are_not_counted_twice)
{
    harness_daemon_start(&d, NULL);
    check(run("untracked"), "one commit");
}

/* The union of a step grows across commits: the writer keeps its intervals between them. */
Test(untracked, exact_with_a_commit_after_every_entry)
{
    harness_daemon_start(&d, NULL);
    flush_each = true;
    check(run("untracked1"), "a commit per entry");
    flush_each = false;
}

static int run_cli(char **out, const char *a1, const char *a2)
{
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock, (char *)a1, (char *)a2, NULL};

    return harness_run(out, argv);
}

/* classify rebuilds the union from the entries and their links: the same figures. */
Test(untracked, classify_rebuilds_the_same_figures)
{
    char path[PATH_MAX + 64], ids[32], *out = NULL;
    long long id;
    sqlite3 *db;

    harness_daemon_start(&d, NULL);
    id = run("untracked2");
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 20000); /* the daemon may still be closing the file */
    cr_assert_eq(sqlite3_exec(db, "DELETE FROM rk_steps; DELETE FROM info WHERE key = 'ranks'",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    snprintf(ids, sizeof(ids), "%lld", id);
    cr_assert_eq(run_cli(&out, "classify", ids), 0, "%s", out);
    free(out);
    check(id, "rebuilt");
}
