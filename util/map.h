/*
 * map — the hash tables of tracectl, and its hashes, in one place (the daemon
 * and the CLI link it; libtracectl does not):
 * - strmap (owned byte-string key of any bytes, NUL included → uint32) for
 *   interning op and device names per session (the daemon's loop thread)
 *   and names and shape lists in `tracectl import`;
 * - u32map (uint32 → uint32) for a connection's op ids;
 * - pairmap ((uint64, uint64) → uint64, updated in place) for the CLI's
 *   exports: op and device look-ups by id, the tracks already described, the
 *   weights of collapsed stacks. Its size follows the distinct keys, never
 *   the entries, which keeps an export's memory bounded.
 * All are open addressing with linear probing, grow at 50 % load and have no
 * deletion; none is thread-safe. Values are never 0-based sentinels: lookups
 * say whether the key was found.
 */
#ifndef TRACECTL_MAP_H
#define TRACECTL_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strmap {
    char **keys;
    size_t *lens;
    uint32_t *vals;
    size_t cap, len;
};

struct u32map {
    uint32_t *keys;
    uint32_t *vals;
    bool *used;
    size_t cap, len;
};

struct pairmap_slot {
    uint64_t a, b, val;
    bool used;
};

struct pairmap {
    struct pairmap_slot *slots;
    size_t cap, len; /* cap: 0 or a power of two */
};

/*
 * The 64-bit FNV-1a hash of p[0..n): the tables' hash of byte keys, and a
 * stable one the CLI's importer prints (the suffix of a name cut to the
 * protocol's limit) and derives thread ids from.
 */
uint64_t map_hash_bytes(const void *p, size_t n);

void strmap_init(struct strmap *m);
void strmap_deinit(struct strmap *m);
/* Returns true and sets *val when key (len bytes) is present. */
bool strmap_get(const struct strmap *m, const char *key, size_t len, uint32_t *val);
/* Copies key. Returns 0 or -ENOMEM; the key must not be present yet. */
int strmap_put(struct strmap *m, const char *key, size_t len, uint32_t val);

void u32map_init(struct u32map *m);
void u32map_deinit(struct u32map *m);
bool u32map_get(const struct u32map *m, uint32_t key, uint32_t *val);
/* Inserts or replaces. Returns 0 or -ENOMEM. */
int u32map_put(struct u32map *m, uint32_t key, uint32_t val);

void pairmap_init(struct pairmap *m);
void pairmap_deinit(struct pairmap *m);
/* The value stored for (a, b), or NULL when absent. Valid until the next insertion. */
uint64_t *pairmap_get(const struct pairmap *m, uint64_t a, uint64_t b);
/*
 * The value of (a, b), inserted as 0 when absent (*created tells which; it
 * may be NULL). Returns NULL when out of memory (the map is unchanged).
 * The pointer is valid until the next insertion.
 */
uint64_t *pairmap_upsert(struct pairmap *m, uint64_t a, uint64_t b, bool *created);

#endif
