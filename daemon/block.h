/*
 * block — the compact encoding of a run of entries, one SQLite row per
 * block (the "blocks" storage format, schema/session_blocks.sql).
 *
 * A block holds up to BLOCK_ENTRIES entries with consecutive rowids, in the
 * order the writer stored them. Each entry is a flags byte followed by
 * varints: fields equal to the previous entry's (process, step, op, device,
 * shape) are left out and flagged, the others are zigzag deltas from the
 * previous entry's value (wrapping 64-bit arithmetic, so any int64 round
 * trips), start_ns is always a zigzag delta, dur_ns always a plain varint:
 *
 *   flags [process] [step] [op] [device] start dur [elements] [mem] [shape]
 *
 * The encoding is append-only, so the writer keeps the block it is filling
 * in memory, adds entries at its end and rewrites its row at each commit (a
 * partly filled block is committed as it is). The encoder also keeps what
 * the block's row says about its entries for the virtual table to skip
 * blocks (time range, processes, ops).
 *
 * Decoding never trusts the bytes: a block read from a file that was
 * damaged or written by hand is reported corrupt, never read out of bounds.
 */
#ifndef TRACECTLD_BLOCK_H
#define TRACECTLD_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BLOCK_ENTRIES 4096 /* entries per block, at most */

/* One entry as the entries table shows it (device_id 0 and shape_id 0: NULL). */
struct block_entry {
    int64_t process_id, step, op_id, device_id;
    int64_t start_ns, dur_ns;
    int64_t elements; /* meaningful when has_elements; else NULL (the shape's product) */
    int64_t mem_bytes, shape_id;
    bool has_elements;
};

/* What a block's row says about its entries (the virtual table skips blocks by it). */
struct block_stats {
    int64_t min_start, max_start;
    int64_t min_proc, max_proc;
    uint64_t proc_mask; /* bit (process_id & 63) of every entry's process */
    uint64_t op_mask;   /* bit (op_id & 63) of every entry's op */
};

/* The block being filled (caller's memory: block_enc_init/_deinit). */
struct block_enc {
    uint8_t *buf;
    size_t len, cap;
    uint32_t n;
    struct block_entry prev;
    struct block_stats stats;
};

/* Reads a block back (borrowing its bytes). */
struct block_dec {
    const uint8_t *p, *end;
    uint32_t left;
    struct block_entry prev;
};

/* An entry encodes into at most this many bytes. */
#define BLOCK_ENTRY_MAX (1 + 9 * 10)

void block_enc_init(struct block_enc *b);
void block_enc_deinit(struct block_enc *b);
/* Empties the block (keeping its buffer). */
void block_enc_reset(struct block_enc *b);
/* Appends e. 0 or -ENOMEM (the block is unchanged); -ENOSPC when already full. */
int block_enc_add(struct block_enc *b, const struct block_entry *e);
/*
 * Refills b with the n entries of an encoded block (to go on appending to a
 * block read back from a file). 0, -ENOMEM, or -EINVAL when data is not a
 * valid block of n entries.
 */
int block_enc_load(struct block_enc *b, const void *data, size_t len, uint32_t n);

/* Starts reading the n entries of data[0..len). */
void block_dec_init(struct block_dec *d, const void *data, size_t len, uint32_t n);
/*
 * The next entry into *e: 1, 0 after the last (when every byte was used), or
 * -1 when the bytes are not a valid block of the n entries given.
 */
int block_dec_next(struct block_dec *d, struct block_entry *e);

#endif
