/*
 * test_lib.c — libtracectl against a real tracectld, where the library's own
 * rules matter: fork() after tc_open (both processes' entries, counted per
 * process in the session file), entries the daemon would refuse (dropped and
 * counted, the stream goes on), a zeroed tc_options, tc_last_error()
 * for a refused hello, and tc_close() within its timeout when the daemon is
 * stopped (SIGSTOP). Counts are checked against what the test recorded, in
 * the report and in the session file itself.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

static struct tdaemon d;

static void clear_env(void)
{
    static const char *const vars[] = {"TRACECTL_DISABLE",
                                       "TRACECTL_BLOCKING",
                                       "TRACECTL_SOCKET",
                                       "TRACECTL_SESSION",
                                       "SLURM_JOB_ID",
                                       "TORCHELASTIC_RUN_ID",
                                       "RANK",
                                       "OMPI_COMM_WORLD_RANK",
                                       "PMI_RANK",
                                       "SLURM_PROCID",
                                       "WORLD_SIZE",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "PMI_SIZE",
                                       "SLURM_NTASKS",
                                       "TRACECTL_DEVICE",
                                       "TRACECTL_CLOSE_TIMEOUT",
                                       NULL};
    for (int i = 0; vars[i] != NULL; i++)
        unsetenv(vars[i]);
}

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    clear_env();
}

TestSuite(lib, .init = clear_env, .fini = fini, .timeout = 120);

/* The session's entries and dropped, from the report. */
static void report_counts(long long id, unsigned long long *entries, unsigned long long *dropped)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *sess;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report %lld failed", id);
    sess = obj_get(&o->via.array.ptr[1], "session");
    *entries = obj_u64(obj_get(sess, "entries"));
    *dropped = obj_u64(obj_get(sess, "dropped"));
    proto_reader_deinit(&r);
    close(fd);
}

/* One process of a session as its file holds it. */
struct proc_row {
    long long pid, rank, world, entries, dropped, bye;
};

/* The processes of session id, in process-id order, with their entries counted. Returns how many.
 */
static int session_procs(long long id, struct proc_row *rows, int max)
{
    char path[PATH_MAX + 32];
    sqlite3 *db;
    sqlite3_stmt *st;
    int n = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 10000); /* the daemon may be committing the session's end */
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT p.pid, coalesce(p.rank, -1), coalesce(p.world, -1),"
                                    " (SELECT count(*) FROM entries e WHERE e.process_id = p.id),"
                                    " p.dropped, p.bye FROM processes p ORDER BY p.id",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW && n < max) {
        rows[n] = (struct proc_row){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                                    sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                                    sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5)};
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static tc_client *open_lib(const char *session, int64_t rank, int64_t world)
{
    tc_options o;
    tc_client *c;
    const char *why;
    int err = 1;

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = world;
    o.blocking = 1; /* exact counts: nothing is dropped for a full ring */
    c = tc_open(&o, &err);
    tc_last_error(c, &why);
    cr_assert(c != NULL && tc_enabled(c), "tc_open: %d %s", err, why);
    return c;
}

/* n entries of op, start base + i µs, 1 µs + i ns long. */
static void record_n(tc_client *c, uint32_t op, int n, uint64_t base)
{
    for (int i = 0; i < n; i++)
        tc_record(c, op, base + (uint64_t)i * 1000, 1000 + (uint64_t)i, 0, NULL, NULL, 0, NULL);
}

/* ---- fork ------------------------------------------------------------------ */

#define PARENT_BEFORE 300 /* recorded by the parent before the fork, still in its ring */
#define PARENT_AFTER  200
#define CHILD_MAIN    250 /* recorded by the child on the forking thread */
#define CHILD_THREAD  120 /* and on a thread of its own */

struct child_rec {
    tc_client *c;
    uint32_t op;
};

static void *child_thread(void *arg)
{
    struct child_rec *cr = arg;

    record_n(cr->c, cr->op, CHILD_THREAD, 50000000);
    return NULL;
}

