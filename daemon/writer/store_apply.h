/*
 * store_apply — what a job writes into its session's open transaction, in
 * either storage format: processes, op and device names, metadata, the
 * shapes table and the entries' side tables (entry_ext, entry_link). The
 * entries themselves go to store_rows or store_blocks, by the file's format.
 * Writer thread only.
 */
#ifndef TRACECTLD_STORE_APPLY_H
#define TRACECTLD_STORE_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "proto.h"
#include "store.h"

struct wsess;

#define STORE_SHAPE_NONE UINT64_MAX /* no shapes row (a shape's product never is) */

/*
 * shapes.elements by shapes.id (ids are the loop's, session_shape);
 * STORE_SHAPE_NONE for an id the file has no row of yet.
 */
struct wsess_shapes {
    uint64_t *elements;
    size_t cap; /* ids elements has room for: 0 .. cap - 1 */
    sqlite3_stmt *ins;
};

/* The statements of a session file both formats use, prepared once per opening. */
struct wsess_sql {
    sqlite3_stmt *ins_op, *ins_dev, *ins_proc, *end_proc, *ins_meta, *ins_counters, *ins_opdrop;
    sqlite3_stmt *ins_ext;  /* NULL until the session's first ext map */
    sqlite3_stmt *ins_link; /* NULL until the session's first link */
    sqlite3_stmt *ins_span; /* NULL until the session's first span */
};

/* Prepares w's statements (its file just opened). 0 or -EIO. */
int store_apply_prepare(struct store *s, struct wsess *w);
/* Finalizes them and forgets the shapes (the file is closing). */
void store_apply_close(struct wsess *w);
/*
 * The shape ids the file holds rows of, with their elements: on opening a
 * file, and after a rollback (which took back the rows it had added).
 */
int store_apply_load_shapes(struct store *s, struct wsess *w);
/* Applies a job other than OPEN, FLUSH, SESSION_END, DELETE in w's transaction (begun here). */
int store_apply_in_txn(struct store *s, struct wsess *w, struct store_job *job);

/* Entry i's shapes.id, writing its row first: store_apply_shape_id's slow path. -1 on error. */
int64_t store_apply_shape_new(struct store *s, struct wsess *w, const struct store_job *job,
                              size_t i);
/* The ext map of the entry at rowid: its links and its other keys, each in its side table. */
int store_apply_ext_rows(struct store *s, struct wsess *w, const struct proto_ext *x,
                         int64_t rowid);

#endif
