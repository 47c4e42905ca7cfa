/*
 * test_report_by.c — `tracectl report --by launcher|module` under the report
 * filters (--rank, --step, --device, --category; PROTOCOL.md Part 3,
 * "report filters"), against a real tracectld fed over the raw protocol by
 * three producer connections (ranks 0 and 1, and one without a rank), whose
 * entries carry ext `launcher`, `id` and `parent` links, on several steps,
 * devices and categories. Every row of both groupings, for every filter of
 * a table, is computed here from the script (what the producers sent), by
 * the rules of README.md ("Links between entries") and of the report
 * filters, never from the CLI's code; both storage formats. Then the same
 * through `report FILE --by` on a Kineto trace (a private daemon): the
 * filtered grouping equals the one of the file imported into the test's
 * daemon, and its total is the test's sum over the trace's own events.
 * Options of the report that --by has no use for are refused.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"

#define NPROC  3 /* ranks 0, 1 and a process without a rank */
#define NSTEP  4
#define LEAVES 12 /* entries per process and step that are not regions */
#define NOPS   9
#define MAXE   (NPROC * NSTEP * (LEAVES + 2))

/* Ops: their name, the category the ops message gives (NULL: none), the category applied. */
static const struct {
    const char *name, *given, *applied;
} ops[NOPS] = {
    {"cpu_launch_a", NULL, "compute"}, {"cpu_launch_b", "compute", "compute"},
    {"k_gemm", "compute", "compute"},  {"k_nccl_allreduce", NULL, "comm"},
    {"k_memcpy", NULL, "memory"},      {"k_wait", "wait", "wait"},
    {"k_misc", "io", "other"},         {"Mod.forward", NULL, "compute"},
    {"Mod.inner", NULL, "compute"},
};
#define OP_OUTER 7
#define OP_INNER 8

struct ent {
    int proc; /* 0, 1: its rank; 2: no rank */
    uint64_t step, dur;
    int op;
    const char *dev; /* NULL: the process's hello device */
    int launcher;    /* op index, -1: none */
    bool has_id, has_parent;
    uint64_t id, parent;
};

static struct ent script[MAXE];
static size_t n_script;
static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(report_by, .fini = fini, .timeout = 240);

static const char *hello_dev(int proc)
{
    static const char *const devs[NPROC] = {"gpu:0", "gpu:1", "gpu:2"};

    return devs[proc];
}

static const char *ent_dev(const struct ent *e)
{
    return e->dev != NULL ? e->dev : hello_dev(e->proc);
}

/*
 * Per process and step: two regions (outer, inner inside outer; the inner
 * one on "cpu" in odd steps) and LEAVES entries, each in no region, the
 * inner or the outer one, on its hello device or "cpu", a kernel launched
 * by one of the two CPU ops or none, with a duration unique in the session.
 */
static void make_script(void)
{
    n_script = 0;
    for (int p = 0; p < NPROC; p++) {
        for (uint64_t s = 0; s < NSTEP; s++) {
            uint64_t outer = 100 * s + 1, inner = 100 * s + 2;

            for (int i = 0; i < LEAVES; i++) {
                struct ent *e = &script[n_script++];
                *e = (struct ent){.proc = p, .step = s, .op = i % 7, .launcher = -1};
                e->dur = 1000 + 97 * (uint64_t)n_script + (uint64_t)p;
                e->dev = i % 4 == 3 ? "cpu" : NULL;
                if (e->op >= 2 && i % 5 != 4)
                    e->launcher = (i + p) % 2;
                e->has_parent = i % 3 != 0;
                e->parent = i % 3 == 1 ? inner : outer;
            }
            script[n_script++] = (struct ent){.proc = p,
                                              .step = s,
                                              .dur = 500000 + s,
                                              .op = OP_INNER,
                                              .dev = s % 2 ? "cpu" : NULL,
                                              .launcher = -1,
                                              .has_id = true,
                                              .id = inner,
                                              .has_parent = true,
                                              .parent = outer};
            script[n_script++] = (struct ent){.proc = p,
                                              .step = s,
                                              .dur = 900000 + s,
                                              .op = OP_OUTER,
                                              .launcher = -1,
                                              .has_id = true,
                                              .id = outer};
        }
    }
}

