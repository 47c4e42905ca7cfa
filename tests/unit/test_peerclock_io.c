/*
 * test_peerclock_io.c — blocking clock probes (daemon/peer/peerclock_io.h) over a
 * socketpair, the responder on a thread: both ends read the same clock here,
 * so every sample must satisfy t1 ≤ t2 ≤ t3 ≤ t4 and the burst's estimate be
 * within its bound of 0; a peer that answers wrong, or not at all, or sends
 * something other than a probe, is an error, never a sample.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peerclock.h"
#include "peerclock_io.h"
#include "peerclock_wire.h"

TestSuite(peerclock_io);

struct server {
    struct peerclock_fd f;
    pthread_t th;
    int rc;
};

static void *serve_main(void *arg)
{
    struct server *s = arg;
    struct peerclock_io io;
    peerclock_io_fd(&io, &s->f);
    s->rc = peerclock_io_serve(&io);
    return NULL;
}

static void pair(int fds[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
}

Test(peerclock_io, a_burst_against_the_same_clock_brackets_zero)
{
    int fds[2];
    pair(fds);
    struct server s = {.f = {fds[1], 5000}};
    cr_assert_eq(pthread_create(&s.th, NULL, serve_main, &s), 0);
    struct peerclock_fd f = {fds[0], 5000};
    struct peerclock_io io;
    peerclock_io_fd(&io, &f);
    struct peerclock *pc = calloc(1, sizeof(*pc));
    peerclock_init(pc);
    uint32_t seq = 10;
    for (int b = 0; b < 3; b++) {
        struct peerclock_sample smp[16];
        cr_assert_eq(peerclock_io_burst(&io, &seq, 16, smp), 0);
        for (int i = 0; i < 16; i++) {
            cr_assert_leq(smp[i].t1, smp[i].t2);
            cr_assert_leq(smp[i].t2, smp[i].t3);
            cr_assert_leq(smp[i].t3, smp[i].t4);
        }
        struct peerclock_burst est;
        cr_assert_eq(peerclock_add_burst(pc, smp, 16, &est), 0);
        cr_assert_leq(llabs(est.offset), est.bound, "offset %lld bound %lld", (long long)est.offset,
                      (long long)est.bound);
    }
    cr_assert_eq(seq, 10 + 3 * 16);
    cr_assert_eq(pc->model_breaks, 0);
    close(fds[0]);
    pthread_join(s.th, NULL);
    cr_assert_eq(s.rc, 0, "EOF between probes is the end: %d", s.rc);
    close(fds[1]);
    free(pc);
}

/* A responder that reads one probe and answers with what `answer` makes of it. */
struct liar {
    int fd;
    void (*answer)(struct peerclock_msg *r);
    pthread_t th;
};

static void *liar_main(void *arg)
{
    struct liar *l = arg;
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    ssize_t n = read(l->fd, buf, sizeof(buf));
    struct peerclock_msg q;
    if (n > 0 && peerclock_wire_decode(buf, (size_t)n, &q) > 0 && l->answer) {
        struct peerclock_msg r = {
            .type = PEERCLOCK_REPLY, .seq = q.seq, .t1 = q.t1, .t2 = 5, .t3 = 6};
        l->answer(&r);
        int len = peerclock_wire_encode(&r, buf, sizeof(buf));
        if (len > 0 && write(l->fd, buf, (size_t)len) != len)
            return NULL;
        if (r.type == PEERCLOCK_PROBE) /* twice: more than one reply */
            return NULL;
    }
    return NULL;
}

static void wrong_seq(struct peerclock_msg *r)
{
    r->seq++;
}
static void wrong_t1(struct peerclock_msg *r)
{
    r->t1++;
}
static void a_probe(struct peerclock_msg *r)
{
    r->type = PEERCLOCK_PROBE;
}

