/*
 * proto_field.c — the checks every object-tree decoder makes on one field
 * (an unsigned, a signed, a string, a map, a metadata map) and the error
 * they fill in: one copy of each rule, with the wire code it fails with.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_field.h"

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
int proto_fail(struct proto_error *err, const char *code, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = proto_vfail(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- field helpers ------------------------------------------------------ */

bool proto_field_key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);

    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, name, n) == 0;
}

int proto_field_uint(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                     struct proto_error *err)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must not be negative", what);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be an unsigned integer", what);
    if (o->via.u64 > max)
        return proto_fail(err, PROTO_E_MESSAGE, "%s is out of range (max %llu)", what,
                          (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

int proto_field_str(const msgpack_object *o, size_t min, size_t max, char **out, const char *what,
                    struct proto_error *err)
{
    char *s;

    if (o->type != MSGPACK_OBJECT_STR)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be a string", what);
    if (o->via.str.size < min)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must not be empty", what);
    if (o->via.str.size > max)
        return proto_fail(err, PROTO_E_TOO_LARGE, "%s is %u bytes, over the limit of %zu", what,
                          o->via.str.size, max);
    if (!proto_utf8_valid(o->via.str.ptr, o->via.str.size))
        return proto_fail(err, PROTO_E_MESSAGE, "%s is not valid UTF-8 (or contains NUL)", what);
    s = malloc(o->via.str.size + 1);
    if (s == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    if (o->via.str.size > 0)
        memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    *out = s;
    return 0;
}

int proto_field_map(const msgpack_object *o, const char *what, struct proto_error *err)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be a map", what);
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (o->via.map.ptr[i].key.type != MSGPACK_OBJECT_STR)
            return proto_fail(err, PROTO_E_MESSAGE, "%s has a key that is not a string", what);
    return 0;
}

int proto_field_int(const msgpack_object *o, int64_t min, int64_t max, int64_t *out,
                    const char *what, struct proto_error *err)
{
    int64_t v;

    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return proto_fail(err, PROTO_E_MESSAGE, "%s is out of range", what);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return proto_fail(err, PROTO_E_MESSAGE, "%s must be an integer", what);
    }
    if (v < min || v > max)
        return proto_fail(err, PROTO_E_MESSAGE, "%s is out of range [%lld, %lld]", what,
                          (long long)min, (long long)max);
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
        return proto_field_int(o, INT64_MIN, INT64_MAX, &kv->v.i, "a metadata integer", err);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        kv->type = PROTO_V_FLOAT;
        kv->v.f = o->via.f64;
        return 0;
    case MSGPACK_OBJECT_STR:
        kv->type = PROTO_V_STR;
        return proto_field_str(o, 0, PROTO_MAX_NAME, &kv->v.s, "a metadata value", err);
    default:
        return proto_fail(err, PROTO_E_MESSAGE,
                          "a metadata value must be a string, integer, float or bool");
    }
}

int proto_field_meta(const msgpack_object *o, struct proto_kv **out, size_t *n_out,
                     struct proto_error *err)
{
    struct proto_kv *kv;
    uint32_t n;
    int rc;

    if ((rc = proto_field_map(o, "meta", err)) < 0)
        return rc;
    n = o->via.map.size;
    if (n > PROTO_MAX_META)
        return proto_fail(err, PROTO_E_TOO_LARGE, "meta has %u keys, over the limit of %d", n,
                          PROTO_MAX_META);
    kv = calloc(n ? n : 1, sizeof(*kv));
    if (kv == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object_kv *p = &o->via.map.ptr[i];

        if ((rc = proto_field_str(&p->key, 1, PROTO_MAX_NAME, &kv[i].key, "a metadata key", err)) <
                0 ||
            (rc = decode_value(&p->val, &kv[i], err)) < 0) {
            proto_kv_free(kv, i + 1);
            return rc;
        }
    }
    *out = kv;
    *n_out = n;
    return 0;
}

/* Finds key in a map object (the message's second element). NULL when absent. */
const msgpack_object *proto_field_get(const msgpack_object *m, const char *key)
{
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (proto_field_key_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

/* The optional map argument of bye and the control requests. */
int proto_field_args(const msgpack_object *a, const msgpack_object **m, struct proto_error *err)
{
    static const msgpack_object empty = {.type = MSGPACK_OBJECT_MAP};

    if (a->via.array.size < 2 || a->via.array.ptr[1].type == MSGPACK_OBJECT_NIL) {
        *m = &empty;
        return 0;
    }
    *m = &a->via.array.ptr[1];
    return proto_field_map(*m, "the argument", err);
}
