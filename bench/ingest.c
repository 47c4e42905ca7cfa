/*
 * ingest.c — tc_bench_ingest: the ingest benchmark of issue 3, its SQLite
 * ceiling, and the backpressure check.
 *
 *   tc_bench_ingest [--producers P] [--entries N] [--runs K] [--dir DIR]
 *   tc_bench_ingest --backpressure [--producers P] [--rate R] [--seconds S]
 *                   [--stop-at A] [--stop-for B] [--runs K]
 *   tc_bench_ingest --attach SOCKET --session NAME [--producers P] [--entries N]
 *                   [--seconds S]
 *
 * Default mode, per run: starts the built tracectld on a temporary socket and
 * data dir, forks P producer processes that each record N synthetic entries
 * (bench_util.h) through libtracectl in blocking mode with tc_record(), then
 * tc_flush() and tc_close(). Every producer notes in shared memory when it
 * began its hello and when its flush was acked; the parent polls `status`
 * over the raw protocol every 100 ms for the committed count (`entries`).
 * It reports: entries/s from the first hello to the last ack; loss = sent −
 * stored (stored = the report's session.entries, also checked by a
 * count(*) of the file); the daemon's peak RSS (VmHWM just before SIGTERM);
 * bytes on disk per entry (the session file plus its WAL after the daemon
 * stopped); the committed rate over the first and the last 10 % of the
 * entries (times interpolated between status samples: first = 10 % of the
 * entries ÷ (time the count reached 10 % − first hello), last = 10 % ÷
 * (last ack − time the count reached 90 %)). Then the ceiling: the same rows
 * (same generator, same shape blobs) inserted by this one thread with a
 * prepared INSERT in 10k-row transactions, WAL, synchronous=NORMAL, into a
 * fresh file made from the daemon's own schema/session.sql; ratio = ingest ÷
 * ceiling. A second ceiling ("blob") writes one self-contained row per entry
 * with its shapes inline, the layout issue 3's reference figures are for.
 * --sites S: the program runs S distinct call sites per step (default 256).
 * --storage-format F: the daemon's (rows or blocks, issue 17). Then a query
 * on the session file: a time range selecting about 1 % of the entries, with
 * the range pushed down to the storage, against the same selection read in
 * full (query_times()).
 *
 * --backpressure: P producers in the default (dropping) mode record R
 * entries/s each for S seconds, timing every call; the daemon is SIGSTOPped
 * at A s for B s, then SIGCONTed. Reports the longest record call (wall time,
 * and the CPU time of the longest in CPU time: a call preempted by the
 * scheduler is long in wall time only), the calls
 * over 1 ms and the voluntary context switches inside record calls (0 means
 * no call ever waited), each producer's RSS growth from before tc_open against the client's
 * buffer bound, and whether Σ tc_dropped() equals the session's `dropped` in
 * `sessions` and in `report`, and stored = recorded − dropped.
 *
 * --attach: producers only, against a running daemon (used by report.sh to
 * build sessions and to keep one ingesting); stops early on SIGINT/SIGTERM
 * or after --seconds.
 *
 * Output: one JSON object per line on stdout, a human summary on stderr.
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench_util.h"
#include "vtab.h"

/* The daemon's session schema (schema/session.sql), embedded in tracectld_core. */
extern const char schema_session_sql[];

#define TXN_ROWS      10000
#define POLL_MS       100
#define MAX_PRODUCERS 256

struct opts {
    int producers;
    uint64_t entries;
    int runs;
    const char *dir;
    bool backpressure;
    double rate, seconds, stop_at, stop_for;
    const char *attach, *session;
    const struct bprogram *prog; /* what every producer records */
    const char *format;          /* tracectld --storage-format; NULL: its default */
    uint32_t sites;              /* how many of its call sites a step runs (BENCH_SITES) */
};

/* What one producer reports back, in memory shared with the parent. */
struct pstat {
    uint64_t t_hello, t_ack; /* CLOCK_MONOTONIC ns: hello sent, flush acked */
    uint64_t recorded, dropped;
    int rc; /* 0, or where it failed (negative errno) */
    /* --backpressure */
    uint64_t max_call_ns, max_call_cpu_ns, calls, calls_over_1ms;
    uint64_t vcsw_in_calls, ivcsw_in_calls, minflt_in_calls;
    long rss_open_kib, rss_peak_kib;
};

struct shared {
    volatile sig_atomic_t stop;
    struct pstat p[MAX_PRODUCERS];
};

static struct shared *g_shared; /* for the signal handler only */

static void on_stop_signal(int sig)
{
    if (g_shared != NULL)
        g_shared->stop = 1;
}

/* ---- producers ---------------------------------------------------------------- */

static tc_client *producer_open(const struct opts *o, const char *sock, const char *session, int i,
                                uint32_t *ids, struct pstat *ps)
{
    char dev[16];
    tc_options to;
    tc_client *c;
    int err = 0;

    snprintf(dev, sizeof(dev), "gpu:%d", i % 8);
    tc_options_init(&to);
    to.socket_path = sock;
    to.session = session;
    to.rank = i;
    to.world = o->producers;
    to.device = dev;
    to.blocking = o->backpressure ? 0 : 1;
    ps->t_hello = bench_now_ns();
    c = tc_open(&to, &err);
    if (c == NULL || !tc_enabled(c)) {
        ps->rc = err ? err : -ENOTCONN;
        tc_close(c);
        return NULL;
    }
    for (uint32_t k = 0; k < BENCH_OPS; k++)
        ids[k] = tc_op(c, bench_op_names[k]);
    return c;
}

