! mpi_fortran.f90 — Open MPI's three Fortran bindings (`use mpi` in the main
! program, mpif.h in with_mpif, `use mpi_f08` in with_f08), each making
! allreduce / bcast / barrier / send-recv calls on 2 ranks. Every rank counts
! its own calls and bytes and prints "rank R OP CALLS BYTES", so that
! test_mpi compares the session with the program's own count. Sends and
! receives have the same size (a receive's bytes are its posted size). Each
! of the main loop's n rounds ends with MPI_Pcontrol(100): n + 1 steps.
module counts
    implicit none
    integer(8) :: ncalls(14) = 0, nbytes(14) = 0
    ! 1 MPI_Allreduce, 2 MPI_Bcast, 3 MPI_Barrier, 4 MPI_Send, 5 MPI_Recv, 6 MPI_Irecv,
    ! 7 MPI_Isend, 8 MPI_Test, 9 MPI_Wait, 10 MPI_Sendrecv_replace, 11 tcmpi.recv (its receive
    ! side), 12 MPI_Waitany, 13 MPI_Waitsome, 14 MPI_Waitall
end module counts

subroutine with_mpif(n)
    use counts
    implicit none
    include 'mpif.h'
    integer, intent(in) :: n
    integer :: i, ierr, rank
    double precision :: x(3), y(3)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    x = 1.0d0
    do i = 1, n
        call MPI_Allreduce(x, y, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
        ncalls(1) = ncalls(1) + 1; nbytes(1) = nbytes(1) + 24
    end do
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    ncalls(3) = ncalls(3) + 1
end subroutine with_mpif

! Irecv from MPI_ANY_SOURCE (posted 8 integers, 3 arrive) completed by an MPI_Test loop,
! Isend completed by MPI_Wait, Sendrecv_replace; statuses ignored.
subroutine with_nonblocking(n)
    use counts
    implicit none
    include 'mpif.h'
    integer, intent(in) :: n
    integer :: i, ierr, rank, peer, rreq, sreq, k(3), r(8), k5(5), r2(8), rr(2), ss(2)
    integer :: idx, outc, idxs(2)
    logical :: done
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    peer = 1 - rank
    k = rank
    do i = 1, n
        call MPI_Irecv(r, 8, MPI_INTEGER, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, rreq, ierr)
        ncalls(6) = ncalls(6) + 1; nbytes(6) = nbytes(6) + 12
        call MPI_Isend(k, 3, MPI_INTEGER, peer, 5, MPI_COMM_WORLD, sreq, ierr)
        ncalls(7) = ncalls(7) + 1; nbytes(7) = nbytes(7) + 12
        done = .false.
        do while (.not. done)
            call MPI_Test(rreq, done, MPI_STATUS_IGNORE, ierr)
            ncalls(8) = ncalls(8) + 1
        end do
        call MPI_Wait(sreq, MPI_STATUS_IGNORE, ierr)
        ncalls(9) = ncalls(9) + 1
        call MPI_Sendrecv_replace(k, 3, MPI_INTEGER, peer, 6, peer, 6, MPI_COMM_WORLD, &
                                  MPI_STATUS_IGNORE, ierr)
        ncalls(10) = ncalls(10) + 1; nbytes(10) = nbytes(10) + 12
        ncalls(11) = ncalls(11) + 1; nbytes(11) = nbytes(11) + 12
    end do
    ! two Irecvs (12 B and 20 B arrive) completed by MPI_Waitany, then MPI_Waitsome
    k5 = rank
    call MPI_Irecv(r, 8, MPI_INTEGER, peer, 7, MPI_COMM_WORLD, rr(1), ierr)
    call MPI_Irecv(r2, 8, MPI_INTEGER, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, rr(2), ierr)
    ncalls(6) = ncalls(6) + 2; nbytes(6) = nbytes(6) + 12 + 20
    call MPI_Isend(k, 3, MPI_INTEGER, peer, 7, MPI_COMM_WORLD, ss(1), ierr)
    call MPI_Isend(k5, 5, MPI_INTEGER, peer, 8, MPI_COMM_WORLD, ss(2), ierr)
    ncalls(7) = ncalls(7) + 2; nbytes(7) = nbytes(7) + 12 + 20
    call MPI_Waitany(2, rr, idx, MPI_STATUS_IGNORE, ierr)
    ncalls(12) = ncalls(12) + 1
    do while (rr(1) /= MPI_REQUEST_NULL .or. rr(2) /= MPI_REQUEST_NULL)
        call MPI_Waitsome(2, rr, outc, idxs, MPI_STATUSES_IGNORE, ierr)
        ncalls(13) = ncalls(13) + 1
    end do
    call MPI_Waitall(2, ss, MPI_STATUSES_IGNORE, ierr)
    ncalls(14) = ncalls(14) + 1
end subroutine with_nonblocking

subroutine with_f08(n)
    use counts
    use mpi_f08
    implicit none
    integer, intent(in) :: n
    integer :: i, rank
    integer :: v(5)
    type(MPI_Status) :: st
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    v = rank
    do i = 1, n
        call MPI_Bcast(v, 5, MPI_INTEGER, 0, MPI_COMM_WORLD)
        ncalls(2) = ncalls(2) + 1; nbytes(2) = nbytes(2) + 20
    end do
    if (rank == 0) then
        call MPI_Send(v, 5, MPI_INTEGER, 1, 9, MPI_COMM_WORLD)
        ncalls(4) = ncalls(4) + 1; nbytes(4) = nbytes(4) + 20
    else if (rank == 1) then
        call MPI_Recv(v, 5, MPI_INTEGER, 0, 9, MPI_COMM_WORLD, st)
        ncalls(5) = ncalls(5) + 1; nbytes(5) = nbytes(5) + 20
    end if
    call MPI_Barrier(MPI_COMM_WORLD)
    ncalls(3) = ncalls(3) + 1
end subroutine with_f08

program mpi_fortran
    use counts
    use mpi
    implicit none
    integer :: i, ierr, rank, n, peer
    real :: a(4)
    character(len=*), parameter :: names(14) = [character(len=20) :: 'MPI_Allreduce', &
        'MPI_Bcast', 'MPI_Barrier', 'MPI_Send', 'MPI_Recv', 'MPI_Irecv', 'MPI_Isend', &
        'MPI_Test', 'MPI_Wait', 'MPI_Sendrecv_replace', 'tcmpi.recv', 'MPI_Waitany', &
        'MPI_Waitsome', 'MPI_Waitall']
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    n = 7
    a = 2.0
    peer = 1 - rank
    do i = 1, n
        call MPI_Allreduce(MPI_IN_PLACE, a, 4, MPI_REAL, MPI_MAX, MPI_COMM_WORLD, ierr)
        ncalls(1) = ncalls(1) + 1; nbytes(1) = nbytes(1) + 16
        call MPI_Bcast(a, 2, MPI_REAL, 1, MPI_COMM_WORLD, ierr)
        ncalls(2) = ncalls(2) + 1; nbytes(2) = nbytes(2) + 8
        call MPI_Barrier(MPI_COMM_WORLD, ierr)
        ncalls(3) = ncalls(3) + 1
        if (rank == 0) then
            call MPI_Send(a, 4, MPI_REAL, peer, i, MPI_COMM_WORLD, ierr)
            ncalls(4) = ncalls(4) + 1; nbytes(4) = nbytes(4) + 16
            call MPI_Recv(a, 4, MPI_REAL, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
            ncalls(5) = ncalls(5) + 1; nbytes(5) = nbytes(5) + 16
        else
            call MPI_Recv(a, 4, MPI_REAL, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
            ncalls(5) = ncalls(5) + 1; nbytes(5) = nbytes(5) + 16
            call MPI_Send(a, 4, MPI_REAL, peer, i, MPI_COMM_WORLD, ierr)
            ncalls(4) = ncalls(4) + 1; nbytes(4) = nbytes(4) + 16
        end if
        call MPI_Pcontrol(100)
    end do
    call with_mpif(5)
    call with_f08(3)
    call with_nonblocking(4)
    do i = 1, 14
        print '(a,i0,1x,a,1x,i0,1x,i0)', 'rank ', rank, trim(names(i)), ncalls(i), nbytes(i)
    end do
    call MPI_Finalize(ierr)
end program mpi_fortran
