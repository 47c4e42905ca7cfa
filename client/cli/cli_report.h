/*
 * cli_report — `tracectl report`: the analysis report of one session
 * (PROTOCOL.md "Report map") as JSON, or for humans: the session header,
 * then one aligned table per section (ops, slowest, memory, devices,
 * imbalance, comm). Runs on the CLI's only thread; see cli.h for the
 * command conventions.
 */
#ifndef TRACECTL_CLI_REPORT_H
#define TRACECTL_CLI_REPORT_H

#include <stdio.h>

#include <msgpack.h>

#include "cli.h"

extern const char cli_report_usage[];

int cli_report_run(struct cli_ctx *ctx, int argc, char **argv);

/*
 * Prints a report map for humans on f. Sections missing from the map print
 * as "(none)"; unknown keys are ignored. Returns 0, -EINVAL (report is not
 * a map), -ENOMEM or -EIO.
 */
int cli_report_print(FILE *f, const msgpack_object *report);

/*
 * "Filter: ranks 0,2; steps 1..2; device gpu:0; category comm" and a blank
 * line on f, from the map's "filter" key (a report's, or report --by's);
 * nothing without one (a daemon before filters sends none). 0 or -EIO.
 */
int cli_report_filter(FILE *f, const msgpack_object *report);

#endif
