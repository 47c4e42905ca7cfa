/*
 * rkdelta — the rank aggregates' deltas: what the open transaction adds to
 * rk_ops, rk_devsteps, rk_steps, rk_coll and rk_coll_ranks (rk.h), found or
 * created by key, and the processes and (process, device) pairs they belong
 * to. Writer thread.
 *
 * The entries' path looks a delta up through caches: process, device and op
 * ids are dense small ids and a process's steps go up, so the deltas of its
 * last steps and of each (device, op) are found by indexing, the maps only
 * when a step begins or a commit reset the deltas (rkdelta_reset moves the
 * epoch on, which empties every cache at once). The hits are inline here; a
 * miss is a call. Each function returns NULL when out of memory; a pointer
 * into the deltas is valid until the next look-up.
 */
#ifndef TRACECTLD_RKDELTA_H
#define TRACECTLD_RKDELTA_H

#include "rk.h"

/* The process of id, added when new; NULL when out of memory or id negative. */
struct rk_proc *rkdelta_proc(struct ranks *r, int64_t process_id);
/* rkdelta_proc_known's look-up of an id of RK_PSLOTS or more. */
struct rk_proc *rkdelta_proc_far(struct ranks *r, int64_t process_id);
/* The (process, device) d of those ids. */
struct rk_dev *rkdelta_dev(struct ranks *r, int64_t process_id, uint32_t device_id);
/* The deltas by key, without the caches. */
struct rk_opsum *rkdelta_opsum(struct ranks *r, int64_t process_id, uint32_t device_id,
                               uint32_t op_id);
struct rk_devstep *rkdelta_devstep(struct ranks *r, int64_t process_id, uint64_t step,
                                   uint32_t device_id);
/* The slot of op in a table of RK_POPS (allocated on first use), taken over when another
 * op had it. */
struct rk_pop *rkdelta_pop(struct rk_pop **tab, uint32_t op_id);
/* Empties the deltas (a commit wrote them, or a rollback dropped them), and the caches. */
void rkdelta_reset(struct ranks *r);

/* The cached look-ups' misses (apart: the hits below are inlined). */
struct rk_stepsum *rkdelta_step_miss(struct ranks *r, int64_t process_id, uint64_t step);
struct rk_devstep *rkdelta_devstep_miss(struct ranks *r, struct rk_dev *d, uint64_t step);
struct rk_opsum *rkdelta_opsum_miss(struct ranks *r, struct rk_dev *d, uint32_t op_id);
struct rk_collsum *rkdelta_collsum_miss(struct ranks *r, uint32_t op_id, int64_t process_id,
                                        uint64_t step);

/* The process of id when seen, else NULL (not rkdelta_proc(): that would add it). */
static inline struct rk_proc *rkdelta_proc_known(struct ranks *r, int64_t process_id)
{
    if (process_id < 0)
        return NULL;
    if (process_id >= RK_PSLOTS)
        return rkdelta_proc_far(r, process_id);
    if ((uint64_t)process_id >= r->n_pslot || r->pslot[process_id] == 0)
        return NULL;
    return &r->procs[r->pslot[process_id] - 1];
}

/* The process of id, added when new (rkdelta_proc); NULL when out of memory. */
static inline struct rk_proc *rkdelta_proc_c(struct ranks *r, int64_t process_id)
{
    struct rk_proc *p = rkdelta_proc_known(r, process_id);

    return p != NULL ? p : rkdelta_proc(r, process_id);
}

/* The rk_steps delta of a process at step. */
static inline struct rk_stepsum *rkdelta_step_c(struct ranks *r, int64_t process_id, uint64_t step)
{
    const struct rk_proc *p = rkdelta_proc_known(r, process_id);
    const struct rk_ref *c = p != NULL ? &p->step.w[step % RK_WAYS] : NULL;

    if (c != NULL && rk_ref_ok(r, c, step))
        return &r->steps[c->i1 - 1];
    return rkdelta_step_miss(r, process_id, step);
}

/* The rk_devsteps delta of d at step. */
static inline struct rk_devstep *rkdelta_devstep_c(struct ranks *r, struct rk_dev *d, uint64_t step)
{
    const struct rk_ref *c = &d->dstep.w[step % RK_WAYS];

    if (rk_ref_ok(r, c, step))
        return &r->dsteps[c->i1 - 1];
    return rkdelta_devstep_miss(r, d, step);
}

/* The rk_ops delta of d and op. */
static inline struct rk_opsum *rkdelta_opsum_c(struct ranks *r, struct rk_dev *d, uint32_t op_id)
{
    const struct rk_ref *c = d->ops != NULL ? &d->ops[op_id % RK_DOPS] : NULL;

    if (c != NULL && rk_ref_ok(r, c, op_id))
        return &r->ops[c->i1 - 1];
    return rkdelta_opsum_miss(r, d, op_id);
}

/* The rk_coll_ranks delta (process_id >= 0) or the rk_coll delta (-1) of op at step. */
static inline struct rk_collsum *rkdelta_collsum_c(struct ranks *r, uint32_t op_id,
                                                   int64_t process_id, uint64_t step)
{
    const struct rk_proc *p = process_id >= 0 ? rkdelta_proc_known(r, process_id) : NULL;
    const struct rk_pop *tab = p != NULL ? p->pop : process_id < 0 ? r->collc : NULL;
    const struct rk_pop *pop = tab != NULL ? &tab[op_id % RK_POPS] : NULL;
    const struct rk_ref *c = pop != NULL ? &pop->coll.w[step % RK_WAYS] : NULL;

    if (pop != NULL && pop->op1 == op_id + 1 && rk_ref_ok(r, c, step))
        return &r->coll[c->i1 - 1];
    return rkdelta_collsum_miss(r, op_id, process_id, step);
}

/* The (process, device) of an entry; p is its process: its last device, else looked up. */
static inline struct rk_dev *rkdelta_dev_c(struct ranks *r, struct rk_proc *p, int64_t process_id,
                                           uint32_t device_id)
{
    struct rk_dev *d;

    if (p->dev1 != 0 && r->devs[p->dev1 - 1].device_id == device_id)
        return &r->devs[p->dev1 - 1];
    if ((d = rkdelta_dev(r, process_id, device_id)) != NULL)
        p->dev1 = (uint32_t)(d - r->devs) + 1;
    return d;
}

#endif
