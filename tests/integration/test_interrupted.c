/*
 * test_interrupted.c — a session cut short by the daemon says so in every view.
 *
 * A session live when the daemon is killed (kill -9, recovered at the next start) or
 * stopped (SIGTERM) ends "interrupted", with why and when: the `sessions` rows and the
 * report's session map carry `interrupted`, `interrupted_reason` and `interrupted_ns`, and the
 * text of `tracectl sessions`, `report`, `top` and `diff` says "interrupted" with the
 * reason. A session that ended normally says none of it.
 */
#define _GNU_SOURCE /* memmem */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <sqlite3.h>

#include "harness.h"

static struct tdaemon d;

static void fini(void)
{
    harness_daemon_stop(&d, SIGKILL);
    harness_cleanup(&d);
}

TestSuite(interrupted, .fini = fini, .timeout = 120);

static uint64_t wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A session `name` of two ranks with 300 + 200 acked entries, left live (no bye). */
static long long live_session(const char *name, int fds[2])
{
    long long id;

    fds[0] = raw_producer(d.sock, name, 0, 2, "gpu:0", &id);
    fds[1] = raw_producer(d.sock, name, 1, 2, "gpu:1", NULL);
    raw_send_ops(fds[0], 1, "matmul");
    raw_send_ops(fds[1], 1, "matmul");
    raw_send_batch(fds[0], 1, 300, 0, 5);
    raw_send_batch(fds[1], 1, 200, 0, 5);
    cr_assert_eq(raw_flush(fds[0], 1), 300);
    cr_assert_eq(raw_flush(fds[1], 1), 200);
    return id;
}

/* A session of one rank that ended with bye: nothing about it is interrupted. */
static long long clean_session(const char *name)
{
    long long id;
    int fd = raw_producer(d.sock, name, 0, 1, "gpu:0", &id);

    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 100, 0, 5);
    cr_assert_eq(raw_flush(fd, 1), 100);
    raw_bye(fd, 0);
    close(fd);
    raw_wait_state(d.sock, id, "ended", 10);
    return id;
}

/* The sessions row of id, checked for the interrupted keys; want_why NULL: not interrupted. */
static void check_row(long long id, const char *want_why)
{
    struct proto_reader r;
    const msgpack_object *o, *list, *row = NULL, *why;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    list = &o->via.array.ptr[1];
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if ((long long)obj_u64(obj_get(&list->via.array.ptr[i], "id")) == id)
            row = &list->via.array.ptr[i];
    cr_assert_not_null(row, "session %lld not listed", id);
    cr_assert_eq(obj_get(row, "interrupted")->via.boolean, want_why != NULL);
    why = obj_get(row, "interrupted_reason");
    cr_assert_not_null(why, "no interrupted_reason key");
    if (want_why == NULL)
        cr_assert_eq(why->type, MSGPACK_OBJECT_NIL);
    else
        cr_assert(why->type == MSGPACK_OBJECT_STR &&
                      memmem(why->via.str.ptr, why->via.str.size, want_why, strlen(want_why)),
                  "the reason does not say '%s'", want_why);
    proto_reader_deinit(&r);
    close(fd);
}

/* The report's session map of id: interrupted, its reason, and interrupted_ns inside [lo, hi]. */
static void check_report(long long id, const char *want_why, uint64_t lo, uint64_t hi)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *s, *why;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report %lld failed", id);
    s = obj_get(&o->via.array.ptr[1], "session");
    cr_assert_eq(obj_get(s, "interrupted")->via.boolean, want_why != NULL);
    why = obj_get(s, "interrupted_reason");
    if (want_why == NULL)
        cr_assert_eq(why->type, MSGPACK_OBJECT_NIL);
    else
        cr_assert(why->type == MSGPACK_OBJECT_STR &&
                  memmem(why->via.str.ptr, why->via.str.size, want_why, strlen(want_why)));
    cr_assert_geq(obj_u64(obj_get(s, "interrupted_ns")), lo);
    cr_assert_leq(obj_u64(obj_get(s, "interrupted_ns")), hi);
    proto_reader_deinit(&r);
    close(fd);
}

