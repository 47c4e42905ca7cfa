/*
 * tracectl.h — libtracectl, the instrumentation library of tracectl.
 *
 * A program links it to send trace entries to tracectld (the daemon) over
 * its Unix socket. Recording is cheap and never blocks the program: each
 * thread appends fixed-size records to its own ring buffer, and a background
 * thread encodes them into msgpack batches and writes them. When the daemon
 * is slow or gone, a full ring drops entries and counts them; the count is
 * sent at tc_close() and shows in `tracectl sessions` and reports. A
 * blocking mode (tests, benchmarks, users who want no loss) waits instead.
 *
 *     tc_client *c = tc_open(NULL, NULL);          // session, rank... from the environment
 *     uint32_t mm = tc_op(c, "matmul");            // intern once
 *     tc_begin(c, mm);  ... work ...  tc_end(c, bytes, &out, in, 2);
 *     tc_step(c);                                  // next training step
 *     tc_close(c);                                 // flush, bye, free
 *
 * Every function is thread-safe and accepts a NULL or disabled client (then
 * it does nothing). The library never prints, exits or aborts: errors are
 * returned as negative errno values, and tc_last_error() says why a client
 * sends nothing.
 *
 * Nothing the daemon would refuse is sent: an entry with an op id this
 * client never defined (tc_op), a time, duration, end (start + duration),
 * memory size, step or shape dimension above INT64_MAX, or a device name
 * over 1024 bytes or not UTF-8, is dropped and counted in tc_dropped() (one
 * bad entry sent would close the connection and lose everything after it);
 * a refused name or metadata pair gets 0 / -EINVAL, and an open with a rank
 * outside 0 <= rank < world or a session name over 256 bytes a disabled
 * client. tc_last_refusal() says why, naming the limit.
 *
 * Accounting (tc_stats): every entry recorded is stored (acknowledged by the
 * daemon), dropped (never sent: a full ring, an offline client, refused at
 * the call, unsent when the connection broke or tc_close's time ran out),
 * unconfirmed (wholly written to the socket, not acknowledged when the
 * connection ended: the daemon may have stored it, and its report says how
 * many it did) or, while the client runs, pending:
 * recorded = stored + dropped + unconfirmed + pending, exactly, per process.
 *
 * fork(): a client is per process. A child forked after tc_open() inherits
 * a copy of the client that is not connected; the parent's client is not
 * touched (it keeps its connection, its writer thread and its rings, and
 * what they held at the fork is the parent's to send). The child's copy
 * connects on its first recording call (or tc_flush) on any thread, as a
 * new process of the same session, with its own connection, writer thread
 * and rings; a child that records nothing (e.g. one that execs) never
 * connects. Its hello is built as tc_open() built the parent's: what the
 * options gave is kept (session, rank, world, device, host); what came from
 * the environment (TRACECTL_SESSION, RANK, WORLD_SIZE, ...) is read again
 * from the child's environment at that first call, so a launcher that sets
 * RANK in the child gets that rank, and the same rank as the parent
 * otherwise. Its ops keep their ids (the child defines them again on its
 * connection) and the step counter goes on; metadata is per process (the
 * child's starts empty); tc_dropped() and tc_recorded() start at 0; an op
 * begun (tc_begin) before the fork is recorded by the parent only;
 * tc_session_id() is -1 until the child's hello is answered. The child
 * calls tc_close() (or tc_flush()) before it exits, like any process, or
 * what it recorded since its last flush is lost. Offline clients stay
 * offline in the child, counting from 0.
 *
 * Environment: TRACECTL_SOCKET, TRACECTL_SESSION (else SLURM_JOB_ID, else
 * TORCHELASTIC_RUN_ID, else "default"), rank from RANK, OMPI_COMM_WORLD_RANK,
 * PMI_RANK or SLURM_PROCID, world size from WORLD_SIZE, OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or SLURM_NTASKS, TRACECTL_DEVICE, TRACECTL_DISABLE=1 (a disabled
 * client), TRACECTL_BLOCKING=1 (blocking mode), TRACECTL_CLOCK=monotonic
 * (tc_begin/tc_end read clock_gettime, not the TSC: see tc_clock()),
 * TRACECTL_CLOSE_TIMEOUT (seconds, may be fractional: how long tc_close may
 * take in all; see tc_close()), TRACECTL_HOME ("ADDR:PORT": the home daemon
 * the local daemon forwards this session to, a job on several hosts; sent in
 * hello as `home`, docs/hosts.md).
 */