/* ---- the producers: the raw protocol, packed here -------------------------------- */

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void send_ops(int fd)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    pack_str(&pk, "ops");
    msgpack_pack_array(&pk, NOPS);
    for (int k = 0; k < NOPS; k++) {
        msgpack_pack_array(&pk, ops[k].given ? 3 : 2);
        msgpack_pack_uint32(&pk, (uint32_t)k);
        pack_str(&pk, ops[k].name);
        if (ops[k].given)
            pack_str(&pk, ops[k].given);
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* One batch of process p's entries: [step, op, start, dur, nil, nil, nil, nil, device, ext]. */
static void send_entries(int fd, int p)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t n = 0;

    for (size_t i = 0; i < n_script; i++)
        n += script[i].proc == p;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    pack_str(&pk, "batch");
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n_script; i++) {
        const struct ent *e = &script[i];
        if (e->proc != p)
            continue;
        msgpack_pack_array(&pk, 10);
        msgpack_pack_uint64(&pk, e->step);
        msgpack_pack_uint32(&pk, (uint32_t)e->op);
        msgpack_pack_uint64(&pk, 1000000 + 10000 * i);
        msgpack_pack_uint64(&pk, e->dur);
        for (int k = 0; k < 4; k++)
            msgpack_pack_nil(&pk);
        if (e->dev != NULL)
            pack_str(&pk, e->dev);
        else
            msgpack_pack_nil(&pk);
        msgpack_pack_map(&pk, e->has_id + e->has_parent + (e->launcher >= 0));
        if (e->has_id) {
            pack_str(&pk, "id");
            msgpack_pack_uint64(&pk, e->id);
        }
        if (e->has_parent) {
            pack_str(&pk, "parent");
            msgpack_pack_uint64(&pk, e->parent);
        }
        if (e->launcher >= 0) {
            pack_str(&pk, "launcher");
            msgpack_pack_uint32(&pk, (uint32_t)e->launcher);
        }
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* All three join before any leaves: the session ends when both ranks of its world have left. */
static void run_producers(const char *session)
{
    int fd[NPROC];

    for (int p = 0; p < NPROC; p++)
        fd[p] = raw_producer(d.sock, session, p < 2 ? p : -1, 2, hello_dev(p), NULL);
    for (int p = 0; p < NPROC; p++) {
        send_ops(fd[p]);
        send_entries(fd[p], p);
        cr_assert_gt(raw_flush(fd[p], 1), 0, "process %d: no ack", p);
    }
    for (int p = 0; p < NPROC; p++)
        raw_bye(fd[p], 0);
}

/* ---- the filters and the test's own sums ------------------------------------------- */

struct filter {
    const char *what;
    int64_t ranks[2];
    size_t n_ranks;
    bool steps;
    uint64_t lo, hi;
    const char *dev, *cat; /* cat as given on the command line */
    const char *applied;   /* the category the report applies */
};

static bool match(const struct filter *f, const struct ent *e)
{
    bool rank = f->n_ranks == 0;

    for (size_t i = 0; i < f->n_ranks; i++)
        rank |= e->proc < 2 && f->ranks[i] == e->proc;
    return rank && (!f->steps || (e->step >= f->lo && e->step <= f->hi)) &&
           (f->dev == NULL || strcmp(f->dev, ent_dev(e)) == 0) &&
           (f->applied == NULL || strcmp(f->applied, ops[e->op].applied) == 0);
}

/* A row of the test's sums: a key of up to two names (NULL: none) and its figures. */
struct sum {
    const char *a, *b;
    uint64_t calls, total, entries, self, kernels;
};

static bool name_eq(const char *x, const char *y)
{
    return x == NULL ? y == NULL : y != NULL && strcmp(x, y) == 0;
}

static struct sum *sum_of(struct sum *s, size_t *n, const char *a, const char *b)
{
    for (size_t i = 0; i < *n; i++)
        if (name_eq(s[i].a, a) && name_eq(s[i].b, b))
            return &s[i];
    s[*n] = (struct sum){.a = a, .b = b};
    return &s[(*n)++];
}

/* The region (proc, id) of the script, or NULL. */
static const struct ent *region(int proc, uint64_t id)
{
    for (size_t i = 0; i < n_script; i++)
        if (script[i].proc == proc && script[i].has_id && script[i].id == id)
            return &script[i];
    return NULL;
}

/* ---- the CLI's JSON ------------------------------------------------------------------- */

static yajl_val jget(yajl_val v, const char *key)
{
    const char *path[] = {key, NULL};

    return yajl_tree_get(v, path, yajl_t_any);
}

static unsigned long long ju(yajl_val v, const char *key)
{
    yajl_val x = jget(v, key);

    cr_assert(x != NULL && YAJL_IS_INTEGER(x), "%s is not an integer", key);
    return (unsigned long long)YAJL_GET_INTEGER(x);
}

static const char *js(yajl_val v, const char *key)
{
    yajl_val x = jget(v, key);

    cr_assert(x != NULL && (YAJL_IS_NULL(x) || YAJL_IS_STRING(x)), "%s", key);
    return YAJL_IS_NULL(x) ? NULL : YAJL_GET_STRING(x);
}

/* `tracectl [--socket S] report ARG --by BY --json` with f's options; the parsed JSON. */
static yajl_val by_json(const char *sock, const char *arg, const char *by, const struct filter *f)
{
    char *argv[32], ranks[64] = "", steps[64], *out = NULL, err[256];
    int n = 0;
    yajl_val v;

    argv[n++] = TRACECTL_BIN;
    if (sock != NULL) {
        argv[n++] = "--socket";
        argv[n++] = (char *)sock;
    }
    argv[n++] = "report";
    argv[n++] = (char *)arg;
    argv[n++] = "--by";
    argv[n++] = (char *)by;
    argv[n++] = "--json";
    for (size_t i = 0; i < f->n_ranks; i++)
        snprintf(ranks + strlen(ranks), sizeof(ranks) - strlen(ranks), "%s%lld", i ? "," : "",
                 (long long)f->ranks[i]);
    if (f->n_ranks > 0) {
        argv[n++] = "--rank";
        argv[n++] = ranks;
    }
    if (f->steps) {
        snprintf(steps, sizeof(steps), "%llu..%llu", (unsigned long long)f->lo,
                 (unsigned long long)f->hi);
        argv[n++] = "--step";
        argv[n++] = steps;
    }
    if (f->dev != NULL) {
        argv[n++] = "--device";
        argv[n++] = (char *)f->dev;
    }
    if (f->cat != NULL) {
        argv[n++] = "--category";
        argv[n++] = (char *)f->cat;
    }
    argv[n] = NULL;
    cr_assert_eq(harness_run(&out, argv), 0, "%s: report --by %s failed", f->what, by);
    v = yajl_tree_parse(out, err, sizeof(err));
    cr_assert(v != NULL, "%s: not JSON: %s\n%s", f->what, err, out);
    free(out);
    return v;
}

/* The "filter" key: present with exactly the filters given, the category as applied. */
static void check_filter_key(yajl_val v, const struct filter *f)
{
    yajl_val k = jget(v, "filter");

    if (f->n_ranks == 0 && !f->steps && f->dev == NULL && f->cat == NULL) {
        cr_assert_null(k, "%s: a filter key without a filter", f->what);
        return;
    }
    cr_assert(k != NULL && YAJL_IS_OBJECT(k), "%s: no filter key", f->what);
    cr_assert_eq(k->u.object.len, (f->n_ranks > 0) + f->steps + (f->dev != NULL) + (f->cat != NULL),
                 "%s", f->what);
    if (f->n_ranks > 0) {
        yajl_val r = jget(k, "ranks");
        cr_assert(r != NULL && YAJL_IS_ARRAY(r) && r->u.array.len == f->n_ranks, "%s", f->what);
        for (size_t i = 0; i < f->n_ranks; i++)
            cr_assert_eq(YAJL_GET_INTEGER(r->u.array.values[i]), f->ranks[i]);
    }
    if (f->steps) {
        yajl_val s = jget(k, "steps");
        cr_assert(s != NULL && YAJL_IS_ARRAY(s) && s->u.array.len == 2, "%s", f->what);
        cr_assert_eq((uint64_t)YAJL_GET_INTEGER(s->u.array.values[0]), f->lo);
        cr_assert_eq((uint64_t)YAJL_GET_INTEGER(s->u.array.values[1]), f->hi);
    }
    if (f->dev != NULL)
        cr_assert_str_eq(js(k, "device"), f->dev);
    if (f->cat != NULL)
        cr_assert_str_eq(js(k, "category"), f->applied);
}

/* Each row of list (keys ka, kb: NULL for one key) is one of the n sums, and every sum a row. */
static void check_rows(yajl_val v, const char *list, const char *ka, const char *kb,
                       const struct sum *s, size_t n, uint64_t total, const char *what, bool module)
{
    yajl_val rows = jget(v, list);

    cr_assert(rows != NULL && YAJL_IS_ARRAY(rows), "%s: no %s", what, list);
    cr_assert_eq(rows->u.array.len, n, "%s: %s has %zu rows, not %zu", what, list,
                 rows->u.array.len, n);
    for (size_t i = 0; i < rows->u.array.len; i++) {
        yajl_val r = rows->u.array.values[i];
        const char *a = js(r, ka), *b = kb != NULL ? js(r, kb) : NULL;
        const struct sum *w = NULL;
        uint64_t part;

        for (size_t k = 0; k < n && w == NULL; k++)
            if (name_eq(s[k].a, a) && name_eq(s[k].b, b))
                w = &s[k];
        cr_assert_not_null(w, "%s: %s has a row %s/%s the script has not", what, list, a ? a : "-",
                           b ? b : "-");
        cr_expect_eq(ju(r, "calls"), w->calls, "%s: %s %s/%s calls", what, list, a, b);
        if (module && kb == NULL) {
            cr_expect_eq(ju(r, "entries"), w->entries, "%s: %s %s entries", what, list, a);
            cr_expect_eq(ju(r, "self_ns"), w->self, "%s: %s %s self", what, list, a);
            part = w->self;
        } else {
            part = module ? w->self : w->total;
        }
        cr_expect_eq(ju(r, "total_ns"), module && kb != NULL ? w->self : w->total,
                     "%s: %s %s/%s total", what, list, a, b);
        if (!module && kb == NULL)
            cr_expect_eq(ju(r, "kernels"), w->kernels, "%s: %s %s kernels", what, list, a);
        cr_expect_eq(YAJL_GET_DOUBLE(jget(r, "share")), total ? (double)part / (double)total : 0.0,
                     "%s: %s share", what, list);
    }
}

/* --by launcher: every entry that matches counts, under its launcher (none: null). */
static void check_launcher(const char *sock, const char *session, const struct filter *f)
{
    static struct sum pairs[MAXE], launchers[MAXE];
    size_t n_pairs = 0, n_launchers = 0;
    uint64_t total = 0;
    yajl_val v = by_json(sock, session, "launcher", f);

    for (size_t i = 0; i < n_script; i++) {
        const struct ent *e = &script[i];
        const char *l = e->launcher >= 0 ? ops[e->launcher].name : NULL;
        struct sum *p;

        if (!match(f, e))
            continue;
        p = sum_of(pairs, &n_pairs, l, ops[e->op].name);
        p->calls++, p->total += e->dur, total += e->dur;
    }
    for (size_t i = 0; i < n_pairs; i++) {
        struct sum *l = sum_of(launchers, &n_launchers, pairs[i].a, NULL);
        l->calls += pairs[i].calls, l->total += pairs[i].total, l->kernels++;
    }
    cr_expect_eq(ju(v, "total_ns"), total, "%s: launcher total %llu, want %llu", f->what,
                 ju(v, "total_ns"), (unsigned long long)total);
    check_rows(v, "launchers", "launcher", NULL, launchers, n_launchers, total, f->what, false);
    check_rows(v, "pairs", "launcher", "op", pairs, n_pairs, total, f->what, false);
    check_filter_key(v, f);
    yajl_tree_free(v);
}

/*
 * --by module: a region that matches is one call of its module; an entry
 * that is not a region and matches counts in the self time of the region
 * around it (whether that region matches or not: nesting is not filtered)
 * and in the total of every distinct region name above it.
 */
static void check_module(const char *sock, const char *session, const struct filter *f)
{
    static struct sum mods[MAXE], pairs[MAXE];
    size_t n_mods = 0, n_pairs = 0;
    uint64_t total = 0;
    yajl_val v = by_json(sock, session, "module", f);

    for (size_t i = 0; i < n_script; i++) {
        const struct ent *e = &script[i];
        const struct ent *in = e->has_parent ? region(e->proc, e->parent) : NULL;
        const char *mod = in != NULL ? ops[in->op].name : NULL;
        struct sum *m;

        if (!match(f, e))
            continue;
        if (e->has_id) {
            sum_of(mods, &n_mods, ops[e->op].name, NULL)->calls++;
            continue;
        }
        total += e->dur;
        m = sum_of(mods, &n_mods, mod, NULL);
        m->entries++, m->self += e->dur;
        if (in == NULL)
            m->total += e->dur;
        for (const struct ent *r = in; r != NULL;
             r = r->has_parent ? region(r->proc, r->parent) : NULL)
            sum_of(mods, &n_mods, ops[r->op].name, NULL)->total += e->dur; /* names differ */
        m = sum_of(pairs, &n_pairs, mod, ops[e->op].name);
        m->calls++, m->self += e->dur;
    }
    for (size_t i = 0; i < n_mods; i++) /* a module with no call and no entry is no row */
        if (mods[i].calls == 0 && mods[i].entries == 0)
            mods[i--] = mods[--n_mods];
    cr_expect_eq(ju(v, "total_ns"), total, "%s: module total", f->what);
    check_rows(v, "modules", "module", NULL, mods, n_mods, total, f->what, true);
    check_rows(v, "pairs", "module", "op", pairs, n_pairs, total, f->what, true);
    check_filter_key(v, f);
    yajl_tree_free(v);
}

static const struct filter filters[] = {
    {"no filter", {0}, 0, false, 0, 0, NULL, NULL, NULL},
    {"rank 1", {1}, 1, false, 0, 0, NULL, NULL, NULL},
    {"ranks 0,1, steps 1..2", {0, 1}, 2, true, 1, 2, NULL, NULL, NULL},
    {"device cpu", {0}, 0, false, 0, 0, "cpu", NULL, NULL},
    {"device gpu:2", {0}, 0, false, 0, 0, "gpu:2", NULL, NULL},
    {"category comm", {0}, 0, false, 0, 0, NULL, "comm", "comm"},
    {"category wait, step 3", {0}, 0, true, 3, 3, NULL, "wait", "wait"},
    {"category io (other)", {0}, 0, false, 0, 0, NULL, "io", "other"},
    {"category compute, rank 0, device gpu:0", {0}, 1, false, 0, 0, "gpu:0", "compute", "compute"},
    {"step 9: nothing", {0}, 0, true, 9, 9, NULL, NULL, NULL},
};

static void every_filter(const char *format)
{
    char session[32];

    make_script();
    harness_daemon_start(&d, "--storage-format", format, NULL);
    snprintf(session, sizeof(session), "by-%s", format);
    run_producers(session);
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        check_launcher(d.sock, session, &filters[i]);
        check_module(d.sock, session, &filters[i]);
    }
}

