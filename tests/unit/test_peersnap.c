/*
 * test_peersnap.c — the `snapshot` peer message (peersnap.c): a snapshot
 * packed and decoded comes back the same, and a table of malformed ones,
 * each built here with msgpack-c by hand (not with peersnap_pack), is
 * refused with -EPROTO and a message, never taken in part.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peersnap.h"

TestSuite(peersnap, .timeout = 30);

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void kv(msgpack_packer *pk, const char *k, uint64_t v)
{
    str(pk, k);
    msgpack_pack_uint64(pk, v);
}

/*
 * A valid snapshot of two ops and one device, except for what `bad` breaks
 * (0: nothing). Op "a": durations 10, 10, 300 (buckets 10 and agg_bucket(300));
 * op "b": one call of 20.
 */
enum bad {
    OK,
    NO_SESSION,
    NO_SEQ,
    OP_SHORT,
    BUCKET_WRONG,
    COUNTS_SHORT,
    OPS_UNSORTED,
    OPS_DUP,
    ENTRIES_WRONG,
    NAME_NOT_UTF8,
    NAME_EMPTY,
    MIN_OVER_MAX,
    ENDED_NOT_BOOL,
    NEGATIVE,
    NOT_MAP,
    HIST_ODD,
    BUCKETS_UNSORTED,
    DEVS_DUP,
    SESSION_LONG,
    ZERO_CALLS,
    TOP_SHORT,
    TOP_RANK_NEGATIVE,
    BEGIN_AFTER_END,
    RANK_ROW_SHORT,
    RANKS_DUP,
    RANK_LATE_NIL,
    RANK_SHARE_OVER,
    RANK_MEAN_WRONG,
    RANKS_OVER_CAP,
    RANK_NEGATIVE,
    N_BAD
};

static void op(msgpack_packer *pk, const char *name, uint64_t calls, uint64_t total, uint64_t min,
               uint64_t max, const uint64_t *hist, size_t n_hist, int nfields)
{
    msgpack_pack_array(pk, nfields);
    str(pk, name);
    str(pk, "compute");
    msgpack_pack_uint64(pk, calls);
    msgpack_pack_uint64(pk, total);
    msgpack_pack_uint64(pk, min);
    msgpack_pack_uint64(pk, max);
    msgpack_pack_uint64(pk, 64);
    msgpack_pack_uint64(pk, 16);
    if (nfields < 9)
        return;
    msgpack_pack_array(pk, n_hist);
    for (size_t i = 0; i < n_hist; i++)
        msgpack_pack_uint64(pk, hist[i]);
}

/*
 * A `rank_rows` row: rank (-1: nil), 3 processes, `steps` steps of 100 ns each, late in
 * `late` of them (steps 1..late; UINT64_MAX: 0 late steps, yet a first and last given),
 * untracked nil when rank is nil, comm_share `share`.
 */
static void rank_row(msgpack_packer *pk, int64_t rank, uint64_t steps, uint64_t late, uint64_t mean,
                     double share, int nfields)
{
    msgpack_pack_array(pk, nfields);
    if (rank >= 0)
        msgpack_pack_uint64(pk, (uint64_t)rank);
    else if (rank == -1)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_int64(pk, rank);
    /* processes, dropped, steps, step_ns, step_mean_ns, then total_ns .. caused_ns, then
     * slowest_steps (none) */
    msgpack_pack_uint64(pk, 3);
    msgpack_pack_uint64(pk, 0);
    msgpack_pack_uint64(pk, steps);
    msgpack_pack_uint64(pk, 100 * steps);
    msgpack_pack_uint64(pk, mean);
    for (int i = 0; i < 11; i++)
        msgpack_pack_uint64(pk, 7);
    msgpack_pack_uint64(pk, 0);
    msgpack_pack_uint64(pk, late == UINT64_MAX ? 0 : late); /* late_steps */
    if (late > 0) {
        msgpack_pack_uint64(pk, 1);
        msgpack_pack_uint64(pk, late == UINT64_MAX ? 1 : late);
    } else {
        msgpack_pack_nil(pk);
        msgpack_pack_nil(pk);
    }
    if (rank == -1)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_uint64(pk, 11);
    msgpack_pack_uint64(pk, 5); /* cpu_wait_ns */
    if (nfields == 24)
        msgpack_pack_double(pk, share);
}

static void rank_rows(msgpack_packer *pk, enum bad bad)
{
    size_t n = bad == RANKS_OVER_CAP ? PEERSNAP_MAX_RANKS + 1 : 2;

    str(pk, "rank_rows");
    msgpack_pack_array(pk, n);
    rank_row(pk, -1, 0, 0, 0, 0.0, 24);
    if (bad == RANKS_DUP)
        rank_row(pk, -1, 0, 0, 0, 0.0, 24);
    else if (bad == RANK_NEGATIVE)
        rank_row(pk, -3, 0, 0, 0, 0.0, 24);
    else
        rank_row(pk, 2, 4, bad == RANK_LATE_NIL ? UINT64_MAX : 2, bad == RANK_MEAN_WRONG ? 99 : 100,
                 bad == RANK_SHARE_OVER ? 1.5 : 0.25, bad == RANK_ROW_SHORT ? 23 : 24);
    for (size_t i = 2; i < n; i++)
        rank_row(pk, (int64_t)i + 1, 0, 0, 0, 0.0, 24);
}

