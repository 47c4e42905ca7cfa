/*
 * store_rows.c — the rows format's write path; see store_rows.h.
 */
#include <string.h>

#include <sqlite3.h>

#include "agg.h"
#include "ranks.h"
#include "store_int.h"
#include "store_rows.h"
#include "wsess.h"

#define ENTRY_ROWS 32 /* rows per multi-row INSERT */

/* INSERT INTO entries(...) VALUES (9 ?), once and ENTRY_ROWS times. */
int store_rows_prepare(struct store *s, struct wsess *w)
{
    char sql[64 + ENTRY_ROWS * 24] = "INSERT INTO entries(process_id, step, op_id, device_id,"
                                     " start_ns, dur_ns, elements, mem_bytes, shape_id) VALUES ";
    int rc;

    for (int k = 0; k < ENTRY_ROWS; k++)
        strcat(sql, k ? ",(?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?)");
    rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->rows.ins_entries, NULL);
    if (rc == SQLITE_OK)
        rc =
            sqlite3_prepare_v3(w->db,
                               "INSERT INTO entries(process_id, step, op_id, device_id, start_ns,"
                               " dur_ns, elements, mem_bytes, shape_id) VALUES (?,?,?,?,?,?,?,?,?)",
                               -1, SQLITE_PREPARE_PERSISTENT, &w->rows.ins_entry, NULL);
    return rc == SQLITE_OK ? 0 : store_check(s, w->db, rc, "prepare");
}

void store_rows_close(struct wsess *w)
{
    sqlite3_finalize(w->rows.ins_entries);
    sqlite3_finalize(w->rows.ins_entry);
    w->rows.ins_entries = w->rows.ins_entry = NULL;
}

/* Binds entry i of a batch as the 9 parameters from base+1 on. 0, or an SQLite code. */
static int bind_entry(struct store *s, struct wsess *w, sqlite3_stmt *st, int base,
                      const struct store_job *job, size_t i)
{
    const struct proto_batch *b = &job->u.batch.b;
    const struct proto_entry *e = &b->entries[i];
    int64_t shape = wsess_shape_id(s, w, job, i);

    if (shape < 0)
        return SQLITE_NOMEM;
    sqlite3_bind_int64(st, base + 1, job->u.batch.process_id);
    sqlite3_bind_int64(st, base + 2, (int64_t)e->step);
    sqlite3_bind_int64(st, base + 3, e->op_id);
    if (job->u.batch.dev_ids[i] != 0)
        sqlite3_bind_int64(st, base + 4, job->u.batch.dev_ids[i]);
    else
        sqlite3_bind_null(st, base + 4);
    sqlite3_bind_int64(st, base + 5, (int64_t)e->start_ns);
    sqlite3_bind_int64(st, base + 6, (int64_t)e->dur_ns);
    /* elements equal to its shape's product are implied: NULL takes no bytes */
    if (shape > 0 && e->elements == w->shapes.elements[shape])
        sqlite3_bind_null(st, base + 7);
    else
        sqlite3_bind_int64(st, base + 7, (int64_t)e->elements);
    sqlite3_bind_int64(st, base + 8, (int64_t)e->mem_bytes);
    if (shape > 0)
        sqlite3_bind_int64(st, base + 9, shape);
    else
        sqlite3_bind_null(st, base + 9);
    return 0;
}

/*
 * Inserts a batch: ENTRY_ROWS rows per statement while there are that many
 * (a statement's fixed cost is paid once per ENTRY_ROWS rows), then one at a
 * time. Rowids of one statement are consecutive (rows are only ever
 * appended), which is how each row's rowid reaches the aggregates.
 */
int store_rows_batch(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_batch *b = &job->u.batch.b;
    size_t i = 0;

    while (i < b->n) {
        size_t rows = b->n - i >= ENTRY_ROWS ? ENTRY_ROWS : 1;
        sqlite3_stmt *st = rows == ENTRY_ROWS ? w->rows.ins_entries : w->rows.ins_entry;
        int64_t last;
        int rc = 0;

        for (size_t k = 0; k < rows && rc == 0; k++)
            rc = bind_entry(s, w, st, (int)(9 * k), job, i + k);
        if (rc == 0) {
            rc = sqlite3_step(st);
            rc = rc == SQLITE_DONE ? 0 : rc;
        }
        sqlite3_reset(st);
        if (rc != 0)
            return store_check(s, w->db, rc, "insert entries");
        last = sqlite3_last_insert_rowid(w->db);
        struct agg_src src = {job->u.batch.process_id, &job->u.batch.dev_ids[i],
                              job->u.batch.shape_ids != NULL ? &job->u.batch.shape_ids[i] : NULL};
        if ((rc = agg_batch(w->agg, &b->entries[i], rows, &src, last - (int64_t)(rows - 1))) < 0)
            return store_check_errno(s, w->db, rc, "update aggregates");
        for (size_t k = 0; k < rows; k++) {
            int64_t rowid = last - (int64_t)(rows - 1 - k);
            const struct proto_entry *e = &b->entries[i + k];
            struct proto_ext x;
            bool has_ext = proto_entry_ext(e, b->blob, &x);

            rc = ranks_entry(w->ranks, job->u.batch.process_id, e, job->u.batch.dev_ids[i + k],
                             has_ext ? &x : NULL, rowid);
            if (rc < 0)
                return store_check_errno(s, w->db, rc, "update aggregates");
            if (has_ext && (rc = store_apply_ext_rows(s, w, &x, rowid)) < 0)
                return rc;
        }
        i += rows;
    }
    w->txn.entries += b->n;
    return 0;
}
