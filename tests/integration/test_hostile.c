/*
 * test_hostile.c — hostile input against a real tracectld, table-driven.
 *
 * Every case of the table sends one bad message, on a fresh connection or
 * after a producer has had entries accepted, and checks that:
 *   - the connection gets ["error", {code, message}] with the code of
 *     proto/PROTOCOL.md's table, and is closed (control requests that are
 *     well-formed but name no session / a live one are answered, and their
 *     connection keeps serving, as proto/PROTOCOL.md lets control
 *     connections carry several requests);
 *   - the daemon keeps serving: a bystander producer streaming in its own
 *     session before and after gets its flush acked and all its entries
 *     stored, and a `sessions` request succeeds after;
 *   - what the producer had sent before the bad message is stored (the
 *     session's report counts it), and a fresh connection's bad hello made
 *     no session;
 *   - the daemon exits 0 on SIGTERM afterwards (under ASan: no leak, no
 *     error left behind by the bad input).
 * Cases that need more than one message (a size limit enforced as the bytes
 * arrive, a message cut short, session names that look like paths) are
 * separate tests below the table.
 *
 * Criterion runs each parameter in its own process: the parameters are
 * indices into the table, never pointers.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(hostile, .fini = stop_and_clean, .timeout = 60);

#define SESSION  "hostile"
#define ACCEPTED 5 /* entries the producer has acked before the bad message */

/* ---- the bad values ------------------------------------------------------ */

enum bad {
    OK,        /* no change: the template as it is */
    OMIT,      /* leave the field (or, in an array, it and what follows) out */
    NIL,       /* nil */
    STR,       /* "x" */
    EMPTY,     /* "" */
    BIN,       /* bin "x": bytes, not a string */
    BOOL,      /* true */
    FLOAT,     /* 1.5 */
    NOTNUM,    /* NaN */
    NEG,       /* -1 */
    ZERO,      /* 0 */
    ONE,       /* 1 */
    TWO,       /* 2 */
    NUM999,    /* 999 */
    P32,       /* 2^32: over uint32 */
    P63,       /* 2^63: over int64 */
    U64MAX,    /* 2^64 - 1 */
    I64MIN,    /* -2^63 */
    ARRAY,     /* [1] */
    MAP,       /* {} */
    NESTED,    /* [[1]] */
    LONG33,    /* 33 bytes: over a category */
    LONG257,   /* 257 bytes: over a session name */
    LONG1025,  /* 1025 bytes: over a name, key or metadata string */
    LONG5000,  /* 5000 bytes: over any string */
    UTF8_FF,   /* "\xff\xfe" */
    OVERLONG,  /* "\xc0\xaf": an overlong '/' */
    SURROGATE, /* "\xed\xa0\x80" */
    TRUNC8,    /* "a\xe2\x82": a cut multi-byte sequence */
    NUL,       /* "a\0b" */
    DIMS17,    /* a shape of 17 dimensions */
    IN_DIMS17, /* one input shape of 17 dimensions */
    INPUTS9,   /* 9 input shapes */
    KEYS257,   /* a map of 257 keys */
    DEEP40,    /* 40 nested arrays */
};

static void pack_string(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_long(msgpack_packer *pk, size_t n)
{
    char *s = malloc(n);

    memset(s, 'n', n);
    pack_string(pk, s, n);
    free(s);
}

static void pack_bad(msgpack_packer *pk, enum bad b)
{
    switch (b) {
    case OK:
    case OMIT:
        cr_assert_fail("OK/OMIT are not values");
        break;
    case NIL:
        msgpack_pack_nil(pk);
        break;
    case STR:
        pack_string(pk, "x", 1);
        break;
    case EMPTY:
        pack_string(pk, "", 0);
        break;
    case BIN:
        msgpack_pack_bin(pk, 1);
        msgpack_pack_bin_body(pk, "x", 1);
        break;
    case BOOL:
        msgpack_pack_true(pk);
        break;
    case FLOAT:
        msgpack_pack_double(pk, 1.5);
        break;
    case NOTNUM:
        msgpack_pack_double(pk, NAN);
        break;
    case NEG:
        msgpack_pack_int64(pk, -1);
        break;
    case ZERO:
        msgpack_pack_uint64(pk, 0);
        break;
    case ONE:
        msgpack_pack_uint64(pk, 1);
        break;
    case TWO:
        msgpack_pack_uint64(pk, 2);
        break;
    case NUM999:
        msgpack_pack_uint64(pk, 999);
        break;
    case P32:
        msgpack_pack_uint64(pk, 1ull << 32);
        break;
    case P63:
        msgpack_pack_uint64(pk, 1ull << 63);
        break;
    case U64MAX:
        msgpack_pack_uint64(pk, UINT64_MAX);
        break;
    case I64MIN:
        msgpack_pack_int64(pk, INT64_MIN);
        break;
    case ARRAY:
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1);
        break;
    case MAP:
        msgpack_pack_map(pk, 0);
        break;
    case NESTED:
        msgpack_pack_array(pk, 1);
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1);
        break;
    case LONG33:
        pack_long(pk, 33);
        break;
    case LONG257:
        pack_long(pk, 257);
        break;
    case LONG1025:
        pack_long(pk, 1025);
        break;
    case LONG5000:
        pack_long(pk, 5000);
        break;
    case UTF8_FF:
        pack_string(pk, "\xff\xfe", 2);
        break;
    case OVERLONG:
        pack_string(pk, "\xc0\xaf", 2);
        break;
    case SURROGATE:
        pack_string(pk, "\xed\xa0\x80", 3);
        break;
    case TRUNC8:
        pack_string(pk, "a\xe2\x82", 3);
        break;
    case NUL:
        pack_string(pk, "a\0b", 3);
        break;
    case DIMS17:
        msgpack_pack_array(pk, 17);
        for (int i = 0; i < 17; i++)
            msgpack_pack_uint64(pk, 1);
        break;
    case IN_DIMS17:
        msgpack_pack_array(pk, 1);
        msgpack_pack_array(pk, 17);
        for (int i = 0; i < 17; i++)
            msgpack_pack_uint64(pk, 1);
        break;
    case INPUTS9:
        msgpack_pack_array(pk, 9);
        for (int i = 0; i < 9; i++) {
            msgpack_pack_array(pk, 1);
            msgpack_pack_uint64(pk, 1);
        }
        break;
    case KEYS257:
        msgpack_pack_map(pk, 257);
        for (int i = 0; i < 257; i++) {
            char key[16];
            snprintf(key, sizeof(key), "k%d", i);
            proto_pack_str(pk, key);
            msgpack_pack_uint64(pk, (uint64_t)i);
        }
        break;
    case DEEP40:
        for (int i = 0; i < 40; i++)
            msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1);
        break;
    }
}