static void producer_close(tc_client *c, struct pstat *ps)
{
    int rc = tc_flush(c, -1);

    ps->t_ack = bench_now_ns();
    ps->recorded = tc_recorded(c);
    ps->dropped = tc_dropped(c);
    if (tc_close(c) < 0 && rc == 0)
        rc = -EIO;
    ps->rc = rc;
}

/* Blocking mode, as fast as the pipeline takes them. */
static void producer_run(const struct opts *o, const char *sock, const char *session, int i,
                         struct shared *sh)
{
    struct pstat *ps = &sh->p[i];
    uint32_t ids[BENCH_OPS];
    uint64_t start = 1000000000ull * (uint64_t)(i + 1), dur;
    struct bgen g;
    tc_client *c = producer_open(o, sock, session, i, ids, ps);

    if (c == NULL)
        _exit(1);
    bgen_init(&g, (uint64_t)i + 1);
    for (uint64_t n = 0; n < o->entries; n++) {
        if ((n & 1023) == 0 && sh->stop)
            break;
        const struct bsite *s = bgen_entry(&g, o->prog, n % o->sites, &dur);
        tc_record(c, ids[s->op], start, dur, s->mem_bytes, &s->out, s->in, s->n_in, NULL);
        start += dur + 500;
        if ((n + 1) % o->sites == 0)
            tc_step(c);
    }
    producer_close(c, ps);
    _exit(ps->rc == 0 ? 0 : 1);
}

/* Default (dropping) mode at a fixed rate, every call timed. */
static void producer_paced(const struct opts *o, const char *sock, const char *session, int i,
                           struct shared *sh)
{
    struct pstat *ps = &sh->p[i];
    uint32_t ids[BENCH_OPS];
    uint64_t per_ms = (uint64_t)(o->rate / 1000.0), t0, start = 1000000000ull;
    uint64_t slots = (uint64_t)(o->seconds * 1000.0), n = 0, dur;
    struct bgen g;
    long rss0 = bench_proc_kib(getpid(), "VmRSS"); /* before tc_open: its ring counts */
    tc_client *c = producer_open(o, sock, session, i, ids, ps);

    if (c == NULL)
        _exit(1);
    ps->rss_open_kib = rss0;
    bgen_init(&g, (uint64_t)i + 1);
    t0 = bench_now_ns();
    for (uint64_t slot = 0; slot < slots; slot++) {
        struct rusage ru0, ru1;
        uint64_t due = t0 + (slot + 1) * 1000000ull;
        struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};

        getrusage(RUSAGE_THREAD, &ru0);
        for (uint64_t k = 0; k < per_ms; k++) {
            const struct bsite *s = bgen_entry(&g, o->prog, n++ % o->sites, &dur);
            uint64_t a = bench_now_ns(), ac = bench_thread_ns();
            tc_record(c, ids[s->op], start, dur, s->mem_bytes, &s->out, s->in, s->n_in, NULL);
            uint64_t dc = bench_thread_ns() - ac, d = bench_now_ns() - a;
            start += dur + 500;
            if (n % o->sites == 0)
                tc_step(c);
            ps->calls++;
            if (d > ps->max_call_ns)
                ps->max_call_ns = d;
            if (dc > ps->max_call_cpu_ns)
                ps->max_call_cpu_ns = dc;
            if (d > 1000000)
                ps->calls_over_1ms++;
        }
        getrusage(RUSAGE_THREAD, &ru1);
        ps->vcsw_in_calls += (uint64_t)(ru1.ru_nvcsw - ru0.ru_nvcsw);
        ps->ivcsw_in_calls += (uint64_t)(ru1.ru_nivcsw - ru0.ru_nivcsw);
        ps->minflt_in_calls += (uint64_t)(ru1.ru_minflt - ru0.ru_minflt);
        if ((slot % 50) == 0) {
            long rss = bench_proc_kib(getpid(), "VmRSS");
            if (rss > ps->rss_peak_kib)
                ps->rss_peak_kib = rss;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    long hwm = bench_proc_kib(getpid(), "VmHWM");
    if (hwm > ps->rss_peak_kib)
        ps->rss_peak_kib = hwm;
    producer_close(c, ps);
    _exit(ps->rc == 0 ? 0 : 1);
}

/* Forks the producers; returns how many started (their pids in pids). */
static int spawn_producers(const struct opts *o, const char *sock, const char *session,
                           struct shared *sh, pid_t *pids)
{
    int n = 0;

    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < o->producers; i++) {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            if (o->backpressure)
                producer_paced(o, sock, session, i, sh);
            producer_run(o, sock, session, i, sh);
        }
        pids[n++] = pid;
    }
    return n;
}

/* Reaps what exited; returns how many are still running. Failures are counted in *failed. */
static int reap(pid_t *pids, int n, int *failed, bool block)
{
    int running = 0, st;

    for (int i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        pid_t r = waitpid(pids[i], &st, block ? 0 : WNOHANG);
        if (r == pids[i]) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                (*failed)++;
            pids[i] = 0;
        } else {
            running++;
        }
    }
    return running;
}

/* ---- the committed count over time -------------------------------------------- */

struct sample {
    uint64_t t, entries;
};

struct samples {
    struct sample *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, uint64_t t, uint64_t entries)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        struct sample *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (struct sample){t, entries};
}

