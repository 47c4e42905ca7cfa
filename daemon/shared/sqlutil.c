/*
 * sqlutil.c — see sqlutil.h.
 */
#include <errno.h>
#include <stddef.h>

#include "sqlutil.h"

int sql_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    default:
        return -EIO;
    }
}

int sql_each(sqlite3 *db, const char *sql, int (*row)(sqlite3_stmt *st, void *arg), void *arg)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL), err = 0;

    if (rc != SQLITE_OK)
        return sql_errno(rc);
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW)
        err = row(st, arg);
    sqlite3_finalize(st);
    return err != 0 ? err : sql_errno(rc);
}

bool sql_has_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    bool found = false;

    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1,
                           &st, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}
