/*
 * test_replies.c — replies a peer does not read are bounded and timed out
 * (README "Limits": unread replies, --reply-timeout): `export` streams only
 * as fast as its peer reads, a peer that stops reading is closed, one that
 * reads slowly is not, what they held is given back when they go, and under
 * --system one user's unread replies leave room for another's.
 *
 * The figures below are the README's, written out here (not taken from the
 * daemon's headers) so that the test checks the documentation.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(replies, .fini = fini, .timeout = 400);

/* A session of n entries of one op, sent in batches of 10,000; returns its id, ended. */
static long long make_session(const char *name, size_t n)
{
    long long id;
    int fd = raw_producer(d.sock, name, 0, 1, NULL, &id);

    raw_send_ops(fd, 1, "matmul");
    for (size_t i = 0; i < n; i += 10000)
        raw_send_batch(fd, 1, n - i < 10000 ? n - i : 10000, i * 1000, 1);
    cr_assert_eq(raw_flush(fd, 1), (long long)n);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 60);
    return id;
}

/* A connection that has sent `export` of session id (and reads nothing). */
static int ask_export(long long id)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_request req;
    int fd = raw_connect(d.sock);

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_request_init(&req);
    req.session.id = id;
    proto_pack_request(&pk, PROTO_EXPORT, &req);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    return fd;
}

/*
 * 200 connections ask for the export of a 300,000-entry session (about
 * 9 MiB of rows) and never read. Each export holds at most one chunk and
 * what the kernel's socket buffer took, and its read transaction; the
 * connections are closed by --reply-timeout, and their memory is given back.
 * Before: every export kept its SQLite connection, its page cache and a
 * chunk each, never timed out (400 such took the daemon to 2.24 GiB).
 */
Test(replies, unread_exports_are_bounded_and_given_back)
{
    enum { CONNS = 256, ENTRIES = 300000 };
    static int fds[CONNS];
    long long id;
    long rss0, hwm, rss1;
    double t0;
    int closed = 0;

    harness_asan_small_quarantine();
    harness_daemon_start(&d, "--reply-timeout", "2s", NULL);
    id = make_session("big", ENTRIES);
    harness_wait_idle(d.pid, 60);
    rss0 = harness_proc_kib(d.pid, "VmRSS");
    for (int c = 0; c < CONNS; c++)
        fds[c] = ask_export(id);
    /* Every one of them is closed by the daemon once it has not read for 3 s. */
    t0 = harness_now_s();
    for (int c = 0; c < CONNS; c++) {
        struct pollfd p = {.fd = fds[c], .events = POLLRDHUP};
        int left = (int)((t0 + 120 - harness_now_s()) * 1000);

        if (left > 0 && poll(&p, 1, left) == 1 && (p.revents & (POLLRDHUP | POLLHUP)))
            closed++;
    }
    hwm = harness_proc_kib(d.pid, "VmHWM");
    for (int c = 0; c < CONNS; c++)
        close(fds[c]);
    harness_wait_idle(d.pid, 60);
    rss1 = harness_proc_kib(d.pid, "VmRSS");
    cr_log_info("%d unread exports of %d entries: daemon RSS %ld KiB, peak %ld, after %ld", CONNS,
                ENTRIES, rss0, hwm, rss1);
    cr_assert_eq(closed, CONNS, "only %d of %d stalled exports were closed", closed, CONNS);
    /*
     * The bound (README "Limits"): 32 exports stream at once, each holding
     * one 256 KiB chunk beyond the socket's buffer and its SQLite cache
     * (measured ~0.3 MiB), and their chunks wait while the unread replies
     * pass 32 MiB: under 48 MiB over the baseline (measured 17 MiB). Before:
     * 256 took 92 MiB (each kept a 4,096-row chunk and its cache).
     */
    cr_assert_lt(hwm - rss0, 48L * 1024 * HARNESS_RSS_SCALE,
                 "unread exports grew the daemon by %ld KiB", hwm - rss0);
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer's allocator keeps freed memory mapped: malloc_trim does not reach it. */
    cr_log_info("RSS after close not checked under AddressSanitizer");
#else
    /* glibc's arenas give back what the exports freed (conn_trim): before, 66 MiB stayed. */
    cr_assert_lt(rss1 - rss0, 8L * 1024, "%ld KiB were still held after the connections closed",
                 rss1 - rss0);
#endif
}

