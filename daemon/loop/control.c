/*
 * control.c — answers control requests: sessions, status, report, delete,
 * export (export.c) and live (live.c).
 *
 * `sessions` and `status` are answered on the loop thread from memory (file
 * sizes included: the store's writer publishes them, store_session_bytes).
 * `report` runs query_report() (with "late": query_late()) on libuv's thread
 * pool and packs the reply there too; `delete` goes through the store, which
 * owns the files. While a request is in flight its connection reads no
 * further requests, so replies come back in request order.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "classify.h"
#include "export.h"
#include "live.h"
#include "log.h"
#include "peerhome.h"
#include "query.h"
#include "sink.h"

/*
 * How long a report or export of a session that just ended waits for the writer to apply
 * its end (store_wait_ended) before it reads what is committed anyway.
 */
#define CONTROL_END_WAIT_MS 30000

struct report_work {
    uv_work_t req;
    struct conn *c;
    struct report_params params;
    struct proto_analysis analysis; /* owns its device and category */
    int64_t id;
    struct store *store; /* for store_wait_ended: the worker reads an ended session whole */
    char *name, *state;
    int interrupted;  /* enum store_cut */
    int64_t ended_ns; /* 0 while live */
    char path[PATH_MAX];
    int rc;
    bool heavy;                 /* counted in d->n_heavy */
    bool late;                  /* "late": true, only the late figures (query_late) */
    atomic_uint_fast64_t steps; /* what it scanned: charged to its user (users.h) */
    char err[256];
    msgpack_sbuffer out;
    /* a home's session that spans hosts: the members' parts (peerhome_collect); path "" when
     * only members hold it. With "late", only merge.late: the late map across hosts */
    struct peermerge merge;
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

/* The name of uid ("uid N" when the user database has none), for admins' `sessions`. */
static void owner_name(int64_t uid, char *buf, size_t size)
{
    struct passwd pw, *res = NULL;
    char tmp[4096];

    if (uid >= 0 && getpwuid_r((uid_t)uid, &pw, tmp, sizeof(tmp), &res) == 0 && res != NULL)
        snprintf(buf, size, "%s", pw.pw_name);
    else if (uid >= 0)
        snprintf(buf, size, "uid %lld", (long long)uid);
    else
        snprintf(buf, size, "unknown");
}

/* owner: the session's user name, added for an admin's view under --system; or NULL. */
static void pack_session(struct daemon *d, msgpack_packer *pk, const struct session *s,
                         const char *owner)
{
    const char *why = session_cut_reason(s->interrupted);

    msgpack_pack_map(pk, 15 + (owner != NULL) + (d->peer_home != NULL));
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
    pack_key(pk, "interrupted_reason");
    if (why != NULL)
        proto_pack_str(pk, why);
    else
        msgpack_pack_nil(pk);
    pack_kv_i64(pk, "uid", s->uid);
    pack_kv_u64(pk, "failed", s->failed);
    pack_kv_u64(pk, "refused_processes", s->refused_processes);
    if (owner != NULL)
        pack_kv_str(pk, "owner", owner);
    /* a home: the hosts its report of this session merges (itself and the members) */
    if (d->peer_home != NULL)
        pack_kv_u64(
            pk, "hosts",
            1 + peerhome_hosts(d->peer_home, s->name, s->started_ns, s->live ? 0 : s->ended_ns));
}

static void control_sessions(struct conn *c)
{
    struct daemon *d = c->d;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int64_t uid = conn_view_uid(c);
    bool owner = d->opt.system && uid < 0;
    int64_t owner_uid = -2; /* users are few: the last lookup is kept */
    char name[256];
    size_t n = 0;

    for (struct session *s = d->reg.list; s != NULL; s = s->next)
        n += uid < 0 || s->uid == uid;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    msgpack_pack_array(&pk, n);
    for (struct session *s = d->reg.list; s != NULL; s = s->next) {
        if (uid >= 0 && s->uid != uid)
            continue;
        if (owner && s->uid != owner_uid) {
            owner_name(s->uid, name, sizeof(name));
            owner_uid = s->uid;
        }
        pack_session(d, &pk, s, owner ? name : NULL);
    }
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

/*
 * Under --system a user who is not an admin sees their own figures:
 * connections, sessions, live sessions, entries (received into their
 * sessions) and bytes of their own; the daemon-wide ones (rate, queue,
 * failures, last error) are nil. `scope` says which: "daemon" or "user".
 */
/*
 * status's deferred_writes: nil, or what waits for disk space (start-up
 * writes a full disk refused, store_recover.h), for everyone to see: a user
 * whose session is listed ended before its row says so should know why.
 */
static void control_pack_deferred(msgpack_packer *pk, const struct daemon *d)
{
    uint64_t n = store_deferred(d->store);
    char msg[200];

    snprintf(msg, sizeof(msg),
             "disk full: the catalog rows of %llu session(s) left live by the last run wait"
             " for space (listed ended and interrupted; retried every second)",
             (unsigned long long)n);
    pack_kv_str(pk, "deferred_writes", n > 0 ? msg : NULL);
}

/*
 * The ClickHouse sink's figures (sink.h), only when it is on: its state, the
 * committed entries not yet in ClickHouse, what it sent since the start, its
 * last error and when, and the sessions not wholly sent. Daemon-wide, so nil
 * for a user's scope but the state.
 */
static void control_pack_sink(msgpack_packer *pk, const struct daemon *d, bool all)
{
    struct sink_status st;

    sink_status(d->sink, &st);
    pack_kv_str(pk, "clickhouse", st.state);
    pack_kv_str(pk, "clickhouse_url", all ? st.url : NULL);
    pack_key(pk, "clickhouse_backlog");
    if (all)
        msgpack_pack_uint64(pk, st.backlog);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, "clickhouse_sent");
    if (all)
        msgpack_pack_uint64(pk, st.sent);
    else
        msgpack_pack_nil(pk);
    pack_kv_str(pk, "clickhouse_last_error", all && st.last_error[0] ? st.last_error : NULL);
    pack_key(pk, "clickhouse_last_error_ns");
    if (all && st.last_error_ns > 0)
        msgpack_pack_uint64(pk, st.last_error_ns);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, "clickhouse_sessions");
    if (all)
        msgpack_pack_uint64(pk, st.sessions);
    else
        msgpack_pack_nil(pk);
}

