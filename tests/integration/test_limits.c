/*
 * test_limits.c — a real tracectld's caps, which keep one user from starving
 * the others (README "Limits"): the per-session and per-user byte caps hold
 * on what is accepted, and under --system one user cannot take every
 * connection or every live session (needs root: skipped without).
 *
 * Expected figures are computed here, by hand, from the entries sent; never
 * from the code under test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(limits, .fini = stop_and_clean, .timeout = 120);

/* ---- caps that hold ------------------------------------------------------ */

/* The sessions row of id: entries, dropped, bytes. */
static void session_figures(long long id, unsigned long long out[3])
{
    struct proto_reader r;
    int fd;
    const msgpack_object *row = raw_session_row(d.sock, id, &r, &fd);

    cr_assert_not_null(row);
    out[0] = obj_u64(obj_get(row, "entries"));
    out[1] = obj_u64(obj_get(row, "dropped"));
    out[2] = obj_u64(obj_get(row, "bytes"));
    proto_reader_deinit(&r);
    close(fd);
}

/*
 * A flood of 200,000 entries in well under a second (the size sampler's
 * period) against --max-session-bytes 1M: exactly what fits is accepted,
 * counting 64 KiB for the new file and 96 bytes an entry without shapes
 * (README), so (1 MiB - 64 KiB) / 96 = 10,240 entries; the rest
 * is dropped and counted, and the file ends within the cap.
 */
Test(limits, session_byte_cap_holds_on_what_is_accepted)
{
    long long id;
    unsigned long long f[3];

    harness_daemon_start(&d, "--max-session-bytes", "1M", NULL);
    int fd = raw_producer(d.sock, "capped", 0, 1, NULL, &id);
    raw_send_ops(fd, 1, "matmul");
    for (int i = 0; i < 200; i++)
        raw_send_batch(fd, 1, 1000, (uint64_t)i * 1000000, 5);
    cr_assert_eq(raw_flush(fd, 1), 10240, "accepted beyond the cap");
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 30);
    session_figures(id, f);
    cr_assert_eq(f[0], 10240);
    cr_assert_eq(f[1], 200000 - 10240, "the refused entries are counted as dropped");
    cr_assert_leq(f[2], 1048576, "the file (%llu bytes) is over the 1 MiB cap", f[2]);
}

Test(limits, user_byte_cap_holds_across_sessions_as_entries_arrive)
{
    long long a, b;
    unsigned long long f[3];

    harness_daemon_start(&d, "--max-user-bytes", "2M", NULL);
    int fa = raw_producer(d.sock, "first", 0, 1, NULL, &a);
    raw_send_ops(fa, 1, "matmul");
    for (int i = 0; i < 20; i++)
        raw_send_batch(fa, 1, 1000, (uint64_t)i * 1000000, 5);
    cr_assert_eq(raw_flush(fa, 1), 20000);
    /* a second live session of the same user shares the 2 MiB: two files of 64 KiB and
     * (2 MiB - 128 KiB) / 96 = 20,480 entries in all */
    int fb = raw_producer(d.sock, "second", 0, 1, NULL, &b);
    raw_send_ops(fb, 1, "matmul");
    for (int i = 0; i < 100; i++)
        raw_send_batch(fb, 1, 1000, (uint64_t)i * 1000000, 5);
    cr_assert_eq(raw_flush(fb, 1), 480, "accepted beyond the user's cap");
    raw_bye(fa, 0);
    raw_bye(fb, 0);
    raw_wait_state(d.sock, b, "ended", 30);
    session_figures(b, f);
    cr_assert_eq(f[1], 100000 - 480);
    /* and the user can start no new session */
    struct proto_hello h = {.proto = 1, .session = "third", .rank = -1, .world = -1, .pid = -1};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fc = raw_connect(d.sock);
    raw_pack_init(&sb, &pk);
    proto_pack_hello(&pk, &h);
    raw_send(fc, &sb);
    msgpack_sbuffer_destroy(&sb);
    raw_expect_error(fc, "limit");
    close(fc);
}

/* ---- per-user shares under --system --------------------------------------- */

/*
 * These tests fork children as other uids that hold connections open while
 * the test looks. Each child is a harness_fork_as() child (killed with the
 * test, reaped in fini, no assertion of its own); each pipe is O_CLOEXEC and
 * its write end is closed in the parent at once, so a child that dies early
 * is an EOF, never a read that waits forever.
 */

