/*
 * rkcoll — collective matching: which arrivals of which ranks are one
 * instance of a collective, and what each rank waited there. Writer thread,
 * through struct ranks (rk.h; ranks.h tells the rules).
 *
 * The open instances are r->inst (unordered, at most RANKS_OPEN), a hash of
 * their keys in r->islot (index + 1, open addressing, at most half full,
 * deletion shifting back) and the order they opened in, a list through the
 * instances (rk.h). An instance closes when every rank of its communicator
 * arrived and, at a non-blocking collective, each one's completion call
 * came; when it is the oldest and RANKS_OPEN are open (r->capped counts
 * those); and at ranks_finish(). Closing adds its waits, skew and arrivals
 * to the rk_steps, rk_coll and rk_coll_ranks deltas. Memory follows the
 * instances open: nothing else is kept per instance, however many opened.
 * Every int function returns 0 or -ENOMEM.
 */
#ifndef TRACECTLD_RKCOLL_H
#define TRACECTLD_RKCOLL_H

#include "rk.h"

/*
 * Entry e of process_id, of a collective op (r->coll_ok); x its ext map or NULL; nb: a
 * non-blocking collective's (RK_COLL_NB), whose instance then also waits for the completion
 * call that names its (comm, seq) (without those, it counts as a blocking one).
 */
int rkcoll_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e,
                 const struct proto_ext *x, bool nb);
/*
 * Entry e of process p (process_id), of category wait, with ext map x: a completion call
 * (PROTOCOL.md "MPI completion calls"). With comm + seq it completes p's non-blocking
 * arrival at that open instance: the call's interval is the arrival's wait (for a
 * zero-length entry whose `parent` is p's last completion call with an `id`, that call's
 * interval). Anything else is no completion and changes nothing.
 */
int rkcoll_completion(struct ranks *r, struct rk_proc *p, int64_t process_id,
                      const struct proto_entry *e, const struct proto_ext *x);
/* Closes the oldest open instance, if any. */
int rkcoll_close_oldest(struct ranks *r);
/* The slot of key in r->islot: where it is, else the empty slot where it would go. */
size_t rkcoll_find(const struct ranks *r, const struct rk_ikey *key);
/* Opens an instance of key (not open), the newest; NULL when out of memory. */
struct rk_inst *rkcoll_open(struct ranks *r, const struct rk_ikey *key, uint32_t op_id,
                            uint64_t opened);
/* Adds arrival a to in; expect: the arrivals in expects, for the first allocation (0: some). */
int rkcoll_add_arrival(struct rk_inst *in, struct rk_arrival a, uint64_t expect);

#endif
