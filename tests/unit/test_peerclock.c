/*
 * test_peerclock.c — the member clock estimator (daemon/peer/peerclock.h) on
 * synthetic probes whose truth the test knows: a member clock θ0 + k·(h − h0)
 * ahead of the home's (k = 100 ppm where it drifts), delays that differ each
 * way, jitter. Every estimate, at a burst, between bursts, past the last one
 * and for converted member times, is checked against that truth within its
 * bound; the bounds are checked against the formulas of the header computed
 * here from the samples themselves, not from the code under test.
 *
 * The generator rounds the member's times to whole ns, so the truth it
 * encodes is the real line within 0.5 ns: every check allows that 0.5.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "peerclock.h"

#define US    1000LL
#define MS    1000000LL
#define SEC   1000000000LL
#define THETA (5 * SEC) /* the member's clock is 5 s ahead (unshare --monotonic 5) */

TestSuite(peerclock);

/*
 * The member's clock against the home's: θ(h) = θ0 + k1·(h − h0), k2 from hc
 * on, plus amp·sin(2π·h / period) (a rate that wanders by ±amp·2π/period).
 */
struct sim {
    double theta0, k1, k2, amp, period;
    int64_t h0, hc;
    uint64_t rng;
};

static double truth(const struct sim *m, double h)
{
    double wave = m->amp != 0 ? m->amp * sin(2 * M_PI * h / m->period) : 0;
    if (h <= (double)m->hc)
        return m->theta0 + m->k1 * (h - (double)m->h0) + wave;
    return m->theta0 + m->k1 * (double)(m->hc - m->h0) + m->k2 * (h - (double)m->hc) + wave;
}

/* The home time of member time mt (θ is monotone enough to invert by iteration). */
static double truth_home(const struct sim *m, double mt)
{
    double h = mt - m->theta0;
    for (int i = 0; i < 8; i++)
        h = mt - truth(m, h);
    return h;
}

static int64_t rnd(struct sim *m, int64_t below)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return below > 0 ? (int64_t)(m->rng % (uint64_t)below) : 0;
}

/* One probe sent at home time t1: d1 there, held `hold` (home ns), d2 back. */
static struct peerclock_sample probe(const struct sim *m, int64_t t1, int64_t d1, int64_t hold,
                                     int64_t d2)
{
    int64_t hr = t1 + d1, hs = hr + hold;
    struct peerclock_sample s = {
        .t1 = t1,
        .t2 = hr + llround(truth(m, (double)hr)),
        .t3 = hs + llround(truth(m, (double)hs)),
        .t4 = hs + d2,
    };
    return s;
}

/* A burst of n probes from home time t: base delays b1, b2, each plus jitter in [0, j). */
static void burst(struct sim *m, int64_t t, size_t n, int64_t b1, int64_t b2, int64_t j,
                  struct peerclock_sample *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = probe(m, t, b1 + rnd(m, j), 2 * US + rnd(m, 500), b2 + rnd(m, j));
        t = out[i].t4 + 1 * US;
    }
}

static struct peerclock *pc_new(void)
{
    struct peerclock *pc = malloc(sizeof(*pc));
    cr_assert_not_null(pc);
    peerclock_init(pc);
    return pc;
}

/* |truth − estimate| ≤ bound at home time h (0.5: the generator's rounding). */
static void check_at(const struct peerclock *pc, const struct sim *m, int64_t h)
{
    struct peerclock_at a;
    cr_assert_eq(peerclock_offset_at(pc, h, &a), 0);
    cr_assert_eq(a.home_ns, h);
    double err = fabs(truth(m, (double)h) - (double)a.offset_ns);
    cr_assert_leq(err, (double)a.bound_ns + 0.5, "at %lld: error %.1f > bound %lld", (long long)h,
                  err, (long long)a.bound_ns);
}

/* The same for the member time that is home time h: the converted time within its bound. */
static void check_to_home(const struct peerclock *pc, const struct sim *m, int64_t h)
{
    int64_t mt = llround((double)h + truth(m, (double)h));
    struct peerclock_at a;
    cr_assert_eq(peerclock_to_home(pc, mt, &a), 0);
    cr_assert_eq(a.home_ns, mt - a.offset_ns);
    double err = fabs(truth_home(m, (double)mt) - (double)a.home_ns);
    cr_assert_leq(err, (double)a.bound_ns + 0.5, "member %lld: error %.1f > bound %lld",
                  (long long)mt, err, (long long)a.bound_ns);
}

