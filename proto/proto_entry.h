/*
 * proto_entry — a batch decoded from msgpack-c's object tree: the reference
 * for onepass.c, which decodes the same bytes in one pass with the same
 * rules (test_proto's onepass_same_as_object_tree and fuzz_decode compare
 * them). Also the table of an entry's `ext` keys (proto/PROTOCOL.md Part 3),
 * the one copy both decoders use. Internal to proto/; reentrant.
 */
#ifndef TRACECTL_PROTO_ENTRY_H
#define TRACECTL_PROTO_ENTRY_H

#include <stdint.h>

#include "proto.h"

/*
 * Decodes the batch message array a into *b (owned: free with
 * proto_batch_free). Returns 0, or a negative errno with *err filled and *b
 * left for the caller to free.
 */
int proto_entry_batch(const msgpack_object *a, struct proto_batch *b, struct proto_error *err);

struct proto_ext_key {
    const char *key;
    uint32_t bit;
};
#define PROTO_N_EXT_KEYS 11
extern const struct proto_ext_key proto_ext_keys[PROTO_N_EXT_KEYS];
/*
 * Where the value of an ext key goes (tag, signed, and launcher, 32-bit, are
 * handled apart; comm_size is range-checked apart, then goes here).
 */
uint64_t *proto_ext_slot(struct proto_ext *x, uint32_t bit);

#endif
