/*
 * test_proto.c — the wire format: round trips, the reader's framing and size
 * bound, and a table of malformed messages, each with the error code it must
 * get. Messages are built with msgpack-c's packer or as raw bytes, never with
 * the proto_pack_* functions under test (except in the round-trip tests).
 */
#include <errno.h>
#include <malloc.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

/* ---- a tiny builder over msgpack-c, independent of proto_pack_* -------- */

struct buf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void buf_init(struct buf *b)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static void s(struct buf *b, const char *str)
{
    msgpack_pack_str(&b->pk, strlen(str));
    msgpack_pack_str_body(&b->pk, str, strlen(str));
}

static void sn(struct buf *b, const char *str, size_t n)
{
    msgpack_pack_str(&b->pk, n);
    msgpack_pack_str_body(&b->pk, str, n);
}

static void hello_head(struct buf *b, size_t extra)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2 + extra);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "session");
    s(b, "job");
}

/* ["batch", [[step, op, start, dur, <rest...>]]] — caller packs `rest` fields. */
static void batch_head(struct buf *b, size_t fields)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, fields);
    msgpack_pack_uint64(&b->pk, 0);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 100);
    msgpack_pack_uint64(&b->pk, 5);
}

static int decode(struct buf *b, struct proto_msg *m, struct proto_error *err)
{
    return proto_decode_bytes(b->sb.data, b->sb.size, m, err);
}

/* ---- malformed messages: one builder per case --------------------------- */

static void c_not_msgpack(struct buf *b)
{
    msgpack_sbuffer_write(&b->sb, "\xc1", 1); /* 0xc1 is never used by msgpack */
}
static void c_cut_short(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "flush"); /* the second element never comes */
}
static void c_not_array(struct buf *b)
{
    msgpack_pack_map(&b->pk, 0);
}
static void c_empty_array(struct buf *b)
{
    msgpack_pack_array(&b->pk, 0);
}
static void c_type_not_str(struct buf *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 7);
}
static void c_unknown_type(struct buf *b)
{
    msgpack_pack_array(&b->pk, 1);
    s(b, "frobnicate");
}
static void c_hello_no_proto(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 1);
    s(b, "session");
    s(b, "x");
}
static void c_hello_proto2(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 2);
    s(b, "session");
    s(b, "x");
}
static void c_hello_no_session(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 1);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
}
static void c_hello_empty_session(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "session");
    s(b, "");
}
static void c_hello_long_session(struct buf *b)
{
    char name[257];
    memset(name, 'a', sizeof(name));
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "session");
    sn(b, name, sizeof(name));
}
static void c_hello_bad_utf8(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "session");
    sn(b, "ab\xff", 3);
}
static void c_hello_nul(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 2);
    s(b, "proto");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "session");
    sn(b, "a\0b", 3);
}
static void c_hello_neg_rank(struct buf *b)
{
    hello_head(b, 1);
    s(b, "rank");
    msgpack_pack_int64(&b->pk, -3);
}
static void c_hello_str_world(struct buf *b)
{
    hello_head(b, 1);
    s(b, "world");
    s(b, "8");
}
static void c_hello_meta_array(struct buf *b)
{
    hello_head(b, 1);
    s(b, "meta");
    msgpack_pack_array(&b->pk, 0);
}
static void c_hello_map_int_key(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "hello");
    msgpack_pack_map(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
}
static void c_ops_big_id(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "ops");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 2);
    msgpack_pack_uint64(&b->pk, 1ull << 32);
    s(b, "matmul");
}
static void c_ops_name_int(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "ops");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 2);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
}
static void c_ops_long_name(struct buf *b)
{
    char name[PROTO_MAX_NAME + 1];
    memset(name, 'x', sizeof(name));
    msgpack_pack_array(&b->pk, 2);
    s(b, "ops");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 2);
    msgpack_pack_uint64(&b->pk, 1);
    sn(b, name, sizeof(name));
}
static void c_ops_not_list(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "ops");
    s(b, "matmul");
}
static void c_batch_3_fields(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint64(&b->pk, 1);
}
static void c_batch_neg_dur(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 4);
    msgpack_pack_uint64(&b->pk, 0);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 100);
    msgpack_pack_int64(&b->pk, -5);
}
static void c_batch_huge_start(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 4);
    msgpack_pack_uint64(&b->pk, 0);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, (uint64_t)INT64_MAX + 1);
    msgpack_pack_uint64(&b->pk, 5);
}
static void c_batch_end_past_int64(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 4);
    msgpack_pack_uint64(&b->pk, 0);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1); /* 1 + INT64_MAX: ends past the range */
    msgpack_pack_uint64(&b->pk, (uint64_t)INT64_MAX);
}
static void c_batch_float_step(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 4);
    msgpack_pack_double(&b->pk, 1.5);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 100);
    msgpack_pack_uint64(&b->pk, 5);
}
static void c_batch_17_dims(struct buf *b)
{
    batch_head(b, 7);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_array(&b->pk, 17);
    for (int i = 0; i < 17; i++)
        msgpack_pack_uint64(&b->pk, 2);
}
static void c_batch_9_inputs(struct buf *b)
{
    batch_head(b, 8);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_array(&b->pk, 9);
    for (int i = 0; i < 9; i++) {
        msgpack_pack_array(&b->pk, 1);
        msgpack_pack_uint64(&b->pk, 4);
    }
}
static void c_batch_dim_str(struct buf *b)
{
    batch_head(b, 7);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_array(&b->pk, 1);
    s(b, "4");
}
static void c_batch_device_int(struct buf *b)
{
    batch_head(b, 9);
    for (int i = 0; i < 4; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_uint64(&b->pk, 0);
}
static void c_batch_not_list(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_map(&b->pk, 0);
}
static void c_meta_array_value(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "meta");
    msgpack_pack_map(&b->pk, 1);
    s(b, "k");
    msgpack_pack_array(&b->pk, 0);
}
static void c_meta_int_key(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "meta");
    msgpack_pack_map(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 3);
    s(b, "v");
}
static void c_flush_str(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "flush");
    s(b, "1");
}
static void c_bye_neg(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "bye");
    msgpack_pack_map(&b->pk, 1);
    s(b, "dropped");
    msgpack_pack_int64(&b->pk, -1);
}
/* ["flush", 1, {"recorded": R, "sent": 1, "acked": 1, "ops_dropped": OPS}]: OPS by fn. */
static void flush_counters(struct buf *b, int64_t recorded, void (*ops)(struct buf *))
{
    msgpack_pack_array(&b->pk, 3);
    s(b, "flush");
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_map(&b->pk, ops ? 4 : 3);
    s(b, "recorded");
    msgpack_pack_int64(&b->pk, recorded);
    s(b, "sent");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "acked");
    msgpack_pack_uint64(&b->pk, 1);
    if (ops != NULL) {
        s(b, "ops_dropped");
        ops(b);
    }
}
static void c_flush_counters_neg(struct buf *b)
{
    flush_counters(b, -1, NULL);
}
static void ops_row_short(struct buf *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint64(&b->pk, 1);
}
static void c_flush_opdrops_short(struct buf *b)
{
    flush_counters(b, 1, ops_row_short);
}
static void ops_row_over(struct buf *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 4);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, (uint64_t)INT64_MAX + 1);
    msgpack_pack_uint64(&b->pk, 0);
}
static void c_flush_opdrops_over(struct buf *b)
{
    flush_counters(b, 1, ops_row_over);
}
/* [op, calls 2, ns 9, bytes 0, counted 3, 0, 0]: more counted than calls */
static void ops_row_counted_over(struct buf *b)
{
    static const uint64_t row[7] = {1, 2, 9, 0, 3, 0, 0};

    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_array(&b->pk, 7);
    for (int i = 0; i < 7; i++)
        msgpack_pack_uint64(&b->pk, row[i]);
}
static void c_flush_opdrops_counted_over(struct buf *b)
{
    flush_counters(b, 1, ops_row_counted_over);
}
static void ops_huge(struct buf *b)
{
    msgpack_pack_array(&b->pk, PROTO_MAX_OPDROPS + 1);
    for (int i = 0; i <= PROTO_MAX_OPDROPS; i++)
        msgpack_pack_nil(&b->pk);
}
static void c_flush_opdrops_huge(struct buf *b)
{
    flush_counters(b, 1, ops_huge);
}
static void c_report_no_session(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "report");
    msgpack_pack_map(&b->pk, 0);
}
static void c_report_ratio(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "report");
    msgpack_pack_map(&b->pk, 2);
    s(b, "session");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "comm_min_ratio");
    msgpack_pack_double(&b->pk, 1.5);
}
static void c_delete_session_float(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "delete");
    msgpack_pack_map(&b->pk, 1);
    s(b, "session");
    msgpack_pack_double(&b->pk, 1.0);
}
static void c_trailing(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "flush");
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_nil(&b->pk);
}

/* [0, 1, 100, 5, nil, nil, nil, nil, nil, {key: <caller packs the value>}] */
static void ext_head(struct buf *b, const char *key)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_map(&b->pk, 1);
    s(b, key);
}
static void c_ext_string(struct buf *b)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    s(b, "stream=1");
}
static void c_ext_array(struct buf *b)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
}
static void c_ext_int_key(struct buf *b)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_map(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, 1);
}
static void c_ext_stream_negative(struct buf *b)
{
    ext_head(b, "stream");
    msgpack_pack_int64(&b->pk, -7);
}
static void c_ext_stream_str(struct buf *b)
{
    ext_head(b, "stream");
    s(b, "7");
}
static void c_ext_peer_float(struct buf *b)
{
    ext_head(b, "peer");
    msgpack_pack_double(&b->pk, 1.0);
}
static void c_ext_tag_over_int64(struct buf *b)
{
    ext_head(b, "tag");
    msgpack_pack_uint64(&b->pk, (uint64_t)INT64_MAX + 1);
}
static void c_ext_tag_bool(struct buf *b)
{
    ext_head(b, "tag");
    msgpack_pack_true(&b->pk);
}
static void c_ext_comm_array(struct buf *b)
{
    ext_head(b, "comm");
    msgpack_pack_array(&b->pk, 0);
}
static void c_ext_seq_map(struct buf *b)
{
    ext_head(b, "seq");
    msgpack_pack_map(&b->pk, 0);
}
static void c_ext_checksum_bin(struct buf *b)
{
    ext_head(b, "checksum");
    msgpack_pack_bin(&b->pk, 8);
    msgpack_pack_bin_body(&b->pk, "\1\2\3\4\5\6\7\10", 8);
}
static void c_ext_comm_size_zero(struct buf *b)
{
    ext_head(b, "comm_size");
    msgpack_pack_uint64(&b->pk, 0);
}
static void c_ext_comm_size_over(struct buf *b)
{
    ext_head(b, "comm_size");
    msgpack_pack_uint64(&b->pk, (uint64_t)INT32_MAX + 1);
}
static void c_ext_comm_size_negative(struct buf *b)
{
    ext_head(b, "comm_size");
    msgpack_pack_int64(&b->pk, -2);
}
static void c_ext_comm_size_str(struct buf *b)
{
    ext_head(b, "comm_size");
    s(b, "4");
}
static void c_ext_comm_size_float(struct buf *b)
{
    ext_head(b, "comm_size");
    msgpack_pack_double(&b->pk, 2.0);
}
static void c_ext_span_str(struct buf *b)
{
    ext_head(b, "span");
    s(b, "12");
}
static void c_ext_span_negative(struct buf *b)
{
    ext_head(b, "span");
    msgpack_pack_int64(&b->pk, -1);
}
static void c_ext_comm_size_twice(struct buf *b)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_map(&b->pk, 2);
    s(b, "comm_size");
    msgpack_pack_uint64(&b->pk, 2);
    s(b, "comm_size");
    msgpack_pack_uint64(&b->pk, 2);
}
static void c_ext_stream_twice(struct buf *b)
{
    batch_head(b, 10);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b->pk);
    msgpack_pack_map(&b->pk, 2);
    s(b, "stream");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "stream");
    msgpack_pack_uint64(&b->pk, 2);
}
static void c_ext_huge_map_header(struct buf *b)
{
    /* ["batch", [[0, 1, 100, 5, nil, nil, nil, nil, nil, map32 of 2^31 pairs]]] */
    msgpack_sbuffer_write(&b->sb,
                          "\x92\xa5"
                          "batch"
                          "\x91\x9a\x00\x01\x64\x05\xc0\xc0\xc0\xc0\xc0"
                          "\xdf\x80\x00\x00\x00",
                          23);
}

