/*
 * verdict — the analysis' one-paragraph verdict, in English, from figures the
 * report has already computed (ranks_query.c). Pure: no SQLite, no
 * allocation (the caller gives the buffer and scratch space); any thread.
 *
 * The paragraph leads with caused time: the rank whose late arrivals held
 * the others up, how long, in which steps, and what the others waited. A
 * rank is named only when it stands out: its caused time is at least
 * VERDICT_RATIO times the next rank's and VERDICT_SHARE of the run, and in
 * the steps it was the late rank of it held the others up for typically at
 * least VERDICT_NOISE times as long as other ranks did in their steps
 * (medians of held-up times, a step's largest caused time). The last
 * condition tells a rank slowed by its own code from one
 * that comes last a little more often on a loaded machine, where the
 * scheduler favours some processes: a symmetric 3-rank job on 2 busy cores
 * had one rank late in 14 of 20 steps by 4.4 ms, the others in the other 6
 * by 2.5 ms (1.8 x: noise); a rank burning 60 ms in 6 of 13 steps held them
 * up 58 ms against 4 ms (named). Other ranks' steps are taken two ways: the
 * steps another rank was the late rank of (held the others up 10 % of the
 * step), and all those another rank held the others up most in; the
 * baseline is the larger median of the two that have VERDICT_BASELINE steps.
 * Exact DDP waits make most steps of a symmetric job under 10 %, with small
 * held-up times: the second way alone (as until 2026-11-28) let a profiler-mode symmetric run name
 * a rank for 386.6 ms in 9 of 21 steps; the first alone let a tiny-model run name one for 20.0 ms
 * in 9 of 21 steps (too few named steps of others). This rank's own steps under the threshold are
 * in neither. With fewer than VERDICT_BASELINE steps of other ranks there is no baseline and the
 * condition is not applied: a median needs 3 values to set one aside, and
 * the first steps of a job (connections, allocator, DDP's first bucket
 * rebuild) often make one or two steps of any rank slow; while a rank the
 * others took the lead from in two steps at most is no scheduler's slight
 * favour. tc_demo's rank 3 was once late in 18 of 20 steps by a median
 * 67.1 ms, 26 x the next rank's caused time, and left unnamed against the 2
 * other steps' 25.2 ms (2.7 x); it is named now. And the rank must have been
 * the late rank of VERDICT_STEPS of the steps, VERDICT_MIN_LATE at least: the
 * verdict names the job's culprit, not a step's (the Steps table, by caused
 * time, shows a step's). Since DDP's bucket waits are exact (2026-11-28) most
 * steps of a symmetric job hold nobody up, the baseline is often missing, and
 * a rank descheduled a few times on a loaded machine stood out by the other
 * conditions: 20 symmetric 3-rank ddp_burn.py runs on 2 busy cores (12 tiny,
 * 4 light, 4 profiler, 21 steps each) named a rank in 8, late in 1, 1, 3, 3, 4,
 * 4, 6 and 9 of 21 steps for 12 ms to 692 ms, up to 55 % of the run (no
 * share of the run tells those from a culprit); the rule names one (the
 * profiler run's 9 of 21). Culprits: the burn test's rank late in 6-8 of 13
 * steps (4 runs), the demo's in 18 of 20. Otherwise the verdict says
 * that no rank stands out, so that noise is named as noise.
 *
 * CPU wait. A rank that stands out by all of that is still not named when at least VERDICT_CPU
 * of its held-up time in its late steps was its own wait for a CPU (late_cpu against
 * late_caused): the run-queue delay its producer reported for its step thread (metadata
 * tracectl.cpu_wait), beyond the least of the other ranks' in the same steps. A rank's lateness
 * at a step's collective builds up from the previous collective, which is in the step before
 * (torch.profiler's handler runs at prof.step(), before the step marker), so each late step
 * counts its own and the previous step's delay, and at most the step's held-up time. The
 * verdict then says the rank was late and how much of it was its wait for a CPU. Measured on
 * 2 busy cores (a 3-rank symmetric ddp_burn.py, 2026-11-28): over the previous collective to
 * the late arrival, the late rank's run-queue delay beyond the first arriver's was 84-109 % of
 * the skew in 6 profiler runs (its CPU time differed by under 8 ms); by steps as computed here,
 * the two runs of 33 that the rule without this named (rank 1: 88.9 ms in 7 of 21 steps; rank
 * 0: 471.8 ms in 7) had 94 % and 96 %; 27 of the 33 runs' most-causing ranks were at >= 74 %.
 * 12 more profiler runs: 83-100 %. A rank slowed by its own code waits little more than the
 * others for a CPU, as it runs while they block in the collective: the burn tests' rank, which
 * sleeps, 1 % and 7 % (light), 27 % (profiler, late in 3 more steps than it slept in); a rank
 * spinning 60-300 ms a step instead, at load 10 on the 2 cores, 27 %, 32 % and 40 % (all
 * named). Half is the line between the two; a rank it leaves unnamed is still said late. Then the
 * compute side (recorded compute plus untracked time: a rank busy outside every recorded entry is
 * late all the same), communication, untracked time, and what the figures miss (missing ranks,
 * dropped entries, inexact aggregates). A category nothing was recorded in is never called
 * balanced.
 */
