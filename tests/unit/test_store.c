/*
 * test_store.c — the storage writer: batches in, rows out, and a flush
 * completes only after its batches are committed (checked from a second,
 * independent SQLite connection inside the completion callback).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agg.h"
#include "store.h"
#include "sqlutil.h"

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
    j->u.session_end.ended_ns = 42;
    j->u.session_end.processes = 1;
    j->u.session_end.entries = 2000;
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

/* A batch of session sid: n entries, each with out_shape [k] for k = i % 3 + 1 (3 pairs). */
static struct store_job *shaped_batch(int64_t sid, size_t n, uint64_t base)
{
    struct store_job *j = store_job_new(STORE_BATCH, sid);
    /* canonical msgpack arrays [1], [2], [3] */
    static const char shapes[3][2] = {{(char)0x91, 1}, {(char)0x91, 2}, {(char)0x91, 3}};

    j->u.batch.b.entries = calloc(n, sizeof(struct proto_entry));
    j->u.batch.b.blob = malloc(sizeof(shapes));
    memcpy(j->u.batch.b.blob, shapes, sizeof(shapes));
    j->u.batch.b.blob_len = sizeof(shapes);
    j->u.batch.b.n = n;
    j->u.batch.dev_ids = calloc(n, sizeof(uint32_t));
    j->u.batch.shape_ids = calloc(n, sizeof(uint32_t));
    j->u.batch.process_id = 1;
    for (size_t i = 0; i < n; i++) {
        struct proto_entry *e = &j->u.batch.b.entries[i];
        j->u.batch.shape_ids[i] = (uint32_t)(i % 3) + 1; /* the loop's ids (session_shape) */
        e->op_id = 1;
        e->start_ns = base + i;
        e->dur_ns = 100 + base + i;
        e->mem_bytes = 1 + i;
        e->out_off = (uint32_t)(i % 3) * 2;
        e->out_len = 2;
        e->elements = i % 3 + 1;
    }
    return j;
}

static void open_session(struct store *s, int64_t sid)
{
    struct store_job *j = store_job_new(STORE_OPEN, sid);

    j->u.open.name = strdup("lru");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, sid);
    j->u.process.id = 1;
    j->u.process.rank = j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    j = store_job_new(STORE_OP, sid);
    j->u.name.id = 1;
    j->u.name.name = strdup("matmul");
    j->u.name.category = strdup("compute");
    store_enqueue(s, j);
}

static void count_flush_cb(struct store *s, struct store_job *job, void *data)
{
    (void)s;
    cr_assert_eq(job->type, STORE_FLUSH, "a batch came back lost");
    cr_assert_eq(job->rc, 0, "flush of session %lld failed", (long long)job->session_id);
    (*(int *)data)++;
    store_job_free(job);
}

