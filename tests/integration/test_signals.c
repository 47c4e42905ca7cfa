/*
 * test_signals.c — a real tracectld sent SIGHUP, SIGUSR1 and SIGUSR2: none
 * kills it, and SIGTERM afterwards leaves no stale socket.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(signals, .fini = stop_and_clean, .timeout = 120);

/* A `sessions` request answers ok; returns the list's length. */
static unsigned sessions_count(void)
{
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    unsigned n;

    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "sessions failed");
    n = o->via.array.ptr[1].via.array.size;
    proto_reader_deinit(&r);
    close(fd);
    return n;
}

Test(signals, sighup_sigusr1_sigusr2_neither_kill_nor_leave_a_stale_socket)
{
    int st;

    harness_daemon_start(&d, NULL);
    const int sigs[3] = {SIGHUP, SIGUSR1, SIGUSR2};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(kill(d.pid, sigs[i]), 0);
        /* a reply means the daemon ran after the signal was sent, so a fatal
         * default action would have been taken by now */
        cr_assert_eq(sessions_count(), 0);
        cr_assert_eq(waitpid(d.pid, &st, WNOHANG), 0, "signal %d killed tracectld", sigs[i]);
    }
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    d.pid = 0;
    cr_assert_eq(access(d.sock, F_OK), -1, "the socket was left behind");
}
