/* sink.c — see sink.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sqlite3.h>

#include "log.h"
#include "schema.h"
#include "sink.h"
#include "sink_http.h"
#include "sink_rows.h"
#include "util.h"

/* A start_ns past this (2001-09-09) is a wall-clock time already (an imported trace's). */
#define SINK_WALL_MIN_NS 1000000000000000000ll

/* How long a doubt waits for the server to finish a query of the session still running. */
#define SINK_RUNNING_WAIT_MS (2 * SINK_HTTP_TOTAL_S * 1000)

/* What the sink knows of a session (the state file's row). */
struct sink_sess {
    int64_t id, sent;
    bool done;
    bool doubt;     /* the batch after `sent` may be in ClickHouse: ask before sending */
    bool announced; /* its sessions and processes rows were sent by this run */
    bool seen;      /* in the catalog at the last look */
    bool has_offset;
    int64_t offset; /* the clock offset (sink_offset), once it has an entry */
};

/* One catalog row, copied. */
struct sink_cat {
    int64_t id, uid, started_ns, ended_ns;
    uint64_t processes, entries, dropped;
    int interrupted;
    bool ended;
    char *name;
};

struct sink {
    char *data_dir, *url, *userpwd;
    char host[256];
    pthread_t thread;
    bool started, curl_inited;
    atomic_bool stop;
    pthread_mutex_t mu; /* the figures below, and the wait */
    pthread_cond_t cv;
    struct sink_status st;
    int64_t *pending; /* ids of the sessions not wholly sent, ascending (sink_pending) */
    size_t n_pending;
    bool pending_known; /* a round has published them */
    /* the thread's own */
    sqlite3 *state, *catalog;
    struct sink_http *http;
    bool schema_ok;
    struct sink_sess *sess;
    size_t n_sess, cap_sess;
    size_t batch;        /* entries per INSERT: SINK_BATCH (test builds: $TRACECTLD_SINK_BATCH) */
    uint64_t kill_after; /* test builds: SIGKILL after this many INSERTs, before `sent` is saved */
    char err[256];
};

/* ---- status ------------------------------------------------------------------- */

