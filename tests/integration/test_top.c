/*
 * test_top.c — `tracectl top` against a real daemon fed by real producer
 * processes (libtracectl, forked): --once --json checked against what the
 * producers sent (entries per rank, steps, calls and time per op, computed
 * here from the recording loop, not by the code under test), then the live
 * view in a real terminal, tmux, read back with capture-pane: the steps shown
 * increase while the producers run, the view follows resizes (a burst, and
 * one while top is blocked writing a frame), and q, Ctrl-C and the end of
 * input quit with exit 0 and the terminal's modes restored.
 *
 * The late rank: the producers' allreduces carry ext comm + seq, as the MPI
 * interposer sends them, and before each one the test's schedule makes one
 * known rank start it later than the others (late_rank_of, late_ns). The
 * share of collectives it arrived last at, the skews it caused and the
 * other ranks' waits are counted here from that schedule; --once --json and
 * the pane must show the same, then the running phase (where only LATE is
 * ever late) must show it at 100 % since the previous analysis. Ranks
 * without collectives show no late rank. top asks for them with the report
 * option "late"; --once --json gives the same numbers as report --json, and
 * the same through a proxy that plays a daemon before that option (it takes
 * the key out: such a daemon ignores it and answers with the whole report).
 *
 * Synchronisation is by events: the producers say on a pipe when they have
 * flushed (the daemon has them), and the tmux pane is polled until it shows
 * what the test waits for (with a deadline), never by sleeping a fixed time.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"
#include "tracectl.h"

#define NPROC      3
#define STEPS      4   /* steps of the exact phase */
#define GEMMS      25  /* gemm entries per step and rank */
#define COLLS      2   /* allreduces per step and rank in the exact phase */
#define COMM_NS    500 /* each allreduce lasts this long after its last arrival */
#define COMM_ID    7   /* the allreduces' ext comm */
#define LATE       2   /* the rank made late at most collectives */
#define OTHER_LATE 1   /* the rank made late at the others */
#define DEADLINE_S 60  /* how long the pane may take to show what is awaited */

static struct tdaemon d;
static char tmux_sock[64];

static void fini(void)
{
    if (tmux_sock[0] != '\0') {
        char *kill[] = {"tmux", "-L", tmux_sock, "kill-server", NULL};
        harness_run(NULL, kill);
    }
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
}

TestSuite(top, .fini = fini, .timeout = 240);

/* gemm i of step s on rank r lasts this long: every entry a different duration. */
static uint64_t gemm_ns(int r, int s, int i)
{
    return 1000u * (uint64_t)(r + 1) + 100u * (uint64_t)s + (uint64_t)i;
}

/* Collective seq k: the rank that starts it late, and how much after the others. */
static int late_rank_of(uint64_t k)
{
    return k < STEPS * COLLS && k % 4 == 3 ? OTHER_LATE : LATE;
}

static uint64_t late_ns(uint64_t k)
{
    return 2000u + 100u * k;
}

/* Rank r's allreduce seq k, starting at t unless r is the late one; the others wait for it. */
static uint64_t allreduce_ns(int r, uint64_t k)
{
    return COMM_NS + (r == late_rank_of(k) ? 0 : late_ns(k));
}

static void allreduce(tc_client *c, uint32_t op, int r, uint64_t k, uint64_t t)
{
    tc_ext x = {.has = TC_EXT_COMM | TC_EXT_SEQ, .comm = COMM_ID, .seq = k};

    tc_record_ext(c, op, t + (r == late_rank_of(k) ? late_ns(k) : 0), allreduce_ns(r, k), 0,
                  TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
}

struct pipes {
    int ready[2]; /* children → parent: one byte each once the exact phase is flushed */
    int go[2];    /* parent → children: closed to start the running phase */
    int stop[2];  /* parent → children: closed to end it */
};

/* True once fd is readable or at EOF, within ms. */
static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, ms) > 0;
}

