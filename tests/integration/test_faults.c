/*
 * test_faults.c — tracectld under faults and between users: kill -9 during
 * ingest, a full disk (a small tmpfs the test mounts), two real uids on a
 * system-wide daemon, limits and retention. Needs root for the tmpfs and
 * uid cases (CI runs as root); skipped otherwise.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;
static char mounted[PATH_MAX];

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGKILL);
    if (mounted[0] != '\0') {
        umount2(mounted, MNT_DETACH);
        mounted[0] = '\0';
    }
    harness_cleanup(&d);
}

TestSuite(faults, .fini = fini, .timeout = 90);

static long long file_count(long long id, const char *sql);

static unsigned long long report_entries(long long id, const char **state)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *sess;
    unsigned long long n;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report %lld failed", id);
    sess = obj_get(&o->via.array.ptr[1], "session");
    n = obj_u64(obj_get(sess, "entries"));
    if (state != NULL)
        *state = obj_str_eq(obj_get(sess, "state"), "ended") ? "ended" : "live";
    proto_reader_deinit(&r);
    close(fd);
    return n;
}

/*
 * kill -9 while 4 producers stream and flush: after a restart every acked
 * entry is there, every file passes integrity_check, the session is ended
 * and marked interrupted.
 */
Test(faults, kill9_keeps_every_acked_entry)
{
    enum { PRODUCERS = 4 };
    long long *acked = mmap(NULL, sizeof(long long) * PRODUCERS, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    long long id = 0, total = 0;
    pid_t kids[PRODUCERS];

    harness_daemon_start(&d, NULL);
    int first = raw_producer(d.sock, "crash", 0, PRODUCERS, "gpu:0", &id);
    close(first); /* the session now exists; the producers join it */
    for (int k = 0; k < PRODUCERS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            int fd = raw_producer(d.sock, "crash", k, PRODUCERS, "gpu:0", NULL);
            raw_send_ops(fd, 1, "matmul");
            for (uint64_t seq = 1;; seq++) {
                raw_send_batch(fd, 1, 500, seq * 1000000, 10);
                long long stored = raw_flush(fd, seq);
                if (stored < 0)
                    _exit(0);
                /* only what the daemon acked counts */
                __atomic_store_n(&acked[k], stored, __ATOMIC_RELEASE);
            }
        }
    }
    /* Kill once every producer has had a flush acked (an event, not a time:
     * a loaded machine may take seconds), with their next batches in flight. */
    for (int k = 0, waited = 0; k < PRODUCERS; k++) {
        while (__atomic_load_n(&acked[k], __ATOMIC_ACQUIRE) == 0 && waited < 60000) {
            usleep(10000);
            waited += 10;
        }
    }
    usleep(100000);
    harness_daemon_stop(&d, SIGKILL);
    for (int k = 0; k < PRODUCERS; k++) {
        waitpid(kids[k], NULL, 0);
        total += acked[k];
    }
    cr_assert_gt(total, 0, "no flush was acked before the kill");
    harness_daemon_restart(&d, NULL);
    const char *state;
    unsigned long long stored = report_entries(id, &state);
    cr_assert_geq(stored, (unsigned long long)total, "acked %lld, found %llu", total, stored);
    cr_assert_str_eq(state, "ended", "a session live at the crash is shown ended");
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert(harness_integrity_ok(path), "integrity_check failed on %s", path);
    snprintf(path, sizeof(path), "%s/catalog.db", d.data);
    cr_assert(harness_integrity_ok(path), "integrity_check failed on the catalog");
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    const msgpack_object *row = &o->via.array.ptr[1].via.array.ptr[0];
    cr_assert_eq(o->via.array.ptr[1].via.array.ptr[0].type, MSGPACK_OBJECT_MAP);
    cr_assert_eq(obj_get(row, "interrupted")->via.boolean, true);
    proto_reader_deinit(&r);
    close(fd);
    munmap(acked, sizeof(long long) * PRODUCERS);
}

/*
 * The daemon's data dir on a 3 MiB tmpfs (mode 0700: the daemon refuses a
 * data dir that others may write, tmpfs's default 1777), its path in data;
 * skips the test where it cannot be mounted. The daemon is not started.
 */
static void small_disk(char *data, size_t len)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to mount a tmpfs");
    snprintf(d.dir, sizeof(d.dir), "/tmp/tctest.XXXXXX");
    cr_assert_not_null(mkdtemp(d.dir));
    snprintf(data, len, "%s/data", d.dir);
    mkdir(data, 0700);
    if (mount("tmpfs", data, "tmpfs", 0, "size=3m,mode=0700") != 0)
        cr_skip_test("cannot mount a tmpfs here");
    snprintf(mounted, sizeof(mounted), "%s", data);
    snprintf(d.sock, sizeof(d.sock), "%s/tracectl.sock", d.dir);
    snprintf(d.data, sizeof(d.data), "%s", data);
}

