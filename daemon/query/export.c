/* export.c — see export.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "export.h"
#include "info.h"
#include "log.h"
#include "peerhome.h"
#include "vtab.h"

#define EXPORT_CHUNK       4096
#define EXPORT_CHUNK_BYTES (256u << 10) /* a chunk ends at the row that passes this */
/* SQLite steps between two looks at the cancel flag (about a millisecond of work). */
#define EXPORT_CANCEL_STEPS 10000

/* As control.c's CONTROL_END_WAIT_MS: a session that just ended is exported whole. */
#define EXPORT_END_WAIT_MS 30000

struct export_work {
    uv_work_t req;
    struct conn *c;
    atomic_bool *cancel; /* the daemon's: set when it stops */
    char path[PATH_MAX];
    int64_t id;
    struct store *store; /* for store_wait_ended */
    char *name;
    const char *state;
    /* a home: the hosts its report of this session merges (1 + members, as `sessions`
     * says); 0: not a home. Entries stay on their hosts: the export has this host's only */
    uint64_t hosts;
    sqlite3 *db;
    sqlite3_stmt *rows;
    bool by_start; /* the request's "order": "start" */
    bool by_rank;  /* the request's "order": "rank" */
    bool ext;      /* the file has an entry_ext table: rows carry its 8 columns after the 10 */
    bool link;     /* the file has an entry_link table: rows carry its 4 columns after those */
    bool span;     /* the file has an entry_span table: rows carry its column last */
    uint64_t n_rows;
    bool started, exhausted, done;
    int rc;
    char err[256];
    msgpack_sbuffer out;
};

static void pack_column(msgpack_packer *pk, sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        msgpack_pack_int64(pk, sqlite3_column_int64(st, i));
        break;
    case SQLITE_FLOAT:
        msgpack_pack_double(pk, sqlite3_column_double(st, i));
        break;
    case SQLITE_TEXT: {
        int n = sqlite3_column_bytes(st, i);
        msgpack_pack_str(pk, (size_t)n);
        msgpack_pack_str_body(pk, sqlite3_column_text(st, i), (size_t)n);
        break;
    }
    case SQLITE_BLOB: /* shapes: canonical msgpack, copied as they are */
        msgpack_sbuffer_write(pk->data, sqlite3_column_blob(st, i),
                              (size_t)sqlite3_column_bytes(st, i));
        break;
    default:
        msgpack_pack_nil(pk);
        break;
    }
}

