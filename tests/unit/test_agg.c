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
    cr_assert_eq(agg_entry(a, &e, 0, 1), -EIO); /* the slowest-entries heap writes top_slow */
    cr_assert_eq(sqlite3_exec(db, "DROP TABLE agg_session", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(agg_flush(a), -EIO);
    agg_free(a);
    sqlite3_close(db);
}
