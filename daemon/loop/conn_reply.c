/*
 * conn_reply.c — a connection's replies on the loop thread: the write queue
 * (a message is written whole, in order; its bytes count against the
 * unread-reply bounds of conn.h MEMORY until libuv has written them),
 * throttling a peer that does not read and waking it when it does, waiting
 * for room (exports), failing a connection with an error, and giving freed
 * reply memory back to the system.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

#include "conn_int.h"
#include "log.h"

struct conn_write {
    uv_write_t req;
    char *data;
    size_t len;
    conn_sent_cb done; /* conn_send_then's, or NULL */
    void *arg;
};

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
