/*
 * mpi_rate.c — a 2-rank ping-pong whose point-to-point rate starts low and
 * then passes any threshold, for test_mpi_sections' TRACECTL_MPI_P2P=auto
 * test (issue 29 item 7). Built without tracectl; run under LD_PRELOAD.
 *
 * Usage: mpi_rate SLOW FAST. First SLOW round trips 5 ms apart (at most
 * 400 point-to-point calls per second per rank), then FAST round trips as
 * fast as they go (NetPIPE's latency loop: MPI_Send then MPI_Recv on rank
 * 0, the other way round on rank 1), message sizes cycling through 8, 100
 * and 5000 bytes. Every call is timed with MPI_Wtime and counted here, so
 * that the test can hold the report to this program's own figures. It
 * prints, as mpi_profile does:
 *   "mpi R NS CALLS"          its MPI calls (all of them) and their time
 *   "op R OP CALLS BYTES"     per MPI function
 *   "size R OP BUCKET CALLS"  per function and message-size bucket: 0 for 0
 *                             bytes, else e with bytes = m × 2^e, m in [0.5, 1)
 *   "p2p FROM TO MSGS BYTES"  the messages it sent to each rank
 *   "fast R FROM TO"          ns from MPI_Init's return to the fast phase's
 *                             start and end (MPI_Wtime)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { SEND, RECV, BARRIER, NOPS };
static const char *const op_names[NOPS] = {"MPI_Send", "MPI_Recv", "MPI_Barrier"};

static long long mpi_ns, mpi_calls, calls[NOPS], bytes_of[NOPS], sizes[NOPS][66];
static long long sent_msgs, sent_bytes;

/* Counts one call of op that moved bytes and took the seconds between t0 and t1. */
static void done(int op, double t0, double t1, long long bytes)
{
    int e = 0;

    mpi_ns += (long long)((t1 - t0) * 1e9);
    mpi_calls++;
    calls[op]++;
    bytes_of[op] += bytes;
    if (op != BARRIER) {
        if (bytes > 0)
            frexp((double)bytes, &e);
        sizes[op][e]++;
    }
}

static void send_to(int peer, char *buf, int n)
{
    double t0 = MPI_Wtime();

    MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    done(SEND, t0, MPI_Wtime(), n);
    sent_msgs++;
    sent_bytes += n;
}

static void recv_from(int peer, char *buf, int n)
{
    double t0 = MPI_Wtime();

    MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    done(RECV, t0, MPI_Wtime(), n);
}

static void round_trip(int rank, char *buf, int n)
{
    if (rank == 0) {
        send_to(1, buf, n);
        recv_from(1, buf, n);
    } else {
        recv_from(0, buf, n);
        send_to(0, buf, n);
    }
}

static void barrier(void)
{
    double t0 = MPI_Wtime();

    MPI_Barrier(MPI_COMM_WORLD);
    done(BARRIER, t0, MPI_Wtime(), 0);
}

int main(int argc, char **argv)
{
    static char buf[5000];
    static const int size_cycle[3] = {8, 100, 5000};
    struct timespec gap = {0, 5000000};
    double t_init, t_fast, t_end;
    long slow, fast;
    int rank, size;

    MPI_Init(&argc, &argv);
    t_init = MPI_Wtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2 || argc != 3 || (slow = atol(argv[1])) < 0 || (fast = atol(argv[2])) < 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (long i = 0; i < slow; i++) {
        round_trip(rank, buf, 8);
        nanosleep(&gap, NULL);
    }
    barrier();
    t_fast = MPI_Wtime();
    for (long i = 0; i < fast; i++)
        round_trip(rank, buf, size_cycle[i % 3]);
    t_end = MPI_Wtime();
    barrier();
    printf("mpi %d %lld %lld\n", rank, mpi_ns, mpi_calls);
    for (int o = 0; o < NOPS; o++) {
        printf("op %d %s %lld %lld\n", rank, op_names[o], calls[o], bytes_of[o]);
        for (int e = 0; e < 66; e++)
            if (sizes[o][e] > 0)
                printf("size %d %s %d %lld\n", rank, op_names[o], e, sizes[o][e]);
    }
    printf("p2p %d %d %lld %lld\n", rank, 1 - rank, sent_msgs, sent_bytes);
    printf("fast %d %lld %lld\n", rank, (long long)((t_fast - t_init) * 1e9),
           (long long)((t_end - t_init) * 1e9));
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
