/*
 * peerclock.c — the member clock estimator (peerclock.h says what holds and why).
 */
#include "peerclock.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void peerclock_init(struct peerclock *pc)
{
    memset(pc, 0, sizeof(*pc));
    pc->wander_ppm = PEERCLOCK_WANDER_PPM;
    pc->max_ppm = PEERCLOCK_MAX_PPM;
}

static int time_ok(int64_t t)
{
    return t >= 0 && t <= PEERCLOCK_TIME_MAX;
}

static int sample_ok(const struct peerclock_sample *s)
{
    if (!time_ok(s->t1) || !time_ok(s->t2) || !time_ok(s->t3) || !time_ok(s->t4))
        return 0;
    return s->t4 >= s->t1 && s->t3 >= s->t2 && s->t3 - s->t2 <= s->t4 - s->t1;
}

/* ((t4 − t1) − (t3 − t2)): twice the sample's own bound. */
static int64_t sample_span(const struct peerclock_sample *s)
{
    return (s->t4 - s->t1) - (s->t3 - s->t2);
}

/* ppm × ns, rounded up: how far a clock at that rate moves in that time. */
static int64_t drift_ns(double ppm, int64_t ns)
{
    return (int64_t)ceil(ppm * 1e-6 * (double)ns);
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* An interval [lo, hi] as an estimate: the midpoint (rounded down) and the half-width up. */
static void interval_set(int64_t lo, int64_t hi, int64_t *offset, int64_t *bound)
{
    *offset = lo + (hi - lo) / 2;
    *bound = hi - *offset;
}

/*
 * The interval of sample s moved to home time `at`: its receive happened
 * within [t1, t4] of home time, so θ moved by at most max_ppm over the
 * farther of the two distances.
 */
static void sample_interval(const struct peerclock *pc, const struct peerclock_sample *s,
                            int64_t at, int64_t *lo, int64_t *hi)
{
    int64_t far = max64(at - s->t1, s->t4 - at);
    int64_t widen = drift_ns(pc->max_ppm, max64(far, 0));
    *lo = (s->t3 - s->t4) - widen;
    *hi = (s->t2 - s->t1) + widen;
}

/* The burst's estimate: the minimum-round-trip sample intersected with all the others. */
static void burst_estimate(struct peerclock *pc, const struct peerclock_sample *s, size_t n,
                           struct peerclock_burst *b)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (sample_span(&s[i]) < sample_span(&s[best]))
            best = i;
    b->at = s[best].t1 + (s[best].t4 - s[best].t1) / 2;
    int64_t lo, hi;
    sample_interval(pc, &s[best], b->at, &lo, &hi);
    int64_t off;
    interval_set(lo, hi, &off, &b->rtt_bound);
    for (size_t i = 0; i < n; i++) {
        int64_t l, h;
        sample_interval(pc, &s[i], b->at, &l, &h);
        lo = max64(lo, l);
        hi = min64(hi, h);
    }
    if (lo > hi) {
        /* samples that exclude each other: the drift assumption failed within the burst */
        pc->model_breaks++;
        sample_interval(pc, &s[best], b->at, &lo, &hi);
    }
    interval_set(lo, hi, &b->offset, &b->bound);
}

/* The estimate at x ns of home time from burst i (x may be negative). */
struct eval {
    double offset; /* relative to bursts[i].offset */
    double bound;  /* before rounding */
    double slope;  /* d offset / d home */
    double lip;    /* |d bound / d home|: how fast the bound changes there */
};

/*
 * Between bursts i and i + 1 (0 ≤ x ≤ D), or extending the segment (i, i + 1)
 * past either end (x > D or x < 0), or with a single burst (n == 1).
 */
