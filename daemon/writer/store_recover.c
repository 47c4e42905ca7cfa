/*
 * store_recover.c — sessions the last run left live; see store_recover.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "info.h"
#include "log.h"
#include "ranks.h"
#include "store_int.h"
#include "store_recover.h"
#include "vtab.h"
#include "sqlutil.h"

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
 * The session's file: its rank aggregates finished (the collectives still
 * open and the comm entries pending at its last commit: a write, done once)
 * and, when counts, what its catalog row lacks (it has the counts of its
 * start, 0): processes, entries (the aggregates when exact, else a count)
 * and what its processes reported dropped. Returns -ENOSPC when the disk is
 * too full to finish the aggregates (to try again), else 0: another error
 * is logged and not retried, as a missing file gives counts of 0.
 */
static int recover_file(struct store *s, struct store_recovery *r, bool counts)
{
    char path[PATH_MAX], why[200];
    sqlite3 *db = NULL;
    int rc = 0;

    store_session_path(s, r->id, path, sizeof(path));
    if (access(path, F_OK) != 0 ||
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        r->ranks_done = true;
        return 0;
    }
    vtab_register(db); /* entries of a blocks file */
    sqlite3_busy_timeout(db, 5000);
    if (info_schema_check(db, why, sizeof(why)) == -EPROTO) {
        /* not ours to change: its counts stay those of its start */
        log_error("session %lld: %s; left as it is", (long long)r->id, why);
        sqlite3_close(db);
        r->ranks_done = true;
        return 0;
    }
    if (!r->ranks_done) {
        rc = ranks_recover(db);
        if (rc < 0 && rc != -ENOSPC)
            log_error("session %lld: cannot finish its rank aggregates: %s", (long long)r->id,
                      sqlite3_errmsg(db));
        r->ranks_done = rc != -ENOSPC;
    }
    if (counts) {
        r->processes = file_int(db, "SELECT count(*) FROM processes", 0);
        r->entries = info_int(db, "aggregates", 0) == 1
                         ? file_int(db, "SELECT coalesce((SELECT entries FROM agg_session), 0)", -1)
                         : -1;
        if (r->entries < 0)
            r->entries = file_int(db, "SELECT count(*) FROM entries", 0);
        r->dropped = file_int(db, "SELECT coalesce(sum(dropped), 0) FROM processes", 0);
    }
    sqlite3_close(db);
    return rc == -ENOSPC ? -ENOSPC : 0;
}

/*
 * The catalog row: ended, interrupted, with the counts of the file. Returns
 * 0, -ENOSPC (the disk is full: try again), or another negative errno,
 * logged. Quiet on -ENOSPC: the writer retries every second.
 */
static int recover_row(struct store *s, const struct store_recovery *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->cat.db,
        "UPDATE sessions SET state = 'ended', interrupted = 2 /* STORE_CUT_CRASH */,"
        " processes = ?, entries = ?, dropped = ?,"
        " ended_ns = coalesce(ended_ns, ?) WHERE id = ?",
        -1, &st, NULL);

    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, r->processes);
        sqlite3_bind_int64(st, 2, r->entries);
        sqlite3_bind_int64(st, 3, r->dropped);
        sqlite3_bind_int64(st, 4, r->ended_ns);
        sqlite3_bind_int64(st, 5, r->id);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
    }
    store_publish_catalog(s);
    if (sql_errno(rc) == -ENOSPC)
        return -ENOSPC;
    return store_check(s, s->cat.db, rc, "mark an interrupted session");
}

/* The file's writes, then the row's. 0, -ENOSPC (to try again) or another negative errno. */
static int recover_write(struct store *s, struct store_recovery *r)
{
    int rc = 0;

    if (!r->ranks_done)
        rc = recover_file(s, r, false);
    return rc < 0 ? rc : recover_row(s, r);
}

/* Keeps r to write when space returns. 0 or -ENOMEM. */
static int recover_defer(struct store *s, const struct store_recovery *r)
{
    struct store_recovery *p = realloc(s->rec.v, (s->rec.n + 1) * sizeof(*p));

    if (p == NULL)
        return -ENOMEM;
    p[s->rec.n++] = *r;
    s->rec.v = p;
    atomic_store(&s->rec.count, s->rec.n);
    return 0;
}

/* The ids of the sessions the catalog has live, into *ids (caller frees). How many, or -EIO. */
static int64_t live_ids(struct store *s, int64_t **ids)
{
    sqlite3_stmt *st;
    int64_t *p;
    size_t n = 0;

    *ids = NULL;
    if (sqlite3_prepare_v2(s->cat.db, "SELECT id FROM sessions WHERE state = 'live'", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if ((p = realloc(*ids, (n + 1) * sizeof(**ids))) == NULL)
            break;
        *ids = p;
        (*ids)[n++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return (int64_t)n;
}

int store_recover(struct store *s)
{
    struct timespec now;
    int64_t *ids, n = live_ids(s, &ids);
    int rc = 0;

    if (n < 0)
        return -EIO;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        struct store_recovery r = {.id = ids[i],
                                   .ended_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec};

        if ((rc = recover_file(s, &r, true)) == 0)
            rc = recover_row(s, &r);
        log_info("session %lld was live when the daemon stopped: %lld processes, %lld entries"
                 " found in its file",
                 (long long)r.id, (long long)r.processes, (long long)r.entries);
        if (rc == -ENOSPC)
            rc = recover_defer(s, &r);
    }
    free(ids);
    if (rc == 0 && s->rec.n > 0)
        log_warn("disk full: %zu session(s) left live by the last run are shown ended and"
                 " interrupted, but their catalog rows wait for space (retried every %d ms)",
                 s->rec.n, STORE_RECOVER_RETRY_MS);
    return rc < 0 ? -EIO : 0;
}

void store_recover_row(struct store *s, struct store_catalog_row *row)
{
    for (size_t i = 0; i < s->rec.n; i++) {
        const struct store_recovery *r = &s->rec.v[i];

        if (r->id != row->id)
            continue;
        row->state = "ended";
        row->interrupted = STORE_CUT_CRASH;
        row->processes = (uint64_t)r->processes;
        row->entries = (uint64_t)r->entries;
        row->dropped = (uint64_t)r->dropped;
        if (row->ended_ns == 0)
            row->ended_ns = r->ended_ns;
    }
}

int64_t store_recover_retry(struct store *s, int64_t wait)
{
    uint64_t now;
    size_t kept = 0, n = s->rec.n;

    if (n == 0)
        return wait;
    if ((now = store_now_ms()) >= s->rec.retry_at) {
        for (size_t i = 0; i < n; i++)
            if (recover_write(s, &s->rec.v[i]) == -ENOSPC)
                s->rec.v[kept++] = s->rec.v[i]; /* any other error was logged: given up */
        s->rec.n = kept;
        atomic_store(&s->rec.count, kept);
        s->rec.retry_at = now + STORE_RECOVER_RETRY_MS;
        if (kept < n)
            log_info("storage: the deferred catalog rows of %zu interrupted session(s) are"
                     " written; %zu wait",
                     n - kept, kept);
        if (kept == 0)
            return wait;
    }
    int64_t due = (int64_t)(s->rec.retry_at - now);
    return wait < 0 || due < wait ? due : wait;
}

void store_recover_free(struct store *s)
{
    free(s->rec.v);
    s->rec.v = NULL;
    s->rec.n = 0;
}

uint64_t store_deferred(const struct store *s)
{
    return atomic_load(&s->rec.count);
}
