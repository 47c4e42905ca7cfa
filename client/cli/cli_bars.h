/*
 * cli_bars — unicode bars (▁▂▃▄▅▆▇█) of step times in the terminal: the
 * Ranks and Steps sections of `tracectl report` and the ranks of `top`.
 *
 * Bars are for people at a terminal: they are on only when stdout is one and
 * --no-bars was not given, so pipes, files and --json are byte for byte what
 * they were. A bar's height is linear from the smallest to the largest figure
 * of the section it is in (the lowest level for the smallest, a full block
 * for the largest; a full block for all when they are equal), so bars of one
 * section compare with each other. Runs on the CLI's only thread; the state
 * below (on/off and the section's scale) is the process's.
 */
#ifndef TRACECTL_CLI_BARS_H
#define TRACECTL_CLI_BARS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define CLI_BARS_WIDTH 24 /* glyphs in a bar of many figures (a rank's steps, a step's ranks) */

/* Sets the bars on or off: on means no --no-bars, no --json and stdout a terminal. */
void cli_bars_set(bool no_bars, bool json);

bool cli_bars_on(void);

/*
 * Writes into buf the bar of v[0..n): one glyph per figure, or when n is
 * above width, one per group of consecutive figures (their largest), scaled
 * from lo to hi. buf gets at most 3 * width + 1 bytes (cut to size). Returns
 * the glyphs written.
 */
size_t cli_bars_line(char *buf, size_t size, const uint64_t *v, size_t n, uint64_t lo, uint64_t hi,
                     size_t width);

/*
 * The report's scale: the smallest and largest step time of steps (the
 * report's "steps" array, each row's "times_ns" [[rank, ns], ...]), kept,
 * with steps (borrowed until the next call), for the two cells below.
 */
void cli_bars_report(const msgpack_object *steps);

/* A Ranks row's cell: the rank's step times, step by step (cli_view custom column). */
void cli_bars_rank_cell(const msgpack_object *row, char *buf, size_t size);

/* A Steps row's cell: the step's time on each rank, rank by rank. */
void cli_bars_step_cell(const msgpack_object *row, char *buf, size_t size);

#endif
