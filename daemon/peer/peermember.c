/*
 * peermember.c — the member's link to its home and its snapshots (peermember.h).
 */
#include "peermember.h"
#include "peerarr.h"
#include "daemon.h"
#include "log.h"
#include "peerclock_wire.h"
#include "peermsg.h"
#include "peersnap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/ssl.h>

/* One session this member forwards. */
struct peermember_fwd {
    struct peermember_fwd *next;
    int64_t id;
    char *name;
    bool busy;          /* a snapshot read in flight */
    bool unsupported;   /* its file has no exact aggregates: never sent (logged once) */
    uint64_t final_seq; /* the seq of its last snapshot, sent after the writer ended it; 0 none */
    /* what its last snapshot sent said, on which link (gen), when: an unchanged live session
     * is not read again for PEERMEMBER_RESEND_MS */
    uint64_t sent_entries, sent_dropped, sent_processes, sent_gen, sent_ms;
    uint64_t sent_arr_dropped; /* the queue's drops its last `arrivals` said */
    /* its `ranks` rows as read last (peermember.h RANK ROWS), when, and what the read took */
    struct ranks_row *rows;
    size_t n_rows;
    uint64_t rows_cut, rows_ms, rows_cost_ms;
    bool rows_read;
};

struct peermember_link {
    struct peerlink l;
    struct peermember *m;
};

struct peermember {
    struct peermember *next; /* d->peer_routes */
    struct daemon *d;
    bool all;      /* --home: every session not routed elsewhere */
    int64_t *skip; /* all: sessions a hello routed to another home */
    size_t n_skip, cap_skip;
    SSL_CTX *ctx;
    struct sockaddr_storage addr;
    char *home, *host;
    struct peermember_link *link;  /* NULL while none */
    struct peermember_link *clock; /* the clock link, made once welcomed; NULL while none */
    bool welcomed;
    uv_timer_t retry;
    uint64_t backoff_ms;
    struct peermember_fwd *fwd;
    size_t n_work;
    uint64_t seq;     /* of the last snapshot sent, over all sessions */
    uint64_t gen;     /* welcomes so far: a new link resends everything */
    int64_t first_id; /* sessions from this id on are forwarded, live or ended */
    bool stopping, retry_closed;
    char last_refusal[160];  /* logged once until it changes */
    char clock_refusal[160]; /* the clock link's, likewise (a home refusing it every tick) */
};

/* A snapshot read on the thread pool. */
struct peermember_work {
    uv_work_t req;
    struct peermember *m;
    struct peermember_fwd *f;
    struct store *store;
    atomic_bool *cancel;
    char path[PATH_MAX];
    bool ended_at_queue, final;
    bool with_ranks;              /* read the rank rows (else the snapshot carries f's) */
    uint64_t read_ms;             /* what the read took */
    int64_t started_ns, ended_ns; /* the session's wall-clock times (ended: 0 while live) */
    int rc;
    char err[200];
    struct peersnap snap;
};

static void peermember_connect(struct peermember *m);
static void peermember_clock_connect(struct peermember *m);

static void peermember_fwd_free(struct peermember_fwd *f)
{
    free(f->rows);
    free(f->name);
    free(f);
}

static void peermember_maybe_free(struct peermember *m)
{
    if (!m->stopping || !m->retry_closed || m->link != NULL || m->clock != NULL || m->n_work > 0)
        return;
    while (m->fwd != NULL) {
        struct peermember_fwd *f = m->fwd;
        m->fwd = f->next;
        peermember_fwd_free(f);
    }
    peerlink_ctx_free(m->ctx);
    free(m->skip);
    free(m->home);
    free(m->host);
    free(m);
}

static void peermember_send_packed(struct peermember *m, msgpack_sbuffer *sb, int rc)
{
    if (rc == 0 && m->link != NULL)
        peerlink_send(&m->link->l, sb->data, sb->size);
    msgpack_sbuffer_destroy(sb);
}

/* ---- the link -------------------------------------------------------------------------- */

