/*
 * cli_export_map — a hash map from a pair of 64-bit integers to a 64-bit
 * value, for the export formats: op and device look-ups by id, the tracks
 * already described, the (device, op) weights of collapsed stacks. Its size
 * follows the number of distinct keys (ops, devices, tracks), never the
 * number of entries, which is what keeps an export's memory bounded.
 *
 * Open addressing with linear probing, at most half full; no deletion (no
 * export needs it). Memory is the caller's struct plus the slot array,
 * freed by cli_export_map_deinit(). Not thread-safe; no globals.
 */
#ifndef TRACECTL_CLI_EXPORT_MAP_H
#define TRACECTL_CLI_EXPORT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cli_export_slot {
    uint64_t a, b, val;
    bool used;
};

struct cli_export_map {
    struct cli_export_slot *slots;
    size_t cap, n; /* cap: 0 or a power of two */
};

void cli_export_map_init(struct cli_export_map *m);
void cli_export_map_deinit(struct cli_export_map *m);

/* The value stored for (a, b), or NULL when absent. Valid until the next insertion. */
uint64_t *cli_export_map_get(const struct cli_export_map *m, uint64_t a, uint64_t b);

/*
 * The value of (a, b), inserted as 0 when absent (*created tells which; it
 * may be NULL). Returns NULL when out of memory (the map is unchanged).
 * The pointer is valid until the next insertion.
 */
uint64_t *cli_export_map_upsert(struct cli_export_map *m, uint64_t a, uint64_t b, bool *created);

#endif