Test(peerclock, one_sample_is_the_formula)
{
    struct peerclock *pc = pc_new();
    pc->max_ppm = 0; /* no drift within the round trip: the bare formula */
    /* θ = 5000; 300 ns there, held 200, 700 back */
    struct peerclock_sample s = {.t1 = 1000, .t2 = 6300, .t3 = 6500, .t4 = 2200};
    struct peerclock_burst b;
    cr_assert_eq(peerclock_add_burst(pc, &s, 1, &b), 0);
    /* ((t2 − t1) + (t3 − t4)) / 2 = (5300 + 4300) / 2; ((t4 − t1) − (t3 − t2)) / 2 = 500 */
    cr_assert_eq(b.offset, 4800);
    cr_assert_eq(b.bound, 500);
    cr_assert_eq(b.rtt_bound, 500);
    cr_assert_eq(b.at, 1600);
    cr_assert_leq(llabs(5000 - b.offset), b.bound);
    free(pc);

    /* with drift allowed (1000 ppm over the 600 ns to either end): 1 ns more each side */
    pc = pc_new();
    cr_assert_eq(peerclock_add_burst(pc, &s, 1, &b), 0);
    cr_assert_eq(b.offset, 4800);
    cr_assert_eq(b.bound, 501);
    free(pc);
}

Test(peerclock, asymmetric_delays_are_within_the_bound_not_removed)
{
    /* 10 µs there, 100 µs back, every time: the estimate is off by 45 µs, the bound 55 µs */
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 1};
    struct peerclock_sample s[16];
    burst(&m, 10 * SEC, 16, 10 * US, 100 * US, 0, s);
    struct peerclock *pc = pc_new();
    pc->max_ppm = 0;
    struct peerclock_burst b;
    cr_assert_eq(peerclock_add_burst(pc, s, 16, &b), 0);
    cr_assert_eq(b.offset, THETA - 45 * US);
    cr_assert_eq(b.bound, 55 * US);
    free(pc);
}

Test(peerclock, a_burst_is_the_intersection_of_its_samples)
{
    /* jitter 0–1 ms each way: the best way there and the best way back, from any samples */
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 7};
    enum { N = 16 };
    struct peerclock_sample s[N];
    burst(&m, 10 * SEC, N, 20 * US, 20 * US, 1 * MS, s);
    int64_t lo = INT64_MIN, hi = INT64_MAX, best = INT64_MAX;
    for (size_t i = 0; i < N; i++) {
        lo = s[i].t3 - s[i].t4 > lo ? s[i].t3 - s[i].t4 : lo;
        hi = s[i].t2 - s[i].t1 < hi ? s[i].t2 - s[i].t1 : hi;
        int64_t span = (s[i].t4 - s[i].t1) - (s[i].t3 - s[i].t2);
        best = span < best ? span : best;
    }
    struct peerclock *pc = pc_new();
    pc->max_ppm = 0; /* the member's clock does not drift here: no widening */
    struct peerclock_burst b;
    cr_assert_eq(peerclock_add_burst(pc, s, N, &b), 0);
    cr_assert_eq(b.offset, lo + (hi - lo) / 2);
    cr_assert_eq(b.bound, hi - b.offset);
    cr_assert_eq(b.rtt_bound, best - best / 2, "the minimum-round-trip sample's own bound");
    cr_assert_leq(b.bound, b.rtt_bound);
    cr_assert_leq(llabs(THETA - b.offset), b.bound);
    free(pc);
}

Test(peerclock, drift_and_jitter_stay_within_the_bound_everywhere)
{
    /* 100 ppm, 20/80 µs base delays, 0–50 µs jitter, bursts of 16 every second for a minute */
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .h0 = 0, .hc = INT64_MAX, .rng = 42};
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[16];
    int64_t first = 100 * SEC, last = 0;
    for (int i = 0; i < 60; i++) {
        int64_t t = first + i * SEC + rnd(&m, 10 * MS);
        burst(&m, t, 16, 20 * US, 80 * US, 50 * US, s);
        struct peerclock_burst b;
        cr_assert_eq(peerclock_add_burst(pc, s, 16, &b), 0);
        double err = fabs(truth(&m, (double)b.at) - (double)b.offset);
        cr_assert_leq(err, (double)b.bound + 0.5, "burst %d: %.1f > %lld", i, err,
                      (long long)b.bound);
        cr_assert_leq(b.bound, b.rtt_bound + 1, "never looser than the minimum round trip");
        /* as tight as the minimum round trip allows: (20 + 80) / 2 µs plus what jitter added */
        cr_assert_leq(b.bound, 50 * US + 25 * US + 1 * US);
        last = b.at;
    }
    cr_assert_eq(pc->model_breaks, 0);
    for (int64_t h = first - 2 * SEC; h < last + 3 * SEC; h += 7919 * US) {
        check_at(pc, &m, h);
        check_to_home(pc, &m, h);
    }
    struct peerclock_at a;
    cr_assert_eq(peerclock_offset_at(pc, last, &a), 0);
    /* the drift from 1 s apart, each end within ~60 µs: 100 ± 120 ppm at worst, far better here */
    cr_assert_float_eq(a.drift_ppm, 100.0, 60.0, "drift %.2f ppm", a.drift_ppm);
    /* over the minute: the mean rate (100 ppm exactly here) within a far smaller bound */
    double ppm, ppm_bound, one_bound;
    cr_assert_eq(peerclock_drift(pc, 0, &ppm, &one_bound), 0, "0: the last segment");
    cr_assert_eq(peerclock_drift(pc, 60 * SEC, &ppm, &ppm_bound), 0);
    cr_assert_leq(fabs(ppm - 100.0), ppm_bound, "%.3f ± %.3f", ppm, ppm_bound);
    cr_assert_lt(ppm_bound * 30, one_bound, "58 s against 1 s: %.3f, %.3f", ppm_bound, one_bound);
    cr_assert_leq(ppm_bound, 2.0 * 76e3 / 58e9 * 1e6 + 0.01);
    free(pc);
}

