/*
 * store.c — the storage writer thread; see store.h for the design.
 *
 * Every SQLite error is mapped to an errno and logged with sqlite3_errmsg()
 * in one place, store_check(); callers only pass the code on.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "agg.h"
#include "batchpool.h"
#include "block.h"
#include "log.h"
#include "map.h"
#include "ranks.h"
#include "schema.h"
#include "store.h"
#include "vtab.h"
#include "walvfs.h"

#define QUANTUM_ENTRIES 4096  /* entries of one session applied per round */
#define COMMIT_ENTRIES  65536 /* a transaction commits at this many entries */
/*
 * In the blocks format a transaction may hold more: an entry costs a few
 * bytes of a block, and what a commit costs beyond the entries (the
 * aggregates' touched histogram chunks and rank rows) is then paid for that
 * many entries. What the daemon holds grows with it: the rank aggregates
 * keep each compute interval of the open transaction until its commit
 * (ranks.h, exposed communication), ~40 bytes per entry, beside the queue
 * (~100 bytes per queued entry, bounded by main.c's DEFAULT_QUEUE_HIGH).
 * 256 Ki with a queue of 128 Ki entries: in the 16 x 1 M ingest benchmark
 * the daemon's peak RSS was 49 MiB, for 0.36 us of writer CPU per entry;
 * 128 Ki with a queue of 256 Ki took 57 MiB and 0.42 us, 512 Ki 60 MiB and
 * no less CPU, 1 Mi 76 MiB (docs/BENCHMARKS.md, "Writer storage and stalls").
 */
#define COMMIT_ENTRIES_BLOCKS (1u << 18)
/*
 * Checkpoints (copying a session's WAL back into its file) run on a thread of
 * their own, so the writer never stalls on them: it asks for one after a
 * commit that leaves CKPT_FRAMES more pages in the WAL than its last request
 * saw. A WAL only starts over when a transaction begins with every page of it
 * copied. A blocks transaction touches the file only at its commit
 * (wsess_block_full), which leaves the checkpointer the time to copy it all;
 * a row-format writer that never pauses rarely gives it that. At
 * CKPT_SYNC_FRAMES the writer copies what is left itself (little, the
 * checkpointer having done the rest), so the WAL stays under
 * ~CKPT_SYNC_FRAMES pages.
 */
#define CKPT_FRAMES      1000
#define CKPT_SYNC_FRAMES 8000
#define ENTRY_ROWS       32         /* rows per multi-row INSERT */
#define SHAPE_NONE       UINT64_MAX /* no shapes row (shape_product never gives it) */

/*
 * What the writer holds for one session it has jobs for: its queue, the jobs
 * of its open transaction, what it lost, and (while open) its file with the
 * statements prepared once. The file may be closed while the session lives
 * (least recently used, past max_open); the rest stays until the session
 * ends or is deleted.
 */
struct wsess {
    struct store *store;
    struct wsess *next;       /* s->sess, most recently used first */
    struct wsess *ready_next; /* s->ready: sessions with queued jobs, in turn */
    bool ready, ended;
    int64_t id;
    struct store_job *q, **q_tail;             /* queued, in order */
    struct store_job *applied, **applied_tail; /* applied in the open transaction */
    bool flush_waiting;                        /* a flush is among them */
    bool broken;          /* something other than entries was lost: nothing more is stored */
    uint64_t txn_entries; /* entries in the open transaction */
    uint64_t txn_started; /* ms (CLOCK_MONOTONIC) */
    uint64_t committed;   /* entries committed to the file by this run */
    uint64_t lost_total;  /* entries lost to storage errors */
    struct u32map lost;   /* process id → entries that failed to be stored */

    /* the open file: db NULL while closed */
    sqlite3 *db;
    bool in_txn;
    int ckpt_asked; /* WAL pages when a checkpoint was last asked for */
    /* the checkpointer's: guarded by store.ckpt_mu, ckpt_db used only while ckpt_busy */
    struct wsess *ckpt_next; /* store.ckpt_want, while ckpt_queued */
    bool ckpt_queued;
    sqlite3 *ckpt_db; /* its own connection to the file, opened at the first checkpoint */
    struct agg *agg;  /* report aggregates, updated with every insert */
    /*
     * shapes.elements by shapes.id (ids are the loop's, session_shape);
     * SHAPE_NONE for an id the file has no row of yet.
     */
    uint64_t *shape_elements;
    size_t shape_cap; /* ids shape_elements has room for: 0 .. shape_cap - 1 */
    sqlite3_stmt *ins_shape;
    sqlite3_stmt *ins_entries; /* ENTRY_ROWS rows at once */
    sqlite3_stmt *ins_entry, *ins_op, *ins_dev, *ins_proc, *end_proc, *ins_meta;
    sqlite3_stmt *ins_ext;  /* NULL until the session's first ext map (see store_ext_row) */
    struct ranks *ranks;    /* the rank aggregates (ranks.h) */
    sqlite3_stmt *ins_link; /* NULL until the session's first link (see store_link_row) */

    /* the blocks format (info.format 2): entries go into blk, one row per block */
    bool blocks;
    struct block_enc blk; /* the block being filled: rowids blk_first .. */
    int64_t blk_first;
    uint32_t blk_written; /* of its entries, how many its row in the file holds */
    struct wblock *full;  /* blocks filled in the transaction, rows written at its commit */
    size_t n_full;        /* full[n_full ..] are spare (reset) encoders, buffers kept */
    size_t full_cap;
    int64_t next_id; /* the rowid of the next entry */
    sqlite3_stmt *ins_block;
};

/* A block filled in the open transaction: its row is written at the commit. */
struct wblock {
    struct block_enc enc;
    int64_t first; /* its first rowid */
};

struct store {
    uv_loop_t *loop;
    char *data_dir;
    sqlite3 *catalog;
    int lock_fd;
    int64_t max_file_id; /* largest id of a file found in sessions/ at start */

    /* writer thread only */
    struct wsess *sess;                          /* every session with state */
    struct wsess *ready, **ready_tail;           /* round-robin of sessions with queued jobs */
    struct store_job *finished, **finished_tail; /* completed, not yet handed back */
    size_t n_open, max_open;
    uint64_t commit_ms;
    enum store_format format; /* of new session files */

    pthread_t thread;
    bool started;

    /* the checkpointer thread (ckpt_thread): sessions whose WAL to copy back */
    pthread_t ckpt_thread;
    bool ckpt_started, ckpt_stopping;
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;                    /* a request came, or stopping */
    pthread_cond_t ckpt_idle_cv;               /* a checkpoint ended */
    struct wsess *ckpt_want, **ckpt_want_tail; /* sessions asked for, in order */
    struct wsess *ckpt_busy;                   /* the session being checkpointed now, NULL: none */
    _Atomic uint64_t checkpoints;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct store_job *head, *tail; /* the queue, guarded by mu */
    struct store_job *done;        /* completed jobs, guarded by mu */
    bool stopping;
    char last_error[256]; /* guarded by mu */

    /* Sizes on disk, published by the writer after each commit, close and delete (and by
     * store_catalog_load at start-up), so that the loop reads them without touching the disk. */
    pthread_mutex_t sizes_mu;
    struct pairmap sizes; /* (session id, 0) → bytes of its file and WAL; guarded by sizes_mu */
    _Atomic uint64_t catalog_bytes;

    uv_async_t async;
    store_done_cb done_cb;
    store_progress_cb progress_cb;
    void *cb_data;

    _Atomic uint64_t stored, queued, jobs, failed, orphans, queued_bytes;
};

int store_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    default:
        return -EIO;
    }
}

