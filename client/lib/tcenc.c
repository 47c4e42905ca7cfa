/*
 * tcenc.c — the writer thread's encoder: drains every ring of a client into
 * one ["batch", ...] message at a time, packed in place as msgpack (after
 * the ops and meta queued before it), converting TSC ticks to ns and
 * dropping (and counting) what the daemon would refuse. Writer thread only.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tcint.h"

#define ANCHOR_WIDTH_NS 2000 /* an anchor read more loosely (preempted) is not taken */

/*
 * Re-anchors the conversion (writer thread) when the last anchor is at least
 * TCCLOCK_WINDOW_MIN_NS old, with an anchor read tightly (its rdtsc pair
 * within ANCHOR_WIDTH_NS: not preempted in between; else the next drain tries).
 */
static void clock_reanchor(tc_client *c)
{
    struct tcclock_anchor a;
    uint64_t width;

    if (!c->clock || (double)(tcclock_tsc() - c->tsc.cur.tsc) * c->tsc.rate < TCCLOCK_WINDOW_MIN_NS)
        return;
    a = tcclock_read_anchor(&width);
    if ((double)width * c->tsc.rate <= ANCHOR_WIDTH_NS)
        tcclock_anchor(&c->tsc, a);
}

/*
 * r, a REC_TICKS record of ring, with its start and end converted to ns, in
 * *out. An op that tc_begin ended by beginning the next shares its end tick
 * with the next one's start: that tick converts to the same ns for both,
 * even when a re-anchoring came between their drains (the next op begins
 * exactly when the last one ended, as with clock_gettime). No TSC reads 0
 * in a running process, which wend_tsc's first value stands for.
 */
static const struct rec *rec_convert(const tc_client *c, struct ring *ring, const struct rec *r,
                                     struct rec *out)
{
    uint64_t end_tsc = r->start + r->dur, end = tcclock_ns(&c->tsc, end_tsc);
    uint64_t start = r->start == ring->wend_tsc ? ring->wend_ns : tcclock_ns(&c->tsc, r->start);

    if (end < start)
        end = start; /* ticks read on two cores a hair apart */
    ring->wend_tsc = end_tsc;
    ring->wend_ns = end;
    *out = *r;
    out->start = start;
    out->dur = end - start;
    out->shapes = (uint16_t)(r->shapes & ~REC_TICKS);
    return out;
}

