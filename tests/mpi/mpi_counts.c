/*
 * mpi_counts.c — an MPI program with known call counts per rank, for
 * tests/integration/test_mpi.c (which holds the same numbers, worked out by
 * hand from this file). Linked with -ltracectl-mpi. Run with 4 ranks.
 *
 * MPI_COMM_WORLD: 23 collectives, in this order (their seq 0..22):
 *   Barrier ×2; Bcast ×3 (10 int); Allreduce ×5 (8 double, the last one
 *   MPI_IN_PLACE); Reduce ×2 (4 int to root 0, the second MPI_IN_PLACE at the
 *   root); Gather (3 int to root 1, MPI_IN_PLACE there); Scatter (2 double from
 *   root 2); Allgather (MPI_IN_PLACE, 5 int each); Alltoall (2 int to each);
 *   Alltoallv (i+1 int to rank i); Gatherv (rank+1 int to root 0);
 *   Reduce_scatter_block (2 int each); Scan and Exscan (1 long); Iallreduce
 *   (4 int) and Ibcast (6 char), each then completed by MPI_Wait.
 * Two communicators from MPI_Comm_split (even and odd ranks), each:
 *   Allreduce ×3 (2 int); Bcast (1 int); Barrier — seq 0..4; then freed.
 * Point to point on MPI_COMM_WORLD, around the ring:
 *   Sendrecv ×4 (16 char each way, tag 7, to rank+1);
 *   Send and Recv of 100 int (tag 11; the Recv from MPI_ANY_SOURCE with
 *   MPI_STATUS_IGNORE);
 *   3 rounds of Irecv + Isend (32 double, tag 5) + Waitall(2).
 * Exits 1 when a result is wrong (the interposer must not change any).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "mpi_counts: wrong result: %s\n", what);
        failed = 1;
    }
}

static void world_collectives(int rank, int n)
{
    int ibuf[64] = {0}, ibuf2[64] = {0}, counts[4], displs[4];
    double dbuf[8], dbuf2[8];
    long lv = rank + 1, lout = 0;
    char cbuf[6] = "";
    MPI_Request req;

    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 10; k++)
            ibuf[k] = rank == 0 ? k + i : -1;
        MPI_Bcast(ibuf, 10, MPI_INT, 0, MPI_COMM_WORLD);
        check(ibuf[9] == 9 + i, "bcast");
    }
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 8; k++)
            dbuf[k] = rank + k;
        MPI_Allreduce(dbuf, dbuf2, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        check(dbuf2[1] == n * (n - 1) / 2 + n, "allreduce");
    }
    for (int k = 0; k < 8; k++)
        dbuf[k] = 1;
    MPI_Allreduce(MPI_IN_PLACE, dbuf, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    check(dbuf[7] == n, "allreduce in place");
    for (int k = 0; k < 4; k++)
        ibuf[k] = rank;
    MPI_Reduce(ibuf, ibuf2, 4, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    check(rank != 0 || ibuf2[0] == n - 1, "reduce");
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : ibuf, ibuf, 4, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    check(rank != 0 || ibuf[3] == n - 1, "reduce in place");

    for (int k = 0; k < 3 * n; k++)
        ibuf[k] = rank == 1 ? (k < 3 || k >= 6 ? -1 : 100 + k) : 0;
    for (int k = 0; k < 3; k++)
        ibuf2[k] = rank * 10 + k;
    MPI_Gather(rank == 1 ? MPI_IN_PLACE : ibuf2, 3, MPI_INT, ibuf, 3, MPI_INT, 1, MPI_COMM_WORLD);
    check(rank != 1 || (ibuf[0] == 0 && ibuf[11] == 32 && ibuf[4] == 104), "gather");
    for (int k = 0; k < 2 * n; k++)
        dbuf2[k] = k;
    MPI_Scatter(dbuf2, 2, MPI_DOUBLE, dbuf, 2, MPI_DOUBLE, 2, MPI_COMM_WORLD);
    check(dbuf[1] == 2 * rank + 1, "scatter");
    for (int k = 0; k < 5; k++)
        ibuf[rank * 5 + k] = rank;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ibuf, 5, MPI_INT, MPI_COMM_WORLD);
    check(ibuf[5 * n - 1] == n - 1, "allgather in place");
    for (int k = 0; k < 2 * n; k++)
        ibuf[k] = rank;
    MPI_Alltoall(ibuf, 2, MPI_INT, ibuf2, 2, MPI_INT, MPI_COMM_WORLD);
    check(ibuf2[2 * n - 1] == n - 1, "alltoall");
    for (int i = 0, off = 0; i < n; off += i + 1, i++)
        counts[i] = i + 1, displs[i] = off;
    MPI_Alltoallv(ibuf, counts, displs, MPI_INT, ibuf2,
                  (int[]){rank + 1, rank + 1, rank + 1, rank + 1},
                  (int[]){0, rank + 1, 2 * (rank + 1), 3 * (rank + 1)}, MPI_INT, MPI_COMM_WORLD);
    MPI_Gatherv(ibuf, rank + 1, MPI_INT, ibuf2, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
    for (int k = 0; k < 2 * n; k++)
        ibuf[k] = 1;
    MPI_Reduce_scatter_block(ibuf, ibuf2, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(ibuf2[1] == n, "reduce_scatter_block");
    MPI_Scan(&lv, &lout, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    check(lout == (long)(rank + 1) * (rank + 2) / 2, "scan");
    MPI_Exscan(&lv, &lout, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    check(rank == 0 || lout == (long)rank * (rank + 1) / 2, "exscan");
    for (int k = 0; k < 4; k++)
        ibuf[k] = 1;
    MPI_Iallreduce(ibuf, ibuf2, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    check(ibuf2[3] == n, "iallreduce");
    if (rank == 3)
        memcpy(cbuf, "hello", 6);
    MPI_Ibcast(cbuf, 6, MPI_CHAR, 3, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    check(strcmp(cbuf, "hello") == 0, "ibcast");
}

static void split_collectives(int rank)
{
    MPI_Comm half;
    int v[2], out[2];

    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    for (int i = 0; i < 3; i++) {
        v[0] = rank, v[1] = 1;
        MPI_Allreduce(v, out, 2, MPI_INT, MPI_SUM, half);
        check(out[1] == 2 && out[0] == (rank % 2 ? 1 + 3 : 0 + 2), "split allreduce");
    }
    MPI_Bcast(v, 1, MPI_INT, 0, half);
    MPI_Barrier(half);
    MPI_Comm_free(&half);
}

static void ring(int rank, int n)
{
    int right = (rank + 1) % n, left = (rank + n - 1) % n, ibuf[100], ibuf2[100];
    char s[16], r[16];
    double d[2][32];
    MPI_Request reqs[2];
    MPI_Status st;

    for (int i = 0; i < 4; i++) {
        memset(s, 'a' + rank, sizeof(s));
        MPI_Sendrecv(s, 16, MPI_CHAR, right, 7, r, 16, MPI_CHAR, left, 7, MPI_COMM_WORLD, &st);
        check(r[15] == 'a' + left && st.MPI_SOURCE == left, "sendrecv");
    }
    for (int k = 0; k < 100; k++)
        ibuf[k] = rank;
    if (rank % 2 == 0) {
        MPI_Send(ibuf, 100, MPI_INT, right, 11, MPI_COMM_WORLD);
        MPI_Recv(ibuf2, 100, MPI_INT, MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(ibuf2, 100, MPI_INT, MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(ibuf, 100, MPI_INT, right, 11, MPI_COMM_WORLD);
    }
    check(ibuf2[99] == left, "send/recv");
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 32; k++)
            d[0][k] = rank * 100 + i;
        MPI_Irecv(d[1], 32, MPI_DOUBLE, left, 5, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(d[0], 32, MPI_DOUBLE, right, 5, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        check(d[1][31] == left * 100 + i, "isend/irecv");
    }
}

int main(int argc, char **argv)
{
    int rank, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 4) {
        if (rank == 0)
            fprintf(stderr, "mpi_counts: run with 4 ranks\n");
        MPI_Finalize();
        return 2;
    }
    world_collectives(rank, n);
    split_collectives(rank);
    ring(rank, n);
    MPI_Finalize();
    return failed;
}
