/*
 * peerhome.c — the home's listener, member links and snapshot table (peerhome.h).
 */
#include "peerhome.h"
#include "daemon.h"
#include "log.h"
#include "peerarr.h"
#include "peerclock_io.h"
#include "peerclock_wire.h"
#include "peermsg.h"
#include "peerlate.h"
#include "peersnap.h"
#include "session.h"

#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

struct peerhome_host {
    struct peerhome_host *next;
    char name[PEERMSG_MAX_HOST + 1];
    struct peerhome_link *link;       /* the link that holds the name; NULL while none */
    struct peerhome_link *clock_link; /* its clock link; NULL while none */
    struct peerclock *clock;          /* its clock against the home's; NULL until a clock link */
    uint64_t rx_ms;                   /* uv_now() when a link of this host last spoke */
    uint32_t index;                   /* 1, 2, ...: its clock's place in peerarr_table_due's */
    uint64_t arrivals;                /* collective arrivals taken from it */
    uint64_t arrivals_queued_out;     /* its queue's drops, as its last `arrivals` said */
    uint64_t arrivals_refused;        /* arrivals the home's table could not take */
    size_t parts, bytes;              /* what its snapshots take (PEERHOME_MAX_*) */
};

/* The latest snapshot of one session from one member host. */
struct peerhome_part {
    struct peerhome_part *next;
    char *session;
    struct peerhome_host *host;
    char *snap; /* the `snapshot` message, repacked from what was decoded */
    size_t len;
    uint64_t seq, rx_ms;
    uint64_t sid;                 /* the member's own id of the session */
    int64_t started_ns, ended_ns; /* its wall-clock times (ended_ns 0: live or unknown) */
    bool ended;
};

struct peerhome_link {
    struct peerlink l;
    struct peerhome *h;
    struct peerhome_link *next;
    struct peerhome_host *host; /* NULL until peer_hello or clock_hello */
    bool replaced;              /* a newer link of its host took its place */
    /* a clock link (clock_hello): the burst in flight, probe `got` of PEERCLOCK_PROBES */
    bool clock, probing;
    uint32_t seq;
    size_t got;
    uint64_t burst_ms; /* uv_now() when the burst in flight began */
    struct peerclock_sample samples[PEERCLOCK_PROBES];
};

struct peerhome {
    struct daemon *d;
    SSL_CTX *ctx;
    uv_tcp_t listener;
    char *host;
    struct peerhome_link *links;
    size_t n_links;
    struct peerhome_host *hosts;
    struct peerhome_part *parts;
    uint32_t n_hosts;
    struct peerarr_table *arr; /* collective instances across hosts; NULL until arrivals come */
    struct peerlate *late;     /* the late-rank analysis across hosts; NULL with arr */
    bool stopping, listener_closed;
};

static void peerhome_maybe_free(struct peerhome *h)
{
    if (!h->stopping || !h->listener_closed || h->links != NULL)
        return;
    while (h->parts != NULL) {
        struct peerhome_part *p = h->parts;
        h->parts = p->next;
        free(p->session);
        free(p->snap);
        free(p);
    }
    while (h->hosts != NULL) {
        struct peerhome_host *x = h->hosts;
        h->hosts = x->next;
        free(x->clock);
        free(x);
    }
    peerarr_table_free(h->arr);
    peerlate_free(h->late);
    peerlink_ctx_free(h->ctx);
    free(h->host);
    free(h);
}

/* ---- replies --------------------------------------------------------------------- */

