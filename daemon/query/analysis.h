/*
 * analysis — the C post-processing of a report: percentiles, op
 * classification, load imbalance, shares and the op order (PROTOCOL.md
 * "Report map" and "Analysis rules"; the weight of collapsed stacks is the
 * CLI's, in client/cli/cli_export_collapsed.c).
 *
 * Pure functions over plain values: no SQLite, no libuv, no allocation and
 * no globals, so any thread may call them (query.c calls them on a query
 * worker, session.c calls analysis_classify() on the loop thread) and the unit tests
 * call them directly.
 */
#ifndef TRACECTLD_ANALYSIS_H
#define TRACECTLD_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "report.h"

/*
 * The 1-based nearest rank of percentile p among n ascending values:
 * ceil(p * n / 100), at least 1 and at most n (p above 100 counts as 100).
 * Integer arithmetic only, exact for every n (no overflow). Returns 0 when
 * n is 0.
 */
size_t analysis_percentile_rank(size_t n, unsigned p);

/*
 * The nearest-rank percentile p of the n values of sorted (ascending): the
 * value at analysis_percentile_rank(n, p). Returns 0 when n is 0 (sorted may
 * then be NULL).
 */
uint64_t analysis_percentile(const uint64_t *sorted, size_t n, unsigned p);

/*
 * The category of an op that its producer gave none: "comm" when the name,
 * ASCII lower-cased, contains a communication keyword of PROTOCOL.md or
 * starts with "mpi_"; else "memory" when it contains "memcpy" or "memset";
 * else "compute". Matching is by substring, as PROTOCOL.md says, so names
 * such as "sendfile" or "recv_buffer_fill" are "comm" too. Returns a static
 * string; a NULL name is "compute".
 */
const char *analysis_classify(const char *name);

/* True when a stored category means communication: exactly "comm". */
bool analysis_is_comm(const char *category);

/* part / whole as a double, 0 when whole is 0. */
double analysis_share(uint64_t part, uint64_t whole);

/*
 * Load imbalance over the n per-device rows (PROTOCOL.md "imbalance").
 * With fewer than two rows *out is zeroed (present = false, the null of the
 * report). Else: devices = n, total_ns = the sum, ideal_ns = total / n
 * (floor), max_ns, ratio = max(0, (max - ideal) / ideal) with the exact
 * ideal (double)total / n, 0 when total is 0; slowest_device = the device of
 * the largest total_ns, ties to the smallest name (byte order).
 * out->slowest_device borrows rows[i].device: the caller copies it when out
 * must outlive rows.
 */
void analysis_imbalance(const struct report_device *rows, size_t n, struct report_imbalance *out);

/*
 * Sorts ops in report order: total_ns descending, ties by op name ascending
 * in byte order (strcmp, like SQLite's BINARY collation).
 */
void analysis_sort_ops(struct report_op *ops, size_t n);

#endif
