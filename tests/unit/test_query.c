/*
 * test_query — query_report() over a real session file, and report_pack().
 *
 * Each test gets a fresh temporary session file (schema_session_sql, WAL
 * mode, as the store writes it), fills it with SQL, computes the report and
 * checks every field against values worked out by hand from the data set
 * below (the sums and orders are in the comments). The file goes in .fini.
 *
 * The data set (rowid: process step op device start dur elements mem shapes):
 *   processes: 1 rank 0 (dropped 2), 2 rank 1 (dropped 0), 3 no rank (dropped 3)
 *   devices:   1 gpu:1, 2 gpu:0, 3 cpu, 4 idle (no entries)
 *   ops:       1 matmul compute, 2 allreduce comm, 3 memcpy_h2d memory,
 *              4 a_op compute, 5 B_op compute, 6 unused compute (no entries),
 *              7 barrier comm, 8 broadcast_to compute (comm by name, not by category)
 *    1: p1 s0 allreduce   gpu:0 2000 500    0    0
 *    2: p2 s0 allreduce   gpu:1 1500 500    0    0
 *    3: p1 s0 matmul      gpu:0 1000 400   12 4096  out [3,4] in [[3,2],[2,4]]
 *    4: p2 s0 matmul      gpu:1 1100 300    6 1001  out: damaged bytes 92 02 -> nil
 *    5: p1 s1 matmul      gpu:0 3000 200    0 1000
 *    6: p2 s1 matmul      gpu:1 3100 100    0  999
 *    7: p3 s0 matmul      -      500   1    1 4096  out [1]
 *    8: p3 s0 allreduce   cpu    600   1    0    0
 *    9: p1 s1 memcpy_h2d  gpu:0 3500  50 1024 8192  out [1024] in [[1024]]
 *   10: p2 s1 B_op        gpu:1 3600 150    0 4096
 *   11: p1 s1 a_op        gpu:0 3600 150    0 4096
 *   12: p3 s1 barrier     -     4000  10    0    0
 *   13: p3 s1 broadcast_to cpu  4100  40    0 2000
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <msgpack.h>
#include <sqlite3.h>

#include "info.h"
#include "query.h"
#include "schema.h"

static char db_path[64];

/*
 * The data set is written as entries with their shapes inline (the order of
 * the columns of entries_v1 below); this per-connection view interns the
 * shapes into the shapes table as the daemon's writer does, with elements
 * kept explicit.
 */
static const char entries_v1_sql[] =
    "CREATE TEMP VIEW IF NOT EXISTS entries_v1 AS SELECT NULL AS process_id, NULL AS step,"
    " NULL AS op_id, NULL AS device_id, NULL AS start_ns, NULL AS dur_ns, NULL AS elements,"
    " NULL AS mem_bytes, NULL AS out_shape, NULL AS in_shapes;"
    "CREATE TEMP TRIGGER IF NOT EXISTS entries_v1_insert INSTEAD OF INSERT ON entries_v1 BEGIN"
    " INSERT INTO shapes(out_shape, in_shapes, elements) SELECT NEW.out_shape, NEW.in_shapes, 0"
    "  WHERE (NEW.out_shape IS NOT NULL OR NEW.in_shapes IS NOT NULL) AND NOT EXISTS (SELECT 1"
    "  FROM shapes WHERE out_shape IS NEW.out_shape AND in_shapes IS NEW.in_shapes);"
    " INSERT INTO entries VALUES (NEW.process_id, NEW.step, NEW.op_id, NEW.device_id,"
    "  NEW.start_ns, NEW.dur_ns, NEW.elements, NEW.mem_bytes, (SELECT id FROM shapes WHERE"
    "  out_shape IS NEW.out_shape AND in_shapes IS NEW.in_shapes));"
    " END;";

