/*
 * test_cpu_wait.c — CPU wait (PROTOCOL.md "Metadata tracectl.cpu_wait"): what
 * producers say their step thread waited for a CPU, per step, against a real
 * tracectld. The metadata's sums per rank and step are worked out by hand
 * below, malformed values are kept as metadata and counted nowhere, `tracectl
 * classify` keeps the sums, a --device filter keeps the CPU wait of the processes on that
 * device, and libtracectl's tc_cpu_wait() sends what the
 * producer's own read of /proc/thread-self/schedstat says.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

static struct tdaemon d;

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
}

TestSuite(cpu_wait, .fini = fini, .timeout = 120);

static tc_client *open_rank(const char *session, int rank, int world)
{
    tc_options o;
    tc_client *c;
    int err = 0;

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = world;
    o.device = rank ? "cpu:1" : "cpu:0";
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL || err != 0)
        _exit(2);
    return c;
}

/* One entry in each of steps 0..2, 1 ms apart; then the values, each "<step> <ns>" or not. */
static void meta_child(const char *session, int rank, const char *const *vals, size_t n)
{
    tc_client *c = open_rank(session, rank, 2);
    uint32_t op = tc_op_cat(c, "work", "compute");

    for (uint64_t s = 0; s < 3; s++) {
        tc_set_step(c, s);
        tc_record(c, op, 1000000000ull + s * 1000000, 500000, 0, NULL, NULL, 0, NULL);
    }
    for (size_t i = 0; i < n; i++)
        if (tc_meta_str(c, "tracectl.cpu_wait", vals[i]) != 0)
            _exit(4);
    if (rank == 1 && tc_meta_int(c, "tracectl.cpu_wait", 5) != 0) /* an integer: metadata */
        _exit(5);
    _exit(tc_close(c) == 0 ? 0 : 3);
}

static long long session_id(const char *session)
{
    struct proto_reader r;
    const msgpack_object *o;
    long long id = -1;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    for (uint32_t i = 0; i < o->via.array.ptr[1].via.array.size; i++) {
        const msgpack_object *row = &o->via.array.ptr[1].via.array.ptr[i];
        if (obj_str_eq(obj_get(row, "name"), session))
            id = (long long)obj_u64(obj_get(row, "id"));
    }
    proto_reader_deinit(&r);
    close(fd);
    cr_assert_geq(id, 0, "no session %s", session);
    return id;
}