static void producer(int rank, const struct pipes *p)
{
    tc_options o = {0};
    tc_client *c;
    uint32_t gemm, comm;
    uint64_t t = 1000000, step, k = 0;
    char byte = 'r';
    int err;

    o.socket_path = d.sock;
    o.session = "top-live";
    o.rank = rank;
    o.world = NPROC;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL)
        _exit(10);
    gemm = tc_op(c, "gemm");
    comm = tc_op_cat(c, "allreduce", "comm");
    for (int s = 0; s < STEPS; s++) {
        tc_set_step(c, (uint64_t)s);
        for (int i = 0; i < GEMMS; i++, t += 100000)
            tc_record(c, gemm, t, gemm_ns(rank, s, i), 0, NULL, NULL, 0, NULL);
        for (int i = 0; i < COLLS; i++, t += 100000)
            allreduce(c, comm, rank, k++, t);
    }
    if (tc_flush(c, -1) != 0 || write(p->ready[1], &byte, 1) != 1)
        _exit(11);
    while (read(p->go[0], &byte, 1) > 0) /* until the parent closes it */
        ;
    /* The running phase: a step every 5 ms until told to stop, LATE always late. */
    for (step = STEPS; !readable(p->stop[0], 0); step++) {
        struct timespec ts = {0, 5000000};
        tc_set_step(c, step);
        tc_record(c, gemm, t, 1000, 0, NULL, NULL, 0, NULL);
        allreduce(c, comm, rank, k++, t + 1000000);
        t += 10000000;
        nanosleep(&ts, NULL);
    }
    _exit(tc_close(c) == 0 ? 0 : 12);
}

/* v[a] or v[a][b] (b NULL: v[a]), or NULL. */
static yajl_val jget(yajl_val v, const char *a, const char *b)
{
    const char *path[] = {a, b, NULL};

    return yajl_tree_get(v, path, yajl_t_any);
}

static long long jint(yajl_val v)
{
    cr_assert(v != NULL && YAJL_IS_INTEGER(v), "expected an integer");
    return YAJL_GET_INTEGER(v);
}

/* The op row named op in the array rows, or NULL. */
static yajl_val op_row(yajl_val rows, const char *op)
{
    cr_assert(rows != NULL && YAJL_IS_ARRAY(rows));
    for (size_t i = 0; i < rows->u.array.len; i++) {
        yajl_val r = rows->u.array.values[i];
        const char *name = YAJL_GET_STRING(jget(r, "op", NULL));
        if (name != NULL && strcmp(name, op) == 0)
            return r;
    }
    return NULL;
}

/*
 * top's late figures (asked with "late": PROTOCOL.md Part 3, "report option
 * late") against those of `report --json` on the same session, read from
 * its analysis: the late rank's arrived_last and caused_ns from its `ranks`
 * row, the collectives from the sum of `collectives[].instances` (the
 * verdict's "of M"), the others' wait from the other ranks' waited_ns.
 */
static void same_as_report(yajl_val late)
{
    char *out = NULL, err[256];
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", "top-live", "--json", NULL};
    yajl_val v, ranks, coll;
    long long instances = 0, others = 0, last = -1, caused = -1;

    cr_assert_eq(harness_run(&out, argv), 0);
    v = yajl_tree_parse(out, err, sizeof(err));
    cr_assert(v != NULL, "report --json is not JSON: %s", err);
    ranks = jget(v, "ranks", NULL);
    coll = jget(v, "collectives", NULL);
    cr_assert(ranks != NULL && YAJL_IS_ARRAY(ranks) && coll != NULL && YAJL_IS_ARRAY(coll));
    for (size_t i = 0; i < coll->u.array.len; i++)
        instances += jint(jget(coll->u.array.values[i], "instances", NULL));
    for (size_t i = 0; i < ranks->u.array.len; i++) {
        yajl_val r = ranks->u.array.values[i];
        if (jint(jget(r, "rank", NULL)) == LATE) {
            last = jint(jget(r, "arrived_last", NULL));
            caused = jint(jget(r, "caused_ns", NULL));
        } else {
            others += jint(jget(r, "waited_ns", NULL));
        }
    }
    cr_assert_eq(jint(jget(late, "total", "collectives")), instances);
    cr_assert_eq(jint(jget(late, "total", "arrived_last")), last);
    cr_assert_eq(jint(jget(late, "total", "caused_ns")), caused);
    cr_assert_eq(jint(jget(late, "total", "others_waited_ns")), others);
    yajl_tree_free(v);
    free(out);
}

