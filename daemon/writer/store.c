/*
 * store.c — the storage writer's public face: its lifecycle, the jobs and
 * budgets the loop hands over, the figures and sizes it publishes, and the
 * one error path of every store file (store_check). See store.h for the
 * design and store_int.h for how the work is divided:
 *
 *   store_writer.c   the writer thread: its queue, its rounds, the done queue
 *   wsess.c          a session's file and transaction as the writer holds them
 *   store_apply.c    the rows a job writes in either format
 *   store_rows.c     entries in the rows format
 *   store_blocks.c   entries in the blocks format
 *   store_ckpt.c     the checkpointer thread
 *   store_catalog.c  the catalog, the data dir's lock and orphans
 *   store_recover.c  sessions the last run left live; writes a full disk deferred
 *
 * Every SQLite error is mapped to an errno and logged with sqlite3_errmsg()
 * in one place, store_check(); callers only pass the code on.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "batchpool.h"
#include "fault.h"
#include "log.h"
#include "map.h"
#include "store.h"
#include "store_catalog.h"
#include "store_ckpt.h"
#include "store_int.h"
#include "store_recover.h"
#include "store_writer.h"
#include "vtab.h"
#include "walvfs.h"
#include "sqlutil.h"

int store_error(struct store *s, int err, const char *what, const char *detail)
{
    log_error("storage: %s: %s", what, detail);
    pthread_mutex_lock(&s->q.mu);
    /* status shows what fits: a long path (what) is cut so that SQLite's message stays */
    snprintf(s->q.last_error, sizeof(s->q.last_error), "%.180s: %s", what, detail);
    pthread_mutex_unlock(&s->q.mu);
    return err;
}

int store_check(struct store *s, sqlite3 *db, int rc, const char *what)
{
    int err = sql_errno(rc);

    if (err == 0)
        return 0;
    /* a code of the daemon's own (out of memory while binding, say) has no message in db */
    return store_error(s, err, what,
                       db != NULL && sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errmsg(db)
                                                                      : sqlite3_errstr(rc));
}

int store_check_errno(struct store *s, sqlite3 *db, int err, const char *what)
{
    if (err >= 0)
        return 0;
    return store_error(s, err, what,
                       db != NULL && sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errmsg(db)
                                                                      : strerror(-err));
}

int store_exec(struct store *s, sqlite3 *db, const char *sql, const char *what)
{
    return store_check(s, db, sqlite3_exec(db, sql, NULL, NULL, NULL), what);
}

int store_step(struct store *s, sqlite3 *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);

    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return store_check(s, db, rc, what);
}

/*
 * The writer's connections. temp_store=MEMORY keeps the statement journals
 * of the aggregate flushes (multi-row statements inside a transaction) in
 * memory: in files they were a third of the writer's system calls, a 4 KiB
 * page and a 4-byte record each. An 8 MiB page cache (SQLite's default is
 * 2 MiB) holds a whole blocks transaction (store_writer.c: COMMIT_ENTRIES_BLOCKS entries,
 * ~3.4 MiB of blocks) with the aggregate tables' pages: with 2 MiB the cache
 * spilled and read its own pages back from the WAL. SQLite grows the cache
 * as pages are used, so a light session stays small. Opened through walvfs,
 * which writes a transaction's WAL frames in large writes, not two system
 * calls a page.
 */
int store_db_open(struct store *s, const char *path, sqlite3 **db)
{
    int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, walvfs_name());

    if (rc != SQLITE_OK || (rc = vtab_register(*db)) != SQLITE_OK)
        return store_check(s, *db, rc, path);
    sqlite3_busy_timeout(*db, 5000);
    return store_exec(s, *db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                      " PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
                      " PRAGMA cache_size=-8192;",
                      "set pragmas");
}

void store_session_path(const struct store *s, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/sessions/%lld.db", s->data_dir, (long long)id);
}

