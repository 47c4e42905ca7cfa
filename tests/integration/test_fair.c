/*
 * test_fair.c — the report slots are shared between users (README "Users and
 * running as a service", "Limits"): one user keeping every slot busy with
 * heavy reports does not make another user's small report wait for them;
 * and SIGTERM stops the daemon while reports run (they are interrupted).
 *
 * Two users need root (harness_fork_as); the tests skip without it.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define USER_A 65534 /* nobody: the one with the heavy reports */
#define USER_B 65533 /* the one with a small report */

static struct tdaemon d;

/* Children first (they hold connections), then the daemon: even after a failed assertion. */
static void fini(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(fair, .fini = fini, .timeout = 400);

/* In a child: a session `name` of n entries (steps 0..9,999 over and over); its id, or -1. */
static long long child_session(const char *name, size_t n)
{
    long long id;
    int fd = raw_producer(d.sock, name, 0, 1, NULL, &id);

    raw_send_ops(fd, 1, "matmul");
    for (size_t i = 0; i < n; i += 10000)
        raw_send_batch(fd, 1, n - i < 10000 ? n - i : 10000, i * 1000, 1);
    if (raw_flush(fd, 1) != (long long)n)
        return -1;
    raw_bye(fd, 0);
    return id;
}

/* As uid, a session of n entries; returns its id once it has ended. */
static long long user_session(uid_t uid, const char *name, size_t n)
{
    int pfd[2];
    long long id = -1;
    pid_t pid;

    harness_pipe(pfd);
    pid = harness_fork_as(uid, 300);
    if (pid == 0) {
        id = child_session(name, n);
        _exit(write(pfd[1], &id, sizeof(id)) == sizeof(id) && id >= 0 ? 0 : 1);
    }
    close(pfd[1]);
    cr_assert_eq(harness_read_within(pfd[0], &id, sizeof(id), 280), 0);
    close(pfd[0]);
    cr_assert_eq(harness_wait_child(pid), 0);
    raw_wait_state(d.sock, id, "ended", 30);
    return id;
}

/*
 * A report of session id on a new connection, its whole reply read (up to
 * `seconds`). heavy: filtered by steps (every entry matches), so that it
 * scans every entry, several times, instead of reading the aggregates.
 * Returns its latency in seconds, or -1 (no reply, or not "ok").
 */
static double timed_report(long long id, bool heavy, int seconds)
{
    struct proto_request req;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacker unp;
    msgpack_unpacked u;
    double t0 = harness_now_s(), took = -1;
    int fd = raw_connect(d.sock);

    proto_request_init(&req);
    req.session.id = id;
    if (heavy) {
        req.analysis.steps = true;
        req.analysis.step_min = 0;
        req.analysis.step_max = UINT32_MAX;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_request(&pk, PROTO_REPORT, &req);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacker_init(&unp, 1 << 16);
    msgpack_unpacked_init(&u);
    while (harness_now_s() - t0 < seconds) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 100) != 1)
            continue;
        if (!msgpack_unpacker_reserve_buffer(&unp, 1 << 16))
            break;
        n = read(fd, msgpack_unpacker_buffer(&unp), 1 << 16);
        if (n <= 0)
            break;
        msgpack_unpacker_buffer_consumed(&unp, (size_t)n);
        if (msgpack_unpacker_next(&unp, &u) == MSGPACK_UNPACK_SUCCESS) {
            if (u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 2 &&
                obj_str_eq(&u.data.via.array.ptr[0], "ok"))
                took = harness_now_s() - t0;
            break;
        }
    }
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&unp);
    close(fd);
    return took;
}

/* As uid: one report (see timed_report); its latency, or -1. */
static double user_report(uid_t uid, long long id, bool heavy, int seconds)
{
    int pfd[2];
    double took = -1;
    pid_t pid;

    harness_pipe(pfd);
    pid = harness_fork_as(uid, (unsigned)seconds + 10);
    if (pid == 0) {
        took = timed_report(id, heavy, seconds);
        _exit(write(pfd[1], &took, sizeof(took)) == sizeof(took) ? 0 : 1);
    }
    close(pfd[1]);
    cr_assert_eq(harness_read_within(pfd[0], &took, sizeof(took), seconds + 5), 0);
    close(pfd[0]);
    cr_assert_eq(harness_wait_child(pid), 0);
    return took;
}

