/*
 * conn — one client connection on the loop thread: framing, validation,
 * dispatch of producer messages (hello, ops, batch, meta, flush, bye) and of
 * control requests (control.c answers those).
 *
 * A conn is a producer after `hello`, a control client otherwise. Bad input
 * gets ["error", {code, message}], then the connection is shut down and
 * closed; everything it sent before stays queued for the store. A conn is
 * freed in its uv_close callback, or later when the last job or work item
 * that refers to it (a flush marker, a report) has come back: `refs`.
 *
 * MEMORY
 * What one connection can make the daemon hold is bounded (README
 * "Limits"): op ids and metadata keys per connection, names and shapes per
 * session (session.h); everything it queued for the store is counted in
 * bytes (its store_budget), and reading stops while that is over its share;
 * since a batch is counted once decoded, and the 4 MiB message limit lets
 * one batch hold 838,760 entries (an entry: a struct proto_entry and two ids,
 * 88 bytes decoded, against 5 on the wire at the least), a batch of more than
 * CONN_BATCH_ENTRIES entries is checked whole, then decoded and queued in
 * slices of that many (proto_reader_set_slice), each charged like a batch,
 * and reading and decoding stop between slices while the connection is over
 * its share: what one batch costs decoded is at most a slice over the budget;
 * replies it has not read stop its requests, and all connections' unread
 * replies together are bounded too (under --system, one user's to half of
 * that): every reply counts, an export's chunks included, and an export
 * reads its next chunk only once there is room (conn_wait_room). Reports
 * and exports take slots, shared per user (users.h). A hello that would
 * create a session waits while SESSION_MAX_OPENING new session files are
 * being made, so hello/bye churn cannot fill the writer's queue.
 *
 * TIMEOUTS
 * A connection that started a message and has not finished it
 * --request-timeout later, and a control connection (no hello) that sent
 * nothing for --idle-timeout with nothing pending, get `limit` and are
 * closed, so that stalled peers cannot hold connections for ever. A producer
 * between messages is never timed out; time the daemon makes a peer wait
 * (backpressure, a report being built, a held request) does not count.
 * A connection with replies waiting whose peer has read none of their bytes
 * for --reply-timeout is closed, the reason logged (it cannot be told: it
 * does not read): the unread-reply bound is memory, this is time, so that a
 * peer cannot hold its share, or an export's read snapshot, for ever. A
 * peer that reads, however slowly, is never closed for it.
 */
#ifndef TRACECTLD_CONN_H
#define TRACECTLD_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>
#include <uv.h>

#include "daemon.h"
#include "map.h"
#include "proto.h"
#include "users.h"

#define CONN_MAX_OP_IDS    65536        /* op ids one connection defines */
#define CONN_MAX_META_KEYS 1024         /* distinct metadata keys of one process */
#define CONN_QUEUE_BYTES   (8u << 20)   /* queued for the store before reading stops */
#define CONN_BATCH_ENTRIES 32768        /* a batch decoded at once: 2.75 MiB; more: slices */
#define DAEMON_QUEUE_BYTES (256u << 20) /* all producers: beyond it, each gets a share */
#define CONN_WRITE_HIGH    (1u << 20)   /* unread replies of one connection */
#define DAEMON_WRITE_HIGH  (64u << 20)  /* unread replies of every connection */
#define CONN_MAX_REPORTS   4            /* reports being built at once; more wait */
#define CONN_MAX_HEAVY     2            /* of which on big sessions (--heavy-entries) */
#define CONN_MAX_EXPORTS   32           /* exports streaming at once (each an open snapshot) */

struct conn;
/* A reply sent by conn_send_then() was written (status 0) or dropped (a negative errno). */
typedef void (*conn_sent_cb)(struct conn *c, void *arg, int status);
/* There is room for more replies (conn_wait_room). */
typedef void (*conn_room_cb)(struct conn *c, void *arg);

struct conn {
    uv_pipe_t pipe; /* first: the handle's address is the conn's */
    struct daemon *d;
    struct conn *prev, *next;
    struct proto_reader reader;
    bool producer;
    bool closed;       /* uv_close called */
    bool failed;       /* an error was sent: ignore further input */
    bool paused;       /* reading stopped for backpressure */
    bool busy;         /* a control request is in flight: replies stay in order */
    bool throttled;    /* too many replies unread: reading stops until the peer reads */
    unsigned refs;     /* outstanding flush jobs and work items */
    int64_t uid, pid;  /* SO_PEERCRED; -1 unknown */
    bool admin;        /* root or a member of the admin group: sees every session */
    struct user *user; /* its uid's shares (users.h); NULL only when out of memory at accept */
    bool waiting;      /* its held report is in user->first's queue */
    bool granted;      /* users_schedule gave its held report a slot */
    struct conn *wait_next;

