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
 * Every BLOCK_RESTART entries the deltas start again from zero (a restart),
 * and the encoder notes the byte offset of each restart: a reader after one
 * entry seeks to the restart before it (block_dec_seek) and decodes at most
 * BLOCK_RESTART entries, not the whole block.
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

#define BLOCK_ENTRIES  1024 /* entries per block, at most */
#define BLOCK_RESTART  128  /* entries between restarts */
#define BLOCK_RESTARTS (BLOCK_ENTRIES / BLOCK_RESTART)

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
    uint32_t restart[BLOCK_RESTARTS]; /* byte offset of entry k * BLOCK_RESTART */
};

/* Reads a block back (borrowing its bytes). */
struct block_dec {
    const uint8_t *start, *p, *end;
    uint32_t n, index; /* entries in the block, and the index of the next one */
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

/* The restarts of a block of n entries (ceil(n / BLOCK_RESTART)); their offsets are b->restart. */
uint32_t block_restarts(uint32_t n);
/* Starts reading the n entries of data[0..len). */
void block_dec_init(struct block_dec *d, const void *data, size_t len, uint32_t n);
/*
 * Moves to restart k, which the encoder noted at byte offset off: the next
 * entry is then entry k * BLOCK_RESTART. -1 when k or off is out of the
 * block (a damaged offset makes later entries wrong, never a read out of it).
 */
int block_dec_seek(struct block_dec *d, uint32_t k, uint32_t off);
/*
 * The next entry into *e: 1, 0 after the last (when every byte was used), or
 * -1 when the bytes are not a valid block of the n entries given.
 */
int block_dec_next(struct block_dec *d, struct block_entry *e);

#endif
