/*
 * test_daemon.c — tracectld driven over the raw protocol (no libtracectl):
 * sessions and ids, bad input on one connection while another streams,
 * SIGTERM with acked data, socket takeover rules, linger, delete.
 * Expected values are computed here from what the test sent.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(daemon, .fini = stop_and_clean, .timeout = 60);

/* ---- short names for the harness helpers ------------------------------ */

struct pk {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void pk_init(struct pk *p)
{
    msgpack_sbuffer_init(&p->sb);
    msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

#define send_ops   raw_send_ops
#define send_batch raw_send_batch
#define bye        raw_bye

static unsigned long long flush(int fd, uint64_t seq)
{
    long long stored = raw_flush(fd, seq);

    cr_assert_geq(stored, 0, "flush %llu got no ack", (unsigned long long)seq);
    return (unsigned long long)stored;
}

static const msgpack_object *control(enum proto_type type, const struct proto_request *req,
                                     struct proto_reader *r, int *fd_out)
{
    return raw_control(d.sock, type, req, r, fd_out);
}

/* The newest session row, and the count of rows. */
static unsigned sessions(struct proto_reader *r, int *fd, const msgpack_object **newest)
{
    const msgpack_object *o = control(PROTO_SESSIONS, NULL, r, fd), *list;

    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    list = &o->via.array.ptr[1];
    cr_assert_eq(list->type, MSGPACK_OBJECT_ARRAY);
    *newest = list->via.array.size ? &list->via.array.ptr[0] : NULL;
    return list->via.array.size;
}

static void wait_state(long long id, const char *state, int seconds)
{
    raw_wait_state(d.sock, id, state, seconds);
}

/* ---- tests --------------------------------------------------------------- */

Test(daemon, same_name_after_end_gets_new_id)
{
    long long id1, id2;
    struct proto_reader r;
    const msgpack_object *row;
    int fd, cfd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "job-x", 0, 1, "gpu:0", &id1);
    send_ops(fd, 1, "matmul");
    send_batch(fd, 1, 10, 1000, 50);
    cr_assert_eq(flush(fd, 1), 10);
    bye(fd, 0);
    wait_state(id1, "ended", 5);

    fd = raw_producer(d.sock, "job-x", 0, 1, "gpu:0", &id2);
    cr_assert_neq(id2, id1, "a new session must get a new id");
    cr_assert_gt(id2, id1);
    cr_assert_eq(sessions(&r, &cfd, &row), 2);
    cr_assert_eq((long long)obj_u64(obj_get(row, "id")), id2, "newest first");
    cr_assert(obj_str_eq(obj_get(row, "state"), "live"));
    proto_reader_deinit(&r);
    close(cfd);
    close(fd);
    /* the files are named by id, never by the client's name */
    char path[PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id1);
    cr_assert_eq(stat(path, &st), 0, "missing %s", path);
}

/* A malformed message on one connection: error + close; the other streams on. */
Test(daemon, malformed_connection_does_not_disturb_others)
{
    struct proto_reader r;
    struct proto_msg m;
    long long id;
    int good, bad;
    struct pk p;

    harness_daemon_start(&d, NULL);
    good = raw_producer(d.sock, "mixed", 0, 2, "gpu:0", &id);
    bad = raw_producer(d.sock, "mixed", 1, 2, "gpu:1", NULL);
    send_ops(good, 1, "matmul");
    send_ops(bad, 7, "conv2d");
    send_batch(good, 1, 100, 0, 10);
    send_batch(bad, 7, 40, 0, 20); /* accepted before the bad message */
    /* an entry with an op id this connection never defined */
    send_batch(bad, 99, 1, 0, 1);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(bad, &r, &m), 0);
    cr_assert_eq(m.type, PROTO_ERROR);
    cr_assert_str_eq(m.u.error.code, "unknown_op");
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    cr_assert(raw_closed(bad), "the bad connection was not closed");
    close(bad);
    /* garbage bytes on a third connection */
    int junk = raw_connect(d.sock);
    pk_init(&p);
    msgpack_sbuffer_write(&p.sb, "\xc1\xc1\xc1\xc1", 4);
    raw_send(junk, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(junk, &r, &m), 0);
    cr_assert_str_eq(m.u.error.code, "bad_msgpack");
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    close(junk);

