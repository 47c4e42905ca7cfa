/*
 * store.c — the storage writer thread; see store.h for the design.
 *
 * Every SQLite error is mapped to an errno and logged with sqlite3_errmsg()
 * in one place, store_check(); callers only pass the code on.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "agg.h"
#include "log.h"
#include "map.h"
#include "schema.h"
#include "store.h"

/* A session file the writer has open, with its statements prepared once. */
struct wsess {
    struct wsess *next;
    int64_t id;
    sqlite3 *db;
    bool in_txn;
    struct u32map lost;       /* process id → entries that failed to be stored */
    struct agg *agg;          /* report aggregates, updated with every insert */
    struct strmap shapes;     /* (out_shape, in_shapes) bytes → shapes.id */
    uint64_t *shape_elements; /* shapes.elements by id */
    uint32_t n_shapes;
    sqlite3_stmt *ins_shape;
    sqlite3_stmt *ins_entries; /* ENTRY_ROWS rows at once */
    sqlite3_stmt *ins_entry, *ins_op, *ins_dev, *ins_proc, *end_proc, *ins_meta;
    sqlite3_stmt *ins_ext; /* NULL until the session's first ext map (see store_ext_row) */
};

struct store {
    uv_loop_t *loop;
    char *data_dir;
    sqlite3 *catalog;
    bool catalog_txn;
    struct wsess *open;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct store_job *head, *tail; /* the queue, guarded by mu */
    struct store_job *done;        /* completed jobs, guarded by mu */
    bool stopping;
    char last_error[256]; /* guarded by mu */

    uv_async_t async;
    store_done_cb done_cb;
    store_progress_cb progress_cb;
    void *cb_data;

    _Atomic uint64_t stored, queued, jobs, failed;
    uint64_t group_entries; /* entries applied in the open transaction group */
    bool commit_failed;     /* the group's commit failed: nothing of it is stored */
};

