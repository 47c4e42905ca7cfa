/* conn.c — one client connection; see conn.h. */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "batchpool.h"
#include "conn.h"
#include "control.h"
#include "log.h"
#include "peerarr.h"
#include "peerhome.h"
#include "peermember.h"

/* Bytes asked of each read: small, so 1,000 stalled connections hold ~16 MiB at most. */
#define READ_SIZE (16u << 10)

struct conn_write {
    uv_write_t req;
    char *data;
    size_t len;
    conn_sent_cb done; /* conn_send_then's, or NULL */
    void *arg;
};

static void conn_update_reading(struct conn *c);
static void conn_process(struct conn *c);

/* ---- lifecycle ----------------------------------------------------------- */

static void conn_free(struct conn *c)
{
    proto_reader_deinit(&c->reader);
    u32map_deinit(&c->ops);
    strmap_deinit(&c->meta_keys);
    store_budget_unref(c->budget);
    if (c->holding)
        proto_msg_free(&c->held);
    users_put(c->d, c->user);
    free(c);
}

static void conn_close_cb(uv_handle_t *handle)
{
    struct conn *c = (struct conn *)handle;

    c->pipe.data = NULL; /* marks "the handle is closed" for conn_unref */
    if (c->refs == 0)
        conn_free(c);
}

void conn_unref(struct conn *c)
{
    if (--c->refs == 0 && c->closed && c->pipe.data == NULL)
        conn_free(c);
}

/*
 * A connection that ended without bye: the acks in flight were never written,
 * so the last the process had is acked_sent (its last counters otherwise).
 */
static void conn_counters_end(struct conn *c)
{
    struct proto_counters k = c->counters;

    if (!k.given)
        return;
    k.acked = c->acked_sent;
    session_counters(&c->d->reg, c->session, c->process_id, &k, false, NULL);
}

void conn_close(struct conn *c)
{
    struct daemon *d = c->d;

    if (c->closed)
        return;
    c->closed = true;
    if (c->user != NULL)
        users_unwait(c);
    if (c->producer && c->session != NULL) {
        /* Everything well-formed it sent is queued; record that it left without bye, or that
         * the daemon's stop cut it off (processes.bye 2: not the process's doing). */
        conn_counters_end(c);
        session_leave(&d->reg, c->session, c->process_id, d->reg.stopping ? 2 : 0, 0, c->refused);
        c->session = NULL;
    }
    if (c->paused)
        d->n_paused--;
    if (c->producer)
        d->n_producers--;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        d->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    d->n_conns--;
    uv_close((uv_handle_t *)&c->pipe, conn_close_cb);
    if (c->room != NULL) { /* a stream waiting for room ends now (conn_wait_room) */
        conn_room_cb room = c->room;

        c->room = NULL;
        room(c, c->room_arg);
    }
}

/*
 * Whether c may add to the unread replies, with everything already queued
 * below `div`-th of the bounds (MEMORY in conn.h): its own, everyone's, and
 * under --system its user's share of everyone's (half, as for connections),
 * so that one user's stalled peers cannot make the others wait for the
 * --reply-timeout.
 */
bool conn_may_send(const struct conn *c, unsigned div)
{
    const struct daemon *d = c->d;

    if (c->unwritten > CONN_WRITE_HIGH / div)
        return false;
    if (d->unwritten <= DAEMON_WRITE_HIGH / (2 * div))
        return true;
    if (d->opt.system && !c->admin && c->user->unwritten > DAEMON_WRITE_HIGH / (2 * div))
        return false;
    return d->unwritten <= DAEMON_WRITE_HIGH / div;
}

/* A throttled connection may read requests again once its and everyone's replies are read. */
static void conn_unthrottle(struct conn *c)
{
    conn_room_cb room = c->room;

    if ((!c->throttled && room == NULL) || c->closed || !conn_may_send(c, 2))
        return;
    if (room != NULL) { /* a stream (export) waiting to send its next part */
        c->room = NULL;
        room(c, c->room_arg);
        return;
    }
    c->throttled = false;
    conn_process(c);
    conn_update_reading(c);
}

static void conn_write_cb(uv_write_t *req, int status)
{
    struct conn_write *w = (struct conn_write *)req;
    struct conn *c = (struct conn *)req->handle;
    struct daemon *d = c->d;
    bool was_high = d->unwritten > DAEMON_WRITE_HIGH / 4;

    c->unwritten -= w->len;
    c->user->unwritten -= w->len;
    d->unwritten -= w->len;
    d->trim_bytes += w->len;
    free(w->data);
    if (w->done != NULL)
        w->done(c, w->arg, status);
    free(w);
    /* a failed write shows up as a read error or EOF too */
    if (was_high) {
        /* Everyone's replies, or a user's share, may fit again: wake whoever waited on them. */
        for (struct conn *o = d->conns, *next; o != NULL; o = next) {
            next = o->next;
            conn_unthrottle(o);
        }
        users_schedule(d); /* a report may have waited for room too */
    } else {
        conn_unthrottle(c);
    }
}

void conn_send(struct conn *c, msgpack_sbuffer *sb)
{
    (void)conn_send_then(c, sb, NULL, NULL);
}

int conn_send_then(struct conn *c, msgpack_sbuffer *sb, conn_sent_cb done, void *arg)
{
    struct conn_write *w;
    uv_buf_t buf;

    if (c->closed || (w = malloc(sizeof(*w))) == NULL) {
        msgpack_sbuffer_destroy(sb);
        return c->closed ? -ECANCELED : -ENOMEM;
    }
    w->done = done;
    w->arg = arg;
    /* An sbuffer grows in 8 KiB steps: a small reply waiting in the queue
     * should not hold that much. */
    if (sb->alloc > sb->size + 1024) {
        char *p = realloc(sb->data, sb->size ? sb->size : 1);
        if (p != NULL)
            sb->data = p;
    }
    w->data = sb->data;
    w->len = sb->size;
    buf = uv_buf_init(sb->data, (unsigned)sb->size);
    sb->data = NULL;
    sb->size = sb->alloc = 0;
    if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, conn_write_cb) < 0) {
        free(w->data);
        free(w);
        conn_close(c);
        return -ECANCELED;
    }
    c->unwritten += w->len;
    c->user->unwritten += w->len;
    c->sent += w->len;
    c->d->unwritten += w->len;
    return 0;
}

