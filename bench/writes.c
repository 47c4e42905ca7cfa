/*
 * writes.c — tc_bench_writes: what the storage writer costs in disk writes
 * and in fairness (issue 10, items 12 and 4).
 *
 *   tc_bench_writes --amplification [--sessions 200] [--seconds 30]
 *       N producer connections, each its own session, each sending one entry
 *       a second (as a lightly loaded libtracectl does: a batch per entry, no
 *       flush), then one flush each. Reports the daemon's write_bytes
 *       (/proc/PID/io) over the run, per entry.
 *   tc_bench_writes --fairness [--seconds 10]
 *       one producer floods 1000-entry batches as fast as the daemon takes
 *       them; a bystander session sends one entry and a flush every 20 ms and
 *       times the ack. Reports the bystander's flush latency (median, max).
 *
 * The daemon is started by the benchmark (bench_util) under $TMPDIR (a real
 * disk: write_bytes of tmpfs is 0); arguments after `--` go to tracectld
 * (e.g. `-- --commit-interval 0`). Output: JSON lines and a summary on stderr.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

static int bconnect(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, msgpack_sbuffer *sb)
{
    size_t off = 0;

    while (off < sb->size) {
        ssize_t n = write(fd, sb->data + off, sb->size - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    msgpack_sbuffer_clear(sb);
    return 0;
}

/* Reads until one message is decoded; 0, or -1 on EOF/error. */
static int recv_msg(int fd, struct proto_reader *r, struct proto_msg *m)
{
    for (;;) {
        struct proto_error err;
        char *buf;
        ssize_t n;
        int rc = proto_reader_next(r, m, &err);

        if (rc > 0)
            return 0;
        if (rc < 0)
            return -1;
        if ((buf = proto_reader_buffer(r, 65536)) == NULL)
            return -1;
        if ((n = read(fd, buf, 65536)) <= 0)
            return -1;
        proto_reader_commit(r, (size_t)n);
    }
}

struct prod {
    int fd;
    struct proto_reader r;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t seq, sent;
};

static int prod_open(struct prod *p, const char *sock, const char *session)
{
    struct proto_hello h = {
        .proto = 1, .session = (char *)session, .rank = -1, .world = -1, .pid = getpid()};
    struct proto_msg m;

    memset(p, 0, sizeof(*p));
    if ((p->fd = bconnect(sock)) < 0)
        return -1;
    proto_reader_init(&p->r, 0);
    msgpack_sbuffer_init(&p->sb);
    msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
    proto_pack_hello(&p->pk, &h);
    if (send_all(p->fd, &p->sb) < 0 || recv_msg(p->fd, &p->r, &m) < 0)
        return -1;
    if (m.type != PROTO_WELCOME) {
        proto_msg_free(&m);
        return -1;
    }
    proto_msg_free(&m);
    msgpack_pack_array(&p->pk, 2);
    proto_pack_str(&p->pk, "ops");
    msgpack_pack_array(&p->pk, 1);
    msgpack_pack_array(&p->pk, 2);
    msgpack_pack_uint32(&p->pk, 1);
    proto_pack_str(&p->pk, "matmul");
    return send_all(p->fd, &p->sb);
}

static int prod_batch(struct prod *p, size_t n)
{
    proto_pack_batch_header(&p->pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&p->pk, 6);
        msgpack_pack_uint64(&p->pk, p->sent / 256);
        msgpack_pack_uint32(&p->pk, 1);
        msgpack_pack_uint64(&p->pk, 1000000 + p->sent * 1000);
        msgpack_pack_uint64(&p->pk, 100 + p->sent % 977);
        msgpack_pack_nil(&p->pk);
        msgpack_pack_uint64(&p->pk, 4096);
        p->sent++;
    }
    return send_all(p->fd, &p->sb);
}

/* Sends a flush and waits for its reply; the latency in ns, or -1. */
static int64_t prod_flush(struct prod *p)
{
    struct proto_msg m;
    uint64_t t0 = bench_now_ns();
    int ok;

    proto_pack_flush(&p->pk, ++p->seq);
    if (send_all(p->fd, &p->sb) < 0 || recv_msg(p->fd, &p->r, &m) < 0)
        return -1;
    ok = m.type == PROTO_ACK && m.u.ack.seq == p->seq;
    proto_msg_free(&m);
    return ok ? (int64_t)(bench_now_ns() - t0) : -1;
}

static void prod_close(struct prod *p)
{
    if (p->fd >= 0)
        close(p->fd);
    proto_reader_deinit(&p->r);
    msgpack_sbuffer_destroy(&p->sb);
}

/* write_bytes of /proc/pid/io, or 0. */
static uint64_t proc_write_bytes(pid_t pid)
{
    char path[64], line[128];
    unsigned long long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "write_bytes: %llu", &v) == 1)
            break;
    fclose(f);
    return v;
}

static void sleep_until(uint64_t t_ns)
{
    uint64_t now = bench_now_ns();

    if (t_ns > now) {
        struct timespec ts = {.tv_sec = (time_t)((t_ns - now) / 1000000000),
                              .tv_nsec = (long)((t_ns - now) % 1000000000)};
        nanosleep(&ts, NULL);
    }
}

