/* sink_rows.c — see sink_rows.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_rows.h"
#include "vtab.h"

/* ---- RowBinary -------------------------------------------------------------- */

static bool sink_buf_room(struct sink_buf *b, size_t add)
{
    char *p;
    size_t cap;

    if (b->oom)
        return false;
    if (b->len + add <= b->cap)
        return true;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->len + add)
        cap *= 2;
    if ((p = realloc(b->data, cap)) == NULL) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void sink_buf_bytes(struct sink_buf *b, const void *p, size_t n)
{
    if (n > 0 && sink_buf_room(b, n)) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }
}

void sink_buf_u8(struct sink_buf *b, uint8_t v)
{
    sink_buf_bytes(b, &v, 1);
}

void sink_buf_u32(struct sink_buf *b, uint32_t v)
{
    uint8_t le[4];

    for (int i = 0; i < 4; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    sink_buf_bytes(b, le, 4);
}

void sink_buf_u64(struct sink_buf *b, uint64_t v)
{
    uint8_t le[8];

    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    sink_buf_bytes(b, le, 8);
}

void sink_buf_leb(struct sink_buf *b, uint64_t v)
{
    do {
        sink_buf_u8(b, (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
        v >>= 7;
    } while (v != 0);
}

void sink_buf_str(struct sink_buf *b, const char *s, size_t n)
{
    sink_buf_leb(b, n);
    sink_buf_bytes(b, s, n);
}

void sink_buf_free(struct sink_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static void sink_buf_col_str(struct sink_buf *b, sqlite3_stmt *st, int i)
{
    sink_buf_str(b, (const char *)sqlite3_column_text(st, i), (size_t)sqlite3_column_bytes(st, i));
}

/* A Nullable column: NULL, or its 64 bits (unsigned keys are stored as the int64 of their bits). */
static void sink_buf_col_null64(struct sink_buf *b, sqlite3_stmt *st, int i)
{
    bool null = sqlite3_column_type(st, i) == SQLITE_NULL;

    sink_buf_u8(b, null);
    if (!null)
        sink_buf_u64(b, (uint64_t)sqlite3_column_int64(st, i));
}

/* ---- the file ----------------------------------------------------------------- */

static int sink_rows_has(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return -EIO;
    return rc == SQLITE_ROW;
}

int sink_rows_open(struct sink_reader *r, const char *path)
{
    int rc;

    memset(r, 0, sizeof(*r));
    rc = sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_CANTOPEN) {
        sink_rows_close(r);
        return -ENOENT;
    }
    if (rc != SQLITE_OK || vtab_register(r->db) != SQLITE_OK) {
        sink_rows_close(r);
        return -EIO;
    }
    sqlite3_busy_timeout(r->db, 5000);
    rc = sink_rows_has(r->db,
                       "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'blocks'");
    if (rc < 0) {
        sink_rows_close(r);
        return -EIO;
    }
    r->blocks = rc == 1;
    /* a file being created has its tables one by one (top_mem last): as good as none till then */
    rc = sink_rows_has(r->db, "SELECT 1 FROM sqlite_master WHERE name = 'top_mem'");
    if (rc != 1) {
        sink_rows_close(r);
        return rc < 0 ? -EIO : -ENOENT;
    }
    return 0;
}

static void sink_names_free(struct sink_names *t);

void sink_rows_close(struct sink_reader *r)
{
    if (r->db == NULL)
        return;
    sqlite3_finalize(r->rows);
    sqlite3_close(r->db);
    sink_names_free(&r->ops);
    sink_names_free(&r->devices);
    sink_names_free(&r->procs);
    sink_names_free(&r->shapes);
    memset(r, 0, sizeof(*r));
}

#define ROWS_COLUMNS                                                                               \
    "SELECT e.rowid, e.process_id, e.step, e.op_id, e.device_id, e.start_ns, e.dur_ns,"            \
    " e.elements, e.mem_bytes, e.shape_id"
#define ROWS_EXT      ", x.stream, x.peer, x.tag, x.comm, x.seq"
#define ROWS_EXT_SIZE ", x.comm_size"
#define ROWS_NO_EXT   ", NULL, NULL, NULL, NULL, NULL"
#define ROWS_NO_SIZE  ", NULL"
#define ROWS_FROM     " FROM entries e"
#define ROWS_EXT_FROM " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid"
#define ROWS_WHERE    " WHERE e.rowid > ?1 ORDER BY e.rowid LIMIT ?2"

/* The largest id a table of names may have (the daemon's limits are far below). */
#define NAMES_MAX_ID (1u << 24)

static void sink_names_free(struct sink_names *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->name[i]);
        free(t->category[i]);
    }
    free(t->name);
    free(t->category);
    free(t->num);
    memset(t, 0, sizeof(*t));
}

/* Room for ids up to id. 0 or -ENOMEM. */
static int sink_names_grow(struct sink_names *t, size_t id)
{
    size_t n = id + 1;
    char **a, **b;
    int64_t *c;

    if (n <= t->n)
        return 0;
    a = realloc(t->name, n * sizeof(*a));
    if (a != NULL)
        t->name = a;
    b = realloc(t->category, n * sizeof(*b));
    if (b != NULL)
        t->category = b;
    c = realloc(t->num, n * sizeof(*c));
    if (c != NULL)
        t->num = c;
    if (a == NULL || b == NULL || c == NULL)
        return -ENOMEM;
    for (size_t i = t->n; i < n; i++) {
        t->name[i] = t->category[i] = NULL;
        t->num[i] = -1;
    }
    t->n = n;
    return 0;
}

static char *sink_names_text(sqlite3_stmt *st, int i, int *rc)
{
    char *s;

    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    if ((s = strdup((const char *)sqlite3_column_text(st, i))) == NULL)
        *rc = -ENOMEM;
    return s;
}

/* The rows of sql (id, name, category, num; ?1 = the first id not loaded) into t. */
static int sink_names_load(sqlite3 *db, struct sink_names *t, const char *sql)
{
    sqlite3_stmt *st;
    int rc = 0, step;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)t->n);
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 id = sqlite3_column_int64(st, 0);

        if (id < 0 || id >= NAMES_MAX_ID) {
            rc = -EIO;
            break;
        }
        if ((rc = sink_names_grow(t, (size_t)id)) < 0)
            break;
        free(t->name[id]);
        free(t->category[id]);
        t->name[id] = sink_names_text(st, 1, &rc);
        t->category[id] = sink_names_text(st, 2, &rc);
        t->num[id] = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = -EIO;
    sqlite3_finalize(st);
    return rc;
}

