/*
 * store_catalog.c — the catalog, the data dir's lock and orphans, start-up
 * recovery; see store_catalog.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "info.h"
#include "log.h"
#include "ranks.h"
#include "schema.h"
#include "store_catalog.h"
#include "store_int.h"
#include "store_recover.h"
#include "vtab.h"
#include "wsess.h"

/* Runs one catalog statement on its own (autocommit): int64 args, then an optional text. */
static int catalog_run(struct store *s, const char *sql, const int64_t *args, size_t n,
                       const char *text)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->cat.db, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->cat.db, rc, "catalog prepare");
    for (size_t i = 0; i < n; i++)
        sqlite3_bind_int64(st, (int)i + 1, args[i]);
    if (text != NULL)
        sqlite3_bind_text(st, (int)n + 1, text, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    store_publish_catalog(s);
    return store_check(s, s->cat.db, rc, "catalog update");
}

/*
 * Moves sessions/<id>.db and its -wal and -shm (whatever of them exists)
 * into sessions/orphans/, so that no session ever opens a file it did not
 * create. Returns 0 when none existed, 1 when something was moved, or a
 * negative errno.
 */
static int quarantine(struct store *s, int64_t id, const char *why)
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
static int create_file(struct store *s, int64_t id)
{
    char path[PATH_MAX];
    int fd;

    if (quarantine(s, id, "a file was in the way of a new session") < 0)
        return -EIO;
    store_session_path(s, id, path, sizeof(path));
    fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = -errno;
        log_error("storage: cannot create %s: %s", path, strerror(errno));
        pthread_mutex_lock(&s->q.mu);
        snprintf(s->q.last_error, sizeof(s->q.last_error), "cannot create %.180s: %s", path,
                 strerror(-err));
        pthread_mutex_unlock(&s->q.mu);
        return err;
    }
    close(fd);
    return 0;
}

/*
 * A new session: its catalog row is committed first (so a crash never leaves
 * a file without a row to own it), then the file is created exclusively.
 */
int store_catalog_session_open(struct store *s, struct wsess *w, struct store_job *job)
{
    int64_t args[3] = {job->session_id, job->u.open.started_ns, job->u.open.uid};

    if (catalog_run(s, "INSERT INTO sessions(id, started_ns, uid, name) VALUES (?,?,?,?)", args, 3,
                    job->u.open.name) < 0 ||
        create_file(s, w->id) < 0 || wsess_file_open(s, w, true) < 0 || wsess_begin(s, w) < 0 ||
        store_exec(s, w->db,
                   w->bk.on ? "INSERT OR REPLACE INTO info VALUES ('format', 2)"
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
int store_catalog_session_end(struct store *s, struct wsess *w, struct store_job *job)
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

int store_catalog_session_delete(struct store *s, struct wsess *w, struct store_job *job)
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

/* ---- start-up ------------------------------------------------------------ */

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
static int lock_data_dir(struct store *s, char *errbuf, size_t errlen)
{
    char path[PATH_MAX], pid[32] = "";
    ssize_t n;

    snprintf(path, sizeof(path), "%s/lock", s->data_dir);
    s->cat.lock_fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->cat.lock_fd < 0) {
        snprintf(errbuf, errlen, "cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    if (flock(s->cat.lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;
        if ((n = pread(s->cat.lock_fd, pid, sizeof(pid) - 1, 0)) > 0)
            pid[strcspn(pid, "\n")] = '\0';
        if (err == EWOULDBLOCK)
            snprintf(errbuf, errlen, "data dir %s is in use by another tracectld (pid %s)",
                     s->data_dir, pid[0] ? pid : "unknown");
        else
            snprintf(errbuf, errlen, "cannot lock %s: %s", path, strerror(err));
        return err == EWOULDBLOCK ? -EBUSY : -err;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(s->cat.lock_fd, 0) < 0 || pwrite(s->cat.lock_fd, pid, (size_t)n, 0) != n)
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

    if (sqlite3_prepare_v2(s->cat.db, "SELECT 1 FROM sessions WHERE id = ?", -1, &st, NULL) ==
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
static int scan_orphans(struct store *s, char *errbuf, size_t errlen)
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
            if ((id = strtoll(de->d_name, NULL, 10)) > s->cat.max_file_id)
                s->cat.max_file_id = id;
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
        if (id > s->cat.max_file_id)
            s->cat.max_file_id = id;
        if (!catalog_has(s, id) && quarantine(s, id, "a session file without a catalog row") < 0) {
            snprintf(errbuf, errlen, "cannot move orphan session file %s aside", de->d_name);
            closedir(dir);
            return -EIO;
        }
    }
    closedir(dir);
    return 0;
}

/*
 * The catalog's WAL is copied back after every commit (its updates are a few
 * pages, once per session opened or ended), so that the next transaction
 * starts the WAL over and writes its frames where the last ones were: a
 * catalog update then needs no new space, and a session that ends on a full
 * disk is still recorded as ended, not found live (interrupted) at the next
 * start. The copy overwrites pages the file has unless a row needs a new one.
 */
static int catalog_rewind(sqlite3 *db)
{
    return sqlite3_wal_autocheckpoint(db, 1) == SQLITE_OK ? 0 : -EIO;
}

/*
 * Whether the catalog already has this version's schema: then opening it
 * writes nothing (PRAGMA user_version = N writes even when it is N), so a
 * daemon starts on a full disk.
 */
static bool catalog_current(sqlite3 *db)
{
    sqlite3_stmt *st;
    bool yes = false;

    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT user_version FROM pragma_user_version) = 1 AND"
                           " (SELECT count(*) FROM sqlite_master"
                           " WHERE name IN ('sessions', 'sessions_name')) = 2",
                           -1, &st, NULL) == SQLITE_OK) {
        yes = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
        sqlite3_finalize(st);
    }
    return yes;
}

int store_catalog_open(struct store *s, char *errbuf, size_t errlen)
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
    if ((rc = lock_data_dir(s, errbuf, errlen)) < 0)
        return rc;
    snprintf(path, sizeof(path), "%s/catalog.db", s->data_dir);
    if (store_db_open(s, path, &s->cat.db) < 0 || catalog_rewind(s->cat.db) < 0 ||
        (!catalog_current(s->cat.db) &&
         store_exec(s, s->cat.db, schema_catalog_sql, "create catalog schema") < 0) ||
        store_recover(s) < 0) {
        snprintf(errbuf, errlen, "cannot open catalog %s: %s", path,
                 s->cat.db ? sqlite3_errmsg(s->cat.db) : "out of memory");
        return -EIO;
    }
    return scan_orphans(s, errbuf, errlen);
}

int store_catalog_load(struct store *s, int (*row_cb)(void *, const struct store_catalog_row *),
                       void *arg)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->cat.db,
                                "SELECT id, name, state, uid, started_ns, ended_ns, processes,"
                                " entries, dropped, interrupted FROM sessions ORDER BY id",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->cat.db, rc, "load catalog");
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
        store_recover_row(s, &row);    /* a recovery still to write: the row it will be */
        store_publish_size(s, row.id); /* start-up: the loop may wait on disk now */
        if (row_cb(arg, &row) < 0)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : store_check(s, s->cat.db, rc, "catalog");
}

int64_t store_last_session_id(struct store *s)
{
    sqlite3_stmt *st;
    int64_t id = 0;

    if (sqlite3_prepare_v2(s->cat.db,
                           "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE"
                           " name = 'sessions'), 0), coalesce((SELECT max(id) FROM sessions), 0))",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id > s->cat.max_file_id ? id : s->cat.max_file_id;
}
