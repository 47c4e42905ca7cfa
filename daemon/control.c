/*
 * control.c — answers control requests: sessions, status, report, delete.
 *
 * `sessions` and `status` are answered on the loop thread from memory (and a
 * stat() per file for sizes). `report` runs query_report() on libuv's thread
 * pool and packs the reply there too; `delete` goes through the store, which
 * owns the files. While a request is in flight its connection reads no
 * further requests, so replies come back in request order.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "export.h"
#include "log.h"
#include "report.h"

struct report_work {
    uv_work_t req;
    struct conn *c;
    struct report_params params;
    int64_t id;
    char *name, *state;
    char path[PATH_MAX];
    int rc;
    char err[256];
    msgpack_sbuffer out;
};

static void pack_key(msgpack_packer *pk, const char *key)
{
    proto_pack_str(pk, key);
}

static void pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
    pack_key(pk, key);
    msgpack_pack_uint64(pk, v);
}

static void pack_kv_i64(msgpack_packer *pk, const char *key, int64_t v)
{
    pack_key(pk, key);
    msgpack_pack_int64(pk, v);
}

static void pack_kv_str(msgpack_packer *pk, const char *key, const char *v)
{
    pack_key(pk, key);
    if (v != NULL)
        proto_pack_str(pk, v);
    else
        msgpack_pack_nil(pk);
}

static void reply_error(struct conn *c, const char *code, const char *message)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_error(&pk, code, message);
    conn_send(c, &sb);
}

static void pack_session(struct daemon *d, msgpack_packer *pk, const struct session *s)
{
    msgpack_pack_map(pk, 12);
    pack_kv_i64(pk, "id", s->id);
    pack_kv_str(pk, "name", s->name);
    pack_kv_str(pk, "state", s->live ? "live" : "ended");
    pack_kv_u64(pk, "processes", s->processes);
    pack_kv_u64(pk, "entries", s->entries);
    pack_kv_u64(pk, "dropped", s->dropped);
    pack_kv_i64(pk, "started_ns", s->started_ns);
    pack_key(pk, "ended_ns");
    if (s->live)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_int64(pk, s->ended_ns);
    pack_kv_u64(pk, "bytes", store_session_bytes(d->store, s->id));
    /* Extensions (proto/PROTOCOL.md). */
    pack_kv_u64(pk, "connected", s->live ? s->connected : 0);
    pack_key(pk, "interrupted");
    if (s->interrupted)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    pack_kv_i64(pk, "uid", s->uid);
}

static void control_sessions(struct conn *c)
{
    struct daemon *d = c->d;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int64_t uid = conn_view_uid(c);
    size_t n = 0;

    for (struct session *s = d->reg.list; s != NULL; s = s->next)
        n += uid < 0 || s->uid == uid;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    msgpack_pack_array(&pk, n);
    for (struct session *s = d->reg.list; s != NULL; s = s->next)
        if (uid < 0 || s->uid == uid)
            pack_session(d, &pk, s);
    conn_send(c, &sb);
}

static double status_rate(const struct daemon *d)
{
    unsigned newest, oldest;

    if (d->rate_n < 2)
        return 0.0;
    newest = (d->rate_pos + DAEMON_RATE_WINDOW) % (DAEMON_RATE_WINDOW + 1);
    oldest = d->rate_n > DAEMON_RATE_WINDOW ? d->rate_pos : 0;
    return (double)(d->rate[newest] - d->rate[oldest]) /
           (double)((d->rate_n > DAEMON_RATE_WINDOW ? DAEMON_RATE_WINDOW + 1 : d->rate_n) - 1);
}

static void control_status(struct conn *c)
{
    struct daemon *d = c->d;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t bytes = 0, n_sessions = 0;
    char err[256];
    struct stat st;
    char path[PATH_MAX];

    for (struct session *s = d->reg.list; s != NULL; s = s->next) {
        bytes += store_session_bytes(d->store, s->id);
        n_sessions++;
    }
    snprintf(path, sizeof(path), "%s/catalog.db", d->opt.data_dir);
    if (stat(path, &st) == 0)
        bytes += (uint64_t)st.st_size;
    store_last_error(d->store, err, sizeof(err));
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    msgpack_pack_map(&pk, 14);
    pack_kv_str(&pk, "version", TRACECTL_VERSION);
    pack_kv_i64(&pk, "pid", (int64_t)getpid());
    pack_kv_u64(&pk, "uptime_ns", (uv_now(d->loop) - d->started_ms) * 1000000ull);
    pack_kv_u64(&pk, "connections", d->n_conns);
    pack_kv_u64(&pk, "sessions", n_sessions);
    pack_kv_u64(&pk, "live_sessions", d->reg.n_live);
    pack_kv_u64(&pk, "entries", store_stored(d->store));
    pack_key(&pk, "entries_per_s");
    msgpack_pack_double(&pk, status_rate(d));
    pack_kv_u64(&pk, "queue_depth", store_queue_jobs(d->store));
    pack_kv_u64(&pk, "queued_entries", store_queued(d->store));
    pack_kv_u64(&pk, "failed_entries", store_failed(d->store));
    pack_kv_u64(&pk, "bytes", bytes);
    pack_kv_str(&pk, "data_dir", d->opt.data_dir);
    pack_kv_str(&pk, "last_error", err[0] ? err : NULL);
    conn_send(c, &sb);
}

