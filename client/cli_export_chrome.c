/*
 * cli_export_chrome — Chrome trace-event JSON (see cli_export_chrome.h).
 */
#include "cli_export_chrome.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_export_map.h"
#include "cli_json.h"

struct cli_export_chrome_state {
    struct cli_export_map named; /* (view pid, tid) pairs whose thread_name is written */
    bool first;                  /* no event written yet */
};

/* Starts an event: the separator from the previous one. */
static void cli_export_chrome_sep(struct cli_export *x)
{
    struct cli_export_chrome_state *st = x->state;

    fputs(st->first ? "\n" : ",\n", x->out);
    st->first = false;
}

/* Nanoseconds as microseconds with three decimals, exactly. */
static void cli_export_chrome_us(FILE *f, uint64_t ns)
{
    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void cli_export_chrome_meta(struct cli_export *x, const char *what, int64_t pid,
                                   uint32_t tid, const char *name)
{
    cli_export_chrome_sep(x);
    fprintf(x->out, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%u,\"args\":{", what,
            pid, tid);
    if (name != NULL) {
        fputs("\"name\":", x->out);
        cli_json_write_str(x->out, name, strlen(name));
    } else {
        fprintf(x->out, "\"sort_index\":%" PRId64, pid);
    }
    fputs("}}", x->out);
}

static int cli_export_chrome_begin(struct cli_export *x)
{
    struct cli_export_chrome_state *st = calloc(1, sizeof(*st));
    struct cli_export_map seen;

    if (st == NULL)
        return -ENOMEM;
    cli_export_map_init(&st->named);
    st->first = true;
    x->state = st;
    fputs("{\"traceEvents\":[", x->out);
    /* Processes of one rank share a pid: name each pid once. */
    cli_export_map_init(&seen);
    for (size_t i = 0; i < x->dict.n_procs; i++) {
        const struct cli_export_proc *p = &x->dict.procs[i];
        bool created;

        if (cli_export_map_upsert(&seen, (uint64_t)p->view_pid, 0, &created) == NULL) {
            cli_export_map_deinit(&seen);
            return -ENOMEM;
        }
        if (!created)
            continue;
        cli_export_chrome_meta(x, "process_name", p->view_pid, 0, p->label);
        cli_export_chrome_meta(x, "process_sort_index", p->view_pid, 0, NULL);
    }
    cli_export_map_deinit(&seen);
    return ferror(x->out) ? -EIO : 0;
}

static int cli_export_chrome_args(FILE *f, const struct cli_export_row *r)
{
    int rc;

    fprintf(f, ",\"args\":{\"step\":%" PRIu64 ",\"elements\":%" PRIu64 ",\"mem_bytes\":%" PRIu64,
            r->step, r->elements, r->mem_bytes);
    fputs(",\"out_shape\":", f);
    if ((rc = cli_json_write(f, r->out_shape)) != 0)
        return rc;
    fputs(",\"in_shapes\":", f);
    if ((rc = cli_json_write(f, r->in_shapes)) != 0)
        return rc;
    fputs("}}", f);
    return 0;
}

static int cli_export_chrome_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct cli_export_chrome_state *st = x->state;
    int64_t pid = r->proc->view_pid;
    uint32_t tid = r->dev ? r->dev->index : 0;
    bool created;
    FILE *f = x->out;
    int rc;

    if (cli_export_map_upsert(&st->named, (uint64_t)pid, tid, &created) == NULL)
        return -ENOMEM;
    if (created)
        cli_export_chrome_meta(x, "thread_name", pid, tid, r->dev ? r->dev->name : "no device");
    cli_export_chrome_sep(x);
    fprintf(f, "{\"ph\":\"X\",\"pid\":%" PRId64 ",\"tid\":%u,\"name\":", pid, tid);
    cli_json_write_str(f, r->op->name, strlen(r->op->name));
    fputs(",\"cat\":", f);
    cli_json_write_str(f, r->op->category, strlen(r->op->category));
    fputs(",\"ts\":", f);
    cli_export_chrome_us(f, r->start_ns);
    fputs(",\"dur\":", f);
    cli_export_chrome_us(f, r->dur_ns);
    rc = cli_export_chrome_args(f, r);
    return rc != 0 ? rc : ferror(f) ? -EIO : 0;
}

static int cli_export_chrome_end(struct cli_export *x)
{
    fputs("\n],\"displayTimeUnit\":\"ns\"}\n", x->out);
    return ferror(x->out) ? -EIO : 0;
}

static void cli_export_chrome_free(struct cli_export *x)
{
    struct cli_export_chrome_state *st = x->state;

    if (st != NULL)
        cli_export_map_deinit(&st->named);
    free(st);
    x->state = NULL;
}

const struct cli_export_format cli_export_chrome = {
    .name = "chrome",
    .binary = false,
    .begin = cli_export_chrome_begin,
    .row = cli_export_chrome_row,
    .end = cli_export_chrome_end,
    .free = cli_export_chrome_free,
};
