/*
 * test_tsc.c — libtracectl's recording clock (tcclock.h) end to end, on a
 * real tracectld: entries timed with TSC ticks reach the daemon as
 * CLOCK_MONOTONIC ns, comparable across processes. Processes pinned to
 * different cores pass a token round a ring of pipes: each ends its op, then
 * writes the token to the next, which begins its op once it has read it. In
 * the session file, every entry must end no later than the next one starts
 * (A.end ≤ B.start), whichever clock each process used. Entries given a time
 * (tc_record) are stored as given.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tcclock.h"
#include "tracectl.h"

#define PROCS  4
#define PASSES 1000 /* tokens each process holds */

static struct tdaemon d;

static void setup(void)
{
    unsetenv("TRACECTL_CLOCK");
    unsetenv("TRACECTL_DISABLE");
    harness_daemon_start(&d, NULL);
}

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    unsetenv("TRACECTL_CLOCK");
}

TestSuite(tsc, .init = setup, .fini = fini, .timeout = 120);

static bool tsc_here(void)
{
    return tcclock_usable(NULL, NULL);
}

static tc_client *open_client(const char *session, int rank, int world)
{
    tc_options o;

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = world;
    o.blocking = 1; /* nothing dropped: every token's entry is there */
    return tc_open(&o, NULL);
}

/* Pins the calling process to the i-th CPU it may run on (round robin). */
static void pin(int i)
{
    cpu_set_t allowed, one;
    int n = 0, k;

    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return;
    int count = CPU_COUNT(&allowed);
    k = i % count;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (n++ == k) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            sched_setaffinity(0, sizeof(one), &one);
            return;
        }
    }
}

/*
 * One process of the ring: reads token k from in, begins, spins a little,
 * ends with mem = k, writes k + 1 to out; PASSES times (the test writes
 * token 0 to process 0). Exit status: 0, or what went wrong (the parent asserts on it). It
 * writes its session id and its clock ("t" or "m") to res.
 */
static int ring_member(int i, int in, int out, int res, bool monotonic)
{
    volatile uint64_t spin = 0;
    tc_client *c;
    uint32_t op;
    uint64_t k;

    pin(i);
    if (monotonic)
        setenv("TRACECTL_CLOCK", "monotonic", 1);
    else
        unsetenv("TRACECTL_CLOCK");
    c = open_client("order", i, PROCS);
    if (c == NULL || !tc_enabled(c))
        return 10;
    op = tc_op(c, "hop");
    for (int p = 0; p < PASSES; p++) {
        if (read(in, &k, sizeof(k)) != sizeof(k))
            return 12;
        if (k == PROCS * PASSES) /* the last token, back at process 0 */
            break;
        tc_begin(c, op);
        for (int s = 0; s < 100; s++)
            spin += (uint64_t)s;
        tc_end(c, k, NULL, NULL, 0);
        k++;
        if (write(out, &k, sizeof(k)) != sizeof(k))
            return 13;
    }
    if (i == 0 && read(in, &k, sizeof(k)) != sizeof(k)) /* wait for the last token */
        return 14;
    struct {
        int64_t session;
        char clock;
    } r = {tc_session_id(c), tc_clock(c)[0]};
    if (tc_close(c) != 0)
        return 15;
    if (write(res, &r, sizeof(r)) != sizeof(r))
        return 16;
    return 0;
}

/*
 * Runs the ring (monotonic[i]: process i uses clock_gettime) and checks the
 * session's entries. Returns the clocks the processes reported ("tmtm"...).
 */