/* `top --once --json` against the sums of what the producers recorded. */
static void check_once(void)
{
    char *out = NULL, err[256];
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock,       "top", "top-live",
                    "--once",     "--json",   "--interval", "0.2", NULL};
    yajl_val v, ranks, gemm, comm, late;
    long long gemm_total = 0, comm_total = 0, last = 0, caused = 0, others = 0;

    cr_assert_eq(harness_run(&out, argv), 0);
    v = yajl_tree_parse(out, err, sizeof(err));
    cr_assert(v != NULL, "top --json is not JSON: %s\n%s", err, out);
    cr_assert_str_eq(YAJL_GET_STRING(jget(v, "session", "state")), "live");
    cr_assert_eq(jint(jget(v, "session", "connected")), NPROC);
    cr_assert_eq(jint(jget(v, "entries", NULL)), NPROC * STEPS * (GEMMS + COLLS));
    cr_assert_eq(jint(jget(v, "dropped", NULL)), 0);
    /* nothing arrived between the two samples */
    cr_assert(YAJL_IS_NUMBER(jget(v, "entries_per_s", NULL)));
    cr_assert_eq(YAJL_GET_DOUBLE(jget(v, "entries_per_s", NULL)), 0.0);
    cr_assert_eq(jget(v, "ops_interval", NULL)->u.array.len, 0);
    ranks = jget(v, "ranks", NULL);
    cr_assert_eq(ranks->u.array.len, NPROC);
    for (int r = 0; r < NPROC; r++) {
        yajl_val row = ranks->u.array.values[r];
        cr_assert_eq(jint(jget(row, "rank", NULL)), r);
        cr_assert_eq(jint(jget(row, "step", NULL)), STEPS - 1);
        cr_assert_eq(jint(jget(row, "entries", NULL)), STEPS * (GEMMS + COLLS));
        for (int s = 0; s < STEPS; s++)
            for (int i = 0; i < GEMMS; i++)
                gemm_total += (long long)gemm_ns(r, s, i);
    }
    gemm = op_row(jget(v, "ops_total", NULL), "gemm");
    comm = op_row(jget(v, "ops_total", NULL), "allreduce");
    cr_assert(gemm != NULL && comm != NULL);
    cr_assert_eq(jint(jget(gemm, "calls", NULL)), NPROC * STEPS * GEMMS);
    cr_assert_eq(jint(jget(gemm, "total_ns", NULL)), gemm_total);
    cr_assert_eq(jint(jget(comm, "calls", NULL)), NPROC * STEPS * COLLS);
    for (uint64_t k = 0; k < STEPS * COLLS; k++)
        for (int r = 0; r < NPROC; r++)
            comm_total += (long long)allreduce_ns(r, k);
    cr_assert_eq(jint(jget(comm, "total_ns", NULL)), comm_total);
    /* the late rank, from the schedule: every allreduce of the exact phase completed */
    for (uint64_t k = 0; k < STEPS * COLLS; k++) {
        if (late_rank_of(k) == LATE)
            last++, caused += (long long)late_ns(k);
        /* a rank's wait: min(last arrival - its start, its duration) */
        for (int r = 0; r < NPROC; r++)
            if (r != LATE && r != late_rank_of(k))
                others +=
                    (long long)(late_ns(k) < allreduce_ns(r, k) ? late_ns(k) : allreduce_ns(r, k));
    }
    /* the most caused (below), but not named: see live_view */
    cr_assert(YAJL_IS_NULL(jget(v, "late_rank", NULL)), "%s", out);
    late = jget(v, "late", NULL);
    cr_assert(late != NULL && YAJL_IS_OBJECT(late), "no late rank:\n%s", out);
    cr_assert_eq(jint(jget(late, "total", "rank")), LATE);
    cr_assert_eq(jint(jget(late, "total", "arrived_last")), last);
    cr_assert_eq(jint(jget(late, "total", "collectives")), STEPS * COLLS);
    cr_assert_eq(YAJL_GET_DOUBLE(jget(late, "total", "share")), (double)last / (STEPS * COLLS));
    cr_assert_eq(jint(jget(late, "total", "caused_ns")), caused);
    cr_assert_eq(jint(jget(late, "total", "others_waited_ns")), others);
    /* no collective completed between the two samples */
    cr_assert(YAJL_IS_NULL(jget(late, "interval", NULL)), "%s", out);
    same_as_report(late);
    yajl_tree_free(v);
    free(out);
}

/* ---- a daemon before "late" ------------------------------------------------ */

/* Writes all of buf to fd; false when the peer is gone. */
static bool write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n, len -= (size_t)n;
    }
    return true;
}

/*
 * One connection of the proxy: the request, re-packed without "late" (what
 * a daemon that does not know the key makes of it: PROTOCOL.md Part 1,
 * unknown keys are ignored), goes to the real daemon; its replies come back
 * as they are until the client closes. Returns 1 when "late" was taken out.
 */