#ifndef TRACECTL_H
#define TRACECTL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TC_BUILDING_SHARED)
#define TC_API __attribute__((visibility("default")))
#else
#define TC_API
#endif

#define TC_MAX_DIMS   16 /* dimensions of one shape (PROTOCOL.md) */
#define TC_MAX_INPUTS 8  /* input shapes of one entry */

typedef struct tc_client tc_client;

/*
 * The one part of a client the header may read: every client starts with it,
 * so that recording on a TRACECTL_DISABLE=1 (or NULL) client is an inline
 * load and branch, with no call into the library. `active` is 1 when
 * recording calls must reach the library: a connected client, or one that
 * found no daemon and counts what it drops. Read-only for callers.
 */
struct tc_client_head {
    int active;
};

/* 1 when recording calls on c go into the library (see tc_enabled() for "entries are sent"). */
static inline int tc_recording(const tc_client *c)
{
    return c != NULL && ((const struct tc_client_head *)(const void *)c)->active;
}

/* A tensor shape: ndim dimensions (at most TC_MAX_DIMS). */
typedef struct tc_shape {
    uint32_t ndim;
    uint64_t dims[TC_MAX_DIMS];
} tc_shape;

/*
 * Options of tc_open(). Zero means "unknown: the environment's, else the
 * default" in every field, so `tc_options o = {0};` and tc_options_init()
 * both take everything from the environment. rank 0 is a real rank, so a
 * rank is taken as given when it is > 0, or when it is 0 and world > 0;
 * a rank of 0 while world is unknown (≤ 0), as in a zeroed struct, or -1,
 * comes from the environment.
 */
typedef struct tc_options {
    const char *socket_path; /* NULL: $TRACECTL_SOCKET, else the PROTOCOL.md default */
    const char *session;     /* NULL: from the environment (see above) */
    int64_t rank;            /* see above; from the environment: else absent */
    int64_t world;           /* > 0: the number of processes; ≤ 0: environment, else absent */
    const char *device;      /* NULL: $TRACECTL_DEVICE, else none */
    const char *host;        /* NULL: gethostname() */
    int blocking;        /* 1: wait for ring space instead of dropping; TC_DROP: drop (and count)
                            whatever the environment says; 0 or -1: $TRACECTL_BLOCKING=1 waits,
                            else drop */
    size_t ring_entries; /* per thread, a power of two; 0: 65536 (2 MiB per thread) */
    unsigned flush_interval_ms; /* how often the writer thread drains; 0: 5 ms */
    unsigned close_timeout_ms;  /* the most tc_close() takes in all; 0: $TRACECTL_CLOSE_TIMEOUT
                                   (seconds), else 5 s, or no limit in blocking mode */
} tc_options;

#define TC_DROP 2 /* tc_options.blocking: the default mode, even with TRACECTL_BLOCKING=1 */

/* Fills o with "take everything from the environment" (the same as zeroing it). */
TC_API void tc_options_init(tc_options *o);

