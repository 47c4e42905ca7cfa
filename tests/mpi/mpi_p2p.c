/*
 * mpi_p2p.c — point-to-point calls whose peers and sizes test_mpi checks
 * against this program's own count (issue 29 item 4). 4 ranks; rank r:
 *   1. MPI_Send to every other rank j of size(r, j) chars (tag 1), then
 *      MPI_Recv from each in turn, posted 10,000 chars, MPI_STATUS_IGNORE;
 *      again (tag 6), received from MPI_ANY_SOURCE, MPI_ANY_TAG with a
 *      status;
 *   2. MPI_Irecv from MPI_ANY_SOURCE (posted 5,000 ints) for each other rank,
 *      a barrier, MPI_Isend to each of (r + j + 1) × 3 ints (tag 2), the
 *      first Irecv completed by MPI_Wait, the rest and the Isends by
 *      MPI_Waitall, all statuses ignored;
 *   3. MPI_Sendrecv on a ring: (r + 1) × 8 chars to the right, posted 1,000
 *      from the left (tag 3), status ignored;
 *   4. MPI_Irecv from the left (posted 64 doubles) completed by MPI_Test in
 *      a loop, the left's MPI_Send of r_left + 1 doubles (tag 4);
 *   5. MPI_Sendrecv_replace with the right/left of 2 ints (tag 5).
 * Sizes and sources come from what each rank sends (and from the status
 * where the program asks for one, checked against that), and it prints, per op and peer, what it
 * sent or received: "p2p RANK OP PEER CALLS BYTES". Built without tracectl.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXR 4

static long long calls[8][MAXR], bytes[8][MAXR];
static const char *const names[8] = {"MPI_Send",
                                     "MPI_Recv",
                                     "MPI_Isend",
                                     "MPI_Irecv",
                                     "MPI_Sendrecv",
                                     "tcmpi.recv",
                                     "MPI_Sendrecv_replace",
                                     NULL};
enum { SEND, RECV, ISEND, IRECV, SENDRECV, SR_RECV, SR_REPLACE };

static void count(int op, int peer, long long b)
{
    calls[op][peer]++;
    bytes[op][peer] += b;
}

static int size_of(int from, int to)
{
    return (from + 1) * (to + 1) * 10;
}

int main(int argc, char **argv)
{
    static char cbuf[10000], sbuf[MAXR][200];
    static int ibuf[MAXR][5000], isend[MAXR][64];
    double dbuf[64], dsend[64] = {0};
    int rank, size, right, left, v[2] = {0, 0};
    MPI_Request req[2 * MAXR], one;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != MAXR)
        MPI_Abort(MPI_COMM_WORLD, 2);
    right = (rank + 1) % size, left = (rank + size - 1) % size;

    /* 1. eager sends, received from each in turn with MPI_STATUS_IGNORE, then again (tag 6)
     * from MPI_ANY_SOURCE with a status */
    for (int t = 1; t <= 6; t += 5) {
        for (int j = 0; j < size; j++)
            if (j != rank) {
                MPI_Send(sbuf[j], size_of(rank, j), MPI_CHAR, j, t, MPI_COMM_WORLD);
                count(SEND, j, size_of(rank, j));
            }
        for (int j = 0; j < size; j++) {
            MPI_Status st;
            int n;
            if (j == rank)
                continue;
            if (t == 1) {
                MPI_Recv(cbuf, sizeof(cbuf), MPI_CHAR, j, MPI_ANY_TAG, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                count(RECV, j, size_of(j, rank));
                continue;
            }
            MPI_Recv(cbuf, sizeof(cbuf), MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                     &st);
            MPI_Get_count(&st, MPI_CHAR, &n);
            if (n != size_of(st.MPI_SOURCE, rank))
                MPI_Abort(MPI_COMM_WORLD, 3);
            count(RECV, st.MPI_SOURCE, n);
        }
    }

    /* 2. Irecvs from anyone, completed by Wait and Waitall */
    int k = 0;
    for (int j = 0; j < size; j++)
        if (j != rank)
            MPI_Irecv(ibuf[j], 5000, MPI_INT, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &req[k++]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        if (j != rank) {
            MPI_Isend(isend[j], (rank + j + 1) * 3, MPI_INT, j, 2, MPI_COMM_WORLD, &req[k++]);
            count(ISEND, j, (rank + j + 1) * 3 * 4);
            count(IRECV, j, (rank + j + 1) * 3 * 4); /* each other rank sends us one */
        }
    MPI_Wait(&req[0], MPI_STATUS_IGNORE);
    MPI_Waitall(k - 1, req + 1, MPI_STATUSES_IGNORE);

    /* 3. a ring of Sendrecv */
    MPI_Sendrecv(cbuf, (rank + 1) * 8, MPI_CHAR, right, 3, cbuf + 5000, 1000, MPI_CHAR, left, 3,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    count(SENDRECV, right, (rank + 1) * 8);
    count(SR_RECV, left, (left + 1) * 8);

    /* 4. an Irecv completed by MPI_Test */
    int flag = 0;
    MPI_Irecv(dbuf, 64, MPI_DOUBLE, left, 4, MPI_COMM_WORLD, &one);
    MPI_Send(dsend, rank + 1, MPI_DOUBLE, right, 4, MPI_COMM_WORLD);
    count(SEND, right, (rank + 1) * 8);
    while (!flag)
        MPI_Test(&one, &flag, MPI_STATUS_IGNORE);
    count(IRECV, left, (left + 1) * 8);

    /* 5. Sendrecv_replace */
    MPI_Sendrecv_replace(v, 2, MPI_INT, right, 5, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    count(SR_REPLACE, right, 8);
    count(SR_RECV, left, 8);

    for (int op = 0; names[op] != NULL; op++)
        for (int j = 0; j < size; j++)
            if (calls[op][j] > 0)
                printf("p2p %d %s %d %lld %lld\n", rank, names[op], j, calls[op][j], bytes[op][j]);
    MPI_Finalize();
    return 0;
}
