/*
 * store_ckpt.c — the checkpointer thread; see store_ckpt.h.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include <sqlite3.h>

#include "log.h"
#include "store_ckpt.h"
#include "store_int.h"
#include "wsess.h"

/*
 * Checkpoints (copying a session's WAL back into its file) run on a thread of
 * their own, so the writer never stalls on them: it asks for one after a
 * commit that leaves CKPT_FRAMES more pages in the WAL than its last request
 * saw. A WAL only starts over when a transaction begins with every page of it
 * copied. A blocks transaction touches the file only at its commit
 * (store_blocks.c), which leaves the checkpointer the time to copy it all;
 * a row-format writer that never pauses rarely gives it that. At
 * CKPT_SYNC_FRAMES the writer copies what is left itself (little, the
 * checkpointer having done the rest), so the WAL stays under
 * ~CKPT_SYNC_FRAMES pages.
 */
#define CKPT_FRAMES      1000
#define CKPT_SYNC_FRAMES 8000

/*
 * Copies a session's WAL back into its file on a connection of its own
 * (PASSIVE: never blocks the writer, copies what no reader still needs),
 * opened at the session's first checkpoint and kept until store_ckpt_close(),
 * which the writer calls before it closes its own connection: the last
 * connection's close checkpoints and removes the WAL, and that must be the
 * writer's.
 */
static void ckpt_run(struct store *s, struct wsess *w)
{
    char path[PATH_MAX];
    int rc = SQLITE_OK;

    if (w->ckpt.db == NULL) {
        store_session_path(s, w->id, path, sizeof(path));
        rc = sqlite3_open_v2(path, &w->ckpt.db, SQLITE_OPEN_READWRITE, NULL);
        /* a read opens the WAL: a connection that has read nothing has none to checkpoint */
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(w->ckpt.db, "PRAGMA schema_version", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_wal_checkpoint_v2(w->ckpt.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_OK) {
        atomic_fetch_add(&s->ckpt.checkpoints, 1);
    } else if (rc != SQLITE_BUSY) { /* BUSY: the writer checkpoints itself, or later */
        log_warn("storage: checkpoint of session %lld: %s", (long long)w->id,
                 w->ckpt.db != NULL ? sqlite3_errmsg(w->ckpt.db) : sqlite3_errstr(rc));
        sqlite3_close(w->ckpt.db); /* opened again next time */
        w->ckpt.db = NULL;
    }
}

static void *ckpt_thread(void *arg)
{
    struct store *s = arg;

    pthread_mutex_lock(&s->ckpt.mu);
    for (;;) {
        struct wsess *w;

        while (s->ckpt.want == NULL && !s->ckpt.stopping)
            pthread_cond_wait(&s->ckpt.cv, &s->ckpt.mu);
        if ((w = s->ckpt.want) == NULL)
            break;
        if ((s->ckpt.want = w->ckpt.next) == NULL)
            s->ckpt.want_tail = &s->ckpt.want;
        w->ckpt.queued = false;
        s->ckpt.busy = w;
        pthread_mutex_unlock(&s->ckpt.mu);
        ckpt_run(s, w);
        pthread_mutex_lock(&s->ckpt.mu);
        s->ckpt.busy = NULL;
        pthread_cond_broadcast(&s->ckpt.idle_cv);
    }
    pthread_mutex_unlock(&s->ckpt.mu);
    return NULL;
}

/* Writer: asks for a checkpoint of w's file (once while it waits). */
static void ckpt_ask(struct store *s, struct wsess *w)
{
    if (!s->ckpt.started)
        return;
    pthread_mutex_lock(&s->ckpt.mu);
    if (!w->ckpt.queued && !s->ckpt.stopping) {
        w->ckpt.queued = true;
        w->ckpt.next = NULL;
        *s->ckpt.want_tail = w;
        s->ckpt.want_tail = &w->ckpt.next;
        pthread_cond_signal(&s->ckpt.cv);
    }
    pthread_mutex_unlock(&s->ckpt.mu);
}

/* Writer: no checkpoint of w's file is asked for or running when this returns. */
static void ckpt_forget(struct store *s, struct wsess *w)
{
    if (!s->ckpt.started)
        return;
    pthread_mutex_lock(&s->ckpt.mu);
    if (w->ckpt.queued) {
        struct wsess **pp = &s->ckpt.want;

        while (*pp != w)
            pp = &(*pp)->ckpt.next;
        if ((*pp = w->ckpt.next) == NULL)
            s->ckpt.want_tail = pp;
        w->ckpt.queued = false;
    }
    while (s->ckpt.busy == w)
        pthread_cond_wait(&s->ckpt.idle_cv, &s->ckpt.mu);
    pthread_mutex_unlock(&s->ckpt.mu);
}

/* Writer, before closing w's file: ckpt_forget(), and the checkpointer's connection closed. */
void store_ckpt_close(struct store *s, struct wsess *w)
{
    ckpt_forget(s, w);
    sqlite3_close(w->ckpt.db); /* the checkpointer no longer touches it */
    w->ckpt.db = NULL;
}

/*
 * After each commit on a session file (sqlite3_wal_hook; it replaces SQLite's
 * own checkpoint every 1000 pages): asks the checkpointer to copy the WAL
 * back every CKPT_FRAMES pages; past CKPT_SYNC_FRAMES copies what is left
 * here, so that the next transaction starts the WAL over.
 */
static int ckpt_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct wsess *w = arg;
    struct store *s = w->store;

    if (frames < w->ckpt.asked) /* the WAL started over */
        w->ckpt.asked = 0;
    if (frames >= CKPT_SYNC_FRAMES || (!s->ckpt.started && frames >= CKPT_FRAMES)) {
        ckpt_forget(s, w);
        if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK)
            w->ckpt.asked = 0;
    } else if (frames - w->ckpt.asked >= CKPT_FRAMES) {
        ckpt_ask(s, w);
        w->ckpt.asked = frames;
    }
    return SQLITE_OK;
}

void store_ckpt_hook(struct wsess *w)
{
    w->ckpt.asked = 0;
    sqlite3_wal_hook(w->db, ckpt_wal_hook, w);
}

void store_ckpt_init(struct store *s)
{
    pthread_mutex_init(&s->ckpt.mu, NULL);
    pthread_cond_init(&s->ckpt.cv, NULL);
    pthread_cond_init(&s->ckpt.idle_cv, NULL);
}

void store_ckpt_deinit(struct store *s)
{
    pthread_mutex_destroy(&s->ckpt.mu);
    pthread_cond_destroy(&s->ckpt.cv);
    pthread_cond_destroy(&s->ckpt.idle_cv);
}

void store_ckpt_start(struct store *s)
{
    s->ckpt.want = NULL;
    s->ckpt.want_tail = &s->ckpt.want;
    if (pthread_create(&s->ckpt.thread, NULL, ckpt_thread, s) == 0)
        s->ckpt.started = true;
}

/* Stops the checkpointer (after the writer: its files are closed). */
void store_ckpt_stop(struct store *s)
{
    if (s->ckpt.started) {
        pthread_mutex_lock(&s->ckpt.mu);
        s->ckpt.stopping = true;
        pthread_cond_signal(&s->ckpt.cv);
        pthread_mutex_unlock(&s->ckpt.mu);
        pthread_join(s->ckpt.thread, NULL);
        s->ckpt.started = false;
    }
}
