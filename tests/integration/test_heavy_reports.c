/*
 * test_heavy_reports.c — reports that read a lot, on a real tracectld: a small
 * report is not queued behind heavy ones (README "Limits": --heavy-entries),
 * and a page of ops on a session with many op names is the page's rows of the
 * whole sort without holding every op name (issue 10 item 13).
 *
 * Expected figures are computed here, by hand, from the entries sent; never
 * from the code under test.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(heavy_reports, .fini = stop_and_clean, .timeout = 120);

/* ---- the heavy-report lane (README "Limits": --heavy-entries) ------------ */

/* How many threads of process pid are blocked opening a FIFO (no writer yet). */
static int fifo_waiters(pid_t pid)
{
    char path[300], wchan[64];
    struct dirent *e;
    DIR *dir;
    int n = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    cr_assert_not_null(dir = opendir(path));
    while ((e = readdir(dir)) != NULL) {
        snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(wchan, sizeof(wchan), f) != NULL && strstr(wchan, "wait_for_partner") != NULL)
            n++;
        fclose(f);
    }
    closedir(dir);
    return n;
}

/*
 * Sends a report request for session id on a new connection, without reading the reply;
 * filtered (a filter every entry matches: rank 0), as a report that reads the entries.
 */
static int send_report(long long id, bool filtered)
{
    struct proto_request req;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fd = raw_connect(d.sock);

    raw_pack_init(&sb, &pk);
    proto_request_init(&req);
    req.session.id = id;
    req.analysis.n_ranks = filtered;
    req.analysis.ranks[0] = 0;
    proto_pack_request(&pk, PROTO_REPORT, &req);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    return fd;
}

/*
 * Four reports on big sessions, then one on a small session: the small one is
 * answered while the big ones are still being built. The big sessions' files
 * are replaced by FIFOs, so their reports block in open/read until this test
 * opens the FIFO for writing (an open with O_NONBLOCK succeeds only when a
 * report is reading it: that is how the test sees which reports run).
 */
Test(heavy_reports, small_report_is_not_queued_behind_heavy_ones)
{
    char path[4][PATH_MAX + 64];
    long long ids[4], small;
    int prod[5], req[4], wr[4] = {-1, -1, -1, -1}, running = 0;

    harness_daemon_start(&d, "--heavy-entries", "10", "--idle-timeout", "0", NULL);
    for (int i = 0; i < 5; i++) { /* world 2: they stay live, their files stay open */
        char name[32];
        snprintf(name, sizeof(name), i < 4 ? "heavy-%d" : "small", i);
        prod[i] = raw_producer(d.sock, name, 0, 2, NULL, i < 4 ? &ids[i] : &small);
        raw_send_ops(prod[i], 1, "matmul");
        raw_send_batch(prod[i], 1, i < 4 ? 10 : 3, 1000, 10);
        cr_assert_eq(raw_flush(prod[i], 1), i < 4 ? 10 : 3);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/sessions/%lld.db", d.data, ids[i]);
        cr_assert_eq(unlink(path[i]), 0, "%s: %s", path[i], strerror(errno));
        cr_assert_eq(mkfifo(path[i], 0600), 0);
    }
    for (int i = 0; i < 4; i++)
        req[i] = send_report(ids[i], i % 2 == 1); /* filtered reports are heavy too */
    /* wait (on the event: daemon threads blocked opening a FIFO) until two heavy reports run */
    for (int tries = 0; (running = fifo_waiters(d.pid)) < 2 && tries < 1000; tries++)
        usleep(10000);
    cr_assert_eq(running, 2, "%d heavy reports started, not 2", running);

    struct proto_reader r;
    int fd;
    struct proto_request q;
    proto_request_init(&q);
    q.session.id = small;
    q.analysis.n_ranks = 1; /* a filtered report on a small session is not heavy */
    q.analysis.ranks[0] = 0;
    const msgpack_object *o = raw_control(d.sock, PROTO_REPORT, &q, &r, &fd);
    cr_assert_not_null(o, "the small session's report was not answered while heavy ones run");
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    proto_reader_deinit(&r);
    close(fd);
    /* replies came in that order: no heavy report has answered, and only two of them run */
    for (int i = 0; i < 4; i++) {
        struct pollfd p = {.fd = req[i], .events = POLLIN};
        cr_assert_eq(poll(&p, 1, 0), 0, "heavy report %d answered before the small one", i);
    }
    cr_assert_eq(fifo_waiters(d.pid), 2, "more than two heavy reports run at once");
    /* a writer lets each blocked open through (the report then fails on the FIFO) */
    for (int i = 0; i < 4; i++) {
        if ((wr[i] = open(path[i], O_WRONLY | O_NONBLOCK)) >= 0)
            close(wr[i]);
        close(req[i]);
    }
    for (int i = 0; i < 5; i++)
        close(prod[i]);
}

