/*
 * cli_obj — look-ups in reply maps and compact human text (see cli_obj.h).
 */
#include "cli_obj.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A bounded string builder: appends until full, then silently cuts. */
struct cli_obj_out {
    char *buf;
    size_t size, len;
};

const msgpack_object *cli_obj_get(const msgpack_object *map, const char *key)
{
    size_t klen = strlen(key);

    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;

        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(k->via.str.ptr, key, klen) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

bool cli_obj_is_nil(const msgpack_object *o)
{
    return o == NULL || o->type == MSGPACK_OBJECT_NIL;
}

bool cli_obj_is_true(const msgpack_object *o)
{
    return o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

bool cli_obj_str_eq(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);

    return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

int cli_obj_u64(const msgpack_object *o, uint64_t *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -EINVAL;
    *out = o->via.u64;
    return 0;
}

int cli_obj_f64(const msgpack_object *o, double *out)
{
    if (o == NULL)
        return -EINVAL;
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = (double)o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (double)o->via.i64;
        return 0;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        *out = o->via.f64;
        return 0;
    default:
        return -EINVAL;
    }
}

static void cli_obj_put(struct cli_obj_out *out, const char *s, size_t n)
{
    size_t room = out->size - 1 - out->len;

    if (n > room)
        n = room;
    memcpy(out->buf + out->len, s, n);
    out->len += n;
    out->buf[out->len] = '\0';
}

__attribute__((format(printf, 2, 3))) static void cli_obj_printf(struct cli_obj_out *out,
                                                                 const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        cli_obj_put(out, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void cli_obj_value(struct cli_obj_out *out, const msgpack_object *o);

static void cli_obj_container(struct cli_obj_out *out, const msgpack_object *o)
{
    bool is_map = o->type == MSGPACK_OBJECT_MAP;
    uint32_t n = is_map ? o->via.map.size : o->via.array.size;

    cli_obj_put(out, is_map ? "{" : "[", 1);
    for (uint32_t i = 0; i < n; i++) {
        if (i > 0)
            cli_obj_put(out, ",", 1);
        if (is_map) {
            cli_obj_value(out, &o->via.map.ptr[i].key);
            cli_obj_put(out, ":", 1);
            cli_obj_value(out, &o->via.map.ptr[i].val);
        } else {
            cli_obj_value(out, &o->via.array.ptr[i]);
        }
    }
    cli_obj_put(out, is_map ? "}" : "]", 1);
}

static void cli_obj_value(struct cli_obj_out *out, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        cli_obj_printf(out, "%s", o->via.boolean ? "true" : "false");
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        cli_obj_printf(out, "%" PRIu64, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        cli_obj_printf(out, "%" PRId64, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        cli_obj_printf(out, "%.6g", o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        cli_obj_put(out, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        cli_obj_printf(out, "<%" PRIu32 " bytes>", o->via.bin.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
    case MSGPACK_OBJECT_MAP:
        cli_obj_container(out, o);
        break;
    default:
        cli_obj_put(out, "-", 1);
        break;
    }
}

void cli_obj_text(const msgpack_object *o, char *buf, size_t size)
{
    struct cli_obj_out out = {buf, size, 0};

    if (size == 0)
        return;
    buf[0] = '\0';
    if (o == NULL)
        cli_obj_put(&out, "-", 1);
    else
        cli_obj_value(&out, o);
}
