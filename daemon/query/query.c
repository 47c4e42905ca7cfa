/*
 * query — the query engine: computes a struct report (report.h) from one
 * session file.
 *
 * query_report() runs on a libuv worker thread (control.c queues it), never
 * on the loop thread, while the storage writer may be appending to the same
 * file. It opens its own read-only connection, reads every section inside
 * one read transaction, so that all of them see the same WAL snapshot (the
 * per-op call counts and the durations read for the percentiles must agree),
 * and closes it before returning. The SQL lives in schema/report_*.sql, one
 * statement per file; each statement is prepared, stepped and finalized once
 * per report. The post-processing (percentile ranks, order, shares,
 * imbalance) is in analysis.c. A page of ops (ops_limit) is sorted by SQLite
 * instead, and only its rows are read: see "a page of ops".
 *
 * Filters (the request's ranks, steps, device, category: an extension)
 * restrict every section. A filtered report cannot use the aggregates, which
 * count every entry: it runs the statements a file without aggregates runs,
 * the same files, over two temporary views that shadow main.entries and
 * main.processes for the report's connection and hold only the matching
 * rows (see "filters"). So the filtered numbers come from the same SQL as
 * the scan path, exact percentiles included, and a report without filters
 * runs exactly what it ran before.
 *
 * Errors are not logged here: the message (with sqlite3_errmsg) goes into
 * the caller's errbuf, and the caller reports it once.
 */
#include "agg.h"
#include "analysis.h"
#include "info.h"
#include "mpi_report.h"
#include "query.h"
#include "ranks.h"
#include "ranks_query.h"
#include "schema.h"
#include "util.h"
#include "vtab.h"
#include "sqlutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

/* A reader waits this long for a lock (e.g. while the WAL is recovered). */
#define QUERY_BUSY_MS 5000
/*
 * SQLite virtual-machine steps between two calls of the progress handler:
 * about a millisecond of a scan, so a cancelled report stops that soon, and
 * the unit in which a report's cost is counted (users.h).
 */
#define QUERY_STEPS 10000

struct query {
    sqlite3 *db;
    const struct report_params *p;
    struct report *r;
    char *errbuf;
    size_t errlen;
    /* The section being read: capacity of its array; for entry lists, the list. */
    size_t cap;
    struct report_entry **list;
    size_t *n_list;
    /* The durations pass: the op being read, its id, how many of its calls were seen. */
    size_t op_index, op_seen;
    /* The file's aggregates are exact: read them instead of scanning entries (agg.h). */
    bool agg;
    /* The durations pass: what each run of equal durations (or histogram bucket) goes to. */
    int (*duration)(struct query *q, int64_t op_id, uint64_t dur, uint64_t count);
    int64_t op_id;
    /* A page of ops (ops_limit): each row's op id and calls seen, by id. */
    struct query_page_op *page;
    size_t page_cap;
};

struct query_page_op {
    int64_t id;
    size_t index; /* in r->ops */
    uint64_t seen;
};

static void query_msg(struct query *q, const char *what, const char *detail)
{
    if (q->errlen > 0)
        snprintf(q->errbuf, q->errlen, "report: %s: %s", what, detail);
}

/* Records the message of a failed SQLite call and maps its code (sql_errno). */
static int query_fail(struct query *q, int rc, const char *what)
{
    query_msg(q, what, q->db != NULL ? sqlite3_errmsg(q->db) : sqlite3_errstr(rc));
    return sql_errno(rc);
}

static int query_oom(struct query *q, const char *what)
{
    query_msg(q, what, "out of memory");
    return -ENOMEM;
}

static int query_prepare(struct query *q, const char *sql, sqlite3_stmt **st, const char *what)
{
    int rc = sqlite3_prepare_v2(q->db, sql, -1, st, NULL);

    return rc == SQLITE_OK ? 0 : query_fail(q, rc, what);
}

static int query_exec(struct query *q, const char *sql)
{
    int rc = sqlite3_exec(q->db, sql, NULL, NULL, NULL);

    return rc == SQLITE_OK ? 0 : query_fail(q, rc, sql);
}

/* Integers are stored as int64 casts of the protocol's uint64 values. */
static uint64_t query_u64(sqlite3_stmt *st, int col)
{
    return (uint64_t)sqlite3_column_int64(st, col);
}

/*
 * Copies a text column into *out (NULL for SQL NULL). Returns 0 or -ENOMEM.
 */
static int query_text(sqlite3_stmt *st, int col, char **out)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    size_t len = (size_t)sqlite3_column_bytes(st, col);

    *out = NULL;
    if (s == NULL)
        return sqlite3_column_type(st, col) == SQLITE_NULL ? 0 : -ENOMEM;
    *out = malloc(len + 1);
    if (*out == NULL)
        return -ENOMEM;
    memcpy(*out, s, len);
    (*out)[len] = '\0';
    return 0;
}

