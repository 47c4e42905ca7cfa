/*
 * onepass_rd.c — the one-pass msgpack reader's rarer half (see onepass_int.h): the headers
 * of the wide types, stepping over a value's body, and the two questions the reader asks
 * before it decodes: how long a value is (onepass_skip) and whether a message is a batch
 * (onepass_kind).
 */
#include "onepass_int.h"

/* The header of a type byte other than the fix* ranges: its size and what it is. */
int onepass_rd_wide(struct rd *r, uint8_t t, struct val *v)
{
    /* bytes after t: the value or length field */
    static const uint8_t field[32] = {
        /* c0 */ 0, 0, 0, 0, 1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8,
        /* d0 */ 1, 2, 4, 8, 1, 1, 1, 1, 1, 1, 2, 4, 2, 4, 2, 4,
    };
    size_t left = (size_t)(r->end - r->p), k;
    uint64_t x;

    if (t == 0xc1)
        return -1;
    k = field[t - 0xc0];
    if (left < 1 + k)
        return -1;
    x = be(r->p + 1, (int)k);
    r->p += 1 + k;
    switch (t) {
    case 0xc0:
        v->kind = MSGPACK_OBJECT_NIL;
        return 0;
    case 0xc2:
    case 0xc3:
        v->kind = MSGPACK_OBJECT_BOOLEAN;
        v->u = t == 0xc3;
        return 0;
    case 0xca:
        v->kind = MSGPACK_OBJECT_FLOAT32;
        return 0;
    case 0xcb:
        v->kind = MSGPACK_OBJECT_FLOAT64;
        return 0;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        v->kind = MSGPACK_OBJECT_POSITIVE_INTEGER;
        v->u = x;
        return 0;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        /* sign-extend the k-byte value */
        int64_t i = k == 8 ? (int64_t)x : (int64_t)(x << (64 - 8 * k)) >> (64 - 8 * k);
        v->kind = i < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
        v->u = (uint64_t)i;
        return 0;
    }
    case 0xdc:
    case 0xdd:
        v->kind = MSGPACK_OBJECT_ARRAY;
        v->n = (uint32_t)x;
        return 0;
    case 0xde:
    case 0xdf:
        v->kind = MSGPACK_OBJECT_MAP;
        v->n = (uint32_t)x;
        return 0;
    case 0xd9:
    case 0xda:
    case 0xdb:
        v->kind = MSGPACK_OBJECT_STR;
        break;
    case 0xc4:
    case 0xc5:
    case 0xc6:
        v->kind = MSGPACK_OBJECT_BIN;
        break;
    case 0xc7:
    case 0xc8:
    case 0xc9:
        v->kind = MSGPACK_OBJECT_EXT;
        x += 1; /* the ext type byte */
        break;
    default: /* 0xd4..0xd8: fixext, a type byte and 1..16 bytes */
        v->kind = MSGPACK_OBJECT_EXT;
        r->p -= 1; /* field[] counted the type byte: it is part of the body */
        x = 1 + (1u << (t - 0xd4));
        break;
    }
    if (x > (uint64_t)(r->end - r->p))
        return -1;
    v->n = (uint32_t)x;
    v->s = r->p;
    r->p += x;
    return 0;
}

/*
 * Steps over the elements of the container whose header *v is (nothing for a
 * scalar). Strict, it refuses a container that is not empty: how deep such
 * a value nests is the scanner's to judge (PROTO_SCAN_DEPTH).
 */
int onepass_skip_body(struct rd *r, const struct val *v)
{
    uint64_t pending = v->kind == MSGPACK_OBJECT_ARRAY ? v->n
                       : v->kind == MSGPACK_OBJECT_MAP ? 2 * (uint64_t)v->n
                                                       : 0;
    struct val x;

    if (pending > 0 && r->strict)
        return -1;

    for (; pending > 0; pending--) {
        if (rd_next(r, &x) < 0)
            return -1;
        if (x.kind == MSGPACK_OBJECT_ARRAY)
            pending += x.n;
        else if (x.kind == MSGPACK_OBJECT_MAP)
            pending += 2 * (uint64_t)x.n;
    }
    return 0;
}

size_t onepass_skip(const uint8_t *p, size_t n)
{
    struct rd r = {p, p + n, false};
    struct val v;

    if (rd_next(&r, &v) < 0 || onepass_skip_body(&r, &v) < 0)
        return 0;
    return (size_t)(r.p - p);
}

enum onepass_kind onepass_kind(const uint8_t *p, size_t n)
{
    size_t i, k;

    /* the array header: at least one element */
    if (n == 0)
        return ONEPASS_MORE;
    if (p[0] >= 0x91 && p[0] <= 0x9f)
        i = 1;
    else if (p[0] == 0xdc || p[0] == 0xdd)
        i = p[0] == 0xdc ? 3 : 5;
    else
        return ONEPASS_OTHER;
    if (n < i)
        return ONEPASS_MORE;
    if (i > 1 && be(p + 1, (int)i - 1) == 0)
        return ONEPASS_OTHER;
    /* the type: a string of 5 bytes, "batch" */
    if (n == i)
        return ONEPASS_MORE;
    if (p[i] == 0xa5)
        k = 1;
    else if (p[i] == 0xd9 || p[i] == 0xda || p[i] == 0xdb)
        k = p[i] == 0xd9 ? 2 : p[i] == 0xda ? 3 : 5;
    else
        return ONEPASS_OTHER;
    if (n < i + k)
        return ONEPASS_MORE;
    if (k > 1 && be(p + i + 1, (int)k - 1) != 5)
        return ONEPASS_OTHER;
    i += k;
    if (memcmp(p + i, "batch", n - i < 5 ? n - i : 5) != 0)
        return ONEPASS_OTHER;
    return n - i < 5 ? ONEPASS_MORE : ONEPASS_BATCH;
}
