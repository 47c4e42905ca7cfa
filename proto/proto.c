/*
 * proto.c — what every message shares: type and category names, the UTF-8
 * rule of the wire, proto_decode()'s dispatch by type to the decoder of
 * each family (proto_producer.c, proto_entry.c, proto_request.c,
 * proto_reply.c), decoding one message from bytes, and freeing a message.
 *
 * Decoding copies everything it keeps out of the unpacker's zone into owned
 * memory before returning, so no msgpack_object outlives a call (except the
 * one proto_reader_next_object() lends, until the next call). A batch skips
 * the zone altogether: once the byte scanner has seen the whole message,
 * onepass.c decodes it from the bytes with the same rules as
 * proto_entry_batch(), which stays the reference (proto_decode_bytes_tree()).
 * Validation is strict about what v1 defines and lenient about what it
 * leaves open: unknown map keys are skipped and fields after an entry's `ext`
 * map (position 9, the extension of proto/PROTOCOL.md Part 3) are ignored.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onepass.h"
#include "proto.h"
#include "proto_entry.h"
#include "proto_field.h"
#include "proto_producer.h"
#include "proto_reply.h"
#include "proto_request.h"
#include "proto_scan.h"
#include "utf8.h"

static const char *const type_names[] = {
    [PROTO_NONE] = "?",        [PROTO_HELLO] = "hello",
    [PROTO_OPS] = "ops",       [PROTO_BATCH] = "batch",
    [PROTO_META] = "meta",     [PROTO_FLUSH] = "flush",
    [PROTO_BYE] = "bye",       [PROTO_SESSIONS] = "sessions",
    [PROTO_REPORT] = "report", [PROTO_STATUS] = "status",
    [PROTO_DELETE] = "delete", [PROTO_WELCOME] = "welcome",
    [PROTO_ACK] = "ack",       [PROTO_OK] = "ok",
    [PROTO_ERROR] = "error",   [PROTO_EXPORT] = "export",
    [PROTO_ROWS] = "rows",     [PROTO_END] = "end",
    [PROTO_LIVE] = "live",     [PROTO_CLASSIFY] = "classify",
};

const char *proto_type_name(enum proto_type t)
{
    if ((size_t)t >= sizeof(type_names) / sizeof(type_names[0]))
        return "?";
    return type_names[t];
}

enum proto_cat proto_cat_code(const char *c)
{
    if (c == NULL || strcmp(c, "compute") == 0)
        return PROTO_CAT_COMPUTE;
    if (strcmp(c, "comm") == 0)
        return PROTO_CAT_COMM;
    if (strcmp(c, "memory") == 0)
        return PROTO_CAT_MEMORY;
    if (strcmp(c, "wait") == 0)
        return PROTO_CAT_WAIT;
    return PROTO_CAT_OTHER;
}

const char *proto_cat_name(enum proto_cat c)
{
    static const char *const names[PROTO_NCAT] = {"compute", "comm", "memory", "wait", "other"};

    return (unsigned)c < PROTO_NCAT ? names[c] : "other";
}

bool proto_utf8_valid(const char *s, size_t len)
{
    size_t i = 0;
    uint32_t cp;

    while (i < len) {
        size_t n;

        /* ASCII without a decoder call: names and devices are mostly ASCII. */
        if ((unsigned char)s[i] - 1u < 0x7fu) {
            i++;
            continue;
        }
        n = utf8_decode(s + i, len - i, &cp);
        if (n == 0 || cp == 0)
            return false;
        i += n;
    }
    return true;
}

static enum proto_type type_of(const msgpack_object *t)
{
    for (size_t i = 1; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (type_names[i] != NULL && proto_field_key_is(t, type_names[i]))
            return (enum proto_type)i;
    return PROTO_NONE;
}

int proto_decode(const msgpack_object *o, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *t;
    int rc;

    memset(m, 0, sizeof(*m));
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
        return proto_fail(err, PROTO_E_MESSAGE, "a message must be an array [type, ...]");
    t = &o->via.array.ptr[0];
    if (t->type != MSGPACK_OBJECT_STR)
        return proto_fail(err, PROTO_E_MESSAGE, "a message type must be a string");
    m->type = type_of(t);
    switch (m->type) {
    case PROTO_HELLO:
        rc = proto_producer_hello(o, &m->u.hello, err);
        break;
    case PROTO_OPS:
        rc = proto_producer_ops(o, m, err);
        break;
    case PROTO_BATCH:
        rc = proto_entry_batch(o, &m->u.batch, err);
        break;
    case PROTO_META:
        rc = o->via.array.size < 2
                 ? proto_fail(err, PROTO_E_MESSAGE, "meta needs a map")
                 : proto_field_meta(&o->via.array.ptr[1], &m->u.meta.kv, &m->u.meta.n, err);
        break;
    case PROTO_FLUSH:
        rc = proto_producer_flush(o, m, err);
        break;
    case PROTO_BYE:
        rc = proto_producer_bye(o, m, err);
        break;
    case PROTO_SESSIONS:
    case PROTO_REPORT:
    case PROTO_STATUS:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_CLASSIFY:
    case PROTO_LIVE:
        rc = proto_request_decode(o, m, err);
        break;
    case PROTO_WELCOME:
        rc = proto_reply_welcome(o, m, err);
        break;
    case PROTO_ACK:
        rc = proto_reply_ack(o, m, err);
        break;
    case PROTO_ERROR:
        rc = proto_reply_error(o, m, err);
        break;
    case PROTO_OK:
    case PROTO_ROWS:
    case PROTO_END:
        rc = 0; /* generic payloads: read them with proto_reader_next_object() */
        break;
    default:
        rc = proto_fail(err, PROTO_E_TYPE, "unknown message type \"%.*s\"",
                        (int)(t->via.str.size > 64 ? 64 : t->via.str.size), t->via.str.ptr);
        break;
    }
    if (rc < 0)
        proto_msg_free(m);
    return rc;
}

/* A batch message, one pass over the bytes the scanner took whole (ready). */
static int decode_bytes_batch(const char *buf, size_t len, const struct proto_scan *sc,
                              struct proto_msg *m, struct proto_error *err)
{
    size_t used = 0;
    int rc;