static void peerhome_send(struct peerhome_link *k, int (*pack)(msgpack_sbuffer *, const char *),
                          const char *arg)
{
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    if (pack(&sb, arg) == 0)
        peerlink_send(&k->l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static int peerhome_pack_pong(msgpack_sbuffer *sb, const char *unused)
{
    (void)unused;
    return peermsg_pack_ping(sb, true);
}

/* Bad input from a member: an error reply, then the link is closed (logged on close). */
static void peerhome_fail(struct peerhome_link *k, const char *code, const char *why)
{
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    if (peermsg_pack_error(&sb, code, why) == 0)
        peerlink_send(&k->l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    peerlink_close(&k->l, why);
}

/* ---- messages ---------------------------------------------------------------------- */

static struct peerhome_host *peerhome_host_get(struct peerhome *h, const char *name)
{
    struct peerhome_host *x;

    for (x = h->hosts; x != NULL; x = x->next)
        if (strcmp(x->name, name) == 0)
            return x;
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->index = ++h->n_hosts;
    x->next = h->hosts;
    h->hosts = x;
    return x;
}

static void peerhome_hello(struct peerhome_link *k, const msgpack_object *m)
{
    struct peerhome *h = k->h;
    uint64_t now = uv_now(h->d->loop);
    char name[PEERMSG_MAX_HOST + 1], err[PEERMSG_MAX_HOST + 96];
    struct peerhome_host *x;

    if (peermsg_host(m, name, err, sizeof(err)) < 0) {
        peerhome_fail(k, PROTO_E_MESSAGE, err);
        return;
    }
    if (strcmp(name, h->host) == 0) {
        peerhome_fail(k, "host_taken", "that host name is the home's own (--host)");
        return;
    }
    if ((x = peerhome_host_get(h, name)) == NULL) {
        peerhome_fail(k, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (x->link != NULL && now - x->link->l.rx_ms < PEERHOME_TAKEN_MS) {
        snprintf(err, sizeof(err), "host name \"%s\" is already a member (--host)", name);
        peerhome_fail(k, "host_taken", err);
        return;
    }
    if (x->link != NULL) {
        x->link->host = NULL;
        x->link->replaced = true;
        peerlink_close(&x->link->l, "replaced by a new link from the same host");
    }
    x->link = k;
    x->rx_ms = now;
    k->host = x;
    log_info("peer %s (%s): member joined", name, k->l.addr);
    peerhome_send(k, peermsg_pack_welcome, h->host);
}

/*
 * Frees the part of host x that ended longest ago, to make room (a home that
 * runs for months forgets the oldest ended sessions, never a live one).
 * False when x has no ended part.
 */
static bool peerhome_evict(struct peerhome *h, struct peerhome_host *x)
{
    struct peerhome_part **pp, **oldest = NULL, *p;

    /* <=: on equal times the later in the list, which is newest first, is the older */
    for (pp = &h->parts; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->host == x && (*pp)->ended &&
            (oldest == NULL || (*pp)->rx_ms <= (*oldest)->rx_ms))
            oldest = pp;
    if (oldest == NULL)
        return false;
    p = *oldest;
    *oldest = p->next;
    x->parts--;
    x->bytes -= p->len;
    free(p->session);
    free(p->snap);
    free(p);
    return true;
}

/* peerhome_evict() of a part other than keep (it is moved out of the way and back). */
static bool peerhome_evict_other(struct peerhome *h, struct peerhome_host *x,
                                 struct peerhome_part *keep)
{
    bool ended = keep->ended, done;

    keep->ended = false;
    done = peerhome_evict(h, x);
    keep->ended = ended;
    return done;
}

static struct peerhome_part *peerhome_part_get(struct peerhome *h, struct peerhome_host *x,
                                               const char *session, uint64_t sid)
{
    struct peerhome_part *p;

    for (p = h->parts; p != NULL; p = p->next)
        if (p->host == x && p->sid == sid && strcmp(p->session, session) == 0)
            return p;
    if (x->parts >= PEERHOME_MAX_PARTS && !peerhome_evict(h, x))
        return NULL;
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return NULL;
    if ((p->session = strdup(session)) == NULL) {
        free(p);
        return NULL;
    }
    p->host = x;
    p->sid = sid;
    p->next = h->parts;
    h->parts = p;
    x->parts++;
    return p;
}

/* Keeps s as the latest of its session from k's host, and acks it. */
static void peerhome_keep(struct peerhome_link *k, const struct peersnap *s)
{
    struct peerhome_host *x = k->host;
    struct peerhome_part *p = peerhome_part_get(k->h, x, s->session, s->sid);
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (p == NULL) {
        peerhome_fail(k, "too_many_sessions", "too many sessions from this host");
        return;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (peersnap_pack(&pk, s) < 0 || sb.data == NULL) {
        msgpack_sbuffer_destroy(&sb);
        peerhome_fail(k, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    while (x->bytes - p->len + sb.size > PEERHOME_MAX_BYTES && peerhome_evict_other(k->h, x, p))
        ;
    if (x->bytes - p->len + sb.size > PEERHOME_MAX_BYTES) {
        msgpack_sbuffer_destroy(&sb);
        peerhome_fail(k, "too_large", "this host's snapshots take too much memory");
        return;
    }
    x->bytes = x->bytes - p->len + sb.size;
    free(p->snap);
    p->len = sb.size;
    p->snap = msgpack_sbuffer_release(&sb);
    p->seq = s->seq;
    p->ended = s->ended;
    p->started_ns = s->started_ns <= INT64_MAX ? (int64_t)s->started_ns : 0;
    p->ended_ns = s->ended_ns <= INT64_MAX ? (int64_t)s->ended_ns : 0;
    p->rx_ms = uv_now(k->h->d->loop);
    msgpack_sbuffer_init(&sb);
    if (peermsg_pack_ack(&sb, s->session, s->seq) == 0)
        peerlink_send(&k->l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void peerhome_snapshot(struct peerhome_link *k, const msgpack_object *m)
{
    struct peersnap s;
    char err[200];
    int rc = peersnap_decode(m, &s, err, sizeof(err));

    if (rc < 0) {
        peerhome_fail(k, rc == -ENOMEM ? PROTO_E_INTERNAL : PROTO_E_MESSAGE, err);
        return;
    }
    peerhome_keep(k, &s);
    peersnap_free(&s);
}

/*
 * `arrivals` (peerarr.h): each arrival goes into the table in the member's
 * own clock, converted when its instance is checked (peerhome_tick), with
 * the estimate in force then. The session's world is not known here, so an
 * instance without comm_size is checked when it ages out.
 */
static void peerhome_arrivals(struct peerhome_link *k, const msgpack_object *m)
{
    struct peerhome_host *x = k->host;
    struct peerarr_msg a;
    char err[200];
    int rc = peerarr_decode(m, &a, err, sizeof(err));

    if (rc < 0) {
        peerhome_fail(k, rc == -ENOMEM ? PROTO_E_INTERNAL : PROTO_E_MESSAGE, err);
        return;
    }
    if (strcmp(a.host, x->name) != 0) {
        peerarr_msg_free(&a);
        peerhome_fail(k, PROTO_E_MESSAGE, "arrivals: host is not the link's");
        return;
    }
    if (k->h->arr == NULL && (k->h->arr = peerarr_table_new(PEERARR_INSTANCES)) == NULL) {
        log_warn("peer: no memory for the arrivals of %s", x->name);
        x->arrivals_refused += a.n;
    }
    for (size_t i = 0; k->h->arr != NULL && i < a.n; i++) {
        if (peerarr_table_add(k->h->arr, a.session, x->index, &a.arr[i], 0, (int64_t)uv_hrtime()) ==
            0)
            x->arrivals++;
        else
            x->arrivals_refused++;
    }
    x->arrivals_queued_out = a.dropped;
    peerarr_msg_free(&a);
}

void peerhome_arrival(struct peerhome *h, const char *session, const struct peerarr_arrival *a,
                      int64_t world)
{
    if (h == NULL || h->stopping)
        return;
    if (h->arr == NULL && (h->arr = peerarr_table_new(PEERARR_INSTANCES)) == NULL)
        return;
    (void)peerarr_table_add(h->arr, session, 0, a, world > 0 ? (uint64_t)world : 0,
                            (int64_t)uv_hrtime());
}

/* ---- clock links ------------------------------------------------------------------------ */

/*
 * A member's clock link (proto/PROTOCOL.md "Clock probes"): after its
 * clock_hello it carries only probes and replies, as raw bytes
 * (peerclock_wire.h). Once a tick (PEERCLOCK_INTERVAL_MS) the home starts a
 * burst of PEERCLOCK_PROBES probes, each sent when the previous reply came
 * back (t1 just before the probe is encrypted and sent, t4 when the reply's
 * bytes were read from the socket: uv_hrtime, the home's CLOCK_MONOTONIC), and gives the burst to
 * the host's estimator. A bad reply closes the clock link only; a burst still unfinished at the
 * next tick (a reply a second late) too.
 */
static void peerhome_probe(struct peerhome_link *k)
{
    struct peerclock_msg q = {.type = PEERCLOCK_PROBE, .seq = ++k->seq};
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    int n;

    q.t1 = (int64_t)uv_hrtime();
    n = peerclock_wire_encode(&q, buf, sizeof(buf));
    k->samples[k->got].t1 = q.t1;
    if (n < 0 || peerlink_send(&k->l, (const char *)buf, (size_t)n) < 0)
        peerlink_close(&k->l, "cannot send a clock probe");
}

static void peerhome_clock_start(struct peerhome_link *k)
{
    uint64_t now = uv_now(k->h->d->loop);

    if (k->probing && now - k->burst_ms >= PEERCLOCK_INTERVAL_MS)
        peerlink_close(&k->l, "a clock reply more than a second late");
    if (k->probing)
        return;
    k->probing = true;
    k->burst_ms = now;
    k->got = 0;
    peerhome_probe(k);
}

/* A whole burst: into the host's estimator. */
static void peerhome_clock_burst(struct peerhome_link *k)
{
    struct peerhome_host *x = k->host;
    struct peerclock_burst b;
    int rc = peerclock_add_burst(x->clock, k->samples, k->got, &b);

    k->probing = false;
    if (rc == 0)
        log_debug("peer %s: clock burst: offset %lld ns within %lld ns (the minimum round "
                  "trip's alone: %lld ns)",
                  x->name, (long long)b.offset, (long long)b.bound, (long long)b.rtt_bound);
    if (rc < 0) {
        /* Samples that contradict the clock so far (or are impossible): the member's clock
         * is not the one measured before (a restart elsewhere) or it is lying. Start over. */
        peerclock_init(x->clock);
        peerlink_close(&k->l, "a burst of clock replies contradicts itself or the past");
    }
}

static void peerhome_clock_raw_cb(struct peerlink *l, const char *p, size_t len)
{
    int64_t t4 = (int64_t)l->rx_ns; /* read before TLS decrypted it: a tighter bound */
    struct peerhome_link *k = l->data;
    struct peerclock_sample *s = &k->samples[k->got];
    struct peerclock_msg r;
    int n = peerclock_wire_decode((const uint8_t *)p, len, &r);

    if (n != (int)len || r.type != PEERCLOCK_REPLY || !k->probing || r.seq != k->seq ||
        r.t1 != s->t1 || r.t3 < r.t2 || r.t3 - r.t2 > t4 - s->t1) {
        peerlink_close(l, "a bad clock reply");
        return;
    }
    s->t2 = r.t2;
    s->t3 = r.t3;
    s->t4 = t4;
    if (++k->got < PEERCLOCK_PROBES)
        peerhome_probe(k);
    else
        peerhome_clock_burst(k);
}

static void peerhome_clock_hello(struct peerhome_link *k, const msgpack_object *m)
{
    struct peerhome *h = k->h;
    char name[PEERMSG_MAX_HOST + 1], err[PEERMSG_MAX_HOST + 96];
    struct peerhome_host *x;

    if (peermsg_host(m, name, err, sizeof(err)) < 0) {
        peerhome_fail(k, PROTO_E_MESSAGE, err);
        return;
    }
    for (x = h->hosts; x != NULL && strcmp(x->name, name) != 0; x = x->next)
        ;
    if (x == NULL || x->link == NULL) {
        snprintf(err, sizeof(err), "clock_hello: host \"%s\" has no member link", name);
        peerhome_fail(k, PROTO_E_MESSAGE, err);
        return;
    }
    if (x->clock == NULL && (x->clock = malloc(sizeof(*x->clock))) != NULL)
        peerclock_init(x->clock);
    if (x->clock == NULL) {
        peerhome_fail(k, PROTO_E_INTERNAL, "out of memory");
        return;
    }
    if (x->clock_link != NULL) {
        x->clock_link->host = NULL;
        x->clock_link->replaced = true;
        peerlink_close(&x->clock_link->l, "replaced by a new clock link from the same host");
    }
    x->clock_link = k;
    k->host = x;
    k->clock = true;
    peerlink_raw(&k->l, PEERCLOCK_WIRE_MAX);
    log_debug("peer %s (%s): clock link up", name, k->l.addr);
    peerhome_clock_start(k);
}

static void peerhome_msg_cb(struct peerlink *l, const msgpack_object *m)
{
    struct peerhome_link *k = l->data;
    enum peermsg_type t = peermsg_type(m);
    char text[220];

    if (k->host == NULL) {
        if (t == PEERMSG_HELLO)
            peerhome_hello(k, m);
        else if (t == PEERMSG_CLOCK_HELLO)
            peerhome_clock_hello(k, m);
        else
            peerhome_fail(k, PROTO_E_MESSAGE, "the first message must be peer_hello");
        return;
    }
    k->host->rx_ms = uv_now(k->h->d->loop);
    switch (t) {
    case PEERMSG_PING:
        peerhome_send(k, peerhome_pack_pong, NULL);
        break;
    case PEERMSG_SNAPSHOT:
        peerhome_snapshot(k, m);
        break;
    case PEERMSG_ARRIVALS:
        peerhome_arrivals(k, m);
        break;
    case PEERMSG_ERROR:
        peermsg_error_text(m, text, sizeof(text));
        peerlink_close(l, text);
        break;
    default:
        peerhome_fail(k, PROTO_E_MESSAGE, "unknown or unexpected message type");
        break;
    }
}

static void peerhome_ready_cb(struct peerlink *l)
{
    log_debug("peer %s: TLS handshake done", l->addr);
}

static void peerhome_close_cb(struct peerlink *l, const char *reason)
{
    struct peerhome_link *k = l->data, **pp;
    struct peerhome *h = k->h;

    if (k->host != NULL && k->clock) {
        log_warn("peer %s (%s): clock link closed: %s", k->host->name, l->addr, reason);
        k->host->clock_link = NULL;
    } else if (k->host != NULL) {
        log_warn("peer %s (%s): link closed: %s", k->host->name, l->addr, reason);
        k->host->link = NULL;
    } else if (k->replaced) {
        log_info("peer %s: %s", l->addr, reason);
    } else {
        log_warn("peer %s: refused: %s", l->addr, reason);
    }
    for (pp = &h->links; *pp != NULL; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    h->n_links--;
    free(k);
    peerhome_maybe_free(h);
}

static const struct peerlink_ops peerhome_link_ops = {
    .on_ready = peerhome_ready_cb,
    .on_msg = peerhome_msg_cb,
    .on_close = peerhome_close_cb,
    .on_raw = peerhome_clock_raw_cb,
};

static void peerhome_spare_closed_cb(uv_handle_t *handle)
{
    free(handle);
}

static void peerhome_connection_cb(uv_stream_t *server, int status)
{
    struct peerhome *h = server->data;
    struct peerhome_link *k;
    uv_tcp_t *spare;

    if (status < 0 || h->stopping)
        return;
    k = h->n_links < PEERHOME_MAX_LINKS ? calloc(1, sizeof(*k)) : NULL;
    if (k == NULL) {
        /* Accept and drop it, so the backlog does not wake the loop again and again. */
        log_warn("peer: a connection refused: %s",
                 h->n_links < PEERHOME_MAX_LINKS ? "out of memory" : "too many peer links");
        spare = malloc(sizeof(*spare));
        if (spare != NULL && uv_tcp_init(h->d->loop, spare) == 0) {
            uv_accept(server, (uv_stream_t *)spare);
            uv_close((uv_handle_t *)spare, peerhome_spare_closed_cb);
        } else {
            free(spare);
        }
        return;
    }
    k->h = h;
    k->next = h->links;
    h->links = k;
    h->n_links++;
    peerlink_accept(&k->l, h->d->loop, h->ctx, server, &peerhome_link_ops, k);
}

/* ---- start, tick, stop -------------------------------------------------------------- */

static void peerhome_listener_closed_cb(uv_handle_t *handle)
{
    struct peerhome *h = handle->data;

    h->listener_closed = true;
    peerhome_maybe_free(h);
}

struct peerhome *peerhome_start(struct daemon *d, const char *addr, const char *host,
                                const uint8_t psk[PEERLINK_PSK_LEN], char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    struct peerhome *h;
    int rc;

    if (peerlink_parse_addr(addr, &ss) < 0) {
        snprintf(err, errlen, "--peer-listen %s: not ADDR:PORT (an IP address and a port)", addr);
        return NULL;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL || (h->host = strdup(host)) == NULL ||
        (h->ctx = peerlink_ctx_new(true, psk)) == NULL) {
        snprintf(err, errlen, "--peer-listen: cannot set up TLS");
        if (h != NULL)
            free(h->host);
        free(h);
        return NULL;
    }
    h->d = d;
    uv_tcp_init(d->loop, &h->listener);
    h->listener.data = h;
    rc = uv_tcp_bind(&h->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->listener, 64, peerhome_connection_cb);
    if (rc < 0) {
        snprintf(err, errlen, "--peer-listen %s: %s", addr, uv_strerror(rc));
        h->stopping = true;
        uv_close((uv_handle_t *)&h->listener, peerhome_listener_closed_cb);
        return NULL;
    }
    log_info("peer: home \"%s\" listening on %s (TLS 1.3, pre-shared key)", host, addr);
    return h;
}

/* Checks the instances due against the clocks of the hosts they came from (peerarr.h). */
static void peerhome_arrivals_due(struct peerhome *h)
{
    struct peerclock **clocks;

    if (h->arr == NULL)
        return;
    if (h->late == NULL && (h->late = peerlate_new()) == NULL)
        return; /* the next tick checks them */
    if ((clocks = calloc((size_t)h->n_hosts + 1, sizeof(*clocks))) == NULL)
        return; /* the next tick checks them */
    for (struct peerhome_host *x = h->hosts; x != NULL; x = x->next)
        clocks[x->index] = x->clock;
    if (peerarr_table_due(h->arr, (int64_t)uv_hrtime(), PEERARR_AGE_NS, clocks,
                          (size_t)h->n_hosts + 1, peerlate_due_cb, h->late) > 0) {
        struct peerarr_stats st;
        peerarr_table_stats(h->arr, &st);
        log_debug("peer: collective instances checked: %llu (%llu complete), clock checks %llu, "
                  "evicted %llu",
                  (unsigned long long)st.instances, (unsigned long long)st.complete,
                  (unsigned long long)st.checks, (unsigned long long)st.evicted);
    }
    free(clocks);
}

void peerhome_tick(struct peerhome *h)
{
    uint64_t now;

    if (h == NULL || h->stopping)
        return;
    now = uv_now(h->d->loop);
    for (struct peerhome_link *k = h->links; k != NULL; k = k->next)
        if (k->host != NULL && now - k->l.rx_ms >= PEERHOME_DEAD_MS)
            peerlink_close(&k->l, "silent for 3 s");
        else if (k->clock && k->host != NULL && !k->l.closing)
            peerhome_clock_start(k);
    peerhome_arrivals_due(h);
}

void peerhome_stop(struct peerhome *h)
{
    if (h == NULL || h->stopping)
        return;
    h->stopping = true;
    uv_close((uv_handle_t *)&h->listener, peerhome_listener_closed_cb);
    for (struct peerhome_link *k = h->links; k != NULL; k = k->next)
        peerlink_close(&k->l, "the home is stopping");
}

bool peerhome_has(const struct peerhome *h, const char *session)
{
    for (const struct peerhome_part *p = h != NULL ? h->parts : NULL; p != NULL; p = p->next)
        if (strcmp(p->session, session) == 0)
            return true;
    return false;
}

/* The state of one part now (peerhome.h STATES). */
static const char *peerhome_part_state(const struct peerhome *h, const struct peerhome_part *p)
{
    uint64_t silent = uv_now(h->d->loop) - p->host->rx_ms;

    if (p->ended)
        return "ended";
    if (p->host->link != NULL && silent < PEERHOME_STALE_MS)
        return "live";
    return silent < h->d->opt.linger_ms ? "stale" : "lost";
}

const char *peerhome_state(const struct peerhome *h, const char *name)
{
    for (const struct peerhome_part *p = h->parts; p != NULL; p = p->next) {
        const char *st;
        if (strcmp(p->session, name) != 0)
            continue;
        st = peerhome_part_state(h, p);
        if (strcmp(st, "live") == 0 || strcmp(st, "stale") == 0)
            return "live";
    }
    return "ended";
}

static int peerhome_part_cmp(const void *a, const void *b)
{
    return strcmp(((const struct peermerge_part *)a)->host,
                  ((const struct peermerge_part *)b)->host);
}

/*
 * Whether part p belongs to the job that ran from `from` to `to` (wall-clock
 * ns; to 0: still running): their times overlap, give or take
 * PEERHOME_SLACK_NS for clocks and lingering. A part without times (an
 * older member) always does.
 */
static bool peerhome_in_window(const struct peerhome_part *p, int64_t from, int64_t to)
{
    int64_t now = session_now_ns();
    int64_t pend = p->ended_ns > 0 ? p->ended_ns : now, end = to > 0 ? to : now;

    if (p->started_ns <= 0)
        return true;
    return p->started_ns <= end + PEERHOME_SLACK_NS && pend >= from - PEERHOME_SLACK_NS;
}

size_t peerhome_hosts(const struct peerhome *h, const char *name, int64_t from_ns, int64_t to_ns)
{
    size_t n = 0;

    for (const struct peerhome_part *p = h != NULL ? h->parts : NULL; p != NULL; p = p->next) {
        bool seen = false;
        if (strcmp(p->session, name) != 0 || !peerhome_in_window(p, from_ns, to_ns))
            continue;
        /* a host's two jobs of one name may both overlap: count the host once */
        for (const struct peerhome_part *q = h->parts; q != p && !seen; q = q->next)
            seen = q->host == p->host && strcmp(q->session, name) == 0 &&
                   peerhome_in_window(q, from_ns, to_ns);
        n += !seen;
    }
    return n;
}

/* The window of the newest job of that name only members hold: its newest part's times. */
static void peerhome_newest(const struct peerhome *h, const char *name, int64_t *from, int64_t *to)
{
    const struct peerhome_part *newest = NULL;

    for (const struct peerhome_part *p = h->parts; p != NULL; p = p->next)
        if (strcmp(p->session, name) == 0 && (newest == NULL || p->started_ns > newest->started_ns))
            newest = p;
    *from = newest != NULL ? newest->started_ns : 0;
    *to = newest != NULL && newest->ended_ns > 0 ? newest->ended_ns : 0;
}

/*
 * The clock of one member part (peerhome.h CLOCKS): the estimate in force
 * now, the mean drift over the last PEERHOME_DRIFT_SPAN_NS, and a copy of the
 * estimator for the worker to convert the member's times. Before the first
 * burst, unknown: offset and bound nil (bound_ns -1), no copy; drift nil
 * until two bursts. 0 or -ENOMEM.
 */
static int peerhome_clock(const struct peerclock *c, struct peermerge_part *q)
{
    struct peerclock_at at;
    double ppm;

    q->offset_ns = 0;
    q->bound_ns = -1;
    q->drift_ppm = NAN;
    q->violations = c != NULL ? c->violations : 0;
    if (c == NULL || peerclock_offset_at(c, (int64_t)uv_hrtime(), &at) < 0)
        return 0;
    q->offset_ns = at.offset_ns;
    q->bound_ns = at.bound_ns;
    q->probe_bound_ns = at.probe_bound_ns;
    if (peerclock_drift(c, PEERHOME_DRIFT_SPAN_NS, &ppm, NULL) == 0)
        q->drift_ppm = ppm;
    if ((q->clock = malloc(sizeof(*q->clock))) == NULL)
        return -ENOMEM;
    memcpy(q->clock, c, sizeof(*c));
    return 0;
}

/* out->late: the late-rank analysis across hosts of session name, if any. 0 or -ENOMEM. */
static int peerhome_late(const struct peerhome *h, const char *name, struct peermerge *out)
{
    const char **hosts;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (h->late == NULL)
        return 0;
    if ((hosts = calloc((size_t)h->n_hosts + 1, sizeof(*hosts))) == NULL)
        return -ENOMEM;
    hosts[0] = h->host;
    for (const struct peerhome_host *x = h->hosts; x != NULL; x = x->next)
        hosts[x->index] = x->name;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = peerlate_pack(h->late, name, hosts, (size_t)h->n_hosts + 1, &pk);
    free(hosts);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc == -ENOENT ? 0 : rc;
    }
    out->late_len = sb.size;
    out->late = msgpack_sbuffer_release(&sb);
    return 0;
}

int peerhome_late_map(const struct peerhome *h, const char *name, struct peermerge *out)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (h->late == NULL)
        return 0;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if ((rc = peerlate_pack_late(h->late, name, &pk)) < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc == -ENOENT ? 0 : rc;
    }
    free(out->late);
    out->late_len = sb.size;
    out->late = msgpack_sbuffer_release(&sb);
    return 0;
}

int peerhome_collect(const struct peerhome *h, const char *name, const char *home_state,
                     int64_t from_ns, int64_t to_ns, struct peermerge *out)
{
    uint64_t now = uv_now(h->d->loop);
    size_t n = 0;

    memset(out, 0, sizeof(*out));
    if (from_ns < 0)
        peerhome_newest(h, name, &from_ns, &to_ns);
    for (const struct peerhome_part *p = h->parts; p != NULL; p = p->next)
        n += strcmp(p->session, name) == 0 && peerhome_in_window(p, from_ns, to_ns);
    if (n == 0)
        return 0;
    out->parts = calloc(n, sizeof(*out->parts));
    out->home_host = strdup(h->host);
    out->home_state = home_state;
    if (out->parts == NULL || out->home_host == NULL)
        goto nomem;
    for (const struct peerhome_part *p = h->parts; p != NULL; p = p->next) {
        struct peermerge_part *q;
        if (strcmp(p->session, name) != 0 || !peerhome_in_window(p, from_ns, to_ns))
            continue;
        q = &out->parts[out->n_parts++];
        q->state = peerhome_part_state(h, p);
        q->age_ns = (now - p->rx_ms) * 1000000;
        if (peerhome_clock(p->host->clock, q) < 0)
            goto nomem;
        q->arrivals = p->host->arrivals;
        q->arrivals_dropped = p->host->arrivals_queued_out + p->host->arrivals_refused;
        q->host = strdup(p->host->name);
        q->snap = malloc(p->len);
        if (q->host == NULL || q->snap == NULL)
            goto nomem;
        memcpy(q->snap, p->snap, p->len);
        q->snap_len = p->len;
    }
    if (peerhome_late(h, name, out) < 0)
        goto nomem;
    qsort(out->parts, out->n_parts, sizeof(*out->parts), peerhome_part_cmp);
    return 1;
nomem:
    peermerge_free(out);
    return -ENOMEM;
}
