/*
 * mpi_nbwait.c — where a non-blocking collective's wait is, for
 * tests/integration/test_mpi.c (issue 27 item 4). Run with 4 ranks; linked
 * with -ltracectl-mpi. MPI_Comm_split makes two halves, {0, 1} and {2, 3};
 * each rank makes ROUNDS MPI_Iallreduce on its half, each completed at once
 * by MPI_Wait, except that in rounds LATE_FROM .. LATE_TO - 1 rank 3 sleeps
 * LATE_MS before its MPI_Iallreduce: rank 2 then waits for it in MPI_Wait.
 *
 * Each rank prints one line, measured with its own clock (CLOCK_MONOTONIC,
 * one clock for every process of the host):
 *   nbwait rank R wait_ns W sleep_ns S rule_wait_ns X rule_caused_ns Y
 * W the time it spent in all its MPI_Wait calls, S in its sleeps (0 but on
 * rank 3); X and Y the daemon's rule (PROTOCOL.md "report option analysis",
 * *Non-blocking collective*) applied to its own clock's readings: per round,
 * the part of its MPI_Wait before the later of the two MPI_Iallreduce calls'
 * starts (X), and at the rounds it called MPI_Iallreduce last, the other
 * rank's such wait (Y). The half's call times are exchanged at the end with
 * PMPI_Allgather, which the interposer does not record. Exits 1 when a result
 * is wrong, 2 when not run with 4 ranks.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS    8
#define LATE_FROM 2
#define LATE_TO   6
#define LATE_MS   30

static int64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The rule's part of a wait [b, e) before the last arrival `last`. */
static int64_t rule_wait(int64_t b, int64_t e, int64_t last)
{
    int64_t end = last < e ? last : e;

    return end > b ? end - b : 0;
}

int main(int argc, char **argv)
{
    struct timespec late = {0, LATE_MS * 1000000L};
    int rank, n, v, out, me, failed = 0;
    int64_t wait_ns = 0, sleep_ns = 0, rwait = 0, rcaused = 0, t;
    /* per round: the I* call's start, the MPI_Wait's start and end; then the other's */
    int64_t mine[3 * ROUNDS], both[2 * 3 * ROUNDS];
    MPI_Comm half;
    MPI_Request req;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 4) {
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &half);
    for (int i = 0; i < ROUNDS; i++) {
        if (rank == 3 && i >= LATE_FROM && i < LATE_TO) {
            t = now_ns();
            nanosleep(&late, NULL);
            sleep_ns += now_ns() - t;
        }
        v = rank + i;
        mine[3 * i] = now_ns();
        MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_SUM, half, &req);
        mine[3 * i + 1] = now_ns();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        mine[3 * i + 2] = now_ns();
        wait_ns += mine[3 * i + 2] - mine[3 * i + 1];
        if (out != (rank / 2) * 4 + 1 + 2 * i) {
            fprintf(stderr, "mpi_nbwait: rank %d round %d: %d\n", rank, i, out);
            failed = 1;
        }
    }
    MPI_Comm_rank(half, &me);
    PMPI_Allgather(mine, 3 * ROUNDS, MPI_INT64_T, both, 3 * ROUNDS, MPI_INT64_T, half);
    for (int i = 0; i < ROUNDS; i++) {
        const int64_t *m = &both[me * 3 * ROUNDS + 3 * i],
                      *o = &both[(1 - me) * 3 * ROUNDS + 3 * i];
        int64_t last = m[0] > o[0] ? m[0] : o[0];
        rwait += rule_wait(m[1], m[2], last);
        if (m[0] > o[0])
            rcaused += rule_wait(o[1], o[2], last);
    }
    printf("nbwait rank %d wait_ns %lld sleep_ns %lld rule_wait_ns %lld rule_caused_ns %lld\n",
           rank, (long long)wait_ns, (long long)sleep_ns, (long long)rwait, (long long)rcaused);
    fflush(stdout);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return failed;
}
