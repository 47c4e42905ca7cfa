/*
 * store_blocks.c — the blocks format's write path; see store_blocks.h.
 */
#include <errno.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "agg.h"
#include "block.h"
#include "info.h"
#include "ranks.h"
#include "store_blocks.h"
#include "store_int.h"
#include "wsess.h"

/*
 * The blocks format: the block the file ends with goes back into memory
 * when it is not full, so that entries go on filling it (after reopening the
 * file, and after a rollback: what the file holds is what was committed);
 * the next rowid follows the file's last.
 */
int store_blocks_resume(struct store *s, struct wsess *w)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(w->db, "SELECT id, n, data FROM blocks ORDER BY id DESC LIMIT 1",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "read the last block");
    block_enc_reset(&w->bk.enc);
    w->bk.next_id = w->bk.first = 1;
    w->bk.written = 0;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);

        w->bk.next_id = w->bk.first = id + n;
        if (n > 0 && n < BLOCK_ENTRIES) {
            if (block_enc_load(&w->bk.enc, sqlite3_column_blob(st, 2),
                               (size_t)sqlite3_column_bytes(st, 2), (uint32_t)n) < 0) {
                sqlite3_finalize(st);
                return store_check(s, NULL, SQLITE_CORRUPT, "read the last block");
            }
            w->bk.first = id;
            w->bk.written = (uint32_t)n;
        }
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return store_check(s, w->db, rc, "read the last block");
}

int store_blocks_open(struct store *s, struct wsess *w, bool create)
{
    int rc;

    if (create)
        w->bk.on = s->wr.format == STORE_FORMAT_BLOCKS;
    else
        w->bk.on = info_int(w->db, "format", 1) == STORE_FORMAT_BLOCKS;
    if (!w->bk.on)
        return 0;
    block_enc_init(&w->bk.enc);
    rc = sqlite3_prepare_v3(w->db, "INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?,?,?,?)", -1,
                            SQLITE_PREPARE_PERSISTENT, &w->bk.ins, NULL);
    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "prepare");
    return store_blocks_resume(s, w);
}

void store_blocks_close(struct wsess *w)
{
    sqlite3_finalize(w->bk.ins);
    w->bk.ins = NULL;
    block_enc_deinit(&w->bk.enc);
    for (size_t i = 0; i < w->bk.full_cap; i++)
        block_enc_deinit(&w->bk.full[i].enc);
    free(w->bk.full);
    w->bk.full = NULL;
    w->bk.n_full = w->bk.full_cap = 0;
    w->bk.on = false;
}

/* Writes (or rewrites) the row of block b, whose first rowid is first. */
static int block_row(struct store *s, struct wsess *w, const struct block_enc *b, int64_t first)
{
    const struct block_stats *bs = &b->stats;
    sqlite3_stmt *st = w->bk.ins;
    uint8_t restarts[4 * BLOCK_RESTARTS];
    uint32_t nr = block_restarts(b->n);

    for (uint32_t k = 0; k < nr; k++) /* little-endian, whatever the host */
        for (int j = 0; j < 4; j++)
            restarts[4 * k + (uint32_t)j] = (uint8_t)(b->restart[k] >> (8 * j));
    sqlite3_bind_int64(st, 1, first);
    sqlite3_bind_int64(st, 2, b->n);
    sqlite3_bind_int64(st, 3, bs->min_start);
    sqlite3_bind_int64(st, 4, bs->max_start);
    sqlite3_bind_int64(st, 5, bs->min_proc);
    sqlite3_bind_int64(st, 6, bs->max_proc);
    sqlite3_bind_int64(st, 7, (int64_t)bs->proc_mask);
    sqlite3_bind_int64(st, 8, (int64_t)bs->op_mask);
    sqlite3_bind_blob(st, 9, restarts, (int)(4 * nr), SQLITE_STATIC);
    sqlite3_bind_blob(st, 10, b->buf, (int)b->len, SQLITE_STATIC);
    return store_step(s, w->db, st, "write block") < 0 ? -EIO : 0;
}

void store_blocks_drop(struct wsess *w)
{
    for (size_t i = 0; i < w->bk.n_full; i++)
        block_enc_reset(&w->bk.full[i].enc);
    w->bk.n_full = 0;
}

