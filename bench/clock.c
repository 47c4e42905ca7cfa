/*
 * clock.c — tc_bench_clock: how far libtracectl's TSC timestamps, once
 * converted, are from clock_gettime(CLOCK_MONOTONIC) over a long run (issue 16).
 *
 *   tc_bench_clock [--seconds S (600)] [--interval MS (5)]
 *
 * It runs the writer thread's conversion (client/lib/tcclock.h) as the
 * writer does: an anchor every interval (the library's default flush
 * interval), taken only when tight (its rdtsc pair within 2 µs), as drain()
 * does. Between anchors it takes "records" whose true time is known: a
 * (tsc, CLOCK_MONOTONIC) pair read the way an anchor is, but never given to
 * the conversion, each at a random point of the interval. Then:
 *   interp   a record converted after the next anchor (what the writer does
 *            with what it drains: the record lies between two anchors);
 *   extrap   a record converted before the next anchor (one recorded between
 *            the writer's anchor and its read of the ring's head);
 *   fixed    the same records through a conversion anchored once, after the
 *            first second, and never again: the drift re-anchoring removes;
 *   bracket  a bare rdtsc between two bare clock_gettime calls (n0, tsc, n1),
 *            converted after the next anchor: how far it lands below n0 or
 *            above n1 (0 when inside). The records above are read the way
 *            anchors are, so a constant bias of the anchors (where inside
 *            clock_gettime the kernel reads the TSC) cancels out of their
 *            errors; this one shows it.
 * Each error is converted − clock_gettime, in ns. Output: a JSON line per
 * minute (worst |error| of each kind, the records' median |error|, the rate)
 * and a summary; a human summary on stderr.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tcclock.h"

#define TIGHT_NS    2000 /* the writer's bound on an anchor's rdtsc pair */
#define MAX_PER_MIN 65536

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t iabs(int64_t v)
{
    return v < 0 ? -v : v;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"seconds", required_argument, NULL, 's'},
                                       {"interval", required_argument, NULL, 'i'},
                                       {NULL, 0, NULL, 0}};
    static int64_t interp[MAX_PER_MIN];
    uint64_t seconds = 600, interval_ms = 5, seed = 12345;
    struct tcclock k, fixed;
    double rate;
    const char *why;
    int ch;

    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (ch == 's')
            seconds = strtoull(optarg, NULL, 10);
        else if (ch == 'i')
            interval_ms = strtoull(optarg, NULL, 10);
        else
            return 2;
    }
    if (!tcclock_usable(&rate, &why)) {
        printf("{\"bench\":\"clock\",\"usable\":false,\"why\":\"%s\"}\n", why);
        fprintf(stderr, "clock: the TSC is not usable here: %s\n", why);
        return 0;
    }
    uint64_t width;
    struct tcclock_anchor a0 = tcclock_read_anchor(&width);
    tcclock_init(&k, a0, rate);
    fixed = k;
    bool have_fixed = false;
    uint64_t start = a0.ns, interval = interval_ms * 1000000u, minute = 0, n = 0, skipped = 0;
    int64_t w_interp = 0, w_extrap = 0, w_fixed = 0, t_interp = 0, t_extrap = 0, t_fixed = 0;
    int64_t last_fixed = 0, below = 0, above = 0, t_below = 0, t_above = 0;
    uint64_t total = 0, outside = 0, t_outside = 0;

    for (;;) {
        /* a record at a random point of the interval, converted after the next anchor */
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t at = (seed >> 33) % interval;
        sleep_ns(at);
        struct tcclock_anchor rec = tcclock_read_anchor(&width);
        bool rec_ok = (double)width * k.rate < 200;
        uint64_t b0 = mono_ns(), bt = tcclock_tsc(), b1 = mono_ns();
        sleep_ns(interval - at);
        struct tcclock_anchor a = tcclock_read_anchor(&width);
        if ((double)width * k.rate <= TIGHT_NS)
            tcclock_anchor(&k, a);
        else
            skipped++;
        if (!have_fixed && a.ns - start >= 1000000000u) {
            fixed = k;
            have_fixed = true;
        }
        if (b1 - b0 < 200) {
            uint64_t conv = tcclock_ns(&k, bt);
            int64_t low = conv < b0 ? (int64_t)(b0 - conv) : 0;
            int64_t hi = conv > b1 ? (int64_t)(conv - b1) : 0;
            below = low > below ? low : below;
            above = hi > above ? hi : above;
            outside += low > 0 || hi > 0;
        }
        if (rec_ok && rec.tsc != 0) {
            int64_t e = (int64_t)(tcclock_ns(&k, rec.tsc) - rec.ns);
            if (n < MAX_PER_MIN)
                interp[n] = iabs(e);
            n++;
            w_interp = iabs(e) > w_interp ? iabs(e) : w_interp;
            if (have_fixed) {
                last_fixed = (int64_t)(tcclock_ns(&fixed, rec.tsc) - rec.ns);
                w_fixed = iabs(last_fixed) > w_fixed ? iabs(last_fixed) : w_fixed;
            }
        }
        /* a record just after the anchor, converted before the next one */
        struct tcclock_anchor r2 = tcclock_read_anchor(&width);
        if ((double)width * k.rate < 200) {
            int64_t e = iabs((int64_t)(tcclock_ns(&k, r2.tsc) - r2.ns));
            w_extrap = e > w_extrap ? e : w_extrap;
        }
        if (a.ns - start >= (minute + 1) * 60000000000ull ||
            a.ns - start >= seconds * 1000000000u) {
            size_t m = n < MAX_PER_MIN ? n : MAX_PER_MIN;
            qsort(interp, m, sizeof(interp[0]), cmp_i64);
            printf("{\"bench\":\"clock\",\"minute\":%llu,\"records\":%llu,\"interp_max_ns\":%lld,"
                   "\"interp_median_ns\":%lld,\"interp_p99_ns\":%lld,\"extrap_max_ns\":%lld,"
                   "\"fixed_max_ns\":%lld,\"fixed_last_ns\":%lld,\"rate_ns_per_tick\":%.12f,"
                   "\"anchors_skipped\":%llu,\"bracket_below_max_ns\":%lld,"
                   "\"bracket_above_max_ns\":%lld,\"bracket_outside\":%llu}\n",
                   (unsigned long long)minute + 1, (unsigned long long)n, (long long)w_interp,
                   (long long)(m ? interp[m / 2] : 0), (long long)(m ? interp[m * 99 / 100] : 0),
                   (long long)w_extrap, (long long)w_fixed, (long long)last_fixed, k.rate,
                   (unsigned long long)skipped, (long long)below, (long long)above,
                   (unsigned long long)outside);
            fflush(stdout);
            t_interp = w_interp > t_interp ? w_interp : t_interp;
            t_extrap = w_extrap > t_extrap ? w_extrap : t_extrap;
            t_fixed = w_fixed > t_fixed ? w_fixed : t_fixed;
            t_below = below > t_below ? below : t_below;
            t_above = above > t_above ? above : t_above;
            t_outside += outside;
            total += n;
            n = 0, w_interp = w_extrap = w_fixed = 0, skipped = 0;
            below = above = 0, outside = 0;
            if (a.ns - start >= seconds * 1000000000u)
                break;
            minute++;
        }
    }
    printf("{\"bench\":\"clock\",\"summary\":true,\"seconds\":%llu,\"interval_ms\":%llu,"
           "\"records\":%llu,\"interp_max_ns\":%lld,\"extrap_max_ns\":%lld,\"fixed_max_ns\":%lld,"
           "\"fixed_last_ns\":%lld,\"bracket_below_max_ns\":%lld,\"bracket_above_max_ns\":%lld,"
           "\"bracket_outside\":%llu}\n",
           (unsigned long long)seconds, (unsigned long long)interval_ms, (unsigned long long)total,
           (long long)t_interp, (long long)t_extrap, (long long)t_fixed, (long long)last_fixed,
           (long long)t_below, (long long)t_above, (unsigned long long)t_outside);
    fprintf(stderr,
            "clock: %llu s, anchors every %llu ms: worst |converted - clock_gettime| %lld ns "
            "(between anchors), %lld ns (after the last); anchored once: %lld ns at the end "
            "(worst %lld); a bare rdtsc between two clock_gettime calls lands up to %lld ns "
            "below the first, %lld ns above the second (%llu times outside)\n",
            (unsigned long long)seconds, (unsigned long long)interval_ms, (long long)t_interp,
            (long long)t_extrap, (long long)last_fixed, (long long)t_fixed, (long long)t_below,
            (long long)t_above, (unsigned long long)t_outside);
    return 0;
}
