/*
 * proto_reader.c — the streaming reader (proto_reader.h): bytes in, one
 * owned message out; a batch decoded entry by entry as its bytes arrive.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onepass.h"
#include "proto_field.h"
#include "proto_reader.h"
#include "proto_scan.h"

#define READ_CHUNK (4u << 10) /* initial per connection: it grows with the message */

int proto_reader_init(struct proto_reader *r, size_t max_msg)
{
    memset(r, 0, sizeof(*r));
    r->max_msg = max_msg ? max_msg : PROTO_MAX_MSG;
    if (!msgpack_unpacker_init(&r->unp, READ_CHUNK))
        return -ENOMEM;
    msgpack_unpacked_init(&r->res);
    return 0;
}

void proto_reader_deinit(struct proto_reader *r)
{
    if (r->inc != NULL) {
        onepass_inc_free(r->inc);
        free(r->inc);
    }
    msgpack_unpacked_destroy(&r->res);
    msgpack_unpacker_destroy(&r->unp);
}

void proto_reader_set_take(struct proto_reader *r, void (*take)(void *ctx, struct proto_batch *b),
                           void *ctx)
{
    r->take = take;
    r->take_ctx = ctx;
}

void proto_reader_set_slice(struct proto_reader *r, size_t n)
{
    r->slice = n;
}

void proto_reader_set_check(struct proto_reader *r,
                            int (*check)(void *ctx, const struct proto_batch *b, size_t first,
                                         struct proto_error *err),
                            void *ctx)
{
    r->check = check;
    r->check_ctx = ctx;
}

char *proto_reader_buffer(struct proto_reader *r, size_t want)
{
    size_t have = r->unp.used - r->unp.off, room = want;

    if (msgpack_unpacker_buffer_capacity(&r->unp) >= want)
        return msgpack_unpacker_buffer(&r->unp);
    /*
     * msgpack-c moves the bytes buffered into a new buffer when it lacks
     * room, then doubles that one read after read: a 200 KiB batch was
     * copied about twice over as it arrived. Room at once for the rest of a
     * message as large as the last batch (a peer's batches are alike).
     */
    if (r->last_batch > have && r->last_batch - have > room)
        room = r->last_batch - have;
    if (!msgpack_unpacker_reserve_buffer(&r->unp, room))
        return NULL;
    return msgpack_unpacker_buffer(&r->unp);
}

void proto_reader_commit(struct proto_reader *r, size_t n)
{
    /* The new bytes are the last n of the buffer: scanned (or decoded) when asked for. */
    msgpack_unpacker_buffer_consumed(&r->unp, n);
    r->unscanned += n;
}

static const struct proto_scan_stop stop_ready = {true, 0, 0};

/* The scanner reads the bytes no one saw yet, up to where st says. */
static void reader_scan(struct proto_reader *r, const struct proto_scan_stop *st)
{
    const uint8_t *p = (const uint8_t *)r->unp.buffer + r->unp.used - r->unscanned;

    r->unscanned -= proto_scan_bytes(&r->scan, p, r->unscanned, r->max_msg, st);
}

static int reader_scan_fail(struct proto_reader *r, struct proto_error *err)
{
    return proto_fail(err, r->scan.error, "%s", r->scan.message);
}

/* No whole message yet: 0, or an error when the bytes buffered are over the limit already. */
static int reader_more(struct proto_reader *r, struct proto_error *err)
{
    if (msgpack_unpacker_message_size(&r->unp) > r->max_msg)
        return proto_fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit",
                          r->max_msg);
    return 0;
}

int proto_reader_next_object(struct proto_reader *r, const msgpack_object **obj,
                             struct proto_error *err)
{
    /* parsed + (off delta) is the size of the message just completed. */
    size_t before = r->unp.parsed, off0 = r->unp.off, size;

    /* the scanner sees the bytes first, up to the end of the message */
    if (r->scan.error == NULL)
        reader_scan(r, &stop_ready);
    if (r->scan.error != NULL)
        return reader_scan_fail(r, err);

