/*
 * test_pipeline.c — the whole pipeline: 8 producer processes through
 * libtracectl plus one raw-protocol producer into one session of a real
 * tracectld, then `report` (over the protocol and through the tracectl CLI)
 * checked against numbers this test computes from what it sent; the demo
 * job; the CLI's exit codes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

#define RANKS 8
#define PER   3000 /* entries per libtracectl rank */
#define RAW_N 500  /* entries of the raw producer */
#define N_OPS 4

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(pipeline, .fini = fini, .timeout = 120);

static const char *const op_names[N_OPS] = {"matmul", "conv2d", "nccl:all_reduce", "layer_norm"};

/* The deterministic entry i of rank r: op, duration, memory. */
static void entry_of(int r, int i, int *op, uint64_t *dur, uint64_t *mem)
{
    *op = i % N_OPS;
    *dur = 1000 + (uint64_t)((i * 37 + r * 11) % 5000) + (r == 5 ? 3000 : 0); /* rank 5 slow */
    *mem = (uint64_t)(i % 7) * 4096;
}

static int producer(int r)
{
    tc_options o;
    tc_client *c;
    uint32_t ids[N_OPS];
    char dev[16];
    int err;
    const tc_shape out = {2, {32, 64}}, in[2] = {{2, {32, 128}}, {2, {128, 64}}};

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "pipe";
    o.rank = r;
    o.world = RANKS + 1;
    o.blocking = 1;
    snprintf(dev, sizeof(dev), "gpu:%d", r);
    o.device = dev;
    c = tc_open(&o, &err);
    if (c == NULL || !tc_enabled(c))
        return 10;
    for (int k = 0; k < N_OPS; k++)
        ids[k] = tc_op_cat(c, op_names[k], k == 2 ? "comm" : NULL);
    for (int i = 0; i < PER; i++) {
        int op;
        uint64_t dur, mem;
        entry_of(r, i, &op, &dur, &mem);
        tc_record(c, ids[op], (uint64_t)i * 10000, dur, mem, &out, in, 2, NULL);
        if (i % 100 == 99)
            tc_step(c);
    }
    if (tc_flush(c, 20000) != 0)
        return 11;
    if (tc_dropped(c) != 0)
        return 12;
    return tc_close(c) == 0 ? 0 : 13;
}

struct expect {
    unsigned long long calls[N_OPS], total[N_OPS], min[N_OPS], max[N_OPS], mem[N_OPS];
    unsigned long long dev_total[RANKS + 1], entries, total_ns;
};

static void expect_add(struct expect *e, int op, int dev, uint64_t dur, uint64_t mem)
{
    if (e->calls[op] == 0 || dur < e->min[op])
        e->min[op] = dur;
    if (dur > e->max[op])
        e->max[op] = dur;
    e->calls[op]++;
    e->total[op] += dur;
    e->mem[op] += mem;
    e->dev_total[dev] += dur;
    e->entries++;
    e->total_ns += dur;
}

static const msgpack_object *find_row(const msgpack_object *list, const char *key,
                                      const char *value)
{
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if (obj_str_eq(obj_get(&list->via.array.ptr[i], key), value))
            return &list->via.array.ptr[i];
    return NULL;
}

