/*
 * cli_export_chrome — Chrome trace-event JSON (see cli_export_chrome.h).
 */
#include "cli_export_chrome.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_export_lanes.h"
#include "map.h"
#include "cli_json.h"

struct cli_export_chrome_state {
    struct cli_export_lanes lanes; /* one thread (tid) per lane, in the lane's id */
    uint64_t next_tid;
    bool first; /* no event written yet */
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
    struct pairmap seen;

    if (st == NULL)
        return -ENOMEM;
    cli_export_lanes_init(&st->lanes);
    st->first = true;
    x->state = st;
    fputs("{\"traceEvents\":[", x->out);
    /* Processes of one rank share a pid: name each pid once. */
    pairmap_init(&seen);
    for (size_t i = 0; i < x->dict.n_procs; i++) {
        const struct cli_export_proc *p = &x->dict.procs[i];
        bool created;

        if (pairmap_upsert(&seen, (uint64_t)p->view_pid, 0, &created) == NULL) {
            pairmap_deinit(&seen);
            return -ENOMEM;
        }
        if (!created)
            continue;
        cli_export_chrome_meta(x, "process_name", p->view_pid, 0, p->label);
        cli_export_chrome_meta(x, "process_sort_index", p->view_pid, 0, NULL);
    }
    pairmap_deinit(&seen);
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
    /* The ext map's MPI keys where the entry has them; comm, a 64-bit hash, as a string: a
     * JSON number past 2^53 loses digits in the viewers. */
    if (r->has_peer)
        fprintf(f, ",\"peer\":%" PRIu64, r->peer);
    if (r->has_tag)
        fprintf(f, ",\"tag\":%" PRId64, r->tag);
    if (r->has_comm)
        fprintf(f, ",\"comm\":\"%" PRIu64 "\"", r->comm);
    if (r->has_seq)
        fprintf(f, ",\"seq\":%" PRIu64, r->seq);
    if (r->has_comm_size)
        fprintf(f, ",\"comm_size\":%" PRIu64, r->comm_size);
    fputs("}}", f);
    return 0;
}

static int cli_export_chrome_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct cli_export_chrome_state *st = x->state;
    int64_t pid = r->proc->view_pid;
    struct cli_export_lanes_track *tr;
    struct cli_export_lane *lane;
    FILE *f = x->out;
    uint32_t tid;
    int rc;

    /* complete events need no END: lanes only keep slices of one thread from overlapping */
    if ((rc = cli_export_lanes_place(&st->lanes, r, NULL, NULL, &tr, &lane)) != 0)
        return rc;
    if (lane->id == 0) {
        char name[256];

        lane->id = ++st->next_tid;
        cli_export_lanes_name(tr, (size_t)(lane - tr->lanes), name, sizeof(name));
        cli_export_chrome_meta(x, "thread_name", pid, (uint32_t)lane->id, name);
    }
    tid = (uint32_t)lane->id;
    cli_export_chrome_sep(x);
    /* a complete event covers its children (span_ns); a moment is an instant of its thread,
     * as a viewer would never close a complete event of duration 0 */
    fprintf(f,
            "{\"ph\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%u,\"name\":", r->span_ns > 0 ? "X" : "i",
            pid, tid);
    cli_json_write_str(f, r->op->name, strlen(r->op->name));
    fputs(",\"cat\":", f);
    cli_json_write_str(f, r->op->category, strlen(r->op->category));
    fputs(",\"ts\":", f);
    cli_export_chrome_us(f, r->start_ns);
    if (r->span_ns > 0) {
        fputs(",\"dur\":", f);
        cli_export_chrome_us(f, r->span_ns);
    } else {
        fputs(",\"s\":\"t\"", f);
    }
    if (x->no_args)
        fputs("}", f);
    else
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
        cli_export_lanes_deinit(&st->lanes);
    free(st);
    x->state = NULL;
}

const struct cli_export_format cli_export_chrome = {
    .name = "chrome",
    .binary = false,
    .by_start = true,
    .begin = cli_export_chrome_begin,
    .row = cli_export_chrome_row,
    .end = cli_export_chrome_end,
    .free = cli_export_chrome_free,
};