    switch (msgpack_unpacker_next(&r->unp, &r->res)) {
    case MSGPACK_UNPACK_SUCCESS:
        r->scan.ready--; /* the scanner saw it end too */
        r->taken++;
        size = before + (r->unp.off - off0);
        if (size > r->max_msg)
            return proto_fail(err, PROTO_E_TOO_LARGE,
                              "a message of %zu bytes is over the %zu-byte limit", size,
                              r->max_msg);
        *obj = &r->res.data;
        return 1;
    case MSGPACK_UNPACK_CONTINUE:
        /* Bound the message as bytes arrive: msgpack-c would grow its buffer forever. */
        if (msgpack_unpacker_message_size(&r->unp) > r->max_msg)
            return proto_fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit",
                              r->max_msg);
        return 0;
    case MSGPACK_UNPACK_NOMEM_ERROR:
        return proto_fail(err, PROTO_E_TOO_LARGE, "a message announces more elements than allowed");
    default:
        return proto_fail(err, PROTO_E_MSGPACK, "bytes are not valid msgpack");
    }
}

static bool reader_sliced(struct proto_reader *r, const uint8_t *p, size_t n);
static int reader_slice_start(struct proto_reader *r, struct proto_msg *m, struct proto_error *err);
static int reader_slice_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err);

/*
 * A batch at the front of the buffer: decoded in one pass from the bytes once
 * the scanner has seen the whole message, and stepped over in the unpacker's
 * buffer (whose parser has not started on it: parsed is 0). The same returns
 * and the same checks, in the same order, as the object-tree path.
 */
static int reader_next_batch(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const uint8_t *p = (const uint8_t *)r->unp.buffer + r->unp.off;
    size_t n = r->unp.used - r->unp.off, size = 0;
    int rc;

    memset(m, 0, sizeof(*m));
    if (r->scan.ready == 0) {
        if (n > r->max_msg)
            return proto_fail(err, PROTO_E_TOO_LARGE, "a message is over the %zu-byte limit",
                              r->max_msg);
        return 0;
    }
    if (reader_sliced(r, p, n))
        return reader_slice_start(r, m, err);
    rc = onepass_batch(p, n, &m->u.batch, &size, err);
    /* Only a message that has more bytes buffered than the limit can be over it. */
    if (rc < 0 && n > r->max_msg)
        size = onepass_skip(p, n);
    if (size > r->max_msg) {
        proto_batch_free(&m->u.batch);
        return proto_fail(err, PROTO_E_TOO_LARGE,
                          "a message of %zu bytes is over the %zu-byte limit", size, r->max_msg);
    }
    if (rc < 0)
        return rc;
    m->type = PROTO_BATCH;
    r->unp.off += size; /* msgpack-c's parser resumes after it */
    r->last_batch = size;
    r->scan.ready--;
    r->taken++;
    return 1;
}

/* ---- a batch decoded as it arrives ------------------------------------------ */

/*
 * The batch at the front of the buffer is decoded entry by entry as its
 * bytes arrive, and the scanner steps over what the decoder took (the
 * decoder makes the scanner's checks on them: see onepass_inc_step), so the
 * bytes of a batch are read once. inc_mode says who is at the message:
 */
enum {
    INC_NONE,  /* no batch under way (scanner and msgpack-c, or onepass_batch() whole) */
    INC_FAST,  /* the decoder is at entry inc->b.n; the scanner's state is behind */
    INC_TAIL,  /* the scanner reads entry inc->b.n (not whole when the decoder met it) */
    INC_SCAN,  /* the scanner reads the message to its end, then the decoder finishes it */
    INC_SLICE, /* a batch read whole and checked, returned a slice at a time (reader_slice_next) */
};

static const uint8_t *reader_front(const struct proto_reader *r)
{
    return (const uint8_t *)r->unp.buffer + r->unp.off;
}

static size_t reader_avail(const struct proto_reader *r)
{
    return r->unp.used - r->unp.off;
}

/*
 * The scanner's state at the start of entry inc->b.n (after the list when
 * every entry is decoded), as if it had read every byte of the message before:
 * the decoder took them whole, with the scanner's checks.
 */
