/*
 * rkcoll — collective matching: which arrivals of which ranks are one
 * instance of a collective, and what each rank waited there. Writer thread,
 * through struct ranks (rk.h; ranks.h tells the rules).
 *
 * The open instances are r->inst (unordered, at most RANKS_OPEN), a hash of
 * their keys in r->islot (RK_ISLOTS slots of index + 1, open addressing,
 * deletion shifting back) and the order they opened in, the ring r->iq. An
 * instance closes when every rank of its communicator arrived, when it is
 * the oldest and room is needed, and at ranks_finish(); closing adds its
 * waits, skew and arrivals to the rk_steps, rk_coll and rk_coll_ranks
 * deltas. Every int function returns 0 or -ENOMEM.
 */
#ifndef TRACECTLD_RKCOLL_H
#define TRACECTLD_RKCOLL_H

#include "rk.h"

/* Entry e of process_id, of a collective op (r->coll_ok); x its ext map or NULL. */
int rkcoll_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e,
                 const struct proto_ext *x);
/* Closes the oldest open instance (the queue's front that is still open), if any. */
int rkcoll_close_oldest(struct ranks *r);
/* The slot of key in r->islot: where it is, else the empty slot where it would go. */
size_t rkcoll_find(const struct ranks *r, const struct rk_ikey *key);
/* Opens an instance of key at slot pos (empty: rkcoll_find); NULL when out of memory. */
struct rk_inst *rkcoll_open(struct ranks *r, size_t pos, const struct rk_ikey *key, uint32_t op_id,
                            uint64_t opened);
/* Adds arrival a to in. */
int rkcoll_add_arrival(struct rk_inst *in, struct rk_arrival a);

#endif
