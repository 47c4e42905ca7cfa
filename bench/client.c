/*
 * client.c — tc_bench_client: what libtracectl costs the instrumented
 * program (issue 3, benchmark 2).
 *
 *   tc_bench_client [--reps R (7)] [--burst B (200000)] [--no-lttng] [--interval MS]
 *
 * Every figure is the median (with min and max) of R repetitions, all in
 * this one run, and each is taken two ways: as the CPU time of the thread
 * that made the calls (_cpu_ns: what the calls cost that thread) and as wall
 * time (_wall_ns). On this 2-core machine the wall figure also counts the
 * time the recording thread sat descheduled while the daemon's two threads
 * and the library's writer thread ingested the same burst: not a cost of
 * the call, but what a program sharing its cores with the daemon sees.
 *   clock2           two bare clock_gettime(CLOCK_MONOTONIC) calls;
 *   rdtsc2           two bare rdtsc (x86-64): the floor of a TSC-timed pair;
 *   pair             tc_begin + tc_end(mem, no shapes): two clock reads and
 *                    one record (op, step, start, dur, mem), with the
 *                    library's own choice of clock (tc_clock(): "tsc" where
 *                    the TSC is invariant, issue 16), against a real
 *                    tracectld that drains; per repetition a burst of B pairs
 *                    into a 256 Ki-entry ring (B fits, so nothing is dropped:
 *                    a dropped record would be cheaper and flatter the
 *                    figure), then tc_flush() outside the timing;
 *   pair_process     the process's CPU time (every thread: the recording
 *                    one and the library's writer, which encodes and sends)
 *                    over the burst and its tc_flush(), per pair;
 *   pair_2t          the same on two threads at once (each its own ring), per
 *                    pair per thread;
 *   pair_shapes      tc_end with an output shape and two input shapes;
 *   pair_mono, pair_shapes_mono
 *                    the same on a second client opened with
 *                    TRACECTL_CLOCK=monotonic (clock_gettime), recorded by a
 *                    thread of its own (a thread's ring cache holds one
 *                    client), interleaved with the others in every repetition;
 *   disabled_ns      one call (tc_begin or tc_end) on a TRACECTL_DISABLE=1 client;
 *   lttng            the same fields through an LTTng-UST tracepoint recorded
 *                    by a user-space lttng-sessiond session (tc_bench_lttng,
 *                    when built), also as CPU and wall time, or why it could
 *                    not run.
 * Ratios (of the CPU figures; the wall ones beside them): pair ÷ clock2
 * (issue 16 target ≤ 0.7), pair_shapes ÷ clock2 (≤ 1.0), pair ÷ LTTng
 * tracepoint (≤ 0.2), pair ÷ rdtsc2, pair_mono ÷ clock2.
 * Output: JSON lines on stdout, a human summary on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define MAX_REPS 64
#define RING     (1u << 18)

struct copts {
    int reps;
    uint64_t burst;
    bool lttng;
    unsigned interval_ms; /* the writer's drain interval (0: the library's default) */
};

static const tc_shape out_shape = {2, {32, 1024}};
static const tc_shape in_shapes[2] = {{2, {32, 4096}}, {2, {4096, 1024}}};

static volatile uint64_t sink;

/* ns per iteration of a burst: wall time and the calling thread's CPU time. */
struct cost {
    double wall, cpu;
};

struct span {
    uint64_t wall, cpu;
};

static struct span span_begin(void)
{
    return (struct span){bench_now_ns(), bench_thread_ns()};
}

static struct cost span_end(struct span s, uint64_t n)
{
    uint64_t cpu = bench_thread_ns(), wall = bench_now_ns();

    return (struct cost){(double)(wall - s.wall) / (double)n, (double)(cpu - s.cpu) / (double)n};
}

/* Two bare TSC reads (the clock2 of a TSC-timed pair); 0 where there is no TSC. */
static struct cost rdtsc2(uint64_t n)
{
    uint64_t acc = 0;
    struct span s = span_begin();

#if defined(__x86_64__)
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = __builtin_ia32_rdtsc();
        uint64_t b = __builtin_ia32_rdtsc();
        acc += b - a;
    }