static void db_open_v1(sqlite3 **db)
{
    char *msg = NULL;

    cr_assert_eq(sqlite3_open(db_path, db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(*db, entries_v1_sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg);
}

static void db_exec(const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;

    db_open_v1(&db);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg);
    sqlite3_close(db);
}

static void setup(void)
{
    char sql[80];
    int fd;

    snprintf(db_path, sizeof(db_path), "/tmp/tracectl-test-query-XXXXXX");
    fd = mkstemp(db_path);
    cr_assert(fd >= 0);
    close(fd);
    db_exec(schema_session_sql);
    snprintf(sql, sizeof(sql), "INSERT INTO info VALUES ('schema_version', %d)",
             INFO_SCHEMA_VERSION);
    db_exec(sql);
    db_exec("PRAGMA journal_mode = WAL;");
}

static void teardown(void)
{
    char side[sizeof(db_path) + 8];

    unlink(db_path);
    snprintf(side, sizeof(side), "%s-wal", db_path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", db_path);
    unlink(side);
}

TestSuite(query, .init = setup, .fini = teardown);

static const char data_sql[] =
    "INSERT INTO processes (id, rank, world, pid, host, device, started_ns, dropped) VALUES"
    " (1, 0, 2, 101, 'n1', 'gpu:0', 1, 2), (2, 1, 2, 102, 'n1', 'gpu:1', 1, 0),"
    " (3, NULL, NULL, 103, 'n1', NULL, 1, 3);"
    "INSERT INTO devices (id, name) VALUES (1, 'gpu:1'), (2, 'gpu:0'), (3, 'cpu'), (4, 'idle');"
    "INSERT INTO ops (id, name, category) VALUES (1, 'matmul', 'compute'),"
    " (2, 'allreduce', 'comm'), (3, 'memcpy_h2d', 'memory'), (4, 'a_op', 'compute'),"
    " (5, 'B_op', 'compute'), (6, 'unused', 'compute'), (7, 'barrier', 'comm'),"
    " (8, 'broadcast_to', 'compute');"
    "INSERT INTO entries_v1 (process_id, step, op_id, device_id, start_ns, dur_ns, elements,"
    " mem_bytes, out_shape, in_shapes) VALUES"
    " (1, 0, 2, 2, 2000, 500, 0, 0, NULL, NULL),"
    " (2, 0, 2, 1, 1500, 500, 0, 0, NULL, NULL),"
    " (1, 0, 1, 2, 1000, 400, 12, 4096, X'920304', X'92920302920204'),"
    " (2, 0, 1, 1, 1100, 300, 6, 1001, X'9202', NULL),"
    " (1, 1, 1, 2, 3000, 200, 0, 1000, NULL, NULL),"
    " (2, 1, 1, 1, 3100, 100, 0, 999, NULL, NULL),"
    " (3, 0, 1, NULL, 500, 1, 1, 4096, X'9101', NULL),"
    " (3, 0, 2, 3, 600, 1, 0, 0, NULL, NULL),"
    " (1, 1, 3, 2, 3500, 50, 1024, 8192, X'91cd0400', X'9191cd0400'),"
    " (2, 1, 5, 1, 3600, 150, 0, 4096, NULL, NULL),"
    " (1, 1, 4, 2, 3600, 150, 0, 4096, NULL, NULL),"
    " (3, 1, 7, NULL, 4000, 10, 0, 0, NULL, NULL),"
    " (3, 1, 8, 3, 4100, 40, 0, 2000, NULL, NULL);";

/* total_ns = 1001 (allreduce) + 1001 (matmul) + 150 + 150 + 50 + 40 + 10 */
#define TOTAL 2402

static void run(const struct report_params *p, struct report *r)
{
    char err[256];
    int rc = query_report(db_path, p, r, err, sizeof(err));

    cr_assert_eq(rc, 0, "query_report: %d %s", rc, err);
}

static void blob_eq(const struct report_blob *b, const char *bytes, size_t len)
{
    if (bytes == NULL) {
        cr_assert_null(b->data);
        cr_assert_eq(b->len, 0);
        return;
    }
    cr_assert_eq(b->len, len);
    cr_assert_eq(memcmp(b->data, bytes, len), 0);
}

struct want_entry {
    const char *op;
    int64_t rank;
    const char *device;
    uint64_t step, start_ns, dur_ns, mem_bytes;
};

static void entry_eq(const struct report_entry *e, const struct want_entry *w, size_t i)
{
    cr_assert_str_eq(e->op, w->op, "row %zu", i);
    cr_assert_eq(e->rank, w->rank, "row %zu", i);
    if (w->device == NULL)
        cr_assert_null(e->device, "row %zu", i);
    else
        cr_assert_str_eq(e->device, w->device, "row %zu", i);
    cr_assert_eq(e->step, w->step, "row %zu", i);
    cr_assert_eq(e->start_ns, w->start_ns, "row %zu", i);
    cr_assert_eq(e->dur_ns, w->dur_ns, "row %zu", i);
    cr_assert_eq(e->mem_bytes, w->mem_bytes, "row %zu", i);
}

/* ---- header and memory totals -------------------------------------------- */

/*
 * One schema version (info.h): a file that records another, or none, is
 * refused with what it is and what to do; a file without the info table
 * (not a session file) likewise.
 */
#define STR_(x)     #x
#define STR(x)      STR_(x)
#define BUILD_READS STR(INFO_SCHEMA_VERSION)

Test(query, a_file_of_another_schema_version_is_refused)
{
    static const struct {
        const char *sql, *msg;
    } cases[] = {
        {"UPDATE info SET value = 7 WHERE key = 'schema_version'",
         "made by an incompatible tracectl (schema 7, this build reads " BUILD_READS
         "): report or export it"
         " with the tracectl that made it"},
        {"DELETE FROM info WHERE key = 'schema_version'",
         "made by an incompatible tracectl (schema 0, this build reads " BUILD_READS
         "): report or export it"
         " with the tracectl that made it"},
        {"DROP TABLE info", "no info table: not a session file, or one still being made"},
    };
    struct report r;
    char err[256];

    db_exec(data_sql);
    run(NULL, &r);
    report_free(&r);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        db_exec(cases[i].sql);
        cr_assert_eq(query_report(db_path, NULL, &r, err, sizeof(err)), -EPROTO, "%s",
                     cases[i].sql);
        cr_assert_str_eq(err, cases[i].msg);
    }
}

Test(query, header)
{
    struct report_params p = {.top = 10};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.processes, 3);
    cr_assert_eq(r.dropped, 5); /* 2 + 0 + 3 */
    cr_assert_eq(r.entries, 13);
    cr_assert_eq(r.total_ns, TOTAL);
    /* max(start + dur) = 4100 + 40 = 4140 (row 13); min(start) = 500 (row 7) */
    cr_assert_eq(r.span_ns, 3640);
    cr_assert_eq(r.devices_count, 3); /* cpu, gpu:0, gpu:1; idle has no entries */
    /* peak: row 9; total: 4096+1001+1000+999+4096+8192+4096+4096+2000 */
    cr_assert_eq(r.peak_bytes, 8192);
    cr_assert_eq(r.total_bytes, 29576);
    /* Left to the caller. */
    cr_assert_eq(r.id, 0);
    cr_assert_null(r.name);
    cr_assert_null(r.state);
    report_free(&r);
}

