/*
 * peerarr — collective arrivals sent from a member daemon to its home
 * (proto/PROTOCOL.md "Peer protocol", message `arrivals`): for each
 * synchronizing collective instance a member's ranks took part in (comm,
 * seq), each rank's enter and exit in the member's CLOCK_MONOTONIC and its
 * bytes, so that the home can put them beside its own ranks' on its clock
 * (peerclock_to_home) and check the order "no rank leaves before every rank
 * entered" (peerclock_collective).
 *
 * peerarr_pack() and peerarr_decode() are pure functions over msgpack, any
 * thread: decode trusts nothing (every count, length, range and order is
 * checked), as peersnap_decode does. A struct peerarr_msg owns what it
 * points to.
 */
#ifndef TRACECTLD_PEERARR_H
#define TRACECTLD_PEERARR_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "peermsg.h"

#define PEERARR_MAX_MSG   8192                      /* arrivals in one message */
#define PEERARR_QUEUE     65536                     /* arrivals a member queues per session */
#define PEERARR_TIME_MAX  (INT64_C(1) << 62)        /* PEERCLOCK_TIME_MAX */
#define PEERARR_COMM_SIZE ((UINT64_C(1) << 31) - 1) /* the largest comm_size (hello's world) */

/* One rank's arrival at one collective instance (comm, seq). */
struct peerarr_arrival {
    uint64_t comm, seq;
    int64_t rank;              /* 0 .. INT32_MAX */
    int64_t enter_ns, exit_ns; /* the sender's CLOCK_MONOTONIC: start_ns, start_ns + dur_ns */
    uint64_t bytes;
    uint64_t comm_size; /* ext comm_size, 0: absent (the session's world counts then) */
};

struct peerarr_msg {
    char *session;                   /* 1..PROTO_MAX_SESSION bytes of UTF-8 */
    char host[PEERMSG_MAX_HOST + 1]; /* the sender's --host */
    uint64_t dropped;                /* arrivals the sender's queue dropped, cumulative */
    struct peerarr_arrival *arr;     /* n of them, the sender's order */
    size_t n;
};

/*
 * Packs ["arrivals", {"session", "host", "dropped", "arrivals": [[comm, seq,
 * rank, enter, exit, bytes(, comm_size)], ...]}] (comm_size only where not 0).
 * n ≤ PEERARR_MAX_MSG (the caller splits). 0, -EINVAL past that, -ENOMEM.
 */
int peerarr_pack(msgpack_packer *pk, const char *session, const char *host, uint64_t dropped,
                 const struct peerarr_arrival *a, size_t n);
/*
 * Decodes an `arrivals` message (m is the whole array) into *out, checking
 * everything. 0, or -EPROTO / -ENOMEM with a message in err; on error *out
 * is empty.
 */
int peerarr_decode(const msgpack_object *m, struct peerarr_msg *out, char *err, size_t errlen);
/* Frees what msg owns and zeroes it; NULL is a no-op. */
void peerarr_msg_free(struct peerarr_msg *msg);

#endif
