/*
 * tcint.h — what the files of libtracectl share: the record and ring
 * layouts, struct tc_client, the hot-path helpers every recording call
 * inlines, and each file's entry points. Internal: never installed, never
 * included outside client/lib/ (the Python extension and the MPI interposer
 * go through tracectl.h only).
 *
 * DESIGN
 * Recording threads never lock, allocate or make a system call other than
 * clock_gettime (shapes: see tcshape.c), and tc_begin/tc_end not even that
 * where the TSC is the client's clock (tcclock.h: they store raw ticks, which
 * the writer thread converts to CLOCK_MONOTONIC ns, re-anchoring the
 * conversion at each drain): each appends a 32-byte record to its
 * own single-producer/single-consumer ring (C11 atomics, power-of-two size),
 * found through a thread-local cache. The rings of a client are linked into
 * a list under the client's mutex when a thread first records.
 *
 * One writer thread per client drains every ring each flush interval (or at
 * once when woken through its self-pipe: by tc_flush, tc_close, or a
 * blocking-mode producer that found its ring full), packs
 * the records as ["batch", ...] messages (at most 4096 entries each) into an
 * output buffer and writes it with poll(); while the buffer still holds
 * unsent bytes (the daemon is slow or stopped) it drains nothing more and
 * sleeps until the socket takes more, the rings fill, and recording threads
 * drop and count (default) or wait (blocking mode: asleep until a drain has
 * freed a quarter of their ring, woken by the writer; see tcring_room). Op
 * definitions and metadata are queued under the mutex
 * and sent before the batch drained after them, so a batch never names an op
 * the daemon has not been told of. The writer also reads the daemon's
 * replies (ack, error) and wakes tc_flush() callers.
 *
 * A client that found no daemon (offline) has no thread and no rings: its
 * recording calls only count what they would have recorded as dropped.
 *
 * The record holds no step: when a thread records under a step other than
 * its last one, it first appends a marker record (op 0) carrying the new
 * step, and the writer applies it to the entries after it. Shapes and devices
 * are indexes into the client's tables, which only grow until tc_close.
 *
 * Memory: ring_entries × 32 bytes per recording thread (2 MiB by default),
 * plus the interned shapes (at most SHAPES_MAX pairs, and their 64 KiB
 * index), plus an output buffer of about 1 MiB.
 *
 * FILES (one subsystem each; functions another file calls carry the file's
 * name as prefix, as tcclock.c's do, so that none collides with a program
 * linking libtracectl.a)
 *   tcclient.c  tc_open, tc_close, tc_flush, the client's life and figures
 *   tcconn.c    the environment, the socket and the hello (opening thread,
 *               then the writer thread)
 *   tcwriter.c  the writer thread: its loop, socket I/O, replies, losses
 *   tcenc.c     draining the rings into msgpack batches (writer thread)
 *   tcring.c    the per-thread rings: allocation, room, blocking-mode waits
 *   tcrecord.c  the recording calls (tc_begin ... tc_pop), any thread
 *   tcshape.c   interning (out, in) shape pairs, lock-free on a hit
 *   tcnames.c   op names, device names, metadata
 *   tccpu.c     tc_cpu_wait: the step thread's wait for a CPU, per step
 *   tcfork.c    fork(): the child's copy of each client, and its restart
 *   tcclock.c   the TSC-to-ns conversion (tcclock.h)
 */
#ifndef TCINT_H
#define TCINT_H

#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "proto.h"
#include "tcclock.h"
#include "tracectl.h"

#define DEFAULT_RING     65536
#define DEFAULT_INTERVAL 5
#define BATCH_MAX        4096 /* tcenc_drain() writes its array header as array16 */
#define OUT_HIGH         (1u << 20)
#define DEFER_MAX        1024
#define OPEN_TIMEOUT_MS  5000
#define CLOSE_TIMEOUT_MS 5000 /* tc_close in all, unless the options or environment say */
#define SHAPE_MAX        1400 /* bytes of a packed (out, in) pair: 145 + 8 × 145 + nil */
#define SHAPES_MAX       4096 /* distinct pairs per client; more are left out */
#define SHAPE_INDEX      (2 * SHAPES_MAX) /* slots of the pairs' hash index: at most half used */

/*
 * One entry as recorded: 32 bytes, half a cache line, no pointers. op 0 is a
 * step marker: start holds the step of the records after it.
 */