/* Logs a failed step once and keeps it for status; returns err. */
static int store_error(struct store *s, int err, const char *what, const char *detail)
{
    log_error("storage: %s: %s", what, detail);
    pthread_mutex_lock(&s->mu);
    /* status shows what fits: a long path (what) is cut so that SQLite's message stays */
    snprintf(s->last_error, sizeof(s->last_error), "%.180s: %s", what, detail);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* An SQLite result code: 0 for OK, DONE and ROW, else logged and mapped by store_errno(). */
static int store_check(struct store *s, sqlite3 *db, int rc, const char *what)
{
    int err = store_errno(rc);

    if (err == 0)
        return 0;
    return store_error(s, err, what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/* A negative errno from a module over db (agg): logged with SQLite's message when it has one. */
static int store_check_errno(struct store *s, sqlite3 *db, int err, const char *what)
{
    if (err >= 0)
        return 0;
    return store_error(s, err, what,
                       db != NULL && sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errmsg(db)
                                                                      : strerror(-err));
}

static int store_exec(struct store *s, sqlite3 *db, const char *sql, const char *what)
{
    return store_check(s, db, sqlite3_exec(db, sql, NULL, NULL, NULL), what);
}

void store_session_path(const struct store *s, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/sessions/%lld.db", s->data_dir, (long long)id);
}

int store_configure(void)
{
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

/* Stats the session's files and publishes their size for store_session_bytes(). */
static void store_publish_size(struct store *s, int64_t id)
{
    uint64_t bytes = store_disk_bytes(s, id), *v;

    pthread_mutex_lock(&s->sizes_mu);
    v = pairmap_upsert(&s->sizes, (uint64_t)id, 0, NULL);
    if (v != NULL)
        *v = bytes; /* out of memory: readers keep the last size published */
    pthread_mutex_unlock(&s->sizes_mu);
}

static void store_publish_catalog(struct store *s)
{
    char path[PATH_MAX];
    struct stat st;

    snprintf(path, sizeof(path), "%s/catalog.db", s->data_dir);
    atomic_store(&s->catalog_bytes, stat(path, &st) == 0 ? (uint64_t)st.st_size : 0);
}

uint64_t store_session_bytes(struct store *s, int64_t id)
{
    uint64_t bytes, *v;

    pthread_mutex_lock(&s->sizes_mu);
    v = pairmap_get(&s->sizes, (uint64_t)id, 0);
    bytes = v != NULL ? *v : 0;
    pthread_mutex_unlock(&s->sizes_mu);
    return bytes;
}

uint64_t store_catalog_bytes(const struct store *s)
{
    return atomic_load(&s->catalog_bytes);
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

/* Bytes a job holds in memory while queued: what backpressure counts. */
static uint64_t job_cost(const struct store_job *job)
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
    default:
        return n;
    }
}

/* The writer applied the job: what it cost is no longer queued. */
static void job_uncharge(struct store *s, struct store_job *job)
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
    default:
        break;
    }
    free(job);
}

/* ---- session files ------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the checkpointer ---------------------------------------------------- */

/*
 * Copies a session's WAL back into its file on a connection of its own
 * (PASSIVE: never blocks the writer, copies what no reader still needs),
 * opened at the session's first checkpoint and kept until ckpt_close(),
 * which the writer calls before it closes its own connection: the last
 * connection's close checkpoints and removes the WAL, and that must be the
 * writer's.
 */
static void ckpt_run(struct store *s, struct wsess *w)
{
    char path[PATH_MAX];
    int rc = SQLITE_OK;

    if (w->ckpt_db == NULL) {
        store_session_path(s, w->id, path, sizeof(path));
        rc = sqlite3_open_v2(path, &w->ckpt_db, SQLITE_OPEN_READWRITE, NULL);
        /* a read opens the WAL: a connection that has read nothing has none to checkpoint */
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(w->ckpt_db, "PRAGMA schema_version", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_wal_checkpoint_v2(w->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_OK) {
        atomic_fetch_add(&s->checkpoints, 1);
    } else if (rc != SQLITE_BUSY) { /* BUSY: the writer checkpoints itself, or later */
        log_warn("storage: checkpoint of session %lld: %s", (long long)w->id,
                 w->ckpt_db != NULL ? sqlite3_errmsg(w->ckpt_db) : sqlite3_errstr(rc));
        sqlite3_close(w->ckpt_db); /* opened again next time */
        w->ckpt_db = NULL;
    }
}

static void *ckpt_thread(void *arg)
{
    struct store *s = arg;

    pthread_mutex_lock(&s->ckpt_mu);
    for (;;) {
        struct wsess *w;

        while (s->ckpt_want == NULL && !s->ckpt_stopping)
            pthread_cond_wait(&s->ckpt_cv, &s->ckpt_mu);
        if ((w = s->ckpt_want) == NULL)
            break;
        if ((s->ckpt_want = w->ckpt_next) == NULL)
            s->ckpt_want_tail = &s->ckpt_want;
        w->ckpt_queued = false;
        s->ckpt_busy = w;
        pthread_mutex_unlock(&s->ckpt_mu);
        ckpt_run(s, w);
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_busy = NULL;
        pthread_cond_broadcast(&s->ckpt_idle_cv);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    return NULL;
}

/* Writer: asks for a checkpoint of w's file (once while it waits). */
static void ckpt_ask(struct store *s, struct wsess *w)
{
    if (!s->ckpt_started)
        return;
    pthread_mutex_lock(&s->ckpt_mu);
    if (!w->ckpt_queued && !s->ckpt_stopping) {
        w->ckpt_queued = true;
        w->ckpt_next = NULL;
        *s->ckpt_want_tail = w;
        s->ckpt_want_tail = &w->ckpt_next;
        pthread_cond_signal(&s->ckpt_cv);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
}

/* Writer: no checkpoint of w's file is asked for or running when this returns. */
static void ckpt_forget(struct store *s, struct wsess *w)
{
    if (!s->ckpt_started)
        return;
    pthread_mutex_lock(&s->ckpt_mu);
    if (w->ckpt_queued) {
        struct wsess **pp = &s->ckpt_want;

        while (*pp != w)
            pp = &(*pp)->ckpt_next;
        if ((*pp = w->ckpt_next) == NULL)
            s->ckpt_want_tail = pp;
        w->ckpt_queued = false;
    }
    while (s->ckpt_busy == w)
        pthread_cond_wait(&s->ckpt_idle_cv, &s->ckpt_mu);
    pthread_mutex_unlock(&s->ckpt_mu);
}

/* Writer, before closing w's file: ckpt_forget(), and the checkpointer's connection closed. */
static void ckpt_close(struct store *s, struct wsess *w)
{
    ckpt_forget(s, w);
    sqlite3_close(w->ckpt_db); /* the checkpointer no longer touches it */
    w->ckpt_db = NULL;
}

/*
 * After each commit on a session file (sqlite3_wal_hook; it replaces SQLite's
 * own checkpoint every 1000 pages): asks the checkpointer to copy the WAL
 * back every CKPT_FRAMES pages; past CKPT_SYNC_FRAMES copies what is left
 * here, so that the next transaction starts the WAL over.
 */
static int wsess_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct wsess *w = arg;
    struct store *s = w->store;

    if (frames < w->ckpt_asked) /* the WAL started over */
        w->ckpt_asked = 0;
    if (frames >= CKPT_SYNC_FRAMES || (!s->ckpt_started && frames >= CKPT_FRAMES)) {
        ckpt_forget(s, w);
        if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK)
            w->ckpt_asked = 0;
    } else if (frames - w->ckpt_asked >= CKPT_FRAMES) {
        ckpt_ask(s, w);
        w->ckpt_asked = frames;
    }
    return SQLITE_OK;
}

static void wsess_file_close(struct store *s, struct wsess *w)
{
    if (w->db == NULL)
        return;
    free(w->shape_elements);
    w->shape_elements = NULL;
    w->shape_cap = 0;
    agg_free(w->agg);
    w->agg = NULL;
    ranks_free(w->ranks);
    w->ranks = NULL;
    sqlite3_finalize(w->ins_shape);
    sqlite3_finalize(w->ins_entries);
    sqlite3_finalize(w->ins_entry);
    sqlite3_finalize(w->ins_op);
    sqlite3_finalize(w->ins_dev);
    sqlite3_finalize(w->ins_proc);
    sqlite3_finalize(w->end_proc);
    sqlite3_finalize(w->ins_meta);
    sqlite3_finalize(w->ins_ext);
    sqlite3_finalize(w->ins_link);
    w->ins_link = NULL;
    sqlite3_finalize(w->ins_block);
    w->ins_block = NULL;
    block_enc_deinit(&w->blk);
    for (size_t i = 0; i < w->full_cap; i++)
        block_enc_deinit(&w->full[i].enc);
    free(w->full);
    w->full = NULL;
    w->n_full = w->full_cap = 0;
    w->blocks = false;
    w->ins_shape = w->ins_entries = w->ins_entry = w->ins_op = NULL;
    w->ins_dev = w->ins_proc = w->end_proc = w->ins_meta = w->ins_ext = NULL;
    ckpt_close(s, w); /* the last connection's close checkpoints, and removes the WAL */
    sqlite3_close(w->db);
    w->db = NULL;
    w->in_txn = false;
    s->n_open--;
    store_publish_size(s, w->id); /* the close checkpointed the WAL away */
}

/* INSERT INTO entries(...) VALUES (9 ?), ... ENTRY_ROWS times. */
static int wsess_prepare_multi(struct store *s, struct wsess *w)
{
    char sql[64 + ENTRY_ROWS * 24] = "INSERT INTO entries(process_id, step, op_id, device_id,"
                                     " start_ns, dur_ns, elements, mem_bytes, shape_id) VALUES ";
    int rc;

    for (int k = 0; k < ENTRY_ROWS; k++)
        strcat(sql, k ? ",(?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?)");
    rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->ins_entries, NULL);
    return rc == SQLITE_OK ? 0 : store_check(s, w->db, rc, "prepare");
}

static int wsess_prepare(struct store *s, struct wsess *w)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        {offsetof(struct wsess, ins_entry),
         "INSERT INTO entries(process_id, step, op_id, device_id, start_ns, dur_ns, elements,"
         " mem_bytes, shape_id) VALUES (?,?,?,?,?,?,?,?,?)"},
        {offsetof(struct wsess, ins_shape),
         "INSERT INTO shapes(id, out_shape, in_shapes, elements) VALUES (?,?,?,?)"},
        {offsetof(struct wsess, ins_op), "INSERT INTO ops(id, name, category) VALUES (?,?,?)"},
        {offsetof(struct wsess, ins_dev), "INSERT INTO devices(id, name) VALUES (?,?)"},
        {offsetof(struct wsess, ins_proc),
         "INSERT INTO processes(id, rank, world, pid, uid, host, device, started_ns,"
         " claimed_pid) VALUES (?,?,?,?,?,?,?,?,?)"},
        {offsetof(struct wsess, end_proc),
         "UPDATE processes SET ended_ns = ?, bye = ?, dropped = ? WHERE id = ?"},
        {offsetof(struct wsess, ins_meta),
         "INSERT OR REPLACE INTO meta(process_id, key, value) VALUES (?,?,?)"},
    };

    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)w + stmts[i].off);
        int rc;

        if (w->blocks && stmts[i].off == offsetof(struct wsess, ins_entry))
            continue; /* entries go into blocks */
        rc = sqlite3_prepare_v3(w->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    return 0;
}

