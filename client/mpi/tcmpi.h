/*
 * tcmpi.h — what the two halves of libtracectl-mpi share: tcmpi.c (the
 * client, the op table, the communicator table, recording) and
 * tcmpi_wrap.c (the MPI_* functions, each calling its PMPI_* twin).
 * Internal: nothing here is installed.
 */
#ifndef TCMPI_H
#define TCMPI_H

#include <mpi.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "tracectl.h"

/* Every recorded call: its enum name, MPI name and kind (C: comm, W: wait); and the entry for
 * each further collective a completion call completed (tcmpi_wait). The collectives come
 * first, BARRIER to IEXSCAN. */
#define TCMPI_OPS(X)                                                                               \
    X(BARRIER, "MPI_Barrier", C)                                                                   \
    X(IBARRIER, "MPI_Ibarrier", C)                                                                 \
    X(BCAST, "MPI_Bcast", C)                                                                       \
    X(IBCAST, "MPI_Ibcast", C)                                                                     \
    X(REDUCE, "MPI_Reduce", C)                                                                     \
    X(IREDUCE, "MPI_Ireduce", C)                                                                   \
    X(ALLREDUCE, "MPI_Allreduce", C)                                                               \
    X(IALLREDUCE, "MPI_Iallreduce", C)                                                             \
    X(GATHER, "MPI_Gather", C)                                                                     \
    X(IGATHER, "MPI_Igather", C)                                                                   \
    X(GATHERV, "MPI_Gatherv", C)                                                                   \
    X(IGATHERV, "MPI_Igatherv", C)                                                                 \
    X(SCATTER, "MPI_Scatter", C)                                                                   \
    X(ISCATTER, "MPI_Iscatter", C)                                                                 \
    X(SCATTERV, "MPI_Scatterv", C)                                                                 \
    X(ISCATTERV, "MPI_Iscatterv", C)                                                               \
    X(ALLGATHER, "MPI_Allgather", C)                                                               \
    X(IALLGATHER, "MPI_Iallgather", C)                                                             \
    X(ALLGATHERV, "MPI_Allgatherv", C)                                                             \
    X(IALLGATHERV, "MPI_Iallgatherv", C)                                                           \
    X(ALLTOALL, "MPI_Alltoall", C)                                                                 \
    X(IALLTOALL, "MPI_Ialltoall", C)                                                               \
    X(ALLTOALLV, "MPI_Alltoallv", C)                                                               \
    X(IALLTOALLV, "MPI_Ialltoallv", C)                                                             \
    X(ALLTOALLW, "MPI_Alltoallw", C)                                                               \
    X(IALLTOALLW, "MPI_Ialltoallw", C)                                                             \
    X(REDUCE_SCATTER, "MPI_Reduce_scatter", C)                                                     \
    X(IREDUCE_SCATTER, "MPI_Ireduce_scatter", C)                                                   \
    X(REDUCE_SCATTER_BLOCK, "MPI_Reduce_scatter_block", C)                                         \
    X(IREDUCE_SCATTER_BLOCK, "MPI_Ireduce_scatter_block", C)                                       \
    X(SCAN, "MPI_Scan", C)                                                                         \
    X(ISCAN, "MPI_Iscan", C)                                                                       \
    X(EXSCAN, "MPI_Exscan", C)                                                                     \
    X(IEXSCAN, "MPI_Iexscan", C)                                                                   \
    X(SEND, "MPI_Send", C)                                                                         \
    X(SSEND, "MPI_Ssend", C)                                                                       \
    X(BSEND, "MPI_Bsend", C)                                                                       \
    X(RSEND, "MPI_Rsend", C)                                                                       \
    X(RECV, "MPI_Recv", C)                                                                         \
    X(SENDRECV, "MPI_Sendrecv", C)                                                                 \
    X(SENDRECV_REPLACE, "MPI_Sendrecv_replace", C)                                                 \
    X(ISEND, "MPI_Isend", C)                                                                       \
    X(ISSEND, "MPI_Issend", C)                                                                     \
    X(IBSEND, "MPI_Ibsend", C)                                                                     \
    X(IRSEND, "MPI_Irsend", C)                                                                     \
    X(IRECV, "MPI_Irecv", C)                                                                       \
    X(PROBE, "MPI_Probe", C)                                                                       \
    X(IPROBE, "MPI_Iprobe", C)                                                                     \
    X(WAIT, "MPI_Wait", W)                                                                         \
    X(WAITALL, "MPI_Waitall", W)                                                                   \
    X(WAITANY, "MPI_Waitany", W)                                                                   \
    X(WAITSOME, "MPI_Waitsome", W)                                                                 \
    X(TEST, "MPI_Test", W)                                                                         \
    X(TESTALL, "MPI_Testall", W)                                                                   \
    X(TESTANY, "MPI_Testany", W)                                                                   \
    X(TESTSOME, "MPI_Testsome", W)                                                                 \
    X(COMPLETED, "tcmpi.completed", W)                                                             \
    X(RECEIVED, "tcmpi.recv", C)