/* Maps an SQLite result to 0 or a negative errno, logging failures once, here. */
static int store_check(struct store *s, sqlite3 *db, int rc, const char *what)
{
    int err;

    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    switch (rc & 0xff) {
    case SQLITE_FULL:
        err = -ENOSPC;
        break;
    case SQLITE_NOMEM:
        err = -ENOMEM;
        break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
        err = -EACCES;
        break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        err = -EBUSY;
        break;
    default:
        err = -EIO;
        break;
    }
    log_error("storage: %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    pthread_mutex_lock(&s->mu);
    snprintf(s->last_error, sizeof(s->last_error), "%s: %s", what,
             db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    pthread_mutex_unlock(&s->mu);
    return err;
}

static int store_exec(struct store *s, sqlite3 *db, const char *sql, const char *what)
{
    return store_check(s, db, sqlite3_exec(db, sql, NULL, NULL, NULL), what);
}

void store_session_path(const struct store *s, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/sessions/%lld.db", s->data_dir, (long long)id);
}

int store_configure(void)
{
    if (sqlite3_config(SQLITE_CONFIG_MULTITHREAD) != SQLITE_OK ||
        sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
        return -EBUSY;
    return 0;
}

uint64_t store_session_bytes(const struct store *s, int64_t id)
{
    char path[PATH_MAX + 8];
    uint64_t total = 0;
    struct stat st;

    store_session_path(s, id, path, PATH_MAX);
    if (stat(path, &st) == 0)
        total += (uint64_t)st.st_size;
    strcat(path, "-wal");
    if (stat(path, &st) == 0)
        total += (uint64_t)st.st_size;
    return total;
}

/* ---- jobs ---------------------------------------------------------------- */

struct store_job *store_job_new(enum store_job_type type, int64_t session_id)
{
    struct store_job *job = calloc(1, sizeof(*job));

    if (job != NULL) {
        job->type = type;
        job->session_id = session_id;
    }
    return job;
}

void store_job_free(struct store_job *job)
{
    if (job == NULL)
        return;
    switch (job->type) {
    case STORE_OPEN:
        free(job->u.open.name);
        break;
    case STORE_PROCESS:
        free(job->u.process.host);
        free(job->u.process.device);
        break;
    case STORE_OP:
    case STORE_DEVICE:
        free(job->u.name.name);
        free(job->u.name.category);
        break;
    case STORE_META:
        proto_kv_free(job->u.meta.kv, job->u.meta.n);
        break;
    case STORE_BATCH:
        proto_batch_free(&job->u.batch.b);
        free(job->u.batch.dev_ids);
        break;
    default:
        break;
    }
    free(job);
}

/* ---- session files ------------------------------------------------------- */

static void wsess_close(struct wsess *w)
{
    u32map_deinit(&w->lost);
    strmap_deinit(&w->shapes);
    free(w->shape_elements);
    sqlite3_finalize(w->ins_shape);
    sqlite3_finalize(w->ins_entries);
    agg_free(w->agg);
    sqlite3_finalize(w->ins_entry);
    sqlite3_finalize(w->ins_op);
    sqlite3_finalize(w->ins_dev);
    sqlite3_finalize(w->ins_proc);
    sqlite3_finalize(w->end_proc);
    sqlite3_finalize(w->ins_meta);
    sqlite3_finalize(w->ins_ext);
    sqlite3_close(w->db);
    free(w);
}

#define ENTRY_ROWS 32

/* INSERT INTO entries(...) VALUES (9 ?), ... ENTRY_ROWS times. */
static int wsess_prepare_multi(struct store *s, struct wsess *w)
{
    char sql[64 + ENTRY_ROWS * 24] = "INSERT INTO entries(process_id, step, op_id, device_id,"
                                     " start_ns, dur_ns, elements, mem_bytes, shape_id) VALUES ";
    int rc;

    for (int k = 0; k < ENTRY_ROWS; k++)
        strcat(sql, k ? ",(?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?)");
    rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->ins_entries, NULL);
    return rc == SQLITE_OK ? 0 : store_check(s, w->db, rc, "prepare");
}

static int wsess_prepare(struct store *s, struct wsess *w)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        {offsetof(struct wsess, ins_entry),
         "INSERT INTO entries(process_id, step, op_id, device_id, start_ns, dur_ns, elements,"
         " mem_bytes, shape_id) VALUES (?,?,?,?,?,?,?,?,?)"},
        {offsetof(struct wsess, ins_shape),
         "INSERT INTO shapes(id, out_shape, in_shapes, elements) VALUES (?,?,?,?)"},
        {offsetof(struct wsess, ins_op), "INSERT INTO ops(id, name, category) VALUES (?,?,?)"},
        {offsetof(struct wsess, ins_dev), "INSERT INTO devices(id, name) VALUES (?,?)"},
        {offsetof(struct wsess, ins_proc),
         "INSERT INTO processes(id, rank, world, pid, uid, host, device, started_ns)"
         " VALUES (?,?,?,?,?,?,?,?)"},
        {offsetof(struct wsess, end_proc),
         "UPDATE processes SET ended_ns = ?, bye = ?, dropped = ? WHERE id = ?"},
        {offsetof(struct wsess, ins_meta),
         "INSERT OR REPLACE INTO meta(process_id, key, value) VALUES (?,?,?)"},
    };

    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)w + stmts[i].off);
        int rc = sqlite3_prepare_v3(w->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    return 0;
}

static int db_open(struct store *s, const char *path, sqlite3 **db)
{
    int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, *db, rc, path);
    sqlite3_busy_timeout(*db, 5000);
    return store_exec(s, *db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                      " PRAGMA foreign_keys=OFF;",
                      "set pragmas");
}

/* The open file of a session, or NULL; never opens one. */
static struct wsess *wsess_find(struct store *s, int64_t id)
{
    for (struct wsess *w = s->open; w != NULL; w = w->next)
        if (w->id == id)
            return w;
    return NULL;
}

