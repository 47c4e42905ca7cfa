/*
 * store_blocks — the blocks format (info.format 2): entries go into blocks of
 * up to BLOCK_ENTRIES (block.h), one row of `blocks` per block.
 *
 * The block being filled stays in memory with its rowids (1, 2, 3, ... in
 * the order stored, as the rows format's); the blocks a transaction fills
 * wait in memory too, and their rows are written at its commit with the
 * partly filled one's (store_blocks_write), so that an ack still means
 * committed and the transaction touches the file only at its commit, which
 * lets the checkpointer copy the whole WAL back in between. A rollback
 * drops them (store_blocks_drop) and reloads the last block from the file
 * (store_blocks_resume). Writer thread only.
 */
#ifndef TRACECTLD_STORE_BLOCKS_H
#define TRACECTLD_STORE_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "block.h"
#include "store.h"

struct wsess;

/* A block filled in the open transaction: its row is written at the commit. */
struct wblock {
    struct block_enc enc;
    int64_t first; /* its first rowid */
};

struct wsess_blocks {
    bool on;              /* the file is in the blocks format */
    struct block_enc enc; /* the block being filled: rowids first .. */
    int64_t first;
    uint32_t written;    /* of its entries, how many its row in the file holds */
    struct wblock *full; /* blocks filled in the transaction, rows written at its commit */
    size_t n_full;       /* full[n_full ..] are spare (reset) encoders, buffers kept */
    size_t full_cap;
    int64_t next_id; /* the rowid of the next entry */
    sqlite3_stmt *ins;
};

/*
 * Which format w's just opened file is in (a new one: the store's format);
 * for the blocks format, the statement and the last block. 0 or -EIO.
 */
int store_blocks_open(struct store *s, struct wsess *w, bool create);
/* Releases the encoders and the statement (the file is closing). */
void store_blocks_close(struct wsess *w);
/* The block the file ends with back into memory, when not full; the next rowid. 0 or -EIO. */
int store_blocks_resume(struct store *s, struct wsess *w);
/* The blocks filled in the transaction are written, or rolled back: their encoders become spares.
 */
void store_blocks_drop(struct wsess *w);
/* At the commit: the rows of the filled blocks, and of the partly filled one. 0 or -EIO. */
int store_blocks_write(struct store *s, struct wsess *w);
/* Adds a batch's entries to the blocks, with their aggregates and side rows. */
int store_blocks_batch(struct store *s, struct wsess *w, struct store_job *job);

#endif