static int proxy_one(int c)
{
    struct proto_reader r;
    struct proto_msg m;
    struct pollfd p[2];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char buf[65536];
    int up, late = 0;

    proto_reader_init(&r, 0);
    if (raw_recv(c, &r, &m) != 0)
        _exit(90);
    late = m.type == PROTO_REPORT && m.u.req.late;
    m.u.req.late = false;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (proto_pack_request(&pk, m.type, &m.u.req) != 0 || (up = raw_connect(d.sock)) < 0 ||
        !write_all(up, sb.data, sb.size))
        _exit(91);
    proto_msg_free(&m);
    for (;;) {
        ssize_t n;

        p[0] = (struct pollfd){.fd = c, .events = POLLIN};
        p[1] = (struct pollfd){.fd = up, .events = POLLIN};
        if (poll(p, 2, 30000) <= 0)
            _exit(92);
        if (p[0].revents) /* the client sends nothing more: it closed */
            break;
        if ((n = read(up, buf, sizeof(buf))) <= 0 || !write_all(c, buf, (size_t)n))
            _exit(93);
    }
    close(up);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_deinit(&r);
    return late;
}

/*
 * A process serving `conns` connections on path as a daemon before the
 * report option "late" would, then exiting with how many reports asked for
 * "late" (all answered with the whole report instead).
 */
static pid_t old_daemon(const char *path, int conns)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    pid_t pid;

    cr_assert_geq(lfd, 0);
    cr_assert_lt(strlen(path), sizeof(a.sun_path), "socket path too long: %s", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    cr_assert(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 8) == 0,
              "bind %s: %s", path, strerror(errno));
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int stripped = 0;
        for (int i = 0; i < conns; i++) {
            int c = accept(lfd, NULL, NULL);
            if (c < 0)
                _exit(94);
            stripped += proxy_one(c);
            close(c);
        }
        _exit(stripped);
    }
    close(lfd);
    return pid;
}

/*
 * A new top against a daemon before "late": the same late figures, read
 * from the whole report the old daemon answers with. --once --interval 0
 * makes two connections: `live` and the report asking for "late".
 */
static void check_old_daemon(void)
{
    char path[300], *out[2] = {NULL, NULL}, err[256];
    yajl_val v[2];
    pid_t old;
    int status;
    const char *keys[] = {"rank", "arrived_last", "collectives", "caused_ns", "others_waited_ns"};

    snprintf(path, sizeof(path), "%s/old.sock", d.dir);
    old = old_daemon(path, 2);
    for (int k = 0; k < 2; k++) {
        char *argv[] = {TRACECTL_BIN, "--socket", k ? path : d.sock, "top", "top-live",
                        "--once",     "--json",   "--interval",      "0",   NULL};
        cr_assert_eq(harness_run(&out[k], argv), 0);
        v[k] = yajl_tree_parse(out[k], err, sizeof(err));
        cr_assert(v[k] != NULL, "top --json is not JSON: %s\n%s", err, out[k]);
    }
    cr_assert_eq(waitpid(old, &status, 0), old);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1,
              "the old daemon did not get the one report with late: status %d", status);
    cr_assert_eq(jint(jget(v[1], "late_rank", NULL)), LATE, "%s", out[1]);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *path2[] = {"late", "total", keys[i], NULL};
        cr_assert_eq(jint(yajl_tree_get(v[1], path2, yajl_t_any)),
                     jint(yajl_tree_get(v[0], path2, yajl_t_any)), "late.total.%s", keys[i]);
    }
    for (int k = 0; k < 2; k++) {
        yajl_tree_free(v[k]);
        free(out[k]);
    }
    unlink(path);
}

/* ---- tmux ------------------------------------------------------------------ */

static char *pane(void)
{
    char *out = NULL;
    char *argv[] = {"tmux", "-L", tmux_sock, "capture-pane", "-p", "-t", "top:", NULL};

    cr_assert_eq(harness_run(&out, argv), 0, "capture-pane failed");
    return out;
}

/* rank 0's step in a captured frame, or -1 when the frame shows none yet. */
static long long rank0_step(const char *text)
{
    const char *p = strstr(text, "STEPS/S"); /* in the header, within 50 columns */
    long long rank, pid, step;

    if (p == NULL || (p = strchr(p, '\n')) == NULL)
        return -1;
    if (sscanf(p + 1, " %lld %lld %lld", &rank, &pid, &step) != 3 || rank != 0)
        return -1;
    return step;
}

/* Polls the pane until rank 0's step is above `above`; returns it. */
static long long await_step(long long above)
{
    time_t end = time(NULL) + DEADLINE_S;
    long long step = -1;

    while (time(NULL) < end) {
        char *text = pane();
        step = rank0_step(text);
        free(text);
        if (step > above)
            return step;
        poll(NULL, 0, 50);
    }
    cr_assert_fail("the pane never showed rank 0 past step %lld (last %lld)", above, step);
    return -1;
}