static void wait_ok(pid_t pid, const char *what)
{
    int st;

    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit %d", what,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* The analysis restricted to rank (-1: all) and steps first..last (first -1: all). */
static const msgpack_object *analysis_on(long long id, int rank, int first, int last,
                                         const char *device, struct proto_reader *r)
{
    struct proto_request req;
    const msgpack_object *o;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    req.analysis.device = (char *)device; /* borrowed: req is never deinited */
    if (rank >= 0) {
        req.analysis.ranks[0] = rank;
        req.analysis.n_ranks = 1;
    }
    if (first >= 0) {
        req.analysis.steps = true;
        req.analysis.step_min = (uint64_t)first;
        req.analysis.step_max = (uint64_t)last;
    }
    o = raw_control(d.sock, PROTO_REPORT, &req, r, &fd);
    close(fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report failed");
    return &o->via.array.ptr[1];
}

static const msgpack_object *analysis(long long id, int rank, int first, int last,
                                      struct proto_reader *r)
{
    return analysis_on(id, rank, first, last, NULL, r);
}

/* The row of rank in rows (a report's ranks), or NULL. */
static const msgpack_object *rank_row(const msgpack_object *rows, uint64_t rank)
{
    for (uint32_t i = 0; i < rows->via.array.size; i++)
        if (obj_u64(obj_get(&rows->via.array.ptr[i], "rank")) == rank)
            return &rows->via.array.ptr[i];
    return NULL;
}

/*
 * Rank 0: step 0 1,000 ns; step 1 2,000,000 + 3,000 (sent twice: they add); step 2 5; the
 * rest malformed. Rank 1: step 0 7, step 2 100 (and an integer value). Per rank 2,004,005 and
 * 107; per step 1,007, 2,003,000 and 105.
 */
static const char *const vals0[] = {
    "0 1000", "1 2000000", "2 5",  "1 3000", "1 x", "01 7",
    "-1 7",   "1  7",      "1 7 ", " 1 7",   "1",   "1 9223372036854775808", /* past INT64_MAX */
    "",
};
static const char *const vals1[] = {"0 7", "2 100"};
static const uint64_t want_rank[2] = {2004005, 107};
static const uint64_t want_step[3] = {1007, 2003000, 105};

static void check_sums(long long id, const char *what)
{
    struct proto_reader r;
    const msgpack_object *a = analysis(id, -1, -1, -1, &r), *ranks, *steps;

    ranks = obj_get(a, "ranks");
    steps = obj_get(a, "steps");
    cr_assert_eq(ranks->via.array.size, 2, "%s", what);
    cr_assert_eq(steps->via.array.size, 3, "%s", what);
    for (uint32_t i = 0; i < 2; i++)
        cr_expect_eq(obj_u64(obj_get(&ranks->via.array.ptr[i], "cpu_wait_ns")), want_rank[i],
                     "%s: rank %u", what, i);
    for (uint32_t i = 0; i < 3; i++)
        cr_expect_eq(obj_u64(obj_get(&steps->via.array.ptr[i], "cpu_wait_ns")), want_step[i],
                     "%s: step %u", what, i);
    proto_reader_deinit(&r);
    a = analysis(id, 0, 1, 2, &r); /* rank 0, steps 1..2 */
    cr_expect_eq(obj_u64(obj_get(&obj_get(a, "ranks")->via.array.ptr[0], "cpu_wait_ns")),
                 2003005ull, "%s: rank 0 steps 1..2", what);
    proto_reader_deinit(&r);
}

/*
 * With --device: a step's CPU wait is its process's, so the processes on the device keep
 * theirs (rank 0 on cpu:0, rank 1 on cpu:1) and the others count none: per device, its
 * process's figures above, per rank and per step.
 */
static void check_device(long long id, const char *what)
{
    static const char *const dev[2] = {"cpu:0", "cpu:1"};
    static const uint64_t want_dev_step[2][3] = {{1000, 2003000, 5}, {7, 0, 100}};

    for (uint64_t k = 0; k < 2; k++) {
        struct proto_reader r;
        const msgpack_object *a = analysis_on(id, -1, -1, -1, dev[k], &r);
        const msgpack_object *ranks = obj_get(a, "ranks"), *steps = obj_get(a, "steps");
        const msgpack_object *mine = rank_row(ranks, k), *other = rank_row(ranks, 1 - k);
        cr_assert_not_null(mine, "%s: %s: no rank %llu", what, dev[k], (unsigned long long)k);
        cr_expect_eq(obj_u64(obj_get(mine, "cpu_wait_ns")), want_rank[k], "%s: %s", what, dev[k]);
        if (other != NULL)
            cr_expect_eq(obj_u64(obj_get(other, "cpu_wait_ns")), 0, "%s: %s: the other rank", what,
                         dev[k]);
        cr_assert_eq(steps->via.array.size, 3, "%s: %s", what, dev[k]);
        for (uint32_t i = 0; i < 3; i++)
            cr_expect_eq(obj_u64(obj_get(&steps->via.array.ptr[i], "cpu_wait_ns")),
                         want_dev_step[k][i], "%s: %s: step %u", what, dev[k], i);
        proto_reader_deinit(&r);
    }
}

Test(cpu_wait, metadata_sums_per_rank_and_step_and_classify_keeps_them)
{
    pid_t p0, p1;
    long long id;
    char db[PATH_MAX + 64], ids[32], *out = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket", NULL, "classify", ids, NULL};

    harness_daemon_start(&d, NULL);
    if ((p0 = fork()) == 0)
        meta_child("cw", 0, vals0, sizeof(vals0) / sizeof(vals0[0]));
    if ((p1 = fork()) == 0)
        meta_child("cw", 1, vals1, sizeof(vals1) / sizeof(vals1[0]));
    wait_ok(p0, "rank 0");
    wait_ok(p1, "rank 1");
    id = session_id("cw");
    raw_wait_state(d.sock, id, "ended", 30);
    check_sums(id, "as sent");
    check_device(id, "as sent");
    /* every value stays metadata (the last one of each process) */
    snprintf(db, sizeof(db), "%s/sessions/%lld.db", d.data, id);
    cr_expect_eq(harness_db_int(db, "SELECT count(*) FROM meta WHERE key = 'tracectl.cpu_wait'"),
                 2);
    snprintf(ids, sizeof(ids), "%lld", id);
    argv[2] = d.sock;
    cr_assert_eq(harness_run(&out, argv), 0, "%s", out);
    free(out);
    check_sums(id, "after classify");
    check_device(id, "after classify");
}

/* This thread's run-queue delay in ns, as tc_cpu_wait() reads it. */
static uint64_t run_delay(void)
{
    unsigned long long on, wait = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");

    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%llu %llu", &on, &wait), 2);
    fclose(f);
    return wait;
}

/* A producer that spins 20 ms a step beside 2 processes spinning on its CPU (so that it
 * waits for it), reads its own delay right before each tc_cpu_wait() and writes them to fd.
 * The spinning processes are forked before tc_open(): no copy of the client in them. */
static void spin_child(const char *session, int fd)
{
    uint64_t own[6];
    cpu_set_t one;
    pid_t hogs[2];
    tc_client *c;
    uint32_t op;

    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        _exit(6);
    for (int k = 0; k < 2; k++)
        if ((hogs[k] = fork()) == 0)
            for (;;)
                ; /* inherits the affinity */
    c = open_rank(session, 0, 1);
    op = tc_op_cat(c, "spin", "compute");
    for (int s = 0; s < 6; s++) {
        uint64_t t0 = tc_now_ns();
        while (tc_now_ns() - t0 < 20000000ull)
            ;
        tc_record(c, op, t0, tc_now_ns() - t0, 0, NULL, NULL, 0, NULL);
        own[s] = run_delay();
        if (tc_cpu_wait(c) != 0)
            _exit(7);
        tc_step(c);
    }
    for (int k = 0; k < 2; k++) {
        kill(hogs[k], SIGKILL);
        waitpid(hogs[k], NULL, 0);
    }
    if (write(fd, own, sizeof(own)) != (ssize_t)sizeof(own))
        _exit(8);
    _exit(tc_close(c) == 0 ? 0 : 3);
}

Test(cpu_wait, tc_cpu_wait_sends_what_the_thread_waited)
{
    struct proto_reader r;
    const msgpack_object *a;
    uint64_t own[6];
    int fds[2];
    long long id;
    pid_t p;

    harness_daemon_start(&d, NULL);
    harness_pipe(fds);
    if ((p = fork()) == 0) {
        close(fds[0]);
        spin_child("spin", fds[1]);
    }
    close(fds[1]);
    cr_assert_eq(harness_read_within(fds[0], own, sizeof(own), 60), 0);
    close(fds[0]);
    wait_ok(p, "producer");
    id = session_id("spin");
    raw_wait_state(d.sock, id, "ended", 30);
    /* steps 1..5: the producer's own readings at the ends of steps 0 and 5 apart; its reads
     * and tc_cpu_wait()'s are µs apart (within 1 ms a step) */
    a = analysis(id, 0, 1, 5, &r);
    {
        uint64_t got = obj_u64(obj_get(&obj_get(a, "ranks")->via.array.ptr[0], "cpu_wait_ns"));
        uint64_t want = own[5] - own[0];
        cr_expect(got + 5000000 >= want && got <= want + 5000000,
                  "cpu_wait_ns %llu, its /proc said %llu", (unsigned long long)got,
                  (unsigned long long)want);
        /* 2 spinning processes beside it: it waited about twice its 20 ms a step */
        cr_expect_gt(want, 5 * 10000000ull, "only %llu ns waited", (unsigned long long)want);
    }
    proto_reader_deinit(&r);
}