#define TCMPI_ENUM(e, name, kind) TCMPI_##e,
enum tcmpi_op { TCMPI_OPS(TCMPI_ENUM) TCMPI_N_OPS };
#undef TCMPI_ENUM

/*
 * A communicator as the recording calls see it: its job-wide id, its
 * collective sequence counter, how many communicators were made on it, and
 * its ranks in MPI_COMM_WORLD (for peers: the remote group's of an
 * intercommunicator; NULL: the identity).
 */
struct tcmpi_comm {
    _Atomic uintptr_t key; /* the handle's bits; 0 empty, 1 a freed slot */
    uint64_t id;
    _Atomic uint64_t seq;  /* collectives called on it so far */
    _Atomic uint64_t made; /* communicators made by collective calls on it so far */
    int rank, size, peers; /* this process's rank, local size, size of the peer group */
    int *world;            /* peers entries, or NULL */
    bool inter;            /* an intercommunicator: peers are the remote group */
};

/* The open client (NULL before MPI_Init and after MPI_Finalize) and the op ids in it. */
extern tc_client *_Atomic tcmpi_client;
extern uint32_t tcmpi_ops[TCMPI_N_OPS];

/* CLOCK_MONOTONIC in ns (the metadata mpi.init_ns, mpi.finalize_ns). */
static inline uint64_t tcmpi_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The recording clock: the TSC when the client's clock is (tcmpi_tsc, set
 * by tcmpi_start before any call is recorded: ~15 ns a read where a
 * clock_gettime is ~30 on a VM, four per point-to-point message), else
 * tcmpi_ns(). Times and durations the interposer keeps (entries, call
 * sites, counters) are in this clock; tcmpi_record and the senders of sites
 * and counters convert (tcmpi_dur_ns).
 */
extern bool tcmpi_tsc;
static inline uint64_t tcmpi_now(void)
{
#if defined(__x86_64__)
    if (tcmpi_tsc)
        return __builtin_ia32_rdtsc();
#endif
    return tcmpi_ns();
}
/* A duration of tcmpi_now()'s clock in ns (c: the client). */
uint64_t tcmpi_dur_ns(const tc_client *c, uint64_t d);
/* tc_record_ext_ with start and duration in tcmpi_now()'s clock. */
void tcmpi_record(tc_client *c, enum tcmpi_op op, uint64_t start, uint64_t dur, uint64_t bytes,
                  uint64_t elements, const tc_ext *x);

/* The client when calls are recorded, else NULL (one load and a branch). */
static inline tc_client *tcmpi_on(void)
{
    tc_client *c = atomic_load_explicit(&tcmpi_client, memory_order_relaxed);

    return tc_recording(c) ? c : NULL;
}

/* After a successful MPI_Init or MPI_Init_thread: opens the client (once). */
void tcmpi_start(int thread_level);
/*
 * Before MPI_Finalize calls PMPI_Finalize: notes the time, which tcmpi_stop
 * sends as the meta mpi.finalize_ns (the end of the rank's wall time in the
 * report's MPI %; mpi.init_ns, sent by tcmpi_start, is its start).
 */
void tcmpi_finalizing(void);
/* After MPI_Finalize (or at exit without it): flushes, says bye, closes (once). */
void tcmpi_stop(void);

/*
 * Steps (README "MPI jobs"): MPI_Pcontrol(TCMPI_PCONTROL_STEP) ends this
 * rank's step, as tc_step; other levels (mpiP's 0-4...) change nothing. And
 * $TRACECTL_MPI_STEP_ON names a collective (e.g. MPI_Barrier) whose every
 * call on MPI_COMM_WORLD ends a step after its entry (tcmpi_coll).
 */
#define TCMPI_PCONTROL_STEP 100
void tcmpi_pcontrol(int level);

/* True when communicators and requests are kept track of: from MPI_Init on, with a client. */
static inline bool tcmpi_tracking(void)
{
    return atomic_load_explicit(&tcmpi_client, memory_order_relaxed) != NULL;
}

