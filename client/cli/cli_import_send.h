/*
 * cli_import_send — the producer side of `tracectl import`: one connection
 * to the daemon per imported file, speaking PROTOCOL.md's producer messages
 * (hello, ops, batch, meta, flush, bye) with blocking writes.
 *
 * Lifecycle: import_send_open() (hello → welcome), then any number of
 * import_send_op() / import_send_entry() / import_send_meta(), then either
 * import_send_flush() (flush → ack) and, possibly later, import_send_bye()
 * (the process ends cleanly), or import_send_abandon() (the file could not
 * be read to its end: no bye, see there), and always import_send_close().
 *
 * Errors: every function returns 0 or a negative errno; the first error is
 * kept in s->err with a one-line reason in s->errmsg (including the
 * daemon's error code and message when it sent one), and every later call
 * is then a no-op returning that error. Single-threaded.
 */
#ifndef TRACECTL_CLI_IMPORT_SEND_H
#define TRACECTL_CLI_IMPORT_SEND_H

#include <stdbool.h>
#include <stdint.h>

#include <msgpack.h>

#include "cli_import_intern.h"
#include "proto.h"

#define IMPORT_BATCH 4096 /* entries per batch message */

struct import_send {
    int fd;
    struct proto_reader reader;
    bool reader_ok;        /* reader initialised */
    msgpack_sbuffer batch; /* the entries of the batch being built, without its header */
    msgpack_packer bpk;
    size_t n_batch;
    struct intern ops; /* op names defined on this connection: id = index + 1 */
    uint64_t sent;     /* entries sent (or buffered) */
    int64_t session_id, process_id;
    int err;
    char errmsg[256];
};

/*
 * Connects to sock, sends h and waits for welcome. Returns 0, -ENOENT or
 * -ECONNREFUSED (no daemon), or another negative errno. Call
 * import_send_close() in every case.
 */
int import_send_open(struct import_send *s, const char *sock, const struct proto_hello *h);

/*
 * The connection's op id of name (defining it with category, which may be
 * NULL, when new). Returns the id (≥ 1) or 0 on error.
 */
uint32_t import_send_op(struct import_send *s, const char *name, const char *category);

/*
 * Adds one entry to the current batch (sent when IMPORT_BATCH entries are
 * buffered). mem_bytes 0 is sent as nil; in_shapes is a packed msgpack
 * array of arrays (in_len bytes) or NULL; device may be NULL; stream ≥ 0 is
 * sent in the entry's ext map (-1: none), and so is launcher, the op id of
 * the CPU op that launched it (0: none), and span_ns, the entry's whole
 * interval when dur_ns is its self time (0: none). Returns 0 or the error.
 */
int import_send_entry(struct import_send *s, uint32_t op, uint64_t step, uint64_t start_ns,
                      uint64_t dur_ns, uint64_t span_ns, uint64_t mem_bytes, const char *in_shapes,
                      size_t in_len, const char *device, int64_t stream, uint32_t launcher);

/* Sends one metadata pair (after the entries buffered so far). Returns 0 or the error. */
int import_send_meta(struct import_send *s, const struct proto_kv *kv);

/*
 * Sends the last batch and a flush, and waits for its ack, which must count
 * every entry sent. Returns 0 or the error.
 */
int import_send_flush(struct import_send *s);

/*
 * Sends bye with dropped 0 and waits for the daemon to close the
 * connection, so that the process has ended (and its session, when it was
 * the last process of a complete session) when this returns. Returns 0 or
 * the error.
 */
int import_send_bye(struct import_send *s);

/*
 * The file could not be read to its end: sends the entries buffered so far,
 * then meta {"import.incomplete": true, "import.error": why}, and no bye, so
 * that the daemon records the process as ended without bye and its
 * metadata marks it incomplete. Best effort (the connection may be gone).
 */
void import_send_abandon(struct import_send *s, const char *why);

/* Closes the connection and frees what s holds. */
void import_send_close(struct import_send *s);

#endif
