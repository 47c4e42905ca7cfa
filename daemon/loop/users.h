/*
 * users — what each user (uid, from SO_PEERCRED) holds of what every
 * connection shares: unread reply bytes and the report slots, and the queue
 * of its reports waiting for a slot. Loop thread only.
 *
 * A struct user exists while the uid has a connection (conn_accept takes a
 * reference, conn_free drops it), and after that while what its reports
 * cost is remembered: the cost decays by 1/64 a second (halved in ~44 s,
 * users_tick), so that a user who asks one report per connection, as the
 * CLI does, is not new each time. There are as many as users active, so
 * the list is walked, not hashed.
 *
 * FAIRNESS (README "Limits", "Users and running as a service")
 * Reports are built CONN_MAX_REPORTS at a time, CONN_MAX_HEAVY of them
 * heavy (control_report_heavy: by the session's size, or by what the
 * user's last report on it scanned, heavy_id). Every report request waits
 * in its user's queue, oldest first (within its lane: a report waiting for
 * a heavy slot does not hold up the user's small ones), and
 * users_schedule() hands free slots out: among the users with a waiting
 * report that may start, to the one whose reports have scanned least
 * (SQLite's virtual-machine steps, counted by a progress handler in
 * query.c), the least recently served first on a tie. Under --system one user holds at most all
 * slots but one (and of the heavy ones all but one), so that a user who arrives while another keeps
 * every slot busy finds one free at once, not after the shortest of the other's reports. Exports
 * take slots the same way, CONN_MAX_EXPORTS of them (each holds a read snapshot and its SQLite
 * cache while it streams), half of them per user under --system. The per-user daemon has one user:
 * it keeps every slot.
 */
#ifndef TRACECTLD_USERS_H
#define TRACECTLD_USERS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * SQLite steps per entry of a single pass: a report that took more than
 * --heavy-entries times this was heavy work, whatever its session's size (a
 * report filtered by steps took ~130 per entry, one using the aggregates a
 * few in all).
 */
#define USERS_HEAVY_STEPS 32

struct conn;
struct daemon;

struct user {
    struct user *next;
    int64_t uid;
    unsigned conns;     /* connections (references) */
    uint64_t unwritten; /* reply bytes queued on its connections, not yet written */
    unsigned reports;   /* report slots held */
    unsigned heavy;     /* of which heavy */
    unsigned exports;   /* exports streaming */
    uint64_t cost;      /* what its finished reports scanned (progress-handler steps) */
    int64_t heavy_id;   /* a session its last report on which was heavy work; -1: none */
    /* (forgotten with the user, once its cost has decayed) */
    uint64_t served;    /* d->users_served when it was last given a slot */
    struct conn *first; /* its connections holding a report for a slot, oldest first */
    struct conn *last;
};

/* The user of uid, made (with one reference) or referenced. NULL when out of memory. */
struct user *users_get(struct daemon *d, int64_t uid);
/* Drops a reference; frees the user with its last, unless its cost is remembered. u may be NULL. */
void users_put(struct daemon *d, struct user *u);
/* Once a second: costs decay; users without connections and cost are freed. */
void users_tick(struct daemon *d);
/* At exit, once every connection is freed: frees the users whose cost was remembered. */
void users_free_all(struct daemon *d);
/* Appends c (holding a report or export) to its user's queue; a no-op when queued already. */
void users_wait(struct conn *c);
/* Takes c out of its user's queue (it closed); a no-op when it is not queued. */
void users_unwait(struct conn *c);
/* Gives free slots to waiting reports and exports (FAIRNESS); each starts before this returns. */
void users_schedule(struct daemon *d);

#endif