/*
 * The writer's connections. temp_store=MEMORY keeps the statement journals
 * of the aggregate flushes (multi-row statements inside a transaction) in
 * memory: in files they were a third of the writer's system calls, a 4 KiB
 * page and a 4-byte record each. An 8 MiB page cache (SQLite's default is
 * 2 MiB) holds a whole blocks transaction (COMMIT_ENTRIES_BLOCKS entries,
 * ~3.4 MiB of blocks) with the aggregate tables' pages: with 2 MiB the cache
 * spilled and read its own pages back from the WAL. SQLite grows the cache
 * as pages are used, so a light session stays small. Opened through walvfs,
 * which writes a transaction's WAL frames in large writes, not two system
 * calls a page.
 */
static int db_open(struct store *s, const char *path, sqlite3 **db)
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

/* Room for shape ids up to id (grown by doubling), new ones SHAPE_NONE. 0 or -ENOMEM. */
static int wsess_shapes_room(struct wsess *w, size_t id)
{
    size_t cap = w->shape_cap ? w->shape_cap : 64;
    uint64_t *p;

    if (id < w->shape_cap)
        return 0;
    while (cap <= id)
        cap *= 2;
    if ((p = realloc(w->shape_elements, cap * sizeof(*p))) == NULL)
        return -ENOMEM;
    for (size_t i = w->shape_cap; i < cap; i++)
        p[i] = SHAPE_NONE;
    w->shape_elements = p;
    w->shape_cap = cap;
    return 0;
}

/*
 * The shape ids the file holds rows of, with their elements: on opening a
 * file, and after a rollback (which took back the rows it had added).
 */
static int wsess_load_shapes(struct store *s, struct wsess *w)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(w->db, "SELECT id, elements FROM shapes", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "load shapes");
    for (size_t i = 0; i < w->shape_cap; i++)
        w->shape_elements[i] = SHAPE_NONE;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);

        if (id <= 0 || id > UINT32_MAX) {
            rc = SQLITE_CORRUPT;
            break;
        }
        if (wsess_shapes_room(w, (size_t)id) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        w->shape_elements[id] = (uint64_t)sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return store_check(s, w->db, rc, "load shapes");
}

/*
 * The blocks format: the block the file ends with goes back into memory
 * when it is not full, so that entries go on filling it (after reopening the
 * file, and after a rollback: what the file holds is what was committed);
 * the next rowid follows the file's last.
 */
static int step_reset(struct store *s, sqlite3 *db, sqlite3_stmt *st, const char *what);
static int64_t file_int(sqlite3 *db, const char *sql, int64_t def);

static int wsess_blocks_resume(struct store *s, struct wsess *w)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(w->db, "SELECT id, n, data FROM blocks ORDER BY id DESC LIMIT 1",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "read the last block");
    block_enc_reset(&w->blk);
    w->next_id = w->blk_first = 1;
    w->blk_written = 0;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);

        w->next_id = w->blk_first = id + n;
        if (n > 0 && n < BLOCK_ENTRIES) {
            if (block_enc_load(&w->blk, sqlite3_column_blob(st, 2),
                               (size_t)sqlite3_column_bytes(st, 2), (uint32_t)n) < 0) {
                sqlite3_finalize(st);
                return store_check(s, NULL, SQLITE_CORRUPT, "read the last block");
            }
            w->blk_first = id;
            w->blk_written = (uint32_t)n;
        }
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return store_check(s, w->db, rc, "read the last block");
}

/* Which format an opened file is in; for the blocks format, the statement and the last block. */
static int wsess_blocks_open(struct store *s, struct wsess *w, bool create)
{
    int rc;

    if (create)
        w->blocks = s->format == STORE_FORMAT_BLOCKS;
    else
        w->blocks = file_int(w->db, "SELECT value FROM info WHERE key = 'format'", 1) ==
                    STORE_FORMAT_BLOCKS;
    if (!w->blocks)
        return 0;
    block_enc_init(&w->blk);
    rc = sqlite3_prepare_v3(w->db, "INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?,?,?,?)", -1,
                            SQLITE_PREPARE_PERSISTENT, &w->ins_block, NULL);
    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "prepare");
    return wsess_blocks_resume(s, w);
}

/* Writes (or rewrites) the row of block b, whose first rowid is first. */
static int wsess_block_row(struct store *s, struct wsess *w, const struct block_enc *b,
                           int64_t first)
{
    const struct block_stats *bs = &b->stats;
    sqlite3_stmt *st = w->ins_block;
    uint8_t restarts[4 * BLOCK_RESTARTS];
    uint32_t nr = block_restarts(b->n);

    for (uint32_t k = 0; k < nr; k++) /* little-endian, whatever the host */
        for (int j = 0; j < 4; j++)
            restarts[4 * k + (uint32_t)j] = (uint8_t)(b->restart[k] >> (8 * j));
    sqlite3_bind_int64(st, 1, first);
    sqlite3_bind_int64(st, 2, b->n);
    sqlite3_bind_int64(st, 3, bs->min_start);
    sqlite3_bind_int64(st, 4, bs->max_start);
    sqlite3_bind_int64(st, 5, bs->min_proc);
    sqlite3_bind_int64(st, 6, bs->max_proc);
    sqlite3_bind_int64(st, 7, (int64_t)bs->proc_mask);
    sqlite3_bind_int64(st, 8, (int64_t)bs->op_mask);
    sqlite3_bind_blob(st, 9, restarts, (int)(4 * nr), SQLITE_STATIC);
    sqlite3_bind_blob(st, 10, b->buf, (int)b->len, SQLITE_STATIC);
    return step_reset(s, w->db, st, "write block") < 0 ? -EIO : 0;
}

/* The blocks filled in the transaction are written, or rolled back: their encoders become spares.
 */
static void wsess_blocks_drop(struct wsess *w)
{
    for (size_t i = 0; i < w->n_full; i++)
        block_enc_reset(&w->full[i].enc);
    w->n_full = 0;
}

/*
 * At the commit: the rows of the blocks filled in the transaction, then the
 * row of the block being filled when it has entries its row lacks.
 */
static int wsess_block_write(struct store *s, struct wsess *w)
{
    for (size_t i = 0; i < w->n_full; i++)
        if (wsess_block_row(s, w, &w->full[i].enc, w->full[i].first) < 0)
            return -EIO; /* the rollback drops them (wsess_blocks_drop) */
    wsess_blocks_drop(w);
    if (w->blk.n == w->blk_written)
        return 0;
    if (wsess_block_row(s, w, &w->blk, w->blk_first) < 0)
        return -EIO;
    w->blk_written = w->blk.n;
    return 0;
}

/*
 * The block being filled is full: it waits for the commit with the others
 * (the transaction reads and writes the file only at its commit, which is
 * what lets the checkpointer copy the whole WAL back in between, and the WAL
 * start over), and a spare encoder takes its place. 0 or -ENOMEM.
 */