static void build(msgpack_sbuffer *sb, enum bad bad)
{
    msgpack_packer pk;
    uint64_t b300 = agg_bucket(300);
    uint64_t ha[6] = {10, 10, 2, b300, 300, 1}, hb[3] = {20, 20, 1};
    char longname[300];

    if (bad == BUCKET_WRONG)
        ha[3] = b300 + 1;
    if (bad == COUNTS_SHORT)
        ha[2] = 1;
    if (bad == BUCKETS_UNSORTED) {
        uint64_t t[6] = {b300, 300, 1, 10, 10, 2};
        memcpy(ha, t, sizeof(t));
    }
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    str(&pk, "snapshot");
    if (bad == NOT_MAP) {
        msgpack_pack_array(&pk, 0);
        return;
    }
    msgpack_pack_map(&pk, 9 - (bad == NO_SESSION) - (bad == NO_SEQ) +
                              (bad == TOP_SHORT || bad == TOP_RANK_NEGATIVE));
    rank_rows(&pk, bad);
    if (bad != NO_SESSION) {
        str(&pk, "session");
        memset(longname, 'j', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        str(&pk, bad == SESSION_LONG ? longname : "job");
    }
    if (bad != NO_SEQ)
        kv(&pk, "seq", 7);
    kv(&pk, "begin_ns", 1000);
    kv(&pk, "end_ns", bad == BEGIN_AFTER_END ? 999 : 2000);
    str(&pk, "ended");
    if (bad == ENDED_NOT_BOOL)
        msgpack_pack_uint8(&pk, 1);
    else
        msgpack_pack_true(&pk);
    str(&pk, "entries");
    if (bad == NEGATIVE)
        msgpack_pack_int64(&pk, -4);
    else
        msgpack_pack_uint64(&pk, bad == ENTRIES_WRONG ? 5 : 4);
    str(&pk, "ops");
    msgpack_pack_array(&pk, bad == OPS_DUP ? 3 : 2);
    if (bad == OPS_UNSORTED)
        op(&pk, "b", 1, 20, 20, 20, hb, 3, 9);
    if (bad == NAME_NOT_UTF8)
        op(&pk, "\xff", 3, 320, 10, 300, ha, 6, 9);
    else if (bad == NAME_EMPTY)
        op(&pk, "", 3, 320, 10, 300, ha, 6, 9);
    else if (bad == MIN_OVER_MAX)
        op(&pk, "a", 3, 320, 301, 300, ha, 6, 9);
    else if (bad == ZERO_CALLS)
        op(&pk, "a", 0, 320, 10, 300, ha, 6, 9);
    else
        op(&pk, "a", 3, 320, 10, 300, ha, bad == HIST_ODD ? 5 : 6, bad == OP_SHORT ? 8 : 9);
    if (bad == OPS_DUP)
        op(&pk, "a", 3, 320, 10, 300, ha, 6, 9);
    if (bad != OPS_UNSORTED)
        op(&pk, "b", 1, 20, 20, 20, hb, 3, 9);
    if (bad == TOP_SHORT || bad == TOP_RANK_NEGATIVE) {
        str(&pk, "slowest");
        msgpack_pack_array(&pk, 1);
        msgpack_pack_array(&pk, bad == TOP_SHORT ? 6 : 7);
        str(&pk, "a");
        if (bad == TOP_RANK_NEGATIVE)
            msgpack_pack_int64(&pk, -2);
        else
            msgpack_pack_nil(&pk);
        msgpack_pack_nil(&pk);
        for (int i = 0; i < 4; i++)
            msgpack_pack_uint64(&pk, 1);
    }
    str(&pk, "devices");
    msgpack_pack_array(&pk, bad == DEVS_DUP ? 2 : 1);
    for (int i = 0; i < (bad == DEVS_DUP ? 2 : 1); i++) {
        msgpack_pack_array(&pk, 4);
        str(&pk, "gpu:0");
        msgpack_pack_uint64(&pk, 4);
        msgpack_pack_uint64(&pk, 340);
        msgpack_pack_uint64(&pk, 128);
    }
}

static int decode(const msgpack_sbuffer *sb, struct peersnap *s, char *err, size_t len)
{
    msgpack_unpacked u;
    int rc;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb->data, sb->size, NULL), MSGPACK_UNPACK_SUCCESS);
    rc = peersnap_decode(&u.data, s, err, len);
    msgpack_unpacked_destroy(&u);
    return rc;
}

