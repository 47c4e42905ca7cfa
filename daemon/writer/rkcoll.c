/* rkcoll.c — collective matching; see rkcoll.h. */
#include "rkcoll.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rkdelta.h"

static size_t rkcoll_home(const struct ranks *r, const struct rk_ikey *k)
{
    uint64_t h = k->kind * 0x9e3779b97f4a7c15ull;

    h = (h ^ k->k1) * 0xff51afd7ed558ccdull;
    h = (h ^ k->k2) * 0xc4ceb9fe1a85ec53ull;
    h = (h ^ k->k3) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (r->n_islot - 1);
}

static bool rkcoll_key_eq(const struct rk_ikey *a, const struct rk_ikey *b)
{
    return a->kind == b->kind && a->k1 == b->k1 && a->k2 == b->k2 && a->k3 == b->k3;
}

size_t rkcoll_find(const struct ranks *r, const struct rk_ikey *key)
{
    size_t i = rkcoll_home(r, key);

    while (r->islot[i] != 0 && !rkcoll_key_eq(&r->inst[r->islot[i] - 1].key, key))
        i = (i + 1) & (r->n_islot - 1);
    return i;
}

/* Doubles the hash when one more instance would fill it past half: probes stay short. */
static int rkcoll_reserve(struct ranks *r)
{
    size_t n = r->n_islot;
    uint32_t *old = r->islot;

    if ((r->n_inst + 1) * 2 <= n)
        return 0;
    if ((r->islot = calloc(2 * n, sizeof(*r->islot))) == NULL) {
        r->islot = old;
        return -ENOMEM;
    }
    r->n_islot = 2 * n;
    free(old);
    for (size_t i = 0; i < r->n_inst; i++) {
        size_t pos = rkcoll_find(r, &r->inst[i].key);
        r->islot[pos] = (uint32_t)i + 1;
        r->inst[i].slot = (uint32_t)pos;
    }
    return 0;
}

/* Removes instance in from the hash, shifting back the entries after it. */
static void rkcoll_del(struct ranks *r, const struct rk_inst *in)
{
    size_t i = in->slot, j = i, mask = r->n_islot - 1;

    r->islot[i] = 0;
    for (;;) {
        size_t k;
        j = (j + 1) & mask;
        if (r->islot[j] == 0)
            return;
        k = rkcoll_home(r, &r->inst[r->islot[j] - 1].key);
        /* the entry at j may move to i when its home is not in (i, j] (cyclically) */
        if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
            r->islot[i] = r->islot[j];
            r->islot[j] = 0;
            r->inst[r->islot[i] - 1].slot = (uint32_t)i;
            i = j;
        }
    }
}

/* Takes instance idx out of the order of opening. */
static void rkcoll_unlink(struct ranks *r, size_t idx)
{
    const struct rk_inst *in = &r->inst[idx];

    if (in->older1 != 0)
        r->inst[in->older1 - 1].newer1 = in->newer1;
    else
        r->oldest1 = in->newer1;
    if (in->newer1 != 0)
        r->inst[in->newer1 - 1].older1 = in->older1;
    else
        r->newest1 = in->older1;
}

/* The last instance moved to index idx (the array stays dense): what pointed to it follows. */
static void rkcoll_moved(struct ranks *r, size_t idx)
{
    const struct rk_inst *in = &r->inst[idx];
    uint32_t from1 = (uint32_t)r->n_inst + 1, to1 = (uint32_t)idx + 1;

    r->islot[in->slot] = to1;
    if (in->older1 != 0)
        r->inst[in->older1 - 1].newer1 = to1;
    if (in->newer1 != 0)
        r->inst[in->newer1 - 1].older1 = to1;
    if (r->oldest1 == from1)
        r->oldest1 = to1;
    if (r->newest1 == from1)
        r->newest1 = to1;
}

/* The arrivals that complete an instance: its communicator's size when given, else the world. */
static uint64_t rkcoll_expected(const struct ranks *r, const struct rk_inst *in)
{
    if (in->size != 0)
        return in->size;
    return r->world > r->n_procs ? r->world : r->n_procs;
}

