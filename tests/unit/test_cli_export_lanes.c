/*
 * test_cli_export_lanes — where client/cli/cli_export_lanes.c puts slices:
 * the shapes the viewers test (tests/viewers/nest_producer.c) records, with
 * times chosen by hand so that the lane of every row is known in advance.
 */
#include <stdint.h>

#include <criterion/criterion.h>

#include "cli_export_lanes.h"

TestSuite(cli_export_lanes);

static struct cli_export_proc proc = {.has_rank = true, .rank = 0};
static struct cli_export_dev cpu = {.name = "cpu:0", .index = 1};

/* A row of rank 0 on cpu:0 with no stream: C regions of every thread share that track. */
static struct cli_export_row row(uint64_t start, uint64_t span)
{
    return (struct cli_export_row){
        .proc = &proc, .dev = &cpu, .start_ns = start, .dur_ns = span, .span_ns = span};
}

static struct cli_export_row region(uint64_t start, uint64_t span, uint64_t id, uint64_t parent)
{
    struct cli_export_row r = row(start, span);

    r.has_id = id != 0, r.id = id;
    r.has_parent = parent != 0, r.parent = parent;
    return r;
}

/* Places r and returns its lane's index in its track. */
static size_t place(struct cli_export_lanes *l, struct cli_export_row r)
{
    struct cli_export_lanes_track *t;
    struct cli_export_lane *lane;

    cr_assert_eq(cli_export_lanes_place(l, &r, NULL, NULL, &t, &lane), 0);
    return (size_t)(lane - t->lanes);
}

/*
 * nest_producer's first step with the loader thread running beside it, rows
 * by start (the export's order): the training thread's step {forward {matmul,
 * relu}, marker, backward} and the loader's load {decode}, all on one track.
 * The marker (tc_record, no links) at 1400, just as forward ends, lies in
 * time inside step (lane 0, ends 2000) and inside decode (lane 1, ends 1450).
 * It was put inside decode, the tighter in time, though decode is another
 * thread's region, which only the link rules put on a lane of its own: the
 * viewers test's "instants 'marker' are in no step of their track".
 */
Test(cli_export_lanes, plain_instant_stays_on_first_region_lane)
{
    struct cli_export_lanes l;

    cli_export_lanes_init(&l);
    cr_assert_eq(place(&l, region(1000, 1000, 1, 0)), 0); /* step [1000, 2000), id 1 */
    cr_assert_eq(place(&l, region(1100, 400, 10, 0)), 1); /* load, a root: a lane of its own */
    cr_assert_eq(place(&l, region(1150, 250, 2, 1)), 0);  /* forward [1150, 1400) in step */
    cr_assert_eq(place(&l, region(1160, 140, 0, 2)), 0);  /* matmul in forward */
    cr_assert_eq(place(&l, region(1200, 250, 0, 10)), 1); /* decode [1200, 1450) in load */
    cr_assert_eq(place(&l, region(1300, 100, 0, 2)), 0);  /* relu [1300, 1400) in forward */
    cr_assert_eq(place(&l, row(1400, 0)), 0);             /* marker: in step, not in decode */
    cr_assert_eq(place(&l, region(1401, 499, 0, 1)), 0);  /* backward in step */
    cr_assert_eq(l.n, 1);
    cr_assert_eq(l.t[0].n_lanes, 2);
    cli_export_lanes_deinit(&l);
}

/* The same with the marker a few ns before forward's end: inside forward, on step's lane. */
Test(cli_export_lanes, plain_instant_inside_sibling_end)
{
    struct cli_export_lanes l;

    cli_export_lanes_init(&l);
    cr_assert_eq(place(&l, region(1000, 1000, 1, 0)), 0);
    cr_assert_eq(place(&l, region(1100, 400, 10, 0)), 1);
    cr_assert_eq(place(&l, region(1150, 250, 2, 1)), 0);
    cr_assert_eq(place(&l, region(1200, 250, 0, 10)), 1);
    cr_assert_eq(place(&l, row(1397, 0)), 0); /* forward ends at 1400, decode at 1450 */
    cr_assert_eq(l.t[0].n_lanes, 2);
    cli_export_lanes_deinit(&l);
}

/*
 * Plain slices keep the tightest lane: a [0, 100) and s [5, 20) on lane 0, p
 * [10, 50) overlapping s partially goes on lane 1; c [30, 40) lies in a and
 * in p, and p (ends 50) is tighter than a (ends 100): its parent.
 */
Test(cli_export_lanes, plain_slice_takes_tightest)
{
    struct cli_export_lanes l;

    cli_export_lanes_init(&l);
    cr_assert_eq(place(&l, row(0, 100)), 0);
    cr_assert_eq(place(&l, row(5, 15)), 0);
    cr_assert_eq(place(&l, row(10, 40)), 1);
    cr_assert_eq(place(&l, row(30, 10)), 1);
    cr_assert_eq(place(&l, row(35, 0)), 1); /* an instant in c, on c's lane */
    cr_assert_eq(l.t[0].n_lanes, 2);
    cli_export_lanes_deinit(&l);
}
