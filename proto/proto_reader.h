/*
 * proto_reader — the streaming reader: bytes in as they arrive, one owned
 * message out at a time (proto.h describes the three outcomes). Part of the
 * public umbrella proto.h, which includes it; a reader belongs to one thread.
 */
#ifndef TRACECTL_PROTO_READER_H
#define TRACECTL_PROTO_READER_H

#include "proto.h"

struct onepass_inc;

#define PROTO_SCAN_DEPTH 32 /* nesting the byte scanner allows (unknown map values included) */

/*
 * The byte scanner's state (see proto_reader_next): msgpack headers are
 * checked as bytes are read, before msgpack-c's unpacker (or the batch
 * decoder) allocates what a header announces.
 */
struct proto_scan {
    uint64_t msg_bytes; /* bytes of the current message so far */
    uint64_t ready;     /* whole messages scanned and not yet taken */
    uint64_t seen;      /* whole messages scanned */
    /* 1 + the number of the first message with an empty container nested
     * PROTO_SCAN_DEPTH deep (0: none): msgpack-c refuses it, so it takes the
     * object-tree path, which says so as the bytes arrive */
    uint64_t deep_msg;
    uint64_t pending;                 /* elements announced by open containers, not started */
    uint64_t skip;                    /* body bytes (str, bin, ext) still to skip */
    uint32_t stack[PROTO_SCAN_DEPTH]; /* remaining elements per open container */
    int depth;
    uint8_t head[9]; /* a multi-byte header being read */
    int head_len, head_need;
    const char *error; /* set once: the stream is bad */
    char message[96];
};

/*
 * Bytes are read when a message is asked for (proto_reader_next), up to the
 * end of the first whole message: a message is taken as soon as it is whole,
 * whatever bytes came after it. A batch (the message producers send at rate)
 * is decoded from the buffered bytes in one pass (proto/onepass.h), entry by
 * entry as its bytes arrive: the scanner reads its header and whatever the
 * decoder cannot take (an entry cut by the end of the bytes, a wrong one),
 * and steps over the entries the decoder took, so that each byte is read
 * once; every other message goes through the scanner, then msgpack-c's
 * object tree. tree, false after init, sends batches that way too: the
 * reference the tests and the fuzzer compare the one-pass decoder against.
 */
struct proto_reader {
    msgpack_unpacker unp;
    msgpack_unpacked res;
    size_t max_msg;
    struct proto_scan scan;
    uint64_t taken; /* messages returned */
    bool tree;
    size_t unscanned; /* bytes at the buffer's end that neither the scanner nor the decoder saw */
    struct onepass_inc *inc; /* the batch at the front, decoded as it arrives (NULL: none yet) */
    int inc_mode;            /* what inc is at (proto_reader.c) */
    size_t last_batch;       /* bytes of the last batch taken: the buffer's room for the next */
    void (*take)(void *ctx, struct proto_batch *b); /* see proto_reader_set_take */
    void *take_ctx;
    size_t slice; /* see proto_reader_set_slice (0: none) */
    int (*check)(void *ctx, const struct proto_batch *b, size_t first, struct proto_error *err);
    void *check_ctx; /* see proto_reader_set_check */
};

/* Returns 0, or -ENOMEM. max_msg 0 means PROTO_MAX_MSG. */
int proto_reader_init(struct proto_reader *r, size_t max_msg);
void proto_reader_deinit(struct proto_reader *r);

/*
 * Where the arrays of a batch decoded as it arrives start (NULL take: fresh
 * ones, the default). As a batch begins, take(ctx, b) is called with b's
 * arrays NULL, b->cap and b->blob_cap what the reader's last batch needed
 * (0 for the first), and may set b's entries and blob to malloc'd arrays
 * with room for b->cap entries and b->blob_cap bytes (either may be NULL, its
 * room then ignored; less room than asked is fine), which the reader then owns: it fills
 * them, grows them with realloc when the batch needs more, and the batch
 * returned has them (its cap and blob_cap say how much room they have), so
 * a caller can hand the arrays of spent batches back for the next ones
 * instead of faulting fresh pages in. take is called on the reader's thread.
 */
void proto_reader_set_take(struct proto_reader *r, void (*take)(void *ctx, struct proto_batch *b),
                           void *ctx);

/*
 * Bounds what one batch costs decoded, not only its bytes: a batch whose
 * list holds more than n entries is returned in slices, each a PROTO_BATCH
 * message of at most n entries (the next on each call, in order; together
 * the batch), instead of at once. Such a batch is taken once its bytes are
 * all buffered, and every entry is checked before the first slice is
 * returned: a bad entry anywhere fails the batch (the usual negative errno,
 * and the same words) with no slice of it returned. A minimal entry is 5
 * bytes on the wire and sizeof(struct proto_entry) decoded, so the message
 * limit alone lets one batch cost 16 times its bytes. 0 (the default): a
 * batch is returned whole.
 */
void proto_reader_set_slice(struct proto_reader *r, size_t n);

/*
 * What the caller checks of every entry of a batch read in slices, before
 * its first slice is returned (so that a batch the caller would refuse for
 * an entry is refused whole too): check(ctx, b, first, err) is called on
 * consecutive parts b of the batch, whose entries are the batch's from
 * `first` on, during proto_reader_next(); it returns 0, or a negative errno
 * with *err filled, which proto_reader_next() then returns (the stream is
 * unusable, as on any error). NULL (the default): no check.
 */
void proto_reader_set_check(struct proto_reader *r,
                            int (*check)(void *ctx, const struct proto_batch *b, size_t first,
                                         struct proto_error *err),
                            void *ctx);

/*
 * Where to put up to `want` more bytes: returns a pointer with at least
 * `want` bytes of room, or NULL (out of memory). Follow with
 * proto_reader_commit(r, n) for the n bytes actually written. When the
 * buffer must grow, it grows at once to hold a message as large as the last
 * batch (never more than that batch's bytes plus `want`), so that a batch's
 * bytes are moved at most once as they arrive, not with each doubling.
 */
char *proto_reader_buffer(struct proto_reader *r, size_t want);
void proto_reader_commit(struct proto_reader *r, size_t n);

/*
 * Decodes the next message that arrived.
 * Returns 1 and fills *m (free with proto_msg_free), 0 when more bytes are
 * needed, or a negative errno and fills *err (the stream is then unusable:
 * reply with the error and close). Producer, control and reply messages are all accepted;
 * the caller checks that the type fits its side of the conversation.
 */
int proto_reader_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err);

/*
 * For readers of generic replies (the CLI): the next whole msgpack object,
 * borrowed from the reader and valid until the next call. Same returns.
 */
int proto_reader_next_object(struct proto_reader *r, const msgpack_object **obj,
                             struct proto_error *err);

#endif
