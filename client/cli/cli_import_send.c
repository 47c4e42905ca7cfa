/*
 * cli_import_send.c — see cli_import_send.h.
 */
#include "cli_import_send.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli_conn.h"
#include "sock.h"

__attribute__((format(printf, 3, 4))) static int send_fail(struct import_send *s, int err,
                                                           const char *fmt, ...)
{
    va_list ap;

    if (s->err == 0) {
        va_start(ap, fmt);
        vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
        va_end(ap);
        s->err = err;
    }
    return s->err;
}

/* Waits for one message from the daemon into *m. 0, or an error (the daemon's, if it sent one). */
static int recv_msg(struct import_send *s, struct proto_msg *m)
{
    struct proto_error perr;
    char why[PROTO_MAX_NAME + 128];
    int rc;

    while ((rc = proto_reader_next(&s->reader, m, &perr)) == 0) {
        char *buf = proto_reader_buffer(&s->reader, 4096);
        ssize_t n = buf ? read(s->fd, buf, 4096) : -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return send_fail(s, -ECONNRESET, "the daemon closed the connection");
        proto_reader_commit(&s->reader, (size_t)n);
    }
    if (rc < 0)
        return send_fail(s, -EPROTO, "bad reply from the daemon: %s", perr.message);
    if (m->type == PROTO_ERROR) {
        snprintf(why, sizeof(why), "%s: %s", m->u.error.code ? m->u.error.code : "?",
                 m->u.error.message ? m->u.error.message : "");
        proto_msg_free(m);
        return send_fail(s, -EPROTO, "the daemon refused: %s", why);
    }
    return 0;
}

/*
 * Writes the packed bytes and clears sb. A write to a connection the daemon
 * closed (it does after an error reply) reads that reply for the message.
 */
static int send_bytes(struct import_send *s, msgpack_sbuffer *sb)
{
    const char *p = sb->data;
    size_t n = sb->size;
    struct proto_msg m;
    int rc;

    msgpack_sbuffer_clear(sb);
    if (s->err)
        return s->err;
    if ((rc = sock_send_all(s->fd, p, n, -1)) < 0) {
        /* after an error reply the daemon closes: its reason is waiting to be read */
        if ((rc == -EPIPE || rc == -ECONNRESET) && recv_msg(s, &m) == 0)
            proto_msg_free(&m); /* not an error: keep the write's reason */
        return send_fail(s, -EPIPE, "cannot write to the daemon: %s", strerror(-rc));
    }
    return 0;
}

int import_send_open(struct import_send *s, const char *sock, const struct proto_hello *h)
{
    struct cli_conn conn = {.fd = -1};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_msg m;
    int rc;

    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->session_id = s->process_id = -1;
    msgpack_sbuffer_init(&s->batch);
    msgpack_packer_init(&s->bpk, &s->batch, msgpack_sbuffer_write);
    if (proto_reader_init(&s->reader, 0) < 0)
        return send_fail(s, -ENOMEM, "out of memory");
    s->reader_ok = true;
    if ((rc = cli_conn_open(&conn, sock)) < 0 && rc == -EPERM && conn.why[0] != '\0')
        return send_fail(s, rc, "%s", conn.why);
    if (rc < 0)
        return send_fail(s, rc, "no daemon at %s (is tracectld running?)", sock);
    /* only the socket is taken from the helper: this connection has its own reader */
    s->fd = conn.fd;
    conn.fd = -1;
    cli_conn_close(&conn);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_hello(&pk, h);
    rc = send_bytes(s, &sb);
    msgpack_sbuffer_destroy(&sb);
    if (rc < 0 || (rc = recv_msg(s, &m)) < 0)
        return rc;
    if (m.type != PROTO_WELCOME) {
        proto_msg_free(&m);
        return send_fail(s, -EPROTO, "the daemon answered hello with %s", proto_type_name(m.type));
    }
    s->session_id = m.u.welcome.session_id;
    s->process_id = m.u.welcome.process_id;
    proto_msg_free(&m);
    return 0;
}

static int send_batch(struct import_send *s)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (s->n_batch == 0 || s->err)
        return s->err;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, s->n_batch);
    msgpack_sbuffer_write(&sb, s->batch.data, s->batch.size);
    rc = send_bytes(s, &sb);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_clear(&s->batch);
    s->n_batch = 0;
    return rc;
}