/* Sends sb whole without asserting (a refused connection may be closed already): 0 or -1. */
static int send_quiet(int fd, msgpack_sbuffer *sb)
{
    for (size_t off = 0; off < sb->size;) {
        ssize_t n = send(fd, sb->data + off, sb->size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

/*
 * On a fresh connection, a status request: 1 answered ok, 0 refused with
 * `limit`, -1 otherwise. Asserts nothing (children call it). A refused
 * connection gets its error and is closed as soon as it is accepted, maybe
 * before the request is sent: the send may fail, the error is still there
 * to read.
 */
static int conn_ok(int *fd_out)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int ok = -1;
    int fd = raw_connect(d.sock);

    if (fd < 0)
        return -1;
    raw_pack_init(&sb, &pk);
    proto_request_init(&req);
    proto_pack_request(&pk, PROTO_STATUS, &req);
    (void)send_quiet(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 64 << 20);
    if (raw_recv_object(fd, &r, &o) == 0 && o->type == MSGPACK_OBJECT_ARRAY &&
        o->via.array.size == 2) {
        if (obj_str_eq(&o->via.array.ptr[0], "ok"))
            ok = 1;
        else if (obj_str_eq(obj_get(&o->via.array.ptr[1], "code"), "limit"))
            ok = 0;
    }
    proto_reader_deinit(&r);
    *fd_out = fd;
    return ok;
}

/*
 * A hello for session `name` on a fresh connection: 1 welcome, 0 refused
 * with `limit`, -1 otherwise; *fd_out is the connection. Asserts nothing.
 */
static int hello_ok(const char *name, int rank, int world, int *fd_out)
{
    struct proto_hello h = {
        .proto = 1, .session = (char *)name, .rank = rank, .world = world, .pid = getpid()};
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int ok = -1;
    int fd = raw_connect(d.sock);

    if (fd < 0)
        return -1;
    raw_pack_init(&sb, &pk);
    proto_pack_hello(&pk, &h);
    (void)send_quiet(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    if (raw_recv(fd, &r, &m) == 0) {
        if (m.type == PROTO_WELCOME)
            ok = 1;
        else if (m.type == PROTO_ERROR && strcmp(m.u.error.code, "limit") == 0)
            ok = 0;
        proto_msg_free(&m);
    }
    proto_reader_deinit(&r);
    *fd_out = fd;
    return ok;
}

/* In a child: blocks until the parent closes hold's write end (or dies). */
static void wait_for_release(const int hold[2])
{
    char c;

    while (read(hold[0], &c, 1) > 0)
        ;
}

/*
 * As uid: opens `n` connections, writes how many were served then how many
 * refused to a new pipe, and holds them until `hold` reaches EOF. Returns the
 * child; *res is the pipe's read end.
 */
static pid_t hold_conns(uid_t uid, int n, const int hold[2], int *res)
{
    int pfd[2];
    pid_t pid;

    harness_pipe(pfd);
    pid = harness_fork_as(uid, 60);
    if (pid == 0) {
        int fds[64], count[2] = {0, 0};
        close(hold[1]); /* the parent's copy is then the only one: its close is the signal */
        close(pfd[0]);
        for (int i = 0; i < n && i < 64; i++) {
            int ok = conn_ok(&fds[i]);
            if (ok < 0)
                _exit(3);
            count[ok ? 0 : 1]++;
        }
        if (write(pfd[1], count, sizeof(count)) != sizeof(count))
            _exit(4);
        wait_for_release(hold);
        _exit(0);
    }
    close(pfd[1]);
    *res = pfd[0];
    return pid;
}

/* Served and refused connections of a hold_conns() child. */
static void held_counts(int res, uid_t uid, int count[2])
{
    cr_assert_eq(harness_read_within(res, count, 2 * sizeof(int), 30), 0,
                 "the child as uid %u failed", uid);
    close(res);
}

Test(limits, one_user_cannot_take_every_connection, .timeout = 60)
{
    int hold[2], count[2], res, fd;

    harness_system_daemon(&d, "--max-connections", "8");
    harness_pipe(hold);
    /* uid 65534 tries 6: its share is 4 (half of 8) */
    pid_t a = hold_conns(65534, 6, hold, &res);
    held_counts(res, 65534, count);
    cr_assert_eq(count[0], 4, "uid 65534 was served %d connections, its share is 4", count[0]);
    cr_assert_eq(count[1], 2);
    /* uid 65533 still gets its own: 3 (the last of 8 is kept for admins) */
    pid_t b = hold_conns(65533, 4, hold, &res);
    held_counts(res, 65533, count);
    cr_assert_eq(count[0], 3, "uid 65533 was served %d connections", count[0]);
    cr_assert_eq(count[1], 1);
    /* root gets the reserved one */
    cr_assert_eq(conn_ok(&fd), 1, "root was locked out");
    close(fd);
    close(hold[1]);
    close(hold[0]);
    cr_assert_eq(harness_wait_child(a), 0);
    cr_assert_eq(harness_wait_child(b), 0);
}

Test(limits, one_user_cannot_take_every_live_session, .timeout = 60)
{
    int hold[2], pfd[2], got[2], out[3], held[3];

    harness_system_daemon(&d, "--max-live-sessions", "4");
    harness_pipe(hold);
    harness_pipe(pfd);
    /* uid 65534 holds 2 live sessions (its share of 4); a third is refused */
    pid_t pid = harness_fork_as(65534, 60);
    if (pid == 0) {
        close(hold[1]);
        close(pfd[0]);
        out[0] = hello_ok("one", 0, 1, &held[0]);
        out[1] = hello_ok("two", 0, 1, &held[1]);
        out[2] = hello_ok("three", -1, -1, &held[2]);
        if (write(pfd[1], out, sizeof(out)) != sizeof(out))
            _exit(4);
        wait_for_release(hold);
        _exit(0);
    }
    close(pfd[1]);
    cr_assert_eq(harness_read_within(pfd[0], out, sizeof(out), 30), 0, "the child as 65534 failed");
    close(pfd[0]);
    cr_assert_eq(out[0], 1, "uid 65534's first session was not welcomed");
    cr_assert_eq(out[1], 1, "uid 65534's second session was not welcomed");
    cr_assert_eq(out[2], 0, "uid 65534 started a third live session, over its share of 2");
    /* another user still starts one */
    raw_user_session(d.sock, 65533, "other", 1, 1, got);
    close(hold[1]);
    close(hold[0]);
    cr_assert_eq(harness_wait_child(pid), 0);
}
