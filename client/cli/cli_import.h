/*
 * cli_import — `tracectl import`: PyTorch profiler / Kineto Chrome-trace
 * JSON files (plain or gzip) into a session, through the daemon like any
 * producer (one connection, one process, per file). See cli_import.c.
 */
#ifndef TRACECTL_CLI_IMPORT_H
#define TRACECTL_CLI_IMPORT_H

#include "cli.h"

extern const char cli_import_usage[];
int cli_import_run(struct cli_ctx *ctx, int argc, char **argv);

#endif