Test(pipeline, nine_producers_every_number_checked)
{
    struct expect e = {0};
    pid_t kids[RANKS];
    long long id;
    int st;

    harness_daemon_start(&d, NULL);
    for (int r = 0; r < RANKS; r++) {
        kids[r] = fork();
        if (kids[r] == 0)
            _exit(producer(r));
    }
    /* the raw-protocol producer: rank 8, device gpu:8, op "matmul" under its own id 9 */
    int fd = raw_producer(d.sock, "pipe", RANKS, RANKS + 1, "gpu:8", &id);
    raw_send_ops(fd, 9, "matmul");
    raw_send_batch(fd, 9, RAW_N, 5000000, 2000); /* durations 2000 .. 2000+RAW_N-1 */
    cr_assert_eq(raw_flush(fd, 1), RAW_N);
    for (int r = 0; r < RANKS; r++) {
        waitpid(kids[r], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed (%d)", r, WEXITSTATUS(st));
    }
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 10);

    for (int r = 0; r < RANKS; r++)
        for (int i = 0; i < PER; i++) {
            int op;
            uint64_t dur, mem;
            entry_of(r, i, &op, &dur, &mem);
            expect_add(&e, op, r, dur, mem);
        }
    for (int i = 0; i < RAW_N; i++)
        expect_add(&e, 0, RANKS, 2000 + (uint64_t)i, 0);

    /* sessions: one session, 9 processes, every entry */
    struct proto_reader rd;
    int cfd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &rd, &cfd);
    const msgpack_object *list = &o->via.array.ptr[1];
    cr_assert_eq(list->via.array.size, 1);
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[0], "processes")), RANKS + 1);
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[0], "entries")), e.entries);
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[0], "dropped")), 0);
    proto_reader_deinit(&rd);
    close(cfd);

    /* report over the protocol */
    struct proto_request req;
    proto_request_init(&req);
    req.session.id = id;
    req.top = 5;
    o = raw_control(d.sock, PROTO_REPORT, &req, &rd, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    const msgpack_object *rep = &o->via.array.ptr[1], *sess = obj_get(rep, "session");
    cr_assert_eq(obj_u64(obj_get(sess, "entries")), e.entries);
    cr_assert_eq(obj_u64(obj_get(sess, "total_ns")), e.total_ns);
    cr_assert_eq(obj_u64(obj_get(sess, "processes")), RANKS + 1);
    cr_assert_eq(obj_u64(obj_get(sess, "devices")), RANKS + 1);
    const msgpack_object *ops = obj_get(rep, "ops");
    cr_assert_eq(ops->via.array.size, N_OPS);
    for (int k = 0; k < N_OPS; k++) {
        const msgpack_object *row = find_row(ops, "op", op_names[k]);
        cr_assert_not_null(row, "no row for %s", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "calls")), e.calls[k], "%s calls", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "total_ns")), e.total[k], "%s total", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "min_ns")), e.min[k], "%s min", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "max_ns")), e.max[k], "%s max", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "mem_bytes")), e.mem[k], "%s mem", op_names[k]);
        cr_assert_eq(obj_u64(obj_get(row, "avg_ns")), e.total[k] / e.calls[k]);
        cr_assert_float_eq(obj_f64(obj_get(row, "share")), (double)e.total[k] / e.total_ns, 1e-9);
        /* 32*64 elements per libtracectl entry (product of out_shape), 0 for raw ones */
        cr_assert_eq(obj_u64(obj_get(row, "elements")),
                     (e.calls[k] - (k == 0 ? RAW_N : 0)) * 32 * 64);
    }
    /* ops sorted by total descending */
    for (uint32_t i = 1; i < ops->via.array.size; i++)
        cr_assert_geq(obj_u64(obj_get(&ops->via.array.ptr[i - 1], "total_ns")),
                      obj_u64(obj_get(&ops->via.array.ptr[i], "total_ns")));
    /* devices and imbalance: rank 5 is the slow one */
    const msgpack_object *devs = obj_get(rep, "devices"), *imb = obj_get(rep, "imbalance");
    unsigned long long max = 0;
    for (int r = 0; r <= RANKS; r++) {
        char name[16];
        snprintf(name, sizeof(name), "gpu:%d", r);
        const msgpack_object *row = find_row(devs, "device", name);
        cr_assert_not_null(row, "no device %s", name);
        cr_assert_eq(obj_u64(obj_get(row, "total_ns")), e.dev_total[r], "%s", name);
        max = e.dev_total[r] > max ? e.dev_total[r] : max;
    }
    cr_assert(obj_str_eq(obj_get(imb, "slowest_device"), "gpu:5"));
    cr_assert_eq(obj_u64(obj_get(imb, "max_ns")), max);
    cr_assert_eq(obj_u64(obj_get(imb, "ideal_ns")), e.total_ns / (RANKS + 1));
    double ideal = (double)e.total_ns / (RANKS + 1);
    cr_assert_float_eq(obj_f64(obj_get(imb, "ratio")), (max - ideal) / ideal, 1e-9);
    /* comm: the one op with category comm */
    const msgpack_object *comm = obj_get(rep, "comm");
    cr_assert_eq(comm->via.array.size, 1);
    cr_assert(obj_str_eq(obj_get(&comm->via.array.ptr[0], "op"), "nccl:all_reduce"));
    cr_assert_eq(obj_u64(obj_get(&comm->via.array.ptr[0], "calls")), e.calls[2]);
    /* slowest: 5 rows, longest first; the longest durations all come from rank 5 */
    const msgpack_object *slow = obj_get(rep, "slowest");
    cr_assert_eq(slow->via.array.size, 5);
    unsigned long long longest = 0;
    for (int k = 0; k < N_OPS; k++)
        longest = e.max[k] > longest ? e.max[k] : longest;
    cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[0], "dur_ns")), longest);
    cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[0], "rank")), 5);
    proto_reader_deinit(&rd);
    close(cfd);

    /* the CLI's --json prints the same numbers */
    char *out = NULL, idbuf[32], needle[96];
    snprintf(idbuf, sizeof(idbuf), "%lld", id);
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", idbuf, "--json", NULL};
    cr_assert_eq(harness_run(&out, argv), 0);
    snprintf(needle, sizeof(needle), "\"entries\":%llu", e.entries);
    cr_assert_not_null(strstr(out, needle), "no %s in --json output", needle);
    snprintf(needle, sizeof(needle), "\"total_ns\":%llu", e.total_ns);
    cr_assert_not_null(strstr(out, needle), "no %s in --json output", needle);
    cr_assert_not_null(strstr(out, "\"slowest_device\":\"gpu:5\""));
    free(out);
}