static int wsess_block_full(struct wsess *w)
{
    struct block_enc next;

    if (w->n_full == w->full_cap) {
        size_t cap = w->full_cap ? 2 * w->full_cap : 16;
        struct wblock *p = realloc(w->full, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        for (size_t i = w->full_cap; i < cap; i++)
            block_enc_init(&p[i].enc);
        w->full = p;
        w->full_cap = cap;
    }
    next = w->full[w->n_full].enc;
    w->full[w->n_full].enc = w->blk;
    w->full[w->n_full].first = w->blk_first;
    w->n_full++;
    w->blk = next;
    block_enc_reset(&w->blk);
    return 0;
}

/*
 * Closes the least recently used open file other than keep, committing its
 * transaction first (which completes its applied jobs). False when none is open.
 */
static void wsess_commit(struct store *s, struct wsess *w);
static void wsess_finish_ranks(struct store *s, struct wsess *w);

static bool store_evict(struct store *s, const struct wsess *keep)
{
    struct wsess *victim = NULL;

    for (struct wsess *w = s->sess; w != NULL; w = w->next)
        if (w->db != NULL && w != keep)
            victim = w; /* the list is most recently used first */
    if (victim == NULL)
        return false;
    wsess_commit(s, victim); /* the rank aggregates save what reopening needs (ranks_load) */
    wsess_file_close(s, victim);
    return true;
}

/* Checkpoints go through wsess_wal_hook. True. */
static bool wsess_hook(struct wsess *w)
{
    w->ckpt_asked = 0;
    sqlite3_wal_hook(w->db, wsess_wal_hook, w);
    return true;
}

/* Opens a session's file (creating the schema); an existing one only unless create. */
static int wsess_file_open(struct store *s, struct wsess *w, bool create)
{
    char path[PATH_MAX];

    if (w->db != NULL)
        return 0;
    store_session_path(s, w->id, path, sizeof(path));
    if (!create && access(path, F_OK) != 0)
        return store_check(s, NULL, SQLITE_CANTOPEN, "session file is missing");
    while (s->n_open >= s->max_open && store_evict(s, w))
        ;
    s->n_open++;
    if (db_open(s, path, &w->db) < 0 || !wsess_hook(w) ||
        (create && s->format == STORE_FORMAT_BLOCKS &&
         store_exec(s, w->db, schema_session_blocks_sql, "create blocks schema") < 0) ||
        store_exec(s, w->db, schema_session_sql, "create session schema") < 0 ||
        wsess_blocks_open(s, w, create) < 0 || wsess_prepare(s, w) < 0 ||
        (!w->blocks && wsess_prepare_multi(s, w) < 0) || (w->agg = agg_new(w->db)) == NULL ||
        (!create && wsess_load_shapes(s, w) < 0) ||
        (!create && store_check_errno(s, w->db, agg_load(w->agg), "load aggregates") < 0) ||
        (w->ranks = ranks_new(w->db)) == NULL ||
        (!create &&
         store_check_errno(s, w->db, ranks_load(w->ranks), "load rank aggregates") < 0)) {
        if (w->db == NULL)
            s->n_open--;
        else
            wsess_file_close(s, w);
        return -EIO;
    }
    return 0;
}

/* The state of a session, created on first use. NULL on out of memory. */
static struct wsess *wsess_get(struct store *s, int64_t id)
{
    struct wsess *w, **pp;

    for (pp = &s->sess; (w = *pp) != NULL; pp = &w->next) {
        if (w->id == id) {
            *pp = w->next; /* move to front: the list is in order of use */
            w->next = s->sess;
            s->sess = w;
            return w;
        }
    }
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return NULL;
    w->id = id;
    w->store = s;
    w->q_tail = &w->q;
    w->applied_tail = &w->applied;
    u32map_init(&w->lost);
    w->next = s->sess;
    s->sess = w;
    return w;
}

static void wsess_free(struct store *s, struct wsess *w)
{
    for (struct wsess **pp = &s->sess; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    wsess_file_close(s, w);
    u32map_deinit(&w->lost);
    free(w);
}

static int wsess_begin(struct store *s, struct wsess *w)
{
    if (w->broken)
        return -EIO;
    if (w->in_txn)
        return 0;
    if (wsess_file_open(s, w, false) < 0 || store_exec(s, w->db, "BEGIN", "begin") < 0)
        return -EIO;
    w->in_txn = true;
    w->txn_entries = 0;
    w->txn_started = now_ms();
    return 0;
}

/* ---- applying jobs ------------------------------------------------------- */

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v != NULL)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_int_or_null(sqlite3_stmt *st, int i, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static int step_reset(struct store *s, sqlite3 *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);

    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return store_check(s, db, rc, what);
}

/* The product of a canonical msgpack shape's dimensions (0 for none), saturating. */
static uint64_t shape_product(const char *blob, uint32_t len)
{
    msgpack_unpacked u;
    uint64_t p = 0;

    msgpack_unpacked_init(&u);
    if (len > 0 && msgpack_unpack_next(&u, blob, len, NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size > 0) {
        p = 1;
        for (uint32_t i = 0; i < u.data.via.array.size; i++) {
            uint64_t d = u.data.via.array.ptr[i].via.u64;
            p = d != 0 && p > (uint64_t)INT64_MAX / d ? (uint64_t)INT64_MAX : p * d;
        }
    }
    msgpack_unpacked_destroy(&u);
    return p;
}

/*
 * Entry i's shapes.id (0: none), writing the shapes row from the entry's
 * bytes when the file has none of that id yet. -1 on error.
 */
static int64_t shape_new(struct store *s, struct wsess *w, const struct store_job *job, size_t i)
{
    const struct proto_batch *b = &job->u.batch.b;
    const struct proto_entry *e = &b->entries[i];
    uint32_t id = job->u.batch.shape_ids[i];
    sqlite3_stmt *st = w->ins_shape;
    uint64_t elements;

    if (wsess_shapes_room(w, id) < 0)
        return -1;
    elements = shape_product(b->blob + e->out_off, e->out_len);
    sqlite3_bind_int64(st, 1, id);
    if (e->out_len)
        sqlite3_bind_blob(st, 2, b->blob + e->out_off, (int)e->out_len, SQLITE_STATIC);
    if (e->in_len)
        sqlite3_bind_blob(st, 3, b->blob + e->in_off, (int)e->in_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (int64_t)elements);
    if (step_reset(s, w->db, st, "insert shape") < 0)
        return -1;
    w->shape_elements[id] = elements;
    return id;
}

/* shape_new() for a shape the file has no row of yet; the common case inline. */
static inline int64_t shape_id(struct store *s, struct wsess *w, const struct store_job *job,
                               size_t i)
{
    uint32_t id = job->u.batch.shape_ids != NULL ? job->u.batch.shape_ids[i] : 0;

    if (id == 0 || (id < w->shape_cap && w->shape_elements[id] != SHAPE_NONE))
        return id;
    return shape_new(s, w, job, i);
}

/* Binds entry i of a batch as the 9 parameters from base+1 on. 0, or an SQLite code. */
static int bind_entry(struct store *s, struct wsess *w, sqlite3_stmt *st, int base,
                      const struct store_job *job, size_t i)
{
    const struct proto_batch *b = &job->u.batch.b;
    const struct proto_entry *e = &b->entries[i];
    int64_t shape = shape_id(s, w, job, i);

    if (shape < 0)
        return SQLITE_NOMEM;
    sqlite3_bind_int64(st, base + 1, job->u.batch.process_id);
    sqlite3_bind_int64(st, base + 2, (int64_t)e->step);
    sqlite3_bind_int64(st, base + 3, e->op_id);
    if (job->u.batch.dev_ids[i] != 0)
        sqlite3_bind_int64(st, base + 4, job->u.batch.dev_ids[i]);
    else
        sqlite3_bind_null(st, base + 4);
    sqlite3_bind_int64(st, base + 5, (int64_t)e->start_ns);
    sqlite3_bind_int64(st, base + 6, (int64_t)e->dur_ns);
    /* elements equal to its shape's product are implied: NULL takes no bytes */
    if (shape > 0 && e->elements == w->shape_elements[shape])
        sqlite3_bind_null(st, base + 7);
    else
        sqlite3_bind_int64(st, base + 7, (int64_t)e->elements);
    sqlite3_bind_int64(st, base + 8, (int64_t)e->mem_bytes);
    if (shape > 0)
        sqlite3_bind_int64(st, base + 9, shape);
    else
        sqlite3_bind_null(st, base + 9);
    return 0;
}

static void bind_ext(sqlite3_stmt *st, int i, bool has, int64_t v)
{
    if (has)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/*
 * The entry_ext of a file written before the ext key comm_size (a session
 * reopened mid-session by this daemon) gets the column, NULL in its rows.
 */
static int store_ext_comm_size(struct store *s, sqlite3 *db)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        db, "SELECT 1 FROM pragma_table_info('entry_ext') WHERE name = 'comm_size'", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, db, rc, "prepare");
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return 0;
    if (rc != SQLITE_DONE)
        return store_check(s, db, rc, "entry_ext columns");
    return store_exec(s, db, "ALTER TABLE entry_ext ADD COLUMN comm_size INTEGER",
                      "add entry_ext.comm_size");
}

/*
 * Stores the ext map of the entry at rowid in the entry_ext side table,
 * creating the table with the session's first ext map: files without ext
 * maps never have it. Unsigned values keep their 64 bits in SQLite's int64.
 * A failed insert drops the statement, so that the next one prepares it (and
 * creates the table) again, as after a rolled-back transaction it must.
 */
static int store_ext_row(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    sqlite3_stmt *st;
    int rc;

    if (w->ins_ext == NULL) {
        if (store_exec(s, w->db, schema_entry_ext_sql, "create entry_ext") < 0 ||
            store_ext_comm_size(s, w->db) < 0)
            return -EIO;
        rc = sqlite3_prepare_v3(w->db,
                                "INSERT INTO entry_ext(entry_rowid, stream, peer, tag, comm, seq,"
                                " checksum, comm_size) VALUES (?,?,?,?,?,?,?,?)",
                                -1, SQLITE_PREPARE_PERSISTENT, &w->ins_ext, NULL);
        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    st = w->ins_ext;
    sqlite3_bind_int64(st, 1, rowid);
    bind_ext(st, 2, x->has & PROTO_EXT_STREAM, (int64_t)x->stream);
    bind_ext(st, 3, x->has & PROTO_EXT_PEER, (int64_t)x->peer);
    bind_ext(st, 4, x->has & PROTO_EXT_TAG, x->tag);
    bind_ext(st, 5, x->has & PROTO_EXT_COMM, (int64_t)x->comm);
    bind_ext(st, 6, x->has & PROTO_EXT_SEQ, (int64_t)x->seq);
    bind_ext(st, 7, x->has & PROTO_EXT_CHECKSUM, (int64_t)x->checksum);
    bind_ext(st, 8, x->has & PROTO_EXT_COMM_SIZE, (int64_t)x->comm_size);
    if ((rc = step_reset(s, w->db, st, "insert entry ext")) < 0) {
        sqlite3_finalize(w->ins_ext);
        w->ins_ext = NULL;
    }
    return rc;
}

/* The ext keys that go to entry_link rather than entry_ext. */
#define STORE_EXT_LINKS (PROTO_EXT_ID | PROTO_EXT_PARENT | PROTO_EXT_LAUNCHER)

/*
 * Stores the links of the entry at rowid (id, parent, launcher) in the
 * entry_link side table, created with the session's first link, as
 * store_ext_row() does for entry_ext.
 */
static int store_link_row(struct store *s, struct wsess *w, const struct proto_ext *x,
                          int64_t rowid)
{
    sqlite3_stmt *st;
    int rc;

    if (w->ins_link == NULL) {
        if (store_exec(s, w->db, schema_entry_link_sql, "create entry_link") < 0)
            return -EIO;
        rc = sqlite3_prepare_v3(w->db,
                                "INSERT INTO entry_link(entry_rowid, id, parent, launcher)"
                                " VALUES (?,?,?,?)",
                                -1, SQLITE_PREPARE_PERSISTENT, &w->ins_link, NULL);
        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    st = w->ins_link;
    sqlite3_bind_int64(st, 1, rowid);
    bind_ext(st, 2, x->has & PROTO_EXT_ID, (int64_t)x->id);
    bind_ext(st, 3, x->has & PROTO_EXT_PARENT, (int64_t)x->parent);
    bind_ext(st, 4, x->has & PROTO_EXT_LAUNCHER, (int64_t)x->launcher);
    if ((rc = step_reset(s, w->db, st, "insert entry link")) < 0) {
        sqlite3_finalize(w->ins_link);
        w->ins_link = NULL;
    }
    return rc;
}

/* The ext map of the entry at rowid: its links and its other keys, each in its side table. */
static int store_ext_rows(struct store *s, struct wsess *w, const struct proto_ext *x,
                          int64_t rowid)
{
    int rc = 0;

    if ((x->has & ~STORE_EXT_LINKS) != 0)
        rc = store_ext_row(s, w, x, rowid);
    if (rc == 0 && (x->has & STORE_EXT_LINKS) != 0)
        rc = store_link_row(s, w, x, rowid);
    return rc;
}

/*
 * The blocks format: each entry of the batch goes into the block being
 * filled, with the next rowid; a full block waits for the commit
 * (wsess_block_full) and a new one is begun. The rows are written at the
 * commit (wsess_block_write).
 */
static int apply_batch_blocks(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_batch *b = &job->u.batch.b;
    struct agg_src src = {job->u.batch.process_id, job->u.batch.dev_ids, job->u.batch.shape_ids};
    int rc;

    if ((rc = agg_batch(w->agg, b->entries, b->n, &src, w->next_id)) < 0)
        return store_check_errno(s, w->db, rc, "update aggregates");
    for (size_t i = 0; i < b->n; i++) {
        const struct proto_entry *e = &b->entries[i];
        int64_t shape = shape_id(s, w, job, i);
        struct block_entry be;
        struct proto_ext x;

        if (shape < 0)
            return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
        be = (struct block_entry){
            .process_id = job->u.batch.process_id,
            .step = (int64_t)e->step,
            .op_id = e->op_id,
            .device_id = job->u.batch.dev_ids[i],
            .start_ns = (int64_t)e->start_ns,
            .dur_ns = (int64_t)e->dur_ns,
            .elements = (int64_t)e->elements,
            /* as in the row format: elements equal to its shape's product are implied */
            .has_elements = !(shape > 0 && e->elements == w->shape_elements[shape]),
            .mem_bytes = (int64_t)e->mem_bytes,
            .shape_id = shape,
        };
        if (block_enc_add(&w->blk, &be) < 0)
            return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
        if (w->blk.n == BLOCK_ENTRIES) {
            if (wsess_block_full(w) < 0)
                return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
            w->blk_first = w->next_id + 1;
            w->blk_written = 0;
        }
        bool has_ext = proto_entry_ext(e, b->blob, &x);

        rc = ranks_entry(w->ranks, job->u.batch.process_id, e, job->u.batch.dev_ids[i],
                         has_ext ? &x : NULL, w->next_id);
        if (rc < 0)
            return store_check_errno(s, w->db, rc, "update aggregates");
        if (has_ext && (rc = store_ext_rows(s, w, &x, w->next_id)) < 0)
            return rc;
        w->next_id++;
    }
    w->txn_entries += b->n;
    return 0;
}

/*
 * Inserts a batch: ENTRY_ROWS rows per statement while there are that many
 * (a statement's fixed cost is paid once per ENTRY_ROWS rows), then one at a
 * time. Rowids of one statement are consecutive (rows are only ever
 * appended), which is how each row's rowid reaches the aggregates.
 */
static int apply_batch(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_batch *b = &job->u.batch.b;
    size_t i = 0;

    if (w->blocks)
        return apply_batch_blocks(s, w, job);
    while (i < b->n) {
        size_t rows = b->n - i >= ENTRY_ROWS ? ENTRY_ROWS : 1;
        sqlite3_stmt *st = rows == ENTRY_ROWS ? w->ins_entries : w->ins_entry;
        int64_t last;
        int rc = 0;

        for (size_t k = 0; k < rows && rc == 0; k++)
            rc = bind_entry(s, w, st, (int)(9 * k), job, i + k);
        if (rc == 0) {
            rc = sqlite3_step(st);
            rc = rc == SQLITE_DONE ? 0 : rc;
        }
        sqlite3_reset(st);
        if (rc != 0)
            return store_check(s, w->db, rc, "insert entries");
        last = sqlite3_last_insert_rowid(w->db);
        struct agg_src src = {job->u.batch.process_id, &job->u.batch.dev_ids[i],
                              job->u.batch.shape_ids != NULL ? &job->u.batch.shape_ids[i] : NULL};
        if ((rc = agg_batch(w->agg, &b->entries[i], rows, &src, last - (int64_t)(rows - 1))) < 0)
            return store_check_errno(s, w->db, rc, "update aggregates");
        for (size_t k = 0; k < rows; k++) {
            int64_t rowid = last - (int64_t)(rows - 1 - k);
            const struct proto_entry *e = &b->entries[i + k];
            struct proto_ext x;
            bool has_ext = proto_entry_ext(e, b->blob, &x);

            rc = ranks_entry(w->ranks, job->u.batch.process_id, e, job->u.batch.dev_ids[i + k],
                             has_ext ? &x : NULL, rowid);
            if (rc < 0)
                return store_check_errno(s, w->db, rc, "update aggregates");
            if (has_ext && (rc = store_ext_rows(s, w, &x, rowid)) < 0)
                return rc;
        }
        i += rows;
    }
    w->txn_entries += b->n;
    return 0;
}

static int apply_meta(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->ins_meta;

    for (size_t i = 0; i < job->u.meta.n; i++) {
        const struct proto_kv *kv = &job->u.meta.kv[i];

        if (ranks_meta(w->ranks, job->u.meta.process_id, kv->key,
                       kv->type == PROTO_V_STR ? kv->v.s : NULL,
                       kv->type == PROTO_V_INT ? kv->v.i : 0, kv->type == PROTO_V_STR) != 0)
            return -ENOMEM;
        sqlite3_bind_int64(st, 1, job->u.meta.process_id);
        sqlite3_bind_text(st, 2, kv->key, -1, SQLITE_STATIC);
        switch (kv->type) {
        case PROTO_V_BOOL:
            sqlite3_bind_int(st, 3, kv->v.b);
            break;
        case PROTO_V_INT:
            sqlite3_bind_int64(st, 3, kv->v.i);
            break;
        case PROTO_V_FLOAT:
            sqlite3_bind_double(st, 3, kv->v.f);
            break;
        case PROTO_V_STR:
            sqlite3_bind_text(st, 3, kv->v.s, -1, SQLITE_STATIC);
            break;
        default:
            sqlite3_bind_null(st, 3);
            break;
        }
        if (step_reset(s, w->db, st, "insert meta") < 0)
            return -EIO;
    }
    return 0;
}

static int apply_process(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->ins_proc;

    if (ranks_process(w->ranks, job->u.process.id, job->u.process.world) != 0)
        return -ENOMEM;
    sqlite3_bind_int64(st, 1, job->u.process.id);
    bind_int_or_null(st, 2, job->u.process.rank);
    bind_int_or_null(st, 3, job->u.process.world);
    bind_int_or_null(st, 4, job->u.process.pid);
    bind_int_or_null(st, 5, job->u.process.uid);
    bind_text_or_null(st, 6, job->u.process.host);
    bind_text_or_null(st, 7, job->u.process.device);
    sqlite3_bind_int64(st, 8, job->u.process.started_ns);
    bind_int_or_null(st, 9, job->u.process.claimed_pid);
    return step_reset(s, w->db, st, "insert process");
}

static int apply_process_end(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->end_proc;

    sqlite3_bind_int64(st, 1, job->u.process_end.ended_ns);
    sqlite3_bind_int(st, 2, job->u.process_end.bye);
    sqlite3_bind_int64(st, 3, (int64_t)job->u.process_end.dropped);
    sqlite3_bind_int64(st, 4, job->u.process_end.process_id);
    return step_reset(s, w->db, st, "end process");
}

static int apply_name(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = job->type == STORE_OP ? w->ins_op : w->ins_dev;

    if (job->type == STORE_OP &&
        ranks_op(w->ranks, job->u.name.id, job->u.name.name, job->u.name.category) != 0)
        return -ENOMEM;
    sqlite3_bind_int64(st, 1, job->u.name.id);
    sqlite3_bind_text(st, 2, job->u.name.name, -1, SQLITE_STATIC);
    if (job->type == STORE_OP)
        sqlite3_bind_text(st, 3, job->u.name.category, -1, SQLITE_STATIC);
    return step_reset(s, w->db, st, job->type == STORE_OP ? "insert op" : "insert device");
}

/* ---- the catalog --------------------------------------------------------- */

/* Runs one catalog statement on its own (autocommit): int64 args, then an optional text. */
static int catalog_run(struct store *s, const char *sql, const int64_t *args, size_t n,
                       const char *text)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->catalog, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->catalog, rc, "catalog prepare");
    for (size_t i = 0; i < n; i++)
        sqlite3_bind_int64(st, (int)i + 1, args[i]);
    if (text != NULL)
        sqlite3_bind_text(st, (int)n + 1, text, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    store_publish_catalog(s);
    return store_check(s, s->catalog, rc, "catalog update");
}

/*
 * Moves sessions/<id>.db and its -wal and -shm (whatever of them exists)
 * into sessions/orphans/, so that no session ever opens a file it did not
 * create. Returns 0 when none existed, 1 when something was moved, or a
 * negative errno.
 */
static int store_quarantine(struct store *s, int64_t id, const char *why)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char from[PATH_MAX + 8], to[PATH_MAX + 64];
    long long stamp = (long long)time(NULL);
    int moved = 0;

    for (size_t i = 0; i < 3; i++) {
        store_session_path(s, id, from, PATH_MAX);
        strcat(from, suffixes[i]);
        if (access(from, F_OK) != 0)
            continue;
        snprintf(to, sizeof(to), "%s/sessions/orphans/%lld.%lld.db%s", s->data_dir, (long long)id,
                 stamp, suffixes[i]);
        if (rename(from, to) < 0) {
            log_error("storage: cannot move %s aside: %s", from, strerror(errno));
            return -errno;
        }
        log_warn("storage: %s: moved %s to %s", why, from, to);
        if (i == 0)
            atomic_fetch_add(&s->orphans, 1);
        moved = 1;
    }
    return moved;
}

/*
 * Creates the (empty) file of a new session exclusively: a file already on
 * that path (left by a crash, or another run) is quarantined first, never
 * reused, so a new session never sees another's rows.
 */
static int store_create_file(struct store *s, int64_t id)
{
    char path[PATH_MAX];
    int fd;

    if (store_quarantine(s, id, "a file was in the way of a new session") < 0)
        return -EIO;
    store_session_path(s, id, path, sizeof(path));
    fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = -errno;
        log_error("storage: cannot create %s: %s", path, strerror(errno));
        pthread_mutex_lock(&s->mu);
        snprintf(s->last_error, sizeof(s->last_error), "cannot create %.180s: %s", path,
                 strerror(-err));
        pthread_mutex_unlock(&s->mu);
        return err;
    }
    close(fd);
    return 0;
}

