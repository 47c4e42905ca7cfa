/*
 * test_clickhouse.c — the ClickHouse sink (tracectld --clickhouse, daemon/sink/sink.h)
 * end to end: a real clickhouse-server (Debian's 18.16) on private ports and
 * a private directory, the real daemon, and real producers (libtracectl, one
 * forked process per rank, blocking mode: nothing dropped).
 *
 * What ClickHouse holds is checked against the session's SQLite file, read
 * here with SQL of this test's own (every column of every entry, as a sorted
 * multiset: each entry exactly once), and against the daemon's report for
 * each rank (calls and sums per op). Then the faults: ClickHouse down while
 * the job runs, ClickHouse killed with -9 mid-stream, the daemon killed
 * between an INSERT and the commit of its position (test builds'
 * $TRACECTLD_SINK_KILL_AFTER), and the daemon killed with -9 mid-stream;
 * after each, every entry is there once.
 *
 * Skipped, with the reason, when clickhouse-server is not installed.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tracectl.h"

#define CH_SERVER "/usr/sbin/clickhouse-server"
#define CH_USER   "tracectl"
#define CH_PASS   "s3cret-pw"
#define HOST      "test-host-a"
#define SESSION   "chjob"
#define RANKS     4

static struct tdaemon d;

struct chsrv {
    pid_t pid;
    char dir[256];
    int http, tcp;
    char url[128];
};
static struct chsrv ch;

static void ch_kill(void)
{
    if (ch.pid > 0) {
        kill(ch.pid, SIGKILL);
        harness_wait_child(ch.pid);
        ch.pid = 0;
    }
}

static void fini(void)
{
    char *argv[] = {"rm", "-rf", ch.dir, NULL};

    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    ch_kill();
    harness_reap();
    if (ch.dir[0] != '\0')
        harness_run(NULL, argv);
}

TestSuite(clickhouse, .fini = fini, .timeout = 120);

/* What the test is at, on stderr with the time (a timeout then says where). */
static void phase(const char *what)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "test_clickhouse: %ld.%03ld %s\n", (long)ts.tv_sec, ts.tv_nsec / 1000000, what);
}