static uint64_t sink_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool sink_pending(struct sink *k, int64_t id)
{
    size_t lo = 0, hi;
    bool found = false;

    pthread_mutex_lock(&k->mu);
    hi = k->n_pending;
    while (lo < hi && !found) {
        size_t mid = lo + (hi - lo) / 2;

        if (k->pending[mid] == id)
            found = true;
        else if (k->pending[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    found = found || !k->pending_known;
    pthread_mutex_unlock(&k->mu);
    return found;
}

void sink_status(struct sink *k, struct sink_status *st)
{
    pthread_mutex_lock(&k->mu);
    *st = k->st;
    pthread_mutex_unlock(&k->mu);
}

/* The error in k->err becomes the status's last error (logged when it is new). */
static void sink_fail(struct sink *k)
{
    bool same;

    pthread_mutex_lock(&k->mu);
    same = strcmp(k->st.last_error, k->err) == 0 && strcmp(k->st.state, "retrying") == 0;
    snprintf(k->st.last_error, sizeof(k->st.last_error), "%s", k->err);
    k->st.last_error_ns = sink_now_ns();
    k->st.state = "retrying";
    pthread_mutex_unlock(&k->mu);
    if (!same)
        log_warn("clickhouse: %s (retrying)", k->err);
}

/* Sleeps ms, or less when stopping. */
static void sink_wait(struct sink *k, unsigned ms)
{
    struct timespec ts = util_deadline_in(CLOCK_REALTIME, ms);

    pthread_mutex_lock(&k->mu);
    if (!atomic_load(&k->stop))
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    pthread_mutex_unlock(&k->mu);
}

/* ---- the state file ----------------------------------------------------------- */

static int sink_state_open(struct sink *k, char *err, size_t errlen)
{
    char path[PATH_MAX];
    sqlite3_stmt *st;
    int rc;

    snprintf(path, sizeof(path), "%s/clickhouse.db", k->data_dir);
    if (sqlite3_open_v2(path, &k->state, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(k->state, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_exec(k->state, schema_sink_state_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(k->state, "SELECT session_id, sent, done, clock_offset FROM sent", -1,
                           &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", path,
                 k->state ? sqlite3_errmsg(k->state) : "out of memory");
        return -EIO;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct sink_sess *s;

        if (k->n_sess == k->cap_sess) {
            size_t cap = k->cap_sess ? 2 * k->cap_sess : 64;

            if ((s = realloc(k->sess, cap * sizeof(*s))) == NULL)
                break;
            k->sess = s;
            k->cap_sess = cap;
        }
        s = &k->sess[k->n_sess++];
        memset(s, 0, sizeof(*s));
        s->id = sqlite3_column_int64(st, 0);
        s->sent = sqlite3_column_int64(st, 1);
        s->done = sqlite3_column_int(st, 2) != 0;
        s->has_offset = sqlite3_column_type(st, 3) != SQLITE_NULL;
        s->offset = sqlite3_column_int64(st, 3);
        s->doubt = true; /* the last run may have sent the next batch */
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "cannot read %s: %s", path, sqlite3_errmsg(k->state));
        return -EIO;
    }
    return 0;
}

/* Commits s's position (synchronous=FULL: it survives a crash of the host). 0 or -EIO. */
static int sink_state_save(struct sink *k, const struct sink_sess *s)
{
    sqlite3_stmt *st;
    int rc;

    if (sqlite3_prepare_v2(k->state, "INSERT OR REPLACE INTO sent VALUES (?1, ?2, ?3, ?4)", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(st, 1, s->id);
    sqlite3_bind_int64(st, 2, s->sent);
    sqlite3_bind_int(st, 3, s->done);
    if (s->has_offset)
        sqlite3_bind_int64(st, 4, s->offset);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        snprintf(k->err, sizeof(k->err), "cannot write clickhouse.db: %s",
                 sqlite3_errmsg(k->state));
        return -EIO;
    }
    return 0;
}

static void sink_state_forget(struct sink *k, int64_t id)
{
    sqlite3_stmt *st;

    if (sqlite3_prepare_v2(k->state, "DELETE FROM sent WHERE session_id = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_step(st);
        sqlite3_finalize(st);
    }
}

static struct sink_sess *sink_sess_get(struct sink *k, int64_t id)
{
    struct sink_sess *s;

    for (size_t i = 0; i < k->n_sess; i++)
        if (k->sess[i].id == id)
            return &k->sess[i];
    if (k->n_sess == k->cap_sess) {
        size_t cap = k->cap_sess ? 2 * k->cap_sess : 64;

        if ((s = realloc(k->sess, cap * sizeof(*s))) == NULL)
            return NULL;
        k->sess = s;
        k->cap_sess = cap;
    }
    s = &k->sess[k->n_sess++];
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->doubt = true;
    return s;
}

/* ---- ClickHouse ----------------------------------------------------------------- */

/* The schema, one statement at a time (each ends with ';' at the end of a line). */
static int sink_schema(struct sink *k)
{
    const char *p = schema_clickhouse_sql;
    int rc = 0;

    while (*p != '\0' && rc == 0) {
        const char *end = strstr(p, ";\n");
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *q = p;

        /* a statement that is only comments and blank lines is none */
        while (q < p + len && (*q == '\n' || *q == ' ' || (q[0] == '-' && q[1] == '-'))) {
            if (*q == '-')
                q += strcspn(q, "\n");
            else
                q++;
        }
        if (q < p + len)
            rc = sink_http_post(k->http, NULL, NULL, p, len, NULL, k->err, sizeof(k->err));
        p += end != NULL ? len + 2 : len;
    }
    k->schema_ok = rc == 0;
    return rc;
}

/* s with ' and \ escaped for an SQL string literal, into buf. */
static void sink_quote(const char *s, char *buf, size_t size)
{
    size_t j = 0;

    for (; *s != '\0' && j + 3 < size; s++) {
        if (*s == '\'' || *s == '\\')
            buf[j++] = '\\';
        buf[j++] = *s;
    }
    buf[j] = '\0';
}

/* A query whose reply is one unsigned number, into *v. 0 or a negative errno (k->err). */
static int sink_query_u64(struct sink *k, const char *sql, uint64_t *v)
{
    char *out = NULL;
    int rc = sink_http_post(k->http, NULL, NULL, sql, strlen(sql), &out, k->err, sizeof(k->err));

    if (rc == 0) {
        char *end;

        *v = strtoull(out, &end, 10);
        if (end == out || (*end != '\n' && *end != '\0')) { /* never taken for a number */
            snprintf(k->err, sizeof(k->err), "ClickHouse answered '%.60s' to a count", out);
            rc = -EPROTO;
        }
        free(out);
    }
    return rc;
}

static void sink_query_id(const struct sink *k, int64_t session, char *buf, size_t size)
{
    snprintf(buf, size, "tracectl:%s:%" PRId64 ":", k->host, session);
}

/*
 * Settles the doubt about the batch after s->sent: waits until no query of
 * the session runs on the server (an INSERT the last attempt or run left
 * behind), then moves `sent` to the batch that is there, if one is. 0 or a
 * negative errno (k->err).
 */
static int sink_resolve(struct sink *k, struct sink_reader *r, struct sink_sess *s)
{
    char sql[1024], prefix[400], quoted[800], host[600];
    uint64_t running = 0, day, v = 0;
    int64_t start;
    int rc;

    sink_query_id(k, s->id, prefix, sizeof(prefix));
    sink_quote(prefix, quoted, sizeof(quoted));
    snprintf(sql, sizeof(sql),
             "SELECT count() FROM system.processes WHERE position(query_id, '%s') = 1", quoted);
    for (unsigned waited = 0;; waited += SINK_POLL_MS) {
        if ((rc = sink_query_u64(k, sql, &running)) < 0)
            return rc;
        if (running == 0)
            break;
        if (waited >= SINK_RUNNING_WAIT_MS || atomic_load(&k->stop)) {
            snprintf(k->err, sizeof(k->err), "an INSERT of session %" PRId64 " still runs", s->id);
            return -EBUSY;
        }
        sink_wait(k, SINK_POLL_MS);
    }
    rc = sink_rows_next_start(r, s->sent, &start);
    day = sink_rows_wall(start, s->offset) / SINK_DAY_NS;
    if (rc == -ENOENT ||
        !s->has_offset) { /* nothing after `sent` was committed: nothing can have been sent */
        s->doubt = false;
        return 0;
    }
    if (rc < 0) {
        snprintf(k->err, sizeof(k->err), "cannot read session %" PRId64, s->id);
        return rc;
    }
    sink_quote(k->host, host, sizeof(host));
    snprintf(sql, sizeof(sql),
             "SELECT max(batch) FROM tracectl.entries WHERE host = '%s' AND session_id = %" PRId64
             " AND start_ns >= %" PRIu64 " AND start_ns < %" PRIu64 " AND batch > %" PRId64,
             host, s->id, (uint64_t)(day * SINK_DAY_NS), (uint64_t)((day + 1) * SINK_DAY_NS),
             s->sent);
    if ((rc = sink_query_u64(k, sql, &v)) < 0)
        return rc;
    if ((int64_t)v > s->sent) {
        log_info("clickhouse: session %" PRId64 ": entries up to %" PRIu64
                 " were there already (not sent again)",
                 s->id, v);
        s->sent = (int64_t)v;
        if ((rc = sink_state_save(k, s)) < 0)
            return rc;
    }
    s->doubt = false;
    return 0;
}

/* The session's sessions row, its processes' and its ranks' rows (replacing older ones). */
static int sink_announce(struct sink *k, struct sink_reader *r, const struct sink_cat *c,
                         const struct sink_sess *s, bool final)
{
    struct sink_origin o = {k->host, c->id, c->name, s->offset};
    struct sink_buf procs = {0}, hosts = {0}, row = {0}, ranks = {0};
    uint64_t version = sink_now_ns();
    bool ended = final && c->ended;
    int rc = sink_rows_processes(r, &o, version, &procs, &hosts);

    if (rc == 0)
        rc = sink_rows_ranks(r, &o, version, &ranks);
    if (rc < 0) {
        snprintf(k->err, sizeof(k->err), "cannot read the processes of session %" PRId64, c->id);
        goto out;
    }
    sink_buf_str(&row, k->host, strlen(k->host));
    sink_buf_u64(&row, (uint64_t)c->id);
    sink_buf_str(&row, c->name, strlen(c->name));
    sink_buf_str(&row, ended ? "ended" : "live", ended ? 5 : 4);
    sink_buf_u64(&row, (uint64_t)c->uid);
    sink_buf_u64(&row, (uint64_t)c->started_ns);
    sink_buf_u64(&row, ended ? (uint64_t)c->ended_ns : 0);
    sink_buf_u64(&row, c->processes);
    sink_buf_u64(&row, ended ? c->entries : (uint64_t)s->sent);
    sink_buf_u64(&row, c->dropped);
    sink_buf_u8(&row, (uint8_t)c->interrupted);
    sink_buf_bytes(&row, hosts.data, hosts.len); /* Array(String) */
    sink_buf_u64(&row, (uint64_t)s->offset);
    sink_buf_u64(&row, version);
    if (row.oom) {
        rc = -ENOMEM;
        snprintf(k->err, sizeof(k->err), "out of memory");
        goto out;
    }
    rc = sink_http_post(k->http, "INSERT INTO tracectl.sessions FORMAT RowBinary", NULL, row.data,
                        row.len, NULL, k->err, sizeof(k->err));
    if (rc == 0 && procs.len > 0)
        rc = sink_http_post(k->http, "INSERT INTO tracectl.processes FORMAT RowBinary", NULL,
                            procs.data, procs.len, NULL, k->err, sizeof(k->err));
    if (rc == 0 && ranks.len > 0)
        rc = sink_http_post(k->http, "INSERT INTO tracectl.ranks FORMAT RowBinary", NULL,
                            ranks.data, ranks.len, NULL, k->err, sizeof(k->err));
out:
    sink_buf_free(&ranks);
    sink_buf_free(&procs);
    sink_buf_free(&hosts);
    sink_buf_free(&row);
    return rc;
}

/*
 * Decides the session's clock offset at its first entry: producers send a
 * per-host monotonic start_ns; the wall clock is that plus CLOCK_REALTIME -
 * CLOCK_MONOTONIC of this boot, for a session of this boot; for one of an
 * earlier boot (its file sent only now) the session's wall-clock start minus
 * its first entry's start; 0 for entries that carry wall-clock times already
 * (an imported trace). 0, -ENOENT (no entry yet) or -EIO (k->err).
 */
static int sink_offset(struct sink *k, struct sink_reader *r, const struct sink_cat *c,
                       struct sink_sess *s)
{
    struct timespec wall, mono;
    int64_t first, boot;
    int rc = sink_rows_next_start(r, 0, &first);

    if (rc == -EIO)
        snprintf(k->err, sizeof(k->err), "cannot read session %" PRId64, c->id);
    if (rc < 0)
        return rc;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    boot = (int64_t)(wall.tv_sec - mono.tv_sec) * 1000000000 + (wall.tv_nsec - mono.tv_nsec);
    if (first >= SINK_WALL_MIN_NS)
        s->offset = 0;
    else if (c->started_ns >= boot)
        s->offset = boot;
    else
        s->offset = c->started_ns - first;
    s->has_offset = true;
    s->announced = false; /* its sessions row gets the offset */
    return sink_state_save(k, s);
}

/* One batch after s->sent: read, sent, and `sent` committed. 1 sent, 0 none left, or < 0. */
static int sink_batch(struct sink *k, struct sink_reader *r, const struct sink_cat *c,
                      struct sink_sess *s)
{
    struct sink_origin o = {k->host, c->id, c->name, s->offset};
    struct sink_buf buf = {0};
    char qid[400];
    size_t n = 0;
    int64_t last = s->sent;
    uint64_t t0 = sink_now_ns(), t1;
    int rc = sink_rows_read(r, &o, s->sent, k->batch, &buf, &n, &last);

    if (rc < 0) {
        snprintf(k->err, sizeof(k->err), "cannot read session %" PRId64 ": %s", c->id,
                 rc == -ENOMEM ? "out of memory" : sqlite3_errmsg(r->db));
        goto out;
    }
    if (n == 0)
        goto out;
    t1 = sink_now_ns();
    sink_query_id(k, c->id, qid, sizeof(qid) - 24);
    snprintf(qid + strlen(qid), 24, "%" PRId64, last);
    s->doubt = true; /* until the server's answer says either way */
    rc = sink_http_post(k->http, "INSERT INTO tracectl.entries FORMAT RowBinary", qid, buf.data,
                        buf.len, NULL, k->err, sizeof(k->err));
    log_debug("clickhouse: session %" PRId64 ": %zu entries read in %.1f ms, sent in %.1f ms",
              c->id, n, (double)(t1 - t0) / 1e6, (double)(sink_now_ns() - t1) / 1e6);
    if (rc < 0) /* even an error status: asked again, never assumed (doubt stays) */
        goto out;
    if (k->kill_after > 0 && k->st.batches + 1 == k->kill_after)
        raise(SIGKILL); /* test builds: a crash at the worst moment (test_clickhouse) */
    s->sent = last;
    s->doubt = false;
    if ((rc = sink_state_save(k, s)) < 0)
        goto out;
    pthread_mutex_lock(&k->mu);
    k->st.sent += n;
    k->st.batches++;
    pthread_mutex_unlock(&k->mu);
    rc = 1;
out:
    sink_buf_free(&buf);
    return rc;
}

/* Adds what is left of a session to *backlog, sending nothing (a round that failed). */
static void sink_count(struct sink *k, const struct sink_cat *c, const struct sink_sess *s,
                       uint64_t *backlog)
{
    struct sink_reader r;
    char path[PATH_MAX];
    int64_t last = 0;

    snprintf(path, sizeof(path), "%s/sessions/%" PRId64 ".db", k->data_dir, c->id);
    if (sink_rows_open(&r, path) < 0)
        return;
    if (sink_rows_last(&r, &last) == 0 && last > s->sent)
        *backlog += (uint64_t)(last - s->sent);
    sink_rows_close(&r);
}

/*
 * A session's turn: its rows announced, a doubt settled, up to
 * SINK_TURN_BATCHES batches, and once an ended session is wholly sent its
 * final rows. Adds what is left of it to *backlog. 1 when something was
 * sent, 0 when nothing was left, or a negative errno (k->err).
 */
static int sink_session(struct sink *k, const struct sink_cat *c, struct sink_sess *s,
                        uint64_t *backlog)
{
    struct sink_reader r;
    char path[PATH_MAX];
    int64_t last = 0;
    int rc, sent = 0;

    snprintf(path, sizeof(path), "%s/sessions/%" PRId64 ".db", k->data_dir, c->id);
    if ((rc = sink_rows_open(&r, path)) < 0) {
        if (rc == -ENOENT) /* not created yet, or just deleted */
            return 0;
        snprintf(k->err, sizeof(k->err), "cannot open session %" PRId64 "'s file", c->id);
        return rc;
    }
    if (!s->has_offset && (rc = sink_offset(k, &r, c, s)) < 0 && rc != -ENOENT)
        goto out;
    if (!s->announced && (rc = sink_announce(k, &r, c, s, false)) < 0)
        goto out;
    s->announced = true;
    if (s->doubt && (rc = sink_resolve(k, &r, s)) < 0)
        goto out;
    rc = 0;
    for (int i = 0; i < SINK_TURN_BATCHES && s->has_offset && !atomic_load(&k->stop); i++) {
        if ((rc = sink_batch(k, &r, c, s)) <= 0)
            break;
        sent = 1;
    }
    if (rc < 0)
        goto out;
    if (rc == 0 && c->ended) { /* ended before the read: all of it is sent */
        if ((rc = sink_announce(k, &r, c, s, true)) < 0)
            goto out;
        s->done = true;
        if ((rc = sink_state_save(k, s)) < 0)
            goto out;
        log_info("clickhouse: session %" PRId64 " (%s) sent: %" PRId64 " entries", c->id, c->name,
                 s->sent);
    }
    rc = sent;
out:
    if (!s->done && sink_rows_last(&r, &last) == 0 && last > s->sent)
        *backlog += (uint64_t)(last - s->sent);
    sink_rows_close(&r);
    return rc;
}

static void sink_cat_free(struct sink_cat *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(c[i].name);
    free(c);
}

/* The catalog's sessions, oldest first, into *out (caller frees with sink_cat_free). */
static int sink_catalog(struct sink *k, struct sink_cat **out, size_t *n_out)
{
    char path[PATH_MAX];
    struct sink_cat *c = NULL, *p;
    size_t n = 0, cap = 0;
    sqlite3_stmt *st;
    int rc;

    if (k->catalog == NULL) {
        snprintf(path, sizeof(path), "%s/catalog.db", k->data_dir);
        if (sqlite3_open_v2(path, &k->catalog, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
            snprintf(k->err, sizeof(k->err), "cannot open the catalog");
            sqlite3_close(k->catalog);
            k->catalog = NULL;
            return -EIO;
        }
        sqlite3_busy_timeout(k->catalog, 5000);
    }
    if (sqlite3_prepare_v2(k->catalog,
                           "SELECT id, coalesce(uid, -1), started_ns, coalesce(ended_ns, 0),"
                           " processes, entries, dropped, interrupted, state = 'ended', name"
                           " FROM sessions ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK) {
        snprintf(k->err, sizeof(k->err), "cannot read the catalog: %s", sqlite3_errmsg(k->catalog));
        return -EIO;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            if ((p = realloc(c, cap * sizeof(*c))) == NULL)
                break;
            c = p;
        }
        p = &c[n];
        p->id = sqlite3_column_int64(st, 0);
        p->uid = sqlite3_column_int64(st, 1);
        p->started_ns = sqlite3_column_int64(st, 2);
        p->ended_ns = sqlite3_column_int64(st, 3);
        p->processes = (uint64_t)sqlite3_column_int64(st, 4);
        p->entries = (uint64_t)sqlite3_column_int64(st, 5);
        p->dropped = (uint64_t)sqlite3_column_int64(st, 6);
        p->interrupted = sqlite3_column_int(st, 7);
        p->ended = sqlite3_column_int(st, 8) != 0;
        if ((p->name = strdup((const char *)sqlite3_column_text(st, 9))) == NULL)
            break;
        n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        snprintf(k->err, sizeof(k->err), "cannot read the catalog");
        sink_cat_free(c, n);
        return -EIO;
    }
    *out = c;
    *n_out = n;
    return 0;
}

/* Forgets the sessions no longer in the catalog (deleted), saying what was lost. */
static void sink_forget(struct sink *k)
{
    size_t j = 0;

    for (size_t i = 0; i < k->n_sess; i++) {
        struct sink_sess *s = &k->sess[i];

        if (s->seen) {
            k->sess[j++] = *s;
            continue;
        }
        if (!s->done)
            log_warn("clickhouse: session %" PRId64 " was deleted before all of its entries"
                     " were sent (those after entry %" PRId64 " never will be)",
                     s->id, s->sent);
        sink_state_forget(k, s->id);
    }
    k->n_sess = j;
}

/* One look at every session. 1 when something was sent, 0 when all is sent, or < 0 (k->err). */
static int sink_round(struct sink *k)
{
    struct sink_cat *c = NULL;
    size_t n = 0, pending = 0;
    uint64_t backlog = 0;
    int64_t *ids;
    int rc = 0, sent = 0, failed = 0;

    if (!k->schema_ok && (rc = sink_schema(k)) < 0)
        return rc;
    if ((rc = sink_catalog(k, &c, &n)) < 0)
        return rc;
    if ((ids = malloc((n + 1) * sizeof(*ids))) == NULL) {
        sink_cat_free(c, n);
        snprintf(k->err, sizeof(k->err), "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < k->n_sess; i++)
        k->sess[i].seen = false;
    for (size_t i = 0; i < n; i++) {
        struct sink_sess *s = sink_sess_get(k, c[i].id);

        if (s == NULL) {
            snprintf(k->err, sizeof(k->err), "out of memory");
            rc = -ENOMEM;
            break;
        }
        s->seen = true;
        if (s->done)
            continue;
        if (atomic_load(&k->stop)) {
            ids[pending++] = s->id;
            continue;
        }
        if (failed < 0) { /* the rest only counted: the status shows the whole backlog */
            sink_count(k, &c[i], s, &backlog);
        } else if ((rc = sink_session(k, &c[i], s, &backlog)) < 0) {
            failed = rc;
        } else {
            sent |= rc;
        }
        if (!s->done)
            ids[pending++] = s->id;
    }
    if (failed == 0 && rc >= 0)
        sink_forget(k);
    sink_cat_free(c, n);
    pthread_mutex_lock(&k->mu);
    if (failed == 0 && rc >= 0)
        k->st.state = sent || backlog > 0 ? "streaming" : "idle";
    k->st.backlog = backlog;
    k->st.sessions = pending;
    free(k->pending);
    k->pending = ids; /* the catalog's order: ascending ids */
    k->n_pending = pending;
    k->pending_known = true;
    pthread_mutex_unlock(&k->mu);
    return failed < 0 ? failed : rc < 0 ? rc : sent;
}

static void *sink_main(void *arg)
{
    struct sink *k = arg;
    unsigned backoff = SINK_RETRY_MIN_MS;
    int rc;

    while (!atomic_load(&k->stop)) {
        rc = sink_round(k);
        if (rc < 0 && !atomic_load(&k->stop)) {
            sink_fail(k);
            sink_wait(k, backoff);
            backoff = backoff * 2 > SINK_RETRY_MAX_MS ? SINK_RETRY_MAX_MS : backoff * 2;
            continue;
        }
        backoff = SINK_RETRY_MIN_MS;
        if (rc == 0)
            sink_wait(k, SINK_POLL_MS);
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------- */

/* The "user:password" line of path, which only its owner may read. NULL with err on failure. */
static char *sink_read_auth(const char *path, char *err, size_t errlen)
{
    char buf[1024];
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0) {
        snprintf(err, errlen, "--clickhouse-auth %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (sb.st_mode & 077) != 0) {
        snprintf(err, errlen,
                 "--clickhouse-auth %s: must be a regular file only its owner can read"
                 " (chmod 600)",
                 path);
        close(fd);
        return NULL;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (strchr(buf, ':') == NULL || buf[0] == ':') {
        snprintf(err, errlen, "--clickhouse-auth %s: the first line must be user:password", path);
        memset(buf, 0, sizeof(buf));
        return NULL;
    }
    char *s = strdup(buf);

    memset(buf, 0, sizeof(buf));
    if (s == NULL)
        snprintf(err, errlen, "out of memory");
    return s;
}

/* http:// or https://, and no user:password@ in it (that goes in the auth file). */
static bool sink_url_ok(const char *url)
{
    const char *rest = strncmp(url, "http://", 7) == 0    ? url + 7
                       : strncmp(url, "https://", 8) == 0 ? url + 8
                                                          : NULL;

    return rest != NULL && *rest != '\0' && memchr(rest, '@', strcspn(rest, "/?#")) == NULL;
}

struct sink *sink_new(const char *data_dir, const char *url, const char *auth_file,
                      const char *host, char *err, size_t errlen)
{
    struct sink *k;

    if (!sink_url_ok(url)) {
        snprintf(err, errlen,
                 "--clickhouse takes http://HOST:PORT/ (credentials go in --clickhouse-auth)");
        return NULL;
    }
    if ((k = calloc(1, sizeof(*k))) == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->st.state = "starting";
    k->batch = SINK_BATCH;
#ifdef TRACECTLD_FAULT_INJECT
    /* test builds: small batches, and a kill between an INSERT and its position (fault.h) */
    if (getenv("TRACECTLD_SINK_BATCH") != NULL && atoi(getenv("TRACECTLD_SINK_BATCH")) > 0)
        k->batch = (size_t)atoi(getenv("TRACECTLD_SINK_BATCH"));
    if (getenv("TRACECTLD_SINK_KILL_AFTER") != NULL)
        k->kill_after = strtoull(getenv("TRACECTLD_SINK_KILL_AFTER"), NULL, 10);
#endif
    if (host != NULL)
        snprintf(k->host, sizeof(k->host), "%s", host);
    else if (gethostname(k->host, sizeof(k->host) - 1) < 0)
        snprintf(k->host, sizeof(k->host), "localhost");
    k->data_dir = strdup(data_dir);
    k->url = strdup(url);
    k->st.url = k->url;
    if (k->data_dir == NULL || k->url == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (auth_file != NULL && (k->userpwd = sink_read_auth(auth_file, err, errlen)) == NULL)
        goto fail;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        snprintf(err, errlen, "cannot initialise libcurl");
        goto fail;
    }
    k->curl_inited = true;
    if ((k->http = sink_http_new(url, k->userpwd, &k->stop)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (sink_state_open(k, err, errlen) < 0)
        goto fail;
    return k;
fail:
    sink_free(k);
    return NULL;
}

int sink_start(struct sink *k)
{
    int rc = pthread_create(&k->thread, NULL, sink_main, k);

    if (rc != 0)
        return -rc;
    k->started = true;
    return 0;
}

void sink_stop(struct sink *k)
{
    if (k == NULL || !k->started)
        return;
    pthread_mutex_lock(&k->mu);
    atomic_store(&k->stop, true);
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    k->started = false;
}

void sink_free(struct sink *k)
{
    if (k == NULL)
        return;
    sink_stop(k);
    sink_http_free(k->http);
    if (k->curl_inited)
        curl_global_cleanup();
    if (k->userpwd != NULL)
        memset(k->userpwd, 0, strlen(k->userpwd));
    free(k->userpwd);
    sqlite3_close(k->state);
    sqlite3_close(k->catalog);
    free(k->sess);
    free(k->pending);
    free(k->data_dir);
    free(k->url);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
}