static void c_export_order_bad(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "export");
    msgpack_pack_map(&b->pk, 2);
    s(b, "session");
    msgpack_pack_uint64(&b->pk, 1);
    s(b, "order");
    s(b, "time");
}

static void c_huge_array_header(struct buf *b)
{
    /* ["batch", array32 of 4,294,967,295 entries] with one byte behind it */
    msgpack_sbuffer_write(&b->sb,
                          "\x92\xa5"
                          "batch"
                          "\xdd\xff\xff\xff\xff\x94",
                          13);
}
static void c_huge_map_header(struct buf *b)
{
    msgpack_sbuffer_write(&b->sb,
                          "\x92\xa5"
                          "hello"
                          "\xdf\x7f\xff\xff\xff",
                          12);
}
static void c_huge_string_header(struct buf *b)
{
    msgpack_sbuffer_write(&b->sb,
                          "\x92\xa5"
                          "hello"
                          "\xdb\xff\xff\xff\xf0",
                          12);
}
static void c_deep_nesting(struct buf *b)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "meta");
    for (int i = 0; i < 40; i++)
        msgpack_pack_array(&b->pk, 1);
    msgpack_pack_nil(&b->pk);
}

struct bad_case {
    const char *name;
    void (*build)(struct buf *);
    const char *code;
};

static struct bad_case bad_cases[] = {
    {"not msgpack", c_not_msgpack, PROTO_E_MSGPACK},
    {"cut short", c_cut_short, PROTO_E_MSGPACK},
    {"trailing bytes", c_trailing, PROTO_E_MESSAGE},
    {"not an array", c_not_array, PROTO_E_MESSAGE},
    {"empty array", c_empty_array, PROTO_E_MESSAGE},
    {"type not a string", c_type_not_str, PROTO_E_MESSAGE},
    {"unknown type", c_unknown_type, PROTO_E_TYPE},
    {"hello without proto", c_hello_no_proto, PROTO_E_MESSAGE},
    {"hello proto 2", c_hello_proto2, PROTO_E_VERSION},
    {"hello without session", c_hello_no_session, PROTO_E_MESSAGE},
    {"hello empty session", c_hello_empty_session, PROTO_E_MESSAGE},
    {"hello session 257 bytes", c_hello_long_session, PROTO_E_TOO_LARGE},
    {"hello session invalid utf-8", c_hello_bad_utf8, PROTO_E_MESSAGE},
    {"hello session with NUL", c_hello_nul, PROTO_E_MESSAGE},
    {"hello negative rank", c_hello_neg_rank, PROTO_E_MESSAGE},
    {"hello world as string", c_hello_str_world, PROTO_E_MESSAGE},
    {"hello meta not a map", c_hello_meta_array, PROTO_E_MESSAGE},
    {"hello map with int key", c_hello_map_int_key, PROTO_E_MESSAGE},
    {"ops id over uint32", c_ops_big_id, PROTO_E_MESSAGE},
    {"ops name not string", c_ops_name_int, PROTO_E_MESSAGE},
    {"ops name over 1 KiB", c_ops_long_name, PROTO_E_TOO_LARGE},
    {"ops not a list", c_ops_not_list, PROTO_E_MESSAGE},
    {"entry with 3 fields", c_batch_3_fields, PROTO_E_MESSAGE},
    {"entry negative dur", c_batch_neg_dur, PROTO_E_MESSAGE},
    {"entry start over INT64_MAX", c_batch_huge_start, PROTO_E_MESSAGE},
    {"entry start + dur over INT64_MAX", c_batch_end_past_int64, PROTO_E_MESSAGE},
    {"entry float step", c_batch_float_step, PROTO_E_MESSAGE},
    {"shape with 17 dims", c_batch_17_dims, PROTO_E_TOO_LARGE},
    {"9 input shapes", c_batch_9_inputs, PROTO_E_TOO_LARGE},
    {"shape dim as string", c_batch_dim_str, PROTO_E_MESSAGE},
    {"device as int", c_batch_device_int, PROTO_E_MESSAGE},
    {"batch not a list", c_batch_not_list, PROTO_E_MESSAGE},
    {"ext as string", c_ext_string, PROTO_E_MESSAGE},
    {"ext as array", c_ext_array, PROTO_E_MESSAGE},
    {"ext with int key", c_ext_int_key, PROTO_E_MESSAGE},
    {"ext.stream negative", c_ext_stream_negative, PROTO_E_MESSAGE},
    {"ext.stream string", c_ext_stream_str, PROTO_E_MESSAGE},
    {"ext.peer float", c_ext_peer_float, PROTO_E_MESSAGE},
    {"ext.tag over INT64_MAX", c_ext_tag_over_int64, PROTO_E_MESSAGE},
    {"ext.tag bool", c_ext_tag_bool, PROTO_E_MESSAGE},
    {"ext.comm array", c_ext_comm_array, PROTO_E_MESSAGE},
    {"ext.seq map", c_ext_seq_map, PROTO_E_MESSAGE},
    {"ext.checksum bin", c_ext_checksum_bin, PROTO_E_MESSAGE},
    {"ext.stream given twice", c_ext_stream_twice, PROTO_E_MESSAGE},
    {"ext.comm_size 0", c_ext_comm_size_zero, PROTO_E_MESSAGE},
    {"ext.comm_size 2^31", c_ext_comm_size_over, PROTO_E_MESSAGE},
    {"ext.comm_size negative", c_ext_comm_size_negative, PROTO_E_MESSAGE},
    {"ext.comm_size string", c_ext_comm_size_str, PROTO_E_MESSAGE},
    {"ext.comm_size float", c_ext_comm_size_float, PROTO_E_MESSAGE},
    {"ext.comm_size given twice", c_ext_comm_size_twice, PROTO_E_MESSAGE},
    {"ext.span string", c_ext_span_str, PROTO_E_MESSAGE},
    {"ext.span negative", c_ext_span_negative, PROTO_E_MESSAGE},
    {"ext map header of 2^31 pairs", c_ext_huge_map_header, PROTO_E_TOO_LARGE},
    {"export order \"time\"", c_export_order_bad, PROTO_E_MESSAGE},
    {"meta value array", c_meta_array_value, PROTO_E_MESSAGE},
    {"meta int key", c_meta_int_key, PROTO_E_MESSAGE},
    {"flush seq string", c_flush_str, PROTO_E_MESSAGE},
    {"bye negative dropped", c_bye_neg, PROTO_E_MESSAGE},
    {"flush counters: recorded negative", c_flush_counters_neg, PROTO_E_MESSAGE},
    {"flush ops_dropped row of 3", c_flush_opdrops_short, PROTO_E_MESSAGE},
    {"flush ops_dropped ns over INT64_MAX", c_flush_opdrops_over, PROTO_E_MESSAGE},
    {"flush ops_dropped counted over calls", c_flush_opdrops_counted_over, PROTO_E_MESSAGE},
    {"flush ops_dropped of 65,537 rows", c_flush_opdrops_huge, PROTO_E_TOO_LARGE},
    {"report without session", c_report_no_session, PROTO_E_MESSAGE},
    {"report ratio 1.5", c_report_ratio, PROTO_E_MESSAGE},
    {"delete session float", c_delete_session_float, PROTO_E_MESSAGE},
    {"array header of 2^32-1 entries", c_huge_array_header, PROTO_E_TOO_LARGE},
    {"map header of 2^31 pairs", c_huge_map_header, PROTO_E_TOO_LARGE},
    {"str32 header of 4 GiB", c_huge_string_header, PROTO_E_TOO_LARGE},
    {"40 nested arrays", c_deep_nesting, PROTO_E_MESSAGE},
};

#define N_BAD_CASES (sizeof(bad_cases) / sizeof(bad_cases[0]))

/* Parameters cross into Criterion's worker process: pass indices, not pointers. */
static size_t bad_index[N_BAD_CASES];

/* proto.h's error convention: the negative errno that goes with each wire code. */
static int code_errno(const char *code)
{
    if (strcmp(code, PROTO_E_TOO_LARGE) == 0)
        return -EMSGSIZE;
    if (strcmp(code, PROTO_E_MSGPACK) == 0)
        return -EBADMSG;
    return -EPROTO;
}

ParameterizedTestParameters(proto, malformed)
{
    for (size_t i = 0; i < N_BAD_CASES; i++)
        bad_index[i] = i;
    return cr_make_param_array(size_t, bad_index, N_BAD_CASES);
}

ParameterizedTest(size_t *idx, proto, malformed)
{
    const struct bad_case *c = &bad_cases[*idx];
    struct proto_error err = {0};
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    c->build(&b);
    cr_assert_eq(decode(&b, &m, &err), code_errno(c->code), "%s: decoded", c->name);
    cr_assert_str_eq(err.code, c->code, "%s: got %s (%s)", c->name, err.code, err.message);
    cr_assert_gt(strlen(err.message), 0, "%s: no message", c->name);
    cr_assert_eq(m.type, PROTO_NONE, "%s: message not reset", c->name);
    msgpack_sbuffer_destroy(&b.sb);
}

/* ---- well-formed messages ---------------------------------------------- */

Test(proto, hello_fields_and_defaults)
{
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    hello_head(&b, 5);
    s(&b, "rank");
    msgpack_pack_uint64(&b.pk, 3);
    s(&b, "device");
    s(&b, "gpu:3");
    s(&b, "future_key"); /* unknown keys are ignored */
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_nil(&b.pk);
    s(&b, "host");
    msgpack_pack_nil(&b.pk); /* nil = absent */
    s(&b, "meta");
    msgpack_pack_map(&b.pk, 2);
    s(&b, "model");
    s(&b, "resnet50");
    s(&b, "lr");
    msgpack_pack_double(&b.pk, 0.5);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_HELLO);
    cr_assert_str_eq(m.u.hello.session, "job");
    cr_assert_eq(m.u.hello.rank, 3);
    cr_assert_eq(m.u.hello.world, -1);
    cr_assert_eq(m.u.hello.pid, -1);
    cr_assert_null(m.u.hello.host);
    cr_assert_str_eq(m.u.hello.device, "gpu:3");
    cr_assert_eq(m.u.hello.n_meta, 2);
    cr_assert_str_eq(m.u.hello.meta[0].v.s, "resnet50");
    cr_assert_eq(m.u.hello.meta[1].type, PROTO_V_FLOAT);
    cr_assert_float_eq(m.u.hello.meta[1].v.f, 0.5, 1e-12);
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}

/* Extension: hello "home", the session's home daemon (docs/hosts.md); a number is refused. */
Test(proto, hello_home)
{
    struct proto_hello h = {
        .proto = 1, .session = "job", .rank = -1, .world = -1, .pid = -1, .home = "10.0.0.1:7700"};
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    cr_assert_eq(proto_pack_hello(&b.pk, &h), 0);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_str_eq(m.u.hello.home, "10.0.0.1:7700");
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
    buf_init(&b);
    hello_head(&b, 1);
    s(&b, "home");
    msgpack_pack_uint64(&b.pk, 7700);
    cr_assert_eq(decode(&b, &m, &err), -EPROTO);
    cr_assert(strstr(err.message, "hello.home") != NULL, "%s", err.message);
    msgpack_sbuffer_destroy(&b.sb);
}

Test(proto, entry_defaults_and_elements)
{
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    /* [0, 1, 100, 5, nil, nil, [2,3,4], [[2,3],[3,4]], "gpu:1", nil, "future"] */
    buf_init(&b);
    batch_head(&b, 11);
    msgpack_pack_nil(&b.pk);
    msgpack_pack_nil(&b.pk);
    msgpack_pack_array(&b.pk, 3);
    msgpack_pack_uint64(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 3);
    msgpack_pack_uint64(&b.pk, 4);
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 3);
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 3);
    msgpack_pack_uint64(&b.pk, 4);
    s(&b, "gpu:1");
    msgpack_pack_nil(&b.pk); /* ext: nil is no ext */
    s(&b, "future");         /* fields after ext are reserved: ignored */
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.u.batch.n, 1);
    const struct proto_entry *e = &m.u.batch.entries[0];
    cr_assert_eq(e->step, 0);
    cr_assert_eq(e->op_id, 1);
    cr_assert_eq(e->start_ns, 100);
    cr_assert_eq(e->dur_ns, 5);
    cr_assert_eq(e->elements, 24, "nil elements = product of out_shape (2*3*4)");
    cr_assert_eq(e->mem_bytes, 0, "nil mem_bytes = 0");
    /* canonical msgpack: fixarray(3) 2 3 4 */
    cr_assert_eq(e->out_len, 4);
    cr_assert_eq(memcmp(m.u.batch.blob + e->out_off, "\x93\x02\x03\x04", 4), 0);
    cr_assert_eq(e->in_len, 7);
    cr_assert_eq(memcmp(m.u.batch.blob + e->in_off, "\x92\x92\x02\x03\x92\x03\x04", 7), 0);
    cr_assert_eq(e->dev_len, 5);
    cr_assert_eq(memcmp(m.u.batch.blob + e->dev_off, "gpu:1", 5), 0);
    cr_assert_eq(e->ext_len, 0, "nil ext: none");
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}