/* ---- the server ------------------------------------------------------------------ */

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* The reply body of sql (malloc'd), or NULL when ClickHouse did not answer 200 (*code). */
struct reply {
    char *data;
    size_t len, cap;
};

static size_t reply_cb(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;

    if (r->len + size * n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        char *q;

        while (cap < r->len + size * n + 1)
            cap *= 2;
        cr_assert((q = realloc(r->data, cap)) != NULL);
        r->data = q;
        r->cap = cap;
    }
    memcpy(r->data + r->len, p, size * n);
    r->len += size * n;
    r->data[r->len] = '\0';
    return size * n;
}

static char *ch_try(const char *sql, long *code)
{
    struct reply r = {calloc(1, 1), 0, 1};
    CURL *c = curl_easy_init();
    CURLcode rc;

    cr_assert(c != NULL);
    curl_easy_setopt(c, CURLOPT_URL, ch.url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, sql);
    curl_easy_setopt(c, CURLOPT_USERPWD, CH_USER ":" CH_PASS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    rc = curl_easy_perform(c);
    *code = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    curl_easy_cleanup(c);
    if (*code != 200) {
        free(r.data);
        return NULL;
    }
    return r.data;
}

/* The reply of sql; fails the test when ClickHouse refuses it. */
static char *ch_query(const char *sql)
{
    long code;
    char *out = ch_try(sql, &code);

    cr_assert(out != NULL, "ClickHouse answered %ld to: %s", code, sql);
    return out;
}

static unsigned long long ch_u64(const char *sql)
{
    char *out = ch_query(sql);
    unsigned long long v = strtoull(out, NULL, 10);

    free(out);
    return v;
}

/* Starts (or restarts, on the same directory and ports) the server; waits until it answers. */
static void ch_start(void)
{
    char path[512], text[4096];
    long code = 0;
    char *out;

    if (ch.dir[0] == '\0') {
        snprintf(ch.dir, sizeof(ch.dir), "/tmp/tc-ch-XXXXXX");
        cr_assert(mkdtemp(ch.dir) != NULL);
        ch.http = free_port();
        ch.tcp = free_port();
        snprintf(ch.url, sizeof(ch.url), "http://127.0.0.1:%d/", ch.http);
        snprintf(text, sizeof(text),
                 "<?xml version=\"1.0\"?>\n<yandex>\n"
                 "<logger><level>warning</level><log>%s/server.log</log>"
                 "<errorlog>%s/server.err.log</errorlog></logger>\n"
                 "<http_port>%d</http_port><tcp_port>%d</tcp_port>\n"
                 "<listen_host>127.0.0.1</listen_host>\n"
                 "<path>%s/data/</path><tmp_path>%s/tmp/</tmp_path>\n"
                 "<user_files_path>%s/user_files/</user_files_path>\n"
                 "<format_schema_path>%s/format_schemas/</format_schema_path>\n"
                 "<users_config>%s/users.xml</users_config>\n"
                 "<default_profile>default</default_profile>"
                 "<default_database>default</default_database>\n"
                 "<mark_cache_size>67108864</mark_cache_size>"
                 "<uncompressed_cache_size>67108864</uncompressed_cache_size>\n"
                 "</yandex>\n",
                 ch.dir, ch.dir, ch.http, ch.tcp, ch.dir, ch.dir, ch.dir, ch.dir, ch.dir);
        snprintf(path, sizeof(path), "%s/config.xml", ch.dir);
        write_file(path, text, 0600);
        snprintf(path, sizeof(path), "%s/users.xml", ch.dir);
        write_file(path,
                   "<?xml version=\"1.0\"?>\n<yandex><profiles><default/></profiles>\n"
                   "<users><" CH_USER "><password>" CH_PASS "</password>"
                   "<networks><ip>127.0.0.1</ip></networks><profile>default</profile>"
                   "<quota>default</quota></" CH_USER "></users>\n"
                   "<quotas><default/></quotas></yandex>\n",
                   0600);
    }
    ch.pid = harness_fork_as(0, 600);
    if (ch.pid == 0) {
        int fd;

        snprintf(path, sizeof(path), "%s/stdout.log", ch.dir);
        if ((fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600)) >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        snprintf(path, sizeof(path), "--config-file=%s/config.xml", ch.dir);
        execl(CH_SERVER, "clickhouse-server", path, (char *)NULL);
        _exit(127);
    }
    phase("clickhouse-server starting");
    for (int i = 0; i < 600 && (out = ch_try("SELECT 1", &code)) == NULL; i++)
        usleep(50000);
    phase("clickhouse-server up");
    cr_assert(out != NULL, "clickhouse-server did not answer within 30 s (%ld)", code);
    free(out);
}

/* ---- the daemon ----------------------------------------------------------------- */

/* Starts the daemon with the sink (restart: on the same dir), and opt val when given. */
static void daemon_start_with(bool restart, const char *opt, const char *val)
{
    char url[160], auth[PATH_MAX + 8];

    snprintf(url, sizeof(url), "%s", ch.url);
    if (!restart) {
        harness_daemon_start(&d, NULL);
        harness_daemon_stop(&d, SIGTERM); /* only for its directory */
    }
    snprintf(auth, sizeof(auth), "%s/ch.auth", d.dir);
    write_file(auth, CH_USER ":" CH_PASS "\n", 0600);
    harness_daemon_restart(&d, "--clickhouse", url, "--clickhouse-auth", auth, "--clickhouse-host",
                           HOST, opt, val, NULL);
}

static void daemon_start(bool restart)
{
    daemon_start_with(restart, NULL, NULL);
}

/* The daemon's status map, borrowed from r. */
static const msgpack_object *status(struct proto_reader *r, int *fd)
{
    const msgpack_object *o = raw_control(d.sock, PROTO_STATUS, NULL, r, fd);

    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    return &o->via.array.ptr[1];
}

/* Waits until ClickHouse holds n entries of the session (and no more), up to 60 s. */
static void wait_rows(long long id, unsigned long long n)
{
    char sql[256];
    unsigned long long got = 0;

    snprintf(sql, sizeof(sql),
             "SELECT count() FROM tracectl.entries WHERE host = '" HOST "' AND session_id = %lld",
             id);
    for (int i = 0; i < 1200; i++) { /* the tables may not be there yet: 0 until they are */
        long code;
        char *out = ch_try(sql, &code);

        got = out != NULL ? strtoull(out, NULL, 10) : 0;
        free(out);
        if (got >= n)
            break;
        usleep(50000);
    }
    cr_assert_eq(got, n, "ClickHouse has %llu entries of session %lld, want %llu", got, id, n);
}

/* ---- the producers -------------------------------------------------------------- */

#define CHUNK 2500 /* entries per rank and phase */

struct prod {
    pid_t pid;
    int cmd, ack; /* the test's ends: write a phase's size in chunks ('x': close), read 'k' */
};
static struct prod prods[RANKS];

/* A rank: per command, n chunks of entries with known values, then a flush; 'x' closes. */
static void prod_run(int rank, int cmd, int ack)
{
    tc_options o = {0};
    tc_ext x = {0};
    tc_client *c;
    uint32_t ops[3];
    uint64_t i = 0, base;
    struct timespec ts;
    char b, dev[16];
    int err = 0;

    snprintf(dev, sizeof(dev), "gpu:%d", rank);
    o.socket_path = d.sock;
    o.session = SESSION;
    o.rank = rank;
    o.world = RANKS;
    o.device = dev;
    o.blocking = 1;
    o.close_timeout_ms = 5000;
    if ((c = tc_open(&o, &err)) == NULL)
        _exit(2);
    tc_meta_str(c, "torch", rank < RANKS / 2 ? "2.3.1" : "2.4.0"); /* two library versions */
    ops[0] = tc_op_cat(c, "matmul", "compute");
    ops[1] = tc_op_cat(c, "allreduce", "comm");
    ops[2] = tc_op(c, "memcpy_h2d");
    clock_gettime(CLOCK_MONOTONIC, &ts);
    base = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    while (read(cmd, &b, 1) == 1 && b != 'x') {
        for (uint64_t n = (uint64_t)(b - '0') * CHUNK; n > 0; n--, i++) {
            uint32_t op = ops[i % 3];
            uint64_t dur = 200 + (i * 7919 + (uint64_t)rank * 104729) % 20000;

            if (i % 90 == 0)
                tc_step(c);
            x.has = op == ops[1] ? TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE : 0;
            x.comm = 7;
            x.seq = i / 3;
            x.comm_size = RANKS;
            tc_record_ext(c, op, base + i * 1000, dur, (i % 4) * 256, TC_ELEMENTS_NONE, NULL, NULL,
                          0, NULL, &x);
        }
        if (tc_flush(c, 30000) != 0)
            _exit(3);
        if (write(ack, "k", 1) != 1)
            _exit(4);
    }
    tc_close(c);
    _exit(0);
}

static void prods_start(void)
{
    for (int r = 0; r < RANKS; r++) {
        int cmd[2], ack[2];

        harness_pipe(cmd);
        harness_pipe(ack);
        prods[r].pid = harness_fork_as(0, 200);
        if (prods[r].pid == 0) {
            close(cmd[1]);
            close(ack[0]);
            prod_run(r, cmd[0], ack[1]);
        }
        close(cmd[0]);
        close(ack[1]);
        prods[r].cmd = cmd[1];
        prods[r].ack = ack[0];
    }
}

/* Every rank records chunks × CHUNK entries more and flushes (acked: committed). */
static void prods_phase(int chunks)
{
    char b = (char)('0' + chunks);

    for (int r = 0; r < RANKS; r++)
        cr_assert_eq(write(prods[r].cmd, &b, 1), 1);
    for (int r = 0; r < RANKS; r++)
        cr_assert_eq(harness_read_within(prods[r].ack, &b, 1, 60), 0, "rank %d did not flush", r);
}

static void prods_close(void)
{
    for (int r = 0; r < RANKS; r++) {
        cr_assert_eq(write(prods[r].cmd, "x", 1), 1);
        cr_assert_eq(harness_wait_child(prods[r].pid), 0, "rank %d", r);
        close(prods[r].cmd);
        close(prods[r].ack);
    }
}

/* ---- the checks ----------------------------------------------------------------- */

/*
 * Every entry of the session file, one TSV line each, sorted: what ClickHouse
 * must hold, column for column (start_ns as the producer sent it).
 */
#define ENTRY_ORDER "process_id, start_ns, dur_ns, step, op"

static char *file_entries(long long id)
{
    char path[PATH_MAX + 32], *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    sqlite3 *db;
    sqlite3_stmt *st;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "SELECT p.rank, e.process_id, e.step, o.name AS op, o.category,"
                           " coalesce(d.name, ''), e.start_ns, e.dur_ns, coalesce(e.elements, 0),"
                           " e.mem_bytes, coalesce(x.comm, '\\N'), coalesce(x.seq, '\\N'),"
                           " coalesce(x.comm_size, '\\N')"
                           " FROM entries e JOIN processes p ON p.id = e.process_id"
                           " JOIN ops o ON o.id = e.op_id LEFT JOIN devices d ON d.id = e.device_id"
                           " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid"
                           " ORDER BY e.process_id, e.start_ns, e.dur_ns, e.step, o.name",
                           -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert(out != NULL);
    while (sqlite3_step(st) == SQLITE_ROW)
        for (int i = 0; i < 13; i++)
            fprintf(out, "%s%s", (const char *)sqlite3_column_text(st, i), i < 12 ? "\t" : "\n");
    sqlite3_finalize(st);
    sqlite3_close(db);
    fclose(out);
    return text;
}

static char *ch_entries(long long id)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT rank, process_id, step, op, category, device,"
             " start_ns - (SELECT any(clock_offset_ns) FROM tracectl.sessions FINAL"
             "   WHERE host = '" HOST "' AND session_id = %lld),"
             " dur_ns, elements, mem_bytes, comm, seq, comm_size"
             " FROM tracectl.entries WHERE host = '" HOST "' AND session_id = %lld"
             " ORDER BY process_id, start_ns, dur_ns, step, op FORMAT TabSeparated",
             id, id);
    return ch_query(sql);
}

