/*
 * onepass — the batch message decoded straight from its msgpack bytes.
 *
 * A batch is the one message a producer sends at rate, so the reader
 * (proto_reader.c) hands it here instead of building msgpack-c's object tree and
 * walking that: one pass over the bytes fills the same struct proto_batch
 * (entries, and the blob of canonical shapes, device names and ext maps, byte
 * for byte what proto_decode() builds), with the same checks in the same
 * order, hence the same error codes and messages. Other messages keep the
 * object-tree path.
 *
 * The bytes come after the byte scanner (proto_scan.h): they hold one complete
 * message whose headers were bounded before anything was allocated, so a
 * count read here is already known to fit in the message. The reader is
 * still bounds-checked: bytes that end early give bad_msgpack, never a read
 * past them.
 *
 * Internal to proto/ (proto.c, proto_reader.c, the unit tests and the fuzzer include it);
 * pure functions over bytes, reentrant.
 */
#ifndef TRACECTL_ONEPASS_H
#define TRACECTL_ONEPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

enum onepass_kind {
    ONEPASS_OTHER, /* not a batch: the object-tree path */
    ONEPASS_BATCH, /* an array whose first element is the string "batch" */
    ONEPASS_MORE,  /* too few bytes to tell */
};

/* What the message starting at p[0..n) is, from its first few bytes (at most 11). */
enum onepass_kind onepass_kind(const uint8_t *p, size_t n);

/*
 * Decodes the batch message at the start of p[0..n) (onepass_kind() said
 * ONEPASS_BATCH and the message is complete within n bytes) into *b.
 * Returns 0 and sets *len to the message's size in bytes, or a negative
 * errno with *err filled as proto_decode() would (err may be NULL) and *b
 * left empty. On success the caller frees b with proto_batch_free().
 */
int onepass_batch(const uint8_t *p, size_t n, struct proto_batch *b, size_t *len,
                  struct proto_error *err);

/* The size of the msgpack object at p[0..n), or 0 when it does not end within n bytes. */
size_t onepass_skip(const uint8_t *p, size_t n);

/*
 * A batch decoded entry by entry as its bytes arrive (the reader's, proto_reader.c):
 * the byte scanner checks the message's header, then the entries that are
 * whole are decoded straight from the buffer and the scanner steps over
 * them (see proto_reader_next). Positions are offsets from the message's
 * first byte.
 */
struct onepass_inc {
    /*
     * b.n: the entries decoded so far; b.cap: entries allocated here, never
     * more than decoded + bytes buffered (arrays the batch started in, see
     * proto_reader_set_take(), may hold more: they were not allocated for it)
     */
    struct proto_batch b;
    uint32_t top_n, n; /* elements of the message; entries announced */
    /*
     * A batch decoded in slices (onepass_inc_cut): base, the entries of the
     * message moved out before b (b.entries[i] is the message's entry
     * base + i); slice, at most that many entries in b (0: no bound)
     */
    uint32_t base, slice;
    size_t pos; /* where entry base + b.n starts (after the last: where the list ends) */
    /* the last batch this reader took whole: what the next one starts with room for */
    size_t last_n, last_blob;
};

/*
 * The header of the batch at p[0..avail) (onepass_kind() said ONEPASS_BATCH):
 * starts *s on it and returns the header's size when it is whole, of at least
 * two elements, and its entries are a non-empty array; 0 when the header is
 * not whole yet; -1 when the batch is not one for this path (onepass_batch()
 * decides it whole).
 */
int onepass_inc_begin(struct onepass_inc *s, const uint8_t *p, size_t avail);

enum onepass_step {
    ONEPASS_DONE, /* every entry decoded (with a slice bound: the slice is full, or that) */
    ONEPASS_STOP, /* entry b.n is not whole in the bytes, or not for the fast path: see below */
};

/*
 * Decodes the entries from s->b.n on, whole in p[0..avail). strict (bytes
 * the scanner has not seen): stops (ONEPASS_STOP) at the first entry that
 * is not whole, that is wrong in any way, that holds a container where the
 * decoder only steps over values (the scanner's nesting rules), or past
 * which the message could no longer fit in max_msg; such an entry leaves no
 * trace in *s. Not strict (the scanner saw the whole message): the answer
 * of onepass_batch(), a negative errno and *err on an error.
 */
int onepass_inc_step(struct onepass_inc *s, const uint8_t *p, size_t avail, size_t max_msg,
                     bool strict, struct proto_error *err);

/*
 * With a slice bound (s->slice), after ONEPASS_DONE: moves the entries
 * decoded so far to *out (free with proto_batch_free) and starts the next
 * slice empty at the next entry; out NULL drops them and keeps the arrays for
 * the next slice. Returns true when every entry of the message is decoded
 * (then onepass_inc_finish() steps over what follows the list, and gives an
 * empty batch).
 */
bool onepass_inc_cut(struct onepass_inc *s, struct proto_batch *out);

/*
 * After ONEPASS_DONE on a message the scanner saw whole (or of two elements):
 * steps over the elements after the entries and moves the batch to *out.
 * Returns 0 and the message's size in *len, or a negative errno and *err.
 */
int onepass_inc_finish(struct onepass_inc *s, const uint8_t *p, size_t avail,
                       struct proto_batch *out, size_t *len, struct proto_error *err);

void onepass_inc_free(struct onepass_inc *s);

#endif
