/*
 * mpi_profile.c — a 4-rank program whose MPI time, communicators, message
 * sizes and point-to-point traffic test_mpi_report checks the report's MPI
 * section against, as this program counts them itself with its own clocks
 * (issue 29 item 4). Built without tracectl; run under LD_PRELOAD.
 *
 * Rank r, in 3 rounds: sleeps (r + 1) × 30 ms (its application time), then
 * an MPI_Barrier on MPI_COMM_WORLD (where the others wait for rank 3); then
 *   - 10 MPI_Allreduce of 8 doubles on MPI_COMM_WORLD;
 *   - 6 MPI_Bcast of 100 ints from rank 0 on a dup of MPI_COMM_WORLD;
 *   - 4 + h MPI_Allreduce of 16 ints on its half (MPI_Comm_split, colour
 *     h = r / 2: ranks {0, 1} and {2, 3}), then 2 MPI_Barrier on a dup of
 *     its half;
 *   - a ring: MPI_Send to the right of each of 0, 1, 7, 8, 1000, 1024, 1025
 *     and 65536 chars, each received with MPI_Recv from the left (posted
 *     65536, the size from the status);
 *   - rank 0 → rank 2: 5 MPI_Isend of 3000 chars, received by MPI_Irecv
 *     from MPI_ANY_SOURCE, each side completed by one MPI_Waitall;
 *   - rank 3 → rank 1: 2 MPI_Ssend of 100 ints, MPI_Recv from
 *     MPI_ANY_SOURCE.
 * Every recorded MPI call is timed with MPI_Wtime around it. It prints:
 *   "wall R NS"                from MPI_Init's return to MPI_Finalize's call
 *   "mpi R NS CALLS"           its MPI calls (those recorded) and their time
 *   "comm R NAME OP CALLS BYTES NS"  per communicator (world, dup, half, hdup) and op
 *   "size R OP BUCKET CALLS"   per op and message-size bucket: 0 for 0 bytes,
 *                              else e with bytes = m × 2^e, m in [0.5, 1) (frexp)
 *   "p2p FROM TO MSGS BYTES"   the messages it sent to each rank
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NR     4
#define ROUNDS 3
#define NOPS   9
#define NCOMMS 4

enum { BARRIER, ALLREDUCE, BCAST, SEND, RECV, ISEND, IRECV, SSEND, WAITALL };
static const char *const op_names[NOPS] = {"MPI_Barrier", "MPI_Allreduce", "MPI_Bcast",
                                           "MPI_Send",    "MPI_Recv",      "MPI_Isend",
                                           "MPI_Irecv",   "MPI_Ssend",     "MPI_Waitall"};
enum { WORLD, DUP, HALF, HDUP };
static const char *const comm_names[NCOMMS] = {"world", "dup", "half", "hdup"};

static long long mpi_ns, mpi_calls;
static long long c_calls[NCOMMS][NOPS], c_bytes[NCOMMS][NOPS], c_ns[NCOMMS][NOPS];
static long long sizes[NOPS][66];
static long long sent_msgs[NR], sent_bytes[NR];
static double t_start, t_end;

/* Times one MPI call. */
#define TIMED(call) (t_start = MPI_Wtime(), (void)(call), t_end = MPI_Wtime())

