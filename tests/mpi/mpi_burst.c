/*
 * mpi_burst.c — a burst of MPI calls while the daemon is stopped, so that the
 * interposer drops most of their entries: test_mpi_sections checks that the
 * report's MPI time per rank still counts every call (issue 29 items 3, 4).
 * Built without tracectl; run under LD_PRELOAD. Usage: mpi_burst DIR N.
 *
 * Rank 0 creates DIR/ready once MPI_Init returned (the ranks are connected)
 * and waits for DIR/go (the test stops the daemon first); then every rank
 * calls MPI_Iprobe (tag 99: nothing matches) N times, timed; rank 0 creates
 * DIR/burst and waits for DIR/go2 (the test continues the daemon first);
 * then MPI_Finalize. Barriers (timed too) keep the ranks together. It
 * prints "mpi R NS CALLS": the calls it made (all recorded by the
 * interposer) and their time by MPI_Wtime.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long mpi_ns, mpi_calls;

#define TIMED(call)                                                                                \
    do {                                                                                           \
        double t0_ = MPI_Wtime();                                                                  \
        (void)(call);                                                                              \
        mpi_ns += (long long)((MPI_Wtime() - t0_) * 1e9);                                          \
        mpi_calls++;                                                                               \
    } while (0)

static void touch(const char *dir, const char *name)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((f = fopen(path, "w")) != NULL)
        fclose(f);
}

static void wait_for(const char *dir, const char *name)
{
    struct timespec ms = {0, 1000000};
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
        nanosleep(&ms, NULL);
}

int main(int argc, char **argv)
{
    int rank, flag;
    long n = 0; /* MPI_Abort does not return, but gcc -O2 cannot tell */

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3 || (n = atol(argv[2])) <= 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    if (rank == 0) {
        touch(argv[1], "ready");
        wait_for(argv[1], "go");
    }
    TIMED(MPI_Barrier(MPI_COMM_WORLD));
    for (long i = 0; i < n; i++)
        TIMED(MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    TIMED(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        touch(argv[1], "burst");
        wait_for(argv[1], "go2");
    }
    TIMED(MPI_Barrier(MPI_COMM_WORLD));
    printf("mpi %d %lld %lld\n", rank, mpi_ns, mpi_calls);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