/* Polls the pane until it shows needle. */
static void await_text(const char *needle)
{
    time_t end = time(NULL) + DEADLINE_S;
    char *text = NULL;

    while (time(NULL) < end) {
        free(text);
        text = pane();
        if (strstr(text, needle) != NULL) {
            free(text);
            return;
        }
        poll(NULL, 0, 50);
    }
    cr_assert_fail("the pane never showed \"%s\":\n%s", needle, text);
}

/*
 * Polls the pane until a whole frame is drawn at its size: the header on the
 * first line and the entries line under it, with rank 0's row (a frame cut
 * at the bottom, not wrapped or scrolled).
 */
static void await_frame_top(void)
{
    time_t end = time(NULL) + DEADLINE_S;
    char *text = NULL;

    while (time(NULL) < end) {
        free(text);
        text = pane();
        if (strncmp(text, "tracectl top: session", 21) == 0 && strstr(text, "\nentries ") &&
            rank0_step(text) >= 0) {
            free(text);
            return;
        }
        poll(NULL, 0, 50);
    }
    cr_assert_fail("the pane never showed a whole frame:\n%s", text);
}

/* Polls until the file holds text (what the shell in the pane wrote after top exited). */
static char *await_file(const char *path)
{
    time_t end = time(NULL) + DEADLINE_S;

    while (time(NULL) < end) {
        FILE *f = fopen(path, "r");
        char buf[4096];
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        if (n > 0 && buf[n - 1] == '\n') {
            buf[n] = '\0';
            return strdup(buf);
        }
        poll(NULL, 0, 50);
    }
    cr_assert_fail("%s was never written", path);
    return NULL;
}

static void tmux(char *a, char *b, char *c, char *e, char *f, char *g, char *h)
{
    char *argv[] = {"tmux", "-L", tmux_sock, a, b, c, e, f, g, h, NULL};

    cr_assert_eq(harness_run(NULL, argv), 0, "tmux %s failed", a);
}

/*
 * Runs top in a new tmux session "top", 120×30 (the late-rank line is about 100 columns), in a
 * shell that writes top's exit status and `stty -a` to done (after top returned); redirect
 * follows top's arguments; pidfile (when not NULL) gets top's pid.
 */
static void start_top_pid(const char *done, const char *redirect, const char *pidfile)
{
    char cmd[8 * PATH_MAX];
    char *argv[] = {"tmux", "-L",  tmux_sock, "new-session", "-d", "-s", "top",
                    "-x",   "120", "-y",      "30",          cmd,  NULL};

    if (pidfile != NULL)
        snprintf(cmd, sizeof(cmd),
                 "sh -c 'echo $$ > %s.tmp; mv %s.tmp %s; exec %s --socket %s top top-live "
                 "--interval 0.1%s'; s=$?; "
                 "{ echo \"exit=$s\"; stty -a; } > %s.tmp; mv %s.tmp %s; sleep 60",
                 pidfile, pidfile, pidfile, TRACECTL_BIN, d.sock, redirect, done, done, done);
    else
        snprintf(cmd, sizeof(cmd),
                 "%s --socket %s top top-live --interval 0.2%s; s=$?; "
                 "{ echo \"exit=$s\"; stty -a; } > %s.tmp; mv %s.tmp %s; sleep 60",
                 TRACECTL_BIN, d.sock, redirect, done, done, done);
    cr_assert_eq(harness_run(NULL, argv), 0, "tmux new-session failed");
}

/* start_top_pid without a pid file. */
static void start_top(const char *done, const char *redirect)
{
    start_top_pid(done, redirect, NULL);
}

/* The pid in the file (what the pane's shell wrote before it exec'd top). */
static pid_t await_pid(const char *path)
{
    char *text = await_file(path);
    pid_t pid = (pid_t)atol(text);

    free(text);
    cr_assert_gt(pid, 0);
    return pid;
}

/* The tmux server's pid. */
static pid_t tmux_server_pid(void)
{
    char *out = NULL;
    char *argv[] = {"tmux", "-L", tmux_sock, "display-message", "-p", "#{pid}", NULL};
    pid_t pid;

    cr_assert_eq(harness_run(&out, argv), 0);
    pid = (pid_t)atol(out);
    free(out);
    cr_assert_gt(pid, 0);
    return pid;
}

/*
 * Polls until pid is blocked in write(2) (/proc/PID/syscall starts with the
 * syscall number: 1 on x86-64). False when that file cannot be read (not
 * x86-64, or no permission to look): the caller skips its check.
 */