/* Appends v as the shortest msgpack unsigned integer (the encoding msgpack-c emits). */
static char *put_uint(char *p, uint64_t v)
{
    if (v < 128) {
        *p++ = (char)v;
    } else if (v < 256) {
        *p++ = (char)0xcc, *p++ = (char)v;
    } else if (v < 65536) {
        *p++ = (char)0xcd, *p++ = (char)(v >> 8), *p++ = (char)v;
    } else if (v < 4294967296ull) {
        *p++ = (char)0xce;
        for (int s = 24; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    } else {
        *p++ = (char)0xcf;
        for (int s = 56; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    }
    return p;
}

/*
 * The most one entry takes as msgpack: the numbers and the ext map (under
 * 256), a shape pair, a device name with its header.
 */
#define ENTRY_MAX (256 + SHAPE_MAX + 5 + PROTO_MAX_NAME)

/*
 * Room for n more bytes at the end of sb: where they go, or NULL (ENOMEM).
 * The output grows by doubling, its new part faulted in at once (tcring_populate).
 */
static char *sb_room(msgpack_sbuffer *sb, size_t n)
{
    size_t cap = sb->alloc ? sb->alloc : 65536;
    char *data;

    if (sb->alloc - sb->size >= n)
        return sb->data + sb->size;
    while (cap - sb->size < n)
        cap *= 2;
    if ((data = realloc(sb->data, cap)) == NULL)
        return NULL;
    tcring_populate(data + sb->alloc, cap - sb->alloc);
    sb->data = data;
    sb->alloc = cap;
    return data + sb->size;
}

/*
 * One entry as msgpack, [step, op, start, dur, nil, mem, out, in(, device)],
 * written in place at the end of the output (which has room for ENTRY_MAX
 * bytes): field-by-field packer calls cost the writer thread more than the
 * recording threads pay.
 */
static void pack_rec(tc_client *c, msgpack_sbuffer *sb, const struct rec *r, uint64_t step)
{
    char *p = sb->data + sb->size;

    *p++ = (char)(0x90 | (r->dev ? 9 : 8));
    p = put_uint(p, step);
    p = put_uint(p, r->op);
    p = put_uint(p, r->start);
    p = put_uint(p, r->dur);
    *p++ = (char)0xc0; /* elements: the daemon takes the product of out_shape */
    p = put_uint(p, r->mem);
    if (r->shapes == 0) {
        *p++ = (char)0xc0;
        *p++ = (char)0xc0;
    } else {
        const struct shape_pair *sp = &c->shapes[r->shapes - 1];
        memcpy(p, sp->bytes, sp->len);
        p += sp->len;
    }
    if (r->dev) {
        const char *d = c->devs[r->dev - 1];
        size_t n = strlen(d); /* at most PROTO_MAX_NAME: the header as msgpack_pack_str's */

        if (n < 32) {
            *p++ = (char)(0xa0 | n);
        } else if (n < 256) {
            *p++ = (char)0xd9, *p++ = (char)n;
        } else {
            *p++ = (char)0xda, *p++ = (char)(n >> 8), *p++ = (char)n;
        }
        memcpy(p, d, n);
        p += n;
    }
    sb->size = (size_t)(p - sb->data);
}

/* Appends v as the shortest msgpack integer. */
static char *put_int(char *p, int64_t v)
{
    if (v >= 0)
        return put_uint(p, (uint64_t)v);
    if (v >= -32) {
        *p++ = (char)v; /* negative fixint */
    } else if (v >= INT8_MIN) {
        *p++ = (char)0xd0, *p++ = (char)v;
    } else if (v >= INT16_MIN) {
        *p++ = (char)0xd1, *p++ = (char)(v >> 8), *p++ = (char)v;
    } else if (v >= INT32_MIN) {
        *p++ = (char)0xd2;
        for (int s = 24; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    } else {
        *p++ = (char)0xd3;
        for (int s = 56; s >= 0; s -= 8)
            *p++ = (char)((uint64_t)v >> s);
    }
    return p;
}

/* Appends a fixstr key (under 32 bytes). */
static char *put_key(char *p, const char *k)
{
    size_t n = strlen(k);

    *p++ = (char)(0xa0 | n);
    memcpy(p, k, n);
    return p + n;
}

/* How many ext slots follow the REC_EXT record at ring index i: 2, or 3 with a third. */
static unsigned rec_ext_slots(const struct ring *ring, uint64_t i)
{
    const struct rec_ext *x1 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 2) & ring->mask];

    return (x1->w[3] & TC_EXT_THIRD) ? 3 : 2;
}

/* The links of an entry's ext map (id, parent), comm_size and span, from its third slot. */
static char *put_third(char *p, const struct ring *ring, uint64_t i, uint32_t has)
{
    const struct rec_ext *x2 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 3) & ring->mask];

    if (has & TC_EXT_ID) {
        p = put_key(p, "id");
        p = put_uint(p, x2->w[0]);
    }
    if (has & TC_EXT_PARENT) {
        p = put_key(p, "parent");
        p = put_uint(p, x2->w[1]);
    }
    if (has & TC_EXT_COMM_SIZE) {
        p = put_key(p, "comm_size");
        p = put_uint(p, x2->w[2]);
    }
    if (has & TC_EXT_SPAN) {
        p = put_key(p, "span");
        p = put_uint(p, x2->w[3]);
    }
    return p;
}

/*
 * An entry recorded by tc_record_ext, from the record at ring index i and
 * the two slots after it: [step, op, start, dur, elements, mem, out, in,
 * device(, ext)], the ext map only when fields were given (device nil then
 * stands for the hello device).
 */
static void pack_rec_ext(tc_client *c, msgpack_packer *pk, const struct rec *r,
                         const struct ring *ring, uint64_t i, uint64_t step)
{
    const struct rec_ext *x0 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 1) & ring->mask];
    const struct rec_ext *x1 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 2) & ring->mask];
    static const char *const keys[] = {"stream", "peer", "comm", "seq", "checksum"};
    const uint64_t vals[] = {x0->w[1], x0->w[2], x0->w[3], x1->w[0], x1->w[1]};
    static const uint32_t bits[] = {TC_EXT_STREAM, TC_EXT_PEER, TC_EXT_COMM, TC_EXT_SEQ,
                                    TC_EXT_CHECKSUM};
    uint32_t has = (uint32_t)x1->w[3] & TC_EXT_KNOWN, shapes = r->shapes & ~REC_EXT;
    char buf[192], *p = buf;

    *p++ = (char)(0x90 | (has ? 10 : 9));
    p = put_uint(p, step);
    p = put_uint(p, r->op);
    p = put_uint(p, r->start);
    p = put_uint(p, r->dur);
    if (x0->w[0] == TC_ELEMENTS_NONE)
        *p++ = (char)0xc0;
    else
        p = put_uint(p, x0->w[0]);
    p = put_uint(p, r->mem);
    if (shapes == 0) {
        *p++ = (char)0xc0;
        *p++ = (char)0xc0;
    }
    msgpack_sbuffer_write(pk->data, buf, (size_t)(p - buf));
    if (shapes != 0)
        msgpack_sbuffer_write(pk->data, c->shapes[shapes - 1].bytes, c->shapes[shapes - 1].len);
    if (r->dev)
        proto_pack_str(pk, c->devs[r->dev - 1]);
    else
        msgpack_pack_nil(pk);
    if (has == 0)
        return;
    p = buf;
    *p++ = (char)(0x80 | __builtin_popcount(has));
    for (size_t k = 0; k < 5; k++) {
        if (has & bits[k]) {
            p = put_key(p, keys[k]);
            p = put_uint(p, vals[k]);
        }
    }
    if (has & TC_EXT_TAG) {
        p = put_key(p, "tag");
        p = put_int(p, (int64_t)x1->w[2]);
    }
    if (has & TC_EXT_THIRD)
        p = put_third(p, ring, i, has);
    msgpack_sbuffer_write(pk->data, buf, (size_t)(p - buf));
}

