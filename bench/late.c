/*
 * late.c — tc_bench_late: what `tracectl top`'s late-rank line costs the
 * daemon per ask, the whole report with its analysis (what top asked before
 * the report option "late") against "late" alone (PROTOCOL.md Part 3).
 *
 *   tc_bench_late [--ranks 16] [--steps 2500] [--per-step 25] [--asks 21] [--keep FILE]
 *                 [-- tracectld args...]
 *
 * Starts tracectld (bench_util, under $TMPDIR), records one session with
 * --ranks producer processes (libtracectl, blocking mode) of --steps steps,
 * each step --per-step entries per rank: 2 allreduces carrying ext comm +
 * seq (one rank starts each later: the late rank), the rest gemm entries
 * (16 x 2,500 x 25 = 1 M entries), waits for the session to end, then
 * asks both requests --asks times each, interleaved (old, late, old, ...),
 * each on a new connection as top does, and times the round trip. Also the
 * daemon's CPU time over each series (/proc, divided by the asks) and the
 * reply's size. --keep copies the session file to FILE at the end (to look at
 * its SQL with sqlite3). Output: one JSON line and a summary on stderr.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

#define COLLS 2

static int producer(const char *sock, int rank, int ranks, uint64_t steps, int gemms)
{
    tc_options o;
    tc_client *c;
    uint32_t gemm, comm;
    uint64_t t = 1000000, k = 0;
    int err = 0;

    tc_options_init(&o);
    o.socket_path = sock;
    o.session = "late";
    o.rank = rank;
    o.world = ranks;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL)
        return 10;
    gemm = tc_op(c, "gemm");
    comm = tc_op_cat(c, "allreduce", "comm");
    for (uint64_t s = 0; s < steps; s++) {
        tc_set_step(c, s);
        for (int i = 0; i < gemms; i++, t += 10000)
            tc_record(c, gemm, t, 5000 + (uint64_t)(rank * 37 + i) % 900, 0, NULL, NULL, 0, NULL);
        for (int i = 0; i < COLLS; i++, t += 10000, k++) {
            tc_ext x = {.has = TC_EXT_COMM | TC_EXT_SEQ, .comm = 1, .seq = k};
            uint64_t late = (int)(k % (uint64_t)ranks) == rank ? 3000 : 0;
            tc_record_ext(c, comm, t + late, 2000, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
        }
    }
    return tc_close(c) == 0 ? 0 : 11;
}

/* Waits until the session named "late" has ended; returns its id and entries, or -1. */
static int64_t await_end(const char *sock, uint64_t *entries)
{
    for (int i = 0; i < 6000; i++) {
        struct bctl ctl;
        const msgpack_object *l, *row;
        int64_t id = -1;

        if (bctl_open(&ctl, sock) == 0) {
            if ((l = bctl_request(&ctl, PROTO_SESSIONS, NULL)) != NULL &&
                (row = bobj_session_row(l, "late")) != NULL &&
                bobj_str_eq(bobj_get(row, "state"), "ended")) {
                id = (int64_t)bobj_u64(bobj_get(row, "id"));
                *entries = bobj_u64(bobj_get(row, "entries"));
            }
            bctl_close(&ctl);
        }
        if (id >= 0)
            return id;
        usleep(100000);
    }
    return -1;
}

