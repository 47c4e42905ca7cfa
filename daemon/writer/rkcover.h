/*
 * rkcover — the union of a process's top-level entries per step, from which
 * the report's untracked time follows (a step's span minus that union).
 * Writer thread, through struct ranks (rk.h).
 *
 * A top-level entry is one without an ext `parent` (PROTOCOL.md "Links"): a
 * nested entry lies in its parent's interval, so counting it would count
 * that time twice. Each process keeps, for each of its last RK_WAYS steps
 * (by step % RK_WAYS), the merged, sorted intervals of its top-level entries
 * in that step; an entry adds to its step's rk_steps delta `covered` the
 * part of its interval no earlier entry of that step covered, so the sum
 * over a step is exactly the length of the union. At a commit the intervals
 * that end before the process's latest start, less twice the most an entry
 * of it has come late (at least 100 ms), are dropped (no entry still to come should overlap
 * them); an entry that starts before a dropped point, or of a step whose
 * slot a later step took, adds to r->late (info.ranks_late): its overlap with
 * what was dropped may be counted twice, so the union is at most that much
 * too large. The intervals are saved at each commit with the exposure's
 * (rkstate.c: rk_pend rows of device -1), so a writer that reopens the file
 * mid-session goes on exactly. Every function returns 0 or -ENOMEM.
 */
#ifndef TRACECTLD_RKCOVER_H
#define TRACECTLD_RKCOVER_H

#include "rk.h"

/* The slots of a process before its first top-level entry (rk_proc.cover): never used,
 * never appended to (tail UINT64_MAX), never written; rkcover_entry_slow allocates its own. */
extern struct rk_cover rkcover_none[RK_WAYS];

/* rkcover_entry's other cases (apart: the common one is inlined). */
int rkcover_entry_slow(struct ranks *r, struct rk_proc *p, const struct proto_entry *e,
                       struct rk_stepsum *s);

/* Sets c->tail (rk.h) after a change to c's intervals, its step or its room. */
static inline void rkcover_retail(struct rk_cover *c)
{
    c->lim = c->cap < RANKS_PENDING ? c->cap : RANKS_PENDING;
    c->tail = c->used && c->n > 0 && c->n < c->lim ? c->iv[c->n - 1].e : UINT64_MAX;
}

/* Top-level entry e of process p: adds what it newly covers to s (its step's rk_steps delta). */
static inline int rkcover_entry(struct ranks *r, struct rk_proc *p, const struct proto_entry *e,
                                struct rk_stepsum *s)
{
    struct rk_cover *c = &p->cover[e->step % RK_WAYS];

    /* the common case: the latest start of the process, after its step's last interval,
     * with room for it (nothing it could overlap, nothing late): c->tail says the rest */
    if (c->step == e->step && e->start_ns > c->tail && e->start_ns >= p->cover_max_start &&
        e->dur_ns > 0) {
        uint64_t end = e->start_ns + e->dur_ns;
        p->cover_max_start = e->start_ns;
        p->cover_dirty = true;
        c->iv[c->n++] = (struct rk_iv){e->start_ns, end};
        c->tail = c->n < c->lim ? end : UINT64_MAX;
        s->covered = rk_sat(s->covered, e->dur_ns);
        return 0;
    }
    return rkcover_entry_slow(r, p, e, s);
}
/* At a commit: drops the intervals of p that no entry still to come should overlap. */
void rkcover_settle(struct rk_proc *p);
/* A saved row (rkstate.c): slot's step and, when head, its drop_end (b); else an interval
 * [b, e) after those already loaded. */
int rkcover_load(struct rk_proc *p, uint32_t slot, uint64_t step, bool head, uint64_t b,
                 uint64_t e);
/* Frees p's intervals. */
void rkcover_free(struct rk_proc *p);

#endif
