/*
 * hosts_producer.c — a producer of known entries for tests/hosts: one
 * process of session NAME, rank R of world W, in blocking mode (nothing
 * dropped). It records N entries of op "fwd" lasting 1000 + i ns and N of
 * op "allreduce" (comm) lasting 5000 + 7 * i ns (i = 0 .. N-1), flushes (the
 * daemon has them on disk), then, with a fourth argument, waits until that
 * file exists and records the same again before it closes. Every figure of
 * the report is thus computable by the test: calls 2N or 4N per op per rank,
 * sums by formula, min 1000 and 5000.
 *
 * usage: hosts_producer SOCKET NAME RANK WORLD N [WAIT_FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tracectl.h"

static void record(tc_client *cl, uint32_t fwd, uint32_t ar, long n)
{
    for (long i = 0; i < n; i++) {
        uint64_t now = tc_now_ns();
        tc_record(cl, fwd, now, 1000 + (uint64_t)i, 64, NULL, NULL, 0, NULL);
        tc_record(cl, ar, now + 2000, 5000 + 7 * (uint64_t)i, 0, NULL, NULL, 0, NULL);
    }
}

int main(int argc, char **argv)
{
    tc_options opt;
    tc_client *cl;
    char device[32];
    int err = 0;

    if (argc < 6) {
        fprintf(stderr, "usage: hosts_producer SOCKET NAME RANK WORLD N [WAIT_FILE]\n");
        return 2;
    }
    tc_options_init(&opt);
    opt.socket_path = argv[1];
    opt.session = argv[2];
    opt.rank = atol(argv[3]);
    opt.world = atol(argv[4]);
    snprintf(device, sizeof(device), "gpu:%ld", opt.rank);
    opt.device = device;
    opt.blocking = 1;
    cl = tc_open(&opt, &err);
    if (cl == NULL || !tc_enabled(cl)) {
        fprintf(stderr, "hosts_producer: cannot reach %s: %d\n", argv[1], err);
        tc_close(cl);
        return 1;
    }
    uint32_t fwd = tc_op(cl, "fwd"), ar = tc_op_cat(cl, "allreduce", "comm");
    record(cl, fwd, ar, atol(argv[5]));
    if (tc_flush(cl, 10000) != 0) {
        fprintf(stderr, "hosts_producer: flush failed\n");
        return 1;
    }
    if (argc > 6) {
        while (access(argv[6], F_OK) != 0)
            usleep(20000);
        record(cl, fwd, ar, atol(argv[5]));
    }
    return tc_close(cl) == 0 ? 0 : 1;
}
