/*
 * test_cli_json — client/cli/cli_json.c, the JSON writer of every `--json`
 * output: each msgpack type's mapping of cli_json.h, escaping, invalid UTF-8,
 * base64, non-string keys and the depth bound. Inputs are packed with
 * msgpack-c; the expected texts are written out by hand (base64 from RFC
 * 4648's test vectors).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "cli_json.h"

TestSuite(cli_json);

struct packed {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
};

static void packed_init(struct packed *p)
{
    msgpack_sbuffer_init(&p->sb);
    msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&p->res);
}

static void packed_free(struct packed *p)
{
    msgpack_unpacked_destroy(&p->res);
    msgpack_sbuffer_destroy(&p->sb);
}

static void pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* The JSON text of what p packed; the caller frees it. */
static char *json_of(struct packed *p, int want_rc)
{
    char *text = NULL;
    size_t len = 0, off = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_eq(msgpack_unpack_next(&p->res, p->sb.data, p->sb.size, &off),
                 MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(cli_json_write(f, &p->res.data), want_rc);
    fclose(f);
    return text;
}

static void expect(struct packed *p, const char *want)
{
    char *got = json_of(p, 0);

    cr_assert_str_eq(got, want);
    free(got);
    packed_free(p);
}

Test(cli_json, scalars)
{
    struct packed p;

    packed_init(&p);
    msgpack_pack_array(&p.pk, 7);
    msgpack_pack_nil(&p.pk);
    msgpack_pack_true(&p.pk);
    msgpack_pack_false(&p.pk);
    msgpack_pack_uint64(&p.pk, 0);
    msgpack_pack_int64(&p.pk, -1);
    msgpack_pack_uint64(&p.pk, UINT64_MAX);
    msgpack_pack_int64(&p.pk, INT64_MIN);
    expect(&p, "[null,true,false,0,-1,18446744073709551615,-9223372036854775808]");
}

Test(cli_json, floats)
{
    struct packed p;

    packed_init(&p);
    msgpack_pack_array(&p.pk, 9);
    msgpack_pack_double(&p.pk, 0.5);
    msgpack_pack_double(&p.pk, 3.0); /* integral: keeps ".0" to stay a float */
    msgpack_pack_double(&p.pk, -2.25);
    msgpack_pack_double(&p.pk, 0.1); /* shortest text that reads back, not 0.10000000000000001 */
    msgpack_pack_double(&p.pk, 1e300);
    msgpack_pack_float(&p.pk, 1.1f); /* float32: 1.1, not 1.10000002384185791 */
    msgpack_pack_double(&p.pk, NAN);
    msgpack_pack_double(&p.pk, INFINITY);
    msgpack_pack_double(&p.pk, -INFINITY);
    expect(&p, "[0.5,3.0,-2.25,0.1,1e+300,1.1,null,null,null]");
}

Test(cli_json, strings)
{
    struct packed p;

    packed_init(&p);
    msgpack_pack_array(&p.pk, 5);
    pack_str(&p.pk, "a\"b\\c", 5);
    pack_str(&p.pk, "\n\x01\x1f", 3);        /* control characters: \u00XX */
    pack_str(&p.pk, "\xc3\xa9t\xc3\xa9", 5); /* valid UTF-8: as is */
    pack_str(&p.pk, "x\xffy", 3);            /* an invalid byte */
    pack_str(&p.pk, "\xe2\x82", 2);          /* cut short: each byte replaced */
    expect(&p, "[\"a\\\"b\\\\c\",\"\\u000a\\u0001\\u001f\",\"\xc3\xa9t\xc3\xa9\","
               "\"x\\ufffdy\",\"\\ufffd\\ufffd\"]");
}

Test(cli_json, bin_and_ext_as_base64)
{
    struct packed p;

    packed_init(&p);
    msgpack_pack_array(&p.pk, 5);
    msgpack_pack_bin(&p.pk, 0);
    msgpack_pack_bin(&p.pk, 4);
    msgpack_pack_bin_body(&p.pk, "foob", 4);
    msgpack_pack_bin(&p.pk, 5);
    msgpack_pack_bin_body(&p.pk, "fooba", 5);
    msgpack_pack_bin(&p.pk, 6);
    msgpack_pack_bin_body(&p.pk, "foobar", 6);
    msgpack_pack_ext(&p.pk, 2, 5);
    msgpack_pack_ext_body(&p.pk, "ab", 2);
    expect(&p, "[\"\",\"Zm9vYg==\",\"Zm9vYmE=\",\"Zm9vYmFy\",{\"ext\":5,\"data\":\"YWI=\"}]");
}

Test(cli_json, map_keys_of_any_type)
{
    struct packed p;

    packed_init(&p);
    msgpack_pack_map(&p.pk, 4);
    msgpack_pack_uint64(&p.pk, 5);
    pack_str(&p.pk, "x", 1);
    msgpack_pack_nil(&p.pk);
    msgpack_pack_uint64(&p.pk, 1);
    pack_str(&p.pk, "k", 1);
    msgpack_pack_array(&p.pk, 1);
    msgpack_pack_true(&p.pk);
    msgpack_pack_array(&p.pk, 2); /* a key that is an array: its JSON text, quoted */
    msgpack_pack_uint64(&p.pk, 1);
    pack_str(&p.pk, "a", 1);
    msgpack_pack_map(&p.pk, 0);
    expect(&p, "{\"5\":\"x\",\"null\":1,\"k\":[true],\"[1,\\\"a\\\"]\":{}}");
}

/* n arrays of one element each around a nil: the nil is at depth n. */
static msgpack_object *nested(size_t n)
{
    msgpack_object *o = calloc(n + 1, sizeof(*o));

    for (size_t i = 0; i < n; i++) {
        o[i].type = MSGPACK_OBJECT_ARRAY;
        o[i].via.array.size = 1;
        o[i].via.array.ptr = &o[i + 1];
    }
    o[n].type = MSGPACK_OBJECT_NIL;
    return o;
}

Test(cli_json, depth_bound)
{
    msgpack_object *ok = nested(CLI_JSON_MAX_DEPTH), *deep = nested(CLI_JSON_MAX_DEPTH + 1);
    FILE *f = fopen("/dev/null", "w");

    cr_assert_eq(cli_json_write(f, ok), 0);
    cr_assert_eq(cli_json_write(f, deep), -EINVAL);
    fclose(f);
    free(ok);
    free(deep);
}

Test(cli_json, doc_ends_with_a_newline)
{
    struct packed p;
    char *text = NULL;
    size_t len = 0, off = 0;
    FILE *f;

    packed_init(&p);
    msgpack_pack_uint64(&p.pk, 7);
    cr_assert_eq(msgpack_unpack_next(&p.res, p.sb.data, p.sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    f = open_memstream(&text, &len);
    cr_assert_eq(cli_json_write_doc(f, &p.res.data), 0);
    fclose(f);
    cr_assert_str_eq(text, "7\n");
    free(text);
    packed_free(&p);
}