static void peermember_ready_cb(struct peerlink *l)
{
    struct peermember_link *k = l->data;
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    peermember_send_packed(k->m, &sb, peermsg_pack_hello(&sb, k->m->host));
}

static void peermember_ack(struct peermember *m, const msgpack_object *msg)
{
    char session[PROTO_MAX_SESSION + 1], err[120];
    uint64_t seq;

    if (peermsg_ack(msg, session, &seq, err, sizeof(err)) < 0) {
        peerlink_close(&m->link->l, err);
        return;
    }
    for (struct peermember_fwd **pp = &m->fwd; *pp != NULL; pp = &(*pp)->next) {
        struct peermember_fwd *f = *pp;
        if (strcmp(f->name, session) != 0 || f->final_seq == 0 || seq < f->final_seq || f->busy)
            continue;
        log_info("peer: session %lld (%s): the home has its final snapshot", (long long)f->id,
                 f->name);
        *pp = f->next;
        peermember_fwd_free(f);
        return;
    }
}

static void peermember_msg_cb(struct peerlink *l, const msgpack_object *msg)
{
    struct peermember_link *k = l->data;
    struct peermember *m = k->m;
    char text[PEERMSG_MAX_HOST + 1 > 220 ? PEERMSG_MAX_HOST + 1 : 220], err[320];

    switch (peermsg_type(msg)) {
    case PEERMSG_WELCOME:
        if (m->welcomed || peermsg_host(msg, text, err, sizeof(err)) < 0) {
            peerlink_close(l, m->welcomed ? "a second peer_welcome" : err);
            return;
        }
        m->welcomed = true;
        m->gen++;
        m->backoff_ms = PEERMEMBER_RETRY_MIN_MS;
        m->last_refusal[0] = '\0';
        log_info("peer: member \"%s\" joined home \"%s\" at %s", m->host, text, m->home);
        peermember_clock_connect(m);
        break;
    case PEERMSG_PONG:
        break;
    case PEERMSG_ACK:
        if (m->welcomed)
            peermember_ack(m, msg);
        break;
    case PEERMSG_ERROR:
        peermsg_error_text(msg, text, sizeof(text));
        snprintf(err, sizeof(err), "refused by the home: %s", text);
        peerlink_close(l, err);
        break;
    default:
        peerlink_close(l, "an unknown or unexpected message from the home");
        break;
    }
}

static void peermember_retry_cb(uv_timer_t *t)
{
    peermember_connect(t->data);
}

static void peermember_close_cb(struct peerlink *l, const char *reason)
{
    struct peermember_link *k = l->data;
    struct peermember *m = k->m;
    char why[sizeof(l->reason)];

    snprintf(why, sizeof(why), "%s", reason); /* reason is l's, freed with k */
    reason = why;
    m->link = NULL;
    free(k);
    if (m->clock != NULL)
        peerlink_close(&m->clock->l, "the home's link closed");
    if (m->stopping) {
        peermember_maybe_free(m);
        return;
    }
    /* A home that stays away or refuses is logged once per reason, not once per retry. */
    if (m->welcomed || strcmp(m->last_refusal, reason) != 0)
        log_warn("peer: link to home %s closed: %s; retrying", m->home, reason);
    snprintf(m->last_refusal, sizeof(m->last_refusal), "%s", reason);
    m->welcomed = false;
    uv_timer_start(&m->retry, peermember_retry_cb, m->backoff_ms, 0);
    m->backoff_ms =
        m->backoff_ms * 2 > PEERMEMBER_RETRY_MAX_MS ? PEERMEMBER_RETRY_MAX_MS : m->backoff_ms * 2;
}

static const struct peerlink_ops peermember_link_ops = {
    .on_ready = peermember_ready_cb,
    .on_msg = peermember_msg_cb,
    .on_close = peermember_close_cb,
};

static void peermember_connect(struct peermember *m)
{
    struct peermember_link *k;

    if (m->stopping || m->link != NULL)
        return;
    k = calloc(1, sizeof(*k));
    if (k == NULL) {
        uv_timer_start(&m->retry, peermember_retry_cb, PEERMEMBER_RETRY_MAX_MS, 0);
        return;
    }
    k->m = m;
    m->link = k;
    /* On failure on_close runs (and schedules the retry). */
    peerlink_connect(&k->l, m->d->loop, m->ctx, (const struct sockaddr *)&m->addr,
                     &peermember_link_ops, k);
}

