/*
 * store — the storage writer: the only code that writes SQLite.
 *
 * It owns DATA_DIR/catalog.db and every open DATA_DIR/sessions/<id>.db
 * connection, all on its own thread, so the loop thread never waits on disk:
 * even the sizes of the files, which `sessions`, `status` and the byte caps
 * need, are stat()ed by the writer after each commit and published for the
 * loop to read (store_session_bytes).
 *
 * DESIGN
 * The loop thread builds a struct store_job and hands it over with
 * store_enqueue(); crossing the thread is a move: after the call the loop
 * never touches the job again, until (for jobs with a `cookie`, and for
 * batches that could not be stored) it comes back through the done
 * callback. The writer sorts what it takes from the queue into one queue per
 * session and serves the sessions in turn, at most QUANTUM_ENTRIES entries
 * of one session per turn, so a flood in one session delays another
 * session's flush by a bounded amount. Each session's jobs go into one open
 * transaction on its file; it commits when a flush waits for it, when it
 * holds COMMIT_ENTRIES entries, when it has been open for the commit
 * interval (so light load makes few, larger commits), or at the session's
 * end. Only after the commit are the completed jobs (flush markers,
 * deletes) returned to the loop through a queue and uv_async_send (which
 * coalesces, so the callback drains the whole done queue). An ack sent from
 * the done callback therefore means the entries are committed (WAL,
 * synchronous=NORMAL: safe against a crash or kill -9 of the daemon).
 * Copying a WAL back into its file (a checkpoint, SQLite's own every 1000
 * pages) is done by a second thread on a connection of its own, so the
 * writer never waits on it; the writer only finishes one itself when the
 * WAL has grown past 8000 pages without starting over (store_ckpt.c, CKPT_*).
 *
 * A job that fails rolls back its session's whole open transaction: a file
 * holds exactly the entries counted stored. Lost entries are counted per
 * process (every later flush of that process is answered with an error and
 * the count) and the batches come back to the loop, which corrects the
 * session's counts; losing anything else (the file, a process, a name)
 * breaks the session: nothing more of it is stored. At most max_open
 * session files are open at once; the least recently used is committed and
 * closed to open another, and reopened when it gets work again.
 *
 * A new session's catalog row is committed before its file is created, and
 * the file is created exclusively: a file already on that path, and at
 * start-up every session file without a catalog row, is moved to
 * DATA_DIR/sessions/orphans/ (logged, counted in store_orphans()), never
 * opened as a session, and its id is never handed out again. DATA_DIR/lock
 * is held (flock) from store_new() to store_free(): a second daemon on the
 * same data dir fails to start.
 *
 * Entries are stored in one of two formats (enum store_format), chosen for
 * each new session file and recorded in it: one row per entry, or blocks of
 * up to BLOCK_ENTRIES entries (block.h), one row per block. In the blocks
 * format the writer keeps the block being filled in memory with its rowids
 * (the row format's, 1, 2, 3, ... in the order stored), keeps the blocks a
 * transaction fills in memory too and writes their rows at its commit, with
 * the partly filled one's, so an ack still means committed; a rollback drops
 * them and reloads the last block from the file. (A transaction that touches
 * the file only at its commit lets the checkpointer copy the whole WAL back
 * in between, so that the WAL starts over without the writer waiting.) Readers
 * see `entries` as before, through the virtual table (vtab.h).
 *
 * Errors: functions return 0 or a negative errno; SQLite codes go through
 * sql_errno() and are logged once, with sqlite3_errmsg(), here.
 *
 * Lifecycle: store_new() opens the catalog synchronously (start-up may wait
 * on disk), store_catalog_load() lists the sessions, store_start() starts the
 * thread, store_stop() drains the queue, commits, closes every file and joins
 * it, store_free() releases the rest.
 */
#ifndef TRACECTLD_STORE_H
#define TRACECTLD_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "proto.h"

enum store_job_type {
    STORE_OPEN,        /* create the session file and its catalog row */
    STORE_PROCESS,     /* a process joined */
    STORE_OP,          /* an op name got a session-wide id */
    STORE_DEVICE,      /* a device name got a session-wide id */
    STORE_META,        /* metadata of a process */
    STORE_BATCH,       /* entries */
    STORE_PROCESS_END, /* a process left */
    STORE_FLUSH,       /* a marker: completes once everything before it is committed */
    STORE_COUNTERS,    /* a producer's own accounting (process_counters) */
    STORE_SESSION_END, /* the session ended: update the catalog, close the file */
    STORE_DELETE,      /* remove an ended session's file and catalog row */
};

/*
 * What queued jobs cost, charged to whoever queued them (a producer
 * connection, or the registry for session files being created): the loop
 * reads `bytes` to pause a connection over its share, the writer takes a
 * job's cost off once it has applied the job. Shared by the two threads,
 * freed by whichever drops the last reference (store_budget_unref).
 */
