/*
 * peerhome — the home side of sessions that span hosts (--peer-listen):
 * accepts members' links on a TCP port (peerlink.h: TLS 1.3 with the
 * --peer-key PSK), and keeps, per session name and member host, the latest
 * snapshot that member sent (peersnap.h), for the home's reports to merge
 * (peermerge.h). Runs on the loop thread; a report copies what it needs
 * (peerhome_collect) before it goes to a worker.
 *
 * Parts are kept per (session name, member host, the member's session id):
 * a name used again for a later job is a part of its own, and a report
 * merges only the parts whose times overlap the session it reports
 * (peerhome_collect).
 *
 * A member says peer_hello with its host name first; the home refuses a
 * name that is its own or that a link heard from in the last
 * PEERHOME_TAKEN_MS holds (two hosts configured with one name), and lets a
 * new link replace a silent one (the same member back after an outage).
 *
 * STATES of a member's part of a session, as reports show them: `ended`
 * (its last snapshot said so), `live` (its link spoke in the last
 * PEERHOME_STALE_MS; members ping every second), `stale` (silent since,
 * for less than --linger), `lost` (silent longer). A link silent for
 * PEERHOME_DEAD_MS is closed; the member reconnects and resends.
 *
 * CLOCKS. Each member host has a clock link beside its link (its first
 * message clock_hello; peermember.h makes it): once a tick the home sends it
 * a burst of probes, one after the other's reply, on the loop, and keeps
 * the bursts in the host's estimator (peerclock.h), which outlives the links
 * (a member back after an outage continues its history). A report's host
 * rows (peerhome_collect) get the offset in force at that moment with its
 * bound, the mean drift over the last minute and the violations counted,
 * and a copy of the estimator, with which the report's worker converts the
 * member's times to the home's clock (peermerge.h). A bad reply closes the
 * clock link only; the member makes it again at its next tick.
 *
 * MEMORY. At most PEERHOME_MAX_PARTS parts and PEERHOME_MAX_BYTES bytes of
 * snapshots per host: past either, the part of that host that ended longest
 * ago is forgotten to make room; with none ended, the link is closed with a
 * reason. Snapshots
 * live in memory only (a restarted home is caught up by the members'
 * snapshots of their live sessions, not of ended ones).
 */
#ifndef TRACECTLD_PEERHOME_H
#define TRACECTLD_PEERHOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerlink.h"
#include "peermerge.h"

#define PEERHOME_STALE_MS  2000 /* silent this long: stale (so within 3 s of an outage) */
#define PEERHOME_DEAD_MS   3000 /* silent this long: the link is closed */
#define PEERHOME_TAKEN_MS  1500 /* a host name is taken by a link heard from this recently */
#define PEERHOME_MAX_PARTS 4096 /* sessions per member host */
#define PEERHOME_MAX_BYTES (256u << 20) /* bytes of snapshots per member host */
#define PEERHOME_MAX_LINKS 1024         /* links at once (authenticated or not) */
/* A member's part belongs to the home's session of its name when their wall-clock times
 * overlap give or take this (clocks a little apart, sessions that linger). */
#define PEERHOME_SLACK_NS (60 * 1000000000LL)
/* The drift a host row shows: the mean over this much of the latest bursts (peerclock_drift). */
#define PEERHOME_DRIFT_SPAN_NS (60 * 1000000000LL)

struct daemon;
struct peerhome;

/*
 * Listens on addr ("ADDR:PORT") with the key psk; host is the home's own
 * name. Returns the home or NULL with a one-line message in err.
 */
struct peerhome *peerhome_start(struct daemon *d, const char *addr, const char *host,
                                const uint8_t psk[PEERLINK_PSK_LEN], char *err, size_t errlen);
/* Once a second: closes silent links. */
void peerhome_tick(struct peerhome *h);
/* Closes everything; frees h once its handles are closed. NULL is a no-op. */
void peerhome_stop(struct peerhome *h);
/*
 * One of the home's own ranks' arrivals at a synchronizing collective of
 * session `session` (world: its hello's, -1 none), in the home's clock, for
 * the table that checks members' clocks against them (peerarr.h). Dropped
 * (counted in the table's refusals) when the table cannot take it. NULL h
 * is a no-op.
 */
struct peerarr_arrival;
void peerhome_arrival(struct peerhome *h, const char *session, const struct peerarr_arrival *a,
                      int64_t world);
/* True when a member sent a snapshot of a session of this name. */
bool peerhome_has(const struct peerhome *h, const char *session);
/*
 * How many member hosts hold a part of session `name` that belongs to the
 * job that ran from from_ns to to_ns (as peerhome_collect merges them); 0
 * when h is NULL.
 */
size_t peerhome_hosts(const struct peerhome *h, const char *name, int64_t from_ns, int64_t to_ns);
/*
 * The members' parts of session `name` that belong to the job that ran from
 * from_ns to to_ns (CLOCK_REALTIME ns, the home's own session's; to_ns 0:
 * still running; from_ns -1: the newest job of that name members sent),
 * copied for a report worker, into *out (home_state: the home's own part,
 * "live" or "ended"). 1 when there are any, 0 when none (*out then empty),
 * -ENOMEM.
 */
int peerhome_collect(const struct peerhome *h, const char *name, const char *home_state,
                     int64_t from_ns, int64_t to_ns, struct peermerge *out);
/*
 * For `report` with "late" (tracectl top) at a home: the late map across
 * hosts of session `name` (peerlate_pack_late) into out->late, when the
 * home analysed any of its collectives (else out->late stays NULL). 0 or
 * -ENOMEM.
 */
int peerhome_late_map(const struct peerhome *h, const char *name, struct peermerge *out);
/* The state of a session only members hold: "live" if any part is live or stale, else "ended". */
const char *peerhome_state(const struct peerhome *h, const char *name);

#endif
