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
 * One row of the report's `ranks` section (PROTOCOL.md Part 3, "report
 * analysis"): what ranks_query() packs per rank, and what a member daemon sends
 * its home in a snapshot (daemon/peer/peersnap.h) so that the home lists every
 * host's ranks. Durations and counts only: nothing in it is a time of a clock.
 */
struct ranks_row {
    int64_t rank; /* -1: nil (processes without a rank) */
    uint64_t processes, dropped, steps, step_ns, step_mean_ns, total_ns;
    uint64_t compute_ns, comm_ns, memory_ns, wait_ns, other_ns, exposed_comm_ns;
    uint64_t collectives, waited_ns, arrived_last, caused_ns, slowest_steps, late_steps;
    uint64_t late_first_step, late_last_step; /* nil when late_steps is 0 */
    uint64_t untracked_ns;
    bool untracked_known; /* false: untracked_ns is nil (a device or category filter) */
    uint64_t cpu_wait_ns;
    double comm_share;
};

#define RANKS_ROW_KEYS 24 /* keys of ranks_row_pack's map, host aside */

/*
 * Packs r as one map of the `ranks` section, with a first key "host" when host
 * is not NULL (a home's report of a session that spans hosts). Nonzero when the
 * packer's buffer could not grow.
 */
int ranks_row_pack(msgpack_packer *pk, const struct ranks_row *r, const char *host);

/*
 * The `ranks` rows of the session file db (a read transaction open), unfiltered,
 * exactly as ranks_query() without a filter packs them, sorted by rank, into
 * *rows (caller frees; NULL when none). 0, or a negative errno with a message in
 * err.
 */
int ranks_rows(sqlite3 *db, struct ranks_row **rows, size_t *n_rows, char *err, size_t errlen);

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