Test(peerclock, interpolation_is_exact_for_a_steady_drift)
{
    /* symmetric delays, no jitter: each burst exact, so the line between them is the truth */
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .h0 = 0, .hc = INT64_MAX, .rng = 3};
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[8];
    struct peerclock_burst b[3];
    for (int i = 0; i < 3; i++) {
        burst(&m, 50 * SEC + i * SEC, 8, 20 * US, 20 * US, 0, s);
        cr_assert_eq(peerclock_add_burst(pc, s, 8, &b[i]), 0);
        cr_assert_leq(fabs(truth(&m, (double)b[i].at) - (double)b[i].offset), 1.0);
    }
    int64_t mid = b[0].at + (b[1].at - b[0].at) / 2;
    struct peerclock_at a;
    cr_assert_eq(peerclock_offset_at(pc, mid, &a), 0);
    cr_assert_leq(fabs(truth(&m, (double)mid) - (double)a.offset_ns), 1.5);
    cr_assert_float_eq(a.drift_ppm, 100.0, 0.01);
    /* the bound between: (1 − s)·b0 + s·b1 + wander·min(x, D − x), rounded up, + 1 */
    double d = (double)(b[1].at - b[0].at), x = (double)(mid - b[0].at), sfr = x / d;
    double want = (1 - sfr) * (double)b[0].bound + sfr * (double)b[1].bound +
                  PEERCLOCK_WANDER_PPM * 1e-6 * fmin(x, d - x);
    cr_assert_eq(a.bound_ns, (int64_t)ceil(want) + 1);
    /* a bound at a burst is that burst's (s = 0), plus the rounding ns */
    cr_assert_eq(peerclock_offset_at(pc, b[1].at, &a), 0);
    cr_assert_eq(a.bound_ns, b[1].bound + 1);

    /* 0.5 s past the last: b2 + x·((b1 + b2) / D + wander) */
    int64_t past = b[2].at + SEC / 2;
    cr_assert_eq(peerclock_offset_at(pc, past, &a), 0);
    d = (double)(b[2].at - b[1].at);
    want = (double)b[2].bound +
           (SEC / 2) * ((double)(b[1].bound + b[2].bound) / d + PEERCLOCK_WANDER_PPM * 1e-6);
    cr_assert_eq(a.bound_ns, (int64_t)ceil(want) + 1);
    cr_assert_leq(fabs(truth(&m, (double)past) - (double)a.offset_ns), 1.5);
    free(pc);
}

Test(peerclock, a_wandering_rate_is_covered_between_and_after_bursts)
{
    /*
     * 100 ppm ± 5 ppm (a sine of period 2 s, amplitude 1.59 µs): the rate stays
     * in a 10 ppm band, the default wander. Bursts 1 s apart on a 1 µs link are
     * good to ~1 µs, but the clock leaves the chord by up to 1.59 µs between
     * them: only the wander term keeps the bound honest there.
     */
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .amp = 5e-6 * 2e9 / (2 * M_PI), .period = 2e9};
    m.hc = INT64_MAX;
    m.rng = 19;
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[8];
    int64_t first = 0, last = 0, bmax = 0;
    for (int i = 0; i < 20; i++) {
        struct peerclock_burst b;
        burst(&m, 200 * SEC + i * SEC, 8, 1 * US, 1 * US, 0, s);
        cr_assert_eq(peerclock_add_burst(pc, s, 8, &b), 0);
        bmax = b.bound > bmax ? b.bound : bmax;
        first = i == 0 ? b.at : first;
        last = b.at;
    }
    cr_assert_eq(pc->model_breaks, 0);
    double worst = 0; /* how far the chord alone is off, to show the case bites */
    for (int64_t h = first; h < last + 2 * SEC; h += 3 * MS + 7) {
        check_at(pc, &m, h);
        check_to_home(pc, &m, h);
        struct peerclock_at a;
        peerclock_offset_at(pc, h, &a);
        worst = fmax(worst, fabs(truth(&m, (double)h) - (double)a.offset_ns));
    }
    cr_assert_gt(worst, (double)bmax + 100,
                 "the chord is off by more than the bursts' bounds: %.0f", worst);
    free(pc);
}

