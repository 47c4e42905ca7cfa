/*
 * test_utf8 — util/utf8.c, the one UTF-8 decoder (RFC 3629), and the wire's
 * rule built on it (proto_utf8_valid: valid and no NUL). The sequences and
 * their code points are written out from RFC 3629's table, not produced by
 * the code under test.
 */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "proto.h"
#include "utf8.h"

TestSuite(utf8);

struct utf8_case {
    const char *bytes;
    size_t n;    /* bytes given to the decoder */
    size_t len;  /* expected return: 0 = invalid */
    uint32_t cp; /* expected code point when len > 0 */
    const char *why;
};

static const struct utf8_case cases[] = {
    {"A", 1, 1, 0x41, "ASCII"},
    {"\0", 1, 1, 0, "NUL is a code point"},
    {"\x7f", 1, 1, 0x7f, "last 1-byte"},
    {"\xc2\x80", 2, 2, 0x80, "first 2-byte"},
    {"\xc3\xa9", 2, 2, 0xe9, "e acute"},
    {"\xdf\xbf", 2, 2, 0x7ff, "last 2-byte"},
    {"\xe0\xa0\x80", 3, 3, 0x800, "first 3-byte"},
    {"\xe2\x82\xac", 3, 3, 0x20ac, "euro sign"},
    {"\xed\x9f\xbf", 3, 3, 0xd7ff, "just below the surrogates"},
    {"\xee\x80\x80", 3, 3, 0xe000, "just above the surrogates"},
    {"\xef\xbf\xbf", 3, 3, 0xffff, "last 3-byte"},
    {"\xf0\x90\x80\x80", 4, 4, 0x10000, "first 4-byte"},
    {"\xf0\x9f\x94\xa5", 4, 4, 0x1f525, "fire"},
    {"\xf4\x8f\xbf\xbf", 4, 4, 0x10ffff, "last code point"},
    {"\xc3\xa9xyz", 5, 2, 0xe9, "only the first code point"},
    {"\xc0\x80", 2, 0, 0, "overlong NUL"},
    {"\xc1\xbf", 2, 0, 0, "overlong U+007F"},
    {"\xe0\x9f\xbf", 3, 0, 0, "overlong U+07FF"},
    {"\xf0\x8f\xbf\xbf", 4, 0, 0, "overlong U+FFFF"},
    {"\xed\xa0\x80", 3, 0, 0, "surrogate U+D800"},
    {"\xed\xbf\xbf", 3, 0, 0, "surrogate U+DFFF"},
    {"\xf4\x90\x80\x80", 4, 0, 0, "U+110000"},
    {"\x80", 1, 0, 0, "lone continuation byte"},
    {"\xbf", 1, 0, 0, "lone continuation byte"},
    {"\xf8\x88\x80\x80\x80", 5, 0, 0, "5-byte form"},
    {"\xff", 1, 0, 0, "0xff"},
    {"\xc3", 1, 0, 0, "cut short: 1 of 2"},
    {"\xe2\x82", 2, 0, 0, "cut short: 2 of 3"},
    {"\xf0\x9f\x94", 3, 0, 0, "cut short: 3 of 4"},
    {"\xc3\xa9", 1, 0, 0, "n ends inside the sequence"},
    {"\xe2\x28\xa1", 3, 0, 0, "second byte not a continuation"},
    {"\xf0\x9f\x94\x41", 4, 0, 0, "last byte not a continuation"},
};

Test(utf8, decode_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct utf8_case *c = &cases[i];
        uint32_t cp = 0xdeadbeef;
        size_t len = utf8_decode(c->bytes, c->n, &cp);

        cr_assert_eq(len, c->len, "%s: length %zu, want %zu", c->why, len, c->len);
        if (c->len > 0)
            cr_assert_eq(cp, c->cp, "%s: U+%04X, want U+%04X", c->why, cp, c->cp);
    }
}

Test(utf8, valid_is_decode_without_nul)
{
    /* Every row: valid as a whole string exactly when it decodes to the end, without NUL. */
    cr_assert(proto_utf8_valid(NULL, 0));
    cr_assert(proto_utf8_valid("gpu:0", 5));
    cr_assert(proto_utf8_valid("\x01\x7f", 2)); /* ASCII edges */
    cr_assert(proto_utf8_valid("a\xc3\xa9"
                               "b\xf4\x8f\xbf\xbf",
                               8)); /* mixed */
    cr_assert_not(proto_utf8_valid("a\0b", 3));
    cr_assert_not(proto_utf8_valid("\xc0\x80", 2)); /* overlong NUL is no way around it */
    cr_assert_not(proto_utf8_valid("ab\x80", 3));
    cr_assert_not(proto_utf8_valid("ab\xe2\x82", 4));
    cr_assert_not(proto_utf8_valid("\xed\xa0\x80", 3));
}