static struct eval eval_at(const struct peerclock *pc, size_t i, double x)
{
    const struct peerclock_burst *a = &pc->bursts[i];
    double w = pc->wander_ppm * 1e-6;
    struct eval e;
    if (pc->n == 1) {
        e.offset = 0;
        e.slope = 0;
        e.lip = pc->max_ppm * 1e-6;
        e.bound = (double)a->bound + fabs(x) * e.lip;
        return e;
    }
    const struct peerclock_burst *c = &pc->bursts[i + 1];
    double d = (double)(c->at - a->at);
    e.slope = (double)(c->offset - a->offset) / d;
    e.offset = e.slope * x;
    if (x >= 0 && x <= d) {
        double s = x / d;
        e.bound = (1 - s) * (double)a->bound + s * (double)c->bound + w * fmin(x, d - x);
        e.lip = fabs((double)(c->bound - a->bound)) / d + w;
    } else {
        /* the slope is known within (ba + bc) / d; the extension starts at the nearer end */
        double k_unc = (double)(a->bound + c->bound) / d;
        double past = x > d ? x - d : -x;
        double b0 = (double)(x > d ? c->bound : a->bound);
        e.bound = b0 + past * (k_unc + w);
        e.lip = k_unc + w;
    }
    return e;
}

/* The segment for home time h: i such that the estimate uses bursts i and i + 1. */
static size_t segment_home(const struct peerclock *pc, int64_t h)
{
    if (pc->n <= 2)
        return 0;
    size_t lo = 0, hi = pc->n - 2; /* the answer is in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (pc->bursts[mid].at <= h)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The same for a member time: the bursts' member times at + offset ascend too. */
static size_t segment_member(const struct peerclock *pc, int64_t m)
{
    if (pc->n <= 2)
        return 0;
    size_t lo = 0, hi = pc->n - 2;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (pc->bursts[mid].at + pc->bursts[mid].offset <= m)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int64_t bound_round(double b)
{
    if (!(b < (double)PEERCLOCK_OFFSET_MAX / 2))
        return PEERCLOCK_UNBOUNDED;
    return (int64_t)ceil(b) + 1;
}

static void at_fill(const struct peerclock *pc, size_t i, double x, const struct eval *e,
                    double bound, struct peerclock_at *out)
{
    out->offset_ns = pc->bursts[i].offset + (int64_t)llround(e->offset);
    out->home_ns = pc->bursts[i].at + (int64_t)llround(x);
    out->bound_ns = bound_round(bound);
    out->drift_ppm = e->slope * 1e6;
    out->probe_bound_ns = out->bound_ns;
}

/* Whether home time h lies within a contradiction's widening (peerclock.h COLLECTIVES). */
static bool widened_at(const struct peerclock *pc, int64_t h)
{
    return pc->widen_ns > 0 && h >= pc->widen_at - PEERCLOCK_WIDEN_NS &&
           h <= pc->widen_at + PEERCLOCK_WIDEN_NS;
}

/* The bound of out at least widen_ns near the latest contradiction (peerclock.h). */
static void widen(const struct peerclock *pc, struct peerclock_at *out)
{
    if (pc->widen_ns > out->bound_ns && widened_at(pc, out->home_ns))
        out->bound_ns = pc->widen_ns;
}

/*
 * How cut c moves to home time h (peerclock.h REFINEMENT): θ(h) − θ(c.at) is
 * k·(h − c.at) within u·|h − c.at|. With h and c.at on one segment, k is its
 * slope and u its slope's uncertainty plus wander; else k = 0, u = max_ppm.
 */
static void cut_carry(const struct peerclock *pc, const struct peerclock_cut *c, int64_t h,
                      double *k, double *u)
{
    *k = 0;
    *u = pc->max_ppm * 1e-6;
    if (pc->n < 2)
        return;
    size_t i = segment_home(pc, h);
    if (segment_home(pc, c->at) != i)
        return;
    const struct peerclock_burst *a = &pc->bursts[i], *b = &pc->bursts[i + 1];
    double d = (double)(b->at - a->at);
    *k = (double)(b->offset - a->offset) / d;
    *u = (double)(a->bound + b->bound) / d + pc->wander_ppm * 1e-6;
}

/*
 * out (the probes' estimate at out->home_ns) intersected with every cut kept
 * within PEERCLOCK_CUT_NS, where that is narrower. `extra`: how far the true
 * home time of the estimate may be from out->home_ns (a converted member time).
 */
static void cuts_apply(const struct peerclock *pc, int64_t extra, struct peerclock_at *out)
{
    int64_t h = out->home_ns;

    if (pc->n_cuts == 0 || out->bound_ns == PEERCLOCK_UNBOUNDED || widened_at(pc, h))
        return;
    int64_t lo = out->offset_ns - out->bound_ns, hi = out->offset_ns + out->bound_ns;
    for (size_t j = 0; j < pc->n_cuts; j++) {
        const struct peerclock_cut *c = &pc->cuts[j];
        if (c->at < h - PEERCLOCK_CUT_NS || c->at > h + PEERCLOCK_CUT_NS)
            continue;
        double k, u;
        cut_carry(pc, c, h, &k, &u);
        double dx = (double)(h - c->at), err = (double)c->err + (double)extra;
        double shift = k * dx, slack = u * fabs(dx) + (fabs(k) + u) * err;
        if (c->lo != -PEERCLOCK_UNBOUNDED)
            lo = max64(lo, (int64_t)floor((double)c->lo + shift - slack));
        if (c->hi != PEERCLOCK_UNBOUNDED)
            hi = min64(hi, (int64_t)ceil((double)c->hi + shift + slack));
    }
    if (lo > hi)
        return; /* cuts that exclude each other or the probes: an assumption failed */
    int64_t off, bound;
    interval_set(lo, hi, &off, &bound);
    if (bound < out->bound_ns) {
        out->offset_ns = off;
        out->bound_ns = bound;
    }
}

int peerclock_offset_at(const struct peerclock *pc, int64_t home_ns, struct peerclock_at *out)
{
    if (pc->n == 0)
        return -EAGAIN;
    if (!time_ok(home_ns))
        return -EINVAL;
    size_t i = segment_home(pc, home_ns);
    double x = (double)(home_ns - pc->bursts[i].at);
    struct eval e = eval_at(pc, i, x);
    at_fill(pc, i, x, &e, e.bound, out);
    out->home_ns = home_ns;
    cuts_apply(pc, 0, out);
    widen(pc, out);
    return 0;
}

/* peerclock_to_home from the probes alone (no widening). */
static int to_home_probes(const struct peerclock *pc, int64_t member_ns, struct peerclock_at *out)
{
    if (pc->n == 0)
        return -EAGAIN;
    if (!time_ok(member_ns))
        return -EINVAL;
    size_t i = segment_member(pc, member_ns);
    const struct peerclock_burst *a = &pc->bursts[i];
    /* on the line offset = a.offset + k·x, member = a.at + x + a.offset + k·x */
    double k = pc->n == 1 ? 0 : eval_at(pc, i, 0).slope;
    double x = (double)(member_ns - (a->at + a->offset)) / (1 + k);
    struct eval e = eval_at(pc, i, x);
    /*
     * The bound holds at the true home time h*, not at the estimated h; with
     * E the error of the converted time, |E| ≤ (bound(h) + lip·|E|) / (1 − |k|),
     * so |E| ≤ bound(h) / (1 − |k| − lip).
     */
    double den = 1 - fabs(e.slope) - e.lip;
    double bound = den >= 0.5 ? e.bound / den : INFINITY;
    at_fill(pc, i, x, &e, bound, out);
    out->home_ns = member_ns - out->offset_ns;
    return 0;
}

int peerclock_to_home(const struct peerclock *pc, int64_t member_ns, struct peerclock_at *out)
{
    int rc = to_home_probes(pc, member_ns, out);

    if (rc == 0) {
        cuts_apply(pc, out->bound_ns, out);
        out->home_ns = member_ns - out->offset_ns;
        widen(pc, out);
    }
    return rc;
}

int peerclock_drift(const struct peerclock *pc, int64_t span_ns, double *ppm, double *ppm_bound)
{
    if (pc->n < 2)
        return -EAGAIN;
    const struct peerclock_burst *last = &pc->bursts[pc->n - 1];
    size_t i = pc->n - 2;
    while (i > 0 && last->at - pc->bursts[i - 1].at <= span_ns)
        i--;
    const struct peerclock_burst *a = &pc->bursts[i];
    double d = (double)(last->at - a->at);
    if (ppm)
        *ppm = (double)(last->offset - a->offset) / d * 1e6;
    if (ppm_bound)
        *ppm_bound = (double)(a->bound + last->bound) / d * 1e6;
    return 0;
}

/* Drops every second burst of the older half (keeping the first). */
static void thin(struct peerclock *pc)
{
    size_t half = pc->n / 2, w = 1;
    for (size_t r = 1; r < pc->n; r++)
        if (r >= half || r % 2 == 0)
            pc->bursts[w++] = pc->bursts[r];
    pc->n = w;
}

/*
 * The new burst must follow the last in both clocks at a plausible rate,
 * and its offset stay within ±PEERCLOCK_OFFSET_MAX, so that every sum of a
 * time, an offset and a bound here stays within int64.
 */
static int burst_follows(const struct peerclock *pc, const struct peerclock_burst *b)
{
    if (b->offset > PEERCLOCK_OFFSET_MAX || b->offset < -PEERCLOCK_OFFSET_MAX)
        return 0;
    if (pc->n == 0)
        return 1;
    const struct peerclock_burst *last = &pc->bursts[pc->n - 1];
    if (b->at <= last->at || b->at + b->offset <= last->at + last->offset)
        return 0;
    double k = (double)(b->offset - last->offset) / (double)(b->at - last->at);
    return fabs(k) <= PEERCLOCK_RATE_LIMIT;
}

int peerclock_add_burst(struct peerclock *pc, const struct peerclock_sample *s, size_t n,
                        struct peerclock_burst *out)
{
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!sample_ok(&s[i]))
            return -EINVAL;
    uint64_t breaks = pc->model_breaks;
    struct peerclock_burst b;
    burst_estimate(pc, s, n, &b);
    if (!burst_follows(pc, &b)) {
        pc->model_breaks = breaks;
        return -EINVAL;
    }
    if (pc->n > 0) {
        struct peerclock_at pred;
        peerclock_offset_at(pc, b.at, &pred);
        if (pred.bound_ns != PEERCLOCK_UNBOUNDED &&
            llabs(pred.offset_ns - b.offset) > pred.bound_ns + b.bound)
            pc->model_breaks++;
    }
    if (pc->n == PEERCLOCK_BURSTS)
        thin(pc);
    pc->bursts[pc->n++] = b;
    if (out)
        *out = b;
    return 0;
}

/* [θ − B, θ + B] cut by lo ≤ θ ≤ hi: 0 and the refined estimate, or -1 if disjoint. */
static int refine(struct peerclock_at *at, int64_t lo, int64_t hi)
{
    if (at->bound_ns == PEERCLOCK_UNBOUNDED)
        return 0;
    int64_t l = at->offset_ns - at->bound_ns, h = at->offset_ns + at->bound_ns;
    if (hi < l || lo > h)
        return -1;
    interval_set(max64(l, lo), min64(h, hi), &at->offset_ns, &at->bound_ns);
    return 0;
}

/*
 * A collective excluded the whole bound of en or ex: widen_ns becomes at least the distance
 * from each estimate to what the order allows (θ(enter) ≥ lo, θ(exit) ≤ hi), or that alone
 * when the previous widening is older than PEERCLOCK_WIDEN_NS.
 */
static void contradicted(struct peerclock *pc, const struct peerclock_at *en,
                         const struct peerclock_at *ex, int64_t lo, int64_t hi)
{
    int64_t need = 0;

    if (lo > en->offset_ns)
        need =
            max64(need, lo > INT64_MAX / 2 || en->offset_ns < -INT64_MAX / 2 ? PEERCLOCK_UNBOUNDED
                                                                             : lo - en->offset_ns);
    if (hi < ex->offset_ns)
        need =
            max64(need, hi < -INT64_MAX / 2 || ex->offset_ns > INT64_MAX / 2 ? PEERCLOCK_UNBOUNDED
                                                                             : ex->offset_ns - hi);
    if (pc->widen_ns == 0 || en->home_ns > pc->widen_at + PEERCLOCK_WIDEN_NS ||
        en->home_ns < pc->widen_at - PEERCLOCK_WIDEN_NS)
        pc->widen_ns = need;
    else
        pc->widen_ns = max64(pc->widen_ns, need);
    pc->widen_at = pc->widen_at > en->home_ns ? pc->widen_at : en->home_ns;
}

/* Keeps one side a collective proved at estimate at (REFINEMENT), overwriting the oldest. */
static void cut_keep(struct peerclock *pc, const struct peerclock_at *at, int64_t lo, int64_t hi)
{
    pc->cuts[pc->cut_next] =
        (struct peerclock_cut){.at = at->home_ns, .err = at->probe_bound_ns, .lo = lo, .hi = hi};
    pc->cut_next = (pc->cut_next + 1) % PEERCLOCK_CUTS;
    if (pc->n_cuts < PEERCLOCK_CUTS)
        pc->n_cuts++;
    pc->refined++;
    pc->refined_at = max64(pc->refined_at, at->home_ns);
}

int peerclock_collective(struct peerclock *pc, const struct peerclock_coll *c,
                         struct peerclock_at *enter, struct peerclock_at *exit)
{
    if (!time_ok(c->member_enter) || !time_ok(c->member_exit) || !time_ok(c->others_enter) ||
        !time_ok(c->others_exit) || !time_ok(c->others_bound))
        return -EINVAL;
    struct peerclock_at en, ex;
    int rc = to_home_probes(pc, c->member_enter, &en);
    if (rc == 0)
        rc = to_home_probes(pc, c->member_exit, &ex);
    if (rc < 0)
        return rc;
    pc->collectives++;
    if (ex.home_ns < c->others_enter || en.home_ns > c->others_exit)
        pc->violations++;
    /*
     * θ(exit) ≤ member_exit − others_enter (+ their bound): the member left after
     * the others' latest enter; θ(enter) ≥ member_enter − others_exit (− their
     * bound): it entered before the others' earliest exit.
     */
    struct peerclock_at ren = en, rex = ex;
    int64_t hi = c->member_exit - c->others_enter; /* in ±2^62: the sum below may not be */
    hi = hi > INT64_MAX - c->others_bound ? INT64_MAX : hi + c->others_bound;
    int64_t lo = c->member_enter - c->others_exit - c->others_bound;
    if (refine(&rex, INT64_MIN, hi) < 0 || refine(&ren, lo, INT64_MAX) < 0) {
        pc->contradictions++;
        contradicted(pc, &en, &ex, lo, hi);
        ren = en;
        rex = ex;
        widen(pc, &ren);
        widen(pc, &rex);
    } else {
        if (ren.bound_ns < en.bound_ns)
            cut_keep(pc, &en, lo, PEERCLOCK_UNBOUNDED);
        if (rex.bound_ns < ex.bound_ns)
            cut_keep(pc, &ex, -PEERCLOCK_UNBOUNDED, hi);
    }
    ren.home_ns = c->member_enter - ren.offset_ns;
    rex.home_ns = c->member_exit - rex.offset_ns;
    if (enter)
        *enter = ren;
    if (exit)
        *exit = rex;
    return 0;
}
