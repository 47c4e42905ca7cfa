/*
 * test_clock.c — the decisions behind retention's clock (session.h): which
 * wall time retention counts from, and that a clock stepped while running is
 * never believed further than the monotonic clock went.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "session.h"

#define DAY 86400000000000LL
#define T0  1700000000000000000LL /* some wall time, ns */

TestSuite(clock);

Test(clock, anchor_trusts_a_clock_within_the_retention_age)
{
    /* no sessions: the clock itself */
    cr_assert_eq(session_clock_anchor(T0, 0, 30 * DAY), T0);
    /* the newest session 29 days back, retention 30 days: trusted */
    cr_assert_eq(session_clock_anchor(T0, T0 - 29 * DAY, 30 * DAY), T0);
    /* behind the newest session (stepped back): the clock, which only makes sessions younger */
    cr_assert_eq(session_clock_anchor(T0, T0 + DAY, 30 * DAY), T0);
}

Test(clock, anchor_distrusts_a_clock_past_the_newest_session_by_more_than_the_age)
{
    /* 400 days ahead with --retain-days 30: age counts from the newest session */
    cr_assert_eq(session_clock_anchor(T0 + 400 * DAY, T0, 30 * DAY), T0);
    cr_assert_eq(session_clock_anchor(T0 + 30 * DAY + 1, T0, 30 * DAY), T0);
}

Test(clock, retention_clock_follows_the_monotonic_time_never_a_step_forward)
{
    /* anchored at T0 when the monotonic clock read 1000 s */
    uint64_t m0 = 1000000000000ull;
    /* 10 s later, the wall clock agrees */
    cr_assert_eq(session_retention_clock(T0, m0, T0 + 10000000000LL, m0 + 10000000000ull),
                 T0 + 10000000000LL);
    /* 10 s later, the wall clock stepped 400 days ahead: 10 s passed */
    cr_assert_eq(session_retention_clock(T0, m0, T0 + 400 * DAY, m0 + 10000000000ull),
                 T0 + 10000000000LL);
    /* stepped back a day: the earlier of the two (sessions look younger) */
    cr_assert_eq(session_retention_clock(T0, m0, T0 - DAY, m0 + 10000000000ull), T0 - DAY);
}
