/*
 * peerclock — one member daemon's CLOCK_MONOTONIC against the home's, with a
 * bound that holds: |true offset − estimated offset| ≤ bound. Pure (no I/O,
 * no allocation, no clock read), so any thread may run it; one instance per
 * member, and the caller serializes the calls on an instance.
 *
 * PROBES. A probe is four times: t1 the home sends, t2 the member receives,
 * t3 the member answers, t4 the home receives (peerclock_io.h sends them).
 * The member's receive happened at some home time in [t1, t4 − (t3 − t2)],
 * so the offset θ = member − home then lies in [t3 − t4, t2 − t1]: centre
 * ((t2 − t1) + (t3 − t4)) / 2, half-width ((t4 − t1) − (t3 − t2)) / 2, with
 * no assumption on how the round trip split between the two directions. A
 * burst (8–32 probes in a row) keeps the minimum-round-trip sample and
 * intersects it with every other sample's interval, each widened by
 * max_ppm × how far it lies from the minimum one: never looser than the
 * minimum-round-trip sample alone (measured across a veth pair under 0–1 ms
 * of jitter each way, bursts of 32: a median bound of 83 µs against 158 µs
 * for that sample alone; 3.9 µs on the quiet link: docs/BENCHMARKS.md).
 *
 * BETWEEN BURSTS. The offset is linear between consecutive bursts i and j
 * (drift in ppm is that slope), and the bound at home time h, s = (h − hi) /
 * (hj − hi) of the way, is (1 − s)·bi + s·bj + wander·min(h − hi, hj − h):
 * the line through two estimates each within its bound errs by at most the
 * weighted sum, and a clock whose rate stays within `wander` ppm of its
 * average over the stretch departs from the chord by at most that last term.
 * After the last burst the last segment is extended, its slope known within
 * (bi + bj) / (hj − hi): bound bj + x·((bi + bj) / (hj − hi) + wander) at x
 * ns past it (before the first, the same backwards). With one burst only,
 * the drift is unknown: bound b + |x|·max_ppm. Converting a member time adds
 * a second-order term (the bound is evaluated at an estimated home time);
 * every bound is rounded up and 1 ns is added for the rounding of the offset.
 *
 * ASSUMPTIONS, and what breaks them. The member's rate relative to the home's
 * varies by at most `wander` ppm over the span an estimate uses (two
 * consecutive bursts, or the last two and the time since) and never exceeds
 * max_ppm: a crystal drifts by well under 1 ppm over seconds, the kernel
 * bounds an NTP frequency correction to 500 ppm, but a clock slewed fast by
 * chrony breaks the first. Every new burst is checked against the prediction
 * of the previous ones: one that disagrees beyond both bounds is counted in
 * `model_breaks` (a burst whose samples contradict each other too), so a
 * broken assumption is seen, not silent.
 *
 * COLLECTIVES. In a collective where no rank leaves before every rank entered
 * (allreduce, allgather, alltoall, barrier; not bcast or reduce, whose root
 * may leave first), this member's earliest exit follows everyone else's
 * latest enter, and its latest enter precedes everyone else's earliest exit:
 * one-sided bounds on θ at those two instants, as t2 − t1 and t3 − t4 are.
 * peerclock_collective() counts `violations` (the estimated times break that
 * order), and where a constraint cuts into the bound interval it returns the
 * intersection for those two instants (proved as above: both hold). A
 * constraint that excludes the whole interval is a `contradiction`: the bound
 * or the collective's semantics failed; nothing is refined then, and the
 * estimator's bounds are widened instead: for PEERCLOCK_WIDEN_NS of home time
 * either side of the latest contradiction, every bound it gives
 * (peerclock_offset_at, peerclock_to_home) is at least `widen_ns`, the
 * largest distance from an estimate to what a contradicting collective
 * allowed. That is the least the evidence requires, not a proof: the probes'
 * bound failed for those times (a clock that jumped, or producers whose
 * clock is not the daemon's), and nothing says by how much more.
 *
 * REFINEMENT. Each side of a collective that cuts into the probes' interval
 * is kept as a cut: lo ≤ θ(at) (from the member's enter) or θ(at) ≤ hi (its
 * exit), at = that instant in home time. Every estimate at home time h then
 * intersects the probes' interval with every cut kept within PEERCLOCK_CUT_NS
 * of h, each carried from `at` to h: along the segment's slope k, widened by
 * ((bi + bj) / (hj − hi) + wander)·|h − at| when h and `at` use the same
 * segment (the chord's slope is the true mean rate within the first term, the
 * rate stays within `wander` of that mean: the BETWEEN BURSTS assumption),
 * else unmoved and widened by max_ppm·|h − at|; a converted member time
 * carries them |h − at| + the probes' bound (its home time is known no
 * better). Every piece holds, so their intersection does: where it is
 * narrower, its midpoint and half-width are the estimate (bound_ns <
 * probe_bound_ns). Cuts that exclude each other (an assumption failed) and
 * times within a contradiction's widening are left to the probes.
 *
 * MEMORY. PEERCLOCK_BURSTS bursts in the struct (32 KiB). When full, every
 * second burst of the older half is dropped: recent history stays at full
 * resolution, old history coarser, its bounds wider (longer segments) but as
 * honest under the same assumption over the longer span.
 */
