/*
 * cli_json — writes a msgpack object as JSON text (RFC 8259).
 *
 * Used by every `--json` output of the CLI and meant to be reused by export.
 * It walks a borrowed msgpack_object and writes to a stdio stream; it owns
 * nothing and keeps no state, so it is reentrant. Output is compact (no
 * insignificant whitespace) and always valid JSON, whatever the input:
 *
 *   nil          null
 *   bool         true / false
 *   int          the exact decimal value, negative or up to UINT64_MAX
 *   float        the shortest text that reads back to the same value
 *                (at most 17 significant digits; 9 for float32). An
 *                integral float keeps a ".0" (0.0, 3.0, 1e+300 stays as is)
 *                so a JSON reader still sees a float. NaN and ±infinity,
 *                which JSON cannot express, become null.
 *   str          a JSON string: '"' and '\' escaped, every control
 *                character U+0000..U+001F as \u00XX, valid UTF-8 copied
 *                through unchanged, each byte of invalid UTF-8 replaced by
 *                \ufffd.
 *   bin          a string holding the bytes in base64 (RFC 4648, padded).
 *   ext          {"ext": <type>, "data": "<base64>"}.
 *   array        an array.
 *   map          an object; a string key is used as is, any other key is
 *                first written as JSON and that text becomes the key
 *                (integer key 5 → "5", nil → "null").
 *
 * The decimal point is always '.' because the CLI never calls setlocale()
 * for LC_NUMERIC.
 */
#ifndef TRACECTL_CLI_JSON_H
#define TRACECTL_CLI_JSON_H

#include <stddef.h>
#include <stdio.h>

#include <msgpack.h>

/* Deepest nesting written; msgpack-c's unpacker stops well before this. */
#define CLI_JSON_MAX_DEPTH 64

/*
 * Writes o as one JSON value, without a trailing newline.
 * Returns 0, -EINVAL when o nests deeper than CLI_JSON_MAX_DEPTH (what was
 * written so far stays written), -ENOMEM, or -EIO when the stream reports
 * an error. o must not be NULL.
 */
int cli_json_write(FILE *f, const msgpack_object *o);

/* As cli_json_write, then a newline: one whole JSON document. */
int cli_json_write_doc(FILE *f, const msgpack_object *o);

/* Writes s[0..n) as a JSON string with the escaping above. Returns 0 or -EIO. */
int cli_json_write_str(FILE *f, const char *s, size_t n);

#endif
