/* rkdelta.c — the rank aggregates' deltas and their caches; see rkdelta.h. */
#include "rkdelta.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rkcover.h"

struct rk_proc *rkdelta_proc_far(struct ranks *r, int64_t process_id)
{
    ssize_t i = rkmap_get(&r->proc_idx, (uint64_t)process_id, 0, 0);

    return i >= 0 ? &r->procs[i] : NULL;
}

/* Makes room in r->pslot for id (< RK_PSLOTS). 0 or -ENOMEM. */
static int rkdelta_pslot_grow(struct ranks *r, size_t id)
{
    size_t n = r->n_pslot ? r->n_pslot : 64;
    uint32_t *p;

    while (n <= id)
        n *= 2;
    if (n > RK_PSLOTS)
        n = RK_PSLOTS;
    if ((p = realloc(r->pslot, n * sizeof(*p))) == NULL)
        return -ENOMEM;
    memset(p + r->n_pslot, 0, (n - r->n_pslot) * sizeof(*p));
    r->pslot = p;
    r->n_pslot = n;
    return 0;
}

struct rk_proc *rkdelta_proc(struct ranks *r, int64_t process_id)
{
    struct rk_proc *p = rkdelta_proc_known(r, process_id);
    size_t i = r->n_procs;

    if (p != NULL || process_id < 0)
        return p;
    if (i >= UINT32_MAX || rkmap_grow((void **)&r->procs, &r->cap_procs, i, sizeof(*p)) < 0)
        return NULL;
    if (process_id < RK_PSLOTS) {
        if ((size_t)process_id >= r->n_pslot && rkdelta_pslot_grow(r, (size_t)process_id) < 0)
            return NULL;
        r->pslot[process_id] = (uint32_t)i + 1;
    } else if (rkmap_put(&r->proc_idx, (uint64_t)process_id, 0, 0, (uint32_t)i) < 0) {
        return NULL;
    }
    r->procs[i] = (struct rk_proc){.id = process_id, .cover = rkcover_none};
    r->n_procs++;
    return &r->procs[i];
}

/* Each delta's find-or-create is rkmap_find() with its key and its row's initial values. */

static struct rk_stepsum *rkdelta_step(struct ranks *r, int64_t process_id, uint64_t step)
{
    return rkmap_find(
        &r->steps_idx, (uint64_t)process_id, step, 0, (void **)&r->steps, &r->n_steps,
        &r->cap_steps, sizeof(*r->steps),
        &(struct rk_stepsum){.process_id = process_id, .step = step, .begin = UINT64_MAX});
}

struct rk_opsum *rkdelta_opsum(struct ranks *r, int64_t process_id, uint32_t device_id,
                               uint32_t op_id)
{
    return rkmap_find(
        &r->ops_idx, (uint64_t)process_id, device_id, op_id, (void **)&r->ops, &r->n_ops,
        &r->cap_ops, sizeof(*r->ops),
        &(struct rk_opsum){
            .process_id = process_id, .device_id = device_id, .op_id = op_id, .begin = UINT64_MAX});
}

struct rk_devstep *rkdelta_devstep(struct ranks *r, int64_t process_id, uint64_t step,
                                   uint32_t device_id)
{
    return rkmap_find(&r->dsteps_idx, (uint64_t)process_id, step, device_id, (void **)&r->dsteps,
                      &r->n_dsteps, &r->cap_dsteps, sizeof(*r->dsteps),
                      &(struct rk_devstep){.process_id = process_id,
                                           .step = step,
                                           .device_id = device_id,
                                           .begin = UINT64_MAX,
                                           .first_row = INT64_MAX,
                                           .last_row = -1});
}

static struct rk_collsum *rkdelta_collsum(struct ranks *r, uint32_t op_id, int64_t process_id,
                                          uint64_t step)
{
    return rkmap_find(&r->coll_idx, op_id, (uint64_t)process_id, step, (void **)&r->coll,
                      &r->n_coll, &r->cap_coll, sizeof(*r->coll),
                      &(struct rk_collsum){.op_id = op_id, .process_id = process_id, .step = step});
}

struct rk_dev *rkdelta_dev(struct ranks *r, int64_t process_id, uint32_t device_id)
{
    return rkmap_find(&r->dev_idx, (uint64_t)process_id, device_id, 0, (void **)&r->devs,
                      &r->n_devs, &r->cap_devs, sizeof(*r->devs),
                      &(struct rk_dev){.process_id = process_id, .device_id = device_id});
}

