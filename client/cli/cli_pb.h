/*
 * cli_pb — a minimal protocol-buffers writer for `tracectl export --format
 * perfetto`.
 *
 * Why not protobuf-c or libprotobuf: the Perfetto exporter writes a handful
 * of fields of a few messages (TracePacket, TrackDescriptor, TrackEvent,
 * DebugAnnotation, InternedData), and the wire format of those is two
 * encodings: varints and length-delimited bytes. Forty lines of C are less
 * to build, package and audit than a code generator and a runtime library.
 *
 * A struct cli_pb is one growable buffer in the caller's memory. Scalars are
 * appended as they come. A nested message is opened with cli_pb_begin(),
 * which writes its tag and reserves CLI_PB_LEN_BYTES for its length, and
 * closed with cli_pb_end(), which patches the length in as a padded varint
 * (0x80 continuation bytes). Padded varints are valid protobuf (every parser
 * accepts up to 10 bytes); Perfetto's own protozero writer does the same, so
 * a message is written in one pass without knowing its size in advance. One
 * nested message is therefore limited to 2^28 - 1 bytes.
 *
 * Errors are sticky: after an allocation failure every call is a no-op and
 * cli_pb_error() returns -ENOMEM, so callers check once per message.
 * Not thread-safe; no globals.
 */
#ifndef TRACECTL_CLI_PB_H
#define TRACECTL_CLI_PB_H

#include <stddef.h>
#include <stdint.h>

#define CLI_PB_LEN_BYTES 4
#define CLI_PB_MAX_NEST  ((size_t)1 << (7 * CLI_PB_LEN_BYTES))

struct cli_pb {
    uint8_t *buf;
    size_t len, cap;
    int err; /* 0 or -ENOMEM / -EMSGSIZE, sticky */
};

/* Initializes an empty writer (no allocation yet). */
void cli_pb_init(struct cli_pb *pb);
/* Frees the buffer; the writer may be initialized again. */
void cli_pb_deinit(struct cli_pb *pb);
/* Empties the buffer (keeps its memory) and clears the error. */
void cli_pb_reset(struct cli_pb *pb);
/* 0, or the first error since the last reset: -ENOMEM, or -EMSGSIZE (a nested message too big). */
int cli_pb_error(const struct cli_pb *pb);

/* Field `field` as a varint (uint32/64, int32/64 ≥ 0, bool, enum). */
void cli_pb_uint(struct cli_pb *pb, uint32_t field, uint64_t v);
/* An int32/int64 field (negative values take 10 bytes, as protobuf specifies). */
void cli_pb_int(struct cli_pb *pb, uint32_t field, int64_t v);
/* A string or bytes field: s[0..n). */
void cli_pb_bytes(struct cli_pb *pb, uint32_t field, const void *s, size_t n);

/*
 * Opens a nested message in field `field`. Returns a token to pass to
 * cli_pb_end() once the message's fields are written.
 */
size_t cli_pb_begin(struct cli_pb *pb, uint32_t field);
void cli_pb_end(struct cli_pb *pb, size_t token);

#endif
