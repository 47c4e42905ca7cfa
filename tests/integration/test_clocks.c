/*
 * test_clocks.c — a real tracectld whose wall clock is stepped (debug builds:
 * $TRACECTLD_TEST_CLOCK): a clock stepped back never gives a negative
 * duration, and retention does not act on a clock 400 days ahead.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(clocks, .fini = stop_and_clean, .timeout = 120);

static char clock_file[64];

/* Steps the daemon's wall clock (debug builds: $TRACECTLD_TEST_CLOCK) to offset seconds. */
static void set_clock(long long offset)
{
    FILE *f = fopen(clock_file, "w");

    cr_assert_not_null(f);
    fprintf(f, "%lld\n", offset);
    cr_assert_eq(fclose(f), 0);
}

static void clock_init(void)
{
    int fd;

    snprintf(clock_file, sizeof(clock_file), "/tmp/tcclock.XXXXXX");
    fd = mkstemp(clock_file);
    cr_assert_geq(fd, 0);
    close(fd);
    set_clock(0);
    cr_assert_eq(setenv("TRACECTLD_TEST_CLOCK", clock_file, 1), 0);
}

Test(clocks, a_wall_clock_stepped_back_never_gives_a_negative_duration)
{
    struct proto_reader r;
    long long id;
    int fd;

    clock_init();
    harness_daemon_start(&d, NULL);
    int p = raw_producer(d.sock, "stepped", 0, 1, "gpu:0", &id);
    set_clock(-86400); /* one day back while the session is live */
    raw_bye(p, 0);
    raw_wait_state(d.sock, id, "ended", 10);
    const msgpack_object *row = raw_session_row(d.sock, id, &r, &fd);
    cr_assert_not_null(row);
    long long started = (long long)obj_u64(obj_get(row, "started_ns"));
    long long ended = (long long)obj_u64(obj_get(row, "ended_ns"));
    cr_assert_geq(ended, started, "duration %lld ns", ended - started);
    cr_assert_lt(ended - started, 60000000000LL, "the step was counted: %lld ns", ended - started);
    proto_reader_deinit(&r);
    close(fd);
    unlink(clock_file);
}

Test(clocks, retention_does_not_act_on_a_clock_400_days_ahead)
{
    struct proto_reader r;
    int fd;

    clock_init();
    harness_daemon_start(&d, "--retain-days", "1", NULL);
    long long old = raw_one_session(d.sock, "old");
    set_clock(3 * 86400); /* three days later: a newer session */
    long long recent = raw_one_session(d.sock, "recent");
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    /* restarted with a clock 400 days ahead */
    set_clock(400LL * 86400);
    harness_daemon_restart(&d, "--retain-days", "1", NULL);
    /* the first retention pass (1 s after start) deletes `old`, three days
     * older than the newest session, in the same pass that decides `recent` */
    for (int i = 0;; i++) {
        const msgpack_object *row = raw_session_row(d.sock, old, &r, &fd);
        proto_reader_deinit(&r);
        close(fd);
        if (row == NULL)
            break;
        cr_assert_lt(i, 200, "session %lld (3 days older than the newest) was kept", old);
        usleep(50000);
    }
    cr_assert_not_null(raw_session_row(d.sock, recent, &r, &fd),
                       "the newest session was deleted on a clock 400 days ahead");
    proto_reader_deinit(&r);
    close(fd);
    unlink(clock_file);
}