/*
 * A producer of session "full" sending batches of 2,000 entries until a
 * flush fails (the disk is full). Returns its connection; *id is the
 * session, *stored what the last good flush acked (> 0), *seq the failed
 * flush's number.
 */
static int fill_with_batches(long long *id, long long *stored, long long *seq)
{
    int fd = raw_producer(d.sock, "full", 0, 1, "gpu:0", id);

    *stored = 0;
    raw_send_ops(fd, 1, "matmul");
    for (*seq = 1; *seq < 400; (*seq)++) {
        raw_send_batch(fd, 1, 2000, (uint64_t)*seq * 10000000, 7);
        long long n = raw_flush(fd, (uint64_t)*seq);
        if (n < 0)
            break;
        *stored = n;
    }
    cr_assert_lt(*seq, 400, "the 3 MiB disk never filled");
    cr_assert_gt(*stored, 0);
    return fd;
}

/* A data dir on a 3 MiB tmpfs: fill it, see the error, read on, resume after growing it. */
Test(faults, disk_full_is_reported_and_recovers)
{
    char data[PATH_MAX];
    long long id, stored = 0, seq;
    int fd;

    small_disk(data, sizeof(data));
    harness_daemon_restart(&d, NULL);

    fd = fill_with_batches(&id, &stored, &seq);
    close(fd);
    /* `sessions` says what the file holds: the lost entries are dropped, not entries */
    raw_wait_state(d.sock, id, "ended", 10);
    long long in_file = file_count(id, "SELECT count(*) FROM entries");
    cr_assert_geq(in_file, stored);
    cr_assert_eq(harness_sessions_field(d.sock, id, "entries"), in_file,
                 "`sessions` claims entries not stored");
    cr_assert_eq(harness_sessions_field(d.sock, id, "dropped"), seq * 2000 - in_file,
                 "the loss is not counted");
    cr_assert_eq(harness_status_u64(d.sock, "failed_entries"),
                 (unsigned long long)(seq * 2000 - in_file));
    /* the error shows in status */
    struct proto_reader r;
    const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd);
    const msgpack_object *err = obj_get(&o->via.array.ptr[1], "last_error");
    cr_assert(err != NULL && err->type == MSGPACK_OBJECT_STR, "status shows no last_error");
    proto_reader_deinit(&r);
    close(fd);
    /* reads keep working, and what was acked is there */
    cr_assert_geq(report_entries(id, NULL), (unsigned long long)stored);
    /* space returns: ingest resumes */
    cr_assert_eq(mount("tmpfs", data, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    fd = raw_producer(d.sock, "after", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 1000, 0, 3);
    cr_assert_eq(raw_flush(fd, 1), 1000, "ingest did not resume after space returned");
    raw_bye(fd, 0);
    harness_daemon_stop(&d, SIGTERM);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/catalog.db", data);
    cr_assert(harness_integrity_ok(path));
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", data, id);
    cr_assert(harness_integrity_ok(path));
}

/* Writes a file of zeros into dir until the disk is full; returns its size in bytes. */
static long long fill_disk(const char *dir)
{
    static const char zeros[4096];
    char path[PATH_MAX + 16];
    long long n = 0;
    ssize_t w;
    int fd;

    snprintf(path, sizeof(path), "%s/filler", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    while ((w = write(fd, zeros, sizeof(zeros))) > 0)
        n += w;
    cr_assert(w < 0 && errno == ENOSPC, "the filler stopped without ENOSPC");
    close(fd);
    return n;
}

/* The status map's string value of key (into buf, "" when nil). */
static void status_str(const char *key, char *buf, size_t len)
{
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd);
    const msgpack_object *v = obj_get(&o->via.array.ptr[1], key);

    cr_assert_not_null(v, "status has no %s", key);
    buf[0] = '\0';
    if (v->type == MSGPACK_OBJECT_STR)
        snprintf(buf, len, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    proto_reader_deinit(&r);
    close(fd);
}

/* One integer of the catalog (read-only; -1 when the query gives none). */
static long long catalog_int(const char *sql)
{
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/catalog.db", d.data);
    return harness_db_int(path, sql);
}

/*
 * Killed on a full disk, the daemon starts again on it: start-up writes
 * nothing it needs to serve reads. The session the kill left live is listed
 * ended and interrupted with what its file holds, reports work, status says
 * the catalog waits for space; once space returns the catalog gets the row.
 */
Test(faults, starts_on_a_full_disk_and_writes_when_space_returns)
{
    char data[PATH_MAX], id_s[32], msg[512], *out = NULL;
    long long id, stored = 0, seq, in_file;
    int fd;

    small_disk(data, sizeof(data));
    harness_daemon_restart(&d, NULL);
    fd = fill_with_batches(&id, &stored, &seq);
    harness_daemon_stop(&d, SIGKILL);
    close(fd);
    fill_disk(data); /* what the rolled-back transaction left free */
    in_file = file_count(id, "SELECT count(*) FROM entries");
    cr_assert_geq(in_file, stored, "acked entries are missing from the file");
    cr_assert_eq(catalog_int("SELECT count(*) FROM sessions WHERE state = 'live'"), 1);

    harness_daemon_restart(&d, NULL); /* asserts that it comes up */
    snprintf(id_s, sizeof(id_s), "%lld", id);
    char *ls[] = {TRACECTL_BIN, "--socket", d.sock, "sessions", "--json", NULL};
    cr_assert_eq(harness_run(&out, ls), 0, "`tracectl sessions` failed on a full disk");
    cr_assert_not_null(strstr(out, "\"interrupted\":true"), "sessions: %s", out);
    free(out);
    out = NULL;
    cr_assert_eq(harness_sessions_field(d.sock, id, "entries"), in_file);
    char *rep[] = {TRACECTL_BIN, "--socket", d.sock, "report", id_s, NULL};
    cr_assert_eq(harness_run(&out, rep), 0, "`tracectl report` failed on a full disk");
    free(out);
    cr_assert_eq(report_entries(id, NULL), (unsigned long long)in_file);
    status_str("deferred_writes", msg, sizeof(msg));
    cr_assert_not_null(strstr(msg, "disk full"), "status does not say the disk is full: '%s'", msg);
    /* nothing was written: the catalog still has the row live */
    cr_assert_eq(catalog_int("SELECT count(*) FROM sessions WHERE state = 'live'"), 1);

    /* space returns: the deferred writes happen without a restart */
    char filler[PATH_MAX + 16];
    snprintf(filler, sizeof(filler), "%s/filler", data);
    cr_assert_eq(unlink(filler), 0);
    cr_assert_eq(mount("tmpfs", data, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    for (int i = 0; i < 100; i++) {
        status_str("deferred_writes", msg, sizeof(msg));
        if (msg[0] == '\0')
            break;
        usleep(100 * 1000);
    }
    cr_assert_eq(msg[0], '\0', "the deferred writes did not happen within 10 s: %s", msg);
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM sessions WHERE id = %lld AND state = 'ended' AND"
             " interrupted = 2 AND entries = %lld AND ended_ns > 0", /* STORE_CUT_CRASH */
             id, in_file);
    cr_assert_eq(catalog_int(sql), 1, "the catalog row was not written when space returned");
    harness_daemon_stop(&d, SIGTERM);
}

/* Session id's `interrupted` in `sessions`: 1, 0, or -1 when the row is absent. */
static int sessions_interrupted(long long id)
{
    struct proto_reader r;
    int v = -1, fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    const msgpack_object *list = &o->via.array.ptr[1];

    for (uint32_t i = 0; i < list->via.array.size; i++) {
        const msgpack_object *row = &list->via.array.ptr[i];
        if ((long long)obj_u64(obj_get(row, "id")) == id)
            v = obj_get(row, "interrupted")->via.boolean ? 1 : 0;
    }
    proto_reader_deinit(&r);
    close(fd);
    return v;
}

/*
 * A session whose producers said bye on a full disk ended cleanly: its
 * catalog row says so (ended, not interrupted) after a SIGTERM on the full
 * disk, and a restart on it lists it so.
 */
Test(faults, a_session_ended_on_a_full_disk_is_not_interrupted)
{
    char data[PATH_MAX], sql[200];
    long long id, stored, seq;
    int fd;

    small_disk(data, sizeof(data));
    harness_daemon_restart(&d, NULL);
    fd = fill_with_batches(&id, &stored, &seq);
    fill_disk(data);
    raw_bye(fd, 0);
    close(fd);
    raw_wait_state(d.sock, id, "ended", 10);
    cr_assert_eq(sessions_interrupted(id), 0);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    snprintf(sql, sizeof(sql),
             "SELECT interrupted FROM sessions WHERE id = %lld AND state = 'ended'", id);
    cr_assert_eq(catalog_int(sql), 0, "the catalog does not say the session ended cleanly");
    harness_daemon_restart(&d, NULL);
    cr_assert_eq(sessions_interrupted(id), 0);
    harness_daemon_stop(&d, SIGTERM);
}

/* n entries of op 1, each with out_shape [k, 3] (elements nil: 3k), from start. */
static void send_shaped_batch(int fd, size_t n, uint64_t k, uint64_t start)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&pk, 7);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_uint32(&pk, 1);
        msgpack_pack_uint64(&pk, start + i);
        msgpack_pack_uint64(&pk, 5);
        msgpack_pack_nil(&pk);
        msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint64(&pk, k);
        msgpack_pack_uint64(&pk, 3);
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/*
 * A full disk rolls back the transaction that wrote a new shape's row; the
 * pair keeps its session id (the loop gave it), so the next entries with it
 * must write the row again: no entry may point at a shape the file lacks.
 */
Test(faults, shapes_of_a_rolled_back_transaction_are_written_again)
{
    char data[PATH_MAX];
    long long id, seq;
    int fd;

    small_disk(data, sizeof(data));
    harness_daemon_restart(&d, "--storage-format", "rows", NULL);

    fd = raw_producer(d.sock, "shaped", 0, 1, NULL, &id);
    raw_send_ops(fd, 1, "matmul");
    for (seq = 1; seq < 400; seq++) { /* a new shape in each batch, until a batch is lost */
        send_shaped_batch(fd, 2000, (uint64_t)seq, (uint64_t)seq * 10000);
        if (raw_flush(fd, (uint64_t)seq) < 0)
            break;
    }
    cr_assert_lt(seq, 400, "the 3 MiB disk never filled");
    cr_assert_eq(mount("tmpfs", data, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    /* the lost batch's shape again, and the one before it (its row was committed) */
    send_shaped_batch(fd, 1, (uint64_t)seq, 10000000);
    send_shaped_batch(fd, 1, (uint64_t)seq - 1, 10000001);
    raw_flush(fd, (uint64_t)seq + 1); /* an error: the process lost entries; these are stored */
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 30);
    cr_assert_eq(file_count(id, "SELECT count(*) FROM entries WHERE start_ns >= 10000000"), 2,
                 "the entries after the disk was grown were not stored");
    cr_assert_eq(file_count(id, "SELECT count(*) FROM entries e LEFT JOIN shapes s"
                                " ON s.id = e.shape_id WHERE s.id IS NULL"),
                 0, "entries point at shapes the file does not hold");
    /* and each has its own shape, [k, 3] (a fixint k: msgpack 92 k 03) */
    cr_assert_lt(seq, 128);
    for (long long k = seq; k >= seq - 1; k--) {
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM entries e JOIN shapes s ON s.id = e.shape_id"
                 " WHERE e.start_ns = %lld AND hex(s.out_shape) = '92%02llX03'"
                 " AND s.elements = %lld",
                 10000000 + (seq - k), k, 3 * k);
        cr_assert_eq(file_count(id, sql), 1, "the entry of shape [%lld, 3]", k);
    }
}

/* Σ start_ns of raw_send_batch(fd, op, n, base, ...) for base = b0 + seq * step, seq in [from, to).
 */
static long long batch_starts(long long from, long long to, long long n, long long b0,
                              long long step)
{
    long long sum = 0;

    for (long long seq = from; seq < to; seq++)
        for (long long i = 0; i < n; i++)
            sum += b0 + seq * step + i * 1000;
    return sum;
}

/*
 * The blocks format keeps a transaction's full blocks in memory until its
 * commit: a full disk rolls back a transaction of several full blocks, and
 * the session goes on. The file then holds exactly the batches committed
 * before and the batches sent after, each entry once, with rowids 1 .. n.
 */
Test(faults, a_rolled_back_transaction_of_full_blocks_leaves_the_file_exact)
{
    char data[PATH_MAX], sql[160];
    const long long n = 3000, after = 5; /* ~3 blocks a batch */
    long long id, seq;
    int fd;

    small_disk(data, sizeof(data));
    harness_daemon_restart(&d, "--storage-format", "blocks", NULL);

    fd = raw_producer(d.sock, "blocks", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    for (seq = 1; seq < 400; seq++) {
        raw_send_batch(fd, 1, (size_t)n, (uint64_t)seq * 10000000, 7);
        if (raw_flush(fd, (uint64_t)seq) < 0)
            break;
    }
    cr_assert_lt(seq, 400, "the 3 MiB disk never filled");
    cr_assert_gt(seq, 1, "no batch was stored before the disk filled");
    cr_assert_eq(mount("tmpfs", data, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    for (long long k = 0; k < after; k++) {
        raw_send_batch(fd, 1, (size_t)n, (uint64_t)(1000000000000 + k * 10000000), 7);
        raw_flush(fd, (uint64_t)(seq + 1 + k)); /* an error (entries were lost); stored */
    }
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 30);
    cr_assert_eq(file_count(id, "SELECT count(*) FROM entries WHERE start_ns < 1000000000000"),
                 (seq - 1) * n, "the batches acked before the disk filled");
    cr_assert_eq(file_count(id, "SELECT sum(start_ns) FROM entries WHERE start_ns < 1000000000000"),
                 batch_starts(1, seq, n, 0, 10000000));
    cr_assert_eq(file_count(id, "SELECT count(*) FROM entries WHERE start_ns >= 1000000000000"),
                 after * n, "the batches sent after the disk was grown");
    cr_assert_eq(
        file_count(id, "SELECT sum(start_ns) FROM entries WHERE start_ns >= 1000000000000"),
        batch_starts(0, after, n, 1000000000000, 10000000));
    snprintf(sql, sizeof(sql), "SELECT count(DISTINCT rowid) FROM entries WHERE rowid <= %lld",
             (seq - 1 + after) * n);
    cr_assert_eq(file_count(id, sql), (seq - 1 + after) * n, "rowids are not 1 .. n");
    cr_assert_eq(file_count(id, "SELECT sum(n) FROM blocks"), (seq - 1 + after) * n);
    cr_assert_eq(file_count(id, "SELECT entries FROM agg_session"), (seq - 1 + after) * n);
}

/* In a child: become uid, make a session `name` with n entries, list what it sees. */
static void as_user(uid_t uid, const char *name, int n, int *seen, long long *id_out)
{
    int pfd[2];
    pid_t pid;

    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    if (pid == 0) {
        long long id;
        int out[2];
        struct proto_reader r;
        if (setgid(uid) != 0 || setuid(uid) != 0)
            _exit(2);
        int fd = raw_producer(d.sock, name, 0, 1, NULL, &id);
        raw_send_ops(fd, 1, "matmul");
        raw_send_batch(fd, 1, (size_t)n, 0, 1);
        if (raw_flush(fd, 1) != n)
            _exit(3);
        raw_bye(fd, 0);
        const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
        out[0] = (int)o->via.array.ptr[1].via.array.size;
        out[1] = (int)id;
        proto_reader_deinit(&r);
        close(fd);
        if (write(pfd[1], out, sizeof(out)) != sizeof(out))
            _exit(4);
        _exit(0);
    }
    int st, got[2];
    close(pfd[1]);
    cr_assert_eq(read(pfd[0], got, sizeof(got)), (ssize_t)sizeof(got), "child for uid %u failed",
                 (unsigned)uid);
    close(pfd[0]);
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    *seen = got[0];
    *id_out = got[1];
}

Test(faults, users_see_only_their_own_sessions)
{
    long long id_a, id_b, id_a2;
    int seen;

    if (geteuid() != 0)
        cr_skip_test("needs root to switch uids");
    harness_daemon_start(&d, "--system", "--admin-group", "tracectl-test-nonexistent", NULL);
    chmod(d.dir, 0755); /* other uids must reach the socket; the daemon filters by uid */

    as_user(65534, "shared-name", 10, &seen, &id_a);
    cr_assert_eq(seen, 1, "uid 65534 sees its one session");
    as_user(65533, "shared-name", 20, &seen, &id_b);
    cr_assert_eq(seen, 1, "uid 65533 sees only its own session, not 65534's");
    cr_assert_neq(id_a, id_b, "the same name from two users makes two sessions");
    as_user(65534, "second", 5, &seen, &id_a2);
    cr_assert_eq(seen, 2);

    /* root sees all three */
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert_eq(o->via.array.ptr[1].via.array.size, 3);
    proto_reader_deinit(&r);
    close(fd);

    /* uid 65533 cannot report on, export or delete uid 65534's session */
    pid_t pid = fork();
    if (pid == 0) {
        struct proto_request req;
        proto_request_init(&req);
        req.session.id = id_a;
        if (setgid(65533) != 0 || setuid(65533) != 0)
            _exit(2);
        enum proto_type types[] = {PROTO_REPORT, PROTO_DELETE, PROTO_EXPORT};
        for (int i = 0; i < 3; i++) {
            o = raw_control(d.sock, types[i], &req, &r, &fd);
            if (!obj_str_eq(obj_get(&o->via.array.ptr[1], "code"), "no_session"))
                _exit(10 + i);
            proto_reader_deinit(&r);
            close(fd);
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st));
    cr_assert_eq(WEXITSTATUS(st), 0, "another user's session was reachable (step %d)",
                 WEXITSTATUS(st) - 10);
    /* and each file records its producer's uid */
    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st2;
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id_b);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT uid, pid FROM processes", -1, &st2, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st2), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st2, 0), 65533);
    cr_assert_gt(sqlite3_column_int64(st2, 1), 0);
    sqlite3_finalize(st2);
    sqlite3_close(db);
}

Test(faults, limits_refuse_or_drop_with_clear_errors)
{
    struct proto_reader r;
    struct proto_msg m;
    long long id;
    int fd, fd2;

    harness_daemon_start(&d, "--max-live-sessions", "1", "--max-session-bytes", "256K", NULL);
    fd = raw_producer(d.sock, "one", 0, 1, "gpu:0", &id);
    /* a second live session is refused with `limit` */
    fd2 = raw_connect(d.sock);
    struct proto_hello h = {.proto = 1, .session = "two", .rank = -1, .world = -1, .pid = -1};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_hello(&pk, &h);
    raw_send(fd2, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd2, &r, &m), 0);
    cr_assert_eq(m.type, PROTO_ERROR);
    cr_assert_str_eq(m.u.error.code, "limit");
    cr_assert_not_null(strstr(m.u.error.message, "live sessions"), "%s", m.u.error.message);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    close(fd2);
    /* joining the live one is fine */
    fd2 = raw_producer(d.sock, "one", 1, 2, "gpu:1", NULL);
    close(fd2);

    /* over 256 KiB (a new file counts 64 KiB) the session keeps its data and drops new entries,
     * counted */
    raw_send_ops(fd, 1, "matmul");
    long long stored = 0;
    for (int i = 1; i <= 40; i++) {
        raw_send_batch(fd, 1, 1000, (uint64_t)i * 10000000, 5);
        stored = raw_flush(fd, (uint64_t)i);
        usleep(30000); /* the daemon refreshes sizes once a second */
    }
    cr_assert_lt(stored, 40000, "nothing was dropped over the cap");
    cr_assert_gt(stored, 0);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 5);
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    const msgpack_object *row = &o->via.array.ptr[1].via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(row, "entries")), (unsigned long long)stored);
    cr_assert_eq(obj_u64(obj_get(row, "dropped")), 40000 - (unsigned long long)stored,
                 "every refused entry is counted as dropped");
    proto_reader_deinit(&r);
    close(fd);
    cr_assert_eq(report_entries(id, NULL), (unsigned long long)stored);
}

