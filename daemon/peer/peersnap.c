/*
 * peersnap.c — reading a session's snapshot from its file (peersnap.h); the
 * message itself is peersnap_wire.c's.
 */
#include "info.h"
#include "peersnap.h"
#include "query.h"
#include "schema.h"
#include "store.h"
#include "vtab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#define PEERSNAP_BUSY_MS 5000

static int peersnap_op_cmp(const void *a, const void *b)
{
    return strcmp(((const struct peersnap_op *)a)->op, ((const struct peersnap_op *)b)->op);
}

static int peersnap_dev_cmp(const void *a, const void *b)
{
    return strcmp(((const struct peersnap_dev *)a)->device,
                  ((const struct peersnap_dev *)b)->device);
}

/* ---- reading a session file (a worker thread) ------------------------------------ */

struct peersnap_reader {
    sqlite3 *db;
    struct peersnap *s;
    char *err;
    size_t errlen;
};

static int peersnap_sql_fail(struct peersnap_reader *r, const char *what)
{
    snprintf(r->err, r->errlen, "snapshot: %s: %s", what, sqlite3_errmsg(r->db));
    return -EIO;
}

static uint64_t peersnap_col(sqlite3_stmt *st, int col)
{
    int64_t v = sqlite3_column_int64(st, col);
    return v > 0 ? (uint64_t)v : 0;
}

static char *peersnap_col_text(sqlite3_stmt *st, int col)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    return strdup(t != NULL ? t : "");
}

static int peersnap_read_totals(struct peersnap_reader *r)
{
    sqlite3_stmt *st = NULL;
    struct peersnap *s = r->s;
    uint64_t end, begin;
    int rc = sqlite3_prepare_v2(r->db, schema_peer_totals_sql, -1, &st, NULL);

    if (rc != SQLITE_OK && strstr(sqlite3_errmsg(r->db), "no such table") != NULL) {
        /* A file the writer has not given its schema yet: nothing to send yet. */
        snprintf(r->err, r->errlen, "snapshot: the file has no schema yet");
        return -EAGAIN;
    }
    if (rc != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
        rc = peersnap_sql_fail(r, "totals");
        sqlite3_finalize(st);
        return rc;
    }
    if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
        /* A file whose first transaction has not committed yet: nothing to send yet. */
        snprintf(r->err, r->errlen, "snapshot: the file has no aggregates yet");
        sqlite3_finalize(st);
        return -EAGAIN;
    }
    if (sqlite3_column_int64(st, 0) != 1 || sqlite3_column_int64(st, 1) != INFO_SCHEMA_VERSION) {
        snprintf(r->err, r->errlen,
                 "snapshot: the file's aggregates are not exact, or of another schema version");
        sqlite3_finalize(st);
        return -ENOTSUP;
    }
    s->processes = peersnap_col(st, 2);
    s->dropped = peersnap_col(st, 3);
    s->ranks = peersnap_col(st, 4);
    s->entries = peersnap_col(st, 5);
    s->total_ns = peersnap_col(st, 6);
    end = peersnap_col(st, 7);
    begin = peersnap_col(st, 8);
    s->span_ns = end > begin ? end - begin : 0;
    s->begin_ns = begin;
    s->end_ns = end;
    s->peak_bytes = peersnap_col(st, 9);
    s->total_bytes = peersnap_col(st, 10);
    sqlite3_finalize(st);
    return 0;
}

