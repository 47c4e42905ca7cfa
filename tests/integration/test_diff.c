/*
 * test_diff.c — `tracectl diff` and `tracectl diff --divergence` end to end:
 * a real tracectld, sessions recorded by real producer processes (forked,
 * libtracectl in blocking mode) and imported from the Kineto traces of
 * tests/data, and the CLI's exit codes and --json output, parsed with yajl.
 *
 * Every expected number is computed here from the durations the producers
 * were told to record (entry_dur below), and every expected checksum with
 * this file's own FNV-1a, not with the code under test.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"
#include "tracectl.h"

#define RANKS 4
#define STEPS 8
#define NOPS  4

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(diff, .fini = stop_and_clean, .timeout = 120);

static const char *const op_names[NOPS] = {"matmul", "conv", "gelu", "allreduce"};

/* What a run changes against the base run. */
enum variant {
    BASE,
    SLOW_CONV,  /* rank 2's conv takes 3/2 of its time */
    CHECKSUMS,  /* rank 2 step 3 gelu and rank 1 step 5 matmul write other bytes */
    SEQUENCE,   /* rank 0 step 2 records relu for gelu; rank 3 stops one entry early */
    NO_CHECKSUM /* as BASE without checksums */
};

static uint64_t entry_dur(int rank, int step, int i, enum variant v)
{
    uint64_t dur = 10000 + 1000 * (uint64_t)i + 100 * (uint64_t)rank + (uint64_t)step;

    return v == SLOW_CONV && rank == 2 && i == 1 ? dur * 3 / 2 : dur;
}

/* This test's own FNV-1a 64 (the published algorithm), independent of tc_checksum. */
static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The bytes an entry "outputs": (rank, step, i, salt), salt 0 unless the run changes them. */
static void entry_output(int rank, int step, int i, enum variant v, uint64_t out[4])
{
    out[0] = (uint64_t)rank;
    out[1] = (uint64_t)step;
    out[2] = (uint64_t)i;
    out[3] = v == CHECKSUMS &&
             ((rank == 2 && step == 3 && i == 2) || (rank == 1 && step == 5 && i == 0));
}

static int producer(const char *session, int rank, enum variant v)
{
    tc_options o;
    tc_client *c;
    uint32_t ids[NOPS + 1];
    char dev[16];
    int err;

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = RANKS;
    o.blocking = 1;
    snprintf(dev, sizeof(dev), "gpu:%d", rank);
    o.device = dev;
    if ((c = tc_open(&o, &err)) == NULL || !tc_enabled(c))
        return 10;
    for (int k = 0; k < NOPS; k++)
        ids[k] = tc_op(c, op_names[k]);
    ids[NOPS] = tc_op(c, "relu");
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < NOPS; i++) {
            uint64_t out[4], pos = (uint64_t)(step * NOPS + i);
            uint32_t op = ids[i];

            if (v == SEQUENCE && rank == 3 && step == STEPS - 1 && i == NOPS - 1)
                break;
            if (v == SEQUENCE && rank == 0 && step == 2 && i == 2)
                op = ids[NOPS];
            entry_output(rank, step, i, v, out);
            if (v == NO_CHECKSUM)
                tc_record(c, op, 1000000000 + pos * 100000, entry_dur(rank, step, i, v), 4096, NULL,
                          NULL, 0, NULL);
            else
                tc_record_checksum(c, op, 1000000000 + pos * 100000, entry_dur(rank, step, i, v),
                                   4096, NULL, NULL, 0, NULL, tc_checksum(out, sizeof(out)));
        }
        tc_step(c);
        /* a batch per step: the ranks' entries interleave in the session file, so a rank's
         * sequence is only whole if the daemon sorts it by rank (export "order": "rank") */
        if (tc_flush(c, 20000) != 0)
            return 11;
    }
    if (tc_flush(c, 20000) != 0 || tc_dropped(c) != 0)
        return 11;
    return tc_close(c) == 0 ? 0 : 12;
}