Test(faults, max_connections_and_retention)
{
    struct proto_reader r;
    struct proto_msg m;
    long long id;
    int fds[3];

    harness_daemon_start(&d, "--max-connections", "2", NULL);
    fds[0] = raw_producer(d.sock, "r1", 0, 1, NULL, &id);
    fds[1] = raw_producer(d.sock, "r2", 0, 1, NULL, NULL);
    fds[2] = raw_connect(d.sock);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fds[2], &r, &m), 0, "no error for a connection over the limit");
    cr_assert_str_eq(m.u.error.code, "limit");
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    close(fds[2]);
    raw_bye(fds[0], 0);
    raw_bye(fds[1], 0);
    raw_wait_state(d.sock, id, "ended", 5);
    harness_daemon_stop(&d, SIGTERM);

    /* restart with a 1-byte retention cap: every ended session goes */
    harness_daemon_restart(&d, "--retain-bytes", "1", NULL);
    unsigned n = 99;
    for (int i = 0; i < 60 && n != 0; i++) {
        int fd;
        const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
        n = o->via.array.ptr[1].via.array.size;
        proto_reader_deinit(&r);
        close(fd);
        usleep(100000);
    }
    cr_assert_eq(n, 0, "retention left %u sessions", n);
    char path[PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_neq(stat(path, &st), 0, "the retained-out file is still there");
}

