/*
 * peermember — the member side of sessions that span hosts (--home): one
 * link to the home (peerlink.h), and, once a second, a snapshot of every
 * session it forwards (peersnap.h), each read from the session's file on
 * libuv's thread pool and sent on the loop thread.
 *
 * Forwarded: every session live on this daemon while it runs with --home.
 * A live session's snapshot goes out every second (so after an outage the
 * home gets the latest, never a backlog); an ended one's until the home
 * acks it (snapshot_ack), then it is forgotten. The member ingests as ever
 * whatever the link does: entries stay on this host.
 *
 * LINK. peer_hello with --host first; a `ping` each second; no byte from
 * the home for PEERMEMBER_DEAD_MS closes the link, and it is made again
 * after a backoff that doubles from PEERMEMBER_RETRY_MIN_MS to
 * PEERMEMBER_RETRY_MAX_MS (reset by a welcome). Refusals (wrong key, a
 * taken host name) are logged with the home's reason and retried the same
 * way.
 *
 * peermember_stop() closes the link and frees the member once its handles
 * are closed and its snapshot reads have come back.
 */
#ifndef TRACECTLD_PEERMEMBER_H
#define TRACECTLD_PEERMEMBER_H

#include <stdint.h>

#include "peerlink.h"

#define PEERMEMBER_DEAD_MS      3000
#define PEERMEMBER_RETRY_MIN_MS 250
#define PEERMEMBER_RETRY_MAX_MS 5000

struct daemon;
struct peermember;

/*
 * Starts linking to home ("ADDR:PORT") as host with key psk. Returns the
 * member or NULL with a one-line message in err (a bad address; not a home
 * that cannot be reached: that is retried).
 */
struct peermember *peermember_start(struct daemon *d, const char *home, const char *host,
                                    const uint8_t psk[PEERLINK_PSK_LEN], char *err, size_t errlen);
/* Once a second: pings, notices a silent home, queues snapshots. NULL is a no-op. */
void peermember_tick(struct peermember *m);
/* NULL is a no-op. */
void peermember_stop(struct peermember *m);

#endif
