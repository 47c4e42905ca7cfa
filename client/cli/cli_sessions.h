/*
 * cli_sessions — `tracectl sessions`: the list of sessions, newest first,
 * as a table or as JSON. Runs on the CLI's only thread; see cli.h for the
 * command conventions (returns an exit code, errors already printed).
 */
#ifndef TRACECTL_CLI_SESSIONS_H
#define TRACECTL_CLI_SESSIONS_H

#include "cli.h"

extern const char cli_sessions_usage[];

int cli_sessions_run(struct cli_ctx *ctx, int argc, char **argv);

#endif