static int run_amplification(struct bdaemon *d, int sessions, int seconds)
{
    struct prod *p = calloc((size_t)sessions, sizeof(*p));
    uint64_t before, after, t0, entries = 0;
    char name[64];
    int rc = 0;

    for (int i = 0; i < sessions; i++) {
        snprintf(name, sizeof(name), "amp-%d", i);
        if (prod_open(&p[i], d->sock, name) < 0 || prod_batch(&p[i], 1) < 0 ||
            prod_flush(&p[i]) < 0) {
            fprintf(stderr, "tc_bench_writes: producer %d failed to start\n", i);
            return -1;
        }
    }
    before = proc_write_bytes(d->pid);
    t0 = bench_now_ns();
    for (int s = 0; s < seconds; s++) {
        for (int i = 0; i < sessions; i++) {
            sleep_until(t0 + (uint64_t)s * 1000000000 + (uint64_t)i * 1000000000 / sessions);
            if (prod_batch(&p[i], 1) < 0)
                rc = -1;
            entries++;
        }
    }
    for (int i = 0; i < sessions; i++)
        if (prod_flush(&p[i]) < 0)
            rc = -1;
    after = proc_write_bytes(d->pid);
    bjson_begin("writes", "amplification");
    bjson_u64("sessions", (uint64_t)sessions);
    bjson_u64("seconds", (uint64_t)seconds);
    bjson_u64("entries", entries);
    bjson_u64("write_bytes", after - before);
    bjson_num("bytes_per_entry", (double)(after - before) / (double)entries);
    bjson_end();
    fprintf(stderr,
            "amplification: %d sessions x 1 entry/s x %d s = %llu entries: %.1f MB written,"
            " %.0f bytes per entry%s\n",
            sessions, seconds, (unsigned long long)entries, (double)(after - before) / 1e6,
            (double)(after - before) / (double)entries, rc ? " (some producers failed)" : "");
    for (int i = 0; i < sessions; i++)
        prod_close(&p[i]);
    free(p);
    return rc;
}

struct flood {
    const char *sock;
    atomic_bool stop;
    uint64_t sent;
    int rc;
};

static void *flood_thread(void *arg)
{
    struct flood *f = arg;
    struct prod p;

    if (prod_open(&p, f->sock, "flood") < 0) {
        f->rc = -1;
        return NULL;
    }
    while (!atomic_load(&f->stop))
        if (prod_batch(&p, 1000) < 0) {
            f->rc = -1;
            break;
        }
    prod_flush(&p);
    f->sent = p.sent;
    prod_close(&p);
    return NULL;
}

static int run_fairness(struct bdaemon *d, int seconds)
{
    struct flood f = {.sock = d->sock};
    size_t cap = (size_t)seconds * 100, n = 0;
    double *lat = calloc(cap, sizeof(double));
    struct prod by;
    pthread_t t;
    uint64_t t0;
    int rc = 0;

    if (prod_open(&by, d->sock, "bystander") < 0 || prod_flush(&by) < 0)
        return -1;
    pthread_create(&t, NULL, flood_thread, &f);
    usleep(500000); /* the flood is under way */
    t0 = bench_now_ns();
    while (n < cap && bench_now_ns() - t0 < (uint64_t)seconds * 1000000000) {
        int64_t ns;
        if (prod_batch(&by, 1) < 0 || (ns = prod_flush(&by)) < 0) {
            rc = -1;
            break;
        }
        lat[n++] = (double)ns / 1e6;
        usleep(20000);
    }
    atomic_store(&f.stop, true);
    pthread_join(t, NULL);
    struct bstat st = bench_stat(lat, n);
    bjson_begin("writes", "fairness");
    bjson_u64("seconds", (uint64_t)seconds);
    bjson_u64("flood_entries", f.sent);
    bjson_stat("bystander_flush_ms", st, n);
    bjson_end();
    fprintf(stderr,
            "fairness: flood sent %llu entries in %d s; bystander flush latency over %zu"
            " flushes: median %.2f ms, min %.2f, max %.2f ms\n",
            (unsigned long long)f.sent, seconds, n, st.median, st.min, st.max);
    prod_close(&by);
    free(lat);
    return rc || f.rc;
}

int main(int argc, char **argv)
{
    int sessions = 200, seconds = -1, mode = 0;
    struct bdaemon d;
    int rc;

    char **daemon_args = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            daemon_args = argv + i + 1;
            break;
        } else if (strcmp(argv[i], "--amplification") == 0)
            mode = 1;
        else if (strcmp(argv[i], "--fairness") == 0)
            mode = 2;
        else if (strcmp(argv[i], "--sessions") == 0 && i + 1 < argc)
            sessions = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else
            mode = -1;
    }
    if (mode <= 0 || sessions <= 0) {
        fprintf(stderr, "usage: tc_bench_writes --amplification [--sessions N] [--seconds S]\n"
                        "       tc_bench_writes --fairness [--seconds S]\n");
        return 2;
    }
    if ((rc = bdaemon_start_args(&d, NULL, daemon_args)) < 0) {
        fprintf(stderr, "tc_bench_writes: cannot start tracectld: %s\n", strerror(-rc));
        return 1;
    }
    if (mode == 1)
        rc = run_amplification(&d, sessions, seconds > 0 ? seconds : 30);
    else
        rc = run_fairness(&d, seconds > 0 ? seconds : 10);
    bdaemon_stop(&d, 15);
    bdaemon_cleanup(&d);
    return rc ? 1 : 0;
}
