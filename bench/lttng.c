/*
 * lttng.c — tc_bench_lttng: the LTTng-UST side of tc_bench_client. It is a
 * separate program because lttng-ust registers with the session daemon when
 * the program starts: tc_bench_client creates and starts a user-space
 * recording session first, then runs this.
 *
 *   tc_bench_lttng [--reps R (7)] [--burst B (100000)]
 *
 * Per repetition, a burst of B events (small enough for the channel's
 * buffers, so no event is discarded), then a pause for the consumer daemon
 * to drain them. Prints one JSON line: whether the tracepoints were enabled
 * (registered with a recording session), and the ns per event, as the
 * recording thread's CPU time (<name>_cpu_ns) and as wall time
 * (<name>_wall_ns, which also counts the time the thread sat descheduled
 * while lttng-consumerd or others had the cores), of
 *   tp            one tracepoint with op, step, start, dur, mem (fields ready),
 *   event         two clock_gettime + that tracepoint (what a tc begin+end does),
 *   tp_shapes     the same with the output and two input shapes,
 *   event_shapes  two clock_gettime + tp_shapes,
 * as median, min and max over the repetitions.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "lttng_tp.h"

#define MAX_REPS 64

enum variant { TP, EVENT, TP_SHAPES, EVENT_SHAPES, N_VARIANTS };

static const tc_shape out_shape = {2, {32, 1024}};
static const tc_shape in_shapes[2] = {{2, {32, 4096}}, {2, {4096, 1024}}};

/* ns per event of one burst of one variant: wall time, and this thread's CPU time. */
static void burst(enum variant v, uint64_t n, double *wall, double *cpu)
{
    uint64_t t0 = bench_now_ns(), c0 = bench_thread_ns(), start = 1000, dur = 100;

    for (uint64_t i = 0; i < n; i++) {
        if (v == EVENT || v == EVENT_SHAPES) {
            start = bench_now_ns();
            dur = bench_now_ns() - start;
        }
        if (v == TP || v == EVENT)
            lttng_ust_tracepoint(tc_bench, entry, (uint32_t)(i & 31), i >> 6, start, dur, i);
        else
            lttng_ust_tracepoint(tc_bench, entry_shapes, (uint32_t)(i & 31), i >> 6, start, dur, i,
                                 &out_shape, in_shapes);
    }
    *cpu = (double)(bench_thread_ns() - c0) / (double)n;
    *wall = (double)(bench_now_ns() - t0) / (double)n;
}

int main(int argc, char **argv)
{
    static const char *const names[N_VARIANTS] = {"tp", "event", "tp_shapes", "event_shapes"};
    static const struct option lo[] = {{"reps", required_argument, NULL, 'r'},
                                       {"burst", required_argument, NULL, 'b'},
                                       {NULL, 0, NULL, 0}};
    double wall[N_VARIANTS][MAX_REPS], cpu[N_VARIANTS][MAX_REPS];
    char key[64];
    uint64_t n = 100000;
    int reps = 7, ch;

    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (ch == 'r')
            reps = atoi(optarg);
        else if (ch == 'b')
            n = strtoull(optarg, NULL, 10);
        else
            return 2;
    }
    if (reps < 1 || reps > MAX_REPS || n == 0)
        return 2;
    bool enabled = lttng_ust_tracepoint_enabled(tc_bench, entry) &&
                   lttng_ust_tracepoint_enabled(tc_bench, entry_shapes);
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < N_VARIANTS; k++) {
            struct timespec pause = {0, 200 * 1000000L};
            burst((enum variant)k, n, &wall[k][r], &cpu[k][r]);
            nanosleep(&pause, NULL); /* let lttng-consumerd drain the buffers */
        }
    }
    bjson_begin("client", "lttng");
    bjson_bool("enabled", enabled);
    bjson_u64("burst", n);
    for (int k = 0; k < N_VARIANTS; k++) {
        snprintf(key, sizeof(key), "%s_cpu_ns", names[k]);
        bjson_stat(key, bench_stat(cpu[k], (size_t)reps), (size_t)reps);
        snprintf(key, sizeof(key), "%s_wall_ns", names[k]);
        bjson_stat(key, bench_stat(wall[k], (size_t)reps), (size_t)reps);
    }
    bjson_end();
    return 0;
}