static void reader_scan_at_entry(struct proto_reader *r)
{
    const struct onepass_inc *s = r->inc;
    struct proto_scan *sc = &r->scan;
    uint64_t left = s->n - s->b.n; /* entries not started */

    sc->msg_bytes = s->pos;
    if (left > 0) {
        sc->depth = 2;
        sc->stack[0] = s->top_n - 1; /* "batch" is whole, the list is under way */
        sc->stack[1] = (uint32_t)left;
    } else {
        sc->depth = 1;
        sc->stack[0] = s->top_n - 2;
    }
    sc->pending = left + (s->top_n - 2);
    sc->skip = 0;
    sc->head_len = sc->head_need = 0;
    r->unscanned = reader_avail(r) - s->pos;
}

/* The batch is whole and decoded: moves it to *m and steps over it. */
static int reader_inc_take(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    size_t avail = reader_avail(r), len = 0;
    int rc;

    r->inc_mode = INC_NONE;
    if ((rc = onepass_inc_finish(r->inc, reader_front(r), avail, &m->u.batch, &len, err)) < 0)
        return rc;
    if (len > r->max_msg) { /* the scanner's bounds make it impossible: checked all the same */
        proto_batch_free(&m->u.batch);
        return proto_fail(err, PROTO_E_TOO_LARGE,
                          "a message of %zu bytes is over the %zu-byte limit", len, r->max_msg);
    }
    m->type = PROTO_BATCH;
    r->unp.off += len; /* msgpack-c's parser resumes after it */
    r->last_batch = len;
    if (r->scan.ready > 0) {
        r->scan.ready--; /* the scanner read it to its end */
    } else {
        /* the decoder read it to its end: the scanner is at the next message */
        r->scan.msg_bytes = r->scan.pending = r->scan.skip = 0;
        r->scan.depth = r->scan.head_len = r->scan.head_need = 0;
        r->scan.seen++;
        r->unscanned = avail - len;
    }
    r->taken++;
    return 1;
}

/*
 * A batch starts at the front of the buffer and no byte of it was read: the
 * scanner reads its header, then the decoder takes over. Returns 1 (INC_FAST
 * from now), 0 (bytes are missing, or nothing for this path: *path 0) or a
 * negative errno.
 */
static int reader_inc_start(struct proto_reader *r, bool *path, struct proto_error *err)
{
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r);
    int hl = 0;

    *path = false;
    switch (onepass_kind(p, avail)) {
    case ONEPASS_BATCH:
        if (r->inc == NULL && (r->inc = calloc(1, sizeof(*r->inc))) == NULL)
            return 0; /* the whole-message path needs none */
        if ((hl = onepass_inc_begin(r->inc, p, avail)) < 0)
            return 0;
        if (hl > 0 && r->slice != 0 && r->inc->n > r->slice)
            return 0; /* taken whole, in slices: reader_slice_start */
        break;
    case ONEPASS_MORE:
        break;
    default:
        return 0;
    }
    *path = true;
    if (hl == 0) {
        /* the first few bytes of a batch: what the scanner says of them, without keeping it */
        struct proto_scan save = r->scan;
        size_t k = proto_scan_bytes(&r->scan, p, avail, r->max_msg, &stop_ready);
        if (r->scan.error != NULL)
            return reader_scan_fail(r, err);
        if (r->scan.ready > 0) { /* whole after all: the usual path takes it (cannot happen) */
            r->unscanned -= k;
            *path = false;
            return 0;
        }
        r->scan = save;
        return reader_more(r, err);
    }
    r->unscanned -= proto_scan_bytes(&r->scan, p, (size_t)hl, r->max_msg, NULL);
    if (r->scan.error != NULL)
        return reader_scan_fail(r, err);
    if (r->take != NULL && r->inc->b.entries == NULL && r->inc->b.blob == NULL) {
        struct proto_batch *b = &r->inc->b;

        b->cap = r->inc->last_n; /* what the last batch needed: a hint */
        b->blob_cap = r->inc->last_blob;
        r->take(r->take_ctx, b);
        if (b->entries == NULL)
            b->cap = 0;
        if (b->blob == NULL)
            b->blob_cap = 0;
    }
    r->inc_mode = INC_FAST;
    return 1;
}

static int reader_tree_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err);

/*
 * The scanner saw the batch under way fill msgpack-c's stack (deep_msg):
 * msgpack-c refuses it as soon as it reads that far, whole or not, so it
 * goes to the object tree at once, for the words every such message gets.
 */
