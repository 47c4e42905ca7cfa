/*
 * cli_json — msgpack object → JSON text (see cli_json.h for the mapping).
 */
#include "cli_json.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

static int cli_json_value(FILE *f, const msgpack_object *o, int depth);

static int cli_json_status(FILE *f)
{
    return ferror(f) ? -EIO : 0;
}

int cli_json_write_str(FILE *f, const char *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;

    fputc('"', f);
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = utf8_decode(s + i, n - i, &cp);

        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            i++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            fwrite(s + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
    return cli_json_status(f);
}

static void cli_json_base64(FILE *f, const char *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *u = (const unsigned char *)data;

    fputc('"', f);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)u[i] << 16;
        size_t left = n - i;

        if (left > 1)
            v |= (uint32_t)u[i + 1] << 8;
        if (left > 2)
            v |= u[i + 2];
        fputc(tab[(v >> 18) & 63], f);
        fputc(tab[(v >> 12) & 63], f);
        fputc(left > 1 ? tab[(v >> 6) & 63] : '=', f);
        fputc(left > 2 ? tab[v & 63] : '=', f);
    }
    fputc('"', f);
}

/*
 * The shortest "%.Ng" that reads back to exactly d (as a float when
 * is_float32), then ".0" when the text would otherwise read as an integer.
 */
static void cli_json_float(FILE *f, double d, bool is_float32)
{
    char buf[64];
    int lo = is_float32 ? 6 : 15, hi = is_float32 ? 9 : 17;

    if (!isfinite(d)) {
        fputs("null", f);
        return;
    }
    for (int prec = lo; prec <= hi; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, d);
        if (is_float32 ? strtof(buf, NULL) == (float)d : strtod(buf, NULL) == d)
            break;
    }
    fputs(buf, f);
    if (strpbrk(buf, ".e") == NULL)
        fputs(".0", f);
}

/* A non-string map key: its JSON text, quoted. */
static int cli_json_key(FILE *f, const msgpack_object *k, int depth)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem;
    int rc;

    if (k->type == MSGPACK_OBJECT_STR)
        return cli_json_write_str(f, k->via.str.ptr, k->via.str.size);
    mem = open_memstream(&text, &len);
    if (mem == NULL)
        return -ENOMEM;
    rc = cli_json_value(mem, k, depth);
    if (fclose(mem) != 0 && rc == 0)
        rc = -ENOMEM;
    if (rc == 0)
        rc = cli_json_write_str(f, text, len);
    free(text);
    return rc;
}

static int cli_json_array(FILE *f, const msgpack_object_array *a, int depth)
{
    int rc = 0;

    fputc('[', f);
    for (uint32_t i = 0; i < a->size && rc == 0; i++) {
        if (i > 0)
            fputc(',', f);
        rc = cli_json_value(f, &a->ptr[i], depth + 1);
    }
    fputc(']', f);
    return rc;
}

static int cli_json_map(FILE *f, const msgpack_object_map *m, int depth)
{
    int rc = 0;

    fputc('{', f);
    for (uint32_t i = 0; i < m->size && rc == 0; i++) {
        if (i > 0)
            fputc(',', f);
        rc = cli_json_key(f, &m->ptr[i].key, depth + 1);
        fputc(':', f);
        if (rc == 0)
            rc = cli_json_value(f, &m->ptr[i].val, depth + 1);
    }
    fputc('}', f);
    return rc;
}

static void cli_json_ext(FILE *f, const msgpack_object_ext *e)
{
    fprintf(f, "{\"ext\":%d,\"data\":", (int)e->type);
    cli_json_base64(f, e->ptr, e->size);
    fputc('}', f);
}

static int cli_json_value(FILE *f, const msgpack_object *o, int depth)
{
    if (depth > CLI_JSON_MAX_DEPTH)
        return -EINVAL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        fputs("null", f);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        fputs(o->via.boolean ? "true" : "false", f);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        fprintf(f, "%" PRIu64, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        fprintf(f, "%" PRId64, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        cli_json_float(f, o->via.f64, o->type == MSGPACK_OBJECT_FLOAT32);
        break;
    case MSGPACK_OBJECT_STR:
        return cli_json_write_str(f, o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        cli_json_base64(f, o->via.bin.ptr, o->via.bin.size);
        break;
    case MSGPACK_OBJECT_EXT:
        cli_json_ext(f, &o->via.ext);
        break;
    case MSGPACK_OBJECT_ARRAY:
        return cli_json_array(f, &o->via.array, depth);
    case MSGPACK_OBJECT_MAP:
        return cli_json_map(f, &o->via.map, depth);
    default:
        fputs("null", f);
        break;
    }
    return cli_json_status(f);
}

int cli_json_write(FILE *f, const msgpack_object *o)
{
    int rc = cli_json_value(f, o, 0);

    return rc ? rc : cli_json_status(f);
}

int cli_json_write_doc(FILE *f, const msgpack_object *o)
{
    int rc = cli_json_write(f, o);

    if (rc)
        return rc;
    fputc('\n', f);
    return cli_json_status(f);
}
