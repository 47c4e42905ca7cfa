/*
 * proto.c — framing, validation and encoding of the v1 wire format.
 *
 * Decoding copies everything it keeps out of the unpacker's zone into owned
 * memory before returning, so no msgpack_object outlives a call (except the
 * one proto_reader_next_object() lends, until the next call). A batch skips
 * the zone altogether: once the byte scanner has seen the whole message,
 * onepass.c decodes it from the reader's buffer with the same rules as
 * decode_batch() below, which stays the reference (proto_decode_bytes_tree()). Validation is
 * strict about what v1 defines and lenient about what it leaves open: unknown
 * map keys are skipped and fields after an entry's `ext` map (position 9,
 * the extension of proto/PROTOCOL.md Part 3) are ignored.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onepass.h"
#include "proto.h"
#include "utf8.h"

#define READ_CHUNK (4u << 10) /* initial per connection: it grows with the message */

static int fail(struct proto_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The negative errno of a wire error code (proto.h, "Errors"). */
static int code_errno(const char *code)
{
    if (strcmp(code, PROTO_E_TOO_LARGE) == 0)
        return -EMSGSIZE;
    if (strcmp(code, PROTO_E_MSGPACK) == 0)
        return -EBADMSG;
    if (strcmp(code, PROTO_E_INTERNAL) == 0)
        return -ENOMEM;
    return -EPROTO;
}

int proto_vfail(struct proto_error *err, const char *code, const char *fmt, va_list ap)
{
    if (err != NULL) {
        err->code = code;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
    }
    return code_errno(code);
}

/* Fills *err (when not NULL) and returns the code's negative errno. */
static int fail(struct proto_error *err, const char *code, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = proto_vfail(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

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

/* ---- field helpers ------------------------------------------------------ */

static bool key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);

    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, name, n) == 0;
}

static int get_uint(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                    struct proto_error *err)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return fail(err, PROTO_E_MESSAGE, "%s must not be negative", what);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return fail(err, PROTO_E_MESSAGE, "%s must be an unsigned integer", what);
    if (o->via.u64 > max)
        return fail(err, PROTO_E_MESSAGE, "%s is out of range (max %llu)", what,
                    (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

static int get_str(const msgpack_object *o, size_t min, size_t max, char **out, const char *what,
                   struct proto_error *err)
{
    char *s;

    if (o->type != MSGPACK_OBJECT_STR)
        return fail(err, PROTO_E_MESSAGE, "%s must be a string", what);
    if (o->via.str.size < min)
        return fail(err, PROTO_E_MESSAGE, "%s must not be empty", what);
    if (o->via.str.size > max)
        return fail(err, PROTO_E_TOO_LARGE, "%s is %u bytes, over the limit of %zu", what,
                    o->via.str.size, max);
    if (!proto_utf8_valid(o->via.str.ptr, o->via.str.size))
        return fail(err, PROTO_E_MESSAGE, "%s is not valid UTF-8 (or contains NUL)", what);
    s = malloc(o->via.str.size + 1);
    if (s == NULL)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
    if (o->via.str.size > 0)
        memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    *out = s;
    return 0;
}

static int get_map(const msgpack_object *o, const char *what, struct proto_error *err)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return fail(err, PROTO_E_MESSAGE, "%s must be a map", what);
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (o->via.map.ptr[i].key.type != MSGPACK_OBJECT_STR)
            return fail(err, PROTO_E_MESSAGE, "%s has a key that is not a string", what);
    return 0;
}

static int get_int(const msgpack_object *o, int64_t min, int64_t max, int64_t *out,
                   const char *what, struct proto_error *err)
{
    int64_t v;

    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return fail(err, PROTO_E_MESSAGE, "%s is out of range", what);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return fail(err, PROTO_E_MESSAGE, "%s must be an integer", what);
    }
    if (v < min || v > max)
        return fail(err, PROTO_E_MESSAGE, "%s is out of range [%lld, %lld]", what, (long long)min,
                    (long long)max);
    *out = v;
    return 0;
}

void proto_kv_free(struct proto_kv *kv, size_t n)
{
    if (kv == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        if (kv[i].type == PROTO_V_STR)
            free(kv[i].v.s);
    }
    free(kv);
}

static int decode_value(const msgpack_object *o, struct proto_kv *kv, struct proto_error *err)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        kv->type = PROTO_V_NIL;
        return 0;
    case MSGPACK_OBJECT_BOOLEAN:
        kv->type = PROTO_V_BOOL;
        kv->v.b = o->via.boolean;
        return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        kv->type = PROTO_V_INT;
        return get_int(o, INT64_MIN, INT64_MAX, &kv->v.i, "a metadata integer", err);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        kv->type = PROTO_V_FLOAT;
        kv->v.f = o->via.f64;
        return 0;
    case MSGPACK_OBJECT_STR:
        kv->type = PROTO_V_STR;
        return get_str(o, 0, PROTO_MAX_NAME, &kv->v.s, "a metadata value", err);
    default:
        return fail(err, PROTO_E_MESSAGE,
                    "a metadata value must be a string, integer, float or bool");
    }
}

static int decode_meta(const msgpack_object *o, struct proto_kv **out, size_t *n_out,
                       struct proto_error *err)
{
    struct proto_kv *kv;
    uint32_t n;
    int rc;

    if ((rc = get_map(o, "meta", err)) < 0)
        return rc;
    n = o->via.map.size;
    if (n > PROTO_MAX_META)
        return fail(err, PROTO_E_TOO_LARGE, "meta has %u keys, over the limit of %d", n,
                    PROTO_MAX_META);
    kv = calloc(n ? n : 1, sizeof(*kv));
    if (kv == NULL)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object_kv *p = &o->via.map.ptr[i];

        if ((rc = get_str(&p->key, 1, PROTO_MAX_NAME, &kv[i].key, "a metadata key", err)) < 0 ||
            (rc = decode_value(&p->val, &kv[i], err)) < 0) {
            proto_kv_free(kv, i + 1);
            return rc;
        }
    }
    *out = kv;
    *n_out = n;
    return 0;
}

/* ---- producer messages -------------------------------------------------- */

static int decode_hello_field(const msgpack_object_kv *p, struct proto_hello *h,
                              struct proto_error *err)
{
    const msgpack_object *v = &p->val;

    if (key_is(&p->key, "proto"))
        return get_int(v, INT64_MIN, INT64_MAX, &h->proto, "hello.proto", err);
    if (key_is(&p->key, "session"))
        return h->session ? fail(err, PROTO_E_MESSAGE, "hello.session given twice")
                          : get_str(v, 1, PROTO_MAX_SESSION, &h->session, "hello.session", err);
    if (v->type == MSGPACK_OBJECT_NIL)
        return 0; /* optional fields: nil is the same as absent */
    if (key_is(&p->key, "rank"))
        return get_int(v, 0, INT32_MAX, &h->rank, "hello.rank", err);
    if (key_is(&p->key, "world"))
        return get_int(v, 1, INT32_MAX, &h->world, "hello.world", err);
    if (key_is(&p->key, "pid"))
        return get_int(v, 0, INT32_MAX, &h->pid, "hello.pid", err);
    if (key_is(&p->key, "host"))
        return h->host ? fail(err, PROTO_E_MESSAGE, "hello.host given twice")
                       : get_str(v, 0, PROTO_MAX_NAME, &h->host, "hello.host", err);
    if (key_is(&p->key, "device"))
        return h->device ? fail(err, PROTO_E_MESSAGE, "hello.device given twice")
                         : get_str(v, 1, PROTO_MAX_NAME, &h->device, "hello.device", err);
    if (key_is(&p->key, "meta"))
        return h->meta ? fail(err, PROTO_E_MESSAGE, "hello.meta given twice")
                       : decode_meta(v, &h->meta, &h->n_meta, err);
    return 0;
}

