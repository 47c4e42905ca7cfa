/*
 * mpi_pingpong.c — the MPI point-to-point loop bench/mpi_cost.sh measures
 * (issue 29 item 7): ranks 0 and 1 bounce an 8-byte message N times
 * (MPI_Send + MPI_Recv with MPI_STATUS_IGNORE on each side, as NetPIPE's
 * latency test does), after 1,000 warm-up round trips. Rank 0 prints
 * {"pingpong_ns": <wall ns per round trip>, "messages": <messages sent per rank>}.
 * Under valgrind --tool=callgrind (the instructions between the two
 * MPI_Barrier calls, --toggle-collect=pingpong) it gives instructions per
 * message whatever the load.
 *   mpicc -O2 -o mpi_pingpong bench/mpi_pingpong.c
 *   mpirun -np 2 ./mpi_pingpong [N]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void pingpong(int rank, long n, char *buf)
{
    for (long i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
}

static double cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Send + Recv pairs to and from MPI_PROC_NULL: the thread's CPU ns per pair. */
static double null_pairs(long n, char *buf)
{
    double t = cpu_ns();

    for (long i = 0; i < n; i++) {
        MPI_Send(buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return (cpu_ns() - t) / (double)n;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    char buf[8] = {0};
    int rank;
    double t;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 2 && strcmp(argv[2], "null") == 0) {
        null_pairs(1000, buf);
        t = null_pairs(n, buf);
        if (rank == 0)
            printf("{\"null_cpu_ns\": %.1f}\n", t);
        MPI_Finalize();
        return 0;
    }
    if (rank < 2)
        pingpong(rank, 1000, buf);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    if (rank < 2)
        pingpong(rank, n, buf);
    t = MPI_Wtime() - t;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"pingpong_ns\": %.1f, \"messages\": %ld}\n", t * 1e9 / (double)n, n);
    MPI_Finalize();
    return 0;
}