/* When the committed count reached x, interpolated between samples; 0 when it never did. */
static uint64_t samples_time_at(const struct samples *s, uint64_t t_first, double x)
{
    struct sample prev = {t_first, 0};

    for (size_t i = 0; i < s->n; i++) {
        struct sample cur = s->v[i];
        if ((double)cur.entries >= x) {
            if (cur.entries == prev.entries)
                return cur.t;
            double f = (x - (double)prev.entries) / (double)(cur.entries - prev.entries);
            return prev.t + (uint64_t)(f * (double)(cur.t - prev.t));
        }
        if (cur.t >= t_first)
            prev = cur;
    }
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- session figures over the raw protocol --------------------------------------- */

struct sess {
    int64_t id;
    bool ended;
    uint64_t entries, dropped;               /* `sessions` row */
    uint64_t report_entries, report_dropped; /* `report` session header */
};

/* Waits up to 60 s for the session to end, then reads its row and its report. 0 or -errno. */
static int session_figures(struct bctl *ctl, const char *name, struct sess *out)
{
    struct proto_request req;
    const msgpack_object *o, *row = NULL, *hdr;

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 600; i++) {
        if ((o = bctl_request(ctl, PROTO_SESSIONS, NULL)) == NULL)
            return -EIO;
        row = bobj_session_row(o, name);
        if (row != NULL && bobj_str_eq(bobj_get(row, "state"), "ended"))
            break;
        sleep_ms(100);
    }
    if (row == NULL)
        return -ENOENT;
    out->id = (int64_t)bobj_u64(bobj_get(row, "id"));
    out->ended = bobj_str_eq(bobj_get(row, "state"), "ended");
    out->entries = bobj_u64(bobj_get(row, "entries"));
    out->dropped = bobj_u64(bobj_get(row, "dropped"));
    proto_request_init(&req);
    req.session.id = out->id;
    if ((o = bctl_request(ctl, PROTO_REPORT, &req)) == NULL ||
        (hdr = bobj_get(o, "session")) == NULL)
        return -EIO;
    out->report_entries = bobj_u64(bobj_get(hdr, "entries"));
    out->report_dropped = bobj_u64(bobj_get(hdr, "dropped"));
    return 0;
}

/* count(*) of the entries table of a session file, straight from SQLite; -1 on error. */
static int64_t file_count(const struct bdaemon *d, int64_t id)
{
    char path[PATH_MAX + 64];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t n = -1;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d->data, (long long)id);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        vtab_register(db) == SQLITE_OK && /* entries of a blocks file */
        sqlite3_prepare_v2(db, "SELECT count(*) FROM entries", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

struct result {
    double rate, first10, last10, ceiling, ratio, bytes_per_entry, ceiling_bytes_per_entry;
    double ceiling_blob, ceiling_blob_bytes_per_entry;
    double rss_mib, daemon_cpu_s, wall_s;
    uint64_t sent, stored, counted, loss;
    double query_full_s, query_range_s, query_fraction; /* query_times() */
};

/* Runs sql (binding a and b to ?1, ?2) runs times: the fastest time in s, and its first column. */
static double time_query(sqlite3 *db, const char *sql, int64_t a, int64_t b, int64_t *first,
                         int runs)
{
    double best = -1;
    sqlite3_stmt *st;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    for (int k = 0; k < runs; k++) {
        uint64_t t0 = bench_now_ns();
        double s;
        sqlite3_bind_int64(st, 1, a);
        sqlite3_bind_int64(st, 2, b);
        if (sqlite3_step(st) != SQLITE_ROW)
            break;
        *first = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        s = (double)(bench_now_ns() - t0) / 1e9;
        best = best < 0 || s < best ? s : best;
    }
    sqlite3_finalize(st);
    return best;
}

/*
 * A time-range query selecting about 1 % of a session's entries (between the
 * 50th and 51st percentiles of start_ns, taken from every 997th entry), with
 * the range pushed down to the storage and, for comparison, the same
 * selection with the push-down defeated (start_ns + 0), which reads every
 * entry. The row format reads every entry both ways (start_ns has no index).
 */
static void query_times(const struct bdaemon *d, int64_t id, struct result *r)
{
    char path[PATH_MAX + 64];
    sqlite3 *db = NULL;
    int64_t n = r->counted, a = 0, b = 0, got = 0, m = 0;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d->data, (long long)id);
    if (n < 100000 || sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        vtab_register(db) != SQLITE_OK)
        goto out;
    time_query(db, "SELECT count(*) FROM entries WHERE rowid % 997 = 0", 0, 0, &m, 1);
    time_query(db,
               "SELECT start_ns FROM entries WHERE rowid % 997 = 0 ORDER BY start_ns"
               " LIMIT 1 OFFSET ?1",
               m / 2, 0, &a, 1);
    time_query(db,
               "SELECT start_ns FROM entries WHERE rowid % 997 = 0 ORDER BY start_ns"
               " LIMIT 1 OFFSET ?1",
               m / 2 + m / 100, 0, &b, 1);
    r->query_range_s =
        time_query(db, "SELECT count(*), sum(dur_ns) FROM entries WHERE start_ns BETWEEN ?1 AND ?2",
                   a, b, &got, 3);
    r->query_fraction = (double)got / (double)n;
    r->query_full_s = time_query(
        db, "SELECT count(*), sum(dur_ns) FROM entries WHERE start_ns + 0 BETWEEN ?1 AND ?2", a, b,
        &got, 3);
out:
    sqlite3_close(db);
}

/* ---- the ceiling: the same rows straight into SQLite --------------------------------- */

/*
 * The ceiling writes the `entries` table exactly as the daemon's embedded
 * schema defines it, whatever its columns are: each is bound by name. When
 * the schema keeps shapes in their own table (entries.shape_id), the ceiling
 * fills it once with the program's sites, as any writer storing these rows
 * would; elements are then left NULL (implied by the shape) as the daemon
 * does. A second, "blob" ceiling writes one self-contained row per entry
 * with both shapes inline (the layout issue 3's reference figures are for).
 */