/* The forked child: exit 0 when every count is right, else the number of the failed check. */
static int child_main(tc_client *c, uint32_t op, long long parent_session)
{
    struct child_rec cr = {c, op};
    pthread_t th;

    if (tc_recorded(c) != 0 || tc_dropped(c) != 0)
        return 10;          /* the parent's counts are not the child's */
    setenv("RANK", "1", 1); /* a launcher giving the child its rank after the fork */
    record_n(c, op, CHILD_MAIN, 40000000);
    if (pthread_create(&th, NULL, child_thread, &cr) != 0)
        return 11;
    pthread_join(th, NULL);
    if (tc_flush(c, 20000) != 0)
        return 12;
    if (tc_session_id(c) != parent_session)
        return 13;
    if (tc_recorded(c) != CHILD_MAIN + CHILD_THREAD || tc_dropped(c) != 0)
        return 14;
    return tc_close(c) == 0 ? 0 : 15;
}

Test(lib, fork_child_joins_the_session_and_both_counts_are_exact)
{
    struct proc_row rows[4];
    unsigned long long entries, dropped;
    long long id;
    pid_t pid;
    int st;

    harness_daemon_start(&d, NULL);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    tc_client *c = open_lib("forked", -1, -1); /* rank and world from the environment */
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, PARENT_BEFORE, 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(child_main(c, op, id));
    record_n(c, op, PARENT_AFTER, 20000000);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed check %d",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    cr_assert_eq(tc_flush(c, 20000), 0, "the parent's connection is intact");
    cr_assert_eq(tc_recorded(c), PARENT_BEFORE + PARENT_AFTER);
    cr_assert_eq(tc_dropped(c), 0);
    cr_assert_eq(tc_close(c), 0);

    report_counts(id, &entries, &dropped);
    cr_assert_eq(entries, PARENT_BEFORE + PARENT_AFTER + CHILD_MAIN + CHILD_THREAD);
    cr_assert_eq(dropped, 0);
    cr_assert_eq(session_procs(id, rows, 4), 2, "the parent and the child, one process each");
    cr_assert_eq(rows[0].pid, getpid());
    cr_assert_eq(rows[0].entries, PARENT_BEFORE + PARENT_AFTER);
    cr_assert_eq(rows[0].rank, 0);
    cr_assert_eq(rows[1].pid, pid);
    cr_assert_eq(rows[1].entries, CHILD_MAIN + CHILD_THREAD);
    cr_assert_eq(rows[1].rank, 1, "the child's RANK, read at its first record");
    cr_assert_eq(rows[1].world, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rows[i].dropped, 0);
        cr_assert_eq(rows[i].bye, 1, "process %d ended with bye", i);
    }
}

/* A child that records nothing (e.g. it execs) never connects: the session sees one process. */
Test(lib, fork_child_that_records_nothing_never_connects)
{
    struct proc_row rows[4];
    long long id;
    pid_t pid;
    int st;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_lib("quiet-child", 0, 1);
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 10, 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(tc_close(c) == 0 ? 0 : 1);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    record_n(c, op, 5, 1000000);
    cr_assert_eq(tc_close(c), 0);
    cr_assert_eq(session_procs(id, rows, 4), 1);
    cr_assert_eq(rows[0].entries, 15);
}

/*
 * Forks while the writer thread drains: each child starts a thread (its
 * creation allocates) and exits. A writer forked inside an allocator that has
 * no fork handlers (GCC 12's AddressSanitizer) left that allocator locked in
 * the child, whose thread creation then never returned: 6 of 90 runs of the
 * test above hung that way under load, before fork_prepare parked the writer.
 */
#define STORM_FORKS 60

static void *storm_nothing(void *arg)
{
    return arg;
}

