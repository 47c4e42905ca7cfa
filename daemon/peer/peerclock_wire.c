/*
 * peerclock_wire.c — the clock-probe messages, byte for byte (peerclock_wire.h).
 */
#include "peerclock_wire.h"

#include <errno.h>
#include <string.h>

#include <msgpack.h>

#include "peerclock.h"

static const char probe_name[] = "clock_probe";
static const char reply_name[] = "clock_reply";

struct fixed_buf {
    uint8_t *p;
    size_t len, cap;
};

static int fixed_write(void *data, const char *buf, size_t n)
{
    struct fixed_buf *b = data;
    if (n > b->cap - b->len)
        return -1;
    memcpy(b->p + b->len, buf, n);
    b->len += n;
    return 0;
}

int peerclock_wire_encode(const struct peerclock_msg *m, uint8_t *buf, size_t cap)
{
    int reply = m->type == PEERCLOCK_REPLY;
    if (m->type != PEERCLOCK_PROBE && !reply)
        return -EINVAL;
    int64_t t[3] = {m->t1, m->t2, m->t3};
    size_t nt = reply ? 3 : 1;
    for (size_t i = 0; i < nt; i++)
        if (t[i] < 0 || t[i] > PEERCLOCK_TIME_MAX)
            return -EINVAL;
    struct fixed_buf b = {buf, 0, cap};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, fixed_write);
    const char *name = reply ? reply_name : probe_name;
    int rc = msgpack_pack_array(&pk, reply ? 5 : 3) | msgpack_pack_str(&pk, strlen(name)) |
             msgpack_pack_str_body(&pk, name, strlen(name)) | msgpack_pack_uint32(&pk, m->seq);
    for (size_t i = 0; i < nt; i++)
        rc |= msgpack_pack_uint64(&pk, (uint64_t)t[i]);
    return rc ? -EMSGSIZE : (int)b.len;
}

/* A cursor over the bytes: `short` is set when they end before the message does. */
struct cursor {
    const uint8_t *p;
    size_t len, off;
    int short_;
};

static int take(struct cursor *c, size_t n, const uint8_t **out)
{
    if (n > c->len - c->off) {
        c->short_ = 1;
        return -1;
    }
    *out = c->p + c->off;
    c->off += n;
    return 0;
}

static uint64_t be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A non-negative integer of at most `max`, in any of msgpack's integer forms. */
static int read_uint(struct cursor *c, uint64_t max, uint64_t *v)
{
    const uint8_t *h, *p;
    if (take(c, 1, &h) < 0)
        return -1;
    if (h[0] <= 0x7f) {
        *v = h[0];
        return 0;
    }
    size_t n;
    int is_signed = 0;
    switch (h[0]) {
    case 0xcc:
        n = 1;
        break;
    case 0xcd:
        n = 2;
        break;
    case 0xce:
        n = 4;
        break;
    case 0xcf:
        n = 8;
        break;
    case 0xd0:
        n = 1, is_signed = 1;
        break;
    case 0xd1:
        n = 2, is_signed = 1;
        break;
    case 0xd2:
        n = 4, is_signed = 1;
        break;
    case 0xd3:
        n = 8, is_signed = 1;
        break;
    default:
        return -1;
    }
    if (take(c, n, &p) < 0)
        return -1;
    if (is_signed && (p[0] & 0x80))
        return -1; /* negative */
    *v = be(p, n);
    return *v <= max ? 0 : -1;
}

/* The message's name: a fixstr or str8 equal to one of the two. */
static int read_name(struct cursor *c, enum peerclock_msg_type *type)
{
    const uint8_t *h, *p;
    size_t n;
    if (take(c, 1, &h) < 0)
        return -1;
    if ((h[0] & 0xe0) == 0xa0) {
        n = h[0] & 0x1f;
    } else if (h[0] == 0xd9) {
        if (take(c, 1, &p) < 0)
            return -1;
        n = p[0];
    } else {
        return -1;
    }
    if (n != sizeof(probe_name) - 1)
        return -1;
    if (take(c, n, &p) < 0)
        return -1;
    if (memcmp(p, probe_name, n) == 0)
        *type = PEERCLOCK_PROBE;
    else if (memcmp(p, reply_name, n) == 0)
        *type = PEERCLOCK_REPLY;
    else
        return -1;
    return 0;
}

int peerclock_wire_decode(const uint8_t *buf, size_t len, struct peerclock_msg *m)
{
    struct cursor c = {buf, len, 0, 0};
    const uint8_t *h;
    uint64_t v[4] = {0};
    memset(m, 0, sizeof(*m));
    if (take(&c, 1, &h) < 0)
        return 0;
    if (h[0] != 0x93 && h[0] != 0x95)
        return -EPROTO;
    size_t n = (size_t)(h[0] & 0x0f) - 1;
    if (read_name(&c, &m->type) < 0)
        goto bad;
    if (n != (m->type == PEERCLOCK_REPLY ? 4u : 2u))
        goto bad;
    for (size_t i = 0; i < n; i++)
        if (read_uint(&c, i == 0 ? UINT32_MAX : (uint64_t)PEERCLOCK_TIME_MAX, &v[i]) < 0)
            goto bad;
    m->seq = (uint32_t)v[0];
    m->t1 = (int64_t)v[1];
    m->t2 = (int64_t)v[2];
    m->t3 = (int64_t)v[3];
    return (int)c.off;
bad:
    memset(m, 0, sizeof(*m));
    return c.short_ ? 0 : -EPROTO;
}
