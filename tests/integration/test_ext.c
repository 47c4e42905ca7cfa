/*
 * test_ext.c — the entry extension map (proto/PROTOCOL.md Part 3, "entry
 * ext") end to end: a raw-protocol producer sends entries with and without
 * an ext map at position 9; the test then reads the session's SQLite file
 * itself (the entry_ext side table, created on demand) and the daemon's
 * export stream, and checks every value against the table below, which is
 * what was sent. Nothing here uses proto_pack_entry or the CLI.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(ext, .fini = stop_and_clean, .timeout = 60);

/* How an entry is sent: without position 9, with nil there, with a map, with more after it. */
enum form { NO_EXT, EXT_NIL, EXT_MAP, EXT_MAP_AND_MORE };

/* One key of a sent ext map; the keys the daemon keeps and an unknown one. */
struct kv {
    const char *key;
    enum { U, I, NIL, JUNK } type;
    uint64_t u;
    int64_t i;
};

struct sent {
    enum form form;
    struct kv kv[8];
    size_t n;
    /* what the daemon keeps: present[k] and value[k] for stream, peer, tag, comm, seq, checksum */
    bool stored; /* a row in entry_ext */
    bool present[6];
    int64_t value[6]; /* as SQLite holds it: the 64 bits of the value */
};

static const char *const keys[6] = {"stream", "peer", "tag", "comm", "seq", "checksum"};

static const struct sent sent[] = {
    {NO_EXT, {{0}}, 0, false, {0}, {0}},
    {EXT_NIL, {{0}}, 0, false, {0}, {0}},
    {EXT_MAP, {{0}}, 0, false, {0}, {0}}, /* an empty map: nothing to keep */
    {EXT_MAP,
     {{"stream", U, 7, 0},
      {"peer", U, 3, 0},
      {"tag", I, 0, -1},
      {"comm", U, 42, 0},
      {"seq", U, 5, 0},
      {"checksum", U, UINT64_MAX, 0}},
     6,
     true,
     {true, true, true, true, true, true},
     {7, 3, -1, 42, 5, -1}},
    {EXT_MAP,
     {{"stream", U, 2, 0}, {"future", JUNK, 0, 0}, {"seq", NIL, 0, 0}},
     3,
     true,
     {true, false, false, false, false, false},
     {2, 0, 0, 0, 0, 0}},
    {EXT_MAP,
     {{"tag", I, 0, INT64_MIN}, {"comm", U, (uint64_t)INT64_MAX + 1, 0}, {"peer", U, 0, 0}},
     3,
     true,
     {false, true, true, true, false, false},
     {0, 0, INT64_MIN, INT64_MIN, 0, 0}},
    {EXT_MAP_AND_MORE,
     {{"checksum", U, 0x0123456789abcdefull, 0}, {"tag", U, 9, 0}},
     2,
     true,
     {false, false, true, false, false, true},
     {0, 0, 9, 0, 0, 0x0123456789abcdefll}},
    {EXT_MAP, {{"nothing", JUNK, 0, 0}}, 1, false, {0}, {0}}, /* only an unknown key */
};
#define NSENT (sizeof(sent) / sizeof(sent[0]))

static void pack_kv(msgpack_packer *pk, const struct kv *kv)
{
    proto_pack_str(pk, kv->key);
    switch (kv->type) {
    case U:
        msgpack_pack_uint64(pk, kv->u);
        break;
    case I:
        msgpack_pack_int64(pk, kv->i);
        break;
    case NIL:
        msgpack_pack_nil(pk);
        break;
    case JUNK:
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "any");
        msgpack_pack_double(pk, 1.5);
        break;
    }
}

