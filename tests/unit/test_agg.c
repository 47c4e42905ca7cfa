/*
 * test_agg.c — the writer's incremental aggregates (agg.c) against the exact
 * report computed by scanning every entry of the same file.
 *
 * Entries go through the real store (writer thread, transactions); the
 * report is computed twice from one file: once from the aggregates, once
 * with info.aggregates set to 0 so query.c scans the entries. Everything must
 * match exactly, except percentiles, which may be below the exact value by
 * less than 1/128 of it (agg.h).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agg.h"
#include "info.h"
#include "query.h"
#include "schema.h"
#include "store.h"

static char dir[64];
static int flushes_done;

static void rm_dir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(agg, .fini = rm_dir, .timeout = 60);

static void done_cb(struct store *s, struct store_job *job, void *data)
{
    (void)s;
    (void)data;
    cr_assert_eq(job->rc, 0, "flush failed");
    flushes_done++;
    store_job_free(job);
}

static struct store_job *name_job(enum store_job_type t, uint32_t id, const char *name,
                                  const char *cat)
{
    struct store_job *j = store_job_new(t, 1);

    j->u.name.id = id;
    j->u.name.name = strdup(name);
    j->u.name.category = cat ? strdup(cat) : NULL;
    return j;
}

/* A batch of n entries with pseudo-random durations, memory and devices. */
static struct store_job *batch_job(size_t n, uint64_t *seed, int64_t process)
{
    struct store_job *j = store_job_new(STORE_BATCH, 1);
    struct proto_batch *b = &j->u.batch.b;

    b->entries = calloc(n, sizeof(*b->entries));
    b->n = n;
    j->u.batch.process_id = process;
    j->u.batch.dev_ids = calloc(n, sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = *seed >> 20;
        struct proto_entry *e = &b->entries[i];
        e->op_id = 1 + (uint32_t)(r % 5);
        e->step = r % 7;
        e->start_ns = (r >> 8) % 100000000;
        /* a wide spread: exact small values and histogram buckets, some ties */
        e->dur_ns = (r % 3 == 0) ? (r >> 12) % 200 : 1000 + (r >> 12) % 50000000;
        e->mem_bytes = (r % 4 == 0) ? 0 : (r >> 16) % 5000000;
        e->elements = r % 1000;
        j->u.batch.dev_ids[i] = (uint32_t)(r % 4); /* 0: no device */
    }
    return j;
}

static void same_entries(const struct report_entry *a, const struct report_entry *b, size_t n,
                         const char *what)
{
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(a[i].op, b[i].op, "%s[%zu]", what, i);
        cr_assert_eq(a[i].dur_ns, b[i].dur_ns, "%s[%zu]", what, i);
        cr_assert_eq(a[i].start_ns, b[i].start_ns, "%s[%zu]", what, i);
        cr_assert_eq(a[i].mem_bytes, b[i].mem_bytes, "%s[%zu]", what, i);
        cr_assert_eq(a[i].step, b[i].step, "%s[%zu]", what, i);
    }
}

static void within(uint64_t got, uint64_t exact, const char *what, const char *op)
{
    cr_assert_leq(got, exact, "%s %s: %llu > exact %llu", op, what, (unsigned long long)got,
                  (unsigned long long)exact);
    cr_assert_leq((exact - got) * 128, exact, "%s %s: %llu vs exact %llu", op, what,
                  (unsigned long long)got, (unsigned long long)exact);
}

