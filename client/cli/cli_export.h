/*
 * cli_export — `tracectl export <id|name> --format FMT [-o FILE]`: streams a
 * session's entries out of the daemon (["export", ...] in
 * proto/PROTOCOL.md) and writes them as CSV, flame-graph collapsed stacks,
 * Chrome trace-event JSON, a Perfetto .pftrace or an OTF2 archive.
 *
 * DESIGN. The daemon answers with a header (the dictionaries), then chunks
 * of at most 4096 rows, then an end marker. This module reads them one
 * message at a time from the connection and hands each row, resolved
 * against the dictionaries (cli_export_dict), to the chosen format through
 * struct cli_export_format; a chunk is released before the next is read.
 * Memory therefore follows the number of distinct ops, devices, processes
 * and (device, op) pairs, never the number of entries. Formats that need a
 * whole-session view (collapsed stacks) aggregate as rows pass and write at
 * the end; the others write as they go.
 *
 * With -o FILE the output goes through cli_outfile, as a shell redirect
 * would: into a character device or FIFO, through a symbolic link, and for a
 * regular file into a temporary file beside it, renamed over it only when
 * the whole stream arrived and was written, so a failed or interrupted
 * export never leaves a truncated file that looks complete.
 *
 * Runs on the CLI's only thread; see cli.h for the command conventions.
 */
#ifndef TRACECTL_CLI_EXPORT_H
#define TRACECTL_CLI_EXPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "cli_export_dict.h"

enum cli_export_weight {
    CLI_EXPORT_WEIGHT_TIME,   /* sum of max(1, round(dur_ns / 1000)), halves away from zero */
    CLI_EXPORT_WEIGHT_MEMORY, /* sum of mem_bytes */
    CLI_EXPORT_WEIGHT_CALLS,  /* number of entries */
};

enum cli_export_stacks {
    CLI_EXPORT_STACKS_DEVICE,   /* session;device;op (with nested regions' ops before op) */
    CLI_EXPORT_STACKS_LAUNCHER, /* session;rank;launching CPU op;op */
};

/* One export in progress: what a format sees. */
struct cli_export {
    FILE *out;
    struct cli_export_dict dict; /* valid from begin() on */
    enum cli_export_weight weight;
    enum cli_export_stacks stacks; /* collapsed only */
    bool no_args;                  /* chrome only: events without args (--no-args) */
    void *arg;                     /* the caller's, for formats used outside `export` */
    void *state;                   /* the format's own, NULL until its begin() */
    const char *dir;               /* a directory format's -o DIR, else NULL */
};

/*
 * An output format. Every callback returns 0 or a negative errno (-ENOMEM,
 * -EIO for a write error, -EMSGSIZE). begin() runs once the header has
 * arrived, row() once per entry in storage order, end() after the end
 * marker; free() always runs once at the end (also after an error or when
 * begin() never ran) and frees x->state.
 */
struct cli_export_format {
    const char *name;
    bool binary;    /* refuse to write it to a terminal */
    bool by_start;  /* wants the rows by start time ("order": "start"), not storage order */
    bool directory; /* writes files into the directory -o names (x->dir), not to x->out */
    int (*begin)(struct cli_export *x);
    int (*row)(struct cli_export *x, const struct cli_export_row *r);
    int (*end)(struct cli_export *x);
    void (*free)(struct cli_export *x);
};

extern const char cli_export_usage[];

int cli_export_run(struct cli_ctx *ctx, int argc, char **argv);

/*
 * For commands that read every entry of a session (report --by launcher):
 * streams the session named by `session` (an id or a name, as typed)
 * through fmt, whose callbacks see arg as x->arg and stdout as x->out.
 * Returns an exit code, after printing why on failure.
 */
int cli_export_each(struct cli_ctx *ctx, char *session, const struct cli_export_format *fmt,
                    void *arg);

#endif