static int decode_hello(const msgpack_object *a, struct proto_hello *h, struct proto_error *err)
{
    bool have_proto = false;
    int rc;

    h->proto = 0;
    h->rank = h->world = h->pid = -1;
    if (a->via.array.size < 2 || get_map(&a->via.array.ptr[1], "hello", err) < 0)
        return fail(err, PROTO_E_MESSAGE, "hello needs a map");
    const msgpack_object *m = &a->via.array.ptr[1];
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        if (key_is(&m->via.map.ptr[i].key, "proto"))
            have_proto = true;
        if ((rc = decode_hello_field(&m->via.map.ptr[i], h, err)) < 0)
            return rc;
    }
    if (!have_proto)
        return fail(err, PROTO_E_MESSAGE, "hello.proto is required");
    if (h->proto != PROTO_VERSION)
        return fail(err, PROTO_E_VERSION, "protocol version %lld is not supported (this is 1)",
                    (long long)h->proto);
    if (h->session == NULL)
        return fail(err, PROTO_E_MESSAGE, "hello.session is required");
    return 0;
}

static int decode_ops(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *l;
    int rc;

    if (a->via.array.size < 2 || a->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
        return fail(err, PROTO_E_MESSAGE, "ops needs an array of [id, name(, category)]");
    l = &a->via.array.ptr[1];
    m->u.ops.defs = calloc(l->via.array.size ? l->via.array.size : 1, sizeof(struct proto_opdef));
    if (m->u.ops.defs == NULL)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < l->via.array.size; i++) {
        const msgpack_object *d = &l->via.array.ptr[i];
        struct proto_opdef *def = &m->u.ops.defs[i];
        uint64_t id = 0;

        m->u.ops.n = i + 1; /* so that proto_msg_free frees what was copied */
        if (d->type != MSGPACK_OBJECT_ARRAY || d->via.array.size < 2)
            return fail(err, PROTO_E_MESSAGE, "ops[%u] must be [id, name(, category)]", i);
        rc = get_uint(&d->via.array.ptr[0], UINT32_MAX, &id, "an op id", err);
        if (rc == 0)
            rc = get_str(&d->via.array.ptr[1], 1, PROTO_MAX_NAME, &def->name, "an op name", err);
        if (rc < 0)
            return rc;
        def->id = (uint32_t)id;
        if (d->via.array.size > 2 && d->via.array.ptr[2].type != MSGPACK_OBJECT_NIL &&
            (rc = get_str(&d->via.array.ptr[2], 1, PROTO_MAX_CATEGORY, &def->category,
                          "an op category", err)) < 0)
            return rc;
    }
    return 0;
}

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
        return fail(err, PROTO_E_MESSAGE, "a shape must be an array of unsigned integers");
    n = o->via.array.size;
    if (n > PROTO_MAX_DIMS)
        return fail(err, PROTO_E_TOO_LARGE, "a shape has %u dimensions, over the limit of %d", n,
                    PROTO_MAX_DIMS);
    for (uint32_t i = 0; i < n; i++) {
        rc = get_uint(&o->via.array.ptr[i], INT64_MAX, &dims[i], "a shape dimension", err);
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
        return fail(err, PROTO_E_INTERNAL, "out of memory");
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
        return fail(err, PROTO_E_MESSAGE, "in_shapes must be an array of shapes");
    n = o->via.array.size;
    if (n > PROTO_MAX_INPUTS)
        return fail(err, PROTO_E_TOO_LARGE, "%u input shapes, over the limit of %d", n,
                    PROTO_MAX_INPUTS);
    e->in_off = (uint32_t)sb->size;
    if (msgpack_pack_array(pk, n) < 0)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
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
        return fail(err, PROTO_E_MESSAGE, "%s given twice", what);
    if (v->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (bit == PROTO_EXT_TAG) {
        if ((rc = get_int(v, INT64_MIN, INT64_MAX, &x->tag, what, err)) < 0)
            return rc;
    } else if (bit == PROTO_EXT_LAUNCHER) {
        uint64_t op = 0;
        if ((rc = get_uint(v, UINT32_MAX, &op, what, err)) < 0)
            return rc;
        x->launcher = (uint32_t)op;
    } else if (bit == PROTO_EXT_COMM_SIZE) {
        if ((rc = get_uint(v, PROTO_MAX_COMM_SIZE, &x->comm_size, what, err)) < 0)
            return rc;
        if (x->comm_size == 0)
            return fail(err, PROTO_E_MESSAGE, "%s must be at least 1", what);
    } else if ((rc = get_uint(v, UINT64_MAX, proto_ext_slot(x, bit), what, err)) < 0) {
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
        return fail(err, PROTO_E_MESSAGE, "entry ext must be a map or nil");
    if ((rc = get_map(o, "entry ext", err)) < 0)
        return rc;
    memset(&x, 0, sizeof(x));
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++)
            if (key_is(&kv->key, proto_ext_keys[k].key) &&
                (rc = decode_ext_value(&kv->val, proto_ext_keys[k].bit, proto_ext_keys[k].key, &x,
                                       err)) < 0)
                return rc;
    }
    if (x.has == 0)
        return 0; /* an empty map (or only unknown keys): nothing to keep */
    e->ext_off = (uint32_t)sb->size;
    e->ext_len = (uint32_t)sizeof(x);
    if (msgpack_sbuffer_write(sb, (const char *)&x, sizeof(x)) < 0)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
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
 * onepass_same_as_object_tree and fuzz_decode fail until both agree.
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
        return fail(err, PROTO_E_MESSAGE,
                    "an entry must be [step, op_id, start_ns, dur_ns, ...] (at least 4)");
    f = o->via.array.ptr;
    n = o->via.array.size;
    memset(e, 0, sizeof(*e));
    if ((rc = get_uint(&f[0], INT64_MAX, &e->step, "entry step", err)) < 0 ||
        (rc = get_uint(&f[1], UINT32_MAX, &op, "entry op_id", err)) < 0 ||
        (rc = get_uint(&f[2], INT64_MAX, &e->start_ns, "entry start_ns", err)) < 0 ||
        (rc = get_uint(&f[3], INT64_MAX, &e->dur_ns, "entry dur_ns", err)) < 0)
        return rc;
    if (e->dur_ns > (uint64_t)INT64_MAX - e->start_ns)
        return fail(err, PROTO_E_MESSAGE, "entry start_ns + dur_ns is over INT64_MAX");
    e->op_id = (uint32_t)op;
    if (n > 4 && f[4].type != MSGPACK_OBJECT_NIL) {
        if ((rc = get_uint(&f[4], INT64_MAX, &e->elements, "entry elements", err)) < 0)
            return rc;
        elements_nil = false;
    }
    if (n > 5 && f[5].type != MSGPACK_OBJECT_NIL &&
        (rc = get_uint(&f[5], INT64_MAX, &e->mem_bytes, "entry mem_bytes", err)) < 0)
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
            return fail(err, PROTO_E_MESSAGE, "entry device must be a non-empty string or nil");
        if (s->size > PROTO_MAX_NAME)
            return fail(err, PROTO_E_TOO_LARGE, "entry device is over %d bytes", PROTO_MAX_NAME);
        if (!proto_utf8_valid(s->ptr, s->size))
            return fail(err, PROTO_E_MESSAGE, "entry device is not valid UTF-8");
        e->dev_off = (uint32_t)sb->size;
        e->dev_len = s->size;
        if (msgpack_sbuffer_write(sb, s->ptr, s->size) < 0)
            return fail(err, PROTO_E_INTERNAL, "out of memory");
    }
    if (n > 9 && f[9].type != MSGPACK_OBJECT_NIL && (rc = blob_ext(sb, &f[9], e, err)) < 0)
        return rc;
    if (elements_nil)
        e->elements = product;
    return 0;
}

static int decode_batch(const msgpack_object *a, struct proto_batch *b, struct proto_error *err)
{
    const msgpack_object *l;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = 0;

    if (a->via.array.size < 2 || a->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
        return fail(err, PROTO_E_MESSAGE, "batch needs an array of entries");
    l = &a->via.array.ptr[1];
    b->entries = malloc((l->via.array.size ? l->via.array.size : 1) * sizeof(*b->entries));
    if (b->entries == NULL)
        return fail(err, PROTO_E_INTERNAL, "out of memory");
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

/* Finds key in a map object (the message's second element). NULL when absent. */
static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (key_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

/* The optional map argument of bye and the control requests. */
static int arg_map(const msgpack_object *a, const msgpack_object **m, struct proto_error *err)
{
    static const msgpack_object empty = {.type = MSGPACK_OBJECT_MAP};

    if (a->via.array.size < 2 || a->via.array.ptr[1].type == MSGPACK_OBJECT_NIL) {
        *m = &empty;
        return 0;
    }
    *m = &a->via.array.ptr[1];
    return get_map(*m, "the argument", err);
}

static int decode_bye(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = arg_map(a, &args, err)) < 0)
        return rc;
    v = map_get(args, "dropped");
    if (v != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_uint(v, INT64_MAX, &m->u.bye_dropped, "bye.dropped", err)) < 0)
        return rc;
    return 0;
}

