/*
 * test_peerclock_wire.c — the clock-probe messages (daemon/peer/peerclock_wire.h):
 * what is encoded is what msgpack-c reads as ["clock_probe", seq, t1] and
 * ["clock_reply", seq, t1, t2, t3]; what msgpack-c packs in any integer form
 * decodes; every prefix of a message asks for more; and a table of malformed
 * messages, built with msgpack-c's packer or as raw bytes (not with the code
 * under test), is refused whole and at every truncation.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "peerclock.h"
#include "peerclock_wire.h"

TestSuite(peerclock_wire);

#define T62 (INT64_C(1) << 62)

Test(peerclock_wire, encoded_messages_are_what_msgpack_reads)
{
    struct peerclock_msg r = {
        .type = PEERCLOCK_REPLY, .seq = UINT32_MAX, .t1 = 1, .t2 = 5000000000, .t3 = T62};
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    int len = peerclock_wire_encode(&r, buf, sizeof(buf));
    cr_assert_gt(len, 0);
    cr_assert_leq(len, 49);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)buf, (size_t)len, &off),
                 MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, (size_t)len);
    msgpack_object o = u.data;
    cr_assert_eq(o.type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(o.via.array.size, 5);
    msgpack_object *e = o.via.array.ptr;
    cr_assert_eq(e[0].type, MSGPACK_OBJECT_STR);
    cr_assert_eq(e[0].via.str.size, 11);
    cr_assert_eq(memcmp(e[0].via.str.ptr, "clock_reply", 11), 0);
    cr_assert_eq(e[1].via.u64, UINT32_MAX);
    cr_assert_eq(e[2].via.u64, 1);
    cr_assert_eq(e[3].via.u64, 5000000000u);
    cr_assert_eq(e[4].via.u64, (uint64_t)T62);
    msgpack_unpacked_destroy(&u);

    struct peerclock_msg d;
    cr_assert_eq(peerclock_wire_decode(buf, (size_t)len, &d), len);
    cr_assert_eq(d.type, PEERCLOCK_REPLY);
    cr_assert_eq(d.seq, UINT32_MAX);
    cr_assert_eq(d.t1, 1);
    cr_assert_eq(d.t2, 5000000000);
    cr_assert_eq(d.t3, T62);
    for (int i = 0; i < len; i++)
        cr_assert_eq(peerclock_wire_decode(buf, (size_t)i, &d), 0, "prefix %d asks for more", i);

    struct peerclock_msg q = {.type = PEERCLOCK_PROBE, .seq = 7, .t1 = 123456789};
    len = peerclock_wire_encode(&q, buf, sizeof(buf));
    cr_assert_eq(len, 1 + 12 + 1 + 5, "fixarray, fixstr, fixint, uint32");
    cr_assert_eq(peerclock_wire_decode(buf, (size_t)len, &d), len);
    cr_assert_eq(d.type, PEERCLOCK_PROBE);
    cr_assert_eq(d.seq, 7);
    cr_assert_eq(d.t1, 123456789);
    cr_assert_eq(d.t2, 0);
}

Test(peerclock_wire, encoding_refuses_what_it_cannot_send)
{
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    struct peerclock_msg q = {.type = PEERCLOCK_PROBE, .t1 = -1};
    cr_assert_eq(peerclock_wire_encode(&q, buf, sizeof(buf)), -EINVAL);
    q.t1 = T62 + 1;
    cr_assert_eq(peerclock_wire_encode(&q, buf, sizeof(buf)), -EINVAL);
    q.t1 = 5;
    cr_assert_eq(peerclock_wire_encode(&q, buf, 10), -EMSGSIZE);
    q.type = 0;
    cr_assert_eq(peerclock_wire_encode(&q, buf, sizeof(buf)), -EINVAL);
}

/* msgpack-c's packer into a fixed buffer */
struct mbuf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void mb_init(struct mbuf *b)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static void mb_str(struct mbuf *b, const char *s)
{
    msgpack_pack_str(&b->pk, strlen(s));
    msgpack_pack_str_body(&b->pk, s, strlen(s));
}

Test(peerclock_wire, every_integer_form_decodes)
{
    struct mbuf b;
    mb_init(&b);
    msgpack_pack_array(&b.pk, 5);
    mb_str(&b, "clock_reply");
    msgpack_pack_int64(&b.pk, 3);              /* fixint */
    msgpack_pack_fix_int64(&b.pk, 5000000000); /* int64 form */
    msgpack_pack_fix_uint8(&b.pk, 200);        /* uint8 form */
    msgpack_pack_fix_int16(&b.pk, 300);        /* int16 form */
    struct peerclock_msg d;
    cr_assert_eq(peerclock_wire_decode((const uint8_t *)b.sb.data, b.sb.size, &d), (int)b.sb.size);
    cr_assert_eq(d.seq, 3);
    cr_assert_eq(d.t1, 5000000000);
    cr_assert_eq(d.t2, 200);
    cr_assert_eq(d.t3, 300);
    msgpack_sbuffer_destroy(&b.sb);
}