static void run_ring(const bool monotonic[PROCS], char clocks[PROCS + 1])
{
    int pipes[PROCS][2], res[2];
    pid_t pids[PROCS];
    int64_t session = -1;
    uint64_t t0 = tc_now_ns(), t1;

    cr_assert_eq(pipe(res), 0);
    for (int i = 0; i < PROCS; i++)
        cr_assert_eq(pipe(pipes[i]), 0);
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            /* reads pipes[i], writes pipes[i + 1] */
            int rc = ring_member(i, pipes[i][0], pipes[(i + 1) % PROCS][1], res[1], monotonic[i]);
            _exit(rc);
        }
    }
    uint64_t token = 0;
    cr_assert_eq(write(pipes[0][1], &token, sizeof(token)), (ssize_t)sizeof(token));
    for (int i = 0; i < PROCS; i++)
        close(pipes[i][0]), close(pipes[i][1]);
    close(res[1]);
    for (int i = 0; i < PROCS; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %d", i, st);
    }
    t1 = tc_now_ns();
    memset(clocks, 0, PROCS + 1);
    for (int i = 0; i < PROCS; i++) {
        struct {
            int64_t session;
            char clock;
        } r;
        cr_assert_eq(read(res[0], &r, sizeof(r)), (ssize_t)sizeof(r));
        cr_assert(session == -1 || session == r.session);
        session = r.session;
        clocks[i] = r.clock; /* in the order they closed: counted, not placed */
    }
    close(res[0]);

    /* The session file: entry k (mem = k) by rank k % PROCS, ending before entry k + 1 starts. */
    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;
    uint64_t n = 0, prev_end = 0, worst = UINT64_MAX;
    int64_t prev_k = -1;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, (long long)session);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "SELECT e.mem_bytes, e.start_ns, e.dur_ns, p.rank FROM entries e"
                           " JOIN processes p ON p.id = e.process_id ORDER BY e.mem_bytes",
                           -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t k = sqlite3_column_int64(st, 0);
        uint64_t start = (uint64_t)sqlite3_column_int64(st, 1);
        uint64_t dur = (uint64_t)sqlite3_column_int64(st, 2);
        cr_assert_eq(k, prev_k + 1, "entry %lld after %lld", (long long)k, (long long)prev_k);
        cr_assert_eq(sqlite3_column_int64(st, 3), k % PROCS, "entry %lld", (long long)k);
        cr_assert(start >= t0 && start + dur <= t1,
                  "entry %lld at [%llu, %llu] outside the test's [%llu, %llu]", (long long)k,
                  (unsigned long long)start, (unsigned long long)(start + dur),
                  (unsigned long long)t0, (unsigned long long)t1);
        if (k > 0) {
            cr_assert_leq(prev_end, start,
                          "entry %lld (rank %lld) ends at %llu, after entry %lld starts at %llu",
                          (long long)k - 1, (long long)(k - 1) % PROCS,
                          (unsigned long long)prev_end, (long long)k, (unsigned long long)start);
            worst = start - prev_end < worst ? start - prev_end : worst;
        }
        prev_end = start + dur;
        prev_k = k;
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_eq(n, (uint64_t)PROCS * PASSES);
    cr_log_info("%llu entries in order (clocks %s); the closest hand-over %llu ns",
                (unsigned long long)n, clocks, (unsigned long long)worst);
}

static int count(const char *s, char ch)
{
    int n = 0;
    for (; *s; s++)
        n += *s == ch;
    return n;
}

Test(tsc, tsc_entries_of_processes_on_different_cores_keep_their_order)
{
    const bool mono[PROCS] = {false, false, false, false};
    char clocks[PROCS + 1];

    run_ring(mono, clocks);
    cr_assert_eq(count(clocks, 't'), tsc_here() ? PROCS : 0, "clocks %s", clocks);
}

Test(tsc, monotonic_entries_keep_their_order)
{
    const bool mono[PROCS] = {true, true, true, true};
    char clocks[PROCS + 1];

    run_ring(mono, clocks);
    cr_assert_eq(count(clocks, 'm'), PROCS, "clocks %s", clocks);
}

Test(tsc, tsc_and_monotonic_processes_are_comparable)
{
    const bool mono[PROCS] = {false, true, false, true};
    char clocks[PROCS + 1];

    run_ring(mono, clocks);
    cr_assert_eq(count(clocks, 'm'), tsc_here() ? PROCS / 2 : PROCS, "clocks %s", clocks);
}