/*
 * Whether the daemon takes the entry: every number within INT64_MAX (PROTOCOL.md
 * Part 2), its end (start + dur) too, and its shapes and device valid. One bad
 * entry sent would close the connection (bad_message) and lose all that
 * follows, so the writer drops it here and counts it instead.
 */
static bool rec_valid(const struct rec *r, uint64_t step)
{
    const uint64_t max = INT64_MAX;

    return step <= max && r->start <= max && r->dur <= max && r->start + r->dur <= max &&
           r->mem <= max && (r->shapes & ~REC_EXT) != SHAPES_BAD && r->dev != DEV_BAD;
}
/*
 * Appends to out the control messages queued so far (op definitions, meta),
 * then a batch of up to `room` entries moved from the rings, packed in place.
 * Both under the mutex, so that every op an entry names was queued (tc_op
 * takes it) before the batch. Returns the number of entries in the batch;
 * entries the daemon would refuse are dropped and counted instead. Stops
 * early when out cannot grow (ENOMEM): what it took is whole. dropping: the
 * batch will never be sent (a broken connection): every entry counts in
 * its op's drops (tcrecord_op_dropped), as the refused ones always do.
 */
size_t tcenc_drain(tc_client *c, msgpack_sbuffer *out, size_t room, bool dropping)
{
    msgpack_packer pk;
    size_t n = 0, bad = 0, head_at, body_at;
    char *h;

    clock_reanchor(c);
    /* The lock keeps the ring list and the device table still while packing;
     * recording threads never take it. */
    pthread_mutex_lock(&c->mu);
    if (c->control.size > 0) {
        msgpack_sbuffer_write(out, c->control.data, c->control.size);
        msgpack_sbuffer_clear(&c->control);
    }
    /* The batch's head with a 3-byte array header (array16), fixed below. */
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    head_at = out->size;
    if (proto_pack_batch_header(&pk, BATCH_MAX) < 0) {
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    body_at = out->size;
    for (struct ring *r = c->rings; r != NULL && n < room; r = r->next) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        for (; tail != head && n < room; tail++) {
            const struct rec *rec = &r->buf[tail & r->mask];
            struct rec conv;
            if (rec->op == 0) {
                r->wstep = rec->start;
                continue;
            }
            if (sb_room(out, ENTRY_MAX) == NULL) {
                room = n; /* out of memory: the rest stays in the rings */
                break;
            }
            if (rec->shapes & REC_TICKS)
                rec = rec_convert(c, r, rec, &conv);
            if (dropping || !rec_valid(rec, r->wstep))
                tcrecord_op_dropped(c, rec->op, rec->dur, false, rec->mem);
            if (!rec_valid(rec, r->wstep)) {
                bad++;
                if (rec->shapes & REC_EXT)
                    tail += rec_ext_slots(r, tail); /* its ext slots go with it */
                continue;
            }
            if (rec->shapes & REC_EXT) {
                pack_rec_ext(c, &pk, rec, r, tail, r->wstep);
                tail += rec_ext_slots(r, tail); /* committed with the record: they are there */
                n++;
                continue;
            }
            pack_rec(c, out, rec, r->wstep);
            n++;
        }
        tcring_drained(r, tail);
    }
    pthread_mutex_unlock(&c->mu);
    if (bad > 0)
        atomic_fetch_add(&c->dropped, bad);
    /* The array header as msgpack_pack_array(n) writes it: fixarray below 16. */
    h = out->data + body_at - 3;
    if (n == 0) {
        out->size = head_at;
    } else if (n >= 16) {
        h[1] = (char)(n >> 8);
        h[2] = (char)n;
    } else {
        h[0] = (char)(0x90 | n);
        memmove(h + 1, h + 3, out->size - body_at);
        out->size -= 2;
    }
    return n;
}

_Static_assert(BATCH_MAX >= 16 && BATCH_MAX < 65536, "a batch's array header is an array16");
