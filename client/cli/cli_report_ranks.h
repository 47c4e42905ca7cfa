/*
 * cli_report_ranks — the analysis part of `tracectl report`: the options
 * --rank, --step, --device, --category (the request's filters) and the
 * Verdict, Ranks, Steps, Collectives, Categories and Throughput sections
 * (PROTOCOL.md Part 3, "report analysis"). The Ranks and Steps tables have a CPU WAIT column
 * when a rank has a CPU wait.
 */
#ifndef TRACECTL_CLI_REPORT_RANKS_H
#define TRACECTL_CLI_REPORT_RANKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <msgpack.h>

#include "proto.h"

/* Parses the value of --rank R[,R...], --step A[..B], --device D or --category C into req.
 * Returns 0, or -1 after printing why. */
int cli_report_ranks_opt(const char *opt, const char *arg, struct proto_request *req);

/* The Verdict paragraph (printed first). */
int cli_report_ranks_verdict(FILE *f, const msgpack_object *report);

/*
 * True when a row of ranks (a report's `ranks`, may be NULL) has a CPU wait (cpu_wait_ns > 0):
 * the tables show a CPU WAIT column only then, so that a session whose producers report none
 * reads as before.
 */
bool cli_report_ranks_any_cpu_wait(const msgpack_object *ranks);

/* The Ranks, Steps (the top widest), Collectives, Categories and Throughput sections. */
int cli_report_ranks_print(FILE *f, const msgpack_object *report, uint32_t top);

#endif
