/*
 * test_peerarr.c — the `arrivals` peer message (peerarr_wire.c): arrivals
 * packed and decoded come back the same, and a table of malformed messages,
 * each built here with msgpack-c by hand (not with peerarr_pack), is refused
 * with -EPROTO and a message, never taken in part.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peerarr.h"

TestSuite(peerarr, .timeout = 30);

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static int decode(const msgpack_sbuffer *sb, struct peerarr_msg *out, char *err, size_t errlen)
{
    msgpack_unpacked u;
    int rc;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb->data, sb->size, NULL), MSGPACK_UNPACK_SUCCESS);
    rc = peerarr_decode(&u.data, out, err, errlen);
    msgpack_unpacked_destroy(&u);
    return rc;
}

Test(peerarr, round_trip)
{
    const struct peerarr_arrival a[3] = {
        {.comm = 7, .seq = 0, .rank = 2, .enter_ns = 1000, .exit_ns = 1500, .bytes = 4096},
        {.comm = UINT64_MAX,
         .seq = UINT64_MAX,
         .rank = INT32_MAX - 1,
         .enter_ns = 5,
         .exit_ns = 5,
         .bytes = 0,
         .comm_size = INT32_MAX},
        {.comm = 7,
         .seq = 1,
         .rank = 3,
         .enter_ns = 0,
         .exit_ns = PEERARR_TIME_MAX,
         .bytes = 8,
         .comm_size = 4},
    };
    struct peerarr_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char err[128] = "";

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cr_assert_eq(peerarr_pack(&pk, "job", "node1", 9, a, 3), 0);
    cr_assert_eq(decode(&sb, &m, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(m.session, "job");
    cr_assert_str_eq(m.host, "node1");
    cr_assert_eq(m.dropped, 9);
    cr_assert_eq(m.n, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(m.arr[i].comm, a[i].comm);
        cr_assert_eq(m.arr[i].seq, a[i].seq);
        cr_assert_eq(m.arr[i].rank, a[i].rank);
        cr_assert_eq(m.arr[i].enter_ns, a[i].enter_ns);
        cr_assert_eq(m.arr[i].exit_ns, a[i].exit_ns);
        cr_assert_eq(m.arr[i].bytes, a[i].bytes);
        cr_assert_eq(m.arr[i].comm_size, a[i].comm_size);
    }
    peerarr_msg_free(&m);
    peerarr_msg_free(NULL);
    msgpack_sbuffer_destroy(&sb);
}

Test(peerarr, empty_and_limit)
{
    struct peerarr_arrival *a = calloc(PEERARR_MAX_MSG + 1, sizeof(*a));
    struct peerarr_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char err[128] = "";

    cr_assert_not_null(a);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cr_assert_eq(peerarr_pack(&pk, "job", "h", 0, a, PEERARR_MAX_MSG + 1), -EINVAL);
    cr_assert_eq(sb.size, 0);
    cr_assert_eq(peerarr_pack(&pk, "job", "h", 0, a, 0), 0);
    cr_assert_eq(decode(&sb, &m, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(m.n, 0);
    cr_assert_null(m.arr);
    peerarr_msg_free(&m);
    msgpack_sbuffer_clear(&sb);
    cr_assert_eq(peerarr_pack(&pk, "job", "h", 0, a, PEERARR_MAX_MSG), 0);
    cr_assert_eq(decode(&sb, &m, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(m.n, PEERARR_MAX_MSG);
    peerarr_msg_free(&m);
    msgpack_sbuffer_destroy(&sb);
    free(a);
}

enum bad {
    NOT_MAP,
    THREE_ELEMENTS,
    NO_SESSION,
    NO_HOST,
    NO_DROPPED,
    NO_ARRIVALS,
    SESSION_EMPTY,
    SESSION_LONG,
    HOST_SLASH,
    HOST_TWICE,
    DROPPED_NEGATIVE,
    KEY_NOT_STRING,
    ARRIVALS_NOT_ARRAY,
    TOO_MANY,
    ARRIVAL_SHORT,
    ARRIVAL_LONG,
    COMM_NEGATIVE,
    SEQ_STRING,
    RANK_NEGATIVE,
    RANK_HUGE,
    EXIT_BEFORE_ENTER,
    ENTER_PAST_MAX,
    COMM_SIZE_ZERO,
    COMM_SIZE_HUGE,
    RANK_NOT_BELOW_SIZE,
    ARRIVALS_TWICE,
    N_BAD
};

/* A message of two arrivals, valid but for what `bad` breaks. */
static void build(msgpack_sbuffer *sb, enum bad bad)
{
    msgpack_packer pk;
    char longname[300];
    size_t n = bad == TOO_MANY ? PEERARR_MAX_MSG + 1 : 2;
    uint32_t keys = 4 - (bad == NO_SESSION) - (bad == NO_HOST) - (bad == NO_DROPPED) -
                    (bad == NO_ARRIVALS) + (bad == HOST_TWICE) + (bad == KEY_NOT_STRING) +
                    (bad == ARRIVALS_TWICE);

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, bad == THREE_ELEMENTS ? 3 : 2);
    str(&pk, "arrivals");
    if (bad == NOT_MAP) {
        msgpack_pack_array(&pk, 0);
        return;
    }
    msgpack_pack_map(&pk, keys);
    if (bad == KEY_NOT_STRING) {
        msgpack_pack_uint8(&pk, 1);
        msgpack_pack_uint8(&pk, 1);
    }
    if (bad != NO_SESSION) {
        memset(longname, 'j', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        str(&pk, "session");
        str(&pk, bad == SESSION_LONG ? longname : bad == SESSION_EMPTY ? "" : "job");
    }
    for (int i = 0; i < (bad == NO_HOST ? 0 : bad == HOST_TWICE ? 2 : 1); i++) {
        str(&pk, "host");
        str(&pk, bad == HOST_SLASH ? "a/b" : "node1");
    }
    if (bad != NO_DROPPED) {
        str(&pk, "dropped");
        if (bad == DROPPED_NEGATIVE)
            msgpack_pack_int64(&pk, -1);
        else
            msgpack_pack_uint64(&pk, 3);
    }
    for (int k = 0; k < (bad == NO_ARRIVALS ? 0 : bad == ARRIVALS_TWICE ? 2 : 1); k++) {
        str(&pk, "arrivals");
        if (bad == ARRIVALS_NOT_ARRAY) {
            msgpack_pack_map(&pk, 0);
            continue;
        }
        msgpack_pack_array(&pk, n);
        for (size_t i = 0; i < n; i++) {
            bool last = i == n - 1;
            size_t len = last && bad == ARRIVAL_SHORT  ? 5
                         : last && bad == ARRIVAL_LONG ? 8
                         : last                        ? 7
                                                       : 6;
            msgpack_pack_array(&pk, len);
            if (last && bad == COMM_NEGATIVE)
                msgpack_pack_int64(&pk, -7);
            else
                msgpack_pack_uint64(&pk, 7);
            if (last && bad == SEQ_STRING)
                str(&pk, "1");
            else
                msgpack_pack_uint64(&pk, i);
            if (last && bad == RANK_NEGATIVE)
                msgpack_pack_int64(&pk, -1);
            else
                msgpack_pack_uint64(&pk, last && bad == RANK_HUGE             ? UINT64_C(1) << 31
                                         : last && bad == RANK_NOT_BELOW_SIZE ? 4
                                                                              : 1);
            msgpack_pack_uint64(&pk, last && bad == ENTER_PAST_MAX ? PEERARR_TIME_MAX + 1 : 100);
            msgpack_pack_uint64(&pk, last && bad == EXIT_BEFORE_ENTER ? 99 : 200);
            msgpack_pack_uint64(&pk, 64);
            if (len >= 7)
                msgpack_pack_uint64(&pk, bad == COMM_SIZE_ZERO   ? 0
                                         : bad == COMM_SIZE_HUGE ? UINT64_C(1) << 31
                                                                 : 4);
            if (len == 8)
                msgpack_pack_uint64(&pk, 0);
        }
    }
    if (bad == THREE_ELEMENTS)
        msgpack_pack_nil(&pk);
}