/* ---- message templates with one field replaced --------------------------- */

enum msg {
    M_HELLO,   /* field: index into hello_keys; ARG: the argument itself */
    M_OPS,     /* ["ops", [[2, "conv2d", "compute"]]]: field 0..2; DEF: the definition */
    M_BATCH,   /* ["batch", [entry]]: field 0..8 of the entry; DEF: the entry */
    M_META,    /* ["meta", {"k": "v"}]: field 0 the value, 1 the key */
    M_FLUSH,   /* ["flush", 7] */
    M_BYE,     /* ["bye", {"dropped": 0}] */
    M_REPORT,  /* ["report", {"session": "hostile", "top": 10, "comm_min_ratio": 0.5,
                  "mem_threshold": 0}]: field 0..3 */
    M_DELETE,  /* ["delete", {"session": "hostile"}] */
    M_EXPORT,  /* ["export", {"session": "hostile"}] */
    M_SESSIONS /* ["sessions", {}] */
};

#define ARG -1 /* the message's argument (element 1) replaced */
#define DEF -2 /* the one element of the ops / batch list replaced */

static const char *const hello_keys[] = {"proto", "session", "rank",   "world",
                                         "pid",   "host",    "device", "meta"};
enum { H_PROTO, H_SESSION, H_RANK, H_WORLD, H_PID, H_HOST, H_DEVICE, H_META, H_N };

static void pack_hello_value(msgpack_packer *pk, int i)
{
    switch (i) {
    case H_PROTO:
        msgpack_pack_uint64(pk, 1);
        break;
    case H_SESSION:
        proto_pack_str(pk, SESSION);
        break;
    case H_RANK:
        msgpack_pack_uint64(pk, 0);
        break;
    case H_WORLD:
    case H_PID:
        msgpack_pack_uint64(pk, 1);
        break;
    case H_HOST:
        proto_pack_str(pk, "node1");
        break;
    case H_DEVICE:
        proto_pack_str(pk, "gpu:0");
        break;
    default:
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "model");
        proto_pack_str(pk, "resnet50");
        break;
    }
}

/* A map of keys[0..n) whose values come from value(i), key `field` replaced by b. */
static void pack_map_with(msgpack_packer *pk, const char *const *keys, int n, int field, enum bad b,
                          void (*value)(msgpack_packer *, int))
{
    msgpack_pack_map(pk, (size_t)(n - (b == OMIT && field >= 0 && field < n)));
    for (int i = 0; i < n; i++) {
        if (i == field && b == OMIT)
            continue;
        proto_pack_str(pk, keys[i]);
        if (i == field && b != OK)
            pack_bad(pk, b);
        else
            value(pk, i);
    }
}

static void pack_ops_field(msgpack_packer *pk, int i)
{
    if (i == 0)
        msgpack_pack_uint64(pk, 2);
    else
        proto_pack_str(pk, i == 1 ? "conv2d" : "compute");
}

static void pack_entry_field(msgpack_packer *pk, int i)
{
    static const uint64_t dims[] = {2, 3};

    switch (i) {
    case 0: /* step */
        msgpack_pack_uint64(pk, 9);
        break;
    case 1: /* op_id */
        msgpack_pack_uint64(pk, 1);
        break;
    case 2: /* start_ns */
        msgpack_pack_uint64(pk, 1000000);
        break;
    case 3: /* dur_ns */
        msgpack_pack_uint64(pk, 10);
        break;
    case 4: /* elements */
        msgpack_pack_uint64(pk, 6);
        break;
    case 5: /* mem_bytes */
        msgpack_pack_uint64(pk, 24);
        break;
    case 6: /* out_shape */
        proto_pack_shape(pk, dims, 2);
        break;
    case 7: /* in_shapes */
        msgpack_pack_array(pk, 1);
        proto_pack_shape(pk, dims, 2);
        break;
    default: /* device */
        proto_pack_str(pk, "gpu:1");
        break;
    }
}

/* An array of n fields from value(i), field `field` replaced by b (OMIT: cut there). */
static void pack_array_with(msgpack_packer *pk, int n, int field, enum bad b,
                            void (*value)(msgpack_packer *, int))
{
    int len = b == OMIT && field >= 0 && field < n ? field : n;

    msgpack_pack_array(pk, (size_t)len);
    for (int i = 0; i < len; i++) {
        if (i == field && b != OK)
            pack_bad(pk, b);
        else
            value(pk, i);
    }
}

static void pack_type(msgpack_packer *pk, const char *type, enum bad b, int field)
{
    msgpack_pack_array(pk, field == ARG && b == OMIT ? 1 : 2);
    proto_pack_str(pk, type);
}

static void pack_message(msgpack_packer *pk, enum msg msg, int field, enum bad b)
{
    static const char *const meta_key[] = {"k"};
    static const char *const report_keys[] = {"session", "top", "comm_min_ratio", "mem_threshold"};
    static const char *const types[] = {
        [M_HELLO] = "hello",      [M_OPS] = "ops",       [M_BATCH] = "batch",
        [M_META] = "meta",        [M_FLUSH] = "flush",   [M_BYE] = "bye",
        [M_REPORT] = "report",    [M_DELETE] = "delete", [M_EXPORT] = "export",
        [M_SESSIONS] = "sessions"};

    pack_type(pk, types[msg], b, field);
    if (field == ARG) {
        if (b != OMIT)
            pack_bad(pk, b);
        return;
    }
    switch (msg) {
    case M_HELLO:
        pack_map_with(pk, hello_keys, H_N, field, b, pack_hello_value);
        break;
    case M_OPS:
        msgpack_pack_array(pk, 1);
        if (field == DEF)
            pack_bad(pk, b);
        else
            pack_array_with(pk, 3, field, b, pack_ops_field);
        break;
    case M_BATCH:
        msgpack_pack_array(pk, 1);
        if (field == DEF)
            pack_bad(pk, b);
        else
            pack_array_with(pk, 9, field, b, pack_entry_field);
        break;
    case M_META:
        msgpack_pack_map(pk, 1);
        if (field == 1 && b != OK)
            pack_bad(pk, b);
        else
            proto_pack_str(pk, meta_key[0]);
        if (field == 0 && b != OK)
            pack_bad(pk, b);
        else
            proto_pack_str(pk, "v");
        break;
    case M_FLUSH:
        if (b != OK)
            pack_bad(pk, b);
        else
            msgpack_pack_uint64(pk, 7);
        break;
    case M_BYE:
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "dropped");
        if (b != OK)
            pack_bad(pk, b);
        else
            msgpack_pack_uint64(pk, 0);
        break;
    case M_REPORT:
    case M_DELETE:
    case M_EXPORT: {
        int n = msg == M_REPORT ? 4 : 1;
        msgpack_pack_map(pk, (size_t)(n - (b == OMIT)));
        for (int i = 0; i < n; i++) {
            if (i == field && b == OMIT)
                continue;
            proto_pack_str(pk, report_keys[i]);
            if (i == field && b != OK)
                pack_bad(pk, b);
            else if (i == 0)
                proto_pack_str(pk, SESSION);
            else if (i == 2)
                msgpack_pack_double(pk, 0.5);
            else
                msgpack_pack_uint64(pk, i == 1 ? 10 : 0);
        }
        break;
    }
    case M_SESSIONS:
        msgpack_pack_map(pk, 0);
        break;
    }
}

