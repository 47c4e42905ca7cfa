/*
 * tcclock.c — TSC ticks to CLOCK_MONOTONIC nanoseconds; see tcclock.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tcclock.h"

void tcclock_init(struct tcclock *k, struct tcclock_anchor a, double rate)
{
    k->prev = k->cur = k->base = k->next_base = a;
    k->rate = rate;
}

static double absd(double x)
{
    return x < 0 ? -x : x;
}

static double slope(struct tcclock_anchor a, struct tcclock_anchor b)
{
    return (double)(b.ns - a.ns) / (double)(b.tsc - a.tsc);
}

bool tcclock_anchor(struct tcclock *k, struct tcclock_anchor a)
{
    double w;

    /* Ticks compared as a signed difference: the counter may wrap between anchors. */
    if (a.ns < k->cur.ns + TCCLOCK_WINDOW_MIN_NS || (int64_t)(a.tsc - k->cur.tsc) <= 0)
        return false;
    k->prev = k->cur;
    k->cur = a;
    w = slope(k->prev, a);
    if (absd(w / k->rate - 1) > TCCLOCK_RATE_JUMP) {
        /* Not the rate we had: measure it again, from this window on. */
        k->base = k->prev;
        k->next_base = a;
        k->rate = w;
        return true;
    }
    if (a.ns - k->next_base.ns >= TCCLOCK_RATE_SPAN_NS) {
        k->base = k->next_base;
        k->next_base = a;
    }
    k->rate = slope(k->base, a);
    return true;
}

/* a.ns + d ticks at rate, within [0, UINT64_MAX]. */
static uint64_t extrapolate(struct tcclock_anchor a, int64_t d, double rate)
{
    double ns = (double)a.ns + (double)d * rate;

    if (ns <= 0)
        return 0;
    if (ns >= 18446744073709551615.0)
        return UINT64_MAX;
    return (uint64_t)(ns + 0.5);
}

uint64_t tcclock_ns(const struct tcclock *k, uint64_t tsc)
{
    int64_t d = (int64_t)(tsc - k->cur.tsc), w = (int64_t)(k->cur.tsc - k->prev.tsc);

    if (d > 0 || w == 0)
        return extrapolate(k->cur, d, k->rate);
    if (d < -w)
        return extrapolate(k->prev, (int64_t)(tsc - k->prev.tsc), k->rate);
    /* Between the last two anchors: interpolated. */
    double f = (double)(tsc - k->prev.tsc) / (double)w;
    return k->prev.ns + (uint64_t)(f * (double)(k->cur.ns - k->prev.ns) + 0.5);
}

/* ---- the machine ----------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct tcclock_anchor tcclock_read_anchor(uint64_t *width)
{
    struct tcclock_anchor a = {0, 0};
    uint64_t best = UINT64_MAX;

    for (int i = 0; i < 4; i++) {
        uint64_t t0 = tcclock_tsc(), ns = mono_ns(), t1 = tcclock_tsc();
        if (t1 - t0 < best) {
            best = t1 - t0;
            a = (struct tcclock_anchor){t0 + (t1 - t0) / 2, ns};
        }
    }
    if (width != NULL)
        *width = best;
    return a;
}

#if defined(__x86_64__)
/* Whether the first "flags" line of /proc/cpuinfo has both words. */
static bool cpu_flags_ok(void)
{
    char line[8192];
    bool constant = false, nonstop = false;
    FILE *f = fopen("/proc/cpuinfo", "r");

    if (f == NULL)
        return false;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (char *save, *w = strtok_r(line, " \t\n", &save); w != NULL;
             w = strtok_r(NULL, " \t\n", &save)) {
            constant |= strcmp(w, "constant_tsc") == 0;
            nonstop |= strcmp(w, "nonstop_tsc") == 0;
        }
        break;
    }
    fclose(f);
    return constant && nonstop;
}

static bool clocksource_is_tsc(void)
{
    char buf[64] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");

    if (f == NULL)
        return false;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
    fclose(f);
    return strcmp(buf, "tsc\n") == 0 || strcmp(buf, "tsc") == 0;
}

/* The rate over two successive windows of ~250 µs; 0 when they disagree by more than 0.1 %. */
static double calibrate(void)
{
    struct timespec pause = {0, 250000};
    struct tcclock_anchor a[3];
    double r1, r2;

    for (int i = 0; i < 3; i++) {
        if (i > 0)
            nanosleep(&pause, NULL);
        a[i] = tcclock_read_anchor(NULL);
    }
    if ((int64_t)(a[1].tsc - a[0].tsc) <= 0 || (int64_t)(a[2].tsc - a[1].tsc) <= 0 ||
        a[1].ns <= a[0].ns || a[2].ns <= a[1].ns)
        return 0;
    r1 = slope(a[0], a[1]);
    r2 = slope(a[1], a[2]);
    return absd(r1 / r2 - 1) <= 0.001 ? slope(a[0], a[2]) : 0;
}

static struct {
    bool usable;
    double rate;
    const char *why;
} tsc_state;

static void tsc_probe(void)
{
    bool source = clocksource_is_tsc();

    if (!cpu_flags_ok()) {
        tsc_state.why = "the TSC is not invariant (no constant_tsc and nonstop_tsc)";
        return;
    }
    /* A noisy machine may fail one check: three tries. */
    for (int i = 0; i < 3 && tsc_state.rate == 0; i++)
        tsc_state.rate = calibrate();
    if (tsc_state.rate == 0) {
        tsc_state.why = source ? "the TSC's rate did not calibrate"
                               : "the clocksource is not tsc and the TSC failed calibration";
        return;
    }
    tsc_state.usable = true;
}

bool tcclock_usable(double *rate, const char **why)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, tsc_probe);
    if (rate != NULL)
        *rate = tsc_state.rate;
    if (why != NULL)
        *why = tsc_state.usable ? "" : tsc_state.why;
    return tsc_state.usable;
}
#else
bool tcclock_usable(double *rate, const char **why)
{
    if (rate != NULL)
        *rate = 0;
    if (why != NULL)
        *why = "no TSC on this architecture";
    return false;
}
#endif