/* ---- ops ----------------------------------------------------------------- */

Test(query, ops)
{
    /*
     * allreduce durations 500, 500, 1 -> sorted 1, 500, 500: avg floor(1001/3)
     * = 333, p50 rank ceil(1.5) = 2 -> 500, p95/p99 rank 3 -> 500.
     * matmul 400, 300, 200, 100, 1 -> sorted 1, 100, 200, 300, 400: avg
     * floor(1001/5) = 200, p50 rank ceil(2.5) = 3 -> 200, p95 rank
     * ceil(4.75) = 5 -> 400, p99 rank ceil(4.95) = 5 -> 400; mem
     * 4096+1001+1000+999+4096 = 11192; elements 12+6+0+0+1 = 19.
     * Order: 1001 twice ("allreduce" < "matmul"), 150 twice ("B_op" < "a_op"
     * in byte order), 50, 40, 10; "unused" has no entries, so no row.
     */
    static const struct report_op want[] = {
        {"allreduce", "comm", 3, 1001, 333, 1, 500, 500, 500, 500, 0, 0, 0, 0, 0, 0, 0},
        {"matmul", "compute", 5, 1001, 200, 1, 200, 400, 400, 400, 0, 11192, 19, 0, 0, 0, 0},
        {"B_op", "compute", 1, 150, 150, 150, 150, 150, 150, 150, 0, 4096, 0, 0, 0, 0, 0},
        {"a_op", "compute", 1, 150, 150, 150, 150, 150, 150, 150, 0, 4096, 0, 0, 0, 0, 0},
        {"memcpy_h2d", "memory", 1, 50, 50, 50, 50, 50, 50, 50, 0, 8192, 1024, 0, 0, 0, 0},
        {"broadcast_to", "compute", 1, 40, 40, 40, 40, 40, 40, 40, 0, 2000, 0, 0, 0, 0, 0},
        {"barrier", "comm", 1, 10, 10, 10, 10, 10, 10, 10, 0, 0, 0, 0, 0, 0, 0},
    };
    struct report_params p = {.top = 10};
    struct report r;
    double shares = 0;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.n_ops, 7);
    for (size_t i = 0; i < 7; i++) {
        const struct report_op *o = &r.ops[i], *w = &want[i];

        cr_assert_str_eq(o->op, w->op, "row %zu", i);
        cr_assert_str_eq(o->category, w->category, "row %zu", i);
        cr_assert_eq(o->calls, w->calls, "%s", w->op);
        cr_assert_eq(o->total_ns, w->total_ns, "%s", w->op);
        cr_assert_eq(o->avg_ns, w->avg_ns, "%s", w->op);
        cr_assert_eq(o->min_ns, w->min_ns, "%s", w->op);
        cr_assert_eq(o->p50_ns, w->p50_ns, "%s", w->op);
        cr_assert_eq(o->p95_ns, w->p95_ns, "%s", w->op);
        cr_assert_eq(o->p99_ns, w->p99_ns, "%s", w->op);
        cr_assert_eq(o->max_ns, w->max_ns, "%s", w->op);
        cr_assert_float_eq(o->share, (double)w->total_ns / TOTAL, 1e-12, "%s", w->op);
        cr_assert_eq(o->mem_bytes, w->mem_bytes, "%s", w->op);
        cr_assert_eq(o->elements, w->elements, "%s", w->op);
        shares += o->share;
    }
    cr_assert_float_eq(shares, 1.0, 1e-9);
    report_free(&r);
}

/*
 * The ops rows' unsent calls (process_op_drops, PROTOCOL.md Part 3): per op
 * name, summed over processes, dropped_calls/_ns the rows' calls/ns but
 * their counted part, counted_calls/_ns that part. allreduce: process 1
 * 10 calls (900 ns) of which 7 (600 ns) counted, process 2 5 (50 ns) all
 * dropped -> dropped 3 + 5 = 8 (300 + 50 ns), counted 7 (600 ns); matmul:
 * process 2 4 calls (40 ns) all counted -> dropped 0, counted 4. A filtered
 * report has none.
 */
