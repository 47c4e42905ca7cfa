/*
 * peerlate — the late-rank analysis across hosts, at the home: who held the
 * others up, caused and waited, each step's late rank and the verdict,
 * computed on every host's ranks from the synchronizing collectives the home
 * checks (peerarr.h), every member time converted to the home's clock with
 * its bound (peerclock_to_home), and every figure given with its own bound.
 *
 * Per instance (one collective, comm + seq): the last arrival L (the latest
 * enter on the home's clock, ties to the smaller rank) held the others up;
 * each other arrival i waited min(enter_L - enter_i, its own duration), and L
 * caused the longest such wait (rkcoll.c's rule for blocking calls). A
 * difference of two converted times is within b_L + b_i of the truth (their
 * bounds), or exact when both are of one host (one clock, one offset): that
 * sum is the figure's bound, and bounds add up as the figures do. An
 * instance is `uncertain` when some other host's rank entered within that
 * bound of L: which of them came last is not known.
 *
 * A step (L's step) has as its late rank the one that caused most in it,
 * named when that cost RQ_LATE (10 %) of the step or more (as a one-host
 * report does), exceeds its bound, and the rank was surely last in each of
 * its instances of the step (it entered later than every other host's rank
 * by more than their two bounds); one that costs the share but fails either
 * clock condition is "within the clock bound" and not named. A step's time is
 * from the previous step's last exit to its own (the first step: its first
 * enter to its last exit), so the sum of the steps is the run. The verdict
 * names a rank by verdict_culprit()'s rule over those figures (verdict.h),
 * and only when its caused time also exceeds its bound.
 *
 * Pure (no I/O, no clock read): one thread at a time, the home's loop.
 *
 * MEMORY. PEERLATE_SESSIONS session names (the least recently fed is
 * forgotten), PEERLATE_RANKS (host, rank) pairs and PEERLATE_STEPS steps
 * per session, PEERLATE_BY (step, late rank) figures in all: under 100 MB
 * at most, whatever members send; an instance past those is counted in
 * `unkept` (not analysed, or its step's figure not kept).
 */
#ifndef TRACECTLD_PEERLATE_H
#define TRACECTLD_PEERLATE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "peerarr.h"

#define PEERLATE_SESSIONS 16
#define PEERLATE_RANKS    4096
#define PEERLATE_STEPS    65536
#define PEERLATE_BY       (1u << 20) /* (step, late rank) figures kept in all sessions */
#define PEERLATE_LISTED   1000       /* steps listed in a report at most (the first ones) */

struct peerlate;

/* An empty analysis; NULL without memory. */
struct peerlate *peerlate_new(void);
/* Frees pl and all it holds; NULL is a no-op. */
void peerlate_free(struct peerlate *pl);
/*
 * One collective instance of session, its n arrivals on the home's clock
 * (peerarr_due_fn: pass pl as arg). Instances of fewer than two arrivals
 * teach nothing and are skipped.
 */
void peerlate_due_cb(void *pl, const char *session, uint64_t comm, uint64_t seq,
                     const struct peerarr_home *a, size_t n);
/*
 * Packs the key "hosts_late" and its map (proto/PROTOCOL.md "report
 * hosts_late") for session into pk; hosts[i] names host index i (i <
 * n_hosts; hosts[0] the home, whose clock the times are on; a missing or
 * NULL name packs as "?"). 0; -ENOENT when no instance of session was
 * analysed (nothing packed); -ENOMEM (pk then holds a part: discard it).
 */
int peerlate_pack(const struct peerlate *pl, const char *session, const char *const *hosts,
                  size_t n_hosts, msgpack_packer *pk);
/*
 * Packs the map of report option "late" (proto/PROTOCOL.md: `instances`,
 * `culprit`, `ranks` [{rank, arrived_last, caused_ns, waited_ns}], by rank)
 * from the figures across hosts of session, with "hosts": true, for `tracectl
 * top` at a home. 0; -ENOENT when no instance of session was analysed
 * (nothing packed); -ENOMEM (pk then holds a part: discard it).
 */
int peerlate_pack_late(const struct peerlate *pl, const char *session, msgpack_packer *pk);

#endif
