/*
 * info — the one reader of a session file's `info` table (key → integer),
 * where a file records its format, its aggregates' state and the like.
 * Pure over the connection it is given; any thread that owns one.
 */
#ifndef TRACECTLD_INFO_H
#define TRACECTLD_INFO_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

/*
 * The value of key into *out; def when the key is absent or its value NULL.
 * Returns 0, or a negative errno (sql_errno: a file without the table
 * gives -EIO) with *out = def.
 */
int info_get(sqlite3 *db, const char *key, int64_t def, int64_t *out);
/* info_get()'s value, def on any error. */
int64_t info_int(sqlite3 *db, const char *key, int64_t def);
/* Sets key to v (inside the caller's transaction, if any). 0 or a negative errno (sql_errno). */
int info_set(sqlite3 *db, const char *key, int64_t v);

/*
 * SCHEMA VERSION. A session file says which format it is in with one number,
 * info.schema_version, set when the file is made (info_schema_set), as SQLite
 * keeps its file-format number. A build reads files of its own version only:
 * none of another was ever released, so there is no migration and no flag
 * per feature. Any change to what a file stores (its tables, the encodings
 * of its blocks and aggregates) bumps it.
 */
#define INFO_SCHEMA_VERSION 2

/* Records INFO_SCHEMA_VERSION in a new file (inside its open transaction). 0 or -errno. */
int info_schema_set(sqlite3 *db);
/*
 * 0 when db is of INFO_SCHEMA_VERSION. -EPROTO when it is of another (a file
 * without the key counts as version 0), with msg "made by an incompatible
 * tracectl (schema N, this build reads M)" and what to do, or without the
 * info table (an empty file: a new session's before its tables are made),
 * with msg "no info table: ..."; on a read error, that errno (sql_errno)
 * with SQLite's message in msg. msg may be NULL when msglen is 0.
 */
int info_schema_check(sqlite3 *db, char *msg, size_t msglen);

#endif