enum col {
    C_PROCESS,
    C_STEP,
    C_OP,
    C_DEVICE,
    C_START,
    C_DUR,
    C_ELEMENTS,
    C_MEM,
    C_OUT,
    C_IN,
    C_SHAPE,
    C_N
};

static const char *const col_names[C_N] = {"process_id", "step",      "op_id",    "device_id",
                                           "start_ns",   "dur_ns",    "elements", "mem_bytes",
                                           "out_shape",  "in_shapes", "shape_id"};

static const char blob_schema[] =
    "CREATE TABLE entries (process_id INTEGER NOT NULL, step INTEGER NOT NULL,"
    " op_id INTEGER NOT NULL, device_id INTEGER, start_ns INTEGER NOT NULL,"
    " dur_ns INTEGER NOT NULL, elements INTEGER NOT NULL, mem_bytes INTEGER NOT NULL,"
    " out_shape BLOB, in_shapes BLOB);";

struct ceil {
    sqlite3 *db;
    sqlite3_stmt *ins;
    int idx[C_N]; /* bind index of each known column, 0 when the table has none */
    /* the sites' shapes packed once: canonical msgpack, as the wire carries them */
    char out[BENCH_SITES][128], in[BENCH_SITES][512];
    int out_len[BENCH_SITES], in_len[BENCH_SITES];
};

static int sql_ok(sqlite3 *db, int rc, const char *what)
{
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    fprintf(stderr, "ceiling: %s: %s\n", what, sqlite3_errmsg(db));
    return -EIO;
}

static void ceil_pack_sites(struct ceil *c, const struct bprogram *prog)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t k = 0; k < BENCH_SITES; k++) {
        const struct bsite *s = &prog->site[k];
        msgpack_sbuffer_clear(&sb);
        proto_pack_shape(&pk, s->out.dims, s->out.ndim);
        memcpy(c->out[k], sb.data, sb.size);
        c->out_len[k] = (int)sb.size;
        msgpack_sbuffer_clear(&sb);
        if (s->n_in > 0) {
            msgpack_pack_array(&pk, s->n_in);
            for (size_t i = 0; i < s->n_in; i++)
                proto_pack_shape(&pk, s->in[i].dims, s->in[i].ndim);
        }
        memcpy(c->in[k], sb.data, sb.size);
        c->in_len[k] = (int)sb.size;
    }
    msgpack_sbuffer_destroy(&sb);
}

/* Prepares INSERT INTO entries with every column the table has, bound by name. */
static int ceil_prepare(struct ceil *c)
{
    char sql[1024] = "INSERT INTO entries(", *p;
    sqlite3_stmt *info = NULL;
    int n = 0, rc;

    memset(c->idx, 0, sizeof(c->idx));
    rc = sql_ok(c->db, sqlite3_prepare_v2(c->db, "PRAGMA table_info(entries)", -1, &info, NULL),
                "table_info");
    while (rc == 0 && sqlite3_step(info) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(info, 1);
        int k = 0;
        while (k < C_N && strcmp(col_names[k], name) != 0)
            k++;
        if (k == C_N) {
            fprintf(stderr, "ceiling: entries has a column this benchmark does not know: %s\n",
                    name);
            rc = -EINVAL;
            break;
        }
        c->idx[k] = ++n;
        snprintf(sql + strlen(sql), sizeof(sql) - strlen(sql), "%s%s", n > 1 ? "," : "", name);
    }
    sqlite3_finalize(info);
    if (rc < 0)
        return rc;
    p = sql + strlen(sql);
    p += snprintf(p, sizeof(sql) - (size_t)(p - sql), ") VALUES (");
    for (int i = 0; i < n; i++)
        p += snprintf(p, sizeof(sql) - (size_t)(p - sql), "%s?", i ? "," : "");
    snprintf(p, sizeof(sql) - (size_t)(p - sql), ")");
    return sql_ok(c->db,
                  sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->ins, NULL),
                  "prepare");
}

