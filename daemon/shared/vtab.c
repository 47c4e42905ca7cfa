/* vtab.c — see vtab.h. */
#ifdef TRACECTL_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
#else
#include <sqlite3.h>
#endif
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "vtab.h"

/* The columns, as the row format's entries table declares them. */
enum {
    COL_PROCESS,
    COL_STEP,
    COL_OP,
    COL_DEVICE,
    COL_START,
    COL_DUR,
    COL_ELEMENTS,
    COL_MEM,
    COL_SHAPE,
};

#define MAX_ARGS 16 /* constraints pushed down per scan */

struct vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    char *schema, *blocks; /* the database and the table holding the blocks */
};

/* What a scan keeps of its constraints: every row it returns lies within. */
struct vfilter {
    int64_t id_lo, id_hi, start_lo, start_hi, proc, op;
    bool has_proc, has_op, none; /* none: no row can match */
};

struct vcursor {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *st;   /* the blocks that may hold matches, by id */
    sqlite3_stmt *pt;   /* a lookup by rowid: the block holding it, without its data */
    sqlite3_blob *blob; /* a lookup by rowid reads only the restart interval it needs */
    bool scanning;      /* st is stepping */
    bool eof;
    struct vfilter f;
    /*
     * The current block, rowids first .. first + n - 1, a copy of its bytes
     * decoded only as far as needed (ents[lo .. decoded)): a lookup by rowid
     * seeks to the restart before its entry and decodes up to it, and the
     * next lookup further in the same block (top_slow is read in rowid
     * order) goes on from there.
     */
    struct block_entry *ents;
    uint8_t *data;
    size_t data_cap;
    uint32_t restart[BLOCK_RESTARTS];
    bool has_restarts; /* the block's restarts column is well formed */
    /*
     * A lookup by rowid read one restart interval, entries seg * BLOCK_RESTART
     * onwards, of the block's bytes (at their offsets in data): only those may
     * be decoded. -1: the whole block is in data.
     */
    int seg;
    struct block_dec dec;
    uint32_t lo, decoded;
    int64_t first;
    uint32_t n, i;
};

static int vtab_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **err)
{
    struct vtab *t;
    int rc;

    (void)aux;
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(process_id INTEGER, step INTEGER,"
                                  " op_id INTEGER, device_id INTEGER, start_ns INTEGER,"
                                  " dur_ns INTEGER, elements INTEGER, mem_bytes INTEGER,"
                                  " shape_id INTEGER)");
    if (rc != SQLITE_OK)
        return rc;
    if ((t = sqlite3_malloc(sizeof(*t))) == NULL)
        return SQLITE_NOMEM;
    memset(t, 0, sizeof(*t));
    t->db = db;
    t->schema = sqlite3_mprintf("%s", argv[1]);
    t->blocks = sqlite3_mprintf("%s", argc > 3 ? argv[3] : "blocks");
    if (t->schema == NULL || t->blocks == NULL) {
        sqlite3_free(t->schema);
        sqlite3_free(t->blocks);
        sqlite3_free(t);
        *err = sqlite3_mprintf("out of memory");
        return SQLITE_NOMEM;
    }
    *out = &t->base;
    return SQLITE_OK;
}

static int vtab_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
                       sqlite3_vtab **out, char **err)
{
    return vtab_connect(db, aux, argc, argv, out, err);
}

static int vtab_disconnect(sqlite3_vtab *base)
{
    struct vtab *t = (struct vtab *)base;

    sqlite3_free(t->schema);
    sqlite3_free(t->blocks);
    sqlite3_free(t);
    return SQLITE_OK;
}

/*
 * idxStr names each argument of xFilter with two characters: the column
 * ('r' rowid, 's' start_ns, 'p' process_id, 'o' op_id) and the operator
 * ('=', '>', 'g' for >=, '<', 'l' for <=). SQLite checks every constraint
 * again (omit stays 0): the scan only has to keep every row that matches.
 */
