/*
 * peermember — the member side of sessions that span hosts (--home): one
 * link to the home (peerlink.h), and, once a second, a snapshot of every
 * session it forwards (peersnap.h), each read from the session's file on
 * libuv's thread pool and sent on the loop thread.
 *
 * Forwarded: every session live on this daemon while it runs with --home.
 * A live session's snapshot goes out every second while its counters move
 * (so after an outage the home gets the latest, never a backlog), every
 * PEERMEMBER_RESEND_MS while they do not, and at once on a new link; an
 * ended one's until the home acks it (snapshot_ack), then it is forgotten. The member ingests as
 * ever whatever the link does: entries stay on this host.
 *
 * RANK ROWS. A snapshot's `ranks` rows fold the session's steps x ranks table, which grows
 * with the steps while the rest of a snapshot does not; so a live session's are read again
 * only once PEERMEMBER_RANKS_SHARE times their last read's time has passed (at most a tenth
 * of a worker's time), the snapshots in between carrying the rows read last. An ended
 * session's snapshot always reads them: the last one the home keeps has its final rows.
 *
 * LINK. peer_hello with --host first; a `ping` each second; no byte from
 * the home for PEERMEMBER_DEAD_MS closes the link, and it is made again
 * after a backoff that doubles from PEERMEMBER_RETRY_MIN_MS to
 * PEERMEMBER_RETRY_MAX_MS (reset by a welcome). Refusals (wrong key, a
 * taken host name) are logged with the home's reason and retried the same
 * way.
 *
 * CLOCK LINK. Once welcomed, a second link to the home carries only clock
 * probes (clock_hello first; proto/PROTOCOL.md "Clock probes"), answered
 * from the loop as they come: t2 when the probe's bytes were read, t3 just
 * before the reply is written. When it closes it is made again at the next
 * tick; when the link closes, it closes too.
 *
 * peermember_stop() closes the link and frees the member once its handles
 * are closed and its snapshot reads have come back.
 */
#ifndef TRACECTLD_PEERMEMBER_H
#define TRACECTLD_PEERMEMBER_H

#include <stdbool.h>
#include <stdint.h>

#include "peerlink.h"

#define PEERMEMBER_MAX_HOMES    16 /* homes producers may name (hello "home") at once */
#define PEERMEMBER_DEAD_MS      3000
#define PEERMEMBER_RESEND_MS    10000 /* an unchanged live session: a snapshot this often */
#define PEERMEMBER_RANKS_SHARE  10    /* rank rows re-read after 10 x the last read's time */
#define PEERMEMBER_RETRY_MIN_MS 250
#define PEERMEMBER_RETRY_MAX_MS 5000
/* The longest message the clock link takes from the home: a probe, or an `error` saying why. */
#define PEERMEMBER_CLOCK_MAX 1024

struct daemon;
struct peermember;
struct session;

/*
 * Starts linking to home ("ADDR:PORT") as host with key psk; all: forward
 * every session (--home) not routed elsewhere, else only those
 * peermember_route() gives it. Returns the member or NULL with a one-line
 * message in err (a bad address; not a home that cannot be reached: that
 * is retried).
 */
struct peermember *peermember_start(struct daemon *d, const char *home, const char *host,
                                    const uint8_t psk[PEERLINK_PSK_LEN], bool all, char *err,
                                    size_t errlen);
/*
 * A producer's hello named home ("ADDR:PORT", hello key `home`, from
 * TRACECTL_HOME) for session s: forwards s to that home (a link made on
 * first use, at most PEERMEMBER_MAX_HOMES; the daemon needs --peer-key)
 * instead of --home's. The first hello of a session that names a home
 * decides; NULL home, or a session already forwarded, changes nothing.
 * Problems are logged (the producer is never refused for them).
 */
void peermember_route(struct daemon *d, struct session *s, const char *home);
/* peermember_tick() of --home's member and of every routed one. */
void peermember_tick_all(struct daemon *d);
/* peermember_stop() of them all; d's pointers are cleared. */
void peermember_stop_all(struct daemon *d);
/* Once a second: pings, notices a silent home, queues snapshots. NULL is a no-op. */
void peermember_tick(struct peermember *m);
/* NULL is a no-op. */
void peermember_stop(struct peermember *m);

#endif