/* What the file gained since the last load, in the read transaction. 0, -EIO or -ENOMEM. */
static int sink_names_update(struct sink_reader *r)
{
    int rc =
        sink_names_load(r->db, &r->ops, "SELECT id, name, category, NULL FROM ops WHERE id >= ?1");

    if (rc == 0)
        rc = sink_names_load(r->db, &r->devices,
                             "SELECT id, name, NULL, NULL FROM devices WHERE id >= ?1");
    if (rc == 0)
        rc = sink_names_load(r->db, &r->procs,
                             "SELECT id, NULL, NULL, rank FROM processes WHERE id >= ?1");
    if (rc == 0)
        rc = sink_names_load(r->db, &r->shapes,
                             "SELECT id, NULL, NULL, elements FROM shapes WHERE id >= ?1");
    return rc;
}

/* t's name (or category) of column i's id; "" when NULL or unknown. */
static const char *sink_names_get(const struct sink_names *t, char *const *col, sqlite3_stmt *st,
                                  int i)
{
    sqlite3_int64 id = sqlite3_column_int64(st, i);

    if (sqlite3_column_type(st, i) == SQLITE_NULL || id < 0 || (size_t)id >= t->n ||
        col[id] == NULL)
        return "";
    return col[id];
}

static int64_t sink_names_num(const struct sink_names *t, sqlite3_stmt *st, int i, int64_t none)
{
    sqlite3_int64 id = sqlite3_column_int64(st, i);

    if (sqlite3_column_type(st, i) == SQLITE_NULL || id < 0 || (size_t)id >= t->n || t->num[id] < 0)
        return none;
    return t->num[id];
}

