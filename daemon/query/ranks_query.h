/*
 * ranks_query — the report's analysis sections (PROTOCOL.md Part 3, "report
 * analysis"): verdict, completeness, ranks, steps, collectives, categories and
 * throughput, computed from the rank aggregates of ranks.h (from the entries
 * only for the throughput restricted to steps: those steps' entries) on the
 * report's worker thread, inside the report's read transaction, and encoded
 * straight into msgpack; and the late figures alone (report option "late",
 * for `tracectl top`), from two of those tables.
 */
#ifndef TRACECTLD_RANKS_QUERY_H
#define TRACECTLD_RANKS_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <sqlite3.h>

#define RANKS_QUERY_KEYS 7 /* key/value pairs ranks_query() writes */

struct ranks_filter {
    const int64_t *ranks; /* NULL: every rank */
    size_t n_ranks;
    bool steps; /* restrict to step_min..step_max */
    uint64_t step_min, step_max;
    const char *device;   /* NULL: every device */
    const char *category; /* NULL: every category */
    uint32_t top;
};

/*
 * Packs RANKS_QUERY_KEYS key/value pairs (no map header) into pk from the
 * session file db (a read transaction open). 0, or a negative errno with a
 * message in err.
 */
int ranks_query(sqlite3 *db, const struct ranks_filter *f, msgpack_packer *pk, char *err,
                size_t errlen);

/*
 * Packs the late-arrival figures (PROTOCOL.md Part 3, "report option late")
 * as one map, {"instances": N, "culprit": rank or nil, "ranks": [{rank,
 * arrived_last, caused_ns, waited_ns}, ...]}: the same numbers as
 * ranks_query()'s verdict and `ranks` rows under the same filter, and the
 * rank the verdict would name (verdict_culprit), read from rk_steps (folded
 * step by step as the report folds them) and rk_coll only (no rk_coll_ranks,
 * rk_ops or entries). 0, or a negative errno with a message in err.
 */
int ranks_late(sqlite3 *db, const struct ranks_filter *f, msgpack_packer *pk, char *err,
               size_t errlen);

#endif
