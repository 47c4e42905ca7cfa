/*
 * test_cli_export_collapsed — the weight rule of collapsed stacks
 * (client/cli/cli_export_collapsed.c, the one the `collapsed` export uses):
 * max(1, round(dur_ns / 1000)) with halves away from zero, in integers.
 * Every expected value is worked out by hand next to it.
 */
#include <stdint.h>

#include <criterion/criterion.h>

#include "cli_export_collapsed.h"

TestSuite(cli_export_collapsed);

Test(cli_export_collapsed, time_weight)
{
    cr_assert_eq(cli_export_collapsed_time(0), 1);    /* round(0) = 0 -> at least 1 */
    cr_assert_eq(cli_export_collapsed_time(1), 1);    /* round(0.001) = 0 -> 1 */
    cr_assert_eq(cli_export_collapsed_time(499), 1);  /* round(0.499) = 0 -> 1 */
    cr_assert_eq(cli_export_collapsed_time(500), 1);  /* round(0.5) = 1 */
    cr_assert_eq(cli_export_collapsed_time(999), 1);  /* round(0.999) = 1 */
    cr_assert_eq(cli_export_collapsed_time(1000), 1); /* 1 */
    cr_assert_eq(cli_export_collapsed_time(1499), 1); /* round(1.499) = 1 */
    cr_assert_eq(cli_export_collapsed_time(1500), 2); /* half away from zero */
    cr_assert_eq(cli_export_collapsed_time(2499), 2); /* round(2.499) = 2 */
    cr_assert_eq(cli_export_collapsed_time(2500), 3); /* half away from zero, not to even */
    /* UINT64_MAX = 18446744073709551615: 18446744073709551.615 -> ...552 */
    cr_assert_eq(cli_export_collapsed_time(UINT64_MAX), UINT64_C(18446744073709552));
}
