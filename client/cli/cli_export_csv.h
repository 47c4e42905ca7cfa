/*
 * cli_export_csv — the `csv` export format: a header line, then one record
 * per entry (rank, pid, host, step, op, category, device, start_ns, dur_ns,
 * elements, mem_bytes, out_shape, in_shapes), RFC 4180: CRLF line ends, a
 * field quoted when it holds a comma, a double quote, CR or LF, with its
 * double quotes doubled. Unknown values (no rank, no device, no shape) are
 * empty fields. Written as rows arrive; keeps no state.
 */
#ifndef TRACECTL_CLI_EXPORT_CSV_H
#define TRACECTL_CLI_EXPORT_CSV_H

#include "cli_export.h"

extern const struct cli_export_format cli_export_csv;

#endif