Test(peerarr, valid_base)
{
    struct peerarr_msg m;
    msgpack_sbuffer sb;
    char err[128] = "";

    build(&sb, N_BAD);
    cr_assert_eq(decode(&sb, &m, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(m.n, 2);
    cr_assert_eq(m.dropped, 3);
    cr_assert_eq(m.arr[0].comm_size, 0);
    cr_assert_eq(m.arr[1].comm_size, 4);
    cr_assert_eq(m.arr[1].seq, 1);
    peerarr_msg_free(&m);
    msgpack_sbuffer_destroy(&sb);
}

ParameterizedTestParameters(peerarr, refused)
{
    static int cases[N_BAD];

    for (int i = 0; i < N_BAD; i++)
        cases[i] = i;
    return cr_make_param_array(int, cases, N_BAD);
}

ParameterizedTest(int *bad, peerarr, refused)
{
    struct peerarr_msg m;
    msgpack_sbuffer sb;
    char err[128] = "";

    build(&sb, (enum bad) * bad);
    cr_assert_eq(decode(&sb, &m, err, sizeof(err)), -EPROTO, "case %d decoded", *bad);
    cr_assert_eq(strncmp(err, "arrivals: ", 10), 0, "case %d: '%s'", *bad, err);
    cr_assert_null(m.session);
    cr_assert_null(m.arr);
    cr_assert_eq(m.n, 0);
    msgpack_sbuffer_destroy(&sb);
}