Test(lib, forks_as_the_writer_starts_leave_children_that_run)
{
    harness_daemon_start(&d, NULL);
    for (int i = 0; i < STORM_FORKS; i++) {
        tc_client *c = open_lib("fork-storm", 0, 1);
        uint32_t op = tc_op(c, "matmul");
        pthread_t t;
        int st;
        pid_t pid;

        record_n(c, op, PARENT_BEFORE, 0); /* the writer thread starts draining them */
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            alarm(10); /* a hung child dies of SIGALRM */
            _exit(pthread_create(&t, NULL, storm_nothing, NULL) != 0 || pthread_join(t, NULL) != 0);
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d of %d: %s %d", i + 1,
                  STORM_FORKS, WIFEXITED(st) ? "exit" : "hung, signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        cr_assert_eq(tc_flush(c, 20000), 0);
        cr_assert_eq(tc_dropped(c), 0);
        cr_assert_eq(tc_close(c), 0);
    }
}

/* ---- entries the daemon would refuse --------------------------------------- */

/* Issue 10 #8: end < start made dur wrap; the daemon closed the connection and 2,000 were lost. */
Test(lib, bad_entry_is_dropped_and_counted_the_stream_goes_on)
{
    unsigned long long entries, dropped;
    tc_shape huge = {1, {(uint64_t)INT64_MAX + 1}};
    long long id;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_lib("bad-entry", 0, 1);
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 1000, 0);
    uint64_t start = 5000000, end = start - 10; /* end < start */
    tc_record(c, op, start, end - start, 0, NULL, NULL, 0, NULL);
    tc_record(c, op, 1, 1, 0, &huge, NULL, 0, NULL);                  /* a dimension > INT64_MAX */
    tc_record(c, op, 1, 1, 0, NULL, NULL, 0, "gpu\xff");              /* not UTF-8 */
    tc_record(c, op, (uint64_t)INT64_MAX, 1, 0, NULL, NULL, 0, NULL); /* ends past INT64_MAX */
    tc_record(c, op, 1, 1, (uint64_t)INT64_MAX + 1, NULL, NULL, 0, NULL); /* memory */
    record_n(c, op, 2000, 10000000);
    cr_assert_eq(tc_flush(c, 20000), 0, "the connection survived");
    cr_assert_eq(tc_recorded(c), 3005);
    cr_assert_eq(tc_dropped(c), 5);
    cr_assert_eq(tc_last_error(c, NULL), 0);
    cr_assert_eq(tc_close(c), 0);
    report_counts(id, &entries, &dropped);
    cr_assert_eq(entries, 3000);
    cr_assert_eq(dropped, 5, "the bye carried the count");
}

/* Issue 26 #3: an op id never defined ended the connection (unknown_op) and lost the rest. */
Test(lib, undefined_op_is_refused_at_the_call_the_stream_goes_on)
{
    unsigned long long entries, dropped;
    long long id;

    harness_daemon_start(&d, NULL);
    tc_client *c = open_lib("undefined-op", 0, 1);
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 100, 0);
    tc_record(c, 99999, 1, 1, 0, NULL, NULL, 0, NULL);
    tc_record(c, op + 1, 1, 1, 0, NULL, NULL, 0, NULL); /* "known_id + 1" */
    cr_assert_not_null(strstr(tc_last_refusal(), "op 2 was never defined"), "%s",
                       tc_last_refusal());
    record_n(c, op, 100, 10000000);
    cr_assert_eq(tc_flush(c, 20000), 0, "the connection survived");
    cr_assert_eq(tc_dropped(c), 2);
    cr_assert_eq(tc_close(c), 0);
    report_counts(id, &entries, &dropped);
    cr_assert_eq(entries, 200, "the entries before and after it are stored");
    cr_assert_eq(dropped, 2);
}

/* ---- options and errors ---------------------------------------------------- */

