/*
 * tcclient.c — a client's life: tc_open() (options, the environment's
 * defaults, connecting, the writer thread), tc_flush(), tc_close(), the
 * first error kept for tc_last_error(), and the figures (tc_dropped,
 * tc_recorded, ...). Runs on the caller's threads; see tcint.h for the
 * design of the whole library.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sock.h"
#include "tcint.h"
#include "util.h"

static void client_free(tc_client *c);

/*
 * Why this thread's last call was refused (tc_last_refusal). Not in the
 * hot-path cache's TLS model: only refused calls touch it.
 */
static _Thread_local char refusal[256];

static _Atomic uint64_t client_gen = 1;

uint64_t tc_now_ns(void)
{
    return now_ns();
}

/*
 * The recording clock of a connected client, chosen before its writer thread
 * starts: the TSC when tcclock_usable() says so (once per process) and
 * TRACECTL_CLOCK is not "monotonic"; the conversion starts from an anchor
 * read now, before the first record.
 */
static void clock_choose(tc_client *c)
{
    const char *env = getenv("TRACECTL_CLOCK");
    double rate;

    c->clock = 0;
    if ((env != NULL && strcmp(env, "monotonic") == 0) || !tcclock_usable(&rate, NULL))
        return;
    tcclock_init(&c->tsc, tcclock_read_anchor(NULL), rate);
    c->tick_ns = rate; /* c->tsc is the writer's; recording threads read this copy */
    c->clock = REC_TICKS;
}

const char *tc_clock(const tc_client *c)
{
    return c != NULL && !c->disabled && c->clock ? "tsc" : "monotonic";
}

void tc_options_init(tc_options *o)
{
    memset(o, 0, sizeof(*o));
    o->rank = -1;
    o->world = -1;
    o->blocking = -1;
}

/*
 * Zero means "unknown" (tracectl.h): a world ≤ 0 is unknown, and so is a rank
 * of 0 while the world is, which is what a zeroed tc_options holds. -1 is
 * returned for "from the environment".
 */
static int64_t opt_world(const tc_options *o)
{
    return o->world > 0 ? o->world : -1;
}

static int64_t opt_rank(const tc_options *o)
{
    return o->rank > 0 || (o->rank == 0 && o->world > 0) ? o->rank : -1;
}

/*
 * Records why the client sends nothing, once: the first error is the cause,
 * what follows from it is not. The message is written before the code is
 * published, so tc_last_error() never reads a half-written message.
 */
void tcclient_error(tc_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    int expected = 0;

    if (!atomic_compare_exchange_strong(&c->err_set, &expected, 1))
        return;
    va_start(ap, fmt);
    vsnprintf(c->err_msg, sizeof(c->err_msg), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&c->err_code, code < 0 ? code : -EIO, memory_order_release);
}

void tcclient_refuse(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(refusal, sizeof(refusal), fmt, ap);
    va_end(ap);
}

const char *tc_last_refusal(void)
{
    return refusal;
}

/*
 * The most tc_close may take, in ms (-1: no limit): the option, else
 * $TRACECTL_CLOSE_TIMEOUT in seconds (fractional; "inf": no limit; a value
 * that is not a number >= 0 is ignored), else CLOSE_TIMEOUT_MS, or no limit
 * in blocking mode (which asked to lose nothing). Past INT_MAX ms (24 days)
 * is no limit too: the waits take an int.
 */
static int64_t close_ms(const tc_options *o, bool blocking)
{
    const char *v = getenv("TRACECTL_CLOSE_TIMEOUT");
    char *end;
    double s;

    if (o->close_timeout_ms > 0)
        return o->close_timeout_ms > INT_MAX ? -1 : (int64_t)o->close_timeout_ms;
    if (v != NULL && *v) {
        errno = 0;
        s = strtod(v, &end);
        if (errno == 0 && *end == '\0' && s >= 0)                       /* NaN is not >= 0 */
            return s * 1000 > INT_MAX ? -1 : (int64_t)(s * 1000 + 0.5); /* "inf" too */
    }
    return blocking ? -1 : CLOSE_TIMEOUT_MS;
}