/* The schema keeps shapes apart: store each site's shapes once, id = site + 1. */
static int ceil_shapes(struct ceil *c, const struct bprogram *prog)
{
    sqlite3_stmt *st = NULL;
    int rc =
        sql_ok(c->db,
               sqlite3_prepare_v2(
                   c->db, "INSERT INTO shapes(id, out_shape, in_shapes, elements) VALUES (?,?,?,?)",
                   -1, &st, NULL),
               "prepare shapes");

    for (int k = 0; rc == 0 && k < BENCH_SITES; k++) {
        sqlite3_bind_int(st, 1, k + 1);
        sqlite3_bind_blob(st, 2, c->out[k], c->out_len[k], SQLITE_STATIC);
        if (c->in_len[k] > 0)
            sqlite3_bind_blob(st, 3, c->in[k], c->in_len[k], SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 3);
        sqlite3_bind_int64(st, 4, (int64_t)prog->site[k].elements);
        rc = sql_ok(c->db, sqlite3_step(st), "insert shape");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc;
}

static void ceil_bind(struct ceil *c, int col, int64_t v)
{
    if (c->idx[col])
        sqlite3_bind_int64(c->ins, c->idx[col], v);
}

static int ceil_row(struct ceil *c, const struct bsite *s, int k, int p, uint64_t step,
                    uint64_t start, uint64_t dur)
{
    int rc;

    ceil_bind(c, C_PROCESS, p + 1);
    ceil_bind(c, C_STEP, (int64_t)step);
    ceil_bind(c, C_OP, s->op + 1);
    ceil_bind(c, C_DEVICE, p % 8 + 1);
    ceil_bind(c, C_START, (int64_t)start);
    ceil_bind(c, C_DUR, (int64_t)dur);
    ceil_bind(c, C_MEM, (int64_t)s->mem_bytes);
    if (c->idx[C_SHAPE]) {
        ceil_bind(c, C_SHAPE, k + 1); /* elements: NULL, implied by the shape */
    } else {
        ceil_bind(c, C_ELEMENTS, (int64_t)s->elements);
        if (c->idx[C_OUT])
            sqlite3_bind_blob(c->ins, c->idx[C_OUT], c->out[k], c->out_len[k], SQLITE_STATIC);
        if (c->idx[C_IN] && c->in_len[k] > 0)
            sqlite3_bind_blob(c->ins, c->idx[C_IN], c->in[k], c->in_len[k], SQLITE_STATIC);
    }
    rc = sqlite3_step(c->ins);
    sqlite3_reset(c->ins);
    sqlite3_clear_bindings(c->ins);
    return sql_ok(c->db, rc, "insert");
}

/* Inserts every producer's rows in TXN_ROWS-row transactions. */
static int ceil_insert(struct ceil *c, const struct opts *o, uint64_t *rows)
{
    int rc = 0;

    for (int p = 0; rc == 0 && p < o->producers; p++) {
        uint64_t start = 1000000000ull * (uint64_t)(p + 1), dur;
        struct bgen g;

        bgen_init(&g, (uint64_t)p + 1);
        for (uint64_t n = 0; rc == 0 && n < o->entries; n++) {
            uint32_t k = (uint32_t)(n % o->sites);
            const struct bsite *s = bgen_entry(&g, o->prog, k, &dur);
            if (*rows % TXN_ROWS == 0)
                rc = sql_ok(c->db, sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL), "begin");
            if (rc == 0)
                rc = ceil_row(c, s, (int)k, p, n / o->sites, start, dur);
            start += dur + 500;
            if (++*rows % TXN_ROWS == 0 && rc == 0)
                rc = sql_ok(c->db, sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL), "commit");
        }
    }
    if (rc == 0 && *rows % TXN_ROWS != 0)
        rc = sql_ok(c->db, sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL), "commit");
    return rc;
}

static uint64_t file_bytes(const char *path)
{
    char wal[PATH_MAX + 8];
    struct stat st;
    uint64_t n = 0;

    snprintf(wal, sizeof(wal), "%s-wal", path);
    if (stat(path, &st) == 0)
        n += (uint64_t)st.st_size;
    if (stat(wal, &st) == 0)
        n += (uint64_t)st.st_size;
    return n;
}

/*
 * One ceiling into dir/<name>.db: blob false = the daemon's schema, true =
 * self-contained rows. *rate in rows/s (inserts and commits only); *bytes
 * the file plus its WAL after close.
 */
static int ceiling(const char *dir, const char *name, bool blob, const struct opts *o, double *rate,
                   uint64_t *bytes)
{
    char path[PATH_MAX];
    struct ceil *c = calloc(1, sizeof(*c));
    uint64_t rows = 0, t0, t1;
    int rc;

    if (c == NULL)
        return -ENOMEM;
    snprintf(path, sizeof(path), "%s/%s.db", dir, name);
    ceil_pack_sites(c, o->prog);
    rc = sql_ok(c->db,
                sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                "open");
    if (rc == 0)
        rc = sql_ok(c->db,
                    sqlite3_exec(c->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL,
                                 NULL, NULL),
                    "pragmas");
    if (rc == 0)
        rc = sql_ok(c->db,
                    sqlite3_exec(c->db, blob ? blob_schema : schema_session_sql, NULL, NULL, NULL),
                    "schema");
    if (rc == 0)
        rc = ceil_prepare(c);
    if (rc == 0 && c->idx[C_SHAPE])
        rc = ceil_shapes(c, o->prog);
    t0 = bench_now_ns();
    if (rc == 0)
        rc = ceil_insert(c, o, &rows);
    t1 = bench_now_ns();
    sqlite3_finalize(c->ins);
    sqlite3_close(c->db);
    free(c);
    *rate = rc == 0 ? (double)rows / ((double)(t1 - t0) / 1e9) : 0;
    *bytes = file_bytes(path);
    return rc;
}

/* ---- one ingest run --------------------------------------------------------------- */

static void poll_until_done(struct bctl *ctl, pid_t *pids, int n, int *failed, struct samples *smp)
{
    const msgpack_object *st;

    while (reap(pids, n, failed, false) > 0) {
        if ((st = bctl_request(ctl, PROTO_STATUS, NULL)) != NULL)
            samples_add(smp, bench_now_ns(), bobj_u64(bobj_get(st, "entries")));
        sleep_ms(POLL_MS);
    }
    if ((st = bctl_request(ctl, PROTO_STATUS, NULL)) != NULL)
        samples_add(smp, bench_now_ns(), bobj_u64(bobj_get(st, "entries")));
}

static void windows(const struct shared *sh, int n, const struct samples *smp, struct result *r)
{
    uint64_t t_first = UINT64_MAX, t_last = 0, total = r->stored;

    for (int i = 0; i < n; i++) {
        if (sh->p[i].t_hello < t_first)
            t_first = sh->p[i].t_hello;
        if (sh->p[i].t_ack > t_last)
            t_last = sh->p[i].t_ack;
    }
    r->wall_s = (double)(t_last - t_first) / 1e9;
    r->rate = (double)total / r->wall_s;
    uint64_t t10 = samples_time_at(smp, t_first, 0.1 * (double)total);
    uint64_t t90 = samples_time_at(smp, t_first, 0.9 * (double)total);
    r->first10 = t10 > t_first ? 0.1 * (double)total / ((double)(t10 - t_first) / 1e9) : 0;
    r->last10 = t90 && t_last > t90 ? 0.1 * (double)total / ((double)(t_last - t90) / 1e9) : 0;
}