/*
 * Connects, says hello and waits for the daemon's welcome (up to 5 s).
 * o may be NULL (all defaults). Returns a client, or:
 * - TRACECTL_DISABLE=1: a disabled client (every call a no-op that counts
 *   nothing), *err = 0;
 * - no daemon / a refused hello, default mode: a disabled client, *err set
 *   to the negative errno (-ENOENT, -ECONNREFUSED, -ETIMEDOUT, -EPROTO, ...,
 *   or -EPERM when the socket may be another user's: its directory is not
 *   this user's or root's, or others may write it, or the daemon does not
 *   run as this user or root), the reason in tc_last_error().
 *   It sends nothing, but counts every entry it would have recorded in
 *   tc_recorded() and tc_dropped() (relaxed atomic adds; a deferred op counts
 *   when deferred);
 * - the same in blocking mode: NULL, *err set;
 * - options or environment the daemon would refuse, checked before
 *   connecting: *err = -EINVAL and the client as above (a session name empty,
 *   over 256 bytes or not UTF-8; a rank outside 0 <= rank < world; a rank or
 *   world over 2^31 - 1; a device or host name over 1024 bytes or not
 *   UTF-8), the limit named in tc_last_error() and tc_last_refusal().
 * NULL is also returned on out of memory (*err = -ENOMEM). err may be NULL.
 * A connected client has its writer thread running and the calling
 * thread's ring allocated and touched (ring_entries × 32 bytes); another
 * thread gets its ring at its first recording call.
 * The session defaults to $TRACECTL_SESSION, $SLURM_JOB_ID,
 * $TORCHELASTIC_RUN_ID, else "default". The caller frees the client with
 * tc_close(), whatever its state.
 */
TC_API tc_client *tc_open(const tc_options *o, int *err);

/* 1 when entries are being sent, 0 for a disabled (or NULL) client. */
TC_API int tc_enabled(const tc_client *c);

/*
 * Why c sends nothing, or stopped sending: 0 while all is well (and for a
 * NULL client or one disabled by TRACECTL_DISABLE=1), else the negative
 * errno tc_open() returned or the connection broke with (-ENOENT,
 * -ECONNREFUSED, -EPROTO, -ETIMEDOUT, -EPIPE, ...). msg (may be NULL) gets a
 * one-line description owned by c, valid until tc_close() ("" for 0): when
 * the daemon refused the hello or closed the connection, its own error code
 * and message, e.g. "the daemon refused the hello: bad_message: hello.world
 * ...". The first error is kept; what follows from it does not replace it.
 */
TC_API int tc_last_error(const tc_client *c, const char **msg);

/*
 * The id of an op name (UTF-8, 1..1024 bytes), interning it: the same name
 * always gives the same id. category (NULL: the daemon classifies by name)
 * is one short word: compute, comm, memory, io, other. Call it once per name
 * and keep the id; it takes a lock. Returns 0 for a disabled client or a
 * bad name or category (0 is never a valid id; tc_last_refusal() says why):
 * a category is 1..32 bytes of UTF-8. The daemon takes at most 65,536 op
 * names per session (8 MiB of them), 4,096 device names and 65,536 distinct
 * shape pairs: past one, it ends the connection with a `limit` error (README
 * "Limits").
 */
TC_API uint32_t tc_op(tc_client *c, const char *name);
TC_API uint32_t tc_op_cat(tc_client *c, const char *name, const char *category);

/* Advances the step counter (0, 1, 2, ...) that every entry records. */
TC_API void tc_step(tc_client *c);
TC_API void tc_set_step(tc_client *c, uint64_t step);
/*
 * Sends how long the calling thread waited for a CPU (runnable on a run queue, Linux's
 * /proc/thread-self/schedstat) since tc_open() or its last tc_cpu_wait(), as the current
 * step's CPU wait (metadata "tracectl.cpu_wait" = "<step> <ns>"): call it right before
 * tc_step() from the thread that runs the steps. The report gives it as cpu_wait_ns, and the
 * verdict does not name a rank late for want of a CPU. A thread other than the last one's
 * first call only starts counting. Returns 0, -ENOTCONN (a disabled client), -ENOSYS (not
 * Linux, or the file cannot be read) or what tc_meta_str() returns.
 */
TC_API int tc_cpu_wait(tc_client *c);

