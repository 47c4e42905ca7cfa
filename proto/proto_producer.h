/*
 * proto_producer — decoding of hello, ops and bye from msgpack-c's object
 * tree (the message array a). Each returns 0 with the message filled in
 * (owned: free with proto_msg_free), or a negative errno with *err filled;
 * what was allocated before an error is freed by the caller's
 * proto_msg_free(). Internal to proto/ (proto_decode() dispatches here).
 */
#ifndef TRACECTL_PROTO_PRODUCER_H
#define TRACECTL_PROTO_PRODUCER_H

#include "proto.h"

int proto_producer_hello(const msgpack_object *a, struct proto_hello *h, struct proto_error *err);
int proto_producer_ops(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);
int proto_producer_bye(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);
/* ["flush", seq(, counters)]: the seq, and the client counters when the map has them. */
int proto_producer_flush(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);
/* Reads the client counters of map (NULL or not a map: none given). 0 or a proto_fail code. */
int proto_producer_counters(const msgpack_object *map, struct proto_counters *k, const char *what,
                            struct proto_error *err);

#endif