static bool await_in_write(pid_t pid)
{
    time_t end = time(NULL) + DEADLINE_S;
    char path[64], buf[64];

    snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
    while (time(NULL) < end) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        if (n == 0)
            return false;
        buf[n] = '\0';
        if (strncmp(buf, "1 ", 2) == 0)
            return true;
        poll(NULL, 0, 20);
    }
    cr_assert_fail("top never blocked in write(2) with the terminal's reader stopped");
    return false;
}

/* What top left behind: exit 0 and the terminal's canonical mode and echo back on. */
static void check_done(const char *done)
{
    char *text = await_file(done);

    cr_assert(strncmp(text, "exit=0\n", 7) == 0, "top did not exit 0:\n%s", text);
    cr_assert(strstr(text, " icanon") != NULL && strstr(text, "-icanon") == NULL,
              "canonical mode was not restored:\n%s", text);
    cr_assert(strstr(text, " echo ") != NULL, "echo was not restored:\n%s", text);
    free(text);
}

/*
 * A resize while a frame is being written: the tmux server is stopped, so
 * the pane's terminal fills up and top blocks in write(2); a SIGWINCH then
 * interrupts that write. top must go on (and quit on q with exit 0), not
 * take the interrupted write for an error.
 */
static void resize_while_blocked(const char *done)
{
    char pidfile[PATH_MAX + 16];
    pid_t top, server;
    bool looked = true;

    snprintf(pidfile, sizeof(pidfile), "%s/top-pid", d.dir);
    unlink(done);
    start_top_pid(done, "", pidfile);
    top = await_pid(pidfile);
    await_step(STEPS - 1);
    server = tmux_server_pid();
    cr_assert_eq(kill(server, SIGSTOP), 0);
    for (int i = 0; i < 3 && looked; i++)
        if ((looked = await_in_write(top)))
            cr_assert_eq(kill(top, SIGWINCH), 0);
    cr_assert_eq(kill(server, SIGCONT), 0);
    if (!looked)
        cr_log_warn("/proc/%d/syscall unreadable: the resize was not sent mid-write", (int)top);
    tmux("send-keys", "-t", "top:", "q", NULL, NULL, NULL);
    check_done(done);
}

/*
 * The view, started before the running phase: the late rank of the exact
 * phase with its share, then (go closed) the steps moving on and LATE late
 * at every collective of the last interval.
 */
static void live_view(int go)
{
    char done[PATH_MAX + 16], line[128];
    long long first, later, last = 0;

    for (uint64_t k = 0; k < STEPS * COLLS; k++)
        last += late_rank_of(k) == LATE;
    snprintf(tmux_sock, sizeof(tmux_sock), "tctop-%d", (int)getpid());
    snprintf(done, sizeof(done), "%s/top-done", d.dir);
    start_top(done, "");
    /* a second session keeps the server up when "top" is killed between the runs below: a
     * server left with no session exits, and a new-session racing that exit fails (panes
     * and windows are named "top:" from here on: "top" alone is ambiguous with two) */
    tmux("new-session", "-d", "-s", "keep", "sleep 3600", NULL, NULL);
    /* LATE caused the most, but never 10 % of a step (4.9 µs at most, of 2.6 ms): it is the late
     * rank of no step, and the verdict's rule names no one */
    snprintf(line, sizeof(line), "\nno rank stands out (most caused: rank %d, ", LATE);
    await_text(line);
    snprintf(line, sizeof(line), "; arrived last at %lld%% of %d collectives), the others waited ",
             100 * last / (STEPS * COLLS), STEPS * COLLS);
    await_text(line);
    close(go);               /* the running phase */
    await_text("; last 0."); /* "; last 0.2 s: 4.1 µs": what LATE caused since the last frame */
    first = await_step(STEPS - 1);
    later = await_step(first); /* the live step increases from one frame to a later one */
    cr_assert_gt(later, first);
    /* resizes in a burst (signals while it samples and draws), then a smaller terminal: the
     * frame is redrawn from the top, lines cut, not wrapped */
    for (int i = 0; i < 20; i++)
        tmux("resize-window", "-t", "top:", "-x", i % 2 ? "60" : "110", "-y", i % 2 ? "12" : "28");
    tmux("resize-window", "-t", "top:", "-x", "50", "-y", "14");
    await_frame_top();
    tmux("send-keys", "-t", "top:", "q", NULL, NULL, NULL);
    check_done(done);
    tmux("kill-session", "-t", "top", NULL, NULL, NULL, NULL);
    /* Ctrl-C quits the same way */
    unlink(done);
    start_top(done, "");
    await_step(STEPS - 1);
    tmux("send-keys", "-t", "top:", "C-c", NULL, NULL, NULL);
    check_done(done);
    tmux("kill-session", "-t", "top", NULL, NULL, NULL, NULL);
    /* input at its end (< /dev/null): top quits after its first frame, as on q */
    unlink(done);
    start_top(done, " </dev/null");
    check_done(done);
    tmux("kill-session", "-t", "top", NULL, NULL, NULL, NULL);
    resize_while_blocked(done);
}

