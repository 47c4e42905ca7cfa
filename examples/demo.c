/*
 * demo.c — a small multi-process "training job" instrumented with
 * libtracectl, to show tracectl at work.
 *
 * The parent forks --ranks processes. Each rank opens a client (one session,
 * its own rank and device gpu:<rank>), and for every step runs a real small
 * matmul, a conv2d-like stencil and a layer_norm on the CPU, recording each
 * with its shapes and output bytes, then an "allreduce" that adds its
 * gradient row into memory shared by all ranks and waits for the others to
 * arrive, as a collective does. One rank (--slow-rank) runs on a "throttled
 * device": each of its compute ops takes 2 ms longer (--slow-ms; a sleep, so
 * it holds on however the ranks share the CPU). The fast ranks wait for it in their
 * allreduce, but at most ALLREDUCE_WAIT_US per step: a full barrier would
 * fill every fast rank's step with waiting and even out the devices' totals,
 * while this keeps the slow device the one carrying the most time, so the
 * report's imbalance names it and its comm section shows the waiting.
 */
#include <getopt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tracectl.h"

#define N                 64 /* matrix size: small enough for a quick demo, big enough to time */
#define MAX_STEPS         1024
#define ALLREDUCE_WAIT_US 1500 /* how long a rank waits for the others in one allreduce */

struct opts {
    const char *socket, *session;
    int ranks, steps, slow, slow_ms;
};