/*
 * True when data holds exactly one msgpack object: report_pack() writes the
 * stored bytes straight into the reply, so a damaged blob must not reach it
 * (it would corrupt the framing of the whole stream). *nomem tells an
 * allocation failure from bad bytes.
 */
static bool query_blob_valid(const void *data, size_t len, bool *nomem)
{
    msgpack_unpacked u;
    size_t off = 0;
    msgpack_unpack_return ret;

    msgpack_unpacked_init(&u);
    ret = msgpack_unpack_next(&u, data, len, &off);
    msgpack_unpacked_destroy(&u);
    *nomem = ret == MSGPACK_UNPACK_NOMEM_ERROR;
    return ret == MSGPACK_UNPACK_SUCCESS && off == len;
}

/*
 * Copies a shape blob into *out: nil for SQL NULL, for an empty blob and for
 * bytes that are not exactly one msgpack object. Returns 0 or -ENOMEM.
 */
static int query_blob(sqlite3_stmt *st, int col, struct report_blob *out)
{
    const void *data = sqlite3_column_blob(st, col);
    size_t len = (size_t)sqlite3_column_bytes(st, col);
    bool nomem;

    out->data = NULL;
    out->len = 0;
    if (data == NULL || len == 0)
        return 0;
    if (!query_blob_valid(data, len, &nomem))
        return nomem ? -ENOMEM : 0;
    out->data = malloc(len);
    if (out->data == NULL)
        return -ENOMEM;
    memcpy(out->data, data, len);
    out->len = len;
    return 0;
}

/* Steps st to its end, calling row(q, st) for each row. */
static int query_rows(struct query *q, sqlite3_stmt *st, const char *what,
                      int (*row)(struct query *, sqlite3_stmt *))
{
    int rc, err;

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        err = row(q, st);
        if (err < 0)
            return err;
    }
    return rc == SQLITE_DONE ? 0 : query_fail(q, rc, what);
}

/* Prepares sql, binds ?1 = a and ?2 = b when the statement has them, and reads every row. */
static int query_run(struct query *q, const char *sql, const char *what, int64_t a, int64_t b,
                     int (*row)(struct query *, sqlite3_stmt *))
{
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK, n, err;

    err = query_prepare(q, sql, &st, what);
    if (err < 0)
        return err;
    n = sqlite3_bind_parameter_count(st);
    if (n >= 1)
        rc = sqlite3_bind_int64(st, 1, a);
    if (rc == SQLITE_OK && n >= 2)
        rc = sqlite3_bind_int64(st, 2, b);
    err = rc == SQLITE_OK ? query_rows(q, st, what, row) : query_fail(q, rc, what);
    sqlite3_finalize(st);
    return err;
}

/* ---- session header and memory totals ----------------------------------- */

static int query_totals_row(struct query *q, sqlite3_stmt *st)
{
    struct report *r = q->r;
    uint64_t end = query_u64(st, 4), begin = query_u64(st, 5);

    r->processes = query_u64(st, 0);
    r->dropped = query_u64(st, 1);
    r->entries = query_u64(st, 2);
    r->total_ns = query_u64(st, 3);
    /* end and begin are NULL (read as 0) without entries. */
    r->span_ns = end > begin ? end - begin : 0;
    r->peak_bytes = query_u64(st, 6);
    r->total_bytes = query_u64(st, 7);
    return 0;
}

static int query_totals(struct query *q)
{
    return query_run(q, q->agg ? schema_report_totals_agg_sql : schema_report_totals_sql, "totals",
                     0, 0, query_totals_row);
}

/* ---- ops ----------------------------------------------------------------- */

static int query_ops_row(struct query *q, sqlite3_stmt *st)
{
    struct report *r = q->r;
    struct report_op *op = util_grow(r->ops, &q->cap, r->n_ops, sizeof(*op));

    if (op == NULL)
        return query_oom(q, "ops");
    r->ops = op;
    op = &r->ops[r->n_ops++];
    memset(op, 0, sizeof(*op));
    op->calls = query_u64(st, 3);
    op->total_ns = query_u64(st, 4);
    op->min_ns = query_u64(st, 5);
    op->max_ns = query_u64(st, 6);
    op->mem_bytes = query_u64(st, 7);
    op->elements = query_u64(st, 8);
    if (query_text(st, 1, &op->op) < 0 || query_text(st, 2, &op->category) < 0)
        return query_oom(q, "ops");
    return 0;
}

/* A run of `count` equal durations (or one histogram bucket) covers ranks seen+1 .. seen+count. */
static void query_percentiles(struct report_op *op, uint64_t seen, uint64_t dur, uint64_t count)
{
    static const unsigned pct[3] = {50, 95, 99};
    uint64_t *out[3] = {&op->p50_ns, &op->p95_ns, &op->p99_ns};

    for (size_t i = 0; i < 3; i++) {
        size_t rank = analysis_percentile_rank(op->calls, pct[i]);
        if (rank > seen && rank <= seen + count)
            *out[i] = dur;
    }
}

