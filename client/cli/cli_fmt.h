/*
 * cli_fmt — human units for the tracectl CLI: durations, byte sizes,
 * shares and wall-clock times (a SIZE given on the command line is parsed
 * by util/bytesize.h).
 *
 * Pure functions over numbers and caller-owned buffers; no state. A buffer
 * of CLI_FMT_LEN bytes always holds any result (longer ones are cut).
 */
#ifndef TRACECTL_CLI_FMT_H
#define TRACECTL_CLI_FMT_H

#include <stddef.h>
#include <stdint.h>

#define CLI_FMT_LEN 64

/*
 * A duration in nanoseconds with about three significant digits:
 * "812 ns", "12.3 µs", "4.56 ms", "1.23 s", then "12m 03s", "3h 04m",
 * "2d 03h" from one minute up.
 */
void cli_fmt_duration(char *buf, size_t size, uint64_t ns);

/* Bytes in binary units: "512 B", "1.50 KiB", "12.3 MiB", "4.00 GiB", "1.20 TiB". */
void cli_fmt_bytes(char *buf, size_t size, uint64_t bytes);

/* A ratio in [0, 1] as a percentage with one decimal: 0.1234 → "12.3%". */
void cli_fmt_share(char *buf, size_t size, double ratio);

/* CLOCK_REALTIME nanoseconds as local time "YYYY-MM-DD HH:MM:SS". */
void cli_fmt_time(char *buf, size_t size, uint64_t wall_ns);

#endif
