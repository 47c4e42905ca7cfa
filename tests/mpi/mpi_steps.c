/*
 * mpi_steps.c — steps an MPI code marks without linking tracectl (issue 29
 * item 2). Each of STEPS steps: the step's late rank (late[], 2 ranks)
 * sleeps LATE_MS, then MPI_Allreduce on MPI_COMM_WORLD, MPI_Barrier on a
 * dup of it (which never ends a step) and MPI_Pcontrol(1) (mpiP's level:
 * no step); then the step ends by
 *   argv[1] = "pcontrol": MPI_Pcontrol(100);
 *   argv[1] = "barrier":  MPI_Barrier(MPI_COMM_WORLD), with the test's
 *                         TRACECTL_MPI_STEP_ON=MPI_Barrier.
 * Built without tracectl: LD_PRELOAD=libtracectl-mpi.so.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define STEPS   6
#define LATE_MS 300

static const int late[STEPS] = {1, 1, 0, 1, 0, 0}; /* test_mpi.c's */

int main(int argc, char **argv)
{
    int rank, pcontrol = argc > 1 && strcmp(argv[1], "pcontrol") == 0;
    double x = 1, y;
    MPI_Comm dup;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    for (int s = 0; s < STEPS; s++) {
        if (rank == late[s]) {
            struct timespec ts = {0, LATE_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(dup);
        MPI_Pcontrol(1);
        if (pcontrol)
            MPI_Pcontrol(100);
        else
            MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}
