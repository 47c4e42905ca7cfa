/*
 * peersnap — a member's snapshot of one session: what its home needs to
 * merge that host's part into the session's report (proto/PROTOCOL.md
 * "Peer protocol", message `snapshot`).
 *
 * A snapshot is cumulative and idempotent: it holds the session's
 * aggregates as of one commit (counters, per-op count, sum, min, max and the
 * duration histogram, per-device sums) and the member's own top lists
 * (slowest calls, memory hotspots) and its report's per-rank rows (keyed by
 * rank), keyed by names (op, device), never by the member's local ids, so the home keeps only the
 * latest one per host and a resent or reordered older one is told apart by `seq`.
 *
 * peersnap_read() reads one from a session file on a worker thread (its own
 * read-only connection, one read transaction, like query_report); the file
 * must have exact aggregates with chunked histograms (every file this
 * daemon makes). peersnap_pack() and peersnap_decode() are pure functions
 * over msgpack: decode trusts nothing (every count, length, order and
 * bucket is checked), so the home can take a snapshot from a peer as it
 * takes a batch from a producer. A struct peersnap owns all it points to.
 */
#ifndef TRACECTLD_PEERSNAP_H
#define TRACECTLD_PEERSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "agg.h"
#include "ranks_query.h"

#define PEERSNAP_MAX_OPS     65536 /* SESSION_MAX_OPS */
#define PEERSNAP_MAX_DEVICES 4096  /* SESSION_MAX_DEVICES */
#define PEERSNAP_MAX_BUCKETS 7424  /* agg_bucket(UINT64_MAX) + 1 */
#define PEERSNAP_MAX_NAME    4096  /* bytes of an op, category, device or host name */
#define PEERSNAP_TOP         100   /* entries of each top list (slowest, memory hotspots) */
/* `ranks` rows of a snapshot at most: those of the lowest ranks; the rest are counted in
 * ranks_cut (a row is about 100-220 bytes packed: 1024 of them about 220 KB at most) */
#define PEERSNAP_MAX_RANKS   1024
#define PEERSNAP_RANK_FIELDS 24 /* elements of a `rank_rows` row (proto/PROTOCOL.md) */

struct peersnap_op {
    char *op, *category;
    uint64_t calls, total_ns, min_ns, max_ns, mem_bytes, elements;
    struct agg_hist_bucket *hist; /* ascending buckets; their counts sum to calls */
    size_t n_hist;
};

struct peersnap_dev {
    char *device;
    uint64_t calls, total_ns, mem_bytes;
};

/* An entry of a top list (its shapes are not sent). */
struct peersnap_entry {
    char *op;
    int64_t rank; /* -1: nil */
    char *device; /* NULL: nil */
    uint64_t step, start_ns, dur_ns, mem_bytes;
};

struct peersnap {
    char *session;
    uint64_t seq;
    bool ended;
    /* the member's session: its id there, and when it started and ended (CLOCK_REALTIME ns;
     * ended_ns 0 while live), so that the home tells apart two jobs of one name */
    uint64_t sid, started_ns, ended_ns;
    uint64_t processes, ranks, entries, dropped, total_ns, span_ns, peak_bytes, total_bytes;
    /* the first entry's start and the last one's end, CLOCK_MONOTONIC ns of the host that
     * sent it (0, 0: none, or a member that does not send them); the home converts them */
    uint64_t begin_ns, end_ns;
    struct peersnap_op *ops; /* sorted by name, unique */
    size_t n_ops;
    struct peersnap_dev *devs; /* sorted by name, unique */
    size_t n_devs;
    /* the member's own report's top lists (at most PEERSNAP_TOP each, its order) */
    struct peersnap_entry *slowest, *hotspots;
    size_t n_slowest, n_hotspots;
    /* the member's own report's `ranks` rows (ranks_rows: unfiltered, sorted by rank, each
     * rank once), the lowest PEERSNAP_MAX_RANKS; ranks_cut: the rows left out past them */
    struct ranks_row *rank_rows;
    size_t n_rank_rows;
    uint64_t ranks_cut;
};

/*
 * Reads the snapshot of the session file at db_path into *out (session, seq
 * and ended are the caller's to set), with its `ranks` rows when with_ranks
 * (a member's; the home takes its own from its report). 0; -EAGAIN when the file has not
 * committed its first transaction yet; -ENOTSUP when the file's
 * aggregates are not exact or its histogram not chunked; another negative
 * errno with a message in err. On error *out is empty.
 */
int peersnap_read(const char *db_path, bool with_ranks, struct peersnap *out, char *err,
                  size_t errlen);
/* Packs ["snapshot", {...}]. 0 or -ENOMEM. */
int peersnap_pack(msgpack_packer *pk, const struct peersnap *s);
/*
 * Decodes the map of a `snapshot` message (m is the whole array) into *out,
 * checking everything. 0, or -EPROTO / -ENOMEM with a message in err; on
 * error *out is empty.
 */
int peersnap_decode(const msgpack_object *m, struct peersnap *out, char *err, size_t errlen);
/* Frees what s owns and zeroes it; NULL is a no-op. */
void peersnap_free(struct peersnap *s);

#endif