Test(tsc, given_times_are_stored_as_given_and_begin_end_as_monotonic_ns)
{
    tc_client *c = open_client("given", 0, 1);
    uint64_t t0, t1;
    uint32_t op;

    cr_assert(c != NULL && tc_enabled(c));
    cr_assert_str_eq(tc_clock(c), tsc_here() ? "tsc" : "monotonic");
    op = tc_op(c, "given");
    t0 = tc_now_ns();
    tc_begin(c, op);
    tc_end(c, 1, NULL, NULL, 0);
    t1 = tc_now_ns();
    tc_record(c, op, 123456789, 1000, 2, NULL, NULL, 0, NULL);
    tc_begin(c, op);
    tc_begin(c, op); /* ends the one before: mem 0 */
    tc_end(c, 3, NULL, NULL, 0);
    int64_t session = tc_session_id(c);
    cr_assert_eq(tc_close(c), 0);

    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;
    uint64_t start[4] = {0}, dur[4] = {0};
    int n = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, (long long)session);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT mem_bytes, start_ns, dur_ns FROM entries ORDER BY "
                                    "mem_bytes",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW && n < 4) {
        int64_t m = sqlite3_column_int64(st, 0);
        cr_assert(m >= 0 && m < 4);
        start[m] = (uint64_t)sqlite3_column_int64(st, 1);
        dur[m] = (uint64_t)sqlite3_column_int64(st, 2);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_eq(n, 4);
    /* converted ticks are within 1 µs of clock_gettime (a few ns here, but not always after a
     * clock read a few ns earlier) */
    cr_assert(start[1] + 1000 >= t0 && start[1] + dur[1] <= t1 + 1000,
              "[%llu +%llu] not in [%llu, %llu]", (unsigned long long)start[1],
              (unsigned long long)dur[1], (unsigned long long)t0, (unsigned long long)t1);
    cr_assert_eq(start[2], 123456789);
    cr_assert_eq(dur[2], 1000);
    cr_assert_geq(start[0] + 1000, t1);
    cr_assert_leq(start[0] + dur[0], start[3]);
}

/*
 * tc_begin ending the previous op: the next one begins exactly when it ended,
 * also when the writer re-anchored its conversion between draining the two
 * (each flush below drains, and re-anchors 2 ms after the last).
 */
Test(tsc, an_op_begun_by_ending_the_last_starts_exactly_where_it_ended)
{
    struct timespec ms2 = {0, 2000000};
    tc_client *c = open_client("chain", 0, 1);
    uint64_t start[21] = {0}, dur[21] = {0};
    uint32_t op;

    cr_assert(c != NULL && tc_enabled(c));
    op = tc_op(c, "link");
    tc_begin(c, op);
    for (int i = 1; i <= 20; i++) {
        nanosleep(&ms2, NULL);
        tc_begin(c, op); /* ends entry i - 1 (mem 0) */
        for (int f = 0; f < 3; f++) {
            nanosleep(&ms2, NULL);
            cr_assert_eq(tc_flush(c, 10000), 0);
        }
    }
    tc_end(c, 1, NULL, NULL, 0);
    int64_t session = tc_session_id(c);
    cr_assert_eq(tc_close(c), 0);

    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;
    int n = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, (long long)session);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT start_ns, dur_ns FROM entries ORDER BY start_ns",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW && n < 21) {
        start[n] = (uint64_t)sqlite3_column_int64(st, 0);
        dur[n] = (uint64_t)sqlite3_column_int64(st, 1);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_eq(n, 21);
    for (int i = 1; i < n; i++)
        cr_assert_eq(
            start[i - 1] + dur[i - 1], start[i], "entry %d ends at %llu, %d starts at %llu", i - 1,
            (unsigned long long)(start[i - 1] + dur[i - 1]), i, (unsigned long long)start[i]);
}
