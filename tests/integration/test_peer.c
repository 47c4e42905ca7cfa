/*
 * test_peer.c — a real tracectld as a home (--peer-listen on 127.0.0.1)
 * against hostile and honest peers made here with the daemon's own link
 * code (peerlink.h) on the test's loop: bytes that are not TLS, a wrong
 * key, messages before peer_hello, a malformed snapshot, a message over the
 * limit, a taken host name. Each closes that link with a reason, and the
 * daemon goes on: a good member's snapshot afterwards is taken, acked and
 * reported (entries, ops and the hosts row as sent).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "peerarr.h"
#include "peerclock_io.h"
#include "peerclock_wire.h"
#include "peerhome.h"
#include "peerlink.h"
#include "peermsg.h"
#include "peersnap.h"

static struct tdaemon d;
static char keydir[64], key[128], other[128];
static int port;

static void write_key(char *path, size_t len, const char *name, const char *text)
{
    FILE *f;

    snprintf(path, len, "%s/%s", keydir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(path, 0600), 0);
}

/* A port nobody listens on now (bound to 0, read, closed). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert(fd >= 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void setup(void)
{
    char listen[64];

    snprintf(keydir, sizeof(keydir), "/tmp/tc_peerkey_XXXXXX");
    cr_assert_not_null(mkdtemp(keydir));
    write_key(key, sizeof(key), "key", "0123456789abcdef0123456789abcdef\n");
    write_key(other, sizeof(other), "other", "fedcba9876543210fedcba9876543210\n");
    port = free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    /* --linger 2: a silent member's part is lost 2 s after it last spoke */
    harness_daemon_start(&d, "--peer-listen", listen, "--peer-key", key, "--host", "home",
                         "--linger", "2", NULL);
}

