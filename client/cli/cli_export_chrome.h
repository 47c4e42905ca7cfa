/*
 * cli_export_chrome — the `chrome` export format: Chrome trace-event JSON
 * (the "JSON Object Format" read by chrome://tracing and Perfetto UI):
 *
 *   {"traceEvents":[ ...events, one per line... ],"displayTimeUnit":"ns"}
 *
 * Events: for every process a "process_name" metadata event ("M", the
 * process label of cli_export_dict) and a "process_sort_index" (so ranks sort
 * numerically), written first; then one complete event ("X") per entry, by
 * start time (the format asks for "order": "start"), with pid = the
 * process's view pid (its rank), tid = its lane (cli_export_lanes: one per
 * (process, device, stream) track, more where entries overlap partially;
 * numbered 1, 2, ... as they first appear), name = op, cat = category, ts
 * and dur in µs written as decimals with nanosecond precision (1234.567,
 * from integers: no rounding), and args {step, elements, mem_bytes,
 * out_shape, in_shapes}. The "thread_name" metadata event of a lane (e.g.
 * "gpu:0", "gpu:0 stream 7", "gpu:0 #2", "no device") is written just before
 * its first X event: the format allows metadata anywhere, and this way no
 * pass over the entries is needed first.
 *
 * Strings go through cli_json_write_str(), so any op, device or host name
 * comes out as valid JSON. Memory: the lanes and the slices open at once.
 */
#ifndef TRACECTL_CLI_EXPORT_CHROME_H
#define TRACECTL_CLI_EXPORT_CHROME_H

#include "cli_export.h"

extern const struct cli_export_format cli_export_chrome;

#endif