/*
 * What arrival a waited at an instance whose last arrival started at `last`: a blocking
 * call's time from its start to the last arrival (at most its duration); a non-blocking
 * one's, the part of its completion call before the last arrival (0 without one).
 */
static uint64_t rkcoll_wait(const struct rk_arrival *a, uint64_t last)
{
    uint64_t end;

    if (!(a->flags & RK_A_NB))
        return last - a->start < a->dur ? last - a->start : a->dur;
    if (!(a->flags & RK_A_DONE) || last <= a->wait_b)
        return 0;
    end = last < a->wait_e ? last : a->wait_e;
    return end - a->wait_b;
}

/*
 * The time the last arrival (li) held the others up: the longest any other arrival waited for
 * it (rkcoll_wait). For a blocking collective whose first arrival's call lasts until the last
 * arrival (clocks agreeing) that is the skew, last - first, as since issue 14; but a call that
 * returns before the last arrival (a bounded wait, a root of a broadcast that sends and goes
 * on, a kernel on another host's clock) waited no more than its duration, and the skew of
 * such instances grows with every step a rank falls behind: summed, it told of hold-ups
 * nobody had (0.92 s in tc_demo's 134 ms run). A non-blocking arrival that came early may have
 * worked, not waited, until its completion call: its wait counts only from that call.
 */
static uint64_t rkcoll_caused(const struct rk_inst *in, size_t li, uint64_t last)
{
    uint64_t most = 0;

    for (size_t i = 0; i < in->n; i++) {
        uint64_t w = i != li ? rkcoll_wait(&in->a[i], last) : 0;
        if (w > most)
            most = w;
    }
    return most;
}

static int rkcoll_close(struct ranks *r, size_t idx)
{
    struct rk_inst *in = &r->inst[idx];
    uint64_t first = UINT64_MAX, last = 0, expected = rkcoll_expected(r, in), caused;
    size_t li = 0;
    struct rk_collsum *c;
    int rc = 0;

    for (size_t i = 0; i < in->n; i++) {
        if (in->a[i].start < first)
            first = in->a[i].start;
        if (i == 0 || in->a[i].start > last) {
            last = in->a[i].start;
            li = i;
        }
    }
    caused = rkcoll_caused(in, li, last);
    for (size_t i = 0; i < in->n; i++) {
        const struct rk_arrival *a = &in->a[i];
        uint64_t wait = rkcoll_wait(a, last);
        struct rk_stepsum *s = rkdelta_step_c(r, a->process_id, a->step);
        struct rk_collsum *cr = rkdelta_collsum_c(r, in->op_id, a->process_id, a->step);

        if (s == NULL || cr == NULL) {
            rc = -ENOMEM;
            goto done;
        }
        s->coll++;
        s->waited = rk_sat(s->waited, wait);
        cr->instances++;
        cr->waited = rk_sat(cr->waited, wait);
        if (i == li) {
            s->last_count++;
            s->caused = rk_sat(s->caused, caused);
            cr->last_count++;
        }
    }
    if ((c = rkdelta_collsum_c(r, in->op_id, -1, in->a[li].step)) == NULL) {
        rc = -ENOMEM;
        goto done;
    }
    c->instances++;
    c->partial += in->n < expected;
    c->skew = rk_sat(c->skew, last - first);
    if (last - first > c->skew_max)
        c->skew_max = last - first;
done:
    if (in->in_table && rc == 0) {
        if (rkmap_grow((void **)&r->gone, &r->cap_gone, r->n_gone, sizeof(*r->gone)) < 0)
            rc = -ENOMEM;
        else
            r->gone[r->n_gone++] = in->key;
    }
    if (r->n_apool < RK_APOOL && in->cap > 0 &&
        rkmap_grow((void **)&r->apool, &r->cap_apool, r->n_apool, sizeof(*r->apool)) == 0)
        r->apool[r->n_apool++] = (struct rk_abuf){in->a, in->cap};
    else
        free(in->a);
    rkcoll_del(r, in);
    rkcoll_unlink(r, idx);
    if (idx != --r->n_inst) {
        r->inst[idx] = r->inst[r->n_inst];
        rkcoll_moved(r, idx);
    }
    return rc;
}

