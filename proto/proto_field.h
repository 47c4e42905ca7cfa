/*
 * proto_field — the checks the object-tree decoders (proto_producer.c,
 * proto_entry.c, proto_request.c, proto_reply.c) make on one field of a
 * message, and the error every decoder of proto/ fills in (onepass.c too).
 * Each check either stores the value or fills *err (when not NULL) with the
 * wire code and a message naming `what`, and returns the code's negative
 * errno (proto.h, "Errors"). Strings are copied out of the unpacker's zone.
 * Internal to proto/; reentrant.
 */
#ifndef TRACECTL_PROTO_FIELD_H
#define TRACECTL_PROTO_FIELD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Fills *err (when not NULL) with code and message; returns the code's negative errno. */
int proto_vfail(struct proto_error *err, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The same with the arguments of printf (cold: decoders call it off their fast paths). */
int proto_fail(struct proto_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold));

/* True when k is the string name. */
bool proto_field_key_is(const msgpack_object *k, const char *name);
/* An unsigned integer <= max into *out. */
int proto_field_uint(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                     struct proto_error *err);
/* A signed integer in [min, max] into *out. */
int proto_field_int(const msgpack_object *o, int64_t min, int64_t max, int64_t *out,
                    const char *what, struct proto_error *err);
/*
 * A UTF-8 string of min..max bytes without NUL, copied into *out (caller
 * frees; *out is untouched on error).
 */
int proto_field_str(const msgpack_object *o, size_t min, size_t max, char **out, const char *what,
                    struct proto_error *err);
/* 0 when o is a map, else an error naming what. */
int proto_field_map(const msgpack_object *o, const char *what, struct proto_error *err);
/* A metadata map (at most PROTO_MAX_META keys) into *out, *n_out (free with proto_kv_free). */
int proto_field_meta(const msgpack_object *o, struct proto_kv **out, size_t *n_out,
                     struct proto_error *err);
/* The value of key in the map object m, NULL when absent. */
const msgpack_object *proto_field_get(const msgpack_object *m, const char *key);
/*
 * The optional map argument (element 1) of the message array a, for bye and
 * the control requests: *m is an empty map when it is absent or nil.
 */
int proto_field_args(const msgpack_object *a, const msgpack_object **m, struct proto_error *err);

#endif