static int query_inconsistent(struct query *q)
{
    query_msg(q, "durations", "entries do not match the per-op counts");
    return -EIO;
}

/*
 * One duration of the durations pass. Its rows come grouped by op id in the
 * order of the ops rows (both ordered by op id, both joined with ops, both in
 * one snapshot) and ascending within an op, so the value at a percentile's
 * nearest rank is the percentile: no op's durations are ever held in memory.
 */
static int query_duration(struct query *q, int64_t id, uint64_t dur, uint64_t count)
{
    struct report *r = q->r;
    struct report_op *op;

    if (count == 0)
        return query_inconsistent(q);
    if (q->op_seen > 0 && q->op_seen == r->ops[q->op_index].calls) {
        if (id == q->op_id)
            return query_inconsistent(q);
        q->op_index++;
        q->op_seen = 0;
    } else if (q->op_seen > 0 && id != q->op_id) {
        return query_inconsistent(q);
    }
    if (q->op_index >= r->n_ops)
        return query_inconsistent(q);
    q->op_id = id;
    op = &r->ops[q->op_index];
    query_percentiles(op, q->op_seen, dur, count);
    q->op_seen += count;
    if (q->op_seen > op->calls)
        return query_inconsistent(q);
    return 0;
}

/* A row of report_durations*.sql: op_id, dur_ns, count. */
static int query_durations_row(struct query *q, sqlite3_stmt *st)
{
    return q->duration(q, sqlite3_column_int64(st, 0), query_u64(st, 1), query_u64(st, 2));
}

/* A row of report_durations_agg.sql: op_id, chunk, data: each bucket of the chunk in order. */
static int query_chunk_row(struct query *q, sqlite3_stmt *st)
{
    struct agg_hist_bucket b[AGG_CHUNK];
    int64_t id = sqlite3_column_int64(st, 0);
    int n = agg_chunk_decode(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                             (uint32_t)sqlite3_column_int64(st, 1), b);
    int err = 0;

    if (n < 0) {
        query_msg(q, "durations", "a histogram chunk is malformed");
        return -EIO;
    }
    for (int i = 0; err == 0 && i < n; i++)
        err = q->duration(q, id, b[i].min_ns, b[i].count);
    return err;
}

/*
 * The durations pass: every op's durations (or histogram buckets) ascending
 * within the op, ops by id, a run of equal values at a time to fn.
 */
static int query_durations(struct query *q, int (*fn)(struct query *, int64_t, uint64_t, uint64_t))
{
    q->duration = fn;
    if (!q->agg)
        return query_run(q, schema_report_durations_sql, "durations", 0, 0, query_durations_row);
    return query_run(q, schema_report_durations_agg_sql, "durations", 0, 0, query_chunk_row);
}

/* avg_ns and share of every row of r->ops. */
static void query_ops_finish(struct report *r)
{
    for (size_t i = 0; i < r->n_ops; i++) {
        /* A saturated total would put the floor below min_ns: never below it. */
        r->ops[i].avg_ns = r->ops[i].total_ns / r->ops[i].calls;
        if (r->ops[i].avg_ns < r->ops[i].min_ns)
            r->ops[i].avg_ns = r->ops[i].min_ns;
        r->ops[i].share = analysis_share(r->ops[i].total_ns, r->total_ns);
    }
}

static int query_ops_page(struct query *q);
static bool query_filtered(const struct report_params *p);

/*
 * dropped_calls/_ns and counted_calls/_ns of the ops rows: what producers
 * said they dropped of each op, and counted without entries
 * (process_op_drops, PROTOCOL.md Part 3), summed over processes by op name.
 * Unfiltered reports only (the drops are per process and op, not per step
 * or device); a file without the table has none.
 */