Test(query, ops_dropped_and_counted)
{
    struct report_params p = {.top = 10};
    struct report r;
    const struct report_op *ar = NULL, *mm = NULL;

    db_exec(data_sql);
    db_exec("INSERT INTO process_op_drops VALUES (1, 2, 10, 900, 80, 7, 600, 56),"
            " (2, 2, 5, 50, 40, 0, 0, 0), (2, 1, 4, 40, 0, 4, 40, 0);");
    run(&p, &r);
    for (size_t i = 0; i < r.n_ops; i++) {
        if (strcmp(r.ops[i].op, "allreduce") == 0)
            ar = &r.ops[i];
        if (strcmp(r.ops[i].op, "matmul") == 0)
            mm = &r.ops[i];
    }
    cr_assert(ar != NULL && mm != NULL);
    cr_assert_eq(ar->dropped_calls, 8);
    cr_assert_eq(ar->dropped_ns, 350);
    cr_assert_eq(ar->counted_calls, 7);
    cr_assert_eq(ar->counted_ns, 600);
    cr_assert_eq(mm->dropped_calls, 0);
    cr_assert_eq(mm->dropped_ns, 0);
    cr_assert_eq(mm->counted_calls, 4);
    cr_assert_eq(mm->counted_ns, 40);
    cr_assert_eq(ar->calls, 3, "the stored entries, as before");
    report_free(&r);
}

Test(query, percentiles_many)
{
    /*
     * Op "k" (id 5): 100 entries, durations (37 i mod 100) + 1 for i < 100, a
     * shuffle of 1..100 (37 and 100 are coprime), so the value at rank k is
     * k: p50 = 50, p95 = 95, p99 = 99; total 5050, avg floor(50.5) = 50.
     * Op "j" (id 2), interleaved: 5, 3, 9, 1, 7 -> 1 3 5 7 9: p50 rank 3 = 5,
     * p95 and p99 rank 5 = 9; total 25, avg 5.
     */
    static const uint64_t jd[] = {5, 3, 9, 1, 7};
    char sql[128];
    struct report_params p = {.top = 1};
    struct report r;

    db_exec("INSERT INTO processes (id, rank, started_ns) VALUES (1, 0, 1);"
            "INSERT INTO ops (id, name, category) VALUES (5, 'k', 'compute'), (2, 'j', 'x');");
    for (unsigned i = 0; i < 100; i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO entries_v1 VALUES (1, %u, 5, NULL, %u, %u, 0, 0, NULL, NULL);", i,
                 i * 1000, (37 * i) % 100 + 1);
        db_exec(sql);
        if (i < 5) {
            snprintf(sql, sizeof(sql),
                     "INSERT INTO entries_v1 VALUES (1, %u, 2, NULL, %u, %llu, 0, 0, NULL, NULL);",
                     i, i * 1000 + 1, (unsigned long long)jd[i]);
            db_exec(sql);
        }
    }
    run(&p, &r);
    cr_assert_eq(r.n_ops, 2);
    cr_assert_str_eq(r.ops[0].op, "k");
    cr_assert_eq(r.ops[0].calls, 100);
    cr_assert_eq(r.ops[0].total_ns, 5050);
    cr_assert_eq(r.ops[0].avg_ns, 50);
    cr_assert_eq(r.ops[0].min_ns, 1);
    cr_assert_eq(r.ops[0].p50_ns, 50);
    cr_assert_eq(r.ops[0].p95_ns, 95);
    cr_assert_eq(r.ops[0].p99_ns, 99);
    cr_assert_eq(r.ops[0].max_ns, 100);
    cr_assert_str_eq(r.ops[1].op, "j");
    cr_assert_str_eq(r.ops[1].category, "x");
    cr_assert_eq(r.ops[1].total_ns, 25);
    cr_assert_eq(r.ops[1].avg_ns, 5);
    cr_assert_eq(r.ops[1].p50_ns, 5);
    cr_assert_eq(r.ops[1].p95_ns, 9);
    cr_assert_eq(r.ops[1].p99_ns, 9);
    /* No devices at all: no rows, imbalance null. */
    cr_assert_eq(r.n_devices, 0);
    cr_assert_not(r.imbalance.present);
    report_free(&r);
}

/* ---- slowest ------------------------------------------------------------- */

Test(query, slowest_top)
{
    /*
     * dur 500 twice: row 2 (start 1500) before row 1 (start 2000), though
     * inserted after it; then 400 (row 3), 300 (row 4).
     */
    static const struct want_entry want[] = {
        {"allreduce", 1, "gpu:1", 0, 1500, 500, 0},
        {"allreduce", 0, "gpu:0", 0, 2000, 500, 0},
        {"matmul", 0, "gpu:0", 0, 1000, 400, 4096},
        {"matmul", 1, "gpu:1", 0, 1100, 300, 1001},
    };
    struct report_params p = {.top = 4};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.n_slowest, 4);
    for (size_t i = 0; i < 4; i++)
        entry_eq(&r.slowest[i], &want[i], i);
    blob_eq(&r.slowest[0].out_shape, NULL, 0);
    blob_eq(&r.slowest[0].in_shapes, NULL, 0);
    blob_eq(&r.slowest[2].out_shape, "\x92\x03\x04", 3);                 /* [3,4] */
    blob_eq(&r.slowest[2].in_shapes, "\x92\x92\x03\x02\x92\x02\x04", 7); /* [[3,2],[2,4]] */
    /* Row 4's stored bytes 92 02 are a truncated array: reported as nil. */
    blob_eq(&r.slowest[3].out_shape, NULL, 0);
    report_free(&r);
}

