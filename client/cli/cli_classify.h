/*
 * cli_classify — `tracectl classify <id|name> --comm RE [--compute RE]
 * [--memory RE]`: re-classifies the ops of an ended session (the daemon
 * rebuilds its rank aggregates), and the same rules for `tracectl import`.
 * Runs on the CLI's only thread; see cli.h for the command conventions.
 */
#ifndef TRACECTL_CLI_CLASSIFY_H
#define TRACECTL_CLI_CLASSIFY_H

#include <stdbool.h>

#include <regex.h>

#include "cli.h"

extern const char cli_classify_usage[];

int cli_classify_run(struct cli_ctx *ctx, int argc, char **argv);

/* Rules given on the command line: comm, memory, compute; the first that matches wins. */
struct cli_classes {
    regex_t re[3];
    bool set[3];
};

/* Compiles pattern for "comm", "compute" or "memory" (POSIX extended, no case). 0, or -1
 * after printing why. */
int cli_classes_add(struct cli_classes *c, const char *which, const char *pattern);
/* The category the rules give name, or NULL. */
const char *cli_classes_match(const struct cli_classes *c, const char *name);
void cli_classes_free(struct cli_classes *c);

#endif
