/*
 * cli_view — turns reply maps into human output, driven by column specs.
 *
 * A section of a reply (a list of maps, or one map) is described by a table
 * of struct cli_view_col: which key to read, how to show it (a kind), its
 * header and maximum width. cli_view_table() prints a list of maps as an
 * aligned table with one row per map; cli_view_fields() prints one map as
 * aligned "label  value" lines. Both borrow the objects and keep nothing.
 * A missing or mistyped value prints as "-" (or its plain text), never an
 * error: the output follows what the daemon sent.
 */
#ifndef TRACECTL_CLI_VIEW_H
#define TRACECTL_CLI_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <msgpack.h>

#define CLI_VIEW_MAX_COLS 24

enum cli_view_kind {
    CLI_VIEW_TEXT,     /* any value as plain text, left-aligned */
    CLI_VIEW_COUNT,    /* a number as plain text, right-aligned */
    CLI_VIEW_DURATION, /* nanoseconds → "4.56 ms" */
    CLI_VIEW_BYTES,    /* bytes → "12.3 MiB" */
    CLI_VIEW_SHARE,    /* ratio → "12.3%" */
    CLI_VIEW_TIME,     /* wall-clock ns → local "YYYY-MM-DD HH:MM:SS" */
    CLI_VIEW_FLOAT,    /* a float with one decimal, right-aligned */
};

struct cli_view_col {
    const char *name; /* header or label */
    const char *key;  /* key in the row map; ignored when custom is set */
    enum cli_view_kind kind;
    size_t max; /* widest cell in code points, 0 = no limit */
    /* Optional: formats a cell from the whole row (e.g. a value computed from two keys). */
    void (*custom)(const msgpack_object *row, char *buf, size_t size);
};

/*
 * With wide true (`--wide`), tables ignore every column's max from then on:
 * no cell is cut (names, devices, shapes). Off at start.
 */
void cli_view_set_wide(bool wide);

/* Formats value v (may be NULL: "-") as kind into buf. */
void cli_view_format(const msgpack_object *v, enum cli_view_kind kind, char *buf, size_t size);

/*
 * Prints rows (an array of maps) as a table under the given columns, each
 * line starting with indent; an empty or missing array prints "(none)".
 * Returns 0, -ENOMEM, -EINVAL (more than CLI_VIEW_MAX_COLS columns) or -EIO.
 */
int cli_view_table(FILE *f, const char *indent, const struct cli_view_col *cols, size_t ncols,
                   const msgpack_object *rows);

/* Prints one map as "name  value" lines, names padded to one width. Returns as above. */
int cli_view_fields(FILE *f, const char *indent, const struct cli_view_col *cols, size_t ncols,
                    const msgpack_object *map);

/*
 * A session's state for a table cell: its "state", with " (interrupted)" after it when the
 * daemon cut the session short (the `interrupted` extension of sessions rows and reports).
 */
void cli_view_state(const msgpack_object *session, char *buf, size_t size);

/*
 * When session (a sessions row or a report's session map) was cut short, prints one line
 * "<indent>interrupted: <reason>; ended <time>." and returns 1; else prints nothing and
 * returns 0.
 */
int cli_view_cut_note(FILE *f, const char *indent, const msgpack_object *session);

#endif