/* Remembers that a batch of a process could not be stored, for its next flush. */
static void store_lost(struct store *s, const struct store_job *job)
{
    struct wsess *w = wsess_find(s, job->session_id);
    uint32_t n = 0;

    if (w == NULL || job->type != STORE_BATCH)
        return;
    u32map_get(&w->lost, (uint32_t)job->u.batch.process_id, &n);
    u32map_put(&w->lost, (uint32_t)job->u.batch.process_id, n + (uint32_t)job->u.batch.b.n);
}

/* Finds the open file of a session, opening (and with create, creating) it. */
static struct wsess *wsess_get(struct store *s, int64_t id, bool create)
{
    struct wsess *w, **pp;
    char path[PATH_MAX];

    for (pp = &s->open; (w = *pp) != NULL; pp = &w->next) {
        if (w->id == id) {
            *pp = w->next; /* move to front: batches come in runs */
            w->next = s->open;
            s->open = w;
            return w;
        }
    }
    store_session_path(s, id, path, sizeof(path));
    if (!create && access(path, F_OK) != 0)
        return NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->id = id;
    if (db_open(s, path, &w->db) < 0 ||
        store_exec(s, w->db, schema_session_sql, "create session schema") < 0 ||
        wsess_prepare(s, w) < 0 || wsess_prepare_multi(s, w) < 0 ||
        (w->agg = agg_new(w->db)) == NULL) {
        wsess_close(w);
        return NULL;
    }
    w->next = s->open;
    s->open = w;
    return w;
}

static int wsess_begin(struct store *s, struct wsess *w)
{
    if (w->in_txn)
        return 0;
    if (store_exec(s, w->db, "BEGIN", "begin") < 0)
        return -EIO;
    w->in_txn = true;
    return 0;
}

static void wsess_forget(struct store *s, int64_t id)
{
    for (struct wsess **pp = &s->open; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct wsess *w = *pp;
            *pp = w->next;
            if (w->in_txn &&
                (agg_flush(w->agg) != 0 || store_exec(s, w->db, "COMMIT", "commit") < 0))
                sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
            wsess_close(w);
            return;
        }
    }
}

/* ---- applying jobs ------------------------------------------------------- */

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

static int step_reset(struct store *s, sqlite3 *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);

    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return store_check(s, db, rc, what);
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

/*
 * The shapes.id of an entry's (out_shape, in_shapes), interning a new pair;
 * 0 for an entry without shapes, -1 on error.
 */
static int64_t shape_id(struct store *s, struct wsess *w, const struct proto_batch *b,
                        const struct proto_entry *e)
{
    char key[8 + 2 * 1024 + 2048];
    uint32_t id, klen = 4 + e->out_len + e->in_len;
    sqlite3_stmt *st = w->ins_shape;
    uint64_t *p;

    if (e->out_len == 0 && e->in_len == 0)
        return 0;
    if (klen > sizeof(key))
        return -1;
    memcpy(key, &e->out_len, 4); /* the split between the two */
    memcpy(key + 4, b->blob + e->out_off, e->out_len);
    memcpy(key + 4 + e->out_len, b->blob + e->in_off, e->in_len);
    if (strmap_get(&w->shapes, key, klen, &id))
        return id;
    id = w->n_shapes + 1;
    if ((p = realloc(w->shape_elements, (id + 1) * sizeof(*p))) == NULL)
        return -1;
    w->shape_elements = p;
    p[id] = shape_product(b->blob + e->out_off, e->out_len);
    sqlite3_bind_int64(st, 1, id);
    if (e->out_len)
        sqlite3_bind_blob(st, 2, b->blob + e->out_off, (int)e->out_len, SQLITE_STATIC);
    if (e->in_len)
        sqlite3_bind_blob(st, 3, b->blob + e->in_off, (int)e->in_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (int64_t)p[id]);
    if (step_reset(s, w->db, st, "insert shape") < 0 || strmap_put(&w->shapes, key, klen, id) < 0)
        return -1;
    w->n_shapes = id;
    return id;
}