void conn_wait_room(struct conn *c, conn_room_cb room, void *arg)
{
    c->room = room;
    c->room_arg = arg;
    conn_unthrottle(c);
}

static void conn_shutdown_cb(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;

    free(req);
    (void)status;
    conn_close(c);
}

void conn_fail(struct conn *c, const char *code, const char *message)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uv_shutdown_t *req;

    if (c->closed || c->failed)
        return;
    c->failed = true;
    log_info("connection (pid %lld): %s: %s", (long long)c->pid, code, message);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_error(&pk, code, message);
    conn_send(c, &sb);
    conn_update_reading(c);
    /* Shut down after the error is written, then close. */
    req = malloc(sizeof(*req));
    if (req == NULL || uv_shutdown(req, (uv_stream_t *)&c->pipe, conn_shutdown_cb) < 0) {
        free(req);
        conn_close(c);
        return;
    }
    req->data = c;
}

/* ---- producer messages --------------------------------------------------- */

static void conn_send_simple(struct conn *c, int (*pack)(msgpack_packer *, int64_t, int64_t),
                             int64_t a, int64_t b)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (pack(&pk, a, b) < 0) {
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    conn_send(c, &sb);
}

static int pack_ack(msgpack_packer *pk, int64_t seq, int64_t stored)
{
    return proto_pack_ack(pk, (uint64_t)seq, (uint64_t)stored);
}

/*
 * Shares under --system: one user who is not an admin may hold at most half
 * of --max-connections and of --max-live-sessions (at least 1), and such
 * users together leave the last eighth to admins (root, --admin-group).
 */
static size_t conn_user_share(size_t cap)
{
    return cap / 2 > 0 ? cap / 2 : 1;
}

static size_t conn_reserve(size_t cap)
{
    return cap / 8;
}

/* Logs a refused connection at most every 10 s, with the figures. */
static void conn_log_cap(struct daemon *d, const char *why)
{
    uint64_t now = uv_now(d->loop);

    if (d->cap_logged_ms != 0 && now - d->cap_logged_ms < 10000)
        return;
    d->cap_logged_ms = now;
    log_warn("refusing connections: %s (%zu open, --max-connections %zu)", why, d->n_conns,
             d->opt.max_conns);
}

/* Whether c (just accepted and counted) is over the connection caps: the reason, or NULL. */
static const char *conn_over_cap(struct conn *c, char *buf, size_t len)
{
    struct daemon *d = c->d;
    size_t mine = 0, others = 0;

    if (d->n_conns > d->opt.max_conns) {
        snprintf(buf, len, "too many connections: the daemon's limit (%zu) is reached",
                 d->opt.max_conns);
        return buf;
    }
    if (!d->opt.system || c->admin)
        return NULL;
    for (struct conn *k = d->conns; k != NULL; k = k->next) {
        mine += k->uid == c->uid;
        others += !k->admin;
    }
    if (mine > conn_user_share(d->opt.max_conns)) {
        snprintf(buf, len, "too many connections: %zu is your share of the daemon's %zu",
                 conn_user_share(d->opt.max_conns), d->opt.max_conns);
        return buf;
    }
    if (others > d->opt.max_conns - conn_reserve(d->opt.max_conns)) {
        snprintf(buf, len, "too many connections: the last %zu are kept for admins",
                 conn_reserve(d->opt.max_conns));
        return buf;
    }
    return NULL;
}

/* Limits on starting a session: NULL when it may start, else the reason. */
static const char *conn_session_limit(struct conn *c, const char *name, char *buf, size_t len)
{
    struct daemon *d = c->d;

    if (session_find_live(&d->reg, name, c->uid) != NULL)
        return NULL; /* joining is always allowed */
    if (d->opt.max_live && d->reg.n_live >= d->opt.max_live) {
        snprintf(buf, len, "too many live sessions (the daemon's limit is %zu)", d->opt.max_live);
        return buf;
    }
    if (d->opt.max_live && d->opt.system && !c->admin) {
        size_t mine = 0, others = 0; /* live sessions of this user, of users who are not admins */
        for (struct session *s = d->reg.list; s != NULL; s = s->next) {
            if (!s->live)
                continue;
            mine += s->uid == c->uid;
            others += s->uid != 0; /* admins' sessions are not told apart: root's are */
        }
        if (mine >= conn_user_share(d->opt.max_live)) {
            snprintf(buf, len, "you have %zu live sessions, your share of the daemon's %zu", mine,
                     d->opt.max_live);
            return buf;
        }
        if (others >= d->opt.max_live - conn_reserve(d->opt.max_live)) {
            snprintf(buf, len, "too many live sessions: the last %zu are kept for admins",
                     conn_reserve(d->opt.max_live));
            return buf;
        }
    }
    if (d->opt.max_user_bytes && session_user_cap_bytes(&d->reg, c->uid) >= d->opt.max_user_bytes) {
        snprintf(buf, len,
                 "your sessions use %llu bytes, at or over the limit of %llu: delete some"
                 " (tracectl rm)",
                 (unsigned long long)session_user_cap_bytes(&d->reg, c->uid),
                 (unsigned long long)d->opt.max_user_bytes);
        return buf;
    }
    return NULL;
}

/*
 * Records the keys of a metadata map. Returns 0, or -EPROTO (past CONN_MAX_META_KEYS) or -ENOMEM
 * once conn_fail() has closed the connection.
 */
