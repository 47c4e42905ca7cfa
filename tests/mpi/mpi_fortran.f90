! mpi_fortran.f90 — Open MPI's three Fortran bindings (`use mpi` in the main
! program, mpif.h in with_mpif, `use mpi_f08` in with_f08), each making
! allreduce / bcast / barrier / send-recv calls on 2 ranks. Every rank counts
! its own calls and bytes and prints "rank R OP CALLS BYTES", so that
! test_mpi compares the session with the program's own count. Sends and
! receives have the same size (a receive's bytes are its posted size). Each
! of the main loop's n rounds ends with MPI_Pcontrol(100): n + 1 steps.
module counts
    implicit none
    integer(8) :: ncalls(5) = 0, nbytes(5) = 0
    ! 1 MPI_Allreduce, 2 MPI_Bcast, 3 MPI_Barrier, 4 MPI_Send, 5 MPI_Recv
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
    character(len=*), parameter :: names(5) = [character(len=13) :: 'MPI_Allreduce', &
        'MPI_Bcast', 'MPI_Barrier', 'MPI_Send', 'MPI_Recv']
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
    do i = 1, 5
        print '(a,i0,1x,a,1x,i0,1x,i0)', 'rank ', rank, trim(names(i)), ncalls(i), nbytes(i)
    end do
    call MPI_Finalize(ierr)
end program mpi_fortran