    send_batch(good, 1, 100, 500000, 10); /* keeps streaming */
    cr_assert_eq(flush(good, 1), 200);
    bye(good, 0);
    wait_state(id, "ended", 5);

    /* every entry accepted before the error is stored: 200 + 40 */
    struct proto_request req;
    const msgpack_object *o, *sess, *ops;
    int cfd;
    proto_request_init(&req);
    req.session.id = id;
    o = control(PROTO_REPORT, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    sess = obj_get(&o->via.array.ptr[1], "session");
    cr_assert_eq(obj_u64(obj_get(sess, "entries")), 240);
    cr_assert_eq(obj_u64(obj_get(sess, "processes")), 2);
    /* matmul: 2 × sum(10..109) = 2 × 5950; conv2d: sum(20..59) = 1580 */
    cr_assert_eq(obj_u64(obj_get(sess, "total_ns")), 2 * 5950 + 1580);
    ops = obj_get(&o->via.array.ptr[1], "ops");
    cr_assert_eq(ops->via.array.size, 2);
    cr_assert(obj_str_eq(obj_get(&ops->via.array.ptr[0], "op"), "matmul"));
    cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[0], "calls")), 200);
    cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[1], "calls")), 40);
    proto_reader_deinit(&r);
    close(cfd);
}

/*
 * A batch whose entries name an undefined op id among defined ones: the
 * daemon answers unknown_op and closes the connection (v1: a message not of
 * its form), but stores the batch's entries of defined ops and counts the
 * refused ones in the process's (and session's) dropped. Before, the whole
 * batch was lost: 0 stored, dropped 0.
 */
Test(daemon, unknown_op_keeps_the_batch_s_good_entries)
{
    /* op ids of the batch, in order: 1 and 2 are defined, 99 and 7 are not */
    static const uint32_t ops[] = {1, 1, 99, 2, 1, 7, 7, 2};
    struct proto_reader r;
    struct proto_msg m;
    const msgpack_object *o, *sess, *list;
    struct proto_request req;
    long long id;
    int fd, cfd;
    struct pk p;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "unknown-op", 0, 1, "gpu:0", &id);
    send_ops(fd, 1, "matmul");
    send_ops(fd, 2, "conv2d");
    send_batch(fd, 1, 10, 0, 100); /* stored before: 10 matmul of 100..109 ns */
    cr_assert_eq(flush(fd, 1), 10);
    pk_init(&p);
    msgpack_pack_array(&p.pk, 2);
    msgpack_pack_str(&p.pk, 5);
    msgpack_pack_str_body(&p.pk, "batch", 5);
    msgpack_pack_array(&p.pk, sizeof(ops) / sizeof(ops[0]));
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        msgpack_pack_array(&p.pk, 4);
        msgpack_pack_uint64(&p.pk, 0);
        msgpack_pack_uint32(&p.pk, ops[i]);
        msgpack_pack_uint64(&p.pk, 1000000 + i);
        msgpack_pack_uint64(&p.pk, 1000 + i); /* dur: 1000 + position */
    }
    raw_send(fd, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0);
    cr_assert_eq(m.type, PROTO_ERROR);
    cr_assert_str_eq(m.u.error.code, "unknown_op");
    cr_assert(strstr(m.u.error.message, "op id 99 ") != NULL, "%s", m.u.error.message);
    cr_assert(strstr(m.u.error.message, "(entry 2)") != NULL, "%s", m.u.error.message);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    cr_assert(raw_closed(fd), "the connection was not closed");
    close(fd);
    wait_state(id, "ended", 5);

    proto_request_init(&req);
    req.session.id = id;
    o = control(PROTO_REPORT, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    sess = obj_get(&o->via.array.ptr[1], "session");
    /* 10 before + positions 0, 1, 3, 4, 7 of the batch; 99 and 7, 7 refused */
    cr_assert_eq(obj_u64(obj_get(sess, "entries")), 15);
    cr_assert_eq(obj_u64(obj_get(sess, "dropped")), 3);
    /* sum(100..109) + 1000 + 1001 + 1003 + 1004 + 1007 */
    cr_assert_eq(obj_u64(obj_get(sess, "total_ns")), 1045 + 5015);
    list = obj_get(&o->via.array.ptr[1], "ops");
    cr_assert_eq(list->via.array.size, 2);
    cr_assert(obj_str_eq(obj_get(&list->via.array.ptr[0], "op"), "matmul"));
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[0], "calls")), 13);
    cr_assert(obj_str_eq(obj_get(&list->via.array.ptr[1], "op"), "conv2d"));
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[1], "calls")), 2);
    proto_reader_deinit(&r);
    close(cfd);
}

