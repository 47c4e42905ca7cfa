/*
 * test_tcclock.c — the TSC-to-CLOCK_MONOTONIC conversion (client/lib/tcclock.h):
 * anchor, rate, interpolation, wrap of the counter, re-anchoring against a
 * clock whose rate drifts, and a change of the TSC's rate. The clocks here
 * are made up (exact arithmetic on known rates), so every expected value is
 * computed from the made-up truth, not from the conversion.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <time.h>

#include "tcclock.h"

TestSuite(tcclock);

#define GHZ3 (1.0 / 3.0) /* ns per tick of a 3 GHz TSC */

static struct tcclock_anchor A(uint64_t tsc, uint64_t ns) {
    return (struct tcclock_anchor){tsc, ns};
}

static int64_t
diff(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b);
}

Test(tcclock, one_anchor_converts_at_its_rate)
{
    struct tcclock k;

    tcclock_init(&k, A(1000, 5000000000ull), 0.5);
    cr_assert_eq(tcclock_ns(&k, 1000), 5000000000ull);
    cr_assert_eq(tcclock_ns(&k, 3000), 5000001000ull);
    cr_assert_eq(tcclock_ns(&k, 0), 4999999500ull); /* before the anchor: back at the rate */
    /* ticks that would map below 0 give 0, not a wrapped huge value */
    tcclock_init(&k, A(1000000, 10), 1.0);
    cr_assert_eq(tcclock_ns(&k, 0), 0);
}

Test(tcclock, anchors_closer_than_a_window_or_backwards_are_ignored)
{
    struct tcclock k;

    tcclock_init(&k, A(3000000, 1000000000ull), GHZ3);
    cr_assert_not(tcclock_anchor(&k, A(3000000 + 2999999, 1000000000ull + 999999)));
    cr_assert_not(tcclock_anchor(&k, A(2000000, 1000000000ull + 5000000))); /* ticks back */
    cr_assert_eq(k.cur.tsc, 3000000);
    cr_assert_eq(k.prev.tsc, 3000000);
    cr_assert(tcclock_anchor(&k, A(3000000 + 3000000, 1000000000ull + 1000000)));
    cr_assert_eq(k.prev.tsc, 3000000);
    cr_assert_eq(k.cur.tsc, 6000000);
}

Test(tcclock, the_rate_is_measured_from_the_anchors)
{
    /* Truth: 2.5 GHz (0.4 ns per tick) from (7e9 ticks, 1e12 ns); the first guess 0.5 % off. */
    struct tcclock k;
    const uint64_t t0 = 7000000000ull, n0 = 1000000000000ull;

    tcclock_init(&k, A(t0, n0), 0.4 * 1.005);
    for (uint64_t i = 1; i <= 600; i++) /* every 5 ms for 3 s */
        cr_assert(tcclock_anchor(&k, A(t0 + i * 12500000, n0 + i * 5000000)));
    cr_assert(k.rate > 0.4 * (1 - 1e-12) && k.rate < 0.4 * (1 + 1e-12), "rate %.15f", k.rate);
    /* 1 s past the last anchor, extrapolated: exact to the ns */
    uint64_t t = t0 + 600 * 12500000ull + 2500000000ull, want = n0 + 3000000000ull + 1000000000ull;
    cr_assert(llabs(diff(tcclock_ns(&k, t), want)) <= 1, "%llu vs %llu",
              (unsigned long long)tcclock_ns(&k, t), (unsigned long long)want);
}

Test(tcclock, ticks_between_the_last_two_anchors_are_interpolated)
{
    /* The last window runs 0.4 % fast against the rate measured over both: between its two
     * anchors the window's own rate counts, not the longer one. */
    struct tcclock k;
    const uint64_t t0 = 1000000000ull, n0 = 2000000000ull;

    tcclock_init(&k, A(t0, n0), 0.5);
    cr_assert(tcclock_anchor(&k, A(t0 + 20000000, n0 + 10000000)));
    cr_assert(tcclock_anchor(&k, A(t0 + 40000000, n0 + 20040000)));
    cr_assert(k.rate > 0.500999 && k.rate < 0.501001, "rate %f", k.rate);
    cr_assert_eq(tcclock_ns(&k, t0 + 30000000), n0 + 15020000);
    cr_assert_eq(tcclock_ns(&k, t0 + 25000000), n0 + 12510000);
    cr_assert_eq(tcclock_ns(&k, t0 + 20000000), n0 + 10000000);
    cr_assert_eq(tcclock_ns(&k, t0 + 40000000), n0 + 20040000);
    /* before the window: back from its first anchor at the longer rate */
    cr_assert_eq(tcclock_ns(&k, t0 + 10000000), n0 + 10000000 - 5010000);
}