Test(report_by, filters_rows)
{
    every_filter("rows");
}

Test(report_by, filters_blocks)
{
    every_filter("blocks");
}

/* ---- report FILE --by: the same filters through a private daemon ----------------------- */

#define TRACE TEST_DATA_DIR "/kineto/hta/sampled_rank-0.json.gz"

/* argv's stdout; *by points at its `"by":` (the session's id and name before it differ). */
static char *run_text(char *const argv[], const char **by)
{
    char *out = NULL;

    cr_assert_eq(harness_run(&out, argv), 0, "%s %s failed", argv[1], argv[2]);
    cr_assert_not_null(*by = strstr(out, "\"by\":"), "%s", out);
    return out;
}

/* The words of the communication rule (PROTOCOL.md Part 1 and Part 3 "Classification"). */
static bool is_comm_name(const char *name)
{
    static const char *const words[] = {"allreduce",
                                        "all_reduce",
                                        "all_gather",
                                        "allgather",
                                        "reduce_scatter",
                                        "reducescatter",
                                        "alltoall",
                                        "all_to_all",
                                        "broadcast",
                                        "send",
                                        "recv",
                                        "barrier",
                                        "nccl",
                                        "comm",
                                        "ep::internode::",
                                        "ep::intranode::",
                                        "deep_ep",
                                        "gloo",
                                        "c10d::",
                                        "rccl",
                                        "nvshmem"};
    char low[2048];
    size_t i;

    for (i = 0; name[i] != '\0' && i + 1 < sizeof(low); i++)
        low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    low[i] = '\0';
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++)
        if (strstr(low, words[k]) != NULL)
            return true;
    return strncmp(low, "mpi_", 4) == 0;
}