/*
 * A new session: its catalog row is committed first (so a crash never leaves
 * a file without a row to own it), then the file is created exclusively.
 */
static int apply_open(struct store *s, struct wsess *w, struct store_job *job)
{
    int64_t args[3] = {job->session_id, job->u.open.started_ns, job->u.open.uid};

    if (catalog_run(s, "INSERT INTO sessions(id, started_ns, uid, name) VALUES (?,?,?,?)", args, 3,
                    job->u.open.name) < 0 ||
        store_create_file(s, w->id) < 0 || wsess_file_open(s, w, true) < 0 ||
        wsess_begin(s, w) < 0 ||
        store_exec(s, w->db,
                   w->blocks ? "INSERT OR REPLACE INTO info VALUES ('format', 2)"
                             : "INSERT OR REPLACE INTO info VALUES ('format', 1)",
                   "info") < 0)
        return -EIO;
    if (store_check_errno(s, w->db, agg_init_file(w->agg), "mark aggregates") < 0)
        return -EIO;
    return store_check_errno(s, w->db, ranks_init_file(w->ranks), "mark rank aggregates");
}

/*
 * The session ended: commit and close its file, then write the catalog row
 * with what the file really holds (entries committed, losses counted).
 */
static int apply_session_end(struct store *s, struct wsess *w, struct store_job *job)
{
    int64_t args[6] = {
        job->u.session_end.ended_ns,    (int64_t)job->u.session_end.processes,
        (int64_t)w->committed,          (int64_t)(job->u.session_end.dropped + w->lost_total),
        job->u.session_end.interrupted, job->session_id};

    wsess_finish_ranks(s, w);
    /* the file says it is complete: `classify` waits for this (classify.c) */
    if (w->db != NULL && wsess_begin(s, w) == 0)
        store_exec(s, w->db, "INSERT OR REPLACE INTO info VALUES ('ended', 1)", "info");
    wsess_commit(s, w);
    wsess_file_close(s, w);
    w->ended = true;
    return catalog_run(s,
                       "UPDATE sessions SET state = 'ended', ended_ns = ?, processes = ?,"
                       " entries = ?, dropped = ?, interrupted = ? WHERE id = ?",
                       args, 6, NULL);
}

