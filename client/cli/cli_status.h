/*
 * cli_status — `tracectl status`: the daemon's figures (version, uptime,
 * connections, sessions, ingest rate, queue depth, disk use, last error),
 * every key of the reply as an aligned "key: value" line, or as JSON.
 * Runs on the CLI's only thread; see cli.h for the command conventions.
 */
#ifndef TRACECTL_CLI_STATUS_H
#define TRACECTL_CLI_STATUS_H

#include "cli.h"

extern const char cli_status_usage[];

int cli_status_run(struct cli_ctx *ctx, int argc, char **argv);

#endif