/* ---- storage correctness (issue 10) -------------------------------------- */

/* count(*) (or any one-number query) over a session's file, read independently; -1 if none. */
static long long file_count(long long id, const char *sql)
{
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    return harness_db_int(path, sql);
}

/* A fresh temp dir (no daemon yet), like harness_daemon_start() without the start. */
static void fresh_dir(void)
{
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "/tmp/tctest.XXXXXX");
    cr_assert_not_null(mkdtemp(d.dir));
    snprintf(d.sock, sizeof(d.sock), "%s/tracectl.sock", d.dir);
    snprintf(d.data, sizeof(d.data), "%s/data", d.dir);
}

/* hello; returns the fd with *id set, or -1 when the daemon answered `limit`. */
static int try_producer(const char *name, long long *id)
{
    struct proto_hello h = {.proto = 1, .session = (char *)name, .rank = 0, .world = 1, .pid = -1};
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fd = raw_connect(d.sock), rc = -1;

    cr_assert_geq(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_hello(&pk, &h);
    /* not raw_send(): a daemon at its limit answers and closes before reading the hello */
    if (send(fd, sb.data, sb.size, MSG_NOSIGNAL) != (ssize_t)sb.size)
        cr_log_info("hello %s: %s", name, strerror(errno));
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no reply to hello %s", name);
    if (m.type == PROTO_WELCOME) {
        *id = m.u.welcome.session_id;
        rc = fd;
    } else {
        cr_assert_eq(m.type, PROTO_ERROR);
        cr_assert_str_eq(m.u.error.code, "limit", "hello %s: %s", name, m.u.error.message);
        close(fd);
    }
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    return rc;
}

/*
 * Out of fds (RLIMIT_NOFILE 64:64): 30 sessions × 100 entries, each
 * flushed. Every flush is acked with the 100 entries really in the file
 * (count(*)), or answered with an error; never acked-but-lost. `sessions`
 * never claims more than the file holds, `report` agrees, and a hello the
 * daemon has no room for gets `limit`.
 */
Test(faults, out_of_fds_never_acks_lost_entries)
{
    enum { SESSIONS = 30, ENTRIES = 100 };
    long long ids[SESSIONS], acked[SESSIONS];
    int fds[SESSIONS], connected = 0, n_acked = 0;
    char name[32];

    fresh_dir();
    d.nofile = 64;
    harness_daemon_restart(&d, NULL);
    for (int i = 0; i < SESSIONS; i++) {
        snprintf(name, sizeof(name), "fd-%d", i);
        fds[i] = try_producer(name, &ids[i]);
        connected += fds[i] >= 0;
    }
    cr_assert_gt(connected, 0);
    for (int i = 0; i < SESSIONS; i++) {
        if (fds[i] < 0)
            continue;
        raw_send_ops(fds[i], 1, "matmul");
        raw_send_batch(fds[i], 1, ENTRIES, (uint64_t)i * 1000000, 5);
    }
    for (int i = 0; i < SESSIONS; i++) {
        acked[i] = fds[i] >= 0 ? raw_flush(fds[i], 1) : -1;
        cr_assert(acked[i] == -1 || acked[i] == ENTRIES, "flush %d acked %lld", i, acked[i]);
        n_acked += acked[i] == ENTRIES;
    }
    for (int i = 0; i < SESSIONS; i++) {
        if (fds[i] < 0)
            continue;
        if (acked[i] == ENTRIES)
            cr_assert_eq(file_count(ids[i], "SELECT count(*) FROM entries"), ENTRIES,
                         "session %lld: flush acked, entries not in its file", ids[i]);
        raw_bye(fds[i], 0);
    }
    for (int i = 0; i < SESSIONS; i++) {
        if (fds[i] < 0)
            continue;
        raw_wait_state(d.sock, ids[i], "ended", 10);
        long long in_file = file_count(ids[i], "SELECT count(*) FROM entries");
        if (in_file < 0)
            in_file = 0;
        cr_assert_eq(harness_sessions_field(d.sock, ids[i], "entries"), in_file,
                     "session %lld: `sessions` claims entries its file does not hold", ids[i]);
        cr_assert_eq(harness_sessions_field(d.sock, ids[i], "dropped"), ENTRIES - in_file);
        if (acked[i] == ENTRIES)
            cr_assert_eq(report_entries(ids[i], NULL), ENTRIES);
    }
    cr_assert_gt(n_acked, 0, "nothing was stored at all");
    cr_log_info("%d of %d sessions connected, %d flushes acked", connected, SESSIONS, n_acked);
}

/*
 * A crash between a session file and its catalog row left sessions/2.db with
 * another session's rows and no row: after a restart a new session must not
 * see them. Also a file that appears on the next id while the daemon runs.
 * Both are moved to sessions/orphans/ and counted in `status`; ids are not
 * reused.
 */
Test(faults, orphan_session_files_are_quarantined)
{
    char src[PATH_MAX + 32], dst[PATH_MAX + 32], cmd[3 * PATH_MAX];
    long long id_old, id_new;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "someone-else", 0, 1, NULL, &id_old);
    raw_send_ops(fd, 1, "secret_op");
    raw_send_batch(fd, 1, 50, 0, 7);
    cr_assert_eq(raw_flush(fd, 1), 50);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id_old, "ended", 5);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    cr_assert_eq(id_old, 1);
    /* the state a kill between file and catalog leaves: 2.db with rows, no row for 2 */
    snprintf(src, sizeof(src), "%s/sessions/1.db", d.data);
    snprintf(dst, sizeof(dst), "%s/sessions/2.db", d.data);
    snprintf(cmd, sizeof(cmd), "cp %s %s", src, dst);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(file_count(2, "SELECT count(*) FROM entries"), 50);

    harness_daemon_restart(&d, NULL);
    /* and a file that appears on the next id while the daemon runs */
    snprintf(dst, sizeof(dst), "%s/sessions/3.db", d.data);
    snprintf(cmd, sizeof(cmd), "cp %s %s", src, dst);
    cr_assert_eq(system(cmd), 0);
    fd = raw_producer(d.sock, "new-user", 0, 1, NULL, &id_new);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 10, 0, 3);
    cr_assert_eq(raw_flush(fd, 1), 10);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id_new, "ended", 5);
    cr_assert_eq(report_entries(id_new, NULL), 10, "the new session sees another's rows");
    cr_assert_gt(id_new, 2, "id %lld of an orphan file was handed out again", id_new);
    cr_assert_eq(file_count(id_new, "SELECT count(*) FROM entries"), 10);
    cr_assert_eq(file_count(id_new, "SELECT count(*) FROM ops WHERE name = 'secret_op'"), 0);
    cr_assert_eq(harness_status_u64(d.sock, "orphans"), 2, "status counts the quarantined files");
    snprintf(cmd, sizeof(cmd), "test $(ls %s/sessions/orphans/ | grep -c '^[23]\\..*\\.db$') -eq 2",
             d.data);
    cr_assert_eq(system(cmd), 0, "the orphans are not in sessions/orphans/");
    cr_assert_eq(report_entries(id_old, NULL), 50, "the old session is untouched");
}

