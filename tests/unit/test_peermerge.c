/*
 * test_peermerge.c — the home's merge of hosts' parts (peermerge.c).
 *
 * The parts are snapshots built here (peersnap_pack over structs filled by
 * hand), of durations whose every figure this file computes on its own:
 * host A ran op "x" with 1..50 ns and host B with 51..100 ns (all below
 * 256 ns, so every duration is its own bucket and percentiles are exact),
 * so the merge must say what one host with 1..100 would: p50 50, p95 95,
 * p99 99, sum 5050, min 1, max 100.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "peermerge.h"
#include "peersnap.h"

TestSuite(peermerge, .timeout = 30);

Test(peermerge, percentiles_nearest_rank_over_buckets)
{
    struct agg_hist_bucket b[3] = {{.bucket = 5, .min_ns = 5, .count = 10},
                                   {.bucket = 7, .min_ns = 7, .count = 85},
                                   {.bucket = 9, .min_ns = 9, .count = 5}};
    uint64_t out[3];

    /* 100 values: ranks 1..10 are 5, 11..95 are 7, 96..100 are 9. */
    peermerge_percentiles(b, 3, 100, out);
    cr_assert_eq(out[0], 7);
    cr_assert_eq(out[1], 7);
    cr_assert_eq(out[2], 9);
    peermerge_percentiles(b, 0, 0, out);
    cr_assert_eq(out[0] + out[1] + out[2], 0);
}

/*
 * The member's CLOCK_MONOTONIC when the next part() began: its begin_ns, and
 * its slowest entries start at t0 + i (0: begin and end 0, no times sent).
 */
static uint64_t part_t0;

/* A part of op "x" with durations lo..hi ns, one device "gpu:0", packed. */
static void part(struct peermerge_part *p, const char *host, uint64_t lo, uint64_t hi,
                 const char *state)
{
    struct peersnap s = {0};
    struct peersnap_op op = {0};
    struct peersnap_dev dev = {0};
    msgpack_sbuffer sb;
    msgpack_packer pk;

    op.op = "x";
    op.category = "comm";
    op.calls = hi - lo + 1;
    op.min_ns = lo;
    op.max_ns = hi;
    op.hist = calloc(op.calls, sizeof(*op.hist));
    for (uint64_t v = lo; v <= hi; v++) {
        op.total_ns += v;
        op.hist[v - lo] =
            (struct agg_hist_bucket){.bucket = agg_bucket(v), .min_ns = v, .count = 1};
    }
    op.n_hist = op.calls;
    dev.device = "gpu:0";
    dev.calls = op.calls;
    dev.total_ns = op.total_ns;
    s.session = "job";
    s.seq = 1;
    s.processes = 2;
    s.ranks = 2;
    s.entries = op.calls;
    s.total_ns = op.total_ns;
    s.dropped = 3;
    s.span_ns = hi * 10;
    s.begin_ns = part_t0;
    s.end_ns = part_t0 > 0 ? part_t0 + s.span_ns : 0;
    s.ops = &op;
    s.n_ops = 1;
    s.devs = &dev;
    s.n_devs = 1;
    /* top lists: the three longest calls, and one hotspot of hi bytes */
    struct peersnap_entry slow[3],
        hot = {.op = "x", .rank = 1, .device = "gpu:0", .dur_ns = lo, .mem_bytes = hi};
    for (int i = 0; i < 3; i++)
        slow[i] = (struct peersnap_entry){.op = "x",
                                          .rank = 1,
                                          .device = "gpu:0",
                                          .step = (uint64_t)i,
                                          .start_ns = part_t0 > 0 ? part_t0 + (uint64_t)i : 0,
                                          .dur_ns = hi - (uint64_t)i};
    s.slowest = slow;
    s.n_slowest = 3;
    s.hotspots = &hot;
    s.n_hotspots = 1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cr_assert_eq(peersnap_pack(&pk, &s), 0);
    free(op.hist);
    p->host = strdup(host);
    p->state = state;
    p->age_ns = 5;
    p->bound_ns = -1;
    p->drift_ppm = NAN;
    p->snap_len = sb.size;
    p->snap = msgpack_sbuffer_release(&sb);
}

