/*
 * test_cli_bars — client/cli/cli_bars.c, the terminal's bars of step times:
 * the glyph of each level, the scale's ends, groups when there are more
 * figures than glyphs, a buffer too small. Expected bars are worked out by
 * hand.
 */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cli_bars.h"

TestSuite(cli_bars);

Test(cli_bars, one_glyph_per_level)
{
    uint64_t v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    char buf[64];

    cr_assert_eq(cli_bars_line(buf, sizeof(buf), v, 8, 0, 7, 24), 8);
    cr_assert_str_eq(buf, "▁▂▃▄▅▆▇█");
}

Test(cli_bars, rounded_to_the_nearest_level_and_clamped)
{
    /* lo 100, hi 800: 7 levels of 100; 149 -> 0.49 -> ▁, 150 -> 0.5 -> ▂ */
    uint64_t v[5] = {50, 149, 150, 799, 900};
    char buf[64];

    cli_bars_line(buf, sizeof(buf), v, 5, 100, 800, 24);
    cr_assert_str_eq(buf, "▁▁▂██");
}

Test(cli_bars, equal_figures_are_full)
{
    uint64_t v[3] = {5, 5, 5};
    char buf[64];

    cli_bars_line(buf, sizeof(buf), v, 3, 5, 5, 24);
    cr_assert_str_eq(buf, "███");
}

Test(cli_bars, groups_show_their_largest)
{
    /* 6 figures in 3 glyphs: {0, 7} {0, 0} {3, 1} -> █ ▁ ▄ */
    uint64_t v[6] = {0, 7, 0, 0, 3, 1};
    char buf[64];

    cr_assert_eq(cli_bars_line(buf, sizeof(buf), v, 6, 0, 7, 3), 3);
    cr_assert_str_eq(buf, "█▁▄");
}

Test(cli_bars, a_small_buffer_cuts_whole_glyphs)
{
    uint64_t v[4] = {7, 7, 7, 7};
    char buf[8]; /* two glyphs of 3 bytes and the NUL */

    cr_assert_eq(cli_bars_line(buf, sizeof(buf), v, 4, 0, 7, 24), 2);
    cr_assert_str_eq(buf, "██");
    cr_assert_eq(cli_bars_line(buf, 0, v, 4, 0, 7, 24), 0);
}

Test(cli_bars, off_without_a_terminal)
{
    int null = open("/dev/null", O_WRONLY);

    cr_assert_geq(null, 0);
    cr_assert_eq(dup2(null, STDOUT_FILENO), STDOUT_FILENO); /* stdout: no terminal */
    close(null);
    cli_bars_set(false, false);
    cr_assert_not(cli_bars_on());
    cli_bars_set(true, false);
    cr_assert_not(cli_bars_on());
}
