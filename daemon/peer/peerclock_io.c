/*
 * peerclock_io.c — blocking clock probes over a byte stream (peerclock_io.h).
 */
#include "peerclock_io.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "peerclock_wire.h"

int64_t peerclock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int fd_wait(const struct peerclock_fd *f, short events)
{
    struct pollfd p = {.fd = f->fd, .events = events};
    for (;;) {
        int rc = poll(&p, 1, f->timeout_ms);
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static ssize_t fd_read(void *ctx, void *buf, size_t n)
{
    const struct peerclock_fd *f = ctx;
    for (;;) {
        int rc = fd_wait(f, POLLIN);
        if (rc < 0)
            return rc;
        ssize_t got = read(f->fd, buf, n);
        if (got >= 0)
            return got;
        if (errno != EINTR && errno != EAGAIN)
            return -errno;
    }
}

static ssize_t fd_write(void *ctx, const void *buf, size_t n)
{
    const struct peerclock_fd *f = ctx;
    for (;;) {
        int rc = fd_wait(f, POLLOUT);
        if (rc < 0)
            return rc;
        /* a peer gone is an error to return, never a SIGPIPE */
        ssize_t put = send(f->fd, buf, n, MSG_NOSIGNAL);
        if (put < 0 && errno == ENOTSOCK)
            put = write(f->fd, buf, n);
        if (put >= 0)
            return put;
        if (errno != EINTR && errno != EAGAIN)
            return -errno;
    }
}

void peerclock_io_fd(struct peerclock_io *io, struct peerclock_fd *f)
{
    io->read = fd_read;
    io->write = fd_write;
    io->ctx = f;
}

static int write_all(const struct peerclock_io *io, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t put = io->write(io->ctx, p, n);
        if (put < 0)
            return (int)put;
        if (put == 0)
            return -EIO;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

static int send_msg(const struct peerclock_io *io, const struct peerclock_msg *m)
{
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    int len = peerclock_wire_encode(m, buf, sizeof(buf));
    return len < 0 ? len : write_all(io, buf, (size_t)len);
}

/*
 * Reads until one whole message is in buf[0..*have) (*have carries bytes
 * left over from before). Returns its length, *at the time the last read
 * returned (left unchanged when the message was already in buf, which that
 * read brought); -ECONNRESET at EOF (*have tells whether inside a
 * message), -EPROTO, or the stream's error.
 */
static int read_msg(const struct peerclock_io *io, uint8_t *buf, size_t *have,
                    struct peerclock_msg *m, int64_t *at)
{
    for (;;) {
        int len = peerclock_wire_decode(buf, *have, m);
        if (len != 0)
            return len;
        ssize_t got = io->read(io->ctx, buf + *have, PEERCLOCK_WIRE_MAX - *have);
        *at = peerclock_now();
        if (got < 0)
            return (int)got;
        if (got == 0)
            return -ECONNRESET;
        *have += (size_t)got;
    }
}

static void consume(uint8_t *buf, size_t *have, size_t len)
{
    memmove(buf, buf + len, *have - len);
    *have -= len;
}

int peerclock_io_burst(const struct peerclock_io *io, uint32_t *seq, size_t n,
                       struct peerclock_sample *out)
{
    if (n == 0 || n > PEERCLOCK_PROBES_MAX)
        return -EINVAL;
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    size_t have = 0;
    for (size_t i = 0; i < n; i++) {
        struct peerclock_msg q = {.type = PEERCLOCK_PROBE, .seq = (*seq)++};
        q.t1 = peerclock_now();
        int rc = send_msg(io, &q);
        if (rc < 0)
            return rc;
        struct peerclock_msg r;
        int64_t t4 = 0;
        rc = read_msg(io, buf, &have, &r, &t4);
        if (rc < 0)
            return rc;
        /* one reply per probe: anything else, or more, is not this protocol */
        if (r.type != PEERCLOCK_REPLY || r.seq != q.seq || r.t1 != q.t1 || (size_t)rc != have)
            return -EPROTO;
        have = 0;
        out[i] = (struct peerclock_sample){.t1 = q.t1, .t2 = r.t2, .t3 = r.t3, .t4 = t4};
    }
    return 0;
}

int peerclock_io_serve(const struct peerclock_io *io)
{
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    size_t have = 0;
    int64_t t2 = 0;
    for (;;) {
        struct peerclock_msg q;
        int rc = read_msg(io, buf, &have, &q, &t2);
        if (rc == -ECONNRESET)
            return have == 0 ? 0 : -EPROTO;
        if (rc < 0)
            return rc;
        if (q.type != PEERCLOCK_PROBE)
            return -EPROTO;
        consume(buf, &have, (size_t)rc);
        struct peerclock_msg r = {.type = PEERCLOCK_REPLY, .seq = q.seq, .t1 = q.t1, .t2 = t2};
        r.t3 = peerclock_now();
        rc = send_msg(io, &r);
        if (rc < 0)
            return rc;
    }
}