static int burst_against(void (*answer)(struct peerclock_msg *), int timeout_ms)
{
    int fds[2];
    pair(fds);
    struct liar l = {.fd = fds[1], .answer = answer};
    cr_assert_eq(pthread_create(&l.th, NULL, liar_main, &l), 0);
    struct peerclock_fd f = {fds[0], timeout_ms};
    struct peerclock_io io;
    peerclock_io_fd(&io, &f);
    uint32_t seq = 0;
    struct peerclock_sample smp[2];
    int rc = peerclock_io_burst(&io, &seq, 2, smp);
    close(fds[0]);
    pthread_join(l.th, NULL);
    close(fds[1]);
    return rc;
}

Test(peerclock_io, a_wrong_answer_is_a_protocol_error)
{
    cr_assert_eq(burst_against(wrong_seq, 5000), -EPROTO);
    cr_assert_eq(burst_against(wrong_t1, 5000), -EPROTO);
    cr_assert_eq(burst_against(a_probe, 5000), -EPROTO);
}

Test(peerclock_io, no_answer_times_out)
{
    int fds[2];
    pair(fds);
    struct peerclock_fd f = {fds[0], 50};
    struct peerclock_io io;
    peerclock_io_fd(&io, &f);
    uint32_t seq = 0;
    struct peerclock_sample smp[1];
    int64_t t0 = peerclock_now();
    cr_assert_eq(peerclock_io_burst(&io, &seq, 1, smp), -ETIMEDOUT);
    cr_assert_geq(peerclock_now() - t0, 50 * 1000000LL);
    cr_assert_eq(peerclock_io_burst(&io, &seq, 0, smp), -EINVAL);
    cr_assert_eq(peerclock_io_burst(&io, &seq, PEERCLOCK_PROBES_MAX + 1, smp), -EINVAL);
    close(fds[1]); /* the peer left: the write fails (EPIPE) or the read sees EOF */
    int rc = peerclock_io_burst(&io, &seq, 1, smp);
    cr_assert(rc == -EPIPE || rc == -ECONNRESET, "%d", rc);
    close(fds[0]);
}

Test(peerclock_io, the_responder_refuses_anything_but_probes)
{
    static const uint8_t junk[][8] = {{0xc0}, {0x93, 0xa5, 'b', 'a', 't', 'c', 'h'}};
    static const size_t junk_len[] = {1, 7};
    for (size_t i = 0; i < 2; i++) {
        int fds[2];
        pair(fds);
        struct server s = {.f = {fds[1], 5000}};
        cr_assert_eq(pthread_create(&s.th, NULL, serve_main, &s), 0);
        cr_assert_eq(write(fds[0], junk[i], junk_len[i]), (ssize_t)junk_len[i]);
        pthread_join(s.th, NULL);
        cr_assert_eq(s.rc, -EPROTO, "junk %zu: %d", i, s.rc);
        close(fds[0]);
        close(fds[1]);
    }
    /* a reply sent to the responder, and EOF inside a probe */
    int fds[2];
    pair(fds);
    struct server s = {.f = {fds[1], 5000}};
    cr_assert_eq(pthread_create(&s.th, NULL, serve_main, &s), 0);
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    struct peerclock_msg r = {.type = PEERCLOCK_REPLY, .seq = 1, .t1 = 1, .t2 = 1, .t3 = 1};
    int len = peerclock_wire_encode(&r, buf, sizeof(buf));
    cr_assert_eq(write(fds[0], buf, (size_t)len), len);
    pthread_join(s.th, NULL);
    cr_assert_eq(s.rc, -EPROTO);
    close(fds[0]);
    close(fds[1]);

    pair(fds);
    s.f.fd = fds[1];
    cr_assert_eq(pthread_create(&s.th, NULL, serve_main, &s), 0);
    struct peerclock_msg q = {.type = PEERCLOCK_PROBE, .seq = 1, .t1 = 1};
    len = peerclock_wire_encode(&q, buf, sizeof(buf));
    cr_assert_eq(write(fds[0], buf, (size_t)len - 1), len - 1);
    shutdown(fds[0], SHUT_WR);
    pthread_join(s.th, NULL);
    cr_assert_eq(s.rc, -EPROTO, "EOF inside a probe");
    close(fds[0]);
    close(fds[1]);
}
