/*
 * onepass_int.h — private to onepass*.c: the msgpack reader and the blob they share.
 *
 * onepass_rd.c    the reader's wide headers and skipping, onepass_skip(), onepass_kind()
 * onepass.c       an entry's fields checked as proto_entry.c checks them (onepass_entry),
 *                 and a whole batch (onepass_batch)
 * onepass_inc.c   a batch as its bytes arrive (onepass_inc_*)
 * The reader's common cases (rd_next, rd_uint_wide) are static inline here: they run for
 * every value of every entry. Pure functions over bytes, reentrant, like onepass.h.
 */
#ifndef TRACECTL_ONEPASS_INT_H
#define TRACECTL_ONEPASS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "onepass.h"
#include "proto_entry.h"
#include "proto_field.h"

#define BLOB_INIT (8u << 10) /* what msgpack_sbuffer starts with: the same growth */
/*
 * More than the last batch's blob: the readers ask room for a few bytes past
 * what they write (fast_copy's 32, op_shape's 16 and its worst case): without
 * it the last entry of a batch like the last one grew the blob, a copy of it.
 */
#define BLOB_SLACK 256

__attribute__((cold)) static inline int cut_short(struct proto_error *err)
{
    return proto_fail(err, PROTO_E_MSGPACK, "the message is cut short");
}

/* ---- the msgpack reader --------------------------------------------------- */

struct rd {
    const uint8_t *p, *end;
    bool strict; /* bytes the scanner has not seen: step over no container (onepass_skip_body) */
};

/*
 * One value's header. kind is msgpack-c's object type; u is an unsigned
 * value, or a negative one as int64 bits; n a str/bin/ext length (s its
 * body, already stepped over) or an array/map count (the elements follow).
 */
struct val {
    msgpack_object_type kind;
    uint32_t n;
    uint64_t u;
    const uint8_t *s;
};

static inline uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/*
 * The header of a type byte other than the fix* ranges (onepass_rd.c): its size and what it
 * is, r->p stepped over it. Returns 0, or -1 when the bytes end first or t is never used.
 */
int onepass_rd_wide(struct rd *r, uint8_t t, struct val *v);

/*
 * uint8..uint64 (t 0xcc..0xcf) at p, with 9 bytes readable after p whatever
 * the width: the 8 bytes after the type, big-endian, shifted down to it.
 */
static inline uint64_t rd_uint_wide(const uint8_t *p, uint8_t t)
{
    uint64_t x;

    memcpy(&x, p + 1, 8);
    return __builtin_bswap64(x) >> (64 - (8u << (t - 0xcc)));
}

/* Reads the next value's header into *v. Returns 0, or -1 when the bytes end first. */
static inline int rd_next(struct rd *r, struct val *v)
{
    uint8_t t;

    if (r->p == r->end)
        return -1;
    t = *r->p;
    if (t <= 0x7f) {
        v->kind = MSGPACK_OBJECT_POSITIVE_INTEGER;
        v->u = t;
        r->p++;
        return 0;
    }
    if (t == 0xc0) {
        v->kind = MSGPACK_OBJECT_NIL;
        r->p++;
        return 0;
    }
    if (t >= 0xcc && t <= 0xcf && r->end - r->p >= 9) { /* the common wide case, inline */
        v->kind = MSGPACK_OBJECT_POSITIVE_INTEGER;
        v->u = rd_uint_wide(r->p, t);
        r->p += 1 + (1u << (t - 0xcc));
        return 0;
    }
    if (t >= 0xe0) {
        v->kind = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        v->u = (uint64_t)(int64_t)(int8_t)t;
        r->p++;
        return 0;
    }
    if (t <= 0x9f) {
        v->kind = t <= 0x8f ? MSGPACK_OBJECT_MAP : MSGPACK_OBJECT_ARRAY;
        v->n = t & 0x0f;
        r->p++;
        return 0;
    }
    if (t <= 0xbf) {
        v->kind = MSGPACK_OBJECT_STR;
        v->n = t & 0x1f;
        if (v->n >= (size_t)(r->end - r->p))
            return -1;
        v->s = r->p + 1;
        r->p += 1 + v->n;
        return 0;
    }
    return onepass_rd_wide(r, t, v);
}

/*
 * Steps over the elements of the container whose header *v is (onepass_rd.c). Returns 0, or
 * -1 when the bytes end first or (r->strict) the container is not empty.
 */
int onepass_skip_body(struct rd *r, const struct val *v);

struct blob {
    char *data;
    size_t size, alloc;
};

/*
 * Decodes the entry at r->p into *e (onepass.c), its shapes, device and ext into b.
 * Returns 0 with r->p past it, or a negative errno with *err filled as proto_decode() would.
 */
int onepass_entry(struct rd *r, struct blob *b, struct proto_entry *e, struct proto_error *err);

#endif