Test(query, slowest_all)
{
    /*
     * Every row: ... 200 (row 5), 150 twice at the same start 3600: row 10
     * (B_op) before row 11 (a_op) by rowid, 100 (row 6), 50, 40, 10, then dur 1
     * twice: row 7 (start 500, no rank, no device) before row 8 (start 600).
     */
    static const struct want_entry want[] = {
        {"allreduce", 1, "gpu:1", 0, 1500, 500, 0},
        {"allreduce", 0, "gpu:0", 0, 2000, 500, 0},
        {"matmul", 0, "gpu:0", 0, 1000, 400, 4096},
        {"matmul", 1, "gpu:1", 0, 1100, 300, 1001},
        {"matmul", 0, "gpu:0", 1, 3000, 200, 1000},
        {"B_op", 1, "gpu:1", 1, 3600, 150, 4096},
        {"a_op", 0, "gpu:0", 1, 3600, 150, 4096},
        {"matmul", 1, "gpu:1", 1, 3100, 100, 999},
        {"memcpy_h2d", 0, "gpu:0", 1, 3500, 50, 8192},
        {"broadcast_to", -1, "cpu", 1, 4100, 40, 2000},
        {"barrier", -1, NULL, 1, 4000, 10, 0},
        {"matmul", -1, NULL, 0, 500, 1, 4096},
        {"allreduce", -1, "cpu", 0, 600, 1, 0},
    };
    struct report_params p = {.top = 20};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.n_slowest, 13);
    for (size_t i = 0; i < 13; i++)
        entry_eq(&r.slowest[i], &want[i], i);
    blob_eq(&r.slowest[8].out_shape, "\x91\xcd\x04\x00", 4);     /* [1024] */
    blob_eq(&r.slowest[8].in_shapes, "\x91\x91\xcd\x04\x00", 5); /* [[1024]] */
    blob_eq(&r.slowest[11].out_shape, "\x91\x01", 2);            /* [1] */
    report_free(&r);
}

/* ---- memory -------------------------------------------------------------- */

Test(query, hotspots)
{
    /*
     * mem > 1000: rows 9 (8192), then 4096 x4 by start: row 7 (500), row 3
     * (1000), rows 10 and 11 (both 3600: rowid), then row 13 (2000), row 4
     * (1001); row 5 (exactly 1000) is not above the threshold.
     */
    static const struct want_entry want[] = {
        {"memcpy_h2d", 0, "gpu:0", 1, 3500, 50, 8192},
        {"matmul", -1, NULL, 0, 500, 1, 4096},
        {"matmul", 0, "gpu:0", 0, 1000, 400, 4096},
        {"B_op", 1, "gpu:1", 1, 3600, 150, 4096},
        {"a_op", 0, "gpu:0", 1, 3600, 150, 4096},
        {"broadcast_to", -1, "cpu", 1, 4100, 40, 2000},
        {"matmul", 1, "gpu:1", 0, 1100, 300, 1001},
    };
    struct report_params p = {.top = 4, .mem_threshold = 1000};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.peak_bytes, 8192);
    cr_assert_eq(r.total_bytes, 29576);
    cr_assert_eq(r.n_hotspots, 4);
    for (size_t i = 0; i < 4; i++)
        entry_eq(&r.hotspots[i], &want[i], i);
    blob_eq(&r.hotspots[1].out_shape, "\x91\x01", 2);
    report_free(&r);

    p.top = 10;
    run(&p, &r);
    cr_assert_eq(r.n_hotspots, 7);
    for (size_t i = 0; i < 7; i++)
        entry_eq(&r.hotspots[i], &want[i], i);
    report_free(&r);
}

Test(query, hotspots_thresholds)
{
    struct report_params p = {.top = 100, .mem_threshold = 0};
    struct report r;

    db_exec(data_sql);
    /* mem > 0: rows 3, 4, 5, 6, 7, 9, 10, 11, 13 */
    run(&p, &r);
    cr_assert_eq(r.n_hotspots, 9);
    cr_assert_eq(r.hotspots[8].mem_bytes, 999);
    report_free(&r);
    /* Above anything SQLite can store: none (not a negative int64 bind). */
    p.mem_threshold = UINT64_MAX;
    run(&p, &r);
    cr_assert_eq(r.n_hotspots, 0);
    cr_assert_eq(r.peak_bytes, 8192);
    report_free(&r);
    /* top 0: no rows in either list. */
    p.top = 0;
    p.mem_threshold = 0;
    run(&p, &r);
    cr_assert_eq(r.n_hotspots, 0);
    cr_assert_eq(r.n_slowest, 0);
    report_free(&r);
}

/* ---- devices, imbalance, comm -------------------------------------------- */

