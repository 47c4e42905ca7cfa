/*
 * cli_utf8 — a strict UTF-8 decoder for the tracectl CLI.
 *
 * The JSON writer (cli_json) and the table renderer (cli_table) both need to
 * walk strings that came off the wire one code point at a time and to tell
 * valid UTF-8 from bytes that are not. This module owns that one rule:
 * RFC 3629 UTF-8, so overlong forms, UTF-16 surrogates (U+D800..U+DFFF) and
 * anything above U+10FFFF are invalid. Pure functions, no state.
 */
#ifndef TRACECTL_CLI_UTF8_H
#define TRACECTL_CLI_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decodes the code point at s[0..n). Returns the number of bytes it takes
 * (1..4) and stores it in *cp, or 0 when s does not start with a complete,
 * valid sequence (the caller then skips one byte). n must be at least 1.
 */
size_t cli_utf8_decode(const char *s, size_t n, uint32_t *cp);

#endif
