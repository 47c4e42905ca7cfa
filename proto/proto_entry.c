/*
 * proto_entry.c — decoding of a batch through msgpack-c's object tree: each
 * entry's fields, its shapes packed into the batch's blob, and its `ext`
 * map (proto/PROTOCOL.md Part 3). This is the reference decoder: batches
 * that arrive on a socket take onepass.c, which applies the same rules to
 * the bytes, and the tests and the fuzzer compare the two.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_entry.h"
#include "proto_field.h"

/*
 * Validates one shape (at most PROTO_MAX_DIMS unsigned dimensions) and packs it, canonical,
 * into the batch's blob sb through pk. When not NULL: *off and *len locate it in the blob,
 * *product is the product of its dimensions (saturating at INT64_MAX; 0 for a scalar).
 */
static int blob_shape(msgpack_packer *pk, msgpack_sbuffer *sb, const msgpack_object *o,
                      uint32_t *off, uint32_t *len, uint64_t *product, struct proto_error *err)
{
    uint64_t dims[PROTO_MAX_DIMS];
    uint32_t n;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "a shape must be an array of unsigned integers");
    n = o->via.array.size;
    if (n > PROTO_MAX_DIMS)
        return proto_fail(err, PROTO_E_TOO_LARGE, "a shape has %u dimensions, over the limit of %d",
                          n, PROTO_MAX_DIMS);
    for (uint32_t i = 0; i < n; i++) {
        rc = proto_field_uint(&o->via.array.ptr[i], INT64_MAX, &dims[i], "a shape dimension", err);
        if (rc < 0)
            return rc;
    }
    if (product != NULL) {
        uint64_t p = 1;
        for (uint32_t i = 0; i < n; i++)
            p = (dims[i] != 0 && p > (uint64_t)INT64_MAX / dims[i]) ? (uint64_t)INT64_MAX
                                                                    : p * dims[i];
        *product = n ? p : 0;
    }
    if (off != NULL)
        *off = (uint32_t)sb->size;
    if (proto_pack_shape(pk, dims, n) < 0)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    if (len != NULL)
        *len = (uint32_t)(sb->size - *off);
    return 0;
}

static int blob_in_shapes(msgpack_packer *pk, msgpack_sbuffer *sb, const msgpack_object *o,
                          struct proto_entry *e, struct proto_error *err)
{
    uint32_t n;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "in_shapes must be an array of shapes");
    n = o->via.array.size;
    if (n > PROTO_MAX_INPUTS)
        return proto_fail(err, PROTO_E_TOO_LARGE, "%u input shapes, over the limit of %d", n,
                          PROTO_MAX_INPUTS);
    e->in_off = (uint32_t)sb->size;
    if (msgpack_pack_array(pk, n) < 0)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        if ((rc = blob_shape(pk, sb, &o->via.array.ptr[i], NULL, NULL, NULL, err)) < 0)
            return rc;
    e->in_len = (uint32_t)(sb->size - e->in_off);
    return 0;
}

const struct proto_ext_key proto_ext_keys[PROTO_N_EXT_KEYS] = {
    {"stream", PROTO_EXT_STREAM},
    {"peer", PROTO_EXT_PEER},
    {"tag", PROTO_EXT_TAG},
    {"comm", PROTO_EXT_COMM},
    {"seq", PROTO_EXT_SEQ},
    {"checksum", PROTO_EXT_CHECKSUM},
    {"id", PROTO_EXT_ID},
    {"parent", PROTO_EXT_PARENT},
    {"launcher", PROTO_EXT_LAUNCHER},
    {"comm_size", PROTO_EXT_COMM_SIZE},
    {"span", PROTO_EXT_SPAN},
};