static int query_ops_dropped(struct query *q)
{
    struct report *r = q->r;
    sqlite3_stmt *st = NULL;
    int rc;

    if (r->n_ops == 0 || query_filtered(q->p) ||
        sqlite3_prepare_v2(
            q->db,
            "SELECT o.name, sum(d.calls - d.counted), sum(d.total_ns - d.counted_ns),"
            " sum(d.counted), sum(d.counted_ns) FROM process_op_drops d"
            " JOIN ops o ON o.id = d.op_id GROUP BY o.name",
            -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return 0;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        for (size_t i = 0; name != NULL && i < r->n_ops; i++) {
            if (strcmp(r->ops[i].op, name) == 0) {
                r->ops[i].dropped_calls = query_u64(st, 1);
                r->ops[i].dropped_ns = query_u64(st, 2);
                r->ops[i].counted_calls = query_u64(st, 3);
                r->ops[i].counted_ns = query_u64(st, 4);
                break;
            }
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

static int query_ops(struct query *q)
{
    struct report *r = q->r;
    int err;

    if (q->p->ops_limit > 0)
        return query_ops_page(q);
    q->cap = 0;
    err = query_run(q, q->agg ? schema_report_ops_agg_sql : schema_report_ops_sql, "ops", 0, 0,
                    query_ops_row);
    if (err < 0)
        return err;
    q->op_index = 0;
    q->op_seen = 0;
    err = query_durations(q, query_duration);
    if (err < 0)
        return err;
    if (r->n_ops > 0 && (q->op_index != r->n_ops - 1 || q->op_seen != r->ops[q->op_index].calls))
        return query_inconsistent(q);
    query_ops_finish(r);
    analysis_sort_ops(r->ops, r->n_ops);
    return query_ops_dropped(q);
}

/* ---- slowest entries and memory hotspots --------------------------------- */

static int query_entry_row(struct query *q, sqlite3_stmt *st)
{
    struct report_entry *e = util_grow(*q->list, &q->cap, *q->n_list, sizeof(*e));

    if (e == NULL)
        return query_oom(q, "entries");
    *q->list = e;
    e = &e[(*q->n_list)++];
    memset(e, 0, sizeof(*e));
    e->rank = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
    e->step = query_u64(st, 3);
    e->start_ns = query_u64(st, 4);
    e->dur_ns = query_u64(st, 5);
    e->mem_bytes = query_u64(st, 6);
    if (query_text(st, 0, &e->op) < 0 || query_text(st, 2, &e->device) < 0 ||
        query_blob(st, 7, &e->out_shape) < 0 || query_blob(st, 8, &e->in_shapes) < 0)
        return query_oom(q, "entries");
    return 0;
}

static int query_slowest(struct query *q)
{
    q->cap = 0;
    q->list = &q->r->slowest;
    q->n_list = &q->r->n_slowest;
    if (!q->agg || q->p->top > AGG_TOP)
        return query_run(q, schema_report_slowest_sql, "slowest", q->p->top, 0, query_entry_row);
    return query_run(q, schema_report_slowest_agg_sql, "slowest", q->p->top, 0, query_entry_row);
}

static int query_hotspots(struct query *q)
{
    /* Stored values are at most INT64_MAX, so a larger threshold keeps none. */
    int64_t threshold = q->p->mem_threshold > INT64_MAX ? INT64_MAX : (int64_t)q->p->mem_threshold;

    q->cap = 0;
    q->list = &q->r->hotspots;
    q->n_list = &q->r->n_hotspots;
    if (!q->agg || q->p->top > AGG_TOP)
        return query_run(q, schema_report_hotspots_sql, "hotspots", q->p->top, threshold,
                         query_entry_row);
    return query_run(q, schema_report_hotspots_agg_sql, "hotspots", q->p->top, threshold,
                     query_entry_row);
}

/* ---- devices, imbalance, communication ----------------------------------- */

static int query_devices_row(struct query *q, sqlite3_stmt *st)
{
    struct report *r = q->r;
    struct report_device *d = util_grow(r->devices, &q->cap, r->n_devices, sizeof(*d));

    if (d == NULL)
        return query_oom(q, "devices");
    r->devices = d;
    d = &d[r->n_devices++];
    memset(d, 0, sizeof(*d));
    d->calls = query_u64(st, 1);
    d->total_ns = query_u64(st, 2);
    d->mem_bytes = query_u64(st, 3);
    if (query_text(st, 0, &d->device) < 0)
        return query_oom(q, "devices");
    return 0;
}

static int query_devices(struct query *q)
{
    struct report *r = q->r;
    char *slowest;
    int err;

    q->cap = 0;
    err = query_run(q, q->agg ? schema_report_devices_agg_sql : schema_report_devices_sql,
                    "devices", 0, 0, query_devices_row);
    if (err < 0)
        return err;
    r->devices_count = r->n_devices;
    analysis_imbalance(r->devices, r->n_devices, &r->imbalance);
    if (!r->imbalance.present)
        return 0;
    /* analysis_imbalance() borrowed the name from the devices rows. */
    slowest = strdup(r->imbalance.slowest_device);
    r->imbalance.slowest_device = slowest;
    return slowest != NULL ? 0 : query_oom(q, "imbalance");
}

static int query_comm_page(struct query *q);

/* The comm rows are the "comm" ops rows, already in report order. */
static int query_comm(struct query *q)
{
    struct report *r = q->r;
    size_t n = 0;

    if (q->p->ops_limit > 0)
        return query_comm_page(q);
    for (size_t i = 0; i < r->n_ops; i++) {
        if (analysis_is_comm(r->ops[i].category) && r->ops[i].share >= q->p->comm_min_ratio)
            n++;
    }
    if (n == 0)
        return 0;
    r->comm = calloc(n, sizeof(*r->comm));
    if (r->comm == NULL)
        return query_oom(q, "comm");
    for (size_t i = 0; i < r->n_ops; i++) {
        const struct report_op *op = &r->ops[i];
        struct report_comm *c = &r->comm[r->n_comm];

        if (r->n_comm == n)
            break;
        if (!analysis_is_comm(op->category) || op->share < q->p->comm_min_ratio)
            continue;
        r->n_comm++;
        c->calls = op->calls;
        c->total_ns = op->total_ns;
        c->share = op->share;
        c->op = strdup(op->op);
        if (c->op == NULL)
            return query_oom(q, "comm");
    }
    return 0;
}

/* ---- a page of ops (ops_limit, an extension) ----------------------------- */

/*
 * With ops_limit, SQLite sorts the ops (report_ops_page*.sql, spilling to
 * temporary files) and returns only the page, so a report on a session with
 * very many op names holds the page's rows, never every name. The
 * percentiles come from the same durations pass as for a whole report, the
 * rows of ops not on the page skipped.
 */

/* Prepares sql, binds ?1 = limit, ?2 = offset, ?3 = comm_only, and reads every row. */
static int query_run_page(struct query *q, const char *sql, const char *what, int64_t limit,
                          int64_t offset, bool comm_only,
                          int (*row)(struct query *, sqlite3_stmt *))
{
    sqlite3_stmt *st = NULL;
    int rc, err;

    err = query_prepare(q, sql, &st, what);
    if (err < 0)
        return err;
    rc = sqlite3_bind_int64(st, 1, limit);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 2, offset);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(st, 3, comm_only);
    err = rc == SQLITE_OK ? query_rows(q, st, what, row) : query_fail(q, rc, what);
    sqlite3_finalize(st);
    return err;
}

/*
 * SQLite keeps the best offset + limit rows while it sorts. Near the first
 * page (what `tracectl report` shows) they are few and the plain sort is
 * fastest; past QUERY_PAGE_NEAR rows, on aggregates, the sort carries ranks
 * by name instead of names (report_ops_far_agg.sql: 5 s instead of 58 s for
 * the last page of 200,000 names of 1,000 bytes).
 */
#define QUERY_PAGE_NEAR 10000

static const char *query_page_sql(const struct query *q)
{
    if (!q->agg)
        return schema_report_ops_page_sql;
    if ((uint64_t)q->p->ops_offset + q->p->ops_limit > QUERY_PAGE_NEAR)
        return schema_report_ops_far_agg_sql;
    return schema_report_ops_page_agg_sql;
}

static int query_page_count_row(struct query *q, sqlite3_stmt *st)
{
    q->r->ops_total = query_u64(st, 0);
    return 0;
}

/* An ops row of the page, its id kept for the durations pass. */
static int query_page_row(struct query *q, sqlite3_stmt *st)
{
    struct query_page_op *p = util_grow(q->page, &q->page_cap, q->r->n_ops, sizeof(*p));

    if (p == NULL)
        return query_oom(q, "ops");
    q->page = p;
    p = &p[q->r->n_ops];
    p->id = sqlite3_column_int64(st, 0);
    p->index = q->r->n_ops;
    p->seen = 0;
    return query_ops_row(q, st);
}

static int query_page_id_cmp(const void *pa, const void *pb)
{
    const struct query_page_op *a = pa, *b = pb;

    return a->id < b->id ? -1 : a->id > b->id;
}

/* One duration of the durations pass (ascending within an op): counted when its op is on the page.
 */
static int query_page_duration(struct query *q, int64_t id, uint64_t dur, uint64_t count)
{
    struct query_page_op key = {.id = id}, *p;
    struct report_op *op;

    p = bsearch(&key, q->page, q->r->n_ops, sizeof(*p), query_page_id_cmp);
    if (p == NULL)
        return 0;
    op = &q->r->ops[p->index];
    if (count == 0 || count > op->calls - p->seen)
        return query_inconsistent(q);
    query_percentiles(op, p->seen, dur, count);
    p->seen += count;
    return 0;
}

/* The ops rows [ops_offset, ops_offset + ops_limit) in report order, and ops_total. */
static int query_ops_page(struct query *q)
{
    struct report *r = q->r;
    int err;

    r->paged = true;
    q->cap = 0;
    err = query_run(q, q->agg ? schema_report_ops_count_agg_sql : schema_report_ops_count_sql,
                    "ops", 0, 0, query_page_count_row);
    if (err == 0)
        err = query_run_page(q, query_page_sql(q), "ops", q->p->ops_limit, q->p->ops_offset, false,
                             query_page_row);
    if (err < 0 || r->n_ops == 0)
        return err;
    qsort(q->page, r->n_ops, sizeof(*q->page), query_page_id_cmp);
    err = query_durations(q, query_page_duration);
    if (err < 0)
        return err;
    for (size_t i = 0; i < r->n_ops; i++) {
        if (q->page[i].seen != r->ops[q->page[i].index].calls)
            return query_inconsistent(q);
    }
    query_ops_finish(r);
    return query_ops_dropped(q);
}

/* A comm row of a page: rows come by total descending, so all those kept come first. */
static int query_comm_row(struct query *q, sqlite3_stmt *st)
{
    struct report *r = q->r;
    struct report_comm *c;
    uint64_t total = query_u64(st, 4);
    double share = analysis_share(total, r->total_ns);

    if (share < q->p->comm_min_ratio)
        return 0;
    c = util_grow(r->comm, &q->cap, r->n_comm, sizeof(*c));
    if (c == NULL)
        return query_oom(q, "comm");
    r->comm = c;
    c = &c[r->n_comm++];
    memset(c, 0, sizeof(*c));
    c->calls = query_u64(st, 3);
    c->total_ns = total;
    c->share = share;
    return query_text(st, 1, &c->op) < 0 ? query_oom(q, "comm") : 0;
}

/*
 * The comm rows of a paged report: the first ops_limit "comm" ops in report
 * order whose share is at least comm_min_ratio. The share falls along that
 * order, so the first ops_limit rows, then filtered, are the same rows.
 */
static int query_comm_page(struct query *q)
{
    q->cap = 0;
    return query_run_page(q, query_page_sql(q), "comm", q->p->ops_limit, 0, true, query_comm_row);
}

/* ---- filters (ranks, steps, device, category: an extension) --------------- */

/* Whether the request restricts the report (PROTOCOL.md Part 3, "report filters"). */
static bool query_filtered(const struct report_params *p)
{
    const struct proto_analysis *f = p->analysis;

    return f != NULL && (f->n_ranks > 0 || f->steps || f->device != NULL || f->category != NULL);
}

/* category_code(category): the code ranks.c gives an op's category (compute, comm, ...). */
static void query_category_code(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sqlite3_result_int(ctx, (int)proto_cat_code((const char *)sqlite3_value_text(argv[0])));
}

/* Appends " AND <term>" for each filter given to s (an sqlite3_str). */
static void query_filter_terms(sqlite3_str *s, const struct proto_analysis *f)
{
    if (f->n_ranks > 0) {
        sqlite3_str_appendall(s,
                              " AND process_id IN (SELECT id FROM main.processes WHERE rank IN (");
        for (uint32_t i = 0; i < f->n_ranks; i++)
            sqlite3_str_appendf(s, "%s%lld", i > 0 ? "," : "", (long long)f->ranks[i]);
        sqlite3_str_appendall(s, "))");
    }
    if (f->steps)
        sqlite3_str_appendf(s, " AND step BETWEEN %lld AND %lld", (long long)f->step_min,
                            (long long)f->step_max);
    if (f->device != NULL)
        sqlite3_str_appendf(s, " AND device_id = (SELECT id FROM main.devices WHERE name = %Q)",
                            f->device);
    /*
     * The unary + keeps op_id from the blocks format's virtual table: with an op_id = constraint
     * per op of the category it would scan the blocks once per op (most blocks hold most ops),
     * 0.6 s instead of 0.24 s for 8 ops of 1,000,000 entries.
     */
    if (f->category != NULL)
        sqlite3_str_appendf(s,
                            " AND +op_id IN (SELECT id FROM main.ops WHERE category_code(category)"
                            " = %d)",
                            (int)proto_cat_code(f->category));
}

/*
 * Creates the views temp.entries (the matching entries, with their rowids:
 * the ties of slowest and hotspots) and, with a rank filter, temp.processes
 * (the processes of those ranks: the header's processes and dropped).
 * Unqualified names resolve in temp first, so every schema/report_*.sql scan
 * statement reads them in place of the tables. Only the terms of the filters
 * given are written, so that the blocks format's virtual table sees a
 * process_id = constraint per process of a rank filter (vtab.c skips the
 * blocks without that process).
 */
static int query_filter_begin(struct query *q)
{
    const struct proto_analysis *f = q->p->analysis;
    sqlite3_str *s = sqlite3_str_new(q->db);
    char *sql;
    int rc;

    q->agg = false; /* the aggregates count every entry */
    sqlite3_str_appendall(s, "CREATE TEMP VIEW entries AS SELECT rowid AS rowid, process_id, step,"
                             " op_id, device_id, start_ns, dur_ns, elements, mem_bytes, shape_id"
                             " FROM main.entries WHERE 1");
    query_filter_terms(s, f);
    if (f->n_ranks > 0) {
        sqlite3_str_appendall(s, "; CREATE TEMP VIEW processes AS SELECT * FROM main.processes"
                                 " WHERE rank IN (");
        for (uint32_t i = 0; i < f->n_ranks; i++)
            sqlite3_str_appendf(s, "%s%lld", i > 0 ? "," : "", (long long)f->ranks[i]);
        sqlite3_str_appendall(s, ")");
    }
    if ((sql = sqlite3_str_finish(s)) == NULL)
        return query_oom(q, "filter");
    rc = sqlite3_exec(q->db, sql, NULL, NULL, NULL);
    sqlite3_free(sql);
    return rc == SQLITE_OK ? 0 : query_fail(q, rc, "filter");
}

/* Drops the views: the analysis sections filter on their own, from their tables. */
static int query_filter_end(struct query *q)
{
    return query_exec(q, "DROP VIEW IF EXISTS temp.entries; DROP VIEW IF EXISTS temp.processes");
}

/*
 * The reply's "filter" key and map: the filters the report was built with,
 * the category as the code it was applied as (any word not known is other).
 */
static int query_filter_pack(struct query *q)
{
    const struct proto_analysis *f = q->p->analysis;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    bool nomem;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    nomem = proto_pack_str(&pk, "filter") < 0 ||
            msgpack_pack_map(&pk, (f->n_ranks > 0) + f->steps + (f->device != NULL) +
                                      (f->category != NULL)) != 0;
    if (!nomem && f->n_ranks > 0) {
        nomem = proto_pack_str(&pk, "ranks") < 0 || msgpack_pack_array(&pk, f->n_ranks) != 0;
        for (uint32_t i = 0; !nomem && i < f->n_ranks; i++)
            nomem = msgpack_pack_int64(&pk, f->ranks[i]) != 0;
    }
    if (!nomem && f->steps)
        nomem = proto_pack_str(&pk, "steps") < 0 || msgpack_pack_array(&pk, 2) != 0 ||
                msgpack_pack_uint64(&pk, f->step_min) != 0 ||
                msgpack_pack_uint64(&pk, f->step_max) != 0;
    if (!nomem && f->device != NULL)
        nomem = proto_pack_str(&pk, "device") < 0 || proto_pack_str(&pk, f->device) < 0;
    if (!nomem && f->category != NULL)
        nomem = proto_pack_str(&pk, "category") < 0 ||
                proto_pack_str(&pk, proto_cat_name(proto_cat_code(f->category))) < 0;
    if (nomem) {
        msgpack_sbuffer_destroy(&sb);
        return query_oom(q, "filter");
    }
    q->r->filter_len = sb.size;
    q->r->filter = msgpack_sbuffer_release(&sb);
    return 0;
}

/* ---- the report ---------------------------------------------------------- */

/* The analysis' filter (ranks_query.h) from the request's. */
static void query_ranks_filter(const struct proto_analysis *an, uint32_t top,
                               struct ranks_filter *f)
{
    memset(f, 0, sizeof(*f));
    f->ranks = an->n_ranks > 0 ? an->ranks : NULL;
    f->n_ranks = an->n_ranks;
    f->steps = an->steps;
    f->step_min = an->step_min;
    f->step_max = an->step_max;
    f->device = an->device;
    f->category = an->category;
    f->top = top;
}

/* Extension: the analysis sections (ranks_query.h), packed here, appended by report_pack. */
static int query_analysis(struct query *q)
{
    const struct proto_analysis *an = q->p->analysis;
    struct ranks_filter f = {0};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (an == NULL || !an->on)
        return 0;
    query_ranks_filter(an, q->p->top, &f);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = ranks_query(q->db, &f, &pk, q->errbuf, q->errlen);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    q->r->analysis_len = sb.size;
    q->r->analysis = msgpack_sbuffer_release(&sb);
    if (q->r->analysis == NULL) { /* nothing was packed: cannot happen, keep the map valid */
        q->r->analysis_len = 0;
        return -EIO;
    }
    return 0;
}

/*
 * Extension: the MPI section (mpi_report.h), packed here, appended by
 * report_pack; read while the filters' views are in place, so that it counts
 * the entries the other sections count.
 */
static int query_mpi(struct query *q)
{
    const struct proto_analysis *an = q->p->analysis;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (an == NULL || !an->on)
        return 0;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = mpi_report(q->db, !an->steps && an->device == NULL && an->category == NULL, &pk, q->errbuf,
                    q->errlen);
    if (rc > 0) {
        q->r->mpi_len = sb.size;
        q->r->mpi = msgpack_sbuffer_release(&sb);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc < 0 ? rc : 0;
}

/* Whether the file's aggregates are exact (info.aggregates = 1). */
static int query_aggregates(struct query *q)
{
    int64_t exact;
    int rc = info_get(q->db, "aggregates", 0, &exact);

    if (rc < 0) {
        query_msg(q, "aggregates", sqlite3_errmsg(q->db));
        return rc;
    }
    q->agg = exact == 1;
    return 0;
}

/*
 * satsum(x): sum() for the report's scans, saturating at INT64_MAX where
 * SQLite's sum() fails with "integer overflow" (every stored value is in
 * 0..INT64_MAX, PROTOCOL.md Part 2; anything negative counts as 0). NULL
 * over no rows, like sum().
 */
struct query_satsum {
    bool any;
    int64_t sum;
};

static void query_satsum_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct query_satsum *s = sqlite3_aggregate_context(ctx, sizeof(*s));
    int64_t v;

    (void)argc;
    if (s == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
        return;
    s->any = true;
    v = sqlite3_value_int64(argv[0]);
    if (v > 0)
        s->sum = s->sum > INT64_MAX - v ? INT64_MAX : s->sum + v;
}

static void query_satsum_final(sqlite3_context *ctx)
{
    struct query_satsum *s = sqlite3_aggregate_context(ctx, 0);

    if (s != NULL && s->any)
        sqlite3_result_int64(ctx, s->sum);
    else
        sqlite3_result_null(ctx);
}

/* The progress handler: counts the steps, and a nonzero return interrupts (the daemon stops). */
static int query_progress(void *arg)
{
    const struct report_params *p = arg;

    if (p->steps != NULL)
        atomic_fetch_add(p->steps, QUERY_STEPS);
    return p->cancel != NULL && atomic_load(p->cancel);
}

static int query_open(struct query *q, const char *db_path)
{
    int rc = sqlite3_open_v2(db_path, &q->db, SQLITE_OPEN_READONLY, NULL);

    if (rc != SQLITE_OK)
        return query_fail(q, rc, "open");
    rc = sqlite3_busy_timeout(q->db, QUERY_BUSY_MS);
    sqlite3_progress_handler(q->db, QUERY_STEPS, query_progress, (void *)q->p);
    if (rc == SQLITE_OK)
        rc = vtab_register(q->db); /* entries of a blocks file */
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(q->db, "satsum", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                     NULL, query_satsum_step, query_satsum_final);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(q->db, "category_code", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                     NULL, query_category_code, NULL, NULL);
    if (rc != SQLITE_OK)
        return query_fail(q, rc, "open");
    /* A deferred transaction takes its snapshot at the first read. */
    if (query_exec(q, "BEGIN") < 0)
        return -EIO;
    if ((rc = info_schema_check(q->db, q->errbuf, q->errlen)) < 0)
        return rc;
    return query_aggregates(q);
}

/* See report.h. A NULL p means PROTOCOL.md's defaults: top 10, no thresholds. */
int query_report(const char *db_path, const struct report_params *p, struct report *out,
                 char *errbuf, size_t errlen)
{
    static const struct report_params defaults = {.top = 10};
    static int (*const sections[])(struct query *) = {
        query_totals, query_ops, query_slowest, query_hotspots, query_devices, query_comm,
    };
    struct query q = {.p = p != NULL ? p : &defaults,
                      .r = out,
                      .errbuf = errbuf,
                      .errlen = errbuf != NULL ? errlen : 0};
    bool filtered = query_filtered(q.p);
    int err;

    memset(out, 0, sizeof(*out));
    if (q.errlen > 0)
        errbuf[0] = '\0';
    err = query_open(&q, db_path);
    if (err == 0 && filtered)
        err = query_filter_begin(&q);
    for (size_t i = 0; err == 0 && i < sizeof(sections) / sizeof(sections[0]); i++)
        err = sections[i](&q);
    if (err == 0)
        err = query_mpi(&q);
    if (err == 0 && filtered)
        err = query_filter_end(&q);
    if (err == 0)
        err = query_analysis(&q);
    if (err == 0 && filtered)
        err = query_filter_pack(&q);
    if (err == 0)
        err = query_exec(&q, "COMMIT");
    /* Closing also ends the read transaction when a section failed. */
    sqlite3_close_v2(q.db);
    free(q.page);
    if (err < 0)
        report_free(out);
    return err;
}

/* See query.h. */
int query_late(const char *db_path, const struct proto_analysis *an, msgpack_packer *pk,
               char *errbuf, size_t errlen)
{
    static const struct report_params defaults = {.top = 10};
    struct report unused = {0};
    struct query q = {
        .p = &defaults, .r = &unused, .errbuf = errbuf, .errlen = errbuf != NULL ? errlen : 0};
    struct ranks_filter f;
    int err;

    if (q.errlen > 0)
        errbuf[0] = '\0';
    query_ranks_filter(an, 0, &f);
    err = query_open(&q, db_path);
    if (err == 0)
        err = ranks_late(q.db, &f, pk, q.errbuf, q.errlen);
    if (err == 0)
        err = query_exec(&q, "COMMIT");
    sqlite3_close_v2(q.db);
    return err;
}