#ifndef TRACECTLD_VERDICT_H
#define TRACECTLD_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERDICT_RATIO     2.0  /* named: caused >= this x the next rank's caused */
#define VERDICT_SHARE     0.01 /* ... and >= this share of the run (mean of the ranks' step time) */
#define VERDICT_NOISE     3.0  /* ... and its steps' held-up time >= this x other ranks' steps' */
#define VERDICT_BASELINE  3    /* ... when other ranks held the others up most in this many steps */
#define VERDICT_STEPS     0.30 /* ... and it was the late rank of this share of the steps */
#define VERDICT_MIN_LATE  3    /* ... and of this many at least */
#define VERDICT_CPU       0.5 /* ... and less than this of its late steps' held-up time its CPU wait */
#define VERDICT_BALANCED  0.20 /* (max - mean) / mean below this: "balanced" */
#define VERDICT_UNTRACKED 0.05 /* untracked time worth a sentence: this share of a rank's steps */

struct verdict_rank {
    int64_t rank; /* -1: processes without a rank */
    uint64_t step_ns, compute, comm, untracked, caused, waited, dropped;
    uint64_t unclosed; /* its processes that ended without bye while the daemon ran */
    uint64_t late_steps, late_first, late_last; /* steps it was the late rank of */
    /* the median held-up time (a step's largest caused time) of the steps it was the late rank
     * of (0 when none), and of the other_steps in which another rank was the late rank
     * (0 when none); both within a half octave */
    uint64_t late_median, other_median, other_steps;
    /* the held-up time of its late steps (the caused time of each), and the part of each that
     * was its wait for a CPU: its run-queue delay in the step and the step before, less the
     * least of the other ranks' there, at most the step's held-up time; summed */
    uint64_t late_caused, late_cpu;
};

struct verdict_in {
    const struct verdict_rank *ranks; /* by rank ascending */
    size_t n_ranks;
    uint64_t n_steps, instances, missing, world;
    uint64_t capped;      /* collective instances closed unfinished at the cap of open ones */
    uint64_t open_cap;    /* that cap */
    bool untracked_known; /* the file has untracked time (written since it was kept) */
    bool inexact;         /* the aggregates are inexact */
    bool absent;          /* no aggregates yet: a live session before its first commit */
    uint64_t *scratch;    /* n_ranks values of the caller's, for the imbalances */
};

/* The culprit's index in in->ranks by the rule above, or SIZE_MAX when no rank stands out. */
size_t verdict_culprit(const struct verdict_in *in);

/* ns as the verdict writes a time: "812 ns", "3.4 µs", "61.2 ms", "1.41 s". */
void verdict_ns(char *b, size_t n, uint64_t ns);
/* Writes the paragraph to buf (size n, n > 0; cut short, never unterminated). */
void verdict_text(const struct verdict_in *in, char *buf, size_t n);

#endif