/* ---- report -------------------------------------------------------------- */

static void report_work_cb(uv_work_t *req)
{
    struct report_work *w = (struct report_work *)req;
    struct report r = {0};
    msgpack_packer pk;

    msgpack_sbuffer_init(&w->out);
    w->rc = query_report(w->path, &w->params, &r, w->err, sizeof(w->err));
    if (w->rc == 0) {
        r.id = w->id;
        r.name = w->name;
        r.state = w->state;
        msgpack_packer_init(&pk, &w->out, msgpack_sbuffer_write);
        proto_pack_ok_header(&pk);
        w->rc = report_pack(&pk, &r);
        r.name = r.state = NULL; /* owned by the work item */
    }
    report_free(&r);
}

static void report_after_cb(uv_work_t *req, int status)
{
    struct report_work *w = (struct report_work *)req;
    struct conn *c = w->c;

    if (!c->closed) {
        if (status == 0 && w->rc == 0) {
            conn_send(c, &w->out);
        } else {
            log_warn("report of session %lld failed: %s", (long long)w->id, w->err);
            reply_error(c, PROTO_E_INTERNAL, w->err[0] ? w->err : "the report failed");
        }
        conn_resume(c);
    }
    msgpack_sbuffer_destroy(&w->out);
    free(w->name);
    free(w->state);
    free(w);
    conn_unref(c);
}

static struct session *control_session(struct conn *c, const struct proto_request *req)
{
    /* Another user's session is reported as absent: its existence is not theirs to know. */
    struct session *s = session_find(&c->d->reg, &req->session, conn_view_uid(c));
    char msg[PROTO_MAX_SESSION + 64];

    if (s != NULL)
        return s;
    if (req->session.name != NULL)
        snprintf(msg, sizeof(msg), "no session named \"%s\"", req->session.name);
    else
        snprintf(msg, sizeof(msg), "no session with id %lld", (long long)req->session.id);
    reply_error(c, PROTO_E_NO_SESSION, msg);
    return NULL;
}

static void control_report(struct conn *c, const struct proto_request *req)
{
    struct session *s = control_session(c, req);
    struct report_work *w;

    if (s == NULL)
        return;
    w = calloc(1, sizeof(*w));
    if (w == NULL || (w->name = strdup(s->name)) == NULL ||
        (w->state = strdup(s->live ? "live" : "ended")) == NULL) {
        if (w != NULL)
            free(w->name);
        free(w);
        reply_error(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    w->c = c;
    w->id = s->id;
    w->params.top = req->top;
    w->params.comm_min_ratio = req->comm_min_ratio;
    w->params.mem_threshold = req->mem_threshold;
    store_session_path(c->d->store, s->id, w->path, sizeof(w->path));
    c->refs++;
    c->busy = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (uv_queue_work(c->d->loop, &w->req, report_work_cb, report_after_cb) < 0) {
        c->refs--;
        free(w->name);
        free(w->state);
        free(w);
        reply_error(c, PROTO_E_INTERNAL, "cannot queue the report");
        conn_resume(c);
    }
}

static void control_delete(struct conn *c, const struct proto_request *req)
{
    struct session *s = control_session(c, req);
    struct store_job *job;

    if (s == NULL)
        return;
    if (s->live) {
        reply_error(c, PROTO_E_LIVE, "the session is live: it can be deleted once it has ended");
        return;
    }
    job = store_job_new(STORE_DELETE, s->id);
    if (job == NULL) {
        reply_error(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    job->cookie = c;
    c->refs++;
    c->busy = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    store_enqueue(c->d->store, job);
}

void control_delete_done(struct store_job *job)
{
    struct conn *c = job->cookie;
    struct proto_sessref ref = {.id = job->session_id};
    struct session *s = session_find(&c->d->reg, &ref, -1);
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (job->rc == 0 && s != NULL)
        session_remove(&c->d->reg, s);
    if (!c->closed) {
        if (job->rc == 0) {
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            proto_pack_ok_header(&pk);
            msgpack_pack_map(&pk, 1);
            pack_kv_i64(&pk, "deleted", job->session_id);
            conn_send(c, &sb);
        } else {
            reply_error(c, PROTO_E_INTERNAL, "the session's files could not be removed");
        }
        conn_resume(c);
    }
    conn_unref(c);
    store_job_free(job);
}

void control_handle(struct conn *c, struct proto_msg *m)
{
    switch (m->type) {
    case PROTO_SESSIONS:
        control_sessions(c);
        break;
    case PROTO_STATUS:
        control_status(c);
        break;
    case PROTO_REPORT:
        control_report(c, &m->u.req);
        break;
    case PROTO_DELETE:
        control_delete(c, &m->u.req);
        break;
    case PROTO_EXPORT: {
        struct session *s = control_session(c, &m->u.req);
        if (s != NULL)
            export_start(c, s, &m->u.req);
        break;
    }
    default:
        break;
    }
}
