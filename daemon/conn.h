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

struct conn {
    uv_pipe_t pipe; /* first: the handle's address is the conn's */
    struct daemon *d;
    struct conn *prev, *next;
    struct proto_reader reader;
    bool producer;
    bool closed;      /* uv_close called */
    bool failed;      /* an error was sent: ignore further input */
    bool paused;      /* reading stopped for backpressure */
    bool busy;        /* a control request is in flight: replies stay in order */
    bool throttled;   /* too many replies unread: reading stops until the peer reads */
    unsigned refs;    /* outstanding flush jobs and work items */
    int64_t uid, pid; /* SO_PEERCRED; -1 unknown */
    bool admin;       /* root or a member of the admin group: sees every session */

    /* producers */
    struct session *session;
    int64_t process_id;
    uint32_t hello_dev;
    struct u32map ops; /* this connection's op ids → session op ids */
    uint64_t enqueued; /* entries handed to the store */
    uint64_t refused;  /* entries the daemon dropped (session over its byte cap) */
    bool said_bye;
};

/* The uid whose sessions c may see, or -1 for all (an admin). */
int64_t conn_view_uid(const struct conn *c);
/* Takes fd, a connection accepted on the listener (closed on failure). 0 or a negative errno. */
int conn_accept(struct daemon *d, int fd);
/* Sends a packed message (takes the buffer's memory). Never blocks. */
void conn_send(struct conn *c, msgpack_sbuffer *sb);
/* Sends ["error", ...], then shuts the connection down and closes it. */
void conn_fail(struct conn *c, const char *code, const char *message);
/* Closes (async). A producer without bye is recorded as ended without one. */
void conn_close(struct conn *c);
/* Drops a reference taken for async work; may free a closed conn. */
void conn_unref(struct conn *c);
/* A control request finished: process what was buffered meanwhile, read on. */
void conn_resume(struct conn *c);
/* Resume producers paused for backpressure once the store has drained enough. */
void conn_backpressure_check(struct daemon *d);
/* The store finished a flush marker (job->cookie is the conn). Frees the job. */
void conn_flush_done(struct store_job *job);

#endif