/* Binds entry i of a batch as the 9 parameters from base+1 on. 0, or an SQLite code. */
static int bind_entry(struct store *s, struct wsess *w, sqlite3_stmt *st, int base,
                      const struct store_job *job, size_t i)
{
    const struct proto_batch *b = &job->u.batch.b;
    const struct proto_entry *e = &b->entries[i];
    int64_t shape = shape_id(s, w, b, e);

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
    if (shape > 0 && e->elements == w->shape_elements[shape])
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

static void bind_ext(sqlite3_stmt *st, int i, bool has, int64_t v)
{
    if (has)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/*
 * Stores the ext map of the entry at rowid in the entry_ext side table,
 * creating the table with the session's first ext map: files without ext
 * maps never have it. Unsigned values keep their 64 bits in SQLite's int64.
 * A failed insert drops the statement, so that the next one prepares it (and
 * creates the table) again, as after a rolled-back transaction it must.
 */
static int store_ext_row(struct store *s, struct wsess *w, const struct proto_ext *x, int64_t rowid)
{
    sqlite3_stmt *st;
    int rc;

    if (w->ins_ext == NULL) {
        if (store_exec(s, w->db, schema_entry_ext_sql, "create entry_ext") < 0)
            return -EIO;
        rc = sqlite3_prepare_v3(w->db,
                                "INSERT INTO entry_ext(entry_rowid, stream, peer, tag, comm, seq,"
                                " checksum) VALUES (?,?,?,?,?,?,?)",
                                -1, SQLITE_PREPARE_PERSISTENT, &w->ins_ext, NULL);
        if (rc != SQLITE_OK)
            return store_check(s, w->db, rc, "prepare");
    }
    st = w->ins_ext;
    sqlite3_bind_int64(st, 1, rowid);
    bind_ext(st, 2, x->has & PROTO_EXT_STREAM, (int64_t)x->stream);
    bind_ext(st, 3, x->has & PROTO_EXT_PEER, (int64_t)x->peer);
    bind_ext(st, 4, x->has & PROTO_EXT_TAG, x->tag);
    bind_ext(st, 5, x->has & PROTO_EXT_COMM, (int64_t)x->comm);
    bind_ext(st, 6, x->has & PROTO_EXT_SEQ, (int64_t)x->seq);
    bind_ext(st, 7, x->has & PROTO_EXT_CHECKSUM, (int64_t)x->checksum);
    if ((rc = step_reset(s, w->db, st, "insert entry ext")) < 0) {
        sqlite3_finalize(w->ins_ext);
        w->ins_ext = NULL;
    }
    return rc;
}

/*
 * Inserts a batch: ENTRY_ROWS rows per statement while there are that many
 * (a statement's fixed cost is paid once per ENTRY_ROWS rows), then one at a
 * time. Rowids of one statement are consecutive (rows are only ever
 * appended), which is how each row's rowid reaches the aggregates.
 */
static int apply_batch(struct store *s, struct wsess *w, struct store_job *job)
{
    const struct proto_batch *b = &job->u.batch.b;
    size_t i = 0;

    while (i < b->n) {
        size_t rows = b->n - i >= ENTRY_ROWS ? ENTRY_ROWS : 1;
        sqlite3_stmt *st = rows == ENTRY_ROWS ? w->ins_entries : w->ins_entry;
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
        for (size_t k = 0; k < rows; k++) {
            int64_t rowid = last - (int64_t)(rows - 1 - k);
            struct proto_ext x;

            rc = agg_entry(w->agg, &b->entries[i + k], job->u.batch.dev_ids[i + k], rowid);
            if (rc != 0)
                return store_check(s, w->db, rc, "update aggregates");
            if (proto_entry_ext(&b->entries[i + k], b->blob, &x) &&
                (rc = store_ext_row(s, w, &x, rowid)) < 0)
                return rc;
        }
        i += rows;
    }
    s->group_entries += b->n;
    return 0;
}

static int apply_meta(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->ins_meta;

    for (size_t i = 0; i < job->u.meta.n; i++) {
        const struct proto_kv *kv = &job->u.meta.kv[i];

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
        if (step_reset(s, w->db, st, "insert meta") < 0)
            return -EIO;
    }
    return 0;
}

static int apply_process(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->ins_proc;

    sqlite3_bind_int64(st, 1, job->u.process.id);
    bind_int_or_null(st, 2, job->u.process.rank);
    bind_int_or_null(st, 3, job->u.process.world);
    bind_int_or_null(st, 4, job->u.process.pid);
    bind_int_or_null(st, 5, job->u.process.uid);
    bind_text_or_null(st, 6, job->u.process.host);
    bind_text_or_null(st, 7, job->u.process.device);
    sqlite3_bind_int64(st, 8, job->u.process.started_ns);
    return step_reset(s, w->db, st, "insert process");
}

static int apply_process_end(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = w->end_proc;

    sqlite3_bind_int64(st, 1, job->u.pend.ended_ns);
    sqlite3_bind_int(st, 2, job->u.pend.bye);
    sqlite3_bind_int64(st, 3, (int64_t)job->u.pend.dropped);
    sqlite3_bind_int64(st, 4, job->u.pend.process_id);
    return step_reset(s, w->db, st, "end process");
}

static int apply_name(struct store *s, struct wsess *w, struct store_job *job)
{
    sqlite3_stmt *st = job->type == STORE_OP ? w->ins_op : w->ins_dev;

    sqlite3_bind_int64(st, 1, job->u.name.id);
    sqlite3_bind_text(st, 2, job->u.name.name, -1, SQLITE_STATIC);
    if (job->type == STORE_OP)
        sqlite3_bind_text(st, 3, job->u.name.category, -1, SQLITE_STATIC);
    return step_reset(s, w->db, st, job->type == STORE_OP ? "insert op" : "insert device");
}

static int catalog_begin(struct store *s)
{
    if (s->catalog_txn)
        return 0;
    if (store_exec(s, s->catalog, "BEGIN", "catalog begin") < 0)
        return -EIO;
    s->catalog_txn = true;
    return 0;
}

static int catalog_run(struct store *s, const char *sql, const int64_t *args, size_t n,
                       const char *text)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->catalog, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->catalog, rc, "catalog prepare");
    for (size_t i = 0; i < n; i++)
        sqlite3_bind_int64(st, (int)i + 1, args[i]);
    if (text != NULL)
        sqlite3_bind_text(st, (int)n + 1, text, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return store_check(s, s->catalog, rc, "catalog update");
}

static int apply_open(struct store *s, struct store_job *job)
{
    int64_t args[3] = {job->session_id, job->u.open.started_ns, job->u.open.uid};
    struct wsess *w;

    if (catalog_begin(s) < 0 ||
        catalog_run(s, "INSERT INTO sessions(id, started_ns, uid, name) VALUES (?,?,?,?)", args, 3,
                    job->u.open.name) < 0)
        return -EIO;
    w = wsess_get(s, job->session_id, true);
    if (w == NULL || wsess_begin(s, w) < 0)
        return -EIO;
    if (store_exec(s, w->db, "INSERT OR REPLACE INTO info VALUES ('format', 1)", "info") < 0)
        return -EIO;
    return store_check(s, w->db, agg_init_file(w->agg), "mark aggregates");
}

static int apply_session_end(struct store *s, struct store_job *job)
{
    int64_t args[6] = {job->u.send.ended_ns,         (int64_t)job->u.send.processes,
                       (int64_t)job->u.send.entries, (int64_t)job->u.send.dropped,
                       job->u.send.interrupted,      job->session_id};

    if (catalog_begin(s) < 0)
        return -EIO;
    wsess_forget(s, job->session_id); /* commits its open transaction and closes the file */
    return catalog_run(s,
                       "UPDATE sessions SET state = 'ended', ended_ns = ?, processes = ?,"
                       " entries = ?, dropped = ?, interrupted = ? WHERE id = ?",
                       args, 6, NULL);
}

static int apply_delete(struct store *s, struct store_job *job)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char path[PATH_MAX + 8];
    int rc = 0;

    wsess_forget(s, job->session_id);
    for (size_t i = 0; i < 3; i++) {
        store_session_path(s, job->session_id, path, PATH_MAX);
        strcat(path, suffixes[i]);
        if (unlink(path) < 0 && errno != ENOENT) {
            log_error("storage: cannot remove %s: %s", path, strerror(errno));
            rc = -errno;
        }
    }
    if (catalog_begin(s) < 0 ||
        catalog_run(s, "DELETE FROM sessions WHERE id = ?", &job->session_id, 1, NULL) < 0)
        return -EIO;
    return rc;
}