Test(peerclock, one_burst_grows_at_the_largest_drift_believed)
{
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .h0 = 0, .hc = INT64_MAX, .rng = 5};
    struct peerclock *pc = pc_new();
    struct peerclock_at a;
    cr_assert_eq(peerclock_offset_at(pc, SEC, &a), -EAGAIN);
    cr_assert_eq(peerclock_to_home(pc, SEC, &a), -EAGAIN);
    cr_assert_eq(peerclock_drift(pc, SEC, NULL, NULL), -EAGAIN);
    struct peerclock_sample s[8];
    struct peerclock_burst b;
    burst(&m, 20 * SEC, 8, 20 * US, 20 * US, 5 * US, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, &b), 0);
    cr_assert_eq(peerclock_offset_at(pc, b.at + 2 * SEC, &a), 0);
    cr_assert_eq(a.offset_ns, b.offset);
    cr_assert_eq(a.drift_ppm, 0.0);
    cr_assert_eq(peerclock_drift(pc, SEC, NULL, NULL), -EAGAIN, "one burst: no drift");
    cr_assert_eq(a.bound_ns, b.bound + (int64_t)ceil(2e9 * PEERCLOCK_MAX_PPM * 1e-6) + 1);
    for (int64_t h = b.at - 3 * SEC; h < b.at + 3 * SEC; h += 100 * MS) {
        check_at(pc, &m, h);
        check_to_home(pc, &m, h);
    }
    free(pc);
}

Test(peerclock, a_change_of_drift_past_the_wander_is_counted)
{
    /* 100 ppm, then 300 ppm from 105 s: a rate change of 200 ppm against 10 ppm assumed */
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .k2 = 300e-6, .h0 = 0, .hc = 105 * SEC};
    m.rng = 9;
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[8];
    for (int i = 0; i < 5; i++) {
        burst(&m, 100 * SEC + i * SEC, 8, 20 * US, 20 * US, 5 * US, s);
        cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    }
    cr_assert_eq(pc->model_breaks, 0, "a steady drift breaks nothing");
    burst(&m, 106 * SEC, 8, 20 * US, 20 * US, 5 * US, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    cr_assert_eq(pc->model_breaks, 1, "200 µs off a prediction good to ~70 µs");
    free(pc);
}

Test(peerclock, history_is_thinned_and_stays_honest)
{
    struct sim m = {.theta0 = THETA, .k1 = -100e-6, .h0 = 0, .hc = INT64_MAX, .rng = 11};
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[4];
    int64_t first_at = 0, last = 0;
    for (int i = 0; i < 3 * PEERCLOCK_BURSTS; i++) {
        burst(&m, 1000 * SEC + i * (100 * MS), 4, 20 * US, 30 * US, 10 * US, s);
        struct peerclock_burst b;
        cr_assert_eq(peerclock_add_burst(pc, s, 4, &b), 0);
        if (i == 0)
            first_at = b.at;
        last = b.at;
        cr_assert_leq(pc->n, PEERCLOCK_BURSTS);
    }
    cr_assert_eq(pc->bursts[0].at, first_at, "the first burst is kept");
    cr_assert_eq(pc->bursts[pc->n - 1].at, last);
    cr_assert_gt(pc->n, PEERCLOCK_BURSTS / 2);
    cr_assert_eq(pc->model_breaks, 0);
    for (int64_t h = first_at; h < last; h += 37 * MS + 11) {
        check_at(pc, &m, h);
        check_to_home(pc, &m, h);
    }
    free(pc);
}

/* Bad bursts are refused whole: nothing changes. */
struct bad_burst {
    const char *name;
    struct peerclock_sample s;
};

static const struct bad_burst bad_bursts[] = {
    {"t4 before t1", {.t1 = 2000, .t2 = 5000, .t3 = 5100, .t4 = 1999}},
    {"t3 before t2", {.t1 = 1000, .t2 = 5000, .t3 = 4999, .t4 = 2000}},
    {"held longer than the round trip", {.t1 = 1000, .t2 = 5000, .t3 = 6001, .t4 = 2000}},
    {"negative time", {.t1 = -1, .t2 = 5000, .t3 = 5100, .t4 = 2000}},
    {"time past 2^62", {.t1 = 1000, .t2 = (INT64_C(1) << 62) + 1, .t3 = INT64_MAX, .t4 = 2000}},
    {"not after the last burst", {.t1 = 500, .t2 = 5000, .t3 = 5100, .t4 = 900}},
    {"member clock not after", {.t1 = 3000, .t2 = 3500, .t3 = 3600, .t4 = 4000}},
    {"a drift past 10 %", {.t1 = 1000 * SEC, .t2 = 1300 * SEC, .t3 = 1300 * SEC, .t4 = 1000 * SEC}},
};