/* Each entry of the file is in ClickHouse once, with every column right. */
static void check_exact(long long id, unsigned long long n)
{
    char *want, *got;
    size_t lines = 0;

    wait_rows(id, n);
    phase("check_exact: rows there");
    want = file_entries(id);
    phase("check_exact: file read");
    got = ch_entries(id);
    phase("check_exact: ClickHouse read");
    for (const char *p = want; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    cr_assert_eq(lines, n, "the session file has %zu entries, want %llu", lines, n);
    if (strcmp(want, got) != 0) {
        size_t i = 0;

        while (want[i] == got[i])
            i++;
        while (i > 0 && want[i - 1] != '\n')
            i--;
        cr_assert_fail("ClickHouse differs from the session file at byte %zu:\n file: %.200s\n"
                       " ClickHouse: %.200s",
                       i, want + i, got + i);
    }
    free(want);
    free(got);
}

/* Calls and sums per op of each rank, from the daemon's report, equal ClickHouse's. */
static void check_report(long long id)
{
    for (int rank = 0; rank < RANKS; rank++) {
        struct proto_request req;
        struct proto_reader r;
        const msgpack_object *o, *ops;
        char sql[512], line[256], *got;
        int fd, n = 0;
        struct reply want = {calloc(1, 1), 0, 1};

        proto_request_init(&req);
        req.session.id = id;
        req.analysis.ranks[0] = rank;
        req.analysis.n_ranks = 1;
        o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
        cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report of rank %d", rank);
        ops = obj_get(&o->via.array.ptr[1], "ops");
        cr_assert(ops != NULL && ops->type == MSGPACK_OBJECT_ARRAY);
        for (uint32_t i = 0; i < ops->via.array.size; i++) {
            const msgpack_object *row = &ops->via.array.ptr[i], *name = obj_get(row, "op");

            n = snprintf(line, sizeof(line), "%.*s\t%llu\t%llu\t%llu\t%llu\n",
                         (int)name->via.str.size, name->via.str.ptr, obj_u64(obj_get(row, "calls")),
                         obj_u64(obj_get(row, "total_ns")), obj_u64(obj_get(row, "mem_bytes")),
                         obj_u64(obj_get(row, "elements")));
            reply_cb(line, 1, (size_t)n, &want);
        }
        proto_reader_deinit(&r);
        close(fd);
        snprintf(sql, sizeof(sql),
                 "SELECT op, count(), sum(dur_ns), sum(mem_bytes), sum(elements)"
                 " FROM tracectl.entries WHERE host = '" HOST "' AND session_id = %lld"
                 " AND rank = %d GROUP BY op ORDER BY sum(dur_ns) DESC, op FORMAT TabSeparated",
                 id, rank);
        got = ch_query(sql);
        cr_assert_str_eq(got, want.data, "rank %d: ClickHouse\n%s\nthe report\n%s", rank, got,
                         want.data);
        free(got);
        free(want.data);
    }
}

static long long session_id(void)
{
    struct proto_reader r;
    const msgpack_object *o;
    long long id;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok") && o->via.array.ptr[1].via.array.size >= 1);
    id = (long long)obj_u64(obj_get(&o->via.array.ptr[1].via.array.ptr[0], "id"));
    proto_reader_deinit(&r);
    close(fd);
    return id;
}

/*
 * Polls status until the sink's state is want, its backlog `backlog` and its sessions not
 * wholly sent `sessions` (-1: any), with or without an error, up to 30 s.
 */
static void wait_sink(const char *want, long long backlog, bool with_error, long long sessions)
{
    struct proto_reader r;
    const msgpack_object *st;
    bool ok = false;
    int fd;

    for (int i = 0; i < 600 && !ok; i++) {
        if (i > 0)
            usleep(50000);
        st = status(&r, &fd);
        ok = obj_str_eq(obj_get(st, "clickhouse"), want) &&
             (backlog < 0 || obj_u64(obj_get(st, "clickhouse_backlog")) == (uint64_t)backlog) &&
             (obj_get(st, "clickhouse_last_error")->type == MSGPACK_OBJECT_STR) == with_error &&
             (obj_get(st, "clickhouse_last_error_ns")->type == MSGPACK_OBJECT_POSITIVE_INTEGER) ==
                 with_error &&
             (sessions < 0 || obj_u64(obj_get(st, "clickhouse_sessions")) == (uint64_t)sessions);
        proto_reader_deinit(&r);
        close(fd);
    }
    phase("status seen");
    cr_assert(ok, "the sink's status never became %s with backlog %lld", want, backlog);
}

Test(clickhouse, every_entry_once_through_outages_and_crashes)
{
    unsigned long long total = 0;
    long long id;
    char sql[256];

    if (access(CH_SERVER, X_OK) != 0)
        cr_skip_test("clickhouse-server is not installed (apt-get install clickhouse-server)");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    setenv("TRACECTLD_SINK_BATCH", "500", 1); /* many batches: kills land mid-stream */
    ch_start();
    daemon_start(false);
    prods_start();

    /* 1. A live multi-rank session streams; every column of every entry arrives, once. */
    phase("1.");
    prods_phase(1);
    total += RANKS * CHUNK;
    id = session_id();
    check_exact(id, total);
    check_report(id);
    phase("report checked");
    wait_sink("idle", 0, false, 1); /* the session is live: not wholly sent */

    /* 2. ClickHouse down while the job goes on: retried, counted in the backlog, then sent. */
    phase("2.");
    ch_kill();
    prods_phase(1);
    total += RANKS * CHUNK;
    wait_sink("retrying", RANKS * CHUNK, true, 1);
    ch_start();
    check_exact(id, total);

    /* 3. ClickHouse killed with -9 while batches stream. */
    phase("3.");
    ch_kill();
    prods_phase(4);
    total += 4 * RANKS * CHUNK;
    ch_start();
    snprintf(sql, sizeof(sql), "SELECT count() FROM tracectl.entries WHERE session_id = %lld", id);
    for (int i = 0; i < 2000 && ch_u64(sql) <= total - 4 * RANKS * CHUNK; i++)
        usleep(5000);
    ch_kill();
    ch_start();
    check_exact(id, total);

    /* 4. The daemon killed between an INSERT and the commit of its position. */
    phase("4.");
    ch_kill();
    prods_phase(4);
    total += 4 * RANKS * CHUNK;
    prods_close(); /* the session ends; its last entries are still to be sent */
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0, "the daemon's exit (ASan: no leak)");
    setenv("TRACECTLD_SINK_KILL_AFTER", "3", 1);
    daemon_start(true);
    ch_start();
    cr_assert_eq(harness_daemon_stop(&d, 0), 128 + SIGKILL, "the sink did not kill the daemon");
    unsetenv("TRACECTLD_SINK_KILL_AFTER");

    /* 5. And killed with -9 mid-stream (from outside), then started again. */
    phase("5.");
    daemon_start(true);
    for (int i = 0; i < 2000 && ch_u64(sql) < total - 2 * RANKS * CHUNK; i++)
        usleep(5000);
    harness_daemon_stop(&d, SIGKILL);
    unsetenv("TRACECTLD_SINK_BATCH");
    daemon_start(true);
    check_exact(id, total);
    check_report(id);
    wait_sink("idle", 0, false, 0);
    check_exact(id, total); /* nothing more came after all was sent */
    snprintf(sql, sizeof(sql),
             "SELECT count() FROM tracectl.sessions FINAL WHERE session_id = %lld"
             " AND state = 'ended' AND entries = %llu AND processes = %d",
             id, total, RANKS);
    cr_assert_eq(ch_u64(sql), 1, "the session's final row");
    curl_global_cleanup();
}

