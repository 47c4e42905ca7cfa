/*
 * cli_export_csv — the `csv` export format (see cli_export_csv.h).
 */
#include "cli_export_csv.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define CLI_EXPORT_CSV_SHAPE 4096 /* 8 inputs of 16 dims of 20 digits fit */

/* Writes one field, quoted when RFC 4180 needs it, followed by sep. */
static void cli_export_csv_field(FILE *f, const char *s, char sep)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
    } else {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    }
    if (sep == '\n')
        fputs("\r\n", f);
    else
        fputc(sep, f);
}

/* An optional unsigned field: its value when has, else empty; then end. */
static void cli_export_csv_opt(FILE *f, bool has, uint64_t v, const char *end)
{
    if (has)
        fprintf(f, "%" PRIu64, v);
    fputs(end, f);
}

static int cli_export_csv_begin(struct cli_export *x)
{
    fputs("rank,pid,host,step,op,category,device,start_ns,dur_ns,elements,mem_bytes,"
          "out_shape,in_shapes,peer,tag,comm,seq,comm_size\r\n",
          x->out);
    return ferror(x->out) ? -EIO : 0;
}

static int cli_export_csv_row(struct cli_export *x, const struct cli_export_row *r)
{
    const struct cli_export_proc *p = r->proc;
    char shape[CLI_EXPORT_CSV_SHAPE];
    FILE *f = x->out;

    if (p->has_rank)
        fprintf(f, "%" PRId64, p->rank);
    fputc(',', f);
    if (p->has_pid)
        fprintf(f, "%" PRId64, p->pid);
    fputc(',', f);
    cli_export_csv_field(f, p->host ? p->host : "", ',');
    fprintf(f, "%" PRIu64 ",", r->step);
    cli_export_csv_field(f, r->op->name, ',');
    cli_export_csv_field(f, r->op->category, ',');
    cli_export_csv_field(f, r->dev ? r->dev->name : "", ',');
    fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",", r->start_ns, r->dur_ns,
            r->elements, r->mem_bytes);
    cli_export_shape_text(r->out_shape, shape, sizeof(shape));
    cli_export_csv_field(f, shape, ',');
    cli_export_shape_text(r->in_shapes, shape, sizeof(shape));
    cli_export_csv_field(f, shape, ',');
    /* the ext map's MPI keys, empty where the entry has none */
    cli_export_csv_opt(f, r->has_peer, r->peer, ",");
    if (r->has_tag)
        fprintf(f, "%" PRId64, r->tag);
    fputc(',', f);
    cli_export_csv_opt(f, r->has_comm, r->comm, ",");
    cli_export_csv_opt(f, r->has_seq, r->seq, ",");
    cli_export_csv_opt(f, r->has_comm_size, r->comm_size, "\r\n");
    return ferror(f) ? -EIO : 0;
}

static int cli_export_csv_end(struct cli_export *x)
{
    return ferror(x->out) ? -EIO : 0;
}

static void cli_export_csv_free(struct cli_export *x)
{
    (void)x;
}

const struct cli_export_format cli_export_csv = {
    .name = "csv",
    .binary = false,
    .begin = cli_export_csv_begin,
    .row = cli_export_csv_row,
    .end = cli_export_csv_end,
    .free = cli_export_csv_free,
};