/* The entries query; entry_ext (and its comm_size) appear in a live file at its first ext map. */
static int sink_rows_prepare(struct sink_reader *r)
{
    char sql[1024];
    int ext = sink_rows_has(r->db, "SELECT 1 FROM sqlite_master WHERE name = 'entry_ext'");
    int size = ext == 1 ? sink_rows_has(r->db, "SELECT 1 FROM pragma_table_info('entry_ext')"
                                               " WHERE name = 'comm_size'")
                        : 0;

    if (ext < 0 || size < 0)
        return -EIO;
    snprintf(sql, sizeof(sql), "%s%s%s%s%s%s", ROWS_COLUMNS, ext ? ROWS_EXT : ROWS_NO_EXT,
             size ? ROWS_EXT_SIZE : ROWS_NO_SIZE, ROWS_FROM, ext ? ROWS_EXT_FROM : "", ROWS_WHERE);
    sqlite3_finalize(r->rows);
    r->rows = NULL;
    return sqlite3_prepare_v2(r->db, sql, -1, &r->rows, NULL) == SQLITE_OK ? 0 : -EIO;
}

static void sink_buf_cstr(struct sink_buf *b, const char *s)
{
    sink_buf_str(b, s, strlen(s));
}

/*
 * One entry's row, up to its batch column, which the caller writes. Columns:
 * 0 rowid, 1 process_id, 2 step, 3 op_id, 4 device_id, 5 start_ns, 6 dur_ns,
 * 7 elements, 8 mem_bytes, 9 shape_id, 10-14 stream, peer, tag, comm, seq,
 * 15 comm_size.
 */
static void sink_rows_encode(struct sink_buf *b, const struct sink_reader *r, sqlite3_stmt *st,
                             const struct sink_origin *o)
{
    sink_buf_str(b, o->host, strlen(o->host));
    sink_buf_u64(b, (uint64_t)o->session_id);
    sink_buf_str(b, o->session, strlen(o->session));
    sink_buf_u32(b, (uint32_t)(int32_t)sink_names_num(&r->procs, st, 1, -1)); /* rank */
    sink_buf_u32(b, (uint32_t)sqlite3_column_int64(st, 1));                   /* process_id */
    sink_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 2));                   /* step */
    sink_buf_cstr(b, sink_names_get(&r->ops, r->ops.name, st, 3));
    sink_buf_cstr(b, sink_names_get(&r->ops, r->ops.category, st, 3));
    sink_buf_cstr(b, sink_names_get(&r->devices, r->devices.name, st, 4));
    sink_buf_u64(b, sink_rows_wall(sqlite3_column_int64(st, 5), o->offset));
    sink_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 6)); /* dur_ns */
    /* elements: NULL is its shape's (the product of its out_shape), else 0 */
    sink_buf_u64(b, sqlite3_column_type(st, 7) != SQLITE_NULL
                        ? (uint64_t)sqlite3_column_int64(st, 7)
                        : (uint64_t)sink_names_num(&r->shapes, st, 9, 0));
    sink_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 8)); /* mem_bytes */
    for (int i = 10; i <= 15; i++) {
        if (i < 15 || sqlite3_column_type(st, i) == SQLITE_NULL) {
            sink_buf_col_null64(b, st, i);
        } else {
            sink_buf_u8(b, 0);
            sink_buf_u32(b, (uint32_t)sqlite3_column_int64(st, i));
        }
    }
}

int sink_rows_read(struct sink_reader *r, const struct sink_origin *o, int64_t after, size_t max,
                   struct sink_buf *out, size_t *n, int64_t *last)
{
    size_t *batch_at = malloc(max * sizeof(*batch_at)); /* where each row's batch goes */
    uint64_t day = 0;
    int rc = 0, step = SQLITE_DONE;