Test(peermerge, two_members_merge_exactly)
{
    struct peermerge m = {.home_state = "live"};
    struct report r = {0};
    struct report_params p = {.top = 10};
    msgpack_unpacked u;
    char err[200] = "";

    m.home_host = strdup("home");
    m.parts = calloc(2, sizeof(*m.parts));
    m.n_parts = 2;
    part(&m.parts[0], "a", 1, 50, "live");
    part(&m.parts[1], "b", 51, 100, "stale");
    cr_assert_eq(peermerge_report(&r, &m, NULL, &p, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(r.entries, 100);
    cr_assert_eq(r.processes, 4);
    cr_assert_eq(r.dropped, 6);
    cr_assert_eq(r.total_ns, 5050);
    cr_assert_eq(r.span_ns, 1000); /* the longest one host's span (b: 100 * 10) */
    cr_assert_eq(r.n_ops, 1);
    cr_assert_str_eq(r.ops[0].op, "x");
    cr_assert_eq(r.ops[0].calls, 100);
    cr_assert_eq(r.ops[0].total_ns, 5050);
    cr_assert_eq(r.ops[0].min_ns, 1);
    cr_assert_eq(r.ops[0].max_ns, 100);
    cr_assert_eq(r.ops[0].p50_ns, 50);
    cr_assert_eq(r.ops[0].p95_ns, 95);
    cr_assert_eq(r.ops[0].p99_ns, 99);
    cr_assert_eq(r.ops[0].avg_ns, 50);
    cr_assert_eq(r.n_comm, 1);
    cr_assert_eq(r.n_devices, 2);
    cr_assert_str_eq(r.devices[0].device, "a/gpu:0");
    cr_assert_str_eq(r.devices[1].device, "b/gpu:0");
    cr_assert_eq(r.devices[1].total_ns, 5050 - 1275);
    /* top lists: b's three (100, 99, 98), then a's (50, 49, 48); hotspots b's 100, a's 50 */
    cr_assert_eq(r.n_slowest, 6);
    static const uint64_t want_slow[6] = {100, 99, 98, 50, 49, 48};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(r.slowest[i].dur_ns, want_slow[i], "slowest[%d]", i);
    cr_assert_str_eq(r.slowest[0].device, "b/gpu:0");
    cr_assert_str_eq(r.slowest[3].device, "a/gpu:0");
    cr_assert_eq(r.slowest[0].rank, 1);
    cr_assert_eq(r.n_hotspots, 2);
    cr_assert_eq(r.hotspots[0].mem_bytes, 100);
    cr_assert_eq(r.hotspots[1].mem_bytes, 50);
    cr_assert(r.imbalance.present);
    cr_assert_str_eq(r.imbalance.slowest_device, "b/gpu:0");
    /* hosts: "hosts" then [home (no part here), a, b] */
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, r.hosts, r.hosts_len, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(msgpack_unpack_next(&u, r.hosts, r.hosts_len, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, r.hosts_len);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(u.data.via.array.size, 3);
    const msgpack_object *row = &u.data.via.array.ptr[2];
    cr_assert_eq(row->via.map.size, 19);                    /* ranks_cut last */
    cr_assert_eq(row->via.map.ptr[16].key.via.str.size, 8); /* "arrivals", then its drops */
    cr_assert_eq(memcmp(row->via.map.ptr[16].key.via.str.ptr, "arrivals", 8), 0);
    cr_assert_eq(row->via.map.ptr[17].key.via.str.size, 16);
    cr_assert_eq(row->via.map.ptr[1].val.via.str.size, 5); /* "stale" */
    cr_assert_eq(memcmp(row->via.map.ptr[1].val.via.str.ptr, "stale", 5), 0);
    cr_assert_eq(row->via.map.ptr[4].val.via.u64, 50);               /* entries */
    cr_assert_eq(row->via.map.ptr[8].val.type, MSGPACK_OBJECT_NIL);  /* bound_ns unknown */
    cr_assert_eq(row->via.map.ptr[9].val.type, MSGPACK_OBJECT_NIL);  /* bound_source unknown */
    cr_assert_eq(row->via.map.ptr[10].val.type, MSGPACK_OBJECT_NIL); /* drift_ppm unknown */
    cr_assert_eq(row->via.map.ptr[12].key.via.str.size, 7);          /* "refined": none */
    cr_assert_eq(memcmp(row->via.map.ptr[12].key.via.str.ptr, "refined", 7), 0);
    cr_assert_eq(row->via.map.ptr[12].val.via.u64, 0);
    for (int k = 13; k <= 15; k++) /* refined_offset_ns, refined_bound_ns, ..._probe_bound_ns */
        cr_assert_eq(row->via.map.ptr[k].val.type, MSGPACK_OBJECT_NIL);
    row = &u.data.via.array.ptr[0]; /* the home's own: its clock, bound 0, drift 0 */
    cr_assert_eq(row->via.map.ptr[8].val.via.i64, 0);
    cr_assert_eq(row->via.map.ptr[9].val.type, MSGPACK_OBJECT_NIL); /* no source: its own */
    cr_assert_eq(row->via.map.ptr[10].val.type, MSGPACK_OBJECT_FLOAT64);
    msgpack_unpacked_destroy(&u);
    report_free(&r);
    peermerge_free(&m);
}

/*
 * A clock theta ns ahead of the home's, measured by two bursts of one probe
 * each, 10 s and 11 s into the home's clock, whose delays are 1 µs each way:
 * the estimate is theta exactly (symmetric delays) with no drift, so every
 * conversion is exact: member time − theta.
 */
static struct peerclock *clock_ahead(int64_t theta)
{
    struct peerclock *c = malloc(sizeof(*c));

    peerclock_init(c);
    for (int64_t h = 10000000000; h <= 11000000000; h += 1000000000) {
        struct peerclock_sample s = {.t1 = h, .t2 = h + 1000 + theta, .t4 = h + 2000};
        s.t3 = s.t2;
        cr_assert_eq(peerclock_add_burst(c, &s, 1, NULL), 0);
    }
    return c;
}

Test(peermerge, member_times_on_the_home_clock)
{
    const int64_t base = 100000000000; /* home time when member a began (100 s) */
    struct peermerge m = {.home_state = "ended"};
    struct report r = {0};
    struct report_params p = {.top = 10};
    char err[200] = "";

    m.home_host = strdup("home");
    m.parts = calloc(3, sizeof(*m.parts));
    m.n_parts = 3;
    /* a: 5 s ahead, began at home time base, span 500 ns (hi 50 × 10) */
    part_t0 = (uint64_t)(base + 5000000000);
    part(&m.parts[0], "a", 1, 50, "ended");
    m.parts[0].clock = clock_ahead(5000000000);
    /* b: 1 s behind, began 2 µs after a on the home clock, span 1000 ns: ends at base + 3000 */
    part_t0 = (uint64_t)(base - 1000000000 + 2000);
    part(&m.parts[1], "b", 51, 100, "ended");
    m.parts[1].clock = clock_ahead(-1000000000);
    /* c: not measured yet (no clock): its times stay its own, its span counts alone */
    part_t0 = 7;
    part(&m.parts[2], "c", 1, 2, "ended");
    part_t0 = 0;
    cr_assert_eq(peermerge_report(&r, &m, NULL, &p, err, sizeof(err)), 0, "%s", err);
    /* unaligned, the longest host span would be 1000; on the home's clock a and b cover 3000 */
    cr_assert_eq(r.span_ns, 3000);
    /* slowest: b's 100, 99, 98 (start base + 2000 + i), a's 50, 49, 48 (base + i), c's 3 */
    cr_assert_eq(r.n_slowest, 9);
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(r.slowest[i].device, "b/gpu:0");
        cr_assert_eq(r.slowest[i].start_ns, (uint64_t)(base + 2000 + i), "b %d", i);
        cr_assert_str_eq(r.slowest[3 + i].device, "a/gpu:0");
        cr_assert_eq(r.slowest[3 + i].start_ns, (uint64_t)(base + i), "a %d", i);
    }
    cr_assert_str_eq(r.slowest[6].device, "c/gpu:0");
    cr_assert_eq(r.slowest[6].start_ns, 7); /* its own clock, unconverted */
    report_free(&r);
    peermerge_free(&m);
}

/*
 * A host row says what collectives refined: a member 5 s ahead measured within
 * 1001 ns at 10 s and 11 s (clock_ahead: 1 µs each way, + 1 ns for 1000 ppm over
 * the probe's 1 µs), and one allreduce at 11 s whose other ranks left 100 ns
 * after the member's rank entered: θ ≥ 5 s − 100 ns, a cut. The enter's
 * estimated home time is 11 s − 451 ns, where the probes' bound is 1001 + 10 ppm
 * of wander over 451 ns, rounded up, + 1: 1003; the cut carried over that 1003
 * at 12 ppm, 0.012 ns, rounds out to θ − 101: [θ − 101, θ + 1003], offset θ + 451
 * within 552. Its now-figure, given here, came from that cut too: bound_source
 * "collectives".
 */
Test(peermerge, a_host_row_says_what_collectives_refined)
{
    const int64_t theta = 5000000000, h = 11000000000;
    struct peermerge m = {.home_state = "live"};
    struct report r = {0};
    struct report_params p = {.top = 10};
    msgpack_unpacked u;
    char err[200] = "";

    m.home_host = strdup("home");
    m.parts = calloc(1, sizeof(*m.parts));
    m.n_parts = 1;
    part(&m.parts[0], "a", 1, 5, "live");
    m.parts[0].clock = clock_ahead(theta);
    struct peerclock_coll c = {.member_enter = h + theta,
                               .member_exit = h + theta + 5000,
                               .others_enter = h - 1000,
                               .others_exit = h + 100};
    cr_assert_eq(peerclock_collective(m.parts[0].clock, &c, NULL, NULL), 0);
    cr_assert_eq(m.parts[0].clock->refined, 1);
    m.parts[0].offset_ns = theta + 451;
    m.parts[0].bound_ns = 552;
    m.parts[0].probe_bound_ns = 1003;
    cr_assert_eq(peermerge_report(&r, &m, NULL, &p, err, sizeof(err)), 0, "%s", err);
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, r.hosts, r.hosts_len, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(msgpack_unpack_next(&u, r.hosts, r.hosts_len, &off), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object_kv *row = u.data.via.array.ptr[1].via.map.ptr;
    cr_assert_eq(row[9].val.via.str.size, 11); /* bound_source */
    cr_assert_eq(memcmp(row[9].val.via.str.ptr, "collectives", 11), 0);
    cr_assert_eq(row[12].val.via.u64, 1);           /* refined */
    cr_assert_eq(row[13].val.via.i64, theta + 451); /* refined_offset_ns */
    cr_assert_eq(row[14].val.via.i64, 552);         /* refined_bound_ns */
    cr_assert_eq(row[15].val.via.i64, 1003);        /* refined_probe_bound_ns */
    msgpack_unpacked_destroy(&u);
    report_free(&r);
    peermerge_free(&m);
}

Test(peermerge, a_page_of_ops)
{
    struct peermerge m = {.home_state = "ended"};
    struct report r = {0};
    struct report_params p = {.top = 2, .ops_limit = 1, .ops_offset = 1, .mem_threshold = 5};
    char err[200] = "";

    m.home_host = strdup("home");
    m.parts = calloc(1, sizeof(*m.parts));
    m.n_parts = 1;
    part(&m.parts[0], "a", 1, 5, "ended");
    cr_assert_eq(peermerge_report(&r, &m, NULL, &p, err, sizeof(err)), 0, "%s", err);
    cr_assert(r.paged);
    cr_assert_eq(r.ops_total, 1);
    cr_assert_eq(r.n_ops, 0); /* offset 1 of 1 row */
    cr_assert_eq(r.n_slowest, 2, "top 2");
    cr_assert_eq(r.slowest[0].dur_ns, 5);
    cr_assert_eq(r.n_hotspots, 0, "the one hotspot has 5 bytes, not above 5");
    report_free(&r);
    peermerge_free(&m);
}
