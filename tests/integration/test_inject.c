/*
 * test_inject.c — fault injection in loops over every N, as SQLite's own
 * tests do it: a test build of tracectld fails the N-th write, sync, read,
 * truncate or allocation of its writer thread ($TRACECTLD_FAULT,
 * daemon/writer/fault.h), for N = 1, 2, ... (every N up to EVERY_N or less, then
 * steps of a few per cent) until a run no longer meets the fault.
 * One daemon serves a whole loop (@FILE: the spec is read again for each
 * session, and the count starts over); each run is a new session: FLUSHES
 * times a batch of BATCH computation entries and one of BATCH / 2
 * communication entries, then a flush, then bye. After each run the test
 * checks, against numbers it computes itself:
 *   - an ack is true: it says every entry sent so far, and once a flush
 *     failed no later flush of the process is acked (its loss stays counted);
 *   - the file holds every acked entry, and `sessions` and `report` say what
 *     it holds: entries = the file's count, dropped = failed = sent -
 *     entries, and status's failed_entries grew by as many;
 *   - PRAGMA integrity_check is ok on the session file;
 *   - status's last_error never says "not an error".
 * After the loop: the daemon exits 0 at SIGTERM (under ASan a leak makes it
 * exit non-zero), the catalog passes integrity_check, and the daemon started
 * again without the fault reports every session's entries as its file
 * holds them. A failure names the spec (KIND:N...) to run again alone:
 * TRACECTLD_FAULT=KIND:N tracectld ... fails the same call of its first
 * session. Needs a Debug build (the fault mode is compiled into Debug builds
 * only): skipped when the daemon does not take the fault.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

enum {
    FLUSHES = 4,     /* batches, each flushed */
    BATCH = 100,     /* entries a batch */
    EVERY_N = 100,   /* every N up to this one, then steps of N / step (loop_over_n) */
    MAX_RUNS = 1000, /* sessions a loop records */
    MAX_RANKS = 2,   /* producers of a session: `ranks` */
    EVICT_SESSIONS = 3,
    MAX_RUN_S = 8 /* a session's `ended` state, in seconds */
};

static struct tdaemon d;
static int ranks = 1; /* processes sending each run's session, each FLUSHES flushed batches */
static bool evicting; /* each run is EVICT_SESSIONS sessions, on a daemon that keeps 2 files open */

/* One loop: a daemon whose sessions meet the spec in spec_file, and what each left (runs: how
 * many sessions are recorded). */
struct loop {
    char spec_file[PATH_MAX + 16];
    char hits[PATH_MAX + 16];
    long long ids[MAX_RUNS];
    long long in_file[MAX_RUNS];
    int runs;
};

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGKILL);
    harness_cleanup(&d);
    unsetenv("TRACECTLD_FAULT");
    unsetenv("TRACECTLD_FAULT_HITS");
}

TestSuite(inject, .fini = fini, .timeout = 240);

static void store_path(char *buf, size_t len, long long id)
{
    snprintf(buf, len, "%s/sessions/%lld.db", d.data, id);
}

/* Status's last_error into buf ("" when none). */
static void status_last_error(char *buf, size_t len)
{
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd);
    const msgpack_object *e = obj_get(&o->via.array.ptr[1], "last_error");

    buf[0] = '\0';
    if (e != NULL && e->type == MSGPACK_OBJECT_STR)
        snprintf(buf, len, "%.*s", (int)e->via.str.size, e->via.str.ptr);
    proto_reader_deinit(&r);
    close(fd);
}

/* `report`'s entries of session id, or -1 when it answered an error. */
static long long report_entries(long long id)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    long long n = -1;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    if (obj_str_eq(&o->via.array.ptr[0], "ok"))
        n = (long long)obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "entries"));
    proto_reader_deinit(&r);
    close(fd);
    return n;
}

