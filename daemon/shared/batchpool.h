/*
 * batchpool — the arrays of spent batches, kept for the next ones.
 *
 * Every batch a producer sends becomes four arrays on the loop thread: its
 * entries and blob (filled by the reader, proto_reader_set_take()), and the
 * per-entry device and shape ids (conn_producer.c). The writer thread is done with
 * them once it has applied the batch. Freed and allocated again, arrays of a
 * few hundred KiB go back to the kernel (glibc trims its heap, or munmaps
 * what it mmapped) and come back as fresh pages: the page faults and the
 * zeroing were about a fifth of the loop's decoding time. The writer puts
 * them here instead, and the loop takes them for the next batch.
 *
 * What it keeps is bounded: it only ever holds arrays that were in flight
 * at the same time (a miss allocates; an array comes here when its batch is
 * spent), so it adds little to the daemon's peak memory, which the queue's
 * limits bound; and at most BATCHPOOL_MAX_ARRAYS arrays (half as many of
 * entries or blobs as of ids: a batch has two arrays of ids) and
 * BATCHPOOL_MAX_BYTES bytes (entries 3/4 of it, blobs and ids 1/8 each, as
 * a batch needs them: 80 bytes an entry, 8 of ids, 10 to 30 of shapes for
 * most), none over BATCHPOOL_MAX_ARRAY bytes (a batch that large is rare:
 * its arrays are freed as before). Past a limit, a smaller array of that
 * kind makes room for the one given back (a peer's batches are alike: the
 * pool ends up with arrays that fit them), else that one is freed. Once a
 * second the loop frees them all if none was asked for (batchpool_trim).
 * Arrays here are ordinary malloc'd blocks: whoever takes one may realloc
 * or free it.
 *
 * Threads: one pool for the process (a cache in front of malloc, as
 * malloc's own are), every function may be called from any thread: a mutex
 * guards it, held for a few instructions once per array.
 */
#ifndef TRACECTLD_BATCHPOOL_H
#define TRACECTLD_BATCHPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define BATCHPOOL_MAX_ARRAYS 128
#define BATCHPOOL_MAX_ARRAY  (1u << 20)
#define BATCHPOOL_MAX_BYTES  (32u << 20) /* ~70 batches of 4096 entries (libtracectl's largest) */

enum batchpool_kind {
    BATCHPOOL_ENTRIES, /* struct proto_entry arrays */
    BATCHPOOL_BLOB,    /* batch blobs */
    BATCHPOOL_IDS,     /* uint32_t arrays: device and shape ids */
    BATCHPOOL_KINDS,
};

/*
 * Takes an array of kind k with room for at least min bytes, the most
 * recently given back of those. Returns it and sets *cap to its room in
 * bytes, or returns NULL (none kept that large; *cap is 0).
 */
void *batchpool_take(enum batchpool_kind k, size_t min, size_t *cap);

/*
 * Takes ownership of p, a malloc'd array of kind k with room for cap bytes:
 * keeps it, or frees it (see the limits above). NULL is a no-op.
 */
void batchpool_put(enum batchpool_kind k, void *p, size_t cap);

/*
 * Takes ownership of a spent batch's arrays: b's entries and blob (whose
 * room b->cap and b->blob_cap say, or b->n and b->blob_len when 0), and
 * dev_ids and shape_ids (room for ids_cap ids each, or b->n when 0; either
 * may be NULL). Leaves *b empty.
 */
void batchpool_put_batch(struct proto_batch *b, uint32_t *dev_ids, uint32_t *shape_ids,
                         size_t ids_cap);

/*
 * For proto_reader_set_take(): arrays for the batch that begins, at least
 * as large as b->cap entries and b->blob_cap bytes when the pool has such
 * (the reader's last batch: a peer's batches are alike). ctx is unused.
 */
void batchpool_take_batch(void *ctx, struct proto_batch *b);

struct batchpool_stats {
    uint64_t taken;  /* takes that got an array */
    uint64_t missed; /* takes that did not */
    uint64_t kept;   /* arrays given back and kept */
    uint64_t freed;  /* arrays given back and freed (limits) */
    size_t arrays;   /* arrays kept now */
    size_t bytes;    /* their room in bytes */
};

/* The counts since start (or the last drain). */
void batchpool_stats(struct batchpool_stats *st);

/*
 * Frees every array kept when no array was asked for since the last call
 * (the loop calls it once a second: what a burst of batches left here goes
 * back once the burst is over).
 */
void batchpool_trim(void);

/* Frees every array kept and zeroes the counts (at exit, and for tests). */
void batchpool_drain(void);

#endif