/* Issue 9 #6: a zeroed tc_options said world 0, which the daemon refuses. */
Test(lib, zeroed_options_mean_defaults)
{
    struct proc_row rows[4];
    tc_options o = {0};
    long long id;
    int err = 1;

    harness_daemon_start(&d, NULL);
    o.socket_path = d.sock;
    o.session = "zeroed";
    tc_client *c = tc_open(&o, &err), *c2, *c3;
    cr_assert_eq(err, 0);
    cr_assert(tc_enabled(c));
    id = tc_session_id(c);
    record_n(c, tc_op(c, "matmul"), 10, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);

    /* c keeps the session live while the next two join it */
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    c2 = tc_open(&o, &err); /* rank 0 while world is unknown: the environment's */
    cr_assert(tc_enabled(c2));
    o.world = 4; /* now rank 0 is a given rank */
    c3 = tc_open(&o, &err);
    cr_assert(tc_enabled(c3));
    cr_assert_eq(tc_session_id(c2), id);
    cr_assert_eq(tc_session_id(c3), id);
    cr_assert_eq(tc_close(c3), 0);
    cr_assert_eq(tc_close(c2), 0);
    cr_assert_eq(tc_close(c), 0);

    cr_assert_eq(session_procs(id, rows, 4), 3);
    cr_assert_eq(rows[0].rank, -1, "no rank anywhere: absent");
    cr_assert_eq(rows[0].world, -1);
    cr_assert_eq(rows[0].entries, 10);
    cr_assert_eq(rows[1].rank, 3);
    cr_assert_eq(rows[1].world, 4);
    cr_assert_eq(rows[2].rank, 0);
}

Test(lib, refused_hello_says_why)
{
    tc_options o;
    const char *why = NULL;
    int err = 0;

    harness_daemon_start(&d, NULL);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "refused";
    o.rank = (int64_t)1 << 40; /* above the daemon's INT32_MAX */
    o.world = 2;
    tc_client *c = tc_open(&o, &err);
    cr_assert_not_null(c);
    cr_assert_eq(err, -EINVAL, "refused before the hello: the daemon would refuse it");
    cr_assert_eq(tc_enabled(c), 0);
    cr_assert_eq(tc_last_error(c, &why), -EINVAL);
    cr_assert_str_eq(why, "tc_open: rank 1099511627776 is outside 0 <= rank < world (2) (options "
                          "or environment)");
    cr_assert_str_eq(tc_last_refusal(), why);
    tc_record(c, 1, 0, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_dropped(c), 1, "offline: counts what it would have sent");
    cr_assert_eq(tc_close(c), 0);

    /* What only the daemon knows: its live-session limit, reached by a first session. */
    harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    harness_daemon_start(&d, "--max-live-sessions", "1", NULL);
    o.socket_path = d.sock;
    o.rank = 0;
    o.session = "first";
    tc_client *first = tc_open(&o, &err);
    cr_assert(tc_enabled(first));
    o.session = "refused";
    c = tc_open(&o, &err);
    cr_assert_eq(err, -EPROTO);
    cr_assert_eq(tc_last_error(c, &why), -EPROTO);
    cr_assert_not_null(strstr(why, "the daemon refused the hello: limit"), "%s", why);
    cr_assert_eq(tc_close(c), 0);
    cr_assert_eq(tc_close(first), 0);

    o.socket_path = "/nonexistent-dir/tracectl.sock";
    c = tc_open(&o, &err);
    cr_assert_eq(err, -ENOENT);
    cr_assert_eq(tc_last_error(c, &why), -ENOENT);
    cr_assert_not_null(strstr(why, "/nonexistent-dir/tracectl.sock"), "%s", why);
    cr_assert_eq(tc_close(c), 0);
    cr_assert_eq(tc_last_error(NULL, &why), 0);
    cr_assert_str_eq(why, "");
}

/* ---- another user's socket (issue 10 #3) ----------------------------------- */

#define OTHER_UID 65534

struct fake {
    pid_t pid;
    int done; /* closing it tells the fake daemon the test is over */
};