/* One ask on a new connection: its round trip in seconds, the reply's size; < 0 on failure. */
static double ask(const char *sock, int64_t id, bool late, size_t *bytes)
{
    struct proto_request req;
    struct bctl ctl;
    const msgpack_object *res;
    msgpack_sbuffer sb;
    uint64_t t0 = bench_now_ns(), t1;

    proto_request_init(&req);
    req.session.id = id;
    req.late = late;
    req.analysis.on = true; /* as top sends it */
    req.top = 1;
    req.ops_limit = 1;
    if (bctl_open(&ctl, sock) != 0)
        return -1.0;
    res = bctl_request(&ctl, PROTO_REPORT, &req);
    t1 = bench_now_ns();
    if (res == NULL || (late && bobj_get(res, "late") == NULL)) {
        bctl_close(&ctl);
        return -1.0;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_pack_object(&(msgpack_packer){&sb, msgpack_sbuffer_write}, *res);
    *bytes = sb.size;
    msgpack_sbuffer_destroy(&sb);
    bctl_close(&ctl);
    return (double)(t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
    int ranks = 16, asks = 21, n_args = 0, per_step = 25;
    const char *keep = NULL, *format = "blocks"; /* tracectld's default */
    uint64_t steps = 2500, entries = 0;
    char *daemon_args[32] = {NULL};
    struct bdaemon d;
    double *t[2], cpu[2] = {0, 0};
    size_t bytes[2] = {0, 0};
    char machine[256];
    int64_t id;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--per-step") == 0 && i + 1 < argc)
            per_step = atoi(argv[++i]);
        else if (strcmp(argv[i], "--asks") == 0 && i + 1 < argc)
            asks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            keep = argv[++i];
        else if (strcmp(argv[i], "--") == 0)
            while (++i < argc && n_args < 31)
                daemon_args[n_args++] = argv[i];
        else {
            fprintf(stderr, "usage: tc_bench_late [--ranks N] [--steps N] [--asks N] [-- args]\n");
            return 2;
        }
    }
    for (int i = 0; i + 1 < n_args; i++)
        if (strcmp(daemon_args[i], "--storage-format") == 0)
            format = daemon_args[i + 1];
    if (ranks < 2 || asks < 1 || steps < 1 || per_step <= COLLS)
        return 2;
    if (bdaemon_start_args(&d, NULL, daemon_args) < 0) {
        fprintf(stderr, "tc_bench_late: cannot start tracectld\n");
        return 1;
    }
    for (int r = 0; r < ranks; r++) {
        pid_t p = fork();
        if (p == 0)
            _exit(producer(d.sock, r, ranks, steps, per_step - COLLS));
    }
    for (int r = 0; r < ranks; r++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "tc_bench_late: a producer failed\n");
            bdaemon_cleanup(&d);
            return 1;
        }
    }
    if ((id = await_end(d.sock, &entries)) < 0) {
        fprintf(stderr, "tc_bench_late: the session did not end\n");
        bdaemon_cleanup(&d);
        return 1;
    }
    t[0] = calloc((size_t)asks, sizeof(double));
    t[1] = calloc((size_t)asks, sizeof(double));
    for (int i = 0; i < asks; i++) {
        for (int late = 0; late < 2; late++) {
            double c0 = bench_proc_cpu_s(d.pid);
            t[late][i] = ask(d.sock, id, late, &bytes[late]);
            cpu[late] += bench_proc_cpu_s(d.pid) - c0;
            if (t[late][i] < 0) {
                fprintf(stderr, "tc_bench_late: an ask failed\n");
                bdaemon_cleanup(&d);
                return 1;
            }
        }
    }
    {
        struct bstat o = bench_stat(t[0], (size_t)asks), l = bench_stat(t[1], (size_t)asks);
        bjson_begin("late", "asks");
        bjson_u64("entries", entries);
        bjson_u64("ranks", (uint64_t)ranks);
        bjson_u64("steps", steps);
        bjson_u64("per_step", (uint64_t)per_step);
        bjson_str("format", format);
        bjson_u64("asks", (uint64_t)asks);
        bjson_stat("report_analysis_s", o, (size_t)asks);
        bjson_stat("late_s", l, (size_t)asks);
        bjson_num("report_analysis_daemon_cpu_s", cpu[0] / asks);
        bjson_num("late_daemon_cpu_s", cpu[1] / asks);
        bjson_u64("report_analysis_bytes", bytes[0]);
        bjson_u64("late_bytes", bytes[1]);
        bjson_end();
        bench_machine(machine, sizeof(machine));
        fprintf(stderr,
                "tc_bench_late: %llu entries, %d ranks x %llu steps (%s)\n"
                "  report+analysis: median %.1f ms [%.1f-%.1f], daemon CPU %.1f ms/ask, %zu B\n"
                "  late:            median %.2f ms [%.2f-%.2f], daemon CPU %.2f ms/ask, %zu B\n",
                (unsigned long long)entries, ranks, (unsigned long long)steps, machine,
                o.median * 1e3, o.min * 1e3, o.max * 1e3, cpu[0] / asks * 1e3, bytes[0],
                l.median * 1e3, l.min * 1e3, l.max * 1e3, cpu[1] / asks * 1e3, bytes[1]);
    }
    free(t[0]);
    free(t[1]);
    bdaemon_stop(&d, SIGTERM);
    if (keep != NULL) {
        char cmd[2 * PATH_MAX + 64];
        snprintf(cmd, sizeof(cmd), "cp '%s/sessions/%lld.db' '%s'", d.data, (long long)id, keep);
        if (system(cmd) != 0)
            fprintf(stderr, "tc_bench_late: cannot copy the session file to %s\n", keep);
    }
    bdaemon_cleanup(&d);
    return 0;
}
