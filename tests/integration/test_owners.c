/*
 * test_owners.c — a real tracectld under --system with producers and clients
 * of other uids: the pid recorded is the kernel's (the hello's is kept as
 * claimed_pid), `status` shows a user their own figures, and an admin names
 * their own session first and sees each session's owner. Needs root (skipped
 * without).
 */
#include <criterion/criterion.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(owners, .fini = stop_and_clean, .timeout = 120);

Test(owners, pid_is_the_kernels_and_the_hello_pid_is_kept_as_claimed_pid)
{
    int got[2];
    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;

    harness_system_daemon(&d, NULL, NULL);
    raw_user_session(d.sock, 65534, "claims", 3, 4242, got);
    snprintf(path, sizeof(path), "%s/sessions/%d.db", d.data, got[1]);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000); /* the writer may be closing the file */
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT pid, claimed_pid, uid FROM processes", -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), got[0], "pid must come from SO_PEERCRED");
    cr_assert_eq(sqlite3_column_int64(st, 1), 4242, "the hello's pid, labelled claimed_pid");
    cr_assert_eq(sqlite3_column_int64(st, 2), 65534);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* status as uid: sessions, entries, connections, scope, queue_depth nil. */
static void status_as(uid_t uid, unsigned long long want[3], const char *scope)
{
    int pfd[2];
    pid_t pid;
    unsigned long long got[4];

    harness_pipe(pfd);
    pid = harness_fork_as(uid, 60);
    if (pid == 0) {
        struct proto_reader r;
        int fd;
        const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd);
        const msgpack_object *m = &o->via.array.ptr[1];
        got[0] = obj_u64(obj_get(m, "sessions"));
        got[1] = obj_u64(obj_get(m, "entries"));
        got[2] = obj_u64(obj_get(m, "connections"));
        got[3] =
            obj_str_eq(obj_get(m, "scope"), scope) &&
            (strcmp(scope, "user") != 0 || obj_get(m, "queue_depth")->type == MSGPACK_OBJECT_NIL);
        if (write(pfd[1], got, sizeof(got)) != sizeof(got))
            _exit(5);
        _exit(0);
    }
    close(pfd[1]);
    cr_assert_eq(harness_read_within(pfd[0], got, sizeof(got), 30), 0, "status as %u failed", uid);
    close(pfd[0]);
    cr_assert_eq(harness_wait_child(pid), 0);
    cr_assert_eq(got[0], want[0], "uid %u: sessions %llu", uid, got[0]);
    cr_assert_eq(got[1], want[1], "uid %u: entries %llu", uid, got[1]);
    cr_assert_eq(got[2], want[2], "uid %u: connections %llu", uid, got[2]);
    cr_assert(got[3], "uid %u: scope is not %s (or daemon-wide figures shown)", uid, scope);
}

Test(owners, status_shows_a_user_their_own_figures)
{
    int got[2];

    harness_system_daemon(&d, NULL, NULL);
    raw_user_session(d.sock, 65534, "a", 10, 1, got);
    raw_user_session(d.sock, 65534, "b", 5, 1, got);
    raw_user_session(d.sock, 65533, "c", 20, 1, got);
    /* own sessions, own entries, and only the status connection itself */
    status_as(65534, (unsigned long long[3]){2, 15, 1}, "user");
    status_as(65533, (unsigned long long[3]){1, 20, 1}, "user");
    /* root: the daemon's figures */
    status_as(0, (unsigned long long[3]){3, 35, 1}, "daemon");
}

Test(owners, an_admin_names_their_own_session_first_and_sees_owners)
{
    int mine[2], theirs[2];
    struct proto_request req;
    struct proto_reader r;
    int fd;

    harness_system_daemon(&d, NULL, NULL);
    raw_user_session(d.sock, 0, "job-42", 5, 1, mine);
    raw_user_session(d.sock, 65534, "job-42", 7, 1, theirs); /* newer, another user's */
    proto_request_init(&req);
    req.session.name = "job-42";
    const msgpack_object *o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    const msgpack_object *s = obj_get(&o->via.array.ptr[1], "session");
    cr_assert_eq(obj_u64(obj_get(s, "id")), (unsigned long long)mine[1],
                 "root's `report job-42` resolved to another user's session");
    cr_assert_eq(obj_u64(obj_get(s, "entries")), 5);
    proto_reader_deinit(&r);
    close(fd);
    /* by id, the other user's session is still reachable for an admin */
    req.session.name = NULL;
    req.session.id = theirs[1];
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    cr_assert_eq(obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "entries")), 7);
    proto_reader_deinit(&r);
    close(fd);
    /* sessions names each owner for an admin */
    struct passwd *pw = getpwuid(65534);
    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    const msgpack_object *list = &o->via.array.ptr[1];
    cr_assert_eq(list->via.array.size, 2);
    for (uint32_t i = 0; i < 2; i++) {
        const msgpack_object *row = &list->via.array.ptr[i];
        bool is_theirs = obj_u64(obj_get(row, "id")) == (unsigned long long)theirs[1];
        const char *want = is_theirs ? (pw != NULL ? pw->pw_name : "uid 65534") : "root";
        cr_assert(obj_str_eq(obj_get(row, "owner"), want), "row %u: owner is not %s", i, want);
    }
    proto_reader_deinit(&r);
    close(fd);
}
