/*
 * info.c — the `info` table's reader; see info.h.
 */
#include "info.h"
#include "store.h"

int info_get(sqlite3 *db, const char *key, int64_t def, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT value FROM info WHERE key = ?", -1, &st, NULL);

    *out = def;
    if (rc != SQLITE_OK)
        return store_errno(rc);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return store_errno(rc);
}

int64_t info_int(sqlite3 *db, const char *key, int64_t def)
{
    int64_t v;

    return info_get(db, key, def, &v) < 0 ? def : v;
}