/* The id of the newest session named name. */
static long long session_id(const char *name)
{
    struct proto_reader rd;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &rd, &fd);
    const msgpack_object *list = &o->via.array.ptr[1];
    long long id = -1;

    for (uint32_t i = 0; i < list->via.array.size && id < 0; i++)
        if (obj_str_eq(obj_get(&list->via.array.ptr[i], "name"), name))
            id = (long long)obj_u64(obj_get(&list->via.array.ptr[i], "id"));
    proto_reader_deinit(&rd);
    close(fd);
    cr_assert(id >= 0, "no session %s", name);
    return id;
}

static unsigned session_count(void)
{
    struct proto_reader rd;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &rd, &fd);
    unsigned n = o->via.array.ptr[1].via.array.size;

    proto_reader_deinit(&rd);
    close(fd);
    return n;
}

/* Records one session of RANKS producer processes and waits until it has ended. */
static void record_run(const char *session, enum variant v)
{
    pid_t kids[RANKS];
    int st;

    for (int r = 0; r < RANKS; r++) {
        kids[r] = fork();
        cr_assert_neq(kids[r], -1);
        if (kids[r] == 0)
            _exit(producer(session, r, v));
    }
    for (int r = 0; r < RANKS; r++) {
        waitpid(kids[r], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed (%d)", r, WEXITSTATUS(st));
    }
    raw_wait_state(d.sock, session_id(session), "ended", 10);
}

/* Runs tracectl --socket <d.sock> ARGS... (NULL-terminated); returns its exit code. */
static int cli(char **out, ...)
{
    char *argv[32] = {TRACECTL_BIN, "--socket", d.sock};
    int n = 3;
    va_list ap;

    va_start(ap, out);
    while ((argv[n] = va_arg(ap, char *)) != NULL)
        n++;
    va_end(ap);
    return harness_run(out, argv);
}

static yajl_val parse(char *text)
{
    char err[256];
    yajl_val root = yajl_tree_parse(text, err, sizeof(err));

    cr_assert_not_null(root, "not JSON (%s): %.300s", err, text);
    return root;
}

static yajl_val get(yajl_val o, const char *key)
{
    const char *path[] = {key, NULL};

    return yajl_tree_get(o, path, yajl_t_any);
}

static long long get_int(yajl_val o, const char *key)
{
    yajl_val v = get(o, key);

    cr_assert(v != NULL && YAJL_IS_INTEGER(v), "%s is not an integer", key);
    return YAJL_GET_INTEGER(v);
}

/* A uint64 that may pass INT64_MAX: compared as the JSON text yajl kept. */
static void assert_u64(yajl_val o, const char *key, uint64_t want)
{
    yajl_val v = get(o, key);
    char buf[32];

    snprintf(buf, sizeof(buf), "%" PRIu64, want);
    cr_assert(v != NULL && YAJL_IS_NUMBER(v), "%s is not a number", key);
    cr_assert_str_eq(YAJL_GET_NUMBER(v), buf, "%s", key);
}

static bool get_bool(yajl_val o, const char *key)
{
    yajl_val v = get(o, key);

    cr_assert(v != NULL && (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)), "%s is not a bool", key);
    return YAJL_IS_TRUE(v);
}

static bool str_is(yajl_val v, const char *s)
{
    return v != NULL && YAJL_IS_STRING(v) && strcmp(v->u.string, s) == 0;
}

/* The row of array section whose key is name. */
static yajl_val row(yajl_val root, const char *section, const char *key, const char *name)
{
    yajl_val a = get(root, section);

    cr_assert(a != NULL && YAJL_IS_ARRAY(a), "no %s", section);
    for (size_t i = 0; i < a->u.array.len; i++)
        if (str_is(get(a->u.array.values[i], key), name))
            return a->u.array.values[i];
    cr_assert_fail("no %s row %s", section, name);
    return NULL;
}

/* Total time of op i over every rank of a run. */
static uint64_t op_total(int i, enum variant v)
{
    uint64_t t = 0;

    for (int r = 0; r < RANKS; r++)
        for (int s = 0; s < STEPS; s++)
            t += entry_dur(r, s, i, v);
    return t;
}

