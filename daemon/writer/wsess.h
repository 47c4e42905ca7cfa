/*
 * wsess — a session as the writer holds it: its queue of jobs, the jobs of
 * its open transaction and their outcome, what it lost, and (while open) its
 * file with each part's statements and state: the checkpointer's
 * (store_ckpt.h), the shared rows' (store_apply.h), the rows format's
 * (store_rows.h), the blocks format's (store_blocks.h), the aggregates.
 *
 * At most store.wr.max_open files are open at once: opening another closes
 * the least recently used (committing it first); it is reopened when it
 * gets work again. A transaction that fails is rolled back whole
 * (wsess_abort): a file holds exactly the entries counted stored. Writer
 * thread only (the ckpt fields are shared as store_ckpt.h says).
 */
#ifndef TRACECTLD_WSESS_H
#define TRACECTLD_WSESS_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

#include "agg.h"
#include "map.h"
#include "ranks.h"
#include "store.h"
#include "store_apply.h"
#include "store_blocks.h"
#include "store_ckpt.h"
#include "store_rows.h"

/* The open transaction of a session and the jobs applied in it. */
struct wsess_txn {
    bool open;
    struct store_job *applied, **applied_tail; /* in order, completed at its end */
    bool flush_waiting;                        /* a flush is among them */
    uint64_t entries;                          /* entries applied in it */
    uint64_t started;                          /* ms (store_now_ms) */
    bool committing; /* its COMMIT runs: the one commit wsess's commit hook lets through */
};

struct wsess {
    struct store *store;
    struct wsess *next;       /* store.wr.sess, most recently used first */
    struct wsess *ready_next; /* store.wr.ready: sessions with queued jobs, in turn */
    bool ready, ended;
    int64_t id;
    struct store_job *q, **q_tail; /* queued, in order */
    struct wsess_txn txn;
    bool broken;         /* something other than entries was lost: nothing more is stored */
    uint64_t committed;  /* entries committed to the file by this run */
    uint64_t lost_total; /* entries lost to storage errors */
    struct u32map lost;  /* process id → entries that failed to be stored */
    bool lost_unmapped;  /* a loss did not fit in `lost` (out of memory): every flush fails */

    /* the open file: db NULL while closed */
    sqlite3 *db;
    struct wsess_ckpt ckpt;
    struct agg *agg;     /* report aggregates, updated with every insert */
    struct ranks *ranks; /* the rank aggregates (ranks.h) */
    struct wsess_shapes shapes;
    struct wsess_sql sql;
    struct wsess_rows rows;
    struct wsess_blocks bk;
};

/* The state of a session, created on first use and moved to the front. NULL on out of memory. */
struct wsess *wsess_get(struct store *s, int64_t id);
/* Closes its file and frees it. */
void wsess_free(struct store *s, struct wsess *w);
/* Opens its file (creating the schema); an existing one only unless create. 0 or -EIO. */
int wsess_file_open(struct store *s, struct wsess *w, bool create);
/* Closes its file, if open (the rest of the state stays). */
void wsess_file_close(struct store *s, struct wsess *w);
/* Begins a transaction unless one is open, opening the file. 0 or -EIO (and when broken). */
int wsess_begin(struct store *s, struct wsess *w);
/* Commits the open transaction (if any) and completes the jobs applied in it. */
void wsess_commit(struct store *s, struct wsess *w);
/* Rolls back the open transaction: nothing applied in it is stored. */
void wsess_abort(struct store *s, struct wsess *w);
/* The session ends: the open collectives and pending comm entries count. */
void wsess_finish_ranks(struct store *s, struct wsess *w);

/* Entry i's shapes.id (0: none), writing its row when the file has none yet. -1 on error. */
static inline int64_t wsess_shape_id(struct store *s, struct wsess *w, const struct store_job *job,
                                     size_t i)
{
    uint32_t id = job->u.batch.shape_ids != NULL ? job->u.batch.shape_ids[i] : 0;

    if (id == 0 || (id < w->shapes.cap && w->shapes.elements[id] != STORE_SHAPE_NONE))
        return id;
    return store_apply_shape_new(s, w, job, i);
}

#endif