Test(tcclock, conversion_is_monotonic_across_the_anchors)
{
    struct tcclock k;
    uint64_t last = 0;

    tcclock_init(&k, A(0, 1000000000ull), 0.3);
    cr_assert(tcclock_anchor(&k, A(3000000, 1001000000ull)));
    cr_assert(tcclock_anchor(&k, A(6000000, 1002000100ull))); /* a slightly other rate */
    for (uint64_t t = 0; t < 9000000; t += 997) {
        uint64_t ns = tcclock_ns(&k, t);
        cr_assert_geq(ns, last, "at tick %llu", (unsigned long long)t);
        last = ns;
    }
}

Test(tcclock, the_counter_may_wrap)
{
    /* 3 GHz from 2^64 - 1.5e9 ticks: the counter wraps half a second in. */
    struct tcclock k;
    const uint64_t t0 = UINT64_MAX - 1500000000ull + 1, n0 = 50000000000ull;

    tcclock_init(&k, A(t0, n0), GHZ3);
    for (uint64_t i = 1; i <= 400; i++) { /* every 3 ms for 1.2 s: across the wrap */
        uint64_t t = t0 + i * 9000000;    /* wraps: unsigned arithmetic */
        cr_assert(tcclock_anchor(&k, A(t, n0 + i * 3000000)), "anchor %llu", (unsigned long long)i);
    }
    cr_assert_lt(k.cur.tsc, t0, "the last anchor is past the wrap");
    /* between the anchors, just past the wrap, and after the last anchor */
    cr_assert_eq(tcclock_ns(&k, t0 + 399 * 9000000ull + 4500000), n0 + 399 * 3000000ull + 1500000);
    /* tick 2999999997: 1.5e9 + 2999999997 ticks after t0, 300 ms after the last anchor */
    cr_assert_eq(tcclock_ns(&k, 2999999997ull), n0 + 1499999999ull);
    uint64_t after = tcclock_ns(&k, t0 + 400 * 9000000ull + 3000);
    cr_assert(llabs(diff(after, n0 + 400 * 3000000ull + 1000)) <= 1, "%llu",
              (unsigned long long)after);
}

/* ---- re-anchoring against a drifting clock ----------------------------------- */

/* A small deterministic noise in [-20, 20] ns: anchors are read with some error. */
static int64_t noise(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)(*s >> 33) % 41 - 20;
}

/*
 * An hour of a 3 GHz TSC against a CLOCK_MONOTONIC whose rate NTP slews by
 * ±50 ppm (a 10-minute period) and steps by 500 ppm half-way, in 1 ms pieces.
 * The writer re-anchors every 5 ms with ±20 ns of error; a record made
 * mid-window is converted after the next anchor (interpolated), one made
 * 0.5 ms after an anchor is converted before the next one (extrapolated).
 * Both stay within 1 µs; one anchor and the first second's rate do not.
 */
struct drift {
    int64_t worst_in, worst_after, worst_fixed;
};

static struct drift run_drift(bool reanchor)
{
    const uint64_t step = 3000000; /* ticks per 1 ms piece */
    uint64_t tsc = 123456789, seed = 42;
    double ns = 1e12;
    struct tcclock k, fixed;
    struct drift d = {0, 0, 0};
    uint64_t pending_tsc = 0;
    double pending_ns = 0;

    tcclock_init(&k, A(tsc, (uint64_t)ns), GHZ3 * 1.0002);
    fixed = k;
    for (uint64_t j = 0; j < 3600 * 1000; j++) {
        double t = (double)j / 1000.0; /* seconds */
        double x = t / 600.0 * 6.283185307179586;
        /* sin(x) for the slew, by its series on [-pi, pi] (no libm) */
        x -= 6.283185307179586 * (double)(int64_t)(x / 6.283185307179586 + 0.5);
        double s = x - x * x * x / 6 + x * x * x * x * x / 120 - x * x * x * x * x * x * x / 5040;
        double rate = GHZ3 * (1 + 50e-6 * s + (t >= 1800 ? 500e-6 : 0));
        if (j % 5 == 2) { /* a record mid-window */
            pending_tsc = tsc + step / 3;
            pending_ns = ns + (double)(step / 3) * rate;
        }
        if (j % 5 == 0 && j > 0) {
            struct tcclock_anchor a = A(tsc, (uint64_t)(ns + 0.5) + (uint64_t)noise(&seed));
            if (reanchor || j == 1000)
                tcclock_anchor(&k, a);
            if (j == 1000)
                fixed = k; /* the first second's rate, never re-anchored */
            if (pending_tsc != 0) {
                int64_t e =
                    llabs((int64_t)tcclock_ns(&k, pending_tsc) - (int64_t)(pending_ns + 0.5));
                d.worst_in = e > d.worst_in ? e : d.worst_in;
                if (j > 1000) {
                    e = llabs((int64_t)tcclock_ns(&fixed, pending_tsc) -
                              (int64_t)(pending_ns + 0.5));
                    d.worst_fixed = e > d.worst_fixed ? e : d.worst_fixed;
                }
            }
            /* a record half a piece after the anchor, converted now */
            int64_t e = llabs((int64_t)tcclock_ns(&k, tsc + step / 2) -
                              (int64_t)(ns + (double)(step / 2) * rate + 0.5));
            if (j > 2000) /* once the rate has a second of anchors behind it */
                d.worst_after = e > d.worst_after ? e : d.worst_after;
        }
        tsc += step;
        ns += (double)step * rate;
    }
    return d;
}