static int vtab_best_index(sqlite3_vtab *base, sqlite3_index_info *info)
{
    char codes[2 * MAX_ARGS + 1];
    int n = 0;
    double cost = 1e6, rows = 1e6;
    bool unique = false, start_lo = false, start_hi = false;

    (void)base;
    for (int i = 0; i < info->nConstraint && n < MAX_ARGS; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        char col, op;

        if (!c->usable)
            continue;
        switch (c->iColumn) {
        case -1:
            col = 'r';
            break;
        case COL_START:
            col = 's';
            break;
        case COL_PROCESS:
            col = 'p';
            break;
        case COL_OP:
            col = 'o';
            break;
        default:
            continue;
        }
        switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ:
            op = '=';
            break;
        case SQLITE_INDEX_CONSTRAINT_GT:
            op = '>';
            break;
        case SQLITE_INDEX_CONSTRAINT_GE:
            op = 'g';
            break;
        case SQLITE_INDEX_CONSTRAINT_LT:
            op = '<';
            break;
        case SQLITE_INDEX_CONSTRAINT_LE:
            op = 'l';
            break;
        default:
            continue;
        }
        if ((col == 'p' || col == 'o') && op != '=')
            continue;
        codes[2 * n] = col;
        codes[2 * n + 1] = op;
        info->aConstraintUsage[i].argvIndex = ++n;
        info->aConstraintUsage[i].omit = 0;
        if (col == 'r' && op == '=')
            unique = true;
        else if (col == 'r')
            cost /= 3, rows /= 3;
        else if (col == 's') {
            start_lo |= op == '=' || op == '>' || op == 'g';
            start_hi |= op == '=' || op == '<' || op == 'l';
        } else if (col == 'p')
            cost /= 2, rows /= 4;
        else
            cost /= 4, rows /= 8;
    }
    if (start_lo)
        cost /= 4, rows /= 4;
    if (start_hi)
        cost /= 4, rows /= 4;
    if (unique) {
        cost = 10;
        rows = 1;
        info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
    }
    codes[2 * n] = '\0';
    info->estimatedCost = cost;
    info->estimatedRows = (sqlite3_int64)rows;
    if (n > 0 && (info->idxStr = sqlite3_mprintf("%s", codes)) == NULL)
        return SQLITE_NOMEM;
    info->needToFreeIdxStr = n > 0;
    /* Rows come out in rowid order. */
    if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == -1 && !info->aOrderBy[0].desc)
        info->orderByConsumed = 1;
    return SQLITE_OK;
}

static int vtab_open(sqlite3_vtab *base, sqlite3_vtab_cursor **out)
{
    struct vtab *t = (struct vtab *)base;
    struct vcursor *c;
    char *sql;
    int rc;

    if ((c = sqlite3_malloc(sizeof(*c))) == NULL)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof(*c));
    c->ents = sqlite3_malloc(BLOCK_ENTRIES * sizeof(*c->ents));
    sql =
        sqlite3_mprintf("SELECT id, n, data, restarts FROM \"%w\".\"%w\" WHERE id BETWEEN ?1 AND ?2"
                        " AND id + n > ?3 AND max_start >= ?4 AND min_start <= ?5"
                        " AND max_proc >= ?6 AND min_proc <= ?7 AND (proc_mask & ?8) != 0"
                        " AND (op_mask & ?9) != 0 ORDER BY id",
                        t->schema, t->blocks);
    if (c->ents == NULL || sql == NULL) {
        rc = SQLITE_NOMEM;
        goto fail;
    }
    rc = sqlite3_prepare_v2(t->db, sql, -1, &c->st, NULL);
    sqlite3_free(sql);
    /* length(data) reads the size from the row's header, not the blob. */
    sql = sqlite3_mprintf("SELECT id, n, restarts, length(data) FROM \"%w\".\"%w\""
                          " WHERE id <= ?1 ORDER BY id DESC LIMIT 1",
                          t->schema, t->blocks);
    if (rc == SQLITE_OK)
        rc = sql == NULL ? SQLITE_NOMEM : sqlite3_prepare_v2(t->db, sql, -1, &c->pt, NULL);
    sqlite3_free(sql);
    sql = NULL;
    if (rc != SQLITE_OK) {
        sqlite3_free(base->zErrMsg);
        base->zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(t->db));
        goto fail;
    }
    c->first = -1;
    c->seg = -1;
    *out = &c->base;
    return SQLITE_OK;
fail:
    sqlite3_finalize(c->st);
    sqlite3_free(sql);
    sqlite3_free(c->ents);
    sqlite3_free(c);
    return rc;
}