int rkcoll_close_oldest(struct ranks *r)
{
    return r->oldest1 != 0 ? rkcoll_close(r, r->oldest1 - 1) : 0;
}

struct rk_inst *rkcoll_open(struct ranks *r, const struct rk_ikey *key, uint32_t op_id,
                            uint64_t opened)
{
    struct rk_inst *in;
    size_t pos;

    if (rkcoll_reserve(r) < 0 ||
        rkmap_grow((void **)&r->inst, &r->cap_inst, r->n_inst, sizeof(*r->inst)) < 0)
        return NULL;
    pos = rkcoll_find(r, key);
    in = &r->inst[r->n_inst++];
    memset(in, 0, sizeof(*in));
    in->key = *key;
    in->op_id = op_id;
    in->opened = opened;
    in->slot = (uint32_t)pos;
    r->islot[pos] = (uint32_t)r->n_inst;
    in->older1 = r->newest1;
    if (r->newest1 != 0)
        r->inst[r->newest1 - 1].newer1 = (uint32_t)r->n_inst;
    else
        r->oldest1 = (uint32_t)r->n_inst;
    r->newest1 = (uint32_t)r->n_inst;
    return in;
}

int rkcoll_add_arrival(struct rk_inst *in, struct rk_arrival a, uint64_t expect)
{
    if (in->n == in->cap) {
        /* the arrivals it expects (up to 64), else 4, not rkmap_grow's 64: most instances
         * have a few ranks, and many may be open */
        size_t cap = in->cap ? 2 * in->cap : expect >= 2 && expect <= 64 ? (size_t)expect : 4;
        struct rk_arrival *p = realloc(in->a, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        in->a = p;
        in->cap = cap;
    }
    in->a[in->n++] = a;
    in->procs |= 1ull << (a.process_id & 63);
    in->owed += (a.flags & (RK_A_NB | RK_A_DONE)) == RK_A_NB;
    return 0;
}

/* The occurrence count of op on process (seen) in its current group. */
static struct rk_occ *rkcoll_occ(struct ranks *r, int64_t process_id, uint32_t op_id)
{
    struct rk_proc *p = rkdelta_proc_known(r, process_id);
    struct rk_pop *pop = p != NULL ? rkdelta_pop(&p->pop, op_id) : NULL;
    struct rk_occ *o;

    if (p == NULL)
        return NULL;
    if (pop != NULL && pop->occ1 != 0 && r->occ[pop->occ1 - 1].group == p->group)
        return &r->occ[pop->occ1 - 1];
    o = rkmap_find(&r->occ_idx, (uint64_t)process_id, op_id, p->group, (void **)&r->occ, &r->n_occ,
                   &r->cap_occ, sizeof(*r->occ),
                   &(struct rk_occ){.process_id = process_id, .op_id = op_id, .group = p->group});
    if (o == NULL)
        return NULL;
    if (pop != NULL)
        pop->occ1 = (uint32_t)(o - r->occ) + 1;
    return o;
}

/* Closes in when every rank of its communicator arrived and its completions came. */
static int rkcoll_settle(struct ranks *r, struct rk_inst *in)
{
    if (in->n >= rkcoll_expected(r, in) && in->owed == 0)
        return rkcoll_close(r, (size_t)(in - r->inst));
    return 0;
}

/* Process process_id's arrival at in, or NULL. */
static struct rk_arrival *rkcoll_arrival_of(struct rk_inst *in, int64_t process_id)
{
    for (size_t i = 0; (in->procs >> (process_id & 63) & 1) && i < in->n; i++)
        if (in->a[i].process_id == process_id)
            return &in->a[i];
    return NULL;
}

int rkcoll_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e,
                 const struct proto_ext *x, bool nb)
{
    struct rk_ikey key = {0};
    struct rk_inst *in;
    size_t pos;
    int rc;

    if (x != NULL && (x->has & PROTO_EXT_PEER))
        return 0; /* point-to-point */
    if (x != NULL && (x->has & PROTO_EXT_COMM) && (x->has & PROTO_EXT_SEQ)) {
        key.kind = 1, key.k1 = x->comm, key.k2 = x->seq;
    } else {
        struct rk_occ *o = rkcoll_occ(r, process_id, e->op_id);
        if (o == NULL)
            return -ENOMEM;
        o->dirty = true;
        key.kind = 2, key.k1 = e->op_id, key.k2 = o->group, key.k3 = o->count++;
        nb = false; /* no (comm, seq): no completion call can name it */
    }
    pos = rkcoll_find(r, &key);
    if (r->islot[pos] != 0) {
        in = &r->inst[r->islot[pos] - 1];
        if (rkcoll_arrival_of(in, process_id) != NULL)
            return 0; /* the same (comm, seq) twice from one process: not an arrival */
    } else {
        /* room: at most RANKS_OPEN open, the oldest closed as it is (partial), and counted */
        while (r->n_inst >= RANKS_OPEN) {
            if ((rc = rkcoll_close_oldest(r)) != 0)
                return rc;
            r->capped++;
        }
        if ((in = rkcoll_open(r, &key, e->op_id, r->opened)) == NULL)
            return -ENOMEM;
        r->opened++;
        if (r->n_apool > 0) {
            in->a = r->apool[--r->n_apool].a;
            in->cap = r->apool[r->n_apool].cap;
        }
    }
    if (key.kind == 1 && (x->has & PROTO_EXT_COMM_SIZE) && x->comm_size > in->size)
        in->size = x->comm_size;
    if (rkcoll_add_arrival(in,
                           (struct rk_arrival){.process_id = process_id,
                                               .step = e->step,
                                               .start = e->start_ns,
                                               .dur = e->dur_ns,
                                               .flags = nb ? RK_A_NB : 0},
                           rkcoll_expected(r, in)) < 0)
        return -ENOMEM;
    return rkcoll_settle(r, in);
}

