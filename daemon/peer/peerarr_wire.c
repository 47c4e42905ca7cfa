/*
 * peerarr_wire.c — the `arrivals` peer message (peerarr.h): packing, and
 * decoding that trusts nothing. Pure over msgpack: the fuzzer
 * (tests/fuzz/fuzz_peerarr.c) compiles it alone.
 */
#include "peerarr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void peerarr_msg_free(struct peerarr_msg *msg)
{
    if (msg == NULL)
        return;
    free(msg->session);
    free(msg->arr);
    memset(msg, 0, sizeof(*msg));
}

int peerarr_pack(msgpack_packer *pk, const char *session, const char *host, uint64_t dropped,
                 const struct peerarr_arrival *a, size_t n)
{
    int rc = 0;

    if (n > PEERARR_MAX_MSG)
        return -EINVAL;
    rc |= msgpack_pack_array(pk, 2);
    rc |= proto_pack_str(pk, "arrivals");
    rc |= msgpack_pack_map(pk, 4);
    rc |= proto_pack_str(pk, "session");
    rc |= proto_pack_str(pk, session);
    rc |= proto_pack_str(pk, "host");
    rc |= proto_pack_str(pk, host);
    rc |= proto_pack_str(pk, "dropped");
    rc |= msgpack_pack_uint64(pk, dropped);
    rc |= proto_pack_str(pk, "arrivals");
    rc |= msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
        rc |= msgpack_pack_array(pk, a[i].step != 0 ? 8 : a[i].comm_size != 0 ? 7 : 6);
        rc |= msgpack_pack_uint64(pk, a[i].comm);
        rc |= msgpack_pack_uint64(pk, a[i].seq);
        rc |= msgpack_pack_int64(pk, a[i].rank);
        rc |= msgpack_pack_int64(pk, a[i].enter_ns);
        rc |= msgpack_pack_int64(pk, a[i].exit_ns);
        rc |= msgpack_pack_uint64(pk, a[i].bytes);
        if (a[i].comm_size != 0 || a[i].step != 0)
            rc |= msgpack_pack_uint64(pk, a[i].comm_size);
        if (a[i].step != 0)
            rc |= msgpack_pack_uint64(pk, a[i].step);
    }
    return rc != 0 ? -ENOMEM : 0;
}

/* ---- decoding (trusts nothing) ----------------------------------------------------- */

static int peerarr_bad(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "arrivals: %s", what);
    return -EPROTO;
}

static bool peerarr_u64(const msgpack_object *o, uint64_t max, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return false;
    *v = o->via.u64;
    return true;
}

/*
 * One [comm, seq, rank, enter, exit, bytes(, comm_size(, step))] into *a; NULL or the why. Of
 * 8 elements, comm_size 0 means none (the step needs the place).
 */
static const char *peerarr_dec_one(const msgpack_object *o, struct peerarr_arrival *a)
{
    const msgpack_object *f;
    uint64_t rank, enter, exit;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 6 || o->via.array.size > 8)
        return "an arrival is not an array of 6 to 8";
    f = o->via.array.ptr;
    if (!peerarr_u64(&f[0], UINT64_MAX, &a->comm) || !peerarr_u64(&f[1], UINT64_MAX, &a->seq) ||
        !peerarr_u64(&f[5], UINT64_MAX, &a->bytes))
        return "an arrival's comm, seq or bytes is not an unsigned integer";
    if (!peerarr_u64(&f[2], INT32_MAX, &rank))
        return "an arrival's rank is not in 0 .. 2^31 - 1";
    if (!peerarr_u64(&f[3], PEERARR_TIME_MAX, &enter) ||
        !peerarr_u64(&f[4], PEERARR_TIME_MAX, &exit) || exit < enter)
        return "an arrival's enter and exit are not times in order";
    if (o->via.array.size == 7 &&
        (!peerarr_u64(&f[6], PEERARR_COMM_SIZE, &a->comm_size) || a->comm_size == 0))
        return "an arrival's comm_size is not in 1 .. 2^31 - 1";
    if (o->via.array.size == 8 && (!peerarr_u64(&f[6], PEERARR_COMM_SIZE, &a->comm_size) ||
                                   !peerarr_u64(&f[7], INT64_MAX, &a->step)))
        return "an arrival's comm_size or step is out of range";
    if (a->comm_size != 0 && rank >= a->comm_size)
        return "an arrival's rank is not below its comm_size";
    a->rank = (int64_t)rank;
    a->enter_ns = (int64_t)enter;
    a->exit_ns = (int64_t)exit;
    return NULL;
}