struct rec {
    uint64_t start, dur, mem;
    uint32_t op;
    uint16_t shapes; /* index+1 into the client's interned shape pairs, 0: none */
    uint16_t dev;    /* index+1 into the client's device table, 0: the hello device */
};

#define DEVS_MAX 65534 /* distinct device names per client: rec.dev's range */

/*
 * rec.shapes / rec.dev of an entry the daemon would refuse (a dimension or a
 * device name out of range, or a device table that is full): the writer
 * thread drops it and counts it, so that the connection never breaks on it.
 */
#define SHAPES_BAD 0x3fff /* above SHAPES_MAX, below any flag bit of rec.shapes */

/*
 * rec.shapes of an entry timed by tc_begin/tc_end on a client whose clock is
 * the TSC (tcclock.h): start is in TSC ticks, and start + dur too. The writer
 * thread converts both to CLOCK_MONOTONIC ns before it validates and packs
 * the entry. Entries given a time (tc_record, tc_finalize, ...) are in ns.
 */
#define REC_TICKS 0x4000u
#define DEV_BAD   0xffff

/*
 * An entry with elements or extension fields (tc_record_ext) is a record
 * whose shapes carry REC_EXT (shape indexes stay below SHAPES_MAX), followed
 * by two rec_ext slots, committed together: w[0..3] of the first are
 * elements (UINT64_MAX: nil), stream, peer, comm; of the second seq,
 * checksum, tag (as two's complement) and the TC_EXT_* bits given. Two
 * slots, not one 64-byte struct: the second may wrap to the ring's start.
 * An entry with links (TC_EXT_ID or TC_EXT_PARENT) or a communicator size
 * (TC_EXT_COMM_SIZE) or a span (TC_EXT_SPAN) has a third slot: id, parent,
 * comm_size, span (rec_ext_slots).
 */
struct rec_ext {
    uint64_t w[4];
};

#define REC_EXT      0x8000u
#define TC_EXT_KNOWN 0x3ffu                      /* the TC_EXT_* bits this library packs */
#define TC_EXT_LINKS (TC_EXT_ID | TC_EXT_PARENT) /* links */
/* need the third ext slot */
#define TC_EXT_THIRD (TC_EXT_LINKS | TC_EXT_COMM_SIZE | TC_EXT_SPAN)
_Static_assert(sizeof(struct rec_ext) == sizeof(struct rec), "an ext slot is a ring slot");

/* A batch in the writer's output: it ends at byte `end` of out, n entries. */
struct sent_mark {
    size_t end;
    uint64_t n;
};

/*
 * What was dropped of one op, exact (issue 29 #3): calls, their total
 * duration in ns and their mem_bytes (the MPI interposer's message bytes).
 * Recording threads add with relaxed atomics; flush and bye carry the
 * totals. In chunks of DROP_CHUNK ops, allocated by tc_op before it hands
 * out an id in them and never moved, so the drop path reads them without a
 * lock (a chunk that could not be allocated is NULL: its ops' drops count
 * only in the total).
 */
struct op_drop {
    _Atomic uint64_t calls, ns, bytes;
    /* of those: calls counted by design, never meant as entries (the MPI
     * interposer's TRACECTL_MPI_P2P counters), their ns and bytes */
    _Atomic uint64_t counted, counted_ns, counted_bytes;
};
#define DROP_CHUNK  1024
#define DROP_CHUNKS 64 /* 65,536 ops: the daemon's limit of op ids per connection */

struct pending {
    uint32_t op;
    uint64_t start;
};

/* A region open on a thread (tc_push): id 0 until a region opens inside it. */
#define REGION_MAX 256
struct region {
    uint32_t op;
    bool has_parent;
    uint64_t start, id, parent;
};

/* An interned (out, in) pair: never changes once its index is handed out. */
struct shape_pair {
    uint64_t hash;
    uint64_t *key;  /* the words recording threads compare (see shape_key_make) */
    char *bytes;    /* the pair packed as msgpack, for the writer */
    uint32_t words; /* the length of key */
    uint32_t len;   /* of bytes */
};

/*
 * Four cache lines, so that a begin/end pair touches two lines of the ring
 * (and the slot), neither of which the writer thread writes: one read-only
 * line both threads read, and the recording thread's own line, which the
 * writer only reads (head) once per drain.
 */