/* Entry i: [i, 1, 1000 * (i + 1), 10, nil, nil, nil, nil, "gpu:0", <ext>, <more>] */
static void pack_sent(msgpack_packer *pk, size_t i)
{
    const struct sent *s = &sent[i];
    size_t fields = s->form == NO_EXT ? 9 : s->form == EXT_MAP_AND_MORE ? 11 : 10;

    msgpack_pack_array(pk, fields);
    msgpack_pack_uint64(pk, i);
    msgpack_pack_uint64(pk, 1);
    msgpack_pack_uint64(pk, 1000 * (i + 1));
    msgpack_pack_uint64(pk, 10);
    for (int k = 0; k < 4; k++)
        msgpack_pack_nil(pk);
    proto_pack_str(pk, "gpu:0");
    if (s->form == NO_EXT)
        return;
    if (s->form == EXT_NIL) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_map(pk, s->n);
    for (size_t k = 0; k < s->n; k++)
        pack_kv(pk, &s->kv[k]);
    if (s->form == EXT_MAP_AND_MORE)
        proto_pack_str(pk, "a later version's field"); /* position 10: ignored */
}

/* A producer in a new session; sends every entry of the table and waits for the ack. */
static long long send_all(const char *session)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    long long id;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, session, 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, NSENT);
    for (size_t i = 0; i < NSENT; i++)
        pack_sent(&pk, i);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    cr_assert_eq(raw_flush(fd, 1), (long long)NSENT, "every entry is stored");
    raw_bye(fd, 0);
    return id;
}

static sqlite3 *open_session(long long id)
{
    char path[PATH_MAX + 64];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    return db;
}

/* The entry_ext table holds exactly the rows the table says, keyed by the entry's rowid. */
static void check_file(long long id)
{
    sqlite3 *db = open_session(id);
    sqlite3_stmt *st;
    size_t rows = 0, want = 0;

    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT e.step, x.stream, x.peer, x.tag, x.comm, x.seq,"
                                    " x.checksum FROM entry_ext x"
                                    " JOIN entries e ON e.rowid = x.entry_rowid ORDER BY e.step",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    for (size_t i = 0; i < NSENT; i++) {
        if (!sent[i].stored)
            continue;
        want++;
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "entry %zu has no entry_ext row", i);
        cr_assert_eq(sqlite3_column_int64(st, 0), (int64_t)i, "a row for entry %lld, not %zu",
                     (long long)sqlite3_column_int64(st, 0), i);
        for (int k = 0; k < 6; k++) {
            bool null = sqlite3_column_type(st, 1 + k) == SQLITE_NULL;
            cr_assert_eq(null, !sent[i].present[k], "entry %zu: %s %s", i, keys[k],
                         null ? "missing" : "stored though absent");
            if (!null)
                cr_assert_eq(sqlite3_column_int64(st, 1 + k), sent[i].value[k],
                             "entry %zu: %s is %lld", i, keys[k],
                             (long long)sqlite3_column_int64(st, 1 + k));
        }
        rows++;
    }
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "more entry_ext rows than entries with ext");
    cr_assert_eq(rows, want);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Checks an export row's 11th element against what entry `i` sent. */
static void check_row_ext(size_t i, const msgpack_object *ext)
{
    const struct sent *s = &sent[i];

    if (!s->stored) {
        cr_assert_eq(ext->type, MSGPACK_OBJECT_NIL, "entry %zu: ext should be nil", i);
        return;
    }
    cr_assert_eq(ext->type, MSGPACK_OBJECT_MAP, "entry %zu: ext should be a map", i);
    size_t n = 0;
    for (int k = 0; k < 6; k++) {
        const msgpack_object *v = obj_get(ext, keys[k]);
        cr_assert_eq(v != NULL, s->present[k], "entry %zu: export %s", i, keys[k]);
        if (v == NULL)
            continue;
        n++;
        if (k == 2) { /* tag: signed */
            int64_t got =
                v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? v->via.i64 : (int64_t)v->via.u64;
            cr_assert(v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
                      v->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
            cr_assert_eq(got, s->value[k], "entry %zu: tag %lld", i, (long long)got);
        } else {
            cr_assert_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "entry %zu: %s not unsigned", i,
                         keys[k]);
            cr_assert_eq(v->via.u64, (uint64_t)s->value[k], "entry %zu: %s %llu", i, keys[k],
                         (unsigned long long)v->via.u64);
        }
    }
    cr_assert_eq(ext->via.map.size, n, "entry %zu: ext has other keys", i);
}

