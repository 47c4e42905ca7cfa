/*
 * mpi_threads.c — libtracectl-mpi under MPI_THREAD_MULTIPLE, for test_mpi:
 * 2 ranks, each with 4 threads; thread t owns the t-th MPI_Comm_dup of
 * MPI_COMM_WORLD and makes 300 × (MPI_Allreduce of 2 int, then
 * MPI_Sendrecv of 1 int with the other rank, tag t) on it. Per rank: 2400
 * entries, each communicator's Allreduces with seq 0..299. Exits 1 when a
 * result is wrong or MPI does not provide MPI_THREAD_MULTIPLE.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define ROUNDS  300

static MPI_Comm comms[THREADS];
static int rank, failed;

static void *run(void *arg)
{
    int t = (int)(long)arg, in[2] = {rank, t}, out[2], got = -1;

    for (int i = 0; i < ROUNDS; i++) {
        MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, comms[t]);
        MPI_Sendrecv(&rank, 1, MPI_INT, 1 - rank, t, &got, 1, MPI_INT, 1 - rank, t, comms[t],
                     MPI_STATUS_IGNORE);
        if (out[0] != 1 || out[1] != 2 * t || got != 1 - rank)
            failed = 1;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[THREADS];
    int provided;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "mpi_threads: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int t = 0; t < THREADS; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    for (long t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, run, (void *)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        MPI_Comm_free(&comms[t]);
    MPI_Finalize();
    return failed;
}