static void control_status(struct conn *c)
{
    struct daemon *d = c->d;
    int64_t uid = conn_view_uid(c);
    bool all = uid < 0;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t bytes = 0, n_sessions = 0, n_live = 0, entries = 0, n_conns = 0;
    char err[256];

    for (struct session *s = d->reg.list; s != NULL; s = s->next) {
        if (!all && s->uid != uid)
            continue;
        bytes += store_session_bytes(d->store, s->id);
        n_sessions++;
        n_live += s->live;
        entries += s->entries;
    }
    for (struct conn *k = d->conns; k != NULL && !all; k = k->next)
        n_conns += k->uid == uid;
    if (all)
        bytes += store_catalog_bytes(d->store);
    store_last_error(d->store, err, sizeof(err));
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    msgpack_pack_map(&pk, d->sink != NULL ? 24 : 17);
    pack_kv_str(&pk, "version", TRACECTL_VERSION);
    pack_kv_i64(&pk, "pid", (int64_t)getpid());
    pack_kv_u64(&pk, "uptime_ns", (uv_now(d->loop) - d->started_ms) * 1000000ull);
    pack_kv_u64(&pk, "connections", all ? d->n_conns : n_conns);
    pack_kv_u64(&pk, "sessions", n_sessions);
    pack_kv_u64(&pk, "live_sessions", all ? d->reg.n_live : n_live);
    pack_kv_u64(&pk, "entries", all ? store_stored(d->store) : entries);
    pack_key(&pk, "entries_per_s");
    if (all) {
        msgpack_pack_double(&pk, status_rate(d));
        pack_kv_u64(&pk, "queue_depth", store_queue_jobs(d->store));
        pack_kv_u64(&pk, "queued_entries", store_queued(d->store));
        pack_kv_u64(&pk, "failed_entries", store_failed(d->store));
    } else {
        msgpack_pack_nil(&pk);
        pack_kv_str(&pk, "queue_depth", NULL);
        pack_kv_str(&pk, "queued_entries", NULL);
        pack_kv_str(&pk, "failed_entries", NULL);
    }
    pack_kv_u64(&pk, "bytes", bytes);
    pack_kv_str(&pk, "data_dir", d->opt.data_dir);
    pack_kv_str(&pk, "last_error", all && err[0] ? err : NULL);
    pack_kv_u64(&pk, "orphans", store_orphans(d->store));
    control_pack_deferred(&pk, d);
    pack_kv_str(&pk, "scope", all ? "daemon" : "user");
    if (d->sink != NULL)
        control_pack_sink(&pk, d, all);
    conn_send(c, &sb);
}

