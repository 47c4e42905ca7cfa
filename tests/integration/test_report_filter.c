/*
 * test_report_filter.c — report filters (ranks, steps, device, category;
 * PROTOCOL.md Part 3, "report filters") restrict every section of the
 * report, the v1 sections included, against a real tracectld fed by real
 * producer processes (libtracectl), one per rank plus one without a rank,
 * each recording a scripted list of entries on several steps and devices.
 * Every number of every v1 section is computed here from the script (what
 * the producers sent), by the definitions of PROTOCOL.md Part 1, never from
 * the daemon's SQL; both storage formats.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

#define NPROC  4 /* ranks 0, 1, 2 and a process without a rank (index 3) */
#define NSTEP  4
#define PER    24 /* entries per process and step */
#define MAXE   (NPROC * NSTEP * PER)
#define NOPS   6
#define LONGOP "an_operation_name_far_longer_than_the_thirty_two_columns_of_the_table"

struct ent {
    int proc;     /* index: its rank, or 3 (no rank) */
    int64_t rank; /* -1: none */
    uint64_t step;
    int op; /* index into ops[] */
    const char *device;
    uint64_t start, dur, mem, elements;
};

/* Op names, their category as the producer gives it (NULL: classified by name), and as the
 * report applies it (compute, comm, memory, wait, other). */
static const struct {
    const char *name, *given, *applied;
} ops[NOPS] = {
    {"matmul", NULL, "compute"},   {"allreduce", NULL, "comm"},      {"memcpy_h2d", NULL, "memory"},
    {"read_batch", "io", "other"}, {"barrier_wait", "wait", "wait"}, {LONGOP, "compute", "compute"},
};

static struct ent script[MAXE];
static size_t n_script;
static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(report_filter, .fini = fini, .timeout = 240);

/* A fixed pseudo-random sequence (the script is the same every run). */
static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/*
 * The script: every process records PER entries per step, on its GPU or on
 * "cpu" (the process without a rank: "cpu" or "gpu:3"); starts are unique
 * across the session (no tie needs the arrival order), durations span a few
 * ns to ~1 ms (above 256 ns the aggregates' percentiles are approximate, a
 * filtered report's exact), and repeat (ties within an op).
 */
static void make_script(void)
{
    static char gpu[NPROC][16];
    uint64_t seed = 42;

    n_script = 0;
    for (int p = 0; p < NPROC; p++)
        snprintf(gpu[p], sizeof(gpu[p]), "gpu:%d", p);
    for (uint64_t step = 0; step < NSTEP; step++) {
        for (int p = 0; p < NPROC; p++) {
            for (int i = 0; i < PER; i++) {
                struct ent *e = &script[n_script++];
                uint64_t r = lcg(&seed);

                e->proc = p;
                e->rank = p < 3 ? p : -1;
                e->step = step;
                e->op = (int)(r % NOPS);
                e->device = (r >> 8) % 3 == 0 ? "cpu" : gpu[p];
                /* Unique: step, process and index in the high digits. */
                e->start = 1000000000ull + step * 100000000ull + (uint64_t)p * 10000000ull +
                           (uint64_t)i * 100000ull;
                e->dur = (r >> 12) % 5 == 0 ? 40 + (r >> 16) % 7 : 300 + (r >> 16) % 997 * 83;
                e->mem = (r >> 20) % 4 == 0 ? 0 : 1024 * (1 + (r >> 24) % 50);
                e->elements = 2 * (1 + (r >> 30) % 9);
            }
        }
    }
}

/* ---- the producers --------------------------------------------------------- */

static void child(const char *session, int p)
{
    tc_options o;
    tc_client *c;
    uint32_t ids[NOPS];
    char dev[16];
    int err = 0;

    snprintf(dev, sizeof(dev), "gpu:%d", p);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = p < 3 ? p : -1;
    o.world = 3;
    o.device = dev;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL || err != 0)
        _exit(2);
    for (int k = 0; k < NOPS; k++)
        ids[k] = ops[k].given ? tc_op_cat(c, ops[k].name, ops[k].given) : tc_op(c, ops[k].name);
    for (size_t i = 0; i < n_script; i++) {
        const struct ent *e = &script[i];
        tc_shape out = {1, {e->elements}};

        if (e->proc != p)
            continue;
        tc_set_step(c, e->step);
        /* The process's hello device is its GPU: those entries name none (nil). */
        tc_record(c, ids[e->op], e->start, e->dur, e->mem, &out, NULL, 0,
                  strcmp(e->device, dev) == 0 ? NULL : e->device);
    }
    _exit(tc_close(c) == 0 ? 0 : 3);
}