uint64_t *proto_ext_slot(struct proto_ext *x, uint32_t bit)
{
    switch (bit) {
    case PROTO_EXT_STREAM:
        return &x->stream;
    case PROTO_EXT_PEER:
        return &x->peer;
    case PROTO_EXT_COMM:
        return &x->comm;
    case PROTO_EXT_SEQ:
        return &x->seq;
    case PROTO_EXT_ID:
        return &x->id;
    case PROTO_EXT_PARENT:
        return &x->parent;
    case PROTO_EXT_COMM_SIZE:
        return &x->comm_size;
    case PROTO_EXT_SPAN:
        return &x->span;
    default:
        return &x->checksum;
    }
}

/* One known key of an ext map; nil is the same as absent. */
static int decode_ext_value(const msgpack_object *v, uint32_t bit, const char *key,
                            struct proto_ext *x, struct proto_error *err)
{
    char what[32];
    int rc;

    snprintf(what, sizeof(what), "entry ext.%s", key);
    if (x->has & bit)
        return proto_fail(err, PROTO_E_MESSAGE, "%s given twice", what);
    if (v->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (bit == PROTO_EXT_TAG) {
        if ((rc = proto_field_int(v, INT64_MIN, INT64_MAX, &x->tag, what, err)) < 0)
            return rc;
    } else if (bit == PROTO_EXT_LAUNCHER) {
        uint64_t op = 0;
        if ((rc = proto_field_uint(v, UINT32_MAX, &op, what, err)) < 0)
            return rc;
        x->launcher = (uint32_t)op;
    } else if (bit == PROTO_EXT_COMM_SIZE) {
        if ((rc = proto_field_uint(v, PROTO_MAX_COMM_SIZE, &x->comm_size, what, err)) < 0)
            return rc;
        if (x->comm_size == 0)
            return proto_fail(err, PROTO_E_MESSAGE, "%s must be at least 1", what);
    } else if ((rc = proto_field_uint(v, UINT64_MAX, proto_ext_slot(x, bit), what, err)) < 0) {
        return rc;
    }
    x->has |= bit;
    return 0;
}

/* Position 9 of an entry: an ext map (unknown keys skipped) or nil, copied into the blob. */
static int blob_ext(msgpack_sbuffer *sb, const msgpack_object *o, struct proto_entry *e,
                    struct proto_error *err)
{
    struct proto_ext x;
    int rc;

    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_fail(err, PROTO_E_MESSAGE, "entry ext must be a map or nil");
    if ((rc = proto_field_map(o, "entry ext", err)) < 0)
        return rc;
    memset(&x, 0, sizeof(x));
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++)
            if (proto_field_key_is(&kv->key, proto_ext_keys[k].key) &&
                (rc = decode_ext_value(&kv->val, proto_ext_keys[k].bit, proto_ext_keys[k].key, &x,
                                       err)) < 0)
                return rc;
    }
    if (x.has == 0)
        return 0; /* an empty map (or only unknown keys): nothing to keep */
    e->ext_off = (uint32_t)sb->size;
    e->ext_len = (uint32_t)sizeof(x);
    if (msgpack_sbuffer_write(sb, (const char *)&x, sizeof(x)) < 0)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    return 0;
}

bool proto_entry_ext(const struct proto_entry *e, const char *blob, struct proto_ext *ext)
{
    if (e->ext_len != sizeof(*ext)) {
        ext->has = 0; /* the rest is not read: nothing is set (the writer's hot path) */
        return false;
    }
    memcpy(ext, blob + e->ext_off, sizeof(*ext)); /* the blob keeps no alignment */
    return true;
}

/*
 * The rules of an entry. onepass.c applies the same ones to the bytes (the
 * path batches take): a change here is made there too, and test_proto's
 * onepass_same_as_object_tree and fuzz_decode proto_fail until both agree.
 */
