/*
 * cli_table — aligned text tables (see cli_table.h).
 */
#include "cli_table.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define CLI_TABLE_ELLIPSIS "\xe2\x80\xa6" /* U+2026 … */

struct cli_table {
    const struct cli_table_col *cols;
    size_t ncols;
    char **cells; /* row-major, ncells of them */
    size_t ncells, cap;
};

struct cli_table *cli_table_new(const struct cli_table_col *cols, size_t ncols)
{
    struct cli_table *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->cols = cols;
    t->ncols = ncols;
    return t;
}

void cli_table_free(struct cli_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* A copy of s with control characters and invalid UTF-8 replaced by '?'. */
static char *cli_table_sanitize(const char *s)
{
    size_t n = strlen(s), i = 0, o = 0;
    char *out = malloc(n + 1);
    uint32_t cp;

    if (out == NULL)
        return NULL;
    while (i < n) {
        size_t len = utf8_decode(s + i, n - i, &cp);

        if (len == 0 || cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
            out[o++] = '?';
            i += len ? len : 1;
            continue;
        }
        memcpy(out + o, s + i, len);
        o += len;
        i += len;
    }
    out[o] = '\0';
    return out;
}

int cli_table_add(struct cli_table *t, const char *cell)
{
    char *copy;

    if (t->ncells == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **cells = realloc(t->cells, cap * sizeof(*cells));

        if (cells == NULL)
            return -ENOMEM;
        t->cells = cells;
        t->cap = cap;
    }
    copy = cli_table_sanitize(cell);
    if (copy == NULL)
        return -ENOMEM;
    t->cells[t->ncells++] = copy;
    return 0;
}

size_t cli_table_rows(const struct cli_table *t)
{
    return t->ncols ? t->ncells / t->ncols : 0;
}

size_t cli_table_width(const char *s)
{
    size_t w = 0;

    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* Bytes of s that hold its first n code points. */
static size_t cli_table_prefix(const char *s, size_t n)
{
    size_t i = 0;

    for (; s[i]; i++) {
        if (((unsigned char)s[i] & 0xc0) != 0x80 && n-- == 0)
            break;
    }
    return i;
}

static size_t cli_table_cell_width(const struct cli_table_col *c, const char *s)
{
    size_t w = cli_table_width(s);

    return c->max && w > c->max ? c->max : w;
}

static bool cli_table_has_header(const struct cli_table *t)
{
    for (size_t c = 0; c < t->ncols; c++) {
        if (t->cols[c].name != NULL)
            return true;
    }
    return false;
}

/* Writes s, cut to the column's maximum width with a trailing "…". */
static void cli_table_put(FILE *f, const struct cli_table_col *c, const char *s)
{
    if (c->max && cli_table_width(s) > c->max) {
        fwrite(s, 1, cli_table_prefix(s, c->max - 1), f);
        fputs(CLI_TABLE_ELLIPSIS, f);
    } else {
        fputs(s, f);
    }
}

/* Prints one cell padded to width w; the last left-aligned cell of a line gets no padding. */
static void cli_table_cell(FILE *f, const struct cli_table_col *c, const char *s, size_t w,
                           bool last)
{
    int pad = (int)(w - cli_table_cell_width(c, s));

    if (c->right)
        fprintf(f, "%*s", pad, "");
    cli_table_put(f, c, s);
    if (!c->right && !last)
        fprintf(f, "%*s", pad, "");
}

static void cli_table_line(const struct cli_table *t, FILE *f, const char *indent,
                           const char *const *cells, const size_t *widths)
{
    fputs(indent, f);
    for (size_t c = 0; c < t->ncols; c++) {
        if (c > 0)
            fputs("  ", f);
        cli_table_cell(f, &t->cols[c], cells[c] ? cells[c] : "", widths[c], c + 1 == t->ncols);
    }
    fputc('\n', f);
}

int cli_table_print(const struct cli_table *t, FILE *f, const char *indent)
{
    size_t rows = cli_table_rows(t);
    size_t *widths = calloc(t->ncols ? t->ncols : 1, sizeof(*widths));
    const char **names = calloc(t->ncols ? t->ncols : 1, sizeof(*names));
    bool header = cli_table_has_header(t);

    if (widths == NULL || names == NULL) {
        free(widths);
        free(names);
        return -ENOMEM;
    }
    for (size_t c = 0; c < t->ncols; c++) {
        names[c] = t->cols[c].name;
        widths[c] = header && names[c] ? cli_table_width(names[c]) : 0;
        for (size_t r = 0; r < rows; r++) {
            size_t w = cli_table_cell_width(&t->cols[c], t->cells[r * t->ncols + c]);

            widths[c] = w > widths[c] ? w : widths[c];
        }
    }
    if (header)
        cli_table_line(t, f, indent, names, widths);
    for (size_t r = 0; r < rows; r++)
        cli_table_line(t, f, indent, (const char *const *)&t->cells[r * t->ncols], widths);
    free(widths);
    free(names);
    return ferror(f) ? -EIO : 0;
}
