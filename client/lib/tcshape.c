/*
 * tcshape.c — interning (out, in) shape pairs: each distinct pair is packed
 * as msgpack once and kept until tc_close; recording threads find a pair
 * again through a lock-free hash index, and take shape_mu only for a pair
 * the client has not seen.
 */
#include <stdlib.h>
#include <string.h>

#include "tcint.h"

/* A fixed buffer for msgpack_packer: the largest pair of shapes fits. */
struct shape_buf {
    char data[SHAPE_MAX];
    size_t len;
};

static int shape_buf_write(void *data, const char *buf, size_t len)
{
    struct shape_buf *b = data;

    if (b->len + len > sizeof(b->data))
        return -1;
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    return 0;
}

/*
 * The key of an (out, in) pair: the words [out? ndim : ~0, dims..., n_in,
 * (ndim, dims...) × n_in], with ndim and n_in cut to their limits. The hot
 * path never builds it: shape_hash() and shape_key_eq() walk the caller's
 * structs directly (a key built on the stack and compared with memcmp would
 * be read back with wide loads from 8-byte stores, which stalls).
 */
#define SHAPE_KEY_MAX (1 + TC_MAX_DIMS + 1 + TC_MAX_INPUTS * (1 + TC_MAX_DIMS))

static size_t dims_of(const tc_shape *s)
{
    return s->ndim > TC_MAX_DIMS ? TC_MAX_DIMS : s->ndim;
}

static uint64_t mix(uint64_t h, uint64_t w)
{
    return (h ^ w) * 0x9e3779b97f4a7c15ull;
}

static uint64_t shape_hash(const tc_shape *out, const tc_shape *in, size_t n_in, uint32_t *words)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    uint32_t n = 2;

    if (out != NULL) {
        h = mix(h, dims_of(out));
        for (size_t d = 0; d < dims_of(out); d++)
            h = mix(h, out->dims[d]);
        n += (uint32_t)dims_of(out);
    } else {
        h = mix(h, ~0ull);
    }
    h = mix(h, n_in);
    for (size_t i = 0; i < n_in; i++) {
        h = mix(h, dims_of(&in[i]));
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            h = mix(h, in[i].dims[d]);
        n += 1 + (uint32_t)dims_of(&in[i]);
    }
    *words = n;
    return h ^ (h >> 32);
}

static bool shape_key_eq(const uint64_t *k, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    if (*k++ != (out != NULL ? dims_of(out) : ~0ull))
        return false;
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            if (*k++ != out->dims[d])
                return false;
    if (*k++ != n_in)
        return false;
    for (size_t i = 0; i < n_in; i++) {
        if (*k++ != dims_of(&in[i]))
            return false;
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            if (*k++ != in[i].dims[d])
                return false;
    }
    return true;
}

static void shape_key_make(uint64_t *k, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    *k++ = out != NULL ? dims_of(out) : ~0ull;
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            *k++ = out->dims[d];
    *k++ = n_in;
    for (size_t i = 0; i < n_in; i++) {
        *k++ = dims_of(&in[i]);
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            *k++ = in[i].dims[d];
    }
}

/* Packs the pair as two msgpack objects (nil when absent) into b. */
static void shape_pack(struct shape_buf *b, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    msgpack_packer pk;

    b->len = 0;
    msgpack_packer_init(&pk, b, shape_buf_write);
    if (out != NULL)
        proto_pack_shape(&pk, out->dims, dims_of(out));
    else
        msgpack_pack_nil(&pk);
    if (n_in > 0) {
        msgpack_pack_array(&pk, n_in);
        for (size_t i = 0; i < n_in; i++)
            proto_pack_shape(&pk, in[i].dims, dims_of(&in[i]));
    } else {
        msgpack_pack_nil(&pk);
    }
}

