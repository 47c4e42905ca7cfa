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
 *
 * THE HOME'S TABLE (peerarr.c). Instances (session, comm, seq) gather the
 * arrivals of every host: per host only how many, the latest enter and the
 * earliest exit, in that host's own clock (host 0 is the home). An instance
 * is due when it has the arrivals it expects (comm_size, else the session's
 * world) or when its first arrival is older than the age limit; then each
 * member host in it whose clock is measured gets one peerclock_collective
 * against all the other hosts' arrivals converted to home time (the home's
 * own as they are, other members' with peerclock_to_home and their bounds).
 * A subset of a synchronizing collective's ranks keeps its order, so an
 * instance that aged out incomplete is checked as well. Pure (no I/O, no
 * clock read): one thread at a time, the home's loop.
 *
 * Each instance also keeps its arrivals one by one (host, rank, step, enter,
 * exit), and a due instance gives them, converted to home time with their
 * bounds, to the caller's callback (peerlate.h runs the late-rank analysis
 * across hosts on them).
 *
 * MEMORY. At most max_instances instances (PEERARR_INSTANCES by default):
 * when full, the oldest is dropped unchecked (counted in `evicted`), so a
 * host that never completes an instance costs a bounded table, never more.
 * At most PEERARR_KEPT arrivals are kept one by one in all; past that an
 * arrival still counts for the clock check but not for the callback
 * (`unkept`).
 */
#ifndef TRACECTLD_PEERARR_H
#define TRACECTLD_PEERARR_H

#include <stdbool.h>
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
    uint64_t step;      /* the entry's step (0 .. INT64_MAX) */
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
 * rank, enter, exit, bytes(, comm_size(, step))], ...]}] (comm_size only where
 * not 0 or a step follows, step only where not 0).
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

/*
 * THE MEMBER'S QUEUE. A session a member forwards gets one (peermember
 * makes it); the loop thread pushes the arrivals of each batch's
 * synchronizing collectives with comm and seq into it as the batch is
 * accepted (conn_producer.c), and peermember's tick takes them out into `arrivals`
 * messages. At most PEERARR_QUEUE; past that, or without memory, an arrival
 * is counted in `dropped`. Its ring is allocated at the first push.
 */
struct peerarr_queue {
    struct peerarr_arrival *ring; /* PEERARR_QUEUE slots; NULL until the first push */
    size_t head, n;
    uint64_t dropped;
};

/* An empty queue, NULL without memory. */
struct peerarr_queue *peerarr_queue_new(void);
/* NULL is a no-op. */
void peerarr_queue_free(struct peerarr_queue *q);
/* Appends a copy of *a, or counts it in q->dropped when full or out of memory. */
void peerarr_queue_push(struct peerarr_queue *q, const struct peerarr_arrival *a);
/* Moves the oldest min(max, q->n) arrivals into out; returns how many. */
size_t peerarr_queue_take(struct peerarr_queue *q, struct peerarr_arrival *out, size_t max);
/*
 * True when an op of this name is a collective in which no rank leaves
 * before every rank entered: its name contains allreduce, allgather,
 * alltoall or barrier (any case; MPI_Allreduce, nccl:all_reduce and
 * c10d::allreduce_ too, with "_" between the words or not).
 */
bool peerarr_sync_op(const char *name);

#define PEERARR_INSTANCES 65536               /* instances the home's table holds */
#define PEERARR_AGE_NS    (10 * 1000000000LL) /* an instance is checked this old at most */
#define PEERARR_SESSIONS  4096                /* session names the table tells apart */
#define PEERARR_KEPT      (1u << 20)          /* arrivals kept one by one, all instances */

struct peerclock;
struct peerarr_table;

/* The counters of a table, for logs and tests. */
struct peerarr_stats {
    uint64_t added;     /* arrivals taken */
    uint64_t instances; /* instances checked (complete or aged out) */
    uint64_t complete;  /* of those, with every arrival expected */
    uint64_t checks;    /* peerclock_collective calls made */
    uint64_t evicted;   /* instances dropped unchecked: the table was full */
    uint64_t refused;   /* arrivals refused: too many sessions, or past 2^62 */
    uint64_t unkept;    /* arrivals not kept one by one: PEERARR_KEPT were, or no memory */
};

/* One arrival of a due instance on the home's clock (peerarr_table_due's callback). */
struct peerarr_home {
    uint32_t host; /* 0: the home; 1..: a member (its clock's index) */
    int64_t rank;
    uint64_t step;
    int64_t enter_ns, exit_ns; /* home CLOCK_MONOTONIC */
    int64_t bound_ns;          /* each within this of the truth; 0 for the home's own */
};

/*
 * Called once per due instance with the arrivals kept of it whose host's
 * clock is measured (n of them, at least one; the home's as they are), in
 * no particular order; a borrows the table's memory for the call only.
 */
typedef void (*peerarr_due_fn)(void *arg, const char *session, uint64_t comm, uint64_t seq,
                               const struct peerarr_home *a, size_t n);

/* An empty table of at most max_instances (≥ 1) instances. NULL: out of memory. */
struct peerarr_table *peerarr_table_new(size_t max_instances);
/* Frees t and all it holds; NULL is a no-op. */
void peerarr_table_free(struct peerarr_table *t);
/*
 * One arrival at instance (session, a->comm, a->seq) from host `host` (0:
 * the home, its times the home's clock; 1..: a member, its times its own
 * clock, the index of its clock in peerarr_table_due's array). world: the
 * session's ranks, expected when a->comm_size is 0 (0: unknown, the
 * instance then only ages out). now_ns: home CLOCK_MONOTONIC, to age it.
 * Returns 0, -ENOSPC when the table already tells PEERARR_SESSIONS names
 * apart and this is a new one, -ENOMEM (nothing taken then).
 */
int peerarr_table_add(struct peerarr_table *t, const char *session, uint32_t host,
                      const struct peerarr_arrival *a, uint64_t world, int64_t now_ns);
/*
 * Checks and removes every instance that is complete, or whose first
 * arrival came age_ns or longer before now_ns: one peerclock_collective per
 * member host in it whose clocks[host] (host < n_clocks) is not NULL, has a
 * burst, and that has other hosts' arrivals to compare with; then, with fn
 * not NULL, fn(arg, ...) with its arrivals on the home's clock. Returns the
 * number of instances removed.
 */
size_t peerarr_table_due(struct peerarr_table *t, int64_t now_ns, int64_t age_ns,
                         struct peerclock *const *clocks, size_t n_clocks, peerarr_due_fn fn,
                         void *arg);
/* The counters. */
void peerarr_table_stats(const struct peerarr_table *t, struct peerarr_stats *out);

#endif
