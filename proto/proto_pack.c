/*
 * proto_pack.c — encoding: each proto_pack_*() appends one whole message (or
 * one part the caller asks for) to a msgpack_packer, canonical msgpack.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_entry.h"
#include "proto_pack.h"

int proto_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    if (msgpack_pack_str(pk, n) < 0 || msgpack_pack_str_body(pk, s, n) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_shape(msgpack_packer *pk, const uint64_t *dims, size_t n)
{
    if (msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (msgpack_pack_uint64(pk, dims[i]) < 0)
            return -ENOMEM;
    return 0;
}

static int pack_head(msgpack_packer *pk, size_t n, enum proto_type t)
{
    if (msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    return proto_pack_str(pk, proto_type_name(t));
}

static int pack_kv(msgpack_packer *pk, const struct proto_kv *kv)
{
    int rc = proto_pack_str(pk, kv->key);

    if (rc < 0)
        return rc;
    switch (kv->type) {
    case PROTO_V_BOOL:
        return (kv->v.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) < 0 ? -ENOMEM : 0;
    case PROTO_V_INT:
        return msgpack_pack_int64(pk, kv->v.i) < 0 ? -ENOMEM : 0;
    case PROTO_V_FLOAT:
        return msgpack_pack_double(pk, kv->v.f) < 0 ? -ENOMEM : 0;
    case PROTO_V_STR:
        return proto_pack_str(pk, kv->v.s);
    default:
        return msgpack_pack_nil(pk) < 0 ? -ENOMEM : 0;
    }
}

static int pack_kvs(msgpack_packer *pk, const struct proto_kv *kv, size_t n)
{
    if (msgpack_pack_map(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (pack_kv(pk, &kv[i]) < 0)
            return -ENOMEM;
    return 0;
}

static int pack_key_int(msgpack_packer *pk, const char *key, int64_t v)
{
    if (proto_pack_str(pk, key) < 0 || msgpack_pack_int64(pk, v) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_key_str(msgpack_packer *pk, const char *key, const char *v)
{
    if (proto_pack_str(pk, key) < 0 || proto_pack_str(pk, v) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_hello(msgpack_packer *pk, const struct proto_hello *h)
{
    size_t n = 2 + (h->rank >= 0) + (h->world >= 0) + (h->pid >= 0) + (h->host != NULL) +
               (h->device != NULL) + (h->home != NULL) + (h->n_meta > 0);

    if (pack_head(pk, 2, PROTO_HELLO) < 0 || msgpack_pack_map(pk, n) < 0 ||
        pack_key_int(pk, "proto", h->proto ? h->proto : PROTO_VERSION) < 0 ||
        pack_key_str(pk, "session", h->session) < 0)
        return -ENOMEM;
    if ((h->rank >= 0 && pack_key_int(pk, "rank", h->rank) < 0) ||
        (h->world >= 0 && pack_key_int(pk, "world", h->world) < 0) ||
        (h->pid >= 0 && pack_key_int(pk, "pid", h->pid) < 0) ||
        (h->host != NULL && pack_key_str(pk, "host", h->host) < 0) ||
        (h->device != NULL && pack_key_str(pk, "device", h->device) < 0) ||
        (h->home != NULL && pack_key_str(pk, "home", h->home) < 0))
        return -ENOMEM;
    if (h->n_meta > 0 && (proto_pack_str(pk, "meta") < 0 || pack_kvs(pk, h->meta, h->n_meta) < 0))
        return -ENOMEM;
    return 0;
}

int proto_pack_ops(msgpack_packer *pk, const struct proto_opdef *defs, size_t n)
{
    if (pack_head(pk, 2, PROTO_OPS) < 0 || msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (msgpack_pack_array(pk, defs[i].category ? 3 : 2) < 0 ||
            msgpack_pack_uint32(pk, defs[i].id) < 0 || proto_pack_str(pk, defs[i].name) < 0 ||
            (defs[i].category && proto_pack_str(pk, defs[i].category) < 0))
            return -ENOMEM;
    }
    return 0;
}

int proto_pack_batch_header(msgpack_packer *pk, size_t n)
{
    if (pack_head(pk, 2, PROTO_BATCH) < 0 || msgpack_pack_array(pk, n) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_raw(msgpack_packer *pk, const char *blob, uint32_t off, uint32_t len)
{
    if (len == 0)
        return msgpack_pack_nil(pk);
    return pk->callback(pk->data, blob + off, len);
}

int proto_pack_ext(msgpack_packer *pk, const struct proto_ext *ext)
{
    struct proto_ext x = *ext; /* proto_ext_slot() hands out writable slots */
    size_t n = 0;

    for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++)
        n += (ext->has & proto_ext_keys[k].bit) != 0;
    if (msgpack_pack_map(pk, n) < 0)
        return -ENOMEM;
    for (size_t k = 0; k < PROTO_N_EXT_KEYS; k++) {
        uint32_t bit = proto_ext_keys[k].bit;
        if ((ext->has & bit) == 0)
            continue;
        if (proto_pack_str(pk, proto_ext_keys[k].key) < 0)
            return -ENOMEM;
        if (bit == PROTO_EXT_TAG        ? msgpack_pack_int64(pk, x.tag) < 0
            : bit == PROTO_EXT_LAUNCHER ? msgpack_pack_uint32(pk, x.launcher) < 0
                                        : msgpack_pack_uint64(pk, *proto_ext_slot(&x, bit)) < 0)
            return -ENOMEM;
    }
    return 0;
}

