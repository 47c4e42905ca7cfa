/*
 * store_apply.c — the rows a job writes in either format; see store_apply.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <sqlite3.h>

#include "ranks.h"
#include "schema.h"
#include "store_apply.h"
#include "store_blocks.h"
#include "store_int.h"
#include "store_rows.h"
#include "util.h"
#include "wsess.h"

/*
 * w's statements both formats use, with their SQL: prepared at opening, or
 * (sql NULL) with the session's first row of their side table. Returns how
 * many; tab has room for APPLY_STMTS.
 */
#define APPLY_STMTS 11
struct apply_stmt {
    sqlite3_stmt **st;
    const char *sql;
};

static size_t apply_stmts(struct wsess *w, struct apply_stmt *tab)
{
    const struct apply_stmt all[APPLY_STMTS] = {
        {&w->shapes.ins, "INSERT INTO shapes(id, out_shape, in_shapes, elements) VALUES (?,?,?,?)"},
        {&w->sql.ins_op, "INSERT INTO ops(id, name, category) VALUES (?,?,?)"},
        {&w->sql.ins_dev, "INSERT INTO devices(id, name) VALUES (?,?)"},
        {&w->sql.ins_proc, "INSERT INTO processes(id, rank, world, pid, uid, host, device,"
                           " started_ns, claimed_pid) VALUES (?,?,?,?,?,?,?,?,?)"},
        {&w->sql.end_proc, "UPDATE processes SET ended_ns = ?, bye = ?, dropped = ? WHERE id = ?"},
        {&w->sql.ins_meta, "INSERT OR REPLACE INTO meta(process_id, key, value) VALUES (?,?,?)"},
        {&w->sql.ins_counters, "INSERT OR REPLACE INTO process_counters(process_id, recorded,"
                               " dropped, sent, acked, final) VALUES (?,?,?,?,?,?)"},
        {&w->sql.ins_opdrop, "INSERT OR REPLACE INTO process_op_drops(process_id, op_id, calls,"
                             " total_ns, bytes, counted, counted_ns, counted_bytes)"
                             " VALUES (?,?,?,?,?,?,?,?)"},
        {&w->sql.ins_ext, NULL},
        {&w->sql.ins_link, NULL},
        {&w->sql.ins_span, NULL},
    };

    memcpy(tab, all, sizeof(all));
    return UTIL_ARRAY_LEN(all);
}