/* ---- control messages --------------------------------------------------- */

void proto_request_init(struct proto_request *req)
{
    memset(req, 0, sizeof(*req));
    req->session.id = -1;
    req->top = 10;
}

static int decode_sessref(const msgpack_object *v, struct proto_sessref *s, struct proto_error *err)
{
    if (v == NULL || v->type == MSGPACK_OBJECT_NIL)
        return fail(err, PROTO_E_MESSAGE, "session is required");
    if (v->type == MSGPACK_OBJECT_STR)
        return get_str(v, 1, PROTO_MAX_SESSION, &s->name, "session", err);
    return get_int(v, 0, INT64_MAX, &s->id, "session", err);
}

static int get_ratio(const msgpack_object *v, double *out, struct proto_error *err)
{
    double d;

    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        d = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        d = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        d = (double)v->via.i64; /* a number, out of range: say so */
    else
        return fail(err, PROTO_E_MESSAGE, "comm_min_ratio must be a number");
    if (!(d >= 0.0 && d <= 1.0))
        return fail(err, PROTO_E_MESSAGE, "comm_min_ratio must be in [0, 1]");
    *out = d;
    return 0;
}

/* export's "order": "storage" (the default), "start" or "rank"; nil is the default. */
static int decode_export_order(const msgpack_object *v, struct proto_request *req,
                               struct proto_error *err)
{
    if (v == NULL || v->type == MSGPACK_OBJECT_NIL || key_is(v, "storage"))
        return 0;
    if (key_is(v, "start"))
        req->by_start = true;
    else if (key_is(v, "rank"))
        req->by_rank = true;
    else
        return fail(err, PROTO_E_MESSAGE,
                    "export order must be \"storage\", \"start\" or \"rank\"");
    return 0;
}

/* classify: "comm", "compute", "memory" (regexes); none at all only rebuilds. */
static int decode_classify(const msgpack_object *args, struct proto_request *req,
                           struct proto_error *err)
{
    static const char *const keys[3] = {"comm", "compute", "memory"};
    char **slots[3] = {&req->re_comm, &req->re_compute, &req->re_memory};
    const msgpack_object *v;
    int rc;

    for (int i = 0; i < 3; i++) {
        if ((v = map_get(args, keys[i])) == NULL || v->type == MSGPACK_OBJECT_NIL)
            continue;
        if ((rc = get_str(v, 1, PROTO_MAX_NAME, slots[i], keys[i], err)) < 0)
            return rc;
    }
    return 0;
}

/* The report's analysis option and its filters (PROTOCOL.md Part 3, "report analysis" and
 * "report filters"). */
static int decode_analysis(const msgpack_object *args, struct proto_analysis *an,
                           struct proto_error *err)
{
    const msgpack_object *v;
    uint64_t u = 0;
    int rc;

    if ((v = map_get(args, "analysis")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return fail(err, PROTO_E_MESSAGE, "analysis must be a boolean");
        an->on = v->via.boolean;
    }
    if ((v = map_get(args, "ranks")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size == 0)
            return fail(err, PROTO_E_MESSAGE, "ranks must be a non-empty array of ranks");
        if (v->via.array.size > PROTO_MAX_RANK_FILTER)
            return fail(err, PROTO_E_TOO_LARGE, "ranks names over %d ranks", PROTO_MAX_RANK_FILTER);
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            if ((rc = get_uint(&v->via.array.ptr[i], INT32_MAX, &u, "a rank", err)) < 0)
                return rc;
            an->ranks[i] = (int64_t)u;
        }
        an->n_ranks = v->via.array.size;
    }
    if ((v = map_get(args, "steps")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2)
            return fail(err, PROTO_E_MESSAGE, "steps must be [first, last]");
        if ((rc = get_uint(&v->via.array.ptr[0], INT64_MAX, &an->step_min, "steps", err)) < 0 ||
            (rc = get_uint(&v->via.array.ptr[1], INT64_MAX, &an->step_max, "steps", err)) < 0)
            return rc;
        if (an->step_min > an->step_max)
            return fail(err, PROTO_E_MESSAGE, "steps: first is after last");
        an->steps = true;
    }
    if ((v = map_get(args, "device")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_str(v, 1, PROTO_MAX_NAME, &an->device, "device", err)) < 0)
        return rc;
    if ((v = map_get(args, "category")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_str(v, 1, 64, &an->category, "category", err)) < 0)
        return rc;
    return 0;
}

static int decode_request(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    struct proto_request *req = &m->u.req;
    const msgpack_object *args, *v;
    uint64_t u = 0;
    int rc;

    proto_request_init(req);
    if ((rc = arg_map(a, &args, err)) < 0)
        return rc;
    if (m->type == PROTO_SESSIONS || m->type == PROTO_STATUS)
        return 0;
    if ((rc = decode_sessref(map_get(args, "session"), &req->session, err)) < 0)
        return rc;
    if (m->type == PROTO_EXPORT)
        return decode_export_order(map_get(args, "order"), req, err);
    if (m->type == PROTO_CLASSIFY)
        return decode_classify(args, req, err);
    if (m->type != PROTO_REPORT)
        return 0;
    if ((v = map_get(args, "top")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = get_uint(v, 1000000, &u, "top", err)) < 0)
            return rc;
        req->top = (uint32_t)u;
    }
    if ((v = map_get(args, "comm_min_ratio")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_ratio(v, &req->comm_min_ratio, err)) < 0)
        return rc;
    if ((v = map_get(args, "mem_threshold")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_uint(v, INT64_MAX, &req->mem_threshold, "mem_threshold", err)) < 0)
        return rc;
    /* Extensions (PROTOCOL.md Part 3): a page of the ops rows. */
    if ((v = map_get(args, "ops_limit")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = get_uint(v, 1000000, &u, "ops_limit", err)) < 0)
            return rc;
        req->ops_limit = (uint32_t)u;
    }
    if ((v = map_get(args, "ops_offset")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = get_uint(v, UINT32_MAX, &u, "ops_offset", err)) < 0)
            return rc;
        req->ops_offset = (uint32_t)u;
    }
    /* Extension: only the late-arrival figures (PROTOCOL.md Part 3, "report option late"). */
    if ((v = map_get(args, "late")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return fail(err, PROTO_E_MESSAGE, "late must be a boolean");
        req->late = v->via.boolean;
    }
    return decode_analysis(args, &req->analysis, err);
}

/* ---- replies ------------------------------------------------------------- */

static int decode_welcome(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = arg_map(a, &args, err)) < 0)
        return rc;
    m->u.welcome.session_id = m->u.welcome.process_id = -1;
    if ((v = map_get(args, "session_id")) == NULL ||
        get_int(v, 0, INT64_MAX, &m->u.welcome.session_id, "welcome.session_id", err) < 0)
        return fail(err, PROTO_E_MESSAGE, "welcome needs session_id");
    if ((v = map_get(args, "process_id")) != NULL &&
        (rc = get_int(v, 0, INT64_MAX, &m->u.welcome.process_id, "welcome.process_id", err)) < 0)
        return rc;
    return 0;
}

static int decode_ack(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *v;
    int rc;

    if (a->via.array.size < 2 ||
        get_uint(&a->via.array.ptr[1], UINT64_MAX, &m->u.ack.seq, "ack seq", err) < 0)
        return fail(err, PROTO_E_MESSAGE, "ack needs a sequence number");
    if (a->via.array.size > 2 && a->via.array.ptr[2].type == MSGPACK_OBJECT_MAP &&
        (v = map_get(&a->via.array.ptr[2], "stored")) != NULL &&
        (rc = get_uint(v, UINT64_MAX, &m->u.ack.stored, "ack stored", err)) < 0)
        return rc;
    return 0;
}