/*
 * A fake daemon run by another user: it makes dir (when not NULL) with mode,
 * listens on sock, and when told the test is over, exits with the number of
 * connections that sent it anything.
 */
static void fake_start(struct fake *f, const char *dir, mode_t mode, const char *sock)
{
    int ready[2], done[2];
    char c;

    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(done), 0);
    f->pid = fork();
    cr_assert_geq(f->pid, 0);
    if (f->pid == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int lfd, fd, n = 0;

        close(ready[0]);
        close(done[1]);
        if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
            _exit(90);
        if (dir != NULL && (mkdir(dir, mode) != 0 || chmod(dir, mode) != 0))
            _exit(91);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        lfd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 16) != 0)
            _exit(92);
        chmod(sock, 0777);
        if (write(ready[1], "r", 1) != 1)
            _exit(93);
        while (read(done[0], &c, 1) > 0) /* until the test closes its end */
            ;
        fcntl(lfd, F_SETFL, O_NONBLOCK);
        while ((fd = accept(lfd, NULL, NULL)) >= 0) {
            n += recv(fd, &c, 1, MSG_DONTWAIT) > 0; /* a client that said anything */
            close(fd);
        }
        unlink(sock);
        if (dir != NULL)
            rmdir(dir);
        _exit(n);
    }
    close(ready[1]);
    close(done[0]);
    cr_assert_eq(read(ready[0], &c, 1), 1, "the other user's fake daemon did not start");
    close(ready[0]);
    f->done = done[1];
}

/* Ends the fake daemon; returns how many clients sent it anything. */
static int fake_stop(struct fake *f)
{
    int st;

    close(f->done);
    cr_assert_eq(waitpid(f->pid, &st, 0), f->pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) < 90, "fake daemon failed: %d", st);
    return WEXITSTATUS(st);
}