Test(proto, entry_four_fields)
{
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    batch_head(&b, 4);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.u.batch.entries[0].elements, 0, "no out_shape: elements 0");
    cr_assert_eq(m.u.batch.entries[0].out_len, 0);
    cr_assert_eq(m.u.batch.entries[0].in_len, 0);
    cr_assert_eq(m.u.batch.entries[0].dev_len, 0);
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}

/* decode → re-encode → decode gives the same batch, byte for byte. */
Test(proto, batch_round_trip)
{
    struct proto_error err;
    struct proto_msg m1, m2;
    struct buf b, b2;

    buf_init(&b);
    batch_head(&b, 9);
    msgpack_pack_uint64(&b.pk, 77);
    msgpack_pack_uint64(&b.pk, 4096);
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 7);
    msgpack_pack_uint64(&b.pk, 11);
    msgpack_pack_nil(&b.pk);
    s(&b, "cpu");
    cr_assert_eq(decode(&b, &m1, &err), 0, "%s", err.message);
    buf_init(&b2);
    cr_assert_eq(proto_pack_batch(&b2.pk, &m1.u.batch), 0);
    cr_assert_eq(proto_decode_bytes(b2.sb.data, b2.sb.size, &m2, &err), 0, "%s", err.message);
    cr_assert_eq(m2.u.batch.n, 1);
    cr_assert_eq(m2.u.batch.entries[0].elements, 77);
    cr_assert_eq(m2.u.batch.entries[0].mem_bytes, 4096);
    cr_assert_eq(m2.u.batch.blob_len, m1.u.batch.blob_len);
    cr_assert_eq(memcmp(m2.u.batch.blob, m1.u.batch.blob, m1.u.batch.blob_len), 0);
    cr_assert_eq(memcmp(&m2.u.batch.entries[0], &m1.u.batch.entries[0], sizeof(struct proto_entry)),
                 0);
    proto_msg_free(&m1);
    proto_msg_free(&m2);
    msgpack_sbuffer_destroy(&b.sb);
    msgpack_sbuffer_destroy(&b2.sb);
}

/*
 * ext comm_size: 1 and 2^31 - 1 are taken by both decoders alike and round
 * trip; 0, 2^31, a negative, a string, a float, a key given twice are refused
 * by both with the same bad_message.
 */
Test(proto, entry_ext_comm_size)
{
    static const uint64_t ok[] = {1, 2, (uint64_t)INT32_MAX};
    static void (*const bad[])(struct buf *) = {c_ext_comm_size_zero,     c_ext_comm_size_over,
                                                c_ext_comm_size_negative, c_ext_comm_size_str,
                                                c_ext_comm_size_float,    c_ext_comm_size_twice};
    struct proto_error ea, eb;
    struct proto_msg ma, mb, mc;
    struct proto_ext x, y;
    struct buf b, b2;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        buf_init(&b);
        ext_head(&b, "comm_size");
        msgpack_pack_uint64(&b.pk, ok[i]);
        cr_assert_eq(proto_decode_bytes(b.sb.data, b.sb.size, &ma, &ea), 0, "%s", ea.message);
        cr_assert_eq(proto_decode_bytes_tree(b.sb.data, b.sb.size, &mb, &eb), 0, "%s", eb.message);
        cr_assert(proto_entry_ext(&ma.u.batch.entries[0], ma.u.batch.blob, &x));
        cr_assert(proto_entry_ext(&mb.u.batch.entries[0], mb.u.batch.blob, &y));
        cr_assert_eq(x.has, PROTO_EXT_COMM_SIZE);
        cr_assert_eq(x.comm_size, ok[i]);
        cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
        buf_init(&b2);
        cr_assert_eq(proto_pack_batch(&b2.pk, &ma.u.batch), 0);
        cr_assert_eq(proto_decode_bytes(b2.sb.data, b2.sb.size, &mc, &ea), 0, "%s", ea.message);
        cr_assert(proto_entry_ext(&mc.u.batch.entries[0], mc.u.batch.blob, &y));
        cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
        proto_msg_free(&ma);
        proto_msg_free(&mb);
        proto_msg_free(&mc);
        msgpack_sbuffer_destroy(&b.sb);
        msgpack_sbuffer_destroy(&b2.sb);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_init(&b);
        bad[i](&b);
        cr_assert_eq(proto_decode_bytes(b.sb.data, b.sb.size, &ma, &ea), -EPROTO, "case %zu", i);
        cr_assert_eq(proto_decode_bytes_tree(b.sb.data, b.sb.size, &mb, &eb), -EPROTO, "case %zu",
                     i);
        cr_assert_str_eq(ea.code, PROTO_E_MESSAGE);
        cr_assert_str_eq(ea.message, eb.message);
        cr_assert(strstr(ea.message, "entry ext.comm_size") != NULL, "%s", ea.message);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

/* ext span: the whole uint64 range, alone, taken by both decoders alike and round trip. */
Test(proto, entry_ext_span)
{
    static const uint64_t ok[] = {0, 1, 123456789, UINT64_MAX};
    struct proto_error ea, eb;
    struct proto_msg ma, mb, mc;
    struct proto_ext x, y;
    struct buf b, b2;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        buf_init(&b);
        ext_head(&b, "span");
        msgpack_pack_uint64(&b.pk, ok[i]);
        cr_assert_eq(proto_decode_bytes(b.sb.data, b.sb.size, &ma, &ea), 0, "%s", ea.message);
        cr_assert_eq(proto_decode_bytes_tree(b.sb.data, b.sb.size, &mb, &eb), 0, "%s", eb.message);
        cr_assert(proto_entry_ext(&ma.u.batch.entries[0], ma.u.batch.blob, &x));
        cr_assert(proto_entry_ext(&mb.u.batch.entries[0], mb.u.batch.blob, &y));
        cr_assert_eq(x.has, PROTO_EXT_SPAN);
        cr_assert_eq(x.span, ok[i]);
        cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
        buf_init(&b2);
        cr_assert_eq(proto_pack_batch(&b2.pk, &ma.u.batch), 0);
        cr_assert_eq(proto_decode_bytes(b2.sb.data, b2.sb.size, &mc, &ea), 0, "%s", ea.message);
        cr_assert(proto_entry_ext(&mc.u.batch.entries[0], mc.u.batch.blob, &y));
        cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
        proto_msg_free(&ma);
        proto_msg_free(&mb);
        proto_msg_free(&mc);
        msgpack_sbuffer_destroy(&b.sb);
        msgpack_sbuffer_destroy(&b2.sb);
    }
}

