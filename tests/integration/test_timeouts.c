/*
 * test_timeouts.c — a real tracectld's timeouts (README "Limits":
 * --request-timeout, --idle-timeout) on half-sent requests and idle
 * connections, and the library's tc_close on a stalled daemon (README
 * "Faults"): it returns at its own timeout, and the daemon ends the process
 * as soon as it runs again.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(timeouts, .fini = stop_and_clean, .timeout = 120);

/* ---- timeouts (README "Limits": --request-timeout, --idle-timeout) ------- */

/* Reads the daemon's error on fd: true when it is `limit` and names `flag`. */
static bool got_limit_naming(int fd, const char *flag)
{
    struct proto_reader r;
    struct proto_msg m;
    bool ok;

    proto_reader_init(&r, 0);
    if (raw_recv(fd, &r, &m) < 0) {
        proto_reader_deinit(&r);
        return false;
    }
    ok = m.type == PROTO_ERROR && strcmp(m.u.error.code, "limit") == 0 &&
         strstr(m.u.error.message, flag) != NULL;
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    return ok;
}

Test(timeouts, half_sent_request_is_closed_after_request_timeout)
{
    struct proto_request req;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    harness_daemon_start(&d, "--request-timeout", "1s", "--idle-timeout", "0", NULL);
    /* a control request cut in half, then nothing: raw_recv waits 5 s, the bound is 1 s
     * (+ a quarter for the check's period) */
    int fd = raw_connect(d.sock);
    raw_pack_init(&sb, &pk);
    proto_request_init(&req);
    req.session.id = -1;
    req.session.name = "some-session-name";
    proto_pack_request(&pk, PROTO_REPORT, &req);
    cr_assert(sb.size > 4);
    cr_assert_eq(write(fd, sb.data, sb.size / 2), (ssize_t)(sb.size / 2));
    cr_assert(got_limit_naming(fd, "--request-timeout"),
              "a half-sent request was not answered with limit");
    cr_assert(raw_closed(fd));
    close(fd);
    msgpack_sbuffer_destroy(&sb);

    /* a producer cut in the middle of a batch: the same; what it flushed before stays */
    long long id;
    int p = raw_producer(d.sock, "half", 0, 1, NULL, &id);
    raw_send_ops(p, 1, "matmul");
    raw_send_batch(p, 1, 3, 1000, 10);
    cr_assert_eq(raw_flush(p, 1), 3);
    struct proto_entry e = {.step = 1, .op_id = 1, .start_ns = 5, .dur_ns = 5};
    raw_pack_init(&sb, &pk);
    proto_pack_batch_header(&pk, 1);
    proto_pack_entry(&pk, &e, "");
    cr_assert_eq(write(p, sb.data, sb.size - 1), (ssize_t)(sb.size - 1));
    cr_assert(got_limit_naming(p, "--request-timeout"),
              "a producer's half-sent batch was not answered with limit");
    cr_assert(raw_closed(p));
    close(p);
    msgpack_sbuffer_destroy(&sb);
}

Test(timeouts, idle_control_connection_is_closed_and_idle_producer_is_not)
{
    harness_daemon_start(&d, "--request-timeout", "500ms", "--idle-timeout", "1s", NULL);
    long long id;
    int p = raw_producer(d.sock, "idler", 0, 1, NULL, &id);
    raw_send_ops(p, 1, "matmul");
    /* opened after the producer went quiet: once it is closed for idling (1 s), the producer
     * has idled longer than that, twice the request timeout */
    int c = raw_connect(d.sock);
    bool closed = false;
    for (int i = 0; i < 4 && !closed; i++) /* raw_recv waits 5 s each */
        closed = got_limit_naming(c, "--idle-timeout");
    cr_assert(closed, "an idle control connection was not closed");
    close(c);
    raw_send_batch(p, 1, 4, 1000, 10);
    cr_assert_eq(raw_flush(p, 1), 4, "the idle producer was closed");
    raw_bye(p, 0);
}

/* ---- tc_close on a stalled daemon (README "Faults") ----------------------- */