/* ---- the documented queries (docs/clickhouse.md) ------------------------------ */

#define DOC_PATH TEST_DATA_DIR "/../../docs/clickhouse.md"

/* The query named `name` in docs/clickhouse.md, {host} and {session_id} filled in, as TSV. */
static char *doc_query(const char *name, long long id)
{
    char mark[128], *doc = NULL, *sql, *p, *q, *out;
    size_t len = 0, n = 0;
    FILE *f = fopen(DOC_PATH, "r");
    struct reply r = {calloc(1, 1), 0, 1};

    cr_assert(f != NULL, "%s: %s", DOC_PATH, strerror(errno));
    cr_assert(getdelim(&doc, &n, '\0', f) > 0);
    fclose(f);
    snprintf(mark, sizeof(mark), "-- query: %s\n", name);
    cr_assert((p = strstr(doc, mark)) != NULL, "docs/clickhouse.md has no query %s", name);
    cr_assert((q = strstr(p, "\n```")) != NULL);
    len = (size_t)(q - p);
    sql = p;
    sql[len] = '\0';
    for (p = sql; *p != '\0'; p++) {
        char num[32];

        if (strncmp(p, "{host}", 6) == 0) {
            reply_cb(HOST, 1, strlen(HOST), &r);
            p += 5;
        } else if (strncmp(p, "{session_id}", 12) == 0) {
            snprintf(num, sizeof(num), "%lld", id);
            reply_cb(num, 1, strlen(num), &r);
            p += 11;
        } else {
            reply_cb(p, 1, 1, &r);
        }
    }
    reply_cb(" FORMAT TabSeparated", 1, 20, &r);
    out = ch_query(r.data);
    free(r.data);
    free(doc);
    return out;
}