/* ---- a page of ops on a session with many op names (issue 10 item 13) ----- */

/*
 * A session with more op names than SESSION_MAX_OPS (which the daemon never
 * lets a session reach, but a file may hold): made by a real producer (its catalog row, file and
 * process), then given n ops by hand while the daemon is stopped. Op i is
 * named by name(i), has calls(i) entries of the durations dur(i, j) (all
 * under 256 ns, so each is its own histogram bucket and the aggregates'
 * percentiles are exact too), and the aggregates are rebuilt from the
 * entries. Returns the session id, the daemon running again.
 */
struct many_ops {
    unsigned n;
    void (*name)(unsigned i, char *buf, size_t len);
    bool (*comm)(unsigned i);
    unsigned (*calls)(unsigned i);
    uint64_t (*dur)(unsigned i, unsigned j);
};

static void exec_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;

    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
}

/*
 * The histogram chunks of the file's entries, as agg.c stores them (agg.h:
 * id = op_id << 7 | bucket / 64; a little-endian mask of the chunk's buckets,
 * then per bucket LEB128 count and smallest duration minus the bucket's
 * lowest). Every duration is under 256 ns: its own bucket, offset 0.
 */
static void many_ops_chunks(sqlite3 *db)
{
    sqlite3_stmt *sel, *ins;
    uint8_t blob[8 + 64 * 11];
    uint64_t count[64] = {0}, mask = 0;
    long long cur = -1;
    int rc;

    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT op_id << 7 | dur_ns / 64, dur_ns % 64, count(*)"
                                    " FROM entries GROUP BY op_id, dur_ns ORDER BY 1, 2",
                                    -1, &sel, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(
        sqlite3_prepare_v2(db, "INSERT INTO agg_hist_chunks VALUES (?, ?)", -1, &ins, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    do {
        rc = sqlite3_step(sel);
        long long id = rc == SQLITE_ROW ? sqlite3_column_int64(sel, 0) : -2;
        if (id != cur && cur >= 0) {
            size_t len = 0;
            for (int j = 0; j < 8; j++)
                blob[len++] = (uint8_t)(mask >> (8 * j));
            for (int b = 0; b < 64; b++) {
                if (!(mask >> b & 1))
                    continue;
                for (uint64_t v = count[b];; v >>= 7) {
                    blob[len++] = (uint8_t)(v >= 0x80 ? (v & 0x7f) | 0x80 : v);
                    if (v < 0x80)
                        break;
                }
                blob[len++] = 0; /* smallest duration minus the bucket's lowest */
            }
            sqlite3_bind_int64(ins, 1, cur);
            sqlite3_bind_blob(ins, 2, blob, (int)len, SQLITE_STATIC);
            cr_assert_eq(sqlite3_step(ins), SQLITE_DONE, "%s", sqlite3_errmsg(db));
            sqlite3_reset(ins);
            memset(count, 0, sizeof(count));
            mask = 0;
        }
        if (rc == SQLITE_ROW) {
            int b = sqlite3_column_int(sel, 1);
            cr_assert_lt(id & 127, 4, "every duration under 256 ns");
            count[b] = (uint64_t)sqlite3_column_int64(sel, 2);
            mask |= UINT64_C(1) << b;
            cur = id;
        }
    } while (rc == SQLITE_ROW);
    cr_assert_eq(rc, SQLITE_DONE, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
}

static long long many_ops_session(const struct many_ops *m)
{
    char path[PATH_MAX + 32], name[1100];
    sqlite3_stmt *op, *en;
    sqlite3 *db;
    long long id;

    /* The entries are written below as rows of the table `entries`: the row format's layout. */
    harness_daemon_start(&d, "--storage-format", "rows", NULL);
    int fd = raw_producer(d.sock, "old", 0, 1, NULL, &id);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 10);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "PRAGMA synchronous = OFF; BEGIN");
    cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO ops (id, name, category) VALUES (?, ?, ?)", -1,
                                    &op, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO entries (process_id, step, op_id, start_ns, "
                                    "dur_ns, mem_bytes) VALUES ((SELECT min(id) FROM processes), "
                                    "0, ?, ?, ?, 0)",
                                    -1, &en, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    for (unsigned i = 0; i < m->n; i++) {
        m->name(i, name, sizeof(name));
        sqlite3_bind_int64(op, 1, i + 1);
        sqlite3_bind_text(op, 2, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(op, 3, m->comm(i) ? "comm" : "compute", -1, SQLITE_STATIC);
        cr_assert_eq(sqlite3_step(op), SQLITE_DONE, "%s", sqlite3_errmsg(db));
        sqlite3_reset(op);
        for (unsigned j = 0; j < m->calls(i); j++) {
            sqlite3_bind_int64(en, 1, i + 1);
            sqlite3_bind_int64(en, 2, (long long)i * 1000 + j * 100);
            sqlite3_bind_int64(en, 3, (long long)m->dur(i, j));
            cr_assert_eq(sqlite3_step(en), SQLITE_DONE, "%s", sqlite3_errmsg(db));
            sqlite3_reset(en);
        }
    }
    sqlite3_finalize(op);
    sqlite3_finalize(en);
    /* the aggregates, rebuilt from the entries */
    exec_sql(db, "DELETE FROM agg_ops; DELETE FROM agg_hist_chunks;"
                 "INSERT INTO agg_ops SELECT op_id, count(*), sum(dur_ns), min(dur_ns), "
                 "max(dur_ns), 0, 0 FROM entries GROUP BY op_id;"
                 "INSERT OR REPLACE INTO agg_session SELECT 1, count(*), sum(dur_ns), "
                 "min(start_ns), max(start_ns + dur_ns), 0, 0 FROM entries;"
                 "UPDATE info SET value = 1 WHERE key = 'aggregates'");
    many_ops_chunks(db);
    exec_sql(db, "COMMIT");
    cr_assert_eq(sqlite3_close(db), SQLITE_OK);
    harness_daemon_restart(&d, NULL);
    return id;
}

/* Marks the file's aggregates inexact: reports scan the entries from then on. */
static void drop_aggregates(long long id)
{
    char path[PATH_MAX + 32];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    exec_sql(db, "UPDATE info SET value = 0 WHERE key = 'aggregates'");
    sqlite3_close(db);
}

/* The small session's ops: names a permutation of op ids, totals tied in groups of 44. */
enum { PAGED_OPS = 3000 };

static void paged_name(unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "op%05u", (i * 7919u) % PAGED_OPS);
}

static bool paged_comm(unsigned i)
{
    return i % 5 == 0;
}

static unsigned paged_calls(unsigned i)
{
    return 1 + i % 4;
}

static uint64_t paged_dur(unsigned i, unsigned j)
{
    return 1 + (i % 11) * (3 - j % 4 + 1) + j; /* not ascending in j */
}

/* The expected ops rows, computed here: sums, nearest ranks, then the report order by qsort. */
struct xop {
    char name[16];
    bool comm;
    uint64_t calls, total, p[3];
};

static int xop_cmp(const void *pa, const void *pb)
{
    const struct xop *a = pa, *b = pb;

    if (a->total != b->total)
        return a->total > b->total ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int u64_cmp(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

    return a < b ? -1 : a > b;
}

static uint64_t paged_expected(struct xop *x)
{
    static const unsigned pct[3] = {50, 95, 99};
    uint64_t all = 0;

    for (unsigned i = 0; i < PAGED_OPS; i++) {
        uint64_t dur[4];
        paged_name(i, x[i].name, sizeof(x[i].name));
        x[i].comm = paged_comm(i);
        x[i].calls = paged_calls(i);
        x[i].total = 0;
        for (unsigned j = 0; j < x[i].calls; j++)
            x[i].total += dur[j] = paged_dur(i, j);
        qsort(dur, x[i].calls, sizeof(dur[0]), u64_cmp);
        for (int k = 0; k < 3; k++) { /* nearest rank: ceil(p/100 * calls) */
            uint64_t rank = (pct[k] * x[i].calls + 99) / 100;
            x[i].p[k] = dur[rank - 1];
        }
        all += x[i].total;
    }
    qsort(x, PAGED_OPS, sizeof(*x), xop_cmp);
    return all;
}

/*
 * The reports of the paging tests ask for a filter every entry matches (steps 0 ..
 * INT64_MAX) when this is set: a filtered report pages the scan of the matching entries
 * (PROTOCOL.md Part 3, "report filters"), with the same rows and the same bounds.
 */
static bool page_filtered;

static void page_filter(struct proto_request *req)
{
    req->analysis.steps = page_filtered;
    req->analysis.step_min = 0;
    req->analysis.step_max = page_filtered ? INT64_MAX : 0;
}

/* One report (limit 0: not paged) checked row by row against x. */
static void check_page(long long id, uint32_t limit, uint32_t offset, double ratio,
                       const struct xop *x, uint64_t all, const char *how)
{
    static const char *const pk[3] = {"p50_ns", "p95_ns", "p99_ns"};
    struct proto_request req;
    struct proto_reader r;
    int fd;
    size_t from = offset < PAGED_OPS ? offset : PAGED_OPS;
    size_t want = limit == 0 ? PAGED_OPS : PAGED_OPS - from < limit ? PAGED_OPS - from : limit;

    proto_request_init(&req);
    req.session.id = id;
    req.ops_limit = limit;
    req.ops_offset = offset;
    req.comm_min_ratio = ratio;
    page_filter(&req);
    const msgpack_object *o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: the report failed", how);
    const msgpack_object *rep = &o->via.array.ptr[1];
    cr_assert_eq(obj_get(rep, "filter") != NULL, page_filtered, "%s: filter key", how);
    if (limit > 0)
        cr_assert_eq(obj_u64(obj_get(rep, "ops_total")), PAGED_OPS, "%s", how);
    else
        cr_assert_null(obj_get(rep, "ops_total"), "%s", how);
    const msgpack_object *ops = obj_get(rep, "ops");
    cr_assert_eq(ops->via.array.size, want, "%s: %u rows", how, ops->via.array.size);
    for (size_t i = 0; i < want; i++) {
        const msgpack_object *row = &ops->via.array.ptr[i];
        const struct xop *e = &x[from + i];
        cr_assert(obj_str_eq(obj_get(row, "op"), e->name), "%s: row %zu is not %s", how, from + i,
                  e->name);
        cr_assert(obj_str_eq(obj_get(row, "category"), e->comm ? "comm" : "compute"));
        cr_assert_eq(obj_u64(obj_get(row, "calls")), e->calls, "%s: %s", how, e->name);
        cr_assert_eq(obj_u64(obj_get(row, "total_ns")), e->total, "%s: %s", how, e->name);
        for (int k = 0; k < 3; k++)
            cr_assert_eq(obj_u64(obj_get(row, pk[k])), e->p[k], "%s: %s %s", how, e->name, pk[k]);
        cr_assert_float_eq(obj_f64(obj_get(row, "share")), (double)e->total / (double)all, 1e-12);
    }
    /* comm: the first `limit` (or all) comm ops in report order whose share is at least ratio */
    const msgpack_object *comm = obj_get(rep, "comm");
    size_t k = 0;
    for (size_t i = 0; i < PAGED_OPS && (limit == 0 || k < limit); i++) {
        if (!x[i].comm || (double)x[i].total / (double)all < ratio)
            continue;
        cr_assert_lt(k, comm->via.array.size, "%s: comm has %u rows", how, comm->via.array.size);
        const msgpack_object *row = &comm->via.array.ptr[k++];
        cr_assert(obj_str_eq(obj_get(row, "op"), x[i].name), "%s: comm row %zu is not %s", how,
                  k - 1, x[i].name);
        cr_assert_eq(obj_u64(obj_get(row, "calls")), x[i].calls);
        cr_assert_eq(obj_u64(obj_get(row, "total_ns")), x[i].total);
    }
    cr_assert_eq(comm->via.array.size, k, "%s: comm rows", how);
    proto_reader_deinit(&r);
    close(fd);
}

Test(heavy_reports, a_page_of_ops_is_the_pages_rows_of_the_whole_sort, .timeout = 120)
{
    static struct xop x[PAGED_OPS];
    const struct many_ops m = {PAGED_OPS, paged_name, paged_comm, paged_calls, paged_dur};
    uint64_t all = paged_expected(x);
    long long id = many_ops_session(&m);

    for (int pass = 0; pass < 3; pass++) {
        const char *how = pass == 0 ? "aggregates" : pass == 1 ? "filtered" : "scan";
        page_filtered = pass == 1;
        if (pass == 2)
            drop_aggregates(id);
        check_page(id, 0, 0, 0.0, x, all, how); /* v1: every op */
        check_page(id, 7, 0, 0.0, x, all, how);
        check_page(id, 50, 33, 0.0, x, all, how); /* starts inside a group of equal totals */
        check_page(id, 1000, 1000, 0.0, x, all, how);
        check_page(id, 100, PAGED_OPS - 40, 0.0, x, all, how); /* the last page is short */
        check_page(id, 10, PAGED_OPS + 5, 0.0, x, all, how);   /* past the end: empty */
        check_page(id, 20, 0, 0.0004, x, all, how);            /* comm cut by share */
        check_page(id, 1, 2999, 0.0, x, all, how);
        /* past 10,000 rows (offset + limit) aggregates are sorted by rank of name */
        check_page(id, 20000, 0, 0.0, x, all, how);
        check_page(id, 10000, 2990, 0.0, x, all, how);
        check_page(id, 9990, 1500, 0.0004, x, all, how);
    }
}

/* The RSS test's ops: 200,000 names of 1,000 bytes, one entry each. */
enum { BIG_OPS = 200000 };

/* 100 bytes; $TRACECTL_TEST_NAME_BYTES (up to 1,000) for the README's measurement. */
static size_t big_name_len(void)
{
    const char *e = getenv("TRACECTL_TEST_NAME_BYTES");
    long v = e != NULL ? atol(e) : 0;

    return v >= 16 && v <= 1000 ? (size_t)v : 100;
}

static void big_name(unsigned i, char *buf, size_t len)
{
    int n = snprintf(buf, len, "op%06u-", i); /* ascending: the name index is written in order */

    size_t want = big_name_len();

    (void)len; /* 1,100 bytes */
    memset(buf + n, 'x', want - (size_t)n);
    buf[want] = '\0';
}

static unsigned big_calls(unsigned i)
{
    (void)i;
    return 1;
}

static uint64_t big_dur(unsigned i, unsigned j)
{
    (void)j;
    return 1 + i % 250;
}

/* Peak RSS growth (KiB) of the daemon over one paged report. */
static long page_peak_kib(long long id, uint32_t limit, uint32_t offset, const char *how)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char path[64];
    int fd;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)d.pid);
    cr_assert_not_null(f = fopen(path, "w"), "%s: %s", path, strerror(errno));
    fputs("5", f); /* resets VmHWM to the current RSS */
    cr_assert_eq(fclose(f), 0);
    long base = harness_proc_kib(d.pid, "VmHWM");
    proto_request_init(&req);
    req.session.id = id;
    req.ops_limit = limit;
    req.ops_offset = offset;
    page_filter(&req);
    fd = raw_connect(d.sock);
    cr_assert_geq(fd, 0);
    raw_pack_init(&sb, &pk);
    proto_pack_request(&pk, PROTO_REPORT, &req);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    double t0 = harness_now_s();
    struct pollfd p = {.fd = fd, .events = POLLIN}; /* a far page sorts every op: give it time */
    cr_assert_eq(poll(&p, 1, 200000), 1, "%s: no reply", how);
    proto_reader_init(&r, 64 << 20);
    cr_assert_eq(raw_recv_object(fd, &r, &o), 0, "%s: no reply", how);
    double t = harness_now_s() - t0;
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: the report failed", how);
    const msgpack_object *rep = &o->via.array.ptr[1];
    cr_assert_eq(obj_u64(obj_get(rep, "ops_total")), BIG_OPS);
    cr_assert_eq(obj_get(rep, "ops")->via.array.size, limit);
    proto_reader_deinit(&r);
    close(fd);
    long peak = harness_proc_kib(d.pid, "VmHWM") - base;
    cr_log_info("%s: ops_limit %u ops_offset %u: %.1f s, the daemon's peak RSS grew %ld KiB (from "
                "%ld KiB)",
                how, limit, offset, t, peak, base);
    return peak;
}

/*
 * 200,000 op names of 100 bytes: a page of 100 ops holds the page, not every
 * name (the daemon read them all to sort them). The bound is not scaled for
 * AddressSanitizer: what remains is SQLite's caches, which it does not
 * instrument.
 */
Test(heavy_reports, a_page_of_ops_does_not_hold_every_op_name, .timeout = 600)
{
    const struct many_ops m = {BIG_OPS, big_name, paged_comm, big_calls, big_dur};
    const long bound = 48 * 1024;

    harness_asan_small_quarantine();
    long long id = many_ops_session(&m);
    for (int pass = 0; pass < 3; pass++) {
        const char *how = pass == 0 ? "aggregates" : pass == 1 ? "filtered" : "scan";
        page_filtered = pass == 1;
        if (pass == 2)
            drop_aggregates(id);
        cr_assert_lt(page_peak_kib(id, 100, 0, how), bound, "%s: the first page", how);
        cr_assert_lt(page_peak_kib(id, 100, BIG_OPS - 100, how), bound, "%s: the last page", how);
    }
}
