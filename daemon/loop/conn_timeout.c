/*
 * conn_timeout.c — the loop thread's timer over every connection (conn.h
 * TIMEOUTS): a message not finished within --request-timeout, a control
 * connection idle for --idle-timeout, and replies of which the peer has read
 * nothing for --reply-timeout. Time the daemon makes a peer wait does not count.
 */
#include <stdio.h>
#include <sys/ioctl.h>

#include <linux/sockios.h>

#include "conn_int.h"
#include "log.h"

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