/*
 * The table entry of a communicator the call just used successfully. One made
 * by a call the interposer does not intercept (MPI_Comm_spawn, _connect,
 * _accept, _join, _get_parent, MPI_COMM_SELF) is registered here, on first use,
 * by its members (README "MPI jobs"). NULL when the table is full: the call is
 * then recorded without comm/seq/peer.
 */
struct tcmpi_comm *tcmpi_comm(MPI_Comm comm);
/* Forgets a communicator being freed (its handle may be reused). */
void tcmpi_comm_forget(MPI_Comm comm);

/*
 * Naming at creation. A call that makes communicators collectively over all
 * of parent's members (dup, split, create, cart, graph, merge...) takes the
 * parent's next creation number: *base is then the same on every member
 * (false: parent unknown, the table is full). tcmpi_comm_base_keyed() is the
 * same for a creation not collective over one parent (create_group,
 * Intercomm_create): key is what its members share (the parent, the tag, the
 * groups), and the base counts the creations of that key before it.
 * tcmpi_comm_born() then registers newcomm (MPI_COMM_NULL: nothing) with the
 * id hashed from base and its members' MPI_COMM_WORLD ranks, so that the
 * colours of one split get different ids.
 */
struct tcmpi_origin {
    uint64_t parent; /* the parent's id */
    uint64_t n;      /* the parent's creation number of it: 1, 2, ... (the same on all members) */
};
bool tcmpi_comm_base(MPI_Comm parent, uint64_t *base, struct tcmpi_origin *o);
uint64_t tcmpi_comm_base_keyed(uint64_t key);
void tcmpi_comm_born(MPI_Comm newcomm, uint64_t base);
/*
 * Names newcomm, made by the call kind ("dup", "split", ...) as o says, for
 * the report's communicators table: the metadata mpi.comm.<id, 16 hex
 * digits> = "<kind>#<n> <parent's id, 16 hex digits>" (the daemon makes
 * "split#2/dup#1" of it), the same on every member. At most
 * TCMPI_NAMED_MAX per process (metadata keys are limited); the others are
 * named by the report by their first use.
 */
#define TCMPI_NAMED_MAX 256
void tcmpi_comm_name(MPI_Comm newcomm, const struct tcmpi_origin *o, const char *kind);
/* A hash of a group's members' MPI_COMM_WORLD ranks (0 when MPI cannot tell). */
uint64_t tcmpi_group_hash(MPI_Group g);
uint64_t tcmpi_mix(uint64_t h, uint64_t v);

/*
 * Requests of non-blocking collectives, of MPI_Comm_idup and of Irecvs until
 * a completion call completes them. tcmpi_req_coll() remembers req's (comm,
 * seq, comm_size) from x; tcmpi_req_idup() that req makes *newcomm with base;
 * tcmpi_irecv() records an Irecv that returned rc at its completion (below);
 * tcmpi_req_forget() drops what req was (MPI_Request_free, a handle MPI gave
 * again to a request not remembered), recording an Irecv's entry as posted;
 * tcmpi_req_flush() does that for all (MPI_Finalize). Up to TCMPI_REQ_MAX at
 * once: past that a collective's completion carries no comm/seq, and an
 * Irecv is recorded at once, as posted.
 */
#define TCMPI_REQ_MAX 65536
void tcmpi_req_coll(MPI_Request req, const tc_ext *x);
void tcmpi_req_idup(MPI_Request req, MPI_Comm *newcomm, uint64_t base);
void tcmpi_irecv(tc_client *c, uint64_t t0, int rc, MPI_Comm comm, int source, int tag, int count,
                 MPI_Datatype type, MPI_Request req);
void tcmpi_req_forget(MPI_Request req);
void tcmpi_req_flush(void);
/* True when some request is remembered (one atomic load). */
bool tcmpi_req_any(void);

/* count × the datatype's size; 0 for a negative count or MPI_DATATYPE_NULL. */
uint64_t tcmpi_bytes(int count, MPI_Datatype type);
/* The sum of n counts (negative ones count 0). */
uint64_t tcmpi_sum(const int *counts, int n);

/*
 * Records a call that ran from t0 to t1. k: the communicator (NULL: none
 * known, e.g. the call failed), elements and bytes as README's MPI section
 * defines them. A collective takes k's next sequence number (req: a
 * non-blocking one's request, remembered with it for its completion call;
 * NULL for a blocking one); a point-to-point call's peer is a rank of k's
 * peer group (< 0: none), sent as its rank in MPI_COMM_WORLD.
 */
void tcmpi_coll(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
                uint64_t elements, uint64_t bytes, const MPI_Request *req);
