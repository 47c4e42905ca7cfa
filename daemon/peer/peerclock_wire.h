/*
 * peerclock_wire — the two clock-probe messages (proto/PROTOCOL.md, "Clock
 * probes"): ["clock_probe", seq, t1] from the home, ["clock_reply", seq, t1,
 * t2, t3] from the member, every number a non-negative msgpack integer of at
 * most 2^62 (ns of CLOCK_MONOTONIC; seq below 2^32). Pure functions over
 * bytes, any thread, nothing allocated.
 *
 * Decoding never trusts the bytes: it reads only this fixed shape (a fixarray
 * of 3 or 5, a string, integers) byte by byte, so a hostile header (an array
 * of 2^32 elements, a 4 GiB string) is refused from its first bytes without
 * anything allocated or read past the buffer, and a message is never longer
 * than PEERCLOCK_WIRE_MAX bytes: a reader that holds that many bytes without
 * a message has a bad peer.
 */
#ifndef TRACECTLD_PEERCLOCK_WIRE_H
#define TRACECTLD_PEERCLOCK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PEERCLOCK_WIRE_MAX 64 /* the longest message: 1 + 12 + 4 × 9 = 49 bytes */

enum peerclock_msg_type {
    PEERCLOCK_PROBE = 1, /* home → member: seq, t1 */
    PEERCLOCK_REPLY,     /* member → home: seq, t1 (echoed), t2, t3 */
};

struct peerclock_msg {
    enum peerclock_msg_type type;
    uint32_t seq;
    int64_t t1, t2, t3; /* t2, t3: 0 in a probe */
};

/*
 * Encodes m into buf[0..cap). Returns the length (at most
 * PEERCLOCK_WIRE_MAX), -EMSGSIZE if cap is too small, -EINVAL for an
 * unknown type or a time outside [0, 2^62].
 */
int peerclock_wire_encode(const struct peerclock_msg *m, uint8_t *buf, size_t cap);

/*
 * Decodes the message at the start of buf[0..len). Returns its length in
 * bytes (> 0) with *m filled; 0 if the bytes so far are a valid beginning
 * (read more); -EPROTO if they are not a clock message (another message type,
 * bad msgpack, a wrong shape, a negative or too large number). Since a
 * message is at most PEERCLOCK_WIRE_MAX bytes, 0 is never returned once len
 * reaches that.
 */
int peerclock_wire_decode(const uint8_t *buf, size_t len, struct peerclock_msg *m);

#endif
