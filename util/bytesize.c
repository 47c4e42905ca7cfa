/*
 * bytesize — a SIZE from the command line (see bytesize.h).
 */
#include "bytesize.h"
#include "util.h"

#include <errno.h>
#include <stddef.h>
#include <strings.h>

/* The multiplier of a unit suffix, or 0 when it is not one. */
static uint64_t bytesize_unit(const char *u)
{
    static const struct {
        char letter;
        unsigned shift;
    } units[] = {{'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}};

    if (*u == '\0' || strcasecmp(u, "b") == 0)
        return 1;
    for (size_t i = 0; i < UTIL_ARRAY_LEN(units); i++) {
        if ((u[0] | 0x20) != units[i].letter)
            continue;
        if (u[1] == '\0' || strcasecmp(u + 1, "b") == 0 || strcasecmp(u + 1, "ib") == 0)
            return 1ull << units[i].shift;
    }
    return 0;
}

int bytesize_parse(const char *s, uint64_t *out)
{
    uint64_t v = 0, mult;

    if (*s < '0' || *s > '9')
        return -EINVAL;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');

        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    mult = bytesize_unit(s);
    if (mult == 0)
        return -EINVAL;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *out = v * mult;
    return 0;
}
