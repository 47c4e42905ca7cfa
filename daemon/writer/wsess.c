/*
 * wsess.c — a session as the writer holds it; see wsess.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sqlite3.h>

#include "agg.h"
#include "info.h"
#include "log.h"
#include "ranks.h"
#include "schema.h"
#include "store_apply.h"
#include "store_blocks.h"
#include "store_ckpt.h"
#include "store_int.h"
#include "store_rows.h"
#include "wsess.h"

void wsess_file_close(struct store *s, struct wsess *w)
{
    if (w->db == NULL)
        return;
    agg_free(w->agg);
    w->agg = NULL;
    ranks_free(w->ranks);
    w->ranks = NULL;
    store_apply_close(w);
    store_rows_close(w);
    store_blocks_close(w);
    store_ckpt_close(s, w); /* the last connection's close checkpoints, and removes the WAL */
    sqlite3_close(w->db);
    w->db = NULL;
    w->txn.open = false;
    s->wr.n_open--;
    store_publish_size(s, w->id); /* the close checkpointed the WAL away */
}

/*
 * Closes the least recently used open file other than keep, committing its
 * transaction first (which completes its applied jobs). False when none is open.
 */
static bool evict(struct store *s, const struct wsess *keep)
{
    struct wsess *victim = NULL;

    for (struct wsess *w = s->wr.sess; w != NULL; w = w->next)
        if (w->db != NULL && w != keep)
            victim = w; /* the list is most recently used first */
    if (victim == NULL)
        return false;
    wsess_commit(s, victim); /* the rank aggregates save what reopening needs (ranks_load) */
    wsess_file_close(s, victim);
    return true;
}

/*
 * SQLite rolls a transaction back by itself on some errors (out of memory
 * while it closes a statement's journal) and may still answer SQLITE_DONE
 * for that statement: every later statement would then commit on its own,
 * storing entries that the failed COMMIT counts lost. While the writer's
 * transaction is open, the only commit let through is its COMMIT; any other
 * fails (SQLITE_CONSTRAINT_COMMITHOOK), and with it the job, which rolls
 * the transaction back as a whole.
 */
static int wsess_commit_hook(void *arg)
{
    const struct wsess *w = arg;

    return w->txn.open && !w->txn.committing;
}

/* A file reopened: of this build's schema version, else refused (logged). 0 or -errno. */
static int wsess_check_schema(struct store *s, struct wsess *w)
{
    char what[64], why[200];
    int err = info_schema_check(w->db, why, sizeof(why));

    if (err == 0)
        return 0;
    snprintf(what, sizeof(what), "session %lld", (long long)w->id);
    return store_error(s, err, what, why);
}

/*
 * A new file's tables and its schema version, in one transaction: a reader
 * (a report of the live session before its first commit) finds the file
 * empty, or its tables with the version, never the tables alone.
 */