Test(pipeline, demo_names_the_slow_rank)
{
    char *out = NULL;

    harness_daemon_start(&d, NULL);
    /* 20 ms per op, not the demo's 2: on a loaded machine the fast ranks' real compute
     * stretches by tens of ms per step (seen: 566 ms in 10 steps against 482 ms) */
    char *demo[] = {TC_DEMO_BIN, "--socket",  d.sock,    "--session", "demo",
                    "--ranks",   "4",         "--steps", "10",        "--slow-rank",
                    "2",         "--slow-ms", "20",      NULL};
    cr_assert_eq(harness_run(&out, demo), 0, "the demo failed: %s", out);
    free(out);
    char *sessions[] = {TRACECTL_BIN, "--socket", d.sock, "sessions", "--json", NULL};
    cr_assert_eq(harness_run(&out, sessions), 0);
    cr_assert_not_null(strstr(out, "\"processes\":4"), "%s", out);
    /* 4 ranks × 10 steps × (3 compute ops + allreduce) */
    cr_assert_not_null(strstr(out, "\"entries\":160"), "%s", out);
    free(out);
    char *report[] = {TRACECTL_BIN, "--socket", d.sock, "report", "demo", "--json", NULL};
    cr_assert_eq(harness_run(&out, report), 0);
    /* The slow rank is the one whose own work takes longest: its compute time (the
     * ranks section, which keeps the waits at the allreduce apart). Its total time is not
     * a safe signal (the others' waits add to theirs), nor are its arrivals: ranks wait
     * at most 1.5 ms for it, so on a loaded machine instances drift apart. */
    unsigned long long compute[4] = {0};
    const char *ranks = strstr(out, "\"ranks\":[{\"rank\":");
    cr_assert_not_null(ranks, "no ranks section: %s", out);
    for (int r = 0; r < 4; r++) {
        char key[32];
        const char *row, *cn;

        snprintf(key, sizeof(key), "{\"rank\":%d,", r);
        row = strstr(ranks, key);
        cr_assert_not_null(row, "no row of rank %d", r);
        cn = strstr(row, "\"compute_ns\":");
        cr_assert_not_null(cn);
        compute[r] = strtoull(cn + strlen("\"compute_ns\":"), NULL, 10);
    }
    /* the slow rank sleeps 3 x 20 ms per step inside its ops: at least 600 ms in 10 steps */
    cr_assert_geq(compute[2], 600000000ull, "rank 2 computed %llu ns", compute[2]);
    for (int r = 0; r < 4; r++)
        if (r != 2)
            cr_assert_gt(compute[2], compute[r], "rank 2 computed %llu ns, rank %d %llu",
                         compute[2], r, compute[r]);
    free(out);
    /* the human report has every section */
    char *human[] = {TRACECTL_BIN, "--socket", d.sock, "report", "demo", NULL};
    cr_assert_eq(harness_run(&out, human), 0);
    const char *sections[] = {"Operations", "Slowest",   "Memory",
                              "Devices",    "imbalance", "Communication"};
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        cr_assert_not_null(strstr(out, sections[i]), "no %s section", sections[i]);
    free(out);
}