/* Splits one TSV line of text at *pos into at most max fields (in place); returns how many. */
static int tsv_line(char **pos, char **f, int max)
{
    char *p = *pos;
    int n = 0;

    if (*p == '\0')
        return 0;
    while (n < max) {
        f[n++] = p;
        p += strcspn(p, "\t\n");
        if (*p != '\t')
            break;
        *p++ = '\0';
    }
    if (*p == '\n')
        *p++ = '\0';
    *pos = p;
    return n;
}

static bool within_1pct(unsigned long long got, unsigned long long want)
{
    unsigned long long diff = got > want ? got - want : want - got;

    return diff * 100 <= want;
}

/* The report's ops table, calls, sums, min, max exact and percentiles within 1 %. */
static void check_doc_report_ops(long long id)
{
    static const char *const pct[3] = {"p50_ns", "p95_ns", "p99_ns"};
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *ops;
    char *tsv = doc_query("report_ops", id), *pos = tsv, *f[12];
    uint32_t i = 0;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    ops = obj_get(&o->via.array.ptr[1], "ops");
    for (; tsv_line(&pos, f, 12) == 12; i++) {
        const msgpack_object *row = &ops->via.array.ptr[i];

        cr_assert_lt(i, ops->via.array.size, "more ops in ClickHouse than in the report");
        cr_assert(obj_str_eq(obj_get(row, "op"), f[0]), "op %u: %s", i, f[0]);
        cr_assert(obj_str_eq(obj_get(row, "category"), f[1]), "%s: category", f[0]);
        cr_assert_eq(strtoull(f[2], NULL, 10), obj_u64(obj_get(row, "calls")), "%s", f[0]);
        cr_assert_eq(strtoull(f[3], NULL, 10), obj_u64(obj_get(row, "total_ns")), "%s", f[0]);
        cr_assert_eq(strtoull(f[4], NULL, 10), obj_u64(obj_get(row, "avg_ns")), "%s", f[0]);
        cr_assert_eq(strtoull(f[5], NULL, 10), obj_u64(obj_get(row, "min_ns")), "%s", f[0]);
        for (int k = 0; k < 3; k++)
            cr_assert(within_1pct(strtoull(f[6 + k], NULL, 10), obj_u64(obj_get(row, pct[k]))),
                      "%s: %s %s, the report %llu", f[0], pct[k], f[6 + k],
                      obj_u64(obj_get(row, pct[k])));
        cr_assert_eq(strtoull(f[9], NULL, 10), obj_u64(obj_get(row, "max_ns")), "%s", f[0]);
        cr_assert_eq(strtoull(f[10], NULL, 10), obj_u64(obj_get(row, "mem_bytes")), "%s", f[0]);
        cr_assert_eq(strtoull(f[11], NULL, 10), obj_u64(obj_get(row, "elements")), "%s", f[0]);
    }
    cr_assert_eq(i, ops->via.array.size, "%u ops in ClickHouse, %u in the report", i,
                 ops->via.array.size);
    proto_reader_deinit(&r);
    close(fd);
    free(tsv);
}

