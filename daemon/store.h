/*
 * store — the storage writer: the only code that writes SQLite.
 *
 * It owns DATA_DIR/catalog.db and every open DATA_DIR/sessions/<id>.db
 * connection, all on its own thread, so the loop thread never waits on disk.
 *
 * DESIGN
 * The loop thread builds a struct store_job and hands it over with
 * store_enqueue(); crossing the thread is a move: after the call the loop
 * never touches the job again, until (for jobs with a `cookie`) it comes
 * back through the done callback. The writer takes the whole queue at once,
 * applies every job inside one transaction per session file touched,
 * commits, and only then returns the completed jobs (flush markers, deletes)
 * to the loop through a queue and uv_async_send (which coalesces, so the
 * callback drains the whole done queue). An ack sent from the done callback
 * therefore means the entries are committed (WAL, synchronous=NORMAL: safe
 * against a crash or kill -9 of the daemon).
 *
 * Lifecycle: store_new() opens the catalog synchronously (start-up may wait
 * on disk), store_catalog_load() lists the sessions, store_start() starts the
 * thread, store_stop() drains the queue, commits, closes every file and joins
 * it, store_free() releases the rest.
 */
#ifndef TRACECTLD_STORE_H
#define TRACECTLD_STORE_H

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
    STORE_SESSION_END, /* the session ended: update the catalog, close the file */
    STORE_DELETE,      /* remove an ended session's file and catalog row */
};

struct store_job {
    struct store_job *next;
    enum store_job_type type;
    int64_t session_id;
    void *cookie; /* the loop's: STORE_FLUSH and STORE_DELETE come back with it */
    int rc;       /* set by the writer on completed jobs: 0 or a negative errno */
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
        } batch;
        struct {
            int64_t process_id, ended_ns;
            bool bye;
            uint64_t dropped;
        } pend;
        struct {
            int64_t ended_ns;
            uint64_t processes, entries, dropped;
            bool interrupted;
        } send;
        struct {
            int64_t process_id;
            uint64_t seq, stored; /* the loop's, carried for the ack */
            uint64_t lost;        /* set by the writer: entries of the process not stored */
        } flush;
    } u;
};

/* One row of the catalog, as store_catalog_load() reports it. */
struct store_catalog_row {
    int64_t id, uid, started_ns, ended_ns;
    const char *name, *state;
    uint64_t processes, entries, dropped;
    bool interrupted;
};

struct store;

/*
 * Process-wide SQLite settings, before any other SQLite call: multi-thread
 * mode (no per-call connection mutex: every connection here is used by one
 * thread at a time) and no memory statistics (a global mutex per malloc).
 * Returns 0, or -EBUSY when SQLite was already initialised.
 */
int store_configure(void);

/* Called on the loop thread for each completed job with a cookie; the callee frees it. */
typedef void (*store_done_cb)(struct store *s, struct store_job *job, void *data);
/* Called on the loop thread after each commit (for backpressure: queued entries went down). */
typedef void (*store_progress_cb)(struct store *s, void *data);

/*
 * Opens DATA_DIR/catalog.db (creating DATA_DIR/sessions), marks sessions the
 * last run left live as ended and interrupted. Returns NULL and sets *err
 * (negative errno) with a message in errbuf on failure.
 */
struct store *store_new(uv_loop_t *loop, const char *data_dir, store_done_cb done,
                        store_progress_cb progress, void *data, int *err, char *errbuf,
                        size_t errlen);
/* Calls row_cb for every catalog row, oldest first. Only before store_start(). */
int store_catalog_load(struct store *s, int (*row_cb)(void *arg, const struct store_catalog_row *),
                       void *arg);
/* The largest session id ever given (ids are never reused), 0 if none. */
int64_t store_last_session_id(struct store *s);
/* Starts the writer thread. Returns 0 or a negative errno. */
int store_start(struct store *s);
/* Takes ownership of job. Never blocks on disk. */
void store_enqueue(struct store *s, struct store_job *job);
/* Drains the queue, commits, closes every session file, joins the thread. */
void store_stop(struct store *s);
/* NULL is a no-op. */
void store_free(struct store *s);

/* A zeroed job of that type, or NULL. */
struct store_job *store_job_new(enum store_job_type type, int64_t session_id);
/* Frees a job and what it owns. NULL is a no-op. */
void store_job_free(struct store_job *job);

/* Path of a session's file into buf. */
void store_session_path(const struct store *s, int64_t id, char *buf, size_t len);
/* Bytes a session's file and its WAL take on disk (a stat() each; 0 when absent). */
uint64_t store_session_bytes(const struct store *s, int64_t id);

/* Figures for status; safe from the loop thread. */
uint64_t store_stored(const struct store *s);     /* entries committed since start */
uint64_t store_queued(const struct store *s);     /* entries waiting for the writer */
uint64_t store_queue_jobs(const struct store *s); /* jobs waiting */
uint64_t store_failed(const struct store *s);     /* entries lost to storage errors */
/* Copies the last storage error ("" if none) into buf. */
void store_last_error(struct store *s, char *buf, size_t len);

#endif
