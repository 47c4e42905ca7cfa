/*
 * rkschema — the rank tables (schema/ranks.sql) of a session file: creating
 * them, and bringing a file written by an earlier daemon to today's layout
 * (info.ranks_layout RK_LAYOUT): an rk_ops keyed by step folded into rk_ops
 * and rk_devsteps, exactly; rk_steps, rk_devsteps and rk_coll_ranks keyed
 * process or op first re-keyed step first, the same rows; an rk_open
 * without comm_size given the column. Writer thread (or `classify`'s
 * worker), when struct ranks is made. 0 or a negative errno.
 */
#ifndef TRACECTLD_RKSCHEMA_H
#define TRACECTLD_RKSCHEMA_H

#include <stdbool.h>

#include "rk.h"

#define RK_LAYOUT 2 /* info.ranks_layout */

/*
 * Creates the tables if needed. When the file needs more, opens a savepoint
 * (*migrating) and renames what must be re-keyed or folded (*legacy: an
 * rk_ops keyed by step); rkschema_end() must follow, once the statements
 * are prepared.
 */
int rkschema_begin(struct ranks *r, bool *legacy, bool *migrating);
/* Ends what rkschema_begin began: folds the legacy rk_ops and releases the savepoint when err
 * is 0, else (or when that fails) rolls it all back. Returns the first error, or 0. */
int rkschema_end(struct ranks *r, bool legacy, int err);

#endif