Test(peerclock, bad_samples_are_refused_and_change_nothing)
{
    struct peerclock *pc = pc_new();
    struct peerclock_sample good = {.t1 = 1000, .t2 = 6300, .t3 = 6500, .t4 = 2200};
    cr_assert_eq(peerclock_add_burst(pc, &good, 0, NULL), -EINVAL, "an empty burst");
    cr_assert_eq(peerclock_add_burst(pc, &good, 1, NULL), 0);
    struct peerclock before = *pc;
    for (size_t i = 0; i < sizeof(bad_bursts) / sizeof(bad_bursts[0]); i++) {
        struct peerclock_sample two[2] = {bad_bursts[i].s, bad_bursts[i].s};
        cr_assert_eq(peerclock_add_burst(pc, two, 2, NULL), -EINVAL, "%s", bad_bursts[i].name);
        cr_assert_eq(memcmp(&before, pc, sizeof(*pc)), 0, "%s changed the state",
                     bad_bursts[i].name);
    }
    struct peerclock_at a;
    cr_assert_eq(peerclock_to_home(pc, -5, &a), -EINVAL);
    cr_assert_eq(peerclock_offset_at(pc, INT64_MIN, &a), -EINVAL);
    /* the extremes the checks allow overflow nothing (UBSan would stop here) */
    struct peerclock_coll far = {.member_enter = 0,
                                 .member_exit = INT64_C(1) << 62,
                                 .others_enter = 0,
                                 .others_exit = INT64_C(1) << 62,
                                 .others_bound = INT64_C(1) << 62};
    cr_assert_eq(peerclock_collective(pc, &far, &a, NULL), 0);
    free(pc);

    /* a first burst 2^62 ns from the home's clock: past ±2^61, refused */
    pc = pc_new();
    struct peerclock_sample off = {
        .t1 = INT64_C(1) << 62, .t2 = 0, .t3 = 0, .t4 = INT64_C(1) << 62};
    cr_assert_eq(peerclock_add_burst(pc, &off, 1, NULL), -EINVAL);
    cr_assert_eq(pc->n, 0);
    free(pc);
}

/*
 * A member 5 s ahead, two quiet bursts at 10 s and 12 s with fixed delays d1
 * there and d2 back: estimated θ + (d1 − d2) / 2, bound (d1 + d2) / 2 exactly
 * (no drift here, none allowed: no widening, no wander), + 1 ns of rounding.
 */
