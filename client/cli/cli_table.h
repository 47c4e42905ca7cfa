/*
 * cli_table — aligned text tables for the tracectl CLI.
 *
 * A table is built row by row from cells (C strings, copied) and printed
 * once: each column as wide as its widest cell, columns two spaces apart,
 * numbers right-aligned. Widths count UTF-8 code points, so "µs" and "…"
 * take one column (wide CJK glyphs are not measured as two). A column with
 * a maximum width cuts longer cells to max-1 code points plus "…".
 * Cells are sanitized when added: control characters and invalid UTF-8
 * become '?', so a name off the wire cannot move the cursor or inject
 * terminal escapes.
 *
 * Lifecycle: cli_table_new → cli_table_add ... → cli_table_print →
 * cli_table_free. Single-threaded, like the rest of the CLI.
 */
#ifndef TRACECTL_CLI_TABLE_H
#define TRACECTL_CLI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct cli_table_col {
    const char *name; /* header; when every name is NULL no header line is printed */
    bool right;       /* right-align (numbers) */
    size_t max;       /* widest a cell may be, in code points; 0 = no limit */
};

struct cli_table;

/* Returns a table with the given columns (cols is borrowed until free), or NULL (no memory). */
struct cli_table *cli_table_new(const struct cli_table_col *cols, size_t ncols);

/* Frees t and its cells; NULL is a no-op. */
void cli_table_free(struct cli_table *t);

/* Appends one cell; after ncols cells the next one starts a new row. Returns 0 or -ENOMEM. */
int cli_table_add(struct cli_table *t, const char *cell);

/* Number of complete rows added. */
size_t cli_table_rows(const struct cli_table *t);

/* Prints the header (if any) and the rows, each line starting with indent. Returns 0 or -EIO. */
int cli_table_print(const struct cli_table *t, FILE *f, const char *indent);

/* Display width of a sanitized cell, in code points. */
size_t cli_table_width(const char *s);

#endif
