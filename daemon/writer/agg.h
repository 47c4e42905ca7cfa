/*
 * agg — report aggregates kept up to date as entries arrive, so that a
 * report reads a few small tables instead of every entry (schema/session.sql:
 * agg_session, agg_ops, agg_hist_chunks, agg_devices, top_slow, top_mem).
 *
 * Owned by the storage writer thread, one per open session file. The writer
 * calls agg_batch() for the entries of each batch it inserts (or of each
 * statement: any run of consecutive rowids), and agg_flush() just before
 * COMMIT, so the aggregates are committed in the same transaction as the
 * entries they summarise: a crash can never leave them out of step. Sums
 * since the last flush are kept in memory (bounded by the ops and devices of
 * the session); the two top-K heaps (K = AGG_TOP) persist for the life of
 * the session, and so does each op's whole duration histogram.
 *
 * TOP TABLES. A heap keeps, besides the key, start and rowid it orders its
 * entries by, the fields of each kept entry's row (from the entry and
 * agg_src), so that the flush inserts the new ones into top_slow / top_mem
 * as they are, without reading `entries` (in the blocks format, decoding
 * their blocks). Entries whose fields it was not given (agg_entries()) are
 * read back from `entries`.
 *
 * HISTOGRAM. A duration falls in bucket agg_bucket(dur) (exact below 256 ns,
 * then 128 buckets per power of two); a bucket holds its count and the
 * smallest duration seen in it, the value a percentile reports. Buckets are
 * grouped in chunks of AGG_CHUNK (bucket / AGG_CHUNK), and the file keeps
 * one row per (op, chunk) that has a count: agg_hist_chunks, its blob in the
 * format of agg_chunk_decode(). The writer keeps every op's chunks in memory
 * (op id → chunk → the buckets that have a count: no hashing per entry) and
 * rewrites, at each flush, only the chunks the transaction touched: a few
 * hundred rows for a transaction of 256 Ki entries, one or two for a light
 * session's commit.
 *
 * When a commit fails (disk full) the in-memory histograms and heaps no
 * longer match the file: agg_discard() reads them back from it (what the
 * last commit left), and the aggregates stay exact. Only if that fails does
 * it mark them inexact: the next successful flush sets info.aggregates = 0,
 * after which reports scan the entries again.
 *
 * Errors: 0 or a negative errno (SQLite codes mapped by sql_errno(),
 * -ENOMEM when a delta cannot grow); the caller logs them.
 */
#ifndef TRACECTLD_AGG_H
#define TRACECTLD_AGG_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "proto.h"

#define AGG_TOP 1000 /* slowest/hotspot entries kept; larger `top` requests scan */

struct agg;

/* Prepares the statements on db (a session file with its schema). NULL on failure. */
struct agg *agg_new(sqlite3 *db);
/* NULL is a no-op. */
void agg_free(struct agg *a);
/*
 * A file reopened mid-session (the writer closed it while idle): reloads the
 * two top-K heaps from top_slow and top_mem and the histograms (from
 * agg_hist_chunks), or, when the file's aggregates are already inexact, carries
 * that on. 0 or a negative errno (-EINVAL: a malformed stored chunk).
 */
int agg_load(struct agg *a);
/* Marks the file's aggregates exact (a new session); inside the open transaction. 0 or -errno. */
int agg_init_file(struct agg *a);
/* What a batch's entries are stored with besides their own fields: what the top tables copy. */
struct agg_src {
    int64_t process_id;        /* every entry's */
    const uint32_t *dev_ids;   /* per entry: its device (0: none) */
    const uint32_t *shape_ids; /* per entry: its shapes.id (0: none); NULL: none has one */
};

/*
 * Counts the n stored entries e[0..n): e[i] is stored with src's process,
 * src->dev_ids[i] and src->shape_ids[i], as entries.rowid rowid + i. An
 * entry the top heaps keep carries its row's fields, which the flush
 * inserts into top_slow / top_mem as they are. 0 or -ENOMEM (the
 * transaction is then rolled back: agg_discard).
 */
int agg_batch(struct agg *a, const struct proto_entry *e, size_t n, const struct agg_src *src,
              int64_t rowid);
/*
 * agg_batch() for entries whose process and shape the caller does not give
 * (e[i] has device dev_ids[i]): the flush reads the kept ones' rows back
 * from `entries` (the tests' files).
 */
int agg_entries(struct agg *a, const struct proto_entry *e, size_t n, const uint32_t *dev_ids,
                int64_t rowid);
/* agg_entries() for one entry (dev_id 0: none; rowid: its entries.rowid). */
int agg_entry(struct agg *a, const struct proto_entry *e, uint32_t dev_id, int64_t rowid);
/* Writes the deltas since the last flush; inside the open transaction. 0 or a negative errno. */
int agg_flush(struct agg *a);
/*
 * The transaction was rolled back: drops the deltas, reloads the histograms
 * and heaps from the file; marks the aggregates inexact when that fails.
 */
void agg_discard(struct agg *a);
/*
 * The histogram bucket of a duration: agg_bucket_of() inline for the writer's
 * hot path and the peer decoder (peersnap_wire.c, which must not link SQLite),
 * agg_bucket() for the tests.
 */
static inline uint32_t agg_bucket_of(uint64_t v)
{
    int e;

    if (v < 256)
        return (uint32_t)v;
    e = 63 - __builtin_clzll(v); /* 8..63 */
    /* the top 8 bits of v, 128..255: 128 buckets per power of two */
    return 256 + (uint32_t)(e - 8) * 128 + (uint32_t)((v >> (e - 7)) - 128);
}
uint32_t agg_bucket(uint64_t v);

#define AGG_CHUNK         64   /* buckets per stored chunk: chunk = bucket / AGG_CHUNK */
#define AGG_CHUNK_SHIFT   7    /* agg_hist_chunks.id = op_id << AGG_CHUNK_SHIFT | chunk */
#define AGG_CHUNK_MAX_LEN 1288 /* the longest blob: 8 + AGG_CHUNK * 2 varints of <= 10 bytes */

/* One bucket of a stored chunk. */
struct agg_hist_bucket {
    uint32_t bucket;
    uint64_t min_ns, count;
};

/*
 * Decodes agg_hist_chunks.data of chunk number `chunk`: a little-endian
 * uint64 whose bit i says bucket chunk * AGG_CHUNK + i has a count, then,
 * for each such bucket in order, two LEB128 varints: the count (> 0) and
 * min_ns minus the bucket's lowest value. Fills out[] in bucket order and
 * returns how many buckets, or -EINVAL when the blob is malformed.
 */
int agg_chunk_decode(const void *data, size_t len, uint32_t chunk,
                     struct agg_hist_bucket out[AGG_CHUNK]);

#endif
