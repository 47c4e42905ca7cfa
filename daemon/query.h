/*
 * query — the query engine: computes a struct report (report.h) from one
 * session file, with the SQL of schema/report_*.sql and the C
 * post-processing of analysis.c.
 *
 * query_report() runs on a libuv worker thread (control.c queues it), never
 * on the loop thread, while the storage writer may be appending to the same
 * file: it opens its own read-only connection and reads every section
 * inside one read transaction (one WAL snapshot). Errors are 0 / negative
 * errno, SQLite codes mapped by store_errno() (store.h); the message goes
 * into the caller's buffer, not the log: the caller reports it once.
 */
#ifndef TRACECTLD_QUERY_H
#define TRACECTLD_QUERY_H

#include <stddef.h>

#include "report.h"

/*
 * Computes the report of the session file at db_path (opened read-only; WAL
 * lets it read while the writer thread appends). Fills everything but id,
 * name and state, which the caller owns in its registry and sets after.
 * p may be NULL (the defaults of PROTOCOL.md). Returns 0, or a negative
 * errno with a message in errbuf. On error *out is left empty (report_free
 * is still safe).
 */
int query_report(const char *db_path, const struct report_params *p, struct report *out,
                 char *errbuf, size_t errlen);

#endif