static int decode_error(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = arg_map(a, &args, err)) < 0)
        return rc;
    if ((v = map_get(args, "code")) != NULL &&
        (rc = get_str(v, 0, PROTO_MAX_NAME, &m->u.error.code, "error.code", err)) < 0)
        return rc;
    if ((v = map_get(args, "message")) != NULL &&
        (rc = get_str(v, 0, PROTO_MAX_STR, &m->u.error.message, "error.message", err)) < 0)
        return rc;
    return 0;
}

static enum proto_type type_of(const msgpack_object *t)
{
    for (size_t i = 1; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (type_names[i] != NULL && key_is(t, type_names[i]))
            return (enum proto_type)i;
    return PROTO_NONE;
}

int proto_decode(const msgpack_object *o, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *t;
    int rc;

    memset(m, 0, sizeof(*m));
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
        return fail(err, PROTO_E_MESSAGE, "a message must be an array [type, ...]");
    t = &o->via.array.ptr[0];
    if (t->type != MSGPACK_OBJECT_STR)
        return fail(err, PROTO_E_MESSAGE, "a message type must be a string");
    m->type = type_of(t);
    switch (m->type) {
    case PROTO_HELLO:
        rc = decode_hello(o, &m->u.hello, err);
        break;
    case PROTO_OPS:
        rc = decode_ops(o, m, err);
        break;
    case PROTO_BATCH:
        rc = decode_batch(o, &m->u.batch, err);
        break;
    case PROTO_META:
        rc = o->via.array.size < 2
                 ? fail(err, PROTO_E_MESSAGE, "meta needs a map")
                 : decode_meta(&o->via.array.ptr[1], &m->u.meta.kv, &m->u.meta.n, err);
        break;
    case PROTO_FLUSH:
        rc = o->via.array.size < 2
                 ? fail(err, PROTO_E_MESSAGE, "flush needs a sequence number")
                 : get_uint(&o->via.array.ptr[1], UINT64_MAX, &m->u.flush_seq, "flush seq", err);
        break;
    case PROTO_BYE:
        rc = decode_bye(o, m, err);
        break;
    case PROTO_SESSIONS:
    case PROTO_REPORT:
    case PROTO_STATUS:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_CLASSIFY:
    case PROTO_LIVE:
        rc = decode_request(o, m, err);
        break;
    case PROTO_WELCOME:
        rc = decode_welcome(o, m, err);
        break;
    case PROTO_ACK:
        rc = decode_ack(o, m, err);
        break;
    case PROTO_ERROR:
        rc = decode_error(o, m, err);
        break;
    case PROTO_OK:
    case PROTO_ROWS:
    case PROTO_END:
        rc = 0; /* generic payloads: read them with proto_reader_next_object() */
        break;
    default:
        rc = fail(err, PROTO_E_TYPE, "unknown message type \"%.*s\"",
                  (int)(t->via.str.size > 64 ? 64 : t->via.str.size), t->via.str.ptr);
        break;
    }
    if (rc < 0)
        proto_msg_free(m);
    return rc;
}

struct scan_stop;
static size_t scan_bytes(struct proto_scan *sc, const uint8_t *p, size_t n, uint64_t max_msg,
                         const struct scan_stop *st);

/* A batch message, one pass over the bytes the scanner took whole (ready). */
static int decode_bytes_batch(const char *buf, size_t len, const struct proto_scan *sc,
                              struct proto_msg *m, struct proto_error *err)
{
    size_t used = 0;
    int rc;

