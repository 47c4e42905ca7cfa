/*
 * mpi_halves.c — two halves of a job from MPI_Comm_split, for
 * tests/integration/test_mpi.c: ranks {0, 1} and {2, 3} each run ROUNDS
 * MPI_Allreduce on their half, rank 3 sleeping DELAY_MS before each (so it
 * arrives last at every one of its half's), then every rank MPI_Barrier on
 * MPI_COMM_WORLD. Linked with -ltracectl-mpi. Run with 4 ranks. Exits 1
 * when a result is wrong, 2 when not run with 4 ranks.
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS   4
#define DELAY_MS 20

int main(int argc, char **argv)
{
    struct timespec delay = {0, DELAY_MS * 1000000L};
    int rank, n, v, out, failed = 0;
    MPI_Comm half;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 4) {
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &half);
    for (int i = 0; i < ROUNDS; i++) {
        if (rank == 3)
            nanosleep(&delay, NULL);
        v = rank + i;
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, half);
        if (out != (rank / 2) * 4 + 1 + 2 * i) {
            fprintf(stderr, "mpi_halves: rank %d round %d: %d\n", rank, i, out);
            failed = 1;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return failed;
}
