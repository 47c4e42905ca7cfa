/* test_mpi.c — libtracectl-mpi under real Open MPI jobs (filled in by the next commits). */
#include <criterion/criterion.h>

Test(mpi, built)
{
}
