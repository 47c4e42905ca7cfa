/*
 * cli_report_flame — the flame graphs of `report --html`: the session's
 * collapsed stacks (cli_export_collapsed, as `export --format collapsed`
 * writes them) weighed by time and by memory, read in one export stream.
 *
 * The stacks are an aggregate: one line per distinct stack, so their size
 * follows the session's distinct (device, op) pairs and nested regions,
 * never its entries; but reading them streams every entry from the daemon,
 * so it takes time in proportion to the entries (as `export` does). Runs on
 * the CLI's only thread.
 */
#ifndef TRACECTL_CLI_REPORT_FLAME_H
#define TRACECTL_CLI_REPORT_FLAME_H

#include <stddef.h>

#include "cli.h"

#define CLI_REPORT_FLAME_MAX (4u << 20) /* bytes of stacks a page takes, both weights together */

struct cli_report_flame {
    char *time;   /* "<stack> <µs>\n" lines, NUL-terminated; NULL: none */
    char *memory; /* "<stack> <bytes>\n" lines */
    size_t time_len, memory_len;
    const char *note; /* why there are none (a static string), or NULL */
};

/*
 * Reads the stacks of session (an id or a name, as typed) into *fl (zeroed
 * first). Returns an exit code, after printing why on failure; on success
 * the caller frees with cli_report_flame_free().
 */
int cli_report_flame_read(struct cli_ctx *ctx, char *session, struct cli_report_flame *fl);

/* Frees what cli_report_flame_read() gave; fl may hold NULLs. */
void cli_report_flame_free(struct cli_report_flame *fl);

#endif
