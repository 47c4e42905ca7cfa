/*
 * cli_fmt — human units (see cli_fmt.h).
 */
#include "cli_fmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

/* v (≥ 0, < 1000 after the caller's scaling) with three significant digits and a unit. */
static void cli_fmt_sig3(char *buf, size_t size, double v, const char *unit)
{
    if (v < 9.995)
        snprintf(buf, size, "%.2f %s", v, unit);
    else if (v < 99.95)
        snprintf(buf, size, "%.1f %s", v, unit);
    else
        snprintf(buf, size, "%.0f %s", v, unit);
}

/* From one minute up: the two largest of days, hours, minutes, seconds. */
static void cli_fmt_long_duration(char *buf, size_t size, uint64_t ns)
{
    uint64_t s = (ns + 500000000u) / 1000000000u;
    uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

    if (d > 0)
        snprintf(buf, size, "%" PRIu64 "d %02" PRIu64 "h", d, h);
    else if (h > 0)
        snprintf(buf, size, "%" PRIu64 "h %02" PRIu64 "m", h, m);
    else
        snprintf(buf, size, "%" PRIu64 "m %02" PRIu64 "s", m, s % 60);
}

void cli_fmt_duration(char *buf, size_t size, uint64_t ns)
{
    /* Thresholds sit at 999.5 of a unit so that rounding never prints "1000 µs". */
    if (ns < 1000)
        snprintf(buf, size, "%" PRIu64 " ns", ns);
    else if (ns < 999500)
        cli_fmt_sig3(buf, size, (double)ns / 1e3, "µs");
    else if (ns < 999500000)
        cli_fmt_sig3(buf, size, (double)ns / 1e6, "ms");
    else if (ns < 59950000000ull)
        cli_fmt_sig3(buf, size, (double)ns / 1e9, "s");
    else
        cli_fmt_long_duration(buf, size, ns);
}

void cli_fmt_bytes(char *buf, size_t size, uint64_t bytes)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    size_t u = 0;

    if (bytes < 1024) {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
        return;
    }
    v /= 1024;
    while (v >= 1023.5 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }
    cli_fmt_sig3(buf, size, v, units[u]);
}

void cli_fmt_share(char *buf, size_t size, double ratio)
{
    snprintf(buf, size, "%.1f%%", ratio * 100.0);
}

void cli_fmt_time(char *buf, size_t size, uint64_t wall_ns)
{
    time_t t = (time_t)(wall_ns / 1000000000u);
    struct tm tm;

    if (localtime_r(&t, &tm) == NULL || strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, size, "%" PRIu64, wall_ns);
}