struct bad_wire {
    const char *name;
    void (*build)(struct mbuf *b);
};

static void b_other_type(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probX");
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
}
static void b_batch(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 2);
    mb_str(b, "batch");
    msgpack_pack_array(&b->pk, 0);
}
static void b_map(struct mbuf *b)
{
    msgpack_pack_map(&b->pk, 1);
    mb_str(b, "clock_probe");
    msgpack_pack_uint32(&b->pk, 1);
}
static void b_probe_5(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 5);
    mb_str(b, "clock_probe");
    for (int i = 0; i < 4; i++)
        msgpack_pack_uint32(&b->pk, 1);
}
static void b_reply_3(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_reply");
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_uint32(&b->pk, 1);
}
static void b_array_4(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 4);
    mb_str(b, "clock_probe");
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint32(&b->pk, 1);
}
static void b_negative(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probe");
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_int64(&b->pk, -5);
}
static void b_past_2_62(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probe");
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, (UINT64_C(1) << 62) + 1);
}
static void b_seq_past_32_bits(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probe");
    msgpack_pack_uint64(&b->pk, UINT64_C(1) << 32);
    msgpack_pack_uint64(&b->pk, 1);
}
static void b_string_time(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probe");
    msgpack_pack_uint32(&b->pk, 1);
    mb_str(b, "5");
}
static void b_float_time(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    mb_str(b, "clock_probe");
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_double(&b->pk, 5.0);
}
static void b_nil(struct mbuf *b)
{
    msgpack_pack_nil(&b->pk);
}
static void b_huge_array(struct mbuf *b)
{
    static const char raw[] = {(char)0xdd, (char)0xff, (char)0xff, (char)0xff, (char)0xff};
    msgpack_sbuffer_write(&b->sb, raw, sizeof(raw));
}
static void b_huge_name(struct mbuf *b)
{
    static const char raw[] = {(char)0x93, (char)0xdb, (char)0xff,
                               (char)0xff, (char)0xff, (char)0xff};
    msgpack_sbuffer_write(&b->sb, raw, sizeof(raw));
}
static void b_bin_name(struct mbuf *b)
{
    msgpack_pack_array(&b->pk, 3);
    msgpack_pack_bin(&b->pk, 11);
    msgpack_pack_bin_body(&b->pk, "clock_probe", 11);
    msgpack_pack_uint32(&b->pk, 1);
    msgpack_pack_uint32(&b->pk, 1);
}

static const struct bad_wire bad_wires[] = {
    {"another name", b_other_type},
    {"another message", b_batch},
    {"a map", b_map},
    {"a probe of 5", b_probe_5},
    {"a reply of 3", b_reply_3},
    {"an array of 4", b_array_4},
    {"a negative time", b_negative},
    {"a time past 2^62", b_past_2_62},
    {"a seq past 32 bits", b_seq_past_32_bits},
    {"a string for a time", b_string_time},
    {"a float for a time", b_float_time},
    {"nil", b_nil},
    {"an array32 of 2^32 - 1", b_huge_array},
    {"a str32 name of 4 GiB", b_huge_name},
    {"a bin name", b_bin_name},
};

Test(peerclock_wire, malformed_messages_are_refused_at_every_length)
{
    for (size_t i = 0; i < sizeof(bad_wires) / sizeof(bad_wires[0]); i++) {
        struct mbuf b;
        mb_init(&b);
        bad_wires[i].build(&b);
        struct peerclock_msg d;
        /* a copy of exactly each length, so that ASan sees any read past it */
        for (size_t n = 0; n <= b.sb.size; n++) {
            uint8_t *cut = malloc(n ? n : 1);
            memcpy(cut, b.sb.data, n);
            int rc = peerclock_wire_decode(cut, n, &d);
            cr_assert(rc == 0 || rc == -EPROTO, "%s at %zu: %d", bad_wires[i].name, n, rc);
            free(cut);
        }
        cr_assert_eq(peerclock_wire_decode((const uint8_t *)b.sb.data, b.sb.size, &d), -EPROTO,
                     "%s", bad_wires[i].name);
        cr_assert_eq(d.type, 0, "%s: nothing decoded", bad_wires[i].name);
        msgpack_sbuffer_destroy(&b.sb);
    }
}