/* agg_ops rows (report_ops_agg.sql: id, name, category, calls, total, min, max, mem, elements). */
static int peersnap_read_ops(struct peersnap_reader *r, int64_t **ids)
{
    sqlite3_stmt *st = NULL;
    struct peersnap *s = r->s;
    size_t cap = 0;
    int rc = sqlite3_prepare_v2(r->db, schema_report_ops_agg_sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return peersnap_sql_fail(r, "ops");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct peersnap_op *op;
        if (s->n_ops == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            void *a = realloc(s->ops, ncap * sizeof(*s->ops)), *b;
            if (a == NULL)
                goto nomem;
            s->ops = a;
            b = realloc(*ids, ncap * sizeof(**ids));
            if (b == NULL)
                goto nomem;
            *ids = b;
            cap = ncap;
        }
        op = &s->ops[s->n_ops];
        memset(op, 0, sizeof(*op));
        (*ids)[s->n_ops++] = sqlite3_column_int64(st, 0);
        op->op = peersnap_col_text(st, 1);
        op->category = peersnap_col_text(st, 2);
        op->calls = peersnap_col(st, 3);
        op->total_ns = peersnap_col(st, 4);
        op->min_ns = peersnap_col(st, 5);
        op->max_ns = peersnap_col(st, 6);
        op->mem_bytes = peersnap_col(st, 7);
        op->elements = peersnap_col(st, 8);
        if (op->op == NULL || op->category == NULL)
            goto nomem;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : peersnap_sql_fail(r, "ops");
nomem:
    sqlite3_finalize(st);
    snprintf(r->err, r->errlen, "snapshot: out of memory");
    return -ENOMEM;
}

/* Appends the buckets of one stored chunk to the op whose id is id (ops by id, as ids). */
static int peersnap_add_chunk(struct peersnap_reader *r, const int64_t *ids, size_t *at, int64_t id,
                              const struct agg_hist_bucket *b, int n)
{
    struct peersnap *s = r->s;
    struct peersnap_op *op;
    void *p;

    while (*at < s->n_ops && ids[*at] < id)
        (*at)++;
    if (*at == s->n_ops || ids[*at] != id)
        return 0; /* an op whose calls are 0: no row in the report either */
    op = &s->ops[*at];
    p = realloc(op->hist, (op->n_hist + (size_t)n) * sizeof(*op->hist));
    if (p == NULL) {
        snprintf(r->err, r->errlen, "snapshot: out of memory");
        return -ENOMEM;
    }
    op->hist = p;
    memcpy(op->hist + op->n_hist, b, (size_t)n * sizeof(*b));
    op->n_hist += (size_t)n;
    return 0;
}

static int peersnap_read_hist(struct peersnap_reader *r, const int64_t *ids)
{
    sqlite3_stmt *st = NULL;
    struct agg_hist_bucket b[AGG_CHUNK];
    size_t at = 0;
    int rc = sqlite3_prepare_v2(r->db, schema_report_durations_agg_sql, -1, &st, NULL), err = 0;

    if (rc != SQLITE_OK)
        return peersnap_sql_fail(r, "histograms");
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int n = agg_chunk_decode(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                                 (uint32_t)sqlite3_column_int64(st, 1), b);
        if (n < 0) {
            snprintf(r->err, r->errlen, "snapshot: a histogram chunk is malformed");
            err = -EIO;
        } else {
            err = peersnap_add_chunk(r, ids, &at, sqlite3_column_int64(st, 0), b, n);
        }
    }
    sqlite3_finalize(st);
    if (err == 0 && rc != SQLITE_DONE)
        err = peersnap_sql_fail(r, "histograms");
    return err;
}

static int peersnap_read_devs(struct peersnap_reader *r)
{
    sqlite3_stmt *st = NULL;
    struct peersnap *s = r->s;
    size_t cap = 0;
    int rc = sqlite3_prepare_v2(r->db, schema_report_devices_agg_sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return peersnap_sql_fail(r, "devices");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct peersnap_dev *d;
        if (s->n_devs == cap) {
            void *p = realloc(s->devs, (cap ? 2 * cap : 16) * sizeof(*s->devs));
            if (p == NULL)
                break;
            s->devs = p;
            cap = cap ? 2 * cap : 16;
        }
        d = &s->devs[s->n_devs++];
        d->device = peersnap_col_text(st, 0);
        d->calls = peersnap_col(st, 1);
        d->total_ns = peersnap_col(st, 2);
        d->mem_bytes = peersnap_col(st, 3);
        if (d->device == NULL)
            break;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) {
        snprintf(r->err, r->errlen, "snapshot: out of memory");
        return -ENOMEM;
    }
    return rc == SQLITE_DONE ? 0 : peersnap_sql_fail(r, "devices");
}

