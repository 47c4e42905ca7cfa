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
#include "peerclock.h"

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
        {.comm = 7,
         .seq = 0,
         .rank = 2,
         .enter_ns = 1000,
         .exit_ns = 1500,
         .bytes = 4096,
         .step = INT64_MAX},
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
         .comm_size = 4,
         .step = 12},
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
        cr_assert_eq(m.arr[i].step, a[i].step);
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
    STEP_NEGATIVE,
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
            size_t len = last && bad == ARRIVAL_SHORT   ? 5
                         : last && bad == ARRIVAL_LONG  ? 9
                         : last && bad == STEP_NEGATIVE ? 8
                         : last                         ? 7
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
            if (len >= 8 && bad == STEP_NEGATIVE)
                msgpack_pack_int64(&pk, -1);
            else if (len >= 8)
                msgpack_pack_uint64(&pk, 0);
            if (len == 9)
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

/* ---- the home's table ------------------------------------------------------------ */

#define US  INT64_C(1000)
#define MS  INT64_C(1000000)
#define SEC INT64_C(1000000000)

/*
 * A member clock whose estimator believes member − home = believed within
 * 10 µs: one burst of 8 probes of 10 µs each way that the member answered
 * as if its clock were home + believed (the truth, or a lie for the
 * mis-estimated case).
 */
static struct peerclock *clock_believing(int64_t believed)
{
    struct peerclock *pc = malloc(sizeof(*pc));
    struct peerclock_sample s[8];

    cr_assert_not_null(pc);
    peerclock_init(pc);
    for (int i = 0; i < 8; i++) {
        int64_t t1 = SEC + i * MS;
        s[i] = (struct peerclock_sample){.t1 = t1,
                                         .t2 = t1 + 10 * US + believed,
                                         .t3 = t1 + 11 * US + believed,
                                         .t4 = t1 + 21 * US};
    }
    cr_assert_eq(peerclock_add_burst(pc, s, 8, NULL), 0);
    return pc;
}

/*
 * One allreduce (comm 5, seq `seq`) of 4 ranks at true home time h: ranks
 * 0, 1 on the home (host 0), 2, 3 on host 1 whose clock is home + theta;
 * rank 3 enters `late` after the others; everyone leaves 50 µs after the
 * last enter, 10 µs apart.
 */
static void allreduce(struct peerarr_table *t, uint64_t seq, int64_t h, int64_t theta, int64_t late,
                      uint64_t world)
{
    int64_t enter[4] = {h, h + 2 * US, h + 1 * US, h + late};
    int64_t last = h + late, now = h + late + SEC / 10;

    for (int r = 0; r < 4; r++) {
        int64_t shift = r >= 2 ? theta : 0;
        struct peerarr_arrival a = {.comm = 5,
                                    .seq = seq,
                                    .rank = r,
                                    .enter_ns = enter[r] + shift,
                                    .exit_ns = last + 50 * US + r * 10 * US + shift,
                                    .bytes = 1024};
        cr_assert_eq(peerarr_table_add(t, "job", r >= 2 ? 1 : 0, &a, world, now), 0);
    }
}

