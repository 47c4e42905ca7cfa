/*
 * peermerge — the home's report of a session that spans hosts: its own part
 * and the latest snapshot of each member (peersnap.h) merged into one
 * struct report, and the `hosts` rows (proto/PROTOCOL.md "report hosts").
 *
 * Runs on the report's worker thread (control.c), after query_report() of
 * the home's own file (or on an empty report when the home has no part):
 * it reads the home's part as a snapshot too, so that every host counts
 * the same way, and replaces the sections that sum across hosts. Merged
 * exactly: calls, sums, min, max, entries, dropped, processes; the
 * percentiles come from the histograms merged bucket by bucket (every
 * daemon uses agg_bucket()'s buckets, so the 1 % promise holds across
 * hosts). Devices are named `host/device`. The slowest and memory-hotspot
 * lists merge every host's own (a member's top PEERSNAP_TOP, without
 * shapes). Every time a member sent (its top lists' start_ns, its begin and
 * end) is converted to the home's clock with the offset in force then
 * (peerclock_to_home, with the copy of its estimator in its part), and
 * span_ns runs from the first begin to the last end of the hosts on that
 * clock; a member not measured yet keeps its own times and counts in the
 * span only through its own length. With the analysis, its `ranks` section
 * lists every host's rows (the members' from their snapshots' rank_rows, each
 * row with its `host`: durations and counts, nothing to convert); the other
 * analysis sections stay the home's own. Pure over its inputs: no libuv, no
 * globals.
 */
#ifndef TRACECTLD_PEERMERGE_H
#define TRACECTLD_PEERMERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agg.h"
#include "peerclock.h"
#include "report.h"

/* One member's part, as the loop thread copied it for the worker (owned). */
struct peermerge_part {
    char *host;
    const char *state;         /* static: "live", "stale", "lost" or "ended" */
    uint64_t age_ns;           /* since its snapshot arrived */
    int64_t offset_ns;         /* member clock minus home clock, now */
    int64_t bound_ns;          /* |true - offset| <= bound_ns; -1: unknown (offset and bound nil) */
    int64_t probe_bound_ns;    /* the probes' bound alone now (bound_source) */
    double drift_ppm;          /* the member clock's rate against the home's; NaN: unknown (nil) */
    uint64_t violations;       /* clock-condition violations counted (peerclock_collective) */
    uint64_t arrivals;         /* collective arrivals the home took from this host */
    uint64_t arrivals_dropped; /* arrivals the host's queue dropped or the home refused */
    struct peerclock *clock;   /* a copy of its estimator; NULL before its first burst */
    char *snap;                /* the whole `snapshot` message as it arrived */
    size_t snap_len;
};

struct peermerge {
    char *home_host;
    const char *home_state; /* the home's own part: "live" or "ended" */
    struct peermerge_part *parts;
    size_t n_parts;
    /* the packed "hosts_late" key and map (peerlate_pack, on the loop thread); NULL: none.
     * peermerge_report copies it into the report */
    char *late;
    size_t late_len;
};

/*
 * Merges into r (which query_report filled from db_path, or empty with
 * db_path NULL) the home's part read from db_path and every part of m; p
 * gives comm_min_ratio. Sets r->hosts. Returns 0, or a negative errno with
 * a message in err (r is then left as it was, hosts aside).
 */
int peermerge_report(struct report *r, const struct peermerge *m, const char *db_path,
                     const struct report_params *p, char *err, size_t errlen);
/*
 * A home's report filtered by ranks alone (r from query_report with that filter): its
 * analysis's `ranks` gains the members' rows of those ranks (as their last snapshots gave
 * them, whole sessions), every row with its "host" (the home's own too). from[i] (n_parts
 * of them, the caller's) is set when member i has a row of those ranks. 0, -ENOMEM, or
 * -EPROTO (the analysis is malformed: a bug).
 */
int peermerge_filtered_ranks(struct report *r, const struct peermerge *m, const int64_t *ranks,
                             size_t n_ranks, bool *from);
/*
 * For `report` with "late" at a home (tracectl top): the `ranks` rows of every
 * member part of m as its last snapshot gave them, each with its "host", sorted by
 * rank then host, packed as one array (proto/PROTOCOL.md "member_ranks"). A part
 * whose snapshot does not decode is left out. 0 or -ENOMEM.
 */
int peermerge_member_ranks(msgpack_packer *pk, const struct peermerge *m);
/* Frees what m owns (not m); NULL is a no-op. */
void peermerge_free(struct peermerge *m);
/*
 * The nearest-rank percentiles 50, 95 and 99 of `calls` durations in the n
 * ascending buckets b (their counts sum to calls) into out[0..3): the
 * smallest duration of the bucket holding each rank. 0s when calls is 0.
 */
void peermerge_percentiles(const struct agg_hist_bucket *b, size_t n, uint64_t calls,
                           uint64_t out[3]);

#endif