static int wsess_create_schema(struct store *s, struct wsess *w)
{
    if (store_exec(s, w->db, "BEGIN", "create session schema") < 0)
        return -EIO;
    if ((s->wr.format == STORE_FORMAT_BLOCKS &&
         store_exec(s, w->db, schema_session_blocks_sql, "create blocks schema") < 0) ||
        store_exec(s, w->db, schema_session_sql, "create session schema") < 0 ||
        store_check_errno(s, w->db, info_schema_set(w->db), "record the schema version") < 0) {
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    return store_exec(s, w->db, "COMMIT", "create session schema");
}

int wsess_file_open(struct store *s, struct wsess *w, bool create)
{
    char path[PATH_MAX];

    if (w->db != NULL)
        return 0;
    store_session_path(s, w->id, path, sizeof(path));
    if (!create && access(path, F_OK) != 0)
        return store_check(s, NULL, SQLITE_CANTOPEN, "session file is missing");
    while (s->wr.n_open >= s->wr.max_open && evict(s, w))
        ;
    s->wr.n_open++;
    if (store_db_open(s, path, &w->db) < 0)
        goto fail;
    store_ckpt_hook(w);
    sqlite3_commit_hook(w->db, wsess_commit_hook, w);
    /* before session.sql, which would add its tables to any file */
    if (!create && wsess_check_schema(s, w) < 0)
        goto fail;
    if ((create ? wsess_create_schema(s, w)
                : store_exec(s, w->db, schema_session_sql, "create session schema")) < 0 ||
        store_blocks_open(s, w, create) < 0 || store_apply_prepare(s, w) < 0 ||
        (!w->bk.on && store_rows_prepare(s, w) < 0) || (w->agg = agg_new(w->db)) == NULL ||
        (!create && store_apply_load_shapes(s, w) < 0) ||
        (!create && store_check_errno(s, w->db, agg_load(w->agg), "load aggregates") < 0) ||
        (w->ranks = ranks_new(w->db)) == NULL ||
        (!create && store_check_errno(s, w->db, ranks_load(w->ranks), "load rank aggregates") < 0))
        goto fail;
    return 0;
fail:
    if (w->db == NULL)
        s->wr.n_open--;
    else
        wsess_file_close(s, w);
    return -EIO;
}

struct wsess *wsess_get(struct store *s, int64_t id)
{
    struct wsess *w, **pp;

    for (pp = &s->wr.sess; (w = *pp) != NULL; pp = &w->next) {
        if (w->id == id) {
            *pp = w->next; /* move to front: the list is in order of use */
            w->next = s->wr.sess;
            s->wr.sess = w;
            return w;
        }
    }
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return NULL;
    w->id = id;
    w->store = s;
    w->q_tail = &w->q;
    w->txn.applied_tail = &w->txn.applied;
    u32map_init(&w->lost);
    w->next = s->wr.sess;
    s->wr.sess = w;
    return w;
}

void wsess_free(struct store *s, struct wsess *w)
{
    for (struct wsess **pp = &s->wr.sess; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    wsess_file_close(s, w);
    u32map_deinit(&w->lost);
    free(w);
}

int wsess_begin(struct store *s, struct wsess *w)
{
    if (w->broken)
        return -EIO;
    if (w->txn.open)
        return 0;
    if (wsess_file_open(s, w, false) < 0 || store_exec(s, w->db, "BEGIN", "begin") < 0)
        return -EIO;
    w->txn.open = true;
    w->txn.entries = 0;
    w->txn.started = store_now_ms();
    return 0;
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
    if (u32map_put(&w->lost, pid, n + (uint32_t)job->u.batch.b.n) < 0)
        w->lost_unmapped = true; /* which process lost it is forgotten: no flush may succeed */
    w->lost_total += job->u.batch.b.n;
    atomic_fetch_add(&s->failed, job->u.batch.b.n);
}

/*
 * A flush succeeds only when every entry its process sent before it is
 * stored: a batch lost earlier (disk full, no file) fails every later flush
 * of that process, with the count; a loss that could not be noted for its
 * process (out of memory) fails every later flush of the session.
 */
static void wsess_flush_result(struct wsess *w, struct store_job *job)
{
    uint32_t lost = 0;

    if (u32map_get(&w->lost, (uint32_t)job->u.flush.process_id, &lost) && lost) {
        job->rc = -EIO;
        job->u.flush.lost = lost;
    } else if (w->lost_unmapped) {
        job->rc = -EIO;
        job->u.flush.lost = w->lost_total; /* the session's: this process's is not known */
    }
}

/* The open transaction committed (ok) or was rolled back: complete its jobs. */
static void wsess_settle(struct store *s, struct wsess *w, bool ok)
{
    struct store_job *job, *next;

    if (ok) {
        w->committed += w->txn.entries;
        atomic_fetch_add(&s->stored, w->txn.entries);
    }
    w->txn.entries = 0;
    for (job = w->txn.applied; job != NULL; job = next) {
        next = job->next;
        /* in order: a flush sees the losses of every batch before it */
        if (job->type == STORE_FLUSH)
            wsess_flush_result(w, job);
        else if (!ok || job->rc < 0)
            wsess_lost(s, w, job);
        store_writer_finish(s, job);
    }
    w->txn.applied = NULL;
    w->txn.applied_tail = &w->txn.applied;
    w->txn.flush_waiting = false;
}

void wsess_abort(struct store *s, struct wsess *w)
{
    if (w->txn.open) {
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        agg_discard(w->agg);
        ranks_discard(w->ranks);
        w->txn.open = false;
        store_blocks_drop(w);
        /* The block in memory and the shape ids with rows go back to what the file holds. */
        if (((w->bk.on && store_blocks_resume(s, w) < 0) || store_apply_load_shapes(s, w) < 0) &&
            !w->broken) {
            log_error("storage: session %lld cannot read its last block or its shapes back:"
                      " it stores nothing more",
                      (long long)w->id);
            w->broken = true;
        }
    }
    wsess_settle(s, w, false);
}

void wsess_commit(struct store *s, struct wsess *w)
{
    if (w->txn.open) {
        int rc = -EIO;

        if (!(w->bk.on && store_blocks_write(s, w) < 0) &&
            store_check_errno(s, w->db, ranks_flush(w->ranks), "write rank aggregates") == 0 &&
            store_check_errno(s, w->db, agg_flush(w->agg), "write aggregates") == 0) {
            w->txn.committing = true;
            rc = store_exec(s, w->db, "COMMIT", "commit");
            w->txn.committing = false;
        }
        if (rc < 0) {
            wsess_abort(s, w);
            return;
        }
        w->txn.open = false;
        store_publish_size(s, w->id); /* before the acks: a flushed session has its size */
    }
    wsess_settle(s, w, true);
}

/*
 * The session ends: the open collectives and pending comm entries count. A
 * file closed mid-session (evict) is opened again for them: it saved
 * them at its last commit.
 */
void wsess_finish_ranks(struct store *s, struct wsess *w)
{
    if ((w->db == NULL && (w->broken || wsess_begin(s, w) < 0)) || !ranks_pending(w->ranks) ||
        wsess_begin(s, w) < 0)
        return;
    if (store_check_errno(s, w->db, ranks_finish(w->ranks), "finish rank aggregates") < 0)
        wsess_abort(s, w);
}