/* Reads the export stream; every row has 11 elements and the ext map of its entry. */
static void check_export(long long id)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    size_t rows = 0;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_EXPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "export refused");
    for (;;) {
        cr_assert_eq(raw_recv_object(fd, &r, &o), 0, "the export stream ended early");
        const msgpack_object *a = o->via.array.ptr;
        if (obj_str_eq(&a[0], "end"))
            break;
        cr_assert(obj_str_eq(&a[0], "rows"));
        for (uint32_t k = 0; k < a[1].via.array.size; k++) {
            const msgpack_object *row = &a[1].via.array.ptr[k];
            cr_assert_eq(row->via.array.size, 11, "an export row has %u elements",
                         row->via.array.size);
            size_t step = (size_t)row->via.array.ptr[1].via.u64;
            cr_assert_eq(step, rows, "rows in storage order");
            cr_assert_eq(row->via.array.ptr[4].via.u64, 1000 * (step + 1));
            check_row_ext(step, &row->via.array.ptr[10]);
            rows++;
        }
    }
    cr_assert_eq(rows, NSENT);
    close(fd);
    proto_reader_deinit(&r);
}

Test(ext, ext_map_stored_in_side_table_and_exported)
{
    long long id = send_all("ext-test");

    check_export(id);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0); /* the file at rest */
    check_file(id);
}

/* A session without ext maps has no entry_ext table (old files look the same), and exports. */
Test(ext, side_table_created_on_demand)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    sqlite3_stmt *st;
    long long id;
    sqlite3 *db;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "no-ext", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 5, 1000, 10);
    cr_assert_eq(raw_flush(fd, 1), 5);
    raw_bye(fd, 0);
    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_EXPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    cr_assert_eq(raw_recv_object(fd, &r, &o), 0);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "rows"));
    cr_assert_eq(o->via.array.ptr[1].via.array.size, 5);
    for (uint32_t k = 0; k < 5; k++) {
        const msgpack_object *row = &o->via.array.ptr[1].via.array.ptr[k];
        cr_assert_eq(row->via.array.size, 11);
        cr_assert_eq(row->via.array.ptr[10].type, MSGPACK_OBJECT_NIL);
    }
    close(fd);
    proto_reader_deinit(&r);

    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0); /* the file at rest */
    db = open_session(id);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT count(*) FROM sqlite_master WHERE name = 'entry_ext'",
                                    -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 0, "entry_ext made without an ext map");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A wrong type in an ext map gets bad_message; what came before it stays stored. */
Test(ext, wrong_type_refused_earlier_entries_kept)
{
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    long long id;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "bad-ext", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 3, 1000, 10);
    cr_assert_eq(raw_flush(fd, 1), 3);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, 1);
    msgpack_pack_array(&pk, 10);
    for (int k = 0; k < 4; k++)
        msgpack_pack_uint64(&pk, 1);
    for (int k = 0; k < 5; k++)
        msgpack_pack_nil(&pk);
    msgpack_pack_map(&pk, 1);
    proto_pack_str(&pk, "peer");
    msgpack_pack_int64(&pk, -2); /* a rank is never negative */
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no error reply");
    cr_assert_eq(m.type, PROTO_ERROR);
    cr_assert_str_eq(m.u.error.code, PROTO_E_MESSAGE, "%s", m.u.error.message);
    cr_assert(strstr(m.u.error.message, "ext.peer") != NULL, "%s", m.u.error.message);
    proto_msg_free(&m);
    cr_assert(raw_closed(fd));
    close(fd);
    proto_reader_deinit(&r);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0); /* the file at rest */

    sqlite3 *db = open_session(id);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM entries", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
