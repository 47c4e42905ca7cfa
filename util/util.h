/*
 * util.h — rules every part of tracectl needs, written once: the length of
 * an array, an addition that saturates, growing an array, a deadline on a
 * clock. Header only, libc only:
 * the daemon, the CLI and proto/ reach it through the `util` CMake target.
 */
#ifndef TRACECTL_UTIL_H
#define TRACECTL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* The number of elements of an array (not a pointer). */
#define UTIL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* a + b, or UINT64_MAX when the sum does not fit: a saturated total stays saturated. */
static inline uint64_t util_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/*
 * Makes room for element n of arr, an array of *cap elements of size bytes:
 * when n >= *cap, doubles *cap (16 at first) with realloc. Returns the array
 * (moved, maybe; arr itself when there was room), or NULL with arr and *cap
 * untouched when out of memory or past SIZE_MAX bytes.
 */
static inline void *util_grow(void *arr, size_t *cap, size_t n, size_t size)
{
    size_t ncap;
    void *p;

    if (n < *cap)
        return arr;
    ncap = *cap > 0 ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / size)
        return NULL;
    p = realloc(arr, ncap * size);
    if (p != NULL)
        *cap = ncap;
    return p;
}

/*
 * The time ms milliseconds from now on clock (CLOCK_REALTIME, or the clock a
 * condition variable was set to wait on): the deadline pthread_cond_timedwait
 * and poll loops take.
 */
static inline struct timespec util_deadline_in(clockid_t clock, uint64_t ms)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

#endif