Test(agg, aggregates_match_a_full_scan)
{
    uv_loop_t loop;
    struct store *s;
    char err[256], path[PATH_MAX];
    int rc;
    uint64_t seed = 42;

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    s = store_new(&loop, dir, done_cb, NULL, NULL, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    cr_assert_eq(store_start(s), 0);

    struct store_job *j = store_job_new(STORE_OPEN, 1);
    j->u.open.name = strdup("agg");
    store_enqueue(s, j);
    for (int p = 1; p <= 2; p++) {
        j = store_job_new(STORE_PROCESS, 1);
        j->u.process.id = p;
        j->u.process.rank = p - 1;
        j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
        store_enqueue(s, j);
    }
    const char *ops[] = {"matmul", "conv2d", "allreduce", "layer_norm", "memcpy"};
    for (uint32_t i = 0; i < 5; i++)
        store_enqueue(s, name_job(STORE_OP, i + 1, ops[i], i == 2 ? "comm" : "compute"));
    for (uint32_t i = 1; i <= 3; i++) {
        char dev[16];
        snprintf(dev, sizeof(dev), "gpu:%u", i);
        store_enqueue(s, name_job(STORE_DEVICE, i, dev, NULL));
    }
    /* many groups: the aggregates are merged across commits */
    for (int k = 0; k < 30; k++) {
        store_enqueue(s, batch_job(1000, &seed, 1 + k % 2));
        if (k % 7 == 0) {
            j = store_job_new(STORE_FLUSH, 1);
            j->cookie = &loop;
            j->u.flush.process_id = 1;
            store_enqueue(s, j);
            while (flushes_done < k / 7 + 1)
                uv_run(&loop, UV_RUN_ONCE);
        }
    }
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);

    struct report_params p = {.top = 50, .mem_threshold = 1000000};
    struct report fast, slow;
    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    cr_assert_eq(query_report(path, &p, &fast, err, sizeof(err)), 0, "%s", err);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(
        sqlite3_exec(db, "UPDATE info SET value = 0 WHERE key = 'aggregates'", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    cr_assert_eq(query_report(path, &p, &slow, err, sizeof(err)), 0, "%s", err);

    cr_assert_eq(slow.entries, 30000);
    cr_assert_eq(fast.entries, slow.entries);
    cr_assert_eq(fast.total_ns, slow.total_ns);
    cr_assert_eq(fast.span_ns, slow.span_ns);
    cr_assert_eq(fast.processes, slow.processes);
    cr_assert_eq(fast.peak_bytes, slow.peak_bytes);
    cr_assert_eq(fast.total_bytes, slow.total_bytes);
    cr_assert_eq(fast.n_ops, 5);
    cr_assert_eq(fast.n_ops, slow.n_ops);
    for (size_t i = 0; i < slow.n_ops; i++) {
        const struct report_op *f = &fast.ops[i], *x = &slow.ops[i];
        cr_assert_str_eq(f->op, x->op);
        cr_assert_eq(f->calls, x->calls, "%s", x->op);
        cr_assert_eq(f->total_ns, x->total_ns, "%s", x->op);
        cr_assert_eq(f->min_ns, x->min_ns, "%s", x->op);
        cr_assert_eq(f->max_ns, x->max_ns, "%s", x->op);
        cr_assert_eq(f->mem_bytes, x->mem_bytes, "%s", x->op);
        cr_assert_eq(f->elements, x->elements, "%s", x->op);
        within(f->p50_ns, x->p50_ns, "p50", x->op);
        within(f->p95_ns, x->p95_ns, "p95", x->op);
        within(f->p99_ns, x->p99_ns, "p99", x->op);
    }
    cr_assert_eq(fast.n_slowest, 50);
    cr_assert_eq(fast.n_slowest, slow.n_slowest);
    same_entries(fast.slowest, slow.slowest, slow.n_slowest, "slowest");
    cr_assert_eq(fast.n_hotspots, slow.n_hotspots);
    same_entries(fast.hotspots, slow.hotspots, slow.n_hotspots, "hotspots");
    cr_assert_eq(fast.n_devices, 3);
    for (size_t i = 0; i < slow.n_devices; i++) {
        cr_assert_str_eq(fast.devices[i].device, slow.devices[i].device);
        cr_assert_eq(fast.devices[i].calls, slow.devices[i].calls);
        cr_assert_eq(fast.devices[i].total_ns, slow.devices[i].total_ns);
        cr_assert_eq(fast.devices[i].mem_bytes, slow.devices[i].mem_bytes);
    }
    cr_assert_eq(fast.imbalance.max_ns, slow.imbalance.max_ns);
    cr_assert_str_eq(fast.imbalance.slowest_device, slow.imbalance.slowest_device);
    cr_assert_eq(fast.n_comm, 1);
    cr_assert_eq(fast.comm[0].total_ns, slow.comm[0].total_ns);
    report_free(&fast);
    report_free(&slow);
}

Test(agg, buckets_are_exact_below_256_and_within_1_128_above)
{
    cr_assert_eq(agg_bucket(0), 0);
    cr_assert_eq(agg_bucket(255), 255);
    cr_assert_eq(agg_bucket(256), 256); /* 2^8: e = 8, top bits 128 */
    cr_assert_eq(agg_bucket(257), 256); /* same bucket: width 2 at e = 8 */
    cr_assert_eq(agg_bucket(258), 257);
    cr_assert_eq(agg_bucket(511), 383); /* 256 + 127 */
    cr_assert_eq(agg_bucket(512), 384); /* next power of two */
    cr_assert_lt(agg_bucket(INT64_MAX), 8192, "fits the 13-bit key");
    /* monotonic, and every bucket narrower than 1/128 of its lower end */
    uint64_t lo = 256;
    uint32_t b = agg_bucket(lo);
    for (uint64_t v = 257; v < 1u << 20; v++) {
        uint32_t nb = agg_bucket(v);
        cr_assert_geq(nb, b);
        if (nb != b) {
            cr_assert_eq(nb, b + 1, "no gaps at %llu", (unsigned long long)v);
            cr_assert_leq((v - lo) * 128, lo, "bucket at %llu too wide", (unsigned long long)lo);
            lo = v;
            b = nb;
        }
    }
}

/*
 * Entries at the top of the range (PROTOCOL.md Part 2): every sum saturates
 * at INT64_MAX, in the in-memory deltas, in the stored columns across
 * commits, and in the scan (SQLite's sum() would fail "integer overflow").
 */
Test(agg, sums_saturate_at_int64_max_in_both_paths)
{
    const uint64_t max = (uint64_t)INT64_MAX;
    uv_loop_t loop;
    struct store *s;
    char err[256], path[PATH_MAX];
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    s = store_new(&loop, dir, done_cb, NULL, NULL, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    cr_assert_eq(store_start(s), 0);
    struct store_job *j = store_job_new(STORE_OPEN, 1);
    j->u.open.name = strdup("edge");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, 1);
    j->u.process.id = 1;
    j->u.process.rank = 0;
    j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    store_enqueue(s, name_job(STORE_OP, 1, "matmul", "compute"));
    store_enqueue(s, name_job(STORE_DEVICE, 1, "gpu:0", NULL));
    store_enqueue(s, name_job(STORE_DEVICE, 2, "gpu:1", NULL));
    /* three commits of [max on gpu:0, max on gpu:1, 5 on gpu:1] */
    for (int k = 0; k < 3; k++) {
        j = store_job_new(STORE_BATCH, 1);
        struct proto_batch *b = &j->u.batch.b;
        b->n = 3;
        b->entries = calloc(3, sizeof(*b->entries));
        j->u.batch.process_id = 1;
        j->u.batch.dev_ids = calloc(3, sizeof(uint32_t));
        for (int i = 0; i < 3; i++) {
            b->entries[i].op_id = 1;
            b->entries[i].dur_ns = b->entries[i].mem_bytes = b->entries[i].elements =
                i < 2 ? max : 5;
            j->u.batch.dev_ids[i] = i == 0 ? 1 : 2;
        }
        store_enqueue(s, j);
        j = store_job_new(STORE_FLUSH, 1);
        j->cookie = &loop;
        j->u.flush.process_id = 1;
        store_enqueue(s, j);
        while (flushes_done < k + 1)
            uv_run(&loop, UV_RUN_ONCE);
    }
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);

    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    for (int scan = 0; scan < 2; scan++) {
        struct report r;
        if (scan) {
            sqlite3 *db;
            cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
            cr_assert_eq(sqlite3_exec(db, "UPDATE info SET value = 0 WHERE key = 'aggregates'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
            sqlite3_close(db);
        }
        cr_assert_eq(query_report(path, NULL, &r, err, sizeof(err)), 0, "scan %d: %s", scan, err);
        cr_assert_eq(r.entries, 9);
        cr_assert_eq(r.total_ns, max, "scan %d", scan);
        cr_assert_eq(r.total_bytes, max, "scan %d", scan);
        cr_assert_eq(r.peak_bytes, max, "scan %d", scan);
        cr_assert_eq(r.n_ops, 1);
        cr_assert_eq(r.ops[0].calls, 9);
        cr_assert_eq(r.ops[0].total_ns, max, "scan %d", scan);
        cr_assert_eq(r.ops[0].avg_ns, max / 9, "scan %d", scan);
        cr_assert_eq(r.ops[0].mem_bytes, max, "scan %d", scan);
        cr_assert_eq(r.ops[0].elements, max, "scan %d", scan);
        cr_assert_eq(r.n_devices, 2);
        cr_assert_eq(r.devices[0].total_ns, max, "scan %d", scan);
        cr_assert_eq(r.devices[1].total_ns, max, "scan %d", scan);
        cr_assert_eq(r.devices[1].calls, 6);
        /* imbalance from the device rows: both saturated, so equal */
        cr_assert_eq(r.imbalance.total_ns, max);
        cr_assert_eq(r.imbalance.ideal_ns, max);
        cr_assert_float_eq(r.imbalance.ratio, 0.0, 1e-12);
        report_free(&r);
    }
}

/*
 * The error convention of agg.h: a failed SQLite step comes back as a negative errno (here
 * -EIO: the table its statement writes is gone), never as an SQLite code.
 */
Test(agg, errors_are_negative_errno)
{
    struct proto_entry e = {.op_id = 1, .dur_ns = 5, .start_ns = 1};
    struct agg *a;
    sqlite3 *db;

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, schema_session_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_not_null(a = agg_new(db));
    cr_assert_eq(agg_init_file(a), 0);
    cr_assert_eq(sqlite3_exec(db, "DROP TABLE top_slow", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(agg_entry(a, &e, 0, 1), 0);
    cr_assert_eq(agg_flush(a), -EIO); /* the slowest-entries heap writes top_slow */
    cr_assert_eq(sqlite3_exec(db, "DROP TABLE agg_session", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(agg_flush(a), -EIO);
    agg_free(a);
    sqlite3_close(db);
}

/* ---- the histogram store (agg_hist_chunks) on its own ---------------------- */

/*
 * A session file in the row format written through agg.h alone, as the
 * writer does: entries inserted by hand, agg_entry() for each, agg_flush()
 * before each COMMIT. hist_rec keeps, per op, the durations committed, from
 * which the test computes the percentiles itself.
 */
#define H_OPS 40

struct hist_rec {
    uint64_t *d;
    size_t n, cap;
};

struct hist_file {
    char path[PATH_MAX];
    sqlite3 *db;
    struct agg *a;
    sqlite3_stmt *ins;
    uint64_t seed;
    struct hist_rec rec[H_OPS + 1];
};

static void hist_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;

    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
}

/* Opens (and with create, makes) the file; the aggregates loaded as the writer loads them. */
static void hist_open(struct hist_file *h, bool create)
{
    cr_assert_eq(sqlite3_open(h->path, &h->db), SQLITE_OK);
    hist_exec(h->db, schema_session_sql);
    cr_assert_eq(sqlite3_prepare_v2(h->db,
                                    "INSERT INTO entries (process_id, step, op_id, start_ns,"
                                    " dur_ns, mem_bytes) VALUES (1, 0, ?, ?, ?, ?)",
                                    -1, &h->ins, NULL),
                 SQLITE_OK);
    cr_assert_not_null(h->a = agg_new(h->db));
    if (create) {
        hist_exec(h->db, "BEGIN; INSERT INTO processes (id, rank, started_ns) VALUES (1, 0, 0)");
        for (int i = 1; i <= H_OPS; i++) {
            char sql[128];
            snprintf(sql, sizeof(sql), "INSERT INTO ops VALUES (%d, 'op%02d', 'compute')", i, i);
            hist_exec(h->db, sql);
        }
        cr_assert_eq(agg_init_file(h->a), 0);
        cr_assert_eq(info_schema_set(h->db), 0);
        hist_exec(h->db, "COMMIT");
    } else {
        cr_assert_eq(agg_load(h->a), 0);
    }
}

static void hist_close(struct hist_file *h)
{
    agg_free(h->a);
    sqlite3_finalize(h->ins);
    cr_assert_eq(sqlite3_close(h->db), SQLITE_OK);
}

/*
 * One transaction of n entries of random ops and durations (each op its own
 * range, from a few ns to 2^62, so ops have from one chunk to dozens);
 * committed and recorded, or rolled back (after its aggregates were written).
 */
static void hist_txn(struct hist_file *h, size_t n, bool commit)
{
    hist_exec(h->db, "BEGIN");
    for (size_t i = 0; i < n; i++) {
        h->seed = h->seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = h->seed >> 11;
        uint32_t op = 1 + (uint32_t)(r % H_OPS);
        unsigned bits = 1 + (op * 7 + (unsigned)(r >> 8) % 5) % 62;
        h->seed = h->seed * 6364136223846793005ull + 1442695040888963407ull;
        struct proto_entry e = {.op_id = op,
                                .start_ns = r % 1000000,
                                .dur_ns = (h->seed >> 1) & ((UINT64_C(1) << bits) - 1),
                                .mem_bytes = r % 3 == 0 ? r % 100000 : 0};
        sqlite3_bind_int64(h->ins, 1, op);
        sqlite3_bind_int64(h->ins, 2, (int64_t)e.start_ns);
        sqlite3_bind_int64(h->ins, 3, (int64_t)e.dur_ns);
        sqlite3_bind_int64(h->ins, 4, (int64_t)e.mem_bytes);
        cr_assert_eq(sqlite3_step(h->ins), SQLITE_DONE);
        sqlite3_reset(h->ins);
        cr_assert_eq(agg_entry(h->a, &e, 0, sqlite3_last_insert_rowid(h->db)), 0);
        if (commit) {
            struct hist_rec *rc = &h->rec[op];
            if (rc->n == rc->cap) {
                rc->cap = rc->cap ? rc->cap * 2 : 64;
                cr_assert_not_null(rc->d = realloc(rc->d, rc->cap * sizeof(*rc->d)));
            }
            rc->d[rc->n++] = e.dur_ns;
        }
    }
    cr_assert_eq(agg_flush(h->a), 0);
    if (commit) {
        hist_exec(h->db, "COMMIT");
    } else {
        hist_exec(h->db, "ROLLBACK");
        agg_discard(h->a);
    }
}

static int hist_u64_cmp(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

    return a < b ? -1 : a > b;
}

/*
 * The value the aggregates report for percentile p of sorted[0..n): the
 * nearest rank's duration's bucket, and the smallest duration in it.
 */
static uint64_t hist_expected(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t i = (p * n + 99) / 100 - 1; /* nearest rank ceil(p n / 100), from 0 */
    uint32_t b = agg_bucket(sorted[i]);

    while (i > 0 && agg_bucket(sorted[i - 1]) == b)
        i--;
    return sorted[i];
}

/* The file's report (from its aggregates) against the durations recorded. */
static void hist_check(struct hist_file *h, const char *what)
{
    struct report_params p = {.top = AGG_TOP};
    struct report r;
    char err[256];
    size_t total = 0;

    cr_assert_eq(query_report(h->path, &p, &r, err, sizeof(err)), 0, "%s: %s", what, err);
    cr_assert_eq(r.n_ops, H_OPS, "%s", what);
    for (size_t k = 0; k < r.n_ops; k++) {
        const struct report_op *o = &r.ops[k];
        struct hist_rec *rc = &h->rec[atoi(o->op + 2)];
        qsort(rc->d, rc->n, sizeof(*rc->d), hist_u64_cmp);
        cr_assert_eq(o->calls, rc->n, "%s %s", what, o->op);
        cr_assert_eq(o->min_ns, rc->d[0], "%s %s", what, o->op);
        cr_assert_eq(o->p50_ns, hist_expected(rc->d, rc->n, 50), "%s %s p50", what, o->op);
        cr_assert_eq(o->p95_ns, hist_expected(rc->d, rc->n, 95), "%s %s p95", what, o->op);
        cr_assert_eq(o->p99_ns, hist_expected(rc->d, rc->n, 99), "%s %s p99", what, o->op);
        total += rc->n;
    }
    cr_assert_eq(r.entries, total, "%s", what);
    cr_assert_eq(r.n_slowest, total < AGG_TOP ? total : AGG_TOP, "%s", what);
    {
        /* the kept slowest entries (heap and table): the file's, to the last of AGG_TOP */
        sqlite3 *db;
        sqlite3_stmt *st;
        size_t k = 0;
        cr_assert_eq(sqlite3_open_v2(h->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(db,
                                        "SELECT dur_ns, start_ns FROM entries"
                                        " ORDER BY dur_ns DESC, start_ns, rowid LIMIT 1000",
                                        -1, &st, NULL),
                     SQLITE_OK);
        for (; sqlite3_step(st) == SQLITE_ROW; k++) {
            cr_assert_eq(r.slowest[k].dur_ns, (uint64_t)sqlite3_column_int64(st, 0), "%s [%zu]",
                         what, k);
            cr_assert_eq(r.slowest[k].start_ns, (uint64_t)sqlite3_column_int64(st, 1), "%s", what);
        }
        cr_assert_eq(k, r.n_slowest);
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    report_free(&r);
    /* a page of ops: the same durations pass, the other ops' buckets skipped */
    p.ops_limit = 7;
    p.ops_offset = 5;
    cr_assert_eq(query_report(h->path, &p, &r, err, sizeof(err)), 0, "%s: %s", what, err);
    cr_assert_eq(r.n_ops, 7, "%s", what);
    for (size_t k = 0; k < r.n_ops; k++) {
        const struct report_op *o = &r.ops[k];
        struct hist_rec *rc = &h->rec[atoi(o->op + 2)];
        cr_assert_eq(o->calls, rc->n, "%s %s", what, o->op);
        cr_assert_eq(o->p50_ns, hist_expected(rc->d, rc->n, 50), "%s %s p50", what, o->op);
        cr_assert_eq(o->p99_ns, hist_expected(rc->d, rc->n, 99), "%s %s p99", what, o->op);
    }
    report_free(&r);
}

static long long hist_file_int(struct hist_file *h, const char *sql)
{
    sqlite3_stmt *st;
    long long v = -1;

    cr_assert_eq(sqlite3_prepare_v2(h->db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void hist_free(struct hist_file *h)
{
    for (int i = 0; i <= H_OPS; i++)
        free(h->rec[i].d);
}

Test(agg, histogram_chunks_survive_commits_a_rollback_and_reopens)
{
    static struct hist_file h = {.seed = 7};
    size_t sizes[] = {1, 2, 3000, 17, 500, 1, 4000, 64, 250, 1000};

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(h.path, sizeof(h.path), "%s/h.db", dir);
    hist_open(&h, true);
    for (size_t i = 0; i < 10; i++)
        hist_txn(&h, sizes[i], true);
    hist_check(&h, "commits");
    /* rolled back after its chunks were written: neither the file nor memory keeps them */
    hist_txn(&h, 3000, false);
    hist_txn(&h, 200, true);
    hist_check(&h, "after a rollback");
    cr_assert_eq(hist_file_int(&h, "SELECT value FROM info WHERE key = 'aggregates'"), 1);
    /* reopened: the writer's state comes back from the file */
    hist_close(&h);
    hist_open(&h, false);
    hist_txn(&h, 2000, true);
    hist_txn(&h, 1, true);
    hist_check(&h, "after a reopen");
    hist_txn(&h, 1000, false); /* a rollback right after a reopen */
    hist_close(&h);
    hist_open(&h, false);
    hist_txn(&h, 3, true);
    hist_check(&h, "after a second reopen");
    /* chunks of 64 buckets: far fewer rows than buckets */
    cr_assert_lt(hist_file_int(&h, "SELECT count(*) FROM agg_hist_chunks"), 40 * 120);
    hist_close(&h);
    hist_free(&h);
}

/*
 * A transaction that fails before its flush (an entry the writer could not
 * store): n entries counted, then rolled back without agg_flush. The last
 * one's bucket is still pending in memory (agg_entry counts it at the next
 * entry): the rollback must drop it with the rest.
 */
static void hist_txn_unflushed(struct hist_file *h, size_t n)
{
    hist_exec(h->db, "BEGIN");
    for (size_t i = 0; i < n; i++) {
        /* durations no committed entry has: a leak would show as a bucket of its own */
        struct proto_entry e = {.op_id = 1 + (uint32_t)(i % H_OPS),
                                .start_ns = i,
                                .dur_ns = (UINT64_C(1) << 61) + 12345 + i};
        cr_assert_eq(agg_entry(h->a, &e, 0, 1000000 + (int64_t)i), 0);
    }
    hist_exec(h->db, "ROLLBACK");
    agg_discard(h->a);
}

Test(agg, an_entry_rolled_back_before_the_flush_is_not_counted)
{
    static struct hist_file h = {.seed = 11};

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(h.path, sizeof(h.path), "%s/h.db", dir);
    hist_open(&h, true);
    hist_txn(&h, 500, true);
    hist_txn_unflushed(&h, 1);
    hist_txn(&h, 300, true);
    hist_txn_unflushed(&h, 700);
    hist_txn(&h, 1, true);
    /* op 1's committed durations are below 2^12: a leaked 2^61 would be its p99 */
    hist_check(&h, "after rollbacks before the flush");
    cr_assert_eq(hist_file_int(&h, "SELECT entries FROM agg_session"), 801);
    hist_close(&h);
    hist_open(&h, false);
    hist_check(&h, "reopened");
    hist_close(&h);
    hist_free(&h);
}

/*
 * The real writer (blocks, two files open at most, three sessions written in
 * turn, so that each file is closed while the others are written) reopens
 * its files: the report's percentiles are the ones computed from the file's
 * entries by sorting, and its top lists the ones a scan of the entries gives.
 */
Test(agg, the_writer_reopening_a_blocks_file_keeps_its_aggregates_exact)
{
    uv_loop_t loop;
    struct store *s;
    char err[256], path[PATH_MAX];
    uint64_t seed = 5;
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    flushes_done = 0;
    s = store_new(&loop, dir, done_cb, NULL, NULL, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    store_set_limits(s, 2, 0);
    cr_assert_eq(store_start(s), 0);
    for (int64_t sid = 1; sid <= 3; sid++) {
        struct store_job *j = store_job_new(STORE_OPEN, sid);
        j->u.open.name = strdup(sid == 1 ? "old" : "other");
        store_enqueue(s, j);
        j = store_job_new(STORE_PROCESS, sid);
        j->u.process.id = 1;
        j->u.process.rank = 0;
        j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
        store_enqueue(s, j);
        for (uint32_t i = 0; i < 5; i++) {
            char name[16];
            snprintf(name, sizeof(name), "op%u", i + 1);
            j = name_job(STORE_OP, i + 1, name, "compute");
            j->session_id = sid;
            store_enqueue(s, j);
        }
        for (uint32_t i = 1; i <= 3; i++) {
            char dev[16];
            snprintf(dev, sizeof(dev), "gpu:%u", i);
            j = name_job(STORE_DEVICE, i, dev, NULL);
            j->session_id = sid;
            store_enqueue(s, j);
        }
    }
    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    int want = 0;
    for (int round = 0; round < 3; round++) {
        for (int64_t sid = 1; sid <= 3; sid++) {
            struct store_job *j = batch_job(2000, &seed, 1);
            j->session_id = sid;
            store_enqueue(s, j);
            j = store_job_new(STORE_FLUSH, sid);
            j->cookie = &loop;
            j->u.flush.process_id = 1;
            store_enqueue(s, j);
        }
        want += 3;
        while (flushes_done < want)
            uv_run(&loop, UV_RUN_ONCE);
        if (round > 0)
            continue;
        /*
         * Two files open at most: sessions 2 and 3 written after session 1 close its file.
         * The writer takes sessions in the order they became ready, which need not be
         * 1, 2, 3 above (a session whose earlier jobs were done joins the end), so 2 and 3
         * are written once more, alone.
         */
        for (int64_t sid = 2; sid <= 3; sid++) {
            struct store_job *j = batch_job(10, &seed, 1);
            j->session_id = sid;
            store_enqueue(s, j);
            j = store_job_new(STORE_FLUSH, sid);
            j->cookie = &loop;
            j->u.flush.process_id = 1;
            store_enqueue(s, j);
            want++;
            while (flushes_done < want)
                uv_run(&loop, UV_RUN_ONCE);
        }
    }
    cr_assert_eq(store_failed(s), 0);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);

    struct hist_file h = {.db = NULL};
    snprintf(h.path, sizeof(h.path), "%s", path);
    cr_assert_eq(sqlite3_open_v2(path, &h.db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(hist_file_int(&h, "SELECT value FROM info WHERE key = 'format'"), 2);
    cr_assert_eq(hist_file_int(&h, "SELECT value FROM info WHERE key = 'schema_version'"),
                 INFO_SCHEMA_VERSION);
    cr_assert_eq(hist_file_int(&h, "SELECT count(*) FROM entries"), 6000);
    cr_assert_eq(sqlite3_close(h.db), SQLITE_OK);

    struct report r;
    cr_assert_eq(query_report(path, NULL, &r, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(r.n_ops, 5);
    for (size_t k = 0; k < r.n_ops; k++) {
        static uint64_t d[6000];
        size_t n = 0;
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_open_v2(path, &h.db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(h.db,
                                        "SELECT e.dur_ns FROM entries e JOIN ops o"
                                        " ON o.id = e.op_id WHERE o.name = ? ORDER BY e.dur_ns",
                                        -1, &st, NULL),
                     SQLITE_OK);
        sqlite3_bind_text(st, 1, r.ops[k].op, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW && n < 6000)
            d[n++] = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(h.db);
        cr_assert_eq(r.ops[k].calls, n, "%s", r.ops[k].op);
        cr_assert_eq(r.ops[k].p50_ns, hist_expected(d, n, 50), "%s", r.ops[k].op);
        cr_assert_eq(r.ops[k].p95_ns, hist_expected(d, n, 95), "%s", r.ops[k].op);
        cr_assert_eq(r.ops[k].p99_ns, hist_expected(d, n, 99), "%s", r.ops[k].op);
    }
    report_free(&r);

    /* the top lists, from the top tables, as a scan of the entries gives them */
    struct report_params p = {.top = AGG_TOP, .mem_threshold = 1000000};
    struct report fast, slow;
    cr_assert_eq(query_report(path, &p, &fast, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(sqlite3_open(path, &h.db), SQLITE_OK);
    hist_exec(h.db, "UPDATE info SET value = 0 WHERE key = 'aggregates'");
    sqlite3_close(h.db);
    cr_assert_eq(query_report(path, &p, &slow, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(fast.n_slowest, AGG_TOP);
    cr_assert_eq(fast.n_slowest, slow.n_slowest);
    same_entries(fast.slowest, slow.slowest, slow.n_slowest, "slowest");
    cr_assert_gt(fast.n_hotspots, 0);
    cr_assert_eq(fast.n_hotspots, slow.n_hotspots);
    same_entries(fast.hotspots, slow.hotspots, slow.n_hotspots, "hotspots");
    for (size_t k = 0; k < fast.n_slowest; k++) {
        cr_assert_eq(fast.slowest[k].rank, slow.slowest[k].rank);
        cr_assert_str_eq(fast.slowest[k].device ? fast.slowest[k].device : "-",
                         slow.slowest[k].device ? slow.slowest[k].device : "-");
    }
    report_free(&fast);
    report_free(&slow);
}

/*
 * A full top heap skips an entry below its minimum with one comparison; an
 * entry whose key equals the minimum still competes on its start (earlier
 * ranks first) and rowid. 1500 entries of one duration and one size, each
 * starting earlier than the one before, in one agg_entries() call: the
 * kept ones are the 1000 that start first (starts 1 .. 1000), in both
 * tables. Then, one at a time: an equal key starting at 0 takes the place of
 * the one starting at 1000; a key one below the minimum is not kept.
 */
Test(agg, a_full_heaps_minimum_is_compared_with_ties_broken_by_start)
{
    static struct hist_file h = {.seed = 3};
    static struct proto_entry e[1500];
    static uint32_t dev[1500];
    struct proto_entry one;
    int64_t first = 0;

    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(h.path, sizeof(h.path), "%s/h.db", dir);
    hist_open(&h, true);
    hist_exec(h.db, "BEGIN");
    for (size_t i = 0; i < 1500; i++) {
        e[i] = (struct proto_entry){
            .op_id = 1, .start_ns = 1500 - i, .dur_ns = 7777, .mem_bytes = 4096};
        sqlite3_bind_int64(h.ins, 1, 1);
        sqlite3_bind_int64(h.ins, 2, (int64_t)e[i].start_ns);
        sqlite3_bind_int64(h.ins, 3, 7777);
        sqlite3_bind_int64(h.ins, 4, 4096);
        cr_assert_eq(sqlite3_step(h.ins), SQLITE_DONE);
        sqlite3_reset(h.ins);
        if (i == 0)
            first = sqlite3_last_insert_rowid(h.db);
    }
    cr_assert_eq(agg_entries(h.a, e, 1500, dev, first), 0);
    cr_assert_eq(agg_flush(h.a), 0);
    hist_exec(h.db, "COMMIT");
    cr_assert_eq(hist_file_int(&h, "SELECT count(*) FROM top_slow"), AGG_TOP);
    cr_assert_eq(hist_file_int(&h, "SELECT min(start_ns) FROM top_slow"), 1);
    cr_assert_eq(hist_file_int(&h, "SELECT max(start_ns) FROM top_slow"), 1000);
    cr_assert_eq(hist_file_int(&h, "SELECT count(*) FROM top_mem"), AGG_TOP);
    cr_assert_eq(hist_file_int(&h, "SELECT max(start_ns) FROM top_mem"), 1000);

    hist_exec(h.db, "BEGIN");
    const uint64_t starts[2] = {0, 0}, durs[2] = {7777, 7776}, mems[2] = {4096, 4095};
    for (int k = 0; k < 2; k++) {
        one = (struct proto_entry){
            .op_id = 1, .start_ns = starts[k], .dur_ns = durs[k], .mem_bytes = mems[k]};
        sqlite3_bind_int64(h.ins, 1, 1);
        sqlite3_bind_int64(h.ins, 2, (int64_t)starts[k]);
        sqlite3_bind_int64(h.ins, 3, (int64_t)durs[k]);
        sqlite3_bind_int64(h.ins, 4, (int64_t)mems[k]);
        cr_assert_eq(sqlite3_step(h.ins), SQLITE_DONE);
        sqlite3_reset(h.ins);
        cr_assert_eq(agg_entry(h.a, &one, 0, sqlite3_last_insert_rowid(h.db)), 0);
    }
    cr_assert_eq(agg_flush(h.a), 0);
    hist_exec(h.db, "COMMIT");
    const char *tables[2] = {"top_slow", "top_mem"};
    for (int k = 0; k < 2; k++) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", tables[k]);
        cr_assert_eq(hist_file_int(&h, sql), AGG_TOP, "%s", tables[k]);
        snprintf(sql, sizeof(sql), "SELECT min(start_ns) FROM %s", tables[k]);
        cr_assert_eq(hist_file_int(&h, sql), 0, "%s", tables[k]);
        snprintf(sql, sizeof(sql), "SELECT max(start_ns) FROM %s", tables[k]);
        cr_assert_eq(hist_file_int(&h, sql), 999, "%s", tables[k]);
        snprintf(sql, sizeof(sql), "SELECT min(%s) FROM %s", k == 0 ? "dur_ns" : "mem_bytes",
                 tables[k]);
        cr_assert_eq(hist_file_int(&h, sql), k == 0 ? 7777 : 4096, "%s", tables[k]);
    }
    hist_close(&h);
    hist_free(&h);
}

/*
 * Batches through agg_entries(), which counts each entry at the place in its
 * chunk it noted a few entries earlier: buckets inserted in between (every
 * op here keeps getting new ones) move the others, and every count must
 * still land in its own bucket. The stored chunks are compared bucket by
 * bucket, count and smallest duration, with what the test counts itself.
 */
Test(agg, batches_count_every_bucket_exactly)
{
    static struct hist_file h = {.seed = 5};
    static const size_t txns[] = {5000, 1, 3000, 9, 2000, 700};
    const size_t nb = (size_t)(H_OPS + 1) * (256 + 56 * 128);
    uint64_t *count = calloc(nb, sizeof(*count)), *min = calloc(nb, sizeof(*min));
    struct proto_entry *e = calloc(5000, sizeof(*e));
    uint32_t *dev = calloc(5000, sizeof(*dev));
    size_t want = 0, got = 0;
    sqlite3_stmt *st;

    cr_assert(count != NULL && min != NULL && e != NULL && dev != NULL);
    snprintf(dir, sizeof(dir), "/tmp/tcagg.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(h.path, sizeof(h.path), "%s/h.db", dir);
    hist_open(&h, true);
    for (size_t t = 0; t < sizeof(txns) / sizeof(txns[0]); t++) {
        int64_t first = 0;
        hist_exec(h.db, "BEGIN");
        for (size_t i = 0; i < txns[t]; i++) {
            h.seed = h.seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = h.seed >> 11;
            uint32_t op = 1 + (uint32_t)(r % H_OPS);
            unsigned bits = 1 + (op * 7 + (unsigned)(r >> 8) % 5) % 62;
            h.seed = h.seed * 6364136223846793005ull + 1442695040888963407ull;
            e[i] = (struct proto_entry){.op_id = op,
                                        .start_ns = r % 1000000,
                                        .dur_ns = (h.seed >> 1) & ((UINT64_C(1) << bits) - 1)};
            sqlite3_bind_int64(h.ins, 1, op);
            sqlite3_bind_int64(h.ins, 2, (int64_t)e[i].start_ns);
            sqlite3_bind_int64(h.ins, 3, (int64_t)e[i].dur_ns);
            sqlite3_bind_int64(h.ins, 4, 0);
            cr_assert_eq(sqlite3_step(h.ins), SQLITE_DONE);
            sqlite3_reset(h.ins);
            if (i == 0)
                first = sqlite3_last_insert_rowid(h.db);
            size_t k = (size_t)op * (256 + 56 * 128) + agg_bucket(e[i].dur_ns);
            if (count[k] == 0 || e[i].dur_ns < min[k])
                min[k] = e[i].dur_ns;
            want += count[k]++ == 0;
        }
        /* batches of 1 to 300 entries: the look-ahead crosses no batch's end */
        for (size_t i = 0, n; i < txns[t]; i += n) {
            n = 1 + (size_t)(h.seed >> 40) % 300;
            h.seed = h.seed * 6364136223846793005ull + 1442695040888963407ull;
            if (n > txns[t] - i)
                n = txns[t] - i;
            cr_assert_eq(agg_entries(h.a, e + i, n, dev, first + (int64_t)i), 0);
        }
        cr_assert_eq(agg_flush(h.a), 0);
        hist_exec(h.db, "COMMIT");
    }
    cr_assert_eq(sqlite3_prepare_v2(h.db, "SELECT id, data FROM agg_hist_chunks", -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct agg_hist_bucket b[AGG_CHUNK];
        int64_t id = sqlite3_column_int64(st, 0);
        int n = agg_chunk_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                 (uint32_t)(id & ((1 << AGG_CHUNK_SHIFT) - 1)), b);
        cr_assert_gt(n, 0);
        for (int i = 0; i < n; i++) {
            size_t k = (size_t)(id >> AGG_CHUNK_SHIFT) * (256 + 56 * 128) + b[i].bucket;
            cr_assert_eq(b[i].count, count[k], "op %lld bucket %u", (long long)(id >> 7),
                         b[i].bucket);
            cr_assert_eq(b[i].min_ns, min[k], "op %lld bucket %u", (long long)(id >> 7),
                         b[i].bucket);
            got++;
        }
    }
    sqlite3_finalize(st);
    cr_assert_eq(got, want);
    hist_close(&h);
    hist_free(&h);
    free(count);
    free(min);
    free(e);
    free(dev);
}