/*
 * At the commit: the rows of the blocks filled in the transaction, then the
 * row of the block being filled when it has entries its row lacks.
 */
int store_blocks_write(struct store *s, struct wsess *w)
{
    for (size_t i = 0; i < w->bk.n_full; i++)
        if (block_row(s, w, &w->bk.full[i].enc, w->bk.full[i].first) < 0)
            return -EIO; /* the rollback drops them (store_blocks_drop) */
    store_blocks_drop(w);
    if (w->bk.enc.n == w->bk.written)
        return 0;
    if (block_row(s, w, &w->bk.enc, w->bk.first) < 0)
        return -EIO;
    w->bk.written = w->bk.enc.n;
    return 0;
}

/*
 * The block being filled is full: it waits for the commit with the others
 * (the transaction reads and writes the file only at its commit, which is
 * what lets the checkpointer copy the whole WAL back in between, and the WAL
 * start over), and a spare encoder takes its place. 0 or -ENOMEM.
 */
static int block_full(struct wsess *w)
{
    struct block_enc next;

    if (w->bk.n_full == w->bk.full_cap) {
        size_t cap = w->bk.full_cap ? 2 * w->bk.full_cap : 16;
        struct wblock *p = realloc(w->bk.full, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        for (size_t i = w->bk.full_cap; i < cap; i++)
            block_enc_init(&p[i].enc);
        w->bk.full = p;
        w->bk.full_cap = cap;
    }
    next = w->bk.full[w->bk.n_full].enc;
    w->bk.full[w->bk.n_full].enc = w->bk.enc;
    w->bk.full[w->bk.n_full].first = w->bk.first;
    w->bk.n_full++;
    w->bk.enc = next;
    block_enc_reset(&w->bk.enc);
    return 0;
}

/*
 * The blocks format: each entry of the batch goes into the block being
 * filled, with the next rowid; a full block waits for the commit
 * (block_full) and a new one is begun. The rows are written at the
 * commit (store_blocks_write).
 */
int store_blocks_batch(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_batch *b = &job->u.batch.b;
    struct agg_src src = {job->u.batch.process_id, job->u.batch.dev_ids, job->u.batch.shape_ids};
    int rc;

    if ((rc = agg_batch(w->agg, b->entries, b->n, &src, w->bk.next_id)) < 0)
        return store_check_errno(s, w->db, rc, "update aggregates");
    for (size_t i = 0; i < b->n; i++) {
        const struct proto_entry *e = &b->entries[i];
        int64_t shape = wsess_shape_id(s, w, job, i);
        struct block_entry be;
        struct proto_ext x;

        if (shape < 0)
            return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
        be = (struct block_entry){
            .process_id = job->u.batch.process_id,
            .step = (int64_t)e->step,
            .op_id = e->op_id,
            .device_id = job->u.batch.dev_ids[i],
            .start_ns = (int64_t)e->start_ns,
            .dur_ns = (int64_t)e->dur_ns,
            .elements = (int64_t)e->elements,
            /* as in the row format: elements equal to its shape's product are implied */
            .has_elements = !(shape > 0 && e->elements == w->shapes.elements[shape]),
            .mem_bytes = (int64_t)e->mem_bytes,
            .shape_id = shape,
        };
        if (block_enc_add(&w->bk.enc, &be) < 0)
            return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
        if (w->bk.enc.n == BLOCK_ENTRIES) {
            if (block_full(w) < 0)
                return store_check(s, w->db, SQLITE_NOMEM, "insert entries");
            w->bk.first = w->bk.next_id + 1;
            w->bk.written = 0;
        }
        bool has_ext = proto_entry_ext(e, b->blob, &x);

        rc = ranks_entry(w->ranks, job->u.batch.process_id, e, job->u.batch.dev_ids[i],
                         has_ext ? &x : NULL, w->bk.next_id);
        if (rc < 0)
            return store_check_errno(s, w->db, rc, "update aggregates");
        if (has_ext && (rc = store_apply_ext_rows(s, w, &x, w->bk.next_id)) < 0)
            return rc;
        w->bk.next_id++;
    }
    w->txn.entries += b->n;
    return 0;
}
