/*
 * peerframe — the framing of peer messages inside TLS (peerlink.h): bytes in
 * as they arrive, whole msgpack messages out, each at most max bytes. Like
 * the producers' reader, headers are checked as bytes arrive
 * (proto_scan_bytes) and msgpack-c sees only a whole message, so nothing a
 * peer announces is allocated before its bytes are here. A pure function
 * over bytes, one thread at a time; the fuzzer (tests/fuzz/fuzz_peersnap.c)
 * frames its input with it as the daemon does.
 */
#ifndef TRACECTLD_PEERFRAME_H
#define TRACECTLD_PEERFRAME_H

#include <stddef.h>

#include "proto.h"
#include "proto_scan.h"

struct peerframe {
    char *buf; /* bytes not yet taken: a message at its front */
    size_t len, cap;
    size_t scanned; /* of buf, by scan */
    size_t max;     /* bytes of one message at most */
    struct proto_scan scan;
};

/* max: the limit of one message. */
void peerframe_init(struct peerframe *f, size_t max);
/* Frees the buffer; the frame may be initialised again. */
void peerframe_deinit(struct peerframe *f);
/* Appends n bytes. 0 or -ENOMEM. */
int peerframe_push(struct peerframe *f, const char *p, size_t n);
/*
 * The next whole message: 1 with *len its bytes at f->buf (call
 * peerframe_take(f, *len) once done with them), 0 when more bytes are
 * needed, -EPROTO with the reason in *why (a static or f-owned string) when
 * the stream is bad (over max, malformed headers): the stream is then done.
 */
int peerframe_next(struct peerframe *f, size_t *len, const char **why);
/* Drops the first len bytes (the message peerframe_next gave). */
void peerframe_take(struct peerframe *f, size_t len);

#endif
