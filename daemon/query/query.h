/*
 * query — the query engine: computes a struct report (report.h) from one
 * session file, with the SQL of schema/report_*.sql and the C
 * post-processing of analysis.c.
 *
 * query_report() runs on a libuv worker thread (control.c queues it), never
 * on the loop thread, while the storage writer may be appending to the same
 * file: it opens its own read-only connection and reads every section
 * inside one read transaction (one WAL snapshot). Errors are 0 / negative
 * errno, SQLite codes mapped by sql_errno() (store.h); the message goes
 * into the caller's buffer, not the log: the caller reports it once.
 */
#ifndef TRACECTLD_QUERY_H
#define TRACECTLD_QUERY_H

#include <stddef.h>

#include <msgpack.h>

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

/*
 * Extension (PROTOCOL.md Part 3, "report option late"): packs the late
 * figures of the session file at db_path, restricted by an's filters, as
 * one map into pk, read in one read transaction from the rank aggregates
 * (ranks_late() in ranks_query.h), on a worker thread like query_report().
 * Returns 0, or a negative errno with a message in errbuf (pk may then hold
 * part of the map: the caller drops it).
 */
int query_late(const char *db_path, const struct proto_analysis *an, msgpack_packer *pk,
               char *errbuf, size_t errlen);

#endif