static void teardown(void)
{
    char cmd[128];

    harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", keydir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(peer, .init = setup, .fini = teardown, .timeout = 60);

/* ---- a scripted peer on the test's loop ---------------------------------------------- */

enum send_what {
    SEND_NOTHING,
    SEND_SNAPSHOT,
    SEND_BAD_SNAPSHOT,
    SEND_HUGE,
    SEND_PING,
    SEND_MANY,
    SEND_TWO_JOBS,
    SEND_ARRIVALS,
    SEND_ARRIVALS_NOT_MINE
};

struct peer {
    struct peerlink l;
    uv_timer_t limit;
    const char *host;    /* NULL: no peer_hello (a snapshot first) */
    enum send_what then; /* after the welcome (or at once without hello) */
    bool hold;           /* stay open after the ack/pong (until the caller closes) */
    int want_acks;       /* close after this many acks (0: 1) */
    int welcomes, acks, errors, pongs, ready;
    char error[256], reason[160];
    bool closed;
};

static void pack_snapshot(msgpack_sbuffer *sb, bool bad, const char *name, bool ended, uint64_t seq,
                          uint64_t sid, uint64_t started_ns, uint64_t ended_ns)
{
    struct agg_hist_bucket h[2] = {{.bucket = agg_bucket(100), .min_ns = 100, .count = 2},
                                   {.bucket = agg_bucket(900), .min_ns = 900, .count = 1}};
    struct peersnap_op op = {.op = "fwd",
                             .category = "compute",
                             .calls = 3,
                             .total_ns = 1100,
                             .min_ns = 100,
                             .max_ns = 900,
                             .hist = h,
                             .n_hist = 2};
    struct peersnap_dev dev = {.device = "gpu:0", .calls = 3, .total_ns = 1100};
    struct peersnap s = {.session = (char *)name,
                         .seq = seq,
                         .ended = ended,
                         .sid = sid,
                         .started_ns = started_ns,
                         .ended_ns = ended_ns,
                         .processes = 1,
                         .ranks = 1,
                         .entries = bad ? 4 : 3,
                         .total_ns = 1100,
                         .ops = &op,
                         .n_ops = 1,
                         .devs = &dev,
                         .n_devs = 1};
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    cr_assert_eq(peersnap_pack(&pk, &s), 0);
}

static void peer_send(struct peer *p, enum send_what what)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (what == SEND_SNAPSHOT || what == SEND_BAD_SNAPSHOT) {
        pack_snapshot(&sb, what == SEND_BAD_SNAPSHOT, "remote", false, 1, 1, 0, 0);
    } else if (what == SEND_MANY) {
        /* one more ended session than a host may keep: the oldest must make room */
        for (int i = 0; i <= PEERHOME_MAX_PARTS; i++) {
            char name[32];
            snprintf(name, sizeof(name), "s%d", i);
            pack_snapshot(&sb, false, name, true, (uint64_t)i + 1, (uint64_t)i + 1, 0, 0);
        }
    } else if (what == SEND_TWO_JOBS) {
        /* one name, two jobs of this host: the live one now, then (late) the final snapshot
         * of the one that ended an hour ago */
        uint64_t now = (uint64_t)time(NULL) * 1000000000ull, hour = 3600 * 1000000000ull;
        pack_snapshot(&sb, false, "again", false, 1, 8, now, 0);
        pack_snapshot(&sb, false, "again", true, 2, 7, now - hour, now - hour + 1000000000ull);
    } else if (what == SEND_ARRIVALS || what == SEND_ARRIVALS_NOT_MINE) {
        /* three arrivals (two instances) before the snapshot: its ack says they were read */
        const struct peerarr_arrival a[3] = {
            {.comm = 1, .seq = 0, .rank = 2, .enter_ns = 100, .exit_ns = 200, .bytes = 8},
            {.comm = 1, .seq = 0, .rank = 3, .enter_ns = 110, .exit_ns = 210, .bytes = 8},
            {.comm = 1, .seq = 1, .rank = 2, .enter_ns = 300, .exit_ns = 400, .comm_size = 4}};
        cr_assert_eq(
            peerarr_pack(&pk, "remote", what == SEND_ARRIVALS ? p->host : "other", 7, a, 3), 0);
        pack_snapshot(&sb, false, "remote", false, 1, 1, 0, 0);
    } else if (what == SEND_HUGE) {
        msgpack_pack_array(&pk, 2);
        proto_pack_str(&pk, "snapshot");
        msgpack_pack_bin(&pk, PEERLINK_MAX_MSG); /* announced, never sent */
    } else if (what == SEND_PING) {
        peermsg_pack_ping(&sb, false);
    }
    if (sb.size > 0)
        peerlink_send(&p->l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void on_ready(struct peerlink *l)
{
    struct peer *p = l->data;
    msgpack_sbuffer sb;

    p->ready++;
    if (p->host == NULL) {
        peer_send(p, p->then);
        return;
    }
    msgpack_sbuffer_init(&sb);
    peermsg_pack_hello(&sb, p->host);
    peerlink_send(l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void on_msg(struct peerlink *l, const msgpack_object *m)
{
    struct peer *p = l->data;

    switch (peermsg_type(m)) {
    case PEERMSG_WELCOME:
        p->welcomes++;
        peer_send(p, p->then);
        if (p->then == SEND_NOTHING && !p->hold)
            peerlink_close(l, "done");
        break;
    case PEERMSG_ACK:
        p->acks++;
        if (!p->hold && p->acks >= (p->want_acks ? p->want_acks : 1))
            peerlink_close(l, "done");
        break;
    case PEERMSG_PONG:
        p->pongs++;
        if (!p->hold)
            peerlink_close(l, "done");
        break;
    case PEERMSG_ERROR:
        p->errors++;
        peermsg_error_text(m, p->error, sizeof(p->error));
        break;
    default:
        break;
    }
}

static void on_close(struct peerlink *l, const char *reason)
{
    struct peer *p = l->data;

    snprintf(p->reason, sizeof(p->reason), "%s", reason);
    p->closed = true;
    if (!uv_is_closing((uv_handle_t *)&p->limit))
        uv_close((uv_handle_t *)&p->limit, NULL);
}

static void limit_cb(uv_timer_t *t)
{
    peerlink_close(t->data, "the test's time limit");
}

static const struct peerlink_ops peer_ops = {on_ready, on_msg, on_close, NULL};

/* Runs peers p[0..n) against the home, all at once, until every link closed (10 s at most). */
static void run(struct peer *p, size_t n, const char *keyfile)
{
    uv_loop_t loop;
    uint8_t psk[PEERLINK_PSK_LEN];
    struct sockaddr_in a;
    struct ssl_ctx_st *ctx;
    char err[256];

    cr_assert_eq(peerlink_key_load(keyfile, psk, err, sizeof(err)), 0, "%s", err);
    ctx = peerlink_ctx_new(false, psk);
    cr_assert_not_null(ctx);
    uv_loop_init(&loop);
    uv_ip4_addr("127.0.0.1", port, &a);
    for (size_t i = 0; i < n; i++) {
        peerlink_connect(&p[i].l, &loop, ctx, (struct sockaddr *)&a, &peer_ops, &p[i]);
        uv_timer_init(&loop, &p[i].limit);
        p[i].limit.data = &p[i].l;
        uv_timer_start(&p[i].limit, limit_cb, 10000, 0);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    peerlink_ctx_free(ctx);
}

/* The daemon still answers: a status request gets "ok". */
static void assert_alive(void)
{
    struct proto_reader r;
    const msgpack_object *o;
    int fd;

    o = raw_control(d.sock, PROTO_STATUS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the daemon does not answer");
    proto_reader_deinit(&r);
    close(fd);
}

/* ---- the tests ------------------------------------------------------------------------ */

Test(peer, bytes_that_are_not_tls_are_dropped)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char junk[4096], buf[64];

    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    memset(junk, 0x16, sizeof(junk)); /* a TLS handshake record type, then nonsense */
    cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    /* The home closes it (an alert may come first): read to EOF within 5 s. */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    ssize_t n;
    do {
        cr_assert_eq(poll(&pfd, 1, 5000), 1, "the home kept a connection that sent junk");
        n = read(fd, buf, sizeof(buf));
    } while (n > 0);
    close(fd);
    assert_alive();
}

Test(peer, a_wrong_key_never_gets_a_message_through)
{
    struct peer p = {.host = "intruder", .then = SEND_SNAPSHOT};

    run(&p, 1, other);
    cr_assert_eq(p.ready + p.welcomes + p.acks, 0);
    cr_assert(strstr(p.reason, "handshake failed") != NULL, "%s", p.reason);
    assert_alive();
}

Test(peer, hostile_messages_close_their_link_only)
{
    struct peer p[4] = {
        {.host = NULL, .then = SEND_SNAPSHOT},     /* no peer_hello first */
        {.host = "r2", .then = SEND_BAD_SNAPSHOT}, /* calls do not sum to entries */
        {.host = "r3", .then = SEND_HUGE},         /* over 16 MiB, announced */
        {.host = "home", .then = SEND_NOTHING},    /* the home's own name */
    };

    run(p, 4, key);
    cr_assert(strstr(p[0].error, "peer_hello") != NULL, "%s", p[0].error);
    cr_assert_eq(p[1].welcomes, 1);
    cr_assert_eq(p[1].acks, 0);
    cr_assert(strstr(p[1].error, "snapshot:") != NULL, "%s", p[1].error);
    cr_assert_eq(p[2].acks, 0);
    cr_assert(p[2].closed);
    cr_assert_eq(p[3].welcomes, 0);
    cr_assert(strstr(p[3].error, "home's own") != NULL, "%s", p[3].error);
    for (int i = 0; i < 4; i++)
        cr_assert(p[i].closed, "link %d open", i);
    assert_alive();
}

Test(peer, a_good_snapshot_is_acked_and_reported)
{
    struct peer p = {.host = "r1", .then = SEND_SNAPSHOT};
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *rep, *ops, *hosts, *row;
    int fd;

    run(&p, 1, key);
    cr_assert_eq(p.welcomes, 1);
    cr_assert_eq(p.acks, 1, "%s / %s", p.error, p.reason);
    proto_request_init(&req);
    req.session.name = "remote";
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the report failed");
    rep = &o->via.array.ptr[1];
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "entries")), 3);
    ops = obj_get(rep, "ops");
    cr_assert_eq(ops->via.array.size, 1);
    cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[0], "calls")), 3);
    cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[0], "p50_ns")), 100);
    cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[0], "p99_ns")), 900);
    cr_assert(
        obj_str_eq(obj_get(&obj_get(rep, "devices")->via.array.ptr[0], "device"), "r1/gpu:0"));
    hosts = obj_get(rep, "hosts");
    cr_assert_not_null(hosts);
    cr_assert_eq(hosts->via.array.size, 2);
    row = &hosts->via.array.ptr[1];
    cr_assert(obj_str_eq(obj_get(row, "host"), "r1"));
    cr_assert(obj_str_eq(obj_get(row, "state"), "stale") ||
              obj_str_eq(obj_get(row, "state"), "live"));
    cr_assert(obj_get(row, "bound_ns")->type == MSGPACK_OBJECT_NIL);
    cr_assert(obj_get(row, "drift_ppm")->type == MSGPACK_OBJECT_NIL);
    proto_reader_deinit(&r);
    close(fd);
}

