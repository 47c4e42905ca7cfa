/*
 * test_block.c — the block encoding (block.c): every entry round trips
 * exactly, whatever its values (INT64 limits, negative and wrapping deltas,
 * NULLs), an empty block is empty, a full block refuses more, a block read
 * back goes on appending as if it had never left memory, and damaged bytes
 * are reported, never read past.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "block.h"

TestSuite(block);

static void assert_entry_eq(const struct block_entry *a, const struct block_entry *b, size_t i)
{
    cr_assert_eq(a->process_id, b->process_id, "entry %zu", i);
    cr_assert_eq(a->step, b->step, "entry %zu", i);
    cr_assert_eq(a->op_id, b->op_id, "entry %zu", i);
    cr_assert_eq(a->device_id, b->device_id, "entry %zu", i);
    cr_assert_eq(a->start_ns, b->start_ns, "entry %zu", i);
    cr_assert_eq(a->dur_ns, b->dur_ns, "entry %zu", i);
    cr_assert_eq(a->has_elements, b->has_elements, "entry %zu", i);
    if (a->has_elements)
        cr_assert_eq(a->elements, b->elements, "entry %zu", i);
    cr_assert_eq(a->mem_bytes, b->mem_bytes, "entry %zu", i);
    cr_assert_eq(a->shape_id, b->shape_id, "entry %zu", i);
}

/* Encodes n entries, decodes them back, compares each, and checks nothing is left. */
static void round_trip(const struct block_entry *in, size_t n)
{
    struct block_enc b;
    struct block_dec d;
    struct block_entry e;

    block_enc_init(&b);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(block_enc_add(&b, &in[i]), 0);
    cr_assert_eq(b.n, n);
    block_dec_init(&d, b.buf, b.len, b.n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(block_dec_next(&d, &e), 1, "entry %zu", i);
        assert_entry_eq(&e, &in[i], i);
    }
    cr_assert_eq(block_dec_next(&d, &e), 0);
    block_enc_deinit(&b);
}

Test(block, empty)
{
    struct block_enc b;
    struct block_dec d;
    struct block_entry e;

    block_enc_init(&b);
    cr_assert_eq(b.n, 0);
    cr_assert_eq(b.len, 0);
    block_dec_init(&d, b.buf, b.len, 0);
    cr_assert_eq(block_dec_next(&d, &e), 0);
    cr_assert_eq(block_enc_load(&b, "", 0, 0), 0);
    cr_assert_eq(b.n, 0);
    /* Bytes beyond the entries announced: not a block of 0 entries. */
    block_dec_init(&d, "\x00", 1, 0);
    cr_assert_eq(block_dec_next(&d, &e), -1);
    block_enc_deinit(&b);
}

Test(block, edge_values)
{
    static const struct block_entry in[] = {
        {.process_id = 1, .op_id = 1, .start_ns = 0, .dur_ns = 0},
        {.process_id = INT64_MAX,
         .step = INT64_MAX,
         .op_id = INT64_MAX,
         .device_id = INT64_MAX,
         .start_ns = INT64_MAX,
         .dur_ns = INT64_MAX,
         .elements = INT64_MAX,
         .has_elements = true,
         .mem_bytes = INT64_MAX,
         .shape_id = INT64_MAX},
        {.process_id = INT64_MIN,
         .step = INT64_MIN,
         .op_id = INT64_MIN,
         .device_id = INT64_MIN,
         .start_ns = INT64_MIN,
         .dur_ns = INT64_MIN,
         .elements = INT64_MIN,
         .has_elements = true,
         .mem_bytes = INT64_MIN,
         .shape_id = INT64_MIN},
        {.process_id = INT64_MAX,
         .step = 0,
         .op_id = 2,
         .start_ns = INT64_MAX,
         .dur_ns = -1,
         .elements = -1,
         .has_elements = true,
         .mem_bytes = -1},
        /* negative deltas everywhere */
        {.process_id = 3, .step = -5, .op_id = 1, .device_id = 0, .start_ns = -1000, .dur_ns = 5},
        {.process_id = 2,
         .step = -6,
         .op_id = 0,
         .device_id = 7,
         .start_ns = -2000,
         .dur_ns = 5,
         .shape_id = 3},
        /* repeated fields: left out */
        {.process_id = 2,
         .step = -6,
         .op_id = 0,
         .device_id = 7,
         .start_ns = -2000,
         .dur_ns = 5,
         .shape_id = 3},
        {.process_id = 2,
         .step = -6,
         .op_id = 0,
         .device_id = 0,
         .start_ns = 0,
         .dur_ns = 0,
         .elements = 0,
         .has_elements = true,
         .shape_id = 0},
    };

    round_trip(in, sizeof(in) / sizeof(in[0]));
}