/* ---- raw byte cases --------------------------------------------------------- */

enum raw {
    R_NONE,
    R_GARBAGE,       /* c1 c1 c1 c1: never msgpack */
    R_NOT_ARRAY,     /* 42 */
    R_EMPTY_ARRAY,   /* [] */
    R_TYPE_NOT_STR,  /* [1, {}] */
    R_TYPE_UNKNOWN,  /* ["frobnicate", {}] */
    R_TYPE_REPLY,    /* ["welcome", {"session_id": 1}]: a reply, not a request */
    R_HUGE_ARRAY,    /* ["batch", array32 of 2^32-1 elements] with 1 entry behind */
    R_HUGE_MAP,      /* ["hello", map32 of 2^32-1 pairs] with one pair behind */
    R_HUGE_STR,      /* ["ops", [[3, str32 of 2^32-1 bytes "abc"]]] */
    R_HUGE_BIN,      /* ["meta", {"k": bin32 of 2^32-1 bytes}] */
    R_HUGE_OUTER,    /* array32 of 2^32-1 elements: the message itself */
    R_HUGE_ENTRIES,  /* ["batch", array16 of 65535 entries] with one behind: over what follows */
    R_SLICED_BAD,    /* ["batch", array16 of 65535 entries], whole, the last one's op_id 2^32 */
    R_DEEP100,       /* 100 nested arrays */
    R_DEEP_IN_BATCH, /* ["batch", [[...100 nested...]]] */
    R_EXT,           /* ["ops", [[4, ext "x"]]]: an ext where a string belongs */
    R_DUP_SESSION,   /* hello with "session" twice */
};

/* Appends a string literal's bytes (not its NUL). */
#define WRITE_LIT(sb, lit) msgpack_sbuffer_write(sb, lit, sizeof(lit) - 1)

static void pack_raw(msgpack_sbuffer *sb, msgpack_packer *pk, enum raw r)
{
    switch (r) {
    case R_NONE:
        break;
    case R_GARBAGE:
        WRITE_LIT(sb, "\xc1\xc1\xc1\xc1");
        break;
    case R_NOT_ARRAY:
        msgpack_pack_uint64(pk, 42);
        break;
    case R_EMPTY_ARRAY:
        msgpack_pack_array(pk, 0);
        break;
    case R_TYPE_NOT_STR:
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, 1);
        msgpack_pack_map(pk, 0);
        break;
    case R_TYPE_UNKNOWN:
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "frobnicate");
        msgpack_pack_map(pk, 0);
        break;
    case R_TYPE_REPLY:
        proto_pack_welcome(pk, 1, 1);
        break;
    case R_HUGE_ARRAY:
        WRITE_LIT(sb, "\x92\xa5"
                      "batch"
                      "\xdd\xff\xff\xff\xff");
        pack_array_with(pk, 4, -1, OK, pack_entry_field);
        break;
    case R_HUGE_MAP:
        WRITE_LIT(sb, "\x92\xa5"
                      "hello"
                      "\xdf\xff\xff\xff\xff");
        proto_pack_str(pk, "proto");
        msgpack_pack_uint64(pk, 1);
        break;
    case R_HUGE_STR:
        WRITE_LIT(sb, "\x92\xa3ops\x91\x92\x03\xdb\xff\xff\xff\xff"
                      "abc");
        break;
    case R_HUGE_BIN:
        WRITE_LIT(sb, "\x92\xa4meta\x81\xa1k\xc6\xff\xff\xff\xff"
                      "abc");
        break;
    case R_HUGE_OUTER:
        WRITE_LIT(sb, "\xdd\xff\xff\xff\xff\xa5"
                      "batch");
        break;
    case R_HUGE_ENTRIES:
        WRITE_LIT(sb, "\x92\xa5"
                      "batch"
                      "\xdc\xff\xff");
        pack_array_with(pk, 4, -1, OK, pack_entry_field);
        break;
    case R_SLICED_BAD:
        WRITE_LIT(sb, "\x92\xa5"
                      "batch"
                      "\xdc\xff\xff");
        for (int i = 0; i < 65535; i++)
            pack_array_with(pk, 4, i == 65534 ? 1 : -1, i == 65534 ? P32 : OK, pack_entry_field);
        break;
    case R_DEEP100:
        for (int i = 0; i < 100; i++)
            msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1);
        break;
    case R_DEEP_IN_BATCH:
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "batch");
        for (int i = 0; i < 100; i++)
            msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1);
        break;
    case R_EXT:
        WRITE_LIT(sb, "\x92\xa3ops\x91\x92\x04\xd4\x01x");
        break;
    case R_DUP_SESSION:
        msgpack_pack_array(pk, 2);
        proto_pack_str(pk, "hello");
        msgpack_pack_map(pk, 3);
        proto_pack_str(pk, "proto");
        msgpack_pack_uint64(pk, 1);
        proto_pack_str(pk, "session");
        proto_pack_str(pk, "a");
        proto_pack_str(pk, "session");
        proto_pack_str(pk, "b");
        break;
    }
}

/* ---- the table ----------------------------------------------------------- */

enum mode {
    FRESH,    /* a new connection, nothing sent before */
    PRODUCER, /* after hello, ops [[1, "matmul"]], a batch of ACCEPTED entries and its ack */
    LIVE,     /* a producer as above stays connected; the message goes on a new connection */
};

struct hcase {
    const char *name;
    enum mode mode;
    enum raw raw; /* R_NONE: the message is msg with field replaced by bad */
    enum msg msg;
    int field;
    enum bad bad;
    const char *code; /* NULL: no reply is due */
    bool stays_open;  /* a well-formed control request answered with an error */
};

#define RAW(n, m, r, c)                                                                            \
    {                                                                                              \
        .name = n, .mode = m, .raw = r, .code = c                                                  \
    }