#endif
    sink = acc;
    return span_end(s, n);
}

static struct cost clock2(uint64_t n)
{
    struct timespec a, b;
    uint64_t acc = 0;
    struct span s = span_begin();

    for (uint64_t i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_MONOTONIC, &b);
        acc += (uint64_t)(b.tv_nsec - a.tv_nsec);
    }
    sink = acc;
    return span_end(s, n);
}

/* Per begin+end pair over n pairs. */
static struct cost pairs(tc_client *c, const uint32_t *ops, uint64_t n, bool shapes)
{
    struct span s = span_begin();

    if (shapes) {
        for (uint64_t i = 0; i < n; i++) {
            tc_begin(c, ops[i & 31]);
            tc_end(c, i, &out_shape, in_shapes, 2);
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            tc_begin(c, ops[i & 31]);
            tc_end(c, i, NULL, NULL, 0);
        }
    }
    return span_end(s, n);
}

/* ---- two threads ------------------------------------------------------------- */

struct twin {
    tc_client *c;
    const uint32_t *ops;
    uint64_t n;
    pthread_barrier_t *go;
    struct cost cost;
};

static void *twin_main(void *arg)
{
    struct twin *t = arg;

    pthread_barrier_wait(t->go);
    t->cost = pairs(t->c, t->ops, t->n, false);
    return NULL;
}

static struct cost pairs_2t(tc_client *c, const uint32_t *ops, uint64_t n)
{
    pthread_barrier_t go;
    struct twin t[2];
    pthread_t th[2];