/* A second daemon on the same data dir: a one-line error and exit 1; the first runs on. */
Test(faults, second_daemon_on_one_data_dir_is_refused)
{
    char sock2[PATH_MAX + 8], err[512] = "";
    int pfd[2], st;
    ssize_t n, len = 0;
    pid_t pid;

    harness_daemon_start(&d, NULL);
    snprintf(sock2, sizeof(sock2), "%s/second.sock", d.dir);
    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        execl(TRACECTLD_BIN, TRACECTLD_BIN, "--socket", sock2, "--data-dir", d.data, NULL);
        _exit(127);
    }
    close(pfd[1]);
    for (int i = 0; i < 200 && waitpid(pid, &st, WNOHANG) == 0; i++)
        usleep(25000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        cr_assert_fail("a second daemon started on the same data dir");
    }
    while ((n = read(pfd[0], err + len, sizeof(err) - 1 - (size_t)len)) > 0)
        len += n;
    close(pfd[0]);
    err[len] = '\0';
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "the second daemon did not exit 1");
    cr_assert_not_null(strstr(err, "in use by another tracectld"), "stderr: %s", err);
    cr_assert_eq(strchr(err, '\n'), err + len - 1, "not one line: %s", err);
    /* the first still serves */
    long long id;
    int fd = raw_producer(d.sock, "still-here", 0, 1, NULL, &id);
    raw_bye(fd, 0);
}