/* Who arrived last and what it caused, per rank: the report's `ranks` rows. */
static void check_doc_late_ranks(long long id)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *ranks;
    char *tsv = doc_query("late_ranks", id), *pos = tsv, *f[7];
    unsigned long long last = 0;
    int fd, n = 0;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    ranks = obj_get(&o->via.array.ptr[1], "ranks");
    cr_assert_eq(ranks->via.array.size, RANKS);
    for (; tsv_line(&pos, f, 7) == 7; n++) {
        const msgpack_object *row = NULL;

        for (uint32_t i = 0; i < ranks->via.array.size; i++)
            if (obj_u64(obj_get(&ranks->via.array.ptr[i], "rank")) == strtoull(f[1], NULL, 10))
                row = &ranks->via.array.ptr[i];
        cr_assert(row != NULL, "rank %s is not in the report", f[1]);
        cr_assert_eq(strtoull(f[2], NULL, 10), 1, "rank %s: sessions", f[1]);
        cr_assert_eq(strtoull(f[3], NULL, 10), obj_u64(obj_get(row, "collectives")), "rank %s",
                     f[1]);
        cr_assert_eq(strtoull(f[4], NULL, 10), obj_u64(obj_get(row, "arrived_last")), "rank %s",
                     f[1]);
        cr_assert_eq(strtoull(f[5], NULL, 10), obj_u64(obj_get(row, "caused_ns")), "rank %s", f[1]);
        cr_assert_eq(strtoull(f[6], NULL, 10), obj_u64(obj_get(row, "waited_ns")), "rank %s", f[1]);
        last += strtoull(f[4], NULL, 10);
    }
    cr_assert_eq(n, RANKS);
    cr_assert_gt(last, 0, "no rank ever arrived last: the check proves nothing");
    proto_reader_deinit(&r);
    close(fd);
    free(tsv);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* p99 per op and torch version, against the nearest rank of the file's durations. */
