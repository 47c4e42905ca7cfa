/*
 * bytesize — the one grammar of a SIZE given on a command line (tracectld's
 * --max-session-bytes, --max-user-bytes, --retain-bytes; tracectl report's
 * --mem-threshold): digits, optionally followed by a unit K, KB, KiB, M, MB,
 * MiB, G, GB, GiB, T, TB, TiB (any case, all binary: K = 1024) or B. No
 * sign, no spaces, no fraction.
 *
 * A pure function; the daemon and the CLI link it.
 */
#ifndef TRACECTL_BYTESIZE_H
#define TRACECTL_BYTESIZE_H

#include <stdint.h>

/*
 * Parses s as a SIZE. Returns 0 and sets *out, -EINVAL when s is not such a
 * size, -ERANGE when it does not fit in 64 bits (*out is then untouched).
 */
int bytesize_parse(const char *s, uint64_t *out);

#endif
