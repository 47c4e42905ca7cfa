/*
 * conn_int.h — what the files of a connection share (conn.h is the contract):
 * conn.c (accept, reading, dispatch, backpressure, close), conn_producer.c
 * (hello, ops, batch, meta, flush, bye), conn_reply.c (the write queue and
 * the unread-reply bounds) and conn_timeout.c (conn.h TIMEOUTS). All of it
 * runs on the loop thread. Internal: included by those files only.
 */
#ifndef TRACECTLD_CONN_INT_H
#define TRACECTLD_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "conn.h"

/* conn.c */
/* Starts or stops reading as c's state says (failed, busy, paused, throttled, holding). */
void conn_update_reading(struct conn *c);
/* Dispatches the held message and what is buffered, until c must wait. */
void conn_process(struct conn *c);
/* True when bytes of a message that is not complete are buffered. */
bool conn_partial(struct conn *c);
/* Under --system: one user's share of a cap, and what users together leave to admins. */
size_t conn_user_share(size_t cap);
size_t conn_reserve(size_t cap);

/* conn_producer.c: each handles one producer message (hello: any connection's first). */
void conn_handle_hello(struct conn *c, struct proto_msg *m);
void conn_handle_ops(struct conn *c, struct proto_msg *m);
void conn_handle_batch(struct conn *c, struct proto_msg *m);
void conn_handle_meta(struct conn *c, struct proto_msg *m);
void conn_handle_flush(struct conn *c, struct proto_msg *m);
void conn_handle_bye(struct conn *c, struct proto_msg *m);
/* The reader's check of a batch it returns in slices (proto_reader_set_check). */
int conn_check_slices(void *ctx, const struct proto_batch *b, size_t first,
                      struct proto_error *err);
/* Whether c's queued work is over its share of the store's bound (div-th of it). */
bool conn_over_share(const struct conn *c, unsigned div);
/* Stops reading c for backpressure (conn_backpressure_check resumes it). */
void conn_pause(struct conn *c);

#endif