#ifndef TRACECTLD_PEERCLOCK_H
#define TRACECTLD_PEERCLOCK_H

#include <stddef.h>
#include <stdint.h>

#define PEERCLOCK_BURSTS     1024               /* bursts kept per member */
#define PEERCLOCK_WANDER_PPM 10.0               /* default: rate variation over a span */
#define PEERCLOCK_MAX_PPM    1000.0             /* default: the largest |drift| believed */
#define PEERCLOCK_TIME_MAX   (INT64_C(1) << 62) /* times are in [0, this] (146 years) */
#define PEERCLOCK_OFFSET_MAX (INT64_C(1) << 61) /* |offset| of a burst at most (73 years) */
#define PEERCLOCK_UNBOUNDED  INT64_MAX          /* a bound nothing can be said within (past 2^60) */
#define PEERCLOCK_RATE_LIMIT 0.1                /* bursts implying a larger |drift| are refused */
/* a contradiction widens bounds this long either side of it (COLLECTIVES) */
#define PEERCLOCK_WIDEN_NS (60 * INT64_C(1000000000))
#define PEERCLOCK_CUTS     64                        /* collectives' cuts kept (REFINEMENT) */
#define PEERCLOCK_CUT_NS   (1 * INT64_C(1000000000)) /* a cut applies this far either side */

/* One probe, all in ns of CLOCK_MONOTONIC: t1, t4 the home's; t2, t3 the member's. */
struct peerclock_sample {
    int64_t t1, t2, t3, t4;
};

/* One burst's estimate: the offset (member − home) at home time `at`, within `bound`. */
struct peerclock_burst {
    int64_t at;        /* midpoint of the minimum-round-trip sample's t1 and t4 */
    int64_t offset;    /* member − home, ns */
    int64_t bound;     /* |true − offset| ≤ bound at `at` */
    int64_t rtt_bound; /* the minimum-round-trip sample's bound alone (for the figures) */
};

/* The offset in force at one moment. */
struct peerclock_at {
    int64_t home_ns;   /* the moment, home CLOCK_MONOTONIC */
    int64_t offset_ns; /* member − home; member time = home time + offset */
    int64_t bound_ns;  /* |true − offset_ns| ≤ bound_ns (PEERCLOCK_UNBOUNDED: unknown) */
    double drift_ppm;  /* the slope used (0 with one burst): d(offset)/d(home) × 1e6 */
    /* the probes' bound alone there: bound_ns is smaller where collectives' cuts refined it,
     * larger where a contradiction widened it */
    int64_t probe_bound_ns;
};

/* One side a collective proved: lo ≤ θ ≤ hi at a home time within err of `at` (REFINEMENT). */
struct peerclock_cut {
    int64_t at, err;
    int64_t lo, hi; /* one of them ∓PEERCLOCK_UNBOUNDED */
};

/*
 * One synchronizing collective as seen from one member: its ranks' latest
 * enter and earliest exit in its own clock, and every other rank's (the
 * home's, and other members' already converted) in home time, each within
 * others_bound of the truth (0 when they are all the home's own).
 */