static void check_doc_p99(long long id)
{
    char *tsv = doc_query("p99_by_version", id), *pos = tsv, *f[4], path[PATH_MAX + 32];
    sqlite3 *db;
    int n = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    for (; tsv_line(&pos, f, 4) == 4; n++) {
        static uint64_t durs[100000];
        sqlite3_stmt *st;
        size_t k = 0;

        cr_assert_eq(sqlite3_prepare_v2(db,
                                        "SELECT e.dur_ns FROM entries e CROSS JOIN processes p"
                                        " ON p.id = e.process_id CROSS JOIN ops o ON o.id = e.op_id"
                                        " JOIN meta m ON m.process_id = p.id AND m.key = 'torch'"
                                        " WHERE m.value = ?1 AND o.name = ?2",
                                        -1, &st, NULL),
                     SQLITE_OK, "%s", sqlite3_errmsg(db));
        sqlite3_bind_text(st, 1, f[0], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, f[1], -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW && k < 100000)
            durs[k++] = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        qsort(durs, k, sizeof(durs[0]), cmp_u64);
        cr_assert_eq(strtoull(f[2], NULL, 10), k, "%s %s: calls", f[0], f[1]);
        cr_assert(within_1pct(strtoull(f[3], NULL, 10), durs[(k * 99 + 99) / 100 - 1]),
                  "%s %s: p99 %s, nearest rank %llu", f[0], f[1], f[3],
                  (unsigned long long)durs[(k * 99 + 99) / 100 - 1]);
    }
    cr_assert_eq(n, 2 * 3, "two versions of three ops");
    sqlite3_close(db);
    free(tsv);
}

/*
 * Time per op per day with the week-over-week change: the session's rows,
 * copied a week earlier (as another session) with twice the durations, must
 * give -0.5 on the session's days, and nothing a week before those.
 */
static void check_doc_per_day(long long id)
{
    char sql[1024], *tsv, *pos, *f[5];
    unsigned long long calls = 0, total = 0, want_total;
    int today = 0, before = 0;

    snprintf(sql, sizeof(sql),
             "INSERT INTO tracectl.entries SELECT host, session_id + 1000000, session, rank,"
             " process_id, step, op, category, device, start_ns - 7 * 86400000000000,"
             " dur_ns * 2, elements, mem_bytes, stream, peer, tag, comm, seq, comm_size, batch"
             " FROM tracectl.entries WHERE host = '" HOST "' AND session_id = %lld",
             id);
    free(ch_query(sql));
    snprintf(sql, sizeof(sql),
             "SELECT sum(dur_ns) FROM tracectl.entries WHERE host = '" HOST
             "' AND session_id = %lld",
             id);
    want_total = ch_u64(sql);
    tsv = doc_query("per_op_per_day", id);
    for (pos = tsv; tsv_line(&pos, f, 5) == 5;) {
        if (strcmp(f[4], "\\N") == 0) { /* a week before: nothing to compare with */
            before++;
            continue;
        }
        cr_assert_str_eq(f[4], "-0.5", "%s %s: week over week %s", f[0], f[1], f[4]);
        calls += strtoull(f[2], NULL, 10);
        total += strtoull(f[3], NULL, 10);
        today++;
    }
    cr_assert_eq(today, before, "as many (day, op) rows as a week before");
    cr_assert_geq(today, 3);
    cr_assert_eq(calls, RANKS * 2 * CHUNK);
    cr_assert_eq(total, want_total);
    free(tsv);
}

Test(clickhouse, the_documented_queries_give_the_reports_figures)
{
    long long id;

    if (access(CH_SERVER, X_OK) != 0)
        cr_skip_test("clickhouse-server is not installed (apt-get install clickhouse-server)");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ch_start();
    daemon_start(false);
    prods_start();
    prods_phase(2);
    prods_close();
    id = session_id();
    raw_wait_state(d.sock, id, "ended", 30);
    wait_rows(id, RANKS * 2 * CHUNK);
    wait_sink("idle", 0, false, 0);
    check_doc_report_ops(id);
    check_doc_late_ranks(id);
    check_doc_p99(id);
    check_doc_per_day(id);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0, "the daemon's exit (ASan: no leak)");
    curl_global_cleanup();
}

/*
 * Credentials never in the URL, the auth file only its owner's, the other
 * flags only with --clickhouse: the daemon refuses to start (no server needed).
 */