static int conn_meta_keys(struct conn *c, const struct proto_kv *kv, size_t n)
{
    char msg[160];
    uint32_t v;

    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(kv[i].key);

        if (strmap_get(&c->meta_keys, kv[i].key, len, &v))
            continue;
        if (c->meta_keys.len >= CONN_MAX_META_KEYS) {
            snprintf(msg, sizeof(msg),
                     "a process may set at most %u distinct metadata keys (the daemon's limit)",
                     CONN_MAX_META_KEYS);
            conn_fail(c, PROTO_E_LIMIT, msg);
            return -EPROTO;
        }
        if (strmap_put(&c->meta_keys, kv[i].key, len, 1) < 0) {
            conn_fail(c, PROTO_E_INTERNAL, "out of memory");
            return -ENOMEM;
        }
    }
    return 0;
}

/* Queued work is over this connection's share: stop reading until the writer catches up. */
static bool conn_over_share(const struct conn *c, unsigned div)
{
    const struct daemon *d = c->d;
    uint64_t own = atomic_load(&c->budget->bytes), all = store_queued_bytes(d->store);
    uint64_t share = DAEMON_QUEUE_BYTES / (d->n_producers ? d->n_producers : 1);

    return own > CONN_QUEUE_BYTES / div || (all > DAEMON_QUEUE_BYTES / div && own > share / div);
}

static void conn_pause(struct conn *c)
{
    if (c->paused)
        return;
    c->paused = true;
    c->d->n_paused++;
    conn_update_reading(c);
}