Test(block, full_block_and_stats)
{
    static struct block_entry in[BLOCK_ENTRIES];
    struct block_enc b;

    for (size_t i = 0; i < BLOCK_ENTRIES; i++)
        in[i] = (struct block_entry){.process_id = 1 + (int64_t)(i % 3),
                                     .step = (int64_t)(i / 100),
                                     .op_id = 1 + (int64_t)(i % 70),
                                     .device_id = (int64_t)(i % 2),
                                     .start_ns = 1000000 + (int64_t)i * 1000 - (int64_t)(i % 5),
                                     .dur_ns = 500 + (int64_t)(i % 17),
                                     .elements = (int64_t)i,
                                     .has_elements = i % 4 == 0,
                                     .mem_bytes = (int64_t)(i % 3) * 4096,
                                     .shape_id = (int64_t)(i % 9)};
    round_trip(in, BLOCK_ENTRIES);
    block_enc_init(&b);
    for (size_t i = 0; i < BLOCK_ENTRIES; i++)
        cr_assert_eq(block_enc_add(&b, &in[i]), 0);
    cr_assert_eq(block_enc_add(&b, &in[0]), -ENOSPC);
    cr_assert_eq(b.stats.min_start, 1000000);
    cr_assert_eq(b.stats.max_start,
                 1000000 + (BLOCK_ENTRIES - 1) * 1000 - ((BLOCK_ENTRIES - 1) % 5));
    cr_assert_eq(b.stats.min_proc, 1);
    cr_assert_eq(b.stats.max_proc, 3);
    cr_assert_eq(b.stats.proc_mask, 0xeu);
    /* ops 1..70: bits 1..63, and 64..70 wrap onto 0..6 */
    cr_assert_eq(b.stats.op_mask, UINT64_MAX);
    /* A typical entry takes a few bytes, not 34. */
    cr_assert_lt(b.len, (size_t)BLOCK_ENTRIES * 12, "%zu bytes", b.len);
    block_enc_deinit(&b);
}

Test(block, load_goes_on_appending)
{
    struct block_entry in[300];
    struct block_enc a, b;

    for (size_t i = 0; i < 300; i++)
        in[i] = (struct block_entry){.process_id = (int64_t)(i % 7),
                                     .op_id = (int64_t)i,
                                     .start_ns = (int64_t)(i * i),
                                     .dur_ns = (int64_t)i,
                                     .mem_bytes = (int64_t)i,
                                     .shape_id = (int64_t)(i % 2)};
    block_enc_init(&a);
    block_enc_init(&b);
    for (size_t i = 0; i < 300; i++) {
        cr_assert_eq(block_enc_add(&a, &in[i]), 0);
        if (i == 199) {
            cr_assert_eq(block_enc_load(&b, a.buf, a.len, a.n), 0);
            cr_assert_eq(memcmp(&b.stats, &a.stats, sizeof(a.stats)), 0);
        } else if (i > 199) {
            cr_assert_eq(block_enc_add(&b, &in[i]), 0);
        }
    }
    cr_assert_eq(b.n, a.n);
    cr_assert_eq(b.len, a.len);
    cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0);
    cr_assert_eq(memcmp(&b.stats, &a.stats, sizeof(a.stats)), 0);
    /* A wrong count is not the same block. */
    cr_assert_eq(block_enc_load(&b, a.buf, a.len, a.n + 1), -EINVAL);
    cr_assert_eq(block_enc_load(&b, a.buf, a.len, a.n - 1), -EINVAL);
    cr_assert_eq(block_enc_load(&b, a.buf, a.len, BLOCK_ENTRIES + 1), -EINVAL);
    block_enc_deinit(&a);
    block_enc_deinit(&b);
}

Test(block, damaged_bytes_are_reported)
{
    struct block_entry in = {.process_id = INT64_MAX,
                             .op_id = 5,
                             .start_ns = INT64_MIN,
                             .dur_ns = INT64_MAX,
                             .mem_bytes = 1,
                             .shape_id = 2};
    struct block_enc b;
    struct block_dec d;
    struct block_entry e;
    uint8_t bad[64];

    block_enc_init(&b);
    cr_assert_eq(block_enc_add(&b, &in), 0);
    /* Every truncation fails, without reading past the end. */
    for (size_t len = 0; len < b.len; len++) {
        block_dec_init(&d, b.buf, len, 1);
        cr_assert_eq(block_dec_next(&d, &e), -1, "len %zu", len);
    }
    /* An unknown flag. */
    memcpy(bad, b.buf, b.len);
    bad[0] |= 0x80;
    block_dec_init(&d, bad, b.len, 1);
    cr_assert_eq(block_dec_next(&d, &e), -1);
    /* A varint longer than 64 bits. */
    memset(bad, 0xff, sizeof(bad));
    bad[0] = 0x01;
    block_dec_init(&d, bad, sizeof(bad), 1);
    cr_assert_eq(block_dec_next(&d, &e), -1);
    block_enc_deinit(&b);
}