static struct peerclock *pc_skewed(struct sim *m, int64_t d1, int64_t d2)
{
    struct peerclock *pc = pc_new();
    pc->max_ppm = 0;
    pc->wander_ppm = 0;
    struct peerclock_sample s[8];
    burst(m, 10 * SEC, 8, d1, d2, 0, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    burst(m, 12 * SEC, 8, d1, d2, 0, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    return pc;
}

Test(peerclock, collectives_count_violations_and_refine_where_proved)
{
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 13};
    /* 100 µs there, 10 back: estimated θ + 45 µs, bound 55 µs */
    struct peerclock *pc = pc_skewed(&m, 100 * US, 10 * US);
    struct peerclock_at en, ex;
    int64_t h = 11 * SEC; /* the collective, in true home time */

    /* in order and far from the bound: counted, not a violation, not refined */
    struct peerclock_coll ok = {.member_enter = h + THETA,
                                .member_exit = h + 500 * US + THETA,
                                .others_enter = h + 200 * US,
                                .others_exit = h + 400 * US};
    cr_assert_eq(peerclock_collective(pc, &ok, &en, &ex), 0);
    cr_assert_eq(pc->collectives, 1);
    cr_assert_eq(pc->violations, 0);
    cr_assert_leq(llabs(ex.offset_ns - (THETA + 45 * US)), 1);
    cr_assert_eq(ex.bound_ns, 55 * US + 1, "the bursts' bound and the rounding ns");

    /*
     * The others' latest enter 20 µs before the member's exit: the estimate
     * puts the exit 45 µs early, before that enter (a violation), and the order
     * says θ ≤ θtrue + 20 µs: the interval [θ − 10, θ + 100] µs is cut to
     * [θ − 10, θ + 20] µs: offset θ + 5 µs, bound 15 µs.
     */
    struct peerclock_coll cut = {.member_enter = h + THETA,
                                 .member_exit = h + 500 * US + THETA,
                                 .others_enter = h + 480 * US,
                                 .others_exit = h + 490 * US};
    cr_assert_eq(peerclock_collective(pc, &cut, &en, &ex), 0);
    cr_assert_eq(pc->violations, 1);
    cr_assert_eq(pc->contradictions, 0);
    cr_assert_leq(llabs(ex.offset_ns - (THETA + 5 * US)), 2, "%lld", (long long)ex.offset_ns);
    cr_assert_leq(llabs(ex.bound_ns - 15 * US), 2, "%lld", (long long)ex.bound_ns);
    cr_assert_leq(llabs(ex.offset_ns - THETA), ex.bound_ns, "the truth stays inside");
    cr_assert_geq(ex.home_ns, cut.others_enter, "the refined exit is after their enter");
    /* the enter side: θ ≥ θ − 490 µs says nothing new */
    cr_assert_leq(llabs(en.offset_ns - (THETA + 45 * US)), 1);

    /* the same with the others known only within 30 µs: the cut is 30 µs looser */
    cut.others_bound = 30 * US;
    cr_assert_eq(peerclock_collective(pc, &cut, &en, &ex), 0);
    cr_assert_leq(llabs(ex.offset_ns - (THETA + 20 * US)), 2, "%lld", (long long)ex.offset_ns);
    cr_assert_leq(llabs(ex.bound_ns - 30 * US), 2);

    /* an order no clock explains (their enter 100 µs after the member left): a contradiction */
    struct peerclock_coll bad = {.member_enter = h + THETA,
                                 .member_exit = h + 500 * US + THETA,
                                 .others_enter = h + 600 * US,
                                 .others_exit = h + 700 * US};
    cr_assert_eq(peerclock_collective(pc, &bad, &en, &ex), 0);
    cr_assert_eq(pc->collectives, 4);
    cr_assert_eq(pc->violations, 3);
    cr_assert_eq(pc->contradictions, 1);
    cr_assert_leq(llabs(ex.offset_ns - (THETA + 45 * US)), 1, "nothing refined");

    struct peerclock_coll neg = ok;
    neg.others_bound = -1;
    cr_assert_eq(peerclock_collective(pc, &neg, &en, &ex), -EINVAL);
    cr_assert_eq(pc->collectives, 4, "refused, not counted");
    free(pc);
}

Test(peerclock, the_enter_side_refines_from_below)
{
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 17};
    /* 10 µs there, 100 back: estimated θ − 45 µs, bound 55 µs */
    struct peerclock *pc = pc_skewed(&m, 10 * US, 100 * US);
    int64_t h = 11 * SEC;
    /* the others' earliest exit 20 µs after the member's latest enter: θ ≥ θtrue − 20 µs */
    struct peerclock_coll c = {.member_enter = h + THETA,
                               .member_exit = h + 900 * US + THETA,
                               .others_enter = h - 100 * US,
                               .others_exit = h + 20 * US};
    struct peerclock_at en, ex;
    cr_assert_eq(peerclock_collective(pc, &c, &en, &ex), 0);
    cr_assert_eq(pc->violations, 1, "the estimate puts the enter after their exit");
    cr_assert_leq(llabs(en.offset_ns - (THETA - 5 * US)), 2, "%lld", (long long)en.offset_ns);
    cr_assert_leq(llabs(en.bound_ns - 15 * US), 2);
    cr_assert_leq(en.home_ns, c.others_exit);
    cr_assert_leq(llabs(ex.offset_ns - (THETA - 45 * US)), 1, "the exit side is untouched");
    free(pc);
}

/*
 * A contradiction widens the bounds the estimator gives near it to what the collective
 * requires, for PEERCLOCK_WIDEN_NS either side, and a larger one widens them further.
 */