Test(daemon, bad_state_and_unknown_types)
{
    static const struct {
        const char *first; /* message type sent before hello */
        const char *code;
    } cases[] = {{"batch", "bad_state"},
                 {"ops", "bad_state"},
                 {"flush", "bad_state"},
                 {"welcome", "unknown_type"},
                 {"nope", "unknown_type"}};
    struct proto_reader r;
    struct proto_msg m;
    struct pk p;

    harness_daemon_start(&d, NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = raw_connect(d.sock);
        pk_init(&p);
        msgpack_pack_array(&p.pk, 2);
        msgpack_pack_str(&p.pk, strlen(cases[i].first));
        msgpack_pack_str_body(&p.pk, cases[i].first, strlen(cases[i].first));
        if (strcmp(cases[i].first, "flush") == 0) {
            msgpack_pack_uint64(&p.pk, 1);
        } else if (strcmp(cases[i].first, "welcome") == 0) { /* well-formed, but a reply */
            msgpack_pack_map(&p.pk, 1);
            proto_pack_str(&p.pk, "session_id");
            msgpack_pack_uint64(&p.pk, 1);
        } else {
            msgpack_pack_array(&p.pk, 0);
        }
        raw_send(fd, &p.sb);
        msgpack_sbuffer_destroy(&p.sb);
        proto_reader_init(&r, 0);
        cr_assert_eq(raw_recv(fd, &r, &m), 0, "%s: no reply", cases[i].first);
        cr_assert_eq(m.type, PROTO_ERROR, "%s", cases[i].first);
        cr_assert_str_eq(m.u.error.code, cases[i].code, "%s", cases[i].first);
        proto_msg_free(&m);
        proto_reader_deinit(&r);
        cr_assert(raw_closed(fd));
        close(fd);
    }
    /* a second hello */
    int fd = raw_producer(d.sock, "twice", 0, 1, NULL, NULL);
    struct proto_hello h = {.proto = 1, .session = "twice", .rank = -1, .world = -1, .pid = -1};
    pk_init(&p);
    proto_pack_hello(&p.pk, &h);
    raw_send(fd, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0);
    cr_assert_str_eq(m.u.error.code, "bad_state");
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    close(fd);
    /* the daemon still answers */
    int cfd;
    const msgpack_object *row;
    cr_assert_eq(sessions(&r, &cfd, &row), 1);
    proto_reader_deinit(&r);
    close(cfd);
}

/* SIGTERM mid-stream: everything acked (and everything received) is on disk. */
Test(daemon, sigterm_loses_nothing_acked)
{
    long long id;
    unsigned long long acked;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "term", 0, 1, "gpu:0", &id);
    send_ops(fd, 1, "matmul");
    for (int i = 0; i < 20; i++)
        send_batch(fd, 1, 1000, (uint64_t)i * 10000000, 5);
    acked = flush(fd, 1);
    cr_assert_eq(acked, 20000);
    send_batch(fd, 1, 500, 999000000, 5); /* in flight when the signal comes */
    /* the event: the daemon has received them (the session counts them as they
     * are queued for the writer), whether or not they are committed yet */
    for (int i = 0;; i++) {
        struct proto_reader sr;
        const msgpack_object *newest;
        int sfd;
        sessions(&sr, &sfd, &newest);
        unsigned long long got = obj_u64(obj_get(newest, "entries"));
        proto_reader_deinit(&sr);
        close(sfd);
        if (got == 20500)
            break;
        cr_assert_lt(i, 1000, "the daemon received %llu of 20500 entries", got);
        usleep(5000);
    }
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0, "tracectld must exit 0 on SIGTERM");
    close(fd);

    /* Reopen: the entries are there and the session is ended (interrupted). */
    harness_daemon_restart(&d, NULL);
    struct proto_reader r;
    struct proto_request req;
    const msgpack_object *o, *sess, *row;
    int cfd;
    proto_request_init(&req);
    req.session.id = id;
    o = control(PROTO_REPORT, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    sess = obj_get(&o->via.array.ptr[1], "session");
    cr_assert_geq(obj_u64(obj_get(sess, "entries")), acked);
    cr_assert_eq(obj_u64(obj_get(sess, "entries")), 20500, "everything received is committed");
    cr_assert(obj_str_eq(obj_get(sess, "state"), "ended"));
    proto_reader_deinit(&r);
    close(cfd);
    cr_assert_eq(sessions(&r, &cfd, &row), 1);
    cr_assert(obj_str_eq(obj_get(row, "state"), "ended"));
    proto_reader_deinit(&r);
    close(cfd);
}

