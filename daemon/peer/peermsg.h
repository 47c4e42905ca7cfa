/*
 * peermsg — the small messages of the peer protocol (proto/PROTOCOL.md
 * "Peer protocol"): peer_hello, clock_hello (the first message of a clock
 * link), peer_welcome, error, ping, pong and snapshot_ack; `snapshot` is peersnap.h's,
 * `arrivals` peerarr.h's. Pure
 * functions over msgpack, any thread: each pack function appends one whole message to sb and
 * returns 0 or -ENOMEM; each decoder checks every field it reads and
 * returns 0 or -EPROTO with a message in err (strings copied into the
 * caller's buffers, never borrowed).
 */
#ifndef TRACECTLD_PEERMSG_H
#define TRACECTLD_PEERMSG_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "proto.h"

#define PEERMSG_PROTO    1   /* the peer protocol's version (peer_hello "proto") */
#define PEERMSG_MAX_HOST 255 /* bytes of a host name (--host) */

enum peermsg_type {
    PEERMSG_UNKNOWN,
    PEERMSG_HELLO,
    PEERMSG_WELCOME,
    PEERMSG_ERROR,
    PEERMSG_PING,
    PEERMSG_PONG,
    PEERMSG_SNAPSHOT,
    PEERMSG_ACK,
    PEERMSG_CLOCK_HELLO,
    PEERMSG_ARRIVALS,
};

/* The type of m (an array whose element 0 is a string: peerlink checked). */
enum peermsg_type peermsg_type(const msgpack_object *m);

int peermsg_pack_hello(msgpack_sbuffer *sb, const char *host);
/* ["clock_hello", {"proto": 1, "host": host}]: this connection is host's clock link. */
int peermsg_pack_clock_hello(msgpack_sbuffer *sb, const char *host);
int peermsg_pack_welcome(msgpack_sbuffer *sb, const char *host);
int peermsg_pack_error(msgpack_sbuffer *sb, const char *code, const char *message);
int peermsg_pack_ping(msgpack_sbuffer *sb, bool pong);
int peermsg_pack_ack(msgpack_sbuffer *sb, const char *session, uint64_t seq);

/*
 * peer_hello / clock_hello / peer_welcome: the host name (1..PEERMSG_MAX_HOST
 * bytes of UTF-8, no '/') into host[PEERMSG_MAX_HOST + 1]; the hellos also
 * check proto.
 */
int peermsg_host(const msgpack_object *m, char *host, char *err, size_t errlen);
/* snapshot_ack: session into session[PROTO_MAX_SESSION + 1] and seq. */
int peermsg_ack(const msgpack_object *m, char *session, uint64_t *seq, char *err, size_t errlen);
/* error: its message (or code) into msg[len], for the log. */
void peermsg_error_text(const msgpack_object *m, char *msg, size_t len);
/* True when name is a valid host name for the protocol (see peermsg_host). */
bool peermsg_host_valid(const char *name, size_t len);

#endif
