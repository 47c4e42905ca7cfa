/*
 * conn.c — a connection's life on the loop thread: accept (peer credentials,
 * the connection caps), reading and framing, holding and dispatching each
 * message (producer messages to conn_producer.c, control requests to
 * control.c), the report slots' queue, backpressure, close and free. Replies
 * are conn_reply.c's, timeouts conn_timeout.c's; conn_int.h lists what the
 * files share. See conn.h for the contract.
 */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "batchpool.h"
#include "conn_int.h"
#include "control.h"
#include "log.h"

/* Bytes asked of each read: small, so 1,000 stalled connections hold ~16 MiB at most. */
#define READ_SIZE (16u << 10)

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
 * Shares under --system: one user who is not an admin may hold at most half
 * of --max-connections and of --max-live-sessions (at least 1), and such
 * users together leave the last eighth to admins (root, --admin-group).
 */
size_t conn_user_share(size_t cap)
{
    return cap / 2 > 0 ? cap / 2 : 1;
}

size_t conn_reserve(size_t cap)
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

void conn_process(struct conn *c)
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
bool conn_partial(struct conn *c)
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

void conn_update_reading(struct conn *c)
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