Test(diff, injected_regression_named_and_equal_runs_pass)
{
    char *out;
    yajl_val root, conv;
    uint64_t a = op_total(1, BASE), b = op_total(1, SLOW_CONV);

    harness_daemon_start(&d, NULL);
    record_run("base", BASE);
    record_run("same", BASE);
    record_run("slow", SLOW_CONV);

    /* the regression: exit 1, conv named, its change exact */
    cr_assert_eq(cli(&out, "diff", "base", "slow", "--json", NULL), 1, "%s", out);
    root = parse(out);
    conv = row(root, "ops", "op", "conv");
    cr_assert(get_bool(conv, "regressed"));
    cr_assert_eq(get_int(conv, "total_a_ns"), (long long)a);
    cr_assert_eq(get_int(conv, "total_b_ns"), (long long)b);
    cr_assert_eq(get_int(conv, "delta_ns"), (long long)(b - a));
    cr_assert_float_eq(YAJL_GET_DOUBLE(get(conv, "delta_pct")), (double)(b - a) * 100.0 / (double)a,
                       1e-9);
    cr_assert_eq(get_int(conv, "calls_a"), RANKS * STEPS);
    /* nothing else changed: conv, its category, gpu:2 and the total are the regressions */
    for (int i = 0; i < NOPS; i++)
        if (i != 1)
            cr_assert_not(get_bool(row(root, "ops", "op", op_names[i]), "regressed"));
    cr_assert(get_bool(row(root, "devices", "device", "gpu:2"), "regressed"));
    cr_assert(str_is(get(conv, "category"), "compute"));
    cr_assert_null(get(row(root, "devices", "device", "gpu:2"), "category"));
    cr_assert_null(get(row(root, "categories", "category", "compute"), "op"));
    cr_assert_not(get_bool(row(root, "devices", "device", "gpu:1"), "regressed"));
    /* the ops rows come by absolute change: conv first */
    cr_assert(str_is(get(get(root, "ops")->u.array.values[0], "op"), "conv"));
    yajl_tree_free(root);
    free(out);

    /* the same for people: the verdict names conv with its percentage */
    char want[128];
    const char *verdict;
    cr_assert_eq(cli(&out, "diff", "base", "slow", NULL), 1);
    verdict = strstr(out, "Verdict: ");
    cr_assert_not_null(verdict, "%s", out);
    cr_assert(strstr(verdict, ": conv +") != NULL, "%s", out);
    snprintf(want, sizeof(want), "(+%.1f%%)", (double)(b - a) * 100.0 / (double)a);
    cr_assert(strstr(verdict, want) != NULL, "%s", out);
    free(out);

    /* a threshold above the change, or a --min-time above it, passes */
    char pct[32], ns[32];
    snprintf(pct, sizeof(pct), "%.3f", (double)(b - a) * 100.0 / (double)a + 0.01);
    snprintf(ns, sizeof(ns), "%" PRIu64, b - a + 1);
    cr_assert_eq(cli(NULL, "diff", "base", "slow", "--threshold", pct, NULL), 0);
    cr_assert_eq(cli(NULL, "diff", "base", "slow", "--min-time", ns, NULL), 0);
    snprintf(ns, sizeof(ns), "%" PRIu64, b - a);
    cr_assert_eq(cli(NULL, "diff", "base", "slow", "--min-time", ns, NULL), 1);

    /* two equal runs: exit 0, every change 0 */
    cr_assert_eq(cli(&out, "diff", "base", "same", "--json", NULL), 0, "%s", out);
    root = parse(out);
    cr_assert_eq(get_int(root, "regressions"), 0);
    cr_assert_eq(get_int(get(root, "total"), "delta_ns"), 0);
    cr_assert_eq(get(root, "ops")->u.array.len, NOPS);
    yajl_tree_free(root);
    free(out);

    /* slower to faster is an improvement, not a regression */
    cr_assert_eq(cli(&out, "diff", "slow", "base", "--json", NULL), 0);
    root = parse(out);
    cr_assert(get_bool(row(root, "ops", "op", "conv"), "improved"));
    yajl_tree_free(root);
    free(out);

    /* usage and unknown sessions keep their own codes */
    cr_assert_eq(cli(NULL, "diff", "base", NULL), 2);
    cr_assert_eq(cli(NULL, "diff", "base", "slow", "--threshold", "x", NULL), 2);
    cr_assert_eq(cli(NULL, "diff", "base", "nosuch", NULL), 4);
}

