/*
 * tcwriter.c — the writer thread, one per connected client: it fills the
 * output from the rings (tcenc.c), writes it with poll(), sends a flush
 * once everything before it is packed, reads the daemon's replies (acks,
 * errors) and wakes tc_flush() callers, and counts what a broken
 * connection can no longer send as dropped. Its self-pipe wakes it early.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcint.h"

/*
 * Notes that the output holds a batch of n entries ending at its current
 * size, so that they count as sent once the socket took that byte
 * (marks_sent). Out of memory, the batch joins the last mark (its entries
 * then count as sent with the later batch: should the connection break in
 * between, as dropped) or, with none, gets the first slot, kept from start.
 */
static void mark_batch(tc_client *c, uint64_t n)
{
    if (c->n_marks == c->cap_marks) {
        size_t cap = c->cap_marks ? 2 * c->cap_marks : 64;
        struct sent_mark *m = realloc(c->marks, cap * sizeof(*m));
        if (m == NULL && c->n_marks > 0) {
            c->marks[c->n_marks - 1].end = c->out.size;
            c->marks[c->n_marks - 1].n += n;
            return;
        }
        if (m != NULL) {
            c->marks = m;
            c->cap_marks = cap;
        }
    }
    c->marks[c->n_marks++] = (struct sent_mark){c->out.size, n};
}

/* Credits the batches the socket has wholly taken (up to out_off) as sent. */
static void marks_sent(tc_client *c)
{
    uint64_t n = 0;

    while (c->first_mark < c->n_marks && c->marks[c->first_mark].end <= c->out_off)
        n += c->marks[c->first_mark++].n;
    if (n > 0)
        atomic_fetch_add_explicit(&c->sent, n, memory_order_relaxed);
    if (c->first_mark == c->n_marks)
        c->first_mark = c->n_marks = 0;
}

/* Fills the output buffer: control messages first, then batches of what was drained. */
static void fill(tc_client *c)
{
    size_t n;

    while (c->out.size - c->out_off < OUT_HIGH) {
        n = tcenc_drain(c, &c->out, BATCH_MAX, false);
        if (n == 0)
            break;
        mark_batch(c, n);
        c->packed += n;
    }
}