static int apply_delete(struct store *s, struct wsess *w, struct store_job *job)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char path[PATH_MAX + 8];
    int rc = 0;

    wsess_commit(s, w);
    wsess_file_close(s, w);
    w->ended = true;
    for (size_t i = 0; i < 3; i++) {
        store_session_path(s, job->session_id, path, PATH_MAX);
        strcat(path, suffixes[i]);
        if (unlink(path) < 0 && errno != ENOENT) {
            log_error("storage: cannot remove %s: %s", path, strerror(errno));
            rc = -errno;
        }
    }
    store_publish_size(s, job->session_id);
    if (catalog_run(s, "DELETE FROM sessions WHERE id = ?", &job->session_id, 1, NULL) < 0)
        return -EIO;
    return rc;
}

/* ---- transactions -------------------------------------------------------- */

static uint64_t job_entries(const struct store_job *job)
{
    return job->type == STORE_BATCH ? job->u.batch.b.n : 0;
}

/* Hands a job back to the loop (those with a cookie, and lost batches) or frees it. */
static void store_finish(struct store *s, struct store_job *job)
{
    if (job->cookie != NULL || (job->type == STORE_BATCH && job->rc < 0)) {
        job->next = NULL;
        *s->finished_tail = job;
        s->finished_tail = &job->next;
    } else {
        store_job_free(job);
    }
}

/*
 * A job of w was not stored: entries are counted lost for their process
 * (every later flush of it fails, with the count); anything else (a process,
 * a name, metadata, the file itself) breaks the session, since later entries
 * would refer to it: nothing more of it is stored.
 */
static void wsess_lost(struct store *s, struct wsess *w, struct store_job *job)
{
    uint32_t n = 0, pid;

    if (job->rc == 0)
        job->rc = -EIO;
    if (job->type != STORE_BATCH) {
        if (!w->broken)
            log_error("storage: session %lld lost its %s: it stores nothing more", (long long)w->id,
                      job->type == STORE_OPEN ? "file" : "metadata");
        w->broken = true;
        return;
    }
    pid = (uint32_t)job->u.batch.process_id;
    u32map_get(&w->lost, pid, &n);
    u32map_put(&w->lost, pid, n + (uint32_t)job->u.batch.b.n);
    w->lost_total += job->u.batch.b.n;
    atomic_fetch_add(&s->failed, job->u.batch.b.n);
}

/*
 * A flush succeeds only when every entry its process sent before it is
 * stored: a batch lost earlier (disk full, no file) fails every later flush
 * of that process, with the count.
 */
static void wsess_flush_result(struct wsess *w, struct store_job *job)
{
    uint32_t lost = 0;

    if (u32map_get(&w->lost, (uint32_t)job->u.flush.process_id, &lost) && lost) {
        job->rc = -EIO;
        job->u.flush.lost = lost;
    }
}

/* The open transaction committed (ok) or was rolled back: complete its jobs. */
static void wsess_settle(struct store *s, struct wsess *w, bool ok)
{
    struct store_job *job, *next;

    if (ok) {
        w->committed += w->txn_entries;
        atomic_fetch_add(&s->stored, w->txn_entries);
    }
    w->txn_entries = 0;
    for (job = w->applied; job != NULL; job = next) {
        next = job->next;
        /* in order: a flush sees the losses of every batch before it */
        if (job->type == STORE_FLUSH)
            wsess_flush_result(w, job);
        else if (!ok || job->rc < 0)
            wsess_lost(s, w, job);
        store_finish(s, job);
    }
    w->applied = NULL;
    w->applied_tail = &w->applied;
    w->flush_waiting = false;
}

/* Rolls back the open transaction: nothing applied in it is stored. */
static void wsess_abort(struct store *s, struct wsess *w)
{
    if (w->in_txn) {
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        agg_discard(w->agg);
        ranks_discard(w->ranks);
        w->in_txn = false;
        wsess_blocks_drop(w);
        /* The block in memory and the shape ids with rows go back to what the file holds. */
        if (((w->blocks && wsess_blocks_resume(s, w) < 0) || wsess_load_shapes(s, w) < 0) &&
            !w->broken) {
            log_error("storage: session %lld cannot read its last block or its shapes back:"
                      " it stores nothing more",
                      (long long)w->id);
            w->broken = true;
        }
    }
    wsess_settle(s, w, false);
}

/* Commits the open transaction (if any) and completes the jobs applied in it. */
static void wsess_commit(struct store *s, struct wsess *w)
{
    if (w->in_txn) {
        if ((w->blocks && wsess_block_write(s, w) < 0) ||
            store_check_errno(s, w->db, ranks_flush(w->ranks), "write rank aggregates") < 0 ||
            store_check_errno(s, w->db, agg_flush(w->agg), "write aggregates") < 0 ||
            store_exec(s, w->db, "COMMIT", "commit") < 0) {
            wsess_abort(s, w);
            return;
        }
        w->in_txn = false;
        store_publish_size(s, w->id); /* before the acks: a flushed session has its size */
    }
    wsess_settle(s, w, true);
}

/*
 * The session ends: the open collectives and pending comm entries count. A
 * file closed mid-session (store_evict) is opened again for them: it saved
 * them at its last commit.
 */
static void wsess_finish_ranks(struct store *s, struct wsess *w)
{
    if ((w->db == NULL && (w->broken || wsess_begin(s, w) < 0)) || !ranks_pending(w->ranks) ||
        wsess_begin(s, w) < 0)
        return;
    if (store_check_errno(s, w->db, ranks_finish(w->ranks), "finish rank aggregates") < 0)
        wsess_abort(s, w);
}

static int apply_in_txn(struct store *s, struct wsess *w, struct store_job *job)
{
    if (wsess_begin(s, w) < 0)
        return -EIO;
    switch (job->type) {
    case STORE_PROCESS:
        return apply_process(s, w, job);
    case STORE_OP:
    case STORE_DEVICE:
        return apply_name(s, w, job);
    case STORE_META:
        return apply_meta(s, w, job);
    case STORE_BATCH:
        return apply_batch(s, w, job);
    case STORE_PROCESS_END:
        return apply_process_end(s, w, job);
    default:
        return -EINVAL;
    }
}

/*
 * Applies one job of w. A job that fails rolls back w's whole transaction:
 * what a file holds is exactly what was counted stored, never a part of it.
 */