/* Packs every row of sql as an array of arrays. Returns 0 or -EIO. */
static int pack_table(struct export_work *w, msgpack_packer *pk, const char *sql)
{
    msgpack_sbuffer body;
    msgpack_packer bpk;
    sqlite3_stmt *st;
    uint32_t n = 0;
    int rc, cols;

    if (sqlite3_prepare_v2(w->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&bpk, &body, msgpack_sbuffer_write);
    cols = sqlite3_column_count(st);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        msgpack_pack_array(&bpk, (size_t)cols);
        for (int i = 0; i < cols; i++)
            pack_column(&bpk, st, i);
        n++;
    }
    sqlite3_finalize(st);
    msgpack_pack_array(pk, n);
    msgpack_sbuffer_write(pk->data, body.data, body.size);
    msgpack_sbuffer_destroy(&body);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

/* The columns of a row: the 10 of the v1 export row, then the ext map's when the file has one. */
#define ROW_COLUMNS                                                                                \
    "SELECT e.process_id, e.step, e.op_id, e.device_id, e.start_ns, e.dur_ns,"                     \
    " coalesce(e.elements, s.elements, 0), e.mem_bytes, s.out_shape, s.in_shapes"
#define ROW_EXT_COLUMNS                                                                            \
    ", x.entry_rowid, x.stream, x.peer, x.tag, x.comm, x.seq, x.checksum, x.comm_size"
#define ROW_FROM     " FROM entries e LEFT JOIN shapes s ON s.id = e.shape_id"
#define ROW_EXT_FROM " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid"
#define ROW_ORDER    " ORDER BY e.rowid"
/* "order": "start": by start, longer first (a slice before those it contains), then arrival. */
#define ROW_ORDER_START " ORDER BY e.start_ns, e.dur_ns DESC, e.rowid"
/* "order": "rank": each rank's entries together (no rank first), each rank's as by "start". */
#define ROW_ORDER_RANK                                                                             \
    " ORDER BY (SELECT rank FROM processes p WHERE p.id = e.process_id),"                          \
    " e.start_ns, e.dur_ns DESC, e.rowid"

#define ROW_LINK_COLUMNS ", l.entry_rowid, l.id, l.parent, l.launcher"
#define ROW_LINK_FROM    " LEFT JOIN entry_link l ON l.entry_rowid = e.rowid"
#define ROW_SPAN_COLUMNS ", sp.span"
#define ROW_SPAN_FROM    " LEFT JOIN entry_span sp ON sp.entry_rowid = e.rowid"
/* With spans, "start" and "rank" put the longer whole interval first at equal starts: a
 * profiler op's self time may be shorter than its child's. */
#define ROW_ORDER_START_SPAN " ORDER BY e.start_ns, coalesce(sp.span, e.dur_ns) DESC, e.rowid"
#define ROW_ORDER_RANK_SPAN                                                                        \
    " ORDER BY (SELECT rank FROM processes p WHERE p.id = e.process_id),"                          \
    " e.start_ns, coalesce(sp.span, e.dur_ns) DESC, e.rowid"

/* Whether the session file has the side table `name`: 1, 0, or -EIO. */
static int export_has_table(struct export_work *w, const char *name)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(w->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return -EIO;
    return rc == SQLITE_ROW;
}

/*
 * Prepares the rows query; the entry_ext, entry_link and entry_span tables
 * exist only in files that got an ext map (a link, a span).
 */
static int export_prepare_rows(struct export_work *w)
{
    char sql[1536];
    int ext = export_has_table(w, "entry_ext"), link = export_has_table(w, "entry_link");
    int span = export_has_table(w, "entry_span");

    if (ext < 0 || link < 0 || span < 0)
        return -EIO;
    w->ext = ext, w->link = link, w->span = span;
    snprintf(sql, sizeof(sql), "%s%s%s%s%s%s%s%s%s", ROW_COLUMNS, w->ext ? ROW_EXT_COLUMNS : "",
             w->link ? ROW_LINK_COLUMNS : "", w->span ? ROW_SPAN_COLUMNS : "", ROW_FROM,
             w->ext ? ROW_EXT_FROM : "", w->link ? ROW_LINK_FROM : "", w->span ? ROW_SPAN_FROM : "",
             w->by_rank    ? (w->span ? ROW_ORDER_RANK_SPAN : ROW_ORDER_RANK)
             : w->by_start ? (w->span ? ROW_ORDER_START_SPAN : ROW_ORDER_START)
                           : ROW_ORDER);
    if (sqlite3_prepare_v2(w->db, sql, -1, &w->rows, NULL) != SQLITE_OK)
        return -EIO;
    return 0;
}

/* Reads column i of an ext row into *v: returns bit, or 0 when the key was absent (NULL). */
static uint32_t ext_column(sqlite3_stmt *st, int i, uint32_t bit, uint64_t *v)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return 0;
    *v = (uint64_t)sqlite3_column_int64(st, i); /* unsigned keys: the int64 holds the 64 bits */
    return bit;
}

/* The links of a row (columns at i..i+3, after the ext map's when the file has one). */
static uint32_t link_columns(sqlite3_stmt *st, int i, struct proto_ext *x)
{
    uint64_t launcher = 0;
    uint32_t has;

    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return 0;
    has = ext_column(st, i + 1, PROTO_EXT_ID, &x->id) |
          ext_column(st, i + 2, PROTO_EXT_PARENT, &x->parent) |
          ext_column(st, i + 3, PROTO_EXT_LAUNCHER, &launcher);
    x->launcher = (uint32_t)launcher;
    return has;
}

