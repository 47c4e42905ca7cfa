/*
 * nest_producer.c — a C producer with known nested regions, for
 * test_viewers.py: what a timeline must show as parent and child.
 *
 * Two threads of one process (rank 0, device cpu:0), each with regions
 * opened by tc_push() and closed by tc_pop():
 *   train:  STEPS × step { forward { matmul, relu }, backward }, and in each
 *           step a "marker" of duration 0 (tc_record), a moment;
 *   loader: STEPS × load { decode }, started inside train's first step and
 *           running beside its steps.
 * Every region spins for a known time (SPIN_US) so that none is empty.
 * Usage: nest_producer SESSION (the socket from $TRACECTL_SOCKET).
 * Exits 0 once everything was sent and acknowledged, 1 otherwise.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "tracectl.h"

#define STEPS   3
#define SPIN_US 200

static tc_client *cl;

static void spin(uint64_t us)
{
    uint64_t end = tc_now_ns() + us * 1000;

    while (tc_now_ns() < end)
        ;
}

static void region(uint32_t op, uint64_t us)
{
    tc_push(cl, op);
    spin(us);
    tc_pop(cl, 0, NULL, NULL, 0);
}

static void *loader(void *arg)
{
    uint32_t load = tc_op(cl, "load"), decode = tc_op(cl, "decode");

    (void)arg;
    for (int s = 0; s < STEPS; s++) {
        tc_push(cl, load);
        spin(SPIN_US / 2);
        region(decode, SPIN_US);
        tc_pop(cl, 0, NULL, NULL, 0);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    tc_options opt;
    pthread_t t;
    int err;

    if (argc != 2) {
        fprintf(stderr, "usage: nest_producer SESSION\n");
        return 2;
    }
    tc_options_init(&opt);
    opt.session = argv[1];
    opt.rank = 0;
    opt.world = 1;
    opt.device = "cpu:0";
    opt.blocking = 1;
    cl = tc_open(&opt, &err);
    if (!tc_enabled(cl)) {
        fprintf(stderr, "nest_producer: cannot reach tracectld\n");
        tc_close(cl);
        return 1;
    }
    uint32_t step = tc_op(cl, "step"), fwd = tc_op(cl, "forward"), bwd = tc_op(cl, "backward");
    uint32_t mm = tc_op(cl, "matmul"), relu = tc_op(cl, "relu"), mark = tc_op(cl, "marker");

    for (int s = 0; s < STEPS; s++) {
        tc_push(cl, step);
        /* the loader starts inside the first step, which is then the first slice of the
         * track: the track a viewer shows first holds the training thread's regions */
        if (s == 0 && pthread_create(&t, NULL, loader, NULL) != 0)
            return 1;
        tc_push(cl, fwd);
        region(mm, SPIN_US);
        region(relu, SPIN_US / 2);
        tc_pop(cl, 0, NULL, NULL, 0);
        tc_record(cl, mark, tc_now_ns(), 0, 0, NULL, NULL, 0, NULL);
        region(bwd, SPIN_US);
        tc_pop(cl, 0, NULL, NULL, 0);
        tc_step(cl);
    }
    pthread_join(t, NULL);
    if (tc_dropped(cl) != 0) {
        fprintf(stderr, "nest_producer: entries dropped\n");
        tc_close(cl);
        return 1;
    }
    return tc_close(cl) == 0 ? 0 : 1;
}