/* The sum of the trace's device events (kernels, memcpy, memset) of communication, in ns. */
static unsigned long long comm_ns_of_trace(size_t *n)
{
    char *text = NULL, err[256];
    char *sh[] = {"sh", "-c", "zcat '" TRACE "'", NULL};
    const char *evp[] = {"traceEvents", NULL}, *kp[] = {"cat", NULL}, *np[] = {"name", NULL},
               *pp[] = {"ph", NULL}, *dp[] = {"dur", NULL};
    unsigned long long sum = 0;
    yajl_val root, evs;

    cr_assert_eq(harness_run(&text, sh), 0);
    cr_assert_not_null(root = yajl_tree_parse(text, err, sizeof(err)), "%s", err);
    free(text);
    evs = yajl_tree_get(root, evp, yajl_t_array);
    cr_assert_not_null(evs);
    *n = 0;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        yajl_val cat = yajl_tree_get(e, kp, yajl_t_string),
                 name = yajl_tree_get(e, np, yajl_t_string);
        yajl_val ph = yajl_tree_get(e, pp, yajl_t_string),
                 dur = yajl_tree_get(e, dp, yajl_t_number);
        const char *c = cat ? YAJL_GET_STRING(cat) : NULL, *p = ph ? YAJL_GET_STRING(ph) : NULL;
        const char *nm = name ? YAJL_GET_STRING(name) : NULL;

        if (p == NULL || strcmp(p, "X") != 0 || nm == NULL || dur == NULL || c == NULL ||
            (strcmp(c, "kernel") != 0 && strcmp(c, "gpu_memcpy") != 0 &&
             strcmp(c, "gpu_memset") != 0) ||
            !is_comm_name(nm))
            continue;
        /* microseconds with up to three decimals, as the importer reads them */
        sum += (unsigned long long)llroundl(strtold(YAJL_GET_NUMBER(dur), NULL) * 1000.0L);
        (*n)++;
    }
    yajl_tree_free(root);
    return sum;
}

