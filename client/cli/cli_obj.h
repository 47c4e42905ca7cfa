/*
 * cli_obj — reading the daemon's replies: typed look-ups in msgpack maps and
 * a compact human rendering of any msgpack value.
 *
 * Every function borrows the objects it is given (they live in the reply
 * reader's zone, see cli_conn.h) and keeps nothing. A missing key or a value
 * of an unexpected type is never fatal: look-ups return NULL or an error and
 * the callers print "-" instead, because a newer daemon may add or change
 * fields (PROTOCOL.md: unknown keys are ignored).
 */
#ifndef TRACECTL_CLI_OBJ_H
#define TRACECTL_CLI_OBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

/* The value of string key `key` in map; NULL when map is NULL, not a map, or lacks the key. */
const msgpack_object *cli_obj_get(const msgpack_object *map, const char *key);

/* True when o is NULL or nil. */
bool cli_obj_is_nil(const msgpack_object *o);

/* True when o is the boolean true. */
bool cli_obj_is_true(const msgpack_object *o);

/* True when o is a string equal to s. */
bool cli_obj_str_eq(const msgpack_object *o, const char *s);

/* A non-negative integer. Returns 0, or -EINVAL (NULL or another type). */
int cli_obj_u64(const msgpack_object *o, uint64_t *out);

/* Any integer or float as a double. Returns 0, or -EINVAL. */
int cli_obj_f64(const msgpack_object *o, double *out);

/*
 * o as short human text into buf (always NUL-terminated, cut when full):
 * strings as they are, nil (or NULL) as "-", true/false, integers exactly,
 * floats with 6 significant digits, arrays as "[32,64]" and
 * "[[32,64],[64,128]]", maps as "{key:value,...}", bin as "<N bytes>".
 */
void cli_obj_text(const msgpack_object *o, char *buf, size_t size);

#endif
