/*
 * peerclock_io — clock probes over a connected byte stream, blocking: the
 * home's requester sends a burst of probes one at a time, each after the
 * previous reply, and the member's responder answers each at once with its
 * receive and send times (the messages: peerclock_wire.h). Whoever calls
 * these owns a thread that may block on the stream (the peer link's probe
 * thread, or tests/tools/clockprobe); nothing here touches libuv, and a
 * member that answers from its loop instead decodes with peerclock_wire.h
 * directly.
 *
 * The stream is two callbacks, so that the same code runs over a plain TCP
 * socket (peerclock_io_fd) and over the peer link's TLS session. Probes need
 * a connection of their own, with TCP_NODELAY: a probe queued behind bulk
 * data measures the queue, not the clocks (the bound stays true, but wide).
 *
 * Times are CLOCK_MONOTONIC, read as close to the I/O as the callbacks allow:
 * t1 just before the write, t4 just after the read that completed the reply,
 * t2 just after the read that completed the probe, t3 just before the reply's
 * write. Any delay between the wire and these reads lands inside the round
 * trip, so it widens the bound and never breaks it.
 */
#ifndef TRACECTLD_PEERCLOCK_IO_H
#define TRACECTLD_PEERCLOCK_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "peerclock.h"

#define PEERCLOCK_PROBES_MAX 256 /* probes in one burst */
/*
 * What the figures of docs/BENCHMARKS.md were measured with, and what a home
 * should use: a burst of 32 probes (a few ms of a quiet link, ~40 ms under
 * 1 ms of jitter) every second. Past the last burst the bound grows by about
 * twice the bursts' bounds plus 10 µs per second (peerclock.h).
 */
#define PEERCLOCK_PROBES      32
#define PEERCLOCK_INTERVAL_MS 1000

struct peerclock_io {
    /* as read(2) and write(2), but a negative errno on failure; read returns 0 at EOF */
    ssize_t (*read)(void *ctx, void *buf, size_t n);
    ssize_t (*write)(void *ctx, const void *buf, size_t n);
    void *ctx;
};

/* A connected socket: each read or write waits at most timeout_ms (-1: for ever). */
struct peerclock_fd {
    int fd;
    int timeout_ms;
};

/* Sets io to read and write f->fd (f must outlive io). */
void peerclock_io_fd(struct peerclock_io *io, struct peerclock_fd *f);

/* CLOCK_MONOTONIC in ns. */
int64_t peerclock_now(void);

/*
 * The home's side: n probes (1..PEERCLOCK_PROBES_MAX), numbered from *seq
 * on (advanced past them), each sent once the previous reply came back.
 * Returns 0 with out[0..n) filled, ready for peerclock_add_burst(); -EINVAL
 * for a bad n; -EPROTO if the member sent anything but the expected reply;
 * -ECONNRESET at EOF; or the stream's error (-ETIMEDOUT, -EPIPE from
 * peerclock_io_fd, which never raises SIGPIPE). On error the stream is in an unknown state: close
 * it.
 */
int peerclock_io_burst(const struct peerclock_io *io, uint32_t *seq, size_t n,
                       struct peerclock_sample *out);

/*
 * The member's side: answers every probe until the home closes the stream.
 * Returns 0 at EOF between messages; -EPROTO for anything but a probe (or
 * EOF inside one); or the stream's error.
 */
int peerclock_io_serve(const struct peerclock_io *io);

#endif
