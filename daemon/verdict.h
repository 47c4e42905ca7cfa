/*
 * verdict — the analysis' one-paragraph verdict, in English, from figures the
 * report has already computed (ranks_query.c). Pure: no SQLite, no
 * allocation (the caller gives the buffer and scratch space); any thread.
 *
 * The paragraph leads with caused time: the rank whose late arrivals held
 * the others up, how long, in which steps, and what the others waited. A
 * rank is named only when it stands out (VERDICT_RATIO times the next rank's
 * caused time and at least VERDICT_SHARE of the run); otherwise the verdict
 * says that no rank stands out, so that noise is named as noise. Then the
 * compute side (recorded compute plus untracked time: a rank busy outside
 * every recorded entry is late all the same), communication, untracked time,
 * and what the figures miss (missing ranks, dropped entries, inexact
 * aggregates). A category nothing was recorded in is never called balanced.
 */
#ifndef TRACECTLD_VERDICT_H
#define TRACECTLD_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERDICT_RATIO     2.0  /* named: caused >= this x the next rank's caused */
#define VERDICT_SHARE     0.01 /* ... and >= this share of the run (mean of the ranks' step time) */
#define VERDICT_BALANCED  0.20 /* (max - mean) / mean below this: "balanced" */
#define VERDICT_UNTRACKED 0.05 /* untracked time worth a sentence: this share of a rank's steps */

struct verdict_rank {
    int64_t rank; /* -1: processes without a rank */
    uint64_t step_ns, compute, comm, untracked, caused, waited, dropped;
    uint64_t late_steps, late_first, late_last; /* steps it was the late rank of */
};

struct verdict_in {
    const struct verdict_rank *ranks; /* by rank ascending */
    size_t n_ranks;
    uint64_t n_steps, instances, missing, world;
    bool untracked_known; /* the file has untracked time (written since it was kept) */
    bool inexact;         /* the aggregates are inexact */
    bool absent;          /* the file has no aggregates */
    uint64_t *scratch;    /* n_ranks values of the caller's, for the imbalances */
};

/* The culprit's index in in->ranks by the rule above, or SIZE_MAX when no rank stands out. */
size_t verdict_culprit(const struct verdict_in *in);
/* Writes the paragraph to buf (size n, n > 0; cut short, never unterminated). */
void verdict_text(const struct verdict_in *in, char *buf, size_t n);

#endif