    /* as msgpack_unpack_next() and the check after it below */
    if (sc->ready == 0)
        return fail(err, PROTO_E_MSGPACK, "the message is cut short");
    if (sc->ready > 1 || sc->msg_bytes > 0)
        return fail(err, PROTO_E_MESSAGE, "trailing bytes after the message");
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
        return fail(err, PROTO_E_TOO_LARGE, "message of %zu bytes is over the limit", len);
    struct proto_scan sc = {0};
    scan_bytes(&sc, (const uint8_t *)buf, len, PROTO_MAX_MSG, NULL);
    if (sc.error != NULL)
        return fail(err, sc.error, "%s", sc.message);
    if (!tree && sc.deep_msg != 1 && onepass_kind((const uint8_t *)buf, len) == ONEPASS_BATCH)
        return decode_bytes_batch(buf, len, &sc, m, err);
    msgpack_unpacked_init(&res);
    switch (msgpack_unpack_next(&res, buf, len, &off)) {
    case MSGPACK_UNPACK_SUCCESS:
        rc = off == len ? proto_decode(&res.data, m, err)
                        : fail(err, PROTO_E_MESSAGE, "trailing bytes after the message");
        break;
    case MSGPACK_UNPACK_CONTINUE:
        rc = fail(err, PROTO_E_MSGPACK, "the message is cut short");
        break;
    default:
        rc = fail(err, PROTO_E_MSGPACK, "bytes are not valid msgpack");
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
    switch (m->type) {
    case PROTO_HELLO:
        free(m->u.hello.session);
        free(m->u.hello.host);
        free(m->u.hello.device);
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

/* ---- reader -------------------------------------------------------------- */

int proto_reader_init(struct proto_reader *r, size_t max_msg)
{
    memset(r, 0, sizeof(*r));
    r->max_msg = max_msg ? max_msg : PROTO_MAX_MSG;
    if (!msgpack_unpacker_init(&r->unp, READ_CHUNK))
        return -ENOMEM;
    msgpack_unpacked_init(&r->res);
    return 0;
}

void proto_reader_deinit(struct proto_reader *r)
{
    if (r->inc != NULL) {
        onepass_inc_free(r->inc);
        free(r->inc);
    }
    msgpack_unpacked_destroy(&r->res);
    msgpack_unpacker_destroy(&r->unp);
}

void proto_reader_set_take(struct proto_reader *r, void (*take)(void *ctx, struct proto_batch *b),
                           void *ctx)
{
    r->take = take;
    r->take_ctx = ctx;
}

char *proto_reader_buffer(struct proto_reader *r, size_t want)
{
    size_t have = r->unp.used - r->unp.off, room = want;

    if (msgpack_unpacker_buffer_capacity(&r->unp) >= want)
        return msgpack_unpacker_buffer(&r->unp);
    /*
     * msgpack-c moves the bytes buffered into a new buffer when it lacks
     * room, then doubles that one read after read: a 200 KiB batch was
     * copied about twice over as it arrived. Room at once for the rest of a
     * message as large as the last batch (a peer's batches are alike).
     */
    if (r->last_batch > have && r->last_batch - have > room)
        room = r->last_batch - have;
    if (!msgpack_unpacker_reserve_buffer(&r->unp, room))
        return NULL;
    return msgpack_unpacker_buffer(&r->unp);
}

/* ---- the byte scanner ------------------------------------------------------ */

static void scan_fail(struct proto_scan *sc, const char *code, const char *msg)
{
    if (sc->error == NULL) {
        sc->error = code;
        snprintf(sc->message, sizeof(sc->message), "%s", msg);
    }
}

/* One element (a scalar, a whole str, an empty container) is complete. */
static void scan_element_done(struct proto_scan *sc)
{
    for (;;) {
        if (sc->depth == 0) {
            sc->msg_bytes = 0; /* a whole top-level message */
            sc->ready++;
            sc->seen++;
            return;
        }
        if (--sc->stack[sc->depth - 1] > 0)
            return;
        sc->depth--; /* the container is complete: it is an element of its parent */
    }
}

static void scan_container(struct proto_scan *sc, uint64_t n, uint64_t max_msg)
{
    if (n == 0) {
        if (sc->depth == PROTO_SCAN_DEPTH && sc->deep_msg == 0)
            sc->deep_msg = sc->seen + 1; /* msgpack-c's stack is full even for an empty one */
        scan_element_done(sc);
        return;
    }
    /* every element not yet started (these n, and those pending in the containers
     * around) takes at least one byte of the rest of the message */
    uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
    if (n > room || sc->pending > room - n) {
        scan_fail(sc, PROTO_E_TOO_LARGE,
                  "a container announces more elements than a message can hold");
        return;
    }
    if (sc->depth == PROTO_SCAN_DEPTH) {
        scan_fail(sc, PROTO_E_MESSAGE, "nesting deeper than the protocol allows");
        return;
    }
    sc->stack[sc->depth++] = (uint32_t)n;
    sc->pending += n;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A complete header in sc->head (its first byte the type). */
static void scan_header(struct proto_scan *sc, uint64_t max_msg)
{
    uint8_t t = sc->head[0];
    uint64_t len = sc->head_len > 1 ? be(sc->head + 1, sc->head_len - 1) : 0;

    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3 || (t >= 0xca && t <= 0xd3))
        scan_element_done(sc); /* ints, floats, nil, bool: the header is the value */
    else if ((t & 0xf0) == 0x80)
        scan_container(sc, 2u * (t & 0x0f), max_msg);
    else if ((t & 0xf0) == 0x90)
        scan_container(sc, t & 0x0f, max_msg);
    else if (t == 0xdc || t == 0xdd)
        scan_container(sc, len, max_msg);
    else if (t == 0xde || t == 0xdf)
        scan_container(sc, 2 * len, max_msg);
    else if ((t & 0xe0) == 0xa0)
        sc->skip = t & 0x1f;
    else if (t == 0xd9 || t == 0xda || t == 0xdb || t == 0xc4 || t == 0xc5 || t == 0xc6)
        sc->skip = len;
    else if (t == 0xc7 || t == 0xc8 || t == 0xc9) /* ext: length, then a type byte */
        sc->skip = len >> 8;         /* the header's last byte is the ext type, not length */
    else if (t >= 0xd4 && t <= 0xd8) /* fixext: a type byte and 1..16 bytes */
        sc->skip = 1u << (t - 0xd4);
    else
        scan_fail(sc, PROTO_E_MSGPACK, "bytes are not valid msgpack");
    /* the body, then at least a byte for each element not yet started */
    uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
    if (sc->skip > room || sc->pending > room - sc->skip)
        scan_fail(sc, PROTO_E_TOO_LARGE, "a string announces more bytes than a message can hold");
    if (sc->skip == 0 &&
        ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb) || (t >= 0xc4 && t <= 0xc9)))
        scan_element_done(sc); /* an empty body */
}

/* Bytes after a type byte: the size of its header (0: the byte is the header). */
static int scan_head_need(uint8_t t)
{
    static const int8_t extra[32] = {
        /* c0 */ 0, -1, 0, 0, 1, 2, 4, 2, 3, 5, 4, 8, 1, 2, 4, 8,
        /* d0 */ 1, 2,  4, 8, 1, 1, 1, 1, 1, 1, 2, 4, 2, 4, 2, 4,
    };

    if (t < 0xc0 || t >= 0xe0)
        return 0;
    return extra[t - 0xc0];
}

/* The size of a scalar's whole encoding (an int, a float, nil, a bool), or 0: not a scalar. */
static inline int scan_scalar(uint8_t t)
{
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 1;
    if (t >= 0xca && t <= 0xd3)
        return 1 + scan_head_need(t);
    return 0;
}

/*
 * Where a scan stops before the end of the bytes (and an error): once a
 * message is whole (ready), or once the element that the container at depth
 * `level` counts down from `count` is whole (level > 0).
 */
struct scan_stop {
    bool ready;
    int level;
    uint32_t count;
};

static inline bool scan_stopped(const struct proto_scan *sc, const struct scan_stop *st)
{
    if (st == NULL)
        return false;
    if (st->ready && sc->ready > 0)
        return true;
    return st->level > 0 && (sc->depth < st->level ||
                             (sc->depth == st->level && sc->stack[st->level - 1] < st->count));
}

/*
 * The common case of a batch, in a tight loop: scalars and fixarray headers
 * whose whole encoding is in p[0..end), inside a message. Does for each what
 * the general path below does (scan_header()'s checks, in its order); stops
 * at anything else (strings, maps, wider headers, a header cut by the end of
 * the bytes, the end of the message) and returns where.
 */
static const uint8_t *scan_fast(struct proto_scan *sc, const uint8_t *p, const uint8_t *end,
                                uint64_t max_msg, const struct scan_stop *st)
{
    while (p < end && sc->depth > 0 && sc->error == NULL && !scan_stopped(sc, st)) {
        uint8_t t = *p;
        int k = scan_scalar(t);

        if (k > 0 && end - p >= k) {
            p += k, sc->msg_bytes += (uint64_t)k, sc->pending--;
            scan_element_done(sc);
        } else if (t >= 0x90 && t <= 0x9f) {
            p++, sc->msg_bytes++, sc->pending--;
            scan_container(sc, t & 0x0f, max_msg);
        } else {
            break;
        }
        uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
        if (sc->pending > room)
            scan_fail(sc, PROTO_E_TOO_LARGE,
                      "a string announces more bytes than a message can hold");
    }
    return p;
}

/* Scans p[0..n) on from sc's state, up to where st says (NULL: all). Returns the bytes read. */
static size_t scan_bytes(struct proto_scan *sc, const uint8_t *p, size_t n, uint64_t max_msg,
                         const struct scan_stop *st)
{
    const uint8_t *start = p, *end = p + n;

    while (p < end && sc->error == NULL && !scan_stopped(sc, st)) {
        if (sc->skip == 0 && sc->head_need == 0 && sc->depth > 0) {
            p = scan_fast(sc, p, end, max_msg, st);
            if (p == end || sc->error != NULL || scan_stopped(sc, st))
                break;
        }
        if (sc->skip > 0) {
            uint64_t k = sc->skip < (uint64_t)(end - p) ? sc->skip : (uint64_t)(end - p);
            p += k, sc->skip -= k, sc->msg_bytes += k;
            if (sc->skip == 0)
                scan_element_done(sc);
            continue;
        }
        if (sc->head_need == 0) {
            int need = scan_head_need(*p);
            if (sc->depth > 0)
                sc->pending--; /* an announced element starts */
            if (need < 0) {
                scan_fail(sc, PROTO_E_MSGPACK, "bytes are not valid msgpack");
                break;
            }
            sc->head[0] = *p;
            sc->head_len = 1;
            sc->head_need = need + 1;
        } else {
            sc->head[sc->head_len++] = *p;
        }
        p++, sc->msg_bytes++;
        if (sc->head_len == sc->head_need) {
            sc->head_need = 0;
            scan_header(sc, max_msg);
        }
    }
    return (size_t)(p - start);
}

void proto_reader_commit(struct proto_reader *r, size_t n)
{
    /* The new bytes are the last n of the buffer: scanned (or decoded) when asked for. */
    msgpack_unpacker_buffer_consumed(&r->unp, n);
    r->unscanned += n;
}

static const struct scan_stop stop_ready = {true, 0, 0};

/* The scanner reads the bytes no one saw yet, up to where st says. */
static void reader_scan(struct proto_reader *r, const struct scan_stop *st)
{
    const uint8_t *p = (const uint8_t *)r->unp.buffer + r->unp.used - r->unscanned;

    r->unscanned -= scan_bytes(&r->scan, p, r->unscanned, r->max_msg, st);
}

static int reader_scan_fail(struct proto_reader *r, struct proto_error *err)
{
    return fail(err, r->scan.error, "%s", r->scan.message);
}

/* No whole message yet: 0, or an error when the bytes buffered are over the limit already. */
static int reader_more(struct proto_reader *r, struct proto_error *err)
{
    if (msgpack_unpacker_message_size(&r->unp) > r->max_msg)
        return fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit", r->max_msg);
    return 0;
}

int proto_reader_next_object(struct proto_reader *r, const msgpack_object **obj,
                             struct proto_error *err)
{
    /* parsed + (off delta) is the size of the message just completed. */
    size_t before = r->unp.parsed, off0 = r->unp.off, size;

    /* the scanner sees the bytes first, up to the end of the message */
    if (r->scan.error == NULL)
        reader_scan(r, &stop_ready);
    if (r->scan.error != NULL)
        return reader_scan_fail(r, err);

