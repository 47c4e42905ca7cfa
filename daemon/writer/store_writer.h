/*
 * store_writer — the writer thread: its queue from the loop, its rounds over
 * the sessions with work, and the completed jobs it hands back.
 *
 * DESIGN
 * store_enqueue() (loop thread) appends a job to store.q under its mutex and
 * signals the writer. The writer takes the whole queue at once, sorts it
 * into one queue per session (struct wsess) and serves the sessions in
 * turn, at most QUANTUM_ENTRIES entries of one per turn; a session's
 * transaction commits when a flush waits, at COMMIT_ENTRIES (blocks:
 * COMMIT_ENTRIES_BLOCKS), at the commit interval or when stopping. Completed
 * jobs go to store.q.done after the commit, and one uv_async_send tells the
 * loop, whose callback (store_writer_async_cb) drains them all: sends
 * coalesce.
 *
 * Everything in struct store_writer is the writer thread's alone once it
 * runs (set before by store_set_limits/store_set_format).
 */
#ifndef TRACECTLD_STORE_WRITER_H
#define TRACECTLD_STORE_WRITER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store.h"

struct wsess;

struct store_writer {
    struct wsess *sess;                          /* every session with state, most recent first */
    struct wsess *ready, **ready_tail;           /* round-robin of sessions with queued jobs */
    struct store_job *finished, **finished_tail; /* completed, not yet handed back */
    size_t n_open, max_open;                     /* session files open, and the cap */
    uint64_t commit_ms;
    enum store_format format; /* of new session files */
    pthread_t thread;
    bool started;
};

/* Starts the writer thread. 0 or a negative errno. */
int store_writer_start(struct store *s);
/* Drains the queue, commits, closes every file and joins the thread. */
void store_writer_stop(struct store *s);
/* Writer: hands a job back to the loop (those with a cookie, and lost batches) or frees it. */
void store_writer_finish(struct store *s, struct store_job *job);
/* Loop thread: hands every completed job back, then reports progress. */
void store_writer_async_cb(uv_async_t *handle);

#endif