/*
 * kill -9 while a session is live: after the restart `sessions` shows the
 * processes and entries its file holds (count(*)), not 0.
 */
Test(faults, counts_after_kill9_come_from_the_file)
{
    long long id;
    int a, b;

    harness_daemon_start(&d, NULL);
    a = raw_producer(d.sock, "killed", 0, 2, "gpu:0", &id);
    b = raw_producer(d.sock, "killed", 1, 2, "gpu:1", NULL);
    raw_send_ops(a, 1, "matmul");
    raw_send_ops(b, 1, "matmul");
    raw_send_batch(a, 1, 300, 0, 5);
    raw_send_batch(b, 1, 200, 0, 5);
    cr_assert_eq(raw_flush(a, 1), 300);
    cr_assert_eq(raw_flush(b, 1), 200);
    harness_daemon_stop(&d, SIGKILL);
    close(a);
    close(b);
    harness_daemon_restart(&d, NULL);
    long long in_file = file_count(id, "SELECT count(*) FROM entries");
    cr_assert_eq(in_file, 500);
    cr_assert_eq(harness_sessions_field(d.sock, id, "entries"), in_file);
    cr_assert_eq(harness_sessions_field(d.sock, id, "processes"), 2);
    cr_assert_eq(report_entries(id, NULL), 500);
}