Test(peerarr, honest_clock_no_violation)
{
    const int64_t theta = 5 * SEC + 123 * US; /* member − home, as a time namespace makes it */
    struct peerarr_table *t = peerarr_table_new(16);
    struct peerclock *pc = clock_believing(theta);
    struct peerclock *clocks[2] = {NULL, pc};
    struct peerarr_stats st;

    cr_assert_not_null(t);
    for (uint64_t seq = 0; seq < 3; seq++)
        allreduce(t, seq, 2 * SEC + (int64_t)seq * 100 * MS, theta, 5 * MS, 4);
    cr_assert_eq(peerarr_table_due(t, 3 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 3);
    peerarr_table_stats(t, &st);
    cr_assert_eq(st.added, 12);
    cr_assert_eq(st.instances, 3);
    cr_assert_eq(st.complete, 3);
    cr_assert_eq(st.checks, 3);
    cr_assert_eq(pc->collectives, 3);
    cr_assert_eq(pc->violations, 0);
    cr_assert_eq(pc->contradictions, 0);
    cr_assert_eq(peerarr_table_due(t, 3 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 0,
                 "removed");
    peerarr_table_free(t);
    free(pc);
}

Test(peerarr, misestimated_clock_violates)
{
    const int64_t theta = 5 * SEC;
    struct peerarr_table *t = peerarr_table_new(16);
    /* the estimator believes the member 10 ms further behind than it is: its ranks' times
     * convert 10 ms late, entering after the home's ranks left */
    struct peerclock *pc = clock_believing(theta - 10 * MS);
    struct peerclock *early = clock_believing(theta + 10 * MS);
    struct peerclock *clocks[2] = {NULL, pc};

    cr_assert_not_null(t);
    allreduce(t, 0, 2 * SEC, theta, 1 * MS, 4);
    allreduce(t, 1, 2 * SEC + 100 * MS, theta, 1 * MS, 4);
    cr_assert_eq(peerarr_table_due(t, 3 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 2);
    cr_assert_eq(pc->collectives, 2);
    cr_assert_eq(pc->violations, 2);
    /* the other way: its times convert 10 ms early, leaving before the home's ranks entered */
    clocks[1] = early;
    allreduce(t, 2, 2 * SEC + 200 * MS, theta, 1 * MS, 4);
    cr_assert_eq(peerarr_table_due(t, 3 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 1);
    cr_assert_eq(early->collectives, 1);
    cr_assert_eq(early->violations, 1);
    peerarr_table_free(t);
    free(pc);
    free(early);
}

Test(peerarr, incomplete_ages_out_and_comm_size_decides)
{
    const int64_t theta = -500 * MS; /* a member clock behind the home's */
    struct peerarr_table *t = peerarr_table_new(16);
    struct peerclock *pc = clock_believing(theta);
    struct peerclock *clocks[2] = {NULL, pc};
    struct peerarr_stats st;
    struct peerarr_arrival a = {.comm = 9, .seq = 0, .rank = 0, .enter_ns = 0, .exit_ns = 0};

    cr_assert_not_null(t);
    /* world 8, 4 arrivals: waits until its first arrival (taken at 2.1 s) is 10 s old */
    allreduce(t, 0, 2 * SEC, theta, 0, 8);
    cr_assert_eq(peerarr_table_due(t, 12 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 0);
    cr_assert_eq(peerarr_table_due(t, 12 * SEC + 100 * MS, PEERARR_AGE_NS, clocks, 2, NULL, NULL),
                 1);
    peerarr_table_stats(t, &st);
    cr_assert_eq(st.instances, 1);
    cr_assert_eq(st.complete, 0);
    cr_assert_eq(st.checks, 1);
    cr_assert_eq(pc->violations, 0);
    /* comm_size 2 on one arrival decides over world 100: complete with two */
    a.comm_size = 2;
    a.enter_ns = a.exit_ns = 20 * SEC;
    cr_assert_eq(peerarr_table_add(t, "job", 0, &a, 100, 20 * SEC), 0);
    cr_assert_eq(peerarr_table_due(t, 20 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 0);
    a.rank = 1;
    a.comm_size = 0;
    cr_assert_eq(peerarr_table_add(t, "job", 0, &a, 100, 20 * SEC), 0);
    cr_assert_eq(peerarr_table_due(t, 20 * SEC, PEERARR_AGE_NS, clocks, 2, NULL, NULL), 1);
    peerarr_table_stats(t, &st);
    cr_assert_eq(st.complete, 1);
    cr_assert_eq(st.checks, 1, "the home's own ranks alone check no clock");
    cr_assert_eq(pc->collectives, 1);
    peerarr_table_free(t);
    free(pc);
}

Test(peerarr, bounded_sessions_and_unmeasured_clocks)
{
    struct peerarr_table *t = peerarr_table_new(2);
    struct peerarr_arrival a = {.comm = 1, .enter_ns = 10, .exit_ns = 20};
    struct peerclock *clocks[3] = {NULL, NULL, NULL};
    struct peerarr_stats st;

    cr_assert_not_null(t);
    cr_assert_null(peerarr_table_new(0));
    /* three instances in a table of two: the oldest goes unchecked */
    for (uint64_t seq = 0; seq < 3; seq++) {
        a.seq = seq;
        cr_assert_eq(peerarr_table_add(t, seq == 1 ? "other" : "job", 2, &a, 2, (int64_t)seq), 0);
    }
    a.exit_ns = 5;
    cr_assert_eq(peerarr_table_add(t, "job", 2, &a, 2, 3), -EINVAL, "exit before enter");
    peerarr_table_stats(t, &st);
    cr_assert_eq(st.evicted, 1);
    cr_assert_eq(st.added, 3);
    cr_assert_eq(st.refused, 1);
    /* a member whose clock is not measured is not checked; the two left age out */
    cr_assert_eq(peerarr_table_due(t, PEERARR_AGE_NS + 2, PEERARR_AGE_NS, clocks, 3, NULL, NULL),
                 2);
    peerarr_table_stats(t, &st);
    cr_assert_eq(st.instances, 2);
    cr_assert_eq(st.checks, 0);
    /* PEERARR_SESSIONS names at once: one more is refused until one has no instance left */
    struct peerarr_table *big = peerarr_table_new(PEERARR_SESSIONS + 1);
    char name[32];
    a.exit_ns = 20;
    for (int i = 0; i < PEERARR_SESSIONS; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        cr_assert_eq(peerarr_table_add(big, name, 0, &a, 0, 0), 0);
    }
    cr_assert_eq(peerarr_table_add(big, "one-more", 0, &a, 0, 0), -ENOSPC);
    cr_assert_eq(peerarr_table_due(big, PEERARR_AGE_NS, PEERARR_AGE_NS, clocks, 3, NULL, NULL),
                 PEERARR_SESSIONS);
    cr_assert_eq(peerarr_table_add(big, "one-more", 0, &a, 0, PEERARR_AGE_NS), 0);
    peerarr_table_free(big);
    peerarr_table_free(t);
}

/* ---- the member's queue ------------------------------------------------------------ */

Test(peerarr, queue_keeps_order_and_counts_drops)
{
    struct peerarr_queue *q = peerarr_queue_new();
    struct peerarr_arrival *out = calloc(PEERARR_MAX_MSG, sizeof(*out));
    size_t got = 0, n;

    cr_assert_not_null(q);
    cr_assert_not_null(out);
    cr_assert_eq(peerarr_queue_take(q, out, PEERARR_MAX_MSG), 0, "empty, no ring yet");
    for (uint64_t i = 0; i < PEERARR_QUEUE + 5; i++) {
        struct peerarr_arrival a = {.comm = 1, .seq = i, .enter_ns = (int64_t)i};
        peerarr_queue_push(q, &a);
    }
    cr_assert_eq(q->n, PEERARR_QUEUE);
    cr_assert_eq(q->dropped, 5);
    /* out in order, 8192 at a time, across the ring's end after one more push */
    n = peerarr_queue_take(q, out, 3);
    cr_assert_eq(n, 3);
    cr_assert_eq(out[2].seq, 2);
    struct peerarr_arrival late = {.comm = 1, .seq = 999999};
    peerarr_queue_push(q, &late);
    got = 3;
    while ((n = peerarr_queue_take(q, out, PEERARR_MAX_MSG)) > 0) {
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(out[i].seq, got + i == PEERARR_QUEUE ? 999999 : got + i);
        got += n;
    }
    cr_assert_eq(got, PEERARR_QUEUE + 1);
    cr_assert_eq(q->dropped, 5);
    peerarr_queue_free(q);
    peerarr_queue_free(NULL);
    free(out);
}

Test(peerarr, sync_ops_by_name)
{
    const char *yes[] = {"allreduce",        "MPI_Allreduce",  "nccl:all_reduce",
                         "c10d::allreduce_", "MPI_Allgatherv", "all_gather",
                         "MPI_Alltoallw",    "barrier",        "MPI_Ibarrier"};
    const char *no[] = {"MPI_Bcast", "MPI_Reduce", "reduce_scatter", "broadcast", "send", "", "ar"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        cr_assert(peerarr_sync_op(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        cr_assert(!peerarr_sync_op(no[i]), "%s", no[i]);
}
