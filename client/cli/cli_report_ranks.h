/*
 * cli_report_ranks — the analysis part of `tracectl report`: the options
 * --rank, --step, --device, --category (the request's filters) and the
 * Verdict, Ranks, Steps, Collectives, Categories and Throughput sections
 * (PROTOCOL.md Part 3, "report analysis").
 */
#ifndef TRACECTL_CLI_REPORT_RANKS_H
#define TRACECTL_CLI_REPORT_RANKS_H

#include <stdint.h>
#include <stdio.h>

#include <msgpack.h>

#include "proto.h"

/* Parses the value of --rank R[,R...], --step A[..B], --device D or --category C into req.
 * Returns 0, or -1 after printing why. */
int cli_report_ranks_opt(const char *opt, const char *arg, struct proto_request *req);

/* The Verdict paragraph (printed first). */
int cli_report_ranks_verdict(FILE *f, const msgpack_object *report);

/* The Ranks, Steps (the top widest), Collectives, Categories and Throughput sections. */
int cli_report_ranks_print(FILE *f, const msgpack_object *report, uint32_t top);

#endif