#define MSG(n, m, t, f, b, c)                                                                      \
    {                                                                                              \
        .name = n, .mode = m, .msg = t, .field = f, .bad = b, .code = c                            \
    }

static const struct hcase cases[] = {
    /* framing: not msgpack, not a message */
    RAW("garbage bytes", FRESH, R_GARBAGE, "bad_msgpack"),
    RAW("garbage after hello", PRODUCER, R_GARBAGE, "bad_msgpack"),
    RAW("not an array", FRESH, R_NOT_ARRAY, "bad_message"),
    RAW("empty array", PRODUCER, R_EMPTY_ARRAY, "bad_message"),
    RAW("type not a string", FRESH, R_TYPE_NOT_STR, "bad_message"),
    RAW("unknown type", FRESH, R_TYPE_UNKNOWN, "unknown_type"),
    RAW("unknown type after hello", PRODUCER, R_TYPE_UNKNOWN, "unknown_type"),
    RAW("a reply sent as a request", FRESH, R_TYPE_REPLY, "unknown_type"),
    RAW("ext where a string belongs", PRODUCER, R_EXT, "bad_message"),
    /* headers announcing more than can follow, nesting */
    RAW("array32 of 4G entries", PRODUCER, R_HUGE_ARRAY, "too_large"),
    RAW("map32 of 4G pairs in hello", FRESH, R_HUGE_MAP, "too_large"),
    RAW("str32 of 4 GiB", PRODUCER, R_HUGE_STR, "too_large"),
    RAW("bin32 of 4 GiB", PRODUCER, R_HUGE_BIN, "too_large"),
    RAW("message array32 of 4G", FRESH, R_HUGE_OUTER, "too_large"),
    RAW("100 nested arrays", FRESH, R_DEEP100, "bad_message"),
    RAW("100 nested arrays in a batch", PRODUCER, R_DEEP_IN_BATCH, "bad_message"),
    MSG("40 nested arrays as a meta value", PRODUCER, M_META, 0, DEEP40, "bad_message"),
    MSG("a shape of shapes", PRODUCER, M_BATCH, 6, NESTED, "bad_message"),
    /* state */
    MSG("ops before hello", FRESH, M_OPS, 0, OK, "bad_state"),
    MSG("batch before hello", FRESH, M_BATCH, 0, OK, "bad_state"),
    MSG("meta before hello", FRESH, M_META, 0, OK, "bad_state"),
    MSG("flush before hello", FRESH, M_FLUSH, 0, OK, "bad_state"),
    MSG("bye before hello", FRESH, M_BYE, 0, OK, "bad_state"),
    MSG("a second hello", PRODUCER, M_HELLO, 0, OK, "bad_state"),
    MSG("sessions after hello", PRODUCER, M_SESSIONS, 0, OK, "bad_state"),
    MSG("report after hello", PRODUCER, M_REPORT, 0, OK, "bad_state"),
    /* hello */
    MSG("hello: proto 2", FRESH, M_HELLO, H_PROTO, TWO, "bad_version"),
    MSG("hello: proto 0", FRESH, M_HELLO, H_PROTO, ZERO, "bad_version"),
    MSG("hello: proto -1", FRESH, M_HELLO, H_PROTO, NEG, "bad_version"),
    MSG("hello: proto 2^64-1", FRESH, M_HELLO, H_PROTO, U64MAX, "bad_message"),
    MSG("hello: proto a string", FRESH, M_HELLO, H_PROTO, STR, "bad_message"),
    MSG("hello: proto a float", FRESH, M_HELLO, H_PROTO, FLOAT, "bad_message"),
    MSG("hello: proto missing", FRESH, M_HELLO, H_PROTO, OMIT, "bad_message"),
    MSG("hello: session missing", FRESH, M_HELLO, H_SESSION, OMIT, "bad_message"),
    MSG("hello: session nil", FRESH, M_HELLO, H_SESSION, NIL, "bad_message"),
    MSG("hello: session an int", FRESH, M_HELLO, H_SESSION, ONE, "bad_message"),
    MSG("hello: session bin", FRESH, M_HELLO, H_SESSION, BIN, "bad_message"),
    MSG("hello: session empty", FRESH, M_HELLO, H_SESSION, EMPTY, "bad_message"),
    MSG("hello: session 257 bytes", FRESH, M_HELLO, H_SESSION, LONG257, "too_large"),
    MSG("hello: session with NUL", FRESH, M_HELLO, H_SESSION, NUL, "bad_message"),
    MSG("hello: session \\xff\\xfe", FRESH, M_HELLO, H_SESSION, UTF8_FF, "bad_message"),
    MSG("hello: session overlong /", FRESH, M_HELLO, H_SESSION, OVERLONG, "bad_message"),
    MSG("hello: session surrogate", FRESH, M_HELLO, H_SESSION, SURROGATE, "bad_message"),
    MSG("hello: session cut UTF-8", FRESH, M_HELLO, H_SESSION, TRUNC8, "bad_message"),
    MSG("hello: rank a string", FRESH, M_HELLO, H_RANK, STR, "bad_message"),
    MSG("hello: rank -1", FRESH, M_HELLO, H_RANK, NEG, "bad_message"),
    MSG("hello: rank 2^63", FRESH, M_HELLO, H_RANK, P63, "bad_message"),
    MSG("hello: world 0", FRESH, M_HELLO, H_WORLD, ZERO, "bad_message"),
    MSG("hello: world a map", FRESH, M_HELLO, H_WORLD, MAP, "bad_message"),
    MSG("hello: pid a float", FRESH, M_HELLO, H_PID, FLOAT, "bad_message"),
    MSG("hello: pid -2^63", FRESH, M_HELLO, H_PID, I64MIN, "bad_message"),
    MSG("hello: host an int", FRESH, M_HELLO, H_HOST, ONE, "bad_message"),
    MSG("hello: host 1025 bytes", FRESH, M_HELLO, H_HOST, LONG1025, "too_large"),
    MSG("hello: host 5000 bytes", FRESH, M_HELLO, H_HOST, LONG5000, "too_large"),
    MSG("hello: device an array", FRESH, M_HELLO, H_DEVICE, ARRAY, "bad_message"),
    MSG("hello: device \\xff\\xfe", FRESH, M_HELLO, H_DEVICE, UTF8_FF, "bad_message"),
    MSG("hello: meta an array", FRESH, M_HELLO, H_META, ARRAY, "bad_message"),
    MSG("hello: meta of 257 keys", FRESH, M_HELLO, H_META, KEYS257, "too_large"),
    MSG("hello: an array, not a map", FRESH, M_HELLO, ARG, ARRAY, "bad_message"),
    MSG("hello: no argument", FRESH, M_HELLO, ARG, OMIT, "bad_message"),
    RAW("hello: session twice", FRESH, R_DUP_SESSION, "bad_message"),
    /* ops */
    MSG("ops: a map", PRODUCER, M_OPS, ARG, MAP, "bad_message"),
    MSG("ops: no argument", PRODUCER, M_OPS, ARG, OMIT, "bad_message"),
    MSG("ops: a definition that is an int", PRODUCER, M_OPS, DEF, ONE, "bad_message"),
    MSG("ops: a definition of one element", PRODUCER, M_OPS, 1, OMIT, "bad_message"),
    MSG("ops: id a string", PRODUCER, M_OPS, 0, STR, "bad_message"),
    MSG("ops: id -1", PRODUCER, M_OPS, 0, NEG, "bad_message"),
    MSG("ops: id 2^32", PRODUCER, M_OPS, 0, P32, "bad_message"),
    MSG("ops: id redefined", PRODUCER, M_OPS, 0, ONE, "op_redefined"),
    MSG("ops: name an int", PRODUCER, M_OPS, 1, ONE, "bad_message"),
    MSG("ops: name empty", PRODUCER, M_OPS, 1, EMPTY, "bad_message"),
    MSG("ops: name 1025 bytes", PRODUCER, M_OPS, 1, LONG1025, "too_large"),
    MSG("ops: name \\xff\\xfe", PRODUCER, M_OPS, 1, UTF8_FF, "bad_message"),
    MSG("ops: name overlong /", PRODUCER, M_OPS, 1, OVERLONG, "bad_message"),
    MSG("ops: name surrogate", PRODUCER, M_OPS, 1, SURROGATE, "bad_message"),
    MSG("ops: name with NUL", PRODUCER, M_OPS, 1, NUL, "bad_message"),
    MSG("ops: category an int", PRODUCER, M_OPS, 2, ONE, "bad_message"),
    MSG("ops: category 33 bytes", PRODUCER, M_OPS, 2, LONG33, "too_large"),
    /* batch */
    MSG("batch: a map", PRODUCER, M_BATCH, ARG, MAP, "bad_message"),
    MSG("batch: no argument", PRODUCER, M_BATCH, ARG, OMIT, "bad_message"),
    MSG("batch: an entry that is a string", PRODUCER, M_BATCH, DEF, STR, "bad_message"),
    MSG("batch: an entry of 3 fields", PRODUCER, M_BATCH, 3, OMIT, "bad_message"),
    MSG("batch: step a string", PRODUCER, M_BATCH, 0, STR, "bad_message"),
    MSG("batch: step -1", PRODUCER, M_BATCH, 0, NEG, "bad_message"),
    MSG("batch: step 2^63", PRODUCER, M_BATCH, 0, P63, "bad_message"),
    MSG("batch: step nil", PRODUCER, M_BATCH, 0, NIL, "bad_message"),
    MSG("batch: op_id a float", PRODUCER, M_BATCH, 1, FLOAT, "bad_message"),
    MSG("batch: op_id 2^32", PRODUCER, M_BATCH, 1, P32, "bad_message"),
    MSG("batch: op_id undefined", PRODUCER, M_BATCH, 1, NUM999, "unknown_op"),
    MSG("batch: start_ns -1", PRODUCER, M_BATCH, 2, NEG, "bad_message"),
    MSG("batch: start_ns 2^64-1", PRODUCER, M_BATCH, 2, U64MAX, "bad_message"),
    MSG("batch: start_ns a bool", PRODUCER, M_BATCH, 2, BOOL, "bad_message"),
    MSG("batch: dur_ns a float", PRODUCER, M_BATCH, 3, FLOAT, "bad_message"),
    MSG("batch: dur_ns 2^63", PRODUCER, M_BATCH, 3, P63, "bad_message"),
    MSG("batch: elements a string", PRODUCER, M_BATCH, 4, STR, "bad_message"),
    MSG("batch: elements -2^63", PRODUCER, M_BATCH, 4, I64MIN, "bad_message"),
    MSG("batch: mem_bytes -1", PRODUCER, M_BATCH, 5, NEG, "bad_message"),
    MSG("batch: mem_bytes an array", PRODUCER, M_BATCH, 5, ARRAY, "bad_message"),
    MSG("batch: out_shape a string", PRODUCER, M_BATCH, 6, STR, "bad_message"),
    MSG("batch: out_shape a map", PRODUCER, M_BATCH, 6, MAP, "bad_message"),
    MSG("batch: out_shape 17 dims", PRODUCER, M_BATCH, 6, DIMS17, "too_large"),
    MSG("batch: in_shapes an int", PRODUCER, M_BATCH, 7, ONE, "bad_message"),
    MSG("batch: in_shapes a flat shape", PRODUCER, M_BATCH, 7, ARRAY, "bad_message"),
    MSG("batch: in_shapes of 9 inputs", PRODUCER, M_BATCH, 7, INPUTS9, "too_large"),
    MSG("batch: an input shape of 17 dims", PRODUCER, M_BATCH, 7, IN_DIMS17, "too_large"),
    MSG("batch: device an int", PRODUCER, M_BATCH, 8, ONE, "bad_message"),
    MSG("batch: device empty", PRODUCER, M_BATCH, 8, EMPTY, "bad_message"),
    MSG("batch: device 1025 bytes", PRODUCER, M_BATCH, 8, LONG1025, "too_large"),
    MSG("batch: device \\xff\\xfe", PRODUCER, M_BATCH, 8, UTF8_FF, "bad_message"),
    MSG("batch: device with NUL", PRODUCER, M_BATCH, 8, NUL, "bad_message"),
    RAW("batch: 65535 entries announced, 1 sent", PRODUCER, R_HUGE_ENTRIES, NULL),
    /* over 32,768 entries a batch is decoded in slices (README "Limits"), all checked first */
    RAW("batch: 65535 entries, the last op_id 2^32", PRODUCER, R_SLICED_BAD, "bad_message"),
    /* meta */
    MSG("meta: an array", PRODUCER, M_META, ARG, ARRAY, "bad_message"),
    MSG("meta: no argument", PRODUCER, M_META, ARG, OMIT, "bad_message"),
    MSG("meta: 257 keys", PRODUCER, M_META, ARG, KEYS257, "too_large"),
    MSG("meta: an int key", PRODUCER, M_META, 1, ONE, "bad_message"),
    MSG("meta: an empty key", PRODUCER, M_META, 1, EMPTY, "bad_message"),
    MSG("meta: a key of 1025 bytes", PRODUCER, M_META, 1, LONG1025, "too_large"),
    MSG("meta: a key \\xff\\xfe", PRODUCER, M_META, 1, UTF8_FF, "bad_message"),
    MSG("meta: a map value", PRODUCER, M_META, 0, MAP, "bad_message"),
    MSG("meta: a bin value", PRODUCER, M_META, 0, BIN, "bad_message"),
    MSG("meta: a value of 1025 bytes", PRODUCER, M_META, 0, LONG1025, "too_large"),
    MSG("meta: a value of 5000 bytes", PRODUCER, M_META, 0, LONG5000, "too_large"),
    MSG("meta: a value 2^64-1", PRODUCER, M_META, 0, U64MAX, "bad_message"),
    MSG("meta: a value \\xed\\xa0\\x80", PRODUCER, M_META, 0, SURROGATE, "bad_message"),
    /* flush, bye */
    MSG("flush: seq a string", PRODUCER, M_FLUSH, 0, STR, "bad_message"),
    MSG("flush: seq -1", PRODUCER, M_FLUSH, 0, NEG, "bad_message"),
    MSG("flush: seq a float", PRODUCER, M_FLUSH, 0, FLOAT, "bad_message"),
    MSG("flush: no seq", PRODUCER, M_FLUSH, ARG, OMIT, "bad_message"),
    MSG("bye: an array", PRODUCER, M_BYE, ARG, ARRAY, "bad_message"),
    MSG("bye: dropped a string", PRODUCER, M_BYE, 0, STR, "bad_message"),
    MSG("bye: dropped -1", PRODUCER, M_BYE, 0, NEG, "bad_message"),
    MSG("bye: dropped 2^63", PRODUCER, M_BYE, 0, P63, "bad_message"),
    /* control requests */
    MSG("sessions: an array", FRESH, M_SESSIONS, ARG, ARRAY, "bad_message"),
    MSG("report: session missing", FRESH, M_REPORT, 0, OMIT, "bad_message"),
    MSG("report: session nil", FRESH, M_REPORT, 0, NIL, "bad_message"),
    MSG("report: session an array", FRESH, M_REPORT, 0, ARRAY, "bad_message"),
    MSG("report: session -1", FRESH, M_REPORT, 0, NEG, "bad_message"),
    MSG("report: session 2^63", FRESH, M_REPORT, 0, P63, "bad_message"),
    MSG("report: session a float", FRESH, M_REPORT, 0, FLOAT, "bad_message"),
    MSG("report: session 257 bytes", FRESH, M_REPORT, 0, LONG257, "too_large"),
    MSG("report: session \\xff\\xfe", FRESH, M_REPORT, 0, UTF8_FF, "bad_message"),
    MSG("report: top a string", FRESH, M_REPORT, 1, STR, "bad_message"),
    MSG("report: top -1", FRESH, M_REPORT, 1, NEG, "bad_message"),
    MSG("report: top 2^64-1", FRESH, M_REPORT, 1, U64MAX, "bad_message"),
    MSG("report: comm_min_ratio 2", FRESH, M_REPORT, 2, TWO, "bad_message"),
    MSG("report: comm_min_ratio a string", FRESH, M_REPORT, 2, STR, "bad_message"),
    MSG("report: comm_min_ratio -1", FRESH, M_REPORT, 2, NEG, "bad_message"),
    MSG("report: comm_min_ratio NaN", FRESH, M_REPORT, 2, NOTNUM, "bad_message"),
    MSG("meta: a NaN value is a float", PRODUCER, M_META, 0, NOTNUM, NULL),
    MSG("report: mem_threshold -1", FRESH, M_REPORT, 3, NEG, "bad_message"),
    MSG("report: mem_threshold a bool", FRESH, M_REPORT, 3, BOOL, "bad_message"),
    MSG("report: an int argument", FRESH, M_REPORT, ARG, ONE, "bad_message"),
    MSG("delete: session a bool", FRESH, M_DELETE, 0, BOOL, "bad_message"),
    MSG("delete: session missing", FRESH, M_DELETE, 0, OMIT, "bad_message"),
    MSG("export: session a map", FRESH, M_EXPORT, 0, MAP, "bad_message"),
    /* control requests for sessions that do not exist or are live */
    {.name = "report: no such id",
     .mode = FRESH,
     .msg = M_REPORT,
     .bad = NUM999,
     .code = "no_session",
     .stays_open = true},
    {.name = "report: no such name",
     .mode = FRESH,
     .msg = M_REPORT,
     .bad = OK,
     .code = "no_session",
     .stays_open = true},
    {.name = "delete: no such id",
     .mode = FRESH,
     .msg = M_DELETE,
     .bad = NUM999,
     .code = "no_session",
     .stays_open = true},
    {.name = "export: no such name",
     .mode = FRESH,
     .msg = M_EXPORT,
     .bad = OK,
     .code = "no_session",
     .stays_open = true},
    {.name = "delete: a live session",
     .mode = LIVE,
     .msg = M_DELETE,
     .bad = OK,
     .code = "session_live",
     .stays_open = true},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- helpers ----------------------------------------------------------------- */

struct pk {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void pk_init(struct pk *p)
{
    msgpack_sbuffer_init(&p->sb);
    msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

/* Sends what it can; the daemon may close first. Returns the bytes sent. */
static size_t send_some(int fd, const char *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    return off;
}

/* The next message on fd must be ["error", {code, message}] with code; then EOF. */
static void expect_error(int fd, const char *code, const char *what, bool closes)
{
    struct proto_reader r;
    struct proto_msg m;

    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "%s: no reply", what);
    cr_assert_eq(m.type, PROTO_ERROR, "%s: got %s, not an error", what, proto_type_name(m.type));
    cr_assert_not_null(m.u.error.code, "%s: an error without a code", what);
    cr_assert_str_eq(m.u.error.code, code, "%s: code %s (%s), want %s", what, m.u.error.code,
                     m.u.error.message ? m.u.error.message : "", code);
    cr_assert(m.u.error.message != NULL && m.u.error.message[0] != '\0', "%s: no message", what);
    cr_log_info("%s: %s: %s", what, m.u.error.code, m.u.error.message);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    if (closes)
        cr_assert(raw_closed(fd), "%s: the connection was not closed after the error", what);
}

/* A `sessions` request on fd (an open control connection) is answered "ok". */
static void expect_serving_on(int fd, const char *what)
{
    struct proto_reader r;
    const msgpack_object *o;
    struct pk p;

    pk_init(&p);
    msgpack_pack_array(&p.pk, 2);
    proto_pack_str(&p.pk, "sessions");
    msgpack_pack_map(&p.pk, 0);
    raw_send(fd, &p.sb);
    msgpack_sbuffer_destroy(&p.sb);
    proto_reader_init(&r, 16 << 20);
    cr_assert_eq(raw_recv_object(fd, &r, &o), 0, "%s: no reply to sessions", what);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: sessions was not answered ok", what);
    proto_reader_deinit(&r);
}

/* The daemon is alive and answers `sessions`; returns how many sessions it lists. */
static unsigned expect_serving(const char *what)
{
    struct proto_reader r;
    int fd, st;
    unsigned n;

    cr_assert_eq(waitpid(d.pid, &st, WNOHANG), 0, "%s: tracectld died", what);
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: sessions failed", what);
    n = o->via.array.ptr[1].via.array.size;
    proto_reader_deinit(&r);
    close(fd);
    return n;
}

/* The session's report: entries stored. */
static unsigned long long stored_entries(long long id)
{
    struct proto_request req;
    struct proto_reader r;
    unsigned long long n;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    const msgpack_object *o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report of session %lld failed", id);
    n = obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "entries"));
    proto_reader_deinit(&r);
    close(fd);
    return n;
}