/* Begins op on this thread, ending (and recording) the thread's previous op first. */
TC_API void tc_begin_(tc_client *c, uint32_t op);
static inline void tc_begin(tc_client *c, uint32_t op)
{
    if (tc_recording(c))
        tc_begin_(c, op);
}
/*
 * Ends this thread's current op: mem_bytes its output occupies; out and in
 * (n_in of them, at most TC_MAX_INPUTS; more are left out) may be NULL.
 * Without a current op it does nothing. The entry's elements go as nil, so
 * the daemon takes the product of out's dimensions. Shapes are copied: the
 * caller keeps its own. Each distinct (out, in) pair is kept once per client
 * until tc_close (at most 4096 pairs; an entry with a pair beyond that is
 * recorded without shapes).
 */
TC_API void tc_end_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                    size_t n_in);
static inline void tc_end(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                          size_t n_in)
{
    if (tc_recording(c))
        tc_end_(c, mem_bytes, out, in, n_in);
}

/*
 * Records a complete entry that started at start_ns (tc_now_ns()'s clock) and
 * lasted dur_ns. Shapes as for tc_end(). device NULL or "": the client's
 * device; another name is copied and kept until tc_close (naming a device
 * other than the one this thread named last takes a lock).
 */
TC_API void tc_record_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                       uint64_t mem_bytes, const tc_shape *out, const tc_shape *in, size_t n_in,
                       const char *device);
static inline void tc_record(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                             uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                             size_t n_in, const char *device)
{
    if (tc_recording(c))
        tc_record_(c, op, start_ns, dur_ns, mem_bytes, out, in, n_in, device);
}

/*
 * The entry extension map (PROTOCOL.md Part 3, "Entry extension map"): the
 * fields an entry may carry beyond v1's. `has` says which are given; the
 * others are not sent.
 */
#define TC_EXT_STREAM    (1u << 0) /* the producer's track within (process, device) */
#define TC_EXT_PEER      (1u << 1) /* peer rank of a point-to-point call */
#define TC_EXT_TAG       (1u << 2) /* MPI tag (may be negative) */
#define TC_EXT_COMM      (1u << 3) /* communicator / process-group id, unique within the job */
#define TC_EXT_SEQ       (1u << 4) /* per-communicator collective sequence number */
#define TC_EXT_CHECKSUM  (1u << 5) /* 64-bit checksum of the op's output */
#define TC_EXT_ID        (1u << 6) /* this entry's id, unique within the process (tc_region_id) */
#define TC_EXT_PARENT    (1u << 7) /* the id of the entry this one is nested in */
#define TC_EXT_COMM_SIZE (1u << 8) /* ranks in the communicator (comm), 1 .. 2^31 - 1 */
#define TC_EXT_SPAN      (1u << 9) /* the whole interval when dur_ns is the self time */

/*
 * Fields are only ever added at the end, each with its bit, and the library
 * reads a field only when its bit is set: a program built against an older
 * header (a shorter struct, never that bit) works with a newer library.
 */
typedef struct tc_ext {
    uint32_t has; /* TC_EXT_* bits */
    uint64_t stream, peer, comm, seq, checksum;
    int64_t tag;
    uint64_t id, parent; /* read only with TC_EXT_ID / TC_EXT_PARENT */
    /*
     * The number of ranks in the communicator `comm` (TC_EXT_COMM_SIZE): the
     * daemon then counts a collective matched by comm + seq complete once
     * that many ranks arrived, not the whole job's world (a sub-communicator,
     * a process subgroup). Read only with TC_EXT_COMM_SIZE; outside 1 ..
     * 2^31 - 1 the entry is dropped and counted (the daemon would refuse it).
     */
    uint64_t comm_size;
    /*
     * The entry's whole interval in ns from start_ns, its children included,
     * when dur_ns is its self time (TC_EXT_SPAN; PROTOCOL.md "ext key span"):
     * reports count dur_ns, timelines (export chrome, perfetto) draw span.
     */
    uint64_t span;
} tc_ext;