/* A live session of `ops` ops with names of 40 bytes, one call each; returns the producer. */
static int make_wide_live(size_t ops, long long *id)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char name[48];
    int fd = raw_producer(d.sock, "wide", 0, 1, NULL, id);

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t base = 0; base < ops; base += 1024) {
        msgpack_pack_array(&pk, 2);
        proto_pack_str(&pk, "ops");
        msgpack_pack_array(&pk, 1024);
        for (size_t i = base; i < base + 1024; i++) {
            msgpack_pack_array(&pk, 2);
            msgpack_pack_uint32(&pk, (uint32_t)i + 1);
            snprintf(name, sizeof(name), "%036zu_op", i);
            proto_pack_str(&pk, name);
        }
        raw_send(fd, &sb);
    }
    proto_pack_batch_header(&pk, ops);
    for (size_t i = 0; i < ops; i++) {
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_uint32(&pk, (uint32_t)i + 1);
        msgpack_pack_uint64(&pk, i * 100);
        msgpack_pack_uint64(&pk, 50);
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    cr_assert_eq(raw_flush(fd, 1), (long long)ops);
    return fd;
}

/*
 * 24 connections ask `live` of a session of 65,536 ops (a 2.75 MiB answer
 * each, 66 MiB in all: over the 64 MiB of unread replies), then read them
 * all, 32 KiB per connection every 20 ms: slowly, for longer than the
 * --reply-timeout of 1 s, but steadily. Every answer arrives whole. One more
 * connection that asks and never reads is closed. Before: the connections
 * over 1 MiB of unread replies were closed as "hogs" as soon as the total
 * passed 64 MiB and another connection wanted to send.
 */
Test(replies, a_slow_reader_is_not_a_hog_a_stalled_one_is)
{
    enum { CONNS = 24, OPS = 65536, PIECE = 32 << 10 };
    static int fds[CONNS];
    static msgpack_unpacker unp[CONNS];
    bool whole[CONNS] = {false};
    int producer, stalled, n_whole = 0;
    long long id;
    double t0, stalled_closed = 0;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_request req;

    harness_daemon_start(&d, "--reply-timeout", "1s", NULL);
    producer = make_wide_live(OPS, &id);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_request_init(&req);
    req.session.id = id;
    stalled = raw_connect(d.sock);
    proto_pack_request(&pk, PROTO_LIVE, &req);
    raw_send(stalled, &sb);
    for (int c = 0; c < CONNS; c++) {
        fds[c] = raw_connect(d.sock);
        proto_pack_request(&pk, PROTO_LIVE, &req);
        raw_send(fds[c], &sb);
        cr_assert(msgpack_unpacker_init(&unp[c], PIECE));
    }
    msgpack_sbuffer_destroy(&sb);
    t0 = harness_now_s();
    while (n_whole < CONNS && harness_now_s() - t0 < 120) {
        struct pollfd p = {.fd = stalled, .events = POLLRDHUP};

        if (stalled_closed == 0 && poll(&p, 1, 0) == 1)
            stalled_closed = harness_now_s() - t0;
        for (int c = 0; c < CONNS; c++) {
            msgpack_unpacked u;
            ssize_t n;

            if (whole[c])
                continue;
            cr_assert(msgpack_unpacker_reserve_buffer(&unp[c], PIECE));
            n = recv(fds[c], msgpack_unpacker_buffer(&unp[c]), PIECE, MSG_DONTWAIT);
            cr_assert(n != 0, "connection %d was closed after %.1f s", c, harness_now_s() - t0);
            if (n < 0) {
                cr_assert(errno == EAGAIN, "connection %d: %s", c, strerror(errno));
                continue;
            }
            msgpack_unpacker_buffer_consumed(&unp[c], (size_t)n);
            msgpack_unpacked_init(&u);
            if (msgpack_unpacker_next(&unp[c], &u) == MSGPACK_UNPACK_SUCCESS) {
                const msgpack_object *o = &u.data;

                cr_assert(o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2 &&
                          obj_str_eq(&o->via.array.ptr[0], "ok"));
                cr_assert_eq(obj_get(&o->via.array.ptr[1], "ops")->via.array.size, OPS);
                whole[c] = true;
                n_whole++;
            }
            msgpack_unpacked_destroy(&u);
        }
        usleep(20000);
    }
    cr_log_info("%d slow readers read %d answers of %d ops in %.1f s; the stalled one was"
                " closed after %.1f s",
                CONNS, n_whole, OPS, harness_now_s() - t0, stalled_closed);
    cr_assert_eq(n_whole, CONNS);
    cr_assert_gt(harness_now_s() - t0, 1.0,
                 "the readers must be slower than the timeout to show it");
    cr_assert(stalled_closed > 0 || raw_closed(stalled), "the stalled reader was not closed");
    for (int c = 0; c < CONNS; c++) {
        close(fds[c]);
        msgpack_unpacker_destroy(&unp[c]);
    }
    close(stalled);
    raw_bye(producer, 0);
}