static int vtab_close(sqlite3_vtab_cursor *base)
{
    struct vcursor *c = (struct vcursor *)base;

    sqlite3_finalize(c->st);
    sqlite3_finalize(c->pt);
    sqlite3_blob_close(c->blob);
    sqlite3_free(c->ents);
    sqlite3_free(c->data);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* Narrows [*lo, *hi] by `column op v`; false when nothing can match. */
static bool narrow(char op, sqlite3_value *v, int64_t *lo, int64_t *hi)
{
    int64_t a, b; /* what v allows: [a, b] */

    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: {
        int64_t x = sqlite3_value_int64(v);
        a = b = x;
        if (op == '>') {
            if (x == INT64_MAX)
                return false;
            a = x + 1;
        } else if (op == '<') {
            if (x == INT64_MIN)
                return false;
            b = x - 1;
        }
        break;
    }
    case SQLITE_FLOAT: {
        /* Rounded outwards: a row on the rounded bound is checked again by SQLite. */
        double d = sqlite3_value_double(v);
        if (isnan(d))
            return false;
        a = d <= -9.2e18 ? INT64_MIN : d >= 9.2e18 ? INT64_MAX : (int64_t)floor(d);
        b = d <= -9.2e18 ? INT64_MIN : d >= 9.2e18 ? INT64_MAX : (int64_t)ceil(d);
        break;
    }
    case SQLITE_NULL:
        return false; /* a comparison with NULL is never true */
    default:
        return true; /* text, blobs: left to SQLite */
    }
    if (op == '=' || op == '>' || op == 'g')
        *lo = a > *lo ? a : *lo;
    if (op == '=' || op == '<' || op == 'l')
        *hi = b < *hi ? b : *hi;
    return *lo <= *hi;
}

/* `column = v` for an exact-match column; false when nothing can match. */
static bool narrow_eq(sqlite3_value *v, bool *has, int64_t *x)
{
    int64_t want;

    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER:
        want = sqlite3_value_int64(v);
        break;
    case SQLITE_NULL:
        return false;
    case SQLITE_FLOAT: {
        double d = sqlite3_value_double(v);
        if (!(d >= -9.2e18 && d <= 9.2e18) || d != floor(d))
            return true; /* left to SQLite (no int64 equals it, or it's not worth it) */
        want = (int64_t)d;
        break;
    }
    default:
        return true;
    }
    if (*has && *x != want)
        return false;
    *has = true;
    *x = want;
    return true;
}

static bool vcursor_match(const struct vcursor *c, const struct block_entry *e, int64_t rowid)
{
    const struct vfilter *f = &c->f;

    return rowid >= f->id_lo && rowid <= f->id_hi && e->start_ns >= f->start_lo &&
           e->start_ns <= f->start_hi && (!f->has_proc || e->process_id == f->proc) &&
           (!f->has_op || e->op_id == f->op);
}

static int vcursor_corrupt(struct vcursor *c)
{
    sqlite3_free(c->base.pVtab->zErrMsg);
    c->base.pVtab->zErrMsg =
        sqlite3_mprintf("tracectl_blocks: the block of rowid %lld is damaged", (long long)c->first);
    c->n = 0;
    c->first = -1;
    return SQLITE_CORRUPT;
}

/* Room for a block of len bytes in c->data. */
static int vcursor_reserve(struct vcursor *c, size_t len)
{
    if (len > c->data_cap) {
        uint8_t *p = sqlite3_realloc64(c->data, len);
        if (p == NULL)
            return SQLITE_NOMEM;
        c->data = p;
        c->data_cap = len;
    }
    return SQLITE_OK;
}

/*
 * The restarts column of the current block (of c->n entries, len bytes).
 * Without it well formed (a damaged row: the wrong length, a first offset
 * not 0, offsets not increasing or past the data), the block is read from
 * its start.
 */
static void vcursor_restarts(struct vcursor *c, const uint8_t *r, size_t rlen, size_t len)
{
    c->has_restarts = r != NULL && rlen == 4 * (size_t)block_restarts(c->n);
    for (uint32_t k = 0; c->has_restarts && k < rlen / 4; k++) {
        c->restart[k] = (uint32_t)r[4 * k] | (uint32_t)r[4 * k + 1] << 8 |
                        (uint32_t)r[4 * k + 2] << 16 | (uint32_t)r[4 * k + 3] << 24;
        c->has_restarts =
            k == 0 ? c->restart[0] == 0 : c->restart[k] > c->restart[k - 1] && c->restart[k] < len;
    }
}

