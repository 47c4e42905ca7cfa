/*
 * mpi_comms.c — communicators, probes and non-blocking collectives, for
 * tests/integration/test_mpi.c (issue 27). Linked with -ltracectl-mpi. One
 * mode per run, the first argument:
 * - order (4 ranks): A and B are MPI_Comm_dup's of MPI_COMM_WORLD, made in
 *   that order everywhere. Ranks 0 and 1 first touch B (an
 *   MPI_Sendrecv_replace with each other), ranks 2 and 3 touch nothing first;
 *   then every rank makes ORDER_A MPI_Allreduce on A and ORDER_B MPI_Bcast on
 *   B. So A is first used before B on ranks 2 and 3, after it on 0 and 1.
 * - threads (2 ranks, MPI_THREAD_MULTIPLE): the same A and B, thread 0 making
 *   ORDER_A MPI_Allreduce on A, thread 1 ORDER_B MPI_Bcast on B; on rank 0
 *   thread 1 touches B first (an MPI_Sendrecv with itself) and only then lets
 *   thread 0 start, on rank 1 the other way round.
 * - iprobe (2 ranks): IPROBES × MPI_Iprobe(MPI_ANY_SOURCE) on MPI_COMM_WORLD
 *   (nothing is ever sent: every one says no), then one MPI_Barrier.
 * - allreduce N (2 ranks): N back-to-back MPI_Allreduce of one double.
 * - nbc (2 ranks): non-blocking collectives and their completions, in order
 *   on MPI_COMM_WORLD (seq in brackets):
 *     MPI_Iallreduce [0] + MPI_Wait;
 *     MPI_Ibcast [1] + MPI_Ibarrier [2] + MPI_Isend + MPI_Irecv, all four
 *       completed by one MPI_Waitall;
 *     MPI_Ireduce [3], completed by MPI_Test in a loop (all but the last say
 *       not yet);
 *     MPI_Comm_idup (C) + MPI_Wait, then NBC_ROUNDS MPI_Allreduce on C;
 *     MPI_Iallreduce [4] on MPI_COMM_WORLD and MPI_Iallreduce [NBC_ROUNDS]
 *       on C, completed by MPI_Waitany twice.
 * Exits 1 when a result is wrong, 2 on a wrong rank count or mode.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORDER_A    30
#define ORDER_B    20
#define IPROBES    1000
#define NBC_ROUNDS 5

static int rank, size, failed;
static MPI_Comm a, b;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "mpi_comms: rank %d: wrong result: %s\n", rank, what);
        failed = 1;
    }
}

static void on_a(void)
{
    for (int i = 0; i < ORDER_A; i++) {
        int v = rank + i, out = 0;
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, a);
        check(out == size * (size - 1) / 2 + size * i, "allreduce on A");
    }
}

static void on_b(void)
{
    for (int i = 0; i < ORDER_B; i++) {
        int v = rank == 0 ? i : -1;
        MPI_Bcast(&v, 1, MPI_INT, 0, b);
        check(v == i, "bcast on B");
    }
}

static void mode_order(void)
{
    if (rank < 2) {
        int v = rank;
        MPI_Sendrecv_replace(&v, 1, MPI_INT, 1 - rank, 3, 1 - rank, 3, b, MPI_STATUS_IGNORE);
        check(v == 1 - rank, "sendrecv_replace on B");
    }
    on_a();
    on_b();
}

/* ---- threads ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int touched; /* the first thread touched its communicator */

/* The thread that goes first on this rank touches its communicator, then lets the other go. */
static void first_touch(int t)
{
    int first = rank == 0 ? 1 : 0, v = t, got = -1, me;

    pthread_mutex_lock(&mu);
    if (t != first)
        while (!touched)
            pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    if (t == first) {
        MPI_Comm c = t == 0 ? a : b;
        MPI_Comm_rank(c, &me);
        MPI_Sendrecv(&v, 1, MPI_INT, me, 9, &got, 1, MPI_INT, me, 9, c, MPI_STATUS_IGNORE);
        check(got == t, "sendrecv with itself");
        pthread_mutex_lock(&mu);
        touched = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void *run(void *arg)
{
    int t = (int)(long)arg;

    first_touch(t);
    if (t == 0)
        on_a();
    else
        on_b();
    return NULL;
}

static void mode_threads(void)
{
    pthread_t th[2];

    for (long t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, run, (void *)t);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
}

/* ---- iprobe, allreduce ---- */

static void mode_iprobe(void)
{
    int flag, n = 0;

    for (int i = 0; i < IPROBES; i++) {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        n += flag;
    }
    check(n == 0, "no message to probe");
    MPI_Barrier(MPI_COMM_WORLD);
}

static void mode_allreduce(long n)
{
    double v = rank + 1, out = 0;

    for (long i = 0; i < n; i++)
        MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    check(out == 3, "allreduce");
}

/* ---- nbc ---- */

static void mode_nbc(void)
{
    int v = rank + 1, out = 0, bc = rank == 0 ? 42 : 0, s = rank, r = -1, flag = 0, idx;
    MPI_Request req[4], one;
    MPI_Comm c;

    MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &one);
    MPI_Wait(&one, MPI_STATUS_IGNORE);
    check(out == 3, "iallreduce");

    MPI_Ibcast(&bc, 1, MPI_INT, 0, MPI_COMM_WORLD, &req[0]);
    MPI_Ibarrier(MPI_COMM_WORLD, &req[1]);
    MPI_Isend(&s, 1, MPI_INT, 1 - rank, 4, MPI_COMM_WORLD, &req[2]);
    MPI_Irecv(&r, 1, MPI_INT, 1 - rank, 4, MPI_COMM_WORLD, &req[3]);
    MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
    check(bc == 42 && r == 1 - rank, "ibcast, isend/irecv");

    MPI_Ireduce(&v, &out, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &one);
    while (!flag)
        MPI_Test(&one, &flag, MPI_STATUS_IGNORE);
    check(rank != 0 || out == 3, "ireduce");

    MPI_Comm_idup(MPI_COMM_WORLD, &c, &one);
    MPI_Wait(&one, MPI_STATUS_IGNORE);
    for (int i = 0; i < NBC_ROUNDS; i++) {
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, c);
        check(out == 3, "allreduce on the idup");
    }

    MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[0]);
    MPI_Iallreduce(&v, &r, 1, MPI_INT, MPI_SUM, c, &req[1]);
    MPI_Waitany(2, req, &idx, MPI_STATUS_IGNORE);
    MPI_Waitany(2, req, &idx, MPI_STATUS_IGNORE);
    check(out == 3 && r == 3, "two iallreduce");
    MPI_Comm_free(&c);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int provided, want = strcmp(mode, "order") == 0 ? 4 : 2;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != want || (strcmp(mode, "threads") == 0 && provided != MPI_THREAD_MULTIPLE)) {
        fprintf(stderr, "mpi_comms: %s: %d ranks, thread level %d\n", mode, size, provided);
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    if (strcmp(mode, "order") == 0)
        mode_order();
    else if (strcmp(mode, "threads") == 0)
        mode_threads();
    else if (strcmp(mode, "iprobe") == 0)
        mode_iprobe();
    else if (strcmp(mode, "allreduce") == 0 && argc > 2)
        mode_allreduce(atol(argv[2]));
    else if (strcmp(mode, "nbc") == 0)
        mode_nbc();
    else
        failed = 2;
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    MPI_Finalize();
    return failed;
}