static void socket_path(const tc_options *o, char *buf, size_t len)
{
    if (o->socket_path != NULL)
        snprintf(buf, len, "%s", o->socket_path);
    else
        sock_default_path(buf, len);
}

static tc_client *client_new(const tc_options *o)
{
    size_t size = (sizeof(tc_client) + 63) & ~(size_t)63;
    tc_client *c = aligned_alloc(64, size); /* its hot fields sit on their own lines */
    const char *dev = o->device ? o->device : getenv("TRACECTL_DEVICE");
    const char *blk = getenv("TRACECTL_BLOCKING");

    if (c == NULL)
        return NULL;
    tcring_populate(c, size); /* its ~200 KiB of shape tables: one call, not a trap per page */
    memset(c, 0, size);
    c->fd = -1;
    c->wake[0] = c->wake[1] = -1;
    c->session_id = -1;
    c->gen = atomic_fetch_add(&client_gen, 1);
    if (o->blocking == 1 || o->blocking == TC_DROP)
        c->blocking = o->blocking == 1;
    else
        c->blocking = blk != NULL && strcmp(blk, "1") == 0;
    c->ring_entries = DEFAULT_RING;
    if (o->ring_entries >= 2) {
        c->ring_entries = 2;
        while (c->ring_entries < o->ring_entries)
            c->ring_entries *= 2;
    }
    c->interval_ms = o->flush_interval_ms ? o->flush_interval_ms : DEFAULT_INTERVAL;
    c->close_ms = close_ms(o, c->blocking);
    c->opt_rank = opt_rank(o);
    c->opt_world = opt_world(o);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->shape_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    msgpack_sbuffer_init(&c->control);
    msgpack_sbuffer_init(&c->out);
    c->reader_ok = proto_reader_init(&c->reader, 0) == 0;
    if (!c->reader_ok || (dev != NULL && *dev && (c->device = strdup(dev)) == NULL) ||
        (o->session != NULL && (c->opt_session = strdup(o->session)) == NULL) ||
        (o->host != NULL && (c->opt_host = strdup(o->host)) == NULL)) {
        client_free(c);
        return NULL;
    }
    return c;
}

static void client_free(tc_client *c)
{
    tcring_free(c->rings);
    tcring_free(c->stale);
    for (size_t i = 0; i < c->n_ops; i++)
        free(c->ops[i]), free(c->cats[i]);
    for (size_t i = 0; i < c->n_devs; i++)
        free(c->devs[i]);
    for (size_t i = 0; i < c->n_shapes; i++) {
        free(c->shapes[i].bytes);
        free(c->shapes[i].key);
    }
    free(c->ops);
    free(c->cats);
    free(c->devs);
    for (size_t i = 0; i < c->n_meta_alloc; i++)
        free(c->meta_keys[i]);
    free(c->meta_keys);
    free(c->device);
    free(c->path);
    free(c->opt_session);
    free(c->opt_host);
    free(c->h_session);
    free(c->marks);
    for (size_t i = 0; i < DROP_CHUNKS; i++)
        free(atomic_load(&c->drops[i]));
    msgpack_sbuffer_destroy(&c->control);
    msgpack_sbuffer_destroy(&c->out);
    if (c->reader_ok)
        proto_reader_deinit(&c->reader);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->shape_mu);
    pthread_cond_destroy(&c->cv);
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    free(c);
}

/* Connects and says hello. 0 or a negative errno, the reason kept for tc_last_error(). */
static int client_connect(tc_client *c, const tc_options *o)
{
    char path[512];
    int rc;

    socket_path(o, path, sizeof(path));
    if ((c->path = strdup(path)) == NULL)
        return -ENOMEM;
    if ((rc = tcconn_resolve(c)) < 0 || (rc = tcconn_socket(c)) < 0 || (rc = tcconn_hello(c)) < 0)
        return rc;
    clock_choose(c);
    if ((rc = tcwriter_start(c)) < 0)
        tcclient_error(c, rc, "cannot start the writer thread: %s", strerror(-rc));
    return rc;
}