/* Runs the producers and waits for the session to end; returns its id. */
static long long run_producers(const char *session)
{
    pid_t pids[NPROC];
    long long id;

    for (int p = 0; p < NPROC; p++) {
        pids[p] = fork();
        cr_assert_geq(pids[p], 0);
        if (pids[p] == 0)
            child(session, p);
    }
    for (int p = 0; p < NPROC; p++) {
        int st;
        cr_assert_eq(waitpid(pids[p], &st, 0), pids[p]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer %d failed", p);
    }
    id = raw_session_id(d.sock, session);
    raw_wait_state(d.sock, id, "ended", 30);
    return id;
}

/* ---- the filters and the expected report ------------------------------------ */

struct filter {
    const char *what;
    int64_t ranks[4];
    uint32_t n_ranks;
    bool steps;
    uint64_t step_min, step_max;
    const char *device, *category;
};

static bool matches(const struct filter *f, const struct ent *e)
{
    bool rank_ok = f->n_ranks == 0;

    for (uint32_t i = 0; i < f->n_ranks; i++)
        rank_ok |= e->rank == f->ranks[i];
    return rank_ok && (!f->steps || (e->step >= f->step_min && e->step <= f->step_max)) &&
           (f->device == NULL || strcmp(f->device, e->device) == 0) &&
           (f->category == NULL || strcmp(f->category, ops[e->op].applied) == 0);
}

static size_t matching(const struct filter *f, const struct ent **out)
{
    size_t n = 0;

    for (size_t i = 0; i < n_script; i++)
        if (matches(f, &script[i]))
            out[n++] = &script[i];
    return n;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Nearest rank: the value at rank ceil(p n / 100) of the ascending durations. */
static uint64_t pct(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t rank = (p * n + 99) / 100;

    return sorted[rank > 0 ? rank - 1 : 0];
}

struct xop {
    int op;
    uint64_t calls, total, min, max, mem, elements, p50, p95, p99;
};

static int xop_cmp(const void *a, const void *b)
{
    const struct xop *x = a, *y = b;

    if (x->total != y->total)
        return x->total > y->total ? -1 : 1;
    return strcmp(ops[x->op].name, ops[y->op].name);
}

/* The ops rows of the entries e[0..n), in report order; returns how many. */
static size_t expect_ops(const struct ent **e, size_t n, struct xop *rows)
{
    static uint64_t durs[MAXE];
    size_t k = 0;

    for (int op = 0; op < NOPS; op++) {
        struct xop *x = &rows[k];
        size_t m = 0;

        memset(x, 0, sizeof(*x));
        x->op = op;
        x->min = UINT64_MAX;
        for (size_t i = 0; i < n; i++) {
            if (e[i]->op != op)
                continue;
            durs[m++] = e[i]->dur;
            x->total += e[i]->dur;
            x->mem += e[i]->mem;
            x->elements += e[i]->elements;
            x->min = e[i]->dur < x->min ? e[i]->dur : x->min;
            x->max = e[i]->dur > x->max ? e[i]->dur : x->max;
        }
        if (m == 0)
            continue;
        x->calls = m;
        qsort(durs, m, sizeof(*durs), u64_cmp);
        x->p50 = pct(durs, m, 50);
        x->p95 = pct(durs, m, 95);
        x->p99 = pct(durs, m, 99);
        k++;
    }
    qsort(rows, k, sizeof(*rows), xop_cmp);
    return k;
}

static void check_u64(const msgpack_object *map, const char *key, uint64_t want, const char *how)
{
    const msgpack_object *v = obj_get(map, key);

    cr_assert_not_null(v, "%s: no %s", how, key);
    cr_assert_eq(obj_u64(v), want, "%s: %s is %llu, not %llu", how, key, obj_u64(v),
                 (unsigned long long)want);
}

static void check_share(const msgpack_object *map, uint64_t part, uint64_t whole, const char *how)
{
    cr_assert_float_eq(obj_f64(obj_get(map, "share")), whole ? (double)part / (double)whole : 0.0,
                       1e-12, "%s: share", how);
}

static void check_session(const msgpack_object *rep, const struct filter *f, const struct ent **e,
                          size_t n, uint64_t total)
{
    const msgpack_object *s = obj_get(rep, "session");
    uint64_t begin = UINT64_MAX, end = 0, procs = 0;
    char how[128];

    snprintf(how, sizeof(how), "%s: session", f->what);
    for (int p = 0; p < NPROC; p++) {
        struct ent probe = {.rank = p < 3 ? p : -1};
        struct filter only_rank = {.n_ranks = f->n_ranks};
        memcpy(only_rank.ranks, f->ranks, sizeof(f->ranks));
        procs += matches(&only_rank, &probe);
    }
    for (size_t i = 0; i < n; i++) {
        begin = e[i]->start < begin ? e[i]->start : begin;
        end = e[i]->start + e[i]->dur > end ? e[i]->start + e[i]->dur : end;
    }
    check_u64(s, "processes", procs, how);
    check_u64(s, "dropped", 0, how);
    check_u64(s, "entries", n, how);
    check_u64(s, "total_ns", total, how);
    check_u64(s, "span_ns", n ? end - begin : 0, how);
}

static void check_ops(const msgpack_object *rep, const struct filter *f, const struct ent **e,
                      size_t n, uint64_t total, bool exact)
{
    const msgpack_object *list = obj_get(rep, "ops");
    struct xop rows[NOPS];
    size_t k = expect_ops(e, n, rows);
    char how[160];

    cr_assert_eq(list->via.array.size, k, "%s: %u ops rows, not %zu", f->what, list->via.array.size,
                 k);
    for (size_t i = 0; i < k; i++) {
        const msgpack_object *row = &list->via.array.ptr[i];
        const struct xop *x = &rows[i];
        uint64_t avg = x->total / x->calls;

        snprintf(how, sizeof(how), "%s: ops row %zu (%s)", f->what, i, ops[x->op].name);
        cr_assert(obj_str_eq(obj_get(row, "op"), ops[x->op].name), "%s: op", how);
        cr_assert(obj_str_eq(obj_get(row, "category"),
                             ops[x->op].given ? ops[x->op].given : ops[x->op].applied),
                  "%s: category", how);
        check_u64(row, "calls", x->calls, how);
        check_u64(row, "total_ns", x->total, how);
        check_u64(row, "avg_ns", avg < x->min ? x->min : avg, how);
        check_u64(row, "min_ns", x->min, how);
        check_u64(row, "max_ns", x->max, how);
        check_u64(row, "mem_bytes", x->mem, how);
        check_u64(row, "elements", x->elements, how);
        check_share(row, x->total, total, how);
        if (exact) {
            check_u64(row, "p50_ns", x->p50, how);
            check_u64(row, "p95_ns", x->p95, how);
            check_u64(row, "p99_ns", x->p99, how);
        } else { /* the aggregates' histogram: at most 1/128 below, never above */
            const char *keys[3] = {"p50_ns", "p95_ns", "p99_ns"};
            uint64_t want[3] = {x->p50, x->p95, x->p99};
            for (int j = 0; j < 3; j++) {
                uint64_t got = obj_u64(obj_get(row, keys[j]));
                cr_assert(got <= want[j] && got >= want[j] - want[j] / 128, "%s: %s %llu vs %llu",
                          how, keys[j], (unsigned long long)got, (unsigned long long)want[j]);
            }
        }
    }
}

/* Entries by a key descending, then start ascending (starts are unique). */
static bool mem_order;

static int ent_cmp(const void *a, const void *b)
{
    const struct ent *x = *(const struct ent *const *)a, *y = *(const struct ent *const *)b;
    uint64_t kx = mem_order ? x->mem : x->dur, ky = mem_order ? y->mem : y->dur;

    if (kx != ky)
        return kx > ky ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void check_entries(const msgpack_object *list, const struct ent **e, size_t n, bool by_mem,
                          uint32_t top, const char *how)
{
    static const struct ent *sorted[MAXE];
    size_t k = 0;
    char row_how[200];

    for (size_t i = 0; i < n; i++)
        if (!by_mem || e[i]->mem > 0)
            sorted[k++] = e[i];
    mem_order = by_mem;
    qsort(sorted, k, sizeof(*sorted), ent_cmp);
    k = k < top ? k : top;
    cr_assert_eq(list->via.array.size, k, "%s: %u rows, not %zu", how, list->via.array.size, k);
    for (size_t i = 0; i < k; i++) {
        const msgpack_object *row = &list->via.array.ptr[i];
        const struct ent *x = sorted[i];

        snprintf(row_how, sizeof(row_how), "%s row %zu", how, i);
        cr_assert(obj_str_eq(obj_get(row, "op"), ops[x->op].name), "%s: op", row_how);
        if (x->rank < 0)
            cr_assert_eq(obj_get(row, "rank")->type, MSGPACK_OBJECT_NIL, "%s: rank", row_how);
        else
            check_u64(row, "rank", (uint64_t)x->rank, row_how);
        cr_assert(obj_str_eq(obj_get(row, "device"), x->device), "%s: device", row_how);
        check_u64(row, "step", x->step, row_how);
        check_u64(row, "start_ns", x->start, row_how);
        check_u64(row, "dur_ns", x->dur, row_how);
        check_u64(row, "mem_bytes", x->mem, row_how);
    }
}

static void check_memory(const msgpack_object *rep, const struct filter *f, const struct ent **e,
                         size_t n, uint32_t top)
{
    const msgpack_object *m = obj_get(rep, "memory");
    uint64_t peak = 0, sum = 0;
    char how[128];

    snprintf(how, sizeof(how), "%s: memory", f->what);
    for (size_t i = 0; i < n; i++) {
        peak = e[i]->mem > peak ? e[i]->mem : peak;
        sum += e[i]->mem;
    }
    check_u64(m, "peak_bytes", peak, how);
    check_u64(m, "total_bytes", sum, how);
    check_entries(obj_get(m, "hotspots"), e, n, true, top, how);
}

/* devices (by name), imbalance, and session.devices. */
static void check_devices(const msgpack_object *rep, const struct filter *f, const struct ent **e,
                          size_t n)
{
    static const char *const names[] = {"cpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3"};
    const msgpack_object *list = obj_get(rep, "devices"), *im = obj_get(rep, "imbalance");
    uint64_t sum = 0, max = 0;
    const char *slowest = NULL;
    size_t k = 0;
    char how[128];

    for (size_t j = 0; j < 5; j++) {
        uint64_t calls = 0, total = 0, mem = 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(e[i]->device, names[j]) != 0)
                continue;
            calls++;
            total += e[i]->dur;
            mem += e[i]->mem;
        }
        if (calls == 0)
            continue;
        snprintf(how, sizeof(how), "%s: device %s", f->what, names[j]);
        cr_assert_lt(k, list->via.array.size, "%s: missing", how);
        cr_assert(obj_str_eq(obj_get(&list->via.array.ptr[k], "device"), names[j]), "%s: name",
                  how);
        check_u64(&list->via.array.ptr[k], "calls", calls, how);
        check_u64(&list->via.array.ptr[k], "total_ns", total, how);
        check_u64(&list->via.array.ptr[k], "mem_bytes", mem, how);
        sum += total;
        if (total > max) {
            max = total;
            slowest = names[j];
        }
        k++;
    }
    snprintf(how, sizeof(how), "%s: devices", f->what);
    cr_assert_eq(list->via.array.size, k, "%s: %u rows, not %zu", how, list->via.array.size, k);
    check_u64(obj_get(rep, "session"), "devices", k, how);
    if (k < 2) {
        cr_assert_eq(im->type, MSGPACK_OBJECT_NIL, "%s: imbalance not nil", how);
        return;
    }
    snprintf(how, sizeof(how), "%s: imbalance", f->what);
    check_u64(im, "devices", k, how);
    check_u64(im, "total_ns", sum, how);
    check_u64(im, "ideal_ns", sum / k, how);
    check_u64(im, "max_ns", max, how);
    cr_assert_float_eq(obj_f64(obj_get(im, "ratio")),
                       ((double)max - (double)sum / (double)k) / ((double)sum / (double)k), 1e-9,
                       "%s: ratio", how);
    cr_assert(obj_str_eq(obj_get(im, "slowest_device"), slowest), "%s: slowest_device", how);
}

static void check_comm(const msgpack_object *rep, const struct filter *f, const struct ent **e,
                       size_t n, uint64_t total)
{
    const msgpack_object *list = obj_get(rep, "comm");
    struct xop rows[NOPS];
    size_t k = expect_ops(e, n, rows), c = 0;
    char how[128];

    for (size_t i = 0; i < k; i++) {
        if (strcmp(ops[rows[i].op].applied, "comm") != 0)
            continue;
        snprintf(how, sizeof(how), "%s: comm %s", f->what, ops[rows[i].op].name);
        cr_assert_lt(c, list->via.array.size, "%s: missing", how);
        cr_assert(obj_str_eq(obj_get(&list->via.array.ptr[c], "op"), ops[rows[i].op].name),
                  "%s: op", how);
        check_u64(&list->via.array.ptr[c], "calls", rows[i].calls, how);
        check_u64(&list->via.array.ptr[c], "total_ns", rows[i].total, how);
        check_share(&list->via.array.ptr[c], rows[i].total, total, how);
        c++;
    }
    cr_assert_eq(list->via.array.size, c, "%s: %u comm rows, not %zu", f->what,
                 list->via.array.size, c);
}

/* The reply's `filter` map says what was asked (the category as applied). */
static void check_filter_key(const msgpack_object *rep, const struct filter *f)
{
    const msgpack_object *m = obj_get(rep, "filter");
    uint32_t keys = (f->n_ranks > 0) + f->steps + (f->device != NULL) + (f->category != NULL);

    if (keys == 0) {
        cr_assert_null(m, "%s: a filter key without filters", f->what);
        return;
    }
    cr_assert_not_null(m, "%s: no filter key", f->what);
    cr_assert_eq(m->via.map.size, keys, "%s: filter keys", f->what);
    if (f->n_ranks > 0) {
        const msgpack_object *r = obj_get(m, "ranks");
        cr_assert_eq(r->via.array.size, f->n_ranks, "%s: filter.ranks", f->what);
        for (uint32_t i = 0; i < f->n_ranks; i++)
            cr_assert_eq(obj_u64(&r->via.array.ptr[i]), (uint64_t)f->ranks[i]);
    }
    if (f->steps) {
        const msgpack_object *s = obj_get(m, "steps");
        cr_assert_eq(obj_u64(&s->via.array.ptr[0]), f->step_min, "%s: filter.steps", f->what);
        cr_assert_eq(obj_u64(&s->via.array.ptr[1]), f->step_max, "%s: filter.steps", f->what);
    }
    if (f->device != NULL)
        cr_assert(obj_str_eq(obj_get(m, "device"), f->device), "%s: filter.device", f->what);
    if (f->category != NULL)
        cr_assert(obj_str_eq(obj_get(m, "category"), f->category), "%s: filter.category", f->what);
}

static void to_request(const struct filter *f, long long id, struct proto_request *req)
{
    proto_request_init(req);
    req->session.id = id;
    req->top = 7;
    memcpy(req->analysis.ranks, f->ranks, f->n_ranks * sizeof(f->ranks[0]));
    req->analysis.n_ranks = f->n_ranks;
    req->analysis.steps = f->steps;
    req->analysis.step_min = f->step_min;
    req->analysis.step_max = f->step_max;
    req->analysis.device = (char *)f->device;
    req->analysis.category = (char *)f->category;
}

/*
 * The analysis keys stay within the filter too: every rank of the world (0..2)
 * sent entries, so none is missing, whichever ranks are asked for; and
 * collectives are comm: another category has none.
 */
static void check_analysis_scope(const msgpack_object *rep, const struct filter *f)
{
    const msgpack_object *c = obj_get(rep, "completeness"), *m, *v, *coll;

    cr_assert(c != NULL && (m = obj_get(c, "missing_ranks")) != NULL, "%s: completeness", f->what);
    cr_assert_eq(m->via.array.size, 0, "%s: %u ranks said missing", f->what, m->via.array.size);
    v = obj_get(rep, "verdict");
    cr_assert(v->type == MSGPACK_OBJECT_STR, "%s: verdict", f->what);
    cr_assert(memmem(v->via.str.ptr, v->via.str.size, "missing", 7) == NULL,
              "%s: the verdict says %.*s", f->what, (int)v->via.str.size, v->via.str.ptr);
    coll = obj_get(rep, "collectives");
    cr_assert(coll != NULL && coll->type == MSGPACK_OBJECT_ARRAY, "%s: collectives", f->what);
    if (f->category != NULL && strcmp(f->category, "comm") != 0)
        cr_assert_eq(coll->via.array.size, 0, "%s: %u collectives listed", f->what,
                     coll->via.array.size);
    else if (f->category != NULL)
        cr_assert_gt(coll->via.array.size, 0, "%s: no collective", f->what);
}

/* Asks for the report of f (v1 keys only, or with the analysis) and checks every v1 number. */
static void check_report(long long id, const struct filter *f, bool with_analysis)
{
    static const struct ent *e[MAXE];
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *rep;
    size_t n = matching(f, e);
    uint64_t total = 0;
    bool filtered = f->n_ranks > 0 || f->steps || f->device != NULL || f->category != NULL;
    int fd;

    cr_assert_gt(n, 0, "%s: the script has no such entries", f->what);
    for (size_t i = 0; i < n; i++)
        total += e[i]->dur;
    to_request(f, id, &req);
    req.analysis.on = with_analysis;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: report failed", f->what);
    rep = &o->via.array.ptr[1];
    check_session(rep, f, e, n, total);
    check_ops(rep, f, e, n, total, filtered);
    check_entries(obj_get(rep, "slowest"), e, n, false, req.top, f->what);
    check_memory(rep, f, e, n, req.top);
    check_devices(rep, f, e, n);
    check_comm(rep, f, e, n, total);
    cr_assert_eq(obj_get(rep, "verdict") != NULL, with_analysis, "%s: analysis keys", f->what);
    if (with_analysis)
        check_analysis_scope(rep, f);
    check_filter_key(rep, f);
    proto_reader_deinit(&r);
    close(fd);
}

/* A page of the filtered ops (ops_limit, ops_offset): the rows of the full filtered list. */
static void check_page(long long id, const struct filter *f)
{
    static const struct ent *e[MAXE];
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *rep, *list, *comm;
    struct xop rows[NOPS];
    size_t n = matching(f, e), k = expect_ops(e, n, rows);
    int fd;

    to_request(f, id, &req);
    req.ops_limit = 2;
    req.ops_offset = 1;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: paged report failed", f->what);
    rep = &o->via.array.ptr[1];
    list = obj_get(rep, "ops");
    check_u64(rep, "ops_total", k, f->what);
    cr_assert_eq(list->via.array.size, k - 1 < 2 ? k - 1 : 2, "%s: page size", f->what);
    for (uint32_t i = 0; i < list->via.array.size; i++) {
        const struct xop *x = &rows[1 + i];
        cr_assert(obj_str_eq(obj_get(&list->via.array.ptr[i], "op"), ops[x->op].name),
                  "%s: page row %u", f->what, i);
        check_u64(&list->via.array.ptr[i], "calls", x->calls, f->what);
        check_u64(&list->via.array.ptr[i], "p95_ns", x->p95, f->what);
    }
    comm = obj_get(rep, "comm");
    cr_assert_leq(comm->via.array.size, 2, "%s: paged comm", f->what);
    proto_reader_deinit(&r);
    close(fd);
}

static const struct filter filters[] = {
    {"none", {0}, 0, false, 0, 0, NULL, NULL},
    {"rank 1", {1}, 1, false, 0, 0, NULL, NULL},
    {"ranks 0,2", {0, 2}, 2, false, 0, 0, NULL, NULL},
    {"every rank", {0, 1, 2}, 3, false, 0, 0, NULL, NULL},
    {"step 2", {0}, 0, true, 2, 2, NULL, NULL},
    {"steps 1..2", {0}, 0, true, 1, 2, NULL, NULL},
    {"device cpu", {0}, 0, false, 0, 0, "cpu", NULL},
    {"device gpu:3", {0}, 0, false, 0, 0, "gpu:3", NULL},
    {"category comm", {0}, 0, false, 0, 0, NULL, "comm"},
    {"category other", {0}, 0, false, 0, 0, NULL, "other"},
    {"category compute", {0}, 0, false, 0, 0, NULL, "compute"},
    {"rank 2, steps 0..1, device gpu:2", {2}, 1, true, 0, 1, "gpu:2", NULL},
    {"ranks 0,1, step 3, category memory", {0, 1}, 2, true, 3, 3, NULL, "memory"},
    {"rank 0, device cpu, category compute, steps 1..3", {0}, 1, true, 1, 3, "cpu", "compute"},
};

static void every_filter(const char *format)
{
    char name[64];
    long long id;

    make_script();
    harness_daemon_start(&d, "--storage-format", format, NULL);
    snprintf(name, sizeof(name), "filters-%s", format);
    id = run_producers(name);
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        check_report(id, &filters[i], false);
        check_report(id, &filters[i], true);
        if (i > 0)
            check_page(id, &filters[i]);
    }
}