/* ---- the clock link ---------------------------------------------------------------------- */

/*
 * The clock link (proto/PROTOCOL.md "Clock probes"): a connection of its
 * own, so that a probe never waits behind a snapshot. It says clock_hello,
 * then carries only the home's probes and this member's replies, answered
 * from the loop at once: t2 when the probe's bytes were read from the socket
 * (peerlink rx_ns), t3 just before the reply is encrypted and written
 * (uv_hrtime: CLOCK_MONOTONIC). Whatever delays the loop adds
 * lands inside the round trip: it widens the bound, never breaks it.
 */
static void peermember_clock_ready_cb(struct peerlink *l)
{
    struct peermember_link *k = l->data;
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    if (peermsg_pack_clock_hello(&sb, k->m->host) == 0)
        peerlink_send(l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    peerlink_raw(l, PEERMEMBER_CLOCK_MAX);
}

static void peermember_clock_msg_cb(struct peerlink *l, const msgpack_object *msg)
{
    (void)msg; /* never called: the link is raw from its first byte */
    peerlink_close(l, "a message before clock_hello");
}

/* Not a probe: the home's `error` (its reason logged), or a bad home. The link is closed. */
static void peermember_clock_bad(struct peerlink *l, const char *p, size_t len)
{
    char text[220], why[260];
    msgpack_unpacked u;

    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, p, len, NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && peermsg_type(&u.data) == PEERMSG_ERROR) {
        peermsg_error_text(&u.data, text, sizeof(text));
        snprintf(why, sizeof(why), "refused by the home: %s", text);
    } else {
        snprintf(why, sizeof(why), "the home sent something other than a clock probe");
    }
    msgpack_unpacked_destroy(&u);
    peerlink_close(l, why);
}

static void peermember_clock_raw_cb(struct peerlink *l, const char *p, size_t len)
{
    int64_t t2 = (int64_t)l->rx_ns; /* read before TLS decrypted it: a tighter bound */
    struct peerclock_msg q;
    uint8_t out[PEERCLOCK_WIRE_MAX];
    int n = peerclock_wire_decode((const uint8_t *)p, len, &q);

    if (n != (int)len || q.type != PEERCLOCK_PROBE) {
        peermember_clock_bad(l, p, len);
        return;
    }
    q.type = PEERCLOCK_REPLY;
    q.t2 = t2;
    q.t3 = (int64_t)uv_hrtime();
    n = peerclock_wire_encode(&q, out, sizeof(out));
    if (n > 0)
        peerlink_send(l, (const char *)out, (size_t)n);
}

static void peermember_clock_close_cb(struct peerlink *l, const char *reason)
{
    struct peermember_link *k = l->data;
    struct peermember *m = k->m;

    if (!m->stopping && m->link != NULL && m->welcomed && strcmp(m->clock_refusal, reason) != 0) {
        log_warn("peer: clock link to home %s closed: %s; made again each second", m->home, reason);
        snprintf(m->clock_refusal, sizeof(m->clock_refusal), "%s", reason);
    }
    m->clock = NULL;
    free(k);
    peermember_maybe_free(m);
}

static const struct peerlink_ops peermember_clock_ops = {
    .on_ready = peermember_clock_ready_cb,
    .on_msg = peermember_clock_msg_cb,
    .on_close = peermember_clock_close_cb,
    .on_raw = peermember_clock_raw_cb,
};

static void peermember_clock_connect(struct peermember *m)
{
    struct peermember_link *k;

    if (m->stopping || m->clock != NULL || !m->welcomed)
        return;
    if ((k = calloc(1, sizeof(*k))) == NULL)
        return; /* the next tick tries again */
    k->m = m;
    m->clock = k;
    peerlink_connect(&k->l, m->d->loop, m->ctx, (const struct sockaddr *)&m->addr,
                     &peermember_clock_ops, k);
}

