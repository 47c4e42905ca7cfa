/*
 * agg — report aggregates kept up to date as entries arrive, so that a
 * report reads a few small tables instead of every entry (schema/session.sql:
 * agg_session, agg_ops, agg_hist, agg_devices, top_slow, top_mem).
 *
 * Owned by the storage writer thread, one per open session file. The writer
 * calls agg_entry() for each entry it inserts, and agg_flush() just before
 * COMMIT, so the aggregates are committed in the same transaction as the
 * entries they summarise: a crash can never leave them out of step. Deltas
 * since the last flush are kept in memory (bounded by the ops and devices of
 * the session and the histogram buckets touched); the two top-K heaps
 * (K = AGG_TOP) persist for the life of the session.
 *
 * When a commit fails (disk full) the in-memory heaps no longer match the
 * file: agg_discard() marks the aggregates inexact, and the next successful
 * flush sets info.aggregates = 0, after which reports scan the entries again.
 *
 * Errors: 0 or a negative errno (SQLite codes mapped by store_errno(),
 * -ENOMEM when a delta cannot grow); the caller logs them.
 */
#ifndef TRACECTLD_AGG_H
#define TRACECTLD_AGG_H

#include <stdint.h>

#include <sqlite3.h>

#include "proto.h"

#define AGG_TOP 1000 /* slowest/hotspot entries kept; larger `top` requests scan */

struct agg;

/* Prepares the statements on db (a session file with its schema). NULL on failure. */
struct agg *agg_new(sqlite3 *db);
/* NULL is a no-op. */
void agg_free(struct agg *a);
/*
 * A file reopened mid-session (the writer closed it while idle): reloads the
 * two top-K heaps from top_slow and top_mem, or, when the file's aggregates
 * are already inexact, carries that on. 0 or a negative errno.
 */
int agg_load(struct agg *a);
/* Marks the file's aggregates exact (a new session); inside the open transaction. 0 or -errno. */
int agg_init_file(struct agg *a);
/* Counts one stored entry (dev_id 0: none; rowid: its entries.rowid). 0 or a negative errno. */
int agg_entry(struct agg *a, const struct proto_entry *e, uint32_t dev_id, int64_t rowid);
/* Writes the deltas since the last flush; inside the open transaction. 0 or a negative errno. */
int agg_flush(struct agg *a);
/* The transaction was rolled back: drop the deltas, mark the aggregates inexact. */
void agg_discard(struct agg *a);
/* The histogram bucket of a duration (exposed for the tests). */
uint32_t agg_bucket(uint64_t v);

#endif
