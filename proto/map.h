/*
 * map — two small open-addressing hash tables: strmap (owned byte-string
 * key of any bytes, NUL included → uint32) for interning op and device names
 * per session (the daemon's loop thread), shapes per session file (its
 * writer thread) and names and shape lists in `tracectl import`, and u32map
 * (uint32 → uint32) for a connection's op ids.
 * Neither is thread-safe; both grow at 50 % load. Values are never 0-based
 * sentinels: lookups say whether the key was found.
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

#endif
