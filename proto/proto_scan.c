/*
 * proto_scan.c — the byte scanner: checks msgpack headers as bytes arrive,
 * before msgpack-c's unpacker (or the batch decoder) allocates what a header
 * announces, and finds where each message ends.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_scan.h"

static void scan_fail(struct proto_scan *sc, const char *code, const char *msg)
{
    if (sc->error == NULL) {
        sc->error = code;
        snprintf(sc->message, sizeof(sc->message), "%s", msg);
    }
}

/* One element (a scalar, a whole str, an empty container) is complete. */
static void scan_element_done(struct proto_scan *sc)
{
    for (;;) {
        if (sc->depth == 0) {
            sc->msg_bytes = 0; /* a whole top-level message */
            sc->ready++;
            sc->seen++;
            return;
        }
        if (--sc->stack[sc->depth - 1] > 0)
            return;
        sc->depth--; /* the container is complete: it is an element of its parent */
    }
}

static void scan_container(struct proto_scan *sc, uint64_t n, uint64_t max_msg)
{
    if (n == 0) {
        if (sc->depth == PROTO_SCAN_DEPTH && sc->deep_msg == 0)
            sc->deep_msg = sc->seen + 1; /* msgpack-c's stack is full even for an empty one */
        scan_element_done(sc);
        return;
    }
    /* every element not yet started (these n, and those pending in the containers
     * around) takes at least one byte of the rest of the message */
    uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
    if (n > room || sc->pending > room - n) {
        scan_fail(sc, PROTO_E_TOO_LARGE,
                  "a container announces more elements than a message can hold");
        return;
    }
    if (sc->depth == PROTO_SCAN_DEPTH) {
        scan_fail(sc, PROTO_E_MESSAGE, "nesting deeper than the protocol allows");
        return;
    }
    sc->stack[sc->depth++] = (uint32_t)n;
    sc->pending += n;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A complete header in sc->head (its first byte the type). */
static void scan_header(struct proto_scan *sc, uint64_t max_msg)
{
    uint8_t t = sc->head[0];
    uint64_t len = sc->head_len > 1 ? be(sc->head + 1, sc->head_len - 1) : 0;

    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3 || (t >= 0xca && t <= 0xd3))
        scan_element_done(sc); /* ints, floats, nil, bool: the header is the value */
    else if ((t & 0xf0) == 0x80)
        scan_container(sc, 2u * (t & 0x0f), max_msg);
    else if ((t & 0xf0) == 0x90)
        scan_container(sc, t & 0x0f, max_msg);
    else if (t == 0xdc || t == 0xdd)
        scan_container(sc, len, max_msg);
    else if (t == 0xde || t == 0xdf)
        scan_container(sc, 2 * len, max_msg);
    else if ((t & 0xe0) == 0xa0)
        sc->skip = t & 0x1f;
    else if (t == 0xd9 || t == 0xda || t == 0xdb || t == 0xc4 || t == 0xc5 || t == 0xc6)
        sc->skip = len;
    else if (t == 0xc7 || t == 0xc8 || t == 0xc9) /* ext: length, then a type byte */
        sc->skip = len >> 8;         /* the header's last byte is the ext type, not length */
    else if (t >= 0xd4 && t <= 0xd8) /* fixext: a type byte and 1..16 bytes */
        sc->skip = 1u << (t - 0xd4);
    else
        scan_fail(sc, PROTO_E_MSGPACK, "bytes are not valid msgpack");
    /* the body, then at least a byte for each element not yet started */
    uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
    if (sc->skip > room || sc->pending > room - sc->skip)
        scan_fail(sc, PROTO_E_TOO_LARGE, "a string announces more bytes than a message can hold");
    if (sc->skip == 0 &&
        ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb) || (t >= 0xc4 && t <= 0xc9)))
        scan_element_done(sc); /* an empty body */
}

/* Bytes after a type byte: the size of its header (0: the byte is the header). */
static int scan_head_need(uint8_t t)
{
    static const int8_t extra[32] = {
        /* c0 */ 0, -1, 0, 0, 1, 2, 4, 2, 3, 5, 4, 8, 1, 2, 4, 8,
        /* d0 */ 1, 2,  4, 8, 1, 1, 1, 1, 1, 1, 2, 4, 2, 4, 2, 4,
    };

    if (t < 0xc0 || t >= 0xe0)
        return 0;
    return extra[t - 0xc0];
}

/* The size of a scalar's whole encoding (an int, a float, nil, a bool), or 0: not a scalar. */
static inline int scan_scalar(uint8_t t)
{
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 1;
    if (t >= 0xca && t <= 0xd3)
        return 1 + scan_head_need(t);
    return 0;
}

/*
 * The common case of a batch, in a tight loop: scalars and fixarray headers
 * whose whole encoding is in p[0..end), inside a message. Does for each what
 * the general path below does (scan_header()'s checks, in its order); stops
 * at anything else (strings, maps, wider headers, a header cut by the end of
 * the bytes, the end of the message) and returns where.
 */
static const uint8_t *scan_fast(struct proto_scan *sc, const uint8_t *p, const uint8_t *end,
                                uint64_t max_msg, const struct proto_scan_stop *st)
{
    while (p < end && sc->depth > 0 && sc->error == NULL && !proto_scan_stopped(sc, st)) {
        uint8_t t = *p;
        int k = scan_scalar(t);

        if (k > 0 && end - p >= k) {
            p += k, sc->msg_bytes += (uint64_t)k, sc->pending--;
            scan_element_done(sc);
        } else if (t >= 0x90 && t <= 0x9f) {
            p++, sc->msg_bytes++, sc->pending--;
            scan_container(sc, t & 0x0f, max_msg);
        } else {
            break;
        }
        uint64_t room = sc->msg_bytes < max_msg ? max_msg - sc->msg_bytes : 0;
        if (sc->pending > room)
            scan_fail(sc, PROTO_E_TOO_LARGE,
                      "a string announces more bytes than a message can hold");
    }
    return p;
}

/* Scans p[0..n) on from sc's state, up to where st says (NULL: all). Returns the bytes read. */
size_t proto_scan_bytes(struct proto_scan *sc, const uint8_t *p, size_t n, uint64_t max_msg,
                        const struct proto_scan_stop *st)
{
    const uint8_t *start = p, *end = p + n;

    while (p < end && sc->error == NULL && !proto_scan_stopped(sc, st)) {
        if (sc->skip == 0 && sc->head_need == 0 && sc->depth > 0) {
            p = scan_fast(sc, p, end, max_msg, st);
            if (p == end || sc->error != NULL || proto_scan_stopped(sc, st))
                break;
        }
        if (sc->skip > 0) {
            uint64_t k = sc->skip < (uint64_t)(end - p) ? sc->skip : (uint64_t)(end - p);
            p += k, sc->skip -= k, sc->msg_bytes += k;
            if (sc->skip == 0)
                scan_element_done(sc);
            continue;
        }
        if (sc->head_need == 0) {
            int need = scan_head_need(*p);
            if (sc->depth > 0)
                sc->pending--; /* an announced element starts */
            if (need < 0) {
                scan_fail(sc, PROTO_E_MSGPACK, "bytes are not valid msgpack");
                break;
            }
            sc->head[0] = *p;
            sc->head_len = 1;
            sc->head_need = need + 1;
        } else {
            sc->head[sc->head_len++] = *p;
        }
        p++, sc->msg_bytes++;
        if (sc->head_len == sc->head_need) {
            sc->head_need = 0;
            scan_header(sc, max_msg);
        }
    }
    return (size_t)(p - start);
}