/* After a TIMED call: its time and count, its communicator's (comm < 0: none) and size's. */
static void done(int op, int comm, long long bytes)
{
    long long ns = (long long)((t_end - t_start) * 1e9);
    int e = 0;

    mpi_ns += ns;
    mpi_calls++;
    if (comm >= 0) {
        c_calls[comm][op]++;
        c_bytes[comm][op] += bytes;
        c_ns[comm][op] += ns;
    }
    if (op != BARRIER && op != WAITALL) {
        if (bytes > 0)
            frexp((double)bytes, &e);
        sizes[op][e]++;
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    static char sbuf[65536], rbuf[65536], ibuf[5][3000];
    static const int ring[] = {0, 1, 7, 8, 1000, 1024, 1025, 65536};
    double dx[8] = {0}, dy[8];
    int rank, size, bc[100] = {0}, hx[16] = {0}, hy[16], ss[100] = {0};
    MPI_Comm dup, half, hdup;
    MPI_Request req[5];
    double t0, t1;

    MPI_Init(&argc, &argv);
    t0 = MPI_Wtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != NR)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &half);
    MPI_Comm_dup(half, &hdup);
    for (int round = 0; round < ROUNDS; round++) {
        int right = (rank + 1) % NR, left = (rank + NR - 1) % NR;

        sleep_ms((rank + 1) * 30);
        TIMED(MPI_Barrier(MPI_COMM_WORLD));
        done(BARRIER, WORLD, 0);
        for (int i = 0; i < 10; i++) {
            TIMED(MPI_Allreduce(dx, dy, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
            done(ALLREDUCE, WORLD, 8 * sizeof(double));
        }
        for (int i = 0; i < 6; i++) {
            TIMED(MPI_Bcast(bc, 100, MPI_INT, 0, dup));
            done(BCAST, DUP, 100 * sizeof(int));
        }
        for (int i = 0; i < 4 + rank / 2; i++) {
            TIMED(MPI_Allreduce(hx, hy, 16, MPI_INT, MPI_SUM, half));
            done(ALLREDUCE, HALF, 16 * sizeof(int));
        }
        for (int i = 0; i < 2; i++) {
            TIMED(MPI_Barrier(hdup));
            done(BARRIER, HDUP, 0);
        }
        /* even ranks send first, odd ones receive first: no cycle of blocked sends */
        for (size_t k = 0; k < sizeof(ring) / sizeof(ring[0]); k++)
            for (int side = 0; side < 2; side++) {
                MPI_Status st;
                int got = 0;

                if ((side == 0) == (rank % 2 == 0)) {
                    TIMED(MPI_Send(sbuf, ring[k], MPI_CHAR, right, 1, MPI_COMM_WORLD));
                    done(SEND, WORLD, ring[k]);
                    sent_msgs[right]++;
                    sent_bytes[right] += ring[k];
                } else {
                    TIMED(MPI_Recv(rbuf, sizeof(rbuf), MPI_CHAR, left, 1, MPI_COMM_WORLD, &st));
                    MPI_Get_count(&st, MPI_CHAR, &got);
                    done(RECV, WORLD, got);
                }
            }
        if (rank == 0 || rank == 2) {
            for (int i = 0; i < 5; i++) {
                if (rank == 0) {
                    TIMED(MPI_Isend(ibuf[i], 3000, MPI_CHAR, 2, 7, MPI_COMM_WORLD, &req[i]));
                    done(ISEND, WORLD, 3000);
                    sent_msgs[2]++;
                    sent_bytes[2] += 3000;
                } else {
                    TIMED(MPI_Irecv(ibuf[i], 3000, MPI_CHAR, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD,
                                    &req[i]));
                    done(IRECV, WORLD, 3000);
                }
            }
            TIMED(MPI_Waitall(5, req, MPI_STATUSES_IGNORE));
            done(WAITALL, -1, 0);
        }
        for (int i = 0; (rank == 3 || rank == 1) && i < 2; i++) {
            if (rank == 3) {
                TIMED(MPI_Ssend(ss, 100, MPI_INT, 1, 8, MPI_COMM_WORLD));
                sent_msgs[1]++;
                sent_bytes[1] += 100 * sizeof(int);
            } else {
                TIMED(MPI_Recv(ss, 100, MPI_INT, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            }
            done(rank == 3 ? SSEND : RECV, WORLD, 100 * sizeof(int));
        }
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    MPI_Comm_free(&hdup);
    printf("mpi %d %lld %lld\n", rank, mpi_ns, mpi_calls);
    for (int c = 0; c < NCOMMS; c++)
        for (int o = 0; o < NOPS; o++)
            if (c_calls[c][o] > 0)
                printf("comm %d %s %s %lld %lld %lld\n", rank, comm_names[c], op_names[o],
                       c_calls[c][o], c_bytes[c][o], c_ns[c][o]);
    for (int o = 0; o < NOPS; o++)
        for (int e = 0; e < 66; e++)
            if (sizes[o][e] > 0)
                printf("size %d %s %d %lld\n", rank, op_names[o], e, sizes[o][e]);
    for (int j = 0; j < NR; j++)
        if (sent_msgs[j] > 0)
            printf("p2p %d %d %lld %lld\n", rank, j, sent_msgs[j], sent_bytes[j]);
    fflush(stdout);
    t1 = MPI_Wtime();
    MPI_Finalize();
    /* after MPI_Finalize: the wall time ends where it is called */
    printf("wall %d %lld\n", rank, (long long)((t1 - t0) * 1e9));
    return 0;
}
