/*
 * Exact accounting under faults (issue 26 item 4): per process,
 * recorded = stored + dropped + unconfirmed at the client (tc_close_stats),
 * and the daemon's report says how many of the unconfirmed it stored, equal
 * to what its session file holds of the process minus what the client had
 * acknowledged. Through SIGSTOP/SIGCONT, kill -9 and restart, and with no
 * daemon at all. Every figure is checked against numbers the test counts
 * itself (its own loops, the session file read with SQLite).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

static struct tdaemon d;

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    unsetenv("TRACECTL_CLOSE_TIMEOUT");
}

TestSuite(accounting, .fini = fini, .timeout = 180);

static tc_client *open_client(const char *sock, const char *session, size_t ring)
{
    tc_options o;
    tc_client *c;
    int err = 1;

    tc_options_init(&o);
    o.socket_path = sock;
    o.session = session;
    o.rank = 0;
    o.world = 1;
    o.blocking = TC_DROP;
    o.ring_entries = ring;
    c = tc_open(&o, &err);
    cr_assert_not_null(c);
    return c;
}

static void record_n(tc_client *c, uint32_t op, int n, uint64_t base)
{
    for (int i = 0; i < n; i++)
        tc_record(c, op, base + (uint64_t)i * 1000, 1000 + (uint64_t)i, 0, NULL, NULL, 0, NULL);
}

/* Entries of process 1 in session id's file, counted by SQLite. */
static long long file_entries(long long id)
{
    char path[PATH_MAX + 32];
    sqlite3_stmt *st;
    sqlite3 *db;
    long long n;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM entries WHERE process_id = 1", -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* The daemon's word on process 1 of session id: its completeness.clients row. */
struct daemon_row {
    unsigned long long recorded, dropped, sent, acked, stored, unconfirmed, unconfirmed_stored;
    bool final;
    unsigned long long session_dropped;
};

static void daemon_row(long long id, struct daemon_row *row)
{
    const msgpack_object *o, *rep, *list, *r;
    struct proto_request req;
    struct proto_reader rd;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true; /* completeness is one of the analysis keys */
    o = raw_control(d.sock, PROTO_REPORT, &req, &rd, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report %lld failed", id);
    rep = &o->via.array.ptr[1];
    list = obj_get(obj_get(rep, "completeness"), "clients");
    cr_assert(list != NULL && list->type == MSGPACK_OBJECT_ARRAY && list->via.array.size == 1,
              "completeness.clients has the one process");
    r = &list->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(r, "process_id")), 1);
    *row = (struct daemon_row){
        obj_u64(obj_get(r, "recorded")),
        obj_u64(obj_get(r, "dropped")),
        obj_u64(obj_get(r, "sent")),
        obj_u64(obj_get(r, "acked")),
        obj_u64(obj_get(r, "stored")),
        obj_u64(obj_get(r, "unconfirmed")),
        obj_u64(obj_get(r, "unconfirmed_stored")),
        obj_get(r, "final")->type == MSGPACK_OBJECT_BOOLEAN && obj_get(r, "final")->via.boolean,
        obj_u64(obj_get(obj_get(rep, "session"), "dropped")),
    };
    proto_reader_deinit(&rd);
    close(fd);
}

static void assert_identity(const struct tc_stats *st, unsigned long long recorded)
{
    cr_assert_eq(st->recorded, recorded, "recorded %llu, the test recorded %llu",
                 (unsigned long long)st->recorded, recorded);
    cr_assert_eq(st->pending, 0, "nothing pending after the close");
    cr_assert_eq(st->stored + st->dropped + st->unconfirmed, st->recorded,
                 "stored %llu + dropped %llu + unconfirmed %llu != recorded %llu",
                 (unsigned long long)st->stored, (unsigned long long)st->dropped,
                 (unsigned long long)st->unconfirmed, (unsigned long long)st->recorded);
    cr_assert_eq(tc_dropped(NULL), 0);
}

/*
 * N entries stored (flushed), the daemon stopped, M more recorded and the
 * close timed out (TRACECTL_CLOSE_TIMEOUT=1), then the daemon resumed.
 * ring: the client's ring (small M fits the socket; a large M overflows it
 * and the ring, so that some are dropped). *row gets the daemon's word.
 */
static void stop_close_resume(const char *session, int n, int m, size_t ring,
                              struct daemon_row *out)
{
    struct tc_stats st = TC_STATS_INIT;
    struct daemon_row row;
    long long id, entries;