static int apply(struct store *s, struct store_job *job)
{
    struct wsess *w;

    switch (job->type) {
    case STORE_OPEN:
        return apply_open(s, job);
    case STORE_SESSION_END:
        return apply_session_end(s, job);
    case STORE_DELETE:
        return apply_delete(s, job);
    case STORE_FLUSH:
        return 0;
    default:
        break;
    }
    w = wsess_get(s, job->session_id, false);
    if (w == NULL || wsess_begin(s, w) < 0)
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
    default:
        return -EINVAL;
    }
}

/* Commits every open transaction. Returns 0 or the first error. */
static int commit_all(struct store *s)
{
    int rc = 0;

    for (struct wsess *w = s->open; w != NULL; w = w->next) {
        if (w->in_txn) {
            if (store_check(s, w->db, agg_flush(w->agg), "write aggregates") < 0 ||
                store_exec(s, w->db, "COMMIT", "commit") < 0) {
                sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
                agg_discard(w->agg);
                rc = -EIO;
            }
            w->in_txn = false;
        }
    }
    if (s->catalog_txn) {
        if (store_exec(s, s->catalog, "COMMIT", "catalog commit") < 0) {
            sqlite3_exec(s->catalog, "ROLLBACK", NULL, NULL, NULL);
            rc = -EIO;
        }
        s->catalog_txn = false;
    }
    return rc;
}

