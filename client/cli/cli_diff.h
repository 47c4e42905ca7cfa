/*
 * cli_diff — `tracectl diff <A> <B>`: two sessions side by side, from their
 * report maps (PROTOCOL.md "Report map"), and with --divergence, the first
 * place where their op sequences or output checksums part (cli_diverge).
 *
 * The two reports are asked for on two connections, both held open while
 * the diff is made (their results are borrowed from the connections'
 * readers). Rows are matched by key — op name, category (summed over the
 * ops rows), device — and the result is built as one msgpack map, the same
 * map --json prints and the tables read, so the two outputs cannot
 * disagree. Memory follows the number of ops and devices, never entries.
 *
 * A row regressed when its total time grew by at least --min-time and by
 * more than --threshold percent of A's (a row absent from A, or at 0 ns in
 * it, only needs the --min-time); the session's total counts like a row.
 * The command exits with CLI_EXIT_DIFFERS when any row regressed (or, with
 * --divergence, when the sessions diverge), so that CI can gate on it.
 * Runs on the CLI's only thread; see cli.h for the command conventions.
 */
#ifndef TRACECTL_CLI_DIFF_H
#define TRACECTL_CLI_DIFF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <msgpack.h>

#include "cli.h"

extern const char cli_diff_usage[];

int cli_diff_run(struct cli_ctx *ctx, int argc, char **argv);

struct cli_diff_opts {
    double threshold;     /* percent: --threshold */
    uint64_t min_time_ns; /* --min-time */
    size_t top;           /* rows per table, 0: every row: --top */
    bool divergence;      /* --divergence */
};

/*
 * The diff of report maps rep[0] (A) and rep[1] (B), packed into sb as one
 * map: a, b, threshold_pct, min_time_ns, regressions, regressed,
 * verdict_a, verdict_b, total, then ops, categories, devices, and ranks and
 * steps when either report has them (README "Comparing two runs"). Sets
 * *regressed to the number of regressed rows. Returns 0 or -ENOMEM.
 */
int cli_diff_compare(const msgpack_object *rep[2], const struct cli_diff_opts *o,
                     msgpack_sbuffer *sb, size_t *regressed);

/* Prints a diff map for humans on f. Returns 0, -ENOMEM or -EIO. */
int cli_diff_print(FILE *f, const msgpack_object *diff, const struct cli_diff_opts *o);

/*
 * Prints text and a newline on f with control characters and invalid UTF-8
 * made harmless (as cli_table does for cells): for lines that hold names
 * off the wire. Returns 0, -ENOMEM or -EIO.
 */
int cli_diff_print_line(FILE *f, const char *text);

#endif