    setenv("TRACECTL_CLOSE_TIMEOUT", "1", 1);
    if (d.pid <= 0)
        harness_daemon_start(&d, NULL);
    tc_client *c = open_client(d.sock, session, ring);
    cr_assert(tc_enabled(c));
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, n, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    harness_sigstop(d.pid, true);
    record_n(c, op, m, 1000000000);
    cr_assert_eq(tc_close_stats(c, &st), -ETIMEDOUT, "the stopped daemon acknowledged nothing");
    harness_sigstop(d.pid, false);

    assert_identity(&st, (unsigned long long)(n + m));
    cr_assert_eq(st.stored, (uint64_t)n, "the flushed entries are stored: %llu",
                 (unsigned long long)st.stored);
    cr_assert(st.unconfirmed > 0, "entries went out after the stop and were never acked");
    cr_assert_eq(st.sent, st.stored + st.unconfirmed);

    raw_wait_state(d.sock, id, "ended", 30);
    /* A stopped daemon has committed all it took: the file is then still. */
    harness_daemon_stop(&d, SIGTERM);
    entries = file_entries(id);
    harness_daemon_restart(&d, NULL);
    daemon_row(id, &row);
    cr_assert_eq(row.acked, st.stored, "the daemon knows the client's acked: %llu", row.acked);
    cr_assert_eq(row.stored, (unsigned long long)entries, "stored %llu, the file holds %lld",
                 row.stored, entries);
    cr_assert_eq(row.unconfirmed_stored, (unsigned long long)entries - st.stored,
                 "unconfirmed_stored %llu, the file holds %lld, the client had %llu acked",
                 row.unconfirmed_stored, entries, (unsigned long long)st.stored);
    /* Whatever the client sent, the resumed daemon read and stored. */
    cr_assert_eq(row.unconfirmed_stored, st.unconfirmed);
    cr_assert(row.session_dropped <= st.dropped, "the session's dropped was never stored");
    cr_log_info("%s: recorded %llu = stored %llu + dropped %llu + unconfirmed %llu; the daemon "
                "stored %llu of the unconfirmed",
                session, (unsigned long long)st.recorded, (unsigned long long)st.stored,
                (unsigned long long)st.dropped, (unsigned long long)st.unconfirmed,
                row.unconfirmed_stored);
    *out = row;
}

Test(accounting, sigstop_then_sigcont_counts_nothing_sent_as_dropped)
{
    /* 2,000 entries after the stop fit the socket: the bye gets through with them. */
    struct daemon_row row;

    stop_close_resume("acct-stop-small", 1000, 2000, 0, &row);
    cr_assert(row.final, "the bye's counters reached the daemon");
    cr_assert_eq(row.recorded, 3000);
    cr_assert_eq(row.dropped, 0);
    cr_assert_eq(row.unconfirmed, 2000);

    /* The text report says it too. */
    char *out = NULL;
    char *const argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", "acct-stop-small", NULL};
    cr_assert_eq(harness_run(&out, argv), 0);
    cr_assert_not_null(strstr(out, "rank 0 (process 1): recorded 3000, stored 3000, dropped 0 "
                                   "(never sent), unconfirmed 2000 (sent without an ack; 2000 "
                                   "of them stored)"),
                       "%s", out);
    free(out);
}

Test(accounting, sigstop_with_an_overflowing_close_splits_dropped_and_unconfirmed)
{
    /* 300,000 after the stop: the socket takes some, the 4,096-entry ring drops the rest. */
    struct daemon_row row;

    stop_close_resume("acct-stop-big", 1000, 300000, 4096, &row);
    cr_assert_eq(row.acked, 1000);
}

Test(accounting, kill_9_and_restart_reports_the_unconfirmed_it_stored)
{
    struct tc_stats st = TC_STATS_INIT, now = TC_STATS_INIT;
    struct daemon_row row;
    long long id, entries = 0;
    double t0;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_client(d.sock, "acct-kill", 0);
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 1500, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    record_n(c, op, 2521, 100000000);
    /* Sent without a flush (no ack), and committed by the daemon (its 1 s commit interval). */
    for (t0 = harness_now(); harness_now() - t0 < 20; usleep(20000)) {
        cr_assert_eq(tc_stats(c, &now), 0);
        if (now.sent == 1500 + 2521 && (entries = file_entries(id)) == 1500 + 2521)
            break;
    }
    cr_assert_eq(entries, 1500 + 2521, "the daemon committed them: %lld", entries);
    cr_assert_eq(now.stored, 1500);
    harness_daemon_stop(&d, SIGKILL);
    tc_close_stats(c, &st);

    assert_identity(&st, 1500 + 2521);
    cr_assert_eq(st.stored, 1500);
    cr_assert_eq(st.unconfirmed, 2521, "sent, never acked: unconfirmed, not dropped (%llu)",
                 (unsigned long long)st.unconfirmed);
    cr_assert_eq(st.dropped, 0);

    harness_daemon_restart(&d, NULL);
    raw_wait_state(d.sock, id, "ended", 30);
    daemon_row(id, &row);
    cr_assert_eq(row.acked, st.stored);
    cr_assert_eq(row.stored, (unsigned long long)file_entries(id));
    cr_assert_eq(row.unconfirmed_stored, (unsigned long long)file_entries(id) - st.stored);
    cr_assert_eq(row.unconfirmed_stored, 2521);
    cr_assert(!row.final, "no bye reached a daemon");

    /* The text report says it too. */
    char ids[32], *out = NULL;
    snprintf(ids, sizeof(ids), "%lld", id);
    char *const argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", ids, NULL};
    cr_assert_eq(harness_run(&out, argv), 0);
    cr_assert_not_null(strstr(out, "rank 0 (process 1): ended without bye: stored 4021, 2521 of "
                                   "them sent after its last ack (its last flush said: recorded "
                                   "1500, dropped 0)"),
                       "%s", out);
    free(out);
}