/*
 * A flush succeeds only when every entry its process sent before it is
 * stored: a batch lost in an earlier group (disk full) fails every later
 * flush of that process, with the count.
 */
static void store_flush_result(struct store *s, struct store_job *job)
{
    struct wsess *w;
    uint32_t lost = 0;

    if (job->type != STORE_FLUSH)
        return;
    if (s->commit_failed) {
        job->rc = -EIO;
        return;
    }
    w = wsess_find(s, job->session_id);
    if (w != NULL && u32map_get(&w->lost, (uint32_t)job->u.flush.process_id, &lost) && lost) {
        job->rc = -EIO;
        job->u.flush.lost = lost;
    }
}

static bool commit_all_ok(const struct store *s)
{
    return !s->commit_failed;
}

static uint64_t job_entries(const struct store_job *job)
{
    return job->type == STORE_BATCH ? job->u.batch.b.n : 0;
}

/* Applies one taken group of jobs, commits, and hands completed jobs back. */
static void store_apply_group(struct store *s, struct store_job *list)
{
    struct store_job *job, *next, *done = NULL, **done_tail = &done;
    uint64_t n_entries = 0, n_jobs = 0;
    int rc = 0, jrc;

    s->group_entries = 0;
    for (job = list; job != NULL; job = job->next) {
        jrc = apply(s, job);
        job->rc = jrc;
        if (jrc < 0 && rc == 0)
            rc = jrc;
        if (jrc < 0)
            store_lost(s, job);
        n_entries += job_entries(job);
        n_jobs++;
    }
    s->commit_failed = commit_all(s) < 0;
    if (s->commit_failed && rc == 0)
        rc = -EIO;
    for (job = list; s->commit_failed && job != NULL; job = job->next)
        if (job->rc == 0)
            store_lost(s, job); /* rolled back with the whole group */
    for (job = list; job != NULL; job = job->next)
        store_flush_result(s, job);
    if (rc == 0 || commit_all_ok(s)) {
        atomic_fetch_add(&s->stored, s->group_entries);
        atomic_fetch_add(&s->failed, n_entries - s->group_entries);
    } else {
        atomic_fetch_add(&s->failed, n_entries);
    }
    for (job = list; job != NULL; job = next) {
        next = job->next;
        if (job->cookie != NULL) {
            job->next = NULL;
            *done_tail = job;
            done_tail = &job->next;
        } else {
            store_job_free(job);
        }
    }
    atomic_fetch_sub(&s->queued, n_entries);
    atomic_fetch_sub(&s->jobs, n_jobs);
    pthread_mutex_lock(&s->mu);
    struct store_job **pp = &s->done;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = done; /* keep submission order across groups */
    pthread_mutex_unlock(&s->mu);
    uv_async_send(&s->async);
}