struct store_budget {
    _Atomic uint64_t bytes; /* cost of this owner's jobs not yet applied */
    _Atomic uint32_t refs;
};

/*
 * What a job costs in queued bytes: its size in memory, plus for work the
 * writer does beyond copying bytes: a new session file counts as
 * STORE_OPEN_COST, a metadata pair (a row of its own) STORE_ROW_COST more.
 */
#define STORE_OPEN_COST (64u << 10)
#define STORE_ROW_COST  96u

struct store_job {
    struct store_job *next;
    enum store_job_type type;
    int64_t session_id;
    void *cookie; /* the loop's: STORE_FLUSH and STORE_DELETE come back with it */
    int rc;       /* set by the writer on completed jobs: 0 or a negative errno */
    /* Charged to `budget` (a reference; NULL: none) while queued; cost set by store_enqueue. */
    struct store_budget *budget;
    uint64_t cost;
    union {
        struct {
            char *name;
            int64_t started_ns, uid;
        } open;
        struct {
            int64_t id, rank, world, pid, uid, started_ns;
            int64_t claimed_pid; /* hello.pid; pid is SO_PEERCRED's */
            char *host, *device;
        } process;
        struct {
            uint32_t id;
            char *name, *category; /* category NULL for STORE_DEVICE */
        } name;
        struct {
            int64_t process_id;
            struct proto_kv *kv;
            size_t n;
        } meta;
        struct {
            int64_t process_id;
            struct proto_batch b; /* entries[i].op_id is the session-wide op id */
            uint32_t *dev_ids;    /* per entry; 0 = no device */
            /*
             * Per entry: the session-wide id of its (out_shape, in_shapes)
             * pair (session_shape); 0 = none. The writer writes a shapes row
             * the first time it meets an id, from that entry's bytes.
             */
            uint32_t *shape_ids;
            size_t ids_cap; /* room in dev_ids and shape_ids (batchpool.h); 0: b.n */
        } batch;
        struct {
            int64_t process_id, ended_ns;
            int bye; /* processes.bye: 0 none, 1 bye, 2 cut by the daemon's stop */
            uint64_t dropped;
        } process_end; /* STORE_PROCESS_END */
        struct {
            int64_t ended_ns;
            uint64_t processes;
            uint64_t entries; /* the loop's count; the catalog gets what was committed */
            uint64_t dropped; /* by clients and refused; the store adds what it lost */
            int interrupted;  /* enum session_cut */
        } session_end;        /* STORE_SESSION_END */
        struct {
            int64_t process_id;
            struct proto_counters k; /* recorded, dropped, sent, acked as process_counters */
            bool final;
        } counters; /* STORE_COUNTERS */
        struct {
            int64_t process_id;
            uint64_t seq, stored; /* the loop's, carried for the ack */
            uint64_t lost;        /* set by the writer: entries of the process not stored */
        } flush;
    } u;
};

/* Why a session ended early: the catalog's `interrupted` column (schema/catalog.sql). */
enum store_cut {
    STORE_CUT_NONE = 0,  /* it ended normally: every producer left, or `end` was asked */
    STORE_CUT_STOP = 1,  /* the daemon was stopped (SIGTERM, SIGINT) while it was live */
    STORE_CUT_CRASH = 2, /* the daemon died while it was live; recovered at the next start */
};

/* One row of the catalog, as store_catalog_load() reports it. */
struct store_catalog_row {
    int64_t id, uid, started_ns, ended_ns;
    const char *name, *state;
    uint64_t processes, entries, dropped;
    int interrupted; /* the catalog's column: enum session_cut */
};

struct store;

/*
 * Process-wide SQLite settings, before any other SQLite call: multi-thread
 * mode (no per-call connection mutex: every connection here is used by one
 * thread at a time) and no memory statistics (a global mutex per malloc).
 * Test builds first arm $TRACECTLD_FAULT (fault.h).
 * Returns 0, -EBUSY when SQLite was already initialised, or -EINVAL for a
 * bad $TRACECTLD_FAULT (test builds only).
 */
int store_configure(void);

/*
 * Called on the loop thread for each completed job with a cookie, and for
 * each STORE_BATCH that was not stored (rc < 0: its entries are lost, to be
 * counted); the callee frees it.
 */
typedef void (*store_done_cb)(struct store *s, struct store_job *job, void *data);
/* Called on the loop thread after each commit (for backpressure: queued entries went down). */
typedef void (*store_progress_cb)(struct store *s, void *data);

/*
 * Locks DATA_DIR (-EBUSY: another daemon holds it), opens DATA_DIR/catalog.db
 * (creating DATA_DIR/sessions), reconciles the sessions the last run left
 * live from their files (processes, entries, dropped) and marks them ended
 * and interrupted (on a full disk those writes wait for space, and the
 * writer retries them: store_recover.h), and quarantines session files
 * without a catalog row.
 * Returns NULL and sets *err (negative errno) with a message in errbuf on
 * failure.
 */