int store_configure(void)
{
    int rc = fault_configure(); /* before SQLite initialises: it may set the allocator */

    if (rc < 0)
        return rc;
    if (sqlite3_config(SQLITE_CONFIG_MULTITHREAD) != SQLITE_OK ||
        sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
        return -EBUSY;
    return 0;
}

/* What a session's file and its WAL take on disk: a stat() each (0 when absent). Never on the
 * loop thread once it runs: the writer, or start-up. */
static uint64_t store_disk_bytes(const struct store *s, int64_t id)
{
    char path[PATH_MAX + 8];
    uint64_t total = 0;
    struct stat st;

    store_session_path(s, id, path, PATH_MAX);
    if (stat(path, &st) == 0)
        total += (uint64_t)st.st_size;
    strcat(path, "-wal");
    if (stat(path, &st) == 0)
        total += (uint64_t)st.st_size;
    return total;
}

void store_publish_size(struct store *s, int64_t id)
{
    uint64_t bytes = store_disk_bytes(s, id), *v;

    pthread_mutex_lock(&s->sizes.mu);
    v = pairmap_upsert(&s->sizes.map, (uint64_t)id, 0, NULL);
    if (v != NULL)
        *v = bytes; /* out of memory: readers keep the last size published */
    pthread_mutex_unlock(&s->sizes.mu);
}

void store_publish_catalog(struct store *s)
{
    char path[PATH_MAX];
    struct stat st;

    snprintf(path, sizeof(path), "%s/catalog.db", s->data_dir);
    atomic_store(&s->sizes.catalog_bytes, stat(path, &st) == 0 ? (uint64_t)st.st_size : 0);
}

uint64_t store_session_bytes(struct store *s, int64_t id)
{
    uint64_t bytes, *v;

    pthread_mutex_lock(&s->sizes.mu);
    v = pairmap_get(&s->sizes.map, (uint64_t)id, 0);
    bytes = v != NULL ? *v : 0;
    pthread_mutex_unlock(&s->sizes.mu);
    return bytes;
}

uint64_t store_catalog_bytes(const struct store *s)
{
    return atomic_load(&s->sizes.catalog_bytes);
}

/* ---- jobs ---------------------------------------------------------------- */

struct store_job *store_job_new(enum store_job_type type, int64_t session_id)
{
    struct store_job *job = calloc(1, sizeof(*job));

    if (job != NULL) {
        job->type = type;
        job->session_id = session_id;
    }
    return job;
}

struct store_budget *store_budget_new(void)
{
    struct store_budget *b = calloc(1, sizeof(*b));

    if (b != NULL)
        atomic_init(&b->refs, 1);
    return b;
}

void store_budget_unref(struct store_budget *b)
{
    if (b != NULL && atomic_fetch_sub(&b->refs, 1) == 1)
        free(b);
}

void store_job_charge(struct store_job *job, struct store_budget *b)
{
    atomic_fetch_add(&b->refs, 1);
    job->budget = b;
}

uint64_t store_job_cost(const struct store_job *job)
{
    uint64_t n = sizeof(*job);

    switch (job->type) {
    case STORE_OPEN:
        return n + STORE_OPEN_COST;
    case STORE_OP:
    case STORE_DEVICE:
        n += job->u.name.name ? strlen(job->u.name.name) + 1 : 0;
        return n + (job->u.name.category ? strlen(job->u.name.category) + 1 : 0);
    case STORE_META:
        /* A pair is a row to write: it counts as at least STORE_ROW_COST, however small. */
        for (size_t i = 0; i < job->u.meta.n; i++) {
            const struct proto_kv *kv = &job->u.meta.kv[i];
            n += sizeof(*kv) + strlen(kv->key) + 1 + STORE_ROW_COST;
            if (kv->type == PROTO_V_STR)
                n += strlen(kv->v.s) + 1;
        }
        return n;
    case STORE_BATCH:
        return n + job->u.batch.b.n * (sizeof(struct proto_entry) + 2 * sizeof(uint32_t)) +
               job->u.batch.b.blob_len;
    case STORE_COUNTERS: /* a row per op */
        return n + job->u.counters.k.n_ops * (sizeof(struct proto_opdrop) + STORE_ROW_COST);
    default:
        return n;
    }
}

void store_job_uncharge(struct store *s, struct store_job *job)
{
    atomic_fetch_sub(&s->queued_bytes, job->cost);
    if (job->budget != NULL) {
        atomic_fetch_sub(&job->budget->bytes, job->cost);
        store_budget_unref(job->budget);
        job->budget = NULL;
    }
    job->cost = 0;
}

void store_job_free(struct store_job *job)
{
    if (job == NULL)
        return;
    store_budget_unref(job->budget);
    switch (job->type) {
    case STORE_OPEN:
        free(job->u.open.name);
        break;
    case STORE_PROCESS:
        free(job->u.process.host);
        free(job->u.process.device);
        break;
    case STORE_OP:
    case STORE_DEVICE:
        free(job->u.name.name);
        free(job->u.name.category);
        break;
    case STORE_META:
        proto_kv_free(job->u.meta.kv, job->u.meta.n);
        break;
    case STORE_BATCH:
        batchpool_put_batch(&job->u.batch.b, job->u.batch.dev_ids, job->u.batch.shape_ids,
                            job->u.batch.ids_cap);
        break;
    case STORE_COUNTERS:
        free(job->u.counters.k.ops);
        break;
    default:
        break;
    }
    free(job);
}

uint64_t store_job_entries(const struct store_job *job)
{
    return job->type == STORE_BATCH ? job->u.batch.b.n : 0;
}

uint64_t store_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- lifecycle ----------------------------------------------------------- */

struct store *store_new(uv_loop_t *loop, const char *data_dir, store_done_cb done,
                        store_progress_cb progress, void *data, int *err, char *errbuf,
                        size_t errlen)
{
    struct store *s = calloc(1, sizeof(*s));
    pthread_condattr_t ca;
    int rc = -ENOMEM;

    if (s == NULL || (s->data_dir = strdup(data_dir)) == NULL)
        goto fail;
    s->loop = loop;
    s->cat.lock_fd = -1;
    s->done_cb = done;
    s->progress_cb = progress;
    s->cb_data = data;
    s->wr.ready_tail = &s->wr.ready;
    s->wr.finished_tail = &s->wr.finished;
    s->wr.max_open = STORE_DEFAULT_MAX_OPEN;
    s->wr.commit_ms = STORE_DEFAULT_COMMIT_MS;
    s->wr.format = STORE_FORMAT_BLOCKS;
    pthread_mutex_init(&s->q.mu, NULL);
    pthread_mutex_init(&s->sizes.mu, NULL);
    store_ckpt_init(s);
    pairmap_init(&s->sizes.map);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->q.cv, &ca);
    pthread_cond_init(&s->q.ended_cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = store_catalog_open(s, errbuf, errlen)) < 0)
        goto fail;
    store_publish_catalog(s);
    if ((rc = uv_async_init(loop, &s->async, store_writer_async_cb)) < 0)
        goto fail;
    s->async.data = s;
    return s;
