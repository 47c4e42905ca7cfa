/*
 * test_load.c — tracectld under load and slow peers: 1,000 connections,
 * most idle or stalled halfway through a message, while a producer streams;
 * running out of file descriptors; a control client that never reads.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(load, .fini = fini, .timeout = 120);

static void raise_nofile(rlim_t want)
{
    struct rlimit rl;

    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max < want)
        cr_skip_test("the fd limit's hard cap (%llu) is below %llu",
                     (unsigned long long)rl.rlim_max, (unsigned long long)want);
    rl.rlim_cur = want;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

Test(load, thousand_idle_and_stalled_connections)
{
    enum { IDLE = 500, STALLED = 500, ENTRIES = 50000 };
    static int fds[IDLE + STALLED];
    long long id;

    raise_nofile(4096); /* the daemon inherits it */
    harness_asan_small_quarantine();
    harness_daemon_start(&d, NULL);
    long rss0 = harness_proc_kib(d.pid, "VmRSS");
    for (int i = 0; i < IDLE; i++) {
        fds[i] = raw_connect(d.sock);
        cr_assert_geq(fds[i], 0, "connection %d refused", i);
    }
    /* stalled: a hello, then the first 100 bytes of a batch of 100,000 entries
     * (complete 5-byte entries [0, 1, 0, 0]), then nothing */
    static char partial[100];
    memcpy(partial,
           "\x92\xa5"
           "batch"
           "\xdd\x00\x01\x86\xa0",
           12);
    for (int i = 12; i < (int)sizeof(partial); i++)
        partial[i] = "\x94\x00\x01\x00\x00"[(i - 12) % 5];
    for (int i = IDLE; i < IDLE + STALLED; i++) {
        fds[i] = raw_producer(d.sock, "stalled", i, -1, NULL, NULL);
        cr_assert_eq(send(fds[i], partial, sizeof(partial), MSG_NOSIGNAL),
                     (ssize_t)sizeof(partial));
    }
    /* meanwhile a producer streams and everything it sends is stored */
    int fd = raw_producer(d.sock, "busy", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    for (int k = 0; k < ENTRIES / 1000; k++)
        raw_send_batch(fd, 1, 1000, (uint64_t)k * 1000000, 5);
    cr_assert_eq(raw_flush(fd, 1), ENTRIES);
    /* the daemon saw them all and its memory stayed bounded */
    struct proto_reader r;
    int cfd;
    const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &cfd);
    cr_assert_geq(obj_u64(obj_get(&o->via.array.ptr[1], "connections")), IDLE + STALLED + 1);
    proto_reader_deinit(&r);
    close(cfd);
    long rss = harness_proc_kib(d.pid, "VmRSS");
    cr_assert_lt(rss - rss0, 64 * 1024 * HARNESS_RSS_SCALE, "1,000 connections cost %ld KiB",
                 rss - rss0);
    for (int i = 0; i < IDLE + STALLED; i++)
        close(fds[i]);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 10);
}

/* Open descriptors of a process (its /proc/<pid>/fd entries). */
static int open_fds(pid_t pid)
{
    char path[64];
    struct dirent *e;
    int n = 0;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    if ((dir = opendir(path)) == NULL)
        return -1;
    while ((e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n;
}

/*
 * Out of descriptors, the daemon backs off (no spinning) and leaves the
 * clients it cannot take yet waiting in the backlog: one that connected and
 * sent a request while every descriptor was taken is answered once some are
 * free (libuv's own answer to EMFILE, accepting and closing, would drop it).
 */
Test(load, out_of_file_descriptors_backs_off_and_serves_the_waiting_client_after)
{
    enum { N = 80, LIMIT = 48 };
    int fds[N], opened = 0;
    char pid[16], lim[32];

    raise_nofile(1024);
    harness_daemon_start(&d, NULL);
    snprintf(pid, sizeof(pid), "%d", (int)d.pid);
    snprintf(lim, sizeof(lim), "--nofile=%d:%d", LIMIT, LIMIT);
    char *argv[] = {"prlimit", "--pid", pid, lim, NULL};
    if (harness_run(NULL, argv) != 0)
        cr_skip_test("prlimit is not available");
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(d.sock);
        if (fds[i] >= 0)
            opened++;
    }
    cr_assert_eq(opened, N, "connections wait in the backlog: all connect");
    /* the event: every descriptor the daemon may have is in use */
    for (int i = 0; open_fds(d.pid) < LIMIT; i++) {
        cr_assert_lt(i, 1000, "the daemon never reached its %d descriptors (%d)", LIMIT,
                     open_fds(d.pid));
        usleep(5000);
    }
    /* a client beyond the limit asks for something */
    struct proto_request req;
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int waiting = raw_connect(d.sock);
    cr_assert_geq(waiting, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_request_init(&req);
    proto_pack_request(&pk, PROTO_STATUS, &req);
    raw_send(waiting, &sb);
    msgpack_sbuffer_destroy(&sb);
    /* a measurement over 1 s, not a synchronisation: backing off costs no CPU */
    long long t0 = harness_cpu_ticks(d.pid);
    usleep(1000000);
    long long used = harness_cpu_ticks(d.pid) - t0;
    long hz = sysconf(_SC_CLK_TCK);
    cr_assert_lt(used, hz / 2, "the daemon used %lld ticks of %ld in 1 s: spinning", used, hz);
    /* free the descriptors: the waiting client is served (raw_recv waits up to 5 s) */
    for (int i = 0; i < N; i++)
        close(fds[i]);
    proto_reader_init(&r, 64 << 20);
    cr_assert_eq(raw_recv(waiting, &r, &m), 0,
                 "the client that waited for a descriptor was dropped unanswered");
    cr_assert_eq(m.type, PROTO_OK, "%s", m.type == PROTO_ERROR ? m.u.error.message : "");
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    close(waiting);
}

Test(load, control_client_that_never_reads)
{
    enum { REQUESTS = 200000 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_request req;

    harness_asan_small_quarantine();
    harness_daemon_start(&d, NULL);
    long rss0 = harness_proc_kib(d.pid, "VmRSS");
    int lazy = raw_connect(d.sock);
    /* pipeline status requests and never read a reply */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_request_init(&req);
    for (int i = 0; i < 1000; i++)
        proto_pack_request(&pk, PROTO_STATUS, &req);
    int sent = 0;
    for (int i = 0; i < REQUESTS / 1000; i++) {
        ssize_t n = send(lazy, sb.data, sb.size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < (ssize_t)sb.size)
            break; /* the daemon stopped reading us: exactly what should happen */
        sent += 1000;
    }
    msgpack_sbuffer_destroy(&sb);
    usleep(300000);
    /* others are served, and the unread replies did not pile up without bound */
    struct proto_reader r;
    int cfd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    proto_reader_deinit(&r);
    close(cfd);
    long rss = harness_proc_kib(d.pid, "VmRSS");
    cr_assert_lt(rss - rss0, 48 * 1024 * HARNESS_RSS_SCALE,
                 "unread replies grew the daemon by %ld KiB (%d sent)", rss - rss0, sent);
    cr_assert_lt(sent, REQUESTS, "the daemon kept reading a client that never reads");
    close(lazy);
}