/* The top list src[0..n) of a report as snapshot entries (shapes left out). 0 or -ENOMEM. */
static int peersnap_copy_entries(const struct report_entry *src, size_t n,
                                 struct peersnap_entry **out, size_t *n_out)
{
    if (n == 0)
        return 0;
    if ((*out = calloc(n, sizeof(**out))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++, (*n_out)++) {
        struct peersnap_entry *e = &(*out)[i];
        e->rank = src[i].rank;
        e->step = src[i].step;
        e->start_ns = src[i].start_ns;
        e->dur_ns = src[i].dur_ns;
        e->mem_bytes = src[i].mem_bytes;
        if ((e->op = strdup(src[i].op)) == NULL ||
            (src[i].device != NULL && (e->device = strdup(src[i].device)) == NULL)) {
            (*n_out)++;
            return -ENOMEM;
        }
    }
    return 0;
}

/*
 * The top lists, as the member's own report has them: query_report() with
 * top PEERSNAP_TOP (its own read transaction, a moment after the aggregates:
 * the lists may hold an entry or two more than the counters of a live session).
 */
static int peersnap_read_tops(const char *db_path, struct peersnap *s, char *err, size_t errlen)
{
    const struct report_params p = {.top = PEERSNAP_TOP};
    struct report r;
    int rc = query_report(db_path, &p, &r, err, errlen);

    if (rc == 0)
        rc = peersnap_copy_entries(r.slowest, r.n_slowest, &s->slowest, &s->n_slowest);
    if (rc == 0)
        rc = peersnap_copy_entries(r.hotspots, r.n_hotspots, &s->hotspots, &s->n_hotspots);
    if (rc == -ENOMEM)
        snprintf(err, errlen, "snapshot: out of memory");
    report_free(&r);
    return rc;
}

/* The `ranks` rows (ranks_rows), the lowest PEERSNAP_MAX_RANKS kept, in the aggregates'
 * read transaction. */
static int peersnap_read_ranks(struct peersnap_reader *r)
{
    struct peersnap *s = r->s;
    int rc = ranks_rows(r->db, &s->rank_rows, &s->n_rank_rows, r->err, r->errlen);

    if (rc == 0 && s->n_rank_rows > PEERSNAP_MAX_RANKS) {
        s->ranks_cut = s->n_rank_rows - PEERSNAP_MAX_RANKS;
        s->n_rank_rows = PEERSNAP_MAX_RANKS;
    }
    return rc;
}

int peersnap_read(const char *db_path, bool with_ranks, struct peersnap *out, char *err,
                  size_t errlen)
{
    struct peersnap_reader r = {.s = out, .err = err, .errlen = errlen};
    int64_t *ids = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = sqlite3_open_v2(db_path, &r.db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(r.db, PEERSNAP_BUSY_MS);
    if (rc == SQLITE_OK)
        rc = vtab_register(r.db); /* a blocks file's schema names the module */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(r.db, "BEGIN", NULL, NULL, NULL);
    rc = rc == SQLITE_OK ? 0 : peersnap_sql_fail(&r, "open");
    if (rc == 0)
        rc = peersnap_read_totals(&r);
    if (rc == 0)
        rc = peersnap_read_ops(&r, &ids);
    if (rc == 0)
        rc = peersnap_read_hist(&r, ids);
    if (rc == 0)
        rc = peersnap_read_devs(&r);
    if (rc == 0 && with_ranks)
        rc = peersnap_read_ranks(&r);
    sqlite3_close_v2(r.db); /* ends the read transaction */
    free(ids);
    if (rc == 0)
        rc = peersnap_read_tops(db_path, out, err, errlen);
    if (rc < 0) {
        peersnap_free(out);
        return rc;
    }
    /* qsort of none: its array may be NULL, which qsort must not be given */
    if (out->n_ops > 0)
        qsort(out->ops, out->n_ops, sizeof(*out->ops), peersnap_op_cmp);
    if (out->n_devs > 0)
        qsort(out->devs, out->n_devs, sizeof(*out->devs), peersnap_dev_cmp);
    return 0;
}