/* hello (world 1), ops [[1, "matmul"]], ACCEPTED entries, flush → ack. */
static int producer(long long *id)
{
    int fd = raw_producer(d.sock, SESSION, 0, 1, "gpu:0", id);

    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, ACCEPTED, 1000, 10);
    cr_assert_eq(raw_flush(fd, 1), ACCEPTED, "the entries before the bad message were not acked");
    return fd;
}

/* SIGTERM: the daemon must exit 0 (under ASan: with no leak and no report). */
static void stop_daemon(void)
{
    int st;

    kill(d.pid, SIGTERM);
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid); /* the suite's timeout bounds a hang */
    d.pid = 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tracectld did not exit 0 on SIGTERM (%#x)",
              st);
}

/* Like raw_wait_state(id, "ended"), polling every 5 ms: the table has many cases. */
static void wait_ended(long long id)
{
    for (int i = 0; i < 1000; i++) {
        struct proto_reader r;
        bool ended = false;
        int fd;
        const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
        const msgpack_object *list = &o->via.array.ptr[1];

        for (uint32_t k = 0; k < list->via.array.size; k++) {
            const msgpack_object *row = &list->via.array.ptr[k];
            if ((long long)obj_u64(obj_get(row, "id")) == id)
                ended = obj_str_eq(obj_get(row, "state"), "ended");
        }
        proto_reader_deinit(&r);
        close(fd);
        if (ended)
            return;
        usleep(5000);
    }
    cr_assert_fail("session %lld did not end within 5 s", id);
}

