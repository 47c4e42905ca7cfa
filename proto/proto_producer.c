/*
 * proto_producer.c — decoding of the producer's messages other than batch:
 * hello, ops and bye (a batch's entries are proto_entry.c's).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_field.h"
#include "proto_producer.h"

static int decode_hello_field(const msgpack_object_kv *p, struct proto_hello *h,
                              struct proto_error *err)
{
    const msgpack_object *v = &p->val;

    if (proto_field_key_is(&p->key, "proto"))
        return proto_field_int(v, INT64_MIN, INT64_MAX, &h->proto, "hello.proto", err);
    if (proto_field_key_is(&p->key, "session"))
        return h->session
                   ? proto_fail(err, PROTO_E_MESSAGE, "hello.session given twice")
                   : proto_field_str(v, 1, PROTO_MAX_SESSION, &h->session, "hello.session", err);
    if (v->type == MSGPACK_OBJECT_NIL)
        return 0; /* optional fields: nil is the same as absent */
    if (proto_field_key_is(&p->key, "rank"))
        return proto_field_int(v, 0, INT32_MAX, &h->rank, "hello.rank", err);
    if (proto_field_key_is(&p->key, "world"))
        return proto_field_int(v, 1, INT32_MAX, &h->world, "hello.world", err);
    if (proto_field_key_is(&p->key, "pid"))
        return proto_field_int(v, 0, INT32_MAX, &h->pid, "hello.pid", err);
    if (proto_field_key_is(&p->key, "host"))
        return h->host ? proto_fail(err, PROTO_E_MESSAGE, "hello.host given twice")
                       : proto_field_str(v, 0, PROTO_MAX_NAME, &h->host, "hello.host", err);
    if (proto_field_key_is(&p->key, "device"))
        return h->device ? proto_fail(err, PROTO_E_MESSAGE, "hello.device given twice")
                         : proto_field_str(v, 1, PROTO_MAX_NAME, &h->device, "hello.device", err);
    if (proto_field_key_is(&p->key, "home"))
        return h->home ? proto_fail(err, PROTO_E_MESSAGE, "hello.home given twice")
                       : proto_field_str(v, 1, PROTO_MAX_NAME, &h->home, "hello.home", err);
    if (proto_field_key_is(&p->key, "meta"))
        return h->meta ? proto_fail(err, PROTO_E_MESSAGE, "hello.meta given twice")
                       : proto_field_meta(v, &h->meta, &h->n_meta, err);
    return 0;
}

int proto_producer_hello(const msgpack_object *a, struct proto_hello *h, struct proto_error *err)
{
    bool have_proto = false;
    int rc;

    h->proto = 0;
    h->rank = h->world = h->pid = -1;
    if (a->via.array.size < 2 || proto_field_map(&a->via.array.ptr[1], "hello", err) < 0)
        return proto_fail(err, PROTO_E_MESSAGE, "hello needs a map");
    const msgpack_object *m = &a->via.array.ptr[1];
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        if (proto_field_key_is(&m->via.map.ptr[i].key, "proto"))
            have_proto = true;
        if ((rc = decode_hello_field(&m->via.map.ptr[i], h, err)) < 0)
            return rc;
    }
    if (!have_proto)
        return proto_fail(err, PROTO_E_MESSAGE, "hello.proto is required");
    if (h->proto != PROTO_VERSION)
        return proto_fail(err, PROTO_E_VERSION,
                          "protocol version %lld is not supported (this is 1)",
                          (long long)h->proto);
    if (h->session == NULL)
        return proto_fail(err, PROTO_E_MESSAGE, "hello.session is required");
    return 0;
}

int proto_producer_ops(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *l;
    int rc;

    if (a->via.array.size < 2 || a->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "ops needs an array of [id, name(, category)]");
    l = &a->via.array.ptr[1];
    m->u.ops.defs = calloc(l->via.array.size ? l->via.array.size : 1, sizeof(struct proto_opdef));
    if (m->u.ops.defs == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < l->via.array.size; i++) {
        const msgpack_object *d = &l->via.array.ptr[i];
        struct proto_opdef *def = &m->u.ops.defs[i];
        uint64_t id = 0;

        m->u.ops.n = i + 1; /* so that proto_msg_free frees what was copied */
        if (d->type != MSGPACK_OBJECT_ARRAY || d->via.array.size < 2)
            return proto_fail(err, PROTO_E_MESSAGE, "ops[%u] must be [id, name(, category)]", i);
        rc = proto_field_uint(&d->via.array.ptr[0], UINT32_MAX, &id, "an op id", err);
        if (rc == 0)
            rc = proto_field_str(&d->via.array.ptr[1], 1, PROTO_MAX_NAME, &def->name, "an op name",
                                 err);
        if (rc < 0)
            return rc;
        def->id = (uint32_t)id;
        if (d->via.array.size > 2 && d->via.array.ptr[2].type != MSGPACK_OBJECT_NIL &&
            (rc = proto_field_str(&d->via.array.ptr[2], 1, PROTO_MAX_CATEGORY, &def->category,
                                  "an op category", err)) < 0)
            return rc;
    }
    return 0;
}