Test(report_filter, every_section_rows)
{
    every_filter("rows");
}

Test(report_filter, every_section_blocks)
{
    every_filter("blocks");
}

/* A filter no entry matches: an empty report, not an error. */
Test(report_filter, nothing_matches)
{
    static const struct filter none[] = {
        {"rank 9", {9}, 1, false, 0, 0, NULL, NULL},
        {"step 99", {0}, 0, true, 99, 99, NULL, NULL},
        {"device tpu:0", {0}, 0, false, 0, 0, "tpu:0", NULL},
        /* a name is a value, never SQL */
        {"device x' OR '1'='1", {0}, 0, false, 0, 0, "x' OR '1'='1", NULL},
        {"device cpu') OR (1=1", {0}, 0, false, 0, 0, "cpu') OR (1=1", NULL},
    };
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *rep;
    long long id;
    int fd;

    make_script();
    harness_daemon_start(&d, NULL);
    id = run_producers("empty");
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        to_request(&none[i], id, &req);
        o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
        cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: report failed", none[i].what);
        rep = &o->via.array.ptr[1];
        check_u64(obj_get(rep, "session"), "entries", 0, none[i].what);
        check_u64(obj_get(rep, "session"), "total_ns", 0, none[i].what);
        check_u64(obj_get(rep, "session"), "span_ns", 0, none[i].what);
        cr_assert_eq(obj_get(rep, "ops")->via.array.size, 0, "%s: ops", none[i].what);
        cr_assert_eq(obj_get(rep, "slowest")->via.array.size, 0, "%s: slowest", none[i].what);
        cr_assert_eq(obj_get(rep, "devices")->via.array.size, 0, "%s: devices", none[i].what);
        check_filter_key(rep, &none[i]);
        proto_reader_deinit(&r);
        close(fd);
    }
}