Test(peerclock, a_contradiction_widens_the_bounds_near_it)
{
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 19};
    /* 100 µs there, 10 back: estimated θ + 45 µs, bound 55 µs */
    struct peerclock *pc = pc_skewed(&m, 100 * US, 10 * US);
    struct peerclock_at en, ex, at;
    int64_t h = 11 * SEC;

    /* their enter 100 µs after the member left: θ(exit) ≤ θ − 100 µs, 145 µs from θ + 45 */
    struct peerclock_coll bad = {.member_enter = h + THETA,
                                 .member_exit = h + 500 * US + THETA,
                                 .others_enter = h + 600 * US,
                                 .others_exit = h + 700 * US};
    cr_assert_eq(peerclock_collective(pc, &bad, &en, &ex), 0);
    cr_assert_eq(pc->contradictions, 1);
    cr_assert_leq(llabs(pc->widen_ns - 145 * US), 1, "%lld", (long long)pc->widen_ns);
    cr_assert_eq(ex.bound_ns, pc->widen_ns, "the collective's own times are widened");
    /* two more bursts, at 80 s and 82 s: between 12 s and 82 s the probes' bound is 55 µs */
    struct peerclock_sample s[8];
    burst(&m, 80 * SEC, 8, 100 * US, 10 * US, 0, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    burst(&m, 82 * SEC, 8, 100 * US, 10 * US, 0, s);
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    cr_assert_eq(peerclock_offset_at(pc, h + 30 * SEC, &at), 0);
    cr_assert_eq(at.bound_ns, pc->widen_ns);
    cr_assert_eq(peerclock_to_home(pc, h + THETA, &at), 0);
    cr_assert_eq(at.bound_ns, pc->widen_ns);
    cr_assert_geq(at.offset_ns + at.bound_ns, THETA - 100 * US, "what the order allows is inside");
    /* past PEERCLOCK_WIDEN_NS the probes' bound again */
    cr_assert_eq(peerclock_offset_at(pc, h + PEERCLOCK_WIDEN_NS + SEC, &at), 0);
    cr_assert_leq(llabs(at.bound_ns - 55 * US), 1, "%lld", (long long)at.bound_ns);

    /* 1 ms further off: widened to 1.145 ms */
    bad.others_enter += MS;
    bad.others_exit += MS;
    cr_assert_eq(peerclock_collective(pc, &bad, &en, &ex), 0);
    cr_assert_eq(pc->contradictions, 2);
    cr_assert_leq(llabs(pc->widen_ns - (MS + 145 * US)), 1, "%lld", (long long)pc->widen_ns);
    /* a smaller one does not narrow it */
    bad.others_enter -= MS;
    bad.others_exit -= MS;
    cr_assert_eq(peerclock_collective(pc, &bad, &en, &ex), 0);
    cr_assert_leq(llabs(pc->widen_ns - (MS + 145 * US)), 1);
    free(pc);
}

/*
 * REFINEMENT by hand: the quiet bursts of pc_skewed (100 µs there, 10 back:
 * θ + 45 µs within 55 µs, the segment's slope 0, its slope known within
 * 110 µs / 2 s = 55 ppm, no wander). At 11 s the others' latest enter is 20 µs
 * before the member's exit: θ ≤ θtrue + 20 µs (a cut). 100 ms later the
 * others' earliest exit is 5 µs after the member's latest enter: θ ≥ θtrue −
 * 5 µs (a second). Where each holds, the estimate is the probes' interval
 * [θ − 10, θ + 100] µs cut by them, the first carried 55 ppm·100 ms = 5.5 µs
 * to the second; past PEERCLOCK_CUT_NS the probes alone again.
 */
Test(peerclock, collectives_cut_the_bound_near_them)
{
    struct sim m = {.theta0 = THETA, .h0 = 0, .hc = INT64_MAX, .rng = 23};
    struct peerclock *pc = pc_skewed(&m, 100 * US, 10 * US);
    struct peerclock_at at;
    int64_t h = 11 * SEC, h2 = h + 100 * MS;

    struct peerclock_coll up = {.member_enter = h + THETA,
                                .member_exit = h + 500 * US + THETA,
                                .others_enter = h + 480 * US,
                                .others_exit = h + 490 * US};
    cr_assert_eq(peerclock_collective(pc, &up, NULL, NULL), 0);
    cr_assert_eq(pc->refined, 1, "the exit side cut, the enter side did not");
    cr_assert_eq(pc->n_cuts, 1);
    /* at the exit's estimated home time (45 µs early, where the cut is kept): [θ − 10, θ + 20]
     * µs, + 1 ns of the probes' rounding and 3 ns for 55 ppm of the exit's own 55 µs */
    cr_assert_eq(peerclock_offset_at(pc, h + 455 * US, &at), 0);
    cr_assert_eq(at.probe_bound_ns, 55 * US + 1);
    cr_assert_leq(llabs(at.offset_ns - (THETA + 5 * US)), 8, "%lld", (long long)at.offset_ns);
    cr_assert_leq(llabs(at.bound_ns - 15 * US), 8, "%lld", (long long)at.bound_ns);
    cr_assert_lt(at.bound_ns, at.probe_bound_ns);
    /* a member time converted there: the same cut (its home time known within 55 µs) */
    cr_assert_eq(peerclock_to_home(pc, h + 500 * US + THETA, &at), 0);
    cr_assert_leq(llabs(at.bound_ns - 15 * US), 12, "%lld", (long long)at.bound_ns);
    cr_assert_leq(llabs(at.offset_ns - THETA), at.bound_ns, "the truth stays inside");

    struct peerclock_coll low = {.member_enter = h2 + THETA,
                                 .member_exit = h2 + 900 * US + THETA,
                                 .others_enter = h2 - 100 * US,
                                 .others_exit = h2 + 5 * US};
    cr_assert_eq(peerclock_collective(pc, &low, NULL, NULL), 0);
    cr_assert_eq(pc->refined, 2);
    cr_assert_eq(pc->violations, 1, "the first only: the probes put this enter before their exit");
    /*
     * At h2's estimated home time h2 − 45 µs: the first cut (kept at h + 455 µs) carried
     * 99.5 ms at 55 ppm, + 5472.5 ns, and each cut 55 ppm of its 55 µs, 3 ns:
     * [θ − 5003, θ + 25476] ns: offset θ + 10236, bound 15240.
     */
    cr_assert_eq(peerclock_offset_at(pc, h2 - 45 * US, &at), 0);
    cr_assert_leq(llabs(at.offset_ns - (THETA + 10236)), 2, "%lld", (long long)at.offset_ns);
    cr_assert_leq(llabs(at.bound_ns - 15240), 2, "%lld", (long long)at.bound_ns);
    cr_assert_leq(llabs(at.offset_ns - THETA), at.bound_ns);
    /* 1 s past the second cut: neither applies, the probes' estimate */
    cr_assert_eq(peerclock_offset_at(pc, h2 + PEERCLOCK_CUT_NS + MS, &at), 0);
    cr_assert_eq(at.bound_ns, at.probe_bound_ns);
    cr_assert_leq(llabs(at.offset_ns - (THETA + 45 * US)), 1);
    /* everywhere around them the truth stays inside, and the bound is never wider */
    for (int64_t t = h - 2 * SEC; t <= h2 + 2 * SEC; t += 7 * MS) {
        check_at(pc, &m, t);
        check_to_home(pc, &m, t);
        cr_assert_eq(peerclock_offset_at(pc, t, &at), 0);
        cr_assert_leq(at.bound_ns, at.probe_bound_ns);
    }
    free(pc);
}