__attribute__((noinline)) struct rk_stepsum *rkdelta_step_miss(struct ranks *r, int64_t process_id,
                                                               uint64_t step)
{
    struct rk_proc *p = rkdelta_proc_known(r, process_id);
    struct rk_stepsum *s;
    struct rk_ref *c = p != NULL ? &p->step.w[step % RK_WAYS] : NULL;

    if ((s = rkdelta_step(r, process_id, step)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(s - r->steps) + 1, step};
    return s;
}

__attribute__((noinline)) struct rk_devstep *rkdelta_devstep_miss(struct ranks *r, struct rk_dev *d,
                                                                  uint64_t step)
{
    struct rk_ref *c = &d->dstep.w[step % RK_WAYS];
    struct rk_devstep *ds;

    if ((ds = rkdelta_devstep(r, d->process_id, step, d->device_id)) != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(ds - r->dsteps) + 1, step};
    return ds;
}

__attribute__((noinline)) struct rk_opsum *rkdelta_opsum_miss(struct ranks *r, struct rk_dev *d,
                                                              uint32_t op_id)
{
    struct rk_ref *c;
    struct rk_opsum *o;

    if (d->ops == NULL)
        d->ops = calloc(RK_DOPS, sizeof(*d->ops));
    c = d->ops != NULL ? &d->ops[op_id % RK_DOPS] : NULL;
    if ((o = rkdelta_opsum(r, d->process_id, d->device_id, op_id)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(o - r->ops) + 1, op_id};
    return o;
}

struct rk_pop *rkdelta_pop(struct rk_pop **tab, uint32_t op_id)
{
    struct rk_pop *p;

    if (*tab == NULL && (*tab = calloc(RK_POPS, sizeof(**tab))) == NULL)
        return NULL;
    p = &(*tab)[op_id % RK_POPS];
    if (p->op1 != op_id + 1) {
        memset(p, 0, sizeof(*p));
        p->op1 = op_id + 1;
    }
    return p;
}

__attribute__((noinline)) struct rk_collsum *rkdelta_collsum_miss(struct ranks *r, uint32_t op_id,
                                                                  int64_t process_id, uint64_t step)
{
    struct rk_proc *p = process_id >= 0 ? rkdelta_proc_known(r, process_id) : NULL;
    struct rk_pop *pop = p != NULL        ? rkdelta_pop(&p->pop, op_id)
                         : process_id < 0 ? rkdelta_pop(&r->collc, op_id)
                                          : NULL;
    struct rk_ref *c = pop != NULL ? &pop->coll.w[step % RK_WAYS] : NULL;
    struct rk_collsum *cs;

    if (c != NULL && rk_ref_ok(r, c, step))
        return &r->coll[c->i1 - 1];
    if ((cs = rkdelta_collsum(r, op_id, process_id, step)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(cs - r->coll) + 1, step};
    return cs;
}

void rkdelta_reset(struct ranks *r)
{
    rkmap_clear(&r->ops_idx);
    rkmap_clear(&r->steps_idx);
    rkmap_clear(&r->dsteps_idx);
    rkmap_clear(&r->coll_idx);
    r->n_ops = r->n_steps = r->n_dsteps = r->n_coll = 0;
    /* rows a failed flush left buffered */
    r->up_ops.n = r->up_dsteps.n = r->up_steps.n = r->up_coll.n = r->up_collr.n = 0;
    r->ins_open.n = r->del_open.n = r->up_occ.n = r->ins_pend.n = 0;
    if (++r->epoch == 0) { /* once in 2^32 commits: every cache entry might look valid */
        for (size_t i = 0; i < r->n_procs; i++) {
            memset(&r->procs[i].step, 0, sizeof(r->procs[i].step));
            for (size_t k = 0; r->procs[i].pop != NULL && k < RK_POPS; k++)
                memset(&r->procs[i].pop[k].coll, 0, sizeof(r->procs[i].pop[k].coll));
        }
        for (size_t i = 0; i < r->n_devs; i++) {
            memset(&r->devs[i].dstep, 0, sizeof(r->devs[i].dstep));
            r->devs[i].cur_epoch = 0;
            for (size_t k = 0; r->devs[i].ops != NULL && k < RK_DOPS; k++)
                r->devs[i].ops[k].epoch = 0;
        }
        for (size_t k = 0; r->collc != NULL && k < RK_POPS; k++)
            memset(&r->collc[k].coll, 0, sizeof(r->collc[k].coll));
        r->epoch = 1;
    }
}
