/*
 * proto_reply.c — decoding of the daemon's replies a producer reads:
 * welcome, ack and error.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_field.h"
#include "proto_reply.h"

int proto_reply_welcome(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = proto_field_args(a, &args, err)) < 0)
        return rc;
    m->u.welcome.session_id = m->u.welcome.process_id = -1;
    if ((v = proto_field_get(args, "session_id")) == NULL ||
        proto_field_int(v, 0, INT64_MAX, &m->u.welcome.session_id, "welcome.session_id", err) < 0)
        return proto_fail(err, PROTO_E_MESSAGE, "welcome needs session_id");
    if ((v = proto_field_get(args, "process_id")) != NULL &&
        (rc = proto_field_int(v, 0, INT64_MAX, &m->u.welcome.process_id, "welcome.process_id",
                              err)) < 0)
        return rc;
    v = proto_field_get(args, "counters"); /* an extension: anything but true is false */
    m->u.welcome.counters = v != NULL && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
    return 0;
}

int proto_reply_ack(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *v;
    int rc;

    if (a->via.array.size < 2 ||
        proto_field_uint(&a->via.array.ptr[1], UINT64_MAX, &m->u.ack.seq, "ack seq", err) < 0)
        return proto_fail(err, PROTO_E_MESSAGE, "ack needs a sequence number");
    if (a->via.array.size > 2 && a->via.array.ptr[2].type == MSGPACK_OBJECT_MAP &&
        (v = proto_field_get(&a->via.array.ptr[2], "stored")) != NULL &&
        (rc = proto_field_uint(v, UINT64_MAX, &m->u.ack.stored, "ack stored", err)) < 0)
        return rc;
    return 0;
}

int proto_reply_error(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = proto_field_args(a, &args, err)) < 0)
        return rc;
    if ((v = proto_field_get(args, "code")) != NULL &&
        (rc = proto_field_str(v, 0, PROTO_MAX_NAME, &m->u.error.code, "error.code", err)) < 0)
        return rc;
    if ((v = proto_field_get(args, "message")) != NULL &&
        (rc = proto_field_str(v, 0, PROTO_MAX_STR, &m->u.error.message, "error.message", err)) < 0)
        return rc;
    return 0;
}
