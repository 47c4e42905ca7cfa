/*
 * test_cli_pb — client/cli/cli_pb.c, the protocol-buffers writer of the
 * Perfetto export: varints, zigzag-free negative ints (10 bytes), bytes,
 * large field numbers and nested messages with padded lengths. Expected bytes
 * come from the protobuf encoding guide (150 is 96 01), worked by hand.
 */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cli_pb.h"

TestSuite(cli_pb);

static void expect(const struct cli_pb *pb, const uint8_t *want, size_t n)
{
    cr_assert_eq(cli_pb_error(pb), 0);
    cr_assert_eq(pb->len, n, "%zu bytes, want %zu", pb->len, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(pb->buf[i], want[i], "byte %zu: %02x, want %02x", i, pb->buf[i], want[i]);
}

Test(cli_pb, scalars)
{
    static const uint8_t want[] = {
        0x08, 0x96, 0x01,                   /* field 1, varint 150 */
        0x08, 0x00,                         /* field 1, 0 */
        0x10, 0xff, 0xff, 0xff, 0xff, 0xff, /* field 2, int -1: ten bytes */
        0xff, 0xff, 0xff, 0xff, 0x01,       /* */
        0x18, 0xff, 0xff, 0xff, 0xff, 0xff, /* field 3, UINT64_MAX: ten bytes */
        0xff, 0xff, 0xff, 0xff, 0x01,       /* */
        0xc0, 0x3e, 0x07,                   /* field 1000 (tag 8000 = c0 3e), 7 */
        0x22, 0x02, 'h',  'i',              /* field 4, bytes "hi" */
        0x2a, 0x00,                         /* field 5, empty bytes */
    };
    struct cli_pb pb;

    cli_pb_init(&pb);
    cli_pb_uint(&pb, 1, 150);
    cli_pb_uint(&pb, 1, 0);
    cli_pb_int(&pb, 2, -1);
    cli_pb_uint(&pb, 3, UINT64_MAX);
    cli_pb_uint(&pb, 1000, 7);
    cli_pb_bytes(&pb, 4, "hi", 2);
    cli_pb_bytes(&pb, 5, "", 0);
    expect(&pb, want, sizeof(want));
    cli_pb_deinit(&pb);
}

Test(cli_pb, nested_lengths_are_padded_varints)
{
    static const uint8_t want[] = {
        0x0a, 0x89, 0x80, 0x80, 0x00, /* field 1, a message of 9 bytes (padded to 4) */
        0x08, 0x01,                   /*   field 1, 1 */
        0x12, 0x80, 0x80, 0x80, 0x00, /*   field 2, an empty message */
        0x18, 0x02,                   /*   field 3, 2 */
        0x10, 0x03,                   /* field 2, 3 */
    };
    struct cli_pb pb;
    size_t outer, inner;

    cli_pb_init(&pb);
    outer = cli_pb_begin(&pb, 1);
    cli_pb_uint(&pb, 1, 1);
    inner = cli_pb_begin(&pb, 2);
    cli_pb_end(&pb, inner);
    cli_pb_uint(&pb, 3, 2);
    cli_pb_end(&pb, outer);
    cli_pb_uint(&pb, 2, 3);
    expect(&pb, want, sizeof(want));
    cli_pb_deinit(&pb);
}

Test(cli_pb, reset_keeps_nothing)
{
    static const uint8_t want[] = {0x08, 0x05};
    struct cli_pb pb;

    cli_pb_init(&pb);
    cli_pb_bytes(&pb, 1, "something long enough", 21);
    cli_pb_reset(&pb);
    cli_pb_uint(&pb, 1, 5);
    expect(&pb, want, sizeof(want));
    cli_pb_deinit(&pb);
    cli_pb_init(&pb); /* again after deinit */
    cli_pb_deinit(&pb);
}
