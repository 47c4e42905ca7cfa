/*
 * sqlutil — the SQLite helpers every thread of the daemon shares: the one map
 * from SQLite's result codes to the errno convention, a query run row by row,
 * and whether a file has a table. Pure over the connection they are given;
 * any thread, on its own connection.
 */
#ifndef TRACECTLD_SQLUTIL_H
#define TRACECTLD_SQLUTIL_H

#include <stdbool.h>

#include <sqlite3.h>

/*
 * The daemon's one map from an SQLite result code (primary or extended) to
 * the errno convention: 0 for SQLITE_OK, ROW and DONE; FULL -ENOSPC; NOMEM
 * -ENOMEM; CANTOPEN -ENOENT (the file or its directory is missing: a
 * permission problem is PERM or READONLY); READONLY, PERM, AUTH -EACCES;
 * BUSY, LOCKED -EBUSY; anything else -EIO.
 */
int sql_errno(int rc);

/*
 * Runs the query sql and calls row(st, arg) for each row it gives, until
 * row returns non-zero. Returns that value (a negative errno), or 0 when
 * every row was read, or SQLite's error (sql_errno).
 */
int sql_each(sqlite3 *db, const char *sql, int (*row)(sqlite3_stmt *st, void *arg), void *arg);

/* True when the file has that table. False on error too. */
bool sql_has_table(sqlite3 *db, const char *name);

#endif