/* The text output of `tracectl ARGS...` (exit 0), for strstr; the caller frees. */
static char *cli(const char *a, const char *b, const char *c)
{
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock, (char *)a, (char *)b, (char *)c, NULL};
    char *out = NULL;

    cr_assert_eq(harness_run(&out, argv), 0, "tracectl %s %s failed", a, b ? b : "");
    return out;
}

static void check_text(long long cut, long long clean, const char *want_why)
{
    char a[32], b[32], *out;

    snprintf(a, sizeof(a), "%lld", cut);
    snprintf(b, sizeof(b), "%lld", clean);
    out = cli("report", a, NULL);
    cr_assert(strstr(out, "ended (interrupted)") != NULL, "report: no state:\n%s", out);
    cr_assert(strstr(out, want_why) != NULL, "report: no reason:\n%s", out);
    free(out);
    out = cli("report", b, NULL);
    cr_assert(strstr(out, "interrupted") == NULL, "a clean session says interrupted:\n%s", out);
    free(out);
    out = cli("sessions", NULL, NULL);
    cr_assert(strstr(out, "ended (interrupted)") != NULL, "sessions:\n%s", out);
    free(out);
    out = cli("top", a, "--once");
    cr_assert(strstr(out, "ended (interrupted)") != NULL, "top: no state:\n%s", out);
    cr_assert(strstr(out, want_why) != NULL, "top: no reason:\n%s", out);
    free(out);
    out = cli("diff", a, b);
    cr_assert(strstr(out, "ended (interrupted)") != NULL, "diff: no state:\n%s", out);
    cr_assert(strstr(out, "A interrupted: ") != NULL, "diff: A not flagged:\n%s", out);
    cr_assert(strstr(out, "B interrupted") == NULL, "diff: B flagged:\n%s", out);
    free(out);
}

Test(interrupted, kill9_is_a_crash_recovered_at_restart)
{
    uint64_t t0, t1;
    long long cut, clean;
    int fds[2];

    harness_daemon_start(&d, NULL);
    clean = clean_session("clean");
    cut = live_session("killed", fds);
    harness_daemon_stop(&d, SIGKILL);
    close(fds[0]);
    close(fds[1]);
    t0 = wall_ns();
    harness_daemon_restart(&d, NULL);
    t1 = wall_ns();
    check_row(cut, "died");
    check_row(clean, NULL);
    /* recovery stamps the end when it runs: between the kill and the restart's return */
    check_report(cut, "died", t0, t1);
    check_text(cut, clean, "the daemon died while the session was live");
}

Test(interrupted, sigterm_is_a_stop)
{
    uint64_t t0, t1;
    long long cut, clean;
    int fds[2];

    harness_daemon_start(&d, NULL);
    clean = clean_session("clean");
    cut = live_session("stopped", fds);
    t0 = wall_ns();
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    t1 = wall_ns();
    close(fds[0]);
    close(fds[1]);
    harness_daemon_restart(&d, NULL);
    check_row(cut, "was stopped");
    check_row(clean, NULL);
    check_report(cut, "was stopped", t0 - 1000000000u, t1);
    check_text(cut, clean, "the daemon was stopped while the session was live");
}

/*
 * kill -9 before the writer committed the session's first process: its file holds no
 * process (made certain here by deleting the rows while the daemon is down). The report of
 * that recovered session answers (0 processes, interrupted); it used to stop the daemon
 * (UBSan: memcpy from NULL in the rank analysis, which had no ranks to sort).
 */
Test(interrupted, a_session_recovered_without_processes_reports)
{
    char path[PATH_MAX + 32], *err = NULL;
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *s;
    long long id;
    sqlite3 *db;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "empty", 0, 2, "gpu:0", &id);
    cr_assert_eq(raw_flush(fd, 1), 0);
    harness_daemon_stop(&d, SIGKILL);
    close(fd);
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "DELETE FROM processes", NULL, NULL, &err), SQLITE_OK, "%s",
                 err ? err : "");
    sqlite3_close(db);
    harness_daemon_restart(&d, NULL);
    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true; /* as `tracectl report` asks */
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the report failed");
    s = obj_get(&o->via.array.ptr[1], "session");
    cr_assert_eq(obj_u64(obj_get(s, "processes")), 0);
    cr_assert_eq(obj_get(s, "interrupted")->via.boolean, true);
    proto_reader_deinit(&r);
    close(fd);
    check_row(id, "died"); /* the daemon is still there */
}