static void conn_handle_hello(struct conn *c, struct proto_msg *m)
{
    struct proto_hello *h = &m->u.hello;
    const char *why;
    char buf[200];
    int err;

    if (c->producer) {
        conn_fail(c, PROTO_E_STATE, "a second hello on one connection");
        return;
    }
    if ((why = conn_session_limit(c, h->session, buf, sizeof(buf))) != NULL) {
        conn_fail(c, PROTO_E_LIMIT, why);
        return;
    }
    if (c->budget == NULL && (c->budget = store_budget_new()) == NULL) {
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (conn_meta_keys(c, h->meta, h->n_meta) < 0)
        return;
    c->session = session_join(&c->d->reg, h, c->uid, c->pid, &c->process_id, &c->hello_dev, &err);
    if (c->session == NULL) {
        if (err == -ENOSPC) {
            snprintf(buf, sizeof(buf), "the session has %u device names, the daemon's limit",
                     SESSION_MAX_DEVICES);
            conn_fail(c, PROTO_E_LIMIT, buf);
        } else if (err == -EUSERS) {
            snprintf(buf, sizeof(buf), "the session has %u processes, the daemon's limit",
                     SESSION_MAX_PROCESSES);
            conn_fail(c, PROTO_E_LIMIT, buf);
        } else {
            conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        }
        return;
    }
    peermember_route(c->d, c->session, h->home); /* its home, when it names one */
    c->producer = true;
    c->rank = h->rank;
    c->d->n_producers++;
    if (h->n_meta > 0) { /* hello's meta: the process's first metadata, stored after its row */
        struct store_job *job = store_job_new(STORE_META, c->session->id);

        if (job == NULL) {
            conn_fail(c, PROTO_E_INTERNAL, "out of memory");
            return;
        }
        store_job_charge(job, c->budget);
        job->u.meta.process_id = c->process_id;
        job->u.meta.kv = h->meta;
        job->u.meta.n = h->n_meta;
        h->meta = NULL;
        h->n_meta = 0;
        store_enqueue(c->d->store, job);
    }
    log_debug("session %lld: process %lld joined (rank %lld, pid %lld)", (long long)c->session->id,
              (long long)c->process_id, (long long)h->rank, (long long)c->pid);
    conn_send_simple(c, proto_pack_welcome, c->session->id, c->process_id);
}

enum conn_table { TABLE_OPS, TABLE_DEVICES, TABLE_SHAPES };

/* Fails the connection for a session_op/session_device/session_shape error. */
static void conn_table_fail(struct conn *c, int rc, enum conn_table t)
{
    char what[100], msg[200];

    if (rc != -ENOSPC) {
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (t == TABLE_OPS)
        snprintf(what, sizeof(what), "%u op names (or %u bytes of names)", SESSION_MAX_OPS,
                 SESSION_MAX_OP_BYTES);
    else if (t == TABLE_DEVICES)
        snprintf(what, sizeof(what), "%u device names", SESSION_MAX_DEVICES);
    else
        snprintf(what, sizeof(what), "%u distinct (out_shape, in_shapes) pairs (or %u bytes)",
                 SESSION_MAX_SHAPES, SESSION_MAX_SHAPE_BYTES);
    snprintf(msg, sizeof(msg), "session %lld is at the daemon's limit of %s per session",
             (long long)c->session->id, what);
    conn_fail(c, PROTO_E_LIMIT, msg);
}

/* Notes op gid as a synchronizing collective (peerarr.h) when its name says so. */
static void conn_mark_sync(struct session *s, uint32_t gid, const char *name)
{
    if (gid >= SESSION_MAX_OPS || !peerarr_sync_op(name))
        return;
    if (s->op_sync == NULL && (s->op_sync = calloc(SESSION_MAX_OPS / 8, 1)) == NULL)
        return; /* its arrivals are not queued */
    s->op_sync[gid / 8] |= (uint8_t)(1u << (gid % 8));
}

/*
 * The tap of collective arrivals (peerarr.h, THE MEMBER'S QUEUE): the
 * entries of b (op ids resolved) of synchronizing collectives with ext comm
 * and seq, from a process with a rank, into the session's queue (only a
 * session a member forwards has one), or on a home, into its table.
 */
static void conn_tap_arrivals(struct conn *c, const struct proto_batch *b)
{
    struct session *s = c->session;
    struct peerhome *home = c->d->peer_home;

    /* --home forwards every session (to it, or to the home a hello named): queue from the
     * first batch on, not from the tick that adopts the session */
    if (s->arrq == NULL && c->d->peer_member != NULL && s->op_sync != NULL)
        s->arrq = peerarr_queue_new();
    if ((s->arrq == NULL && home == NULL) || s->op_sync == NULL || c->rank < 0 ||
        c->rank > INT32_MAX)
        return;
    for (size_t i = 0; i < b->n; i++) {
        const struct proto_entry *e = &b->entries[i];
        struct proto_ext x;
        if (e->ext_len == 0 || e->op_id >= SESSION_MAX_OPS ||
            !(s->op_sync[e->op_id / 8] & (1u << (e->op_id % 8))) ||
            !proto_entry_ext(e, b->blob, &x) ||
            (x.has & (PROTO_EXT_COMM | PROTO_EXT_SEQ)) != (PROTO_EXT_COMM | PROTO_EXT_SEQ) ||
            e->start_ns > (uint64_t)PEERARR_TIME_MAX ||
            e->dur_ns > (uint64_t)PEERARR_TIME_MAX - e->start_ns)
            continue;
        struct peerarr_arrival a = {.comm = x.comm,
                                    .seq = x.seq,
                                    .rank = c->rank,
                                    .enter_ns = (int64_t)e->start_ns,
                                    .exit_ns = (int64_t)(e->start_ns + e->dur_ns),
                                    .bytes = e->mem_bytes,
                                    .comm_size = x.has & PROTO_EXT_COMM_SIZE ? x.comm_size : 0};
        if (a.comm_size != 0 && (uint64_t)a.rank >= a.comm_size)
            continue;
        if (s->arrq != NULL)
            peerarr_queue_push(s->arrq, &a);
        else
            peerhome_arrival(home, s->name, &a, s->world);
    }
}

static void conn_handle_ops(struct conn *c, struct proto_msg *m)
{
    char msg[160];
    int rc;

    for (size_t i = 0; i < m->u.ops.n; i++) {
        const struct proto_opdef *def = &m->u.ops.defs[i];
        uint32_t gid, old;
        bool known = u32map_get(&c->ops, def->id, &old);

        rc = session_op(&c->d->reg, c->session, def->name, def->category, c->budget, &gid);
        if (rc < 0) {
            conn_table_fail(c, rc, TABLE_OPS);
            return;
        }
        if (!known && c->ops.len >= CONN_MAX_OP_IDS) {
            snprintf(msg, sizeof(msg),
                     "a connection may define at most %u op ids (the daemon's limit)",
                     CONN_MAX_OP_IDS);
            conn_fail(c, PROTO_E_LIMIT, msg);
            return;
        }
        if (known && old != gid) {
            snprintf(msg, sizeof(msg), "op id %u is already defined with another name", def->id);
            conn_fail(c, PROTO_E_REDEFINED, msg);
            return;
        }
        if (u32map_put(&c->ops, def->id, gid) < 0) {
            conn_fail(c, PROTO_E_INTERNAL, "out of memory");
            return;
        }
        conn_mark_sync(c->session, gid, def->name);
    }
    if (conn_over_share(c, 1))
        conn_pause(c);
}

/*
 * An ext map's launcher is an op id of this connection, like the entry's own
 * op: it becomes the session's id in place (the ext map sits in the blob).
 * Returns false, touching nothing, when the id is not defined.
 */
static bool conn_resolve_launcher(struct conn *c, struct proto_batch *b, struct proto_entry *e,
                                  uint32_t *bad)
{
    struct proto_ext x;
    uint32_t gid;

    if (!proto_entry_ext(e, b->blob, &x) || !(x.has & PROTO_EXT_LAUNCHER))
        return true;
    if (!u32map_get(&c->ops, x.launcher, &gid)) {
        *bad = x.launcher;
        return false;
    }
    x.launcher = gid;
    memcpy(b->blob + e->ext_off, &x, sizeof(x)); /* the blob keeps no alignment */
    return true;
}

/*
 * Refuses the entries of b that name an op id (own or ext.launcher) this
 * connection has not defined, keeping the others in order (b->n shrinks;
 * the refused ones are counted in c->refused and the session's dropped, so
 * that the process's `dropped` says so), and writes what failed into msg.
 * Returns how many were refused. The caller stores what is left and closes
 * the connection with unknown_op, as v1 says of a message not of its form
 * (proto/PROTOCOL.md Part 2, "A bad entry in a batch").
 */
static size_t conn_refuse_unknown(struct conn *c, struct proto_batch *b, char *msg, size_t size)
{
    size_t kept = 0, n = b->n;
    uint32_t gid, bad = 0;

    for (size_t i = 0; i < n; i++) {
        struct proto_entry *e = &b->entries[i];
        bool ok = u32map_get(&c->ops, e->op_id, &gid);

        if (!ok)
            bad = e->op_id;
        if (ok && e->ext_len != 0) {
            struct proto_ext x; /* checked here, resolved by conn_resolve_batch */
            ok = !proto_entry_ext(e, b->blob, &x) || !(x.has & PROTO_EXT_LAUNCHER) ||
                 u32map_get(&c->ops, x.launcher, &gid);
            if (!ok)
                bad = x.launcher;
        }
        if (!ok) {
            if (kept == i) /* the first refused entry names the batch's failure */
                snprintf(msg, size,
                         "op id %u is not defined by ops (entry %zu); the batch's other entries "
                         "that name defined ops are stored",
                         bad, i);
            continue;
        }
        if (kept != i)
            b->entries[kept] = *e;
        kept++;
    }
    b->n = kept;
    c->refused += n - kept;
    c->session->dropped += n - kept;
    return n - kept;
}

/*
 * Maps op ids to session ids in place, device names to device ids and shape
 * pairs to shape ids (0: none) into the arrays. Every op id is defined
 * (conn_refuse_unknown ran). Returns 0, or a negative errno once the
 * connection has failed (a table's limit or memory: session_device()'s or
 * session_shape()'s error).
 */
static int conn_resolve_batch(struct conn *c, struct proto_batch *b, uint32_t *dev_ids,
                              uint32_t *shape_ids)
{
    /* the ops this batch met, by the low bits of their ids: most entries skip the u32map */
    struct {
        uint32_t op, gid;
    } seen[64];
    uint32_t bad;
    int rc;

    for (size_t k = 0; k < 64; k++)
        seen[k].op = k == 0 ? 1 : 0; /* an id that slot k never holds: empty */
    for (size_t i = 0; i < b->n; i++) {
        struct proto_entry *e = &b->entries[i];
        uint32_t gid = 0, k = e->op_id & 63;

        if (seen[k].op == e->op_id) {
            gid = seen[k].gid;
        } else if (u32map_get(&c->ops, e->op_id, &gid)) {
            seen[k].op = e->op_id;
            seen[k].gid = gid;
        }
        e->op_id = gid;
        if (e->ext_len != 0)
            (void)conn_resolve_launcher(c, b, e, &bad);
        dev_ids[i] = c->hello_dev;
        if (e->dev_len && (rc = session_device(&c->d->reg, c->session, b->blob + e->dev_off,
                                               e->dev_len, c->budget, &dev_ids[i])) < 0) {
            conn_table_fail(c, rc, TABLE_DEVICES);
            return rc;
        }
        if ((rc = session_shape(c->session, gid, b->blob + e->out_off, e->out_len,
                                b->blob + e->in_off, e->in_len, &shape_ids[i])) < 0) {
            conn_table_fail(c, rc, TABLE_SHAPES);
            return rc;
        }
    }
    return 0;
}

/*
 * The byte caps, on what is accepted (session.h): keeps the entries of b that
 * fit under --max-session-bytes and --max-user-bytes, counts them into the
 * session's accepted bytes, and drops the rest, counted in the session's
 * `dropped`. Policy: over its cap a session keeps what it has. Returns how
 * many entries are kept.
 */
static size_t conn_cap_batch(struct conn *c, struct proto_batch *b)
{
    const struct daemon_options *o = &c->d->opt;
    struct session *s = c->session;
    uint64_t used_s, used_u = 0, cost, added = 0;
    size_t keep;

    if (o->max_session_bytes == 0 && o->max_user_bytes == 0) {
        for (size_t i = 0; i < b->n; i++)
            s->accepted_bytes += session_entry_cost(&b->entries[i]);
        return b->n;
    }
    used_s = session_cap_bytes(s);
    if (o->max_user_bytes)
        used_u = session_user_cap_bytes(&c->d->reg, s->uid);
    for (keep = 0; keep < b->n; keep++, added += cost) {
        cost = session_entry_cost(&b->entries[keep]);
        if ((o->max_session_bytes && used_s + added + cost > o->max_session_bytes) ||
            (o->max_user_bytes && used_u + added + cost > o->max_user_bytes))
            break;
    }
    s->accepted_bytes = used_s + added; /* from the larger of disk and estimate */
    if (keep < b->n) {
        if (c->refused == 0)
            log_warn("session %lld is at its byte cap (%s): dropping new entries", (long long)s->id,
                     o->max_session_bytes && used_s + added + cost > o->max_session_bytes
                         ? "--max-session-bytes"
                         : "--max-user-bytes");
        c->refused += b->n - keep;
        s->dropped += b->n - keep;
        b->n = keep; /* the entries past keep stay in the batch's arrays, freed with it */
    }
    return keep;
}

/* What `live` shows of an accepted batch: calls and time per op, the process's step. */
static void conn_count_batch(struct conn *c, const struct proto_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const struct proto_entry *e = &b->entries[i];

        session_count_entry(c->session, e->op_id, e->dur_ns);
        if (!c->has_step || e->step > c->step)
            c->step = e->step;
        c->has_step = true;
    }
}

/* An array of n ids: a spent batch's (batchpool.h) when one is that large. *cap: its room. */
static uint32_t *conn_ids(size_t n, size_t *cap)
{
    size_t bytes;
    uint32_t *ids = batchpool_take(BATCHPOOL_IDS, n * sizeof(*ids), &bytes);

    if (ids == NULL) {
        ids = malloc(n * sizeof(*ids));
        bytes = n * sizeof(*ids);
    }
    *cap = bytes / sizeof(*ids);
    return ids;
}

/*
 * The reader's check of a batch it returns in slices (proto_reader_set_check),
 * before the first is queued: an undefined op id refuses the batch whole, as
 * conn_resolve_batch() refuses a batch taken at once, in the same words.
 */
static int conn_check_slices(void *ctx, const struct proto_batch *b, size_t first,
                             struct proto_error *err)
{
    struct conn *c = ctx;
    uint32_t gid;

    for (size_t i = 0; i < b->n; i++) {
        if (u32map_get(&c->ops, b->entries[i].op_id, &gid))
            continue;
        err->code = PROTO_E_UNKNOWN_OP;
        snprintf(err->message, sizeof(err->message), "op id %u is not defined by ops (entry %zu)",
                 b->entries[i].op_id, first + i);
        return -EPROTO;
    }
    return 0;
}

/* Resolves b (whose op ids are all defined) and queues it for the writer; b is moved. */
static void conn_store_batch(struct conn *c, struct proto_batch *b)
{
    struct store_job *job;
    uint32_t *dev_ids, *shape_ids;
    size_t dev_cap, shape_cap;

    dev_ids = conn_ids(b->n, &dev_cap);
    shape_ids = conn_ids(b->n, &shape_cap);
    job = store_job_new(STORE_BATCH, c->session->id);
    if (dev_ids == NULL || shape_ids == NULL || job == NULL) {
        batchpool_put(BATCHPOOL_IDS, dev_ids, dev_cap * sizeof(*dev_ids));
        batchpool_put(BATCHPOOL_IDS, shape_ids, shape_cap * sizeof(*shape_ids));
        free(job);
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (conn_resolve_batch(c, b, dev_ids, shape_ids) < 0) {
        batchpool_put(BATCHPOOL_IDS, dev_ids, dev_cap * sizeof(*dev_ids));
        batchpool_put(BATCHPOOL_IDS, shape_ids, shape_cap * sizeof(*shape_ids));
        free(job);
        return;
    }
    conn_count_batch(c, b);
    conn_tap_arrivals(c, b);
    job->u.batch.process_id = c->process_id;
    job->u.batch.b = *b; /* a move: the message no longer owns the batch */
    memset(b, 0, sizeof(*b));
    job->u.batch.dev_ids = dev_ids;
    job->u.batch.shape_ids = shape_ids;
    job->u.batch.ids_cap = dev_cap < shape_cap ? dev_cap : shape_cap;
    c->enqueued += job->u.batch.b.n;
    c->session->entries += job->u.batch.b.n;
    store_job_charge(job, c->budget);
    store_enqueue(c->d->store, job);
    /* The writer is behind: stop reading until it catches up. */
    if (store_queued(c->d->store) > c->d->opt.queue_high || conn_over_share(c, 1))
        conn_pause(c);
}

static void conn_handle_batch(struct conn *c, struct proto_msg *m)
{
    struct proto_batch *b = &m->u.batch;
    char unknown[200];

    if (b->n == 0 || conn_cap_batch(c, b) == 0)
        return;
    /* The entries of defined ops are stored before the connection is closed for the others. */
    if (conn_refuse_unknown(c, b, unknown, sizeof(unknown)) > 0) {
        if (b->n > 0)
            conn_store_batch(c, b);
        if (!c->failed)
            conn_fail(c, PROTO_E_UNKNOWN_OP, unknown);
        return;
    }
    conn_store_batch(c, b);
}

static void conn_handle_meta(struct conn *c, struct proto_msg *m)
{
    struct store_job *job;

    if (conn_meta_keys(c, m->u.meta.kv, m->u.meta.n) < 0)
        return;
    if ((job = store_job_new(STORE_META, c->session->id)) == NULL) {
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    store_job_charge(job, c->budget);
    job->u.meta.process_id = c->process_id;
    job->u.meta.kv = m->u.meta.kv;
    job->u.meta.n = m->u.meta.n;
    m->u.meta.kv = NULL;
    m->u.meta.n = 0;
    store_enqueue(c->d->store, job);
    if (conn_over_share(c, 1))
        conn_pause(c);
}

static void conn_handle_flush(struct conn *c, struct proto_msg *m)
{
    struct store_job *job = store_job_new(STORE_FLUSH, c->session->id);

    if (job == NULL) {
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    job->cookie = c;
    job->u.flush.seq = m->u.flush_seq;
    job->u.flush.process_id = c->process_id;
    job->u.flush.stored = c->enqueued;
    if (m->counters.given) {
        /* acked: what this flush's ack will say, committed with it, so that a
         * daemon killed after the ack left has it on file (conn_counters_end). */
        c->counters = m->counters;
        c->counters.ops = NULL; /* the per-op drops stay on file as this flush wrote them */
        c->counters.n_ops = 0;
        m->counters.acked = c->enqueued;
        session_counters(&c->d->reg, c->session, c->process_id, &m->counters, false, &c->ops);
    }
    c->refs++;
    store_enqueue(c->d->store, job);
}

void conn_flush_done(struct store_job *job)
{
    struct conn *c = job->cookie;
    char msg[200], err[128];

    if (!c->closed && !c->failed) {
        if (job->rc == 0) {
            conn_send_simple(c, pack_ack, (int64_t)job->u.flush.seq, (int64_t)job->u.flush.stored);
            c->acked_sent = job->u.flush.stored;
        } else {
            msgpack_sbuffer sb;
            msgpack_packer pk;

            store_last_error(c->d->store, err, sizeof(err));
            snprintf(msg, sizeof(msg), "storage failed before flush %llu (%llu entries lost): %s",
                     (unsigned long long)job->u.flush.seq, (unsigned long long)job->u.flush.lost,
                     err);
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            proto_pack_error(&pk, PROTO_E_INTERNAL, msg);
            conn_send(c, &sb);
        }
    }
    conn_unref(c);
    store_job_free(job);
}

static void conn_handle_bye(struct conn *c, struct proto_msg *m)
{
    c->said_bye = true;
    if (m->counters.given) /* the client's final word, acked included */
        session_counters(&c->d->reg, c->session, c->process_id, &m->counters, true, &c->ops);
    session_leave(&c->d->reg, c->session, c->process_id, 1, m->u.bye_dropped, c->refused);
    c->session = NULL;
    conn_close(c);
}

/* ---- dispatch ------------------------------------------------------------ */

static void conn_dispatch(struct conn *c, struct proto_msg *m)
{
    static void (*const producer[])(struct conn *, struct proto_msg *) = {
        [PROTO_OPS] = conn_handle_ops,   [PROTO_BATCH] = conn_handle_batch,
        [PROTO_META] = conn_handle_meta, [PROTO_FLUSH] = conn_handle_flush,
        [PROTO_BYE] = conn_handle_bye,
    };
    char msg[96];

    switch (m->type) {
    case PROTO_HELLO:
        conn_handle_hello(c, m);
        return;
    case PROTO_OPS:
    case PROTO_BATCH:
    case PROTO_META:
    case PROTO_FLUSH:
    case PROTO_BYE:
        if (!c->producer) {
            snprintf(msg, sizeof(msg), "%s before hello", proto_type_name(m->type));
            conn_fail(c, PROTO_E_STATE, msg);
            return;
        }
        producer[m->type](c, m);
        return;
    case PROTO_SESSIONS:
    case PROTO_REPORT:
    case PROTO_STATUS:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_CLASSIFY:
    case PROTO_LIVE:
        if (c->producer) {
            conn_fail(c, PROTO_E_STATE, "control requests need their own connection");
            return;
        }
        control_handle(c, m);
        return;
    default:
        snprintf(msg, sizeof(msg), "\"%s\" is not a request", proto_type_name(m->type));
        conn_fail(c, PROTO_E_TYPE, msg);
        return;
    }
}

/*
 * False when m must wait (the caller holds it, and reading stops): a hello
 * that would create a session while SESSION_MAX_OPENING session files are
 * being made (so that hello/bye churn cannot flood the writer), a report
 * until users_schedule() gives it a slot (so that replies being built are
 * bounded, not one per connection, and users share the slots: users.h).
 */
static bool conn_may_dispatch(struct conn *c, const struct proto_msg *m)
{
    struct daemon *d = c->d;

    if (m->type == PROTO_HELLO && !c->producer &&
        session_find_live(&d->reg, m->u.hello.session, c->uid) == NULL &&
        session_opening_full(&d->reg)) {
        conn_pause(c); /* conn_backpressure_check wakes it */
        return false;
    }
    if ((m->type == PROTO_REPORT || m->type == PROTO_EXPORT) && !c->producer) {
        if (c->granted) {
            c->granted = false;
            return true;
        }
        return false; /* the caller holds it and queues it: users_schedule wakes it */
    }
    return true;
}

bool conn_may_start(const struct conn *c)
{
    return !c->closed && !c->failed && !c->busy && !c->paused && !c->throttled &&
           conn_may_send(c, 1);
}

void conn_grant(struct conn *c)
{
    c->granted = true;
    conn_process(c);
    conn_update_reading(c);
}

/* c holds a report or export: it joins its user's queue, and free slots are handed out. */
static void conn_queue_report(struct conn *c)
{
    if (!c->holding || (c->held.type != PROTO_REPORT && c->held.type != PROTO_EXPORT) ||
        c->producer || c->closed)
        return;
    users_wait(c);
    users_schedule(c->d);
}

static void conn_process(struct conn *c)
{
    struct proto_error err;
    struct proto_msg m;
    int rc;

    while (!c->closed && !c->failed && !c->busy && !c->paused && !c->throttled) {
        /* A peer that sends requests but never reads the replies gets no more
         * answers (and no more of its bytes are read) until it catches up;
         * nor does anyone while all unread replies together are over their
         * bound, or a user's over their share (conn_may_send). */
        if (!conn_may_send(c, 1)) {
            c->throttled = true;
            break;
        }
        if (c->holding) {
            if (!conn_may_dispatch(c, &c->held)) {
                conn_queue_report(c);
                break;
            }
            c->holding = false;
            conn_dispatch(c, &c->held);
            proto_msg_free(&c->held);
            continue;
        }
        rc = proto_reader_next(&c->reader, &m, &err);
        if (rc == 0)
            break;
        c->partial_ms = 0; /* a message is complete: the next one's clock starts on its bytes */
        if (rc < 0) {
            conn_fail(c, err.code, err.message);
            break;
        }
        if (!conn_may_dispatch(c, &m)) {
            c->held = m;
            c->holding = true;
            conn_queue_report(c);
            break;
        }
        conn_dispatch(c, &m);
        proto_msg_free(&m);
    }
}

void conn_report_done(struct daemon *d)
{
    users_schedule(d);
}

/* ---- reading ------------------------------------------------------------- */

/* True when bytes of a message that is not complete are buffered. */
static bool conn_partial(struct conn *c)
{
    return msgpack_unpacker_message_size(&c->reader.unp) > 0;
}

/*
 * Reads READ_SIZE bytes at least, and as many as the reader's buffer has room
 * for (it is sized for the last batch, proto_reader_buffer): fewer reads,
 * each a costly syscall here, and fewer passes of the decoder.
 */
static void conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = (struct conn *)handle;
    char *p = proto_reader_buffer(&c->reader, READ_SIZE);
    size_t room = p != NULL ? msgpack_unpacker_buffer_capacity(&c->reader.unp) : 0;

    (void)suggested;
    *buf = uv_buf_init(p, (unsigned int)(room < UINT_MAX ? room : UINT_MAX));
}

static void conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = (struct conn *)stream;

    (void)buf;
    if (nread > 0) {
        proto_reader_commit(&c->reader, (size_t)nread);
        c->active_ms = uv_now(c->d->loop);
        conn_process(c);
        if (c->partial_ms == 0 && conn_partial(c))
            c->partial_ms = c->active_ms;
        conn_update_reading(c);
    } else if (nread == UV_ENOBUFS) {
        conn_fail(c, PROTO_E_INTERNAL, "out of memory");
    } else if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("connection read: %s", uv_strerror((int)nread));
        conn_close(c);
    }
}

static void conn_update_reading(struct conn *c)
{
    if (c->closed)
        return;
    if (c->failed || c->busy || c->paused || c->throttled || c->holding)
        uv_read_stop((uv_stream_t *)&c->pipe);
    else
        uv_read_start((uv_stream_t *)&c->pipe, conn_alloc_cb, conn_read_cb);
}

void conn_resume(struct conn *c)
{
    c->busy = false;
    conn_process(c);
    conn_update_reading(c);
}

void conn_backpressure_check(struct daemon *d)
{
    struct conn *c, *next;
    bool entries_high = store_queued(d->store) > d->opt.queue_high / 2;

    if (d->n_paused == 0)
        return;
    for (c = d->conns; c != NULL; c = next) {
        next = c->next;
        if (!c->paused || c->closed)
            continue;
        if (c->holding ? session_opening_full(&d->reg) : entries_high || conn_over_share(c, 2))
            continue;
        c->paused = false;
        d->n_paused--;
        conn_process(c); /* a held hello first */
        conn_update_reading(c);
    }
}

/* ---- timeouts (conn.h TIMEOUTS) ------------------------------------------ */

/*
 * Reply bytes c's peer has read: those queued, less those libuv has not
 * written yet, less those in the socket the peer has not read (SIOCOUTQ,
 * which *outq gets: 0 when the peer has read all the socket holds).
 */
static uint64_t conn_taken(struct conn *c, int *outq)
{
    uint64_t left = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
    uv_os_fd_t fd;

    *outq = 1; /* unknown: as if the peer had not read */
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 && ioctl(fd, SIOCOUTQ, outq) == 0 && *outq > 0)
        left += (uint64_t)*outq;
    return c->sent > left ? c->sent - left : 0;
}