/* The processes row of session id's only process: {bye, dropped, ended, entries}. */
static void process_row(long long id, long long out[4])
{
    char path[PATH_MAX + 32];
    sqlite3_stmt *st;
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT bye, dropped, ended_ns IS NOT NULL, "
                                    "(SELECT count(*) FROM entries) FROM processes",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    for (int i = 0; i < 3; i++)
        out[i] = sqlite3_column_int64(st, i);
    out[3] = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Waits (up to 10 s) until the file shows the process ended; then process_row(). */
static void wait_process_ended(long long id, long long row[4])
{
    for (int i = 0; i < 200; i++) {
        process_row(id, row);
        if (row[2] == 1)
            return;
        usleep(50000);
    }
    cr_assert_fail("session %lld: the process did not end within 10 s of SIGCONT", id);
}

/*
 * A producer records `first` entries and flushes them, the daemon stops
 * (SIGSTOP), the producer records `more` and calls tc_close, then the daemon
 * runs again (SIGCONT). Returns the seconds tc_close took; row is the
 * process's row once the daemon has ended it ({bye, dropped, ended, entries}).
 * --idle-timeout and --request-timeout are off: no timeout may end it.
 */
static double stalled_close(int first, int more, long long row[4])
{
    tc_options o;
    int err;

    harness_daemon_start(&d, "--idle-timeout", "0", "--request-timeout", "0", NULL);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "stalled";
    o.rank = 0;
    o.world = 1;
    tc_client *c = tc_open(&o, &err);
    cr_assert(c != NULL && err == 0, "tc_open: %d", err);
    long long id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    for (int i = 0; i < first; i++)
        tc_record(c, op, (uint64_t)i * 1000, 10, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 20000), 0);
    cr_assert_eq(kill(d.pid, SIGSTOP), 0);
    for (int i = 0; i < more; i++)
        tc_record(c, op, (uint64_t)(first + i) * 1000, 10, 0, NULL, NULL, 0, NULL);
    double t0 = harness_now_s();
    int rc = tc_close(c);
    double took = harness_now_s() - t0;
    cr_assert_eq(kill(d.pid, SIGCONT), 0);
    cr_assert_eq(rc, -ETIMEDOUT, "tc_close: %d", rc);
    wait_process_ended(id, row);
    cr_log_info("%d entries unsent: tc_close took %.2f s; bye %lld, dropped %lld, %lld stored",
                more, took, row[0], row[1], row[3]);
    return took;
}

/*
 * The daemon stalls while a producer closes with more unsent than the socket
 * holds (it was handed part of a message): tc_close returns at its 5 s (it
 * waited 1 s more for room for a bye that could not be sent), and the daemon
 * ends the process as soon as it runs again, without bye.
 */
Test(timeouts, tc_close_on_a_stalled_daemon_returns_at_its_timeout, .timeout = 90)
{
    long long row[4];
    double took = stalled_close(1000, 60000, row);

    /* 5 s of flush, then no wait: 0.9 s of slack for a loaded machine (it was 6.0 s) */
    cr_assert_lt(took, 5.9, "tc_close took %.2f s, its timeout is 5 s", took);
    cr_assert_eq(row[0], 0);
    cr_assert_geq(row[3], 1000, "what was acked is stored");
}

/*
 * The same with little unsent (whole messages in the socket): the bye with
 * the dropped count is sent at once and read when the daemon runs again. The
 * 1,000 entries in the socket were sent, not dropped: unconfirmed at the
 * client, stored by the daemon once it runs (issue 26 item 4), so the bye's
 * dropped count is 0.
 */
Test(timeouts, tc_close_on_a_stalled_daemon_sends_bye_after_whole_messages, .timeout = 90)
{
    long long row[4];
    double took = stalled_close(1000, 1000, row);

    cr_assert_lt(took, 5.9, "tc_close took %.2f s, its timeout is 5 s", took);
    cr_assert_eq(row[0], 1, "no bye");
    cr_assert_eq(row[1], 0, "entries sent without an ack are unconfirmed, not dropped");
    cr_assert_eq(row[3], 2000, "the entries sent before the bye are stored");
}
