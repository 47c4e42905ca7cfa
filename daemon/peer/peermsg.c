/*
 * peermsg.c — the small peer messages (peermsg.h).
 */
#include "peermsg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool peermsg_is(const msgpack_object *s, const char *name)
{
    size_t n = strlen(name);

    return s->type == MSGPACK_OBJECT_STR && s->via.str.size == n &&
           memcmp(s->via.str.ptr, name, n) == 0;
}

enum peermsg_type peermsg_type(const msgpack_object *m)
{
    static const struct {
        const char *name;
        enum peermsg_type type;
    } types[] = {
        {"peer_hello", PEERMSG_HELLO},  {"peer_welcome", PEERMSG_WELCOME},
        {"error", PEERMSG_ERROR},       {"ping", PEERMSG_PING},
        {"pong", PEERMSG_PONG},         {"snapshot", PEERMSG_SNAPSHOT},
        {"snapshot_ack", PEERMSG_ACK},  {"clock_hello", PEERMSG_CLOCK_HELLO},
        {"arrivals", PEERMSG_ARRIVALS},
    };

    if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size == 0)
        return PEERMSG_UNKNOWN;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (peermsg_is(&m->via.array.ptr[0], types[i].name))
            return types[i].type;
    return PEERMSG_UNKNOWN;
}

static int peermsg_done(msgpack_sbuffer *sb, int failed)
{
    return failed || sb->data == NULL ? -ENOMEM : 0;
}

static int peermsg_pack_host_msg(msgpack_sbuffer *sb, const char *type, const char *host,
                                 bool hello)
{
    msgpack_packer pk;
    int f = 0;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    f |= msgpack_pack_array(&pk, 2);
    f |= proto_pack_str(&pk, type);
    f |= msgpack_pack_map(&pk, hello ? 2 : 1);
    if (hello) {
        f |= proto_pack_str(&pk, "proto");
        f |= msgpack_pack_uint32(&pk, PEERMSG_PROTO);
    }
    f |= proto_pack_str(&pk, "host");
    f |= proto_pack_str(&pk, host);
    return peermsg_done(sb, f);
}

int peermsg_pack_hello(msgpack_sbuffer *sb, const char *host)
{
    return peermsg_pack_host_msg(sb, "peer_hello", host, true);
}

int peermsg_pack_clock_hello(msgpack_sbuffer *sb, const char *host)
{
    return peermsg_pack_host_msg(sb, "clock_hello", host, true);
}

int peermsg_pack_welcome(msgpack_sbuffer *sb, const char *host)
{
    return peermsg_pack_host_msg(sb, "peer_welcome", host, false);
}

int peermsg_pack_error(msgpack_sbuffer *sb, const char *code, const char *message)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    return peermsg_done(sb, proto_pack_error(&pk, code, message));
}

int peermsg_pack_ping(msgpack_sbuffer *sb, bool pong)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    return peermsg_done(sb, msgpack_pack_array(&pk, 2) ||
                                proto_pack_str(&pk, pong ? "pong" : "ping") ||
                                msgpack_pack_map(&pk, 0));
}

int peermsg_pack_ack(msgpack_sbuffer *sb, const char *session, uint64_t seq)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    return peermsg_done(sb, msgpack_pack_array(&pk, 2) || proto_pack_str(&pk, "snapshot_ack") ||
                                msgpack_pack_map(&pk, 2) || proto_pack_str(&pk, "session") ||
                                proto_pack_str(&pk, session) || proto_pack_str(&pk, "seq") ||
                                msgpack_pack_uint64(&pk, seq));
}

/* The value of key in the map at m[1], or NULL (no map, no such key). */
static const msgpack_object *peermsg_get(const msgpack_object *m, const char *key)
{
    const msgpack_object *map;

    if (m->via.array.size < 2 || m->via.array.ptr[1].type != MSGPACK_OBJECT_MAP)
        return NULL;
    map = &m->via.array.ptr[1];
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (peermsg_is(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

bool peermsg_host_valid(const char *name, size_t len)
{
    return len > 0 && len <= PEERMSG_MAX_HOST && memchr(name, '/', len) == NULL &&
           proto_utf8_valid(name, len);
}

int peermsg_host(const msgpack_object *m, char *host, char *err, size_t errlen)
{
    const msgpack_object *h = peermsg_get(m, "host"), *p = peermsg_get(m, "proto");
    enum peermsg_type t = peermsg_type(m);

    if ((t == PEERMSG_HELLO || t == PEERMSG_CLOCK_HELLO) &&
        (p == NULL || p->type != MSGPACK_OBJECT_POSITIVE_INTEGER || p->via.u64 != PEERMSG_PROTO)) {
        snprintf(err, errlen, "%s: proto must be %d",
                 t == PEERMSG_HELLO ? "peer_hello" : "clock_hello", PEERMSG_PROTO);
        return -EPROTO;
    }
    if (h == NULL || h->type != MSGPACK_OBJECT_STR ||
        !peermsg_host_valid(h->via.str.ptr, h->via.str.size)) {
        snprintf(err, errlen, "host must be 1 to %d bytes of UTF-8 without '/'", PEERMSG_MAX_HOST);
        return -EPROTO;
    }
    memcpy(host, h->via.str.ptr, h->via.str.size);
    host[h->via.str.size] = '\0';
    return 0;
}

int peermsg_ack(const msgpack_object *m, char *session, uint64_t *seq, char *err, size_t errlen)
{
    const msgpack_object *s = peermsg_get(m, "session"), *q = peermsg_get(m, "seq");

    if (s == NULL || s->type != MSGPACK_OBJECT_STR || s->via.str.size == 0 ||
        s->via.str.size > PROTO_MAX_SESSION || q == NULL ||
        q->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        snprintf(err, errlen, "snapshot_ack: session and seq are required");
        return -EPROTO;
    }
    memcpy(session, s->via.str.ptr, s->via.str.size);
    session[s->via.str.size] = '\0';
    *seq = q->via.u64;
    return 0;
}

void peermsg_error_text(const msgpack_object *m, char *msg, size_t len)
{
    const msgpack_object *t = peermsg_get(m, "message");

    if (t == NULL || t->type != MSGPACK_OBJECT_STR)
        t = peermsg_get(m, "code");
    if (t != NULL && t->type == MSGPACK_OBJECT_STR)
        snprintf(msg, len, "%.*s", (int)(t->via.str.size < 200 ? t->via.str.size : 200),
                 t->via.str.ptr);
    else
        snprintf(msg, len, "(no message)");
    /* The peer's words go to our log: no control characters (a forged line, a terminal escape). */
    for (char *c = msg; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
}