Test(query, devices_and_imbalance)
{
    /*
     * cpu:   rows 8, 13       calls 2, 1 + 40 = 41, mem 2000
     * gpu:0: rows 1,3,5,9,11  calls 5, 500+400+200+50+150 = 1300, mem 17384
     * gpu:1: rows 2,4,6,10    calls 4, 500+300+100+150 = 1050, mem 6096
     * rows 7 and 12 have no device; idle has no entries.
     * imbalance: total 2391, ideal 2391 / 3 = 797 exactly, max 1300,
     * ratio (1300 - 797) / 797 = 503 / 797.
     */
    struct report_params p = {.top = 10};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.n_devices, 3);
    cr_assert_eq(r.devices_count, 3);
    cr_assert_str_eq(r.devices[0].device, "cpu");
    cr_assert_eq(r.devices[0].calls, 2);
    cr_assert_eq(r.devices[0].total_ns, 41);
    cr_assert_eq(r.devices[0].mem_bytes, 2000);
    cr_assert_str_eq(r.devices[1].device, "gpu:0");
    cr_assert_eq(r.devices[1].calls, 5);
    cr_assert_eq(r.devices[1].total_ns, 1300);
    cr_assert_eq(r.devices[1].mem_bytes, 17384);
    cr_assert_str_eq(r.devices[2].device, "gpu:1");
    cr_assert_eq(r.devices[2].calls, 4);
    cr_assert_eq(r.devices[2].total_ns, 1050);
    cr_assert_eq(r.devices[2].mem_bytes, 6096);
    cr_assert(r.imbalance.present);
    cr_assert_eq(r.imbalance.devices, 3);
    cr_assert_eq(r.imbalance.total_ns, 2391);
    cr_assert_eq(r.imbalance.ideal_ns, 797);
    cr_assert_eq(r.imbalance.max_ns, 1300);
    cr_assert_float_eq(r.imbalance.ratio, 503.0 / 797.0, 1e-12);
    cr_assert_str_eq(r.imbalance.slowest_device, "gpu:0");
    /* An owned copy, not a pointer into the devices rows. */
    cr_assert_neq(r.imbalance.slowest_device, r.devices[1].device);
    report_free(&r);
}

Test(query, comm)
{
    /*
     * Category "comm": allreduce (1001 / 2402 = 0.4167) and barrier
     * (10 / 2402 = 0.0042); broadcast_to is "compute" by its stored category.
     */
    struct report_params p = {.top = 10, .comm_min_ratio = 0.01};
    struct report r;

    db_exec(data_sql);
    run(&p, &r);
    cr_assert_eq(r.n_comm, 1);
    cr_assert_str_eq(r.comm[0].op, "allreduce");
    cr_assert_eq(r.comm[0].calls, 3);
    cr_assert_eq(r.comm[0].total_ns, 1001);
    cr_assert_float_eq(r.comm[0].share, 1001.0 / TOTAL, 1e-12);
    report_free(&r);

    p.comm_min_ratio = 0.0;
    run(&p, &r);
    cr_assert_eq(r.n_comm, 2);
    cr_assert_str_eq(r.comm[0].op, "allreduce");
    cr_assert_str_eq(r.comm[1].op, "barrier");
    cr_assert_eq(r.comm[1].calls, 1);
    cr_assert_eq(r.comm[1].total_ns, 10);
    report_free(&r);

    /* share >= ratio: a ratio equal to the share keeps the row. */
    p.comm_min_ratio = 10.0 / TOTAL;
    run(&p, &r);
    cr_assert_eq(r.n_comm, 2);
    report_free(&r);
    p.comm_min_ratio = 0.5;
    run(&p, &r);
    cr_assert_eq(r.n_comm, 0);
    cr_assert_null(r.comm);
    report_free(&r);
}

/* ---- empty sessions, errors, snapshots, free ----------------------------- */

Test(query, empty)
{
    struct report r, zero;

    memset(&zero, 0, sizeof(zero));
    run(NULL, &r); /* NULL params: PROTOCOL defaults */
    cr_assert_eq(memcmp(&r, &zero, sizeof(r)), 0, "an empty session is all zeros");
    report_free(&r);
    /* Processes but no entries: only the process figures. */
    db_exec("INSERT INTO processes (id, rank, started_ns, dropped) VALUES (1, 0, 1, 4);"
            "INSERT INTO ops (id, name, category) VALUES (1, 'x', 'compute');"
            "INSERT INTO devices (id, name) VALUES (1, 'gpu:0');");
    run(NULL, &r);
    cr_assert_eq(r.processes, 1);
    cr_assert_eq(r.dropped, 4);
    cr_assert_eq(r.entries, 0);
    cr_assert_eq(r.span_ns, 0);
    cr_assert_eq(r.n_ops, 0);
    cr_assert_eq(r.n_devices, 0);
    cr_assert_eq(r.devices_count, 0);
    cr_assert_not(r.imbalance.present);
    report_free(&r);
}

Test(query, errors)
{
    struct report r;
    char err[256];
    int rc;

    memset(&r, 0xff, sizeof(r));
    rc = query_report("/nonexistent/tracectl/none.db", NULL, &r, err, sizeof(err));
    cr_assert_lt(rc, 0);
    cr_assert_neq(err[0], '\0');
    cr_assert_null(r.ops);
    cr_assert_eq(r.entries, 0);
    report_free(&r);

    /* A SQLite file without the session tables. */
    db_exec("DROP VIEW trace; DROP TABLE entries;");
    rc = query_report(db_path, NULL, &r, err, sizeof(err));
    cr_assert_eq(rc, -EIO);
    cr_assert(strstr(err, "no such table") != NULL, "%s", err);
    cr_assert_null(r.ops);
    report_free(&r);
}