/* The 11th element of a row: the entry's ext map (columns 10..17, then its links), or nil. */
static void pack_ext(struct export_work *w, msgpack_packer *pk)
{
    sqlite3_stmt *st = w->rows;
    struct proto_ext x = {0};
    uint64_t tag = 0;

    if (w->ext && sqlite3_column_type(st, 10) != SQLITE_NULL) {
        x.has = ext_column(st, 11, PROTO_EXT_STREAM, &x.stream) |
                ext_column(st, 12, PROTO_EXT_PEER, &x.peer) |
                ext_column(st, 13, PROTO_EXT_TAG, &tag) |
                ext_column(st, 14, PROTO_EXT_COMM, &x.comm) |
                ext_column(st, 15, PROTO_EXT_SEQ, &x.seq) |
                ext_column(st, 16, PROTO_EXT_CHECKSUM, &x.checksum) |
                ext_column(st, 17, PROTO_EXT_COMM_SIZE, &x.comm_size);
        x.tag = (int64_t)tag;
    }
    if (w->link)
        x.has |= link_columns(st, w->ext ? 18 : 10, &x);
    if (w->span)
        x.has |= ext_column(st, 10 + (w->ext ? 8 : 0) + (w->link ? 4 : 0), PROTO_EXT_SPAN, &x.span);
    if (x.has == 0)
        msgpack_pack_nil(pk);
    else
        proto_pack_ext(pk, &x);
}

/* The progress handler: a nonzero return interrupts the statement (the daemon is stopping). */
static int export_cancelled(void *arg)
{
    return atomic_load((atomic_bool *)arg);
}

/* Opens the file and packs the header. -EPROTO (w->err said why): a file of another schema. */
static int export_open(struct export_work *w, msgpack_packer *pk)
{
    char why[200];

    if (sqlite3_open_v2(w->path, &w->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        vtab_register(w->db) != SQLITE_OK) /* entries of a blocks file */
        return -EIO;
    sqlite3_busy_timeout(w->db, 5000);
    sqlite3_progress_handler(w->db, EXPORT_CANCEL_STEPS, export_cancelled, w->cancel);
    if (sqlite3_exec(w->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return -EIO;
    if (info_schema_check(w->db, why, sizeof(why)) == -EPROTO) {
        snprintf(w->err, sizeof(w->err), "cannot read session %lld: %s", (long long)w->id, why);
        return -EPROTO;
    }
    if (export_prepare_rows(w) < 0)
        return -EIO;
    proto_pack_ok_header(pk);
    msgpack_pack_map(pk, w->hosts > 0 ? 5 : 4);
    if (w->hosts > 0) {
        proto_pack_str(pk, "hosts");
        msgpack_pack_uint64(pk, w->hosts);
    }
    proto_pack_str(pk, "session");
    msgpack_pack_map(pk, 3);
    proto_pack_str(pk, "id");
    msgpack_pack_int64(pk, w->id);
    proto_pack_str(pk, "name");
    proto_pack_str(pk, w->name);
    proto_pack_str(pk, "state");
    proto_pack_str(pk, w->state);
    proto_pack_str(pk, "ops");
    if (pack_table(w, pk, "SELECT id, name, category FROM ops ORDER BY id") < 0)
        return -EIO;
    proto_pack_str(pk, "devices");
    if (pack_table(w, pk, "SELECT id, name FROM devices ORDER BY id") < 0)
        return -EIO;
    proto_pack_str(pk, "processes");
    return pack_table(w, pk, "SELECT id, rank, pid, host, device FROM processes ORDER BY id");
}

static int export_chunk(struct export_work *w, msgpack_packer *pk)
{
    msgpack_sbuffer body;
    msgpack_packer bpk;
    uint32_t n = 0;
    int rc = SQLITE_ROW;

    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&bpk, &body, msgpack_sbuffer_write);
    /* After SQLITE_DONE another step would start the query over: remember it. */
    while (!w->exhausted && n < EXPORT_CHUNK && body.size < EXPORT_CHUNK_BYTES &&
           (rc = sqlite3_step(w->rows)) == SQLITE_ROW) {
        msgpack_pack_array(&bpk, 11);
        for (int i = 0; i < 10; i++)
            pack_column(&bpk, w->rows, i);
        pack_ext(w, &bpk);
        n++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        msgpack_sbuffer_destroy(&body);
        return -EIO;
    }
    if (rc == SQLITE_DONE)
        w->exhausted = true;
    w->n_rows += n;
    if (n > 0) {
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "rows");
        msgpack_pack_array(pk, n);
        msgpack_sbuffer_write(pk->data, body.data, body.size);
    } else {
        w->done = true;
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "end");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "rows");
        msgpack_pack_uint64(pk, w->n_rows);
    }
    msgpack_sbuffer_destroy(&body);
    return 0;
}

