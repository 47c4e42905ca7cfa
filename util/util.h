/*
 * util.h — two rules every part of tracectl needs, written once: the length
 * of an array and an addition that saturates. Header only, no dependencies:
 * the daemon, the CLI and proto/ reach it through the `util` CMake target.
 */
#ifndef TRACECTL_UTIL_H
#define TRACECTL_UTIL_H

#include <stdint.h>

/* The number of elements of an array (not a pointer). */
#define UTIL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* a + b, or UINT64_MAX when the sum does not fit: a saturated total stays saturated. */
static inline uint64_t util_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

#endif