/* Imports file as session name; returns its id. */
static long long import(const char *file, const char *name)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/kineto/%s", TEST_DATA_DIR, file);
    cr_assert_eq(cli(NULL, "import", path, "--session", name, "--quiet", NULL), 0);
    return session_id(name);
}

Test(diff, imported_trace_against_itself_and_a_live_session)
{
    char *out;
    yajl_val root, ops;

    harness_daemon_start(&d, NULL);
    import("hta/nccl_data.json.gz", "k1");
    import("hta/nccl_data.json.gz", "k2");
    cr_assert_eq(cli(&out, "diff", "k1", "k2", "--json", NULL), 0, "%s", out);
    root = parse(out);
    cr_assert_eq(get_int(root, "regressions"), 0);
    cr_assert_eq(get_int(get(root, "a"), "entries"), get_int(get(root, "b"), "entries"));
    ops = get(root, "ops");
    for (size_t i = 0; i < ops->u.array.len; i++)
        cr_assert_eq(get_int(ops->u.array.values[i], "delta_ns"), 0);
    yajl_tree_free(root);
    free(out);
    cr_assert_eq(cli(NULL, "diff", "k1", "k1", NULL), 0);
    cr_assert_eq(cli(&out, "diff", "k1", "k2", "--divergence", NULL), 0);
    cr_assert(strstr(out, "No divergence") != NULL, "%s", out);
    free(out);

    /* a live-recorded session against the import: every op of A vanished, of B new */
    record_run("live", BASE);
    cr_assert_eq(cli(&out, "diff", "live", "k1", "--json", NULL), 1);
    root = parse(out);
    ops = get(root, "ops");
    for (size_t i = 0; i < ops->u.array.len; i++) {
        yajl_val r = ops->u.array.values[i];
        bool live = false;

        for (int k = 0; k < NOPS; k++)
            live |= str_is(get(r, "op"), op_names[k]);
        cr_assert_eq(get_bool(r, "vanished"), live);
        cr_assert_eq(get_bool(r, "new"), !live);
    }
    yajl_tree_free(root);
    free(out);
}

/* Checks one divergence point of the JSON against what the test injected. */
static void assert_point(yajl_val p, int rank, int step, int i, const char *kind, const char *op_a,
                         const char *op_b)
{
    cr_assert_eq(get_int(p, "rank"), rank);
    cr_assert_eq(get_int(p, "step"), step);
    cr_assert_eq(get_int(p, "position"), step * NOPS + i, "position");
    cr_assert(str_is(get(p, "kind"), kind), "kind %s", kind);
    cr_assert(op_a ? str_is(get(p, "op_a"), op_a) : YAJL_IS_NULL(get(p, "op_a")));
    cr_assert(op_b ? str_is(get(p, "op_b"), op_b) : YAJL_IS_NULL(get(p, "op_b")));
}