static long long file_query(int64_t sid, const char *sql)
{
    char path[PATH_MAX];
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", dir, (long long)sid);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* The durations the file's histogram counts: every bucket of every chunk (agg.h). */
static long long hist_count(int64_t sid)
{
    struct agg_hist_bucket b[AGG_CHUNK];
    char path[PATH_MAX];
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", dir, (long long)sid);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id, data FROM agg_hist_chunks", -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int k = agg_chunk_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                 (uint32_t)(sqlite3_column_int64(st, 0) & 127), b);
        cr_assert_gt(k, 0, "chunk %lld", sqlite3_column_int64(st, 0));
        for (int i = 0; i < k; i++)
            n += (long long)b[i].count;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/*
 * With 2 files open at most, 4 sessions written in turns keep closing and
 * reopening each other's files: shapes keep their ids (no duplicate pairs),
 * and the aggregates stay exact (they equal a full scan of the entries).
 */
Test(store, files_closed_when_idle_reopen_exactly)
{
    enum { SESSIONS = 4, ROUNDS = 5, N = 50 };
    int flushes = 0;
    uv_loop_t loop;
    char err[256];
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, count_flush_cb, NULL, &flushes, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    store_set_limits(s, 2, 0);
    cr_assert_eq(store_start(s), 0);
    for (int64_t sid = 1; sid <= SESSIONS; sid++)
        open_session(s, sid);
    for (int r = 0; r < ROUNDS; r++) {
        for (int64_t sid = 1; sid <= SESSIONS; sid++) {
            store_enqueue(s, shaped_batch(sid, N, (uint64_t)r * 1000));
            struct store_job *f = store_job_new(STORE_FLUSH, sid);
            f->cookie = &flushes;
            f->u.flush.process_id = 1;
            store_enqueue(s, f);
        }
        while (flushes < (r + 1) * SESSIONS)
            uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert_eq(store_failed(s), 0);
    cr_assert_eq(store_stored(s), SESSIONS * ROUNDS * N);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    for (int64_t sid = 1; sid <= SESSIONS; sid++) {
        cr_assert_eq(file_query(sid, "SELECT count(*) FROM entries"), ROUNDS * N);
        cr_assert_eq(file_query(sid, "SELECT count(*) FROM shapes"), 3, "shape pairs duplicated");
        cr_assert_eq(file_query(sid, "SELECT value FROM info WHERE key = 'aggregates'"), 1);
        cr_assert_eq(file_query(sid, "SELECT entries FROM agg_session"), ROUNDS * N);
        cr_assert_eq(file_query(sid, "SELECT total_ns FROM agg_session"),
                     file_query(sid, "SELECT sum(dur_ns) FROM entries"));
        cr_assert_eq(file_query(sid, "SELECT count(*) FROM top_slow"), ROUNDS * N);
        cr_assert_eq(hist_count(sid), ROUNDS * N);
    }
}

struct order {
    int64_t done[4];
    int n;
};

static void order_cb(struct store *s, struct store_job *job, void *data)
{
    struct order *o = data;

    (void)s;
    cr_assert_eq(job->type, STORE_FLUSH);
    cr_assert_eq(job->rc, 0);
    o->done[o->n++] = job->session_id;
    store_job_free(job);
}

/*
 * Fairness between sessions: a flood of 400 k entries queued in session 1,
 * then one entry and a flush in session 2. The writer serves sessions in
 * turn, so session 2's flush completes long before the flood's own flush
 * (a single queue would commit the flood first: its flush was queued first).
 */
Test(store, a_flood_does_not_hold_back_another_sessions_flush)
{
    struct order o = {0};
    uv_loop_t loop;
    char err[256];
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, order_cb, NULL, &o, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    open_session(s, 1);
    open_session(s, 2);
    for (int i = 0; i < 100; i++)
        store_enqueue(s, shaped_batch(1, 4000, (uint64_t)i * 4000));
    struct store_job *f = store_job_new(STORE_FLUSH, 1);
    f->cookie = &o;
    f->u.flush.process_id = 1;
    store_enqueue(s, f);
    store_enqueue(s, shaped_batch(2, 1, 0));
    f = store_job_new(STORE_FLUSH, 2);
    f->cookie = &o;
    f->u.flush.process_id = 1;
    store_enqueue(s, f);
    cr_assert_eq(store_start(s), 0); /* everything is queued before the writer looks */
    while (o.n < 2)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(o.done[0], 2, "the bystander's flush waited for the flood");
    cr_assert_eq(o.done[1], 1);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

/* The daemon's one SQLite -> errno map (store.h), primary and extended codes. */
Test(store, sqlite_errno_map)
{
    static const struct {
        int sqlite, want;
    } map[] = {
        {SQLITE_OK, 0},
        {SQLITE_ROW, 0},
        {SQLITE_DONE, 0},
        {SQLITE_FULL, -ENOSPC},
        {SQLITE_NOMEM, -ENOMEM},
        {SQLITE_CANTOPEN, -ENOENT},
        {SQLITE_CANTOPEN_ISDIR, -ENOENT},
        {SQLITE_READONLY, -EACCES},
        {SQLITE_PERM, -EACCES},
        {SQLITE_AUTH, -EACCES},
        {SQLITE_BUSY, -EBUSY},
        {SQLITE_BUSY_SNAPSHOT, -EBUSY},
        {SQLITE_LOCKED, -EBUSY},
        {SQLITE_ERROR, -EIO},
        {SQLITE_CORRUPT, -EIO},
        {SQLITE_IOERR_WRITE, -EIO},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        cr_assert_eq(sql_errno(map[i].sqlite), map[i].want, "SQLite code %d", map[i].sqlite);
}

/* file + WAL of session 1, by stat() here, independently of the store */
static uint64_t disk_bytes(void)
{
    char path[PATH_MAX + 8];
    struct stat st;
    uint64_t n = 0;

    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    if (stat(path, &st) == 0)
        n += (uint64_t)st.st_size;
    strcat(path, "-wal");
    if (stat(path, &st) == 0)
        n += (uint64_t)st.st_size;
    return n;
}

/*
 * The loop never waits on disk (store.h), sizes included: store_session_bytes() reads what the
 * writer published after its last commit, so removing the files behind the store's back does
 * not change it until the writer commits again.
 */
Test(store, session_bytes_are_published_not_stat)
{
    struct seen seen = {0};
    char err[256], path[PATH_MAX + 8];
    uv_loop_t loop;
    uint64_t at_ack;
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, done_cb, NULL, &seen, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    cr_assert_gt(store_catalog_bytes(s), 0);
    cr_assert_eq(store_start(s), 0);
    cr_assert_eq(store_session_bytes(s, 1), 0); /* nothing stored yet */

    struct store_job *j = store_job_new(STORE_OPEN, 1);
    j->u.open.name = strdup("sizes");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, 1);
    j->u.process.id = 1;
    j->u.process.rank = j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    j = store_job_new(STORE_OP, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("op");
    j->u.name.category = strdup("compute");
    store_enqueue(s, j);
    j = store_job_new(STORE_DEVICE, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("gpu:0");
    store_enqueue(s, j);
    store_enqueue(s, batch(500, 0));
    store_enqueue(s, flush(&seen));
    while (seen.flushes < 1)
        uv_run(&loop, UV_RUN_ONCE);
    at_ack = disk_bytes();
    cr_assert_gt(at_ack, 0);
    cr_assert_eq(store_session_bytes(s, 1), at_ack, "published %llu, on disk %llu",
                 (unsigned long long)store_session_bytes(s, 1), (unsigned long long)at_ack);

    /* gone from under the store (the writer is idle): the published size stands */
    snprintf(path, sizeof(path), "%s/sessions/1.db-wal", dir);
    unlink(path);
    cr_assert_eq(store_session_bytes(s, 1), at_ack, "store_session_bytes() read the disk");

    j = store_job_new(STORE_DELETE, 1);
    store_enqueue(s, j);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

/*
 * A row-format session large enough for its WAL to be checkpointed many
 * times while the writer goes on (several MiB of entries, a checkpoint asked
 * for every 1000 pages of WAL), then ended: its file holds every
 * entry and passes integrity_check, no WAL is left behind, and the size
 * published is the file's.
 */
Test(store, a_large_session_ends_with_its_wal_checkpointed_away)
{
    enum { BATCHES = 64, N = 4000 };
    struct seen seen = {0};
    char err[256], path[PATH_MAX + 8];
    struct stat st;
    uv_loop_t loop;
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, done_cb, NULL, &seen, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    store_set_format(s, STORE_FORMAT_ROWS);
    cr_assert_eq(store_start(s), 0);
    struct store_job *j = store_job_new(STORE_OPEN, 1);
    j->u.open.name = strdup("large");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, 1);
    j->u.process.id = 1;
    j->u.process.rank = j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    j = store_job_new(STORE_OP, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("op");
    j->u.name.category = strdup("compute");
    store_enqueue(s, j);
    j = store_job_new(STORE_DEVICE, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("gpu:0");
    store_enqueue(s, j);
    for (int b = 0; b < BATCHES; b++) {
        store_enqueue(s, batch(N, (uint64_t)b * N));
        if (b % 8 == 7) {
            store_enqueue(s, flush(&seen));
            while (seen.flushes < (b + 1) / 8)
                uv_run(&loop, UV_RUN_ONCE);
            cr_assert_eq(seen.rows_at_ack[seen.flushes - 1], (long long)(b + 1) * N);
        }
    }
    j = store_job_new(STORE_SESSION_END, 1);
    j->u.session_end.entries = BATCHES * N;
    store_enqueue(s, j);
    store_stop(s);
    snprintf(path, sizeof(path), "%s/sessions/1.db-wal", dir);
    cr_assert_neq(stat(path, &st), 0, "the ended session left its WAL behind");
    snprintf(path, sizeof(path), "%s/sessions/1.db", dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_gt(st.st_size, 4L << 20, "%lld bytes", (long long)st.st_size);
    cr_assert_eq(store_session_bytes(s, 1), (uint64_t)st.st_size, "published %llu, on disk %lld",
                 (unsigned long long)store_session_bytes(s, 1), (long long)st.st_size);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    cr_assert_eq(count_rows("SELECT count(*) FROM entries"), BATCHES * N);
    cr_assert_eq(count_rows("SELECT sum(dur_ns) FROM entries"),
                 /* each batch: 10 × N + 0 + 1 + ... + N-1 */
                 (long long)BATCHES * (10LL * N + (long long)N * (N - 1) / 2));
    cr_assert_eq(count_rows("SELECT count(*) FROM pragma_integrity_check WHERE integrity_check"
                            " = 'ok'"),
                 1);
}

/* Session 1 in the row format: its file, a process, an op and a device. */
static void open_session_rows(struct store *s)
{
    struct store_job *j = store_job_new(STORE_OPEN, 1);

    j->u.open.name = strdup("ckpt");
    store_enqueue(s, j);
    j = store_job_new(STORE_PROCESS, 1);
    j->u.process.id = 1;
    j->u.process.rank = j->u.process.world = j->u.process.pid = j->u.process.uid = -1;
    store_enqueue(s, j);
    j = store_job_new(STORE_OP, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("op");
    j->u.name.category = strdup("compute");
    store_enqueue(s, j);
    j = store_job_new(STORE_DEVICE, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("gpu:0");
    store_enqueue(s, j);
}

static void j_end(struct store *s, uint64_t entries)
{
    struct store_job *j = store_job_new(STORE_SESSION_END, 1);

    j->u.session_end.entries = entries;
    store_enqueue(s, j);
}

/*
 * The WAL of a busy session is copied back into its file by the
 * checkpointer thread while the writer goes on (store.c, CKPT_FRAMES): a
 * session writing several thousand pages of WAL has checkpoints done off the
 * writer, every ack still finds its entries committed, and the ended file
 * holds every entry, passes integrity_check, and has no WAL left behind.
 */
Test(store, the_wal_is_checkpointed_off_the_writer_thread)
{
    enum { BATCHES = 64, N = 4000 };
    struct seen seen = {0};
    char err[256], path[PATH_MAX + 8];
    struct stat st;
    uv_loop_t loop;
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, done_cb, NULL, &seen, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    store_set_format(s, STORE_FORMAT_ROWS);
    cr_assert_eq(store_start(s), 0);
    open_session_rows(s);
    for (int b = 0; b < BATCHES; b++) {
        store_enqueue(s, batch(N, (uint64_t)b * N));
        if (b % 8 == 7) {
            store_enqueue(s, flush(&seen));
            while (seen.flushes < (b + 1) / 8)
                uv_run(&loop, UV_RUN_ONCE);
            cr_assert_eq(seen.rows_at_ack[seen.flushes - 1], (long long)(b + 1) * N);
        }
    }
    j_end(s, BATCHES * N);
    store_stop(s);
    cr_assert_gt(store_checkpoints(s), 0, "no checkpoint was done off the writer thread");
    snprintf(path, sizeof(path), "%s/sessions/1.db-wal", dir);
    cr_assert_neq(stat(path, &st), 0, "the ended session left its WAL behind");
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    cr_assert_eq(count_rows("SELECT count(*) FROM entries"), BATCHES * N);
    cr_assert_eq(count_rows("SELECT sum(dur_ns) FROM entries"),
                 (long long)BATCHES * (10LL * N + (long long)N * (N - 1) / 2));
    cr_assert_eq(count_rows("SELECT count(*) FROM pragma_integrity_check WHERE integrity_check"
                            " = 'ok'"),
                 1);
}

struct outcome {
    int flushes;
    int rc[4];
    long long lost; /* entries of batches that came back not stored */
};

static void outcome_cb(struct store *s, struct store_job *job, void *data)
{
    struct outcome *o = data;

    (void)s;
    if (job->type == STORE_FLUSH && o->flushes < 4)
        o->rc[o->flushes++] = job->rc;
    else if (job->type == STORE_BATCH && job->rc < 0)
        o->lost += (long long)job->u.batch.b.n;
    store_job_free(job);
}

static void file_exec(int64_t sid, const char *sql)
{
    char path[PATH_MAX];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", dir, (long long)sid);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    sqlite3_close(db);
}

/*
 * The blocks format keeps a transaction's full blocks in memory until its
 * commit writes their rows. A commit that fails among them (a trigger the
 * test puts on the file refuses block rows past rowid 6000) rolls back, and
 * the blocks it held must go with it: the session goes on, and the file then
 * holds the first commit's entries and the last one's, each once, with
 * rowids 1 .. n.
 */
Test(store, a_commit_that_fails_among_its_full_blocks_drops_them)
{
    struct outcome o = {0};
    uv_loop_t loop;
    char err[256];
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/tcstore.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    uv_loop_init(&loop);
    struct store *s = store_new(&loop, dir, outcome_cb, NULL, &o, &rc, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    store_set_format(s, STORE_FORMAT_BLOCKS);
    cr_assert_eq(store_start(s), 0);
    open_session(s, 1);
    struct store_job *j = store_job_new(STORE_DEVICE, 1);
    j->u.name.id = 1;
    j->u.name.name = strdup("gpu:0");
    store_enqueue(s, j);
    store_enqueue(s, batch(5000, 0)); /* rowids 1 .. 5000: 4 full blocks and one of 904 */
    store_enqueue(s, flush(&o));
    while (o.flushes < 1)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(o.rc[0], 0);

    file_exec(1, "CREATE TRIGGER refuse BEFORE INSERT ON blocks WHEN NEW.id > 6000"
                 " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
    store_enqueue(s, batch(5000, 100000)); /* 5001 .. 10000: 4 blocks fill, rows 4097 .. */
    store_enqueue(s, flush(&o));
    while (o.flushes < 2)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_lt(o.rc[1], 0, "the refused commit was acked");
    cr_assert_eq(o.lost, 5000);

    file_exec(1, "DROP TRIGGER refuse");
    store_enqueue(s, batch(3000, 1000000)); /* 5001 .. 8000 again */
    store_enqueue(s, flush(&o));
    while (o.flushes < 3) /* an error again (the process lost entries), but these are stored */
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(o.lost, 5000);
    store_free(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);

    /* batch(n, base): start_ns base + i, dur_ns 10 + i */
    long long starts = 0;
    for (long long i = 0; i < 5000; i++)
        starts += i;
    for (long long i = 0; i < 3000; i++)
        starts += 1000000 + i;
    cr_assert_eq(file_query(1, "SELECT count(*) FROM entries"), 8000);
    cr_assert_eq(file_query(1, "SELECT sum(start_ns) FROM entries"), starts);
    cr_assert_eq(file_query(1, "SELECT count(*) FROM entries WHERE start_ns >= 100000"
                               " AND start_ns < 1000000"),
                 0, "entries of the refused commit are in the file");
    cr_assert_eq(file_query(1, "SELECT count(DISTINCT rowid) FROM entries WHERE rowid <= 8000"),
                 8000);
    cr_assert_eq(file_query(1, "SELECT sum(n) FROM blocks"), 8000);
    cr_assert_eq(file_query(1, "SELECT entries FROM agg_session"), 8000);
}
