/*
 * cli_export_collapsed — the `collapsed` export format: flame-graph
 * collapsed stacks, exactly as proto/PROTOCOL.md "Analysis rules" says:
 * one line per distinct stack "<session name>;<device>;<op> <weight>", the
 * device `unknown` for an entry without one, lines sorted by stack in byte
 * order (strcmp). The weight (--weight) is `time`, the sum of
 * max(1, round(dur_ns / 1000)) with halves away from zero, computed in
 * integers; `memory`, the sum of mem_bytes; or `calls`, the count. Sums
 * saturate at UINT64_MAX.
 *
 * Rows are aggregated as they arrive in a map keyed by (device, op), so
 * memory follows the number of distinct stacks; the lines are written at the
 * end. Two keys can make the same stack (an entry without a device and a
 * device literally named "unknown"): their lines are merged.
 *
 * Nested regions (entries with an `id` or a `parent`, proto/PROTOCOL.md
 * "Links between entries") give deeper stacks: "<session>;<device>;<outer
 * op>;...;<op>", the ancestors found by parent id within the entry's
 * process, outermost first (a parent its process never sent ends the chain).
 * Such an entry weighs its self time: its duration less the durations of
 * the entries whose parent it is (at least 0), so that a flame graph, which
 * adds children into their parent's frame, counts each nanosecond once.
 * These entries are kept until the end (about 48 bytes each), since a
 * parent is stored after its children.
 *
 * --stacks launcher: "<session>;rank <R>;<launching CPU op>;<op>" for an
 * entry with a launcher (a kernel imported from a Kineto trace), else
 * "<session>;rank <R>;<op>" ("process <N>" for a process without a rank).
 */
#ifndef TRACECTL_CLI_EXPORT_COLLAPSED_H
#define TRACECTL_CLI_EXPORT_COLLAPSED_H

#include <stdint.h>

#include "cli_export.h"

extern const struct cli_export_format cli_export_collapsed;

/* One entry's time weight: max(1, round(dur_ns / 1000)), halves away from zero. */
uint64_t cli_export_collapsed_time(uint64_t dur_ns);

#endif