static void *store_thread(void *arg)
{
    struct store *s = arg;
    struct store_job *list;
    bool stop;

    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->head == NULL && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        list = s->head;
        s->head = s->tail = NULL;
        stop = s->stopping && list == NULL;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        store_apply_group(s, list);
    }
    while (s->open != NULL) {
        struct wsess *w = s->open;
        s->open = w->next;
        wsess_close(w);
    }
    return NULL;
}

void store_enqueue(struct store *s, struct store_job *job)
{
    job->next = NULL;
    atomic_fetch_add(&s->queued, job_entries(job));
    atomic_fetch_add(&s->jobs, 1);
    pthread_mutex_lock(&s->mu);
    if (s->tail != NULL)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Loop thread: hand every completed job back; sends coalesce, so drain all. */
static void store_async_cb(uv_async_t *handle)
{
    struct store *s = handle->data;
    struct store_job *list, *next;

    pthread_mutex_lock(&s->mu);
    list = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    for (; list != NULL; list = next) {
        next = list->next;
        s->done_cb(s, list, s->cb_data);
    }
    if (s->progress_cb != NULL)
        s->progress_cb(s, s->cb_data);
}

/* ---- lifecycle ----------------------------------------------------------- */

static int mkdir_p(const char *dir, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, dir, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, mode) < 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int store_open_catalog(struct store *s, char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    int rc;

    snprintf(path, sizeof(path), "%s/sessions", s->data_dir);
    if ((rc = mkdir_p(path, 0700)) < 0) {
        snprintf(errbuf, errlen, "cannot create data dir %s: %s", path, strerror(-rc));
        return rc;
    }
    if (access(path, W_OK | X_OK) < 0) {
        rc = -errno;
        snprintf(errbuf, errlen, "data dir %s is not writable: %s", path, strerror(errno));
        return rc;
    }
    snprintf(path, sizeof(path), "%s/catalog.db", s->data_dir);
    if (db_open(s, path, &s->catalog) < 0 ||
        store_exec(s, s->catalog, schema_catalog_sql, "create catalog schema") < 0 ||
        store_exec(s, s->catalog,
                   "UPDATE sessions SET state = 'ended', interrupted = 1, ended_ns ="
                   " coalesce(ended_ns, CAST((julianday('now') - 2440587.5) * 86400e9 AS"
                   " INTEGER)) WHERE state = 'live'",
                   "mark interrupted sessions") < 0) {
        snprintf(errbuf, errlen, "cannot open catalog %s: %s", path,
                 s->catalog ? sqlite3_errmsg(s->catalog) : "out of memory");
        return -EIO;
    }
    return 0;
}

struct store *store_new(uv_loop_t *loop, const char *data_dir, store_done_cb done,
                        store_progress_cb progress, void *data, int *err, char *errbuf,
                        size_t errlen)
{
    struct store *s = calloc(1, sizeof(*s));
    int rc = -ENOMEM;

    if (s == NULL || (s->data_dir = strdup(data_dir)) == NULL)
        goto fail;
    s->loop = loop;
    s->done_cb = done;
    s->progress_cb = progress;
    s->cb_data = data;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if ((rc = store_open_catalog(s, errbuf, errlen)) < 0)
        goto fail;
    if ((rc = uv_async_init(loop, &s->async, store_async_cb)) < 0)
        goto fail;
    s->async.data = s;
    return s;
fail:
    if (rc == -ENOMEM)
        snprintf(errbuf, errlen, "out of memory");
    *err = rc;
    if (s != NULL) {
        sqlite3_close(s->catalog);
        free(s->data_dir);
        free(s);
    }
    return NULL;
}

int store_catalog_load(struct store *s, int (*row_cb)(void *, const struct store_catalog_row *),
                       void *arg)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->catalog,
                                "SELECT id, name, state, uid, started_ns, ended_ns, processes,"
                                " entries, dropped, interrupted FROM sessions ORDER BY id",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_check(s, s->catalog, rc, "load catalog");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_catalog_row row = {
            .id = sqlite3_column_int64(st, 0),
            .name = (const char *)sqlite3_column_text(st, 1),
            .state = (const char *)sqlite3_column_text(st, 2),
            .uid = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3),
            .started_ns = sqlite3_column_int64(st, 4),
            .ended_ns = sqlite3_column_int64(st, 5),
            .processes = (uint64_t)sqlite3_column_int64(st, 6),
            .entries = (uint64_t)sqlite3_column_int64(st, 7),
            .dropped = (uint64_t)sqlite3_column_int64(st, 8),
            .interrupted = sqlite3_column_int(st, 9) != 0,
        };
        if (row_cb(arg, &row) < 0)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : store_check(s, s->catalog, rc, "catalog");
}

