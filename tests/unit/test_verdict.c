/*
 * test_verdict.c — the verdict's rule and sentences (daemon/verdict.c) on
 * figures written here: who is named (VERDICT_RATIO x the next rank's caused
 * time and VERDICT_SHARE of the run), the exact lead sentence, and that a
 * category nothing was recorded in is never called balanced.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "verdict.h"

#define MS 1000000ull

static uint64_t scratch[8];

static struct verdict_in in_of(const struct verdict_rank *r, size_t n)
{
    return (struct verdict_in){.ranks = r,
                               .n_ranks = n,
                               .n_steps = 40,
                               .instances = 80,
                               .world = n,
                               .untracked_known = true,
                               .scratch = scratch};
}

/* Four ranks of 4 s each; rank 2 caused 1.80 s in steps 20–35 (16 late steps). */
static void culprit_ranks(struct verdict_rank *r)
{
    for (int i = 0; i < 4; i++)
        r[i] = (struct verdict_rank){.rank = i,
                                     .step_ns = 4000 * MS,
                                     .compute = 1000 * MS,
                                     .comm = 500 * MS,
                                     .caused = 10 * MS,
                                     .waited = (1800 + 30 * (uint64_t)i) * MS};
    r[2].caused = 1800 * MS;
    r[2].waited = 5 * MS;
    r[2].untracked = 1344 * MS;
    r[2].late_steps = 16;
    r[2].late_first = 20;
    r[2].late_last = 35;
    r[2].late_median = 112 * MS; /* the steps it held up, against the others */
    r[2].other_median = 2 * MS;
}

Test(verdict, the_culprit_leads)
{
    struct verdict_rank r[4];
    struct verdict_in in;
    char v[1024];

    culprit_ranks(r);
    in = in_of(r, 4);
    cr_expect_eq(verdict_culprit(&in), 2);
    verdict_text(&in, v, sizeof(v));
    cr_expect_str_eq(v,
                     "4 ranks: rank 2 held the others up for 1.80 s in steps 20–35; ranks 0–1, 3 "
                     "waited 1.80–1.89 s; compute (with untracked time) imbalanced (+75 %, "
                     "rank 2); communication balanced (+0 %); rank 2 spent 1.34 s (34 % of its "
                     "step time) in no recorded entry.");
}

Test(verdict, not_twice_the_next_rank_is_noise)
{
    struct verdict_rank r[4];
    struct verdict_in in;
    char v[1024];

    culprit_ranks(r);
    r[0].caused = 901 * MS; /* 1,800 < 2 x 901 */
    in = in_of(r, 4);
    cr_expect_eq(verdict_culprit(&in), SIZE_MAX);
    verdict_text(&in, v, sizeof(v));
    {
        static const char want[] =
            "4 ranks: no rank stands out (the most caused wait is rank 2's 1.80 s, 2.0 × the next "
            "rank's; a rank is named at 2 × the next rank's, 1 % of the run, and 3 × the other "
            "steps' held-up time in its late steps: 112.0 ms against 2.0 ms); ";
        cr_expect(strncmp(v, want, strlen(want)) == 0, "%s", v);
    }
    r[0].caused = 900 * MS; /* exactly 2 x: named */
    cr_expect_eq(verdict_culprit(&in), 2);
}

Test(verdict, under_one_percent_of_the_run_is_noise)
{
    struct verdict_rank r[4];
    struct verdict_in in;

    culprit_ranks(r);
    for (int i = 0; i < 4; i++)
        r[i].caused = 0;
    r[2].caused = 39 * MS; /* 1 % of 4 s is 40 ms */
    in = in_of(r, 4);
    cr_expect_eq(verdict_culprit(&in), SIZE_MAX);
    r[2].caused = 40 * MS;
    cr_expect_eq(verdict_culprit(&in), 2);
}

/* A rank a little late in most steps (a loaded machine's scheduler) is not named, however
 * much more often than the others it comes last. */
Test(verdict, late_no_more_than_the_other_steps_is_noise)
{
    struct verdict_rank r[4];
    struct verdict_in in;

    culprit_ranks(r);
    r[2].late_median = 6 * MS - 1; /* < 3 x 2 ms */
    in = in_of(r, 4);
    cr_expect_eq(verdict_culprit(&in), SIZE_MAX);
    r[2].late_median = 6 * MS;
    cr_expect_eq(verdict_culprit(&in), 2);
    r[2].late_steps = 0; /* never the late rank of a step: nothing to tell it from noise */
    cr_expect_eq(verdict_culprit(&in), SIZE_MAX);
}

Test(verdict, nothing_recorded_is_not_balanced)
{
    struct verdict_rank r[2] = {{.rank = 0, .step_ns = 100 * MS, .comm = 50 * MS},
                                {.rank = 1, .step_ns = 100 * MS, .comm = 52 * MS}};
    struct verdict_in in = in_of(r, 2);
    char v[1024];

    in.untracked_known = false;
    in.instances = 0;
    verdict_text(&in, v, sizeof(v));
    cr_expect_str_eq(v, "2 ranks: no rank stands out: no collective instance was matched; no "
                        "compute recorded; communication balanced (+2 %).");
}

Test(verdict, a_short_buffer_is_cut_and_terminated)
{
    struct verdict_rank r[4];
    struct verdict_in in;
    char v[16];

    culprit_ranks(r);
    in = in_of(r, 4);
    verdict_text(&in, v, sizeof(v));
    cr_expect_eq(strlen(v), sizeof(v) - 1);
}