/* The ext map: every key, nil and unknown keys, the full uint64 range; and its round trip. */
Test(proto, entry_ext_map)
{
    struct proto_error err;
    struct proto_msg m1, m2;
    struct proto_ext x;
    struct buf b, b2;

    /* [0, 1, 100, 5, nil, nil, nil, nil, nil, {...}, "later"] */
    buf_init(&b);
    batch_head(&b, 11);
    for (int i = 0; i < 5; i++)
        msgpack_pack_nil(&b.pk);
    msgpack_pack_map(&b.pk, 8);
    s(&b, "stream");
    msgpack_pack_uint64(&b.pk, 13);
    s(&b, "peer");
    msgpack_pack_uint64(&b.pk, 0);
    s(&b, "tag");
    msgpack_pack_int64(&b.pk, INT64_MIN);
    s(&b, "comm");
    msgpack_pack_uint64(&b.pk, UINT64_MAX);
    s(&b, "seq");
    msgpack_pack_nil(&b.pk); /* nil: absent */
    s(&b, "checksum");
    msgpack_pack_uint64(&b.pk, 0xfedcba9876543210ull);
    s(&b, "unknown");
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_double(&b.pk, 2.5);
    s(&b, "zz");
    s(&b, "skipped too");
    s(&b, "later");
    cr_assert_eq(decode(&b, &m1, &err), 0, "%s", err.message);
    cr_assert(proto_entry_ext(&m1.u.batch.entries[0], m1.u.batch.blob, &x));
    cr_assert_eq(x.has, PROTO_EXT_STREAM | PROTO_EXT_PEER | PROTO_EXT_TAG | PROTO_EXT_COMM |
                            PROTO_EXT_CHECKSUM);
    cr_assert_eq(x.stream, 13);
    cr_assert_eq(x.peer, 0);
    cr_assert_eq(x.tag, INT64_MIN);
    cr_assert_eq(x.comm, UINT64_MAX);
    cr_assert_eq(x.seq, 0);
    cr_assert_eq(x.checksum, 0xfedcba9876543210ull);

    /* re-encoded: 10 fields, a map of the five keys; decodes to the same */
    buf_init(&b2);
    cr_assert_eq(proto_pack_batch(&b2.pk, &m1.u.batch), 0);
    cr_assert_eq(proto_decode_bytes(b2.sb.data, b2.sb.size, &m2, &err), 0, "%s", err.message);
    struct proto_ext y;
    cr_assert(proto_entry_ext(&m2.u.batch.entries[0], m2.u.batch.blob, &y));
    cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
    proto_msg_free(&m1);
    proto_msg_free(&m2);
    msgpack_sbuffer_destroy(&b.sb);
    msgpack_sbuffer_destroy(&b2.sb);

    /* an empty map and a map of unknown keys are no ext */
    for (int k = 0; k < 2; k++) {
        buf_init(&b);
        batch_head(&b, 10);
        for (int i = 0; i < 5; i++)
            msgpack_pack_nil(&b.pk);
        msgpack_pack_map(&b.pk, (size_t)k);
        if (k == 1) {
            s(&b, "other");
            msgpack_pack_uint64(&b.pk, 1);
        }
        cr_assert_eq(decode(&b, &m1, &err), 0, "%s", err.message);
        cr_assert_not(proto_entry_ext(&m1.u.batch.entries[0], m1.u.batch.blob, &x));
        cr_assert_eq(x.has, 0);
        proto_msg_free(&m1);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

/* export's "order": storage by default, "start" or "rank" on request; the packer says it back. */
Test(proto, export_order)
{
    struct proto_request req;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    static const char *const orders[] = {NULL, "storage", "start", "rank"};

    for (int k = 0; k < 4; k++) {
        buf_init(&b);
        msgpack_pack_array(&b.pk, 2);
        s(&b, "export");
        msgpack_pack_map(&b.pk, k ? 2 : 1);
        s(&b, "session");
        msgpack_pack_uint64(&b.pk, 3);
        if (k) {
            s(&b, "order");
            s(&b, orders[k]);
        }
        cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
        cr_assert_eq(m.u.req.by_start, k == 2);
        cr_assert_eq(m.u.req.by_rank, k == 3);
        msgpack_sbuffer_destroy(&b.sb);
    }
    for (int k = 0; k < 2; k++) {
        proto_request_init(&req);
        req.session.id = 3;
        req.by_start = k == 0;
        req.by_rank = k == 1;
        buf_init(&b);
        cr_assert_eq(proto_pack_request(&b.pk, PROTO_EXPORT, &req), 0);
        cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
        cr_assert_eq(m.u.req.by_start, k == 0);
        cr_assert_eq(m.u.req.by_rank, k == 1);
        cr_assert_eq(m.u.req.session.id, 3);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

/* report's "late" (Part 3, "report option late"): a boolean, nil is false; the packer says it. */
Test(proto, report_late)
{
    struct proto_request req;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    for (int k = 0; k < 5; k++) { /* absent, true, false, nil, a string */
        buf_init(&b);
        msgpack_pack_array(&b.pk, 2);
        s(&b, "report");
        msgpack_pack_map(&b.pk, k ? 2 : 1);
        s(&b, "session");
        msgpack_pack_uint64(&b.pk, 3);
        if (k) {
            s(&b, "late");
            if (k == 1)
                msgpack_pack_true(&b.pk);
            else if (k == 2)
                msgpack_pack_false(&b.pk);
            else if (k == 3)
                msgpack_pack_nil(&b.pk);
            else
                s(&b, "yes");
        }
        if (k == 4) {
            cr_assert_lt(decode(&b, &m, &err), 0);
            cr_assert_str_eq(err.code, PROTO_E_MESSAGE);
        } else {
            cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
            cr_assert_eq(m.u.req.late, k == 1);
        }
        msgpack_sbuffer_destroy(&b.sb);
    }
    for (int k = 0; k < 2; k++) {
        proto_request_init(&req);
        req.session.id = 3;
        req.late = k == 1;
        req.analysis.on = true;
        buf_init(&b);
        cr_assert_eq(proto_pack_request(&b.pk, PROTO_REPORT, &req), 0);
        cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
        cr_assert_eq(m.u.req.late, k == 1);
        cr_assert(m.u.req.analysis.on);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

Test(proto, request_defaults_and_refs)
{
    struct proto_request req, *r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    proto_request_init(&req);
    req.session.name = "job-42";
    req.top = 3;
    req.comm_min_ratio = 0.25;
    req.mem_threshold = 1 << 20;
    buf_init(&b);
    cr_assert_eq(proto_pack_request(&b.pk, PROTO_REPORT, &req), 0);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    r = &m.u.req;
    cr_assert_str_eq(r->session.name, "job-42");
    cr_assert_eq(r->top, 3);
    cr_assert_float_eq(r->comm_min_ratio, 0.25, 1e-12);
    cr_assert_eq(r->mem_threshold, 1 << 20);
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);

    /* ["report", {"session": 7}]: the defaults of PROTOCOL.md */
    buf_init(&b);
    msgpack_pack_array(&b.pk, 2);
    s(&b, "report");
    msgpack_pack_map(&b.pk, 1);
    s(&b, "session");
    msgpack_pack_uint64(&b.pk, 7);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.u.req.session.id, 7);
    cr_assert_null(m.u.req.session.name);
    cr_assert_eq(m.u.req.top, 10);
    cr_assert_float_eq(m.u.req.comm_min_ratio, 0.0, 1e-12);
    cr_assert_eq(m.u.req.mem_threshold, 0);
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}

Test(proto, replies_round_trip)
{
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    proto_pack_welcome(&b.pk, 7, 3);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_WELCOME);
    cr_assert_eq(m.u.welcome.session_id, 7);
    cr_assert_eq(m.u.welcome.process_id, 3);
    msgpack_sbuffer_destroy(&b.sb);

    buf_init(&b);
    proto_pack_ack(&b.pk, 12, 3456);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_ACK);
    cr_assert_eq(m.u.ack.seq, 12);
    cr_assert_eq(m.u.ack.stored, 3456);
    msgpack_sbuffer_destroy(&b.sb);

    buf_init(&b);
    proto_pack_error(&b.pk, PROTO_E_UNKNOWN_OP, "op id 9");
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_ERROR);
    cr_assert_str_eq(m.u.error.code, "unknown_op");
    cr_assert_str_eq(m.u.error.message, "op id 9");
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}

Test(proto, utf8)
{
    cr_assert(proto_utf8_valid("gpu:0", 5));
    cr_assert(proto_utf8_valid("\xc3\xa9t\xc3\xa9", 5));    /* été */
    cr_assert(proto_utf8_valid("\xf0\x9f\x94\xa5", 4));     /* U+1F525 */
    cr_assert_not(proto_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
    cr_assert_not(proto_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    cr_assert_not(proto_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    cr_assert_not(proto_utf8_valid("\xe2\x82", 2));         /* cut short */
    cr_assert_not(proto_utf8_valid("a\0b", 3));             /* NUL */
}

/* ---- the reader ---------------------------------------------------------- */

static void feed(struct proto_reader *r, const char *p, size_t n)
{
    char *dst = proto_reader_buffer(r, n);
    cr_assert_not_null(dst);
    memcpy(dst, p, n);
    proto_reader_commit(r, n);
}

/*
 * A batch of n entries, then ["flush", 7]. Entry i is [i, i % 7, 1000 + i,
 * 2 * i], and every third one [i, i % 7, 1000 + i, 2 * i, nil, nil,
 * [i % 5 + 1], nil, "d<i % 10>"] (a shape and a device in the blob); entry
 * `bad` (>= n: none) has op_id 2^32, over its range.
 */
static void varied_batch_then_flush(struct buf *b, size_t n, size_t bad)
{
    char dev[4];

    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&b->pk, i % 3 == 0 ? 9 : 4);
        msgpack_pack_uint64(&b->pk, i);
        msgpack_pack_uint64(&b->pk, i == bad ? (1ull << 32) : i % 7);
        msgpack_pack_uint64(&b->pk, 1000 + i);
        msgpack_pack_uint64(&b->pk, 2 * i);
        if (i % 3 != 0)
            continue;
        msgpack_pack_nil(&b->pk);
        msgpack_pack_nil(&b->pk);
        msgpack_pack_array(&b->pk, 1);
        msgpack_pack_uint64(&b->pk, i % 5 + 1);
        msgpack_pack_nil(&b->pk);
        snprintf(dev, sizeof(dev), "d%zu", i % 10);
        s(b, dev);
    }
    msgpack_pack_array(&b->pk, 2);
    s(b, "flush");
    msgpack_pack_uint64(&b->pk, 7);
}

/* The entries of bt are those of varied_batch_then_flush() from the message's entry `first`. */
static void check_varied(const struct proto_batch *bt, size_t first)
{
    char dev[4];

    for (size_t k = 0; k < bt->n; k++) {
        const struct proto_entry *e = &bt->entries[k];
        size_t i = first + k;

        cr_assert_eq(e->step, i);
        cr_assert_eq(e->op_id, i % 7);
        cr_assert_eq(e->start_ns, 1000 + i);
        cr_assert_eq(e->dur_ns, 2 * i);
        cr_assert_eq(e->elements, i % 3 == 0 ? i % 5 + 1 : 0, "entry %zu", i);
        if (i % 3 != 0) {
            cr_assert_eq(e->out_len, 0);
            cr_assert_eq(e->dev_len, 0);
            continue;
        }
        cr_assert_eq(e->out_len, 2);
        cr_assert_eq((uint8_t)bt->blob[e->out_off], 0x91);
        cr_assert_eq((uint8_t)bt->blob[e->out_off + 1], i % 5 + 1);
        snprintf(dev, sizeof(dev), "d%zu", i % 10);
        cr_assert_eq(e->dev_len, 2);
        cr_assert_eq(memcmp(bt->blob + e->dev_off, dev, 2), 0, "entry %zu", i);
    }
}

/*
 * proto_reader_set_slice: a batch of more entries than the slice comes out as
 * consecutive batch messages of at most that many entries (2,500 with a slice
 * of 1,000: 1,000, 1,000, 500), each with its own blob, in order, and only
 * once the whole batch is buffered (fed byte by byte: not one slice before
 * its last byte); then the flush behind it. A slice of 2,500, or 0: one
 * message, whole.
 */
Test(proto, reader_slices_a_batch_over_its_bound)
{
    const size_t n = 2500, slices[] = {1000, 2500, 0}, parts_want[] = {3, 1, 1};
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    varied_batch_then_flush(&b, n, SIZE_MAX);
    for (size_t t = 0; t < 3; t++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            size_t fed = 0, got = 0, parts = 0, slice = slices[t];
            int rc = 0;

            cr_assert_eq(proto_reader_init(&r, 0), 0);
            proto_reader_set_slice(&r, slice);
            if (bytewise) {
                while (rc == 0 && fed < b.sb.size) {
                    feed(&r, b.sb.data + fed++, 1);
                    rc = proto_reader_next(&r, &m, &err);
                }
                cr_assert_eq(fed, b.sb.size - 8, "a slice after %zu bytes", fed); /* flush: 8 */
            } else {
                feed(&r, b.sb.data, b.sb.size);
                fed = b.sb.size;
                rc = proto_reader_next(&r, &m, &err);
            }
            for (;;) {
                cr_assert_eq(rc, 1, "rc %d after %zu entries: %s", rc, got, err.message);
                if (m.type != PROTO_BATCH)
                    break;
                cr_assert_eq(m.u.batch.n, slice == 0 || n - got < slice ? n - got : slice);
                check_varied(&m.u.batch, got);
                got += m.u.batch.n;
                parts++;
                proto_msg_free(&m);
                rc = proto_reader_next(&r, &m, &err);
                if (rc == 0 && fed < b.sb.size) {
                    feed(&r, b.sb.data + fed, b.sb.size - fed);
                    fed = b.sb.size;
                    rc = proto_reader_next(&r, &m, &err);
                }
            }
            cr_assert_eq(got, n);
            cr_assert_eq(parts, parts_want[t], "slice %zu: %zu parts", slice, parts);
            cr_assert_eq(m.type, PROTO_FLUSH);
            cr_assert_eq(m.u.flush_seq, 7);
            proto_msg_free(&m);
            cr_assert_eq(proto_reader_next(&r, &m, &err), 0);
            proto_reader_deinit(&r);
        }
    }
    msgpack_sbuffer_destroy(&b.sb);
}

/*
 * A bad entry in a sliced batch's third slice (entry 2,007 of 2,500, slice
 * 1,000) fails the batch before any slice of it is returned, with the error a
 * batch read whole gets (the same code and words, naming the entry); a batch
 * whose entries are not all buffered returns nothing yet.
 */
Test(proto, reader_slicing_checks_every_entry_first)
{
    struct proto_error err, whole;
    struct proto_reader r;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    varied_batch_then_flush(&b, 2500, 2007);
    for (size_t slice = 0; slice <= 1000; slice += 1000) {
        struct proto_error *e = slice ? &err : &whole;

        cr_assert_eq(proto_reader_init(&r, 0), 0);
        proto_reader_set_slice(&r, slice);
        feed(&r, b.sb.data, b.sb.size - 9); /* all but the last entry's last byte, and flush */
        cr_assert_eq(proto_reader_next(&r, &m, e), 0);
        feed(&r, b.sb.data + b.sb.size - 9, 9);
        cr_assert_eq(proto_reader_next(&r, &m, e), -EPROTO);
        cr_assert_eq(m.type, PROTO_NONE);
        cr_assert_null(m.u.batch.entries);
        proto_reader_deinit(&r);
    }
    cr_assert_str_eq(err.code, PROTO_E_MESSAGE);
    cr_assert_str_eq(err.code, whole.code);
    cr_assert_str_eq(err.message, whole.message);
    cr_assert_not_null(strstr(err.message, "(entry 2007)"), "%s", err.message);
    msgpack_sbuffer_destroy(&b.sb);
}

struct seen {
    size_t entries, calls;
    uint64_t refuse_step; /* refuse the entry of this step (UINT64_MAX: none) */
};

/* proto_reader_set_check's callback: parts must be consecutive; refuses seen->refuse_step. */
static int check_parts(void *ctx, const struct proto_batch *b, size_t first,
                       struct proto_error *err)
{
    struct seen *s = ctx;

    cr_assert_eq(first, s->entries, "part %zu starts at %zu, not after the last", s->calls, first);
    s->calls++;
    for (size_t i = 0; i < b->n; i++) {
        cr_assert_eq(b->entries[i].step, first + i);
        if (b->entries[i].step == s->refuse_step) {
            err->code = PROTO_E_UNKNOWN_OP;
            snprintf(err->message, sizeof(err->message), "refused entry %zu", first + i);
            return -EPROTO;
        }
    }
    s->entries += b->n;
    return 0;
}

/*
 * proto_reader_set_check: called on every entry of a sliced batch, in
 * consecutive parts, before any slice is returned; its error is the batch's
 * (no slice returned). A batch within the slice is not checked this way.
 */
Test(proto, reader_check_sees_every_entry_before_a_slice)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    varied_batch_then_flush(&b, 2500, SIZE_MAX);
    for (int refuse = 0; refuse < 2; refuse++) {
        struct seen s = {0, 0, refuse ? 2400 : UINT64_MAX};

        cr_assert_eq(proto_reader_init(&r, 0), 0);
        proto_reader_set_slice(&r, 1000);
        proto_reader_set_check(&r, check_parts, &s);
        feed(&r, b.sb.data, b.sb.size);
        if (refuse) {
            cr_assert_eq(proto_reader_next(&r, &m, &err), -EPROTO);
            cr_assert_str_eq(err.code, PROTO_E_UNKNOWN_OP);
            cr_assert_str_eq(err.message, "refused entry 2400");
            cr_assert_null(m.u.batch.entries);
        } else {
            cr_assert_eq(proto_reader_next(&r, &m, &err), 1);
            cr_assert_eq(s.entries, 2500, "every entry checked before the first slice");
            cr_assert_eq(m.u.batch.n, 1000);
            proto_msg_free(&m);
        }
        proto_reader_deinit(&r);
    }
    {
        struct seen s = {0, 0, UINT64_MAX};

        cr_assert_eq(proto_reader_init(&r, 0), 0);
        proto_reader_set_slice(&r, 2500);
        proto_reader_set_check(&r, check_parts, &s);
        feed(&r, b.sb.data, b.sb.size);
        cr_assert_eq(proto_reader_next(&r, &m, &err), 1);
        cr_assert_eq(m.u.batch.n, 2500);
        cr_assert_eq(s.calls, 0);
        proto_msg_free(&m);
        proto_reader_deinit(&r);
    }
    msgpack_sbuffer_destroy(&b.sb);
}