static int run_ingest(const struct opts *o, struct shared *sh, struct result *r)
{
    struct samples smp = {0};
    struct bdaemon d;
    struct bctl ctl = {.fd = -1};
    struct sess s;
    pid_t pids[MAX_PRODUCERS];
    int n, failed = 0, rc;

    char *fmt_args[] = {"--storage-format", (char *)o->format, NULL};

    memset(r, 0, sizeof(*r));
    memset(sh, 0, sizeof(*sh));
    if ((rc = bdaemon_start_args(&d, o->dir, o->format ? fmt_args : NULL)) < 0) {
        fprintf(stderr, "ingest: cannot start %s: %s\n", TRACECTLD_BIN, strerror(-rc));
        return rc;
    }
    if ((rc = bctl_open(&ctl, d.sock)) < 0)
        goto out;
    n = spawn_producers(o, d.sock, "ingest", sh, pids);
    poll_until_done(&ctl, pids, n, &failed, &smp);
    if (failed > 0 || n < o->producers) {
        fprintf(stderr, "ingest: %d of %d producers failed\n", failed + o->producers - n,
                o->producers);
        rc = -EIO;
        goto out;
    }
    if ((rc = session_figures(&ctl, "ingest", &s)) < 0)
        goto out;
    for (int i = 0; i < n; i++)
        r->sent += sh->p[i].recorded - sh->p[i].dropped;
    r->stored = s.report_entries;
    r->loss = (uint64_t)o->producers * o->entries - r->stored;
    r->rss_mib = (double)bench_proc_kib(d.pid, "VmHWM") / 1024.0;
    r->daemon_cpu_s = bench_proc_cpu_s(d.pid);
    windows(sh, n, &smp, r);
    bctl_close(&ctl);
    if (bdaemon_stop(&d, SIGTERM) != 0)
        fprintf(stderr, "ingest: tracectld did not exit cleanly\n");
    r->bytes_per_entry = (double)bdaemon_session_bytes(&d, s.id) / (double)r->stored;
    r->counted = (uint64_t)file_count(&d, s.id);
    query_times(&d, s.id, r);
    uint64_t cbytes = 0, bbytes = 0, total = (uint64_t)o->producers * o->entries;
    if ((rc = ceiling(d.dir, "ceiling", false, o, &r->ceiling, &cbytes)) == 0 &&
        (rc = ceiling(d.dir, "ceiling_blob", true, o, &r->ceiling_blob, &bbytes)) == 0) {
        r->ratio = r->rate / r->ceiling;
        r->ceiling_bytes_per_entry = (double)cbytes / (double)total;
        r->ceiling_blob_bytes_per_entry = (double)bbytes / (double)total;
    }
out:
    bctl_close(&ctl);
    bdaemon_cleanup(&d);
    free(smp.v);
    return rc;
}

static void print_ingest(const struct opts *o, int run, const struct result *r)
{
    bjson_begin("ingest", "run");
    bjson_u64("run", (uint64_t)run);
    bjson_u64("producers", (uint64_t)o->producers);
    bjson_u64("entries_per_producer", o->entries);
    bjson_u64("entries", (uint64_t)o->producers * o->entries);
    bjson_str("format", o->format ? o->format : "default");
    bjson_num("wall_s", r->wall_s);
    bjson_num("entries_per_s", r->rate);
    bjson_num("first10_per_s", r->first10);
    bjson_num("last10_per_s", r->last10);
    bjson_num("last_over_first", r->last10 / r->first10);
    bjson_u64("sent", r->sent);
    bjson_u64("stored", r->stored);
    bjson_u64("stored_count_star", r->counted);
    bjson_u64("loss", r->loss);
    bjson_num("daemon_peak_rss_mib", r->rss_mib);
    bjson_num("daemon_cpu_s", r->daemon_cpu_s);
    bjson_num("bytes_per_entry", r->bytes_per_entry);
    bjson_num("ceiling_per_s", r->ceiling);
    bjson_num("ceiling_bytes_per_entry", r->ceiling_bytes_per_entry);
    bjson_num("ceiling_blob_per_s", r->ceiling_blob);
    bjson_num("ceiling_blob_bytes_per_entry", r->ceiling_blob_bytes_per_entry);
    bjson_num("ratio", r->ratio);
    bjson_num("ratio_blob", r->rate / r->ceiling_blob);
    bjson_num("query_range_fraction", r->query_fraction);
    bjson_num("query_range_s", r->query_range_s);
    bjson_num("query_full_s", r->query_full_s);
    bjson_num("query_speedup", r->query_full_s / r->query_range_s);
    bjson_end();
    fprintf(stderr,
            "ingest run %d: %d×%llu entries in %.2f s = %.0f/s (first 10%% %.0f/s, last 10%% "
            "%.0f/s), loss %llu, daemon RSS %.1f MiB, %.1f B/entry, ceiling %.0f/s, ratio %.2f;"
            " a %.2f %% time range in %.3f s, %.3f s read in full\n",
            run, o->producers, (unsigned long long)o->entries, r->wall_s, r->rate, r->first10,
            r->last10, (unsigned long long)r->loss, r->rss_mib, r->bytes_per_entry, r->ceiling,
            r->ratio, 100 * r->query_fraction, r->query_range_s, r->query_full_s);
}