/* ---- snapshots --------------------------------------------------------------------------- */

static void peermember_work_cb(uv_work_t *req)
{
    struct peermember_work *w = (struct peermember_work *)req;

    if (atomic_load(w->cancel)) {
        w->rc = -ECANCELED;
        return;
    }
    /* A session just started may have no file yet (the writer makes it): the next tick. */
    if (access(w->path, F_OK) != 0) {
        w->rc = -ECANCELED;
        return;
    }
    /* Final only once the writer has applied the end (a zero wait: it does not block). */
    w->final = w->ended_at_queue && store_wait_ended(w->store, w->f->id, 0) == 0;
    w->read_ms = uv_hrtime() / 1000000;
    w->rc = peersnap_read(w->path, w->with_ranks, &w->snap, w->err, sizeof(w->err));
    w->read_ms = uv_hrtime() / 1000000 - w->read_ms;
}

/*
 * The rank rows of w's snapshot: those it read, kept in f for the snapshots that do not
 * read them (moved), or f's last ones lent to it (peermember_after_cb takes them back).
 */
static void peermember_rows(struct peermember_fwd *f, struct peermember_work *w, uint64_t now)
{
    if (w->with_ranks) {
        free(f->rows);
        f->rows = w->snap.rank_rows;
        f->n_rows = w->snap.n_rank_rows;
        f->rows_cut = w->snap.ranks_cut;
        f->rows_ms = now;
        f->rows_cost_ms = w->read_ms;
        f->rows_read = true;
    }
    w->snap.rank_rows = f->rows;
    w->snap.n_rank_rows = f->n_rows;
    w->snap.ranks_cut = f->rows_cut;
}

static void peermember_after_cb(uv_work_t *req, int status)
{
    struct peermember_work *w = (struct peermember_work *)req;
    struct peermember *m = w->m;
    struct peermember_fwd *f = w->f;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    m->n_work--;
    f->busy = false;
    if (status == 0 && w->rc == -ENOTSUP && !f->unsupported) {
        f->unsupported = true;
        log_warn("peer: session %lld (%s) is not forwarded: %s", (long long)f->id, f->name, w->err);
    } else if (status == 0 && w->rc < 0 && w->rc != -ECANCELED && w->rc != -EAGAIN) {
        log_warn("peer: session %lld (%s): %s", (long long)f->id, f->name, w->err);
    }
    if (status == 0 && w->rc == 0)
        peermember_rows(f, w, uv_now(m->d->loop));
    if (status == 0 && w->rc == 0 && m->link != NULL && m->welcomed && !m->stopping) {
        w->snap.session = f->name; /* borrowed for packing */
        w->snap.seq = ++m->seq;
        w->snap.ended = w->final;
        w->snap.sid = (uint64_t)f->id;
        w->snap.started_ns = w->started_ns > 0 ? (uint64_t)w->started_ns : 0;
        w->snap.ended_ns = w->final && w->ended_ns > 0 ? (uint64_t)w->ended_ns : 0;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        peermember_send_packed(m, &sb, peersnap_pack(&pk, &w->snap));
        w->snap.session = NULL;
        if (w->final)
            f->final_seq = w->snap.seq;
        f->sent_entries = w->snap.entries;
        f->sent_dropped = w->snap.dropped;
        f->sent_processes = w->snap.processes;
        f->sent_gen = m->gen;
        f->sent_ms = uv_now(m->d->loop);
    }
    w->snap.rank_rows = NULL; /* f's */
    w->snap.n_rank_rows = 0;
    peersnap_free(&w->snap);
    free(w);
    peermember_maybe_free(m);
}