uint32_t import_send_op(struct import_send *s, const char *name, const char *category)
{
    size_t before = s->ops.n;
    uint32_t i = intern_str(&s->ops, name);
    struct proto_opdef def = {.name = (char *)name, .category = (char *)category};
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (i == INTERN_NONE) {
        send_fail(s, -ENOMEM, "out of memory");
        return 0;
    }
    if (s->ops.n > before) {
        /* sent at once: the batch being built uses only earlier ids, so it may follow */
        def.id = i + 1;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        proto_pack_ops(&pk, &def, 1);
        send_bytes(s, &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    return s->err ? 0 : i + 1;
}

int import_send_entry(struct import_send *s, uint32_t op, uint64_t step, uint64_t start_ns,
                      uint64_t dur_ns, uint64_t span_ns, uint64_t mem_bytes, const char *in_shapes,
                      size_t in_len, const char *device, int64_t stream, uint32_t launcher)
{
    msgpack_packer *pk = &s->bpk;
    struct proto_ext ext = {.has = (stream >= 0 ? PROTO_EXT_STREAM : 0) |
                                   (launcher != 0 ? PROTO_EXT_LAUNCHER : 0) |
                                   (span_ns > dur_ns ? PROTO_EXT_SPAN : 0),
                            .stream = stream >= 0 ? (uint64_t)stream : 0,
                            .launcher = launcher,
                            .span = span_ns};

    if (s->err)
        return s->err;
    msgpack_pack_array(pk, ext.has ? 10 : 9);
    msgpack_pack_uint64(pk, step);
    msgpack_pack_uint32(pk, op);
    msgpack_pack_uint64(pk, start_ns);
    msgpack_pack_uint64(pk, dur_ns);
    msgpack_pack_nil(pk); /* elements: the product of out_shape, and there is none */
    if (mem_bytes > 0)
        msgpack_pack_uint64(pk, mem_bytes);
    else
        msgpack_pack_nil(pk); /* 0 */
    msgpack_pack_nil(pk);     /* out_shape */
    if (in_shapes != NULL)
        msgpack_sbuffer_write(&s->batch, in_shapes, in_len);
    else
        msgpack_pack_nil(pk);
    if (device != NULL)
        proto_pack_str(pk, device);
    else
        msgpack_pack_nil(pk);
    if (ext.has)
        proto_pack_ext(pk, &ext);
    s->sent++;
    return ++s->n_batch == IMPORT_BATCH ? send_batch(s) : 0;
}

int import_send_meta(struct import_send *s, const struct proto_kv *kv)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (send_batch(s) < 0)
        return s->err;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_meta(&pk, kv, 1);
    rc = send_bytes(s, &sb);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int import_send_flush(struct import_send *s)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_msg m;
    int rc;

    if (send_batch(s) < 0)
        return s->err;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_flush(&pk, 1);
    if ((rc = send_bytes(s, &sb)) == 0 && (rc = recv_msg(s, &m)) == 0) {
        if (m.type != PROTO_ACK || m.u.ack.stored != s->sent) {
            rc = send_fail(s, -EIO, "the daemon stored %" PRIu64 " of %" PRIu64 " entries",
                           m.type == PROTO_ACK ? m.u.ack.stored : 0, s->sent);
        }
        proto_msg_free(&m);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int import_send_bye(struct import_send *s)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char buf[256];
    ssize_t n;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_bye(&pk, 0);
    rc = send_bytes(s, &sb);
    msgpack_sbuffer_destroy(&sb);
    if (rc < 0)
        return rc;
    /* The daemon closes once it has recorded the bye (and ended the session when this was its
     * last process): after EOF, what this import did is visible to every other request. */
    while ((n = read(s->fd, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno != EINTR)
            return send_fail(s, -errno, "after bye: %s", strerror(errno));
    }
    return 0;
}

void import_send_abandon(struct import_send *s, const char *why)
{
    struct proto_kv kv[2] = {
        {.key = "import.incomplete", .type = PROTO_V_BOOL, .v.b = true},
        {.key = "import.error", .type = PROTO_V_STR, .v.s = (char *)why},
    };
    char cut[PROTO_MAX_NAME + 1];
    size_t n = strlen(why);

    if (s->fd < 0 || s->err)
        return;
    if (n > PROTO_MAX_NAME) {
        /* a metadata string is at most 1 KiB: cut on a UTF-8 boundary */
        n = PROTO_MAX_NAME;
        while (n > 0 && ((unsigned char)why[n] & 0xc0) == 0x80)
            n--;
        memcpy(cut, why, n);
        cut[n] = '\0';
        kv[1].v.s = cut;
    }
    import_send_meta(s, &kv[0]);
    import_send_meta(s, &kv[1]);
}

void import_send_close(struct import_send *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (s->reader_ok)
        proto_reader_deinit(&s->reader);
    s->reader_ok = false;
    msgpack_sbuffer_destroy(&s->batch);
    intern_deinit(&s->ops);
}