static int main_ingest(const struct opts *o, struct shared *sh)
{
    struct result *res = calloc((size_t)o->runs, sizeof(*res));
    double v[6][64];
    int ok = 0;

    if (res == NULL)
        return 1;
    for (int k = 0; k < o->runs; k++) {
        if (run_ingest(o, sh, &res[k]) < 0)
            continue;
        print_ingest(o, k + 1, &res[k]);
        if (ok < 64) {
            v[0][ok] = res[k].rate;
            v[1][ok] = res[k].ratio;
            v[2][ok] = res[k].last10 / res[k].first10;
            v[3][ok] = res[k].rss_mib;
            v[4][ok] = res[k].bytes_per_entry;
            v[5][ok] = res[k].ceiling;
            ok++;
        }
    }
    if (ok > 0) {
        static const char *const keys[6] = {"entries_per_s",   "ratio",
                                            "last_over_first", "daemon_peak_rss_mib",
                                            "bytes_per_entry", "ceiling_per_s"};
        uint64_t loss = 0;
        for (int k = 0; k < o->runs; k++)
            loss += res[k].loss;
        bjson_begin("ingest", "summary");
        bjson_u64("producers", (uint64_t)o->producers);
        bjson_u64("entries_per_producer", o->entries);
        bjson_u64("runs", (uint64_t)ok);
        bjson_str("format", o->format ? o->format : "default");
        bjson_u64("loss_total", loss);
        for (int m = 0; m < 6; m++)
            bjson_stat(keys[m], bench_stat(v[m], (size_t)ok), (size_t)ok);
        bjson_end();
    }
    free(res);
    return ok == o->runs ? 0 : 1;
}

/* ---- backpressure ------------------------------------------------------------------ */

/*
 * The client's buffer bound as tracectl.h and client/lib/tcint.h describe it: the
 * 64 Ki-entry ring of 32-byte records, the interned shape pairs (at most
 * 4096; these entries' pairs pack into at most 64 bytes, with a key of at
 * most 64 bytes), and the output buffers (a 1 MiB high-water mark plus one
 * batch, with sbuffer doubling: 3 MiB).
 */
static double client_bound_mib(void)
{
    const double ring = 65536.0, rec = 32.0, pairs = 4096.0, pair = 128.0, out = 3.0 * 1048576.0;
    return (ring * rec + pairs * pair + out) / 1048576.0;
}

static int run_backpressure(const struct opts *o, struct shared *sh, int run)
{
    struct bdaemon d;
    struct bctl ctl = {.fd = -1};
    struct sess s;
    pid_t pids[MAX_PRODUCERS];
    uint64_t max_call = 0, max_cpu = 0, over = 0, vcsw = 0, ivcsw = 0, minflt = 0, dropped = 0,
             recorded = 0, calls = 0;
    double rss_growth = 0;
    int n, failed = 0, rc;

    memset(sh, 0, sizeof(*sh));
    if ((rc = bdaemon_start(&d, o->dir)) < 0) {
        fprintf(stderr, "backpressure: cannot start %s: %s\n", TRACECTLD_BIN, strerror(-rc));
        return rc;
    }
    n = spawn_producers(o, d.sock, "backpressure", sh, pids);
    sleep_ms((unsigned)(o->stop_at * 1000));
    kill(d.pid, SIGSTOP);
    sleep_ms((unsigned)(o->stop_for * 1000));
    kill(d.pid, SIGCONT);
    reap(pids, n, &failed, true);
    if ((rc = bctl_open(&ctl, d.sock)) < 0 || (rc = session_figures(&ctl, "backpressure", &s)) < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        const struct pstat *p = &sh->p[i];
        max_call = p->max_call_ns > max_call ? p->max_call_ns : max_call;
        max_cpu = p->max_call_cpu_ns > max_cpu ? p->max_call_cpu_ns : max_cpu;
        over += p->calls_over_1ms;
        vcsw += p->vcsw_in_calls;
        ivcsw += p->ivcsw_in_calls;
        minflt += p->minflt_in_calls;
        dropped += p->dropped;
        recorded += p->recorded;
        calls += p->calls;
        double g = (double)(p->rss_peak_kib - p->rss_open_kib) / 1024.0;
        rss_growth = g > rss_growth ? g : rss_growth;
    }
    bool exact = failed == 0 && dropped == s.dropped && dropped == s.report_dropped &&
                 s.report_entries == recorded - dropped;
    bjson_begin("ingest", "backpressure");
    bjson_u64("run", (uint64_t)run);
    bjson_u64("producers", (uint64_t)o->producers);
    bjson_num("rate_per_producer", o->rate);
    bjson_num("seconds", o->seconds);
    bjson_num("stopped_at_s", o->stop_at);
    bjson_num("stopped_for_s", o->stop_for);
    bjson_u64("calls", calls);
    bjson_u64("max_call_ns", max_call);
    bjson_u64("max_call_cpu_ns", max_cpu);
    bjson_u64("calls_over_1ms", over);
    bjson_u64("voluntary_switches_in_calls", vcsw);
    bjson_u64("involuntary_switches_in_calls", ivcsw);
    bjson_u64("minor_faults_in_calls", minflt);
    bjson_num("producer_rss_growth_mib_max", rss_growth);
    bjson_num("client_bound_mib", client_bound_mib());
    bjson_u64("recorded", recorded);
    bjson_u64("dropped_clients", dropped);
    bjson_u64("dropped_sessions", s.dropped);
    bjson_u64("dropped_report", s.report_dropped);
    bjson_u64("stored", s.report_entries);
    bjson_bool("exact", exact);
    bjson_end();
    fprintf(stderr,
            "backpressure run %d: %llu calls, longest %.3f ms wall, %.1f µs CPU (%llu over 1 ms, "
            "%llu voluntary switches and %llu page faults in calls), RSS growth ≤ %.1f MiB (bound "
            "%.1f), dropped %llu = sessions %llu = report %llu, stored %llu: %s\n",
            run, (unsigned long long)calls, (double)max_call / 1e6, (double)max_cpu / 1e3,
            (unsigned long long)over, (unsigned long long)vcsw, (unsigned long long)minflt,
            rss_growth, client_bound_mib(), (unsigned long long)dropped,
            (unsigned long long)s.dropped, (unsigned long long)s.report_dropped,
            (unsigned long long)s.report_entries, exact ? "exact" : "MISMATCH");
    rc = exact ? 0 : -EIO;
out:
    bctl_close(&ctl);
    bdaemon_cleanup(&d);
    return rc;
}