struct ring {
    /* Read-only once the ring is listed. */
    struct rec *buf;
    uint64_t mask;
    struct ring *next;
    /* The recording thread's: head, and the state of the begin/end path. */
    _Alignas(64) _Atomic uint64_t head;
    uint64_t tail_seen; /* the recording thread's last look at tail: re-read only when full */
    uint64_t step;      /* the step of its last record (the last marker) */
    uint64_t cur_start; /* the open op's start (TSC ticks when the client's clock is the TSC) */
    uint32_t cur_op;
    bool open;
    /* The writer thread's. */
    _Alignas(64) _Atomic uint64_t tail;
    uint64_t wstep;             /* the step of the records it drains */
    uint64_t wend_tsc, wend_ns; /* the end of the last REC_TICKS record it converted */
    /* The recording thread's, off the begin/end path. */
    _Alignas(64) _Atomic uint64_t marks; /* step markers among the records (tc_recorded) */
    _Atomic uint64_t wait_for; /* blocking mode: the tail this thread sleeps for; 0: none */
    _Atomic uint32_t wake_seq; /* bumped (and the thread woken) when tail passes wait_for */
    struct pending *deferred;
    size_t n_deferred;
    struct region *regions; /* tc_push's stack, allocated at the first push */
    size_t n_regions;       /* its depth, counting those past REGION_MAX (dropped) */
    const char *dev_str;    /* the last device this thread named: the client's copy */
    uint32_t dev_id;        /* and its index+1 */
};

struct tc_client {
    /* Read on every record, written (almost) never: a cache line of their own,
     * so the writer thread's updates elsewhere never evict it from the
     * recording cores. */
    _Alignas(64) struct tc_client_head head; /* first: read by tracectl.h's inline checks */
    bool disabled;                           /* sends nothing: TRACECTL_DISABLE=1, or offline */
    bool offline; /* no daemon answered tc_open(): recording only counts drops */
    bool blocking;
    uint16_t clock; /* REC_TICKS: tc_begin/tc_end read the TSC; 0: clock_gettime */
    double tick_ns; /* the TSC's calibrated ns per tick (set once): a dropped entry's ticks */
    uint64_t gen;   /* distinguishes clients for the thread-local cache */
    /* Ops defined so far (ids 1..n_ops_pub): an entry naming another id is
     * refused at the call (the daemon would end the connection on it).
     * Stored by tc_op under mu, loaded without a lock by recording threads. */
    _Atomic uint32_t n_ops_pub;
    int fd;
    int64_t session_id;
    size_t ring_entries;
    unsigned interval_ms;
    int64_t close_ms; /* the most tc_close may take, -1: no limit (tc_options.close_timeout_ms) */
    char *device;

    /* How the hello is built, kept for a forked child's own hello: what the
     * options gave (NULL, -1: the environment's, read again by the child),
     * and what that resolved to for the last hello. */
    char *path, *opt_session, *opt_host;
    int64_t opt_rank, opt_world;
    char *h_session;
    int64_t h_rank, h_world;

    struct op_drop *_Atomic drops[DROP_CHUNKS]; /* per op id - 1; see struct op_drop */

    _Alignas(64) _Atomic uint64_t step; /* written by tc_step only */
    _Alignas(64) _Atomic uint64_t dropped;
    _Atomic uint64_t rejected;   /* entries that never reached a ring (part of dropped) */
    _Atomic uint64_t region_ids; /* the last id tc_region_id handed out */

    /* Why the client sends nothing: the first error, set once (tc_last_error). */
    _Atomic int err_set;
    _Atomic int err_code;
    char err_msg[256];