    pthread_barrier_init(&go, NULL, 2);
    for (int i = 0; i < 2; i++) {
        t[i] = (struct twin){.c = c, .ops = ops, .n = n, .go = &go};
        pthread_create(&th[i], NULL, twin_main, &t[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    return (struct cost){(t[0].cost.wall + t[1].cost.wall) / 2,
                         (t[0].cost.cpu + t[1].cost.cpu) / 2};
}

/* ---- enabled, against a real daemon ---------------------------------------------- */

/* One series of figures: [0] CPU time, [1] wall time. */
enum { CPU, WALL };

struct figures {
    double clock2[2][MAX_REPS], pair[2][MAX_REPS], pair2[2][MAX_REPS], shapes[2][MAX_REPS];
    double rdtsc2[2][MAX_REPS], mono[2][MAX_REPS], shapes_mono[2][MAX_REPS];
    char clock[16];
    double process[MAX_REPS], disabled[MAX_REPS];
    uint64_t dropped;
};

static void put(double series[2][MAX_REPS], int r, struct cost k)
{
    series[CPU][r] = k.cpu;
    series[WALL][r] = k.wall;
}

/*
 * The monotonic client's thread: per repetition, waits for the main thread's
 * go, runs its two bursts (each flushed outside the timing), and says done.
 */
struct mono {
    tc_client *c;
    const uint32_t *ops;
    const struct copts *o;
    struct figures *f;
    pthread_barrier_t go, done;
};

static void *mono_main(void *arg)
{
    struct mono *m = arg;

    pairs(m->c, m->ops, m->o->burst, false); /* warm-up: this thread's ring */
    tc_flush(m->c, -1);
    for (int r = 0; r < m->o->reps; r++) {
        pthread_barrier_wait(&m->go);
        put(m->f->mono, r, pairs(m->c, m->ops, m->o->burst, false));
        tc_flush(m->c, -1);
        put(m->f->shapes_mono, r, pairs(m->c, m->ops, m->o->burst, true));
        tc_flush(m->c, -1);
        pthread_barrier_wait(&m->done);
    }
    return NULL;
}

static int measure_enabled(const struct copts *o, struct figures *f)
{
    struct bdaemon d;
    tc_options to;
    tc_client *c, *cm;
    struct mono mono;
    pthread_t mono_th;
    uint32_t mono_ops[32];
    uint32_t ops[32];
    int rc, err = 0;

    if ((rc = bdaemon_start(&d, NULL)) < 0) {
        fprintf(stderr, "client: cannot start %s: %s\n", TRACECTLD_BIN, strerror(-rc));
        return rc;
    }
    tc_options_init(&to);
    to.socket_path = d.sock;
    to.session = "client-bench";
    to.device = "gpu:0";
    to.blocking = 0; /* the default mode: what programs run with */
    to.ring_entries = RING;
    to.flush_interval_ms = o->interval_ms;
    c = tc_open(&to, &err);
    if (c == NULL || !tc_enabled(c)) {
        fprintf(stderr, "client: tc_open: %s\n", strerror(-err));
        tc_close(c);
        bdaemon_cleanup(&d);
        return err ? err : -ENOTCONN;
    }
    snprintf(f->clock, sizeof(f->clock), "%s", tc_clock(c));
    setenv("TRACECTL_CLOCK", "monotonic", 1);
    to.session = "client-bench-monotonic";
    cm = tc_open(&to, &err);
    unsetenv("TRACECTL_CLOCK");
    if (cm == NULL || !tc_enabled(cm)) {
        fprintf(stderr, "client: tc_open (monotonic): %s\n", strerror(-err));
        tc_close(cm);
        tc_close(c);
        bdaemon_cleanup(&d);
        return err ? err : -ENOTCONN;
    }
    for (int i = 0; i < 32; i++) {
        ops[i] = tc_op(c, bench_op_names[i]);
        mono_ops[i] = tc_op(cm, bench_op_names[i]);
    }
    mono = (struct mono){.c = cm, .ops = mono_ops, .o = o, .f = f};
    pthread_barrier_init(&mono.go, NULL, 2);
    pthread_barrier_init(&mono.done, NULL, 2);
    pthread_create(&mono_th, NULL, mono_main, &mono);
    pairs(c, ops, o->burst, false); /* warm-up: the ring's pages, the daemon's session */
    tc_flush(c, -1);
    for (int r = 0; r < o->reps; r++) {
        struct cost k = clock2(o->burst);
        put(f->clock2, r, k);
        put(f->rdtsc2, r, rdtsc2(o->burst));
        uint64_t p0 = bench_process_ns();
        put(f->pair, r, pairs(c, ops, o->burst, false));
        tc_flush(c, -1);
        f->process[r] = (double)(bench_process_ns() - p0) / (double)o->burst;
        put(f->pair2, r, pairs_2t(c, ops, o->burst));
        tc_flush(c, -1);
        put(f->shapes, r, pairs(c, ops, o->burst, true));
        tc_flush(c, -1);
        pthread_barrier_wait(&mono.go); /* the monotonic client's bursts, this thread idle */
        pthread_barrier_wait(&mono.done);
    }
    pthread_join(mono_th, NULL);
    pthread_barrier_destroy(&mono.go);
    pthread_barrier_destroy(&mono.done);
    f->dropped = tc_dropped(c) + tc_dropped(cm);
    tc_close(cm);
    rc = tc_close(c);
    bdaemon_stop(&d, SIGTERM);
    bdaemon_cleanup(&d);
    return rc;
}

static void measure_disabled(const struct copts *o, struct figures *f)
{
    uint64_t n = o->burst * 50;
    tc_client *c;
    uint32_t op;

    setenv("TRACECTL_DISABLE", "1", 1);
    c = tc_open(NULL, NULL);
    unsetenv("TRACECTL_DISABLE");
    op = tc_op(c, "matmul");
    for (int r = 0; r < o->reps; r++) {
        uint64_t t0 = bench_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            tc_begin(c, op);
            tc_end(c, i, NULL, NULL, 0);
        }
        f->disabled[r] = (double)(bench_now_ns() - t0) / (double)(2 * n);
    }
    tc_close(c);
}

/* ---- LTTng-UST ---------------------------------------------------------------------- */

struct lttng_result {
    bool ran;
    char why[512];                                         /* why it did not run, or notes */
    char line[4096];                                       /* tc_bench_lttng's JSON line */
    double tp[2], tp_shapes[2], event[2], event_shapes[2]; /* [CPU], [WALL] medians */
};

#ifdef TC_BENCH_LTTNG_BIN
/* Runs argv with stdout and stderr appended to log (stdout to out_fd when >= 0). */
static int run_cmd(const char *log, int out_fd, char *const argv[])
{
    int st;
    pid_t pid = fork();

    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(out_fd >= 0 ? out_fd : fd, 1);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The last line of a file containing needle (or the last line), into buf. */
static void log_line(const char *path, const char *needle, char *buf, size_t len)
{
    char line[4096];
    FILE *f = fopen(path, "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] && (needle == NULL || strstr(line, needle) != NULL))
            snprintf(buf, len, "%s", line);
    }
    fclose(f);
}

/* Starts our own lttng-sessiond --no-kernel; 0 (pid set), 1 (one already runs), or -1. */
static int sessiond_start(const char *log, pid_t *pid, char *why, size_t len)
{
    char *argv[] = {"lttng-sessiond", "--no-kernel", "--sig-parent", NULL};
    struct timespec wait = {10, 0};
    sigset_t set, old;
    int st;

    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    *pid = fork();
    if (*pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int sig = *pid > 0 ? sigtimedwait(&set, NULL, &wait) : -1;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (sig == SIGUSR1)
        return 0;
    if (*pid > 0 && waitpid(*pid, &st, WNOHANG) == 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, &st, 0);
    }
    *pid = 0;
    log_line(log, "already", why, len);
    if (why[0] != '\0')
        return 1;
    log_line(log, NULL, why, len);
    if (why[0] == '\0')
        snprintf(why, len, "lttng-sessiond did not start (not installed?)");
    return -1;
}

static double json_median(const char *line, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":{\"median\":", key);
    p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : 0;
}

/* Runs tc_bench_lttng inside a recording session; the session and the daemon are ours. */
static void lttng_session_run(const struct copts *o, const char *dir, const char *log,
                              struct lttng_result *lr)
{
    char name[64], out[PATH_MAX + 16], reps[16], tmp[PATH_MAX + 16];
    int fd;

    snprintf(name, sizeof(name), "tcbench-%ld", (long)getpid());
    snprintf(out, sizeof(out), "--output=%s/trace", dir);
    snprintf(reps, sizeof(reps), "%d", o->reps);
    snprintf(tmp, sizeof(tmp), "%s/lttng.json", dir);
    char *create[] = {"lttng", "create", name, out, NULL};
    char *chan[] = {"lttng",          "enable-channel", "-u", "-s", name, "--subbuf-size=4M",
                    "--num-subbuf=8", "tcchan",         NULL};
    char *event[] = {"lttng", "enable-event", "-u", "-s", name, "-c", "tcchan", "tc_bench:*", NULL};
    char *start[] = {"lttng", "start", name, NULL};
    char *stop[] = {"lttng", "stop", name, NULL};
    char *destroy[] = {"lttng", "destroy", name, NULL};
    char *bench[] = {TC_BENCH_LTTNG_BIN, "--reps", reps, NULL};

    if (run_cmd(log, -1, create) != 0 || run_cmd(log, -1, chan) != 0 ||
        run_cmd(log, -1, event) != 0 || run_cmd(log, -1, start) != 0) {
        log_line(log, "Error", lr->why, sizeof(lr->why));
        run_cmd(log, -1, destroy);
        return;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rc = run_cmd(log, fd, bench);
    close(fd);
    run_cmd(log, -1, stop);
    run_cmd(log, -1, destroy);
    log_line(tmp, "\"lttng\"", lr->line, sizeof(lr->line));
    if (rc != 0 || lr->line[0] == '\0') {
        snprintf(lr->why, sizeof(lr->why), "tc_bench_lttng failed (exit %d)", rc);
        return;
    }
    lr->ran = strstr(lr->line, "\"enabled\":true") != NULL;
    log_line(log, "discarded", lr->why, sizeof(lr->why)); /* lttng stop warns of losses */
    if (!lr->ran)
        snprintf(lr->why, sizeof(lr->why),
                 "the tracepoints were not enabled: the program did not register with the "
                 "session daemon");
    lr->tp[CPU] = json_median(lr->line, "tp_cpu_ns");
    lr->tp[WALL] = json_median(lr->line, "tp_wall_ns");
    lr->event[CPU] = json_median(lr->line, "event_cpu_ns");
    lr->event[WALL] = json_median(lr->line, "event_wall_ns");
    lr->tp_shapes[CPU] = json_median(lr->line, "tp_shapes_cpu_ns");
    lr->tp_shapes[WALL] = json_median(lr->line, "tp_shapes_wall_ns");
    lr->event_shapes[CPU] = json_median(lr->line, "event_shapes_cpu_ns");
    lr->event_shapes[WALL] = json_median(lr->line, "event_shapes_wall_ns");
}

static void measure_lttng(const struct copts *o, struct lttng_result *lr)
{
    char dir[] = "/tmp/tcbench-lttng.XXXXXX", log[sizeof(dir) + 16];
    pid_t sessiond = 0;
    int st;

    if (mkdtemp(dir) == NULL) {
        snprintf(lr->why, sizeof(lr->why), "mkdtemp: %s", strerror(errno));
        return;
    }
    snprintf(log, sizeof(log), "%s/log", dir);
    if (sessiond_start(log, &sessiond, lr->why, sizeof(lr->why)) >= 0) {
        lr->why[0] = '\0';
        lttng_session_run(o, dir, log, lr);
    }
    if (sessiond > 0) {
        kill(sessiond, SIGTERM);
        waitpid(sessiond, &st, 0);
    }
    bench_rmtree(dir);
}
#else
static void measure_lttng(const struct copts *o, struct lttng_result *lr)
{
    snprintf(lr->why, sizeof(lr->why), "not built: %s", TC_BENCH_LTTNG_WHY);
}
#endif

/* ---- output ---------------------------------------------------------------------------- */

static void report(const struct copts *o, struct figures *f, const struct lttng_result *lr)
{
    static const char *const how[2] = {"cpu", "wall"};
    size_t n = (size_t)o->reps;
    struct bstat clock2[2], pair[2], pair2[2], shapes[2], tsc2[2], mono[2], shapes_mono[2];
    struct bstat process = bench_stat(f->process, n), dis = bench_stat(f->disabled, n);
    double nan = 0.0 / 0.0;
    char key[64];

    for (int w = CPU; w <= WALL; w++) {
        clock2[w] = bench_stat(f->clock2[w], n);
        pair[w] = bench_stat(f->pair[w], n);
        pair2[w] = bench_stat(f->pair2[w], n);
        shapes[w] = bench_stat(f->shapes[w], n);
        tsc2[w] = bench_stat(f->rdtsc2[w], n);
        mono[w] = bench_stat(f->mono[w], n);
        shapes_mono[w] = bench_stat(f->shapes_mono[w], n);
    }
    if (lr->line[0] != '\0')
        printf("%s\n", lr->line);
    bjson_begin("client", "summary");
    bjson_u64("reps", n);
    bjson_u64("burst", o->burst);
    bjson_u64("interval_ms", o->interval_ms);
    bjson_str("clock", f->clock);
    for (int w = CPU; w <= WALL; w++) {
#define STAT(name, st)                                                                             \
    do {                                                                                           \
        snprintf(key, sizeof(key), "%s_%s_ns", name, how[w]);                                      \
        bjson_stat(key, st[w], n);                                                                 \
    } while (0)
        STAT("clock2", clock2);
        STAT("pair", pair);
        STAT("pair_2t", pair2);
        STAT("pair_shapes", shapes);
        STAT("rdtsc2", tsc2);
        STAT("pair_mono", mono);
        STAT("pair_shapes_mono", shapes_mono);
#undef STAT
    }
    bjson_stat("pair_process_cpu_ns", process, n);
    bjson_stat("disabled_ns", dis, n);
    bjson_u64("dropped", f->dropped);
    bjson_bool("lttng_ran", lr->ran);
    bjson_str("lttng_note", lr->why[0] ? lr->why : NULL);
    for (int w = CPU; w <= WALL; w++) {
        snprintf(key, sizeof(key), "pair_over_clock2_%s", how[w]);
        bjson_num(key, pair[w].median / clock2[w].median);
        snprintf(key, sizeof(key), "pair_shapes_over_clock2_%s", how[w]);
        bjson_num(key, shapes[w].median / clock2[w].median);
        snprintf(key, sizeof(key), "pair_over_rdtsc2_%s", how[w]);
        bjson_num(key, pair[w].median / tsc2[w].median);
        snprintf(key, sizeof(key), "pair_mono_over_clock2_%s", how[w]);
        bjson_num(key, mono[w].median / clock2[w].median);
        snprintf(key, sizeof(key), "pair_over_lttng_tp_%s", how[w]);
        bjson_num(key, lr->ran ? pair[w].median / lr->tp[w] : nan);
        snprintf(key, sizeof(key), "pair_over_lttng_event_%s", how[w]);
        bjson_num(key, lr->ran ? pair[w].median / lr->event[w] : nan);
        snprintf(key, sizeof(key), "pair_shapes_over_lttng_tp_shapes_%s", how[w]);
        bjson_num(key, lr->ran ? shapes[w].median / lr->tp_shapes[w] : nan);
        snprintf(key, sizeof(key), "pair_shapes_over_lttng_event_shapes_%s", how[w]);
        bjson_num(key, lr->ran ? shapes[w].median / lr->event_shapes[w] : nan);
    }
    bjson_end();
    for (int w = CPU; w <= WALL; w++)
        fprintf(stderr,
                "client (%s): two clock reads %.1f ns, two rdtsc %.1f ns; begin+end (%s) %.1f ns "
                "(%.2f× the clock reads), 2 threads %.1f ns, with shapes %.1f ns (%.2f×); "
                "monotonic client: %.1f ns (%.2f×), with shapes %.1f ns\n",
                how[w], clock2[w].median, tsc2[w].median, f->clock, pair[w].median,
                pair[w].median / clock2[w].median, pair2[w].median, shapes[w].median,
                shapes[w].median / clock2[w].median, mono[w].median,
                mono[w].median / clock2[w].median, shapes_mono[w].median);
    fprintf(stderr,
            "client: the whole process (writer thread too) %.1f ns CPU per pair; disabled %.2f "
            "ns/call; dropped %llu\n",
            process.median, dis.median, (unsigned long long)f->dropped);
    if (lr->ran)
        for (int w = CPU; w <= WALL; w++)
            fprintf(stderr,
                    "client (%s): LTTng-UST tracepoint %.1f ns (%.1f ns with two clock reads), "
                    "with shapes %.1f ns: begin+end ÷ tracepoint = %.2f, ÷ event = %.2f\n",
                    how[w], lr->tp[w], lr->event[w], lr->tp_shapes[w], pair[w].median / lr->tp[w],
                    pair[w].median / lr->event[w]);
    else
        fprintf(stderr, "client: LTTng-UST not measured: %s\n", lr->why);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"reps", required_argument, NULL, 'r'}, {"burst", required_argument, NULL, 'b'},
        {"no-lttng", no_argument, NULL, 'L'},   {"interval", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0}};
    struct copts o = {.reps = 7, .burst = 200000, .lttng = true};
    struct lttng_result lr = {0};
    struct figures f = {0};
    char machine[256];
    int ch;

    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'r':
            o.reps = atoi(optarg);
            break;
        case 'b':
            o.burst = strtoull(optarg, NULL, 10);
            break;
        case 'L':
            o.lttng = false;
            break;
        case 'i':
            o.interval_ms = (unsigned)atoi(optarg);
            break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: tc_bench_client [--reps R (7)] [--burst B (200000)] [--no-lttng]\n"
                    "                       [--interval MS (library default: 5)]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (o.reps < 5 || o.reps > MAX_REPS || o.burst == 0 || o.burst > RING) {
        fprintf(stderr, "tc_bench_client: --reps 5..%d, --burst 1..%u\n", MAX_REPS, RING);
        return 2;
    }
    bench_machine(machine, sizeof(machine));
    fprintf(stderr, "tc_bench_client on %s\n", machine);
    int rc = measure_enabled(&o, &f);
    if (rc < 0) {
        fprintf(stderr, "tc_bench_client: the enabled measurement failed: %s\n", strerror(-rc));
        return 1;
    }
    measure_disabled(&o, &f);
    if (o.lttng)
        measure_lttng(&o, &lr);
    else
        snprintf(lr.why, sizeof(lr.why), "skipped (--no-lttng)");
    report(&o, &f, &lr);
    return 0;
}
