/*
 * tcclock.h — libtracectl's recording clock: raw TSC ticks, converted to
 * CLOCK_MONOTONIC nanoseconds off the hot path.
 *
 * On x86-64 with an invariant TSC, tc_begin() and tc_end() store the TSC as
 * read by rdtsc (a few ns) instead of calling clock_gettime (~25 ns on a VM).
 * The client's writer thread converts ticks to CLOCK_MONOTONIC ns before it
 * sends them, with a conversion that it re-anchors on every drain:
 *
 *   - an anchor is a (tsc, ns) pair read together (tcclock_read_anchor:
 *     the tightest of a few rdtsc / clock_gettime / rdtsc reads);
 *   - ticks between the last two anchors are interpolated between them, so
 *     what the writer converts after an anchor is exact to within the two
 *     anchors' own error (tens of ns), whatever the rate did in between;
 *   - ticks outside them (older than the previous anchor, or newer than the
 *     last) are extrapolated from the nearest anchor at the rate measured
 *     over the last 1–2 s (so an NTP slew of CLOCK_MONOTONIC is followed);
 *   - a window whose own rate differs from that by more than 1 % (the TSC's
 *     rate changed, e.g. a migration to a host of another frequency) restarts
 *     the rate measurement from that window.
 * The conversion is monotonic (continuous and piecewise linear with positive
 * slopes) and works across a wrap of the 64-bit counter.
 *
 * The conversion (struct tcclock) is plain arithmetic, with no clock reads, so
 * that tests drive it with made-up anchors. The rest reads the machine.
 */
#ifndef TCCLOCK_H
#define TCCLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCCLOCK_WINDOW_MIN_NS 1000000ull    /* anchors closer than 1 ms are ignored */
#define TCCLOCK_RATE_SPAN_NS  1000000000ull /* the rate is measured over 1–2 s */
#define TCCLOCK_RATE_JUMP     0.01          /* a window off the rate by 1 %: a new rate */

struct tcclock_anchor {
    uint64_t tsc, ns;
};

struct tcclock {
    struct tcclock_anchor prev, cur; /* the last two anchors */
    struct tcclock_anchor base;      /* the rate is (cur - base); base is 1–2 s old */
    struct tcclock_anchor next_base; /* base's successor, taken ≥ 1 s after it */
    double rate;                     /* ns per tick */
};

/* Starts a conversion at anchor a with a first rate (ns per tick, > 0). */
void tcclock_init(struct tcclock *k, struct tcclock_anchor a, double rate);

/*
 * Re-anchors at a, a later reading. Returns false when a is ignored: less
 * than TCCLOCK_WINDOW_MIN_NS after the last anchor, or not after it in ticks
 * and ns both.
 */
bool tcclock_anchor(struct tcclock *k, struct tcclock_anchor a);

/* tsc as CLOCK_MONOTONIC ns (0 for ticks so far before the anchors that they map below 0). */
uint64_t tcclock_ns(const struct tcclock *k, uint64_t tsc);

/* ---- the machine --------------------------------------------------------- */

/* The TSC (0 where there is none: not x86-64). */
static inline uint64_t tcclock_tsc(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
}

/*
 * An anchor read now: the tightest of a few (rdtsc, clock_gettime, rdtsc)
 * reads, its tsc the middle of the two. *width (may be NULL) gets the ticks
 * between those two: the anchor's uncertainty (large when preempted).
 */
struct tcclock_anchor tcclock_read_anchor(uint64_t *width);

/*
 * Whether the TSC may be the recording clock, decided once per process:
 * x86-64, constant_tsc and nonstop_tsc in /proc/cpuinfo, and either the
 * kernel's clocksource is tsc, or a calibration check passes (the rate over
 * two successive windows of ~0.5 ms agrees within 0.1 %, and the TSC moved
 * forward). *rate gets the rate it measured (ns per tick), *why (may be
 * NULL) a short reason when it says no.
 */
bool tcclock_usable(double *rate, const char **why);

#endif