Test(peersnap, valid_decodes_exactly)
{
    msgpack_sbuffer sb;
    struct peersnap s;
    char err[200] = "";

    build(&sb, OK);
    cr_assert_eq(decode(&sb, &s, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(s.session, "job");
    cr_assert_eq(s.seq, 7);
    cr_assert(s.ended);
    cr_assert_eq(s.entries, 4);
    cr_assert_eq(s.begin_ns, 1000);
    cr_assert_eq(s.end_ns, 2000);
    cr_assert_eq(s.n_ops, 2);
    cr_assert_str_eq(s.ops[0].op, "a");
    cr_assert_eq(s.ops[0].calls, 3);
    cr_assert_eq(s.ops[0].n_hist, 2);
    cr_assert_eq(s.ops[0].hist[0].bucket, 10);
    cr_assert_eq(s.ops[0].hist[0].count, 2);
    cr_assert_eq(s.ops[0].hist[1].min_ns, 300);
    cr_assert_eq(s.n_devs, 1);
    cr_assert_eq(s.devs[0].total_ns, 340);
    cr_assert_eq(s.n_rank_rows, 2);
    cr_assert_eq(s.rank_rows[0].rank, -1);
    cr_assert(!s.rank_rows[0].untracked_known);
    cr_assert_eq(s.rank_rows[1].rank, 2);
    cr_assert_eq(s.rank_rows[1].steps, 4);
    cr_assert_eq(s.rank_rows[1].step_ns, 400);
    cr_assert_eq(s.rank_rows[1].late_steps, 2);
    cr_assert_eq(s.rank_rows[1].late_last_step, 2);
    cr_assert(s.rank_rows[1].untracked_known);
    cr_assert_eq(s.rank_rows[1].untracked_ns, 11);
    cr_assert_eq(s.rank_rows[1].cpu_wait_ns, 5);
    cr_assert_float_eq(s.rank_rows[1].comm_share, 0.25, 1e-12);
    peersnap_free(&s);
    msgpack_sbuffer_destroy(&sb);
}

Test(peersnap, pack_then_decode_is_the_same)
{
    msgpack_sbuffer sb, again;
    msgpack_packer pk;
    struct peersnap s, t;
    char err[200] = "";

    build(&sb, OK);
    cr_assert_eq(decode(&sb, &s, err, sizeof(err)), 0, "%s", err);
    s.slowest = calloc(2, sizeof(*s.slowest));
    s.n_slowest = 2;
    s.slowest[0] = (struct peersnap_entry){.op = strdup("a"),
                                           .rank = 3,
                                           .device = strdup("gpu:1"),
                                           .step = 4,
                                           .start_ns = 5,
                                           .dur_ns = 300,
                                           .mem_bytes = 6};
    s.slowest[1] = (struct peersnap_entry){.op = strdup("b"), .rank = -1, .dur_ns = 20};
    msgpack_sbuffer_init(&again);
    msgpack_packer_init(&pk, &again, msgpack_sbuffer_write);
    cr_assert_eq(peersnap_pack(&pk, &s), 0);
    cr_assert_eq(decode(&again, &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(t.n_ops, s.n_ops);
    for (size_t i = 0; i < s.n_ops; i++) {
        cr_assert_str_eq(t.ops[i].op, s.ops[i].op);
        cr_assert_eq(t.ops[i].total_ns, s.ops[i].total_ns);
        cr_assert_eq(t.ops[i].n_hist, s.ops[i].n_hist);
        cr_assert_eq(memcmp(t.ops[i].hist, s.ops[i].hist, s.ops[i].n_hist * sizeof(*s.ops[i].hist)),
                     0);
    }
    cr_assert_eq(t.seq, s.seq);
    cr_assert_eq(t.begin_ns, 1000);
    cr_assert_eq(t.end_ns, 2000);
    cr_assert_eq(t.n_slowest, 2);
    cr_assert_str_eq(t.slowest[0].device, "gpu:1");
    cr_assert_eq(t.slowest[0].rank, 3);
    cr_assert_eq(t.slowest[0].start_ns, 5);
    cr_assert_eq(t.slowest[1].rank, -1);
    cr_assert_null(t.slowest[1].device);
    cr_assert_eq(t.n_hotspots, 0);
    cr_assert_eq(t.ended, s.ended);
    cr_assert_eq(t.n_rank_rows, 2);
    cr_assert_eq(memcmp(t.rank_rows, s.rank_rows, 2 * sizeof(*t.rank_rows)), 0);
    cr_assert_eq(t.ranks_cut, 0);
    peersnap_free(&s);
    peersnap_free(&t);
    peersnap_free(NULL);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&again);
}

ParameterizedTestParameters(peersnap, malformed_refused)
{
    static int cases[N_BAD - 1];

    for (int i = 0; i < N_BAD - 1; i++)
        cases[i] = i + 1;
    return cr_make_param_array(int, cases, N_BAD - 1);
}

ParameterizedTest(int *bad, peersnap, malformed_refused)
{
    msgpack_sbuffer sb;
    struct peersnap s;
    char err[200] = "";

    build(&sb, (enum bad) * bad);
    cr_assert_eq(decode(&sb, &s, err, sizeof(err)), -EPROTO, "case %d was taken", *bad);
    cr_assert(strncmp(err, "snapshot: ", 10) == 0, "case %d: message \"%s\"", *bad, err);
    cr_assert_null(s.ops);
    cr_assert_null(s.session);
    cr_assert_null(s.rank_rows);
    msgpack_sbuffer_destroy(&sb);
}