    switch (msgpack_unpacker_next(&r->unp, &r->res)) {
    case MSGPACK_UNPACK_SUCCESS:
        r->scan.ready--; /* the scanner saw it end too */
        r->taken++;
        size = before + (r->unp.off - off0);
        if (size > r->max_msg)
            return fail(err, PROTO_E_TOO_LARGE, "a message of %zu bytes is over the %zu-byte limit",
                        size, r->max_msg);
        *obj = &r->res.data;
        return 1;
    case MSGPACK_UNPACK_CONTINUE:
        /* Bound the message as bytes arrive: msgpack-c would grow its buffer forever. */
        if (msgpack_unpacker_message_size(&r->unp) > r->max_msg)
            return fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit", r->max_msg);
        return 0;
    case MSGPACK_UNPACK_NOMEM_ERROR:
        return fail(err, PROTO_E_TOO_LARGE, "a message announces more elements than allowed");
    default:
        return fail(err, PROTO_E_MSGPACK, "bytes are not valid msgpack");
    }
}

/*
 * A batch at the front of the buffer: decoded in one pass from the bytes once
 * the scanner has seen the whole message, and stepped over in the unpacker's
 * buffer (whose parser has not started on it: parsed is 0). The same returns
 * and the same checks, in the same order, as the object-tree path.
 */
static int reader_next_batch(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const uint8_t *p = (const uint8_t *)r->unp.buffer + r->unp.off;
    size_t n = r->unp.used - r->unp.off, size = 0;
    int rc;

    memset(m, 0, sizeof(*m));
    if (r->scan.ready == 0) {
        if (n > r->max_msg)
            return fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit", r->max_msg);
        return 0;
    }
    rc = onepass_batch(p, n, &m->u.batch, &size, err);
    /* Only a message that has more bytes buffered than the limit can be over it. */
    if (rc < 0 && n > r->max_msg)
        size = onepass_skip(p, n);
    if (size > r->max_msg) {
        proto_batch_free(&m->u.batch);
        return fail(err, PROTO_E_TOO_LARGE, "a message of %zu bytes is over the %zu-byte limit",
                    size, r->max_msg);
    }
    if (rc < 0)
        return rc;
    m->type = PROTO_BATCH;
    r->unp.off += size; /* msgpack-c's parser resumes after it */
    r->last_batch = size;
    r->scan.ready--;
    r->taken++;
    return 1;
}

/* ---- a batch decoded as it arrives ------------------------------------------ */

/*
 * The batch at the front of the buffer is decoded entry by entry as its
 * bytes arrive, and the scanner steps over what the decoder took (the
 * decoder makes the scanner's checks on them: see onepass_inc_step), so the
 * bytes of a batch are read once. inc_mode says who is at the message:
 */
enum {
    INC_NONE, /* no batch under way (scanner and msgpack-c, or onepass_batch() whole) */
    INC_FAST, /* the decoder is at entry inc->b.n; the scanner's state is behind */
    INC_TAIL, /* the scanner reads entry inc->b.n (not whole when the decoder met it) */
    INC_SCAN, /* the scanner reads the message to its end, then the decoder finishes it */
};

static const uint8_t *reader_front(const struct proto_reader *r)
{
    return (const uint8_t *)r->unp.buffer + r->unp.off;
}

static size_t reader_avail(const struct proto_reader *r)
{
    return r->unp.used - r->unp.off;
}

/*
 * The scanner's state at the start of entry inc->b.n (after the list when
 * every entry is decoded), as if it had read every byte of the message before:
 * the decoder took them whole, with the scanner's checks.
 */
static void reader_scan_at_entry(struct proto_reader *r)
{
    const struct onepass_inc *s = r->inc;
    struct proto_scan *sc = &r->scan;
    uint64_t left = s->n - s->b.n; /* entries not started */

    sc->msg_bytes = s->pos;
    if (left > 0) {
        sc->depth = 2;
        sc->stack[0] = s->top_n - 1; /* "batch" is whole, the list is under way */
        sc->stack[1] = (uint32_t)left;
    } else {
        sc->depth = 1;
        sc->stack[0] = s->top_n - 2;
    }
    sc->pending = left + (s->top_n - 2);
    sc->skip = 0;
    sc->head_len = sc->head_need = 0;
    r->unscanned = reader_avail(r) - s->pos;
}

/* The batch is whole and decoded: moves it to *m and steps over it. */
static int reader_inc_take(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    size_t avail = reader_avail(r), len = 0;
    int rc;

    r->inc_mode = INC_NONE;
    if ((rc = onepass_inc_finish(r->inc, reader_front(r), avail, &m->u.batch, &len, err)) < 0)
        return rc;
    if (len > r->max_msg) { /* the scanner's bounds make it impossible: checked all the same */
        proto_batch_free(&m->u.batch);
        return fail(err, PROTO_E_TOO_LARGE, "a message of %zu bytes is over the %zu-byte limit",
                    len, r->max_msg);
    }
    m->type = PROTO_BATCH;
    r->unp.off += len; /* msgpack-c's parser resumes after it */
    r->last_batch = len;
    if (r->scan.ready > 0) {
        r->scan.ready--; /* the scanner read it to its end */
    } else {
        /* the decoder read it to its end: the scanner is at the next message */
        r->scan.msg_bytes = r->scan.pending = r->scan.skip = 0;
        r->scan.depth = r->scan.head_len = r->scan.head_need = 0;
        r->scan.seen++;
        r->unscanned = avail - len;
    }
    r->taken++;
    return 1;
}

/*
 * A batch starts at the front of the buffer and no byte of it was read: the
 * scanner reads its header, then the decoder takes over. Returns 1 (INC_FAST
 * from now), 0 (bytes are missing, or nothing for this path: *path 0) or a
 * negative errno.
 */
static int reader_inc_start(struct proto_reader *r, bool *path, struct proto_error *err)
{
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r);
    int hl = 0;

    *path = false;
    switch (onepass_kind(p, avail)) {
    case ONEPASS_BATCH:
        if (r->inc == NULL && (r->inc = calloc(1, sizeof(*r->inc))) == NULL)
            return 0; /* the whole-message path needs none */
        if ((hl = onepass_inc_begin(r->inc, p, avail)) < 0)
            return 0;
        break;
    case ONEPASS_MORE:
        break;
    default:
        return 0;
    }
    *path = true;
    if (hl == 0) {
        /* the first few bytes of a batch: what the scanner says of them, without keeping it */
        struct proto_scan save = r->scan;
        size_t k = scan_bytes(&r->scan, p, avail, r->max_msg, &stop_ready);
        if (r->scan.error != NULL)
            return reader_scan_fail(r, err);
        if (r->scan.ready > 0) { /* whole after all: the usual path takes it (cannot happen) */
            r->unscanned -= k;
            *path = false;
            return 0;
        }
        r->scan = save;
        return reader_more(r, err);
    }
    r->unscanned -= scan_bytes(&r->scan, p, (size_t)hl, r->max_msg, NULL);
    if (r->scan.error != NULL)
        return reader_scan_fail(r, err);
    if (r->take != NULL && r->inc->b.entries == NULL && r->inc->b.blob == NULL) {
        struct proto_batch *b = &r->inc->b;

        b->cap = r->inc->last_n; /* what the last batch needed: a hint */
        b->blob_cap = r->inc->last_blob;
        r->take(r->take_ctx, b);
        if (b->entries == NULL)
            b->cap = 0;
        if (b->blob == NULL)
            b->blob_cap = 0;
    }
    r->inc_mode = INC_FAST;
    return 1;
}

static int reader_tree_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err);

/*
 * The scanner saw the batch under way fill msgpack-c's stack (deep_msg):
 * msgpack-c refuses it as soon as it reads that far, whole or not, so it
 * goes to the object tree at once, for the words every such message gets.
 */
static bool reader_inc_deep(const struct proto_reader *r)
{
    return r->scan.deep_msg == r->taken + 1;
}

static int reader_inc_to_tree(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    onepass_inc_free(r->inc);
    r->inc_mode = INC_NONE;
    return reader_tree_next(r, m, err);
}

/* The batch under way (inc_mode not INC_NONE), as far as the bytes go. proto_reader_next's returns.
 */