/* ---- the table-driven test -------------------------------------------------- */

ParameterizedTestParameters(hostile, table)
{
    static int idx[N_CASES];

    for (size_t i = 0; i < N_CASES; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_CASES);
}

ParameterizedTest(int *i, hostile, table)
{
    const struct hcase *c = &cases[*i];
    long long id = -1;
    int fd, prod = -1;
    struct pk p;

    harness_daemon_start(&d, NULL);
    /* a bystander streams in its own session before and after the bad message */
    long long by_id;
    int by = raw_producer(d.sock, "bystander", 0, 1, "gpu:7", &by_id);
    raw_send_ops(by, 3, "allreduce");
    raw_send_batch(by, 3, 4, 0, 100);
    if (c->mode == PRODUCER) {
        fd = prod = producer(&id);
    } else {
        if (c->mode == LIVE)
            prod = producer(&id);
        fd = raw_connect(d.sock);
        cr_assert_geq(fd, 0);
    }
    pk_init(&p);
    if (c->raw != R_NONE)
        pack_raw(&p.sb, &p.pk, c->raw);
    else
        pack_message(&p.pk, c->msg, c->field, c->bad);
    send_some(fd, p.sb.data, p.sb.size);
    msgpack_sbuffer_destroy(&p.sb);

    if (c->code == NULL) {
        /* No error is due: a header announcing more entries than have arrived is not one
         * by itself (the daemon waits for the rest, within the message limit; closing then
         * cuts the message short: none of it is stored, all before it is), nor is an odd
         * but valid value. */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        cr_assert_eq(poll(&pf, 1, 300), 0, "%s: the daemon answered a message in progress",
                     c->name);
    } else {
        expect_error(fd, c->code, c->name, !c->stays_open);
        if (c->stays_open)
            expect_serving_on(fd, c->name);
    }
    close(fd);
    if (c->mode == LIVE)
        close(prod);

    raw_send_batch(by, 3, 3, 100000, 200);
    cr_assert_eq(raw_flush(by, 1), 7, "%s: the bystander's flush was not acked", c->name);
    raw_bye(by, 0);

    unsigned n = expect_serving(c->name);
    wait_ended(by_id);
    cr_assert_eq(stored_entries(by_id), 7, "%s: the bystander lost entries", c->name);
    if (id >= 0) {
        /* world 1: the session ends when its one process leaves */
        wait_ended(id);
        cr_assert_eq(stored_entries(id), ACCEPTED, "%s: entries accepted before were lost",
                     c->name);
        cr_assert_eq(n, 2, "%s: %u sessions", c->name, n);
    } else {
        cr_assert_eq(n, 1, "%s: a refused hello made a session", c->name);
    }
    stop_daemon();
}