    /* as msgpack_unpack_next() and the check after it below */
    if (sc->ready == 0)
        return proto_fail(err, PROTO_E_MSGPACK, "the message is cut short");
    if (sc->ready > 1 || sc->msg_bytes > 0)
        return proto_fail(err, PROTO_E_MESSAGE, "trailing bytes after the message");
    rc = onepass_batch((const uint8_t *)buf, len, &m->u.batch, &used, err);
    if (rc == 0)
        m->type = PROTO_BATCH;
    return rc;
}

static int decode_bytes(const char *buf, size_t len, struct proto_msg *m, struct proto_error *err,
                        bool tree)
{
    msgpack_unpacked res;
    size_t off = 0;
    int rc;

    memset(m, 0, sizeof(*m));
    if (len > PROTO_MAX_MSG)
        return proto_fail(err, PROTO_E_TOO_LARGE, "message of %zu bytes is over the limit", len);
    struct proto_scan sc = {0};
    proto_scan_bytes(&sc, (const uint8_t *)buf, len, PROTO_MAX_MSG, NULL);
    if (sc.error != NULL)
        return proto_fail(err, sc.error, "%s", sc.message);
    if (!tree && sc.deep_msg != 1 && onepass_kind((const uint8_t *)buf, len) == ONEPASS_BATCH)
        return decode_bytes_batch(buf, len, &sc, m, err);
    msgpack_unpacked_init(&res);
    switch (msgpack_unpack_next(&res, buf, len, &off)) {
    case MSGPACK_UNPACK_SUCCESS:
        rc = off == len ? proto_decode(&res.data, m, err)
                        : proto_fail(err, PROTO_E_MESSAGE, "trailing bytes after the message");
        break;
    case MSGPACK_UNPACK_CONTINUE:
        rc = proto_fail(err, PROTO_E_MSGPACK, "the message is cut short");
        break;
    default:
        rc = proto_fail(err, PROTO_E_MSGPACK, "bytes are not valid msgpack");
        break;
    }
    msgpack_unpacked_destroy(&res);
    return rc;
}

int proto_decode_bytes(const char *buf, size_t len, struct proto_msg *m, struct proto_error *err)
{
    return decode_bytes(buf, len, m, err, false);
}

int proto_decode_bytes_tree(const char *buf, size_t len, struct proto_msg *m,
                            struct proto_error *err)
{
    return decode_bytes(buf, len, m, err, true);
}

void proto_batch_free(struct proto_batch *b)
{
    if (b == NULL)
        return;
    free(b->entries);
    free(b->blob);
    memset(b, 0, sizeof(*b));
}

void proto_msg_free(struct proto_msg *m)
{
    if (m == NULL)
        return;
    free(m->counters.ops);
    m->counters.ops = NULL;
    switch (m->type) {
    case PROTO_HELLO:
        free(m->u.hello.session);
        free(m->u.hello.host);
        free(m->u.hello.device);
        free(m->u.hello.home);
        proto_kv_free(m->u.hello.meta, m->u.hello.n_meta);
        break;
    case PROTO_OPS:
        for (size_t i = 0; m->u.ops.defs != NULL && i < m->u.ops.n; i++) {
            free(m->u.ops.defs[i].name);
            free(m->u.ops.defs[i].category);
        }
        free(m->u.ops.defs);
        break;
    case PROTO_BATCH:
        proto_batch_free(&m->u.batch);
        break;
    case PROTO_META:
        proto_kv_free(m->u.meta.kv, m->u.meta.n);
        break;
    case PROTO_REPORT:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_CLASSIFY:
    case PROTO_LIVE:
        free(m->u.req.session.name);
        free(m->u.req.re_comm);
        free(m->u.req.re_compute);
        free(m->u.req.re_memory);
        free(m->u.req.analysis.device);
        free(m->u.req.analysis.category);
        break;
    case PROTO_ERROR:
        free(m->u.error.code);
        free(m->u.error.message);
        break;
    default:
        break;
    }
    memset(m, 0, sizeof(*m));
}