void tcmpi_p2p(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
               int peer, int tag, uint64_t elements, uint64_t bytes);
/*
 * What a receive got, from its status st (NULL: nothing changes): *source
 * and *tag, and *bytes from MPI_Get_count (in bytes), *elements = *bytes /
 * size (the datatype's size). MPI_PROC_NULL: 0 bytes, source MPI_PROC_NULL.
 */
void tcmpi_received(const MPI_Status *st, uint64_t size, int *source, int *tag, uint64_t *elements,
                    uint64_t *bytes);
/*
 * MPI_Sendrecv(_replace) as two entries (README "MPI jobs"): op, the call's
 * interval, its send side (peer dest, tag stag, sn elements, sbytes) and an
 * ext id; then "tcmpi.recv", zero-length at t1, its receive side (source,
 * rtag and the posted rn, rbytes, taken from st when there is one) and
 * parent = that id. k NULL (the call failed): no comm, no peers.
 */
void tcmpi_sendrecv(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
                    int dest, int stag, uint64_t sn, uint64_t sbytes, int source, int rtag,
                    uint64_t rn, uint64_t rbytes, uint64_t rsize, const MPI_Status *st);
/*
 * Where a completion call left each request's status: TCMPI_ST_EACH st[i] is
 * request i's (Waitall, Testall); TCMPI_ST_ONE *st is request index's (Wait,
 * Test: 0; Waitany, Testany); TCMPI_ST_SOME st[j] is request indices[j]'s for
 * j < outcount (Waitsome, Testsome). st NULL: none.
 */
enum { TCMPI_ST_EACH, TCMPI_ST_ONE, TCMPI_ST_SOME };
struct tcmpi_status {
    const MPI_Status *st;
    int kind, index, outcount;
    const int *indices;
};

/*
 * A completion call over n requests: before[i] is what reqs[i] was before the
 * call (NULL: no request was remembered then), after[i] what it is now; a
 * request that was remembered and is MPI_REQUEST_NULL now was completed by
 * the call. The entry carries the (comm, seq, comm_size) of the first
 * non-blocking collective it completed; each further one is a zero-length
 * "tcmpi.completed" entry at t1 whose parent is the call's entry (its ext
 * id). An MPI_Comm_idup it completed registers its communicator. An Irecv
 * it completed is recorded then, with the Irecv call's own interval and what
 * its status s says arrived (as posted without one). c NULL (not
 * recording): only the idups, and the completed requests are forgotten.
 */
void tcmpi_wait(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, int n,
                const MPI_Request *before, const MPI_Request *after, const struct tcmpi_status *s);

/*
 * Callsites (tcmpi_site.c): tcmpi_site_now is the return address of this
 * thread's MPI_* wrapper being recorded (TCMPI_BEGIN sets it); the recording
 * helpers count each call under its site with tcmpi_site_count (no lock, no
 * allocation: a fixed table); tcmpi_site_send, before the bye, sends the
 * TCMPI_SITE_SEND sites with the most time as the metadata mpi.site.<i> =
 * "<op>\t<calls>\t<ns>\t<bytes>\t<offset hex>\t<symbol offset hex>\t<symbol>\t
 * <module>" (the offset in the module addr2line takes, of the call
 * instruction; symbol by dladdr, empty when it has none), mpi.sites (sites
 * seen) and mpi.sites_lost (calls past the table).
 */
#define TCMPI_SITE_SEND 256
extern _Thread_local void *tcmpi_site_now;
void tcmpi_site_count(const void *site, enum tcmpi_op op, uint64_t ns, uint64_t bytes);
void tcmpi_site_send(tc_client *c);
/*
 * TRACECTL_MPI_P2P=counters or =auto (tcmpi_count.c): tcmpi_count_start, at
 * tcmpi_start, sets the mode (tick_ns: the recording clock's ns per unit, 1
 * without the TSC; rate: auto's threshold, point-to-point calls per second)
 * and tcmpi_p2p_counted (not entries); tcmpi_count_p2p counts a
 * point-to-point call ending at t1 (recording clock) under (op, comm id —
 * TCMPI_COUNT_NO_COMM: none known —, peer's MPI_COMM_WORLD rank, -1: none)
 * in this thread's table (no lock, no allocation after the first), false
 * when the call is to be recorded as an entry (the first call of its key;
 * in auto mode every call until the rate passed; or the table is full or
 * could not be made); tcmpi_count_send, before the bye, adds the counts into
 * the client's per-op totals (as counted) and sends the TCMPI_COUNT_SEND rows
 * with the most bytes as the metadata mpi.p2p.<i> = "<op>\t<comm, 16 hex
 * digits or ->\t<peer>\t<calls>\t<ns>\t<bytes>" (every call of the key,
 * its entries included), and mpi.p2p (the rows counted); the counted calls'
 * sizes as mpi.p2p_sizes.<op> = "<bucket>:<calls>:<ns> ..." (bucket 0: 0
 * bytes, k: [2^(k-1), 2^k)); in auto mode mpi.p2p_auto_rate (the threshold)
 * and, once it passed, mpi.p2p_auto_ns (tcmpi_ns() then).
 */