static bool reader_inc_deep(const struct proto_reader *r)
{
    return r->scan.deep_msg == r->taken + 1;
}

static int reader_inc_to_tree(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    onepass_inc_free(r->inc);
    r->inc_mode = INC_NONE;
    return reader_tree_next(r, m, err);
}

/* The batch under way (inc_mode not INC_NONE), as far as the bytes go. proto_reader_next's returns.
 */
static int reader_inc_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    struct onepass_inc *s = r->inc;
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r), whole = SIZE_MAX, stopped = SIZE_MAX;
    int rc;

    for (;;) {
        if (r->inc_mode == INC_TAIL) {
            struct proto_scan_stop st = {false, 2, (uint32_t)(s->n - s->b.n)};
            reader_scan(r, &st);
            if (r->scan.error != NULL)
                return reader_scan_fail(r, err);
            if (reader_inc_deep(r))
                return reader_inc_to_tree(r, m, err);
            if (!proto_scan_stopped(&r->scan, &st))
                return reader_more(r, err);
            /* the entry is whole: wrong when the decoder stopped at it with these bytes */
            whole = s->b.n;
            r->inc_mode = whole == stopped ? INC_SCAN : INC_FAST;
        }
        if (r->inc_mode == INC_FAST) {
            if (onepass_inc_step(s, p, avail, r->max_msg, true, NULL) == ONEPASS_DONE) {
                if (s->top_n == 2)
                    return reader_inc_take(r, m, err);
                reader_scan_at_entry(r); /* elements after the list: the scanner reads them */
                r->inc_mode = INC_SCAN;
            } else if (s->b.n == whole) {
                r->inc_mode = INC_SCAN; /* the scanner is past that entry already */
            } else {
                reader_scan_at_entry(r);
                stopped = s->b.n;
                r->inc_mode = INC_TAIL;
                continue;
            }
        }
        /* INC_SCAN: the scanner reads to the message's end, then the decoder finishes */
        reader_scan(r, &stop_ready);
        if (r->scan.error != NULL)
            return reader_scan_fail(r, err);
        if (reader_inc_deep(r))
            return reader_inc_to_tree(r, m, err);
        if (r->scan.ready == 0)
            return reader_more(r, err);
        if ((rc = onepass_inc_step(s, p, avail, r->max_msg, false, err)) < 0) {
            onepass_inc_free(s);
            r->inc_mode = INC_NONE;
            return rc;
        }
        return reader_inc_take(r, m, err);
    }
}

/* ---- a batch of more entries than a slice ----------------------------------- */

/*
 * A batch whose list holds more than r->slice entries (proto_reader_set_slice)
 * is not decoded as it arrives: the scanner reads it to its end, every entry
 * is checked (decoded SLICE_CHECK at a time into arrays reused for each part,
 * then freed), so that a bad entry fails the batch before any of it is
 * returned, as for every other batch; then each call decodes and returns the
 * next slice (INC_SLICE), the last one stepping over the message. What the
 * batch costs decoded at any time is so one slice here, and the slices the
 * caller holds (the daemon stops asking while its queue is over its budget).
 */
#define SLICE_CHECK 1024

/* True when the batch at p[0..n) (whole: the scanner saw it end) is one to slice. */
static bool reader_sliced(struct proto_reader *r, const uint8_t *p, size_t n)
{
    struct onepass_inc head = {0};

    return r->slice != 0 && onepass_inc_begin(&head, p, n) > 0 && head.n > r->slice;
}

/*
 * Checks every entry of the batch at the front (and has the caller check
 * them: proto_reader_set_check) and what follows its list: 0, or an error.
 */
static int reader_slice_check(struct proto_reader *r, struct proto_error *err)
{
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r), len = 0;
    struct onepass_inc s = {0};
    struct proto_batch rest;
    int rc = 0;

    onepass_inc_begin(&s, p, avail);
    s.slice = SLICE_CHECK;
    do {
        if ((rc = onepass_inc_step(&s, p, avail, r->max_msg, false, err)) < 0 ||
            (r->check != NULL && (rc = r->check(r->check_ctx, &s.b, s.base, err)) < 0)) {
            onepass_inc_free(&s);
            return rc;
        }
    } while (!onepass_inc_cut(&s, NULL));
    if ((rc = onepass_inc_finish(&s, p, avail, &rest, &len, err)) < 0)
        return rc;
    proto_batch_free(&rest);
    return 0;
}