Test(clickhouse, a_bad_configuration_is_refused_at_start)
{
    char dir[] = "/tmp/tc-chbad-XXXXXX", sock[64], data[64], auth[64];
    char *rm[] = {"rm", "-rf", dir, NULL};
    struct {
        const char *url, *auth_mode, *flag;
        int exit;
    } cases[] = {
        {"http://tracectl:pw@127.0.0.1:1/", NULL, NULL, 1}, /* a password in the URL */
        {"ftp://127.0.0.1:1/", NULL, NULL, 1},              /* not HTTP */
        {"http://127.0.0.1:1/", "0644", NULL, 1},           /* others may read the password */
        {"http://127.0.0.1:1/", "0600", "nosuchfile", 1},   /* no such auth file */
        {NULL, "0600", NULL, 2},                            /* --clickhouse-auth alone */
    };

    cr_assert(mkdtemp(dir) != NULL);
    snprintf(sock, sizeof(sock), "%s/s.sock", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(auth, sizeof(auth), "%s/auth", dir);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[12] = {TRACECTLD_BIN, "--socket", sock, "--data-dir", data};
        int n = 5, rc;

        if (cases[i].auth_mode != NULL)
            write_file(auth, "tracectl:pw\n", (mode_t)strtol(cases[i].auth_mode, NULL, 8));
        if (cases[i].url != NULL) {
            argv[n++] = "--clickhouse";
            argv[n++] = (char *)cases[i].url;
        }
        if (cases[i].auth_mode != NULL) {
            argv[n++] = "--clickhouse-auth";
            argv[n++] = cases[i].flag != NULL ? (char *)cases[i].flag : auth;
        }
        argv[n] = NULL;
        rc = harness_run(NULL, argv);
        cr_assert_eq(rc, cases[i].exit, "case %zu: exit %d, want %d", i, rc, cases[i].exit);
    }
    harness_run(NULL, rm);
}

/* ---- retention -------------------------------------------------------------------- */

static char clock_file[64];

/* Steps the daemon's wall clock (debug builds: $TRACECTLD_TEST_CLOCK) to offset seconds. */
static void set_clock(long long offset)
{
    char text[32];

    snprintf(text, sizeof(text), "%lld\n", offset);
    write_file(clock_file, text, 0600);
}

static bool listed(long long id)
{
    struct proto_reader r;
    const msgpack_object *o, *list;
    bool found = false;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    list = &o->via.array.ptr[1];
    for (uint32_t k = 0; k < list->via.array.size; k++)
        found = found || (long long)obj_u64(obj_get(&list->via.array.ptr[k], "id")) == id;
    proto_reader_deinit(&r);
    close(fd);
    return found;
}

/* The daemon's uptime in ms. */
static unsigned long long uptime_ms(void)
{
    struct proto_reader r;
    int fd;
    unsigned long long v = obj_u64(obj_get(status(&r, &fd), "uptime_ns")) / 1000000;

    proto_reader_deinit(&r);
    close(fd);
    return v;
}

/*
 * --retain-days keeps an ended session past its age while the sink has not
 * sent it (ClickHouse down), and deletes it once it is in ClickHouse. The
 * first retention pass runs 1 s after start: each check restarts the daemon.
 */
Test(clickhouse, retention_keeps_a_session_until_it_is_sent)
{
    long long old, recent;
    int fd;

    if (access(CH_SERVER, X_OK) != 0)
        cr_skip_test("clickhouse-server is not installed (apt-get install clickhouse-server)");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(clock_file, sizeof(clock_file), "/tmp/tcclock.XXXXXX");
    cr_assert((fd = mkstemp(clock_file)) >= 0);
    close(fd);
    set_clock(0);
    setenv("TRACECTLD_TEST_CLOCK", clock_file, 1);
    ch_start();
    ch_kill(); /* its ports are known; it is down */
    daemon_start_with(false, "--retain-days", "1");
    old = raw_one_session(d.sock, "old");
    set_clock(3 * 86400); /* three days later: a newer session; `old` is past its age */
    recent = raw_one_session(d.sock, "recent");
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    daemon_start_with(true, "--retain-days", "1");
    while (uptime_ms() < 3000)
        usleep(100000);
    cr_assert(listed(old), "session %lld was deleted before it was sent", old);
    ch_start();
    wait_rows(old, 1);
    wait_rows(recent, 1);
    wait_sink("idle", 0, true, 0); /* the last error (the outage) stays shown */
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    daemon_start_with(true, "--retain-days", "1");
    for (int i = 0; listed(old); i++) {
        cr_assert_lt(i, 100, "session %lld, sent, was kept past its age", old);
        usleep(100000);
    }
    cr_assert(listed(recent));
    unsetenv("TRACECTLD_TEST_CLOCK");
    unlink(clock_file);
    curl_global_cleanup();
}