Test(daemon, refuses_live_socket_and_replaces_stale_one)
{
    char *argv[] = {TRACECTLD_BIN, "--socket", d.sock, "--data-dir", NULL, NULL};
    char other[PATH_MAX + 16];
    char *out = NULL;

    harness_daemon_start(&d, NULL);
    snprintf(other, sizeof(other), "%s/data2", d.dir);
    argv[2] = d.sock;
    argv[4] = other;
    /* a live daemon answers: refuse, exit non-zero, leave its socket alone */
    cr_assert_neq(harness_run(&out, argv), 0);
    free(out);
    int fd = raw_connect(d.sock);
    cr_assert_geq(fd, 0, "the first daemon's socket was removed");
    close(fd);
    /* kill -9 leaves a stale socket file: a new daemon replaces it */
    harness_daemon_stop(&d, SIGKILL);
    struct stat st;
    cr_assert_eq(stat(d.sock, &st), 0, "the stale socket file should still be there");
    harness_daemon_restart(&d, NULL);
    fd = raw_connect(d.sock);
    cr_assert_geq(fd, 0);
    close(fd);
}

Test(daemon, unwritable_data_dir_is_a_one_line_error)
{
    char *argv[] = {TRACECTLD_BIN,
                    "--socket",
                    "/tmp/tctest-unused.sock",
                    "--data-dir",
                    "/proc/tracectl-cannot-exist",
                    NULL};
    char *out = NULL;

    d.dir[0] = '\0';
    cr_assert_eq(harness_run(&out, argv), 1);
    free(out);
}

/* world=2 but one process joined and left: live until the linger time ends it. */
Test(daemon, world_keeps_session_live_until_linger)
{
    long long id, id2;
    struct proto_reader r;
    const msgpack_object *row;
    int fd, cfd;

    /* a linger no test run outlasts: "still live" cannot race the clock */
    harness_daemon_start(&d, "--linger", "3600", NULL);
    fd = raw_producer(d.sock, "ranks", 0, 2, "gpu:0", &id);
    bye(fd, 0); /* returns once the daemon closed: it has recorded the leave */
    sessions(&r, &cfd, &row);
    cr_assert_eq(obj_u64(obj_get(row, "connected")), 0);
    cr_assert(obj_str_eq(obj_get(row, "state"), "live"), "rank 1 is still expected");
    proto_reader_deinit(&r);
    close(cfd);
    /* rank 1 arrives late but within the linger: same session */
    fd = raw_producer(d.sock, "ranks", 1, 2, "gpu:1", &id2);
    cr_assert_eq(id2, id);
    bye(fd, 3);
    wait_state(id, "ended", 5); /* both joined and left: ends at once */
    sessions(&r, &cfd, &row);
    cr_assert_eq(obj_u64(obj_get(row, "processes")), 2);
    cr_assert_eq(obj_u64(obj_get(row, "dropped")), 3);
    proto_reader_deinit(&r);
    close(cfd);

    /* and one that never completes ends after the linger (1 s) */
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    harness_daemon_restart(&d, "--linger", "1", NULL);
    fd = raw_producer(d.sock, "lonely", 0, 4, NULL, &id);
    bye(fd, 0);
    wait_state(id, "ended", 5);
}