Test(proto, reader_split_and_pipelined)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    for (uint64_t i = 0; i < 3; i++) {
        msgpack_pack_array(&b.pk, 2);
        s(&b, "flush");
        msgpack_pack_uint64(&b.pk, 1000 + i);
    }
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    /* one byte at a time for the first message, then the rest at once */
    size_t first = b.sb.size / 3, i;
    for (i = 0; i + 1 < first; i++) {
        feed(&r, b.sb.data + i, 1);
        cr_assert_eq(proto_reader_next(&r, &m, &err), 0, "complete after %zu bytes", i + 1);
    }
    feed(&r, b.sb.data + i, b.sb.size - i);
    for (uint64_t k = 0; k < 3; k++) {
        cr_assert_eq(proto_reader_next(&r, &m, &err), 1);
        cr_assert_eq(m.type, PROTO_FLUSH);
        cr_assert_eq(m.u.flush_seq, 1000 + k);
        proto_msg_free(&m);
    }
    cr_assert_eq(proto_reader_next(&r, &m, &err), 0);
    proto_reader_deinit(&r);
    msgpack_sbuffer_destroy(&b.sb);
}

/* A message over the limit is refused while it arrives, long before it is whole. */
Test(proto, reader_bounds_message_as_it_arrives)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    static char chunk[64 << 10];
    /* ["batch", str32 of 8 MiB...] */
    const char head[] = "\x92\xa5"
                        "batch"
                        "\xdb\x00\x80\x00\x00";
    size_t fed = sizeof(head) - 1;
    int rc = 0;

    cr_assert_eq(proto_reader_init(&r, 1 << 20), 0);
    feed(&r, head, sizeof(head) - 1);
    while (fed < (8u << 20) && (rc = proto_reader_next(&r, &m, &err)) == 0) {
        feed(&r, chunk, sizeof(chunk));
        fed += sizeof(chunk);
    }
    cr_assert_eq(rc, -EMSGSIZE);
    cr_assert_str_eq(err.code, PROTO_E_TOO_LARGE);
    /* refused within one read of the 1 MiB limit */
    cr_assert_leq(fed, (1u << 20) + 2 * sizeof(chunk), "fed %zu bytes before refusing", fed);
    proto_reader_deinit(&r);
}

Test(proto, reader_rejects_garbage)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;

    cr_assert_eq(proto_reader_init(&r, 0), 0);
    feed(&r, "\xc1\xc1\xc1", 3);
    cr_assert_eq(proto_reader_next(&r, &m, &err), -EBADMSG);
    cr_assert_str_eq(err.code, PROTO_E_MSGPACK);
    proto_reader_deinit(&r);
}

/* ---- the reader's byte scanner: incremental, O(bytes), never too strict ---- */

/* Feeds buf in pieces of `step` bytes; returns the first non-zero proto_reader_next() result
 * (1: a message, left in *m; -1: an error) or 0, and how many bytes were fed by then. */
static int feed_steps(struct proto_reader *r, const char *buf, size_t len, size_t step,
                      struct proto_msg *m, struct proto_error *err, size_t *fed)
{
    int rc = 0;

    for (*fed = 0; *fed < len && rc == 0;) {
        size_t n = len - *fed < step ? len - *fed : step;
        feed(r, buf + *fed, n);
        *fed += n;
        rc = proto_reader_next(r, m, err);
    }
    return rc;
}

/* A huge header split across reads, one byte at a time: refused as soon as it is whole. */
Test(proto, scanner_header_split_across_reads)
{
    static const char bytes[] = "\x92\xa5"
                                "batch"
                                "\xdd\xff\xff\xff\xff\x94\x00\x01\x02\x03";
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    size_t fed;

    cr_assert_eq(proto_reader_init(&r, 0), 0);
    cr_assert_eq(feed_steps(&r, bytes, sizeof(bytes) - 1, 1, &m, &err, &fed), -EMSGSIZE);
    cr_assert_str_eq(err.code, PROTO_E_TOO_LARGE);
    cr_assert_eq(fed, 12, "refused after %zu bytes, not at the header's last byte", fed);
    /* the error sticks: later bytes do not make the stream good again */
    feed(&r,
         "\x91\xa5"
         "flush",
         7);
    cr_assert_eq(proto_reader_next(&r, &m, &err), -EMSGSIZE);
    proto_reader_deinit(&r);
}

/* The bound is what is left of max_msg: 1,000 entries announced fit in 4 MiB, not in 512 B. */
Test(proto, scanner_bound_is_the_message_limit)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;
    size_t fed;

    buf_init(&b);
    msgpack_pack_array(&b.pk, 2);
    s(&b, "batch");
    msgpack_pack_array(&b.pk, 1000);
    cr_assert_eq(proto_reader_init(&r, 512), 0);
    cr_assert_eq(feed_steps(&r, b.sb.data, b.sb.size, b.sb.size, &m, &err, &fed), -EMSGSIZE);
    cr_assert_str_eq(err.code, PROTO_E_TOO_LARGE);
    proto_reader_deinit(&r);
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    cr_assert_eq(feed_steps(&r, b.sb.data, b.sb.size, b.sb.size, &m, &err, &fed), 0,
                 "a header that can be honoured was refused: %s", err.message);
    proto_reader_deinit(&r);
    msgpack_sbuffer_destroy(&b.sb);
}

/* A batch of 350,000 entries (~3.4 MiB, under the 4 MiB limit) in odd-sized reads decodes. */
Test(proto, scanner_accepts_a_large_valid_batch)
{
    const size_t n = 350000;
    struct proto_reader r;
    struct proto_error err = {0};
    struct proto_msg m;
    struct buf b;
    size_t fed;

    buf_init(&b);
    msgpack_pack_array(&b.pk, 2);
    s(&b, "batch");
    msgpack_pack_array(&b.pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&b.pk, 4);
        msgpack_pack_uint64(&b.pk, i & 0x7f);
        msgpack_pack_uint64(&b.pk, 1);
        msgpack_pack_uint64(&b.pk, 1000 + (i & 0xff));
        msgpack_pack_uint64(&b.pk, 1 + (i & 0x7f));
    }
    cr_assert_lt(b.sb.size, PROTO_MAX_MSG);
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    cr_assert_eq(feed_steps(&r, b.sb.data, b.sb.size, 16381, &m, &err, &fed), 1, "%s: %s",
                 err.code ? err.code : "need more", err.message);
    cr_assert_eq(m.type, PROTO_BATCH);
    cr_assert_eq(m.u.batch.n, n);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    msgpack_sbuffer_destroy(&b.sb);
}

/* The scanner's state restarts with every message: 20,000 pipelined messages (many
 * more elements in all than one message may hold) in 7-byte reads all decode. */
Test(proto, scanner_state_restarts_per_message)
{
    const uint64_t n = 20000;
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    struct buf b;
    uint64_t got = 0;

    buf_init(&b);
    for (uint64_t i = 0; i < n; i++) {
        msgpack_pack_array(&b.pk, 2);
        s(&b, "meta");
        msgpack_pack_map(&b.pk, 1);
        s(&b, "k");
        sn(&b, "value-of-a-string", 5 + i % 12);
    }
    cr_assert_eq(proto_reader_init(&r, 64), 0); /* each message is < 64 bytes */
    for (size_t off = 0; off < b.sb.size; off += 7) {
        feed(&r, b.sb.data + off, b.sb.size - off < 7 ? b.sb.size - off : 7);
        int rc;
        while ((rc = proto_reader_next(&r, &m, &err)) == 1) {
            cr_assert_eq(m.type, PROTO_META);
            proto_msg_free(&m);
            got++;
        }
        cr_assert_eq(rc, 0, "message %llu: %s: %s", (unsigned long long)got, err.code, err.message);
    }
    cr_assert_eq(got, n);
    proto_reader_deinit(&r);
    msgpack_sbuffer_destroy(&b.sb);
}

/* Unknown hello keys may carry nested values (forward compatibility) up to the scanner's
 * depth; one level more is refused, split reads or not. */