Test(accounting, an_offline_client_counts_what_it_recorded)
{
    struct tc_stats st = TC_STATS_INIT;
    char sock[64];

    snprintf(sock, sizeof(sock), "/tmp/tracectl-none-%d.sock", (int)getpid());
    tc_client *c = open_client(sock, "acct-offline", 0);
    cr_assert(!tc_enabled(c), "no daemon listens there");
    uint32_t op = tc_op(c, "matmul"); /* 0 offline: the entries are still counted */
    record_n(c, op, 600, 0);
    for (int i = 0; i < 31; i++) { /* tc_begin ends the last op: 31 entries in all */
        tc_begin(c, op);
        tc_end(c, 0, NULL, NULL, 0);
    }
    cr_assert_eq(tc_recorded(c), 631);
    cr_assert_eq(tc_dropped(c), 631);
    cr_assert_eq(tc_stats(c, &st), 0);
    cr_assert_eq(st.recorded, 631);
    cr_assert_eq(st.dropped, 631);
    cr_assert_eq(st.stored + st.unconfirmed + st.pending, 0);
    st.size = TC_STATS_V1_SIZE - 8;
    cr_assert_eq(tc_stats(c, &st), -EINVAL, "a size below the first version's is refused");
    st.size = sizeof(st);
    cr_assert_eq(tc_close_stats(c, &st), 0);
    assert_identity(&st, 631);
}

Test(accounting, a_forked_child_starts_at_zero)
{
    struct tc_stats st = TC_STATS_INIT;
    int status;
    pid_t pid;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_client(d.sock, "acct-fork", 0);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 100, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct tc_stats cs = TC_STATS_INIT;
        int bad = tc_stats(c, &cs) != 0 || cs.recorded != 0 || cs.stored != 0 || cs.sent != 0;
        record_n(c, op, 40, 5000000);
        bad |= (tc_close_stats(c, &cs) != 0) << 1;
        bad |= (cs.recorded != 40 || cs.stored != 40 || cs.dropped != 0) << 2;
        _exit(bad);
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's figures: %d",
              WEXITSTATUS(status));
    cr_assert_eq(tc_close_stats(c, &st), 0);
    assert_identity(&st, 100);
    cr_assert_eq(st.stored, 100);
}

/* ---- per-op totals survive drops (issue 29 #3) ----------------------------- */

#define DROP_N 200000 /* entries per op, recorded in a tight loop into a 64-entry ring */