struct shared {
    _Atomic long sum[N];            /* the "allreduce" accumulates every rank's gradient row here */
    _Atomic int arrived[MAX_STEPS]; /* ranks that reached each step's allreduce */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tc_demo [--socket PATH] [--session NAME] [--ranks N] [--steps S]\n"
               "               [--slow-rank R] [--slow-ms MS]\n\n"
               "Runs a small multi-process training job (default 8 ranks, 20 steps, rank 3\n"
               "slow: each of its compute ops takes MS longer, default 2) that reports to\n"
               "tracectld through libtracectl.\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {{"socket", required_argument, NULL, 's'},
                                             {"session", required_argument, NULL, 'n'},
                                             {"ranks", required_argument, NULL, 'r'},
                                             {"steps", required_argument, NULL, 't'},
                                             {"slow-rank", required_argument, NULL, 'w'},
                                             {"slow-ms", required_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;

    *o = (struct opts){.session = "demo", .ranks = 8, .steps = 20, .slow = 3, .slow_ms = 2};
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 's':
            o->socket = optarg;
            break;
        case 'n':
            o->session = optarg;
            break;
        case 'r':
            o->ranks = atoi(optarg);
            break;
        case 't':
            o->steps = atoi(optarg);
            break;
        case 'w':
            o->slow = atoi(optarg);
            break;
        case 'm':
            o->slow_ms = atoi(optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (o->ranks < 1 || o->ranks > 256 || o->steps < 1 || o->steps > MAX_STEPS || o->slow_ms < 0 ||
        o->slow_ms > 1000) {
        fprintf(stderr, "tc_demo: --ranks must be 1..256, --steps 1..1024 and --slow-ms 0..1000\n");
        return -1;
    }
    return 0;
}

static void matmul(float *c, const float *a, const float *b)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int k = 0; k < N; k++)
                s += a[i * N + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

static void conv(float *out, const float *in)
{
    for (int i = 1; i < N - 1; i++)
        for (int j = 1; j < N - 1; j++)
            out[i * N + j] = (in[(i - 1) * N + j] + in[(i + 1) * N + j] + in[i * N + j - 1] +
                              in[i * N + j + 1] - 4 * in[i * N + j]) *
                             0.25f;
}

static void layer_norm(float *x)
{
    for (int i = 0; i < N; i++) {
        float mean = 0, var = 0;
        for (int j = 0; j < N; j++)
            mean += x[i * N + j];
        mean /= N;
        for (int j = 0; j < N; j++)
            var += (x[i * N + j] - mean) * (x[i * N + j] - mean);
        var = sqrtf(var / N + 1e-5f);
        for (int j = 0; j < N; j++)
            x[i * N + j] = (x[i * N + j] - mean) / var;
    }
}

/* Adds this rank's row into the shared sum, then waits (a bounded while) for the other ranks. */
static void allreduce(struct shared *sh, const float *row, int step, int ranks)
{
    uint64_t deadline = tc_now_ns() + ALLREDUCE_WAIT_US * 1000ull;

    for (int j = 0; j < N; j++)
        atomic_fetch_add(&sh->sum[j], (long)(row[j] * 1000));
    atomic_fetch_add(&sh->arrived[step], 1);
    while (atomic_load(&sh->arrived[step]) < ranks && tc_now_ns() < deadline)
        usleep(100);
}

static int run_rank(const struct opts *o, int rank, struct shared *sh)
{
    static float a[N * N], b[N * N], c[N * N];
    char device[32];
    tc_options opt;
    tc_client *cl;
    int err;
    useconds_t throttle = rank == o->slow ? (useconds_t)o->slow_ms * 1000 : 0;
    const tc_shape mat = {2, {N, N}}, in2[2] = {{2, {N, N}}, {2, {N, N}}};
    const tc_shape img = {4, {1, 1, N, N}};

    snprintf(device, sizeof(device), "gpu:%d", rank);
    tc_options_init(&opt);
    opt.socket_path = o->socket;
    opt.session = o->session;
    opt.rank = rank;
    opt.world = o->ranks;
    opt.device = device;
    cl = tc_open(&opt, &err);
    if (!tc_enabled(cl)) {
        fprintf(stderr, "tc_demo: rank %d: cannot reach tracectld: %s\n", rank, strerror(-err));
        tc_close(cl);
        return 1;
    }
    tc_meta_str(cl, "model", "demo-mlp");
    tc_meta_int(cl, "matrix", N);
    uint32_t op_mm = tc_op(cl, "matmul"), op_conv = tc_op(cl, "conv2d");
    uint32_t op_ln = tc_op(cl, "layer_norm"), op_ar = tc_op_cat(cl, "allreduce", "comm");
    for (int i = 0; i < N * N; i++)
        a[i] = (float)((i * 7 + rank) % 13) / 13.0f, b[i] = (float)(i % 5) / 5.0f;

    for (int step = 0; step < o->steps; step++) {
        tc_begin(cl, op_mm);
        matmul(c, a, b);
        usleep(throttle);
        tc_end(cl, sizeof(c), &mat, in2, 2);
        tc_begin(cl, op_conv);
        conv(a, c);
        usleep(throttle);
        tc_end(cl, sizeof(a), &img, &img, 1);
        tc_begin(cl, op_ln);
        layer_norm(a);
        usleep(throttle);
        tc_end(cl, sizeof(a), &mat, &mat, 1);
        const tc_shape row = {1, {N}};
        tc_begin(cl, op_ar);
        allreduce(sh, c, step, o->ranks);
        tc_end(cl, sizeof(float) * N, &row, &row, 1);
        tc_step(cl);
    }
    err = tc_flush(cl, 10000);
    printf("rank %d (gpu:%d): %llu entries recorded, %llu dropped, session %lld%s\n", rank, rank,
           (unsigned long long)tc_recorded(cl), (unsigned long long)tc_dropped(cl),
           (long long)tc_session_id(cl), err ? " (flush failed)" : "");
    fflush(stdout);
    tc_close(cl);
    return err != 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct shared *sh;
    pid_t pids[256];
    int failed = 0, st;

    if (parse(argc, argv, &o) < 0)
        return 2;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("tc_demo: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    for (int r = 0; r < o.ranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(run_rank(&o, r, sh));
        if (pids[r] < 0) {
            perror("tc_demo: fork");
            return 1;
        }
    }
    for (int r = 0; r < o.ranks; r++) {
        waitpid(pids[r], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    if (failed)
        fprintf(stderr, "tc_demo: %d of %d ranks failed\n", failed, o.ranks);
    return failed ? 1 : 0;
}
