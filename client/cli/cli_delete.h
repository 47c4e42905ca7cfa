/*
 * cli_delete — `tracectl rm` (alias `delete`): deletes an ended session.
 * Runs on the CLI's only thread; see cli.h for the command conventions.
 */
#ifndef TRACECTL_CLI_DELETE_H
#define TRACECTL_CLI_DELETE_H

#include "cli.h"

extern const char cli_delete_usage[];

int cli_delete_run(struct cli_ctx *ctx, int argc, char **argv);

#endif