/* ---- report -------------------------------------------------------------- */

/*
 * The reply to a report with "late": true: {"session": {id, name, state},
 * "late": {...}} (PROTOCOL.md Part 3, "report option late").
 */
static void report_late_cb(struct report_work *w)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, &w->out, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    /* a home whose members sent parts of the session adds their ranks (member_ranks) */
    msgpack_pack_map(&pk, w->merge.n_parts > 0 ? 3 : 2);
    pack_key(&pk, "session");
    msgpack_pack_map(&pk, 3);
    pack_kv_i64(&pk, "id", w->id);
    pack_kv_str(&pk, "name", w->name);
    pack_kv_str(&pk, "state", w->state);
    pack_key(&pk, "late");
    /* a home with the session's figures across hosts gives those (peerhome_late_map) */
    if (w->merge.late != NULL)
        w->rc = pk.callback(pk.data, w->merge.late, w->merge.late_len) ? -ENOMEM : 0;
    else
        w->rc = query_late(w->path, &w->analysis, &pk, w->err, sizeof(w->err));
    if (w->rc == 0 && w->merge.n_parts > 0) {
        pack_key(&pk, "member_ranks");
        w->rc = peermerge_member_ranks(&pk, &w->merge);
        if (w->rc < 0)
            snprintf(w->err, sizeof(w->err), "out of memory");
    }
}

/* A string; nonzero when the packer's buffer could not grow. */
static int control_pack_str(msgpack_packer *pk, const char *v)
{
    size_t n = strlen(v);

    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, v, n);
}

/*
 * A filtered report at a home, of a session that spans hosts: the filters apply to this
 * host's entries only (members send aggregates, not per-rank or per-step ones), so the report
 * says so: "filter_hosts": {"counted": [this host], "left_out": [each member host],
 * "ranks_rows": [the member hosts whose rows of the filter's ranks the analysis's `ranks`
 * lists: from[i] for member i]} (proto/PROTOCOL.md). 0 or -ENOMEM.
 */
static int report_filter_hosts(struct report *r, const struct peermerge *m, const bool *from)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint32_t n_from = 0;
    int bad;

    for (size_t i = 0; i < m->n_parts; i++)
        n_from += from[i];
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    bad = control_pack_str(&pk, "filter_hosts") | msgpack_pack_map(&pk, 3) |
          control_pack_str(&pk, "counted") | msgpack_pack_array(&pk, 1) |
          control_pack_str(&pk, m->home_host) | control_pack_str(&pk, "left_out") |
          msgpack_pack_array(&pk, (uint32_t)m->n_parts);
    for (size_t i = 0; i < m->n_parts; i++)
        bad |= control_pack_str(&pk, m->parts[i].host);
    bad |= control_pack_str(&pk, "ranks_rows") | msgpack_pack_array(&pk, n_from);
    for (size_t i = 0; i < m->n_parts; i++)
        if (from[i])
            bad |= control_pack_str(&pk, m->parts[i].host);
    if (bad != 0) {
        msgpack_sbuffer_destroy(&sb);
        return -ENOMEM;
    }
    r->filter_hosts = sb.data;
    r->filter_hosts_len = sb.size;
    return 0;
}

/*
 * A filtered report at a home, of a session members hold parts of: filtered by ranks alone,
 * its `ranks` section gains the members' rows of those ranks (from their snapshots: whole
 * sessions, which a step, device or category filter would not match, so those get none);
 * the rest stays this host's entries, and filter_hosts says so.
 */
