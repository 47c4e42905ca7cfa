/*
 * cli_import_intern — an interning table for `tracectl import`: each distinct
 * byte string (an op name, a packed shape list) is stored once and named by
 * a dense index (found through util/map.h's strmap).
 * The importer keeps per-event records small by storing these indexes.
 * Single-threaded; the caller's memory (init by zeroing, _deinit to free).
 */
#ifndef TRACECTL_CLI_IMPORT_INTERN_H
#define TRACECTL_CLI_IMPORT_INTERN_H

#include <stddef.h>
#include <stdint.h>

#include "map.h"

#define INTERN_NONE UINT32_MAX

struct intern {
    char **v;    /* the strings, each NUL-terminated after its len bytes */
    size_t *len; /* their lengths (they may hold NULs: packed msgpack) */
    size_t n, cap;
    struct strmap index; /* string → its index */
};

/* Index of s[0..n), added when new. INTERN_NONE when out of memory. */
uint32_t intern_get(struct intern *t, const void *s, size_t n);

/* intern_get() of a C string. */
uint32_t intern_str(struct intern *t, const char *s);

void intern_deinit(struct intern *t);

#endif