Test(daemon, delete_rules)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    long long id;
    int fd, cfd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "del", 0, 1, NULL, &id);
    proto_request_init(&req);
    req.session.id = id;
    o = control(PROTO_DELETE, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "error"));
    cr_assert(obj_str_eq(obj_get(&o->via.array.ptr[1], "code"), "session_live"));
    proto_reader_deinit(&r);
    close(cfd);
    bye(fd, 0);
    wait_state(id, "ended", 5);
    o = control(PROTO_DELETE, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "delete of an ended session");
    cr_assert_eq((long long)obj_u64(obj_get(&o->via.array.ptr[1], "deleted")), id);
    proto_reader_deinit(&r);
    close(cfd);
    char path[PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_neq(stat(path, &st), 0, "%s still exists", path);
    o = control(PROTO_DELETE, &req, &r, &cfd);
    cr_assert(obj_str_eq(obj_get(&o->via.array.ptr[1], "code"), "no_session"));
    proto_reader_deinit(&r);
    close(cfd);
    /* report of an unknown name */
    req.session.name = "never-was";
    o = control(PROTO_REPORT, &req, &r, &cfd);
    cr_assert(obj_str_eq(obj_get(&o->via.array.ptr[1], "code"), "no_session"));
    proto_reader_deinit(&r);
    close(cfd);
}

/* The value of meta[key] of process 1 in a session file at rest, as text; NULL when absent. */
static char *stored_meta(long long id, const char *key)
{
    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;
    char *v = NULL;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT CAST(value AS TEXT) FROM meta "
                                    "WHERE process_id = 1 AND key = ?1",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* hello's meta is the process's first metadata; a later meta message merges into it. */
Test(daemon, hello_meta_is_stored_and_merged)
{
    struct proto_kv hello_kv[] = {{.key = "model", .type = PROTO_V_STR, .v.s = "resnet50"},
                                  {.key = "layers", .type = PROTO_V_INT, .v.i = 50}};
    struct proto_kv later[] = {{.key = "layers", .type = PROTO_V_INT, .v.i = 101},
                               {.key = "lr", .type = PROTO_V_FLOAT, .v.f = 0.5}};
    struct proto_hello h = {.proto = 1,
                            .session = "with-meta",
                            .rank = 0,
                            .world = 1,
                            .pid = getpid(),
                            .meta = hello_kv,
                            .n_meta = 2};
    struct proto_reader r;
    struct proto_msg m;
    long long id;
    struct pk p;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_connect(d.sock);
    cr_assert_geq(fd, 0);
    pk_init(&p);
    proto_pack_hello(&p.pk, &h);
    raw_send(fd, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no reply to hello");
    cr_assert_eq(m.type, PROTO_WELCOME, "hello got %s", proto_type_name(m.type));
    id = m.u.welcome.session_id;
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    pk_init(&p);
    proto_pack_meta(&p.pk, later, 2);
    raw_send(fd, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    send_ops(fd, 1, "matmul");
    send_batch(fd, 1, 3, 1000, 50);
    cr_assert_eq(flush(fd, 1), 3);
    bye(fd, 0);
    wait_state(id, "ended", 5);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);

    char *model = stored_meta(id, "model"), *layers = stored_meta(id, "layers"),
         *lr = stored_meta(id, "lr");
    cr_assert_str_eq(model ? model : "(none)", "resnet50", "hello's meta is stored");
    cr_assert_str_eq(layers ? layers : "(none)", "101", "a later meta replaces a key");
    cr_assert_str_eq(lr ? lr : "(none)", "0.5", "and adds new ones");
    free(model);
    free(layers);
    free(lr);
}

/* A bad value names the option it was given to (main.c looks the name up by getopt's index). */
Test(daemon, bad_option_value_names_the_option)
{
    static const char *const opts[] = {"max-live-sessions", "max-session-bytes", "max-user-bytes",
                                       "retain-days", "retain-bytes"};
    char cmd[PATH_MAX + 128], want[128];

    d.dir[0] = '\0';
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        char *out = NULL;

        snprintf(cmd, sizeof(cmd), "exec %s --socket /tmp/tctest-unused.sock --%s 12Q 2>&1",
                 TRACECTLD_BIN, opts[i]);
        snprintf(want, sizeof(want), "tracectld: bad value '12Q' for --%s\n", opts[i]);
        cr_assert_eq(harness_run(&out, argv), 2, "--%s", opts[i]);
        cr_assert_str_eq(out, want);
        free(out);
    }
}