struct peerclock_coll {
    int64_t member_enter, member_exit; /* member clock */
    int64_t others_enter, others_exit; /* home clock */
    int64_t others_bound;              /* ≥ 0 */
};

struct peerclock {
    double wander_ppm; /* settable after init, before the first burst */
    double max_ppm;
    size_t n; /* bursts[0..n), ascending in `at` and in at + offset */
    struct peerclock_burst bursts[PEERCLOCK_BURSTS];
    /* counters, read by the report */
    uint64_t collectives;    /* peerclock_collective() calls that were counted */
    uint64_t violations;     /* of those, where the estimated times break the order */
    uint64_t contradictions; /* of those, where the order excludes the whole bound */
    uint64_t model_breaks;   /* bursts disagreeing with the previous ones or themselves */
    /* the bound contradicting collectives require (0: none), and the home time of the latest
     * contradiction; bounds within PEERCLOCK_WIDEN_NS of it are at least widen_ns */
    int64_t widen_ns, widen_at;
    /* the latest PEERCLOCK_CUTS cuts that narrowed the probes' interval (a ring at cut_next) */
    struct peerclock_cut cuts[PEERCLOCK_CUTS];
    size_t n_cuts, cut_next;
    uint64_t refined;   /* cuts kept, ever */
    int64_t refined_at; /* home time of the latest cut kept (0: none) */
};

/* Empty estimator with the default wander and max_ppm. */
void peerclock_init(struct peerclock *pc);

/*
 * Adds one burst of n samples (in the order they were taken). Returns 0 and,
 * if out is not NULL, the burst's estimate; -EINVAL (nothing changed) if n is
 * 0, a time is outside [0, PEERCLOCK_TIME_MAX], a sample is impossible
 * (t4 < t1, t3 < t2, or t3 − t2 > t4 − t1: a member claiming to have held a
 * probe longer than its round trip), or the burst is not after the last one
 * in both clocks, implies a drift past PEERCLOCK_RATE_LIMIT or an offset
 * past ±PEERCLOCK_OFFSET_MAX. Bad samples
 * come from the member: the caller closes that link.
 */
int peerclock_add_burst(struct peerclock *pc, const struct peerclock_sample *s, size_t n,
                        struct peerclock_burst *out);

/*
 * The offset in force at home time home_ns. Returns 0, -EAGAIN before any
 * burst, -EINVAL for a time outside [0, PEERCLOCK_TIME_MAX].
 */
int peerclock_offset_at(const struct peerclock *pc, int64_t home_ns, struct peerclock_at *out);

/*
 * A member time converted to home time with the offset in force then:
 * out->home_ns = member_ns − out->offset_ns, within out->bound_ns of the
 * true home time. Returns 0, -EAGAIN before any burst, -EINVAL for a time
 * outside [0, PEERCLOCK_TIME_MAX].
 */
int peerclock_to_home(const struct peerclock *pc, int64_t member_ns, struct peerclock_at *out);

/*
 * The member's mean drift over the longest span of at most span_ns that ends
 * at the last burst (at least the last two bursts): *ppm, and *ppm_bound
 * such that the true mean rate over that span is within it, (bi + bn) / D
 * (no assumption: each end is within its bound). The last segment's slope
 * (peerclock_at.drift_ppm) is what conversions use; this one, over a minute,
 * is the figure to report: under 1 ms of jitter a 1 s segment knows the
 * drift within ~±200 ppm, a minute within ~±3 ppm. Returns 0, or -EAGAIN
 * with fewer than two bursts (ppm and ppm_bound may be NULL).
 */
int peerclock_drift(const struct peerclock *pc, int64_t span_ns, double *ppm, double *ppm_bound);

/*
 * Counts one synchronizing collective (see COLLECTIVES) and returns the
 * offset in force at member_enter and at member_exit, refined by the order
 * where it can be (enter, exit may be NULL); each side that refines the
 * probes' interval is kept as a cut (REFINEMENT). The order is checked
 * against the probes alone, never against earlier cuts. Returns 0; -EAGAIN before any
 * burst and -EINVAL for a time outside [0, PEERCLOCK_TIME_MAX] (neither
 * counted).
 */
int peerclock_collective(struct peerclock *pc, const struct peerclock_coll *c,
                         struct peerclock_at *enter, struct peerclock_at *exit);

#endif