int64_t store_last_session_id(struct store *s)
{
    sqlite3_stmt *st;
    int64_t id = 0;

    if (sqlite3_prepare_v2(s->catalog,
                           "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE"
                           " name = 'sessions'), 0), coalesce((SELECT max(id) FROM sessions), 0))",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id;
}

int store_start(struct store *s)
{
    int rc = pthread_create(&s->thread, NULL, store_thread, s);

    if (rc != 0)
        return -rc;
    s->started = true;
    return 0;
}

void store_stop(struct store *s)
{
    if (s == NULL || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
    /* Hand back what completed during the drain (acks of the last flushes). */
    store_async_cb(&s->async);
}

static void store_close_cb(uv_handle_t *handle)
{
    struct store *s = handle->data;

    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->data_dir);
    free(s);
}

void store_free(struct store *s)
{
    struct store_job *job, *next;

    if (s == NULL)
        return;
    store_stop(s);
    for (job = s->head; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    for (job = s->done; job != NULL; job = next) {
        next = job->next;
        store_job_free(job);
    }
    sqlite3_close(s->catalog);
    /* The struct holds the async handle: it is freed in the close callback. */
    uv_close((uv_handle_t *)&s->async, store_close_cb);
}

uint64_t store_stored(const struct store *s)
{
    return atomic_load(&s->stored);
}

uint64_t store_queued(const struct store *s)
{
    return atomic_load(&s->queued);
}

uint64_t store_queue_jobs(const struct store *s)
{
    return atomic_load(&s->jobs);
}

uint64_t store_failed(const struct store *s)
{
    return atomic_load(&s->failed);
}

void store_last_error(struct store *s, char *buf, size_t len)
{
    pthread_mutex_lock(&s->mu);
    snprintf(buf, len, "%s", s->last_error);
    pthread_mutex_unlock(&s->mu);
}