Test(report_by, trace_file_offline)
{
    static const struct filter none = {"no filter", {0}, 0, false, 0, 0, NULL, NULL, NULL};
    static const struct filter comm = {"category comm", {0}, 0, false, 0, 0, NULL, "comm", "comm"};
    char *import[] = {TRACECTL_BIN, "--socket", NULL,      "import", TRACE,
                      "--session",  "trace",    "--quiet", NULL};
    size_t n_comm;
    unsigned long long want = comm_ns_of_trace(&n_comm), calls = 0;
    yajl_val v = NULL, all, pairs;
    char err[256];

    cr_assert_gt(n_comm, 0, "the trace has no communication kernel");
    harness_daemon_start(&d, NULL);
    import[2] = d.sock;
    cr_assert_eq(harness_run(NULL, import), 0);
    for (int k = 0; k < 2; k++) {
        const char *by = k == 0 ? "launcher" : "module", *a, *b;
        char *online[] = {TRACECTL_BIN, "--socket", d.sock,       "report", "trace", "--by",
                          (char *)by,   "--json",   "--category", "comm",   NULL};
        char *offline[] = {TRACECTL_BIN, "report",     TRACE,  "--by", (char *)by,
                           "--json",     "--category", "comm", NULL};
        char *on = run_text(online, &a), *off = run_text(offline, &b);

        cr_expect_str_eq(b, a, "report FILE --by %s --category comm differs from the daemon's", by);
        if (k == 0)
            cr_assert_not_null(v = yajl_tree_parse(off, err, sizeof(err)), "%s", err);
        free(on);
        free(off);
    }
    /* the numbers: the trace's own communication kernels, a part of the whole */
    all = by_json(d.sock, "trace", "launcher", &none);
    cr_expect_eq(ju(v, "total_ns"), want);
    cr_expect_lt(ju(v, "total_ns"), ju(all, "total_ns"));
    pairs = jget(v, "pairs");
    cr_assert(pairs != NULL && YAJL_IS_ARRAY(pairs));
    for (size_t i = 0; i < pairs->u.array.len; i++) {
        cr_expect(is_comm_name(js(pairs->u.array.values[i], "op")));
        calls += ju(pairs->u.array.values[i], "calls");
    }
    cr_expect_eq(calls, n_comm);
    check_filter_key(v, &comm);
    yajl_tree_free(v);
    yajl_tree_free(all);
}

/* Options of the report that the groupings have no use for: refused, not ignored. */
Test(report_by, report_options_that_do_not_apply_are_refused)
{
    static const char *const opts[][2] = {{"--ops", "5"},
                                          {"--ops-offset", "1"},
                                          {"--comm-min-ratio", "0.1"},
                                          {"--mem-threshold", "1"}};

    harness_daemon_start(&d, NULL);
    for (size_t i = 0; i < 4; i++)
        for (int k = 0; k < 2; k++) {
            char *argv[] = {TRACECTL_BIN,
                            "--socket",
                            d.sock,
                            "report",
                            "any",
                            "--by",
                            k ? "module" : "launcher",
                            (char *)opts[i][0],
                            (char *)opts[i][1],
                            NULL};
            cr_expect_eq(harness_run(NULL, argv), 2, "report --by with %s", opts[i][0]);
        }
}