/* ---- a message over 4 MiB, refused as its bytes arrive --------------------- */

/*
 * A batch of ~8 MiB, sent in 64 KiB chunks while watching for a reply: the
 * daemon must refuse it with too_large long before the end. With many small
 * entries the header's count already cannot fit in what is left of 4 MiB
 * once enough of them have arrived; with a few entries of 8 KiB device names
 * (each under the string bound of a message) only the byte count stops it.
 */
static void oversized(bool big_strings)
{
    const size_t entries = big_strings ? 1024 : 800000; /* 8 KiB or 11 bytes each */
    struct timeval tv = {.tv_sec = 5};
    char *device = calloc(1, 8192);
    size_t sent = 0, chunk = 64 << 10;
    bool answered = false;
    struct pk p;
    long long id;

    harness_daemon_start(&d, NULL);
    int fd = producer(&id);
    pk_init(&p);
    proto_pack_batch_header(&p.pk, entries);
    memset(device, 'g', 8192 - 1);
    for (size_t i = 0; i < entries; i++) {
        msgpack_pack_array(&p.pk, big_strings ? 9 : 4);
        msgpack_pack_uint64(&p.pk, i & 0x7f);
        msgpack_pack_uint64(&p.pk, 1);
        msgpack_pack_uint64(&p.pk, 1000000 + i);
        msgpack_pack_uint64(&p.pk, 1000);
        for (int k = 4; big_strings && k < 8; k++)
            msgpack_pack_nil(&p.pk);
        if (big_strings)
            proto_pack_str(&p.pk, device);
    }
    free(device);
    cr_assert_gt(p.sb.size, 2 * (size_t)PROTO_MAX_MSG - (1 << 20));
    /* a daemon that neither reads nor answers makes send() fail after 5 s, not hang */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    while (sent < p.sb.size) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            answered = true; /* the error (or EOF) is there: stop sending */
            break;
        }
        size_t n = p.sb.size - sent < chunk ? p.sb.size - sent : chunk;
        size_t k = send_some(fd, p.sb.data + sent, n);
        sent += k;
        if (k < n)
            break; /* the daemon closed */
    }
    cr_assert_lt(sent, p.sb.size - (1 << 20),
                 "the daemon took %zu of %zu bytes (answered: %d) before refusing", sent, p.sb.size,
                 answered);
    msgpack_sbuffer_destroy(&p.sb);
    expect_error(fd, "too_large", big_strings ? "8 MiB of long names" : "8 MiB of entries", true);
    close(fd);
    expect_serving("after an 8 MiB batch");
    wait_ended(id);
    cr_assert_eq(stored_entries(id), ACCEPTED);
    stop_daemon();
}

