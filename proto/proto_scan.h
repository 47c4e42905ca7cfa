/*
 * proto_scan — the byte scanner of the streaming reader (struct proto_scan,
 * proto.h): msgpack headers are checked as bytes are read, before msgpack-c's
 * unpacker or the batch decoder allocates what a header announces (at most
 * PROTO_SCAN_DEPTH of nesting, no container announcing more elements than the
 * message limit leaves bytes for), and it counts whole messages (ready, seen).
 * A pure function over bytes, reentrant; the state is the caller's.
 */
#ifndef TRACECTL_PROTO_SCAN_H
#define TRACECTL_PROTO_SCAN_H

#include "proto.h"

/*
 * Where a scan stops before the end of the bytes (and an error): once a
 * message is whole (ready), or once the element that the container at depth
 * `level` counts down from `count` is whole (level > 0).
 */
struct proto_scan_stop {
    bool ready;
    int level;
    uint32_t count;
};

static inline bool proto_scan_stopped(const struct proto_scan *sc, const struct proto_scan_stop *st)
{
    if (st == NULL)
        return false;
    if (st->ready && sc->ready > 0)
        return true;
    return st->level > 0 && (sc->depth < st->level ||
                             (sc->depth == st->level && sc->stack[st->level - 1] < st->count));
}

/*
 * Scans p[0..n) on from sc's state, up to where st says (NULL: all the bytes),
 * checking each message against max_msg bytes. Returns the bytes read; a bad
 * stream sets sc->error (a wire code) and sc->message, once, and stops.
 */
size_t proto_scan_bytes(struct proto_scan *sc, const uint8_t *p, size_t n, uint64_t max_msg,
                        const struct proto_scan_stop *st);

#endif