Test(tcclock, reanchoring_keeps_an_hour_within_a_microsecond, .timeout = 60)
{
    struct drift d = run_drift(true);

    cr_log_info("worst: %lld ns interpolated, %lld ns extrapolated; without re-anchoring %lld ns",
                (long long)d.worst_in, (long long)d.worst_after, (long long)d.worst_fixed);
    cr_assert_leq(d.worst_in, 1000, "interpolated: %lld ns off", (long long)d.worst_in);
    cr_assert_leq(d.worst_after, 1000, "extrapolated: %lld ns off", (long long)d.worst_after);
    /* the scenario is one where a fixed rate fails */
    cr_assert_gt(d.worst_fixed, 1000000, "a fixed anchor drifts: %lld ns",
                 (long long)d.worst_fixed);
}

Test(tcclock, without_reanchoring_the_same_hour_drifts, .timeout = 60)
{
    struct drift d = run_drift(false);

    cr_assert_gt(d.worst_in, 1000000, "one anchor: %lld ns", (long long)d.worst_in);
}

Test(tcclock, a_change_of_the_tsc_rate_is_caught_by_the_next_anchors)
{
    /* 3 GHz for 2 s, then 2 GHz (a migration to another host, say). */
    struct tcclock k;
    uint64_t tsc = 1000, ns = 1000000000ull;

    tcclock_init(&k, A(tsc, ns), GHZ3);
    for (int i = 0; i < 400; i++) {
        tsc += 15000000, ns += 5000000;
        cr_assert(tcclock_anchor(&k, A(tsc, ns)));
    }
    for (int i = 0; i < 2; i++) {
        tsc += 10000000, ns += 5000000;
        cr_assert(tcclock_anchor(&k, A(tsc, ns)));
    }
    cr_assert(k.rate > 0.5 * (1 - 1e-9) && k.rate < 0.5 * (1 + 1e-9), "rate %.12f", k.rate);
    /* between the last anchors and 1 ms after the last one: exact */
    cr_assert_eq(tcclock_ns(&k, tsc - 5000000), ns - 2500000);
    cr_assert_eq(tcclock_ns(&k, tsc + 2000000), ns + 1000000);
    /* and the rate stays the new one as the anchors go on */
    for (int i = 0; i < 400; i++) {
        tsc += 10000000, ns += 5000000;
        cr_assert(tcclock_anchor(&k, A(tsc, ns)));
    }
    cr_assert(k.rate > 0.5 * (1 - 1e-9) && k.rate < 0.5 * (1 + 1e-9), "rate %.12f", k.rate);
}

/* ---- this machine -------------------------------------------------------------- */

static uint64_t mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

Test(tcclock, on_this_machine_an_anchor_reads_the_monotonic_clock)
{
    double rate;
    const char *why;
    uint64_t before = mono(), width;
    struct tcclock_anchor a = tcclock_read_anchor(&width);
    uint64_t after = mono();

    cr_assert(a.ns >= before && a.ns <= after);
    if (!tcclock_usable(&rate, &why)) {
        cr_log_info("the TSC is not usable here: %s", why);
        cr_assert_str_neq(why, "");
        return;
    }
    cr_assert_gt(rate, 0);
    /* converted through an anchor, a TSC read lands between two clock reads (with room for
     * a preemption: this is not a timing test) */
    struct tcclock k;
    tcclock_init(&k, a, rate);
    uint64_t n0 = mono(), t = tcclock_tsc(), n1 = mono(), got = tcclock_ns(&k, t);
    cr_assert(got + 50000000 >= n0 && got <= n1 + 50000000, "%llu not in [%llu, %llu]",
              (unsigned long long)got, (unsigned long long)n0, (unsigned long long)n1);
}