int rkcoll_completion(struct ranks *r, struct rk_proc *p, int64_t process_id,
                      const struct proto_entry *e, const struct proto_ext *x)
{
    struct rk_ikey key = {.kind = 1, .k1 = x->comm, .k2 = x->seq};
    uint64_t b = e->start_ns, end = e->start_ns + e->dur_ns;
    struct rk_arrival *a;
    struct rk_inst *in;
    size_t pos;

    if (x->has & PROTO_EXT_ID) { /* the interval of the companions that follow it */
        p->wid = x->id;
        p->wid_b = b;
        p->wid_e = end;
    }
    if ((x->has & PROTO_EXT_PARENT) && e->dur_ns == 0 && p->wid == x->parent) {
        b = p->wid_b; /* a tcmpi.completed: it completed within its parent's interval */
        end = p->wid_e;
    }
    if (!(x->has & PROTO_EXT_COMM) || !(x->has & PROTO_EXT_SEQ))
        return 0;
    /* An instance not open, or open without this process's non-blocking arrival: its I* entry
     * was lost (dropped, or sent after this by another thread) or the instance was closed at
     * RANKS_OPEN. Nothing to complete. */
    pos = rkcoll_find(r, &key);
    if (r->islot[pos] == 0)
        return 0;
    in = &r->inst[r->islot[pos] - 1];
    if ((a = rkcoll_arrival_of(in, process_id)) == NULL || !(a->flags & RK_A_NB) ||
        (a->flags & RK_A_DONE))
        return 0;
    a->flags |= RK_A_DONE;
    a->wait_b = b;
    a->wait_e = end;
    in->owed--;
    if ((size_t)(a - in->a) < in->n_saved) /* saved without it: write it again */
        in->n_saved = (size_t)(a - in->a);
    return rkcoll_settle(r, in);
}