Test(block, restarts_seek)
{
    static struct block_entry in[1000];
    struct block_enc b;
    struct block_dec d;
    struct block_entry e;

    for (size_t i = 0; i < 1000; i++)
        in[i] = (struct block_entry){.process_id = 1 + (int64_t)(i % 5),
                                     .op_id = (int64_t)(i * 7 % 13),
                                     .start_ns = (int64_t)(i * 1000) - 500000,
                                     .dur_ns = (int64_t)i,
                                     .shape_id = (int64_t)(i % 3)};
    block_enc_init(&b);
    for (size_t i = 0; i < 1000; i++)
        cr_assert_eq(block_enc_add(&b, &in[i]), 0);
    cr_assert_eq(block_restarts(1000), 8);
    cr_assert_eq(block_restarts(1024), 8);
    cr_assert_eq(block_restarts(1025), 9);
    cr_assert_eq(b.restart[0], 0);
    /* From every restart, the entries read as from the start; the end is the block's. */
    for (uint32_t k = 0; k < 8; k++) {
        block_dec_init(&d, b.buf, b.len, b.n);
        cr_assert_eq(block_dec_seek(&d, k, b.restart[k]), 0);
        for (size_t i = k * BLOCK_RESTART; i < 1000; i++) {
            cr_assert_eq(block_dec_next(&d, &e), 1, "restart %u entry %zu", k, i);
            assert_entry_eq(&e, &in[i], i);
        }
        cr_assert_eq(block_dec_next(&d, &e), 0);
    }
    block_dec_init(&d, b.buf, b.len, b.n);
    cr_assert_eq(block_dec_seek(&d, 8, 0), -1);               /* no such restart */
    cr_assert_eq(block_dec_seek(&d, 1, (uint32_t)b.len), -1); /* past the bytes */
    block_enc_deinit(&b);
}

/* LEB128 by the book, one byte at a time: what every varint of a block must read. */
static size_t ref_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;

    do {
        p[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            p[n] |= 0x80;
        n++;
    } while (v != 0);
    return n;
}

/*
 * Varints of every length, 1 to 10 bytes, on both sides of each boundary,
 * back to back in one block (an entry's varint may be stored as a whole
 * word: the bytes past it are the next entry's): the block's bytes are
 * exactly the format's, computed here byte by byte, and decode back.
 */
Test(block, varints_of_every_length_are_leb128)
{
    static struct block_entry in[3 * 64 + 2];
    static uint8_t want[sizeof(in) / sizeof(in[0]) * 23];
    struct block_enc b;
    size_t n = 0, len = 0;

    for (unsigned k = 0; k < 64; k++) {
        uint64_t v = UINT64_C(1) << k;
        uint64_t vals[3] = {v - 1, v, v | (v - 1)}; /* k bits, k + 1 bits, k + 1 bits all set */
        for (int j = 0; j < 3; j++)
            in[n++] =
                (struct block_entry){.dur_ns = (int64_t)vals[j], .mem_bytes = (int64_t)vals[j]};
    }
    in[n++] = (struct block_entry){.dur_ns = -1, .mem_bytes = INT64_MIN}; /* 10 bytes each */
    in[n++] = (struct block_entry){.dur_ns = 0x7f, .mem_bytes = 0x80};
    /* all fields but dur and mem are 0, as after a restart: flags, start's delta 0, dur, mem */
    for (size_t i = 0; i < n; i++) {
        want[len++] = in[i].mem_bytes != 0 ? 0x20 : 0; /* F_MEM */
        want[len++] = 0;
        len += ref_varint(want + len, (uint64_t)in[i].dur_ns);
        if (in[i].mem_bytes != 0)
            len += ref_varint(want + len, (uint64_t)in[i].mem_bytes);
    }
    block_enc_init(&b);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(block_enc_add(&b, &in[i]), 0);
    cr_assert_eq(b.len, len);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(b.buf[i], want[i], "byte %zu: %#x, not %#x", i, b.buf[i], want[i]);
    block_enc_deinit(&b);
    round_trip(in, n);
}