int store_apply_prepare(struct store *s, struct wsess *w)
{
    struct apply_stmt tab[APPLY_STMTS];
    size_t n = apply_stmts(w, tab);

    for (size_t i = 0; i < n; i++) {
        int rc = tab[i].sql == NULL
                     ? SQLITE_OK
                     : sqlite3_prepare_v3(w->db, tab[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
                                          tab[i].st, NULL);

        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    return 0;
}

void store_apply_close(struct wsess *w)
{
    struct apply_stmt tab[APPLY_STMTS];
    size_t n = apply_stmts(w, tab);

    for (size_t i = 0; i < n; i++) {
        sqlite3_finalize(*tab[i].st);
        *tab[i].st = NULL;
    }
    free(w->shapes.elements);
    w->shapes.elements = NULL;
    w->shapes.cap = 0;
}

/* Room for shape ids up to id (grown by doubling), new ones STORE_SHAPE_NONE. 0 or -ENOMEM. */
static int shapes_room(struct wsess *w, size_t id)
{
    size_t cap = w->shapes.cap ? w->shapes.cap : 64;
    uint64_t *p;

    if (id < w->shapes.cap)
        return 0;
    while (cap <= id)
        cap *= 2;
    if ((p = realloc(w->shapes.elements, cap * sizeof(*p))) == NULL)
        return -ENOMEM;
    for (size_t i = w->shapes.cap; i < cap; i++)
        p[i] = STORE_SHAPE_NONE;
    w->shapes.elements = p;
    w->shapes.cap = cap;
    return 0;
}

int store_apply_load_shapes(struct store *s, struct wsess *w)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(w->db, "SELECT id, elements FROM shapes", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, w->db, rc, "load shapes");
    for (size_t i = 0; i < w->shapes.cap; i++)
        w->shapes.elements[i] = STORE_SHAPE_NONE;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);

        if (id <= 0 || id > UINT32_MAX) {
            rc = SQLITE_CORRUPT;
            break;
        }
        if (shapes_room(w, (size_t)id) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        w->shapes.elements[id] = (uint64_t)sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return store_check(s, w->db, rc, "load shapes");
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v != NULL)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_int_or_null(sqlite3_stmt *st, int i, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* The product of a canonical msgpack shape's dimensions (0 for none), saturating. */
static uint64_t shape_product(const char *blob, uint32_t len)
{
    msgpack_unpacked u;
    uint64_t p = 0;

    msgpack_unpacked_init(&u);
    if (len > 0 && msgpack_unpack_next(&u, blob, len, NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size > 0) {
        p = 1;
        for (uint32_t i = 0; i < u.data.via.array.size; i++) {
            uint64_t d = u.data.via.array.ptr[i].via.u64;
            p = d != 0 && p > (uint64_t)INT64_MAX / d ? (uint64_t)INT64_MAX : p * d;
        }
    }
    msgpack_unpacked_destroy(&u);
    return p;
}

/* The shapes row of entry i from the entry's bytes (wsess_shape_id's slow path). */
int64_t store_apply_shape_new(struct store *s, struct wsess *w, const struct store_job *job,
                              size_t i)
{
    const struct proto_batch *b = &job->u.batch.b;
    const struct proto_entry *e = &b->entries[i];
    uint32_t id = job->u.batch.shape_ids[i];
    sqlite3_stmt *st = w->shapes.ins;
    uint64_t elements;

    if (shapes_room(w, id) < 0)
        return -1;
    elements = shape_product(b->blob + e->out_off, e->out_len);
    sqlite3_bind_int64(st, 1, id);
    if (e->out_len)
        sqlite3_bind_blob(st, 2, b->blob + e->out_off, (int)e->out_len, SQLITE_STATIC);
    if (e->in_len)
        sqlite3_bind_blob(st, 3, b->blob + e->in_off, (int)e->in_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (int64_t)elements);
    if (store_step(s, w->db, st, "insert shape") < 0)
        return -1;
    w->shapes.elements[id] = elements;
    return id;
}

static void bind_ext(sqlite3_stmt *st, int i, bool has, int64_t v)
{
    if (has)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* Prepares the insert of a side table (created just before). 0 or a negative errno. */
static int side_prepare(struct store *s, struct wsess *w, sqlite3_stmt **st, const char *sql)
{
    int rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);

    return rc == SQLITE_OK ? 0 : store_check(s, w->db, rc, "prepare");
}

/*
 * Steps the insert of a side table. A failed insert drops the statement, so
 * that the next one prepares it (and creates the table) again, as after a
 * rolled-back transaction it must.
 */
static int side_step(struct store *s, struct wsess *w, sqlite3_stmt **st, const char *what)
{
    int rc = store_step(s, w->db, *st, what);

    if (rc < 0) {
        sqlite3_finalize(*st);
        *st = NULL;
    }
    return rc;
}

/*
 * Stores the ext map of the entry at rowid in the entry_ext side table,
 * creating the table with the session's first ext map: files without ext
 * maps never have it. Unsigned values keep their 64 bits in SQLite's int64.
 */
static int ext_row(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    sqlite3_stmt *st;
    int rc;

    if (w->sql.ins_ext == NULL) {
        if (store_exec(s, w->db, schema_entry_ext_sql, "create entry_ext") < 0)
            return -EIO;
        if ((rc = side_prepare(s, w, &w->sql.ins_ext,
                               "INSERT INTO entry_ext(entry_rowid, stream, peer, tag, comm, seq,"
                               " checksum, comm_size) VALUES (?,?,?,?,?,?,?,?)")) < 0)
            return rc;
    }
    st = w->sql.ins_ext;
    sqlite3_bind_int64(st, 1, rowid);
    bind_ext(st, 2, x->has & PROTO_EXT_STREAM, (int64_t)x->stream);
    bind_ext(st, 3, x->has & PROTO_EXT_PEER, (int64_t)x->peer);
    bind_ext(st, 4, x->has & PROTO_EXT_TAG, x->tag);
    bind_ext(st, 5, x->has & PROTO_EXT_COMM, (int64_t)x->comm);
    bind_ext(st, 6, x->has & PROTO_EXT_SEQ, (int64_t)x->seq);
    bind_ext(st, 7, x->has & PROTO_EXT_CHECKSUM, (int64_t)x->checksum);
    bind_ext(st, 8, x->has & PROTO_EXT_COMM_SIZE, (int64_t)x->comm_size);
    return side_step(s, w, &w->sql.ins_ext, "insert entry ext");
}

/* The ext keys that go to entry_link and entry_span rather than entry_ext. */
#define STORE_EXT_LINKS (PROTO_EXT_ID | PROTO_EXT_PARENT | PROTO_EXT_LAUNCHER)
#define STORE_EXT_APART (STORE_EXT_LINKS | PROTO_EXT_SPAN)

/*
 * Stores the links of the entry at rowid (id, parent, launcher) in the
 * entry_link side table, created with the session's first link, as
 * ext_row() does for entry_ext.
 */
static int link_row(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    sqlite3_stmt *st;
    int rc;

    if (w->sql.ins_link == NULL) {
        if (store_exec(s, w->db, schema_entry_link_sql, "create entry_link") < 0)
            return -EIO;
        if ((rc = side_prepare(s, w, &w->sql.ins_link,
                               "INSERT INTO entry_link(entry_rowid, id, parent, launcher)"
                               " VALUES (?,?,?,?)")) < 0)
            return rc;
    }
    st = w->sql.ins_link;
    sqlite3_bind_int64(st, 1, rowid);
    bind_ext(st, 2, x->has & PROTO_EXT_ID, (int64_t)x->id);
    bind_ext(st, 3, x->has & PROTO_EXT_PARENT, (int64_t)x->parent);
    bind_ext(st, 4, x->has & PROTO_EXT_LAUNCHER, (int64_t)x->launcher);
    return side_step(s, w, &w->sql.ins_link, "insert entry link");
}

/* Stores the span of the entry at rowid in entry_span, created with the session's first. */
static int span_row(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    int rc;

    if (w->sql.ins_span == NULL) {
        if (store_exec(s, w->db, schema_entry_span_sql, "create entry_span") < 0)
            return -EIO;
        if ((rc = side_prepare(s, w, &w->sql.ins_span,
                               "INSERT INTO entry_span(entry_rowid, span) VALUES (?,?)")) < 0)
            return rc;
    }
    sqlite3_bind_int64(w->sql.ins_span, 1, rowid);
    sqlite3_bind_int64(w->sql.ins_span, 2, (int64_t)x->span);
    return side_step(s, w, &w->sql.ins_span, "insert entry span");
}

/* The ext map of the entry at rowid: its links, its span and its other keys, each in its
 * side table. */
int store_apply_ext_rows(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    int rc = 0;

    if ((x->has & ~STORE_EXT_APART) != 0)
        rc = ext_row(s, w, x, rowid);
    if (rc == 0 && (x->has & STORE_EXT_LINKS) != 0)
        rc = link_row(s, w, x, rowid);
    if (rc == 0 && (x->has & PROTO_EXT_SPAN) != 0)
        rc = span_row(s, w, x, rowid);
    return rc;
}

/* A batch's entries go to the format's write path. */
static int apply_batch(struct store *s, struct wsess *w, struct store_job *job)
{
    return w->bk.on ? store_blocks_batch(s, w, job) : store_rows_batch(s, w, job);
}

static int apply_meta(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->sql.ins_meta;

    for (size_t i = 0; i < job->u.meta.n; i++) {
        const struct proto_kv *kv = &job->u.meta.kv[i];

        if (ranks_meta(w->ranks, job->u.meta.process_id, kv->key,
                       kv->type == PROTO_V_STR ? kv->v.s : NULL,
                       kv->type == PROTO_V_INT ? kv->v.i : 0, kv->type == PROTO_V_STR) != 0)
            return -ENOMEM;
        sqlite3_bind_int64(st, 1, job->u.meta.process_id);
        sqlite3_bind_text(st, 2, kv->key, -1, SQLITE_STATIC);
        switch (kv->type) {
        case PROTO_V_BOOL:
            sqlite3_bind_int(st, 3, kv->v.b);
            break;
        case PROTO_V_INT:
            sqlite3_bind_int64(st, 3, kv->v.i);
            break;
        case PROTO_V_FLOAT:
            sqlite3_bind_double(st, 3, kv->v.f);
            break;
        case PROTO_V_STR:
            sqlite3_bind_text(st, 3, kv->v.s, -1, SQLITE_STATIC);
            break;
        default:
            sqlite3_bind_null(st, 3);
            break;
        }
        if (store_step(s, w->db, st, "insert meta") < 0)
            return -EIO;
    }
    return 0;
}

static int apply_process(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->sql.ins_proc;

    if (ranks_process(w->ranks, job->u.process.id, job->u.process.world) != 0)
        return -ENOMEM;
    sqlite3_bind_int64(st, 1, job->u.process.id);
    bind_int_or_null(st, 2, job->u.process.rank);
    bind_int_or_null(st, 3, job->u.process.world);
    bind_int_or_null(st, 4, job->u.process.pid);
    bind_int_or_null(st, 5, job->u.process.uid);
    bind_text_or_null(st, 6, job->u.process.host);
    bind_text_or_null(st, 7, job->u.process.device);
    sqlite3_bind_int64(st, 8, job->u.process.started_ns);
    bind_int_or_null(st, 9, job->u.process.claimed_pid);
    return store_step(s, w->db, st, "insert process");
}

static int apply_process_end(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->sql.end_proc;

    ranks_process_end(w->ranks, job->u.process_end.process_id);
    sqlite3_bind_int64(st, 1, job->u.process_end.ended_ns);
    sqlite3_bind_int(st, 2, job->u.process_end.bye);
    sqlite3_bind_int64(st, 3, (int64_t)job->u.process_end.dropped);
    sqlite3_bind_int64(st, 4, job->u.process_end.process_id);
    return store_step(s, w->db, st, "end process");
}

static int apply_counters(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_counters *k = &job->u.counters.k;
    sqlite3_stmt *st = w->sql.ins_counters;

    sqlite3_bind_int64(st, 1, job->u.counters.process_id);
    sqlite3_bind_int64(st, 2, (int64_t)k->recorded); /* each at most INT64_MAX (proto) */
    sqlite3_bind_int64(st, 3, (int64_t)k->dropped);
    sqlite3_bind_int64(st, 4, (int64_t)k->sent);
    sqlite3_bind_int64(st, 5, (int64_t)k->acked);
    sqlite3_bind_int(st, 6, job->u.counters.final);
    if (store_step(s, w->db, st, "process counters") < 0)
        return -EIO;
    st = w->sql.ins_opdrop;
    for (size_t i = 0; i < k->n_ops; i++) { /* cumulative: each row replaces the last */
        const struct proto_opdrop *d = &k->ops[i];
        sqlite3_bind_int64(st, 1, job->u.counters.process_id);
        sqlite3_bind_int64(st, 2, d->op);
        sqlite3_bind_int64(st, 3, (int64_t)d->calls);
        sqlite3_bind_int64(st, 4, (int64_t)d->ns);
        sqlite3_bind_int64(st, 5, (int64_t)d->bytes);
        sqlite3_bind_int64(st, 6, (int64_t)d->counted);
        sqlite3_bind_int64(st, 7, (int64_t)d->counted_ns);
        sqlite3_bind_int64(st, 8, (int64_t)d->counted_bytes);
        if (store_step(s, w->db, st, "process op drops") < 0)
            return -EIO;
    }
    return 0;
}

static int apply_name(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = job->type == STORE_OP ? w->sql.ins_op : w->sql.ins_dev;

    if (job->type == STORE_OP &&
        ranks_op(w->ranks, job->u.name.id, job->u.name.name, job->u.name.category) != 0)
        return -ENOMEM;
    sqlite3_bind_int64(st, 1, job->u.name.id);
    sqlite3_bind_text(st, 2, job->u.name.name, -1, SQLITE_STATIC);
    if (job->type == STORE_OP)
        sqlite3_bind_text(st, 3, job->u.name.category, -1, SQLITE_STATIC);
    return store_step(s, w->db, st, job->type == STORE_OP ? "insert op" : "insert device");
}

int store_apply_in_txn(struct store *s, struct wsess *w, struct store_job *job)
{
    if (wsess_begin(s, w) < 0)
        return -EIO;
    switch (job->type) {
    case STORE_PROCESS:
        return apply_process(s, w, job);
    case STORE_OP:
    case STORE_DEVICE:
        return apply_name(s, w, job);
    case STORE_META:
        return apply_meta(s, w, job);
    case STORE_BATCH:
        return apply_batch(s, w, job);
    case STORE_PROCESS_END:
        return apply_process_end(s, w, job);
    case STORE_COUNTERS:
        return apply_counters(s, w, job);
    default:
        return -EINVAL;
    }
}
