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
 * With HOSTS_COLL_DIR set, it records instead HOSTS_COLL_N collectives
 * "MPI_Allreduce" (ext comm 1, seq 0, 1, ..., comm_size WORLD, 4096 bytes)
 * that really synchronize the WORLD ranks on every host: each rank notes its
 * enter, creates DIR/SEQ.RANK and leaves once all WORLD files of that seq
 * exist (the hosts share the file system), so no rank leaves before all
 * entered (after one such barrier through DIR/go.RANK, unrecorded, so that all
 * have started). Rank HOSTS_LATE_RANK sleeps HOSTS_LATE_US before entering each
 * (with HOSTS_LATE_RANK2 too, that rank instead on odd seqs). With HOSTS_COLL_SPIN
 * set, a rank waiting for the others polls without sleeping (sched_yield between
 * polls; "busy": not even that), so that it may leave sooner after the last enter
 * than the 200 µs of a sleeping poll (on a loaded 2-core VM still 80-100 µs at best:
 * docs/clocks.md).
 * DIR/SEQ.RANK is empty, made right after the enter is read (the sooner the
 * others see it, the sooner they leave). Collective SEQ is recorded in step SEQ,
 * and DIR/t.SEQ.RANK, written once the rank left it, holds the job's own
 * clock of its enter: "REAL_BEFORE REAL_AFTER" (CLOCK_REALTIME just before
 * and after the CLOCK_MONOTONIC read the entry starts at; time namespaces do
 * not move CLOCK_REALTIME, so every host's are one clock: the test's truth).
 *
 * usage: hosts_producer SOCKET NAME RANK WORLD N [WAIT_FILE]
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* HOSTS_COLL_DIR's collectives (see the header). 0, or 1 when a file cannot be made. */
static int collectives(tc_client *cl, const char *dir, long rank, long world)
{
    uint32_t op = tc_op_cat(cl, "MPI_Allreduce", "comm");
    long n = atol(getenv("HOSTS_COLL_N") ? getenv("HOSTS_COLL_N") : "10");
    long late = getenv("HOSTS_LATE_RANK") ? atol(getenv("HOSTS_LATE_RANK")) : -1;
    long late2 = getenv("HOSTS_LATE_RANK2") ? atol(getenv("HOSTS_LATE_RANK2")) : -1;
    long late_us = getenv("HOSTS_LATE_US") ? atol(getenv("HOSTS_LATE_US")) : 0;
    const char *sp = getenv("HOSTS_COLL_SPIN");
    int spin = sp == NULL ? 0 : strcmp(sp, "busy") == 0 ? 2 : 1;
    char path[4096];

    /* a barrier first (DIR/go.RANK), unrecorded: every rank has started when seq 0 begins */
    snprintf(path, sizeof(path), "%s/go.%ld", dir, rank);
    int go = open(path, O_CREAT | O_WRONLY, 0644);
    if (go < 0 || close(go) != 0)
        return 1;
    for (long r = 0; r < world; r++) {
        snprintf(path, sizeof(path), "%s/go.%ld", dir, r);
        while (access(path, F_OK) != 0)
            usleep(200);
    }
    for (long seq = 0; seq < n; seq++) {
        if (rank == (late2 >= 0 && seq % 2 == 1 ? late2 : late))
            usleep((useconds_t)late_us);
        struct timespec r0, r1;
        clock_gettime(CLOCK_REALTIME, &r0);
        uint64_t enter = tc_now_ns();
        clock_gettime(CLOCK_REALTIME, &r1);
        snprintf(path, sizeof(path), "%s/%ld.%ld", dir, seq, rank);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fd < 0 || close(fd) != 0)
            return 1;
        for (long r = 0; r < world; r++) {
            snprintf(path, sizeof(path), "%s/%ld.%ld", dir, seq, r);
            while (access(path, F_OK) != 0)
                if (spin == 1)
                    sched_yield();
                else if (spin == 0)
                    usleep(200);
        }
        uint64_t exit_ns = tc_now_ns();
        /* the truth, written whole before its name appears: rename is atomic */
        char tmp[4096], line[64];
        snprintf(tmp, sizeof(tmp), "%s/tmp.%ld.%ld", dir, seq, rank);
        snprintf(path, sizeof(path), "%s/t.%ld.%ld", dir, seq, rank);
        int len = snprintf(line, sizeof(line), "%lld %lld\n",
                           (long long)r0.tv_sec * 1000000000LL + r0.tv_nsec,
                           (long long)r1.tv_sec * 1000000000LL + r1.tv_nsec);
        fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0)
            return 1;
        if (write(fd, line, (size_t)len) != len || close(fd) != 0 || rename(tmp, path) != 0)
            return 1;
        tc_ext x = {.has = TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE,
                    .comm = 1,
                    .seq = (uint64_t)seq,
                    .comm_size = (uint64_t)world};
        tc_set_step(cl, (uint64_t)seq);
        tc_record_ext(cl, op, enter, exit_ns - enter, 4096, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL,
                      &x);
    }
    return 0;
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
    if (getenv("HOSTS_COLL_DIR") != NULL) {
        if (collectives(cl, getenv("HOSTS_COLL_DIR"), opt.rank, opt.world) != 0 ||
            tc_flush(cl, 10000) != 0) {
            fprintf(stderr, "hosts_producer: collectives failed\n");
            return 1;
        }
        return tc_close(cl) == 0 ? 0 : 1;
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