Test(proto, scanner_depth_limit)
{
    for (int extra = 0; extra <= 1; extra++) {
        /* hello array (1) and map (2) hold the value: PROTO_SCAN_DEPTH - 2 arrays fit */
        int depth = PROTO_SCAN_DEPTH - 2 + extra;
        struct proto_reader r;
        struct proto_error err = {0};
        struct proto_msg m;
        struct buf b;
        size_t fed;

        buf_init(&b);
        hello_head(&b, 1);
        s(&b, "x-future");
        for (int i = 0; i < depth; i++)
            msgpack_pack_array(&b.pk, 1);
        msgpack_pack_nil(&b.pk);
        cr_assert_eq(proto_reader_init(&r, 0), 0);
        int rc = feed_steps(&r, b.sb.data, b.sb.size, 3, &m, &err, &fed);
        if (extra == 0) {
            cr_assert_eq(rc, 1, "depth %d refused: %s", depth, err.message);
            cr_assert_eq(m.type, PROTO_HELLO);
            proto_msg_free(&m);
        } else {
            cr_assert_eq(rc, -EPROTO, "depth %d accepted", depth);
            cr_assert_str_eq(err.code, PROTO_E_MESSAGE);
        }
        proto_reader_deinit(&r);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

/* Every kind of header the scanner must size right: str8/16/32, bin, ext, fixext, float,
 * int widths, in one message split at every byte. */
Test(proto, scanner_sizes_every_header_kind)
{
    /* keys "a".."k": fixstr 0xa1 written \241, so that the letter is not read as hex */
    static const char meta[] = "\x92\xa4meta\x8b"
                               "\241a\xd9\x03xyz"                           /* str8 */
                               "\241b\xda\x00\x02xy"                        /* str16 */
                               "\241c\xdb\x00\x00\x00\x01x"                 /* str32 */
                               "\241d\xcb\x3f\xf8\0\0\0\0\0\0"              /* float64 */
                               "\241e\xca\x3f\xc0\0\0"                      /* float32 */
                               "\241f\xcd\x01\x00"                          /* uint16 */
                               "\241g\xd2\xff\xff\xff\xfe"                  /* int32 */
                               "\241h\xcf\0\0\0\0\0\0\0\x01"                /* uint64 */
                               "\241i\xc3"                                  /* true */
                               "\241j\xd0\x80"                              /* int8 */
                               "\241k\xd3\xff\xff\xff\xff\xff\xff\xff\xff"; /* int64 */
    static const char ext[] = "\x93\xa3ops\x90\xc7\x02\x05xy"; /* ext8 after the known part */
    struct proto_reader r;
    struct proto_error err = {0};
    struct proto_msg m;

    for (size_t split = 1; split < sizeof(meta) - 1; split++) {
        size_t fed;
        cr_assert_eq(proto_reader_init(&r, 0), 0);
        feed(&r, meta, split);
        int rc = proto_reader_next(&r, &m, &err);
        if (rc == 0)
            rc = feed_steps(&r, meta + split, sizeof(meta) - 1 - split, 1, &m, &err, &fed);
        cr_assert_eq(rc, 1, "split at %zu: %s", split, err.message);
        cr_assert_eq(m.type, PROTO_META);
        cr_assert_eq(m.u.meta.n, 11);
        proto_msg_free(&m);
        proto_reader_deinit(&r);
    }
    /* an ext value the decoder ignores (a third element of ops) is sized right too */
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    feed(&r, ext, sizeof(ext) - 1);
    cr_assert_eq(proto_reader_next(&r, &m, &err), 1, "%s", err.message);
    cr_assert_eq(m.type, PROTO_OPS);
    proto_msg_free(&m);
    feed(&r,
         "\x92\xa5"
         "flush\x07",
         8);
    cr_assert_eq(proto_reader_next(&r, &m, &err), 1, "the message after the ext: %s", err.message);
    cr_assert_eq(m.type, PROTO_FLUSH);
    proto_reader_deinit(&r);
}

/* A message of exactly max_msg bytes is taken, nested containers and all; one byte less of
 * limit refuses it, and a string whose body cannot fit is refused at its header. */
Test(proto, scanner_exact_limit)
{
    struct proto_reader r;
    struct proto_error err = {0};
    struct proto_msg m;
    struct buf b;
    size_t fed;

    buf_init(&b);
    batch_head(&b, 9); /* ["batch", [[0, 1, 100, 5, nil, nil, [2, 3], [[4]], "gpu:0"]]] */
    msgpack_pack_nil(&b.pk);
    msgpack_pack_nil(&b.pk);
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 2);
    msgpack_pack_uint64(&b.pk, 3);
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_uint64(&b.pk, 4);
    s(&b, "gpu:0");
    for (size_t step = 1; step <= b.sb.size; step += b.sb.size - 1) {
        cr_assert_eq(proto_reader_init(&r, b.sb.size), 0);
        cr_assert_eq(feed_steps(&r, b.sb.data, b.sb.size, step, &m, &err, &fed), 1,
                     "a message of exactly the limit refused (reads of %zu): %s", step,
                     err.message);
        proto_msg_free(&m);
        proto_reader_deinit(&r);
        cr_assert_eq(proto_reader_init(&r, b.sb.size - 1), 0);
        cr_assert_eq(feed_steps(&r, b.sb.data, b.sb.size, step, &m, &err, &fed), -EMSGSIZE);
        cr_assert_str_eq(err.code, PROTO_E_TOO_LARGE);
        /* the last element is "gpu:0": its header already shows it cannot fit */
        if (step == 1)
            cr_assert_eq(fed, b.sb.size - 5, "refused after %zu bytes", fed);
        proto_reader_deinit(&r);
    }
    msgpack_sbuffer_destroy(&b.sb);
}

/* ---- one pass vs object tree: the same answer for every input ------------ */

/*
 * Batches are decoded in one pass over their bytes (proto/onepass.c); the
 * object-tree path (proto_decode_bytes_tree(), a reader with .tree set) is
 * the reference. Many generated batches, valid and not, in every encoding
 * msgpack allows (non-canonical integers and headers too), and mutations of
 * each (a byte changed, cut, inserted), must get the same return, error code
 * and message, and the same batch byte for byte, both ways, whole and through
 * readers fed in random pieces.
 */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t below(uint64_t n)
{
    return rnd() % n;
}

/* Half the messages are made to be valid: no field gets a value out of its rules. */
static bool clean;

/* True once in n draws, never for a clean message. */
static bool oops(uint64_t n)
{
    return !clean && below(n) == 0;
}

static void raw(struct buf *b, const void *p, size_t n)
{
    msgpack_sbuffer_write(&b->sb, p, n);
}

/* An array header, canonical or not. */
static void g_array(struct buf *b, uint32_t n)
{
    uint8_t h[5];

    switch (below(8)) {
    case 0:
        h[0] = 0xdc, h[1] = (uint8_t)(n >> 8), h[2] = (uint8_t)n;
        raw(b, h, n > 0xffff ? 0 : 3);
        if (n > 0xffff)
            msgpack_pack_array(&b->pk, n);
        return;
    case 1:
        h[0] = 0xdd, h[1] = (uint8_t)(n >> 24), h[2] = (uint8_t)(n >> 16);
        h[3] = (uint8_t)(n >> 8), h[4] = (uint8_t)n;
        raw(b, h, 5);
        return;
    default:
        msgpack_pack_array(&b->pk, n);
    }
}

/* An integer in some encoding: unsigned or signed widths, any magnitude, or negative. */
static void g_int(struct buf *b)
{
    static const uint64_t tops[] = {1, 0x80, 0x100, 0x10000, 0x100000000u, 0};
    uint64_t v = rnd(), top = tops[below(6)];
    uint8_t h[9];

    if (top != 0)
        v %= top;
    switch (below(10)) {
    case 0: /* a wider unsigned encoding than needed */
        h[0] = 0xcf;
        for (int i = 0; i < 8; i++)
            h[1 + i] = (uint8_t)(v >> (56 - 8 * i));
        raw(b, h, 9);
        return;
    case 1: /* int8/int16/int32/int64 of a non-negative value */
        h[0] = (uint8_t)(0xd0 + below(4));
        for (int i = 0, k = 1 << (h[0] - 0xd0); i < k; i++)
            h[1 + i] = (uint8_t)((v & (UINT64_MAX >> (65 - 8 * k))) >> (8 * (k - 1 - i)));
        raw(b, h, 1 + (1u << (h[0] - 0xd0)));
        return;
    case 2:
        msgpack_pack_int64(&b->pk, -(int64_t)(v % 1000) - 1);
        return;
    case 3:
        msgpack_pack_uint64(&b->pk, (uint64_t)INT64_MAX + below(3) - 1);
        return;
    case 4:
        msgpack_pack_uint64(&b->pk, UINT32_MAX + below(3) - 1);
        return;
    default:
        msgpack_pack_uint64(&b->pk, v);
    }
}

/* Any value at all, nested up to depth. */
static void g_any(struct buf *b, int depth)
{
    switch (below(depth > 0 ? 10 : 7)) {
    case 0:
        msgpack_pack_nil(&b->pk);
        return;
    case 1:
        msgpack_pack_true(&b->pk);
        return;
    case 2:
        msgpack_pack_double(&b->pk, 1.5);
        return;
    case 3:
        msgpack_pack_float(&b->pk, 2.5f);
        return;
    case 4:
        sn(b, "gpu:0\xff", below(7));
        return;
    case 5:
        msgpack_pack_bin(&b->pk, 3);
        msgpack_pack_bin_body(&b->pk, "abc", 3);
        return;
    case 6:
        if (below(2))
            raw(b, "\xd4\x01\x02", 3); /* fixext 1 */
        else
            g_int(b);
        return;
    case 7:
    case 8: {
        uint32_t n = (uint32_t)below(4);
        g_array(b, n);
        for (uint32_t i = 0; i < n; i++)
            g_any(b, depth - 1);
        return;
    }
    default: {
        uint32_t n = (uint32_t)below(3);
        msgpack_pack_map(&b->pk, n);
        for (uint32_t i = 0; i < 2 * n; i++)
            g_any(b, depth - 1);
        return;
    }
    }
}

/* A field that is mostly an unsigned integer, sometimes nil or anything. */
static void g_field(struct buf *b)
{
    uint64_t k = below(20);

    if (k == 0)
        msgpack_pack_nil(&b->pk);
    else if (k == 1 && !clean)
        g_any(b, 2);
    else if (k < 8 && !clean)
        g_int(b);
    else
        msgpack_pack_uint64(&b->pk, below(1000));
}

static void g_shape(struct buf *b)
{
    uint32_t n = oops(8) ? (uint32_t)below(18) : (uint32_t)below(4);

    if (oops(30)) {
        g_any(b, 1);
        return;
    }
    g_array(b, n);
    for (uint32_t i = 0; i < n; i++)
        g_field(b);
}

static void g_device(struct buf *b)
{
    static char name[1100];
    size_t n;

    switch (clean ? 4 + below(8) : below(12)) {
    case 0:
        g_any(b, 1);
        return;
    case 1:
        n = PROTO_MAX_NAME - 1 + below(3);
        memset(name, 'd', n);
        sn(b, name, n);
        return;
    case 2:
        sn(b, "gpu\0", 4); /* NUL */
        return;
    case 3:
        sn(b, "", 0);
        return;
    default:
        s(b, below(2) ? "gpu:0" : "gpu:1");
    }
}

static void g_ext(struct buf *b)
{
    static const char *const keys[] = {"stream",   "peer",     "tag",      "comm",
                                       "seq",      "id",       "parent",   "launcher",
                                       "checksum", "x-future", "comm_size"};
    uint32_t n = (uint32_t)below(5);

    if (oops(20)) {
        g_any(b, 1);
        return;
    }
    msgpack_pack_map(&b->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        size_t k = below(11);
        if (oops(25))
            g_any(b, 1); /* a key that is (likely) not a string */
        else
            s(b, clean && i > 0 ? keys[9] : keys[k]); /* clean: no key twice */
        if (oops(6) || (clean && k == 9))
            g_any(b, 1);
        else if (k == 10 && clean) /* comm_size: 1 .. 2^31 - 1 */
            msgpack_pack_uint64(&b->pk, 1 + below(64));
        else if (k == 10 && oops(4)) /* its range's edges */
            msgpack_pack_uint64(&b->pk, below(2) ? 0 : (uint64_t)INT32_MAX + below(2));
        else
            g_field(b);
    }
}

static void g_entry(struct buf *b)
{
    static const uint32_t widths[] = {4, 5, 6, 7, 8, 9, 10, 10, 10, 11, 12, 3};
    uint32_t n = widths[below(12)];

    if (clean && n < 4)
        n = 10;
    if (oops(40)) {
        g_any(b, 2);
        return;
    }
    g_array(b, n);
    for (uint32_t i = 0; i < n; i++) {
        if (i < 4)
            oops(12) ? g_field(b) : (void)msgpack_pack_uint64(&b->pk, below(1u << 20));
        else if (below(5) == 0)
            msgpack_pack_nil(&b->pk);
        else if (i < 6)
            g_field(b);
        else if (i == 6)
            g_shape(b);
        else if (i == 7) {
            uint32_t k = oops(10) ? (uint32_t)below(10) : (uint32_t)below(3);
            if (oops(30)) {
                g_any(b, 1);
                continue;
            }
            g_array(b, k);
            for (uint32_t j = 0; j < k; j++)
                g_shape(b);
        } else if (i == 8)
            g_device(b);
        else if (i == 9)
            g_ext(b);
        else
            g_any(b, 3);
    }
}

static void g_batch(struct buf *b)
{
    uint32_t top = oops(10) ? 1 + (uint32_t)below(4) : 2;
    uint32_t n = (uint32_t)below(12);

    g_array(b, top);
    if (below(10) == 0)
        raw(b,
            "\xd9\x05"
            "batch",
            7);
    else
        s(b, "batch");
    if (top < 2)
        return;
    if (oops(40))
        g_any(b, 1);
    else {
        g_array(b, n);
        for (uint32_t i = 0; i < n; i++)
            g_entry(b);
    }
    for (uint32_t i = 2; i < top; i++)
        g_any(b, 2);
}

static bool batch_same(const struct proto_batch *a, const struct proto_batch *b)
{
    return a->n == b->n && a->blob_len == b->blob_len &&
           (a->blob_len == 0 || memcmp(a->blob, b->blob, a->blob_len) == 0) &&
           (a->n == 0 || memcmp(a->entries, b->entries, a->n * sizeof(*a->entries)) == 0);
}

struct answers {
    size_t decoded, failed;
};

static void same_answer(const char *what, size_t idx, int ra, const struct proto_msg *a,
                        const struct proto_error *ea, int rb, const struct proto_msg *b,
                        const struct proto_error *eb)
{
    cr_assert_eq(ra, rb, "%s %zu: one pass %d (%s), object tree %d (%s)", what, idx, ra,
                 ra < 0 ? ea->message : "", rb, rb < 0 ? eb->message : "");
    if (ra < 0) {
        cr_assert_str_eq(ea->code, eb->code, "%s %zu", what, idx);
        cr_assert_str_eq(ea->message, eb->message, "%s %zu", what, idx);
        return;
    }
    cr_assert_eq(a->type, b->type, "%s %zu", what, idx);
    if (a->type == PROTO_BATCH)
        cr_assert(batch_same(&a->u.batch, &b->u.batch), "%s %zu: batches differ", what, idx);
}

static void differ_whole(const char *p, size_t n, size_t idx, struct answers *ans)
{
    struct proto_error ea = {0}, eb = {0};
    struct proto_msg a, b;
    int ra = proto_decode_bytes(p, n, &a, &ea), rb = proto_decode_bytes_tree(p, n, &b, &eb);

    same_answer("message", idx, ra, &a, &ea, rb, &b, &eb);
    if (ra == 0)
        ans->decoded++;
    else
        ans->failed++;
    proto_msg_free(&a);
    proto_msg_free(&b);
}

/*
 * Arrays lent to the one-pass reader (proto_reader_set_take), when `lend`:
 * those of the batches it returned, scribbled over, else fresh ones of a
 * random room (1 entry and byte too, which the reader must grow), filled
 * with garbage. Whatever they held must not show in what it decodes.
 */
static bool lend;
static struct proto_batch lent[8];
static size_t n_lent;

static void lend_take(void *ctx, struct proto_batch *b)
{
    (void)ctx;
    if (below(4) == 0)
        return; /* none: the reader allocates */
    if (n_lent > 0 && below(2) == 0) {
        *b = lent[--n_lent];
        if (below(3) == 0) { /* the entries only */
            free(b->blob);
            b->blob = NULL;
            b->blob_cap = 0;
        }
        return;
    }
    b->cap = below(2) ? 1 + below(100) : b->cap + below(3);
    b->blob_cap = below(2) ? 1 + below(200) : b->blob_cap + below(3);
    b->entries = malloc((b->cap ? b->cap : 1) * sizeof(*b->entries));
    b->blob = malloc(b->blob_cap ? b->blob_cap : 1);
    cr_assert(b->entries != NULL && b->blob != NULL);
    memset(b->entries, 0x5a, b->cap * sizeof(*b->entries));
    memset(b->blob, 0x5a, b->blob_cap);
}

/* A batch the reader returned: its room is what it says, then it is lent again. */
static void lend_give(struct proto_batch *b)
{
    cr_assert_geq(b->cap, b->n);
    cr_assert_geq(b->blob_cap, b->blob_len);
    if (b->entries != NULL)
        cr_assert_geq(malloc_usable_size(b->entries), b->cap * sizeof(*b->entries));
    if (b->blob != NULL)
        cr_assert_geq(malloc_usable_size(b->blob), b->blob_cap);
    if (n_lent == sizeof(lent) / sizeof(lent[0]) || b->entries == NULL) {
        proto_batch_free(b);
        return;
    }
    memset(b->entries, 0xa5, b->cap * sizeof(*b->entries));
    if (b->blob != NULL)
        memset(b->blob, 0xa5, b->blob_cap);
    b->n = b->blob_len = 0;
    lent[n_lent++] = *b;
    memset(b, 0, sizeof(*b));
}

/* p[0..n) through both kinds of reader in pieces of random sizes, a flush after it. */
static void differ_reader(const char *p, size_t n, size_t idx)
{
    static const char flush[] = "\x92\xa5"
                                "flush\x07";
    struct proto_reader r[2];
    struct proto_error e[2] = {0};
    struct proto_msg m[2];
    size_t off = 0, total = n + sizeof(flush) - 1;
    char *all = malloc(total);
    int rc[2] = {0, 0};

    cr_assert_not_null(all);
    memcpy(all, p, n);
    memcpy(all + n, flush, sizeof(flush) - 1);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(proto_reader_init(&r[k], 0), 0);
    r[1].tree = true;
    if (lend)
        proto_reader_set_take(&r[0], lend_take, NULL);
    while (off < total && rc[0] >= 0) {
        size_t piece = 1 + below(below(2) ? 8 : total);
        if (piece > total - off)
            piece = total - off;
        for (int k = 0; k < 2; k++)
            feed(&r[k], all + off, piece);
        off += piece;
        do {
            for (int k = 0; k < 2; k++) {
                memset(&m[k], 0, sizeof(m[k]));
                rc[k] = proto_reader_next(&r[k], &m[k], &e[k]);
            }
            same_answer("reader", idx, rc[0], &m[0], &e[0], rc[1], &m[1], &e[1]);
            if (lend && rc[0] == 1 && m[0].type == PROTO_BATCH)
                lend_give(&m[0].u.batch);
            proto_msg_free(&m[0]);
            proto_msg_free(&m[1]);
        } while (rc[0] == 1);
    }
    for (int k = 0; k < 2; k++)
        proto_reader_deinit(&r[k]);
    free(all);
}

Test(proto, onepass_same_as_object_tree)
{
    struct answers ans = {0};
    char *mut = malloc(64 << 10);

    cr_assert_not_null(mut);
    for (size_t i = 0; i < 3000; i++) {
        struct buf b;

        buf_init(&b);
        clean = i % 2 == 0;
        g_batch(&b);
        differ_whole(b.sb.data, b.sb.size, i, &ans);
        if (i % 4 == 0)
            differ_reader(b.sb.data, b.sb.size, i);
        /* mutations: a byte changed, the message cut, a byte inserted */
        for (int k = 0; k < 4 && b.sb.size > 0 && b.sb.size < (64 << 10) - 1; k++) {
            size_t n = b.sb.size, at = below(n);
            memcpy(mut, b.sb.data, n);
            if (k == 0) {
                mut[at] = (char)rnd();
            } else if (k == 1) {
                n = at;
            } else if (k == 2) {
                memmove(mut + at + 1, mut + at, n - at);
                mut[at] = (char)rnd();
                n++;
            } else {
                mut[at] = (char)(0x90 + below(16)); /* an array header in the middle */
            }
            differ_whole(mut, n, i, &ans);
            if (k == 0)
                differ_reader(mut, n, i);
        }
        msgpack_sbuffer_destroy(&b.sb);
    }
    free(mut);
    /* both outcomes well represented: the generator reaches the decoders' paths */
    cr_assert_gt(ans.decoded, 1500, "%zu decoded", ans.decoded);
    cr_assert_gt(ans.failed, 5000, "%zu failed", ans.failed);
}

/*
 * The same with arrays lent to the one-pass reader (proto_reader_set_take, as
 * the daemon lends those of spent batches): of every room, holding garbage,
 * they change nothing it decodes, and the batches it returns say their room.
 */
Test(proto, reader_lent_arrays_same_as_object_tree)
{
    lend = true;
    for (size_t i = 0; i < 3000; i++) {
        struct buf b;

        buf_init(&b);
        clean = i % 2 == 0;
        g_batch(&b);
        differ_reader(b.sb.data, b.sb.size, i);
        msgpack_sbuffer_destroy(&b.sb);
    }
    while (n_lent > 0)
        proto_batch_free(&lent[--n_lent]);
    lend = false;
}

/* ---- a batch decoded as its bytes arrive (proto_reader_next, onepass_inc) ---- */

/*
 * A message is taken as soon as it is whole: bad bytes that arrive with it
 * (in the same read) fail the stream after it, not before it, so what a
 * peer sent before its bad message is kept (PROTOCOL.md).
 */
Test(proto, reader_takes_messages_before_bad_bytes)
{
    struct proto_reader r[2];
    struct proto_error err;
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    batch_head(&b, 4);
    msgpack_pack_array(&b.pk, 2);
    s(&b, "flush");
    msgpack_pack_uint64(&b.pk, 9);
    msgpack_sbuffer_write(&b.sb, "\xc1", 1);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(proto_reader_init(&r[k], 0), 0);
        r[k].tree = k == 1;
        feed(&r[k], b.sb.data, b.sb.size);
        cr_assert_eq(proto_reader_next(&r[k], &m, &err), 1, "%s", err.message);
        cr_assert_eq(m.type, PROTO_BATCH);
        cr_assert_eq(m.u.batch.n, 1);
        proto_msg_free(&m);
        cr_assert_eq(proto_reader_next(&r[k], &m, &err), 1, "%s", err.message);
        cr_assert_eq(m.type, PROTO_FLUSH);
        cr_assert_eq(proto_reader_next(&r[k], &m, &err), -EBADMSG);
        cr_assert_str_eq(err.code, PROTO_E_MSGPACK);
        proto_reader_deinit(&r[k]);
    }
    msgpack_sbuffer_destroy(&b.sb);
}