tc_client *tc_open(const tc_options *opts, int *err)
{
    const char *off = getenv("TRACECTL_DISABLE");
    tc_options dflt;
    tc_client *c;
    int rc = 0;

    if (opts == NULL) {
        tc_options_init(&dflt);
        opts = &dflt;
    }
    c = client_new(opts);
    if (c == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (off != NULL && strcmp(off, "1") == 0) {
        c->disabled = true;
        goto out;
    }
    tcfork_init();
    if ((rc = client_connect(c, opts)) < 0)
        goto fail;
    my_ring(c); /* the opening thread's ring, ready before its first record */
    tccpu_baseline(c);
    tcfork_add(c);
    goto out;
fail:
    if (c->blocking) {
        client_free(c);
        c = NULL;
    } else {
        /* No daemon: a disabled client, so the program runs on at almost no
         * cost, that counts what it would have sent (tc_dropped()). */
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        c->disabled = true;
        c->offline = true;
        tcfork_add(c);
    }
out:
    if (c != NULL)
        c->head.active = !c->disabled || c->offline; /* what tracectl.h's inline check reads */
    if (err != NULL)
        *err = rc;
    return c;
}

/* The ms left until a CLOCK_MONOTONIC deadline (0: none, -1 returned), at least 0. */
static int ms_left(uint64_t deadline)
{
    uint64_t now = now_ns();

    if (deadline == 0)
        return -1;
    return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* Waits for the writer thread to leave its loop, until deadline (0: none). Whether it did. */
static bool writer_wait(tc_client *c, uint64_t deadline)
{
    int left = ms_left(deadline);
    struct timespec ts = util_deadline_in(CLOCK_REALTIME, left < 0 ? 0 : (uint64_t)left);
    bool done;

    pthread_mutex_lock(&c->mu);
    while (!c->writer_done) {
        if (left < 0)
            pthread_cond_wait(&c->cv, &c->mu);
        else if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT)
            break;
    }
    done = c->writer_done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* Gives up on what is unsent (it is counted as dropped) and wakes the writer thread. */
static void writer_abandon(tc_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->broken = true;
    pthread_mutex_unlock(&c->mu);
    tcwriter_wake(c);
}

/*
 * tc_close runs within c->close_ms in all: the flush, the writer thread's
 * last writes (entries recorded after the flush; a forked child's hello)
 * and bye. Past it, the rest is abandoned: counted as dropped, the writer
 * thread leaves at once (a broken connection has no socket to wait on).
 */
int tc_close(tc_client *c)
{
    return tc_close_stats(c, NULL);
}

int tc_close_stats(tc_client *c, struct tc_stats *out)
{
    struct proto_counters k;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t deadline;
    int rc, left;

    if (c == NULL) {
        if (out != NULL)
            tc_stats(NULL, out);
        return 0;
    }
    tcfork_remove(c);
    if (c->disabled || c->forked) { /* forked: this process never connected */
        if (out != NULL)
            tc_stats(c, out);
        client_free(c);
        return 0;
    }
    deadline = c->close_ms < 0 ? 0 : now_ns() + (uint64_t)c->close_ms * 1000000u;
    atomic_store(&c->close_deadline, deadline);
    rc = tc_flush(c, ms_left(deadline));
    pthread_mutex_lock(&c->mu);
    c->closing = true;
    pthread_mutex_unlock(&c->mu);
    if (rc == -ETIMEDOUT)
        writer_abandon(c);
    tcwriter_wake(c);
    if (!writer_wait(c, deadline)) {
        writer_abandon(c);
        writer_wait(c, 0);
        if (rc == 0)
            rc = -ETIMEDOUT;
    }
    pthread_join(c->thread, NULL);
    /*
     * bye, with the dropped count, only after whole messages, in what is left
     * of the time (at most 1 s): after a stalled daemon used it up, bye goes
     * only if the socket takes it at once. Without it the daemon ends the
     * process when it reads the connection's end, at once when it runs again.
     */
    left = rc == -ETIMEDOUT ? 0 : ms_left(deadline);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    tcclient_counters(c, &k);
    if (c->out_off == c->out.size && !c->torn &&
        proto_pack_bye_counters(&pk, k.dropped, c->counters_ok ? &k : NULL) == 0)
        sock_send_all(c->fd, sb.data, sb.size, left < 0 || left > 1000 ? 1000 : left);
    free(k.ops);
    msgpack_sbuffer_destroy(&sb);
    if (out != NULL)
        tc_stats(c, out);
    client_free(c);
    return rc;
}

int tc_flush(tc_client *c, int timeout_ms)
{
    struct timespec deadline;
    uint64_t seq;
    int rc = 0;

    if (c == NULL || c->disabled)
        return -ENOTCONN;
    deadline = util_deadline_in(CLOCK_REALTIME, timeout_ms < 0 ? 0 : (uint64_t)timeout_ms);
    pthread_mutex_lock(&c->mu);
    if (c->forked && tcfork_restart(c) < 0) {
        pthread_mutex_unlock(&c->mu);
        return -ENOTCONN;
    }
    seq = ++c->flush_req;
    tcwriter_wake(c);
    while (c->flush_acked < seq && !(c->broken && c->flush_counted >= seq) && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&c->cv, &c->mu);
        else if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) == ETIMEDOUT)
            rc = -ETIMEDOUT;
    }
    if (rc == 0 && c->flush_acked < seq)
        rc = -ENOTCONN;
    if (rc == 0)
        rc = c->flush_rc;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_last_error(const tc_client *c, const char **msg)
{
    tc_client *cc = (tc_client *)c;
    int code = c != NULL ? atomic_load_explicit(&cc->err_code, memory_order_acquire) : 0;

    if (msg != NULL)
        *msg = code != 0 ? cc->err_msg : "";
    return code;
}