static int peerarr_dec_list(const msgpack_object *o, struct peerarr_msg *out, char *err,
                            size_t errlen)
{
    const char *why;

    if (out->arr != NULL || out->n != 0)
        return peerarr_bad(err, errlen, "arrivals given twice");
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PEERARR_MAX_MSG)
        return peerarr_bad(err, errlen, "arrivals is not an array of at most 8192");
    if (o->via.array.size == 0)
        return 0;
    if ((out->arr = calloc(o->via.array.size, sizeof(*out->arr))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < o->via.array.size; i++, out->n++)
        if ((why = peerarr_dec_one(&o->via.array.ptr[i], &out->arr[i])) != NULL)
            return peerarr_bad(err, errlen, why);
    return 0;
}

#define PEERARR_KEY(k, name) ((k)->size == strlen(name) && memcmp((k)->ptr, name, (k)->size) == 0)

/* One key of the map into out; unknown keys are ignored (forward compatibility). */
static int peerarr_dec_key(const msgpack_object_str *k, const msgpack_object *v,
                           struct peerarr_msg *out, unsigned *seen, char *err, size_t errlen)
{
    if (PEERARR_KEY(k, "session")) {
        if (out->session != NULL)
            return peerarr_bad(err, errlen, "session given twice");
        if (v->type != MSGPACK_OBJECT_STR || v->via.str.size == 0 ||
            v->via.str.size > PROTO_MAX_SESSION ||
            !proto_utf8_valid(v->via.str.ptr, v->via.str.size))
            return peerarr_bad(err, errlen, "session is not a session name");
        out->session = strndup(v->via.str.ptr, v->via.str.size);
        return out->session != NULL ? 0 : -ENOMEM;
    }
    if (PEERARR_KEY(k, "host")) {
        if (*seen & 1u)
            return peerarr_bad(err, errlen, "host given twice");
        if (v->type != MSGPACK_OBJECT_STR || !peermsg_host_valid(v->via.str.ptr, v->via.str.size))
            return peerarr_bad(err, errlen, "host is not a host name");
        memcpy(out->host, v->via.str.ptr, v->via.str.size);
        out->host[v->via.str.size] = '\0';
        *seen |= 1u;
        return 0;
    }
    if (PEERARR_KEY(k, "dropped")) {
        *seen |= 2u;
        return peerarr_u64(v, UINT64_MAX, &out->dropped)
                   ? 0
                   : peerarr_bad(err, errlen, "dropped is not an unsigned integer");
    }
    if (PEERARR_KEY(k, "arrivals")) {
        *seen |= 4u;
        return peerarr_dec_list(v, out, err, errlen);
    }
    return 0;
}

int peerarr_decode(const msgpack_object *m, struct peerarr_msg *out, char *err, size_t errlen)
{
    const msgpack_object *map;
    unsigned seen = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size != 2 ||
        m->via.array.ptr[1].type != MSGPACK_OBJECT_MAP)
        return peerarr_bad(err, errlen, "not [\"arrivals\", map]");
    map = &m->via.array.ptr[1];
    for (uint32_t i = 0; rc == 0 && i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            rc = peerarr_bad(err, errlen, "a key is not a string");
        else
            rc = peerarr_dec_key(&kv->key.via.str, &kv->val, out, &seen, err, errlen);
    }
    if (rc == 0 && (out->session == NULL || seen != 7u))
        rc = peerarr_bad(err, errlen, "session, host, dropped and arrivals are required");
    if (rc == -ENOMEM)
        snprintf(err, errlen, "arrivals: out of memory");
    if (rc < 0)
        peerarr_msg_free(out);
    return rc;
}