/* Takes the block on the statement's row as the current one (a copy of its bytes). */
static int vcursor_load(struct vcursor *c)
{
    int64_t id = sqlite3_column_int64(c->st, 0), n = sqlite3_column_int64(c->st, 1);
    const void *data = sqlite3_column_blob(c->st, 2);
    size_t len = (size_t)sqlite3_column_bytes(c->st, 2);
    const uint8_t *r = sqlite3_column_blob(c->st, 3);
    size_t rlen = (size_t)sqlite3_column_bytes(c->st, 3);
    int rc;

    c->first = id;
    c->seg = -1;
    if (n < 1 || n > BLOCK_ENTRIES || id < 1 || id > INT64_MAX - n)
        return vcursor_corrupt(c);
    if ((rc = vcursor_reserve(c, len)) != SQLITE_OK)
        return rc;
    if (len > 0)
        memcpy(c->data, data, len);
    block_dec_init(&c->dec, c->data, len, (uint32_t)n);
    c->lo = c->decoded = 0;
    c->n = (uint32_t)n;
    vcursor_restarts(c, r, rlen, len);
    return SQLITE_OK;
}

/*
 * A lookup of one rowid: the block that holds it, and of its bytes only the
 * restart interval before the entry, read from the blob (the rest of it,
 * which may span several overflow pages, is neither read nor copied).
 * Returns SQLITE_OK with c->n == 0 when no block holds id, and
 * SQLITE_NOTFOUND when the block's row is not as written (damaged
 * restarts): the caller then reads it whole, as a scan does.
 */
static int vcursor_point(struct vcursor *c, int64_t id)
{
    struct vtab *t = (struct vtab *)c->base.pVtab;
    int64_t first, n, len;
    uint32_t k, off, end;
    int rc;

    c->n = 0;
    c->first = -1;
    c->seg = -1;
    sqlite3_reset(c->pt);
    sqlite3_bind_int64(c->pt, 1, id);
    if ((rc = sqlite3_step(c->pt)) == SQLITE_DONE)
        return SQLITE_OK;
    if (rc != SQLITE_ROW)
        return SQLITE_NOTFOUND;
    first = sqlite3_column_int64(c->pt, 0);
    n = sqlite3_column_int64(c->pt, 1);
    len = sqlite3_column_int64(c->pt, 3);
    if (n < 1 || n > BLOCK_ENTRIES || first < 1 || first > INT64_MAX - n || len < 1 ||
        len > INT32_MAX)
        return SQLITE_NOTFOUND;
    if (id >= first + n)
        return SQLITE_OK; /* between blocks: no such rowid */
    c->n = (uint32_t)n;
    vcursor_restarts(c, sqlite3_column_blob(c->pt, 2), (size_t)sqlite3_column_bytes(c->pt, 2),
                     (size_t)len);
    k = (uint32_t)(id - first) / BLOCK_RESTART;
    off = c->has_restarts ? c->restart[k] : 0;
    end = c->has_restarts && k + 1 < block_restarts(c->n) ? c->restart[k + 1] : (uint32_t)len;
    c->n = 0;
    if (!c->has_restarts || off >= end || end > (uint64_t)len ||
        vcursor_reserve(c, (size_t)len) != SQLITE_OK)
        return SQLITE_NOTFOUND;
    rc = c->blob != NULL
             ? sqlite3_blob_reopen(c->blob, first)
             : sqlite3_blob_open(t->db, t->schema, t->blocks, "data", first, 0, &c->blob);
    if (rc != SQLITE_OK || sqlite3_blob_bytes(c->blob) != len ||
        sqlite3_blob_read(c->blob, c->data + off, (int)(end - off), (int)off) != SQLITE_OK) {
        sqlite3_blob_close(c->blob); /* a failed reopen leaves it unusable */
        c->blob = NULL;
        return SQLITE_NOTFOUND;
    }
    /* The decoder sees the block as ending where the interval does. */
    block_dec_init(&c->dec, c->data, end, (uint32_t)n);
    if (block_dec_seek(&c->dec, k, off) < 0)
        return SQLITE_NOTFOUND;
    c->first = first;
    c->n = (uint32_t)n;
    c->seg = (int)k;
    c->lo = c->decoded = k * BLOCK_RESTART;
    return SQLITE_OK;
}