/*
 * A member drifting 100 ppm, bursts a second apart with 0–300 µs of jitter
 * each way, and a synchronizing collective every 50 ms whose arrivals are
 * computed from the truth: the member's rank enters last when i is even (the
 * others leave 3 µs after: θ(enter) ≥ θtrue − 3 µs) and leaves first when i is
 * odd (the others' latest enter 4 µs before: θ(exit) ≤ θtrue + 4 µs). Every
 * estimate and conversion stays within its bound of the truth, and near the
 * collectives the bound is below the probes', below a quarter of them (5–6 µs
 * against 28–40) but at the first two (one side known only) and the first
 * past the burst at 12 s (the cuts before it are on another segment: carried
 * at max_ppm, they cut less).
 */
Test(peerclock, cuts_from_collectives_under_drift_and_jitter_hold)
{
    struct sim m = {.theta0 = THETA, .k1 = 100e-6, .h0 = 0, .hc = INT64_MAX, .rng = 29};
    struct peerclock *pc = pc_new();
    struct peerclock_sample s[32];
    for (int b = 0; b < 4; b++) {
        burst(&m, (10 + b) * SEC, 32, 20 * US, 20 * US, 300 * US, s);
        cr_assert_eq(peerclock_add_burst(pc, s, 32, NULL), 0);
    }
    struct peerclock_at at;
    int narrower = 0;
    for (int i = 0; i < 40; i++) {
        int64_t t = 11 * SEC + i * 50 * MS; /* the member's enter, true home time */
        int64_t x = t + 200 * US;           /* its exit */
        int64_t mt = t + llround(truth(&m, (double)t)), mx = x + llround(truth(&m, (double)x));
        struct peerclock_coll c = {.member_enter = mt, .member_exit = mx};
        if (i % 2 == 0) {
            c.others_enter = t - 30 * US;
            c.others_exit = t + 3 * US;
        } else {
            c.others_enter = x - 4 * US;
            c.others_exit = x + 20 * US;
        }
        cr_assert_eq(peerclock_collective(pc, &c, NULL, NULL), 0);
        cr_assert_eq(pc->contradictions, 0);
        cr_assert_eq(peerclock_offset_at(pc, i % 2 == 0 ? t : x, &at), 0);
        double err = fabs(truth(&m, (double)(i % 2 == 0 ? t : x)) - (double)at.offset_ns);
        cr_assert_leq(err, (double)at.bound_ns + 0.5, "%d: error %.1f, bound %lld", i, err,
                      (long long)at.bound_ns);
        cr_assert_lt(at.bound_ns, at.probe_bound_ns, "%d", i);
        if (at.bound_ns < at.probe_bound_ns / 4)
            narrower++;
        else
            cr_assert(i == 0 || i == 1 || i == 21, "%d: %lld, the probes' %lld", i,
                      (long long)at.bound_ns, (long long)at.probe_bound_ns);
    }
    cr_assert_geq(pc->refined, 20);
    cr_assert_eq(narrower, 37);
    for (int64_t t = 10 * SEC; t <= 14 * SEC; t += 3 * MS) {
        check_at(pc, &m, t);
        check_to_home(pc, &m, t);
    }
    free(pc);
}
