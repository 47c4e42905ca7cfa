/*
 * store_int.h — the state the store's files share (private to daemon/writer/store*.c
 * and wsess.c; nothing else includes it).
 *
 * struct store is built by store_new() on the loop thread and then split by
 * thread: `wr` is the writer thread's alone (store_writer.h), `ckpt` the
 * checkpointer's under its mutex (store_ckpt.h), `cat` the catalog (opened
 * at start-up, then the writer's: store_catalog.h); `q` and `sizes` are
 * shared with the loop under their mutexes, the figures are atomics.
 *
 * store.c also exports here what every store file uses: the one error path
 * (store_check: SQLite codes mapped by sql_errno and logged once), the
 * writer's connection settings (store_db_open), job accounting and the
 * sizes it publishes for the loop.
 */
#ifndef TRACECTLD_STORE_INT_H
#define TRACECTLD_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>
#include <uv.h>

#include "map.h"
#include "store.h"
#include "store_catalog.h"
#include "store_ckpt.h"
#include "store_recover.h"
#include "store_writer.h"

/* The queue from the loop to the writer and the done queue back, guarded by mu. */
struct store_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a job came, or stopping */
    struct store_job *head, *tail; /* queued by store_enqueue */
    struct store_job *done;        /* completed, for store_writer_async_cb */
    /* Sessions whose STORE_SESSION_END is queued and not applied yet (store_wait_ended). */
    int64_t *ending;
    size_t n_ending, cap_ending;
    pthread_cond_t ended_cv; /* an end was applied */
    bool stopping;
    char last_error[256];
};

/*
 * Sizes on disk, published by the writer after each commit, close and delete
 * (and by store_catalog_load at start-up), so that the loop reads them
 * without touching the disk.
 */
struct store_sizes {
    pthread_mutex_t mu;
    struct pairmap map; /* (session id, 0) → bytes of its file and WAL; guarded by mu */
    _Atomic uint64_t catalog_bytes;
};

struct store {
    uv_loop_t *loop;
    char *data_dir;
    struct store_cat cat;
    struct store_recover_state rec; /* recoveries a full disk deferred */
    struct store_writer wr;
    struct store_ckpt ckpt;
    struct store_queue q;
    struct store_sizes sizes;

    uv_async_t async;
    store_done_cb done_cb;
    store_progress_cb progress_cb;
    void *cb_data;

    /* figures for status */
    _Atomic uint64_t stored, queued, jobs, failed, orphans, queued_bytes;
};

/* Logs a failed step once and keeps it for status; returns err. */
int store_error(struct store *s, int err, const char *what, const char *detail);
/* An SQLite result code: 0 for OK, DONE and ROW, else logged and mapped by sql_errno(). */
int store_check(struct store *s, sqlite3 *db, int rc, const char *what);
/* A negative errno from a module over db (agg): logged with SQLite's message when it has one. */
int store_check_errno(struct store *s, sqlite3 *db, int err, const char *what);
/* sqlite3_exec through store_check. */
int store_exec(struct store *s, sqlite3 *db, const char *sql, const char *what);
/* Steps st once, resets it and clears its bindings: store_check of the step. */
int store_step(struct store *s, sqlite3 *db, sqlite3_stmt *st, const char *what);
/* Opens one of the writer's connections (catalog or session file) with its settings. */
int store_db_open(struct store *s, const char *path, sqlite3 **db);

/* Stats the session's files and publishes their size for store_session_bytes(). */
void store_publish_size(struct store *s, int64_t id);
/* The same for catalog.db. */
void store_publish_catalog(struct store *s);

/* The writer applied the job: what it cost is no longer queued. */
void store_job_uncharge(struct store *s, struct store_job *job);
/* Bytes a job holds in memory while queued: what backpressure counts. */
uint64_t store_job_cost(const struct store_job *job);
/* Entries a job carries (a batch's count, else 0). */
uint64_t store_job_entries(const struct store_job *job);

/* ms of CLOCK_MONOTONIC. */
uint64_t store_now_ms(void);

#endif
