/*
 * cli_view — reply maps → tables and label/value lines (see cli_view.h).
 */
#include "cli_view.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>

#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_table.h"

/* A cell holds a 4 KiB string (the protocol's longest, PROTOCOL.md Part 1) whole. */
#define CLI_VIEW_CELL (4096 + 1)

static bool cli_view_wide; /* cli_view_set_wide() */

void cli_view_set_wide(bool wide)
{
    cli_view_wide = wide;
}

static void cli_view_number(const msgpack_object *v, enum cli_view_kind kind, char *buf,
                            size_t size)
{
    double d;
    uint64_t u;

    if (cli_obj_f64(v, &d) != 0 || !isfinite(d) || (kind != CLI_VIEW_SHARE && d < 0)) {
        cli_obj_text(v, buf, size);
        return;
    }
    /* Integers stay exact; a float where an integer was expected is rounded. */
    if (cli_obj_u64(v, &u) != 0)
        u = (uint64_t)llround(d);
    switch (kind) {
    case CLI_VIEW_DURATION:
        cli_fmt_duration(buf, size, u);
        break;
    case CLI_VIEW_BYTES:
        cli_fmt_bytes(buf, size, u);
        break;
    case CLI_VIEW_TIME:
        cli_fmt_time(buf, size, u);
        break;
    case CLI_VIEW_SHARE:
        cli_fmt_share(buf, size, d);
        break;
    default:
        snprintf(buf, size, "%.1f", d);
        break;
    }
}

void cli_view_format(const msgpack_object *v, enum cli_view_kind kind, char *buf, size_t size)
{
    if (kind == CLI_VIEW_TEXT || kind == CLI_VIEW_COUNT || cli_obj_is_nil(v))
        cli_obj_text(v, buf, size);
    else
        cli_view_number(v, kind, buf, size);
}

static void cli_view_cell(const struct cli_view_col *c, const msgpack_object *row, char *buf,
                          size_t size)
{
    if (c->custom != NULL)
        c->custom(row, buf, size);
    else
        cli_view_format(cli_obj_get(row, c->key), c->kind, buf, size);
}

static void cli_view_columns(struct cli_table_col *tc, const struct cli_view_col *cols,
                             size_t ncols, bool header)
{
    for (size_t i = 0; i < ncols; i++) {
        tc[i].name = header ? cols[i].name : NULL;
        tc[i].right = cols[i].kind != CLI_VIEW_TEXT;
        tc[i].max = cli_view_wide ? 0 : cols[i].max;
    }
}

/* Adds one row of cells from a map; returns 0 or -ENOMEM. */
static int cli_view_row(struct cli_table *t, const struct cli_view_col *cols, size_t ncols,
                        const msgpack_object *row)
{
    char buf[CLI_VIEW_CELL];
    int rc = 0;

    for (size_t c = 0; c < ncols && rc == 0; c++) {
        cli_view_cell(&cols[c], row, buf, sizeof(buf));
        rc = cli_table_add(t, buf);
    }
    return rc;
}

int cli_view_table(FILE *f, const char *indent, const struct cli_view_col *cols, size_t ncols,
                   const msgpack_object *rows)
{
    struct cli_table_col tc[CLI_VIEW_MAX_COLS];
    struct cli_table *t;
    int rc = 0;

    if (ncols > CLI_VIEW_MAX_COLS)
        return -EINVAL;
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY || rows->via.array.size == 0) {
        fprintf(f, "%s(none)\n", indent);
        return ferror(f) ? -EIO : 0;
    }
    cli_view_columns(tc, cols, ncols, true);
    t = cli_table_new(tc, ncols);
    if (t == NULL)
        return -ENOMEM;
    for (uint32_t r = 0; r < rows->via.array.size && rc == 0; r++)
        rc = cli_view_row(t, cols, ncols, &rows->via.array.ptr[r]);
    if (rc == 0)
        rc = cli_table_print(t, f, indent);
    cli_table_free(t);
    return rc;
}

int cli_view_fields(FILE *f, const char *indent, const struct cli_view_col *cols, size_t ncols,
                    const msgpack_object *map)
{
    static const struct cli_table_col tc[2] = {{NULL, false, 0}, {NULL, false, 0}};
    struct cli_table *t = cli_table_new(tc, 2);
    char buf[CLI_VIEW_CELL];
    int rc = 0;

    if (t == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < ncols && rc == 0; i++) {
        cli_view_cell(&cols[i], map, buf, sizeof(buf));
        rc = cli_table_add(t, cols[i].name);
        if (rc == 0)
            rc = cli_table_add(t, buf);
    }
    if (rc == 0)
        rc = cli_table_print(t, f, indent);
    cli_table_free(t);
    return rc;
}

void cli_view_state(const msgpack_object *session, char *buf, size_t size)
{
    char state[32];

    cli_obj_text(cli_obj_get(session, "state"), state, sizeof(state));
    snprintf(buf, size, "%s%s", state,
             cli_obj_is_true(cli_obj_get(session, "interrupted")) ? " (interrupted)" : "");
}

int cli_view_cut_note(FILE *f, const char *indent, const msgpack_object *session)
{
    char why[512], when[CLI_FMT_LEN];
    const msgpack_object *reason = cli_obj_get(session, "interrupted_reason");
    uint64_t ended;

    if (!cli_obj_is_true(cli_obj_get(session, "interrupted")))
        return 0;
    if (cli_obj_is_nil(reason))
        snprintf(why, sizeof(why), "the daemon stopped while the session was live");
    else
        cli_obj_text(reason, why, sizeof(why));
    fprintf(f, "%sinterrupted: %s", indent, why);
    if (cli_obj_u64(cli_obj_get(session, "interrupted_ns"), &ended) == 0 && ended > 0) {
        cli_fmt_time(when, sizeof(when), ended);
        fprintf(f, "; ended %s", when);
    }
    fputs(".\n", f);
    return 1;
}
