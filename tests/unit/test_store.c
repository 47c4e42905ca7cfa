/*
 * test_store.c — the storage writer: batches in, rows out, and a flush
 * completes only after its batches are committed (checked from a second,
 * independent SQLite connection inside the completion callback).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "store.h"

static char dir[64];

static void rm_dir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(store, .fini = rm_dir, .timeout = 30);

struct seen {
    int flushes;
    long long rows_at_ack[8];
};

static long long count_rows(const char *sql)
{
    char path[PATH_MAX];
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;

    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

static void done_cb(struct store *s, struct store_job *job, void *data)
{
    struct seen *seen = data;

    (void)s;
    cr_assert_eq(job->type, STORE_FLUSH);
    cr_assert_eq(job->rc, 0);
    /* The ack moment: what a reader that is not the writer sees is committed. */
    seen->rows_at_ack[seen->flushes++] = count_rows("SELECT count(*) FROM entries");
    store_job_free(job);
}

static struct store_job *batch(size_t n, uint64_t base)
{
    struct store_job *j = store_job_new(STORE_BATCH, 1);

    j->u.batch.b.entries = calloc(n, sizeof(struct proto_entry));
    j->u.batch.b.n = n;
    j->u.batch.dev_ids = calloc(n, sizeof(uint32_t));
    j->u.batch.process_id = 1;
    for (size_t i = 0; i < n; i++) {
        j->u.batch.b.entries[i].op_id = 1;
        j->u.batch.b.entries[i].start_ns = base + i;
        j->u.batch.b.entries[i].dur_ns = 10 + i;
        j->u.batch.dev_ids[i] = 1;
    }
    return j;
}

static struct store_job *flush(void *cookie)
{
    struct store_job *j = store_job_new(STORE_FLUSH, 1);

    j->cookie = cookie;
    j->u.flush.process_id = 1;
    return j;
}

Test(store, batches_in_rows_out_ack_after_commit)
{
    struct seen seen = {0};
    uv_loop_t loop;
    char err[256];
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, done_cb, NULL, &seen, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    cr_assert_eq(store_start(s), 0);

    struct store_job *j = store_job_new(STORE_OPEN, 1);
    j->u.open.name = strdup("store-test");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, 1);
    j->u.process.id = 1;
    j->u.process.rank = 3;
    j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    j = store_job_new(STORE_OP, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("matmul");
    j->u.name.category = strdup("compute");
    store_enqueue(s, j);
    j = store_job_new(STORE_DEVICE, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("gpu:3");
    store_enqueue(s, j);

    store_enqueue(s, batch(1000, 0));
    store_enqueue(s, batch(234, 5000));
    store_enqueue(s, flush(&seen));
    store_enqueue(s, batch(766, 9000));
    store_enqueue(s, flush(&seen));
    while (seen.flushes < 2)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_geq(seen.rows_at_ack[0], 1234, "acked before its batches were committed");
    cr_assert_eq(seen.rows_at_ack[1], 2000);
    cr_assert_eq(store_stored(s), 2000);
    cr_assert_eq(store_queued(s), 0);

    /* session end: the catalog row is updated and the file closed */
    j = store_job_new(STORE_SESSION_END, 1);
    j->u.send.ended_ns = 42;
    j->u.send.processes = 1;
    j->u.send.entries = 2000;
    store_enqueue(s, j);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);

    /* rows out: the values that went in */
    cr_assert_eq(count_rows("SELECT sum(dur_ns) FROM entries"),
                 /* 1000 × 10 + sum 0..999, 234 × 10 + sum 0..233, 766 × 10 + sum 0..765 */
                 10000 + 499500 + 2340 + 27261 + 7660 + 292995);
    cr_assert_eq(count_rows("SELECT count(*) FROM trace WHERE op = 'matmul' AND device = 'gpu:3'"
                            " AND rank = 3"),
                 2000, "the trace view joins names");
    char path[PATH_MAX];
    sqlite3 *db;
    sqlite3_stmt *st;
    snprintf(path, sizeof(path), "%s/catalog.db", dir);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT name, state, entries, ended_ns FROM sessions", -1,
                                    &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "store-test");
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "ended");
    cr_assert_eq(sqlite3_column_int64(st, 2), 2000);
    cr_assert_eq(sqlite3_column_int64(st, 3), 42);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