/* Two links with one host name at once: the second is refused while the first speaks. */
static void close_cb_pair(uv_timer_t *t)
{
    struct peer *p = t->data;

    peerlink_close(&p[0].l, "done");
    uv_close((uv_handle_t *)t, NULL);
}

Test(peer, a_host_name_already_a_member_is_refused)
{
    struct peer p[2] = {{.host = "twin", .then = SEND_PING, .hold = true},
                        {.host = "twin", .then = SEND_NOTHING}};
    uv_loop_t loop;
    uint8_t psk[PEERLINK_PSK_LEN];
    struct sockaddr_in a;
    struct ssl_ctx_st *ctx;
    uv_timer_t later;
    char err[256];

    cr_assert_eq(peerlink_key_load(key, psk, err, sizeof(err)), 0);
    ctx = peerlink_ctx_new(false, psk);
    uv_loop_init(&loop);
    uv_ip4_addr("127.0.0.1", port, &a);
    peerlink_connect(&p[0].l, &loop, ctx, (struct sockaddr *)&a, &peer_ops, &p[0]);
    uv_timer_init(&loop, &p[0].limit);
    p[0].limit.data = &p[0].l;
    uv_timer_start(&p[0].limit, limit_cb, 10000, 0);
    /* the first is a member by now: the second comes 300 ms later, the first closes at 1.2 s */
    while (p[0].pongs == 0 && !p[0].closed)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(p[0].welcomes, 1);
    peerlink_connect(&p[1].l, &loop, ctx, (struct sockaddr *)&a, &peer_ops, &p[1]);
    uv_timer_init(&loop, &p[1].limit);
    p[1].limit.data = &p[1].l;
    uv_timer_start(&p[1].limit, limit_cb, 10000, 0);
    uv_timer_init(&loop, &later);
    later.data = p;
    uv_timer_start(&later, close_cb_pair, 1200, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    peerlink_ctx_free(ctx);
    cr_assert_eq(p[1].welcomes, 0);
    cr_assert(strstr(p[1].error, "already a member") != NULL, "%s / %s", p[1].error, p[1].reason);
    assert_alive();
}

/* The state of host's part of session "remote" in the home's report, into buf. */
Test(peer, arrivals_are_counted_in_the_host_row)
{
    struct peer p = {.host = "r1", .then = SEND_ARRIVALS};
    struct peer q = {.host = "r2", .then = SEND_ARRIVALS_NOT_MINE};
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *hosts, *row;
    int fd;

    run(&p, 1, key);
    cr_assert_eq(p.acks, 1, "%s / %s", p.error, p.reason);
    run(&q, 1, key);
    cr_assert_eq(q.acks, 0);
    cr_assert(strstr(q.error, "host is not the link's") != NULL, "%s", q.error);
    proto_request_init(&req);
    req.session.name = "remote";
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the report failed");
    hosts = obj_get(&o->via.array.ptr[1], "hosts");
    cr_assert_eq(hosts->via.array.size, 2, "r2's link was closed before its snapshot");
    cr_assert_eq(obj_u64(obj_get(&hosts->via.array.ptr[0], "arrivals")), 0);
    row = &hosts->via.array.ptr[1];
    cr_assert(obj_str_eq(obj_get(row, "host"), "r1"));
    cr_assert_eq(obj_u64(obj_get(row, "arrivals")), 3);
    cr_assert_eq(obj_u64(obj_get(row, "arrivals_dropped")), 7);
    cr_assert_eq(obj_u64(obj_get(row, "violations")), 0, "no clock link: nothing checked");
    proto_reader_deinit(&r);
    close(fd);
    assert_alive();
}

static void host_state(const char *host, char *buf, size_t len)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *hosts;
    int fd;

    proto_request_init(&req);
    req.session.name = "remote";
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    snprintf(buf, len, "none");
    hosts = obj_get(&o->via.array.ptr[1], "hosts");
    for (uint32_t i = 0; hosts != NULL && i < hosts->via.array.size; i++) {
        const msgpack_object *row = &hosts->via.array.ptr[i], *st = obj_get(row, "state");
        if (obj_str_eq(obj_get(row, "host"), host))
            snprintf(buf, len, "%.*s", (int)st->via.str.size, st->via.str.ptr);
    }
    proto_reader_deinit(&r);
    close(fd);
}

