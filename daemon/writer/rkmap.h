/*
 * rkmap — the rank aggregates' index of small integer triples, and the arrays
 * it indexes (rk.h).
 *
 * A key is three integers stored in the slot (no allocation per key); a
 * value is an index into an array the caller owns. Open addressing with
 * linear probing, growing at 50 % load; no deletion, but rkmap_clear()
 * empties it in place, which the deltas' indexes do at every commit. Not
 * proto/map.h's pairmap: that one has two keys and values kept in the map.
 * Used by the writer thread only (through struct ranks); not thread-safe.
 */
#ifndef TRACECTLD_RKMAP_H
#define TRACECTLD_RKMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rkmap_slot {
    uint64_t a, b, c;
    uint32_t v1; /* value + 1; 0 empty */
};

struct rkmap {
    struct rkmap_slot *s;
    size_t cap, len; /* cap 0 or a power of two */
};

/* The value of (a, b, c), or -1 when absent. */
ssize_t rkmap_get(const struct rkmap *m, uint64_t a, uint64_t b, uint64_t c);
/* Adds (a, b, c) -> v, which must be absent. 0 or -ENOMEM (the map is unchanged). */
int rkmap_put(struct rkmap *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v);
/* Empties m, keeping its memory. */
void rkmap_clear(struct rkmap *m);
/* Frees m's memory; m is empty after. */
void rkmap_free(struct rkmap *m);

/* Grows *arr (of *cap elements of size sz) to hold n + 1. 0 or -ENOMEM (*arr unchanged). */
int rkmap_grow(void **arr, size_t *cap, size_t n, size_t sz);

/*
 * Find-or-create: the element of (a, b, c) in the array *arr of *n elements
 * (of size sz, capacity *cap) that m indexes. A new key appends a copy of
 * init (sz bytes) and indexes it. NULL when out of memory (nothing changed).
 * The pointer is valid until the array grows.
 */
void *rkmap_find(struct rkmap *m, uint64_t a, uint64_t b, uint64_t c, void **arr, size_t *n,
                 size_t *cap, size_t sz, const void *init);

#endif
