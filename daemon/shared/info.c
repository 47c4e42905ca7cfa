/*
 * info.c — the `info` table's reader, and info_set(); see info.h.
 */
#include "info.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "sqlutil.h"

int info_get(sqlite3 *db, const char *key, int64_t def, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT value FROM info WHERE key = ?", -1, &st, NULL);

    *out = def;
    if (rc != SQLITE_OK)
        return sql_errno(rc);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return sql_errno(rc);
}

int64_t info_int(sqlite3 *db, const char *key, int64_t def)
{
    int64_t v;

    return info_get(db, key, def, &v) < 0 ? def : v;
}

int info_set(sqlite3 *db, const char *key, int64_t v)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO info VALUES (?, ?)", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return sql_errno(rc);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return sql_errno(rc);
}

int info_schema_set(sqlite3 *db)
{
    char sql[80];

    snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO info VALUES ('schema_version', %d)",
             INFO_SCHEMA_VERSION);
    return sql_errno(sqlite3_exec(db, sql, NULL, NULL, NULL));
}

int info_schema_check(sqlite3 *db, char *msg, size_t msglen)
{
    int64_t v;
    int err = info_get(db, "schema_version", 0, &v);

    if (err < 0) {
        /* a missing table fails the prepare with SQLITE_ERROR: an empty or foreign file */
        bool foreign = sqlite3_errcode(db) == SQLITE_ERROR;
        if (msglen > 0)
            snprintf(msg, msglen, "%s",
                     foreign ? "no info table: not a session file, or one still being made"
                             : sqlite3_errmsg(db));
        return foreign ? -EPROTO : err;
    }
    if (v == INFO_SCHEMA_VERSION)
        return 0;
    if (msglen > 0)
        snprintf(msg, msglen,
                 "made by an incompatible tracectl (schema %lld, this build reads %d): report"
                 " or export it with the tracectl that made it",
                 (long long)v, INFO_SCHEMA_VERSION);
    return -EPROTO;
}