fail:
    if (rc == -ENOMEM)
        snprintf(errbuf, errlen, "out of memory");
    *err = rc;
    if (s != NULL) {
        sqlite3_close(s->cat.db);
        if (s->cat.lock_fd >= 0)
            close(s->cat.lock_fd);
        store_recover_free(s);
        free(s->data_dir);
        free(s);
    }
    return NULL;
}

void store_set_limits(struct store *s, size_t max_open, uint64_t commit_ms)
{
    s->wr.max_open = max_open < 2 ? 2 : max_open;
    s->wr.commit_ms = commit_ms;
}

void store_set_format(struct store *s, enum store_format format)
{
    s->wr.format = format;
}

int store_start(struct store *s)
{
    int rc;

    /* Without the checkpointer (no memory, no thread), the writer checkpoints itself. */
    store_ckpt_start(s);
    if ((rc = store_writer_start(s)) < 0) {
        store_ckpt_stop(s);
        return rc;
    }
    return 0;
}

void store_stop(struct store *s)
{
    if (s == NULL || !s->wr.started)
        return;
    store_writer_stop(s);
    store_ckpt_stop(s);
    /* Hand back what completed during the drain (acks of the last flushes). */
    store_writer_async_cb(&s->async);
}

static void store_close_cb(uv_handle_t *handle)
{
    struct store *s = handle->data;

    pthread_mutex_destroy(&s->q.mu);
    pthread_mutex_destroy(&s->sizes.mu);
    store_ckpt_deinit(s);
    pthread_cond_destroy(&s->q.cv);
    pthread_cond_destroy(&s->q.ended_cv);
    free(s->q.ending);
    pairmap_deinit(&s->sizes.map);
    free(s->data_dir);
    free(s);
}

void store_free(struct store *s)
{
    struct store_job *job, *next;

    if (s == NULL)
        return;
    store_stop(s);
    for (job = s->q.head; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    for (job = s->q.done; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    sqlite3_close(s->cat.db);
    store_recover_free(s);
    if (s->cat.lock_fd >= 0)
        close(s->cat.lock_fd); /* releases the data dir */
    /* The struct holds the async handle: it is freed in the close callback. */
    uv_close((uv_handle_t *)&s->async, store_close_cb);
}

uint64_t store_stored(const struct store *s)
{
    return atomic_load(&s->stored);
}

uint64_t store_queued(const struct store *s)
{
    return atomic_load(&s->queued);
}

uint64_t store_queued_bytes(const struct store *s)
{
    return atomic_load(&s->queued_bytes);
}

uint64_t store_queue_jobs(const struct store *s)
{
    return atomic_load(&s->jobs);
}

uint64_t store_failed(const struct store *s)
{
    return atomic_load(&s->failed);
}

void store_last_error(struct store *s, char *buf, size_t len)
{
    pthread_mutex_lock(&s->q.mu);
    snprintf(buf, len, "%s", s->q.last_error);
    pthread_mutex_unlock(&s->q.mu);
}

uint64_t store_orphans(const struct store *s)
{
    return atomic_load(&s->orphans);
}

uint64_t store_checkpoints(const struct store *s)
{
    return atomic_load(&s->ckpt.checkpoints);
}