Test(peer, a_silent_member_is_stale_then_lost_after_linger)
{
    struct peer p = {.host = "quiet", .then = SEND_SNAPSHOT};
    char st[16];
    double t0, lost_at = 0;

    run(&p, 1, key); /* a live part (ended false), then the link closes */
    cr_assert_eq(p.acks, 1, "%s / %s", p.error, p.reason);
    t0 = harness_now();
    host_state("quiet", st, sizeof(st));
    cr_assert_str_eq(st, "stale", "a member whose link closed is stale at once");
    while (harness_now() - t0 < 6) {
        host_state("quiet", st, sizeof(st));
        if (strcmp(st, "lost") == 0) {
            lost_at = harness_now() - t0;
            break;
        }
        cr_assert_str_eq(st, "stale");
        usleep(100000);
    }
    cr_assert(lost_at > 0, "never lost");
    /* --linger 2 from when it last spoke, which was before t0 */
    cr_assert(lost_at <= 2.5, "lost only after %.2f s", lost_at);
}

/* Whether the home reports a session of this name. */
static bool reported(const char *name)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o;
    bool ok;
    int fd;

    proto_request_init(&req);
    req.session.name = (char *)name;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    ok = obj_str_eq(&o->via.array.ptr[0], "ok");
    proto_reader_deinit(&r);
    close(fd);
    return ok;
}