Test(pipeline, cli_exit_codes)
{
    char *out = NULL;

    harness_daemon_start(&d, NULL);
    char *unknown[] = {TRACECTL_BIN, "--socket", d.sock, "report", "no-such-session", NULL};
    cr_assert_eq(harness_run(&out, unknown), 4, "unknown session");
    free(out);
    char *badflag[] = {TRACECTL_BIN, "--socket", d.sock, "report", "x", "--top", "0", NULL};
    cr_assert_eq(harness_run(&out, badflag), 2, "bad flag");
    free(out);
    char *badcmd[] = {TRACECTL_BIN, "--socket", d.sock, "frobnicate", NULL};
    cr_assert_eq(harness_run(&out, badcmd), 2, "unknown command");
    free(out);
    char *help[] = {TRACECTL_BIN, "report", "--help", NULL};
    cr_assert_eq(harness_run(&out, help), 0);
    cr_assert_not_null(strstr(out, "--top"));
    free(out);
    harness_daemon_stop(&d, SIGTERM);
    char *nodaemon[] = {TRACECTL_BIN, "--socket", d.sock, "sessions", NULL};
    cr_assert_eq(harness_run(&out, nodaemon), 3, "no daemon");
    free(out);
}

Test(pipeline, library_without_daemon_is_disabled_and_cheap)
{
    tc_options o;
    int err = 0;

    tc_options_init(&o);
    o.socket_path = "/tmp/tracectl-test-no-daemon-here.sock";
    tc_client *c = tc_open(&o, &err);
    cr_assert_not_null(c, "default mode returns a disabled client");
    cr_assert_eq(tc_enabled(c), 0);
    cr_assert_lt(err, 0, "the connect error is reported");
    cr_assert_eq(tc_op(c, "matmul"), 0);
    tc_begin(c, 1);
    tc_end(c, 0, NULL, NULL, 0);
    cr_assert_eq(tc_flush(c, 10), -ENOTCONN);
    cr_assert_eq(tc_close(c), 0);
    o.blocking = 1;
    cr_assert_null(tc_open(&o, &err), "blocking mode: no client without a daemon");
    cr_assert_lt(err, 0);
    setenv("TRACECTL_DISABLE", "1", 1);
    c = tc_open(NULL, &err);
    unsetenv("TRACECTL_DISABLE");
    cr_assert_eq(err, 0);
    cr_assert_eq(tc_enabled(c), 0);
    tc_close(c);
}

/* begin ends the previous op; deferred finalize; steps; metadata — checked in the file. */
Test(pipeline, library_semantics)
{
    tc_options o;
    long long id;
    int err;

    harness_daemon_start(&d, NULL);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "sem";
    o.blocking = 1;
    o.device = "cpu";
    tc_client *c = tc_open(&o, &err);
    cr_assert(tc_enabled(c), "open: %d", err);
    id = tc_session_id(c);
    uint32_t a = tc_op(c, "alpha"), b = tc_op(c, "beta");
    cr_assert_eq(tc_op(c, "alpha"), a, "interning gives the same id");
    cr_assert_neq(a, b);
    tc_begin(c, a);
    tc_begin(c, b); /* ends alpha */
    tc_end(c, 0, NULL, NULL, 0);
    tc_step(c);
    uint64_t t0 = tc_now_ns();
    tc_defer(c, a);
    tc_defer(c, b);
    uint64_t t1 = tc_now_ns();
    tc_finalize(c, t1 + 50000000); /* both end 50 ms after t1 */
    tc_meta_str(c, "model", "resnet");
    cr_assert_eq(tc_flush(c, 10000), 0);
    cr_assert_eq(tc_close(c), 0);

    struct proto_request req;
    struct proto_reader rd;
    int cfd;
    proto_request_init(&req);
    req.session.id = id;
    const msgpack_object *o2 = raw_control(d.sock, PROTO_REPORT, &req, &rd, &cfd);
    const msgpack_object *rep = &o2->via.array.ptr[1];
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "entries")), 4);
    const msgpack_object *alpha = find_row(obj_get(rep, "ops"), "op", "alpha");
    cr_assert_eq(obj_u64(obj_get(alpha, "calls")), 2, "alpha: once by begin, once deferred");
    /* the deferred entries last (t1 + 50 ms) - their start, which is in [t0, t1]: no bound
     * on how long the scheduler kept this thread between the two clock reads */
    const msgpack_object *slow = obj_get(rep, "slowest");
    uint64_t d0 = obj_u64(obj_get(&slow->via.array.ptr[0], "dur_ns"));
    cr_assert_geq(d0, 50000000);
    cr_assert_leq(d0, t1 - t0 + 50000000);
    cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[0], "step")), 1, "deferred after tc_step");
    proto_reader_deinit(&rd);
    close(cfd);
}