static void store_apply(struct store *s, struct wsess *w, struct store_job *job)
{
    job->next = NULL;
    switch (job->type) {
    case STORE_SESSION_END:
        job->rc = apply_session_end(s, w, job);
        store_finish(s, job);
        return;
    case STORE_DELETE:
        job->rc = apply_delete(s, w, job);
        store_finish(s, job);
        return;
    case STORE_FLUSH:
        w->flush_waiting = true;
        break;
    case STORE_OPEN:
        job->rc = apply_open(s, w, job);
        break;
    default:
        job->rc = apply_in_txn(s, w, job);
        /*
         * Applied or not, a batch's arrays are not needed again, only its count
         * is: they go back to the loop for the next batches (batchpool.h).
         */
        if (job->type == STORE_BATCH) {
            size_t n = job->u.batch.b.n;

            batchpool_put_batch(&job->u.batch.b, job->u.batch.dev_ids, job->u.batch.shape_ids,
                                job->u.batch.ids_cap);
            job->u.batch.b.n = n;
            job->u.batch.dev_ids = NULL;
            job->u.batch.shape_ids = NULL;
        }
        break;
    }
    *w->applied_tail = job;
    w->applied_tail = &job->next;
    if (job->rc < 0)
        wsess_abort(s, w);
}

/* ---- the writer thread --------------------------------------------------- */

/* Moves newly queued jobs into their sessions' queues; sessions with work join the round. */
static void store_intake(struct store *s, struct store_job *list)
{
    struct store_job *job, *next;
    struct wsess *w;

    for (job = list; job != NULL; job = next) {
        next = job->next;
        job->next = NULL;
        if ((w = wsess_get(s, job->session_id)) == NULL) {
            log_error("storage: out of memory: a job of session %lld is lost",
                      (long long)job->session_id);
            job_uncharge(s, job);
            atomic_fetch_sub(&s->queued, job_entries(job));
            atomic_fetch_sub(&s->jobs, 1);
            atomic_fetch_add(&s->failed, job_entries(job));
            job->rc = -ENOMEM;
            store_finish(s, job);
            continue;
        }
        *w->q_tail = job;
        w->q_tail = &job->next;
        if (!w->ready) {
            w->ready = true;
            w->ready_next = NULL;
            *s->ready_tail = w;
            s->ready_tail = &w->ready_next;
        }
    }
}

/*
 * One session's turn: up to QUANTUM_ENTRIES of its queued entries (at least
 * one job), so that a flood in one session delays another session's flush
 * by at most a quantum per busy session. Its transaction commits when a
 * flush waits, when it holds COMMIT_ENTRIES, or when stopping; otherwise it
 * stays open for more (up to the commit interval, store_commit_due()).
 */
static void store_turn(struct store *s, struct wsess *w, bool stopping)
{
    uint64_t budget = 0;

    while (w->q != NULL && budget < QUANTUM_ENTRIES) {
        struct store_job *job = w->q;
        uint64_t n = job_entries(job);

        if ((w->q = job->next) == NULL)
            w->q_tail = &w->q;
        budget += n ? n : 1;
        job_uncharge(s, job);
        store_apply(s, w, job); /* may complete (and free) the job */
        atomic_fetch_sub(&s->queued, n);
        atomic_fetch_sub(&s->jobs, 1);
    }
    if (w->applied != NULL &&
        (w->flush_waiting || !w->in_txn ||
         w->txn_entries >= (w->blocks ? COMMIT_ENTRIES_BLOCKS : COMMIT_ENTRIES) || stopping))
        wsess_commit(s, w);
}

/* Every session with queued jobs takes one turn, in order. */
static void store_round(struct store *s, bool stopping)
{
    struct wsess *w = s->ready, *next;

    s->ready = NULL;
    s->ready_tail = &s->ready;
    for (; w != NULL; w = next) {
        next = w->ready_next;
        w->ready = false;
        store_turn(s, w, stopping);
        if (w->q != NULL) {
            w->ready = true;
            w->ready_next = NULL;
            *s->ready_tail = w;
            s->ready_tail = &w->ready_next;
        }
    }
}

/*
 * Commits transactions open for the commit interval, frees the state of
 * sessions that ended. Returns the ms until the next transaction is due, or
 * -1 when none is open.
 */
static int64_t store_commit_due(struct store *s)
{
    uint64_t now = now_ms();
    int64_t wait = -1;
    struct wsess *w, **pp;

    for (pp = &s->sess; (w = *pp) != NULL;) {
        if (w->in_txn) {
            uint64_t due = w->txn_started + s->commit_ms;
            if (due <= now)
                wsess_commit(s, w);
            else if (wait < 0 || (int64_t)(due - now) < wait)
                wait = (int64_t)(due - now);
        }
        if (w->ended && w->q == NULL && w->applied == NULL && !w->ready)
            wsess_free(s, w); /* unlinks *pp */
        else
            pp = &w->next;
    }
    return wait;
}

/* Hands what completed back to the loop, in order; the async also reports progress. */
static void store_publish(struct store *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->finished != NULL) {
        struct store_job **pp = &s->done;
        while (*pp != NULL)
            pp = &(*pp)->next;
        *pp = s->finished; /* keep completion order across rounds */
        s->finished = NULL;
        s->finished_tail = &s->finished;
    }
    pthread_mutex_unlock(&s->mu);
    uv_async_send(&s->async);
}

