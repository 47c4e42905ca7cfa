/*
 * test_unclosed.c — a rank that ended without closing its client is named.
 *
 * A process whose connection ends without `bye` while the daemon runs died or
 * exited without closing (MPI_Abort, a crash, no MPI_Finalize): the report's
 * completeness lists its rank in `ended_without_bye` and the text report says
 * so. A process cut off by the daemon's own stop is not listed (the session is
 * interrupted instead), and neither is one that said bye.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"

static struct tdaemon d;

static void fini(void)
{
    harness_daemon_stop(&d, SIGKILL);
    harness_cleanup(&d);
}

TestSuite(unclosed, .fini = fini, .timeout = 120);

/* Three ranks of session `name`, 50 entries each, flushed; returns the session id. */
static long long three_ranks(const char *name, int fd[3])
{
    long long id = -1;

    for (int k = 0; k < 3; k++) {
        char dev[16];

        snprintf(dev, sizeof(dev), "gpu:%d", k);
        fd[k] = raw_producer(d.sock, name, k, 3, dev, k == 0 ? &id : NULL);
        raw_send_ops(fd[k], 1, "allreduce");
        raw_send_batch(fd[k], 1, 50, 1000000 * (uint64_t)k, 100);
        cr_assert_eq(raw_flush(fd[k], 1), 50);
    }
    return id;
}

/* completeness.ended_without_bye of session id, as "r,r,..." ("" when empty). */
static void unclosed_of(long long id, char *out, size_t size)
{
    struct proto_request req;
    struct proto_reader r;
    const msgpack_object *o, *u;
    size_t len = 0;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "the report failed");
    u = obj_get(obj_get(&o->via.array.ptr[1], "completeness"), "ended_without_bye");
    cr_assert(u != NULL && u->type == MSGPACK_OBJECT_ARRAY, "no completeness.ended_without_bye");
    out[0] = '\0';
    for (uint32_t i = 0; i < u->via.array.size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%llu", i ? "," : "",
                                obj_u64(&u->via.array.ptr[i]));
    proto_reader_deinit(&r);
    close(fd);
}

Test(unclosed, a_rank_that_exits_without_bye_is_named)
{
    char got[64], ids[32], *out = NULL;
    long long id;
    int fd[3];

    harness_daemon_start(&d, NULL);
    id = three_ranks("abort", fd);
    raw_bye(fd[0], 0);
    close(fd[0]);
    close(fd[1]); /* rank 1 dies: no bye */
    raw_bye(fd[2], 0);
    close(fd[2]);
    raw_wait_state(d.sock, id, "ended", 10);
    unclosed_of(id, got, sizeof(got));
    cr_assert_str_eq(got, "1");
    snprintf(ids, sizeof(ids), "%lld", id);
    {
        char *argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", ids, NULL};
        cr_assert_eq(harness_run(&out, argv), 0);
    }
    cr_assert(strstr(out, "ended without closing: rank 1 (") != NULL, "text report:\n%s", out);
    free(out);
}

Test(unclosed, every_rank_with_bye_or_cut_by_the_daemon_is_not_named)
{
    char got[64];
    long long clean, cut;
    int fd[3];

    harness_daemon_start(&d, NULL);
    clean = three_ranks("clean", fd);
    for (int k = 0; k < 3; k++) {
        raw_bye(fd[k], 0);
        close(fd[k]);
    }
    raw_wait_state(d.sock, clean, "ended", 10);
    unclosed_of(clean, got, sizeof(got));
    cr_assert_str_eq(got, "");
    /* the daemon stops while all three are connected: cut off, not their doing */
    cut = three_ranks("cut", fd);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    for (int k = 0; k < 3; k++)
        close(fd[k]);
    harness_daemon_restart(&d, NULL);
    unclosed_of(cut, got, sizeof(got));
    cr_assert_str_eq(got, "");
}