int proto_pack_entry(msgpack_packer *pk, const struct proto_entry *e, const char *blob)
{
    struct proto_ext ext;
    bool has_ext = proto_entry_ext(e, blob, &ext);

    if (msgpack_pack_array(pk, has_ext      ? 10
                               : e->dev_len ? 9
                                            : 8) < 0 ||
        msgpack_pack_uint64(pk, e->step) < 0 || msgpack_pack_uint32(pk, e->op_id) < 0 ||
        msgpack_pack_uint64(pk, e->start_ns) < 0 || msgpack_pack_uint64(pk, e->dur_ns) < 0 ||
        msgpack_pack_uint64(pk, e->elements) < 0 || msgpack_pack_uint64(pk, e->mem_bytes) < 0 ||
        pack_raw(pk, blob, e->out_off, e->out_len) < 0 ||
        pack_raw(pk, blob, e->in_off, e->in_len) < 0)
        return -ENOMEM;
    if (e->dev_len ? msgpack_pack_str(pk, e->dev_len) < 0 ||
                         msgpack_pack_str_body(pk, blob + e->dev_off, e->dev_len) < 0
                   : has_ext && msgpack_pack_nil(pk) < 0)
        return -ENOMEM;
    if (has_ext && proto_pack_ext(pk, &ext) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_batch(msgpack_packer *pk, const struct proto_batch *b)
{
    if (proto_pack_batch_header(pk, b->n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++)
        if (proto_pack_entry(pk, &b->entries[i], b->blob) < 0)
            return -ENOMEM;
    return 0;
}

int proto_pack_meta(msgpack_packer *pk, const struct proto_kv *kv, size_t n)
{
    if (pack_head(pk, 2, PROTO_META) < 0 || pack_kvs(pk, kv, n) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_flush(msgpack_packer *pk, uint64_t seq)
{
    if (pack_head(pk, 2, PROTO_FLUSH) < 0 || msgpack_pack_uint64(pk, seq) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_bye(msgpack_packer *pk, uint64_t dropped)
{
    if (pack_head(pk, 2, PROTO_BYE) < 0 || msgpack_pack_map(pk, 1) < 0 ||
        proto_pack_str(pk, "dropped") < 0 || msgpack_pack_uint64(pk, dropped) < 0)
        return -ENOMEM;
    return 0;
}

/* The counters' keys but dropped, for a map the caller opened (counters_keys of them). */
static int pack_counters(msgpack_packer *pk, const struct proto_counters *k)
{
    if (proto_pack_str(pk, "recorded") < 0 || msgpack_pack_uint64(pk, k->recorded) < 0 ||
        proto_pack_str(pk, "sent") < 0 || msgpack_pack_uint64(pk, k->sent) < 0 ||
        proto_pack_str(pk, "acked") < 0 || msgpack_pack_uint64(pk, k->acked) < 0)
        return -ENOMEM;
    if (k->n_ops == 0)
        return 0;
    if (proto_pack_str(pk, "ops_dropped") < 0 || msgpack_pack_array(pk, (uint32_t)k->n_ops) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < k->n_ops; i++) {
        const struct proto_opdrop *d = &k->ops[i];
        bool counted = d->counted > 0 || d->counted_ns > 0 || d->counted_bytes > 0;
        if (msgpack_pack_array(pk, counted ? 7 : 4) < 0 || msgpack_pack_uint32(pk, d->op) < 0 ||
            msgpack_pack_uint64(pk, d->calls) < 0 || msgpack_pack_uint64(pk, d->ns) < 0 ||
            msgpack_pack_uint64(pk, d->bytes) < 0)
            return -ENOMEM;
        if (counted && (msgpack_pack_uint64(pk, d->counted) < 0 ||
                        msgpack_pack_uint64(pk, d->counted_ns) < 0 ||
                        msgpack_pack_uint64(pk, d->counted_bytes) < 0))
            return -ENOMEM;
    }
    return 0;
}

/* How many keys pack_counters() writes, dropped included. */
static uint32_t counters_keys(const struct proto_counters *k)
{
    return k->n_ops > 0 ? 5 : 4;
}

int proto_pack_flush_counters(msgpack_packer *pk, uint64_t seq, const struct proto_counters *k)
{
    if (k == NULL)
        return proto_pack_flush(pk, seq);
    if (pack_head(pk, 3, PROTO_FLUSH) < 0 || msgpack_pack_uint64(pk, seq) < 0 ||
        msgpack_pack_map(pk, counters_keys(k)) < 0 || proto_pack_str(pk, "dropped") < 0 ||
        msgpack_pack_uint64(pk, k->dropped) < 0 || pack_counters(pk, k) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_bye_counters(msgpack_packer *pk, uint64_t dropped, const struct proto_counters *k)
{
    if (k == NULL)
        return proto_pack_bye(pk, dropped);
    if (pack_head(pk, 2, PROTO_BYE) < 0 || msgpack_pack_map(pk, counters_keys(k)) < 0 ||
        proto_pack_str(pk, "dropped") < 0 || msgpack_pack_uint64(pk, dropped) < 0 ||
        pack_counters(pk, k) < 0)
        return -ENOMEM;
    return 0;
}

/* welcome says "counters": true: this daemon takes client counters (PROTOCOL.md Part 3). */
int proto_pack_welcome(msgpack_packer *pk, int64_t session_id, int64_t process_id)
{
    if (pack_head(pk, 2, PROTO_WELCOME) < 0 || msgpack_pack_map(pk, 3) < 0 ||
        pack_key_int(pk, "session_id", session_id) < 0 ||
        pack_key_int(pk, "process_id", process_id) < 0 || proto_pack_str(pk, "counters") < 0 ||
        msgpack_pack_true(pk) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_ack(msgpack_packer *pk, uint64_t seq, uint64_t stored)
{
    if (pack_head(pk, 3, PROTO_ACK) < 0 || msgpack_pack_uint64(pk, seq) < 0 ||
        msgpack_pack_map(pk, 1) < 0 || proto_pack_str(pk, "stored") < 0 ||
        msgpack_pack_uint64(pk, stored) < 0)
        return -ENOMEM;
    return 0;
}

int proto_pack_error(msgpack_packer *pk, const char *code, const char *message)
{
    if (pack_head(pk, 2, PROTO_ERROR) < 0 || msgpack_pack_map(pk, 2) < 0 ||
        pack_key_str(pk, "code", code) < 0 || pack_key_str(pk, "message", message) < 0)
        return -ENOMEM;
    return 0;
}

static int pack_sessref(msgpack_packer *pk, const struct proto_sessref *s)
{
    if (proto_pack_str(pk, "session") < 0)
        return -ENOMEM;
    if (s->name != NULL)
        return proto_pack_str(pk, s->name);
    return msgpack_pack_int64(pk, s->id) < 0 ? -ENOMEM : 0;
}

static size_t pack_analysis_keys(const struct proto_request *req)
{
    const struct proto_analysis *an = &req->analysis;

    return an->on + (an->n_ranks > 0) + an->steps + (an->device != NULL) + (an->category != NULL);
}

static int pack_analysis(msgpack_packer *pk, const struct proto_analysis *an)
{
    if (an->on && (proto_pack_str(pk, "analysis") < 0 || msgpack_pack_true(pk) < 0))
        return -ENOMEM;
    if (an->n_ranks > 0) {
        if (proto_pack_str(pk, "ranks") < 0 || msgpack_pack_array(pk, an->n_ranks) < 0)
            return -ENOMEM;
        for (uint32_t i = 0; i < an->n_ranks; i++)
            if (msgpack_pack_int64(pk, an->ranks[i]) < 0)
                return -ENOMEM;
    }
    if (an->steps &&
        (proto_pack_str(pk, "steps") < 0 || msgpack_pack_array(pk, 2) < 0 ||
         msgpack_pack_uint64(pk, an->step_min) < 0 || msgpack_pack_uint64(pk, an->step_max) < 0))
        return -ENOMEM;
    if (an->device != NULL &&
        (proto_pack_str(pk, "device") < 0 || proto_pack_str(pk, an->device) < 0))
        return -ENOMEM;
    if (an->category != NULL &&
        (proto_pack_str(pk, "category") < 0 || proto_pack_str(pk, an->category) < 0))
        return -ENOMEM;
    return 0;
}

int proto_pack_request(msgpack_packer *pk, enum proto_type type, const struct proto_request *req)
{
    if (pack_head(pk, 2, type) < 0)
        return -ENOMEM;
    switch (type) {
    case PROTO_REPORT:
        if (msgpack_pack_map(pk, 4 + (req->ops_limit > 0 ? 2 : 0) + req->late +
                                     pack_analysis_keys(req)) < 0 ||
            pack_analysis(pk, &req->analysis) < 0 ||
            (req->late && (proto_pack_str(pk, "late") < 0 || msgpack_pack_true(pk) < 0)))
            return -ENOMEM;
        if (req->ops_limit > 0 &&
            (proto_pack_str(pk, "ops_limit") < 0 || msgpack_pack_uint32(pk, req->ops_limit) < 0 ||
             proto_pack_str(pk, "ops_offset") < 0 || msgpack_pack_uint32(pk, req->ops_offset) < 0))
            return -ENOMEM;
        if (pack_sessref(pk, &req->session) < 0 || proto_pack_str(pk, "top") < 0 ||
            msgpack_pack_uint32(pk, req->top) < 0 || proto_pack_str(pk, "comm_min_ratio") < 0 ||
            msgpack_pack_double(pk, req->comm_min_ratio) < 0 ||
            proto_pack_str(pk, "mem_threshold") < 0 ||
            msgpack_pack_uint64(pk, req->mem_threshold) < 0)
            return -ENOMEM;
        return 0;
    case PROTO_DELETE:
    case PROTO_LIVE:
        if (msgpack_pack_map(pk, 1) < 0 || pack_sessref(pk, &req->session) < 0)
            return -ENOMEM;
        return 0;
    case PROTO_CLASSIFY:
        if (msgpack_pack_map(pk, 1 + (req->re_comm != NULL) + (req->re_compute != NULL) +
                                     (req->re_memory != NULL)) < 0 ||
            pack_sessref(pk, &req->session) < 0 ||
            (req->re_comm != NULL &&
             (proto_pack_str(pk, "comm") < 0 || proto_pack_str(pk, req->re_comm) < 0)) ||
            (req->re_compute != NULL &&
             (proto_pack_str(pk, "compute") < 0 || proto_pack_str(pk, req->re_compute) < 0)) ||
            (req->re_memory != NULL &&
             (proto_pack_str(pk, "memory") < 0 || proto_pack_str(pk, req->re_memory) < 0)))
            return -ENOMEM;
        return 0;
    case PROTO_EXPORT:
        if (msgpack_pack_map(pk, req->by_start || req->by_rank ? 2 : 1) < 0 ||
            pack_sessref(pk, &req->session) < 0 ||
            ((req->by_start || req->by_rank) &&
             (proto_pack_str(pk, "order") < 0 ||
              proto_pack_str(pk, req->by_rank ? "rank" : "start") < 0)))
            return -ENOMEM;
        return 0;
    default:
        return msgpack_pack_map(pk, 0) < 0 ? -ENOMEM : 0;
    }
}

int proto_pack_ok_header(msgpack_packer *pk)
{
    return pack_head(pk, 2, PROTO_OK);
}
