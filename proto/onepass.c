/*
 * onepass.c — a batch message decoded in one pass over its bytes; see onepass.h.
 *
 * The reader below knows the msgpack format and classifies each value the way
 * msgpack-c does (a signed encoding of a value >= 0 is a positive integer, as
 * in msgpack-c's object tree), so that every check of proto_entry.c's decode_entry()
 * can be made here on the same terms and fail with the same words. Where
 * proto_entry.c checks a whole object before its parts (an ext map's keys before
 * its values), the note at that function says how the one pass keeps the
 * order.
 *
 * This file: the typed fields, the blob, an entry and a whole batch; the reader
 * and the incremental batch are in the files onepass_int.h lists.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onepass_int.h"

/* ---- typed fields, as proto_field_uint/int ---------------------------- */

static int val_uint(const struct val *v, uint64_t max, uint64_t *out, const char *what,
                    struct proto_error *err)
{
    if (v->kind == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must not be negative", what);
    if (v->kind != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be an unsigned integer", what);
    if (v->u > max)
        return proto_fail(err, PROTO_E_MESSAGE, "%s is out of range (max %llu)", what,
                          (unsigned long long)max);
    *out = v->u;
    return 0;
}

static int rd_uint_any(struct rd *r, uint64_t max, uint64_t *out, const char *what,
                       struct proto_error *err)
{
    struct val v;

    if (rd_next(r, &v) < 0)
        return cut_short(err);
    if (v.kind == MSGPACK_OBJECT_POSITIVE_INTEGER && v.u <= max) {
        *out = v.u;
        return 0;
    }
    return val_uint(&v, max, out, what, err);
}

/* An unsigned integer <= max, the common encodings inline (a fixint is in every range here). */
static inline int rd_uint(struct rd *r, uint64_t max, uint64_t *out, const char *what,
                          struct proto_error *err)
{
    const uint8_t *p = r->p;

    if (r->end - p >= 9) {
        uint8_t t = *p;
        if (t < 0x80) {
            *out = t;
            r->p = p + 1;
            return 0;
        }
        if (t >= 0xcc && t <= 0xcf) {
            uint64_t v = rd_uint_wide(p, t);
            if (v <= max) {
                *out = v;
                r->p = p + 1 + (1u << (t - 0xcc));
                return 0;
            }
        }
    }
    return rd_uint_any(r, max, out, what, err);
}

/* A signed integer over the whole int64 range (ext.tag). */
static int val_int64(const struct val *v, int64_t *out, const char *what, struct proto_error *err)
{
    if (v->kind == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (v->u > (uint64_t)INT64_MAX)
            return proto_fail(err, PROTO_E_MESSAGE, "%s is out of range", what);
    } else if (v->kind != MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be an integer", what);
    }
    *out = (int64_t)v->u;
    return 0;
}

/* ---- the blob: what msgpack_sbuffer + proto_pack_shape would have built ---- */

static int blob_grow(struct blob *b, size_t n)
{
    size_t nsize = b->alloc ? b->alloc * 2 : BLOB_INIT;
    char *p;

    while (nsize < b->size + n) {
        if (nsize * 2 <= nsize)
            return -1;
        nsize *= 2;
    }
    if ((p = realloc(b->data, nsize)) == NULL)
        return -1;
    b->data = p;
    b->alloc = nsize;
    return 0;
}

/* Room for n more bytes; returns where they go, or NULL (out of memory). */
static inline __attribute__((always_inline)) uint8_t *blob_room(struct blob *b, size_t n)
{
    if (b->alloc - b->size < n && blob_grow(b, n) < 0)
        return NULL;
    return (uint8_t *)b->data + b->size;
}

/* msgpack's smallest encoding of an unsigned integer, as msgpack_pack_uint64() writes it. */
static size_t put_uint(uint8_t *q, uint64_t v)
{
    int k;

    if (v < 0x80) {
        q[0] = (uint8_t)v;
        return 1;
    }
    q[0] = v < 0x100 ? 0xcc : v < 0x10000 ? 0xcd : v < 0x100000000u ? 0xce : 0xcf;
    k = 1 << (q[0] - 0xcc);
    for (int i = 0; i < k; i++)
        q[1 + i] = (uint8_t)(v >> (8 * (k - 1 - i)));
    return 1 + (size_t)k;
}

static size_t uint_size(uint64_t v)
{
    return v < 0x80 ? 1 : v < 0x100 ? 2 : v < 0x10000 ? 3 : v < 0x100000000u ? 5 : 9;
}

/* ---- entry fields --------------------------------------------------------- */

/*
 * A shape whose header *h was read from `at`: validated as blob_shape() does,
 * then into the blob canonical. Bytes that are canonical already (what every
 * msgpack packer writes) are copied as they are.
 */
static inline __attribute__((always_inline)) int
op_shape(struct rd *r, const uint8_t *at, const struct val *h, struct blob *b, uint32_t *off,
         uint32_t *len, uint64_t *product, struct proto_error *err)
{
    uint64_t dims[PROTO_MAX_DIMS];
    bool canonical;
    uint32_t i;
    uint8_t *q;
    int rc;

    if (h->kind != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "a shape must be an array of unsigned integers");
    if (h->n > PROTO_MAX_DIMS)
        return proto_fail(err, PROTO_E_TOO_LARGE, "a shape has %u dimensions, over the limit of %d",
                          h->n, PROTO_MAX_DIMS);
    canonical = r->p - at == (h->n < 16 ? 1 : 3);
    i = 0;
    if (r->end - r->p >= 9 * (ptrdiff_t)h->n) {
        /* the common encodings, every dimension's 9 bytes readable: no bounds to check */
        static const uint64_t least[4] = {0x80, 0x100, 0x10000, 0x100000000u};
        const uint8_t *d = r->p;
        for (; i < h->n; i++) {
            uint8_t t = *d;
            if (t < 0x80) {
                dims[i] = t;
                d++;
            } else if (t >= 0xcc && t <= 0xcf && (dims[i] = rd_uint_wide(d, t)) <= INT64_MAX) {
                canonical = canonical && dims[i] >= least[t - 0xcc];
                d += 1 + (1u << (t - 0xcc));
            } else {
                break;
            }
        }
        r->p = d;
    }
    for (; i < h->n; i++) {
        const uint8_t *d = r->p;
        if ((rc = rd_uint(r, INT64_MAX, &dims[i], "a shape dimension", err)) < 0)
            return rc;
        canonical = canonical && (size_t)(r->p - d) == uint_size(dims[i]) &&
                    (*d < 0x80 || (*d >= 0xcc && *d <= 0xcf));
    }
    if (product != NULL) {
        uint64_t p = 1, x;
        /* saturated at INT64_MAX; a 0 after that makes it 0 */
        for (uint32_t j = 0; j < h->n; j++)
            p = __builtin_mul_overflow(p, dims[j], &x) || x > (uint64_t)INT64_MAX
                    ? (uint64_t)INT64_MAX
                    : x;
        *product = h->n ? p : 0;
    }
    /* at most a 3-byte header and 9 bytes a dimension, whatever the input's encoding, and 16
     * more for the copy below */
    if ((q = blob_room(b, 3 + 9 * (size_t)h->n + 16)) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    if (off != NULL)
        *off = (uint32_t)b->size;
    if (canonical) {
        size_t k = (size_t)(r->p - at);
        if (k <= 16 && r->end - at >= 16)
            memcpy(q, at, 16); /* most shapes: one fixed copy, the bytes after it overwritten */
        else
            memcpy(q, at, k);
        b->size += k;
    } else {
        size_t k = 0;
        if (h->n < 16) {
            q[k++] = (uint8_t)(0x90 | h->n);
        } else {
            q[k++] = 0xdc;
            q[k++] = 0;
            q[k++] = (uint8_t)h->n;
        }
        for (uint32_t j = 0; j < h->n; j++)
            k += put_uint(q + k, dims[j]);
        b->size += k;
    }
    if (len != NULL)
        *len = (uint32_t)(b->size - *off);
    return 0;
}

static int op_in_shapes(struct rd *r, const struct val *h, struct blob *b, struct proto_entry *e,
                        struct proto_error *err)
{
    struct val v;
    uint8_t *q;
    int rc;

    if (h->kind != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "in_shapes must be an array of shapes");
    if (h->n > PROTO_MAX_INPUTS)
        return proto_fail(err, PROTO_E_TOO_LARGE, "%u input shapes, over the limit of %d", h->n,
                          PROTO_MAX_INPUTS);
    if ((q = blob_room(b, 1)) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    e->in_off = (uint32_t)b->size;
    *q = (uint8_t)(0x90 | h->n); /* n <= PROTO_MAX_INPUTS: a fixarray */
    b->size++;
    for (uint32_t i = 0; i < h->n; i++) {
        const uint8_t *at = r->p;
        if (rd_next(r, &v) < 0)
            return cut_short(err);
        if ((rc = op_shape(r, at, &v, b, NULL, NULL, NULL, err)) < 0)
            return rc;
    }
    e->in_len = (uint32_t)(b->size - e->in_off);
    return 0;
}

static int op_device(const struct val *v, struct blob *b, struct proto_entry *e,
                     struct proto_error *err)
{
    uint8_t *q;

    if (v->kind != MSGPACK_OBJECT_STR || v->n == 0)
        return proto_fail(err, PROTO_E_MESSAGE, "entry device must be a non-empty string or nil");
    if (v->n > PROTO_MAX_NAME)
        return proto_fail(err, PROTO_E_TOO_LARGE, "entry device is over %d bytes", PROTO_MAX_NAME);
    if (!proto_utf8_valid((const char *)v->s, v->n))
        return proto_fail(err, PROTO_E_MESSAGE, "entry device is not valid UTF-8");
    if ((q = blob_room(b, v->n)) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    e->dev_off = (uint32_t)b->size;
    e->dev_len = v->n;
    memcpy(q, v->s, v->n);
    b->size += v->n;
    return 0;
}

/* One known key of an ext map, as proto_entry.c's decode_ext_value(); nil is the same as absent. */
static int op_ext_value(const struct val *v, size_t k, struct proto_ext *x, struct proto_error *err)
{
    uint32_t bit = proto_ext_keys[k].bit;
    char what[32];
    uint64_t op = 0;
    int rc;

    if ((x->has & bit) == 0 && v->kind == MSGPACK_OBJECT_POSITIVE_INTEGER && bit != PROTO_EXT_TAG &&
        bit != PROTO_EXT_LAUNCHER && bit != PROTO_EXT_COMM_SIZE) {
        *proto_ext_slot(x, bit) = v->u; /* the common case: no message to format */
        x->has |= bit;
        return 0;
    }
    snprintf(what, sizeof(what), "entry ext.%s", proto_ext_keys[k].key);
    if (x->has & bit)
        return proto_fail(err, PROTO_E_MESSAGE, "%s given twice", what);
    if (v->kind == MSGPACK_OBJECT_NIL)
        return 0;
    if (bit == PROTO_EXT_TAG) {
        if ((rc = val_int64(v, &x->tag, what, err)) < 0)
            return rc;
    } else if (bit == PROTO_EXT_LAUNCHER) {
        if ((rc = val_uint(v, UINT32_MAX, &op, what, err)) < 0)
            return rc;
        x->launcher = (uint32_t)op;
    } else if (bit == PROTO_EXT_COMM_SIZE) {
        if ((rc = val_uint(v, PROTO_MAX_COMM_SIZE, &x->comm_size, what, err)) < 0)
            return rc;
        if (x->comm_size == 0)
            return proto_fail(err, PROTO_E_MESSAGE, "%s must be at least 1", what);
    } else if ((rc = val_uint(v, UINT64_MAX, proto_ext_slot(x, bit), what, err)) < 0) {
        return rc;
    }
    x->has |= bit;
    return 0;
}

static size_t ext_key(const struct val *key)
{
    for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++) {
        const char *name = proto_ext_keys[k].key;
        if (strlen(name) == key->n && memcmp(name, key->s, key->n) == 0)
            return k;
    }
    return PROTO_N_EXT_KEYS;
}

/*
 * Position 9: an ext map, as proto_entry.c's blob_ext(). That one checks every key
 * is a string before it reads any value, so here a value's error waits (in
 * *err) until the map's last key is seen: a key that is not a string, even
 * after it, is the error.
 */
static int op_ext(struct rd *r, const struct val *h, struct blob *b, struct proto_entry *e,
                  struct proto_error *err)
{
    struct proto_ext x;
    struct val key, v;
    int first = 0, rc;
    uint8_t *q;

    if (h->kind != MSGPACK_OBJECT_MAP)
        return proto_fail(err, PROTO_E_MESSAGE, "entry ext must be a map or nil");
    memset(&x, 0, sizeof(x));
    for (uint32_t i = 0; i < h->n; i++) {
        if (rd_next(r, &key) < 0 || onepass_skip_body(r, &key) < 0)
            return cut_short(err);
        if (key.kind != MSGPACK_OBJECT_STR)
            return proto_fail(err, PROTO_E_MESSAGE, "entry ext has a key that is not a string");
        if (rd_next(r, &v) < 0 || onepass_skip_body(r, &v) < 0)
            return cut_short(err);
        size_t k = first < 0 ? PROTO_N_EXT_KEYS : ext_key(&key);
        if (k < PROTO_N_EXT_KEYS && (rc = op_ext_value(&v, k, &x, err)) < 0)
            first = rc;
    }
    if (first < 0)
        return first;
    if (x.has == 0)
        return 0; /* an empty map (or only unknown keys): nothing to keep */
    if ((q = blob_room(b, sizeof(x))) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    e->ext_off = (uint32_t)b->size;
    e->ext_len = (uint32_t)sizeof(x);
    memcpy(q, &x, sizeof(x));
    b->size += sizeof(x);
    return 0;
}

/*
 * What the fields after dur_ns left for the ones after them: the product of
 * out_shape's dimensions, and whether elements was nil (or absent).
 */
struct rest {
    uint64_t product;
    bool elements_nil;
};

/* Fields i.. of n: each nil is the same as absent; those after position 9 are stepped over. */
static int op_rest(struct rd *r, uint32_t i, uint32_t n, struct blob *b, struct proto_entry *e,
                   struct rest *st, struct proto_error *err)
{
    struct val v;
    int rc = 0;

    for (; i < n && rc == 0; i++) {
        const uint8_t *at = r->p;

        if (rd_next(r, &v) < 0)
            return cut_short(err);
        if (i > 9) {
            if (onepass_skip_body(r, &v) < 0)
                return cut_short(err);
            continue;
        }
        if (v.kind == MSGPACK_OBJECT_NIL)
            continue;
        switch (i) {
        case 4:
            rc = val_uint(&v, INT64_MAX, &e->elements, "entry elements", err);
            st->elements_nil = false;
            break;
        case 5:
            rc = val_uint(&v, INT64_MAX, &e->mem_bytes, "entry mem_bytes", err);
            break;
        case 6:
            rc = op_shape(r, at, &v, b, &e->out_off, &e->out_len, &st->product, err);
            break;
        case 7:
            rc = op_in_shapes(r, &v, b, e, err);
            break;
        case 8:
            rc = op_device(&v, b, e, err);
            break;
        default:
            rc = op_ext(r, &v, b, e, err);
            break;
        }
    }
    if (rc == 0 && st->elements_nil)
        e->elements = st->product;
    return rc;
}

/* ---- the common entry, fast ------------------------------------------------- */

/*
 * The fields a packer writes most (nil, fixints and uint8..64 in their
 * smallest encoding, canonical shapes in fixarrays, a fixstr device) are
 * read below with a bounds check per field, not per value, and without
 * struct val. Each reader only ever accepts: at anything else (another
 * encoding, a wrong value, bytes that end) it takes nothing, and op_rest()
 * reads that field and the rest as always, hence with the same results and
 * the same errors. What a fast reader puts in the entry and the blob is what
 * op_rest() would have put there.
 */

/*
 * An unsigned integer <= INT64_MAX or nil (*nil) at r->p, 9 bytes readable
 * after it. Returns false (nothing read) for anything else.
 */
static inline bool fast_uint_or_nil(struct rd *r, uint64_t *out, bool *nil)
{
    const uint8_t *p = r->p;
    uint8_t t = *p;

    if (t < 0x80) {
        *out = t;
        *nil = false;
        r->p = p + 1;
        return true;
    }
    if (t == 0xc0) {
        *nil = true;
        r->p = p + 1;
        return true;
    }
    if (t >= 0xcc && t <= 0xcf) {
        uint64_t v = rd_uint_wide(p, t);
        if (v <= (uint64_t)INT64_MAX) {
            *out = v;
            *nil = false;
            r->p = p + 1 + (1u << (t - 0xcc));
            return true;
        }
    }
    return false;
}

/*
 * A canonical shape in a fixarray at p (*p is 0x90..0x9f: at most 15
 * dimensions, within PROTO_MAX_DIMS), each dimension a fixint or the
 * smallest uint8..64, <= INT64_MAX; 9 bytes a dimension readable after the
 * header. Returns its size and the product of its dimensions as op_shape()
 * computes it, or 0 (anything else: op_shape() reads it).
 */
static inline size_t fast_shape(const uint8_t *p, const uint8_t *end, uint64_t *product)
{
    static const uint64_t least[4] = {0x80, 0x100, 0x10000, 0x100000000u};
    uint32_t n = *p & 0x0f;
    const uint8_t *d = p + 1;
    uint64_t prod = 1, x, v;

    if (end - d < 9 * (ptrdiff_t)n)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t t = *d;
        if (t < 0x80) {
            v = t;
            d++;
        } else if (t >= 0xcc && t <= 0xcf) {
            v = rd_uint_wide(d, t);
            if (v > (uint64_t)INT64_MAX || v < least[t - 0xcc])
                return 0;
            d += 1 + (1u << (t - 0xcc));
        } else {
            return 0;
        }
        /* saturated at INT64_MAX; a 0 after that makes it 0 */
        prod = __builtin_mul_overflow(prod, v, &x) || x > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX
                                                                              : x;
    }
    *product = n ? prod : 0;
    return (size_t)(d - p);
}

/*
 * Copies the k bytes at p to q, with 32 bytes of room at q: most shapes in
 * one fixed copy when 32 bytes are readable at p (the bytes after k are
 * overwritten later, or are past the blob's size).
 */
static inline void fast_copy(uint8_t *q, const uint8_t *p, size_t k, const uint8_t *end)
{
    if (k <= 32 && end - p >= 32)
        memcpy(q, p, 32);
    else
        memcpy(q, p, k);
}

/* 1 when the value at r->p is nil (then stepped over), 0 when it is another, -1 when the bytes
 * end first. */
static inline __attribute__((always_inline)) int fast_nil(struct rd *r)
{
    if (r->p == r->end)
        return -1;
    if (*r->p != 0xc0)
        return 0;
    r->p++;
    return 1;
}

/* Copies the k canonical bytes at p into the blob, where *off and *len say. false: no memory. */
static inline __attribute__((always_inline)) bool fast_put(struct blob *b, const uint8_t *p,
                                                           size_t k, const uint8_t *end,
                                                           uint32_t *off, uint32_t *len)
{
    uint8_t *q = blob_room(b, k + 32);

    if (q == NULL)
        return false;
    fast_copy(q, p, k, end);
    *off = (uint32_t)b->size;
    *len = (uint32_t)k;
    b->size += k;
    return true;
}

/* Field 6, out_shape, at r->p: nil, or a fixarray shape copied canonical into the blob
 * (*product: its elements). false: not for the fast path, r->p unmoved. */
static inline __attribute__((always_inline)) bool
fast_out_shape(struct rd *r, struct blob *b, struct proto_entry *e, uint64_t *product)
{
    const uint8_t *p = r->p, *end = r->end;
    size_t k;
    int nil;

    if ((nil = fast_nil(r)) != 0)
        return nil > 0;
    if ((*p & 0xf0) != 0x90 || (k = fast_shape(p, end, product)) == 0 ||
        !fast_put(b, p, k, end, &e->out_off, &e->out_len))
        return false;
    r->p = p + k;
    return true;
}

/* Field 7, in_shapes, at r->p: nil, or a fixarray of at most PROTO_MAX_INPUTS shapes:
 * canonical, their bytes are the blob's. false: not for the fast path, r->p unmoved. */
static inline __attribute__((always_inline)) bool fast_in_shapes(struct rd *r, struct blob *b,
                                                                 struct proto_entry *e)
{
    const uint8_t *p = r->p, *end = r->end;
    uint32_t nin;
    uint64_t unused;
    size_t k, kin = 1;
    int nil;

    if ((nil = fast_nil(r)) != 0)
        return nil > 0;
    nin = *p & 0x0f;
    if ((*p & 0xf0) != 0x90 || nin > PROTO_MAX_INPUTS)
        return false;
    for (uint32_t j = 0; j < nin; j++) {
        if (end - (p + kin) < 1 || (p[kin] & 0xf0) != 0x90 ||
            (k = fast_shape(p + kin, end, &unused)) == 0)
            return false;
        kin += k;
    }
    if (!fast_put(b, p, kin, end, &e->in_off, &e->in_len))
        return false;
    r->p = p + kin;
    return true;
}

/* Field 8, device, at r->p: nil or a fixstr, into the blob. false: not for the fast path,
 * r->p unmoved. */
static inline __attribute__((always_inline)) bool fast_device(struct rd *r, struct blob *b,
                                                              struct proto_entry *e)
{
    const uint8_t *p = r->p, *end = r->end;
    uint32_t len;
    uint8_t *q;
    int nil;

    if ((nil = fast_nil(r)) != 0)
        return nil > 0;
    len = *p & 0x1f;
    if ((*p & 0xe0) != 0xa0 || len == 0 || len > PROTO_MAX_NAME || end - p <= len ||
        !proto_utf8_valid((const char *)p + 1, len) || (q = blob_room(b, len)) == NULL)
        return false;
    memcpy(q, p + 1, len);
    e->dev_off = (uint32_t)b->size;
    e->dev_len = len;
    b->size += len;
    r->p = p + 1 + len;
    return true;
}

/*
 * Fields 4.. of n, as far as the fast readers go: returns the position of the
 * first field they did not take (n when they took all), r->p at its start.
 * Positions 9 (ext) and later are op_rest()'s but for a nil ext.
 */
static uint32_t rest_fast(struct rd *r, uint32_t n, struct blob *b, struct proto_entry *e,
                          struct rest *st)
{
    uint64_t v = 0;
    bool nil;

    /* 4 and 5: elements and mem_bytes, each within 9 bytes */
    if (n <= 4 || r->end - r->p < 18)
        return 4;
    if (!fast_uint_or_nil(r, &v, &nil))
        return 4;
    if (!nil) {
        e->elements = v;
        st->elements_nil = false;
    }
    if (n == 5)
        return 5;
    if (!fast_uint_or_nil(r, &v, &nil))
        return 5;
    if (!nil)
        e->mem_bytes = v;
    if (n == 6 || !fast_out_shape(r, b, e, &st->product))
        return 6;
    if (n == 7 || !fast_in_shapes(r, b, e))
        return 7;
    if (n == 8 || !fast_device(r, b, e))
        return 8;
    /* 9: ext, when nil */
    if (n == 9 || r->p == r->end || *r->p != 0xc0)
        return 9;
    r->p++;
    return 10;
}

int onepass_entry(struct rd *r, struct blob *b, struct proto_entry *e, struct proto_error *err)
{
    struct rest st = {0, true};
    uint64_t op = 0;
    struct val v;
    int rc;

    if (r->p < r->end && *r->p >= 0x94 && *r->p <= 0x9f) { /* a fixarray of 4..15: most */
        v.n = *r->p++ & 0x0f;
    } else {
        if (rd_next(r, &v) < 0)
            return cut_short(err);
        if (v.kind != MSGPACK_OBJECT_ARRAY || v.n < 4)
            return proto_fail(err, PROTO_E_MESSAGE,
                              "an entry must be [step, op_id, start_ns, dur_ns, ...] (at least 4)");
    }
    memset(e, 0, sizeof(*e));
    if ((rc = rd_uint(r, INT64_MAX, &e->step, "entry step", err)) < 0 ||
        (rc = rd_uint(r, UINT32_MAX, &op, "entry op_id", err)) < 0 ||
        (rc = rd_uint(r, INT64_MAX, &e->start_ns, "entry start_ns", err)) < 0 ||
        (rc = rd_uint(r, INT64_MAX, &e->dur_ns, "entry dur_ns", err)) < 0)
        return rc;
    if (e->dur_ns > (uint64_t)INT64_MAX - e->start_ns)
        return proto_fail(err, PROTO_E_MESSAGE, "entry start_ns + dur_ns is over INT64_MAX");
    e->op_id = (uint32_t)op;
    return op_rest(r, rest_fast(r, v.n, b, e, &st), v.n, b, e, &st, err);
}

int onepass_batch(const uint8_t *p, size_t n, struct proto_batch *out, size_t *len,
                  struct proto_error *err)
{
    struct rd r = {p, p + n, false};
    struct blob b = {0};
    struct val top, type, l;
    uint32_t count;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    /* onepass_kind() saw the array header and the type "batch" */
    if (rd_next(&r, &top) < 0 || rd_next(&r, &type) < 0)
        return cut_short(err);
    if (top.n < 2)
        return proto_fail(err, PROTO_E_MESSAGE, "batch needs an array of entries");
    if (rd_next(&r, &l) < 0)
        return cut_short(err);
    if (l.kind != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "batch needs an array of entries");
    /* Every entry takes a byte at least: the count is bounded before it is allocated. */
    if (l.n > (size_t)(r.end - r.p))
        return cut_short(err);
    count = l.n;
    out->entries = malloc((count ? count : 1) * sizeof(*out->entries));
    if (out->entries == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < count; i++) {
        if ((rc = onepass_entry(&r, &b, &out->entries[i], err)) < 0) {
            size_t k = err ? strlen(err->message) : 0;
            if (err != NULL)
                snprintf(err->message + k, sizeof(err->message) - k, " (entry %u)", i);
            goto fail;
        }
    }
    /* elements after the entries are not v1's: stepped over */
    for (uint32_t i = 2; i < top.n; i++) {
        if (rd_next(&r, &l) < 0 || onepass_skip_body(&r, &l) < 0) {
            rc = cut_short(err);
            goto fail;
        }
    }
    out->n = out->cap = count;
    *len = (size_t)(r.p - p);
    out->blob = b.data;
    out->blob_len = b.size;
    out->blob_cap = b.alloc;
    return 0;
fail:
    free(b.data);
    proto_batch_free(out);
    return rc;
}