Test(top, once_json_and_live_view_in_tmux)
{
    struct pipes p;
    pid_t kids[NPROC];
    char byte;
    int status;

    harness_daemon_start(&d, NULL);
    cr_assert(pipe(p.ready) == 0 && pipe(p.go) == 0 && pipe(p.stop) == 0);
    /* close-on-exec: tmux, started while they are open, must not hold go or stop open */
    for (int i = 0; i < 2; i++)
        cr_assert(fcntl(p.go[i], F_SETFD, FD_CLOEXEC) == 0 &&
                  fcntl(p.stop[i], F_SETFD, FD_CLOEXEC) == 0);
    for (int r = 0; r < NPROC; r++) {
        kids[r] = fork();
        cr_assert(kids[r] >= 0);
        if (kids[r] == 0) {
            close(p.ready[0]), close(p.go[1]), close(p.stop[1]);
            producer(r, &p);
        }
    }
    close(p.ready[1]), close(p.go[0]), close(p.stop[0]);
    for (int r = 0; r < NPROC; r++)
        cr_assert_eq(read(p.ready[0], &byte, 1), 1, "a producer failed before its flush");
    check_once();
    check_old_daemon();
    live_view(p.go[1]);
    close(p.stop[1]);
    for (int r = 0; r < NPROC; r++) {
        cr_assert_eq(waitpid(kids[r], &status, 0), kids[r]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer %d: status %d", r,
                  status);
    }
}

Test(top, usage_and_no_live_session)
{
    char *out = NULL;
    char *json_live[] = {TRACECTL_BIN, "top", "--json", NULL};
    char *bad_iv[] = {TRACECTL_BIN, "top", "--interval", "x", NULL};
    char *help[] = {TRACECTL_BIN, "top", "--help", NULL};
    char *none[] = {TRACECTL_BIN, "--socket", d.sock, "top", "--once", NULL};

    harness_daemon_start(&d, NULL);
    cr_assert_eq(harness_run(NULL, json_live), 2);
    cr_assert_eq(harness_run(NULL, bad_iv), 2);
    cr_assert_eq(harness_run(&out, help), 0);
    cr_assert(strstr(out, "Usage: tracectl top") != NULL);
    free(out);
    cr_assert_eq(harness_run(NULL, none), 4); /* no live session */
}

/* Two ranks, compute only: no collective, so no late-rank line and null in --json. */
Test(top, no_collective_no_late_rank)
{
    char *out = NULL, err[256];
    char *json[] = {TRACECTL_BIN, "--socket", d.sock,       "top", "plain",
                    "--once",     "--json",   "--interval", "0",   NULL};
    char *text[] = {TRACECTL_BIN, "--socket",   d.sock, "top", "plain",
                    "--once",     "--interval", "0",    NULL};
    tc_client *c[2];
    yajl_val v;
    int e;

    harness_daemon_start(&d, NULL);
    for (int r = 0; r < 2; r++) {
        tc_options o = {0};
        o.socket_path = d.sock;
        o.session = "plain";
        o.rank = r;
        o.world = 2;
        o.blocking = 1;
        cr_assert((c[r] = tc_open(&o, &e)) != NULL);
        tc_set_step(c[r], 0);
        tc_record(c[r], tc_op(c[r], "gemm"), 1000, 500, 0, NULL, NULL, 0, NULL);
        cr_assert_eq(tc_flush(c[r], -1), 0);
    }
    cr_assert_eq(harness_run(&out, json), 0);
    v = yajl_tree_parse(out, err, sizeof(err));
    cr_assert(v != NULL, "top --json is not JSON: %s\n%s", err, out);
    cr_assert_eq(jint(jget(v, "entries", NULL)), 2);
    cr_assert(YAJL_IS_NULL(jget(v, "late_rank", NULL)), "%s", out);
    cr_assert(YAJL_IS_NULL(jget(v, "late", NULL)), "%s", out);
    yajl_tree_free(v);
    free(out);
    cr_assert_eq(harness_run(&out, text), 0);
    cr_assert(strstr(out, "\nentries 2 ") != NULL, "%s", out);
    cr_assert(strstr(out, "late rank") == NULL, "%s", out);
    cr_assert(strstr(out, "CPU WAIT") == NULL, "no CPU wait reported: %s", out);
    free(out);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(tc_close(c[r]), 0);
}

