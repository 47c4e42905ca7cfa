/*
 * rkwrite — writing the rank aggregates' deltas (rk.h) into rk_ops,
 * rk_devsteps, rk_steps, rk_coll and rk_coll_ranks: saturating upserts,
 * RKSQL_BATCH rows a statement, the rows sorted by their table's key first
 * (a radix sort when every key packs into 64 bits, else qsort), so that
 * consecutive rows land on the same pages. Writer thread, inside the open
 * transaction. 0 or a negative errno.
 */
#ifndef TRACECTLD_RKWRITE_H
#define TRACECTLD_RKWRITE_H

#include "rk.h"

/* Prepares the upserts (the tables exist); rkwrite_free() frees them, also on failure. */
int rkwrite_prepare(struct ranks *r);
void rkwrite_free(struct ranks *r);
/* Writes the rk_ops and rk_devsteps deltas (sorting them: the deltas are reset next). */
int rkwrite_ops(struct ranks *r);
/* Writes the rk_steps, rk_coll and rk_coll_ranks deltas (sorting them). */
int rkwrite_steps(struct ranks *r);

#endif