/*
 * A session whose file cannot be created (an immutable sessions/ dir): every
 * flush is answered with an error, never an ack, and the loss is counted:
 * `sessions` shows 0 entries and all of them dropped and failed, `status`
 * the failed entries.
 */
Test(faults, a_session_without_a_file_gets_errors_not_acks)
{
    char cmd[PATH_MAX + 64];
    long long id, first, second;
    int fd;

    harness_daemon_start(&d, NULL);
    snprintf(cmd, sizeof(cmd), "chattr +i %s/sessions 2>/dev/null", d.data);
    if (geteuid() != 0 || system(cmd) != 0)
        cr_skip_test("needs root and chattr on the temp dir's file system");
    fd = raw_producer(d.sock, "no-file", 0, 1, NULL, &id);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 100, 0, 5);
    first = raw_flush(fd, 1);
    raw_send_batch(fd, 1, 50, 1000000, 5);
    second = raw_flush(fd, 2);
    snprintf(cmd, sizeof(cmd), "chattr -i %s/sessions", d.data);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(first, -1, "a flush of entries that have no file was acked");
    cr_assert_eq(second, -1, "a later flush was acked");
    close(fd);
    raw_wait_state(d.sock, id, "ended", 5);
    cr_assert_eq(harness_sessions_field(d.sock, id, "entries"), 0);
    cr_assert_eq(harness_sessions_field(d.sock, id, "dropped"), 150);
    cr_assert_eq(harness_sessions_field(d.sock, id, "failed"), 150);
    cr_assert_eq(harness_status_u64(d.sock, "failed_entries"), 150);
}