/*
 * True (and c is closed, with the reason logged) when c has replies
 * waiting and its peer has read none of their bytes for --reply-timeout: a
 * peer that reads, however slowly, is never closed for it. The clock
 * starts at the first check that sees replies waiting (the loop's time
 * when a reply is queued may be old: building many replies takes a while),
 * and a peer that has read everything in its socket is waiting for the
 * daemon, not stalled.
 */
static bool conn_reply_stalled(struct conn *c, uint64_t now)
{
    uint64_t taken;
    int outq;

    if (c->unwritten == 0 || c->d->opt.reply_ms == 0) {
        c->progress_ms = 0;
        return false;
    }
    taken = conn_taken(c, &outq);
    if (c->progress_ms == 0 || taken != c->progress || outq == 0) {
        c->progress = taken;
        c->progress_ms = now;
        return false;
    }
    if (now - c->progress_ms < c->d->opt.reply_ms)
        return false;
    log_warn("connection (pid %lld, uid %lld) closed: it read none of its %llu bytes of replies"
             " for %llu ms (the daemon's --reply-timeout)",
             (long long)c->pid, (long long)c->uid, (unsigned long long)c->unwritten,
             (unsigned long long)c->d->opt.reply_ms);
    conn_close(c);
    return true;
}

static void conn_timeout_cb(uv_timer_t *t)
{
    struct daemon *d = t->data;
    const struct daemon_options *o = &d->opt;
    uint64_t now = uv_now(d->loop);
    char msg[160];

    for (struct conn *c = d->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->closed || conn_reply_stalled(c, now) || c->failed)
            continue;
        if (c->paused || c->throttled || c->busy || c->holding || c->unwritten > 0 ||
            (!c->producer && c->refs > 0)) {
            /* The daemon makes it wait: its clocks start again when it may go on. */
            c->active_ms = now;
            if (c->partial_ms != 0)
                c->partial_ms = now;
            continue;
        }
        if (c->partial_ms != 0 && !conn_partial(c))
            c->partial_ms = 0;
        if (o->request_ms && c->partial_ms != 0 && now - c->partial_ms >= o->request_ms) {
            snprintf(msg, sizeof(msg),
                     "a message was not finished within %llu ms (the daemon's --request-timeout)",
                     (unsigned long long)o->request_ms);
            conn_fail(c, PROTO_E_LIMIT, msg);
        } else if (o->idle_ms && !c->producer && c->partial_ms == 0 &&
                   now - c->active_ms >= o->idle_ms) {
            snprintf(msg, sizeof(msg),
                     "closed after %llu ms without a request (the daemon's --idle-timeout)",
                     (unsigned long long)o->idle_ms);
            conn_fail(c, PROTO_E_LIMIT, msg);
        }
    }
}