static int reader_inc_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    struct onepass_inc *s = r->inc;
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r), whole = SIZE_MAX, stopped = SIZE_MAX;
    int rc;

    for (;;) {
        if (r->inc_mode == INC_TAIL) {
            struct scan_stop st = {false, 2, (uint32_t)(s->n - s->b.n)};
            reader_scan(r, &st);
            if (r->scan.error != NULL)
                return reader_scan_fail(r, err);
            if (reader_inc_deep(r))
                return reader_inc_to_tree(r, m, err);
            if (!scan_stopped(&r->scan, &st))
                return reader_more(r, err);
            /* the entry is whole: wrong when the decoder stopped at it with these bytes */
            whole = s->b.n;
            r->inc_mode = whole == stopped ? INC_SCAN : INC_FAST;
        }
        if (r->inc_mode == INC_FAST) {
            if (onepass_inc_step(s, p, avail, r->max_msg, true, NULL) == ONEPASS_DONE) {
                if (s->top_n == 2)
                    return reader_inc_take(r, m, err);
                reader_scan_at_entry(r); /* elements after the list: the scanner reads them */
                r->inc_mode = INC_SCAN;
            } else if (s->b.n == whole) {
                r->inc_mode = INC_SCAN; /* the scanner is past that entry already */
            } else {
                reader_scan_at_entry(r);
                stopped = s->b.n;
                r->inc_mode = INC_TAIL;
                continue;
            }
        }
        /* INC_SCAN: the scanner reads to the message's end, then the decoder finishes */
        reader_scan(r, &stop_ready);
        if (r->scan.error != NULL)
            return reader_scan_fail(r, err);
        if (reader_inc_deep(r))
            return reader_inc_to_tree(r, m, err);
        if (r->scan.ready == 0)
            return reader_more(r, err);
        if ((rc = onepass_inc_step(s, p, avail, r->max_msg, false, err)) < 0) {
            onepass_inc_free(s);
            r->inc_mode = INC_NONE;
            return rc;
        }
        return reader_inc_take(r, m, err);
    }
}

/* A message through msgpack-c's object tree. */
static int reader_tree_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *o = NULL;
    int rc = proto_reader_next_object(r, &o, err);

    if (rc <= 0)
        return rc;
    rc = proto_decode(o, m, err);
    rc = rc < 0 ? rc : 1;
    /* Release the zone now: the message was copied into owned memory. */
    msgpack_unpacked_destroy(&r->res);
    msgpack_unpacked_init(&r->res);
    return rc;
}

int proto_reader_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const struct proto_scan *sc = &r->scan;
    bool path;
    int rc;

    memset(m, 0, sizeof(*m));
    if (sc->error != NULL)
        return reader_scan_fail(r, err);
    if (r->inc_mode != INC_NONE)
        return reader_inc_next(r, m, err);
    /* a message starts at the front, and no byte of it was read */
    if (!r->tree && r->unp.parsed == 0 && sc->ready == 0 && sc->depth == 0 && sc->head_need == 0 &&
        sc->skip == 0 && r->unscanned == reader_avail(r) && r->unscanned > 0) {
        rc = reader_inc_start(r, &path, err);
        if (rc == 1)
            return reader_inc_next(r, m, err);
        if (path || rc < 0)
            return rc;
    }
    /* every other message: the scanner reads it to its end first */
    reader_scan(r, &stop_ready);
    if (sc->error == NULL && !r->tree && r->unp.parsed == 0 && sc->deep_msg != r->taken + 1) {
        switch (onepass_kind(reader_front(r), reader_avail(r))) {
        case ONEPASS_BATCH:
            return reader_next_batch(r, m, err);
        case ONEPASS_MORE:
            /* A few bytes that may start a batch: msgpack-c may not start on them. */
            return reader_more(r, err);
        default:
            break;
        }
    }
    return reader_tree_next(r, m, err);
}

/* ---- writing ------------------------------------------------------------- */