int tc_enabled(const tc_client *c)
{
    return c != NULL && !c->disabled;
}

uint64_t tc_dropped(const tc_client *c)
{
    return c != NULL ? atomic_load(&((tc_client *)c)->dropped) : 0;
}

uint64_t tc_recorded(const tc_client *c)
{
    tc_client *cc = (tc_client *)c;
    uint64_t n;

    if (c == NULL || (c->disabled && !c->offline))
        return 0;
    if (c->offline) /* every entry it was given is counted in rejected (and dropped) */
        return atomic_load(&cc->rejected);
    /* Every entry either went into a ring (its head counts it, with the step
     * markers) or was refused. */
    n = atomic_load(&cc->rejected);
    pthread_mutex_lock(&cc->mu);
    for (struct ring *r = cc->rings; r != NULL; r = r->next)
        n += atomic_load(&r->head) - atomic_load(&r->marks);
    pthread_mutex_unlock(&cc->mu);
    return n;
}

/*
 * The figures, read in an order that never shows an entry twice: those that
 * leave `pending` (stored, unconfirmed, dropped) are read after recorded, so
 * pending, recorded - the others, may only look smaller than it is (it is
 * clamped at 0) while other threads record; once they stopped and the
 * writer is idle (after tc_flush, and after the close) it is exact.
 */
int tc_stats(const tc_client *c, struct tc_stats *out)
{
    tc_client *cc = (tc_client *)c;
    struct tc_stats st = {0};
    uint64_t settled;

    if (out == NULL || out->size < TC_STATS_V1_SIZE)
        return -EINVAL;
    st.size = out->size < sizeof(st) ? out->size : (uint32_t)sizeof(st);
    if (c != NULL) {
        st.recorded = tc_recorded(c);
        st.stored = atomic_load(&cc->acked);
        st.unconfirmed = atomic_load(&cc->unconfirmed);
        st.dropped = atomic_load(&cc->dropped);
        st.sent = atomic_load(&cc->sent);
        settled = st.stored + st.unconfirmed + st.dropped;
        st.pending = st.recorded > settled ? st.recorded - settled : 0;
    }
    memcpy(out, &st, st.size); /* a caller built against an older, smaller struct gets its part */
    return 0;
}

/*
 * The counters flush and bye carry: as tc_stats says, what the last ack
 * said, and the per-op drops (k->ops: the caller frees it).
 */
void tcclient_counters(tc_client *c, struct proto_counters *k)
{
    k->given = true;
    k->n_ops = tcrecord_op_drops(c, &k->ops);
    k->recorded = tc_recorded(c);
    k->acked = atomic_load(&c->acked);
    k->sent = atomic_load(&c->sent);
    k->dropped = atomic_load(&c->dropped);
}

int64_t tc_session_id(const tc_client *c)
{
    return c != NULL && !c->disabled ? c->session_id : -1;
}