void conn_timer_start(struct daemon *d)
{
    uint64_t least = d->opt.request_ms, period;

    uv_timer_init(d->loop, &d->conn_timer);
    d->conn_timer.data = d;
    if (d->opt.idle_ms && (least == 0 || d->opt.idle_ms < least))
        least = d->opt.idle_ms;
    if (d->opt.reply_ms && (least == 0 || d->opt.reply_ms < least))
        least = d->opt.reply_ms;
    if (least == 0)
        return;
    /* Checked four times per shortest timeout: a connection is closed at most 25 % late. */
    period = least / 4 < 50 ? 50 : least / 4 > 1000 ? 1000 : least / 4;
    uv_timer_start(&d->conn_timer, conn_timeout_cb, period, period);
}

/*
 * Reply buffers and exports' SQLite caches are freed by the loop and by the
 * thread pool's threads, into glibc's per-thread arenas, which keep freed
 * pages mapped: 200 unread exports left 66 MiB held after they closed.
 * malloc_trim() gives back every arena's free pages; it walks the heaps, so
 * it runs from the tick, once 16 MiB of replies have been freed since the
 * last time, not on every free.
 */
void conn_trim(struct daemon *d)
{
    if (d->trim_bytes < (16u << 20))
        return;
    d->trim_bytes = 0;
    malloc_trim(0);
}

