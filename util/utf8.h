/*
 * utf8 — the one UTF-8 rule of tracectl: RFC 3629, so overlong forms,
 * UTF-16 surrogates (U+D800..U+DFFF) and anything above U+10FFFF are
 * invalid. The wire format's check (proto_utf8_valid), the CLI's JSON writer
 * and its table renderer all decode with it.
 *
 * Pure functions, no state, no allocation: libtracectl compiles this file
 * into itself.
 */
#ifndef TRACECTL_UTF8_H
#define TRACECTL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decodes the code point at s[0..n). Returns the number of bytes it takes
 * (1..4) and stores it in *cp, or 0 when s does not start with a complete,
 * valid sequence (the caller then skips one byte). NUL is a code point like
 * any other (1 byte, *cp = 0). n must be at least 1.
 */
size_t utf8_decode(const char *s, size_t n, uint32_t *cp);

#endif
