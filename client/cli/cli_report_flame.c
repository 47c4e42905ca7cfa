/*
 * cli_report_flame — the collapsed stacks of a session by time and by
 * memory, for `report --html` (see cli_report_flame.h).
 *
 * One export stream feeds two instances of the collapsed format, one per
 * weight, each writing its lines into a memory stream at the end.
 */
#include "cli_report_flame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_export.h"
#include "cli_export_collapsed.h"

struct cli_report_flame_state {
    struct cli_export w[2]; /* time, memory */
    char *buf[2];
    size_t len[2];
};

static int cli_report_flame_begin(struct cli_export *x)
{
    struct cli_report_flame_state *s = calloc(1, sizeof(*s));
    int rc = 0;

    if (s == NULL)
        return -ENOMEM;
    x->state = s;
    for (int i = 0; i < 2 && rc == 0; i++) {
        s->w[i] = *x; /* the dictionaries are the stream's, shared and read-only */
        s->w[i].state = NULL;
        s->w[i].stacks = CLI_EXPORT_STACKS_DEVICE;
        s->w[i].weight = i == 0 ? CLI_EXPORT_WEIGHT_TIME : CLI_EXPORT_WEIGHT_MEMORY;
        s->w[i].out = open_memstream(&s->buf[i], &s->len[i]);
        rc = s->w[i].out == NULL ? -ENOMEM : cli_export_collapsed.begin(&s->w[i]);
    }
    return rc;
}

static int cli_report_flame_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct cli_report_flame_state *s = x->state;
    int rc = cli_export_collapsed.row(&s->w[0], r);

    return rc != 0 ? rc : cli_export_collapsed.row(&s->w[1], r);
}

static int cli_report_flame_end(struct cli_export *x)
{
    struct cli_report_flame_state *s = x->state;
    struct cli_report_flame *fl = x->arg;
    int rc = 0;

    for (int i = 0; i < 2 && rc == 0; i++) {
        rc = cli_export_collapsed.end(&s->w[i]);
        if (fclose(s->w[i].out) != 0 && rc == 0)
            rc = -ENOMEM;
        s->w[i].out = NULL;
    }
    if (rc != 0)
        return rc;
    fl->time = s->buf[0], fl->time_len = s->len[0];
    fl->memory = s->buf[1], fl->memory_len = s->len[1];
    s->buf[0] = s->buf[1] = NULL;
    return 0;
}

static void cli_report_flame_release(struct cli_export *x)
{
    struct cli_report_flame_state *s = x->state;

    if (s == NULL)
        return;
    for (int i = 0; i < 2; i++) {
        if (s->w[i].state != NULL)
            cli_export_collapsed.free(&s->w[i]);
        if (s->w[i].out != NULL)
            fclose(s->w[i].out);
        free(s->buf[i]);
    }
    free(s);
    x->state = NULL;
}

static const struct cli_export_format cli_report_flame_format = {
    .name = "flame",
    .binary = false,
    .begin = cli_report_flame_begin,
    .row = cli_report_flame_row,
    .end = cli_report_flame_end,
    .free = cli_report_flame_release,
};

int cli_report_flame_read(struct cli_ctx *ctx, char *session, struct cli_report_flame *fl)
{
    memset(fl, 0, sizeof(*fl));
    return cli_export_each(ctx, session, &cli_report_flame_format, fl);
}

void cli_report_flame_free(struct cli_report_flame *fl)
{
    free(fl->time);
    free(fl->memory);
    memset(fl, 0, sizeof(*fl));
}