/*
 * As uid, n children that each ask a heavy report of id, read it, and ask
 * again, until killed (harness_reap). Each writes a byte to fds[1] once its
 * first request is sent.
 */
static void heavy_loop(uid_t uid, long long id, int n, int fds[2])
{
    for (int i = 0; i < n; i++) {
        if (harness_fork_as(uid, 300) != 0)
            continue;
        for (bool first = true;; first = false) {
            double t0 = harness_now_s();
            struct proto_request req;
            msgpack_sbuffer sb;
            msgpack_packer pk;
            char buf[1 << 16];
            int fd = raw_connect(d.sock);
            bool sent;

            if (fd < 0) /* the daemon has stopped */
                _exit(0);
            proto_request_init(&req);
            req.session.id = id;
            req.analysis.steps = true;
            req.analysis.step_min = 0;
            req.analysis.step_max = UINT32_MAX;
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            proto_pack_request(&pk, PROTO_REPORT, &req);
            /* not raw_send: it asserts, and a child must not (harness.h) */
            sent = send(fd, sb.data, sb.size, MSG_NOSIGNAL) == (ssize_t)sb.size;
            msgpack_sbuffer_destroy(&sb);
            if (!sent)
                _exit(0);
            if (first && write(fds[1], "x", 1) != 1)
                _exit(1);
            /* Read until the daemon has answered (a report reply is small here). */
            while (harness_now_s() - t0 < 280 && read(fd, buf, sizeof(buf)) > 0) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 0) == 0)
                    break;
            }
            close(fd);
        }
    }
}

/*
 * User A keeps 6 heavy reports in flight (more than the 4 slots), user B
 * asks a small report of 2,000 entries, three times: each answer comes in
 * well under a quarter of one heavy report's time alone. Before: A's
 * reports held all 4 slots, and B waited for one of them to finish, then
 * behind A's newer requests (woken newest first): 22-27 s against 13 s.
 */
Test(fair, a_users_small_report_does_not_wait_for_anothers_heavy_ones)
{
    enum { HEAVY_ENTRIES = 400000, SMALL_ENTRIES = 2000, LOOPERS = 6 };
    long long heavy, small;
    double alone, small_alone, took[3];
    int fds[2];
    char x;

    if (geteuid() != 0)
        cr_skip_test("needs root to run two users (setuid in a forked child)");
    harness_daemon_start(&d, "--system", "--admin-group", "tracectl-test-nonexistent", NULL);
    chmod(d.dir, 0755); /* other uids must reach the socket; the daemon filters by uid */
    heavy = user_session(USER_A, "heavy", HEAVY_ENTRIES);
    small = user_session(USER_B, "small", SMALL_ENTRIES);
    alone = user_report(USER_A, heavy, true, 240);
    small_alone = user_report(USER_B, small, false, 30);
    cr_assert_gt(alone, 0, "the heavy report failed");
    cr_assert_gt(small_alone, 0, "the small report failed");

    harness_pipe(fds);
    heavy_loop(USER_A, heavy, LOOPERS, fds);
    close(fds[1]);
    for (int i = 0; i < LOOPERS; i++)
        cr_assert_eq(harness_read_within(fds[0], &x, 1, 30), 0);
    close(fds[0]);
    for (int i = 0; i < 3; i++) {
        took[i] = user_report(USER_B, small, false, 240);
        cr_assert_gt(took[i], 0, "B's report %d failed", i);
        usleep((useconds_t)(alone * 1e6 / 3)); /* the next at another point of A's reports */
    }
    cr_log_info("heavy report alone %.2f s, small alone %.3f s; small while %d heavy run: %.3f,"
                " %.3f, %.3f s",
                alone, small_alone, LOOPERS, took[0], took[1], took[2]);
    for (int i = 0; i < 3; i++)
        cr_assert_lt(took[i], alone / 4, "B's report %d took %.2f s; a heavy one alone %.2f s", i,
                     took[i], alone);
}

