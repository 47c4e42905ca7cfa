/*
 * test_walvfs.c — the VFS that gathers WAL writes (walvfs.c): a connection
 * through the default VFS sees exactly what each commit made through it,
 * page-cache spills and rollbacks included; a commit that returned survives
 * the process dying before it closes; a write that fails fails its commit
 * and leaves the file as the last good commit made it; and a transaction's
 * frames go out in a fraction of the write calls the default VFS makes
 * (counted by /proc/self/io's syscw).
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "walvfs.h"

TestSuite(walvfs);

struct fixture {
    char dir[64];
    char path[96];
};

static void fixture_init(struct fixture *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/tc_walvfs.XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/t.db", f->dir);
}

static void fixture_fini(struct fixture *f)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    cr_assert_eq(system(cmd), 0);
}

static sqlite3 *open_db(const char *path, const char *vfs, int cache_pages)
{
    sqlite3 *db = NULL;
    char sql[160];

    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs),
                 SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    snprintf(sql, sizeof(sql),
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=%d;"
             " CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB)",
             cache_pages);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    return db;
}

/* Rows k in [from, to) with a blob of len bytes each, in one transaction. An SQLite code. */
static int insert_rows(sqlite3 *db, int64_t from, int64_t to, int len, bool commit)
{
    sqlite3_stmt *st;
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);

    cr_assert_eq(rc, SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?, randomblob(?))", -1, &st, NULL),
                 SQLITE_OK);
    for (int64_t k = from; k < to && rc == SQLITE_OK; k++) {
        sqlite3_bind_int64(st, 1, k);
        sqlite3_bind_int(st, 2, len);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, commit ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* count(*), sum(k) and the total blob length of t, as the connection db sees it. */
static void totals(sqlite3 *db, int64_t *n, int64_t *sum, int64_t *bytes)
{
    sqlite3_stmt *st;

    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT count(*), total(k), total(length(v)) FROM t", -1, &st, NULL),
        SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    *n = sqlite3_column_int64(st, 0);
    *sum = sqlite3_column_int64(st, 1);
    *bytes = sqlite3_column_int64(st, 2);
    sqlite3_finalize(st);
}

static void assert_rows(sqlite3 *db, int64_t n, int len, const char *when)
{
    int64_t got_n, got_sum, got_bytes;

    totals(db, &got_n, &got_sum, &got_bytes);
    cr_assert_eq(got_n, n, "%s: %lld rows, expected %lld", when, (long long)got_n, (long long)n);
    cr_assert_eq(got_sum, n * (n - 1) / 2, "%s", when);
    cr_assert_eq(got_bytes, n * len, "%s", when);
}

static void assert_integrity(sqlite3 *db)
{
    sqlite3_stmt *st;

    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
}

Test(walvfs, is_registered_beside_the_default)
{
    cr_assert_not_null(walvfs_name());
    cr_assert_str_eq(walvfs_name(), "tracectl-wal");
    cr_assert_not_null(sqlite3_vfs_find(walvfs_name()));
    cr_assert_str_neq(sqlite3_vfs_find(NULL)->zName, "tracectl-wal");
}

/*
 * Transactions of 1 to ~600 pages (a cache of 20 pages spills the large ones
 * into the WAL before their commit), every third rolled back: after each, a
 * second connection through the default VFS sees exactly the committed rows.
 */
Test(walvfs, another_connection_sees_each_commit_whole)
{
    struct fixture f;
    const int len = 200;
    int64_t n = 0;

    fixture_init(&f);
    sqlite3 *w = open_db(f.path, walvfs_name(), 20);
    sqlite3 *r = open_db(f.path, NULL, 2000);
    for (int i = 0; i < 30; i++) {
        int64_t rows = 1 + (i * 397) % 9000;
        bool commit = i % 3 != 2;
        char when[64];

        cr_assert_eq(insert_rows(w, n, n + rows, len, commit), SQLITE_OK, "transaction %d", i);
        if (commit)
            n += rows;
        snprintf(when, sizeof(when), "after transaction %d", i);
        assert_rows(r, n, len, when);
        assert_rows(w, n, len, when);
        if (i % 7 == 6) /* the WAL starts over at the next transaction */
            cr_assert_eq(sqlite3_wal_checkpoint_v2(r, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL),
                         SQLITE_OK);
    }
    assert_integrity(r);
    sqlite3_close(w);
    sqlite3_close(r);
    fixture_fini(&f);
}

/*
 * A child commits through the VFS and dies by SIGKILL without closing, right
 * after its last COMMIT returned or (begun) in a transaction whose pages
 * spilled into the WAL: every transaction whose COMMIT returned is in the
 * file, and the one begun is not. cache_pages 20: the commits spill too
 * (SQLite then rewrites their frames' checksums after the commit frame).
 */
static void commit_then_kill(int cache_pages, bool begin_another)
{
    struct fixture f;
    const int len = 300, per = 4000, commits = 5;
    int status;
    pid_t pid;

    fixture_init(&f);
    sqlite3_close(open_db(f.path, NULL, 2000)); /* the table, before the child */
    if ((pid = fork()) == 0) {
        sqlite3 *w = open_db(f.path, walvfs_name(), cache_pages);
        int64_t n = 0;

        /* no checkpoint reads the WAL (and flushes it) after a commit */
        sqlite3_exec(w, "PRAGMA wal_autocheckpoint=0", NULL, NULL, NULL);
        for (int i = 0; i < commits; i++, n += per)
            if (insert_rows(w, n, n + per, len, true) != SQLITE_OK)
                _exit(2);
        if (begin_another) {
            sqlite3_exec(w, "PRAGMA cache_size=20; BEGIN", NULL, NULL, NULL);
            sqlite3_exec(w,
                         "WITH RECURSIVE c(x) AS (SELECT 100000 UNION ALL SELECT x + 1 FROM c"
                         " WHERE x < 104000) INSERT INTO t SELECT x, randomblob(300) FROM c",
                         NULL, NULL, NULL);
        }
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    cr_assert_gt(pid, 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
    sqlite3 *r = open_db(f.path, NULL, 2000);
    assert_rows(r, (int64_t)per * commits, len, "after the kill");
    assert_integrity(r);
    sqlite3_close(r);
    fixture_fini(&f);
}

Test(walvfs, a_commit_that_returned_survives_a_kill)
{
    commit_then_kill(4000, false);
}

Test(walvfs, a_commit_that_spilled_survives_a_kill)
{
    commit_then_kill(20, false);
}

Test(walvfs, a_transaction_begun_is_gone_after_a_kill)
{
    commit_then_kill(4000, true);
}

/*
 * A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the WAL's writes
 * fail part way: the commit that hits it reports an error, none before it
 * does, and the file holds exactly the commits that returned SQLITE_OK.
 */
Test(walvfs, a_failed_write_fails_its_commit)
{
    struct fixture f;
    const int len = 300, per = 500;
    int status, fds[2];
    int64_t done = -1;
    pid_t pid;

    fixture_init(&f);
    sqlite3_close(open_db(f.path, NULL, 2000));
    cr_assert_eq(pipe(fds), 0);
    if ((pid = fork()) == 0) {
        struct rlimit rl = {.rlim_cur = 4u << 20, .rlim_max = 4u << 20};
        sqlite3 *w = open_db(f.path, walvfs_name(), 20);
        int64_t n = 0;

        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(2);
        for (int i = 0; i < 200; i++, n += per) /* 200 x ~40 pages: past 4 MiB */
            if (insert_rows(w, n, n + per, len, true) != SQLITE_OK)
                break;
        if (write(fds[1], &n, sizeof(n)) != sizeof(n))
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    cr_assert_eq(read(fds[0], &done, sizeof(done)), (ssize_t)sizeof(done));
    close(fds[0]);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    cr_assert_gt(done, 0, "no commit before the limit");
    cr_assert_lt(done, 200 * per, "no commit failed: the limit was never reached");
    sqlite3 *r = open_db(f.path, NULL, 2000);
    assert_rows(r, done, len, "after the failed commit");
    assert_integrity(r);
    sqlite3_close(r);
    fixture_fini(&f);
}

static uint64_t write_calls(void)
{
    FILE *io = fopen("/proc/self/io", "r");
    char line[128];
    unsigned long long v = 0;

    cr_assert_not_null(io);
    while (fgets(line, sizeof(line), io) != NULL)
        if (sscanf(line, "syscw: %llu", &v) == 1)
            break;
    fclose(io);
    return v;
}

/*
 * The same ~1 000-page transaction through each VFS: the default one makes
 * two write calls per frame; through walvfs a call carries ~31 frames.
 */
Test(walvfs, a_transaction_takes_few_write_calls)
{
    struct fixture f;
    uint64_t calls[2];
    const char *vfs[2] = {NULL, walvfs_name()};

    fixture_init(&f);
    for (int k = 0; k < 2; k++) {
        char path[128];
        sqlite3 *db;
        uint64_t before;

        snprintf(path, sizeof(path), "%s/%d.db", f.dir, k);
        db = open_db(path, vfs[k], 4000);
        before = write_calls();
        cr_assert_eq(insert_rows(db, 0, 12000, 300, true), SQLITE_OK);
        calls[k] = write_calls() - before;
        assert_rows(db, 12000, 300, vfs[k] ? "walvfs" : "default");
        sqlite3_close(db);
    }
    /* ~1 000 frames: the default VFS ~2 000 calls */
    cr_assert_gt(calls[0], 1800, "default VFS: %llu write calls", (unsigned long long)calls[0]);
    cr_assert_lt(calls[1] * 20, calls[0], "walvfs %llu write calls, default %llu",
                 (unsigned long long)calls[1], (unsigned long long)calls[0]);
    fixture_fini(&f);
}