/* Whether every dimension is one the daemon takes (at most INT64_MAX). */
static bool shapes_valid(const tc_shape *out, const tc_shape *in, size_t n_in)
{
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            if (out->dims[d] > (uint64_t)INT64_MAX)
                return false;
    for (size_t i = 0; i < n_in; i++)
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            if (in[i].dims[d] > (uint64_t)INT64_MAX)
                return false;
    return true;
}

/* The pair's slot in the index, or the empty slot where it would go. */
static inline uint32_t shape_find(tc_client *c, const tc_shape *out, const tc_shape *in,
                                  size_t n_in, uint64_t h, uint32_t words, size_t *slot)
{
    size_t i = h & (SHAPE_INDEX - 1);

    for (;; i = (i + 1) & (SHAPE_INDEX - 1)) {
        uint64_t v = atomic_load_explicit(&c->shape_index[i], memory_order_acquire);
        const struct shape_pair *p;

        if (v == 0)
            break;
        p = &c->shapes[(uint32_t)v - 1];
        if ((v >> 32) == (h >> 32) && p->hash == h && p->words == words &&
            shape_key_eq(p->key, out, in, n_in))
            return (uint32_t)v;
    }
    *slot = i;
    return 0;
}

/*
 * A pair not in the index yet: added under the lock (unless another thread
 * added it meanwhile). Its index+1; 0 when the table is full or on ENOMEM;
 * SHAPES_BAD for a dimension the daemon would refuse (never added).
 */
static __attribute__((noinline)) uint32_t shape_intern_slow(tc_client *c, const tc_shape *out,
                                                            const tc_shape *in, size_t n_in,
                                                            uint64_t h, uint32_t words)
{
    struct shape_pair *p;
    struct shape_buf *b;
    uint32_t id = 0;
    size_t slot = 0;

    if (!shapes_valid(out, in, n_in))
        return SHAPES_BAD;
    if (atomic_load_explicit(&c->shapes_full, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&c->shape_mu);
    if ((id = shape_find(c, out, in, n_in, h, words, &slot)) != 0 || c->n_shapes == SHAPES_MAX)
        goto out;
    p = &c->shapes[c->n_shapes];
    b = malloc(sizeof(*b));
    p->key = malloc(words * sizeof(*p->key));
    if (b != NULL && p->key != NULL) {
        shape_pack(b, out, in, n_in);
        if ((p->bytes = malloc(b->len)) != NULL)
            memcpy(p->bytes, b->data, b->len);
        p->len = (uint32_t)b->len;
    }
    free(b);
    if (p->key == NULL || p->bytes == NULL) {
        free(p->key);
        free(p->bytes);
        p->key = NULL;
        p->bytes = NULL;
        goto out;
    }
    shape_key_make(p->key, out, in, n_in);
    p->hash = h;
    p->words = words;
    id = (uint32_t)++c->n_shapes;
    atomic_store_explicit(&c->shape_index[slot], (h & ~0xffffffffull) | id, memory_order_release);
    if (c->n_shapes == SHAPES_MAX)
        atomic_store_explicit(&c->shapes_full, true, memory_order_relaxed);
out:
    pthread_mutex_unlock(&c->shape_mu);
    return id;
}

/*
 * The index+1 of the (out, in) pair in the client's interned pairs, found
 * in the index without a lock: shapes repeat every step, so the lock is
 * taken only for a pair the client has not seen yet. 0 when no shapes are
 * given (or when the table is full or on ENOMEM: they are left out).
 */
__attribute__((noinline)) uint32_t tcshape_lookup(tc_client *c, const tc_shape *out,
                                                  const tc_shape *in, size_t n_in)
{
    uint32_t words, id;
    size_t slot = 0;
    uint64_t h;

    if (in == NULL)
        n_in = 0;
    else if (n_in > TC_MAX_INPUTS)
        n_in = TC_MAX_INPUTS;
    if (out == NULL && n_in == 0)
        return 0;
    h = shape_hash(out, in, n_in, &words);
    if ((id = shape_find(c, out, in, n_in, h, words, &slot)) != 0)
        return id;
    return shape_intern_slow(c, out, in, n_in, h, words);
}