/* 40 entries (shapes, a device, an ext map, a nested unknown field) with entry `bad` wrong. */
static void batch_of_40(struct buf *b, int bad)
{
    msgpack_pack_array(&b->pk, 2);
    s(b, "batch");
    msgpack_pack_array(&b->pk, 40);
    for (int i = 0; i < 40; i++) {
        msgpack_pack_array(&b->pk, i % 7 == 3 ? 11 : 10);
        msgpack_pack_uint64(&b->pk, (uint64_t)i);
        msgpack_pack_uint64(&b->pk, 1);
        msgpack_pack_uint64(&b->pk, 1700000000000000000ull + (uint64_t)i * 1000);
        if (i == bad)
            msgpack_pack_int64(&b->pk, -5);
        else
            msgpack_pack_uint64(&b->pk, 300 + (uint64_t)i);
        msgpack_pack_nil(&b->pk);
        msgpack_pack_uint64(&b->pk, (uint64_t)i << 20);
        msgpack_pack_array(&b->pk, 2); /* out_shape */
        msgpack_pack_uint64(&b->pk, 64);
        msgpack_pack_uint64(&b->pk, 1024 + (uint64_t)(i % 3));
        msgpack_pack_array(&b->pk, 1); /* in_shapes */
        msgpack_pack_array(&b->pk, 1);
        msgpack_pack_uint64(&b->pk, 70000);
        if (i % 5 == 0)
            s(b, "gpu:1");
        else
            msgpack_pack_nil(&b->pk);
        if (i % 4 == 0) {
            msgpack_pack_map(&b->pk, 1);
            s(b, "bytes");
            msgpack_pack_uint64(&b->pk, 4096);
        } else {
            msgpack_pack_nil(&b->pk);
        }
        if (i % 7 == 3) { /* an unknown field: the scanner judges its nesting */
            msgpack_pack_array(&b->pk, 1);
            msgpack_pack_array(&b->pk, 0);
        }
    }
}

/*
 * Fed in pieces of every size from 1 to 40 bytes, a batch gives what it gives
 * whole, byte for byte, and nothing before its last byte; with a wrong entry,
 * the same error, once the message is whole.
 */
Test(proto, reader_batch_in_pieces)
{
    for (int bad = -1; bad < 40; bad += 13) {
        struct proto_error ew = {0}, err = {0};
        struct proto_msg whole, m;
        struct proto_reader r;
        struct buf b;
        int rw;

        buf_init(&b);
        batch_of_40(&b, bad);
        rw = proto_decode_bytes(b.sb.data, b.sb.size, &whole, &ew);
        cr_assert_eq(rw < 0, bad >= 0, "%s", ew.message);
        for (size_t piece = 1; piece <= 40; piece++) {
            size_t off = 0;
            int rc = 0;
            cr_assert_eq(proto_reader_init(&r, 0), 0);
            while (off < b.sb.size && rc == 0) {
                size_t n = b.sb.size - off < piece ? b.sb.size - off : piece;
                feed(&r, b.sb.data + off, n);
                off += n;
                rc = proto_reader_next(&r, &m, &err);
            }
            cr_assert_eq(off, b.sb.size, "piece %zu: an answer after %zu bytes", piece, off);
            if (bad >= 0) {
                cr_assert_eq(rc, rw, "piece %zu: %s", piece, err.message);
                cr_assert_str_eq(err.message, ew.message);
            } else {
                cr_assert_eq(rc, 1, "piece %zu: %s", piece, err.message);
                cr_assert(batch_same(&m.u.batch, &whole.u.batch), "piece %zu", piece);
                proto_msg_free(&m);
            }
            proto_reader_deinit(&r);
        }
        if (rw == 0)
            proto_msg_free(&whole);
        msgpack_sbuffer_destroy(&b.sb);
    }
}

/* ---- the decoder's fast readers (onepass.c rest_fast) -------------------------- */

/*
 * p[0..n) fed to the reader in two reads split at byte k, for every k: the
 * answer is the object tree's for the whole message (an error: the same code
 * and words), and none comes before the last byte.
 */
static void differ_split(const char *p, size_t n, const char *what)
{
    struct proto_error et = {0};
    struct proto_msg tree;
    int rt = proto_decode_bytes_tree(p, n, &tree, &et);

    for (size_t k = 1; k < n; k++) {
        struct proto_error err = {0};
        struct proto_reader r;
        struct proto_msg m;
        int rc;

        cr_assert_eq(proto_reader_init(&r, 0), 0);
        feed(&r, p, k);
        memset(&m, 0, sizeof(m));
        rc = proto_reader_next(&r, &m, &err);
        cr_assert_eq(rc, 0, "%s, split at %zu of %zu: an answer (%d, %s) before the last byte",
                     what, k, n, rc, err.message);
        feed(&r, p + k, n - k);
        rc = proto_reader_next(&r, &m, &err);
        if (rt < 0) {
            cr_assert_lt(rc, 0, "%s, split at %zu: accepted, the tree says %s", what, k,
                         et.message);
            cr_assert_str_eq(err.code, et.code, "%s, split at %zu", what, k);
            cr_assert_str_eq(err.message, et.message, "%s, split at %zu", what, k);
        } else {
            cr_assert_eq(rc, 1, "%s, split at %zu: %s", what, k, err.message);
            cr_assert(batch_same(&m.u.batch, &tree.u.batch), "%s, split at %zu: batches differ",
                      what, k);
            proto_msg_free(&m);
        }
        proto_reader_deinit(&r);
    }
    if (rt == 0)
        proto_msg_free(&tree);
}

struct fast_case {
    int pos; /* the entry's field it is for: 4 elements .. 9 ext, 10 after them */
    const char *bytes;
    size_t len;
};

