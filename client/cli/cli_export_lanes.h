/*
 * cli_export_lanes — puts the slices of an export on lanes, so that no two
 * slices of one lane partially overlap: what the trace-viewer formats
 * (chrome, perfetto) need, since a viewer pairs the BEGIN and END events of
 * one track as a stack and shows overlapping slices with wrong durations.
 *
 * A track is where an entry came from: (process, device, stream), stream
 * being the `stream` key of the entry's ext map (a CUDA stream, a thread id;
 * proto/PROTOCOL.md "entry ext") or none. A track has one or more lanes,
 * each a track of its own in the output. Slices are placed greedily as they
 * come: a slice nests on a lane only if it lies entirely inside the
 * innermost slice still open there, or goes on a lane with nothing open; of
 * the lanes it fits, it takes the one whose innermost open slice ends first
 * (the tightest that holds it: its parent's lane, when a partial overlap put
 * its parent on another lane than its grandparent), and opens a new lane
 * when none fits. Before a
 * slice is placed, the open slices of its track that end by its start are
 * closed (the caller's end callback writes their END), innermost first.
 *
 * Entries with links (proto/PROTOCOL.md "Links between entries": nested
 * regions, which carry an id or a parent) follow them rather than time
 * alone: such an entry nests on a lane only under the slice that is its
 * parent (the innermost open there with an id has that id; slices without
 * one may lie between, as a profiler op inside the op that called it),
 * else it goes on a lane with nothing open, so that a region is never shown
 * inside a slice of another thread that happens to contain it in time. On a
 * track with a stream (one thread's, as the producer says) a region without
 * a parent may also nest inside the plain slices (without an id) that
 * contain it. An entry without links on a track without a stream (a
 * tc_record between tc_push regions, other threads' regions beside) cannot
 * tell by time whose region holds it: it goes on the first lane that holds
 * it rather than on a tighter one whose innermost slice is a region.
 *
 * A slice is drawn over its row's span_ns (its whole interval, children
 * included). One of length 0 is an instant: it is placed like the others
 * (on a lane where it falls inside the right parent) but never opened, so
 * no END is written for it.
 *
 * Each lane remembers the time of the last event written on it and takes a
 * slice only at or after that time, so every lane's BEGIN/END sequence is
 * properly nested and non-decreasing in time whatever order the rows come
 * in; rows by start time (the export's "order": "start", longer slices first
 * at equal starts) give the fewest lanes: one per track while nothing
 * overlaps partially.
 *
 * Memory: per track its lanes, per lane the stack of its open slices; it
 * follows the number of tracks and of slices open at once, never the number
 * of entries. Single-threaded; no globals.
 */
#ifndef TRACECTL_CLI_EXPORT_LANES_H
#define TRACECTL_CLI_EXPORT_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli_export_dict.h"
#include "map.h"

struct cli_export_lane {
    uint64_t id;      /* the format's (a Perfetto track uuid, a Chrome tid); 0 until it sets it */
    uint64_t last_ns; /* the time of the last event written on the lane */
    uint64_t *open;   /* end times of the open slices, innermost last */
    uint64_t *ids;    /* their links' ids + 1 (0: the slice has no id), beside open */
    bool *linked;     /* whether they have links (an id or a parent: regions), beside open */
    size_t depth, cap;
};

struct cli_export_lanes_track {
    const struct cli_export_proc *proc;
    const struct cli_export_dev *dev; /* NULL: no device */
    bool has_stream;
    uint64_t stream;
    struct cli_export_lane *lanes;
    size_t n_lanes;
};

struct cli_export_lanes {
    struct pairmap devs;   /* (view pid, device index) → a key 1, 2, ... */
    struct pairmap tracks; /* (dev key << 1 | has_stream, stream) → track index + 1 */
    struct cli_export_lanes_track *t;
    size_t n, cap;       /* tracks */
    uint64_t n_dev_keys; /* (view pid, device) pairs seen */
};

/* Called once per slice that ends, innermost first; returns 0 or a negative errno. */
typedef int (*cli_export_lanes_end_cb)(void *arg, const struct cli_export_lanes_track *t,
                                       const struct cli_export_lane *lane, uint64_t end_ns);

void cli_export_lanes_init(struct cli_export_lanes *l);
void cli_export_lanes_deinit(struct cli_export_lanes *l);

/*
 * Places row r's slice: closes its track's slices that end by r->start_ns
 * (through end, which may be NULL when the format writes no END), then sets
 * *track and *lane to where it goes. The slice is open on the lane from then
 * on. A lane whose id is 0 is new: the format describes it and sets its id.
 * Returns 0, -ENOMEM (nothing placed), or the first error of end.
 */
int cli_export_lanes_place(struct cli_export_lanes *l, const struct cli_export_row *r,
                           cli_export_lanes_end_cb end, void *arg,
                           struct cli_export_lanes_track **track, struct cli_export_lane **lane);

/* Closes every slice still open, lane by lane, innermost first. Returns 0 or end's error. */
int cli_export_lanes_close_all(struct cli_export_lanes *l, cli_export_lanes_end_cb end, void *arg);

/*
 * The name of a lane: the device ("no device" without one), " stream N" with a
 * stream, and " #K" on the K-th lane of its track (K ≥ 2), e.g. "gpu:0",
 * "gpu:0 stream 7 #2". Truncated to size.
 */
void cli_export_lanes_name(const struct cli_export_lanes_track *t, size_t lane, char *buf,
                           size_t size);

#endif