static void store_wait(struct store *s, int64_t ms)
{
    struct timespec ts;

    if (ms < 0) {
        pthread_cond_wait(&s->cv, &s->mu);
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static void *store_thread(void *arg)
{
    struct store *s = arg;
    struct store_job *list;
    bool stopping;

    for (;;) {
        int64_t wait = store_commit_due(s);

        store_publish(s);
        pthread_mutex_lock(&s->mu);
        if (s->head == NULL && s->ready == NULL && !s->stopping)
            store_wait(s, wait);
        list = s->head;
        s->head = s->tail = NULL;
        stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        store_intake(s, list);
        if (stopping && s->ready == NULL)
            break;
        store_round(s, stopping);
    }
    while (s->sess != NULL) {
        wsess_commit(s, s->sess);
        wsess_free(s, s->sess);
    }
    store_publish(s);
    return NULL;
}

void store_enqueue(struct store *s, struct store_job *job)
{
    job->next = NULL;
    job->cost = job_cost(job);
    atomic_fetch_add(&s->queued_bytes, job->cost);
    if (job->budget != NULL)
        atomic_fetch_add(&job->budget->bytes, job->cost);
    atomic_fetch_add(&s->queued, job_entries(job));
    atomic_fetch_add(&s->jobs, 1);
    pthread_mutex_lock(&s->mu);
    if (s->tail != NULL)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Loop thread: hand every completed job back; sends coalesce, so drain all. */
static void store_async_cb(uv_async_t *handle)
{
    struct store *s = handle->data;
    struct store_job *list, *next;

    pthread_mutex_lock(&s->mu);
    list = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    for (; list != NULL; list = next) {
        next = list->next;
        s->done_cb(s, list, s->cb_data);
    }
    if (s->progress_cb != NULL)
        s->progress_cb(s, s->cb_data);
}

/* ---- lifecycle ----------------------------------------------------------- */

static int mkdir_p(const char *dir, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, dir, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, mode) < 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/*
 * Takes DATA_DIR/lock (flock, held while the daemon runs): two daemons on
 * one data dir would both hand out the same ids and mix their entries.
 */
static int store_lock(struct store *s, char *errbuf, size_t errlen)
{
    char path[PATH_MAX], pid[32] = "";
    ssize_t n;

    snprintf(path, sizeof(path), "%s/lock", s->data_dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        snprintf(errbuf, errlen, "cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;
        if ((n = pread(s->lock_fd, pid, sizeof(pid) - 1, 0)) > 0)
            pid[strcspn(pid, "\n")] = '\0';
        if (err == EWOULDBLOCK)
            snprintf(errbuf, errlen, "data dir %s is in use by another tracectld (pid %s)",
                     s->data_dir, pid[0] ? pid : "unknown");
        else
            snprintf(errbuf, errlen, "cannot lock %s: %s", path, strerror(err));
        return err == EWOULDBLOCK ? -EBUSY : -err;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(s->lock_fd, 0) < 0 || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        log_warn("cannot write the pid into %s: %s", path, strerror(errno));
    return 0;
}

/* The id of a session file name "<id>.db", "<id>.db-wal" or "<id>.db-shm"; -1 otherwise. */
static int64_t session_file_id(const char *name)
{
    char *end;
    long long id;

    if (name[0] < '0' || name[0] > '9')
        return -1;
    errno = 0;
    id = strtoll(name, &end, 10);
    if (errno || id <= 0 ||
        (strcmp(end, ".db") != 0 && strcmp(end, ".db-wal") != 0 && strcmp(end, ".db-shm") != 0))
        return -1;
    return id;
}

static bool catalog_has(struct store *s, int64_t id)
{
    sqlite3_stmt *st;
    bool found = false;

    if (sqlite3_prepare_v2(s->catalog, "SELECT 1 FROM sessions WHERE id = ?", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        found = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
    }
    return found;
}

/*
 * Start-up: every session file without a catalog row (a crash between
 * creating it and committing its row, or a file put there by hand) is moved
 * to sessions/orphans/ and logged; ids seen on files are never handed out
 * again. Counts what orphans/ holds for `status`.
 */
static int store_scan_orphans(struct store *s, char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    struct dirent *de;
    DIR *dir;
    int64_t id;

    snprintf(path, sizeof(path), "%s/sessions/orphans", s->data_dir);
    if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(errno));
        return -errno;
    }
    if ((dir = opendir(path)) != NULL) {
        while ((de = readdir(dir)) != NULL) {
            char *dot = strchr(de->d_name, '.');
            if ((id = strtoll(de->d_name, NULL, 10)) > s->max_file_id)
                s->max_file_id = id;
            if (dot != NULL && strlen(de->d_name) > 3 &&
                strcmp(de->d_name + strlen(de->d_name) - 3, ".db") == 0)
                atomic_fetch_add(&s->orphans, 1);
        }
        closedir(dir);
    }
    snprintf(path, sizeof(path), "%s/sessions", s->data_dir);
    if ((dir = opendir(path)) == NULL) {
        snprintf(errbuf, errlen, "cannot read %s: %s", path, strerror(errno));
        return -errno;
    }
    while ((de = readdir(dir)) != NULL) {
        if ((id = session_file_id(de->d_name)) < 0)
            continue;
        if (id > s->max_file_id)
            s->max_file_id = id;
        if (!catalog_has(s, id) &&
            store_quarantine(s, id, "a session file without a catalog row") < 0) {
            snprintf(errbuf, errlen, "cannot move orphan session file %s aside", de->d_name);
            closedir(dir);
            return -EIO;
        }
    }
    closedir(dir);
    return 0;
}

/* One integer from a session file; def when the query fails. */
static int64_t file_int(sqlite3 *db, const char *sql, int64_t def)
{
    sqlite3_stmt *st;
    int64_t v = def;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

/*
 * A session the last run left live (killed, or crashed): its catalog row
 * has the counts of its start (0), so they are read back from its file:
 * processes, entries (the aggregates when exact, else a count) and what
 * its processes reported dropped.
 */
static void store_reconcile(struct store *s, int64_t id)
{
    char path[PATH_MAX];
    sqlite3 *db = NULL;
    int64_t args[4] = {0, 0, 0, id};

    store_session_path(s, id, path, sizeof(path));
    if (access(path, F_OK) == 0 &&
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
        vtab_register(db); /* entries of a blocks file */
        sqlite3_busy_timeout(db, 5000);
        /* the collectives still open and the comm entries pending at its last commit */
        if (ranks_recover(db) < 0)
            log_error("session %lld: cannot finish its rank aggregates: %s", (long long)id,
                      sqlite3_errmsg(db));
        args[0] = file_int(db, "SELECT count(*) FROM processes", 0);
        if (file_int(db, "SELECT value FROM info WHERE key = 'aggregates'", 0) == 1)
            args[1] = file_int(db, "SELECT coalesce((SELECT entries FROM agg_session), 0)", -1);
        else
            args[1] = -1;
        if (args[1] < 0)
            args[1] = file_int(db, "SELECT count(*) FROM entries", 0);
        args[2] = file_int(db, "SELECT coalesce(sum(dropped), 0) FROM processes", 0);
    }
    sqlite3_close(db);
    if (catalog_run(s, "UPDATE sessions SET processes = ?, entries = ?, dropped = ? WHERE id = ?",
                    args, 4, NULL) == 0)
        log_info("session %lld was live when the daemon stopped: %lld processes, %lld entries"
                 " found in its file",
                 (long long)id, (long long)args[0], (long long)args[1]);
}

/* Reconciles every session the last run left live, then marks them ended and interrupted. */
static int store_recover(struct store *s)
{
    sqlite3_stmt *st;
    int64_t *ids = NULL, *p;
    size_t n = 0;

    if (sqlite3_prepare_v2(s->catalog, "SELECT id FROM sessions WHERE state = 'live'", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if ((p = realloc(ids, (n + 1) * sizeof(*ids))) == NULL)
            break;
        ids = p;
        ids[n++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < n; i++)
        store_reconcile(s, ids[i]);
    free(ids);
    return store_exec(s, s->catalog,
                      "UPDATE sessions SET state = 'ended', interrupted = 2, ended_ns ="
                      " coalesce(ended_ns, CAST((julianday('now') - 2440587.5) * 86400e9 AS"
                      " INTEGER)) WHERE state = 'live'",
                      "mark interrupted sessions");
}

static int store_open_catalog(struct store *s, char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    int rc;

    snprintf(path, sizeof(path), "%s/sessions", s->data_dir);
    if ((rc = mkdir_p(path, 0700)) < 0) {
        snprintf(errbuf, errlen, "cannot create data dir %s: %s", path, strerror(-rc));
        return rc;
    }
    if (access(path, W_OK | X_OK) < 0) {
        rc = -errno;
        snprintf(errbuf, errlen, "data dir %s is not writable: %s", path, strerror(errno));
        return rc;
    }
    if ((rc = store_lock(s, errbuf, errlen)) < 0)
        return rc;
    snprintf(path, sizeof(path), "%s/catalog.db", s->data_dir);
    if (db_open(s, path, &s->catalog) < 0 ||
        store_exec(s, s->catalog, schema_catalog_sql, "create catalog schema") < 0 ||
        store_recover(s) < 0) {
        snprintf(errbuf, errlen, "cannot open catalog %s: %s", path,
                 s->catalog ? sqlite3_errmsg(s->catalog) : "out of memory");
        return -EIO;
    }
    return store_scan_orphans(s, errbuf, errlen);
}

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
    s->lock_fd = -1;
    s->done_cb = done;
    s->progress_cb = progress;
    s->cb_data = data;
    s->ready_tail = &s->ready;
    s->finished_tail = &s->finished;
    s->max_open = STORE_DEFAULT_MAX_OPEN;
    s->commit_ms = STORE_DEFAULT_COMMIT_MS;
    s->format = STORE_FORMAT_BLOCKS;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->sizes_mu, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_cond_init(&s->ckpt_cv, NULL);
    pthread_cond_init(&s->ckpt_idle_cv, NULL);
    pairmap_init(&s->sizes);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = store_open_catalog(s, errbuf, errlen)) < 0)
        goto fail;
    store_publish_catalog(s);
    if ((rc = uv_async_init(loop, &s->async, store_async_cb)) < 0)
        goto fail;
    s->async.data = s;
    return s;
fail:
    if (rc == -ENOMEM)
        snprintf(errbuf, errlen, "out of memory");
    *err = rc;
    if (s != NULL) {
        sqlite3_close(s->catalog);
        if (s->lock_fd >= 0)
            close(s->lock_fd);
        free(s->data_dir);
        free(s);
    }
    return NULL;
}

void store_set_limits(struct store *s, size_t max_open, uint64_t commit_ms)
{
    s->max_open = max_open < 2 ? 2 : max_open;
    s->commit_ms = commit_ms;
}

void store_set_format(struct store *s, enum store_format format)
{
    s->format = format;
}

int store_catalog_load(struct store *s, int (*row_cb)(void *, const struct store_catalog_row *),
                       void *arg)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->catalog,
                                "SELECT id, name, state, uid, started_ns, ended_ns, processes,"
                                " entries, dropped, interrupted FROM sessions ORDER BY id",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->catalog, rc, "load catalog");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_catalog_row row = {
            .id = sqlite3_column_int64(st, 0),
            .name = (const char *)sqlite3_column_text(st, 1),
            .state = (const char *)sqlite3_column_text(st, 2),
            .uid = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3),
            .started_ns = sqlite3_column_int64(st, 4),
            .ended_ns = sqlite3_column_int64(st, 5),
            .processes = (uint64_t)sqlite3_column_int64(st, 6),
            .entries = (uint64_t)sqlite3_column_int64(st, 7),
            .dropped = (uint64_t)sqlite3_column_int64(st, 8),
            .interrupted = sqlite3_column_int(st, 9),
        };
        store_publish_size(s, row.id); /* start-up: the loop may wait on disk now */
        if (row_cb(arg, &row) < 0)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : store_check(s, s->catalog, rc, "catalog");
}

int64_t store_last_session_id(struct store *s)
{
    sqlite3_stmt *st;
    int64_t id = 0;

    if (sqlite3_prepare_v2(s->catalog,
                           "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE"
                           " name = 'sessions'), 0), coalesce((SELECT max(id) FROM sessions), 0))",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id > s->max_file_id ? id : s->max_file_id;
}

static void store_ckpt_stop(struct store *s);

int store_start(struct store *s)
{
    int rc;

    /* Without the checkpointer (no memory, no thread), the writer checkpoints itself. */
    s->ckpt_want = NULL;
    s->ckpt_want_tail = &s->ckpt_want;
    if (pthread_create(&s->ckpt_thread, NULL, ckpt_thread, s) == 0)
        s->ckpt_started = true;
    if ((rc = pthread_create(&s->thread, NULL, store_thread, s)) != 0) {
        store_ckpt_stop(s);
        return -rc;
    }
    s->started = true;
    return 0;
}

/* Stops the checkpointer (after the writer: its files are closed). */
static void store_ckpt_stop(struct store *s)
{
    if (s->ckpt_started) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stopping = true;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt_thread, NULL);
        s->ckpt_started = false;
    }
}

void store_stop(struct store *s)
{
    if (s == NULL || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
    store_ckpt_stop(s);
    /* Hand back what completed during the drain (acks of the last flushes). */
    store_async_cb(&s->async);
}

static void store_close_cb(uv_handle_t *handle)
{
    struct store *s = handle->data;

    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->sizes_mu);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    pthread_cond_destroy(&s->ckpt_idle_cv);
    pthread_cond_destroy(&s->cv);
    pairmap_deinit(&s->sizes);
    free(s->data_dir);
    free(s);
}

void store_free(struct store *s)
{
    struct store_job *job, *next;

    if (s == NULL)
        return;
    store_stop(s);
    for (job = s->head; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    for (job = s->done; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    sqlite3_close(s->catalog);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the data dir */
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
    pthread_mutex_lock(&s->mu);
    snprintf(buf, len, "%s", s->last_error);
    pthread_mutex_unlock(&s->mu);
}

uint64_t store_orphans(const struct store *s)
{
    return atomic_load(&s->orphans);
}

uint64_t store_checkpoints(const struct store *s)
{
    return atomic_load(&s->checkpoints);
}