static bool rings_empty(tc_client *c)
{
    pthread_mutex_lock(&c->mu);
    for (struct ring *r = c->rings; r != NULL; r = r->next) {
        if (atomic_load(&r->head) != atomic_load(&r->tail)) {
            pthread_mutex_unlock(&c->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void handle_reply(tc_client *c, struct proto_msg *m)
{
    pthread_mutex_lock(&c->mu);
    if (m->type == PROTO_ACK) {
        c->flush_acked = m->u.ack.seq;
        c->flush_rc = 0;
        atomic_store(&c->acked, m->u.ack.stored);
    } else if (m->type == PROTO_ERROR && m->u.error.code != NULL &&
               strcmp(m->u.error.code, PROTO_E_INTERNAL) == 0 && c->flush_sent > c->flush_acked) {
        c->flush_acked = c->flush_sent; /* the daemon could not store what this flush covers */
        c->flush_rc = -EIO;
    } else if (m->type == PROTO_ERROR) {
        tcclient_error(c, -EPROTO, "the daemon closed the connection: %s: %s",
                       m->u.error.code ? m->u.error.code : "?",
                       m->u.error.message ? m->u.error.message : "");
        c->broken = true;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void writer_break(tc_client *c, int rc)
{
    tcclient_error(c, rc, "the connection to the daemon broke: %s",
                   rc == -EPIPE ? "the daemon closed it" : strerror(-rc));
    pthread_mutex_lock(&c->mu);
    c->broken = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Called with a request for the writer thread pending: it stops waiting for the interval. */
void tcwriter_wake(tc_client *c)
{
    ssize_t n = write(c->wake[1], "", 1); /* a full pipe already wakes it */

    (void)n;
}

/* Waits for a wake-up or the flush interval (a broken client has no socket to poll). */
static void writer_sleep(tc_client *c)
{
    struct pollfd pfd = {.fd = c->wake[0], .events = POLLIN};
    char sink[64];

    if (poll(&pfd, 1, (int)c->interval_ms) > 0)
        while (read(c->wake[0], sink, sizeof(sink)) > 0)
            ;
}

/* Writes pending output; reads replies. Returns 0, or a negative errno once the connection is gone.
 */
static int writer_io(tc_client *c, int wait_ms)
{
    struct pollfd pfds[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->wake[0], .events = POLLIN}};
    struct pollfd *pfd = &pfds[0];
    struct proto_error err;
    struct proto_msg m;
    char sink[64];
    int rc;

    if (c->out_off < c->out.size)
        pfd->events |= POLLOUT;
    if (poll(pfds, 2, wait_ms) < 0 && errno != EINTR)
        return -errno;
    if (pfds[1].revents & POLLIN)
        while (read(c->wake[0], sink, sizeof(sink)) > 0)
            ;
    if (pfd->revents & POLLOUT) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.size - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (w > 0)
            c->out_off += (size_t)w;
        marks_sent(c);
        if (c->out_off == c->out.size) {
            msgpack_sbuffer_clear(&c->out);
            c->out_off = 0;
        }
    }
    if (pfd->revents & (POLLIN | POLLHUP | POLLERR)) {
        if ((rc = tcconn_read(c->fd, &c->reader, 0)) < 0)
            return rc;
        while ((rc = proto_reader_next(&c->reader, &m, &err)) > 0) {
            handle_reply(c, &m);
            proto_msg_free(&m);
        }
        if (rc < 0)
            return -EPROTO;
    }
    return 0;
}

/*
 * Settles the accounts of a connection that is gone. The first time: the
 * entries packed but not wholly written to the socket (the unsent output,
 * and a batch the socket took part of, which the daemon cannot decode) are
 * dropped; those written but not acked are unconfirmed (the daemon may have
 * stored some: it says how many, PROTOCOL.md Part 3). Then, each time, what
 * the rings hold is dropped.
 */
static void writer_discard(tc_client *c)
{
    msgpack_sbuffer sink;

    if (!c->loss_counted) {
        uint64_t sent = atomic_load(&c->sent), acked = atomic_load(&c->acked);

        atomic_fetch_add(&c->dropped, c->packed - sent);
        /* An ack counts what the daemon kept; what it refused (over a session's
         * cap) stays unconfirmed, which it is: sent, never confirmed. */
        atomic_store(&c->unconfirmed, sent > acked ? sent - acked : 0);
        c->loss_counted = true;
        c->first_mark = c->n_marks = 0;
        c->torn = c->out_off > 0 && c->out_off < c->out.size;
        msgpack_sbuffer_clear(&c->out);
        c->out_off = 0;
    }
    msgpack_sbuffer_init(&sink);
    for (size_t n; (n = tcenc_drain(c, &sink, BATCH_MAX, true)) > 0; msgpack_sbuffer_clear(&sink))
        atomic_fetch_add(&c->dropped, n);
    msgpack_sbuffer_destroy(&sink);
}

/* A forked child's writer: its own connection and hello (see tcfork_restart). */
static int writer_connect(tc_client *c)
{
    int rc;

    if ((rc = tcconn_socket(c)) < 0)
        return rc;
    return tcconn_hello(c);
}

static void *writer_thread(void *arg)
{
    tc_client *c = arg;
    msgpack_packer pk;
    bool closing, broken;
    uint64_t req;
    int rc;

    if (c->need_connect && (rc = writer_connect(c)) < 0)
        writer_break(c, rc);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (c->park) { /* a fork: wait here, where this thread holds nothing */
            c->parked = true;
            pthread_cond_broadcast(&c->cv);
            pthread_cond_wait(&c->cv, &c->mu);
        }
        c->parked = false;
        closing = c->closing;
        broken = c->broken;
        req = c->flush_req;
        pthread_mutex_unlock(&c->mu);
        if (broken) {
            writer_discard(c);
            /* Everything recorded before flush `req` is now counted: a tc_flush()
             * returns with tc_dropped() complete. */
            pthread_mutex_lock(&c->mu);
            c->flush_counted = req;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            if (closing)
                break;
            writer_sleep(c);
            continue;
        }
        if (c->out_off == c->out.size)
            fill(c);
        /* A flush goes out once everything recorded before it has been packed. */
        if (req > c->flush_sent && c->out.size - c->out_off < OUT_HIGH && rings_empty(c)) {
            msgpack_packer_init(&pk, &c->out, msgpack_sbuffer_write);
            if (c->counters_ok) {
                struct proto_counters k;
                tcclient_counters(c, &k);
                proto_pack_flush_counters(&pk, req, &k);
                free(k.ops);
            } else {
                proto_pack_flush(&pk, req);
            }
            c->flush_sent = req;
        }
        if (closing && c->out_off == c->out.size && c->flush_sent == req && rings_empty(c))
            break;
        /* With output pending nothing is due before the socket takes more (or
         * a wake-up: a flush, tc_close); else the rings are drained each
         * interval. */
        if ((rc = writer_io(c, c->out_off < c->out.size ? -1 : (int)c->interval_ms)) < 0)
            writer_break(c, rc);
    }
    pthread_mutex_lock(&c->mu);
    c->writer_done = true; /* tc_close waits for this, within its timeout */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The writer thread's wake-up pipe, both ends non-blocking. 0 or a negative errno. */
static int wake_open(tc_client *c)
{
    if (pipe(c->wake) < 0) {
        c->wake[0] = c->wake[1] = -1;
        return -errno;
    }
    for (int i = 0; i < 2; i++)
        if (fcntl(c->wake[i], F_SETFL, O_NONBLOCK) < 0 ||
            fcntl(c->wake[i], F_SETFD, FD_CLOEXEC) < 0)
            return -errno;
    return 0;
}

/* The writer thread's pipe and the thread itself. 0 or a negative errno. */
int tcwriter_start(tc_client *c)
{
    int rc;

    if (c->marks == NULL) { /* the first batch's mark never waits for memory (mark_batch) */
        if ((c->marks = malloc(64 * sizeof(*c->marks))) == NULL)
            return -ENOMEM;
        c->cap_marks = 64;
    }
    if ((rc = wake_open(c)) < 0)
        return rc;
    if ((rc = pthread_create(&c->thread, NULL, writer_thread, c)) != 0)
        return -rc;
    c->writer_running = true;
    return 0;
}