Test(diff, divergence_at_the_first_checksum_that_differs)
{
    char *out;
    yajl_val root, ranks, first;
    uint64_t bytes[4];

    harness_daemon_start(&d, NULL);
    record_run("ref", BASE);
    record_run("twin", BASE);
    record_run("bad", CHECKSUMS);
    record_run("plain", NO_CHECKSUM);

    cr_assert_eq(cli(&out, "diff", "ref", "twin", "--divergence", "--json", NULL), 0, "%s", out);
    root = parse(out);
    cr_assert_not(get_bool(root, "diverged"));
    cr_assert_eq(get_int(get(root, "compared"), "positions"), RANKS * STEPS * NOPS);
    cr_assert_eq(get_int(get(root, "compared"), "checksums"), RANKS * STEPS * NOPS);
    yajl_tree_free(root);
    free(out);

    /* rank 1 diverges at step 5, rank 2 at step 3: the first is rank 2's, the lower step */
    cr_assert_eq(cli(&out, "diff", "ref", "bad", "--divergence", "--json", NULL), 1, "%s", out);
    root = parse(out);
    cr_assert(get_bool(root, "diverged"));
    first = get(root, "first");
    assert_point(first, 2, 3, 2, "checksum", "gelu", "gelu");
    entry_output(2, 3, 2, BASE, bytes);
    assert_u64(first, "checksum_a", fnv1a(bytes, sizeof(bytes)));
    entry_output(2, 3, 2, CHECKSUMS, bytes);
    assert_u64(first, "checksum_b", fnv1a(bytes, sizeof(bytes)));
    ranks = get(root, "ranks");
    cr_assert_eq(ranks->u.array.len, 2);
    assert_point(ranks->u.array.values[0], 1, 5, 0, "checksum", "matmul", "matmul");
    assert_point(ranks->u.array.values[1], 2, 3, 2, "checksum", "gelu", "gelu");
    yajl_tree_free(root);
    free(out);

    /* for people: the first place, by step, rank, position */
    cr_assert_eq(cli(&out, "diff", "ref", "bad", "--divergence", NULL), 1);
    cr_assert(strstr(out, "Diverged at step 3, rank 2, position 14 (checksum)") != NULL, "%s", out);
    free(out);

    /* without checksums on one side nothing can differ but the ops: no divergence, counted */
    cr_assert_eq(cli(&out, "diff", "ref", "plain", "--divergence", "--json", NULL), 0);
    root = parse(out);
    cr_assert_eq(get_int(get(root, "compared"), "checksums"), 0);
    cr_assert_eq(get_int(get(root, "compared"), "checksum_one_side"), RANKS * STEPS * NOPS);
    yajl_tree_free(root);
    free(out);
}

Test(diff, divergence_where_op_sequences_differ)
{
    char *out;
    yajl_val root, ranks;

    harness_daemon_start(&d, NULL);
    record_run("ref", BASE);
    record_run("seq", SEQUENCE);
    cr_assert_eq(cli(&out, "diff", "ref", "seq", "--divergence", "--json", NULL), 1, "%s", out);
    root = parse(out);
    assert_point(get(root, "first"), 0, 2, 2, "op", "gelu", "relu");
    ranks = get(root, "ranks");
    cr_assert_eq(ranks->u.array.len, 2);
    assert_point(ranks->u.array.values[1], 3, STEPS - 1, NOPS - 1, "length", "allreduce", NULL);
    yajl_tree_free(root);
    free(out);
    /* the other way round, B has the extra entry */
    cr_assert_eq(cli(&out, "diff", "seq", "ref", "--divergence", "--json", NULL), 1, "%s", out);
    root = parse(out);
    assert_point(get(root, "ranks")->u.array.values[1], 3, STEPS - 1, NOPS - 1, "length", NULL,
                 "allreduce");
    yajl_tree_free(root);
    free(out);
}

/* How many files or directories dir holds. */
static int dir_entries(const char *dir)
{
    char *out, *argv[] = {"ls", "-A", (char *)dir, NULL};
    int n = 0;

    cr_assert_eq(harness_run(&out, argv), 0);
    for (char *p = out; *p; p++)
        n += *p == '\n';
    free(out);
    return n;
}