/*
 * Under --system, one user's unread replies are held to half of the 64 MiB:
 * uid 65534 has 24 connections ask `live` of a 65,536-op session (2.75 MiB
 * each, 66 MiB in all) and read nothing; uid 65533's request is answered at
 * once, and none of the first user's connections is closed for it (they are
 * left to --reply-timeout, 60 s). Before: the daemon closed the connections
 * holding most as soon as another wanted to send past 64 MiB.
 */
Test(replies, one_users_unread_replies_leave_room_for_another)
{
    enum { CONNS = 24, OPS = 65536 };
    int pfd[2], qfd[2], closed = -1;
    long long id;
    pid_t pid;
    char x;
    struct proto_reader r;
    const msgpack_object *o;
    int fd;

    if (geteuid() != 0)
        cr_skip_test("needs root to run two users (setuid in a forked child)");
    harness_daemon_start(&d, "--system", "--admin-group", "tracectl-test-nonexistent", NULL);
    chmod(d.dir, 0755); /* other uids must reach the socket; the daemon filters by uid */
    harness_pipe(pfd);
    harness_pipe(qfd);
    pid = harness_fork_as(65534, 120);
    if (pid == 0) {
        static int fds[CONNS];
        msgpack_sbuffer sb;
        msgpack_packer pk;
        struct proto_request req;
        int producer = make_wide_live(OPS, &id), n = 0;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        proto_request_init(&req);
        req.session.id = id;
        for (int c = 0; c < CONNS; c++) {
            fds[c] = raw_connect(d.sock);
            proto_pack_request(&pk, PROTO_LIVE, &req);
            raw_send(fds[c], &sb);
        }
        msgpack_sbuffer_destroy(&sb);
        /* Told when the other user has been answered: how many of ours were closed. */
        if (write(pfd[1], "x", 1) != 1 || read(qfd[0], &x, 1) != 1)
            _exit(1);
        for (int c = 0; c < CONNS; c++) {
            struct pollfd p = {.fd = fds[c], .events = POLLRDHUP};
            n += poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
        }
        if (write(pfd[1], &n, sizeof(n)) != sizeof(n))
            _exit(1);
        (void)producer;
        pause(); /* killed by harness_reap, connections open */
        _exit(0);
    }
    close(pfd[1]);
    close(qfd[0]);
    cr_assert_eq(harness_read_within(pfd[0], &x, 1, 60), 0);
    /* The daemon has had every request: wait until it has done what it can with them. */
    harness_wait_idle(d.pid, 60);
    pid = harness_fork_as(65533, 30);
    if (pid == 0) {
        o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd); /* asserts on no reply (5 s) */
        _exit(o != NULL && obj_str_eq(&o->via.array.ptr[0], "ok") ? 0 : 1);
    }
    cr_assert_eq(harness_wait_child(pid), 0, "the other user's status was not answered");
    cr_assert_eq(write(qfd[1], "x", 1), 1);
    cr_assert_eq(harness_read_within(pfd[0], &closed, sizeof(closed), 30), 0);
    cr_log_info("%d unread live answers of one user; the other's answered; %d of them closed",
                CONNS, closed);
    cr_assert_eq(closed, 0, "%d of the first user's connections were closed", closed);
}

/*
 * SIGTERM while 40 exports stall, behind 14 unread 2.75 MiB `live` answers
 * (38.5 MiB, over the 32 MiB past which exports wait for room): some have a
 * chunk unread, some wait for room (conn_wait_room), the rest for a slot.
 * The daemon exits 0 (under AddressSanitizer, with nothing leaked) within
 * 3 s.
 */
Test(replies, sigterm_with_exports_stalled_and_waiting)
{
    enum { CONNS = 40, LIVE = 14 };
    static int fds[CONNS], live[LIVE];
    long long id, wide;
    double t0, stop;
    int status, producer;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_request req;

    harness_daemon_start(&d, NULL);
    id = make_session("big", 300000);
    producer = make_wide_live(65536, &wide);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_request_init(&req);
    req.session.id = wide;
    for (int c = 0; c < LIVE; c++) {
        live[c] = raw_connect(d.sock);
        proto_pack_request(&pk, PROTO_LIVE, &req);
        raw_send(live[c], &sb);
    }
    msgpack_sbuffer_destroy(&sb);
    for (int c = 0; c < CONNS; c++)
        fds[c] = ask_export(id);
    harness_wait_idle(d.pid, 60); /* every export that could start has sent what the sockets take */
    t0 = harness_now_s();
    status = harness_daemon_stop(&d, SIGTERM);
    stop = harness_now_s() - t0;
    cr_log_info("SIGTERM with %d exports unread: exit %d in %.2f s", CONNS, status, stop);
    cr_assert_eq(status, 0);
    cr_assert_lt(stop, 3.0);
    for (int c = 0; c < CONNS; c++)
        close(fds[c]);
    for (int c = 0; c < LIVE; c++)
        close(live[c]);
    close(producer);
}