Test(query, reads_committed_snapshot)
{
    struct report_params p = {.top = 10};
    struct report r;
    sqlite3 *w = NULL;

    db_exec(data_sql);
    /* A writer in the middle of a transaction, as the store is while ingesting. */
    db_open_v1(&w);
    cr_assert_eq(sqlite3_exec(w,
                              "BEGIN IMMEDIATE; INSERT INTO entries_v1 VALUES"
                              " (1, 2, 1, 2, 5000, 7, 0, 0, NULL, NULL);",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    run(&p, &r);
    cr_assert_eq(r.entries, 13);
    cr_assert_eq(r.total_ns, TOTAL);
    report_free(&r);
    cr_assert_eq(sqlite3_exec(w, "COMMIT;", NULL, NULL, NULL), SQLITE_OK);
    run(&p, &r);
    cr_assert_eq(r.entries, 14);
    cr_assert_eq(r.total_ns, TOTAL + 7);
    cr_assert_eq(r.ops[0].calls, 6); /* matmul: 1008 now leads allreduce's 1001 */
    cr_assert_str_eq(r.ops[0].op, "matmul");
    report_free(&r);
    sqlite3_close(w);
}

Test(query, free_zeroes)
{
    struct report r, zero;

    memset(&zero, 0, sizeof(zero));
    db_exec(data_sql);
    run(NULL, &r);
    r.name = strdup("job");
    r.state = strdup("live");
    report_free(&r);
    cr_assert_eq(memcmp(&r, &zero, sizeof(r)), 0);
    report_free(NULL);
}

/* ---- encoding ------------------------------------------------------------ */

static const msgpack_object *map_get(const msgpack_object *map, const char *key)
{
    cr_assert_eq(map->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];

        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    cr_assert_fail("no key %s", key);
    return NULL;
}

static void keys_eq(const msgpack_object *map, const char *const *keys, uint32_t n)
{
    cr_assert_eq(map->type, MSGPACK_OBJECT_MAP);
    cr_assert_eq(map->via.map.size, n);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;

        cr_assert_eq(k->type, MSGPACK_OBJECT_STR);
        cr_assert_eq(k->via.str.size, strlen(keys[i]), "key %u", i);
        cr_assert_eq(memcmp(k->via.str.ptr, keys[i], k->via.str.size), 0, "key %s", keys[i]);
    }
}

static uint64_t get_u64(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = map_get(map, key);

    cr_assert_eq(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "%s", key);
    return o->via.u64;
}

static void str_eq(const msgpack_object *o, const char *s)
{
    cr_assert_eq(o->type, MSGPACK_OBJECT_STR);
    cr_assert_eq(o->via.str.size, strlen(s));
    cr_assert_eq(memcmp(o->via.str.ptr, s, o->via.str.size), 0, "want %s", s);
}

/* Packs r and unpacks it into u, checking it is one whole msgpack map. */
static const msgpack_object *pack(struct report *r, msgpack_sbuffer *sb, msgpack_unpacked *u)
{
    msgpack_packer pk;
    size_t off = 0;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    cr_assert_eq(report_pack(&pk, r), 0);
    msgpack_unpacked_init(u);
    cr_assert_eq(msgpack_unpack_next(u, sb->data, sb->size, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, sb->size, "one object, nothing after it");
    return &u->data;
}

static const char *const top_keys[] = {"session", "ops",       "slowest", "memory",
                                       "devices", "imbalance", "comm"};
/* v1's keys, then the extensions (PROTOCOL.md Part 3) */
static const char *const session_keys[] = {"id",
                                           "name",
                                           "state",
                                           "processes",
                                           "devices",
                                           "entries",
                                           "dropped",
                                           "total_ns",
                                           "span_ns",
                                           "interrupted",
                                           "interrupted_reason",
                                           "interrupted_ns"};
static const char *const entry_keys[] = {"op",     "rank",      "device",    "step",     "start_ns",
                                         "dur_ns", "mem_bytes", "out_shape", "in_shapes"};

Test(query, pack)
{
    static const char *const op_keys[] = {
        "op",       "category",      "calls",      "total_ns",      "avg_ns",    "min_ns",
        "p50_ns",   "p95_ns",        "p99_ns",     "max_ns",        "share",     "mem_bytes",
        "elements", "dropped_calls", "dropped_ns", "counted_calls", "counted_ns"};
    static const char *const imb_keys[] = {"devices", "total_ns", "ideal_ns",
                                           "max_ns",  "ratio",    "slowest_device"};
    static const char *const mem_keys[] = {"peak_bytes", "total_bytes", "hotspots"};
    struct report_params p = {.top = 3, .comm_min_ratio = 0.01, .mem_threshold = 1000};
    struct report r;
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    const msgpack_object *m, *o, *e;

    db_exec(data_sql);
    run(&p, &r);
    r.id = 7;
    r.name = strdup("job-42");
    r.state = strdup("live");
    m = pack(&r, &sb, &u);
    keys_eq(m, top_keys, 7);
    o = map_get(m, "session");
    keys_eq(o, session_keys, 12);
    cr_assert_eq(get_u64(o, "id"), 7);
    str_eq(map_get(o, "name"), "job-42");
    str_eq(map_get(o, "state"), "live");
    cr_assert_eq(get_u64(o, "processes"), 3);
    cr_assert_eq(get_u64(o, "devices"), 3);
    cr_assert_eq(get_u64(o, "entries"), 13);
    cr_assert_eq(get_u64(o, "dropped"), 5);
    cr_assert_eq(get_u64(o, "total_ns"), TOTAL);
    cr_assert_eq(get_u64(o, "span_ns"), 3640);

    o = map_get(m, "ops");
    cr_assert_eq(o->type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(o->via.array.size, 7);
    e = &o->via.array.ptr[1];
    keys_eq(e, op_keys, 17);
    str_eq(map_get(e, "op"), "matmul");
    cr_assert_eq(get_u64(e, "p95_ns"), 400);
    cr_assert_eq(map_get(e, "share")->type, MSGPACK_OBJECT_FLOAT64);
    cr_assert_float_eq(map_get(e, "share")->via.f64, 1001.0 / TOTAL, 1e-12);

    /* slowest: rows 2, 1, 3 (see slowest_top) */
    o = map_get(m, "slowest");
    cr_assert_eq(o->via.array.size, 3);
    e = &o->via.array.ptr[0];
    keys_eq(e, entry_keys, 9);
    cr_assert_eq(get_u64(e, "rank"), 1);
    str_eq(map_get(e, "device"), "gpu:1");
    cr_assert_eq(map_get(e, "out_shape")->type, MSGPACK_OBJECT_NIL);
    e = &o->via.array.ptr[2];
    o = map_get(e, "out_shape"); /* [3, 4] */
    cr_assert_eq(o->type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(o->via.array.size, 2);
    cr_assert_eq(o->via.array.ptr[0].via.u64, 3);
    cr_assert_eq(o->via.array.ptr[1].via.u64, 4);
    o = map_get(e, "in_shapes"); /* [[3, 2], [2, 4]] */
    cr_assert_eq(o->via.array.size, 2);
    cr_assert_eq(o->via.array.ptr[1].type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(o->via.array.ptr[1].via.array.ptr[1].via.u64, 4);

    o = map_get(m, "memory");
    keys_eq(o, mem_keys, 3);
    cr_assert_eq(get_u64(o, "peak_bytes"), 8192);
    cr_assert_eq(get_u64(o, "total_bytes"), 29576);
    o = map_get(o, "hotspots"); /* rows 9, 7, 3 (see hotspots) */
    cr_assert_eq(o->via.array.size, 3);
    e = &o->via.array.ptr[1];
    keys_eq(e, entry_keys, 9);
    cr_assert_eq(map_get(e, "rank")->type, MSGPACK_OBJECT_NIL);
    cr_assert_eq(map_get(e, "device")->type, MSGPACK_OBJECT_NIL);

    o = map_get(m, "devices");
    cr_assert_eq(o->via.array.size, 3);
    str_eq(map_get(&o->via.array.ptr[0], "device"), "cpu");
    cr_assert_eq(get_u64(&o->via.array.ptr[1], "total_ns"), 1300);
    cr_assert_eq(o->via.array.ptr[2].via.map.size, 4);

    o = map_get(m, "imbalance");
    keys_eq(o, imb_keys, 6);
    cr_assert_eq(get_u64(o, "ideal_ns"), 797);
    cr_assert_eq(map_get(o, "ratio")->type, MSGPACK_OBJECT_FLOAT64);
    cr_assert_float_eq(map_get(o, "ratio")->via.f64, 503.0 / 797.0, 1e-12);
    str_eq(map_get(o, "slowest_device"), "gpu:0");

    o = map_get(m, "comm");
    cr_assert_eq(o->via.array.size, 1);
    cr_assert_eq(o->via.array.ptr[0].via.map.size, 4);
    str_eq(map_get(&o->via.array.ptr[0], "op"), "allreduce");
    cr_assert_eq(get_u64(&o->via.array.ptr[0], "calls"), 3);

    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    report_free(&r);
}

Test(query, pack_empty)
{
    struct report r;
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    const msgpack_object *m, *o;

    run(NULL, &r);
    m = pack(&r, &sb, &u);
    keys_eq(m, top_keys, 7);
    o = map_get(m, "session");
    keys_eq(o, session_keys, 12);
    cr_assert_eq(map_get(o, "name")->type, MSGPACK_OBJECT_NIL); /* not set by the caller */
    cr_assert_eq(get_u64(o, "entries"), 0);
    cr_assert_eq(get_u64(o, "span_ns"), 0);
    cr_assert_eq(map_get(m, "ops")->via.array.size, 0);
    cr_assert_eq(map_get(m, "slowest")->via.array.size, 0);
    cr_assert_eq(get_u64(map_get(m, "memory"), "peak_bytes"), 0);
    cr_assert_eq(map_get(map_get(m, "memory"), "hotspots")->via.array.size, 0);
    cr_assert_eq(map_get(m, "devices")->via.array.size, 0);
    cr_assert_eq(map_get(m, "imbalance")->type, MSGPACK_OBJECT_NIL);
    cr_assert_eq(map_get(m, "comm")->via.array.size, 0);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    report_free(&r);
}
