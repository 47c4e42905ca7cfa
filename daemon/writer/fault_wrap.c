/*
 * fault_wrap.c — test builds: the daemon's own allocations, for fault.h's
 * `own` kind. Linked into the tracectld executable of Debug builds only,
 * with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup
 * (CMakeLists.txt): the linker sends every call the daemon's own objects
 * make to __wrap_X, and __real_X is the C library's X (or the sanitizer's).
 * Calls made inside shared libraries (SQLite, libuv, msgpack-c, the C
 * library itself) are not wrapped. Not part of tracectld_core, so the unit
 * tests that link it allocate as usual.
 */
#include <stddef.h>

#include "fault.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

void *__wrap_malloc(size_t n)
{
    return fault_own() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return fault_own() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fault_own() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fault_own() ? NULL : __real_strdup(s);
}
