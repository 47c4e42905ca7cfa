/*
 * mpi_allreduce.c — a tight loop of 8-byte MPI_Allreduce calls, for
 * bench/mpi.sh, which runs it with and without libtracectl-mpi (and with a
 * bare PMPI counter) in the same run. Prints one JSON line from rank 0: the
 * wall time per call and the calling thread's CPU time per call, each the
 * largest over the ranks.
 *   mpirun -np 2 mpi_allreduce [ITERATIONS]     (default 200000)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    double in, out, t[2], res[2], w0, c0;
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    in = rank;
    for (int i = 0; i < 1000; i++) /* warm-up: the client's ring, MPI's own buffers */
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    w0 = now(CLOCK_MONOTONIC);
    c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < iters; i++)
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[0] = (now(CLOCK_MONOTONIC) - w0) / iters;
    t[1] = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / iters;
    MPI_Reduce(t, res, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"ranks\": %d, \"iters\": %ld, \"allreduce_ns\": %.1f, \"allreduce_cpu_ns\": "
               "%.1f}\n",
               size, iters, res[0], res[1]);
    MPI_Finalize();
    return out == size * (size - 1) / 2.0 ? 0 : 1;
}