/* ---- attach: producers only ----------------------------------------------------------- */

static int main_attach(const struct opts *o, struct shared *sh)
{
    pid_t pids[MAX_PRODUCERS];
    uint64_t t0 = bench_now_ns(), total = 0;
    int n, failed = 0;

    n = spawn_producers(o, o->attach, o->session, sh, pids);
    while (reap(pids, n, &failed, false) > 0) {
        if (o->seconds > 0 && (double)(bench_now_ns() - t0) / 1e9 > o->seconds)
            sh->stop = 1;
        sleep_ms(50);
    }
    for (int i = 0; i < n; i++)
        total += sh->p[i].recorded;
    double s = (double)(bench_now_ns() - t0) / 1e9;
    bjson_begin("ingest", "attach");
    bjson_str("session", o->session);
    bjson_u64("producers", (uint64_t)n);
    bjson_u64("entries", total);
    bjson_num("seconds", s);
    bjson_num("entries_per_s", (double)total / s);
    bjson_u64("failed", (uint64_t)failed);
    bjson_end();
    fprintf(stderr, "attach %s: %llu entries in %.1f s\n", o->session, (unsigned long long)total,
            s);
    return failed == 0 && n == o->producers ? 0 : 1;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: tc_bench_ingest [--producers P (16)] [--entries N per producer (1000000)]\n"
               "                       [--runs K (1)] [--dir DIR] [--sites S (256)]\n"
               "                       [--storage-format rows|blocks]\n"
               "       tc_bench_ingest --backpressure [--producers P (4)] [--rate R/s (50000)]\n"
               "                       [--seconds S (6)] [--stop-at A (1.5)] [--stop-for B (3)]\n"
               "       tc_bench_ingest --attach SOCKET --session NAME [--producers P]\n"
               "                       [--entries N] [--seconds S]\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {{"producers", required_argument, NULL, 'p'},
                                       {"entries", required_argument, NULL, 'n'},
                                       {"runs", required_argument, NULL, 'k'},
                                       {"dir", required_argument, NULL, 'd'},
                                       {"backpressure", no_argument, NULL, 'b'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"seconds", required_argument, NULL, 's'},
                                       {"stop-at", required_argument, NULL, 'A'},
                                       {"stop-for", required_argument, NULL, 'B'},
                                       {"attach", required_argument, NULL, 'a'},
                                       {"session", required_argument, NULL, 'S'},
                                       {"sites", required_argument, NULL, 'i'},
                                       {"storage-format", required_argument, NULL, 'F'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch, producers = 0;

    *o = (struct opts){.entries = 1000000,
                       .runs = 1,
                       .rate = 50000,
                       .stop_at = 1.5,
                       .stop_for = 3,
                       .session = "bench",
                       .sites = BENCH_SITES};
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'p':
            producers = atoi(optarg);
            break;
        case 'n':
            o->entries = strtoull(optarg, NULL, 10);
            break;
        case 'k':
            o->runs = atoi(optarg);
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 'b':
            o->backpressure = true;
            break;
        case 'r':
            o->rate = atof(optarg);
            break;
        case 's':
            o->seconds = atof(optarg);
            break;
        case 'A':
            o->stop_at = atof(optarg);
            break;
        case 'B':
            o->stop_for = atof(optarg);
            break;
        case 'a':
            o->attach = optarg;
            break;
        case 'S':
            o->session = optarg;
            break;
        case 'i':
            o->sites = (uint32_t)atoi(optarg);
            break;
        case 'F':
            o->format = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    o->producers = producers > 0 ? producers : o->backpressure ? 4 : 16;
    if (o->backpressure && o->seconds <= 0)
        o->seconds = 6;
    if (optind != argc || o->producers > MAX_PRODUCERS || o->runs < 1 || o->entries == 0 ||
        o->rate < 1000 || o->sites < 1 || o->sites > BENCH_SITES ||
        (o->backpressure && o->stop_at + o->stop_for >= o->seconds))
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    static struct bprogram prog;
    struct opts o;
    char machine[256];
    int rc = 0;

    if (parse(argc, argv, &o) < 0) {
        usage(stderr);
        return 2;
    }
    bench_program_init(&prog);
    o.prog = &prog;
    g_shared = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    if (g_shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bench_machine(machine, sizeof(machine));
    fprintf(stderr, "tc_bench_ingest on %s\n", machine);
    if (o.attach != NULL) {
        rc = main_attach(&o, g_shared);
    } else if (o.backpressure) {
        for (int k = 0; k < o.runs; k++)
            if (run_backpressure(&o, g_shared, k + 1) < 0)
                rc = 1;
    } else {
        rc = main_ingest(&o, g_shared);
    }
    munmap(g_shared, sizeof(struct shared));
    return rc;
}
