/*
 * proto_request — decoding of the control requests (sessions, report,
 * status, delete, export, live, classify) from msgpack-c's object tree into
 * struct proto_request (proto_request_init() in proto.h sets its defaults).
 * Internal to proto/ (proto_decode() dispatches here); reentrant.
 */
#ifndef TRACECTL_PROTO_REQUEST_H
#define TRACECTL_PROTO_REQUEST_H

#include "proto.h"

/*
 * The request array a, of type m->type (already set), into m->u.req.
 * Returns 0, or a negative errno with *err filled (the caller frees m).
 */
int proto_request_decode(const msgpack_object *a, struct proto_msg *m, struct proto_error *err);

#endif