/* Decodes the current block up to entry i; after its last entry, checks nothing follows. */
static int vcursor_decode(struct vcursor *c, uint32_t i)
{
    struct block_entry end;
    uint32_t k = i / BLOCK_RESTART;

    /* Behind what was decoded, or past the next restart: seek. */
    if (c->has_restarts && (i < c->lo || k * BLOCK_RESTART > c->decoded)) {
        if (block_dec_seek(&c->dec, k, c->restart[k]) < 0)
            return vcursor_corrupt(c);
        c->lo = c->decoded = k * BLOCK_RESTART;
    } else if (i < c->lo) {
        block_dec_init(&c->dec, c->data, (size_t)(c->dec.end - c->dec.start), c->n);
        c->lo = c->decoded = 0;
    }
    while (c->decoded <= i) {
        if (block_dec_next(&c->dec, &c->ents[c->decoded]) != 1)
            return vcursor_corrupt(c);
        if (++c->decoded == c->n && block_dec_next(&c->dec, &end) != 0)
            return vcursor_corrupt(c);
    }
    return SQLITE_OK;
}

/* Moves to the first matching row at or after c->i, loading blocks as needed. */
static int vcursor_seek(struct vcursor *c)
{
    int rc;

    for (;;) {
        for (; c->i < c->n; c->i++) {
            if (c->first + c->i > c->f.id_hi) { /* rowids only grow: nothing more matches */
                c->eof = true;
                c->scanning = false;
                return SQLITE_OK;
            }
            if ((rc = vcursor_decode(c, c->i)) != SQLITE_OK)
                return rc;
            if (vcursor_match(c, &c->ents[c->i], c->first + c->i))
                return SQLITE_OK;
        }
        if (!c->scanning || (rc = sqlite3_step(c->st)) == SQLITE_DONE) {
            c->eof = true;
            c->scanning = false;
            return SQLITE_OK;
        }
        if (rc != SQLITE_ROW) {
            c->scanning = false;
            c->n = 0;
            sqlite3_free(c->base.pVtab->zErrMsg);
            c->base.pVtab->zErrMsg =
                sqlite3_mprintf("%s", sqlite3_errmsg(((struct vtab *)c->base.pVtab)->db));
            return rc;
        }
        if ((rc = vcursor_load(c)) != SQLITE_OK)
            return rc;
        c->i = c->f.id_lo > c->first ? (uint32_t)(c->f.id_lo - c->first) : 0;
    }
}

static int vtab_filter(sqlite3_vtab_cursor *base, int idx, const char *codes, int argc,
                       sqlite3_value **argv)
{
    struct vcursor *c = (struct vcursor *)base;
    struct vfilter *f = &c->f;
    sqlite3_stmt *st = c->st;
    bool ok = true;

    (void)idx;
    *f = (struct vfilter){
        .id_lo = 1, .id_hi = INT64_MAX, .start_lo = INT64_MIN, .start_hi = INT64_MAX};
    for (int k = 0; k < argc && ok && codes != NULL && codes[2 * k] != '\0'; k++) {
        char op = codes[2 * k + 1];
        switch (codes[2 * k]) {
        case 'r':
            ok = narrow(op, argv[k], &f->id_lo, &f->id_hi);
            break;
        case 's':
            ok = narrow(op, argv[k], &f->start_lo, &f->start_hi);
            break;
        case 'p':
            ok = narrow_eq(argv[k], &f->has_proc, &f->proc);
            break;
        case 'o':
            ok = narrow_eq(argv[k], &f->has_op, &f->op);
            break;
        }
    }
    sqlite3_reset(st);
    c->scanning = false;
    c->eof = false;
    if (!ok) {
        c->eof = true;
        return SQLITE_OK;
    }
    /* The block decoded last holds the rowids asked for: no need to read it again. */
    if (c->n > 0 && f->id_lo >= c->first && f->id_hi < c->first + c->n &&
        (c->seg < 0 ||
         (f->id_lo == f->id_hi && (f->id_lo - c->first) / BLOCK_RESTART == (int64_t)c->seg))) {
        c->i = (uint32_t)(f->id_lo - c->first);
        return vcursor_seek(c);
    }
    /* One rowid (a join on rowid, as the reports' top lists do): its restart interval only. */
    if (f->id_lo == f->id_hi) {
        int rc = vcursor_point(c, f->id_lo);
        if (rc == SQLITE_OK) {
            if (c->n == 0) {
                c->eof = true;
                return SQLITE_OK;
            }
            c->i = (uint32_t)(f->id_lo - c->first);
            return vcursor_seek(c);
        }
    }
    c->n = c->i = 0;
    c->seg = -1;
    /* A block holds at most BLOCK_ENTRIES rowids from its id on. */
    sqlite3_bind_int64(st, 1, f->id_lo > INT64_MIN + BLOCK_ENTRIES ? f->id_lo - BLOCK_ENTRIES : 0);
    sqlite3_bind_int64(st, 2, f->id_hi);
    sqlite3_bind_int64(st, 3, f->id_lo);
    sqlite3_bind_int64(st, 4, f->start_lo);
    sqlite3_bind_int64(st, 5, f->start_hi);
    sqlite3_bind_int64(st, 6, f->has_proc ? f->proc : INT64_MIN);
    sqlite3_bind_int64(st, 7, f->has_proc ? f->proc : INT64_MAX);
    sqlite3_bind_int64(st, 8,
                       f->has_proc ? (int64_t)((uint64_t)1 << ((uint64_t)f->proc & 63)) : -1);
    sqlite3_bind_int64(st, 9, f->has_op ? (int64_t)((uint64_t)1 << ((uint64_t)f->op & 63)) : -1);
    c->scanning = true;
    return vcursor_seek(c);
}