/* `tracectl report --rank R`: the header says which filter; --wide never cuts a name. */
Test(report_filter, cli_header_and_wide)
{
    char ids[32], *out = NULL;
    long long id;

    make_script();
    harness_daemon_start(&d, NULL);
    id = run_producers("cli");
    snprintf(ids, sizeof(ids), "%lld", id);
    {
        char *argv[] = {TRACECTL_BIN, "report",     ids,       "--rank",   "0,2",  "--step",
                        "1..2",       "--category", "compute", "--socket", d.sock, NULL};
        cr_assert_eq(harness_run(&out, argv), 0);
        cr_assert_not_null(strstr(out, "Filter: ranks 0,2; steps 1..2; category compute"),
                           "no filter line in:\n%s", out);
        cr_assert_null(strstr(out, LONGOP), "a long name uncut without --wide:\n%s", out);
        free(out);
    }
    {
        char *argv[] = {TRACECTL_BIN, "report", ids, "--wide", "--socket", d.sock, NULL};
        cr_assert_eq(harness_run(&out, argv), 0);
        cr_assert_null(strstr(out, "Filter:"), "a filter line without filters:\n%s", out);
        /* The ops table and the analysis's throughput table: both in full. */
        const char *tp = strstr(out, "\nThroughput\n");
        cr_assert_not_null(strstr(out, LONGOP), "--wide cut the name:\n%s", out);
        cr_assert_not_null(tp, "no throughput table:\n%s", out);
        cr_assert_not_null(strstr(tp, LONGOP), "--wide cut the throughput table's name:\n%s", out);
        free(out);
    }
}