    /* producers */
    struct session *session;
    int64_t process_id;
    uint32_t hello_dev;
    struct u32map ops; /* this connection's op ids → session op ids */
    uint64_t enqueued; /* entries handed to the store */
    uint64_t refused;  /* entries the daemon dropped (session over its byte cap) */
    bool said_bye;
    /* The client's own counters as of its last flush (given: it sends them,
     * PROTOCOL.md Part 3), and the `stored` of the last ack written to it. */
    struct proto_counters counters;
    uint64_t acked_sent;
    int64_t rank;  /* hello's, -1 when absent (for `live`) */
    bool has_step; /* an entry arrived: step is the largest step seen (for `live`) */
    uint64_t step;

    /* bounds (MEMORY above) */
    uint64_t unwritten;   /* reply bytes queued, not yet written */
    uint64_t sent;        /* reply bytes ever queued (with unwritten: what was read) */
    uint64_t progress;    /* bytes the kernel took of them at the last timeout check */
    uint64_t progress_ms; /* loop time the peer last took reply bytes; 0: no replies */
    conn_room_cb room;    /* conn_wait_room's, until it is called */
    void *room_arg;
    struct strmap meta_keys;     /* metadata keys this process has set */
    struct store_budget *budget; /* what it has queued for the store */
    bool holding;                /* `held` waits: see conn_may_dispatch() */
    struct proto_msg held;
    uint64_t active_ms;  /* loop time of its last bytes, or the daemon last made it wait */
    uint64_t partial_ms; /* loop time the unfinished message began; 0: none */
};

/* The uid whose sessions c may see, or -1 for all (an admin). */
int64_t conn_view_uid(const struct conn *c);
/* Takes fd, a connection accepted on the listener (closed on failure). 0 or a negative errno. */
int conn_accept(struct daemon *d, int fd);
/* Sends a packed message (takes the buffer's memory). Never blocks. */
void conn_send(struct conn *c, msgpack_sbuffer *sb);
/*
 * conn_send, then done(c, arg, status) once the message is written or
 * dropped (the connection closed). Returns 0, or -ECANCELED (closed) or
 * -ENOMEM, when the message was dropped at once and done is never called.
 */
int conn_send_then(struct conn *c, msgpack_sbuffer *sb, conn_sent_cb done, void *arg);
/*
 * Whether c may queue more replies: its unread replies are under
 * CONN_WRITE_HIGH / div, everyone's under DAEMON_WRITE_HIGH / div, and
 * under --system its user's under half of that (MEMORY).
 */
bool conn_may_send(const struct conn *c, unsigned div);
/*
 * Calls room(c, arg) once conn_may_send(c, 2) holds: at once, or when the
 * replies that stand in the way have been read; or when c closes first
 * (c->closed is then set: room cleans up).
 */
void conn_wait_room(struct conn *c, conn_room_cb room, void *arg);
/* Whether c's held request could be dispatched now (users_schedule asks). */
bool conn_may_start(const struct conn *c);
/* users_schedule gave c's held report a slot: it is dispatched before this returns. */
void conn_grant(struct conn *c);
/* Gives freed memory back to the system after large replies were freed (from the tick). */
void conn_trim(struct daemon *d);
/* Sends ["error", ...], then shuts the connection down and closes it. */
void conn_fail(struct conn *c, const char *code, const char *message);
/* Closes (async). A producer without bye is recorded as ended without one. */
void conn_close(struct conn *c);
/* Drops a reference taken for async work; may free a closed conn. */
void conn_unref(struct conn *c);
/* A control request finished: process what was buffered meanwhile, read on. */
void conn_resume(struct conn *c);
/* A report or export ended (its slot given back): start what waited for a slot (users.h). */
void conn_report_done(struct daemon *d);
/* Resume producers paused for backpressure once the store has drained enough. */
void conn_backpressure_check(struct daemon *d);
/* Starts the timer that enforces --request-timeout and --idle-timeout (TIMEOUTS). */
void conn_timer_start(struct daemon *d);
/* The store finished a flush marker (job->cookie is the conn). Frees the job. */
void conn_flush_done(struct store_job *job);

#endif