static int vtab_next(sqlite3_vtab_cursor *base)
{
    struct vcursor *c = (struct vcursor *)base;

    c->i++;
    return vcursor_seek(c);
}

static int vtab_eof(sqlite3_vtab_cursor *base)
{
    return ((struct vcursor *)base)->eof;
}

static int vtab_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int col)
{
    struct vcursor *c = (struct vcursor *)base;
    const struct block_entry *e = &c->ents[c->i];

    switch (col) {
    case COL_PROCESS:
        sqlite3_result_int64(ctx, e->process_id);
        break;
    case COL_STEP:
        sqlite3_result_int64(ctx, e->step);
        break;
    case COL_OP:
        sqlite3_result_int64(ctx, e->op_id);
        break;
    case COL_DEVICE:
        if (e->device_id != 0)
            sqlite3_result_int64(ctx, e->device_id);
        break; /* else NULL, the default */
    case COL_START:
        sqlite3_result_int64(ctx, e->start_ns);
        break;
    case COL_DUR:
        sqlite3_result_int64(ctx, e->dur_ns);
        break;
    case COL_ELEMENTS:
        if (e->has_elements)
            sqlite3_result_int64(ctx, e->elements);
        break;
    case COL_MEM:
        sqlite3_result_int64(ctx, e->mem_bytes);
        break;
    case COL_SHAPE:
        if (e->shape_id != 0)
            sqlite3_result_int64(ctx, e->shape_id);
        break;
    }
    return SQLITE_OK;
}

static int vtab_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *rowid)
{
    struct vcursor *c = (struct vcursor *)base;

    *rowid = c->first + c->i;
    return SQLITE_OK;
}

static const sqlite3_module vtab_module = {
    .iVersion = 0,
    .xCreate = vtab_create,
    .xConnect = vtab_connect,
    .xBestIndex = vtab_best_index,
    .xDisconnect = vtab_disconnect,
    .xDestroy = vtab_disconnect,
    .xOpen = vtab_open,
    .xClose = vtab_close,
    .xFilter = vtab_filter,
    .xNext = vtab_next,
    .xEof = vtab_eof,
    .xColumn = vtab_column,
    .xRowid = vtab_rowid,
};

int vtab_register(sqlite3 *db)
{
    return sqlite3_create_module_v2(db, "tracectl_blocks", &vtab_module, NULL, NULL);
}

#ifdef TRACECTL_SQLITE_EXTENSION
/* The entry point `.load tracectl_blocks` finds (from the file name tracectl_blocks.so). */
__attribute__((visibility("default"))) int
sqlite3_tracectlblocks_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);

int sqlite3_tracectlblocks_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
    (void)err;
    SQLITE_EXTENSION_INIT2(api);
    return vtab_register(db);
}
#endif