/*
 * SIGTERM while 4 heavy reports run: the daemon exits (0) within 3 s, the
 * reports interrupted. Before: it exited only once they had finished.
 */
Test(fair, sigterm_stops_a_running_report)
{
    enum { LOOPERS = 4 };
    size_t entries = 400000;
    long long heavy;
    double alone, t0, stop;
    int fds[2], status;
    char x;

    if (geteuid() != 0)
        cr_skip_test("needs root to fork the report loops as another user");
    harness_daemon_start(&d, "--system", "--admin-group", "tracectl-test-nonexistent", NULL);
    chmod(d.dir, 0755);
    /* A report must take well over the 3 s (an optimised build is faster: a bigger session). */
    for (;;) {
        heavy = user_session(USER_A, "heavy", entries);
        alone = user_report(USER_A, heavy, true, 240);
        cr_assert_gt(alone, 0, "the heavy report failed");
        if (alone >= 4.0 || entries >= 6400000)
            break;
        entries = entries * (size_t)(4.5 / alone + 1);
        entries = entries < 6400000 ? entries : 6400000;
    }
    harness_pipe(fds);
    heavy_loop(USER_A, heavy, LOOPERS, fds);
    close(fds[1]);
    for (int i = 0; i < LOOPERS; i++)
        cr_assert_eq(harness_read_within(fds[0], &x, 1, 30), 0);
    close(fds[0]);
    usleep(300000); /* the reports are under way (each takes `alone` or more) */
    t0 = harness_now_s();
    status = harness_daemon_stop(&d, SIGTERM);
    stop = harness_now_s() - t0;
    d.pid = 0;
    cr_log_info("SIGTERM during %d heavy reports of %zu entries (%.2f s each alone): stopped in"
                " %.2f s",
                LOOPERS, entries, alone, stop);
    cr_assert_eq(status, 0);
    cr_assert_gt(alone, 3.5, "the heavy report (%.2f s) is too short to show it", alone);
    cr_assert_lt(stop, 3.0, "the daemon took %.2f s to stop", stop);
}

/*
 * One user (the per-user daemon) with a session of 400,000 entries, under
 * --heavy-entries (1,000,000), whose reports filtered by steps read every
 * entry several times: once one of them has been measured (it took more
 * than 32 SQLite steps per --heavy-entries entry), the next ones take the
 * heavy lane, 2 at a time, so that the same user's report on a small
 * session finds a slot while 4 of them are asked. Before: by size they
 * were not heavy, took all 4 slots, and the small report waited for one.
 */
Test(fair, a_report_measured_heavy_takes_the_heavy_lane)
{
    enum { LOOPERS = 4 };
    long long heavy, small;
    double alone, took;
    int fds[2];
    char x;

    harness_daemon_start(&d, NULL);
    heavy = user_session(0, "heavy", 400000);
    small = user_session(0, "small", 2000);
    alone = timed_report(heavy, true, 240); /* measured: the next ones are heavy */
    cr_assert_gt(alone, 0, "the heavy report failed");
    harness_pipe(fds);
    heavy_loop(0, heavy, LOOPERS, fds);
    close(fds[1]);
    for (int i = 0; i < LOOPERS; i++)
        cr_assert_eq(harness_read_within(fds[0], &x, 1, 30), 0);
    close(fds[0]);
    usleep(200000); /* the loops' reports have been given their slots (or queued) */
    took = timed_report(small, false, 240);
    cr_log_info("a filtered report of 400,000 entries alone %.2f s; a small one while %d run:"
                " %.3f s",
                alone, LOOPERS, took);
    cr_assert_gt(took, 0, "the small report failed");
    cr_assert_lt(took, alone / 4, "the small report took %.2f s; a heavy one alone %.2f s", took,
                 alone);
}
