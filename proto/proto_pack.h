/*
 * proto_pack — encoding: each proto_pack_*() appends one whole message (or
 * the part it names) to a msgpack_packer, canonical msgpack. Every function
 * returns 0, or -ENOMEM when the packer's buffer cannot grow. Part of the
 * public umbrella proto.h, which includes it; reentrant.
 */
#ifndef TRACECTL_PROTO_PACK_H
#define TRACECTL_PROTO_PACK_H

#include "proto.h"

int proto_pack_hello(msgpack_packer *pk, const struct proto_hello *h);
int proto_pack_ops(msgpack_packer *pk, const struct proto_opdef *defs, size_t n);
/* A whole batch message; shapes/device come from b->blob. */
int proto_pack_batch(msgpack_packer *pk, const struct proto_batch *b);
/*
 * Batch header then n proto_pack_entry() calls: for encoders that do not
 * build a proto_batch. An entry with an ext map is packed with 10 fields.
 */
int proto_pack_batch_header(msgpack_packer *pk, size_t n);
int proto_pack_entry(msgpack_packer *pk, const struct proto_entry *e, const char *blob);
int proto_pack_meta(msgpack_packer *pk, const struct proto_kv *kv, size_t n);
int proto_pack_flush(msgpack_packer *pk, uint64_t seq);
int proto_pack_bye(msgpack_packer *pk, uint64_t dropped);
/*
 * flush and bye with the client's counters (PROTOCOL.md Part 3): only to a
 * daemon whose welcome said "counters": true. k NULL: the v1 forms above.
 */
int proto_pack_flush_counters(msgpack_packer *pk, uint64_t seq, const struct proto_counters *k);
int proto_pack_bye_counters(msgpack_packer *pk, uint64_t dropped, const struct proto_counters *k);
int proto_pack_welcome(msgpack_packer *pk, int64_t session_id, int64_t process_id);
int proto_pack_ack(msgpack_packer *pk, uint64_t seq, uint64_t stored);
int proto_pack_error(msgpack_packer *pk, const char *code, const char *message);
/*
 * Control requests: PROTO_SESSIONS, PROTO_REPORT, PROTO_STATUS, PROTO_DELETE, PROTO_EXPORT,
 * PROTO_CLASSIFY or PROTO_LIVE.
 */
int proto_pack_request(msgpack_packer *pk, enum proto_type type, const struct proto_request *req);
/* ["ok", <caller packs exactly one object next>] */
int proto_pack_ok_header(msgpack_packer *pk);

/* Helpers shared by encoders: a string and a uint shape as canonical msgpack. */
int proto_pack_str(msgpack_packer *pk, const char *s);
int proto_pack_shape(msgpack_packer *pk, const uint64_t *dims, size_t n);
/* An ext map with the keys ext->has names (an empty map when none). */
int proto_pack_ext(msgpack_packer *pk, const struct proto_ext *ext);

#endif
