/*
 * cli_report_by — `tracectl report <id|name> --by launcher|module`.
 *
 * --by launcher: the time of a
 * session's entries grouped by the CPU op that launched them (the
 * `launcher` link of an entry's ext map, proto/PROTOCOL.md "Links between
 * entries", which `tracectl import` gives every kernel of a Kineto trace
 * whose launching CPU op it found), and by (launcher, kernel) pair.
 *
 * The daemon keeps no aggregate by launcher, so this reads the entries
 * through the export stream and adds them up as they pass (cli_export_each):
 * memory follows the number of distinct (launcher, op) pairs, never the
 * number of entries; time follows the number of entries (as an export
 * does). The result is one map, printed as JSON (--json) or as two tables:
 *
 *   {"session": {"id", "name"}, "by": "launcher", "total_ns",
 *    "launchers": [{"launcher", "kernels", "calls", "total_ns", "share"}],
 *    "pairs": [{"launcher", "op", "calls", "total_ns", "share"}]}
 *
 * `launcher` nil groups the entries without one; `share` is of the
 * session's total_ns (every entry's duration, saturating); rows by
 * total_ns descending, then by name. The table lists the first `top` pairs;
 * --json all of them.
 *
 * --by module: the time of the entries grouped by the region they are
 * nested in (the `id`/`parent` links, PROTOCOL.md "Links between entries"):
 * for the torch bridge's profiler mode the nn.Module forward or backward
 * around each operator, for the Python package and tc_push/tc_pop the
 * enclosing `with` block or region. An entry with an `id` is a region: its
 * own duration is not counted, the entries in it are. Every other entry
 * counts once: in its parent region's `self_ns` (none: the row with module
 * nil), and in the `total_ns` of each distinct region name on the chain of
 * parents above it. `calls` counts a module's regions, `entries` the
 * entries directly in it; `share` is self_ns of the session's total_ns (the
 * entries that are not regions), so the shares add up to 1. Regions are
 * kept until the end (a parent is sent after its children) and the other
 * entries summed per (process, op, parent): memory follows the number of
 * regions, not of entries. The map:
 *
 *   {"session": {"id", "name"}, "by": "module", "total_ns",
 *    "modules": [{"module", "calls", "entries", "self_ns", "total_ns", "share"}],
 *    "pairs": [{"module", "op", "calls", "total_ns", "share"}]}
 *
 * rows by self time (pairs: time) descending, then by name; the tables list
 * the first `top` rows of each, --json all of them.
 *
 * Filters: the report's --rank, --step, --device and --category
 * (PROTOCOL.md Part 3, "report filters", with the same semantics) select
 * the entries counted, as the stream passes: a process's rank, the entry's
 * step, its device (its own, else its process's), its op's category mapped
 * to compute, comm, memory, wait or other. By module, a region is one of
 * its module's calls when it matches; the nesting is not filtered (an entry
 * that matches is in the region around it whether that region matches or
 * not). total_ns and the shares are of the matching entries. With a filter
 * the map ends with the report's "filter" key (the category as applied).
 * Runs on the CLI's only thread.
 */
#ifndef TRACECTL_CLI_REPORT_BY_H
#define TRACECTL_CLI_REPORT_BY_H

#include <stdint.h>

#include "cli.h"

/*
 * Prints the grouping of session (an id or name, as typed), counting only
 * the entries that match the report filters in f (its ranks, steps, device
 * and category; none given: every entry). Returns an exit code.
 */
int cli_report_by_launcher(struct cli_ctx *ctx, char *session, uint32_t top,
                           const struct proto_analysis *f);
int cli_report_by_module(struct cli_ctx *ctx, char *session, uint32_t top,
                         const struct proto_analysis *f);

#endif