/* elements argument of tc_record_ext(): none given (the daemon takes out's product). */
#define TC_ELEMENTS_NONE UINT64_MAX

/*
 * tc_record() with the entry's elements (TC_ELEMENTS_NONE: not given) and
 * extension fields (ext NULL or ext->has 0: none; they are copied). An entry
 * with either takes three ring slots instead of one; an entry with neither is
 * exactly tc_record()'s. elements above INT64_MAX (other than
 * TC_ELEMENTS_NONE) are out of the protocol's range: the entry is dropped and
 * counted. A daemon that predates the extension map stores the entry without
 * it.
 */
TC_API void tc_record_ext_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                           uint64_t mem_bytes, uint64_t elements, const tc_shape *out,
                           const tc_shape *in, size_t n_in, const char *device, const tc_ext *ext);
static inline void tc_record_ext(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                                 uint64_t mem_bytes, uint64_t elements, const tc_shape *out,
                                 const tc_shape *in, size_t n_in, const char *device,
                                 const tc_ext *ext)
{
    if (tc_recording(c))
        tc_record_ext_(c, op, start_ns, dur_ns, mem_bytes, elements, out, in, n_in, device, ext);
}

/*
 * Checksums of an op's output, for `tracectl diff --divergence`: FNV-1a, 64
 * bits, over the output's bytes (offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3; tc_checksum("a", 1) is 0xaf63dc4c8601ec8c). Two runs whose
 * outputs have equal bytes get equal checksums, so the first entry where they
 * differ is where the runs parted. For an output in several buffers, chain
 * tc_checksum_add() from TC_CHECKSUM_INIT. Pure functions: no client, no
 * lock; about one multiply per byte, so checksum what you can afford (a
 * strided sample of a large tensor is a choice the caller makes, the same in
 * both runs).
 */
#define TC_CHECKSUM_INIT 0xcbf29ce484222325ull

static inline uint64_t tc_checksum_add(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static inline uint64_t tc_checksum(const void *data, size_t n)
{
    return tc_checksum_add(TC_CHECKSUM_INIT, data, n);
}

/*
 * tc_record() with the checksum of the entry's output (the ext map's
 * `checksum`), e.g. for an op timed by the caller:
 *
 *     uint64_t t0 = tc_now_ns();
 *     matmul(a, b, out);
 *     tc_record_checksum(c, mm, t0, tc_now_ns() - t0, bytes, &shape, NULL, 0, NULL,
 *                        tc_checksum(out, bytes));
 *
 * It takes three ring slots, as any entry with an ext map (tc_record_ext).
 * There is no tc_end() variant: an op begun with tc_begin() is recorded
 * without one.
 */
static inline void tc_record_checksum(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                                      uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                                      size_t n_in, const char *device, uint64_t checksum)
{
    tc_ext x;

    if (!tc_recording(c))
        return;
    x.has = TC_EXT_CHECKSUM;
    x.stream = x.peer = x.comm = x.seq = 0;
    x.tag = 0;
    x.checksum = checksum;
    x.id = x.parent = 0;
    tc_record_ext_(c, op, start_ns, dur_ns, mem_bytes, TC_ELEMENTS_NONE, out, in, n_in, device, &x);
}

/*
 * Nested regions: tc_push() opens a region of op on this thread, tc_pop()
 * closes the innermost one and records it (mem_bytes and shapes as for
 * tc_end). A region opened inside another is sent with the outer one's id as
 * its `parent`, and the outer one with its `id` (PROTOCOL.md "Links between
 * entries"), so that exports show the real stack; a region with neither
 * (nothing around it, nothing in it) is sent as a plain entry. Regions are
 * per thread and nest up to 256 deep (deeper ones are dropped and counted);
 * tc_pop() without an open region does nothing. They are apart from
 * tc_begin()/tc_end(), which stay as cheap as they are: an entry recorded
 * with tc_begin/tc_end inside a region has no parent. A linked region takes
 * four ring slots (tc_record_ext).
 */
TC_API void tc_push_(tc_client *c, uint32_t op);
static inline void tc_push(tc_client *c, uint32_t op)
{
    if (tc_recording(c))
        tc_push_(c, op);
}
TC_API void tc_pop_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                    size_t n_in);
static inline void tc_pop(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in,
                          size_t n_in)
{
    if (tc_recording(c))
        tc_pop_(c, mem_bytes, out, in, n_in);
}
/*
 * A new entry id for tc_ext.id, unique within the process's connection
 * (never 0), for bindings that keep their own region stacks. 0 for a
 * disabled or NULL client.
 */