static void peermember_queue(struct peermember *m, struct peermember_fwd *f,
                             const struct session *s)
{
    struct peermember_work *w = calloc(1, sizeof(*w));
    bool ended = s == NULL || !s->live;

    if (w == NULL)
        return; /* the next tick tries again */
    w->started_ns = s != NULL ? s->started_ns : 0;
    w->ended_ns = s != NULL && !s->live ? s->ended_ns : 0;
    w->m = m;
    w->f = f;
    w->store = m->d->store;
    w->cancel = &m->d->cancel;
    w->ended_at_queue = ended;
    w->with_ranks = ended || !f->rows_read ||
                    uv_now(m->d->loop) - f->rows_ms >= PEERMEMBER_RANKS_SHARE * f->rows_cost_ms;
    store_session_path(m->d->store, f->id, w->path, sizeof(w->path));
    if (uv_queue_work(m->d->loop, &w->req, peermember_work_cb, peermember_after_cb) < 0) {
        free(w);
        return;
    }
    f->busy = true;
    m->n_work++;
}

static struct session *peermember_session(struct peermember *m, int64_t id)
{
    for (struct session *s = m->d->reg.list; s != NULL; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static bool peermember_skipped(const struct peermember *m, int64_t id)
{
    for (size_t i = 0; i < m->n_skip; i++)
        if (m->skip[i] == id)
            return true;
    return false;
}

/* Forgets skipped sessions the registry no longer has (deleted), so the list stays bounded. */
static void peermember_prune_skip(struct peermember *m)
{
    size_t k = 0;

    for (size_t i = 0; i < m->n_skip; i++)
        if (peermember_session(m, m->skip[i]) != NULL)
            m->skip[k++] = m->skip[i];
    m->n_skip = k;
}

/*
 * Adds every session not forwarded yet that is live or began since the
 * member started (one that began and ended between two ticks included).
 */
static void peermember_adopt(struct peermember *m)
{
    for (struct session *s = m->d->reg.list; s != NULL; s = s->next) {
        struct peermember_fwd *f;
        if ((!s->live && s->id < m->first_id) || peermember_skipped(m, s->id))
            continue;
        for (f = m->fwd; f != NULL && f->id != s->id; f = f->next)
            ;
        if (f != NULL || (f = calloc(1, sizeof(*f))) == NULL)
            continue;
        if ((f->name = strdup(s->name)) == NULL) {
            free(f);
            continue;
        }
        f->id = s->id;
        f->next = m->fwd;
        m->fwd = f;
        if (s->id >= m->first_id)
            m->first_id = s->id + 1;
    }
}

/*
 * A live session whose counters are what its last snapshot on this link
 * said, sent less than PEERMEMBER_RESEND_MS ago: the home has it, no need to
 * read it again (an idle session costs a member nothing but the ping).
 */
static bool peermember_unchanged(const struct peermember *m, const struct peermember_fwd *f,
                                 const struct session *s)
{
    return s != NULL && s->live && f->sent_gen == m->gen && f->sent_entries == s->entries &&
           f->sent_dropped == s->dropped && f->sent_processes == s->processes &&
           uv_now(m->d->loop) - f->sent_ms < PEERMEMBER_RESEND_MS;
}

/*
 * The session's collective arrivals (peerarr.h): its queue made on its first
 * tick forwarded (a routed session's at its hello), then emptied into
 * `arrivals` messages of at most PEERARR_MAX_MSG while the link takes them.
 */
static void peermember_arrivals(struct peermember *m, struct peermember_fwd *f, struct session *s)
{
    struct peerarr_queue *q = s->arrq;
    struct peerarr_arrival *buf;

    if (q == NULL) {
        if (s->live)
            s->arrq = peerarr_queue_new();
        return;
    }
    if (q->n == 0 && q->dropped == f->sent_arr_dropped)
        return;
    if ((buf = malloc(PEERARR_MAX_MSG * sizeof(*buf))) == NULL)
        return; /* the next tick sends them */
    do {
        size_t n = peerarr_queue_take(q, buf, PEERARR_MAX_MSG);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        peermember_send_packed(m, &sb, peerarr_pack(&pk, f->name, m->host, q->dropped, buf, n));
    } while (q->n > 0 && m->link != NULL && !peerlink_busy(&m->link->l));
    f->sent_arr_dropped = q->dropped;
    free(buf);
}

void peermember_tick(struct peermember *m)
{
    msgpack_sbuffer sb;

    if (m == NULL || m->stopping)
        return;
    if (m->link != NULL && m->link->l.ready &&
        uv_now(m->d->loop) - m->link->l.rx_ms >= PEERMEMBER_DEAD_MS) {
        peerlink_close(&m->link->l, "no reply from the home for 3 s");
        return;
    }
    if (m->all) {
        peermember_prune_skip(m);
        peermember_adopt(m);
    }
    if (m->link == NULL || !m->welcomed)
        return;
    peermember_clock_connect(m);
    msgpack_sbuffer_init(&sb);
    peermember_send_packed(m, &sb, peermsg_pack_ping(&sb, false));
    for (struct peermember_fwd **pp = &m->fwd; *pp != NULL;) {
        struct peermember_fwd *f = *pp;
        struct session *s = peermember_session(m, f->id);
        if (s == NULL && !f->busy) { /* deleted */
            *pp = f->next;
            peermember_fwd_free(f);
            continue;
        }
        if (s != NULL && m->link != NULL)
            peermember_arrivals(m, f, s);
        if (!f->busy && !f->unsupported && m->link != NULL && !peerlink_busy(&m->link->l) &&
            !peermember_unchanged(m, f, s))
            peermember_queue(m, f, s);
        pp = &f->next;
    }
}

static void peermember_retry_closed_cb(uv_handle_t *h)
{
    struct peermember *m = h->data;

    m->retry_closed = true;
    peermember_maybe_free(m);
}

struct peermember *peermember_start(struct daemon *d, const char *home, const char *host,
                                    const uint8_t psk[PEERLINK_PSK_LEN], bool all, char *err,
                                    size_t errlen)
{
    struct peermember *m = calloc(1, sizeof(*m));

    if (m == NULL || peerlink_parse_addr(home, &m->addr) < 0) {
        snprintf(err, errlen, "--home %s: not ADDR:PORT (an IP address and a port)", home);
        free(m);
        return NULL;
    }
    m->d = d;
    m->all = all;
    m->backoff_ms = PEERMEMBER_RETRY_MIN_MS;
    m->first_id = d->reg.last_id + 1;
    if ((m->home = strdup(home)) == NULL || (m->host = strdup(host)) == NULL ||
        (m->ctx = peerlink_ctx_new(false, psk)) == NULL) {
        snprintf(err, errlen, "--home: cannot set up TLS");
        free(m->home);
        free(m->host);
        free(m);
        return NULL;
    }
    uv_timer_init(d->loop, &m->retry);
    m->retry.data = m;
    log_info("peer: member \"%s\" of home %s (TLS 1.3, pre-shared key)", host, home);
    peermember_connect(m);
    return m;
}

void peermember_stop(struct peermember *m)
{
    if (m == NULL || m->stopping)
        return;
    m->stopping = true;
    uv_close((uv_handle_t *)&m->retry, peermember_retry_closed_cb);
    if (m->link != NULL)
        peerlink_close(&m->link->l, "the member is stopping");
    if (m->clock != NULL)
        peerlink_close(&m->clock->l, "the member is stopping");
}

/* ---- sessions a producer routed (hello "home") ------------------------------------------- */

/* Forwards session s through m (once). */
static void peermember_take(struct peermember *m, struct session *s)
{
    struct peermember_fwd *f;

    for (f = m->fwd; f != NULL; f = f->next)
        if (f->id == s->id)
            return;
    if ((f = calloc(1, sizeof(*f))) == NULL || (f->name = strdup(s->name)) == NULL) {
        free(f);
        log_warn("peer: session %lld (%s): out of memory: not forwarded", (long long)s->id,
                 s->name);
        return;
    }
    f->id = s->id;
    f->next = m->fwd;
    m->fwd = f;
    if (s->arrq == NULL)
        s->arrq = peerarr_queue_new(); /* NULL: made at the next tick */
}

/*
 * Whether addr is this daemon's own --peer-listen: the same address and
 * port, or the same port when it listens on every address (0.0.0.0, ::).
 */
static bool peermember_is_self(const struct daemon *d, const struct sockaddr_storage *addr)
{
    struct sockaddr_storage own;
    const struct sockaddr_in *a = (const void *)addr, *o = (const void *)&own;

    if (d->opt.peer_listen == NULL || peerlink_parse_addr(d->opt.peer_listen, &own) < 0)
        return false;
    if (peerlink_addr_equal(addr, &own))
        return true;
    if (own.ss_family == AF_INET && o->sin_addr.s_addr == htonl(INADDR_ANY))
        return addr->ss_family == AF_INET && a->sin_port == o->sin_port;
    if (own.ss_family == AF_INET6) {
        const struct sockaddr_in6 *o6 = (const void *)&own, *a6 = (const void *)addr;
        return IN6_IS_ADDR_UNSPECIFIED(&o6->sin6_addr) && addr->ss_family == AF_INET6 &&
               a6->sin6_port == o6->sin6_port;
    }
    return false;
}

/* Whether some member of d already forwards session id. */
static bool peermember_forwarded(struct daemon *d, int64_t id)
{
    struct peermember *lists[2] = {d->peer_member, d->peer_routes};

    for (int i = 0; i < 2; i++)
        for (struct peermember *m = lists[i]; m != NULL; m = i == 0 ? NULL : m->next)
            for (struct peermember_fwd *f = m->fwd; f != NULL; f = f->next)
                if (f->id == id)
                    return true;
    return false;
}

void peermember_route(struct daemon *d, struct session *s, const char *home)
{
    struct peermember *m, *all = d->peer_member;
    struct sockaddr_storage ss;
    size_t n = 0;
    char err[300];

    if (home == NULL || d->stopping || peermember_forwarded(d, s->id))
        return; /* the first hello that names a home (or none) decides */
    if (!d->peer_keyed) {
        log_warn("session %lld (%s): its producers name the home %s, but this daemon has no "
                 "--peer-key: not forwarded",
                 (long long)s->id, s->name, home);
        return;
    }
    if (peerlink_parse_addr(home, &ss) < 0) {
        log_warn("session %lld (%s): home \"%.64s\" is not ADDR:PORT: not forwarded",
                 (long long)s->id, s->name, home);
        return;
    }
    if (all != NULL && peerlink_addr_equal(&all->addr, &ss))
        return; /* --home's: it adopts the session at its next tick */
    if (peermember_is_self(d, &ss))
        return; /* this daemon is that home: the session is its own part already */
    for (m = d->peer_routes; m != NULL && !peerlink_addr_equal(&m->addr, &ss); m = m->next)
        n++;
    if (m == NULL && n >= PEERMEMBER_MAX_HOMES) {
        log_warn("session %lld (%s): already %d homes: not forwarded to %s", (long long)s->id,
                 s->name, PEERMEMBER_MAX_HOMES, home);
        return;
    }
    if (m == NULL) {
        m = peermember_start(d, home, d->peer_host, d->peer_psk, false, err, sizeof(err));
        if (m == NULL) {
            log_warn("session %lld (%s): %s", (long long)s->id, s->name, err);
            return;
        }
        m->next = d->peer_routes;
        d->peer_routes = m;
    }
    peermember_take(m, s);
    if (all != NULL && !peermember_skipped(all, s->id)) {
        void *p =
            all->n_skip == all->cap_skip
                ? realloc(all->skip, (all->cap_skip ? 2 * all->cap_skip : 16) * sizeof(int64_t))
                : all->skip;
        if (p != NULL) {
            if (all->n_skip == all->cap_skip)
                all->cap_skip = all->cap_skip ? 2 * all->cap_skip : 16;
            all->skip = p;
            all->skip[all->n_skip++] = s->id;
        }
    }
}

void peermember_stop_all(struct daemon *d)
{
    peermember_stop(d->peer_member);
    d->peer_member = NULL;
    while (d->peer_routes != NULL) {
        struct peermember *m = d->peer_routes;
        d->peer_routes = m->next;
        peermember_stop(m);
    }
}

void peermember_tick_all(struct daemon *d)
{
    peermember_tick(d->peer_member);
    for (struct peermember *m = d->peer_routes; m != NULL; m = m->next)
        peermember_tick(m);
}
