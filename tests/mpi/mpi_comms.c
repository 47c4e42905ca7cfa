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
 *     two MPI_Comm_idup (C, then D), both completed by one MPI_Waitall,
 *       first touched (an MPI_Iprobe) C then D on rank 0, D then C on rank
 *       1; then NBC_ROUNDS MPI_Allreduce on C and NBC_ROUNDS MPI_Bcast on D;
 *     MPI_Iallreduce [4] on MPI_COMM_WORLD and MPI_Iallreduce [NBC_ROUNDS]
 *       on C, completed by MPI_Waitany twice.
 * - makers (4 ranks): one communicator from each creating call: the two
 *   halves of MPI_Comm_split (even, odd ranks), MPI_Comm_create_group ({0, 1,
 *   2}, only they call it), MPI_Intercomm_create (the halves), its
 *   MPI_Intercomm_merge, MPI_Cart_create (2 × 2), the two rows of
 *   MPI_Cart_sub, MPI_Graph_create and MPI_Dist_graph_create_adjacent (a
 *   ring), MPI_Comm_split_type (shared memory: one host), MPI_Comm_create
 *   ({1, 2, 3}), MPI_Comm_dup_with_info: MAKERS communicators in all. Each
 *   rank first touches its own (an MPI_Iprobe) in creation order on even
 *   ranks, in reverse on odd ones; then, in creation order, i + 1
 *   MPI_Allreduce on the communicator(s) of the i-th call (so a
 *   communicator named differently on some ranks leaves instances partial).
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
#define MAKERS     13

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
    MPI_Comm c, d;

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

    MPI_Comm_idup(MPI_COMM_WORLD, &c, &req[0]);
    MPI_Comm_idup(MPI_COMM_WORLD, &d, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, rank == 0 ? c : d, &flag, MPI_STATUS_IGNORE);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, rank == 0 ? d : c, &flag, MPI_STATUS_IGNORE);
    for (int i = 0; i < NBC_ROUNDS; i++) {
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, c);
        check(out == 3, "allreduce on the idup");
        bc = rank == 0 ? i : -1;
        MPI_Bcast(&bc, 1, MPI_INT, 0, d);
        check(bc == i, "bcast on the second idup");
    }

    MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[0]);
    MPI_Iallreduce(&v, &r, 1, MPI_INT, MPI_SUM, c, &req[1]);
    MPI_Waitany(2, req, &idx, MPI_STATUS_IGNORE);
    MPI_Waitany(2, req, &idx, MPI_STATUS_IGNORE);
    check(out == 3 && r == 3, "two iallreduce");
    MPI_Comm_free(&c);
    MPI_Comm_free(&d);
}

/* ---- makers ---- */

static MPI_Group world_group_of(const int *ranks, int n)
{
    MPI_Group wg, g;

    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, n, ranks, &g);
    MPI_Group_free(&wg);
    return g;
}

/* Makes this rank's communicators into made[] (MPI_COMM_NULL where it is in none); returns
 * how many slots. */
static int make_all(MPI_Comm made[MAKERS])
{
    static const int g012[] = {0, 1, 2}, g123[] = {1, 2, 3};
    int n = 0, dims[2] = {2, 2}, periods[2] = {0, 0}, remain[2] = {0, 1};
    int index[4] = {2, 4, 6, 8}, edges[8] = {1, 3, 0, 2, 1, 3, 2, 0};
    int src = (rank + 3) % 4, dst = (rank + 1) % 4, one = 1, flag;
    MPI_Group g;
    MPI_Comm half, cart;

    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    made[n++] = half;
    made[n] = MPI_COMM_NULL;
    g = world_group_of(g012, 3);
    if (rank < 3)
        MPI_Comm_create_group(MPI_COMM_WORLD, g, 5, &made[n]);
    MPI_Group_free(&g);
    n++;
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 == 0 ? 1 : 0, 7, &made[n++]);
    MPI_Intercomm_merge(made[n - 1], rank % 2, &made[n]);
    n++;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    made[n++] = cart;
    MPI_Cart_sub(cart, remain, &made[n++]);
    MPI_Graph_create(MPI_COMM_WORLD, 4, index, edges, 0, &made[n++]);
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &src, &one, 1, &dst, &one, MPI_INFO_NULL, 0,
                                   &made[n++]);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &made[n++]);
    g = world_group_of(g123, 3);
    MPI_Comm_create(MPI_COMM_WORLD, g, &made[n++]);
    MPI_Group_free(&g);
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &made[n++]);
    /* the two halves and the two rows are one slot each: MAKERS counts communicators */
    check(n == MAKERS - 2, "slots");
    for (int i = 0; i < n; i++) {
        int k = rank % 2 == 0 ? i : n - 1 - i;
        if (made[k] != MPI_COMM_NULL)
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, made[k], &flag, MPI_STATUS_IGNORE);
    }
    return n;
}

static void mode_makers(void)
{
    MPI_Comm made[MAKERS];
    int n = make_all(made);

    for (int i = 0; i < n; i++) {
        int v = 1, out = 0, want, inter = 0;
        if (made[i] == MPI_COMM_NULL)
            continue;
        MPI_Comm_test_inter(made[i], &inter);
        if (inter)
            MPI_Comm_remote_size(made[i], &want);
        else
            MPI_Comm_size(made[i], &want);
        for (int k = 0; k <= i; k++) {
            MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, made[i]);
            check(out == want, "allreduce on a made communicator");
        }
    }
    for (int i = 0; i < n; i++)
        if (made[i] != MPI_COMM_NULL)
            MPI_Comm_free(&made[i]);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int provided, want = strcmp(mode, "order") == 0 || strcmp(mode, "makers") == 0 ? 4 : 2;

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
    else if (strcmp(mode, "makers") == 0)
        mode_makers();
    else
        failed = 2;
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    MPI_Finalize();
    return failed;
}
