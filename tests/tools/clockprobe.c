/*
 * clockprobe — the clock probes of daemon/peer/peerclock_io.h over plain TCP, for
 * tests/tools/clock_ns.sh and the figures of docs/BENCHMARKS.md.
 *
 *   clockprobe serve [--bind ADDR] [--port P] [--connections N]
 *       the member's side: prints "port P" once listening, answers the probes
 *       of N connections (default 1), one after the other, then exits.
 *   clockprobe probe --connect ADDR:PORT [--bursts B] [--probes N]
 *                    [--interval-ms I] [--truth-ns T]
 *       the home's side: B bursts of N probes, I ms apart, into a peerclock.
 *       Prints one JSON line per burst and a summary line. With --truth-ns
 *       (the member's clock minus ours, known: unshare --time --monotonic),
 *       every estimate (at each burst, between bursts, past the last) must
 *       be within its bound of T, and the drift over the run within its
 *       bound of 0 (the namespace offsets the same clock): exit 1 with FAIL
 *       lines when one is not.
 *
 * Exit status: 0 done (and every check held), 1 a check failed, 2 an error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "peerclock.h"
#include "peerclock_io.h"

#define TIMEOUT_MS 10000

static int usage(void)
{
    fprintf(stderr, "usage: clockprobe serve [--bind ADDR] [--port P] [--connections N]\n"
                    "       clockprobe probe --connect ADDR:PORT [--bursts B] [--probes N]\n"
                    "                        [--interval-ms I] [--truth-ns T]\n");
    return 2;
}

static int parse_addr(const char *host, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int serve(int argc, char **argv)
{
    const char *bind_addr = "127.0.0.1";
    int port = 0, conns = 1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--bind") && i + 1 < argc)
            bind_addr = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--connections") && i + 1 < argc)
            conns = atoi(argv[++i]);
        else
            return usage();
    }
    struct sockaddr_in sa;
    if (parse_addr(bind_addr, port, &sa) < 0)
        return usage();
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = sizeof(sa);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 4) < 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &len) < 0) {
        fprintf(stderr, "clockprobe: listen on %s:%d: %s\n", bind_addr, port, strerror(errno));
        return 2;
    }
    printf("port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    for (int c = 0; c < conns; c++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            fprintf(stderr, "clockprobe: accept: %s\n", strerror(errno));
            return 2;
        }
        nodelay(fd);
        struct peerclock_fd f = {fd, -1};
        struct peerclock_io io;
        peerclock_io_fd(&io, &f);
        int rc = peerclock_io_serve(&io);
        close(fd);
        if (rc < 0) {
            fprintf(stderr, "clockprobe: serve: %s\n", strerror(-rc));
            return 2;
        }
    }
    close(ls);
    return 0;
}

static int connect_to(const char *target)
{
    char host[64];
    const char *colon = strrchr(target, ':');
    struct sockaddr_in sa;
    if (!colon || (size_t)(colon - target) >= sizeof(host))
        return -1;
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    if (parse_addr(host, atoi(colon + 1), &sa) < 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "clockprobe: connect %s: %s\n", target, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    nodelay(fd);
    return fd;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t median(int64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp64);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The estimate at home time h against the truth; 0 if within its bound (*bound set). */
static int check(const struct peerclock *pc, int64_t h, int64_t truth, const char *where,
                 int64_t *worst, int64_t *bound)
{
    struct peerclock_at a;
    if (peerclock_offset_at(pc, h, &a) < 0)
        return 0;
    if (bound)
        *bound = a.bound_ns;
    int64_t err = llabs(a.offset_ns - truth);
    if (err > *worst)
        *worst = err;
    if (err <= a.bound_ns)
        return 0;
    printf("FAIL %s at %" PRId64 ": offset %" PRId64 " is %" PRId64
           " from the truth, bound %" PRId64 "\n",
           where, h, a.offset_ns, err, a.bound_ns);
    return 1;
}

struct probe_opts {
    const char *target;
    int bursts, probes, interval_ms, have_truth;
    int64_t truth;
};