Test(diff, offline_report_equals_the_live_one)
{
    static const char *const one[] = {"hta/nccl_data.json.gz", NULL};
    static const char *const two[] = {"hta/sampled_rank-0.json.gz", "hta/sampled_rank-1.json.gz",
                                      NULL};
    static const char *const *const cases[] = {one, two};
    char tmp[PATH_MAX], path[2][PATH_MAX];

    /* the offline report's temporary directories go under a directory of this test */
    harness_daemon_start(&d, NULL);
    snprintf(tmp, sizeof(tmp), "%s/tmp", d.dir);
    cr_assert_eq(mkdir(tmp, 0700), 0);
    setenv("TMPDIR", tmp, 1);
    for (size_t c = 0; c < 2; c++) {
        const char *const *files = cases[c];
        char *live, *off, *live_h, *off_h;
        int n = 0;

        /* a fresh daemon each time: the import is its session 1, as the private one's */
        if (c > 0) {
            harness_daemon_stop(&d, SIGTERM);
            char *rm[] = {"rm", "-rf", d.data, NULL};
            cr_assert_eq(harness_run(NULL, rm), 0);
            harness_daemon_restart(&d, NULL);
        }
        for (; files[n] != NULL; n++)
            snprintf(path[n], sizeof(path[n]), "%s/kineto/%s", TEST_DATA_DIR, files[n]);
        if (n == 1)
            cr_assert_eq(cli(NULL, "import", "--quiet", path[0], NULL), 0);
        else
            cr_assert_eq(cli(NULL, "import", "--quiet", path[0], path[1], NULL), 0);
        cr_assert_eq(cli(&live, "report", "1", "--json", NULL), 0);
        cr_assert_eq(cli(&live_h, "report", "1", "--top", "3", NULL), 0);
        if (n == 1) {
            cr_assert_eq(cli(&off, "report", path[0], "--json", NULL), 0);
            cr_assert_eq(cli(&off_h, "report", "--top", "3", path[0], NULL), 0);
        } else {
            cr_assert_eq(cli(&off, "report", path[0], path[1], "--json", NULL), 0);
            cr_assert_eq(cli(&off_h, "report", "--offline", path[0], path[1], "--top", "3", NULL),
                         0);
        }
        cr_assert_str_eq(off, live);
        cr_assert_str_eq(off_h, live_h);
        cr_assert(strstr(live, "\"entries\":") != NULL);
        free(live);
        free(off);
        free(live_h);
        free(off_h);
        /* nothing reached the test's daemon: its only session is the live import */
        cr_assert_eq(session_count(), 1);
    }
    cr_assert_eq(dir_entries(tmp), 0);
    /* a file that is not a trace: import's error and exit code, still nothing left */
    snprintf(path[0], sizeof(path[0]), "%s/README.md", TEST_DATA_DIR);
    cr_assert_eq(cli(NULL, "report", "--offline", path[0], NULL), 1);
    cr_assert_eq(dir_entries(tmp), 0);
    unsetenv("TMPDIR");
}

/* One raw-protocol process recording n entries of op name, durations dur0, dur0+1, ... */
static void raw_session(const char *session, const char *name, uint64_t dur0)
{
    long long id;
    int fd = raw_producer(d.sock, session, 0, 1, "gpu:0", &id);

    raw_send_ops(fd, 1, name);
    raw_send_batch(fd, 1, 10, 1000000, dur0);
    cr_assert_eq(raw_flush(fd, 1), 10);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 10);
}

Test(diff, names_off_the_wire_never_reach_the_terminal_raw)
{
    char *out;

    harness_daemon_start(&d, NULL);
    raw_session("calm", "op\x1b]0;title\x07\x1b[2J", 1000);
    raw_session("busy", "op\x1b]0;title\x07\x1b[2J", 5000);
    raw_session("other", "plain", 1000);
    cr_assert_eq(cli(&out, "diff", "calm", "busy", NULL), 1);
    cr_assert_null(strchr(out, '\x1b'), "%s", out);
    cr_assert_null(strchr(out, '\x07'), "%s", out);
    cr_assert(strstr(out, ": op?]0;title??[2J +") != NULL, "%s", out);
    free(out);
    cr_assert_eq(cli(&out, "diff", "calm", "other", "--divergence", NULL), 1);
    cr_assert_null(strchr(out, '\x1b'), "%s", out);
    cr_assert(strstr(out, "(op): A op?]0;title??[2J; B plain") != NULL, "%s", out);
    free(out);
}
