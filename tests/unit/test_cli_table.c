/*
 * test_cli_table — client/cli/cli_table.c: column widths in code points,
 * right-aligned numbers, the cut with "…", no padding after the last
 * left-aligned cell, and the sanitizing of cells off the wire. The expected
 * lines are written out by hand, space by space.
 */
#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#include "cli_table.h"

TestSuite(cli_table);

static char *print(const struct cli_table *t, const char *indent)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_eq(cli_table_print(t, f, indent), 0);
    fclose(f);
    return text;
}

Test(cli_table, widths_alignment_and_cut)
{
    static const struct cli_table_col cols[] = {
        {"OP", false, 0},
        {"CALLS", true, 0},
        {"DEVICE", false, 6},
    };
    static const char *const cells[] = {
        "matmul",       "12",   "gpu:0",          /* */
        "allreduce",    "3",    "longdevicename", /* cut to 5 code points and "…" */
        "\xc2\xb5s-op", "1000", "x",              /* µ is one column */
    };
    struct cli_table *t = cli_table_new(cols, 3);
    char *got;

    for (size_t i = 0; i < 9; i++)
        cr_assert_eq(cli_table_add(t, cells[i]), 0);
    cr_assert_eq(cli_table_rows(t), 3);
    got = print(t, "  ");
    /* widths: OP 9 (allreduce), CALLS 5 (the header), DEVICE 6 (the header, and the cap) */
    cr_assert_str_eq(got, "  OP         CALLS  DEVICE\n"
                          "  matmul        12  gpu:0\n"
                          "  allreduce      3  longd\xe2\x80\xa6\n"
                          "  \xc2\xb5s-op       1000  x\n");
    free(got);
    cli_table_free(t);
}

Test(cli_table, no_header_when_no_names)
{
    static const struct cli_table_col cols[] = {{NULL, false, 0}, {NULL, true, 0}};
    struct cli_table *t = cli_table_new(cols, 2);
    char *got;

    cli_table_add(t, "a");
    cli_table_add(t, "1");
    cli_table_add(t, "bbb");
    cli_table_add(t, "22");
    cli_table_add(t, "c"); /* an incomplete row is not printed */
    cr_assert_eq(cli_table_rows(t), 2);
    got = print(t, "");
    cr_assert_str_eq(got, "a     1\n"
                          "bbb  22\n");
    free(got);
    cli_table_free(t);
}

Test(cli_table, cells_are_sanitized)
{
    static const struct cli_table_col cols[] = {{NULL, false, 0}};
    struct cli_table *t = cli_table_new(cols, 1);
    char *got;

    cli_table_add(t, "a\x1b[31mb");     /* ESC: a terminal escape cannot get through */
    cli_table_add(t, "bad\xffutf");     /* invalid UTF-8 */
    cli_table_add(t, "\x7f|\xc2\x85|"); /* DEL and a C1 control (U+0085) */
    cli_table_add(t, "tab\there");
    got = print(t, "");
    cr_assert_str_eq(got, "a?[31mb\n"
                          "bad?utf\n"
                          "?|?|\n"
                          "tab?here\n");
    free(got);
    cli_table_free(t);
}

Test(cli_table, width_counts_code_points)
{
    cr_assert_eq(cli_table_width(""), 0);
    cr_assert_eq(cli_table_width("abc"), 3);
    cr_assert_eq(cli_table_width("\xc2\xb5s\xe2\x80\xa6"), 3); /* µs… */
    cr_assert_eq(cli_table_width("\xf0\x9f\x94\xa5"), 1);      /* U+1F525 */
}

Test(cli_table, free_null)
{
    cli_table_free(NULL);
}