Test(hostile, over_4mib_of_entries_refused_as_it_arrives)
{
    oversized(false);
}

Test(hostile, over_4mib_of_long_strings_refused_as_it_arrives)
{
    oversized(true);
}

/* ---- cut short, then the peer closes --------------------------------------- */

Test(hostile, message_cut_short_then_close)
{
    struct pk p;
    long long id;

    harness_daemon_start(&d, NULL);
    int fd = producer(&id);
    raw_send_batch(fd, 1, 7, 50000, 20); /* whole, never flushed: stored all the same */
    pk_init(&p);
    proto_pack_batch_header(&p.pk, 3);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_array(&p.pk, 4);
        msgpack_pack_uint64(&p.pk, 1);
        msgpack_pack_uint64(&p.pk, 1);
        msgpack_pack_uint64(&p.pk, 90000 + (uint64_t)i);
        msgpack_pack_uint64(&p.pk, 5);
    }
    cr_assert_eq(send_some(fd, p.sb.data, p.sb.size - 4), p.sb.size - 4);
    msgpack_sbuffer_destroy(&p.sb);
    usleep(100000);
    close(fd);
    expect_serving("after a message cut short");
    wait_ended(id);
    cr_assert_eq(stored_entries(id), ACCEPTED + 7, "the whole messages before the cut are stored");
    stop_daemon();
}

/* ---- session names that look like paths ------------------------------------- */

/*
 * Every name under DATA_DIR must be the daemon's own: catalog.db*, lock,
 * sessions/<id>.db*, sessions/orphans (where files without a catalog row go).
 */
static void check_files_by_id(const char *data_dir)
{
    char path[PATH_MAX + 16]; /* data_dir plus "/sessions" */
    struct dirent *e;
    DIR *dir = opendir(data_dir);

    cr_assert_not_null(dir);
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0))
            continue;
        cr_assert(strncmp(e->d_name, "catalog.db", 10) == 0 || strcmp(e->d_name, "sessions") == 0 ||
                      strcmp(e->d_name, "lock") == 0,
                  "an unexpected file in the data dir: %s", e->d_name);
    }
    closedir(dir);
    snprintf(path, sizeof(path), "%s/sessions", data_dir);
    cr_assert_not_null(dir = opendir(path));
    while ((e = readdir(dir)) != NULL) {
        const char *s = e->d_name;
        if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strcmp(s, "orphans") == 0)
            continue;
        size_t digits = strspn(s, "0123456789");
        cr_assert(digits > 0 &&
                      (strcmp(s + digits, ".db") == 0 || strcmp(s + digits, ".db-wal") == 0 ||
                       strcmp(s + digits, ".db-shm") == 0),
                  "a session file not named by id: %s", s);
    }
    closedir(dir);
}

Test(hostile, session_names_like_paths_are_names_not_files)
{
    char long_ascii[257], long_utf8[257], escape[300], outside[PATH_MAX + 64];
    struct stat st;

    harness_daemon_start(&d, NULL);
    memset(long_ascii, 'n', 256);
    long_ascii[256] = '\0';
    for (int i = 0; i < 256; i += 2)
        memcpy(long_utf8 + i, "\xc3\xa9", 2); /* é, 128 times: 256 bytes */
    long_utf8[256] = '\0';
    /* ../../<the test dir's name>-escaped: what a path join in sessions/ would resolve to */
    snprintf(escape, sizeof(escape), "../../%s-escaped", strrchr(d.dir, '/') + 1);
    const char *names[] = {"/",        "..",         ".",        "../../../../tmp/x",
                           "a/b/c",    "catalog.db", "1.db",     escape,
                           long_ascii, long_utf8,    "a;b\r\nc", "*"};
    size_t n = sizeof(names) / sizeof(names[0]);
    long long ids[16];

    for (size_t i = 0; i < n; i++) {
        int fd = raw_producer(d.sock, names[i], 0, 1, "gpu:0", &ids[i]);
        raw_send_ops(fd, 1, names[i]); /* op names are names too */
        raw_send_batch(fd, 1, 3, 0, 10);
        cr_assert_eq(raw_flush(fd, 1), 3);
        raw_bye(fd, 0);
    }
    for (size_t i = 0; i < n; i++)
        wait_ended(ids[i]);

    /* the sessions list gives every name back exactly, each its own session */
    struct proto_reader r;
    int cfd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &cfd);
    const msgpack_object *list = &o->via.array.ptr[1];
    cr_assert_eq(list->via.array.size, n);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (uint32_t k = 0; k < list->via.array.size; k++) {
            const msgpack_object *row = &list->via.array.ptr[k];
            if ((long long)obj_u64(obj_get(row, "id")) == ids[i]) {
                cr_assert(obj_str_eq(obj_get(row, "name"), names[i]), "name %zu changed", i);
                found = true;
            }
        }
        cr_assert(found, "session %lld is not listed", ids[i]);
    }
    proto_reader_deinit(&r);
    close(cfd);
    /* a report by name finds the path-like name */
    struct proto_request req;
    proto_request_init(&req);
    req.session.name = "../../../../tmp/x";
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &cfd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    cr_assert_eq(obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "entries")), 3);
    proto_reader_deinit(&r);
    close(cfd);

    check_files_by_id(d.data);
    snprintf(outside, sizeof(outside), "%s-escaped", d.dir);
    cr_assert_neq(stat(outside, &st), 0, "a file was made outside the data dir: %s", outside);
    snprintf(outside, sizeof(outside), "%s-escaped.db", d.dir);
    cr_assert_neq(stat(outside, &st), 0, "a file was made outside the data dir: %s", outside);
    stop_daemon();
}
