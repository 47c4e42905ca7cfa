/*
 * proto_reply — decoding of the replies a producer reads (welcome, ack,
 * error) from msgpack-c's object tree. Each returns 0 with m filled, or a
 * negative errno with *err filled (the caller frees m). Internal to proto/
 * (proto_decode() dispatches here); reentrant.
 */
#ifndef TRACECTL_PROTO_REPLY_H
#define TRACECTL_PROTO_REPLY_H

#include "proto.h"

int proto_reply_welcome(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);
int proto_reply_ack(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);
int proto_reply_error(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);

#endif
