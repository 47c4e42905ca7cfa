/*
 * test_peerlink.c — the peer link (peerlink.c): the key file's checks, and
 * two links on one loop over 127.0.0.1: with the same key a message goes
 * through; with another key neither side ever gets a message, both close
 * with the handshake's failure; a message over the limit closes the link.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peerlink.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/tc_peerlink_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(peerlink, .init = setup, .fini = teardown, .timeout = 30);

static void write_key(const char *name, const char *text, mode_t mode, char *path, size_t len)
{
    FILE *f;

    snprintf(path, len, "%s/%s", dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
}

Test(peerlink, key_file_checks)
{
    uint8_t psk[PEERLINK_PSK_LEN], again[PEERLINK_PSK_LEN];
    char path[128], err[256];
    /* sha256("0123456789abcdef0123456789abcdef"), from sha256sum */
    static const uint8_t want[32] = {0x3e, 0xb1, 0xbd, 0x43, 0x99, 0x47, 0xeb, 0x76,
                                     0x29, 0x98, 0xe5, 0x66, 0xcc, 0xc2, 0xe0, 0x99,
                                     0xc7, 0x91, 0x11, 0x8b, 0x2f, 0x40, 0x57, 0x9c,
                                     0xc4, 0xf7, 0xda, 0x2b, 0x50, 0x61, 0xb7, 0xf9};

    write_key("ok", "0123456789abcdef0123456789abcdef\n", 0600, path, sizeof(path));
    cr_assert_eq(peerlink_key_load(path, psk, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(memcmp(psk, want, 32), 0, "the PSK is the SHA-256 of the trimmed key");
    write_key("ro", "0123456789abcdef0123456789abcdef", 0400, path, sizeof(path));
    cr_assert_eq(peerlink_key_load(path, again, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(memcmp(psk, again, 32), 0, "trailing whitespace does not count");
    write_key("open", "0123456789abcdef0123456789abcdef", 0644, path, sizeof(path));
    cr_assert_eq(peerlink_key_load(path, psk, err, sizeof(err)), -EPERM);
    cr_assert(strstr(err, "0600") != NULL, "%s", err);
    write_key("short", "0123456789\n", 0600, path, sizeof(path));
    cr_assert_eq(peerlink_key_load(path, psk, err, sizeof(err)), -EINVAL);
    snprintf(path, sizeof(path), "%s/none", dir);
    cr_assert_eq(peerlink_key_load(path, psk, err, sizeof(err)), -ENOENT);
    cr_assert_eq(peerlink_key_load(dir, psk, err, sizeof(err)), -EINVAL, "a directory");
}

Test(peerlink, parse_addr)
{
    struct sockaddr_storage ss;

    cr_assert_eq(peerlink_parse_addr("127.0.0.1:7000", &ss), 0);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(peerlink_parse_addr("[::1]:7000", &ss), 0);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(peerlink_parse_addr("0.0.0.0:1", &ss), 0);
    cr_assert_eq(peerlink_parse_addr("127.0.0.1", &ss), -EINVAL);
    cr_assert_eq(peerlink_parse_addr("127.0.0.1:0", &ss), -EINVAL);
    cr_assert_eq(peerlink_parse_addr("127.0.0.1:65536", &ss), -EINVAL);
    cr_assert_eq(peerlink_parse_addr("host:80", &ss), -EINVAL);
    cr_assert_eq(peerlink_parse_addr(":80", &ss), -EINVAL);
    struct sockaddr_storage a, b;
    cr_assert_eq(peerlink_parse_addr("10.0.0.1:7700", &a), 0);
    cr_assert_eq(peerlink_parse_addr("10.0.0.1:07700", &b), 0);
    cr_assert(peerlink_addr_equal(&a, &b), "one address written two ways");
    cr_assert_eq(peerlink_parse_addr("10.0.0.1:7701", &b), 0);
    cr_assert_not(peerlink_addr_equal(&a, &b));
    cr_assert_eq(peerlink_parse_addr("[::1]:7700", &b), 0);
    cr_assert_not(peerlink_addr_equal(&a, &b));
}

/* ---- two links on one loop ------------------------------------------------------ */

struct side {
    struct peerlink l;
    int ready, msgs, closed;
    char reason[160];
    uint64_t last;
};

static struct side srv, cli;
static struct ssl_ctx_st *srv_ctx;
static uv_tcp_t listener;

static void ready_cb(struct peerlink *l)
{
    ((struct side *)l->data)->ready++;
}

static void msg_cb(struct peerlink *l, const msgpack_object *m)
{
    struct side *s = l->data;

    s->msgs++;
    if (m->via.array.size > 1 && m->via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        s->last = m->via.array.ptr[1].via.u64;
    peerlink_close(l, "done");
}

static void close_cb(struct peerlink *l, const char *reason)
{
    struct side *s = l->data;

    s->closed++;
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    if (s == &srv)
        uv_close((uv_handle_t *)&listener, NULL);
}

static const struct peerlink_ops ops = {ready_cb, msg_cb, close_cb, NULL};

static void accept_cb(uv_stream_t *server, int status)
{
    cr_assert_eq(status, 0);
    peerlink_accept(&srv.l, server->loop, srv_ctx, server, &ops, &srv);
}

static void cli_ready_cb(struct peerlink *l)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    ready_cb(l);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str(&pk, 4);
    msgpack_pack_str_body(&pk, "ping", 4);
    if (getenv("PEERLINK_TEST_BIG") != NULL) {
        /* a str header announcing more than the limit: refused as it arrives */
        msgpack_pack_str(&pk, PEERLINK_MAX_MSG + 1);
    } else {
        msgpack_pack_uint64(&pk, 4242);
    }
    cr_assert_eq(peerlink_send(l, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
}

static const struct peerlink_ops cli_ops = {cli_ready_cb, msg_cb, close_cb, NULL};

/* Runs a server with key a and a client with key b until both links closed. */
static void run(const char *a, const char *b)
{
    uv_loop_t loop;
    uint8_t ka[PEERLINK_PSK_LEN], kb[PEERLINK_PSK_LEN];
    struct ssl_ctx_st *cctx;
    struct sockaddr_in addr;
    char pa[128], pb[128], err[256];
    int len = sizeof(addr);

    memset(&srv, 0, sizeof(srv));
    memset(&cli, 0, sizeof(cli));
    write_key("a", a, 0600, pa, sizeof(pa));
    write_key("b", b, 0600, pb, sizeof(pb));
    cr_assert_eq(peerlink_key_load(pa, ka, err, sizeof(err)), 0);
    cr_assert_eq(peerlink_key_load(pb, kb, err, sizeof(err)), 0);
    srv_ctx = peerlink_ctx_new(true, ka);
    cctx = peerlink_ctx_new(false, kb);
    cr_assert(srv_ctx != NULL && cctx != NULL);
    cr_assert_eq(uv_loop_init(&loop), 0);
    uv_tcp_init(&loop, &listener);
    uv_ip4_addr("127.0.0.1", 0, &addr);
    cr_assert_eq(uv_tcp_bind(&listener, (struct sockaddr *)&addr, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&listener, 4, accept_cb), 0);
    uv_tcp_getsockname(&listener, (struct sockaddr *)&addr, &len);
    cr_assert_eq(peerlink_connect(&cli.l, &loop, cctx, (struct sockaddr *)&addr, &cli_ops, &cli),
                 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    peerlink_ctx_free(srv_ctx);
    peerlink_ctx_free(cctx);
    cr_assert_eq(srv.closed, 1);
    cr_assert_eq(cli.closed, 1);
}

Test(peerlink, same_key_carries_a_message)
{
    run("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef");
    cr_assert_eq(srv.ready, 1);
    cr_assert_eq(cli.ready, 1);
    cr_assert_eq(srv.msgs, 1);
    cr_assert_eq(srv.last, 4242);
}

Test(peerlink, wrong_key_is_refused_on_both_sides)
{
    run("0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210");
    cr_assert_eq(srv.ready + cli.ready, 0);
    cr_assert_eq(srv.msgs + cli.msgs, 0);
    cr_assert(strstr(srv.reason, "handshake failed") != NULL, "server: %s", srv.reason);
    cr_assert(strstr(cli.reason, "handshake failed") != NULL, "client: %s", cli.reason);
}

Test(peerlink, a_message_over_the_limit_closes_the_link)
{
    setenv("PEERLINK_TEST_BIG", "1", 1);
    run("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef");
    unsetenv("PEERLINK_TEST_BIG");
    cr_assert_eq(srv.msgs, 0);
    cr_assert(strstr(srv.reason, "more bytes than a message can hold") != NULL, "server: %s",
              srv.reason);
}