struct store *store_new(uv_loop_t *loop, const char *data_dir, store_done_cb done,
                        store_progress_cb progress, void *data, int *err, char *errbuf,
                        size_t errlen);
/* Calls row_cb for every catalog row, oldest first. Only before store_start(). */
int store_catalog_load(struct store *s, int (*row_cb)(void *arg, const struct store_catalog_row *),
                       void *arg);
/* The largest session id ever given (ids are never reused), 0 if none. */
int64_t store_last_session_id(struct store *s);
#define STORE_DEFAULT_MAX_OPEN  64   /* session files open at once */
#define STORE_DEFAULT_COMMIT_MS 1000 /* longest a transaction stays open without a flush */
/*
 * Before store_start(): at most max_open session files open at once (at
 * least 2; each takes 3 fds: file, WAL, shared memory), and how long a
 * session's transaction may stay open under light load (0: commit at once).
 */
void store_set_limits(struct store *s, size_t max_open, uint64_t commit_ms);
/*
 * How a session file stores its entries, recorded in it as info.format:
 * rows of the entries
 * table, or blocks (schema/session_blocks.sql) behind the virtual table
 * `entries` (vtab.h). Either reads the same through SQL.
 */
enum store_format {
    STORE_FORMAT_ROWS = 1,
    STORE_FORMAT_BLOCKS = 2,
};
/* Before store_start(): the format of new session files (default blocks); opened files keep theirs.
 */
void store_set_format(struct store *s, enum store_format format);
/* Starts the writer thread. Returns 0 or a negative errno. */
int store_start(struct store *s);
/* Takes ownership of job. Never blocks on disk. */
void store_enqueue(struct store *s, struct store_job *job);
/* Drains the queue, commits, closes every session file, joins the thread. */
void store_stop(struct store *s);
/* NULL is a no-op. */
void store_free(struct store *s);

/* A budget with one reference and nothing charged, or NULL. */
struct store_budget *store_budget_new(void);
/* Drops a reference; NULL is a no-op. Either thread. */
void store_budget_unref(struct store_budget *b);
/* Sets job->budget to b (taking a reference). Before store_enqueue. */
void store_job_charge(struct store_job *job, struct store_budget *b);

/* A zeroed job of that type, or NULL. */
struct store_job *store_job_new(enum store_job_type type, int64_t session_id);
/* Frees a job and what it owns. NULL is a no-op. */
void store_job_free(struct store_job *job);

/* Path of a session's file into buf. */
void store_session_path(const struct store *s, int64_t id, char *buf, size_t len);

/*
 * Any thread: waits until the writer has applied the end of session id, when it is queued
 * (its last entries committed, its rank aggregates finished, the file closed), for at most
 * timeout_ms. A reader of an ended session calls it first, so that what it reads is the
 * whole session and not what happened to be committed when the loop ended it. Returns 0
 * (nothing pending, or applied) or -ETIMEDOUT.
 */
int store_wait_ended(struct store *s, int64_t id, unsigned timeout_ms);
/*
 * Bytes a session's file and its WAL take on disk, as the writer last
 * published them (after each commit, close and delete; for existing sessions
 * from store_catalog_load): 0 for a session not stored yet or deleted. Reads
 * memory, never the disk: safe from the loop thread.
 */
uint64_t store_session_bytes(struct store *s, int64_t id);
/* Bytes of DATA_DIR/catalog.db, published the same way (at store_new and each catalog update). */
uint64_t store_catalog_bytes(const struct store *s);

/* Figures for status; safe from the loop thread. */
uint64_t store_stored(const struct store *s);     /* entries committed since start */
uint64_t store_queued(const struct store *s);     /* entries waiting for the writer */
uint64_t store_queue_jobs(const struct store *s); /* jobs waiting */
uint64_t store_failed(const struct store *s);     /* entries lost to storage errors */
uint64_t store_orphans(const struct store *s);    /* session files in sessions/orphans/ */
/* What every waiting job costs (struct store_budget): what backpressure counts. */
uint64_t store_queued_bytes(const struct store *s);
/* WAL checkpoints the checkpointer thread did (store_ckpt.c), not the writer. */
uint64_t store_checkpoints(const struct store *s);
/*
 * Sessions the last run left live whose catalog rows (ended, interrupted,
 * their counts) wait for disk space: start-up deferred them on a full disk
 * and the writer retries every second (store_recover.h). 0: none.
 */
uint64_t store_deferred(const struct store *s);
/* Copies the last storage error ("" if none) into buf. */
void store_last_error(struct store *s, char *buf, size_t len);

#endif