    /* Shapes have their own lock: a recording thread whose cache misses must
     * never wait for the writer thread, which holds mu while it drains. */
    pthread_mutex_t shape_mu;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ring *rings; /* guarded by mu */
    char **ops;         /* interned names; ops[i] has id i+1; guarded by mu */
    char **cats;        /* their categories (NULL: none), for a forked child's ops */
    size_t n_ops, cap_ops;
    char **devs; /* interned device names, never freed before close */
    size_t n_devs, cap_devs;
    /* Metadata keys this process has set (at most PROTO_MAX_META_KEYS), guarded
     * by mu: n_meta_keys of them count; up to n_meta_alloc are allocated (a
     * forked child starts counting from 0 again and reuses them). */
    char **meta_keys;
    size_t n_meta_keys, n_meta_alloc, cap_meta_keys;
    /* tc_cpu_wait(): the thread of the last run-queue reading (0: none) and that reading in
     * ns, guarded by mu */
    long cw_tid;
    uint64_t cw_last;
    /* Interned shape pairs, appended under shape_mu, and their hash index
     * (open addressing), which recording threads read without the lock: a
     * slot holds the pair's hash's top 32 bits and its index+1 (0: empty),
     * stored (release) once the pair is complete, and never changed after. */
    struct shape_pair shapes[SHAPES_MAX];
    size_t n_shapes;
    _Atomic bool shapes_full; /* n_shapes == SHAPES_MAX: new pairs go without the lock */
    _Atomic uint64_t shape_index[SHAPE_INDEX];
    msgpack_sbuffer control;         /* ops and meta messages not yet sent; guarded by mu */
    uint64_t flush_req, flush_acked; /* guarded by mu */
    uint64_t flush_counted; /* broken: flushes whose entries are all counted as dropped; mu */
    int flush_rc;           /* the last flush reply: 0 or -EIO; guarded by mu */
    bool closing;           /* guarded by mu */
    bool writer_done;       /* the writer thread has left its loop; guarded by mu */
    bool writer_running;    /* tcwriter_start started one (a forked child's copy: false) */
    /* A fork in progress (tcfork.c): park asks the writer thread to wait at the
     * top of its loop, parked says it does; both guarded by mu. */
    bool park, parked;
    /* tc_close's deadline (CLOCK_MONOTONIC ns, 0: none), which a writer thread
     * still saying hello (a forked child's) gives up at. */
    _Atomic uint64_t close_deadline;
    _Atomic bool broken; /* the connection is gone: what is recorded is dropped */

    /* fork (see client_forked): set in the child, cleared by tcfork_restart under mu. */
    bool forked;
    size_t ops_at_fork;   /* ops defined on the parent's connection: sent again by the child */
    struct ring *stale;   /* the parent's rings, freed by the child at restart or close */
    tc_client *live_next; /* in the list of clients a fork must split; guarded by live_mu */

    pthread_t thread;
    int wake[2];         /* a self-pipe: tc_flush and tc_close wake the writer thread */
    msgpack_sbuffer out; /* writer thread only */
    size_t out_off;
    uint64_t flush_sent;
    bool need_connect; /* a forked child's writer connects and says hello first */
    bool counters_ok;  /* the welcome said the daemon takes counters in flush and bye */
    bool reader_ok;    /* reader is initialised */
    /* Accounting (tc_stats): every entry recorded is, at any time, stored
     * (acked: the last ack's count), dropped (never sent), unconfirmed (sent,
     * not acked when the connection ended) or pending. packed and the batch
     * ends are the writer thread's; sent, acked and unconfirmed are read by
     * tc_stats from any thread. */
    uint64_t packed;         /* entries packed into batches for this connection */
    struct sent_mark *marks; /* the batches in out not yet wholly written */
    size_t n_marks, first_mark, cap_marks;
    _Atomic uint64_t sent;        /* entries of batches wholly written to the socket */
    _Atomic uint64_t acked;       /* the last ack's `stored` */
    _Atomic uint64_t unconfirmed; /* sent - acked when the connection ended */
    bool loss_counted;
    bool torn; /* the socket was handed part of a message: no bye may follow it */
    struct proto_reader reader;
    struct tcclock tsc; /* converts the rings' TSC ticks; writer thread only (once started) */
};

/* ---- entry points, by file ------------------------------------------------ */

/* tcclient.c: records why the client sends nothing, once (tc_last_error). */
void tcclient_error(tc_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tcclient.c: the figures flush and bye carry to the daemon (PROTOCOL.md Part 3). */
void tcclient_counters(tc_client *c, struct proto_counters *k);
/* tcclient.c: why this thread's call was refused (tc_last_refusal). */
void tcclient_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2), cold));

/* tcconn.c */
int tcconn_resolve(tc_client *c);
int tcconn_socket(tc_client *c);
int tcconn_hello(tc_client *c);
int tcconn_read(int fd, struct proto_reader *r, int timeout_ms);

/* tcwriter.c */
int tcwriter_start(tc_client *c);
void tcwriter_wake(tc_client *c);

/* tcenc.c */
size_t tcenc_drain(tc_client *c, msgpack_sbuffer *out, size_t room, bool dropping);

/* tcring.c (tcring_mine_slow and tcring_room: the slow paths of my_ring and ring_slot) */
struct ring *tcring_mine_slow(tc_client *c);
bool tcring_room(tc_client *c, struct ring *r, uint64_t head, uint64_t most);
bool tcring_populate(void *p, size_t n);
void tcring_free(struct ring *r);
bool tcring_reserve(tc_client *c, struct ring *r, uint64_t n);
void tcring_drained(struct ring *r, uint64_t tail);

