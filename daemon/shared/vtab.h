/*
 * vtab — the `entries` of a session file in the blocks format, as a
 * read-only SQLite virtual table (module "tracectl_blocks") over its
 * `blocks` table (block.h), so that every query written for the row format
 * (the `trace` view, the reports, the exports, people's own SQL) reads a
 * blocks file unchanged.
 *
 * The table has the columns of the row format's `entries` (process_id, step,
 * op_id, device_id, start_ns, dur_ns, elements, mem_bytes, shape_id), and
 * each entry's rowid is the one the row format would have given it (1, 2, 3,
 * ... in the order the writer stored them). Constraints on rowid, start_ns,
 * process_id and op_id are pushed down (xBestIndex): a block whose row says
 * it cannot hold a match (its rowid range, its min/max start, its processes,
 * its ops) is skipped without being decoded. Rows come out in rowid order,
 * so ORDER BY rowid costs no sort; a lookup by rowid reads and decodes one
 * restart interval of one block (block.h), and consecutive lookups in the
 * same interval decode it once.
 *
 * The daemon registers the module on each connection to a session file.
 * Built on its own (CMake target tracectl_sqlite, TRACECTL_SQLITE_EXTENSION)
 * it is an extension the sqlite3 shell loads with `.load` (README.md).
 */
#ifndef TRACECTLD_VTAB_H
#define TRACECTLD_VTAB_H

#include <sqlite3.h>

/* Registers the module on db. An SQLite code. */
int vtab_register(sqlite3 *db);

#endif