    *n = 0;
    *last = after;
    if (batch_at == NULL)
        return -ENOMEM;
    if (sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK || sink_rows_prepare(r) < 0) {
        rc = -EIO;
        goto out;
    }
    sqlite3_bind_int64(r->rows, 1, after);
    sqlite3_bind_int64(r->rows, 2, (sqlite3_int64)max);
    while (*n < max && (step = sqlite3_step(r->rows)) == SQLITE_ROW) {
        uint64_t d = sink_rows_wall(sqlite3_column_int64(r->rows, 5), o->offset) / SINK_DAY_NS;

        /* the names, once there is an entry to name (an idle session costs no load) */
        if (*n == 0 && (rc = sink_names_update(r)) < 0)
            goto out;
        if (*n == 0)
            day = d;
        else if (d != day)
            break; /* the next batch starts with it */
        sink_rows_encode(out, r, r->rows, o);
        batch_at[(*n)++] = out->len;
        sink_buf_u64(out, 0);
        *last = sqlite3_column_int64(r->rows, 0);
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = -EIO;
    else if (out->oom)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < *n; i++)
        for (int k = 0; k < 8; k++)
            out->data[batch_at[i] + (size_t)k] = (char)((uint64_t)*last >> (8 * k));
out:
    sqlite3_finalize(r->rows);
    r->rows = NULL;
    sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    free(batch_at);
    return rc;
}

/* One integer from sql with ?1 = arg: 0 with *v, -ENOENT when no row (or NULL), -EIO. */
static int sink_rows_int(struct sink_reader *r, const char *sql, int64_t arg, int64_t *v)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(st, 1, arg);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        *v = sqlite3_column_int64(st, 0);
        rc = 0;
    } else {
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? -ENOENT : -EIO;
    }
    sqlite3_finalize(st);
    return rc;
}

uint64_t sink_rows_wall(int64_t start_ns, int64_t offset)
{
    int64_t t;

    if (__builtin_add_overflow(start_ns, offset, &t))
        return offset > 0 ? (uint64_t)INT64_MAX : 0;
    return t < 0 ? 0 : (uint64_t)t;
}

int sink_rows_next_start(struct sink_reader *r, int64_t after, int64_t *start)
{
    return sink_rows_int(r, "SELECT start_ns FROM entries WHERE rowid > ?1 ORDER BY rowid LIMIT 1",
                         after, start);
}

int sink_rows_last(struct sink_reader *r, int64_t *last)
{
    /* a blocks file: its last block's row says (vtab.h); a rows file: the table's largest rowid */
    int rc = sink_rows_int(r,
                           r->blocks ? "SELECT id + n - 1 FROM blocks ORDER BY id DESC LIMIT ?1"
                                     : "SELECT max(rowid) FROM entries LIMIT ?1",
                           1, last);

    if (rc == -ENOENT) {
        *last = 0;
        rc = 0;
    }
    return rc;
}

/* The columns the processes and ranks rows begin with (schema/clickhouse.sql): host, session
 * id, then st's process id (column 0) and rank (column 1, -1: none). */
static void sink_rows_process_key(struct sink_buf *out, const struct sink_origin *o,
                                  sqlite3_stmt *st)
{
    sink_buf_str(out, o->host, strlen(o->host));
    sink_buf_u64(out, (uint64_t)o->session_id);
    sink_buf_u32(out, (uint32_t)sqlite3_column_int64(st, 0));
    sink_buf_u32(out, (uint32_t)(int32_t)sqlite3_column_int64(st, 1));
}

/* Adds s to the set hosts (n of them, cap 64: beyond, a host is left out). */
static void sink_rows_add_host(char **hosts, size_t *n, const char *s)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(hosts[i], s) == 0)
            return;
    if (*n < 64 && (hosts[*n] = strdup(s)) != NULL)
        (*n)++;
}

