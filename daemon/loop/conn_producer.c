/*
 * conn_producer.c — a producer's messages on the loop thread: hello (the
 * session limits, joining a session), ops, batch (refusing undefined op ids,
 * the byte caps, resolving ids, queueing for the writer in slices, counting
 * for `live`, and the tap of collective arrivals for peers), meta, flush (its
 * ack once the writer has committed it) and bye. Each charges what it queues
 * to the connection's store budget and pauses reading while it is over its
 * share (conn.h MEMORY).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchpool.h"
#include "conn_int.h"
#include "log.h"
#include "peerarr.h"
#include "peerhome.h"
#include "peermember.h"

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
bool conn_over_share(const struct conn *c, unsigned div)
{
    const struct daemon *d = c->d;
    uint64_t own = atomic_load(&c->budget->bytes), all = store_queued_bytes(d->store);
    uint64_t share = DAEMON_QUEUE_BYTES / (d->n_producers ? d->n_producers : 1);

    return own > CONN_QUEUE_BYTES / div || (all > DAEMON_QUEUE_BYTES / div && own > share / div);
}

void conn_pause(struct conn *c)
{
    if (c->paused)
        return;
    c->paused = true;
    c->d->n_paused++;
    conn_update_reading(c);
}

void conn_handle_hello(struct conn *c, struct proto_msg *m)
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
            e->dur_ns > (uint64_t)PEERARR_TIME_MAX - e->start_ns || e->step > INT64_MAX)
            continue;
        struct peerarr_arrival a = {.comm = x.comm,
                                    .seq = x.seq,
                                    .rank = c->rank,
                                    .enter_ns = (int64_t)e->start_ns,
                                    .exit_ns = (int64_t)(e->start_ns + e->dur_ns),
                                    .bytes = e->mem_bytes,
                                    .comm_size = x.has & PROTO_EXT_COMM_SIZE ? x.comm_size : 0,
                                    .step = e->step};
        if (a.comm_size != 0 && (uint64_t)a.rank >= a.comm_size)
            continue;
        if (s->arrq != NULL)
            peerarr_queue_push(s->arrq, &a);
        else
            peerhome_arrival(home, s->name, &a, s->world);
    }
}

void conn_handle_ops(struct conn *c, struct proto_msg *m)
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
int conn_check_slices(void *ctx, const struct proto_batch *b, size_t first, struct proto_error *err)
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

void conn_handle_batch(struct conn *c, struct proto_msg *m)
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

void conn_handle_meta(struct conn *c, struct proto_msg *m)
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

void conn_handle_flush(struct conn *c, struct proto_msg *m)
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

void conn_handle_bye(struct conn *c, struct proto_msg *m)
{
    c->said_bye = true;
    if (m->counters.given) /* the client's final word, acked included */
        session_counters(&c->d->reg, c->session, c->process_id, &m->counters, true, &c->ops);
    session_leave(&c->d->reg, c->session, c->process_id, 1, m->u.bye_dropped, c->refused);
    c->session = NULL;
    conn_close(c);
}
