/*
 * rkexpose — exposed communication: per (process, device), the part of each
 * comm entry not covered by the union of that device's compute entries.
 * Writer thread, through struct ranks (rk.h).
 *
 * A device keeps its compute intervals merged and sorted, and its comm
 * entries not yet counted. At a commit (rkexpose_settle_live) the comm
 * entries that end before the latest start seen there, less twice the most
 * an entry has come late, are counted into the rk_ops, rk_devsteps and
 * rk_steps deltas, and the compute intervals no pending comm entry can
 * overlap are dropped. An entry too late to be counted exactly, or a device
 * over RANKS_PENDING intervals, adds to r->late (info.ranks_late).
 * Every function returns 0 or -ENOMEM.
 */
#ifndef TRACECTLD_RKEXPOSE_H
#define TRACECTLD_RKEXPOSE_H

#include "rk.h"

/* Entry e, of category cat, of (process, device) d: adds its interval to d's. */
int rkexpose_entry(struct ranks *r, struct rk_dev *d, const struct proto_entry *e,
                   enum proto_cat cat);
/* Counts the pending comm entries of d that end at or before w; drops what no longer matters. */
int rkexpose_settle(struct ranks *r, struct rk_dev *d, uint64_t w);
/*
 * At a commit: counts the comm entries of d that no entry still to come should overlap.
 * Live producers send nearly in time order: what ends before the latest start, less twice
 * the most an entry of d has come late so far. An imported file comes in file order, not
 * time order: its entries are counted when the session ends (or at RANKS_PENDING).
 */
int rkexpose_settle_live(struct ranks *r, struct rk_dev *d);
/* Adds [b, e) to d's compute intervals; a pending comm entry (a reload: rkstate.c). */
int rkexpose_add_compute(struct rk_dev *d, uint64_t b, uint64_t e);
int rkexpose_add_comm(struct rk_dev *d, uint64_t b, uint64_t e, uint64_t step, uint32_t op_id);

#endif