TC_API uint64_t tc_region_id(tc_client *c);

/*
 * Deferred timing for asynchronous devices: tc_defer() notes that op starts
 * now on this thread; tc_finalize() records every op this thread deferred
 * since the last finalize, each ending at end_ns (e.g. after a device sync).
 * At most 1024 pending per thread; more are dropped and counted.
 */
TC_API void tc_defer(tc_client *c, uint32_t op);
TC_API void tc_finalize(tc_client *c, uint64_t end_ns);

/*
 * Metadata of this process (key and string at most 1024 bytes of UTF-8).
 * Returns 0, -ENOTCONN (a disabled client), -EINVAL (an empty, over-long or
 * non-UTF-8 key or string: tc_last_refusal() says which) or -ENOSPC (a
 * 1,025th distinct key: the daemon takes at most 1,024 per process and would
 * end the connection; it is not sent). Setting a key again replaces its value.
 */
TC_API int tc_meta_str(tc_client *c, const char *key, const char *value);
TC_API int tc_meta_int(tc_client *c, const char *key, int64_t value);
TC_API int tc_meta_double(tc_client *c, const char *key, double value);
TC_API int tc_meta_bool(tc_client *c, const char *key, int value);

/*
 * Sends everything recorded so far and waits for the daemon's ack: the
 * entries are then on disk. timeout_ms < 0 waits forever. Returns 0,
 * -ETIMEDOUT, -ENOTCONN (disabled or the connection is gone: then every
 * entry recorded before the call is settled in tc_stats() when it returns,
 * as dropped or unconfirmed) or -EIO (the daemon could not store some
 * entries). To a daemon that takes them, the flush carries this client's
 * counters (tc_stats), which the daemon's report shows.
 */
TC_API int tc_flush(tc_client *c, int timeout_ms);

/*
 * Flushes, sends bye with the dropped count (and, to a daemon that takes
 * them, the final counters of tc_stats), stops the background thread and
 * frees the client, all within the close timeout: tc_options.close_timeout_ms,
 * else $TRACECTL_CLOSE_TIMEOUT (seconds, e.g. "0.5"), else 5 s; in blocking
 * mode, without either, it waits as long as the daemon takes. Returns what the
 * flush returned (0 when all was acked, -ETIMEDOUT when the time ran out).
 * NULL is a no-op returning 0. When the time runs out (a stalled daemon),
 * tc_close returns then: bye goes only if the socket takes it at once and
 * only after whole messages; without it the daemon ends the process when it
 * reads the connection's end (as soon as it runs again), and this process's
 * unsent entries are not in the daemon's dropped count. What the client
 * knows at the end: tc_close_stats().
 */
TC_API int tc_close(tc_client *c);

/*
 * Why the last call this thread made was refused by the library itself, so
 * that nothing the daemon would refuse is sent: a one-line message naming the
 * limit, e.g. "tc_record: op 9 was never defined on this client (it defined
 * 3 ops)" or "tc_op: the name is 1500 bytes, over the limit of 1024". Per
 * thread, like errno; "" when no call was refused yet. Refused calls are: an
 * entry with an op id never defined (dropped and counted), a bad op name or
 * category (tc_op returns 0), device name (the entry is dropped and counted),
 * metadata key or value, or a 1,025th distinct metadata key (-EINVAL,
 * -ENOSPC), and tc_open's options (a disabled client, as in tc_last_error).
 */