static int probe_run(const struct probe_opts *o, int fd)
{
    struct peerclock *pc = calloc(1, sizeof(*pc));
    int64_t *bounds = calloc((size_t)o->bursts, sizeof(int64_t));
    int64_t *rtts = calloc((size_t)o->bursts, sizeof(int64_t));
    int64_t *mids = calloc((size_t)o->bursts, sizeof(int64_t)); /* bounds midway between */
    struct peerclock_sample *s = calloc((size_t)o->probes, sizeof(*s));
    if (!pc || !bounds || !rtts || !mids || !s)
        return 2;
    peerclock_init(pc);
    struct peerclock_fd f = {fd, TIMEOUT_MS};
    struct peerclock_io io;
    peerclock_io_fd(&io, &f);
    uint32_t seq = 0;
    int fails = 0, rc = 0;
    int64_t worst = 0, worst_between = 0;
    for (int b = 0; b < o->bursts; b++) {
        if (b > 0) {
            struct timespec ts = {o->interval_ms / 1000, (o->interval_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            /* past the last burst, now: the extension is what a live conversion uses */
            if (o->have_truth)
                fails += check(pc, peerclock_now(), o->truth, "extension", &worst_between, NULL);
        }
        rc = peerclock_io_burst(&io, &seq, (size_t)o->probes, s);
        if (rc < 0) {
            fprintf(stderr, "clockprobe: burst %d: %s\n", b, strerror(-rc));
            return 2;
        }
        struct peerclock_burst est;
        rc = peerclock_add_burst(pc, s, (size_t)o->probes, &est);
        if (rc < 0) {
            fprintf(stderr, "clockprobe: burst %d refused: %s\n", b, strerror(-rc));
            return 2;
        }
        bounds[b] = est.bound;
        rtts[b] = est.rtt_bound;
        struct peerclock_at a;
        peerclock_offset_at(pc, est.at, &a);
        printf("{\"burst\": %d, \"offset_ns\": %" PRId64 ", \"bound_ns\": %" PRId64
               ", \"rtt_bound_ns\": %" PRId64 ", \"drift_ppm\": %.3f",
               b, est.offset, est.bound, est.rtt_bound, a.drift_ppm);
        if (o->have_truth) {
            int64_t err = llabs(est.offset - o->truth);
            printf(", \"error_ns\": %" PRId64, err);
            if (err > worst)
                worst = err;
            if (err > est.bound) {
                printf("}\nFAIL burst %d: error %" PRId64 " > bound %" PRId64, b, err, est.bound);
                fails++;
            }
        }
        printf("}\n");
        /* between the last two bursts: the interpolation */
        if (o->have_truth && pc->n >= 2) {
            const struct peerclock_burst *p = &pc->bursts[pc->n - 2];
            for (int k = 1; k < 4; k++)
                fails += check(pc, p->at + (est.at - p->at) * k / 4, o->truth, "between",
                               &worst_between, k == 2 ? &mids[b - 1] : NULL);
        }
    }
    /* a time namespace offsets the same clock: the true drift is 0 */
    double ppm = 0, ppm_bound = 0;
    if (peerclock_drift(pc, INT64_MAX, &ppm, &ppm_bound) == 0 && o->have_truth &&
        fabs(ppm) > ppm_bound) {
        printf("FAIL drift %.3f ppm, bound %.3f: the true drift is 0\n", ppm, ppm_bound);
        fails++;
    }
    printf("{\"summary\": true, \"bursts\": %d, \"probes\": %d, \"median_bound_ns\": %" PRId64
           ", \"last_bound_ns\": %" PRId64 ", \"median_rtt_bound_ns\": %" PRId64,
           o->bursts, o->probes, median(bounds, (size_t)o->bursts), bounds[o->bursts - 1],
           median(rtts, (size_t)o->bursts));
    if (o->bursts > 1)
        printf(", \"median_midway_bound_ns\": %" PRId64, median(mids, (size_t)o->bursts - 1));
    if (o->have_truth)
        printf(", \"max_error_ns\": %" PRId64 ", \"max_error_between_ns\": %" PRId64
               ", \"failures\": %d",
               worst, worst_between, fails);
    printf(", \"drift_ppm\": %.3f, \"drift_bound_ppm\": %.3f, \"model_breaks\": %" PRIu64 "}\n",
           ppm, ppm_bound, pc->model_breaks);
    free(pc);
    free(bounds);
    free(rtts);
    free(mids);
    free(s);
    return fails ? 1 : 0;
}

static int probe(int argc, char **argv)
{
    struct probe_opts o = {.bursts = 10, .probes = 16, .interval_ms = 200};
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--connect") && i + 1 < argc)
            o.target = argv[++i];
        else if (!strcmp(argv[i], "--bursts") && i + 1 < argc)
            o.bursts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--probes") && i + 1 < argc)
            o.probes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc)
            o.interval_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--truth-ns") && i + 1 < argc)
            o.truth = strtoll(argv[++i], NULL, 10), o.have_truth = 1;
        else
            return usage();
    }
    if (!o.target || o.bursts < 1 || o.probes < 1 || o.probes > PEERCLOCK_PROBES_MAX ||
        o.interval_ms < 0)
        return usage();
    int fd = connect_to(o.target);
    if (fd < 0)
        return 2;
    int rc = probe_run(&o, fd);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "serve"))
        return serve(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "probe"))
        return probe(argc - 2, argv + 2);
    return usage();
}