/* tcshape.c */
uint32_t tcshape_lookup(tc_client *c, const tc_shape *out, const tc_shape *in, size_t n_in);

/* tcrecord.c: one entry of op (defined) dropped, of dur (TSC ticks when ticks) and bytes. */
void tcrecord_op_dropped(tc_client *c, uint32_t op, uint64_t dur, bool ticks, uint64_t bytes);
/* tcrecord.c: adds calls not sent as entries to op's totals (dur in ns); counted: by design (the
 * MPI interposer's counted point-to-point calls, the rows' counted), else dropped entries. */
void tcrecord_op_add(tc_client *c, uint32_t op, uint64_t calls, uint64_t ns, uint64_t bytes,
                     bool counted);
/* tcrecord.c: tc_record_ext_ always with the ext slots (x may be NULL), and start and dur in TSC
 * ticks when ticks and c's clock is the TSC (REC_TICKS), else ns (the MPI interposer's calls). */
void tcrecord_ext_clock(tc_client *c, uint32_t op, uint64_t start, uint64_t dur, bool ticks,
                        uint64_t mem_bytes, uint64_t elements, const tc_ext *ext);
/* tcrecord.c: the per-op drop totals (ops with calls) as proto rows; caller frees *rows. */
size_t tcrecord_op_drops(tc_client *c, struct proto_opdrop **rows);

/* tcnames.c */
uint32_t tcnames_device(tc_client *c, struct ring *r, const char *name);
/*
 * Whether s (NULL: missing) is min..max bytes of UTF-8, as the daemon takes a
 * name: 0, else -EINVAL with the reason, naming what and the limit, in why.
 */
int tcnames_check(const char *what, const char *s, size_t min, size_t max, char *why, size_t len);

/* tccpu.c: takes the calling thread's run-queue reading as c's first (tc_open: c is not
 * shared yet). */
void tccpu_baseline(tc_client *c);

/* tcfork.c */
void tcfork_init(void);
void tcfork_add(tc_client *c);
void tcfork_remove(tc_client *c);
int tcfork_restart(tc_client *c);

/*
 * This thread's ring, cached for one client (gen tells clients apart), and
 * an offline client's open-op flag. initial-exec: a plain %fs-relative load,
 * no __tls_get_addr call on the hot path. Defined in tcring.c.
 */
struct tcring_cache {
    uint64_t gen;
    struct ring *ring;
    uint64_t off_gen; /* an offline client: off_open says this thread has an op open */
    bool off_open;
};
extern _Thread_local __attribute__((tls_model("initial-exec"))) struct tcring_cache tcring_tls;

/* The recording calls' clock, inlined into them (tc_now_ns would be a call through the PLT). */
static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What tc_begin/tc_end record: TSC ticks on a client whose clock is the TSC, else ns. */
static inline uint64_t rec_now(const tc_client *c)
{
#if defined(__x86_64__)
    if (c->clock)
        return __builtin_ia32_rdtsc();
#endif
    return now_ns();
}

/* This thread's ring for c (see tcring_mine_slow), NULL when c cannot record. */
static inline struct ring *my_ring(tc_client *c)
{
    return tcring_tls.gen == c->gen ? tcring_tls.ring : tcring_mine_slow(c);
}

/*
 * The slot for this thread's next record, or NULL when the record is dropped
 * (a full ring in the default mode, or a broken connection). The caller fills
 * the slot field by field, in place — a record built on the stack and copied
 * would be read back with wide loads from narrower stores, which the CPU
 * cannot forward and stalls on — then publishes it with ring_commit().
 */
static inline struct rec *ring_slot(tc_client *c, struct ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

    if (head - r->tail_seen > r->mask && !tcring_room(c, r, head, r->mask))
        return NULL;
    /* The line a few records on, fetched for writing now: a steady stream of
     * records then never waits for a ring line the writer last touched. */
    __builtin_prefetch(&r->buf[(head + 8) & r->mask], 1);
    return &r->buf[head & r->mask];
}

static inline void ring_commit(struct ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

    atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

/* tcshape_lookup(), inlined for an entry without shapes. */
static inline uint32_t shape_intern(tc_client *c, const tc_shape *out, const tc_shape *in,
                                    size_t n_in)
{
    if (out == NULL && (in == NULL || n_in == 0))
        return 0;
    return tcshape_lookup(c, out, in, n_in);
}

#endif