TC_API const char *tc_last_refusal(void);

/*
 * A client's accounting (see the top of this file); a struct tag, not a
 * typedef, since tc_stats() is the function. The caller sets size to
 * sizeof(struct tc_stats) (TC_STATS_INIT does) before the call: a library built
 * with a larger struct fills only that much, so fields added later at the
 * end never overrun an older caller's struct; size comes back as the bytes
 * filled.
 */
struct tc_stats {
    uint32_t size;        /* in: sizeof(struct tc_stats); out: the bytes filled */
    uint32_t reserved;    /* 0 */
    uint64_t recorded;    /* entries given to the client (tc_recorded()) */
    uint64_t stored;      /* acknowledged by the daemon as stored (its last ack's count) */
    uint64_t dropped;     /* never sent (tc_dropped()) */
    uint64_t unconfirmed; /* written to the socket, not acknowledged when the connection ended */
    uint64_t pending;     /* neither yet: in a ring, being sent, or awaiting an ack */
    uint64_t sent;        /* wholly written to the socket (stored and unconfirmed among them) */
};

#define TC_STATS_V1_SIZE 56u /* the first version's size: the least tc_stats() takes */
#define TC_STATS_INIT                                                                              \
    {                                                                                              \
        sizeof(struct tc_stats), 0, 0, 0, 0, 0, 0, 0                                               \
    }

/*
 * Fills *out (its size set by the caller) with c's figures:
 * recorded = stored + dropped + unconfirmed + pending. A NULL client, or
 * one disabled by TRACECTL_DISABLE=1, has all 0; an offline client has
 * recorded = dropped. While other threads record, pending may read low (it
 * never reads an entry twice); after tc_flush() returned 0 with no thread
 * recording, pending is 0. In a forked child every figure starts at 0.
 * Returns 0, or -EINVAL when out is NULL or out->size < TC_STATS_V1_SIZE.
 */
TC_API int tc_stats(const tc_client *c, struct tc_stats *out);

/*
 * tc_close(), filling *out (may be NULL; its size set as for tc_stats) with
 * the final figures: pending is 0, so recorded = stored + dropped +
 * unconfirmed exactly. unconfirmed is not 0 only when the connection ended
 * (the daemon died, or stopped and tc_close's time ran out) with entries
 * sent and not acknowledged. Returns what tc_close() returns.
 */
TC_API int tc_close_stats(tc_client *c, struct tc_stats *out);

/* Entries dropped so far: never sent (tc_stats). */
TC_API uint64_t tc_dropped(const tc_client *c);
/* Entries recorded so far (sent or not; an offline client's too). */
TC_API uint64_t tc_recorded(const tc_client *c);
/* The session id the daemon gave, -1 for a disabled client. */
TC_API int64_t tc_session_id(const tc_client *c);
/* CLOCK_MONOTONIC in nanoseconds: the clock entries use. */
TC_API uint64_t tc_now_ns(void);
/*
 * What tc_begin() and tc_end() read: "tsc" (the x86-64 invariant TSC, read
 * with rdtsc; the library's writer thread converts the ticks to
 * CLOCK_MONOTONIC ns before sending, so entries mean the same either way) or
 * "monotonic" (clock_gettime, also for a disabled or NULL client). The TSC is
 * used when the CPU has an invariant one (constant_tsc, nonstop_tsc) and the
 * kernel's clocksource is tsc or a calibration check passes at the first
 * tc_open() of the process; TRACECTL_CLOCK=monotonic makes tc_open() use
 * clock_gettime.
 */
TC_API const char *tc_clock(const tc_client *c);

#ifdef __cplusplus
}
#endif

#endif