Test(peer, past_the_sessions_limit_the_oldest_ended_makes_room)
{
    struct peer p = {.host = "busy", .then = SEND_MANY, .want_acks = PEERHOME_MAX_PARTS + 1};

    run(&p, 1, key);
    cr_assert_eq(p.acks, PEERHOME_MAX_PARTS + 1, "%d acks: %s / %s", p.acks, p.error, p.reason);
    cr_assert_eq(p.errors, 0, "%s", p.error);
    cr_assert_not(reported("s0"), "the oldest ended session was kept");
    cr_assert(reported("s1"));
    cr_assert(reported("s4096"));
    assert_alive();
}

/* The entries and the number of host rows of the home's report of name. */
static void report_of(const char *name, unsigned long long *entries, unsigned *rows, char *state,
                      size_t len)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *hosts;
    int fd;

    proto_request_init(&req);
    req.session.name = (char *)name;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "no report of %s", name);
    *entries = obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "entries"));
    hosts = obj_get(&o->via.array.ptr[1], "hosts");
    *rows = hosts != NULL ? hosts->via.array.size : 0;
    snprintf(state, len, "none");
    if (*rows > 1) {
        const msgpack_object *st = obj_get(&hosts->via.array.ptr[1], "state");
        snprintf(state, len, "%.*s", (int)st->via.str.size, st->via.str.ptr);
    }
    proto_reader_deinit(&r);
    close(fd);
}

Test(peer, a_name_used_again_reports_only_the_newest_job)
{
    struct peer p = {.host = "again", .then = SEND_TWO_JOBS, .want_acks = 2};
    unsigned long long entries;
    unsigned rows;
    char state[16];

    run(&p, 1, key);
    cr_assert_eq(p.acks, 2, "%s / %s", p.error, p.reason);
    report_of("again", &entries, &rows, state, sizeof(state));
    cr_assert_eq(entries, 3, "the job of an hour ago was merged in (%llu entries)", entries);
    cr_assert_eq(rows, 2, "the home's row and one part");
    cr_assert_str_neq(state, "ended", "the old job's final snapshot took the new job's place");
}

/* ---- the clock link ----------------------------------------------------------------------- */

/*
 * A member's clock link, scripted: clock_hello for host, then it answers the
 * home's probes as a member does (t2, t3 from uv_hrtime: this process shares
 * the home's CLOCK_MONOTONIC, so the truth is 0), `good` of them, and the
 * next one with a wrong seq. When the home closes it, main pings.
 */
struct clockpeer {
    struct peerlink l;
    const char *host;
    struct peer *main; /* pinged once this link closed (NULL: none) */
    int good, answered;
    bool refused, closed;
    char reason[160];
};