static void export_work_cb(uv_work_t *req)
{
    struct export_work *w = (struct export_work *)req;
    msgpack_packer pk;

    msgpack_sbuffer_clear(&w->out);
    msgpack_packer_init(&pk, &w->out, msgpack_sbuffer_write);
    if (!w->started) {
        w->started = true;
        store_wait_ended(w->store, w->id, EXPORT_END_WAIT_MS);
        w->rc = export_open(w, &pk);
    } else {
        w->rc = export_chunk(w, &pk);
    }
    if (w->rc < 0) {
        if (w->rc != -EPROTO)
            snprintf(w->err, sizeof(w->err), "cannot read session %lld: %s", (long long)w->id,
                     w->db ? sqlite3_errmsg(w->db) : "cannot open its file");
        msgpack_sbuffer_clear(&w->out);
        proto_pack_error(&pk, PROTO_E_INTERNAL, w->err);
        w->done = true;
    }
}

static void export_finish(struct export_work *w)
{
    struct conn *c = w->c;

    sqlite3_finalize(w->rows);
    if (w->db != NULL) {
        sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(w->db);
    }
    if (w->rc < 0)
        log_warn("%s", w->err);
    c->d->n_exports--;
    c->user->exports--;
    /* Its SQLite cache (up to 2 MiB) was freed on a worker thread's arena: conn_trim. */
    c->d->trim_bytes += 2u << 20;
    if (!c->closed)
        conn_resume(c);
    msgpack_sbuffer_destroy(&w->out);
    free(w->name);
    free(w);
    conn_report_done(c->d); /* before the unref, which may free c */
    conn_unref(c);
}

static void export_after_cb(uv_work_t *req, int status);

/* There is room for the next chunk (or the connection closed): read it. */
static void export_room_cb(struct conn *c, void *arg)
{
    struct export_work *w = arg;

    if (c->closed || uv_queue_work(c->d->loop, &w->req, export_work_cb, export_after_cb) < 0)
        export_finish(w);
}

/*
 * A chunk was written to the socket: the next one is read once the unread
 * replies leave room for it (conn_wait_room), so that exports nobody reads
 * count in the unread-reply bounds and hold one chunk each at most.
 */
static void export_sent_cb(struct conn *c, void *arg, int status)
{
    struct export_work *w = arg;

    if (status < 0 || w->done || c->closed)
        export_finish(w);
    else
        conn_wait_room(c, export_room_cb, w);
}

static void export_after_cb(uv_work_t *req, int status)
{
    struct export_work *w = (struct export_work *)req;

    /* conn_send_then takes the chunk's memory; w->out starts empty again */
    if (status < 0 || w->c->closed || conn_send_then(w->c, &w->out, export_sent_cb, w) < 0)
        export_finish(w);
}

void export_start(struct conn *c, struct session *s, const struct proto_request *req)
{
    struct export_work *w = calloc(1, sizeof(*w));
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (w == NULL || (w->name = strdup(s->name)) == NULL) {
        free(w);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        proto_pack_error(&pk, PROTO_E_INTERNAL, "out of memory");
        conn_send(c, &sb);
        return;
    }
    w->c = c;
    w->cancel = &c->d->cancel;
    w->id = s->id;
    w->store = c->d->store;
    w->state = s->live ? "live" : "ended";
    w->by_start = req->by_start;
    w->by_rank = req->by_rank;
    if (c->d->peer_home != NULL)
        w->hosts =
            1 + peerhome_hosts(c->d->peer_home, s->name, s->started_ns, s->live ? 0 : s->ended_ns);
    msgpack_sbuffer_init(&w->out);
    store_session_path(c->d->store, s->id, w->path, sizeof(w->path));
    c->refs++;
    c->busy = true;
    c->d->n_exports++;
    c->user->exports++;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (uv_queue_work(c->d->loop, &w->req, export_work_cb, export_after_cb) < 0) {
        c->busy = false;
        export_finish(w);
    }
}