static void report_filtered_at_home(struct report_work *w, struct report *r)
{
    const struct proto_analysis *an = &w->analysis;
    bool *from = calloc(w->merge.n_parts, sizeof(*from));

    if (from == NULL) {
        w->rc = -ENOMEM;
    } else if (an->n_ranks > 0 && !an->steps && an->device == NULL && an->category == NULL) {
        w->rc = peermerge_filtered_ranks(r, &w->merge, an->ranks, an->n_ranks, from);
        if (w->rc == -EPROTO)
            snprintf(w->err, sizeof(w->err),
                     "report: the members' ranks: the analysis is "
                     "malformed");
    }
    if (w->rc == 0 && report_filter_hosts(r, &w->merge, from) < 0)
        w->rc = -ENOMEM;
    if (w->rc == -ENOMEM)
        snprintf(w->err, sizeof(w->err), "out of memory");
    free(from);
}

static void report_work_cb(uv_work_t *req)
{
    struct report_work *w = (struct report_work *)req;
    struct report r = {0};
    msgpack_packer pk;

    msgpack_sbuffer_init(&w->out);
    if (w->path[0] != '\0')
        store_wait_ended(w->store, w->id, CONTROL_END_WAIT_MS);
    if (w->late) {
        report_late_cb(w);
        return;
    }
    if (w->path[0] != '\0')
        w->rc = query_report(w->path, &w->params, &r, w->err, sizeof(w->err));
    /* Merged with the members' parts, unless filtered (a filtered report shows this host's). */
    if (w->rc == 0 && w->merge.home_host != NULL && r.filter == NULL)
        w->rc = peermerge_report(&r, &w->merge, w->path[0] ? w->path : NULL, &w->params, w->err,
                                 sizeof(w->err));
    if (w->rc == 0 && r.filter != NULL && w->merge.home_host != NULL && w->merge.n_parts > 0)
        report_filtered_at_home(w, &r);
    if (w->rc == 0) {
        r.id = w->id;
        r.name = w->name;
        r.state = w->state;
        r.interrupted = w->interrupted;
        r.ended_ns = w->ended_ns;
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
    struct daemon *d = c->d;

    if (!c->closed) {
        if (status == 0 && w->rc == 0) {
            conn_send(c, &w->out);
        } else {
            log_warn("report of session %lld failed: %s", (long long)w->id, w->err);
            reply_error(c, PROTO_E_INTERNAL, w->err[0] ? w->err : "the report failed");
        }
        conn_resume(c);
    }
    if (w->heavy)
        d->n_heavy--;
    c->user->reports--;
    c->user->heavy -= w->heavy;
    c->user->cost += atomic_load(&w->steps);
    /* Measured heavy: the user's next reports on this session take the heavy lane. */
    if (!w->late && atomic_load(&w->steps) / USERS_HEAVY_STEPS >= d->opt.heavy_entries)
        c->user->heavy_id = w->id;
    else if (c->user->heavy_id == w->id)
        c->user->heavy_id = -1;
    log_debug("report of session %lld: %llu steps", (long long)w->id,
              (unsigned long long)atomic_load(&w->steps));
    msgpack_sbuffer_destroy(&w->out);
    peermerge_free(&w->merge);
    free(w->analysis.device);
    free(w->analysis.category);
    free(w->name);
    free(w->state);
    free(w);
    d->n_reports--;
    conn_unref(c);
    conn_report_done(d);
}

static struct session *control_session(struct conn *c, const struct proto_request *req)
{
    /* Another user's session is reported as absent: its existence is not theirs to know.
     * An admin naming a session gets their own of that name first, then anyone's. */
    struct session *s = NULL;
    char msg[PROTO_MAX_SESSION + 64];

    if (req->session.name != NULL && conn_view_uid(c) < 0 && c->uid >= 0)
        s = session_find(&c->d->reg, &req->session, c->uid);
    if (s == NULL)
        s = session_find(&c->d->reg, &req->session, conn_view_uid(c));
    if (s != NULL)
        return s;
    if (req->session.name != NULL)
        snprintf(msg, sizeof(msg), "no session named \"%s\"", req->session.name);
    else
        snprintf(msg, sizeof(msg), "no session with id %lld", (long long)req->session.id);
    reply_error(c, PROTO_E_NO_SESSION, msg);
    return NULL;
}

/* See control_report_heavy. The late figures read the rank aggregates only: never heavy. */
static bool report_heavy(const struct conn *c, const struct session *s, bool late)
{
    return !late && (s->entries >= c->d->opt.heavy_entries || c->user->heavy_id == s->id);
}

bool control_report_heavy(struct conn *c, const struct proto_request *req)
{
    struct session *s = NULL;

    if (req->session.name != NULL && conn_view_uid(c) < 0 && c->uid >= 0)
        s = session_find(&c->d->reg, &req->session, c->uid);
    if (s == NULL)
        s = session_find(&c->d->reg, &req->session, conn_view_uid(c));
    return s != NULL && report_heavy(c, s, req->late);
}

/*
 * A session of this home's that only members hold (no local one of that
 * name): a stand-in for the report, with no file. NULL when there is none.
 */
static struct session *control_peer_session(struct conn *c, const struct proto_request *req,
                                            struct session *tmp)
{
    struct peerhome *h = c->d->peer_home;

    if (h == NULL || req->session.name == NULL || !peerhome_has(h, req->session.name) ||
        session_find(&c->d->reg, &req->session, conn_view_uid(c)) != NULL)
        return NULL;
    memset(tmp, 0, sizeof(*tmp));
    tmp->id = -1;
    tmp->name = req->session.name;
    tmp->live = strcmp(peerhome_state(h, req->session.name), "live") == 0;
    return tmp;
}

static void control_report(struct conn *c, const struct proto_request *req)
{
    struct session peer_only, *s = control_peer_session(c, req, &peer_only);
    struct report_work *w;

    if (s == NULL)
        s = control_session(c, req);
    if (s == NULL)
        return;
    /* Filters cover this host's own entries (members send aggregates): of a session only
     * members hold there are none, and the merged report would ignore the filters. */
    if (s == &peer_only && !req->late &&
        (req->analysis.n_ranks > 0 || req->analysis.steps || req->analysis.device != NULL ||
         req->analysis.category != NULL)) {
        char msg[PROTO_MAX_SESSION + 200];

        snprintf(msg, sizeof(msg),
                 "session \"%s\" has no entries on this host, only its members have: a "
                 "filtered report covers one host's entries; ask the members' tracectl",
                 s->name);
        reply_error(c, PROTO_E_NO_SESSION, msg);
        return;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL || (w->name = strdup(s->name)) == NULL ||
        (w->state = strdup(s->live ? "live" : "ended")) == NULL ||
        (c->d->peer_home != NULL && !req->late &&
         peerhome_collect(c->d->peer_home, s->name, s->live ? "live" : "ended",
                          s == &peer_only ? -1 : s->started_ns, s->live ? 0 : s->ended_ns,
                          &w->merge) < 0) ||
        (c->d->peer_home != NULL && req->late &&
         (peerhome_collect(c->d->peer_home, s->name, s->live ? "live" : "ended",
                           s == &peer_only ? -1 : s->started_ns, s->live ? 0 : s->ended_ns,
                           &w->merge) < 0 ||
          peerhome_late_map(c->d->peer_home, s->name, &w->merge) < 0))) {
        if (w != NULL) {
            free(w->name);
            free(w->state);
        }
        free(w);
        reply_error(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    w->c = c;
    w->id = s->id;
    w->store = c->d->store;
    w->interrupted = s->interrupted;
    w->ended_ns = s->live ? 0 : s->ended_ns;
    w->params.top = req->top;
    w->params.comm_min_ratio = req->comm_min_ratio;
    w->params.mem_threshold = req->mem_threshold;
    w->params.ops_limit = req->ops_limit;
    w->params.ops_offset = req->ops_offset;
    w->analysis = req->analysis;
    w->analysis.device = w->analysis.category = NULL;
    if ((req->analysis.device != NULL &&
         (w->analysis.device = strdup(req->analysis.device)) == NULL) ||
        (req->analysis.category != NULL &&
         (w->analysis.category = strdup(req->analysis.category)) == NULL)) {
        free(w->analysis.device);
        peermerge_free(&w->merge);
        free(w->name);
        free(w->state);
        free(w);
        reply_error(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    w->params.analysis = &w->analysis;
    w->params.cancel = &c->d->cancel;
    w->params.steps = &w->steps;
    if (s != &peer_only)
        store_session_path(c->d->store, s->id, w->path, sizeof(w->path));
    c->refs++;
    c->busy = true;
    c->d->n_reports++;
    w->late = req->late;
    w->heavy = report_heavy(c, s, w->late);
    c->d->n_heavy += w->heavy;
    c->user->reports++;
    c->user->heavy += w->heavy;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (uv_queue_work(c->d->loop, &w->req, report_work_cb, report_after_cb) < 0) {
        c->d->n_reports--;
        c->d->n_heavy -= w->heavy;
        c->user->reports--;
        c->user->heavy -= w->heavy;
        c->refs--;
        free(w->analysis.device);
        free(w->analysis.category);
        peermerge_free(&w->merge);
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

/* ---- classify ------------------------------------------------------------ */

struct classify_work {
    uv_work_t req;
    struct conn *c;
    struct classify_rules rules;
    int64_t id;
    char path[PATH_MAX];
    uint64_t ops, changed;
    int rc;
    char err[256];
};

static void classify_work_cb(uv_work_t *req)
{
    struct classify_work *w = (struct classify_work *)req;

    w->rc = classify_session(w->path, &w->rules, &w->ops, &w->changed, w->err, sizeof(w->err));
}

static void classify_after_cb(uv_work_t *req, int status)
{
    struct classify_work *w = (struct classify_work *)req;
    struct conn *c = w->c;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (!c->closed) {
        if (status == 0 && w->rc == 0) {
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            proto_pack_ok_header(&pk);
            msgpack_pack_map(&pk, 3);
            pack_kv_i64(&pk, "session", w->id);
            pack_kv_i64(&pk, "ops", (int64_t)w->ops);
            pack_kv_i64(&pk, "changed", (int64_t)w->changed);
            conn_send(c, &sb);
        } else {
            log_warn("classify of session %lld failed: %s", (long long)w->id, w->err);
            reply_error(c, PROTO_E_INTERNAL, w->err[0] ? w->err : "classify failed");
        }
        conn_resume(c);
    }
    classify_rules_deinit(&w->rules);
    free(w);
    conn_unref(c);
}

static void control_classify(struct conn *c, const struct proto_request *req)
{
    struct session *s = control_session(c, req);
    struct classify_work *w;
    char err[256];

    if (s == NULL)
        return;
    if (s->live) {
        reply_error(c, PROTO_E_LIVE,
                    "the session is live: it can be re-classified once it "
                    "has ended");
        return;
    }
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        reply_error(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (classify_rules_init(&w->rules, req->re_comm, req->re_compute, req->re_memory, err,
                            sizeof(err)) < 0) {
        free(w);
        reply_error(c, PROTO_E_MESSAGE, err);
        return;
    }
    w->c = c;
    w->id = s->id;
    store_session_path(c->d->store, s->id, w->path, sizeof(w->path));
    c->refs++;
    c->busy = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (uv_queue_work(c->d->loop, &w->req, classify_work_cb, classify_after_cb) < 0) {
        c->refs--;
        classify_rules_deinit(&w->rules);
        free(w);
        reply_error(c, PROTO_E_INTERNAL, "cannot queue the classify");
        conn_resume(c);
    }
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
    case PROTO_CLASSIFY:
        control_classify(c, &m->u.req);
        break;
    case PROTO_EXPORT: {
        struct session *s = control_session(c, &m->u.req);
        if (s != NULL)
            export_start(c, s, &m->u.req);
        break;
    }
    case PROTO_LIVE: {
        struct session *s = control_session(c, &m->u.req);
        if (s != NULL)
            live_reply(c, s);
        break;
    }
    default:
        break;
    }
}