int proto_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    if (msgpack_pack_str(pk, n) < 0 || msgpack_pack_str_body(pk, s, n) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_shape(msgpack_packer *pk, const uint64_t *dims, size_t n)
{
    if (msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (msgpack_pack_uint64(pk, dims[i]) < 0)
            return -ENOMEM;
    return 0;
}

static int pack_head(msgpack_packer *pk, size_t n, enum proto_type t)
{
    if (msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    return proto_pack_str(pk, proto_type_name(t));
}

static int pack_kv(msgpack_packer *pk, const struct proto_kv *kv)
{
    int rc = proto_pack_str(pk, kv->key);

    if (rc < 0)
        return rc;
    switch (kv->type) {
    case PROTO_V_BOOL:
        return (kv->v.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) < 0 ? -ENOMEM : 0;
    case PROTO_V_INT:
        return msgpack_pack_int64(pk, kv->v.i) < 0 ? -ENOMEM : 0;
    case PROTO_V_FLOAT:
        return msgpack_pack_double(pk, kv->v.f) < 0 ? -ENOMEM : 0;
    case PROTO_V_STR:
        return proto_pack_str(pk, kv->v.s);
    default:
        return msgpack_pack_nil(pk) < 0 ? -ENOMEM : 0;
    }
}

static int pack_kvs(msgpack_packer *pk, const struct proto_kv *kv, size_t n)
{
    if (msgpack_pack_map(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (pack_kv(pk, &kv[i]) < 0)
            return -ENOMEM;
    return 0;
}

static int pack_key_int(msgpack_packer *pk, const char *key, int64_t v)
{
    if (proto_pack_str(pk, key) < 0 || msgpack_pack_int64(pk, v) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_key_str(msgpack_packer *pk, const char *key, const char *v)
{
    if (proto_pack_str(pk, key) < 0 || proto_pack_str(pk, v) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_hello(msgpack_packer *pk, const struct proto_hello *h)
{
    size_t n = 2 + (h->rank >= 0) + (h->world >= 0) + (h->pid >= 0) + (h->host != NULL) +
               (h->device != NULL) + (h->n_meta > 0);

    if (pack_head(pk, 2, PROTO_HELLO) < 0 || msgpack_pack_map(pk, n) < 0 ||
        pack_key_int(pk, "proto", h->proto ? h->proto : PROTO_VERSION) < 0 ||
        pack_key_str(pk, "session", h->session) < 0)
        return -ENOMEM;
    if ((h->rank >= 0 && pack_key_int(pk, "rank", h->rank) < 0) ||
        (h->world >= 0 && pack_key_int(pk, "world", h->world) < 0) ||
        (h->pid >= 0 && pack_key_int(pk, "pid", h->pid) < 0) ||
        (h->host != NULL && pack_key_str(pk, "host", h->host) < 0) ||
        (h->device != NULL && pack_key_str(pk, "device", h->device) < 0))
        return -ENOMEM;
    if (h->n_meta > 0 && (proto_pack_str(pk, "meta") < 0 || pack_kvs(pk, h->meta, h->n_meta) < 0))
        return -ENOMEM;
    return 0;
}

int proto_pack_ops(msgpack_packer *pk, const struct proto_opdef *defs, size_t n)
{
    if (pack_head(pk, 2, PROTO_OPS) < 0 || msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (msgpack_pack_array(pk, defs[i].category ? 3 : 2) < 0 ||
            msgpack_pack_uint32(pk, defs[i].id) < 0 || proto_pack_str(pk, defs[i].name) < 0 ||
            (defs[i].category && proto_pack_str(pk, defs[i].category) < 0))
            return -ENOMEM;
    }
    return 0;
}

int proto_pack_batch_header(msgpack_packer *pk, size_t n)
{
    if (pack_head(pk, 2, PROTO_BATCH) < 0 || msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_raw(msgpack_packer *pk, const char *blob, uint32_t off, uint32_t len)
{
    if (len == 0)
        return msgpack_pack_nil(pk);
    return pk->callback(pk->data, blob + off, len);
}

int proto_pack_ext(msgpack_packer *pk, const struct proto_ext *ext)
{
    struct proto_ext x = *ext; /* proto_ext_slot() hands out writable slots */
    size_t n = 0;

    for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++)
        n += (ext->has & proto_ext_keys[k].bit) != 0;
    if (msgpack_pack_map(pk, n) < 0)
        return -ENOMEM;
    for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++) {
        uint32_t bit = proto_ext_keys[k].bit;
        if ((ext->has & bit) == 0)
            continue;
        if (proto_pack_str(pk, proto_ext_keys[k].key) < 0)
            return -ENOMEM;
        if (bit == PROTO_EXT_TAG        ? msgpack_pack_int64(pk, x.tag) < 0
            : bit == PROTO_EXT_LAUNCHER ? msgpack_pack_uint32(pk, x.launcher) < 0
                                        : msgpack_pack_uint64(pk, *proto_ext_slot(&x, bit)) < 0)
            return -ENOMEM;
    }
    return 0;
}

int proto_pack_entry(msgpack_packer *pk, const struct proto_entry *e, const char *blob)
{
    struct proto_ext ext;
    bool has_ext = proto_entry_ext(e, blob, &ext);

    if (msgpack_pack_array(pk, has_ext      ? 10
                               : e->dev_len ? 9
                                            : 8) < 0 ||
        msgpack_pack_uint64(pk, e->step) < 0 || msgpack_pack_uint32(pk, e->op_id) < 0 ||
        msgpack_pack_uint64(pk, e->start_ns) < 0 || msgpack_pack_uint64(pk, e->dur_ns) < 0 ||
        msgpack_pack_uint64(pk, e->elements) < 0 || msgpack_pack_uint64(pk, e->mem_bytes) < 0 ||
        pack_raw(pk, blob, e->out_off, e->out_len) < 0 ||
        pack_raw(pk, blob, e->in_off, e->in_len) < 0)
        return -ENOMEM;
    if (e->dev_len ? msgpack_pack_str(pk, e->dev_len) < 0 ||
                         msgpack_pack_str_body(pk, blob + e->dev_off, e->dev_len) < 0
                   : has_ext && msgpack_pack_nil(pk) < 0)
        return -ENOMEM;
    if (has_ext && proto_pack_ext(pk, &ext) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_batch(msgpack_packer *pk, const struct proto_batch *b)
{
    if (proto_pack_batch_header(pk, b->n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++)
        if (proto_pack_entry(pk, &b->entries[i], b->blob) < 0)
            return -ENOMEM;
    return 0;
}

int proto_pack_meta(msgpack_packer *pk, const struct proto_kv *kv, size_t n)
{
    if (pack_head(pk, 2, PROTO_META) < 0 || pack_kvs(pk, kv, n) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_flush(msgpack_packer *pk, uint64_t seq)
{
    if (pack_head(pk, 2, PROTO_FLUSH) < 0 || msgpack_pack_uint64(pk, seq) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_bye(msgpack_packer *pk, uint64_t dropped)
{
    if (pack_head(pk, 2, PROTO_BYE) < 0 || msgpack_pack_map(pk, 1) < 0 ||
        proto_pack_str(pk, "dropped") < 0 || msgpack_pack_uint64(pk, dropped) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_welcome(msgpack_packer *pk, int64_t session_id, int64_t process_id)
{
    if (pack_head(pk, 2, PROTO_WELCOME) < 0 || msgpack_pack_map(pk, 2) < 0 ||
        pack_key_int(pk, "session_id", session_id) < 0 ||
        pack_key_int(pk, "process_id", process_id) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_ack(msgpack_packer *pk, uint64_t seq, uint64_t stored)
{
    if (pack_head(pk, 3, PROTO_ACK) < 0 || msgpack_pack_uint64(pk, seq) < 0 ||
        msgpack_pack_map(pk, 1) < 0 || proto_pack_str(pk, "stored") < 0 ||
        msgpack_pack_uint64(pk, stored) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_error(msgpack_packer *pk, const char *code, const char *message)
{
    if (pack_head(pk, 2, PROTO_ERROR) < 0 || msgpack_pack_map(pk, 2) < 0 ||
        pack_key_str(pk, "code", code) < 0 || pack_key_str(pk, "message", message) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_sessref(msgpack_packer *pk, const struct proto_sessref *s)
{
    if (proto_pack_str(pk, "session") < 0)
        return -ENOMEM;
    if (s->name != NULL)
        return proto_pack_str(pk, s->name);
    return msgpack_pack_int64(pk, s->id) < 0 ? -ENOMEM : 0;
}

static size_t pack_analysis_keys(const struct proto_request *req)
{
    const struct proto_analysis *an = &req->analysis;

    return an->on + (an->n_ranks > 0) + an->steps + (an->device != NULL) + (an->category != NULL);
}

static int pack_analysis(msgpack_packer *pk, const struct proto_analysis *an)
{
    if (an->on && (proto_pack_str(pk, "analysis") < 0 || msgpack_pack_true(pk) < 0))
        return -ENOMEM;
    if (an->n_ranks > 0) {
        if (proto_pack_str(pk, "ranks") < 0 || msgpack_pack_array(pk, an->n_ranks) < 0)
            return -ENOMEM;
        for (uint32_t i = 0; i < an->n_ranks; i++)
            if (msgpack_pack_int64(pk, an->ranks[i]) < 0)
                return -ENOMEM;
    }
    if (an->steps &&
        (proto_pack_str(pk, "steps") < 0 || msgpack_pack_array(pk, 2) < 0 ||
         msgpack_pack_uint64(pk, an->step_min) < 0 || msgpack_pack_uint64(pk, an->step_max) < 0))
        return -ENOMEM;
    if (an->device != NULL &&
        (proto_pack_str(pk, "device") < 0 || proto_pack_str(pk, an->device) < 0))
        return -ENOMEM;
    if (an->category != NULL &&
        (proto_pack_str(pk, "category") < 0 || proto_pack_str(pk, an->category) < 0))
        return -ENOMEM;
    return 0;
}

int proto_pack_request(msgpack_packer *pk, enum proto_type type, const struct proto_request *req)
{
    if (pack_head(pk, 2, type) < 0)
        return -ENOMEM;
    switch (type) {
    case PROTO_REPORT:
        if (msgpack_pack_map(pk, 4 + (req->ops_limit > 0 ? 2 : 0) + req->late +
                                     pack_analysis_keys(req)) < 0 ||
            pack_analysis(pk, &req->analysis) < 0 ||
            (req->late && (proto_pack_str(pk, "late") < 0 || msgpack_pack_true(pk) < 0)))
            return -ENOMEM;
        if (req->ops_limit > 0 &&
            (proto_pack_str(pk, "ops_limit") < 0 || msgpack_pack_uint32(pk, req->ops_limit) < 0 ||
             proto_pack_str(pk, "ops_offset") < 0 || msgpack_pack_uint32(pk, req->ops_offset) < 0))
            return -ENOMEM;
        if (pack_sessref(pk, &req->session) < 0 || proto_pack_str(pk, "top") < 0 ||
            msgpack_pack_uint32(pk, req->top) < 0 || proto_pack_str(pk, "comm_min_ratio") < 0 ||
            msgpack_pack_double(pk, req->comm_min_ratio) < 0 ||
            proto_pack_str(pk, "mem_threshold") < 0 ||
            msgpack_pack_uint64(pk, req->mem_threshold) < 0)
            return -ENOMEM;
        return 0;
    case PROTO_DELETE:
    case PROTO_LIVE:
        if (msgpack_pack_map(pk, 1) < 0 || pack_sessref(pk, &req->session) < 0)
            return -ENOMEM;
        return 0;
    case PROTO_CLASSIFY:
        if (msgpack_pack_map(pk, 1 + (req->re_comm != NULL) + (req->re_compute != NULL) +
                                     (req->re_memory != NULL)) < 0 ||
            pack_sessref(pk, &req->session) < 0 ||
            (req->re_comm != NULL &&
             (proto_pack_str(pk, "comm") < 0 || proto_pack_str(pk, req->re_comm) < 0)) ||
            (req->re_compute != NULL &&
             (proto_pack_str(pk, "compute") < 0 || proto_pack_str(pk, req->re_compute) < 0)) ||
            (req->re_memory != NULL &&
             (proto_pack_str(pk, "memory") < 0 || proto_pack_str(pk, req->re_memory) < 0)))
            return -ENOMEM;
        return 0;
    case PROTO_EXPORT:
        if (msgpack_pack_map(pk, req->by_start || req->by_rank ? 2 : 1) < 0 ||
            pack_sessref(pk, &req->session) < 0 ||
            ((req->by_start || req->by_rank) &&
             (proto_pack_str(pk, "order") < 0 ||
              proto_pack_str(pk, req->by_rank ? "rank" : "start") < 0)))
            return -ENOMEM;
        return 0;
    default:
        return msgpack_pack_map(pk, 0) < 0 ? -ENOMEM : 0;
    }
}

int proto_pack_ok_header(msgpack_packer *pk)
{
    return pack_head(pk, 2, PROTO_OK);
}