static int decode_entry(const msgpack_object *o, struct proto_entry *e, msgpack_packer *pk,
                        msgpack_sbuffer *sb, struct proto_error *err)
{
    const msgpack_object *f;
    uint64_t op = 0, product = 0;
    bool elements_nil = true;
    uint32_t n;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 4)
        return proto_fail(err, PROTO_E_MESSAGE,
                          "an entry must be [step, op_id, start_ns, dur_ns, ...] (at least 4)");
    f = o->via.array.ptr;
    n = o->via.array.size;
    memset(e, 0, sizeof(*e));
    if ((rc = proto_field_uint(&f[0], INT64_MAX, &e->step, "entry step", err)) < 0 ||
        (rc = proto_field_uint(&f[1], UINT32_MAX, &op, "entry op_id", err)) < 0 ||
        (rc = proto_field_uint(&f[2], INT64_MAX, &e->start_ns, "entry start_ns", err)) < 0 ||
        (rc = proto_field_uint(&f[3], INT64_MAX, &e->dur_ns, "entry dur_ns", err)) < 0)
        return rc;
    if (e->dur_ns > (uint64_t)INT64_MAX - e->start_ns)
        return proto_fail(err, PROTO_E_MESSAGE, "entry start_ns + dur_ns is over INT64_MAX");
    e->op_id = (uint32_t)op;
    if (n > 4 && f[4].type != MSGPACK_OBJECT_NIL) {
        if ((rc = proto_field_uint(&f[4], INT64_MAX, &e->elements, "entry elements", err)) < 0)
            return rc;
        elements_nil = false;
    }
    if (n > 5 && f[5].type != MSGPACK_OBJECT_NIL &&
        (rc = proto_field_uint(&f[5], INT64_MAX, &e->mem_bytes, "entry mem_bytes", err)) < 0)
        return rc;
    if (n > 6 && f[6].type != MSGPACK_OBJECT_NIL &&
        (rc = blob_shape(pk, sb, &f[6], &e->out_off, &e->out_len, &product, err)) < 0)
        return rc;
    if (n > 7 && f[7].type != MSGPACK_OBJECT_NIL &&
        (rc = blob_in_shapes(pk, sb, &f[7], e, err)) < 0)
        return rc;
    if (n > 8 && f[8].type != MSGPACK_OBJECT_NIL) {
        const msgpack_object_str *s = &f[8].via.str;

        if (f[8].type != MSGPACK_OBJECT_STR || s->size == 0)
            return proto_fail(err, PROTO_E_MESSAGE,
                              "entry device must be a non-empty string or nil");
        if (s->size > PROTO_MAX_NAME)
            return proto_fail(err, PROTO_E_TOO_LARGE, "entry device is over %d bytes",
                              PROTO_MAX_NAME);
        if (!proto_utf8_valid(s->ptr, s->size))
            return proto_fail(err, PROTO_E_MESSAGE, "entry device is not valid UTF-8");
        e->dev_off = (uint32_t)sb->size;
        e->dev_len = s->size;
        if (msgpack_sbuffer_write(sb, s->ptr, s->size) < 0)
            return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    }
    if (n > 9 && f[9].type != MSGPACK_OBJECT_NIL && (rc = blob_ext(sb, &f[9], e, err)) < 0)
        return rc;
    if (elements_nil)
        e->elements = product;
    return 0;
}

int proto_entry_batch(const msgpack_object *a, struct proto_batch *b, struct proto_error *err)
{
    const msgpack_object *l;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = 0;

    if (a->via.array.size < 2 || a->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "batch needs an array of entries");
    l = &a->via.array.ptr[1];
    b->entries = malloc((l->via.array.size ? l->via.array.size : 1) * sizeof(*b->entries));
    if (b->entries == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (uint32_t i = 0; i < l->via.array.size; i++) {
        if ((rc = decode_entry(&l->via.array.ptr[i], &b->entries[i], &pk, &sb, err)) < 0) {
            size_t len = err ? strlen(err->message) : 0;
            if (err != NULL)
                snprintf(err->message + len, sizeof(err->message) - len, " (entry %u)", i);
            goto out;
        }
    }
    b->n = b->cap = l->via.array.size;
out:
    b->blob_len = sb.size;
    b->blob_cap = sb.alloc;
    b->blob = msgpack_sbuffer_release(&sb);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