int64_t conn_view_uid(const struct conn *c)
{
    return c->admin ? -1 : c->uid;
}

/* True when uid (primary group gid) is in group `gid`, by the user database. */
static bool conn_in_group(uid_t uid, gid_t primary, gid_t gid)
{
    struct passwd pw, *res = NULL;
    gid_t groups[256];
    int n = 256;
    char buf[4096];

    if (primary == gid)
        return true;
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
        return false;
    if (getgrouplist(pw.pw_name, primary, groups, &n) < 0)
        return false;
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return true;
    return false;
}

static void conn_peercred(struct conn *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    c->uid = c->pid = -1;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->uid = cred.uid;
        c->pid = cred.pid;
        c->admin =
            cred.uid == 0 || cred.uid == getuid() ||
            (c->d->admin_gid >= 0 && conn_in_group(cred.uid, cred.gid, (gid_t)c->d->admin_gid));
    }
}

int conn_accept(struct daemon *d, int fd)
{
    struct conn *c = calloc(1, sizeof(*c));
    const char *why;
    char buf[160];
    int rc;

    if (c == NULL) {
        close(fd);
        return -ENOMEM;
    }
    c->d = d;
    if ((rc = proto_reader_init(&c->reader, PROTO_MAX_MSG)) < 0) {
        free(c);
        close(fd);
        return rc;
    }
    proto_reader_set_take(&c->reader, batchpool_take_batch, NULL);
    proto_reader_set_slice(&c->reader, CONN_BATCH_ENTRIES); /* MEMORY in conn.h */
    proto_reader_set_check(&c->reader, conn_check_slices, c);
    u32map_init(&c->ops);
    strmap_init(&c->meta_keys);
    uv_pipe_init(d->loop, &c->pipe, 0);
    c->pipe.data = c;
    if ((rc = uv_pipe_open(&c->pipe, fd)) < 0) {
        close(fd);
        c->closed = true;
        uv_close((uv_handle_t *)&c->pipe, conn_close_cb);
        return rc;
    }
    conn_peercred(c);
    c->user = users_get(d, c->uid);
    c->next = d->conns;
    if (d->conns != NULL)
        d->conns->prev = c;
    d->conns = c;
    d->n_conns++;
    c->active_ms = uv_now(d->loop);
    if (c->user == NULL) {
        conn_close(c);
        return -ENOMEM;
    }
    if ((why = conn_over_cap(c, buf, sizeof(buf))) != NULL) {
        conn_log_cap(d, why);
        conn_fail(c, PROTO_E_LIMIT, why);
        return 0;
    }
    conn_update_reading(c);
    return 0;
}