#define FC(pos, lit)                                                                               \
    {                                                                                              \
        pos, lit, sizeof(lit) - 1                                                                  \
    }

/*
 * Each field's encodings: the ones the fast readers take, and at their
 * edges the ones they leave to op_rest() (other encodings, wrong values).
 */
static const struct fast_case fast_cases[] = {
    FC(4, "\xc0"),
    FC(4, "\x05"),
    FC(4, "\x7f"),
    FC(4, "\xcc\x80"),
    FC(4, "\xcc\x05"),
    FC(4, "\xcd\x01\x00"),
    FC(4, "\xce\x00\x01\x00\x00"),
    FC(4, "\xcf\x7f\xff\xff\xff\xff\xff\xff\xff"),
    FC(4, "\xcf\x80\x00\x00\x00\x00\x00\x00\x00"),
    FC(4, "\xd0\x05"),
    FC(4, "\xff"),
    FC(4, "\xa1x"),
    FC(4, "\x90"),
    FC(4, "\xca\x00\x00\x00\x00"),
    FC(5, "\xc0"),
    FC(5, "\x00"),
    FC(5, "\xcd\x10\x00"),
    FC(5, "\xcc\x7f"),
    FC(5, "\xe0"),
    FC(5, "\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
    FC(5, "\xc3"),
    FC(6, "\xc0"),
    FC(6, "\x90"),
    FC(6, "\x93\x01\x02\x03"),
    FC(6, "\x92\xcc\x80\xcd\x10\x00"),
    FC(6, "\x92\xcc\x05\x02"),
    FC(6, "\x92\xcd\x00\x80\x02"),
    FC(6, "\x91\xcf\x7f\xff\xff\xff\xff\xff\xff\xff"),
    FC(6, "\x92\xcf\x7f\xff\xff\xff\xff\xff\xff\xff\x03"),
    FC(6, "\x93\xcf\x7f\xff\xff\xff\xff\xff\xff\xff\x02\x00"),
    FC(6, "\x92\xce\xff\xff\xff\xff\xce\xff\xff\xff\xff"),
    FC(6, "\x91\xcf\x80\x00\x00\x00\x00\x00\x00\x00"),
    FC(6, "\x9f\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02"),
    FC(6, "\xdc\x00\x02\x01\x02"),
    FC(6, "\xdc\x00\x11\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
          "\x01\x01\x01\x01\x01\x01\x01"),
    FC(6, "\x91\xc0"),
    FC(6, "\x91\xff"),
    FC(6, "\x05"),
    FC(6, "\x92\xd0\x05\x01"),
    FC(6, "\x91\x91\x01"),
    FC(6, "\x80"),
    FC(7, "\xc0"),
    FC(7, "\x90"),
    FC(7, "\x91\x92\x01\x02"),
    FC(7, "\x92\x91\x01\x90"),
    FC(7, "\x98\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01"),
    FC(7, "\x99\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01\x91\x01"),
    FC(7, "\x91\xc0"),
    FC(7, "\x91\x91\xcc\x05"),
    FC(7, "\xdc\x00\x01\x91\x01"),
    FC(7, "\x91\xdc\x00\x01\x01"),
    FC(7, "\x91\x05"),
    FC(7, "\x92\x91\x01\x91\xff"),
    FC(7, "\x91\x92\xcd\x01\x00\xcf\x00\x00\x00\x01\x00\x00\x00\x00"),
    FC(8, "\xc0"),
    FC(8, "\xa5gpu:0"),
    FC(8, "\xa0"),
    FC(8, "\xa2\xc3\xa9"),
    FC(8, "\xa2\xc0\xaf"),
    FC(8, "\xa3g\x00p"),
    FC(8, "\xd9\x05gpu:1"),
    FC(8, "\x05"),
    FC(8, "\xbf"
          "abcdefghijklmnopqrstuvwxyz01234"),
    FC(9, "\xc0"),
    FC(9, "\x80"),
    FC(9, "\x81\xa6stream\x05"),
    FC(9, "\x05"),
    FC(10, "\xc0"),
    FC(10, "\x91\x01"),
    FC(10, "\x81\xa1k\x92\x01\x02"),
};

/* A field's usual value: what the fast readers take. */
static const struct fast_case fast_usual[] = {
    FC(4, "\xc0"),
    FC(5, "\xcd\x10\x00"),
    FC(6, "\x92\x40\xcd\x04\x00"),
    FC(7, "\x91\x91\xce\x00\x01\x11\x70"),
    FC(8, "\xc0"),
    FC(9, "\xc0"),
    FC(10, "\xc0"),
};

/* An entry of `width` fields: the usual ones, c's bytes at its position (c NULL: none). */
static void fast_entry(struct buf *b, uint32_t width, const struct fast_case *c, uint64_t i)
{
    msgpack_pack_array(&b->pk, width);
    msgpack_pack_uint64(&b->pk, i);
    msgpack_pack_uint64(&b->pk, 3);
    msgpack_pack_uint64(&b->pk, 1700000000000000000ull + i);
    msgpack_pack_uint64(&b->pk, 250 + i);
    for (uint32_t f = 4; f < width; f++) {
        const struct fast_case *u = &fast_usual[f < 10 ? f - 4 : 6];
        if (c != NULL && (uint32_t)c->pos == f)
            raw(b, c->bytes, c->len);
        else
            raw(b, u->bytes, u->len);
    }
}

/*
 * Every encoding of the table, in an entry between two usual ones, in
 * entries of every width that holds it: decoded in one pass as the object
 * tree decodes it (the same entries and blob, or the same error), whole and
 * split across two reads at every byte.
 */
Test(proto, onepass_fast_fields_same_as_object_tree)
{
    size_t accepted = 0, refused = 0;

    for (size_t k = 0; k < sizeof(fast_cases) / sizeof(fast_cases[0]); k++) {
        const struct fast_case *c = &fast_cases[k];
        for (uint32_t width = (uint32_t)c->pos + 1; width <= 12; width++) {
            struct proto_error ea = {0}, eb = {0};
            struct proto_msg a, t;
            char what[64];
            struct buf b;
            int ra, rt;

            buf_init(&b);
            msgpack_pack_array(&b.pk, 2);
            s(&b, "batch");
            msgpack_pack_array(&b.pk, 3);
            fast_entry(&b, 10, NULL, 0);
            fast_entry(&b, width, c, 1);
            fast_entry(&b, width, NULL, 2);
            snprintf(what, sizeof(what), "case %zu (field %d), width %u", k, c->pos, width);
            ra = proto_decode_bytes(b.sb.data, b.sb.size, &a, &ea);
            rt = proto_decode_bytes_tree(b.sb.data, b.sb.size, &t, &eb);
            same_answer(what, k, ra, &a, &ea, rt, &t, &eb);
            if (ra == 0) {
                accepted++;
                proto_msg_free(&a);
                proto_msg_free(&t);
            } else {
                refused++;
            }
            differ_split(b.sb.data, b.sb.size, what);
            msgpack_sbuffer_destroy(&b.sb);
        }
    }
    /* both outcomes: the table reaches the fast readers and their edges */
    cr_assert_gt(accepted, 100, "%zu accepted", accepted);
    cr_assert_gt(refused, 50, "%zu refused", refused);
}

/*
 * A stream of like batches, read 16000 bytes a time: the reader's buffer
 * grows (or moves) at most once per batch after the first, room for the
 * rest of a batch as large as the last made at once, not doubled read
 * after read (each time a copy of what is buffered). Every batch is taken
 * whole and as decoded at once.
 */
Test(proto, reader_buffer_grows_once_per_batch)
{
    enum { BATCHES = 6, ENTRIES = 3000, PIECE = 16000 };
    struct proto_error err = {0};
    struct proto_msg whole, m;
    struct proto_reader r;
    struct buf one, all;
    size_t off = 0, taken = 0, moves = 0, size = 0;
    const char *buf = NULL;
    int rc;

    buf_init(&one);
    msgpack_pack_array(&one.pk, 2);
    s(&one, "batch");
    msgpack_pack_array(&one.pk, ENTRIES);
    for (uint64_t i = 0; i < ENTRIES; i++)
        fast_entry(&one, 10, NULL, i);
    cr_assert_eq(proto_decode_bytes(one.sb.data, one.sb.size, &whole, &err), 0, "%s", err.message);
    buf_init(&all);
    for (int k = 0; k < BATCHES; k++)
        raw(&all, one.sb.data, one.sb.size);
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    while (off < all.sb.size) {
        size_t n = all.sb.size - off < PIECE ? all.sb.size - off : PIECE;
        char *dst = proto_reader_buffer(&r, PIECE);
        cr_assert_not_null(dst);
        /* after the first batch: a new place or size of the buffer is a move */
        if (taken >= 1 && (r.unp.buffer != buf || r.unp.used + r.unp.free != size))
            moves++;
        buf = r.unp.buffer;
        size = r.unp.used + r.unp.free;
        memcpy(dst, all.sb.data + off, n);
        proto_reader_commit(&r, n);
        off += n;
        while ((rc = proto_reader_next(&r, &m, &err)) == 1) {
            cr_assert(batch_same(&m.u.batch, &whole.u.batch), "batch %zu", taken);
            proto_msg_free(&m);
            taken++;
        }
        cr_assert_eq(rc, 0, "%s", err.message);
    }
    cr_assert_eq(taken, BATCHES);
    cr_assert_leq(moves, BATCHES - 1, "%zu moves of the buffer for %d batches of %zu bytes", moves,
                  BATCHES - 1, one.sb.size);
    proto_reader_deinit(&r);
    proto_msg_free(&whole);
    msgpack_sbuffer_destroy(&one.sb);
    msgpack_sbuffer_destroy(&all.sb);
}

/* Client counters (PROTOCOL.md Part 3) round-trip through flush and bye; welcome says so. */
Test(proto, counters_round_trip)
{
    struct proto_opdrop rows[2] = {{3, 10, 5000, 64, 0, 0, 0}, {7, 9, 200, 30, 7, 150, 20}};
    struct proto_counters k = {true, 100, 20, 70, 60, rows, 2};
    struct proto_error err = {0};
    struct proto_msg m;
    struct buf b;

    buf_init(&b);
    cr_assert_eq(proto_pack_flush_counters(&b.pk, 9, &k), 0);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_FLUSH);
    cr_assert_eq(m.u.flush_seq, 9);
    cr_assert(m.counters.given);
    cr_assert_eq(m.counters.recorded, 100);
    cr_assert_eq(m.counters.dropped, 20);
    cr_assert_eq(m.counters.sent, 70);
    cr_assert_eq(m.counters.acked, 60);
    cr_assert_eq(m.counters.n_ops, 2);
    for (size_t i = 0; i < 2; i++) {
        const struct proto_opdrop *g = &m.counters.ops[i];
        cr_assert(g->op == rows[i].op && g->calls == rows[i].calls && g->ns == rows[i].ns &&
                      g->bytes == rows[i].bytes && g->counted == rows[i].counted &&
                      g->counted_ns == rows[i].counted_ns &&
                      g->counted_bytes == rows[i].counted_bytes,
                  "row %zu", i);
    }
    proto_msg_free(&m);

    msgpack_sbuffer_clear(&b.sb);
    cr_assert_eq(proto_pack_bye_counters(&b.pk, 20, &k), 0);
    cr_assert_eq(decode(&b, &m, &err), 0, "%s", err.message);
    cr_assert_eq(m.type, PROTO_BYE);
    cr_assert_eq(m.u.bye_dropped, 20);
    cr_assert(m.counters.given);
    cr_assert_eq(m.counters.n_ops, 2);
    proto_msg_free(&m);

    /* The v1 forms carry none. */
    msgpack_sbuffer_clear(&b.sb);
    cr_assert_eq(proto_pack_flush_counters(&b.pk, 4, NULL), 0);
    cr_assert_eq(decode(&b, &m, &err), 0);
    cr_assert(!m.counters.given);
    cr_assert_null(m.counters.ops);
    proto_msg_free(&m);
    msgpack_sbuffer_clear(&b.sb);
    cr_assert_eq(proto_pack_bye_counters(&b.pk, 0, NULL), 0);
    cr_assert_eq(decode(&b, &m, &err), 0);
    cr_assert(!m.counters.given);
    proto_msg_free(&m);

    msgpack_sbuffer_clear(&b.sb);
    cr_assert_eq(proto_pack_welcome(&b.pk, 7, 3), 0);
    cr_assert_eq(decode(&b, &m, &err), 0);
    cr_assert(m.u.welcome.counters, "this daemon takes counters");
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&b.sb);
}