/* A process's metadata as the two arrays meta_key, meta_value. 0 or -EIO. */
static int sink_rows_meta(sqlite3_stmt *st, int64_t id, struct sink_buf *out)
{
    struct sink_buf vals = {0};
    uint64_t n = 0;
    struct sink_buf keys = {0};
    int rc;

    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sink_buf_col_str(&keys, st, 0);
        sink_buf_col_str(&vals, st, 1);
        n++;
    }
    sink_buf_leb(out, n);
    sink_buf_bytes(out, keys.data, keys.len);
    sink_buf_leb(out, n);
    sink_buf_bytes(out, vals.data, vals.len);
    if (keys.oom || vals.oom)
        out->oom = true;
    sink_buf_free(&keys);
    sink_buf_free(&vals);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

int sink_rows_processes(struct sink_reader *r, const struct sink_origin *o, uint64_t version,
                        struct sink_buf *out, struct sink_buf *hosts)
{
    sqlite3_stmt *st = NULL, *meta = NULL;
    char *names[64];
    size_t n_hosts = 0;
    int rc = -EIO, step;

    if (sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(r->db,
                           "SELECT id, coalesce(rank, -1), coalesce(world, 0), coalesce(pid, 0),"
                           " coalesce(host, ''), coalesce(device, ''), started_ns,"
                           " coalesce(ended_ns, 0), bye, dropped FROM processes ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(r->db,
                           "SELECT key, coalesce(CAST(value AS TEXT), '') FROM meta"
                           " WHERE process_id = ?1 ORDER BY key",
                           -1, &meta, NULL) != SQLITE_OK)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sink_rows_process_key(out, o, st);
        sink_buf_u32(out, (uint32_t)(int32_t)sqlite3_column_int64(st, 2));
        sink_buf_u64(out, (uint64_t)sqlite3_column_int64(st, 3));
        sink_buf_col_str(out, st, 4);
        sink_buf_col_str(out, st, 5);
        sink_buf_u64(out, (uint64_t)sqlite3_column_int64(st, 6));
        sink_buf_u64(out, (uint64_t)sqlite3_column_int64(st, 7));
        sink_buf_u8(out, (uint8_t)sqlite3_column_int64(st, 8));
        sink_buf_u64(out, (uint64_t)sqlite3_column_int64(st, 9));
        if (sink_rows_meta(meta, sqlite3_column_int64(st, 0), out) < 0)
            goto out;
        sink_buf_u64(out, version);
        if (sqlite3_column_bytes(st, 4) > 0)
            sink_rows_add_host(names, &n_hosts, (const char *)sqlite3_column_text(st, 4));
    }
    if (step != SQLITE_DONE)
        goto out;
    sink_buf_leb(hosts, n_hosts);
    for (size_t i = 0; i < n_hosts; i++)
        sink_buf_str(hosts, names[i], strlen(names[i]));
    rc = out->oom || hosts->oom ? -ENOMEM : 0;
out:
    for (size_t i = 0; i < n_hosts; i++)
        free(names[i]);
    sqlite3_finalize(st);
    sqlite3_finalize(meta);
    sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}

int sink_rows_ranks(struct sink_reader *r, const struct sink_origin *o, uint64_t version,
                    struct sink_buf *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sink_rows_has(r->db, "SELECT 1 FROM sqlite_master WHERE name = 'rk_steps'"), step;

    if (rc <= 0)
        return rc; /* a file without rank aggregates: no rows */
    rc = -EIO;
    if (sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(r->db,
                           "SELECT p.id, coalesce(p.rank, -1), coalesce(p.host, ''), count(*),"
                           " sum(s.coll), sum(s.last_count), sum(s.caused_ns), sum(s.waited_ns),"
                           " sum(s.compute_ns), sum(s.comm_ns), sum(s.memory_ns), sum(s.wait_ns),"
                           " sum(s.exposed_ns) FROM processes p JOIN rk_steps s"
                           " ON s.process_id = p.id GROUP BY p.id ORDER BY p.id",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sink_rows_process_key(out, o, st);
        sink_buf_col_str(out, st, 2);
        for (int i = 3; i <= 12; i++)
            sink_buf_u64(out, (uint64_t)sqlite3_column_int64(st, i));
        sink_buf_u64(out, version);
    }
    if (step == SQLITE_DONE)
        rc = out->oom ? -ENOMEM : 0;
out:
    sqlite3_finalize(st);
    sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    return rc;
}