/* Whether the hits file says the fault was injected. */
static bool fault_hit(const char *hits)
{
    char line[64];
    bool hit = false;
    FILE *f = fopen(hits, "r");

    if (f == NULL)
        return false;
    while (fgets(line, sizeof(line), f) != NULL)
        hit |= strncmp(line, "failed ", 7) == 0;
    fclose(f);
    return hit;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/*
 * The checks of one ended session against what the test sent and had
 * acked; returns the entries its file holds, recorded in l.
 */
static long long check_session(struct loop *l, const char *spec, long long id, long long sent,
                               long long acked, bool any_failed)
{
    char path[PATH_MAX + 32];
    long long in_file = 0;

    long long reported = report_entries(id); /* waits until the writer applied the end */
    long long entries = harness_sessions_field(d.sock, id, "entries"),
              dropped = harness_sessions_field(d.sock, id, "dropped");
    long long failed_session = harness_sessions_field(d.sock, id, "failed");

    store_path(path, sizeof(path), id);
    if (access(path, F_OK) == 0) {
        cr_assert(harness_integrity_ok(path), "%s: integrity_check failed on %s", spec, path);
        /* a file whose schema was never committed has no entries table: it holds none */
        if (harness_db_int(path, "SELECT count(*) FROM sqlite_schema WHERE name = 'entries'") > 0)
            in_file = harness_db_int(path, "SELECT count(*) FROM entries");
        cr_assert_geq(in_file, 0, "%s: the session file cannot be read", spec);
    }
    cr_assert_geq(in_file, acked, "%s: %lld acked, %lld in the file", spec, acked, in_file);
    cr_assert_eq(entries, in_file, "%s: `sessions` says %lld entries, the file holds %lld", spec,
                 entries, in_file);
    /* a session that lost its file while creating it (a part of its schema is missing)
     * stored nothing, and its report is an error, not a crash */
    cr_assert(reported == in_file || (reported == -1 && in_file == 0),
              "%s: `report` says %lld entries, the file holds %lld", spec, reported, in_file);
    cr_assert_eq(failed_session, sent - in_file, "%s: `sessions` failed %lld, %lld lost", spec,
                 failed_session, sent - in_file);
    cr_assert_eq(dropped, sent - in_file, "%s: %lld dropped of %lld sent, %lld stored", spec,
                 dropped, sent, in_file);
    if (!any_failed)
        cr_assert_eq(in_file, sent, "%s: every flush acked, %lld in the file", spec, in_file);
    cr_assert_lt(l->runs, MAX_RUNS);
    l->ids[l->runs] = id;
    l->in_file[l->runs] = in_file;
    l->runs++;
    return in_file;
}

/*
 * One run: a new session meets spec (its file is read when the daemon
 * creates the session), sends FLUSHES flushed batches (the file's header),
 * says bye; then every check of the file's header but the exit
 * status. Returns whether the fault was injected.
 */
static bool run_session(struct loop *l, const char *spec)
{
    char name[32], last_error[512], device[16];
    long long id = 0, sent = 0, acked = 0, sent_by[MAX_RANKS] = {0};
    long long acked_by[MAX_RANKS] = {0};
    bool any_failed = false;
    unsigned long long failed_before = harness_status_u64(d.sock, "failed_entries");
    bool failed[MAX_RANKS] = {false};
    int fd[MAX_RANKS];

    cr_assert_lt(l->runs, MAX_RUNS);
    write_file(l->spec_file, spec);
    unlink(l->hits);
    snprintf(name, sizeof(name), "inject-%d", l->runs);
    for (int r = 0; r < ranks; r++) {
        snprintf(device, sizeof(device), "gpu:%d", r);
        fd[r] = raw_producer(d.sock, name, r, ranks, device, &id);
        raw_send_ops(fd[r], 1, "matmul");
        raw_send_ops(fd[r], 2, "nccl:allreduce"); /* communication: the rank aggregates work */
    }
    for (int b = 0; b < FLUSHES; b++) {
        for (int r = 0; r < ranks; r++) {
            raw_send_batch(fd[r], 1, BATCH, (uint64_t)b * 1000000, 10);
            raw_send_batch(fd[r], 2, BATCH / 2, (uint64_t)b * 1000000 + 500, 700 + 100 * r);
            sent_by[r] += BATCH + BATCH / 2;
            long long stored = raw_flush(fd[r], (uint64_t)b + 1);
            if (stored < 0) {
                failed[r] = true;
                continue;
            }
            /* an ack counts its own process's entries */
            cr_assert(!failed[r], "%s: rank %d's flush %d acked after one failed", spec, r, b + 1);
            cr_assert_eq(stored, sent_by[r], "%s: rank %d's flush %d acked %lld of %lld sent", spec,
                         r, b + 1, stored, sent_by[r]);
            acked_by[r] = stored;
        }
    }
    for (int r = 0; r < ranks; r++) {
        sent += sent_by[r];
        acked += acked_by[r];
        any_failed |= failed[r];
        raw_bye(fd[r], 0);
    }
    raw_wait_state(d.sock, id, "ended", MAX_RUN_S);
    long long in_file = check_session(l, spec, id, sent, acked, any_failed);
    unsigned long long failed_entries =
        harness_status_u64(d.sock, "failed_entries") - failed_before;

    cr_assert_eq(failed_entries, (unsigned long long)(sent - in_file),
                 "%s: status failed_entries grew by %llu, %lld were lost", spec, failed_entries,
                 sent - in_file);
    /* the error says what failed: never SQLite's "not an error" for a failure of the daemon's */
    status_last_error(last_error, sizeof(last_error));
    cr_assert_null(strstr(last_error, "not an error"), "%s: status says %s", spec, last_error);
    return fault_hit(l->hits);
}

/*
 * One run of EVICT_SESSIONS sessions, one process each, flushing in turn
 * on a daemon that keeps 2 session files open: each flush closes another
 * session's file and opens its own again (wsess_file_open without create),
 * under the fault. The checks of run_session for each session.
 */
static bool run_evicting(struct loop *l, const char *spec)
{
    char name[32], path[PATH_MAX + 32], last_error[512];
    long long ids[EVICT_SESSIONS], sent[EVICT_SESSIONS] = {0}, acked[EVICT_SESSIONS] = {0};
    long long all_sent = 0, all_in = 0;
    bool failed[EVICT_SESSIONS] = {false};
    unsigned long long failed_before = harness_status_u64(d.sock, "failed_entries");
    int fd[EVICT_SESSIONS];

    write_file(l->spec_file, spec);
    unlink(l->hits);
    for (int k = 0; k < EVICT_SESSIONS; k++) {
        snprintf(name, sizeof(name), "evict-%d-%d", l->runs, k);
        fd[k] = raw_producer(d.sock, name, 0, 1, "gpu:0", &ids[k]);
        raw_send_ops(fd[k], 1, "matmul");
    }
    /* every file created before the first batch: the last creation starts the count over */
    for (int k = 0; k < EVICT_SESSIONS; k++) {
        store_path(path, sizeof(path), ids[k]);
        for (double t0 = harness_now(); access(path, F_OK) != 0; usleep(1000))
            cr_assert_lt(harness_now() - t0, MAX_RUN_S, "%s: %s was not created", spec, path);
    }
    for (int b = 0; b < FLUSHES; b++) {
        for (int k = 0; k < EVICT_SESSIONS; k++) {
            raw_send_batch(fd[k], 1, BATCH, (uint64_t)b * 1000000, 10);
            sent[k] += BATCH;
            long long stored = raw_flush(fd[k], (uint64_t)b + 1);
            if (stored < 0) {
                failed[k] = true;
                continue;
            }
            cr_assert(!failed[k], "%s: session %d's flush %d acked after one failed", spec, k,
                      b + 1);
            cr_assert_eq(stored, sent[k], "%s: session %d's flush %d acked %lld of %lld", spec, k,
                         b + 1, stored, sent[k]);
            acked[k] = stored;
        }
    }
    for (int k = 0; k < EVICT_SESSIONS; k++)
        raw_bye(fd[k], 0);
    for (int k = 0; k < EVICT_SESSIONS; k++) {
        raw_wait_state(d.sock, ids[k], "ended", MAX_RUN_S);
        all_in += check_session(l, spec, ids[k], sent[k], acked[k], failed[k]);
        all_sent += sent[k];
    }
    cr_assert_eq(harness_status_u64(d.sock, "failed_entries") - failed_before,
                 (unsigned long long)(all_sent - all_in), "%s: status failed_entries", spec);
    status_last_error(last_error, sizeof(last_error));
    cr_assert_null(strstr(last_error, "not an error"), "%s: status says %s", spec, last_error);
    return fault_hit(l->hits);
}

/* Starts the daemon on a fresh dir, with l's spec file as $TRACECTLD_FAULT. */
static void daemon_start(struct loop *l)
{
    char env[PATH_MAX + 32];

    memset(l, 0, sizeof(*l));
    memset(&d, 0, sizeof(d));
    if (evicting)
        d.nofile = 40; /* main.c: 40 / 16 gives the floor of 2 session files open at once */
    /* on a tmpfs where there is one: a run is then ~4 times faster (no fsync waits) */
    snprintf(d.dir, sizeof(d.dir), "%s/tctest.XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    cr_assert_not_null(mkdtemp(d.dir));
    snprintf(d.sock, sizeof(d.sock), "%s/tracectl.sock", d.dir);
    snprintf(d.data, sizeof(d.data), "%s/data", d.dir);
    snprintf(l->spec_file, sizeof(l->spec_file), "%s/fault", d.dir);
    snprintf(l->hits, sizeof(l->hits), "%s/hits", d.dir);
    snprintf(env, sizeof(env), "@%s", l->spec_file);
    setenv("TRACECTLD_FAULT", env, 1);
    setenv("TRACECTLD_FAULT_HITS", l->hits, 1);
    harness_daemon_restart(&d, NULL);
    unsetenv("TRACECTLD_FAULT");
    unsetenv("TRACECTLD_FAULT_HITS");
}

/*
 * The loop over N for KIND:N<suffix>: every N up to `every`, then steps of
 * N / step (4 % for 25, 10 % for 10: a run makes ~7,000 SQLite
 * allocations), until a run meets no fault. Then the daemon must exit 0 at SIGTERM (no leak under
 * ASan), the catalog pass integrity_check, and the daemon started again
 * without the fault report every session's entries as its file holds them.
 */
static void loop_over_n(const char *kind, const char *suffix, unsigned long every,
                        unsigned long step)
{
    static struct loop l;
    char spec[PATH_MAX + 32];
    unsigned long n = 1;
    double t0 = harness_now();
    int status;

    daemon_start(&l);
    bool (*run)(struct loop *, const char *) = evicting ? run_evicting : run_session;
    cr_assert(!run(&l, ""), "a run without a fault met one");
    for (int r = 0; r < l.runs; r++)
        cr_assert_eq(l.in_file[r],
                     evicting ? FLUSHES * BATCH : ranks * FLUSHES * (BATCH + BATCH / 2));
    for (;; n += n < every ? 1 : n / step) {
        snprintf(spec, sizeof(spec), "%s:%lu%s", kind, n, suffix);
        if (!run(&l, spec))
            break;
    }
    if (n == 1)
        cr_skip_test("the first run met no fault: a Release build, or no %s call", kind);
    cr_log_info("%s%s: %d sessions, N = 1..%lu, in %.1f s", kind, suffix, l.runs, n - 1,
                harness_now() - t0);

    status = harness_daemon_stop(&d, SIGTERM);
    cr_assert_eq(status, 0, "%s%s: the daemon exited %d at SIGTERM (a leak under ASan?)", kind,
                 suffix, status);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/catalog.db", d.data);
    cr_assert(harness_integrity_ok(path), "%s%s: integrity_check failed on the catalog", kind,
              suffix);
    harness_daemon_restart(&d, NULL);
    for (int r = 0; r < l.runs; r++)
        if (l.in_file[r] > 0)
            cr_assert_eq(report_entries(l.ids[r]), l.in_file[r],
                         "%s%s: session %lld after a restart", kind, suffix, l.ids[r]);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
}

/*
 * A session whose every job the writer loses at intake (no memory for its
 * state, while another session's fault persists) is still ended for
 * readers: its report answers at once, not after the 30 s a reader waits
 * for an end still queued (CONTROL_END_WAIT_MS).
 */
Test(inject, a_session_lost_at_intake_still_ends_for_readers)
{
    static struct loop l;
    long long a, b;

    daemon_start(&l);
    write_file(l.spec_file, "own:1:persist");
    int fa = raw_producer(d.sock, "a", 0, 1, "gpu:0", &a);
    raw_send_ops(fa, 1, "matmul");
    raw_send_batch(fa, 1, BATCH, 0, 10);
    cr_assert_eq(raw_flush(fa, 1), -1, "a flush with no memory left was acked");
    cr_assert(fault_hit(l.hits));
    int fb = raw_producer(d.sock, "b", 0, 1, "gpu:0", &b);
    raw_bye(fb, 0);
    raw_wait_state(d.sock, b, "ended", MAX_RUN_S);
    double t0 = harness_now();
    cr_assert_eq(report_entries(b), -1, "a session with no file reported entries");
    cr_assert_lt(harness_now() - t0, 2.0, "the report waited for an end the writer lost");
    raw_bye(fa, 0);
    raw_wait_state(d.sock, a, "ended", MAX_RUN_S);
    cr_assert_eq(harness_sessions_field(d.sock, a, "dropped"), BATCH);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0, "exit status at SIGTERM (a leak?)");
}

Test(inject, every_nth_write_fails_cleanly)
{
    loop_over_n("write", "", EVERY_N, 25);
}

Test(inject, every_nth_write_on_a_full_disk_fails_cleanly)
{
    loop_over_n("write", ":persist:full", EVERY_N, 25);
}

Test(inject, every_nth_write_creating_a_session_fails_cleanly)
{
    loop_over_n("write", ":open", EVERY_N, 25);
}

Test(inject, every_nth_sync_fails_cleanly)
{
    loop_over_n("sync", ":open", EVERY_N, 25);
}

Test(inject, every_nth_read_fails_cleanly)
{
    loop_over_n("read", ":open", EVERY_N, 25);
}

Test(inject, every_nth_truncate_fails_cleanly)
{
    loop_over_n("truncate", ":open", EVERY_N, 25);
}

Test(inject, every_nth_allocation_fails_cleanly)
{
    loop_over_n("malloc", "", EVERY_N, 10);
}

/* The row format's write path (the lane TRACECTL_TEST_STORAGE=rows of the other suites). */
Test(inject, every_nth_allocation_in_the_row_format_fails_cleanly)
{
    setenv("TRACECTL_TEST_STORAGE", "rows", 1);
    loop_over_n("malloc", "", EVERY_N, 10);
}

Test(inject, every_nth_own_allocation_fails_cleanly)
{
    loop_over_n("own", "", EVERY_N, 25);
}

Test(inject, every_nth_own_allocation_creating_a_session_fails_cleanly)
{
    loop_over_n("own", ":open", EVERY_N, 25);
}

Test(inject, every_nth_own_allocation_and_all_after_fail_cleanly)
{
    loop_over_n("own", ":persist", EVERY_N, 25);
}

/*
 * Steps of 10 %: a session whose end cannot be written to the catalog (no
 * memory) is left `live` there, and the next start reconciles each such
 * session from its file (~10 ms each under ASan), which the restart waits for.
 */
Test(inject, every_nth_allocation_and_all_after_fail_cleanly)
{
    loop_over_n("malloc", ":persist", EVERY_N, 10);
}

/* Two processes in each session: a failure of one rolls back the other's jobs too. */
Test(inject, every_nth_own_allocation_of_two_ranks_fails_cleanly)
{
    ranks = 2;
    loop_over_n("own", "", EVERY_N, 25);
}

/*
 * SIGTERM while a session is live, its last batch not flushed, every
 * allocation failing from the N-th on (a daemon a run: the fault lasts
 * through the shutdown): the daemon still exits 0 (no leak), and a restart
 * finds every acked entry in a file that passes integrity_check.
 */
static void stop_under_fault(const char *kind)
{
    char spec[64], path[PATH_MAX + 32];
    unsigned long n;

    for (n = 1; n <= 400; n += n < EVERY_N ? 1 : n / 10) {
        static struct loop l;
        long long id = 0, acked = 0;

        daemon_start(&l);
        snprintf(spec, sizeof(spec), "%s:%lu:persist", kind, n);
        write_file(l.spec_file, spec);
        int fd = raw_producer(d.sock, "live", 0, 1, "gpu:0", &id);
        raw_send_ops(fd, 1, "matmul");
        for (int b = 0; b < 2; b++) {
            raw_send_batch(fd, 1, BATCH, (uint64_t)b * 1000000, 10);
            long long stored = raw_flush(fd, (uint64_t)b + 1);
            if (stored >= 0)
                acked = stored;
        }
        raw_send_batch(fd, 1, BATCH, 2000000, 10);
        int status = harness_daemon_stop(&d, SIGTERM);
        close(fd);
        bool hit = fault_hit(l.hits);
        cr_assert_eq(status, 0, "%s: the daemon exited %d at SIGTERM", spec, status);
        harness_daemon_restart(&d, NULL);
        store_path(path, sizeof(path), id);
        if (acked > 0) {
            cr_assert(harness_integrity_ok(path), "%s: integrity_check failed on %s", spec, path);
            cr_assert_geq(report_entries(id), acked, "%s: acked %lld", spec, acked);
        }
        cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
        harness_cleanup(&d);
        if (!hit)
            break;
    }
    cr_log_info("%s: stopped under the fault for N = 1..%lu", kind, n - 1);
}

Test(inject, sigterm_with_own_allocations_failing_exits_cleanly)
{
    stop_under_fault("own");
}

/*
 * Session files closed and opened again at every flush (2 open at most, 3
 * sessions): reopening reads the last block, the shapes and the aggregates
 * back. Every N to 50, then steps of 10 % (a run makes ~540 reads, 0.25 s).
 */
Test(inject, every_nth_read_while_files_are_evicted_fails_cleanly)
{
    evicting = true;
    loop_over_n("read", "", 50, 10);
}