/* One op of session id's file: stored calls, their total duration and mem_bytes. */
static void file_op(long long id, const char *op, long long *calls, long long *ns, long long *bytes,
                    long long *drop_bytes)
{
    char path[PATH_MAX + 32];
    sqlite3_stmt *st;
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "SELECT count(*), coalesce(sum(e.dur_ns), 0),"
                           " coalesce(sum(e.mem_bytes), 0),"
                           " (SELECT coalesce(sum(bytes), 0) FROM process_op_drops p"
                           "  JOIN ops o2 ON o2.id = p.op_id WHERE o2.name = ?1)"
                           " FROM entries e JOIN ops o ON o.id = e.op_id WHERE o.name = ?1",
                           -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, op, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    *calls = sqlite3_column_int64(st, 0);
    *ns = sqlite3_column_int64(st, 1);
    *bytes = sqlite3_column_int64(st, 2);
    *drop_bytes = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* The ops row of op in session id's report: calls, dropped_calls, dropped_ns. */
static void report_op(long long id, const char *op, unsigned long long *calls,
                      unsigned long long *dcalls, unsigned long long *dns)
{
    const msgpack_object *o, *ops;
    struct proto_request req;
    struct proto_reader rd;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &rd, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report %lld failed", id);
    ops = obj_get(&o->via.array.ptr[1], "ops");
    *calls = *dcalls = *dns = ~0ull;
    for (uint32_t i = 0; i < ops->via.array.size; i++) {
        const msgpack_object *row = &ops->via.array.ptr[i];
        if (obj_str_eq(obj_get(row, "op"), op)) {
            cr_assert_not_null(obj_get(row, "dropped_calls"), "the ops row has dropped_calls");
            *calls = obj_u64(obj_get(row, "calls"));
            *dcalls = obj_u64(obj_get(row, "dropped_calls"));
            *dns = obj_u64(obj_get(row, "dropped_ns"));
        }
    }
    proto_reader_deinit(&rd);
    close(fd);
}

Test(accounting, per_op_totals_stay_exact_when_a_tiny_ring_drops)
{
    static const char *const names[2] = {"op_a", "op_b"};
    unsigned long long want_ns[2] = {0, 0}, want_bytes[2] = {0, 0};
    struct tc_stats st = TC_STATS_INIT;
    long long id;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_client(d.sock, "acct-drops", 64);
    id = tc_session_id(c);
    uint32_t ops[2] = {tc_op(c, names[0]), tc_op(c, names[1])};
    for (uint64_t i = 0; i < DROP_N; i++) {
        for (int k = 0; k < 2; k++) {
            uint64_t dur = 1000 + i % 977 + (uint64_t)k * 5000, mem = i % 13 + (uint64_t)k;
            tc_record(c, ops[k], i * 10000, dur, mem, NULL, NULL, 0, NULL);
            want_ns[k] += dur;
            want_bytes[k] += mem;
        }
    }
    /* Timed by tc_begin/tc_end (TSC ticks where the TSC is the clock): calls exact. */
    uint32_t op_c = tc_op(c, "op_c");
    for (int i = 0; i < DROP_N; i++) {
        tc_begin(c, op_c);
        tc_end(c, 0, NULL, NULL, 0);
    }
    cr_assert_eq(tc_close_stats(c, &st), 0);
    assert_identity(&st, 3 * DROP_N);
    cr_assert(st.dropped > 0, "the 64-entry ring dropped some: %llu",
              (unsigned long long)st.dropped);
    cr_assert_eq(st.unconfirmed, 0);
    raw_wait_state(d.sock, id, "ended", 30);
    harness_daemon_stop(&d, SIGTERM);
    long long fcalls[2], fns[2], fbytes[2], fdrop_bytes[2];
    for (int k = 0; k < 2; k++)
        file_op(id, names[k], &fcalls[k], &fns[k], &fbytes[k], &fdrop_bytes[k]);
    harness_daemon_restart(&d, NULL);

    unsigned long long dropped_all = 0;
    for (int k = 0; k < 2; k++) {
        unsigned long long calls, dcalls, dns;
        report_op(id, names[k], &calls, &dcalls, &dns);
        cr_assert_eq(calls, (unsigned long long)fcalls[k], "%s: calls = the file's", names[k]);
        cr_assert_eq(calls + dcalls, DROP_N, "%s: %llu stored + %llu dropped != %d recorded",
                     names[k], calls, dcalls, DROP_N);
        cr_assert_eq(dns, want_ns[k] - (unsigned long long)fns[k],
                     "%s: dropped_ns %llu, recorded %llu ns, stored %lld ns", names[k], dns,
                     want_ns[k], fns[k]);
        cr_assert_eq((unsigned long long)fdrop_bytes[k],
                     want_bytes[k] - (unsigned long long)fbytes[k], "%s: dropped bytes", names[k]);
        dropped_all += dcalls;
    }
    unsigned long long calls, dcalls, dns;
    report_op(id, "op_c", &calls, &dcalls, &dns);
    cr_assert_eq(calls + dcalls, DROP_N, "op_c: %llu stored + %llu dropped", calls, dcalls);
    dropped_all += dcalls;
    cr_assert_eq(dropped_all, st.dropped, "every drop is an op's");

    char ids[32], *out = NULL, want[64];
    snprintf(ids, sizeof(ids), "%lld", id);
    char *const argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", ids, NULL};
    cr_assert_eq(harness_run(&out, argv), 0);
    snprintf(want, sizeof(want), "%lld (%lld dropped)", (long long)DROP_N, DROP_N - fcalls[0]);
    cr_assert_not_null(strstr(out, want), "the CALLS column says %s: %s", want, out);
    char note[96];
    snprintf(note, sizeof(note), "(N dropped): calls whose entries the clients dropped (%llu, ",
             (unsigned long long)st.dropped);
    cr_assert_not_null(strstr(out, note), "the table says what (N dropped) is: %s", out);
    cr_assert_null(strstr(out, "counted only"), "nothing counted by design: %s", out);
    free(out);
}