enum tcmpi_p2p_mode { TCMPI_P2P_ENTRIES, TCMPI_P2P_COUNTERS, TCMPI_P2P_AUTO };
#define TCMPI_COUNT_SEND     256
#define TCMPI_COUNT_NO_COMM  UINT64_MAX
#define TCMPI_AUTO_RATE      20000     /* calls per second: TRACECTL_MPI_P2P_RATE's default */
#define TCMPI_AUTO_WINDOW_NS 100000000 /* the window the rate is measured over: 100 ms */
extern bool tcmpi_p2p_counted;
extern enum tcmpi_p2p_mode tcmpi_p2p_mode;
void tcmpi_count_start(enum tcmpi_p2p_mode mode, uint64_t rate, double tick_ns);
bool tcmpi_count_p2p(enum tcmpi_op op, uint64_t comm, int64_t peer, uint64_t t1, uint64_t ns,
                     uint64_t bytes);
void tcmpi_count_send(tc_client *c);
/* The MPI name of op ("MPI_Send"). */
const char *tcmpi_op_name(enum tcmpi_op op);

/* ---- the wrappers' recording (tcmpi_wrap.c), shared with the Fortran bindings (tcmpi_fort.c) */

/* Every wrapper starts the same way: the client (NULL: not recording) and the start time. */
#define TCMPI_BEGIN                                                                                \
    tc_client *c = tcmpi_on();                                                                     \
    uint64_t t0 = c != NULL ? (tcmpi_site_now = __builtin_return_address(0), tcmpi_now()) : 0

/*
 * After a call that returned rc at t0: the entry of op, with the amount the
 * README defines for its kind (nothing but the time when rc is an error).
 * _count: count × type at every rank (Bcast, Reduce, Allreduce, Barrier...);
 * _gather/_scatter/_allgather/_alltoall: this rank's share (rcounts/scounts
 * NULL: the non-v form); req: a non-blocking collective's request, else NULL.
 */
void tcmpi_rec_count(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int count,
                     MPI_Datatype type, const MPI_Request *req);
void tcmpi_rec_gather(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                      const void *sbuf, int scount, MPI_Datatype stype, int rcount,
                      const int *rcounts, MPI_Datatype rtype, int root, const MPI_Request *req);
void tcmpi_rec_scatter(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                       int scount, const int *scounts, MPI_Datatype stype, const void *rbuf,
                       int rcount, MPI_Datatype rtype, int root, const MPI_Request *req);
void tcmpi_rec_allgather(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                         const void *sbuf, int scount, MPI_Datatype stype, int rcount,
                         const int *rcounts, MPI_Datatype rtype, const MPI_Request *req);
void tcmpi_rec_alltoall(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                        const void *sbuf, int scount, const int *scounts, MPI_Datatype stype,
                        int rcount, const int *rcounts, MPI_Datatype rtype, const MPI_Request *req);
/* A point-to-point call to or from peer (a rank of comm) of count × type (times 1 or 2). */
void tcmpi_rec_p2p(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int peer,
                   int tag, int count, MPI_Datatype type, int times);
/* MPI_Recv: source, tag and the amount that arrived from st when the call succeeded (st NULL:
 * the arguments, the posted count). */
void tcmpi_rec_recv(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int source,
                    int tag, int count, MPI_Datatype type, const MPI_Status *st);
/* MPI_Sendrecv(_replace) (op): its two entries (tcmpi_sendrecv), st the call's status. */
void tcmpi_rec_sendrecv(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                        int scount, MPI_Datatype stype, int dest, int stag, int rcount,
                        MPI_Datatype rtype, int source, int rtag, const MPI_Status *st);
/* After a call collective over all of parent's members that made newcomm (MPI_COMM_NULL at a
 * process outside it) and returned rc: gives it its id from parent, and its name as made by
 * the call kind ("dup", "split", ...: tcmpi_comm_name). */
void tcmpi_made(int rc, MPI_Comm parent, MPI_Comm newcomm, const char *kind);

#endif