/* The rank row of rank in top --json's ranks, or NULL. */
static yajl_val rank_row(yajl_val v, long long rank)
{
    yajl_val rows = jget(v, "ranks", NULL);

    cr_assert(rows != NULL && YAJL_IS_ARRAY(rows));
    for (size_t i = 0; i < rows->u.array.len; i++) {
        yajl_val r = jget(rows->u.array.values[i], "rank", NULL);
        if (r != NULL && YAJL_IS_INTEGER(r) && YAJL_GET_INTEGER(r) == rank)
            return rows->u.array.values[i];
    }
    return NULL;
}

/* The first line of out whose first field is rank, as a new string, or NULL. */
static char *rank_line(const char *out, const char *rank)
{
    for (const char *p = out; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n'), *q = p + strspn(p, " ");
        if (strncmp(q, rank, strlen(rank)) == 0 && q[strlen(rank)] == ' ')
            return strndup(p, end ? (size_t)(end - p) : strlen(p));
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

/*
 * Rank 1 reports 1,500,000 + 250,000 ns of CPU wait (steps 0 and 1), rank 0 none: the rank
 * rows gain CPU WAIT, 1.75 ms and 0 ns, and --json's ranks their cpu_wait_ns.
 */
Test(top, cpu_wait_column_when_a_rank_reports_one)
{
    char *out = NULL, err[256];
    char *json[] = {TRACECTL_BIN, "--socket", d.sock,       "top", "starved",
                    "--once",     "--json",   "--interval", "0",   NULL};
    char *text[] = {TRACECTL_BIN, "--socket",   d.sock, "top",       "starved",
                    "--once",     "--interval", "0",    "--no-bars", NULL};
    struct timespec t0, now;
    tc_client *c[2];
    yajl_val v = NULL;
    int e;

    harness_daemon_start(&d, NULL);
    for (int r = 0; r < 2; r++) {
        tc_options o = {0};
        o.socket_path = d.sock;
        o.session = "starved";
        o.rank = r;
        o.world = 2;
        o.blocking = 1;
        cr_assert((c[r] = tc_open(&o, &e)) != NULL);
        for (uint64_t s = 0; s < 2; s++) {
            tc_set_step(c[r], s);
            tc_record(c[r], tc_op(c[r], "gemm"), 1000 + s * 1000, 500, 0, NULL, NULL, 0, NULL);
        }
        if (r == 1)
            cr_assert(tc_meta_str(c[r], "tracectl.cpu_wait", "0 1500000") == 0 &&
                      tc_meta_str(c[r], "tracectl.cpu_wait", "1 250000") == 0);
        cr_assert_eq(tc_flush(c[r], -1), 0);
    }
    /* what is committed: poll until the writer has it (10 s at most) */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        yajl_val cw;
        cr_assert_eq(harness_run(&out, json), 0);
        v = yajl_tree_parse(out, err, sizeof(err));
        cr_assert(v != NULL, "top --json is not JSON: %s\n%s", err, out);
        cw = rank_row(v, 1) ? jget(rank_row(v, 1), "cpu_wait_ns", NULL) : NULL;
        if (cw != NULL && YAJL_IS_INTEGER(cw) && YAJL_GET_INTEGER(cw) == 1750000)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        cr_assert_lt(now.tv_sec - t0.tv_sec, 10, "no CPU wait of rank 1 in:\n%s", out);
        yajl_tree_free(v);
        free(out);
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    cr_assert_eq(jint(jget(rank_row(v, 0), "cpu_wait_ns", NULL)), 0, "%s", out);
    yajl_tree_free(v);
    free(out);
    cr_assert_eq(harness_run(&out, text), 0);
    {
        char *hdr = strstr(out, "  RANK "), *r0, *r1;
        cr_assert(hdr != NULL && strstr(hdr, "CPU WAIT") != NULL, "%s", out);
        cr_assert((r0 = rank_line(hdr, "0")) != NULL, "no rank 0 row:\n%s", out);
        cr_assert((r1 = rank_line(hdr, "1")) != NULL, "no rank 1 row:\n%s", out);
        cr_assert(strstr(r0, " 0 ns") != NULL, "rank 0: %s", r0);
        cr_assert(strstr(r1, " 1.75 ms") != NULL, "rank 1: %s", r1);
        free(r0);
        free(r1);
    }
    free(out);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(tc_close(c[r]), 0);
}