/*
 * One [op, calls, ns, bytes] row of ops_dropped, or [op, calls, ns, bytes,
 * counted, counted_ns, counted_bytes]: the part of each counted by design.
 */
static int opdrop_row(const msgpack_object *r, struct proto_opdrop *d, const char *what,
                      struct proto_error *err)
{
    static const char *const names[] = {"calls",   "ns",         "bytes",
                                        "counted", "counted_ns", "counted_bytes"};
    uint64_t *vals[] = {&d->calls,   &d->ns,         &d->bytes,
                        &d->counted, &d->counted_ns, &d->counted_bytes};
    uint64_t op = 0;
    uint32_t n;
    char name[40];
    int rc;

    if (r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size < 4)
        return proto_fail(err, PROTO_E_MESSAGE, "%s.ops_dropped rows are [op, calls, ns, bytes]",
                          what);
    if ((rc = proto_field_uint(&r->via.array.ptr[0], UINT32_MAX, &op, "ops_dropped op", err)) < 0)
        return rc;
    n = r->via.array.size < 7 ? 3 : 6; /* v1 ignored elements past bytes: so do 5 and 6 */
    for (uint32_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "ops_dropped %s", names[i]);
        if ((rc = proto_field_uint(&r->via.array.ptr[i + 1], INT64_MAX, vals[i], name, err)) < 0)
            return rc;
    }
    if (d->counted > d->calls || d->counted_ns > d->ns || d->counted_bytes > d->bytes)
        return proto_fail(err, PROTO_E_MESSAGE, "%s.ops_dropped counts more counted than in all",
                          what);
    d->op = (uint32_t)op;
    return 0;
}

/* ops_dropped (v NULL or nil: none): at most PROTO_MAX_OPDROPS rows, copied into k->ops. */
static int proto_producer_opdrops(const msgpack_object *v, struct proto_counters *k,
                                  const char *what, struct proto_error *err)
{
    int rc;

    if (v == NULL || v->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (v->type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(err, PROTO_E_MESSAGE, "%s.ops_dropped must be an array", what);
    if (v->via.array.size > PROTO_MAX_OPDROPS)
        return proto_fail(err, PROTO_E_TOO_LARGE, "%s.ops_dropped has %u rows, over %d", what,
                          v->via.array.size, PROTO_MAX_OPDROPS);
    if (v->via.array.size == 0)
        return 0;
    if ((k->ops = calloc(v->via.array.size, sizeof(*k->ops))) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    for (uint32_t i = 0; i < v->via.array.size; i++, k->n_ops++)
        if ((rc = opdrop_row(&v->via.array.ptr[i], &k->ops[i], what, err)) < 0)
            return rc;
    return 0;
}

/*
 * The client counters of a flush's or bye's map (PROTOCOL.md Part 3): given
 * when recorded, sent and acked are all there (dropped is bye's own key, or
 * the flush map's); each 0 .. INT64_MAX. what names the message in errors.
 */
int proto_producer_counters(const msgpack_object *map, struct proto_counters *k, const char *what,
                            struct proto_error *err)
{
    static const char *const keys[] = {"recorded", "sent", "acked", "dropped"};
    uint64_t *vals[] = {&k->recorded, &k->sent, &k->acked, &k->dropped};
    char name[32];
    int rc, n = 0;

    memset(k, 0, sizeof(*k));
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return 0;
    for (size_t i = 0; i < 4; i++) {
        const msgpack_object *v = proto_field_get(map, keys[i]);
        if (v == NULL || v->type == MSGPACK_OBJECT_NIL)
            continue;
        snprintf(name, sizeof(name), "%s.%s", what, keys[i]);
        if ((rc = proto_field_uint(v, INT64_MAX, vals[i], name, err)) < 0)
            return rc;
        n += i < 3;
    }
    k->given = n == 3;
    return proto_producer_opdrops(proto_field_get(map, "ops_dropped"), k, what, err);
}

int proto_producer_bye(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *args, *v;
    int rc;

    if ((rc = proto_field_args(a, &args, err)) < 0)
        return rc;
    v = proto_field_get(args, "dropped");
    if (v != NULL && v->type != MSGPACK_OBJECT_NIL &&
        (rc = proto_field_uint(v, INT64_MAX, &m->u.bye_dropped, "bye.dropped", err)) < 0)
        return rc;
    return proto_producer_counters(args, &m->counters, "bye", err);
}

int proto_producer_flush(const msgpack_object *a, struct proto_msg *m, struct proto_error *err)
{
    int rc;

    if (a->via.array.size < 2)
        return proto_fail(err, PROTO_E_MESSAGE, "flush needs a sequence number");
    if ((rc = proto_field_uint(&a->via.array.ptr[1], UINT64_MAX, &m->u.flush_seq, "flush seq",
                               err)) < 0)
        return rc;
    return a->via.array.size > 2
               ? proto_producer_counters(&a->via.array.ptr[2], &m->counters, "flush", err)
               : 0;
}