/* The batch at the front is whole and one to slice: checks it, then returns its first slice. */
static int reader_slice_start(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    int rc;

    if ((rc = reader_slice_check(r, err)) < 0)
        return rc;
    if (r->inc == NULL && (r->inc = calloc(1, sizeof(*r->inc))) == NULL)
        return proto_fail(err, PROTO_E_INTERNAL, "out of memory");
    onepass_inc_begin(r->inc, reader_front(r), reader_avail(r));
    r->inc->slice = (uint32_t)r->slice;
    r->inc_mode = INC_SLICE;
    return reader_slice_next(r, m, err);
}

/* The next slice of the batch at the front (INC_SLICE), the last one stepping over the message. */
static int reader_slice_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    struct onepass_inc *s = r->inc;
    const uint8_t *p = reader_front(r);
    size_t avail = reader_avail(r), len = 0, left = s->n - s->base;
    int rc;

    if (r->take != NULL) {
        s->b.cap = left < s->slice ? left : s->slice;
        s->b.blob_cap = s->last_blob;
        r->take(r->take_ctx, &s->b);
        if (s->b.entries == NULL)
            s->b.cap = 0;
        if (s->b.blob == NULL)
            s->b.blob_cap = 0;
    }
    /* checked already: only memory can fail */
    if ((rc = onepass_inc_step(s, p, avail, r->max_msg, false, err)) < 0)
        goto fail;
    m->type = PROTO_BATCH;
    if (s->base + s->b.n < s->n) {
        onepass_inc_cut(s, &m->u.batch);
        return 1;
    }
    r->inc_mode = INC_NONE;
    if ((rc = onepass_inc_finish(s, p, avail, &m->u.batch, &len, err)) < 0)
        return rc;
    r->unp.off += len; /* msgpack-c's parser resumes after it */
    r->last_batch = len;
    r->scan.ready--;
    r->taken++;
    return 1;
fail:
    onepass_inc_free(s);
    r->inc_mode = INC_NONE;
    memset(m, 0, sizeof(*m));
    return rc;
}

/* A message through msgpack-c's object tree. */
static int reader_tree_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const msgpack_object *o = NULL;
    int rc = proto_reader_next_object(r, &o, err);

    if (rc <= 0)
        return rc;
    rc = proto_decode(o, m, err);
    rc = rc < 0 ? rc : 1;
    /* Release the zone now: the message was copied into owned memory. */
    msgpack_unpacked_destroy(&r->res);
    msgpack_unpacked_init(&r->res);
    return rc;
}

int proto_reader_next(struct proto_reader *r, struct proto_msg *m, struct proto_error *err)
{
    const struct proto_scan *sc = &r->scan;
    bool path;
    int rc;

    memset(m, 0, sizeof(*m));
    if (sc->error != NULL)
        return reader_scan_fail(r, err);
    if (r->inc_mode == INC_SLICE)
        return reader_slice_next(r, m, err);
    if (r->inc_mode != INC_NONE)
        return reader_inc_next(r, m, err);
    /* a message starts at the front, and no byte of it was read */
    if (!r->tree && r->unp.parsed == 0 && sc->ready == 0 && sc->depth == 0 && sc->head_need == 0 &&
        sc->skip == 0 && r->unscanned == reader_avail(r) && r->unscanned > 0) {
        rc = reader_inc_start(r, &path, err);
        if (rc == 1)
            return reader_inc_next(r, m, err);
        if (path || rc < 0)
            return rc;
    }
    /* every other message: the scanner reads it to its end first */
    reader_scan(r, &stop_ready);
    if (sc->error == NULL && !r->tree && r->unp.parsed == 0 && sc->deep_msg != r->taken + 1) {
        switch (onepass_kind(reader_front(r), reader_avail(r))) {
        case ONEPASS_BATCH:
            return reader_next_batch(r, m, err);
        case ONEPASS_MORE:
            /* A few bytes that may start a batch: msgpack-c may not start on them. */
            return reader_more(r, err);
        default:
            break;
        }
    }
    return reader_tree_next(r, m, err);
}
