/*
 * mpi_callcount.c — an independent count of the MPI calls NetPIPE (NPmpi)
 * makes, for test_mpi: a minimal PMPI library of its own (no tracectl code)
 * that counts MPI_Send, Ssend, Recv, Irecv, Wait and Barrier calls and, at
 * MPI_Finalize, prints "calls <rank> <count>" on stdout. test_mpi runs NPmpi
 * once with this and once with libtracectl-mpi, with the same fixed repeat
 * count (-n), so both runs make the same calls. bench/mpi.sh uses it as
 * the cheapest PMPI layer there is, beside libtracectl-mpi (Debian has no mpiP).
 */
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic unsigned long long calls;

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    calls++;
    return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    calls++;
    return PMPI_Ssend(buf, count, type, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status)
{
    calls++;
    return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    calls++;
    return PMPI_Irecv(buf, count, type, source, tag, comm, req);
}

int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    calls++;
    return PMPI_Wait(req, status);
}

int MPI_Barrier(MPI_Comm comm)
{
    calls++;
    return PMPI_Barrier(comm);
}

int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op o,
                  MPI_Comm comm)
{
    calls++;
    return PMPI_Allreduce(sbuf, rbuf, count, type, o, comm);
}

int MPI_Finalize(void)
{
    int rank = -1;

    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("calls %d %llu\n", rank, (unsigned long long)calls);
    fflush(stdout);
    return PMPI_Finalize();
}