static void clock_ready(struct peerlink *l)
{
    struct clockpeer *c = l->data;
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    cr_assert_eq(peermsg_pack_clock_hello(&sb, c->host), 0);
    peerlink_send(l, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    peerlink_raw(l, 1024); /* as a member: room for the home's `error` */
}

static void clock_msg(struct peerlink *l, const msgpack_object *m)
{
    (void)m;
    peerlink_close(l, "a message on a raw link");
}

static void clock_raw(struct peerlink *l, const char *p, size_t len)
{
    struct clockpeer *c = l->data;
    struct peerclock_msg q;
    uint8_t out[PEERCLOCK_WIRE_MAX];
    int n = peerclock_wire_decode((const uint8_t *)p, len, &q);

    if (n != (int)len || q.type != PEERCLOCK_PROBE) {
        for (size_t i = 0; i + 14 <= len && !c->refused; i++)
            c->refused = memcmp(p + i, "no member link", 14) == 0;
        peerlink_close(l, "not a probe");
        return;
    }
    q.type = PEERCLOCK_REPLY;
    q.t2 = (int64_t)uv_hrtime();
    q.t3 = (int64_t)uv_hrtime();
    if (c->answered++ == c->good)
        q.seq++; /* the bad one: the home must close this link, and only this one */
    n = peerclock_wire_encode(&q, out, sizeof(out));
    cr_assert(n > 0);
    peerlink_send(l, (const char *)out, (size_t)n);
}

static void clock_close(struct peerlink *l, const char *reason)
{
    struct clockpeer *c = l->data;

    c->closed = true;
    snprintf(c->reason, sizeof(c->reason), "%s", reason);
    if (c->main != NULL && !c->main->closed)
        peer_send(c->main, SEND_PING); /* its pong closes it (hold false) */
}

static const struct peerlink_ops clock_ops = {clock_ready, clock_msg, clock_close, clock_raw};

Test(peer, a_clock_link_measures_and_a_bad_reply_closes_it_only)
{
    struct peer p = {.host = "c1", .then = SEND_SNAPSHOT, .want_acks = 2};
    struct clockpeer c = {.host = "c1", .main = &p, .good = PEERCLOCK_PROBES};
    struct clockpeer stranger = {.host = "nobody", .good = 1000};
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *row;
    uv_loop_t loop;
    uint8_t psk[PEERLINK_PSK_LEN];
    struct sockaddr_in a;
    struct ssl_ctx_st *ctx;
    char err[256];
    int fd;

    cr_assert_eq(peerlink_key_load(key, psk, err, sizeof(err)), 0);
    ctx = peerlink_ctx_new(false, psk);
    uv_loop_init(&loop);
    uv_ip4_addr("127.0.0.1", port, &a);
    peerlink_connect(&p.l, &loop, ctx, (struct sockaddr *)&a, &peer_ops, &p);
    uv_timer_init(&loop, &p.limit);
    p.limit.data = &p.l;
    uv_timer_start(&p.limit, limit_cb, 10000, 0);
    /* a clock link of a host that is no member: refused */
    peerlink_connect(&stranger.l, &loop, ctx, (struct sockaddr *)&a, &clock_ops, &stranger);
    while (p.acks == 0 && !p.closed)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(p.acks, 1, "%s / %s", p.error, p.reason);
    peerlink_connect(&c.l, &loop, ctx, (struct sockaddr *)&a, &clock_ops, &c);
    uv_run(&loop, UV_RUN_DEFAULT); /* until all closed: c by the home, then p after its pong */
    cr_assert_eq(uv_loop_close(&loop), 0);
    peerlink_ctx_free(ctx);
    cr_assert(stranger.refused, "%s", stranger.reason);
    /* one whole burst answered well, then the first probe of the next answered badly */
    cr_assert_eq(c.answered, PEERCLOCK_PROBES + 1, "%s", c.reason);
    cr_assert_eq(p.pongs, 1, "the member's link went with its clock link: %s", p.reason);
    /* the burst is in the host row: offset within its bound of the truth, 0 */
    proto_request_init(&req);
    req.session.name = "remote";
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the report failed");
    row = &obj_get(&o->via.array.ptr[1], "hosts")->via.array.ptr[1];
    cr_assert(obj_str_eq(obj_get(row, "host"), "c1"));
    cr_assert_eq(obj_get(row, "offset_ns")->type == MSGPACK_OBJECT_NIL, false);
    int64_t off = obj_get(row, "offset_ns")->via.i64, bound = obj_get(row, "bound_ns")->via.i64;
    cr_assert(obj_get(row, "offset_ns")->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
              obj_get(row, "offset_ns")->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
    cr_assert(bound > 0 && bound < 100000000, "bound %lld", (long long)bound);
    cr_assert(off <= bound && -off <= bound, "offset %lld, bound %lld", (long long)off,
              (long long)bound);
    cr_assert(obj_get(row, "drift_ppm")->type == MSGPACK_OBJECT_NIL); /* one burst only */
    proto_reader_deinit(&r);
    close(fd);
    assert_alive();
}
