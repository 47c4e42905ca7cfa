/*
 * peerlink — one authenticated, encrypted link between two daemons (a
 * member and its home, proto/PROTOCOL.md "Peer protocol"): TCP through
 * libuv, TLS 1.3 through OpenSSL with an external pre-shared key, and
 * msgpack messages, each bounded and whole, handed to the owner.
 *
 * DESIGN. The loop thread runs it all: OpenSSL works on two memory BIOs
 * (bytes read from the socket go into one, what TLS wants sent comes out
 * of the other and goes to uv_write), so there is no peer thread, no lock
 * and no hand-over: a decoded message reaches the owner on the thread that
 * owns the registry and the store, like a producer's. The price is that the
 * cipher runs on the loop thread: AES-128-GCM at about 1 GB/s against
 * snapshots of kilobytes a second per session, and one ECDHE handshake per
 * connection (psk_dhe_ke), so it costs nothing measurable. A dedicated
 * thread would have cost a second copy of every message and a queue.
 *
 * AUTHENTICATION. Both sides hold the same key file (0600, peerlink_key_load);
 * its SHA-256 is the TLS 1.3 external PSK (identity "tracectl-peer",
 * TLS_AES_128_GCM_SHA256, no certificates). A side without the key cannot
 * complete the handshake (the PSK binder does not verify): the link fails
 * before any message is read or sent, and both sides log why.
 *
 * MESSAGES. After the handshake, each direction is a sequence of msgpack
 * arrays (element 0 a string, like the producer protocol), each at most
 * PEERLINK_MAX_MSG bytes, framed by peerframe.h: headers are checked as
 * bytes arrive and msgpack-c sees only whole messages, so a link's memory
 * stays bounded. A bad message closes the link with a reason.
 *
 * LIFECYCLE. peerlink_accept() or peerlink_connect() starts it; on_ready
 * runs once the handshake is done, on_msg for each message (the object is
 * borrowed: copy what you keep), on_close exactly once after the link is
 * closed for any reason (peerlink_close, the peer, an error), after which
 * the owner may free the struct. Errors: 0 or a negative errno / libuv code;
 * when a start fails on_close still runs (the handle is always closed).
 */
#ifndef TRACECTLD_PEERLINK_H
#define TRACECTLD_PEERLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <uv.h>

#include "peerframe.h"
#include "proto.h"

#define PEERLINK_MAX_MSG   (16u << 20) /* bytes of one peer message */
#define PEERLINK_KEY_MIN   16          /* bytes a key file holds at least (whitespace trimmed) */
#define PEERLINK_KEY_MAX   4096        /* and at most */
#define PEERLINK_PSK_LEN   32          /* SHA-256 of the key file: the PSK */
#define PEERLINK_MAX_QUEUE (64u << 20) /* bytes written and not yet sent: peerlink_busy() */

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;
struct peerlink;

struct peerlink_ops {
    void (*on_ready)(struct peerlink *l);
    /* a whole message (an array whose element 0 is a string, checked); m is borrowed */
    void (*on_msg)(struct peerlink *l, const msgpack_object *m);
    void (*on_close)(struct peerlink *l, const char *reason);
    /* after peerlink_raw(): each whole message's bytes instead of on_msg (p borrowed) */
    void (*on_raw)(struct peerlink *l, const char *p, size_t len);
};

struct peerlink {
    uv_tcp_t tcp;
    uv_timer_t timer; /* handshake deadline */
    struct ssl_st *ssl;
    struct bio_st *rbio, *wbio; /* network -> TLS, TLS -> network; owned by ssl */
    const struct peerlink_ops *ops;
    void *data;             /* the owner's */
    struct peerframe frame; /* plaintext in, whole messages out */
    bool ready, closing, tcp_open;
    bool raw;                 /* peerlink_raw(): messages go to on_raw as bytes */
    int handles;              /* open uv handles; on_close runs when the last closes */
    char addr[64];            /* the peer's address, for the log */
    char reason[160];         /* why it closed */
    uint64_t rx_ms, rx_bytes; /* uv_now() of the last bytes read; plaintext bytes read */
    /* uv_hrtime() just after the read that brought the bytes being handed to on_msg or on_raw
     * (before TLS decrypted them): when a clock probe or reply was received */
    uint64_t rx_ns;
};

/*
 * Reads the key file at path into psk (SHA-256 of its contents, trailing
 * whitespace trimmed). Refuses a file that is not a regular file, is
 * readable or writable by group or others (must be 0600 or 0400), or holds
 * fewer than PEERLINK_KEY_MIN or more than PEERLINK_KEY_MAX bytes: 0, or a
 * negative errno with a one-line message in err.
 */
int peerlink_key_load(const char *path, uint8_t psk[PEERLINK_PSK_LEN], char *err, size_t errlen);
/*
 * A TLS context for one side (server: the home). NULL on failure (logged).
 * peerlink_ctx_free(NULL) is a no-op.
 */
struct ssl_ctx_st *peerlink_ctx_new(bool server, const uint8_t psk[PEERLINK_PSK_LEN]);
void peerlink_ctx_free(struct ssl_ctx_st *ctx);

/*
 * Accepts a pending connection of server (a listening uv_tcp_t) into l and
 * starts the server handshake. On error on_close runs (the caller frees l there).
 */
int peerlink_accept(struct peerlink *l, uv_loop_t *loop, struct ssl_ctx_st *ctx,
                    uv_stream_t *server, const struct peerlink_ops *ops, void *data);
/* Connects l to addr and starts the client handshake; as peerlink_accept. */
int peerlink_connect(struct peerlink *l, uv_loop_t *loop, struct ssl_ctx_st *ctx,
                     const struct sockaddr *addr, const struct peerlink_ops *ops, void *data);
/*
 * Sends one packed message (len bytes) once ready. -ENOTCONN before
 * on_ready or after close, -EIO when TLS fails (the link is then closing).
 */
int peerlink_send(struct peerlink *l, const char *buf, size_t len);
/*
 * From now on, each whole message of at most max bytes goes to ops->on_raw
 * as its bytes, unpacked by nobody (the clock link: peerclock_wire.h decodes
 * its fixed shape itself, and a larger message closes the link). Framing and
 * its checks stay as they were. ops->on_raw must be set.
 */
void peerlink_raw(struct peerlink *l, size_t max);
/* True while more than PEERLINK_MAX_QUEUE bytes wait to be sent: skip what can wait. */
bool peerlink_busy(const struct peerlink *l);
/* Closes the link (reason for the log); on_close follows. Idempotent. */
void peerlink_close(struct peerlink *l, const char *reason);

/* "ADDR:PORT" (IPv4 or [IPv6]:PORT) into out. 0 or -EINVAL. */
int peerlink_parse_addr(const char *s, struct sockaddr_storage *out);
/* True when a and b (from peerlink_parse_addr) are the same address and port. */
bool peerlink_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

#endif