/* Runs a program with stderr into *out as well; returns its exit status. */
static int run_both(char **out, const char *const *args)
{
    char *argv[16] = {"sh", "-c", "exec \"$@\" 2>&1", "sh"};
    int n = 4;

    for (; *args != NULL && n < 15; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    return harness_run(out, argv);
}

static void rm_rf(const char *dir)
{
    char *argv[] = {"rm", "-rf", (char *)dir, NULL};

    cr_assert_eq(harness_run(NULL, argv), 0);
}

static void make_sticky_base(char *base, size_t len)
{
    snprintf(base, len, "/tmp/tc_lib_XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    cr_assert_eq(chmod(base, 01777), 0); /* like /tmp: anyone may make a directory here */
}

Test(lib, another_users_socket_directory_is_refused)
{
    char base[64], dir[96], sock[128], data[96];
    const char *why;
    struct fake f;
    char *out;
    int err;

    if (geteuid() != 0)
        cr_skip_test("needs root to run the other user");
    make_sticky_base(base, sizeof(base));
    snprintf(dir, sizeof(dir), "%s/tracectl", base);
    snprintf(sock, sizeof(sock), "%s/tracectl.sock", dir);
    snprintf(data, sizeof(data), "%s/data", base);
    fake_start(&f, dir, 0777, sock); /* /tmp/tracectl-$UID, pre-created by someone else */
    setenv("XDG_RUNTIME_DIR", base, 1);

    tc_client *c = tc_open(NULL, &err); /* the default path: $XDG_RUNTIME_DIR/tracectl/... */
    cr_assert_eq(err, -EPERM);
    cr_assert_eq(tc_last_error(c, &why), -EPERM);
    cr_assert_not_null(strstr(why, "owned by uid 65534"), "%s", why);
    cr_assert_eq(tc_close(c), 0);

    const char *cli[] = {TRACECTL_BIN, "sessions", NULL};
    cr_assert_eq(run_both(&out, cli), 1, "%s", out);
    cr_assert_not_null(strstr(out, "owned by uid 65534"), "%s", out);
    free(out);

    const char *daemon[] = {"timeout", "20", TRACECTLD_BIN, "--data-dir", data, NULL};
    cr_assert_eq(run_both(&out, daemon), 1, "%s", out);
    cr_assert_not_null(strstr(out, "owned by uid 65534"), "%s", out);
    free(out);

    cr_assert_eq(fake_stop(&f), 0, "nothing reached the other user's daemon");
    /* the user's own directory made writable by others is refused too */
    cr_assert_eq(mkdir(dir, 0700), 0);
    cr_assert_eq(chmod(dir, 0777), 0);
    c = tc_open(NULL, &err);
    cr_assert_eq(err, -EPERM);
    tc_last_error(c, &why);
    cr_assert_not_null(strstr(why, "writable by group or others"), "%s", why);
    tc_close(c);
    rm_rf(base);
}

/* A socket in a shared sticky directory (allowed) served by another user: the peer check. */
Test(lib, another_users_daemon_is_refused)
{
    char base[64], sock[96];
    const char *why;
    tc_options o;
    struct fake f;
    char *out;
    int err;

    if (geteuid() != 0)
        cr_skip_test("needs root to run the other user");
    make_sticky_base(base, sizeof(base));
    snprintf(sock, sizeof(sock), "%s/evil.sock", base);
    fake_start(&f, NULL, 0, sock);

    tc_options_init(&o);
    o.socket_path = sock;
    tc_client *c = tc_open(&o, &err);
    cr_assert_eq(err, -EPERM);
    cr_assert_eq(tc_last_error(c, &why), -EPERM);
    cr_assert_not_null(strstr(why, "runs as uid 65534"), "%s", why);
    cr_assert_eq(tc_close(c), 0);

    const char *cli[] = {TRACECTL_BIN, "--socket", sock, "sessions", NULL};
    cr_assert_eq(run_both(&out, cli), 1, "%s", out);
    cr_assert_not_null(strstr(out, "runs as uid 65534"), "%s", out);
    free(out);

    cr_assert_eq(fake_stop(&f), 0, "no client said anything to the other user's daemon");
    rm_rf(base);
}

Test(lib, daemon_refuses_another_users_data_dir)
{
    char base[64], data[96], sock[128];
    char *out;

    if (geteuid() != 0)
        cr_skip_test("needs root for a directory of another user");
    make_sticky_base(base, sizeof(base));
    snprintf(data, sizeof(data), "%s/data", base);
    snprintf(sock, sizeof(sock), "%s/s/tracectl.sock", base);
    cr_assert_eq(mkdir(data, 0700), 0);
    cr_assert_eq(chown(data, OTHER_UID, OTHER_UID), 0);
    const char *daemon[] = {"timeout", "20",         TRACECTLD_BIN, "--socket",
                            sock,      "--data-dir", data,          NULL};
    cr_assert_eq(run_both(&out, daemon), 1, "%s", out);
    cr_assert_not_null(strstr(out, "refusing"), "%s", out);
    free(out);
    rm_rf(base);
}

/* ---- tc_close with the daemon stopped (issue 26 #2) ------------------------ */

/*
 * A client that recorded 1000 entries (flushed: stored) and 1000 more after
 * the daemon was stopped; returns how long tc_close took, in seconds, with
 * close_ms as tc_options.close_timeout_ms and blocking as tc_options.blocking.
 * The daemon is resumed after, and takes a new client's entries at once.
 */
static double close_stopped(const char *session, unsigned close_ms, int blocking)
{
    unsigned long long entries, dropped;
    tc_options o;
    double t0, took;
    long long id;
    int err = 1;

    if (d.pid <= 0)
        harness_daemon_start(&d, NULL);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = 0;
    o.world = 1;
    o.blocking = blocking;
    o.close_timeout_ms = close_ms;
    tc_client *c = tc_open(&o, &err);
    cr_assert(tc_enabled(c), "tc_open: %d", err);
    id = tc_session_id(c);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 1000, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    harness_sigstop(d.pid, true);
    record_n(c, op, 1000, 50000000);
    t0 = harness_now();
    cr_assert_eq(tc_close(c), -ETIMEDOUT, "the stopped daemon acknowledged nothing");
    took = harness_now() - t0;
    harness_sigstop(d.pid, false);

    /* The daemon goes on: a new client is answered and its entries stored. */
    o.session = "after";
    o.blocking = TC_DROP;
    o.close_timeout_ms = 0;
    c = tc_open(&o, &err);
    cr_assert(tc_enabled(c), "tc_open after SIGCONT: %d", err);
    record_n(c, tc_op(c, "after"), 10, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    cr_assert_eq(tc_close(c), 0);
    report_counts(id, &entries, &dropped);
    cr_assert(entries >= 1000 && entries <= 2000, "the flushed entries stayed: %llu", entries);
    return took;
}

#define CLOSE_MARGIN 1.0 /* seconds past the timeout a loaded, sanitized run may take */

Test(lib, close_within_its_timeout_with_the_daemon_stopped)
{
    double took;

    setenv("TRACECTL_CLOSE_TIMEOUT", "1", 1);
    took = close_stopped("stopped-env", 0, TC_DROP);
    cr_assert(took >= 0.95 && took <= 1 + CLOSE_MARGIN, "TRACECTL_CLOSE_TIMEOUT=1: %.3f s", took);

    setenv("TRACECTL_CLOSE_TIMEOUT", "0.5", 1);
    took = close_stopped("stopped-blocking", 0, 1);
    cr_assert(took >= 0.45 && took <= 0.5 + CLOSE_MARGIN, "blocking, 0.5: %.3f s", took);

    took = close_stopped("stopped-option", 1500, TC_DROP); /* the option wins */
    cr_assert(took >= 1.45 && took <= 1.5 + CLOSE_MARGIN, "close_timeout_ms 1500: %.3f s", took);
}

Test(lib, close_within_the_default_timeout_with_the_daemon_stopped)
{
    double took = close_stopped("stopped-default", 0, TC_DROP);

    cr_assert(took >= 4.95 && took <= 5 + CLOSE_MARGIN, "the default 5 s: %.3f s", took);
}

/*
 * A child forked after tc_open connects at its first record; with the daemon
 * stopped its hello is never answered. Its tc_close still returns within the
 * timeout in all (the writer thread waiting for the welcome gives up at the
 * close's deadline, not after the hello's own 5 s).
 */
Test(lib, forked_child_close_within_its_timeout_with_the_daemon_stopped)
{
    tc_options o;
    double t0, took;
    int err = 1, st;
    pid_t pid;

    harness_daemon_start(&d, NULL);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "stopped-fork";
    o.rank = 0;
    o.world = 2;
    o.blocking = TC_DROP;
    o.close_timeout_ms = 1000;
    tc_client *c = tc_open(&o, &err);
    cr_assert(tc_enabled(c), "tc_open: %d", err);
    uint32_t op = tc_op(c, "matmul");
    record_n(c, op, 10, 0);
    cr_assert_eq(tc_flush(c, 20000), 0);
    harness_sigstop(d.pid, true);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        record_n(c, op, 10, 1000000); /* connects: a hello the stopped daemon never answers */
        t0 = harness_now();
        err = tc_close(c);
        took = harness_now() - t0;
        _exit(err != -ETIMEDOUT ? 1 : took < 0.95 ? 2 : took > 1 + CLOSE_MARGIN ? 3 : 0);
    }
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    t0 = harness_now();
    cr_assert_eq(tc_close(c), -ETIMEDOUT);
    took = harness_now() - t0;
    harness_sigstop(d.pid, false);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the child's tc_close: status %d (1: not -ETIMEDOUT, 2: too soon, 3: too late)",
              WEXITSTATUS(st));
    cr_assert(took >= 0.95 && took <= 1 + CLOSE_MARGIN, "the parent's tc_close: %.3f s", took);
}
