/*
 * info — the one reader of a session file's `info` table (key → integer),
 * where a file records its format, its aggregates' state and the like.
 * Pure over the connection it is given; any thread that owns one.
 */
#ifndef TRACECTLD_INFO_H
#define TRACECTLD_INFO_H

#include <stdint.h>

#include <sqlite3.h>

/*
 * The value of key into *out; def when the key is absent or its value NULL.
 * Returns 0, or a negative errno (store_errno: a file without the table
 * gives -EIO) with *out = def.
 */
int info_get(sqlite3 *db, const char *key, int64_t def, int64_t *out);
/* info_get()'s value, def on any error. */
int64_t info_int(sqlite3 *db, const char *key, int64_t def);

#endif
