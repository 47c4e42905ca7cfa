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
 */
#ifndef TRACECTL_CLI_EXPORT_COLLAPSED_H
#define TRACECTL_CLI_EXPORT_COLLAPSED_H

#include <stdint.h>

#include "cli_export.h"

extern const struct cli_export_format cli_export_collapsed;

/* One entry's time weight: max(1, round(dur_ns / 1000)), halves away from zero. */
uint64_t cli_export_collapsed_time(uint64_t dur_ns);

#endif
