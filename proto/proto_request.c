/*
 * proto_request.c — decoding of the control requests (sessions, report,
 * status, delete, export, live, classify) into struct proto_request.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_field.h"
#include "proto_request.h"

void proto_request_init(struct proto_request *req)
{
    memset(req, 0, sizeof(*req));
    req->session.id = -1;
    req->top = 10;
}

static int decode_sessref(const msgpack_object *v, struct proto_sessref *s, struct proto_error *err)
{
    if (v == NULL || v->type == MSGPACK_OBJECT_NIL)
        return proto_fail(err, PROTO_E_MESSAGE, "session is required");
    if (v->type == MSGPACK_OBJECT_STR)
        return proto_field_str(v, 1, PROTO_MAX_SESSION, &s->name, "session", err);
    return proto_field_int(v, 0, INT64_MAX, &s->id, "session", err);
}

static int get_ratio(const msgpack_object *v, double *out, struct proto_error *err)
{
    double d;

    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        d = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        d = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        d = (double)v->via.i64; /* a number, out of range: say so */
    else
        return proto_fail(err, PROTO_E_MESSAGE, "comm_min_ratio must be a number");
    if (!(d >= 0.0 && d <= 1.0))
        return proto_fail(err, PROTO_E_MESSAGE, "comm_min_ratio must be in [0, 1]");
    *out = d;
    return 0;
}

/* export's "order": "storage" (the default), "start" or "rank"; nil is the default. */
static int decode_export_order(const msgpack_object *v, struct proto_request *req,
                               struct proto_error *err)
{
    if (v == NULL || v->type == MSGPACK_OBJECT_NIL || proto_field_key_is(v, "storage"))
        return 0;
    if (proto_field_key_is(v, "start"))
        req->by_start = true;
    else if (proto_field_key_is(v, "rank"))
        req->by_rank = true;
    else
        return proto_fail(err, PROTO_E_MESSAGE,
                          "export order must be \"storage\", \"start\" or \"rank\"");
    return 0;
}

/* classify: "comm", "compute", "memory" (regexes); none at all only rebuilds. */
static int decode_classify(const msgpack_object *args, struct proto_request *req,
                           struct proto_error *err)
{
    static const char *const keys[3] = {"comm", "compute", "memory"};
    char **slots[3] = {&req->re_comm, &req->re_compute, &req->re_memory};
    const msgpack_object *v;
    int rc;

    for (int i = 0; i < 3; i++) {
        if ((v = proto_field_get(args, keys[i])) == NULL || v->type == MSGPACK_OBJECT_NIL)
            continue;
        if ((rc = proto_field_str(v, 1, PROTO_MAX_NAME, slots[i], keys[i], err)) < 0)
            return rc;
    }
    return 0;
}

/* The report's analysis option and its filters (PROTOCOL.md Part 3, "report analysis" and
 * "report filters"). */
static int decode_analysis(const msgpack_object *args, struct proto_analysis *an,
                           struct proto_error *err)
{
    const msgpack_object *v;
    uint64_t u = 0;
    int rc;

    if ((v = proto_field_get(args, "analysis")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return proto_fail(err, PROTO_E_MESSAGE, "analysis must be a boolean");
        an->on = v->via.boolean;
    }
    if ((v = proto_field_get(args, "ranks")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size == 0)
            return proto_fail(err, PROTO_E_MESSAGE, "ranks must be a non-empty array of ranks");
        if (v->via.array.size > PROTO_MAX_RANK_FILTER)
            return proto_fail(err, PROTO_E_TOO_LARGE, "ranks names over %d ranks",
                              PROTO_MAX_RANK_FILTER);
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            if ((rc = proto_field_uint(&v->via.array.ptr[i], INT32_MAX, &u, "a rank", err)) < 0)
                return rc;
            an->ranks[i] = (int64_t)u;
        }
        an->n_ranks = v->via.array.size;
    }
    if ((v = proto_field_get(args, "steps")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2)
            return proto_fail(err, PROTO_E_MESSAGE, "steps must be [first, last]");
        if ((rc = proto_field_uint(&v->via.array.ptr[0], INT64_MAX, &an->step_min, "steps", err)) <
                0 ||
            (rc = proto_field_uint(&v->via.array.ptr[1], INT64_MAX, &an->step_max, "steps", err)) <
                0)
            return rc;
        if (an->step_min > an->step_max)
            return proto_fail(err, PROTO_E_MESSAGE, "steps: first is after last");
        an->steps = true;
    }
    if ((v = proto_field_get(args, "device")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = proto_field_str(v, 1, PROTO_MAX_NAME, &an->device, "device", err)) < 0)
        return rc;
    if ((v = proto_field_get(args, "category")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = proto_field_str(v, 1, 64, &an->category, "category", err)) < 0)
        return rc;
    return 0;
}

int proto_request_decode(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    struct proto_request *req = &m->u.req;
    const msgpack_object *args, *v;
    uint64_t u = 0;
    int rc;

    proto_request_init(req);
    if ((rc = proto_field_args(a, &args, err)) < 0)
        return rc;
    if (m->type == PROTO_SESSIONS || m->type == PROTO_STATUS)
        return 0;
    if ((rc = decode_sessref(proto_field_get(args, "session"), &req->session, err)) < 0)
        return rc;
    if (m->type == PROTO_EXPORT)
        return decode_export_order(proto_field_get(args, "order"), req, err);
    if (m->type == PROTO_CLASSIFY)
        return decode_classify(args, req, err);
    if (m->type != PROTO_REPORT)
        return 0;
    if ((v = proto_field_get(args, "top")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = proto_field_uint(v, 1000000, &u, "top", err)) < 0)
            return rc;
        req->top = (uint32_t)u;
    }
    if ((v = proto_field_get(args, "comm_min_ratio")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = get_ratio(v, &req->comm_min_ratio, err)) < 0)
        return rc;
    if ((v = proto_field_get(args, "mem_threshold")) != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = proto_field_uint(v, INT64_MAX, &req->mem_threshold, "mem_threshold", err)) < 0)
        return rc;
    /* Extensions (PROTOCOL.md Part 3): a page of the ops rows. */
    if ((v = proto_field_get(args, "ops_limit")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = proto_field_uint(v, 1000000, &u, "ops_limit", err)) < 0)
            return rc;
        req->ops_limit = (uint32_t)u;
    }
    if ((v = proto_field_get(args, "ops_offset")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if ((rc = proto_field_uint(v, UINT32_MAX, &u, "ops_offset", err)) < 0)
            return rc;
        req->ops_offset = (uint32_t)u;
    }
    /* Extension: only the late-arrival figures (PROTOCOL.md Part 3, "report option late"). */
    if ((v = proto_field_get(args, "late")) != NULL && v->type != MSGPACK_OBJECT_NIL) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return proto_fail(err, PROTO_E_MESSAGE, "late must be a boolean");
        req->late = v->via.boolean;
    }
    return decode_analysis(args, &req->analysis, err);
}
