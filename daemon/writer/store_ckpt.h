/*
 * store_ckpt — the checkpointer thread: copies session WALs back into their
 * files on connections of its own, so that the writer never waits on it.
 *
 * DESIGN
 * The writer's WAL hook (installed by store_ckpt_hook) asks for a
 * checkpoint every CKPT_FRAMES pages a session's WAL grows; the request
 * queues the session (once) on ckpt.want under ckpt.mu and wakes the
 * thread, which runs a PASSIVE checkpoint on its own connection to the file
 * (opened at the first, kept until store_ckpt_close). Past CKPT_SYNC_FRAMES
 * the writer copies what is left itself. Before the writer closes a file it
 * calls store_ckpt_close(): nothing of that session is queued or running
 * when it returns, and the checkpointer's connection is closed, so the
 * writer's close is the last one (it checkpoints and removes the WAL).
 * Without the thread (store_ckpt_start failed) the writer checkpoints
 * itself every CKPT_FRAMES pages.
 *
 * Lifecycle: store_ckpt_start() from store_start(), store_ckpt_stop() after
 * the writer has stopped (its files are closed).
 */
#ifndef TRACECTLD_STORE_CKPT_H
#define TRACECTLD_STORE_CKPT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

struct store;
struct wsess;

/* The checkpointer's, in struct store. */
struct store_ckpt {
    pthread_t thread;
    bool started, stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv;               /* a request came, or stopping */
    pthread_cond_t idle_cv;          /* a checkpoint ended */
    struct wsess *want, **want_tail; /* sessions asked for, in order */
    struct wsess *busy;              /* the session being checkpointed now, NULL: none */
    _Atomic uint64_t checkpoints;    /* done, for status */
};

/* A session's, in struct wsess. */
struct wsess_ckpt {
    int asked;          /* writer: WAL pages when a checkpoint was last asked for */
    struct wsess *next; /* store.ckpt.want, while queued (guarded by store.ckpt.mu) */
    bool queued;        /* guarded by store.ckpt.mu */
    sqlite3 *db;        /* its own connection, opened at the first checkpoint */
};

/* Mutex and conditions of s->ckpt; before anything else of it. */
void store_ckpt_init(struct store *s);
/* Releases what store_ckpt_init made; after store_ckpt_stop. */
void store_ckpt_deinit(struct store *s);
/* Starts the thread; without it (no thread) the writer checkpoints itself. */
void store_ckpt_start(struct store *s);
/* Stops and joins the thread (after the writer: its files are closed). */
void store_ckpt_stop(struct store *s);
/* Writer: installs the WAL hook on w's freshly opened connection. */
void store_ckpt_hook(struct wsess *w);
/* Writer, before closing w's file: no checkpoint of it queued or running, its connection closed. */
void store_ckpt_close(struct store *s, struct wsess *w);

#endif
