/*
 * libtracectl.c — the instrumentation library; see tracectl.h for the API.
 *
 * DESIGN
 * Recording threads never lock, allocate or make a system call other than
 * clock_gettime (shapes: see shape_intern), and tc_begin/tc_end not even that
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
 * freed a quarter of their ring, woken by the writer; see ring_room). Op
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
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "proto.h"
#include "sock.h"
#include "tcclock.h"
#include "tracectl.h"

#define DEFAULT_RING     65536
#define DEFAULT_INTERVAL 5
#define BATCH_MAX        4096 /* drain() writes its array header as array16 */
#define OUT_HIGH         (1u << 20)
#define DEFER_MAX        1024
#define OPEN_TIMEOUT_MS  5000
#define CLOSE_TIMEOUT_MS 5000
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
 * (TC_EXT_COMM_SIZE) has a third slot: id, parent, comm_size (rec_ext_slots).
 */
struct rec_ext {
    uint64_t w[4];
};

#define REC_EXT      0x8000u
#define TC_EXT_KNOWN 0x1ffu                            /* the TC_EXT_* bits this library packs */
#define TC_EXT_LINKS (TC_EXT_ID | TC_EXT_PARENT)       /* links */
#define TC_EXT_THIRD (TC_EXT_LINKS | TC_EXT_COMM_SIZE) /* need the third ext slot */
_Static_assert(sizeof(struct rec_ext) == sizeof(struct rec), "an ext slot is a ring slot");

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
    uint64_t gen;   /* distinguishes clients for the thread-local cache */
    int fd;
    int64_t session_id;
    size_t ring_entries;
    unsigned interval_ms;
    char *device;

    /* How the hello is built, kept for a forked child's own hello: what the
     * options gave (NULL, -1: the environment's, read again by the child),
     * and what that resolved to for the last hello. */
    char *path, *opt_session, *opt_host;
    int64_t opt_rank, opt_world;
    char *h_session;
    int64_t h_rank, h_world;

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
    _Atomic bool broken;    /* the connection is gone: what is recorded is dropped */

    /* fork (see client_forked): set in the child, cleared by client_restart under mu. */
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
    bool reader_ok;    /* reader is initialised */
    /* Loss accounting when the connection breaks (writer thread only): entries
     * packed for the daemon, and how many the last ack said were stored. */
    uint64_t packed, acked_stored;
    bool loss_counted;
    bool torn; /* the socket was handed part of a message: no bye may follow it */
    struct proto_reader reader;
    struct tcclock tsc; /* converts the rings' TSC ticks; writer thread only (once started) */
};

static _Atomic uint64_t client_gen = 1;
/* initial-exec: a plain %fs-relative load, no __tls_get_addr call on the hot path. */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    uint64_t gen;
    struct ring *ring;
    uint64_t off_gen; /* an offline client: off_open says this thread has an op open */
    bool off_open;
} tls;

static struct ring *my_ring(tc_client *c);
static void client_free(tc_client *c);
static int client_restart(tc_client *c);

/* The recording calls' clock, inlined into them (tc_now_ns would be a call through the PLT). */
static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t tc_now_ns(void)
{
    return now_ns();
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

#define ANCHOR_WIDTH_NS 2000 /* an anchor read more loosely (preempted) is not taken */

/*
 * The recording clock of a connected client, chosen before its writer thread
 * starts: the TSC when tcclock_usable() says so (once per process) and
 * TRACECTL_CLOCK is not "monotonic"; the conversion starts from an anchor
 * read now, before the first record.
 */
static void clock_choose(tc_client *c)
{
    const char *env = getenv("TRACECTL_CLOCK");
    double rate;

    c->clock = 0;
    if ((env != NULL && strcmp(env, "monotonic") == 0) || !tcclock_usable(&rate, NULL))
        return;
    tcclock_init(&c->tsc, tcclock_read_anchor(NULL), rate);
    c->clock = REC_TICKS;
}

/*
 * Re-anchors the conversion (writer thread) when the last anchor is at least
 * TCCLOCK_WINDOW_MIN_NS old, with an anchor read tightly (its rdtsc pair
 * within ANCHOR_WIDTH_NS: not preempted in between; else the next drain tries).
 */
static void clock_reanchor(tc_client *c)
{
    struct tcclock_anchor a;
    uint64_t width;

    if (!c->clock || (double)(tcclock_tsc() - c->tsc.cur.tsc) * c->tsc.rate < TCCLOCK_WINDOW_MIN_NS)
        return;
    a = tcclock_read_anchor(&width);
    if ((double)width * c->tsc.rate <= ANCHOR_WIDTH_NS)
        tcclock_anchor(&c->tsc, a);
}

/*
 * r, a REC_TICKS record of ring, with its start and end converted to ns, in
 * *out. An op that tc_begin ended by beginning the next shares its end tick
 * with the next one's start: that tick converts to the same ns for both,
 * even when a re-anchoring came between their drains (the next op begins
 * exactly when the last one ended, as with clock_gettime). No TSC reads 0
 * in a running process, which wend_tsc's first value stands for.
 */
static const struct rec *rec_convert(const tc_client *c, struct ring *ring, const struct rec *r,
                                     struct rec *out)
{
    uint64_t end_tsc = r->start + r->dur, end = tcclock_ns(&c->tsc, end_tsc);
    uint64_t start = r->start == ring->wend_tsc ? ring->wend_ns : tcclock_ns(&c->tsc, r->start);

    if (end < start)
        end = start; /* ticks read on two cores a hair apart */
    ring->wend_tsc = end_tsc;
    ring->wend_ns = end;
    *out = *r;
    out->start = start;
    out->dur = end - start;
    out->shapes = (uint16_t)(r->shapes & ~REC_TICKS);
    return out;
}

const char *tc_clock(const tc_client *c)
{
    return c != NULL && !c->disabled && c->clock ? "tsc" : "monotonic";
}

void tc_options_init(tc_options *o)
{
    memset(o, 0, sizeof(*o));
    o->rank = -1;
    o->world = -1;
    o->blocking = -1;
}

/*
 * Zero means "unknown" (tracectl.h): a world ≤ 0 is unknown, and so is a rank
 * of 0 while the world is, which is what a zeroed tc_options holds. -1 is
 * returned for "from the environment".
 */
static int64_t opt_world(const tc_options *o)
{
    return o->world > 0 ? o->world : -1;
}

static int64_t opt_rank(const tc_options *o)
{
    return o->rank > 0 || (o->rank == 0 && o->world > 0) ? o->rank : -1;
}

/*
 * Records why the client sends nothing, once: the first error is the cause,
 * what follows from it is not. The message is written before the code is
 * published, so tc_last_error() never reads a half-written message.
 */
static void client_error(tc_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    int expected = 0;

    if (!atomic_compare_exchange_strong(&c->err_set, &expected, 1))
        return;
    va_start(ap, fmt);
    vsnprintf(c->err_msg, sizeof(c->err_msg), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&c->err_code, code < 0 ? code : -EIO, memory_order_release);
}

/* ---- environment --------------------------------------------------------- */

static const char *env_first(const char *const *names)
{
    for (; *names != NULL; names++) {
        const char *v = getenv(*names);
        if (v != NULL && *v)
            return v;
    }
    return NULL;
}

static int64_t env_int(const char *const *names)
{
    const char *v = env_first(names);
    char *end;
    long long n;

    if (v == NULL)
        return -1;
    errno = 0;
    n = strtoll(v, &end, 10);
    return errno || *end || n < 0 ? -1 : n;
}

static void socket_path(const tc_options *o, char *buf, size_t len)
{
    if (o->socket_path != NULL)
        snprintf(buf, len, "%s", o->socket_path);
    else
        sock_default_path(buf, len);
}

/*
 * What the next hello says, resolved now from the options and, where they
 * leave it open, the environment (a forked child resolves it again: a
 * launcher may have given it its own RANK). 0 or -ENOMEM.
 */
static int hello_resolve(tc_client *c)
{
    static const char *const session_env[] = {"TRACECTL_SESSION", "SLURM_JOB_ID",
                                              "TORCHELASTIC_RUN_ID", NULL};
    static const char *const rank_env[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                           "SLURM_PROCID", NULL};
    static const char *const world_env[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                            "SLURM_NTASKS", NULL};
    const char *session = c->opt_session ? c->opt_session : env_first(session_env);
    char *copy = strdup(session ? session : "default");

    if (copy == NULL)
        return -ENOMEM;
    free(c->h_session);
    c->h_session = copy;
    c->h_rank = c->opt_rank >= 0 ? c->opt_rank : env_int(rank_env);
    c->h_world = c->opt_world >= 0 ? c->opt_world : env_int(world_env);
    return 0;
}

/* ---- socket I/O (the opening thread, then the writer thread only) ------- */

/* Reads what is there (waiting up to timeout_ms for the first byte). 0, or -errno / -EPIPE. */
static int read_some(int fd, struct proto_reader *r, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char *buf;
    ssize_t n;

    if (poll(&pfd, 1, timeout_ms) <= 0)
        return 0;
    buf = proto_reader_buffer(r, 4096);
    if (buf == NULL)
        return -ENOMEM;
    n = recv(fd, buf, 4096, MSG_DONTWAIT);
    if (n == 0)
        return -EPIPE;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    proto_reader_commit(r, (size_t)n);
    return 0;
}

/*
 * Connects c->fd to the daemon at c->path, once sure that no other user
 * controls it (sockdir.h): the socket's directory is this user's or root's
 * and writable by no one else, and the daemon runs as this user or root.
 * 0 or a negative errno, the reason kept for tc_last_error().
 */
static int client_socket(tc_client *c)
{
    char why[PATH_MAX + 160];

    if ((c->fd = sock_connect(c->path, why, sizeof(why))) < 0) {
        int rc = c->fd;

        c->fd = -1;
        client_error(c, rc, "%s", why);
        return rc;
    }
    return 0;
}

/* The daemon's answer to the hello: 0 on welcome, else -EPROTO with the reason kept. */
static int hello_answer(tc_client *c, struct proto_msg *m)
{
    if (m->type == PROTO_WELCOME) {
        c->session_id = m->u.welcome.session_id;
        return 0;
    }
    if (m->type == PROTO_ERROR)
        client_error(c, -EPROTO, "the daemon refused the hello: %s: %s",
                     m->u.error.code ? m->u.error.code : "?",
                     m->u.error.message ? m->u.error.message : "");
    else
        client_error(c, -EPROTO, "the daemon answered the hello with %s", proto_type_name(m->type));
    return -EPROTO;
}

/* hello → welcome on c->fd, as hello_resolve() left it. 0 or a negative errno. */
static int say_hello(tc_client *c)
{
    char host[256] = "";
    struct proto_hello h = {.proto = PROTO_VERSION,
                            .session = c->h_session,
                            .rank = c->h_rank,
                            .world = c->h_world,
                            .pid = getpid(),
                            .device = c->device};
    msgpack_packer pk;
    struct proto_msg m;
    struct proto_error err;
    uint64_t deadline = tc_now_ns() + OPEN_TIMEOUT_MS * 1000000ull;
    int rc;

    if (c->opt_host != NULL)
        snprintf(host, sizeof(host), "%s", c->opt_host);
    else
        gethostname(host, sizeof(host) - 1);
    h.host = host[0] ? host : NULL;
    msgpack_packer_init(&pk, &c->out, msgpack_sbuffer_write);
    if (proto_pack_hello(&pk, &h) < 0)
        return -ENOMEM;
    rc = sock_send_all(c->fd, c->out.data, c->out.size, OPEN_TIMEOUT_MS);
    msgpack_sbuffer_clear(&c->out);
    while (rc == 0) {
        rc = proto_reader_next(&c->reader, &m, &err);
        if (rc > 0) {
            rc = hello_answer(c, &m);
            proto_msg_free(&m);
            return rc;
        }
        if (rc < 0) {
            client_error(c, -EPROTO, "the daemon's answer to the hello: %s", err.message);
            return -EPROTO;
        }
        if (tc_now_ns() > deadline) {
            client_error(c, -ETIMEDOUT, "no answer to the hello from %s within %d ms", c->path,
                         OPEN_TIMEOUT_MS);
            return -ETIMEDOUT;
        }
        rc = read_some(c->fd, &c->reader, 100);
    }
    client_error(c, rc, "saying hello to %s: %s", c->path,
                 rc == -EPIPE ? "the daemon closed the connection" : strerror(-rc));
    return rc;
}

/* ---- the writer thread ---------------------------------------------------- */

/* Appends v as the shortest msgpack unsigned integer (the encoding msgpack-c emits). */
static char *put_uint(char *p, uint64_t v)
{
    if (v < 128) {
        *p++ = (char)v;
    } else if (v < 256) {
        *p++ = (char)0xcc, *p++ = (char)v;
    } else if (v < 65536) {
        *p++ = (char)0xcd, *p++ = (char)(v >> 8), *p++ = (char)v;
    } else if (v < 4294967296ull) {
        *p++ = (char)0xce;
        for (int s = 24; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    } else {
        *p++ = (char)0xcf;
        for (int s = 56; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    }
    return p;
}

/*
 * The most one entry takes as msgpack: the numbers and the ext map (under
 * 256), a shape pair, a device name with its header.
 */
#define ENTRY_MAX (256 + SHAPE_MAX + 5 + PROTO_MAX_NAME)

/*
 * Faults in the whole pages of [p, p + n) with one call, where the kernel
 * can (MADV_POPULATE_WRITE, Linux 5.14): page by page, each first touch is a
 * trap, ~40 µs each on this VM. Only a hint: the memory is ours either way.
 * False where the kernel could not (the pages are then faulted in as used).
 */
static bool populate(void *p, size_t n)
{
#if defined(MADV_POPULATE_WRITE)
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, z = a + n;

    a = (a + page - 1) & ~(page - 1);
    z &= ~(page - 1);
    return z <= a || madvise((void *)a, z - a, MADV_POPULATE_WRITE) == 0;
#else
    (void)p, (void)n;
    return false;
#endif
}

/*
 * Room for n more bytes at the end of sb: where they go, or NULL (ENOMEM).
 * The output grows by doubling, its new part faulted in at once (populate).
 */
static char *sb_room(msgpack_sbuffer *sb, size_t n)
{
    size_t cap = sb->alloc ? sb->alloc : 65536;
    char *data;

    if (sb->alloc - sb->size >= n)
        return sb->data + sb->size;
    while (cap - sb->size < n)
        cap *= 2;
    if ((data = realloc(sb->data, cap)) == NULL)
        return NULL;
    populate(data + sb->alloc, cap - sb->alloc);
    sb->data = data;
    sb->alloc = cap;
    return data + sb->size;
}

/*
 * One entry as msgpack, [step, op, start, dur, nil, mem, out, in(, device)],
 * written in place at the end of the output (which has room for ENTRY_MAX
 * bytes): field-by-field packer calls cost the writer thread more than the
 * recording threads pay.
 */
static void pack_rec(tc_client *c, msgpack_sbuffer *sb, const struct rec *r, uint64_t step)
{
    char *p = sb->data + sb->size;

    *p++ = (char)(0x90 | (r->dev ? 9 : 8));
    p = put_uint(p, step);
    p = put_uint(p, r->op);
    p = put_uint(p, r->start);
    p = put_uint(p, r->dur);
    *p++ = (char)0xc0; /* elements: the daemon takes the product of out_shape */
    p = put_uint(p, r->mem);
    if (r->shapes == 0) {
        *p++ = (char)0xc0;
        *p++ = (char)0xc0;
    } else {
        const struct shape_pair *sp = &c->shapes[r->shapes - 1];
        memcpy(p, sp->bytes, sp->len);
        p += sp->len;
    }
    if (r->dev) {
        const char *d = c->devs[r->dev - 1];
        size_t n = strlen(d); /* at most PROTO_MAX_NAME: the header as msgpack_pack_str's */

        if (n < 32) {
            *p++ = (char)(0xa0 | n);
        } else if (n < 256) {
            *p++ = (char)0xd9, *p++ = (char)n;
        } else {
            *p++ = (char)0xda, *p++ = (char)(n >> 8), *p++ = (char)n;
        }
        memcpy(p, d, n);
        p += n;
    }
    sb->size = (size_t)(p - sb->data);
}

/* Appends v as the shortest msgpack integer. */
static char *put_int(char *p, int64_t v)
{
    if (v >= 0)
        return put_uint(p, (uint64_t)v);
    if (v >= -32) {
        *p++ = (char)v; /* negative fixint */
    } else if (v >= INT8_MIN) {
        *p++ = (char)0xd0, *p++ = (char)v;
    } else if (v >= INT16_MIN) {
        *p++ = (char)0xd1, *p++ = (char)(v >> 8), *p++ = (char)v;
    } else if (v >= INT32_MIN) {
        *p++ = (char)0xd2;
        for (int s = 24; s >= 0; s -= 8)
            *p++ = (char)(v >> s);
    } else {
        *p++ = (char)0xd3;
        for (int s = 56; s >= 0; s -= 8)
            *p++ = (char)((uint64_t)v >> s);
    }
    return p;
}

/* Appends a fixstr key (under 32 bytes). */
static char *put_key(char *p, const char *k)
{
    size_t n = strlen(k);

    *p++ = (char)(0xa0 | n);
    memcpy(p, k, n);
    return p + n;
}

/* How many ext slots follow the REC_EXT record at ring index i: 2, or 3 with a third. */
static unsigned rec_ext_slots(const struct ring *ring, uint64_t i)
{
    const struct rec_ext *x1 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 2) & ring->mask];

    return (x1->w[3] & TC_EXT_THIRD) ? 3 : 2;
}

/* The links of an entry's ext map (id, parent) and comm_size, from its third ext slot. */
static char *put_third(char *p, const struct ring *ring, uint64_t i, uint32_t has)
{
    const struct rec_ext *x2 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 3) & ring->mask];

    if (has & TC_EXT_ID) {
        p = put_key(p, "id");
        p = put_uint(p, x2->w[0]);
    }
    if (has & TC_EXT_PARENT) {
        p = put_key(p, "parent");
        p = put_uint(p, x2->w[1]);
    }
    if (has & TC_EXT_COMM_SIZE) {
        p = put_key(p, "comm_size");
        p = put_uint(p, x2->w[2]);
    }
    return p;
}

/*
 * An entry recorded by tc_record_ext, from the record at ring index i and
 * the two slots after it: [step, op, start, dur, elements, mem, out, in,
 * device(, ext)], the ext map only when fields were given (device nil then
 * stands for the hello device).
 */
static void pack_rec_ext(tc_client *c, msgpack_packer *pk, const struct rec *r,
                         const struct ring *ring, uint64_t i, uint64_t step)
{
    const struct rec_ext *x0 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 1) & ring->mask];
    const struct rec_ext *x1 =
        (const struct rec_ext *)(const void *)&ring->buf[(i + 2) & ring->mask];
    static const char *const keys[] = {"stream", "peer", "comm", "seq", "checksum"};
    const uint64_t vals[] = {x0->w[1], x0->w[2], x0->w[3], x1->w[0], x1->w[1]};
    static const uint32_t bits[] = {TC_EXT_STREAM, TC_EXT_PEER, TC_EXT_COMM, TC_EXT_SEQ,
                                    TC_EXT_CHECKSUM};
    uint32_t has = (uint32_t)x1->w[3] & TC_EXT_KNOWN, shapes = r->shapes & ~REC_EXT;
    char buf[192], *p = buf;

    *p++ = (char)(0x90 | (has ? 10 : 9));
    p = put_uint(p, step);
    p = put_uint(p, r->op);
    p = put_uint(p, r->start);
    p = put_uint(p, r->dur);
    if (x0->w[0] == TC_ELEMENTS_NONE)
        *p++ = (char)0xc0;
    else
        p = put_uint(p, x0->w[0]);
    p = put_uint(p, r->mem);
    if (shapes == 0) {
        *p++ = (char)0xc0;
        *p++ = (char)0xc0;
    }
    msgpack_sbuffer_write(pk->data, buf, (size_t)(p - buf));
    if (shapes != 0)
        msgpack_sbuffer_write(pk->data, c->shapes[shapes - 1].bytes, c->shapes[shapes - 1].len);
    if (r->dev)
        proto_pack_str(pk, c->devs[r->dev - 1]);
    else
        msgpack_pack_nil(pk);
    if (has == 0)
        return;
    p = buf;
    *p++ = (char)(0x80 | __builtin_popcount(has));
    for (size_t k = 0; k < 5; k++) {
        if (has & bits[k]) {
            p = put_key(p, keys[k]);
            p = put_uint(p, vals[k]);
        }
    }
    if (has & TC_EXT_TAG) {
        p = put_key(p, "tag");
        p = put_int(p, (int64_t)x1->w[2]);
    }
    if (has & TC_EXT_THIRD)
        p = put_third(p, ring, i, has);
    msgpack_sbuffer_write(pk->data, buf, (size_t)(p - buf));
}

/*
 * Whether the daemon takes the entry: every number within INT64_MAX (PROTOCOL.md
 * Part 2), its end (start + dur) too, and its shapes and device valid. One bad
 * entry sent would close the connection (bad_message) and lose all that
 * follows, so the writer drops it here and counts it instead.
 */
static bool rec_valid(const struct rec *r, uint64_t step)
{
    const uint64_t max = INT64_MAX;

    return step <= max && r->start <= max && r->dur <= max && r->start + r->dur <= max &&
           r->mem <= max && (r->shapes & ~REC_EXT) != SHAPES_BAD && r->dev != DEV_BAD;
}

static void ring_wakeup(struct ring *r);

/*
 * Publishes the drain of r up to tail, and wakes its recording thread if it
 * sleeps for a tail this reaches (ring_room: the seq_cst store and load pair
 * with its own, so one of the two sees the other's).
 */
static void ring_drained(struct ring *r, uint64_t tail)
{
    uint64_t w;

    atomic_store_explicit(&r->tail, tail, memory_order_seq_cst);
    w = atomic_load_explicit(&r->wait_for, memory_order_seq_cst);
    if (w != 0 && (int64_t)(tail - w) >= 0 && atomic_compare_exchange_strong(&r->wait_for, &w, 0))
        ring_wakeup(r);
}

/*
 * Appends to out the control messages queued so far (op definitions, meta),
 * then a batch of up to `room` entries moved from the rings, packed in place.
 * Both under the mutex, so that every op an entry names was queued (tc_op
 * takes it) before the batch. Returns the number of entries in the batch;
 * entries the daemon would refuse are dropped and counted instead. Stops
 * early when out cannot grow (ENOMEM): what it took is whole.
 */
static size_t drain(tc_client *c, msgpack_sbuffer *out, size_t room)
{
    msgpack_packer pk;
    size_t n = 0, bad = 0, head_at, body_at;
    char *h;

    clock_reanchor(c);
    /* The lock keeps the ring list and the device table still while packing;
     * recording threads never take it. */
    pthread_mutex_lock(&c->mu);
    if (c->control.size > 0) {
        msgpack_sbuffer_write(out, c->control.data, c->control.size);
        msgpack_sbuffer_clear(&c->control);
    }
    /* The batch's head with a 3-byte array header (array16), fixed below. */
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    head_at = out->size;
    if (proto_pack_batch_header(&pk, BATCH_MAX) < 0) {
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    body_at = out->size;
    for (struct ring *r = c->rings; r != NULL && n < room; r = r->next) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        for (; tail != head && n < room; tail++) {
            const struct rec *rec = &r->buf[tail & r->mask];
            struct rec conv;
            if (rec->op == 0) {
                r->wstep = rec->start;
                continue;
            }
            if (sb_room(out, ENTRY_MAX) == NULL) {
                room = n; /* out of memory: the rest stays in the rings */
                break;
            }
            if (rec->shapes & REC_TICKS)
                rec = rec_convert(c, r, rec, &conv);
            if (!rec_valid(rec, r->wstep)) {
                bad++;
                if (rec->shapes & REC_EXT)
                    tail += rec_ext_slots(r, tail); /* its ext slots go with it */
                continue;
            }
            if (rec->shapes & REC_EXT) {
                pack_rec_ext(c, &pk, rec, r, tail, r->wstep);
                tail += rec_ext_slots(r, tail); /* committed with the record: they are there */
                n++;
                continue;
            }
            pack_rec(c, out, rec, r->wstep);
            n++;
        }
        ring_drained(r, tail);
    }
    pthread_mutex_unlock(&c->mu);
    if (bad > 0)
        atomic_fetch_add(&c->dropped, bad);
    /* The array header as msgpack_pack_array(n) writes it: fixarray below 16. */
    h = out->data + body_at - 3;
    if (n == 0) {
        out->size = head_at;
    } else if (n >= 16) {
        h[1] = (char)(n >> 8);
        h[2] = (char)n;
    } else {
        h[0] = (char)(0x90 | n);
        memmove(h + 1, h + 3, out->size - body_at);
        out->size -= 2;
    }
    return n;
}

_Static_assert(BATCH_MAX >= 16 && BATCH_MAX < 65536, "a batch's array header is an array16");

/* Fills the output buffer: control messages first, then batches of what was drained. */
static void fill(tc_client *c)
{
    size_t n;

    while (c->out.size - c->out_off < OUT_HIGH) {
        n = drain(c, &c->out, BATCH_MAX);
        if (n == 0)
            break;
        c->packed += n;
    }
}

static bool rings_empty(tc_client *c)
{
    pthread_mutex_lock(&c->mu);
    for (struct ring *r = c->rings; r != NULL; r = r->next) {
        if (atomic_load(&r->head) != atomic_load(&r->tail)) {
            pthread_mutex_unlock(&c->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void handle_reply(tc_client *c, struct proto_msg *m)
{
    pthread_mutex_lock(&c->mu);
    if (m->type == PROTO_ACK) {
        c->flush_acked = m->u.ack.seq;
        c->flush_rc = 0;
        c->acked_stored = m->u.ack.stored;
    } else if (m->type == PROTO_ERROR && m->u.error.code != NULL &&
               strcmp(m->u.error.code, PROTO_E_INTERNAL) == 0 && c->flush_sent > c->flush_acked) {
        c->flush_acked = c->flush_sent; /* the daemon could not store what this flush covers */
        c->flush_rc = -EIO;
    } else if (m->type == PROTO_ERROR) {
        client_error(c, -EPROTO, "the daemon closed the connection: %s: %s",
                     m->u.error.code ? m->u.error.code : "?",
                     m->u.error.message ? m->u.error.message : "");
        c->broken = true;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void writer_break(tc_client *c, int rc)
{
    client_error(c, rc, "the connection to the daemon broke: %s",
                 rc == -EPIPE ? "the daemon closed it" : strerror(-rc));
    pthread_mutex_lock(&c->mu);
    c->broken = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Called with a request for the writer thread pending: it stops waiting for the interval. */
static void writer_wake(tc_client *c)
{
    ssize_t n = write(c->wake[1], "", 1); /* a full pipe already wakes it */

    (void)n;
}

/* Waits for a wake-up or the flush interval (a broken client has no socket to poll). */
static void writer_sleep(tc_client *c)
{
    struct pollfd pfd = {.fd = c->wake[0], .events = POLLIN};
    char sink[64];

    if (poll(&pfd, 1, (int)c->interval_ms) > 0)
        while (read(c->wake[0], sink, sizeof(sink)) > 0)
            ;
}

/* Writes pending output; reads replies. Returns 0, or a negative errno once the connection is gone.
 */
static int writer_io(tc_client *c, int wait_ms)
{
    struct pollfd pfds[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->wake[0], .events = POLLIN}};
    struct pollfd *pfd = &pfds[0];
    struct proto_error err;
    struct proto_msg m;
    char sink[64];
    int rc;

    if (c->out_off < c->out.size)
        pfd->events |= POLLOUT;
    if (poll(pfds, 2, wait_ms) < 0 && errno != EINTR)
        return -errno;
    if (pfds[1].revents & POLLIN)
        while (read(c->wake[0], sink, sizeof(sink)) > 0)
            ;
    if (pfd->revents & POLLOUT) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.size - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (w > 0)
            c->out_off += (size_t)w;
        if (c->out_off == c->out.size) {
            msgpack_sbuffer_clear(&c->out);
            c->out_off = 0;
        }
    }
    if (pfd->revents & (POLLIN | POLLHUP | POLLERR)) {
        if ((rc = read_some(c->fd, &c->reader, 0)) < 0)
            return rc;
        while ((rc = proto_reader_next(&c->reader, &m, &err)) > 0) {
            handle_reply(c, &m);
            proto_msg_free(&m);
        }
        if (rc < 0)
            return -EPROTO;
    }
    return 0;
}

/*
 * Counts what can no longer be sent as dropped (the connection is gone): the
 * first time, every entry packed since the last ack's `stored` — the unsent
 * output and what the daemon may not have stored (the client cannot know
 * which of those it did, so they count as lost) — then, each time, what
 * the rings hold.
 */
static void writer_discard(tc_client *c)
{
    msgpack_sbuffer sink;

    if (!c->loss_counted) {
        if (c->packed > c->acked_stored)
            atomic_fetch_add(&c->dropped, c->packed - c->acked_stored);
        c->loss_counted = true;
        c->torn = c->out_off > 0 && c->out_off < c->out.size;
        msgpack_sbuffer_clear(&c->out);
        c->out_off = 0;
    }
    msgpack_sbuffer_init(&sink);
    for (size_t n; (n = drain(c, &sink, BATCH_MAX)) > 0; msgpack_sbuffer_clear(&sink))
        atomic_fetch_add(&c->dropped, n);
    msgpack_sbuffer_destroy(&sink);
}

static int client_socket(tc_client *c);

/* A forked child's writer: its own connection and hello (see client_restart). */
static int writer_connect(tc_client *c)
{
    int rc;

    if ((rc = client_socket(c)) < 0)
        return rc;
    return say_hello(c);
}

static void *writer_thread(void *arg)
{
    tc_client *c = arg;
    msgpack_packer pk;
    bool closing, broken;
    uint64_t req;
    int rc;

    if (c->need_connect && (rc = writer_connect(c)) < 0)
        writer_break(c, rc);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        closing = c->closing;
        broken = c->broken;
        req = c->flush_req;
        pthread_mutex_unlock(&c->mu);
        if (broken) {
            writer_discard(c);
            /* Everything recorded before flush `req` is now counted: a tc_flush()
             * returns with tc_dropped() complete. */
            pthread_mutex_lock(&c->mu);
            c->flush_counted = req;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            if (closing)
                break;
            writer_sleep(c);
            continue;
        }
        if (c->out_off == c->out.size)
            fill(c);
        /* A flush goes out once everything recorded before it has been packed. */
        if (req > c->flush_sent && c->out.size - c->out_off < OUT_HIGH && rings_empty(c)) {
            msgpack_packer_init(&pk, &c->out, msgpack_sbuffer_write);
            proto_pack_flush(&pk, req);
            c->flush_sent = req;
        }
        if (closing && c->out_off == c->out.size && c->flush_sent == req && rings_empty(c))
            break;
        /* With output pending nothing is due before the socket takes more (or
         * a wake-up: a flush, tc_close); else the rings are drained each
         * interval. */
        if ((rc = writer_io(c, c->out_off < c->out.size ? -1 : (int)c->interval_ms)) < 0)
            writer_break(c, rc);
    }
    return NULL;
}

/* ---- opening and closing --------------------------------------------------- */

static tc_client *client_new(const tc_options *o)
{
    size_t size = (sizeof(tc_client) + 63) & ~(size_t)63;
    tc_client *c = aligned_alloc(64, size); /* its hot fields sit on their own lines */
    const char *dev = o->device ? o->device : getenv("TRACECTL_DEVICE");
    const char *blk = getenv("TRACECTL_BLOCKING");

    if (c == NULL)
        return NULL;
    populate(c, size); /* its ~200 KiB of shape tables: one call, not a trap per page */
    memset(c, 0, size);
    c->fd = -1;
    c->wake[0] = c->wake[1] = -1;
    c->session_id = -1;
    c->gen = atomic_fetch_add(&client_gen, 1);
    if (o->blocking == 1 || o->blocking == TC_DROP)
        c->blocking = o->blocking == 1;
    else
        c->blocking = blk != NULL && strcmp(blk, "1") == 0;
    c->ring_entries = DEFAULT_RING;
    if (o->ring_entries >= 2) {
        c->ring_entries = 2;
        while (c->ring_entries < o->ring_entries)
            c->ring_entries *= 2;
    }
    c->interval_ms = o->flush_interval_ms ? o->flush_interval_ms : DEFAULT_INTERVAL;
    c->opt_rank = opt_rank(o);
    c->opt_world = opt_world(o);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->shape_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    msgpack_sbuffer_init(&c->control);
    msgpack_sbuffer_init(&c->out);
    c->reader_ok = proto_reader_init(&c->reader, 0) == 0;
    if (!c->reader_ok || (dev != NULL && *dev && (c->device = strdup(dev)) == NULL) ||
        (o->session != NULL && (c->opt_session = strdup(o->session)) == NULL) ||
        (o->host != NULL && (c->opt_host = strdup(o->host)) == NULL)) {
        client_free(c);
        return NULL;
    }
    return c;
}

/* A ring's records: whole pages of their own (ring_map), so that they are unmapped by size. */
static size_t ring_bytes(size_t entries)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return (entries * sizeof(struct rec) + page - 1) / page * page;
}

static void rings_free(struct ring *r)
{
    for (struct ring *next; r != NULL; r = next) {
        next = r->next;
        munmap(r->buf, ring_bytes(r->mask + 1));
        free(r->deferred);
        free(r->regions);
        free(r);
    }
}

static void client_free(tc_client *c)
{
    rings_free(c->rings);
    rings_free(c->stale);
    for (size_t i = 0; i < c->n_ops; i++)
        free(c->ops[i]), free(c->cats[i]);
    for (size_t i = 0; i < c->n_devs; i++)
        free(c->devs[i]);
    for (size_t i = 0; i < c->n_shapes; i++) {
        free(c->shapes[i].bytes);
        free(c->shapes[i].key);
    }
    free(c->ops);
    free(c->cats);
    free(c->devs);
    free(c->device);
    free(c->path);
    free(c->opt_session);
    free(c->opt_host);
    free(c->h_session);
    msgpack_sbuffer_destroy(&c->control);
    msgpack_sbuffer_destroy(&c->out);
    if (c->reader_ok)
        proto_reader_deinit(&c->reader);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->shape_mu);
    pthread_cond_destroy(&c->cv);
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    free(c);
}

/* The writer thread's wake-up pipe, both ends non-blocking. 0 or a negative errno. */
static int wake_open(tc_client *c)
{
    if (pipe(c->wake) < 0) {
        c->wake[0] = c->wake[1] = -1;
        return -errno;
    }
    for (int i = 0; i < 2; i++)
        if (fcntl(c->wake[i], F_SETFL, O_NONBLOCK) < 0 ||
            fcntl(c->wake[i], F_SETFD, FD_CLOEXEC) < 0)
            return -errno;
    return 0;
}

/* ---- fork ------------------------------------------------------------------- */

/*
 * A fork copies a client into the child without its writer thread, sharing
 * the parent's socket. The fork handlers make the copy consistent (no lock
 * held, no ring half-written: the prepare handler takes every client's locks,
 * so the writer thread is outside drain() when the fork happens) and turn it
 * into a client that has not connected yet: the parent's socket, pipe and
 * rings are let go (what the rings hold is the parent's to send), the counts
 * start at 0. The child connects at its first recording call or flush
 * (client_restart), so a child that only execs costs the daemon nothing.
 */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_client *live; /* every open client but the TRACECTL_DISABLE=1 ones */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void live_add(tc_client *c)
{
    pthread_mutex_lock(&live_mu);
    c->live_next = live;
    live = c;
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(tc_client *c)
{
    pthread_mutex_lock(&live_mu);
    for (tc_client **p = &live; *p != NULL; p = &(*p)->live_next)
        if (*p == c) {
            *p = c->live_next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&live_mu);
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        pthread_mutex_lock(&c->mu);
        pthread_mutex_lock(&c->shape_mu);
    }
}

static void fork_parent(void)
{
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        pthread_mutex_unlock(&c->shape_mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&live_mu);
}

/* The child's copy of c: only stores and close(), nothing that could wait. */
static void client_forked(tc_client *c)
{
    struct ring **tail = &c->stale;

    atomic_store(&c->dropped, 0);
    atomic_store(&c->rejected, 0);
    if (c->offline)
        return; /* it keeps counting what it would have sent, from 0 */
    atomic_store(&c->err_set, 0);
    atomic_store(&c->err_code, 0);
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    c->fd = c->wake[0] = c->wake[1] = -1;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = c->rings;
    c->rings = NULL;
    if (!c->forked)
        c->ops_at_fork = c->n_ops; /* a grandchild: its parent had not sent its own yet */
    c->forked = true;
    msgpack_sbuffer_clear(&c->control); /* the parent's to send */
    msgpack_sbuffer_clear(&c->out);
    c->out_off = 0;
    c->flush_req = c->flush_acked = c->flush_sent = c->flush_counted = 0;
    c->flush_rc = 0;
    c->closing = false;
    c->broken = false;
    c->packed = c->acked_stored = 0;
    c->loss_counted = false;
    c->torn = false;
    c->session_id = -1;
    pthread_cond_init(&c->cv, NULL); /* its waiters were the parent's threads */
    if (tls.gen == c->gen)
        tls.gen = 0; /* this thread's next record takes my_ring's slow path */
}

static void fork_child(void)
{
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        client_forked(c);
        pthread_mutex_unlock(&c->shape_mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&live_mu);
}

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/*
 * A forked child's client (c->mu held): a writer thread of its own that
 * connects and says hello as a new process of the session, resolved from
 * this process's environment, and sends first the ops the parent had
 * defined, then what this process queued since. 0, or a negative errno
 * after which c is an offline client (it counts what it drops).
 */
static int client_restart(tc_client *c)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = -ENOMEM;

    c->forked = false;
    rings_free(c->stale);
    c->stale = NULL;
    if (c->reader_ok)
        proto_reader_deinit(&c->reader);
    if (!(c->reader_ok = proto_reader_init(&c->reader, 0) == 0) || hello_resolve(c) < 0)
        goto fail;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < c->ops_at_fork; i++) {
        struct proto_opdef def = {.id = (uint32_t)i + 1, .name = c->ops[i], .category = c->cats[i]};
        proto_pack_ops(&pk, &def, 1);
    }
    msgpack_sbuffer_write(&sb, c->control.data, c->control.size);
    msgpack_sbuffer_destroy(&c->control);
    c->control = sb;
    c->need_connect = true;
    if (c->clock) /* the parent's anchors hold here too, but may be old: a fresh one */
        tcclock_init(&c->tsc, tcclock_read_anchor(NULL), c->tsc.rate);
    if ((rc = wake_open(c)) < 0 || (rc = -pthread_create(&c->thread, NULL, writer_thread, c)) < 0)
        goto fail;
    return 0;
fail:
    client_error(c, rc, "the forked process could not start its writer thread: %s", strerror(-rc));
    c->disabled = true;
    c->offline = true;
    return rc;
}

/* ---- tc_open, tc_close, tc_flush ---------------------------------------------- */

/* Connects and says hello. 0 or a negative errno, the reason kept for tc_last_error(). */
static int client_connect(tc_client *c, const tc_options *o)
{
    char path[512];
    int rc;

    socket_path(o, path, sizeof(path));
    if ((c->path = strdup(path)) == NULL || hello_resolve(c) < 0)
        return -ENOMEM;
    if ((rc = client_socket(c)) < 0 || (rc = say_hello(c)) < 0)
        return rc;
    clock_choose(c);
    if ((rc = wake_open(c)) < 0 || (rc = -pthread_create(&c->thread, NULL, writer_thread, c)) < 0)
        client_error(c, rc, "cannot start the writer thread: %s", strerror(-rc));
    return rc;
}

tc_client *tc_open(const tc_options *opts, int *err)
{
    const char *off = getenv("TRACECTL_DISABLE");
    tc_options dflt;
    tc_client *c;
    int rc = 0;

    if (opts == NULL) {
        tc_options_init(&dflt);
        opts = &dflt;
    }
    c = client_new(opts);
    if (c == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (off != NULL && strcmp(off, "1") == 0) {
        c->disabled = true;
        goto out;
    }
    pthread_once(&fork_once, fork_register);
    if ((rc = client_connect(c, opts)) < 0)
        goto fail;
    my_ring(c); /* the opening thread's ring, ready before its first record */
    live_add(c);
    goto out;
fail:
    if (c->blocking) {
        client_free(c);
        c = NULL;
    } else {
        /* No daemon: a disabled client, so the program runs on at almost no
         * cost, that counts what it would have sent (tc_dropped()). */
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        c->disabled = true;
        c->offline = true;
        live_add(c);
    }
out:
    if (c != NULL)
        c->head.active = !c->disabled || c->offline; /* what tracectl.h's inline check reads */
    if (err != NULL)
        *err = rc;
    return c;
}

int tc_close(tc_client *c)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (c == NULL)
        return 0;
    live_remove(c);
    if (c->disabled || c->forked) { /* forked: this process never connected */
        client_free(c);
        return 0;
    }
    rc = tc_flush(c, c->blocking ? -1 : CLOSE_TIMEOUT_MS);
    pthread_mutex_lock(&c->mu);
    c->closing = true;
    if (rc == -ETIMEDOUT)
        c->broken = true; /* give up on the rest: it is counted as dropped */
    pthread_mutex_unlock(&c->mu);
    writer_wake(c);
    pthread_join(c->thread, NULL);
    /*
     * bye, with the dropped count, only after whole messages. After a flush
     * that timed out (a stalled daemon) the 5 s are spent: bye goes only if
     * the socket takes it at once. Without it the daemon ends the process
     * when it reads the connection's end, at once when it runs again.
     */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (c->out_off == c->out.size && !c->torn && proto_pack_bye(&pk, atomic_load(&c->dropped)) == 0)
        sock_send_all(c->fd, sb.data, sb.size, rc == -ETIMEDOUT ? 0 : 1000);
    msgpack_sbuffer_destroy(&sb);
    client_free(c);
    return rc;
}

int tc_flush(tc_client *c, int timeout_ms)
{
    struct timespec deadline;
    uint64_t seq;
    int rc = 0;

    if (c == NULL || c->disabled)
        return -ENOTCONN;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&c->mu);
    if (c->forked && client_restart(c) < 0) {
        pthread_mutex_unlock(&c->mu);
        return -ENOTCONN;
    }
    seq = ++c->flush_req;
    writer_wake(c);
    while (c->flush_acked < seq && !(c->broken && c->flush_counted >= seq) && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&c->cv, &c->mu);
        else if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) == ETIMEDOUT)
            rc = -ETIMEDOUT;
    }
    if (rc == 0 && c->flush_acked < seq)
        rc = -ENOTCONN;
    if (rc == 0)
        rc = c->flush_rc;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_last_error(const tc_client *c, const char **msg)
{
    tc_client *cc = (tc_client *)c;
    int code = c != NULL ? atomic_load_explicit(&cc->err_code, memory_order_acquire) : 0;

    if (msg != NULL)
        *msg = code != 0 ? cc->err_msg : "";
    return code;
}

/* ---- interning ------------------------------------------------------------ */

static int grow(void *arrp, size_t *cap, size_t n)
{
    void **arr = arrp;
    size_t ncap;
    void *p;

    if (n < *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    p = realloc(*arr, ncap * sizeof(char *));
    if (p == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Room for op n in both ops and cats (which share cap_ops). 0 or -ENOMEM. */
static int grow_ops(tc_client *c)
{
    size_t cap = c->cap_ops;

    if (c->n_ops < cap)
        return 0;
    if (grow(&c->cats, &cap, c->n_ops) < 0)
        return -ENOMEM;
    return grow(&c->ops, &c->cap_ops, c->n_ops); /* grows to the same cap as cats */
}

uint32_t tc_op_cat(tc_client *c, const char *name, const char *category)
{
    struct proto_opdef def;
    msgpack_packer pk;
    size_t len = name ? strlen(name) : 0, clen = category ? strlen(category) : 0;
    uint32_t id = 0;

    /* The daemon refuses the whole ops message (and closes the connection) for a bad name or
     * category: those get no id. */
    if (c == NULL || c->disabled || len == 0 || len > PROTO_MAX_NAME ||
        !proto_utf8_valid(name, len) ||
        (category != NULL &&
         (clen == 0 || clen > PROTO_MAX_CATEGORY || !proto_utf8_valid(category, clen))))
        return 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_ops && id == 0; i++)
        if (strcmp(c->ops[i], name) == 0)
            id = (uint32_t)i + 1;
    if (id == 0 && grow_ops(c) == 0 && (c->ops[c->n_ops] = strdup(name)) != NULL) {
        c->cats[c->n_ops] = category ? strdup(category) : NULL;
        id = (uint32_t)++c->n_ops;
        def = (struct proto_opdef){.id = id, .name = (char *)name, .category = (char *)category};
        msgpack_packer_init(&pk, &c->control, msgpack_sbuffer_write);
        proto_pack_ops(&pk, &def, 1);
    }
    pthread_mutex_unlock(&c->mu);
    return id;
}

uint32_t tc_op(tc_client *c, const char *name)
{
    return tc_op_cat(c, name, NULL);
}

/*
 * Index+1 of a device name in the client's table, or DEV_BAD for a name the
 * daemon would refuse (over PROTO_MAX_NAME bytes, not UTF-8), a full table or
 * ENOMEM: the writer drops and counts that entry. The lock (which the writer
 * holds while it drains) is taken only when the name is not the one this
 * thread named last: the client's copies never move or change before
 * tc_close, so the ring may keep a pointer to one.
 */
static uint32_t device_id(tc_client *c, struct ring *r, const char *name)
{
    uint32_t id = 0;
    size_t len;

    if (r->dev_str != NULL && strcmp(r->dev_str, name) == 0)
        return r->dev_id;
    len = strlen(name);
    if (len > PROTO_MAX_NAME || !proto_utf8_valid(name, len))
        return DEV_BAD;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_devs && id == 0; i++)
        if (strcmp(c->devs[i], name) == 0)
            id = (uint32_t)i + 1;
    if (id == 0 && c->n_devs < DEVS_MAX && grow(&c->devs, &c->cap_devs, c->n_devs) == 0 &&
        (c->devs[c->n_devs] = strdup(name)) != NULL)
        id = (uint32_t)++c->n_devs;
    if (id != 0) {
        r->dev_str = c->devs[id - 1];
        r->dev_id = id;
    }
    pthread_mutex_unlock(&c->mu);
    return id != 0 ? id : DEV_BAD;
}

/* ---- recording --------------------------------------------------------------- */

/*
 * Memory for a ring's records, every page touched now, once: left to the
 * records, the first touch of each page would be a page fault inside some
 * later recording call (on a VM, hundreds of µs when the host backs the
 * page). MADV_POPULATE_WRITE faults them all in with one call (a 2 MiB ring
 * in ~1 ms here, where touching page by page took ~20 ms); a kernel without
 * it (before 5.14) gets the pages touched one by one.
 */
static struct rec *ring_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED)
        return NULL;
    if (!populate(p, bytes)) {
        for (size_t off = 0; off < bytes; off += 4096)
            ((volatile char *)p)[off] = 0;
    }
    return p;
}

static struct ring *ring_new(tc_client *c)
{
    /* 64-byte aligned: head and tail sit on cache lines of their own. */
    size_t size = (sizeof(struct ring) + 63) & ~(size_t)63;
    struct ring *r = aligned_alloc(64, size);

    if (r == NULL)
        return NULL;
    memset(r, 0, size);
    if ((r->buf = ring_map(ring_bytes(c->ring_entries))) == NULL) {
        free(r);
        return NULL;
    }
    r->mask = c->ring_entries - 1;
    pthread_mutex_lock(&c->mu);
    r->next = c->rings;
    c->rings = r;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/*
 * This thread's ring. The cache holds one client; a thread recording into
 * several clients at once gets a new ring per switch (correct, not cheap).
 * The slow path is also where a forked child's client connects (the fork
 * handler left the forking thread's cache empty; other threads start so):
 * the hot path pays nothing for fork support. NULL when the child cannot
 * start its writer (the client is then offline: later calls count drops).
 */
static __attribute__((noinline)) struct ring *my_ring_slow(tc_client *c)
{
    bool failed = false;

    pthread_mutex_lock(&c->mu);
    if (c->forked)
        failed = client_restart(c) < 0;
    pthread_mutex_unlock(&c->mu);
    if (failed)
        return NULL;
    tls.ring = ring_new(c);
    tls.gen = tls.ring != NULL ? c->gen : 0;
    return tls.ring;
}

static inline struct ring *my_ring(tc_client *c)
{
    return tls.gen == c->gen ? tls.ring : my_ring_slow(c);
}

/*
 * Blocking mode's wait: the recording thread sleeps on its ring's wake_seq
 * until the writer thread has drained the ring down to the tail it asked for
 * in wait_for (ring_drained), not in a sleep loop that wakes to look. It
 * asks for a quarter of the ring more than it needs, so that it wakes once
 * per batch of records, not once per record. The writer is woken through its
 * pipe the first time, in case it sleeps for its interval with nothing to
 * send. The timed wait is a backstop only: every drain past wait_for wakes.
 */
#if defined(__linux__)
static void ring_sleep(struct ring *r, uint32_t seq)
{
    struct timespec ts = {0, 100000000};

    syscall(SYS_futex, (uint32_t *)&r->wake_seq, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
}

static void ring_wakeup(struct ring *r)
{
    atomic_fetch_add_explicit(&r->wake_seq, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&r->wake_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void ring_sleep(struct ring *r, uint32_t seq)
{
    struct timespec ts = {0, 200000};

    (void)r, (void)seq;
    nanosleep(&ts, NULL);
}

static void ring_wakeup(struct ring *r)
{
    atomic_fetch_add_explicit(&r->wake_seq, 1, memory_order_release);
}
#endif

/*
 * Whether r has room for what leaves it filled to at most `most` slots past
 * tail (waiting for it in blocking mode), else false with the entry counted
 * as dropped. tail is the writer thread's cache line: read only here, when
 * the ring looks full by the last value seen.
 */
static __attribute__((noinline)) bool ring_room(tc_client *c, struct ring *r, uint64_t head,
                                                uint64_t most)
{
    uint64_t slack = (r->mask + 1) / 4;
    /* The tail that leaves room, and slack more (at most an empty ring: head). */
    uint64_t need = head - most + (most < slack ? most : slack);
    bool woke = false;

    while (head - (r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire)) > most) {
        uint32_t seq;

        if (!c->blocking || c->broken) {
            atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
            return false;
        }
        /* Announce the wait, then look at tail again: either this thread sees
         * the writer's new tail, or the writer sees wait_for (both seq_cst). */
        seq = atomic_load_explicit(&r->wake_seq, memory_order_acquire);
        atomic_store_explicit(&r->wait_for, need, memory_order_seq_cst);
        if ((int64_t)(atomic_load_explicit(&r->tail, memory_order_seq_cst) - need) < 0 &&
            !c->broken) {
            if (!woke)
                writer_wake(c);
            woke = true;
            ring_sleep(r, seq);
        }
        atomic_store_explicit(&r->wait_for, 0, memory_order_relaxed);
    }
    return true;
}

/*
 * The slot for this thread's next record, or NULL when the record is dropped
 * (a full ring in the default mode, or a broken connection). The caller fills
 * the slot field by field, in place — a record built on the stack and copied
 * would be read back with wide loads from narrower stores, which the CPU
 * cannot forward and stalls on — then publishes it with ring_commit().
 */
static __attribute__((noinline)) bool ring_wait(tc_client *c, struct ring *r, uint64_t head)
{
    return ring_room(c, r, head, r->mask);
}

static inline struct rec *ring_slot(tc_client *c, struct ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

    if (head - r->tail_seen > r->mask && !ring_wait(c, r, head))
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

/* A fixed buffer for msgpack_packer: the largest pair of shapes fits. */
struct shape_buf {
    char data[SHAPE_MAX];
    size_t len;
};

static int shape_buf_write(void *data, const char *buf, size_t len)
{
    struct shape_buf *b = data;

    if (b->len + len > sizeof(b->data))
        return -1;
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    return 0;
}

/*
 * The key of an (out, in) pair: the words [out? ndim : ~0, dims..., n_in,
 * (ndim, dims...) × n_in], with ndim and n_in cut to their limits. The hot
 * path never builds it: shape_hash() and shape_key_eq() walk the caller's
 * structs directly (a key built on the stack and compared with memcmp would
 * be read back with wide loads from 8-byte stores, which stalls).
 */
#define SHAPE_KEY_MAX (1 + TC_MAX_DIMS + 1 + TC_MAX_INPUTS * (1 + TC_MAX_DIMS))

static size_t dims_of(const tc_shape *s)
{
    return s->ndim > TC_MAX_DIMS ? TC_MAX_DIMS : s->ndim;
}

static uint64_t mix(uint64_t h, uint64_t w)
{
    return (h ^ w) * 0x9e3779b97f4a7c15ull;
}

static uint64_t shape_hash(const tc_shape *out, const tc_shape *in, size_t n_in, uint32_t *words)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    uint32_t n = 2;

    if (out != NULL) {
        h = mix(h, dims_of(out));
        for (size_t d = 0; d < dims_of(out); d++)
            h = mix(h, out->dims[d]);
        n += (uint32_t)dims_of(out);
    } else {
        h = mix(h, ~0ull);
    }
    h = mix(h, n_in);
    for (size_t i = 0; i < n_in; i++) {
        h = mix(h, dims_of(&in[i]));
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            h = mix(h, in[i].dims[d]);
        n += 1 + (uint32_t)dims_of(&in[i]);
    }
    *words = n;
    return h ^ (h >> 32);
}

static bool shape_key_eq(const uint64_t *k, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    if (*k++ != (out != NULL ? dims_of(out) : ~0ull))
        return false;
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            if (*k++ != out->dims[d])
                return false;
    if (*k++ != n_in)
        return false;
    for (size_t i = 0; i < n_in; i++) {
        if (*k++ != dims_of(&in[i]))
            return false;
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            if (*k++ != in[i].dims[d])
                return false;
    }
    return true;
}

static void shape_key_make(uint64_t *k, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    *k++ = out != NULL ? dims_of(out) : ~0ull;
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            *k++ = out->dims[d];
    *k++ = n_in;
    for (size_t i = 0; i < n_in; i++) {
        *k++ = dims_of(&in[i]);
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            *k++ = in[i].dims[d];
    }
}

/* Packs the pair as two msgpack objects (nil when absent) into b. */
static void shape_pack(struct shape_buf *b, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    msgpack_packer pk;

    b->len = 0;
    msgpack_packer_init(&pk, b, shape_buf_write);
    if (out != NULL)
        proto_pack_shape(&pk, out->dims, dims_of(out));
    else
        msgpack_pack_nil(&pk);
    if (n_in > 0) {
        msgpack_pack_array(&pk, n_in);
        for (size_t i = 0; i < n_in; i++)
            proto_pack_shape(&pk, in[i].dims, dims_of(&in[i]));
    } else {
        msgpack_pack_nil(&pk);
    }
}

/* Whether every dimension is one the daemon takes (at most INT64_MAX). */
static bool shapes_valid(const tc_shape *out, const tc_shape *in, size_t n_in)
{
    if (out != NULL)
        for (size_t d = 0; d < dims_of(out); d++)
            if (out->dims[d] > (uint64_t)INT64_MAX)
                return false;
    for (size_t i = 0; i < n_in; i++)
        for (size_t d = 0; d < dims_of(&in[i]); d++)
            if (in[i].dims[d] > (uint64_t)INT64_MAX)
                return false;
    return true;
}

/* The pair's slot in the index, or the empty slot where it would go. */
static inline uint32_t shape_find(tc_client *c, const tc_shape *out, const tc_shape *in,
                                  size_t n_in, uint64_t h, uint32_t words, size_t *slot)
{
    size_t i = h & (SHAPE_INDEX - 1);

    for (;; i = (i + 1) & (SHAPE_INDEX - 1)) {
        uint64_t v = atomic_load_explicit(&c->shape_index[i], memory_order_acquire);
        const struct shape_pair *p;

        if (v == 0)
            break;
        p = &c->shapes[(uint32_t)v - 1];
        if ((v >> 32) == (h >> 32) && p->hash == h && p->words == words &&
            shape_key_eq(p->key, out, in, n_in))
            return (uint32_t)v;
    }
    *slot = i;
    return 0;
}

/*
 * A pair not in the index yet: added under the lock (unless another thread
 * added it meanwhile). Its index+1; 0 when the table is full or on ENOMEM;
 * SHAPES_BAD for a dimension the daemon would refuse (never added).
 */
static __attribute__((noinline)) uint32_t shape_intern_slow(tc_client *c, const tc_shape *out,
                                                            const tc_shape *in, size_t n_in,
                                                            uint64_t h, uint32_t words)
{
    struct shape_pair *p;
    struct shape_buf *b;
    uint32_t id = 0;
    size_t slot = 0;

    if (!shapes_valid(out, in, n_in))
        return SHAPES_BAD;
    if (atomic_load_explicit(&c->shapes_full, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&c->shape_mu);
    if ((id = shape_find(c, out, in, n_in, h, words, &slot)) != 0 || c->n_shapes == SHAPES_MAX)
        goto out;
    p = &c->shapes[c->n_shapes];
    b = malloc(sizeof(*b));
    p->key = malloc(words * sizeof(*p->key));
    if (b != NULL && p->key != NULL) {
        shape_pack(b, out, in, n_in);
        if ((p->bytes = malloc(b->len)) != NULL)
            memcpy(p->bytes, b->data, b->len);
        p->len = (uint32_t)b->len;
    }
    free(b);
    if (p->key == NULL || p->bytes == NULL) {
        free(p->key);
        free(p->bytes);
        p->key = NULL;
        p->bytes = NULL;
        goto out;
    }
    shape_key_make(p->key, out, in, n_in);
    p->hash = h;
    p->words = words;
    id = (uint32_t)++c->n_shapes;
    atomic_store_explicit(&c->shape_index[slot], (h & ~0xffffffffull) | id, memory_order_release);
    if (c->n_shapes == SHAPES_MAX)
        atomic_store_explicit(&c->shapes_full, true, memory_order_relaxed);
out:
    pthread_mutex_unlock(&c->shape_mu);
    return id;
}

/*
 * The index+1 of the (out, in) pair in the client's interned pairs, found
 * in the index without a lock: shapes repeat every step, so the lock is
 * taken only for a pair the client has not seen yet. 0 when no shapes are
 * given (or when the table is full or on ENOMEM: they are left out).
 */
static __attribute__((noinline)) uint32_t shape_lookup(tc_client *c, const tc_shape *out,
                                                       const tc_shape *in, size_t n_in)
{
    uint32_t words, id;
    size_t slot = 0;
    uint64_t h;

    if (in == NULL)
        n_in = 0;
    else if (n_in > TC_MAX_INPUTS)
        n_in = TC_MAX_INPUTS;
    if (out == NULL && n_in == 0)
        return 0;
    h = shape_hash(out, in, n_in, &words);
    if ((id = shape_find(c, out, in, n_in, h, words, &slot)) != 0)
        return id;
    return shape_intern_slow(c, out, in, n_in, h, words);
}

/* shape_lookup(), inlined for an entry without shapes. */
static inline uint32_t shape_intern(tc_client *c, const tc_shape *out, const tc_shape *in,
                                    size_t n_in)
{
    if (out == NULL && (in == NULL || n_in == 0))
        return 0;
    return shape_lookup(c, out, in, n_in);
}

/*
 * Appends an entry, after a step marker when the client's step moved since
 * this thread's last record. op 0 (what tc_op returns on failure) is not an
 * op the daemon knows: the entry is dropped and counted.
 */
static __attribute__((noinline)) bool record_marker(tc_client *c, struct ring *r, uint64_t step)
{
    struct rec *rec;

    if ((rec = ring_slot(c, r)) == NULL)
        return false;
    rec->start = step;
    rec->op = 0;
    atomic_store_explicit(&r->marks, atomic_load_explicit(&r->marks, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    ring_commit(r);
    r->step = step;
    return true;
}

/* Inlined into the recording calls; what is rare (a new step, a full ring) is not. */
static inline __attribute__((always_inline)) void record(tc_client *c, struct ring *r, uint32_t op,
                                                         uint64_t start, uint64_t dur, uint64_t mem,
                                                         uint32_t shapes, uint32_t dev)
{
    uint64_t step = atomic_load_explicit(&c->step, memory_order_relaxed);
    struct rec *rec;

    if (op == 0) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
        return;
    }
    if (step != r->step && !record_marker(c, r, step))
        return;
    if ((rec = ring_slot(c, r)) == NULL)
        return;
    rec->start = start;
    rec->dur = dur;
    rec->mem = mem;
    rec->op = op;
    rec->shapes = (uint16_t)shapes;
    rec->dev = (uint16_t)dev;
    ring_commit(r);
}

/*
 * An offline client keeps no ring: it only counts the entries it would have
 * recorded. tc_begin (opens) and tc_end (!opens) both end this thread's open
 * op, which is one dropped entry. A thread switching between two offline
 * clients forgets the other's open op (uncounted, as with my_ring's cache).
 */
static void offline_mark(tc_client *c, bool opens)
{
    if (tls.off_gen == c->gen && tls.off_open)
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
    tls.off_gen = c->gen;
    tls.off_open = opens;
}

static void offline_drop(tc_client *c)
{
    atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
}

void tc_begin_(tc_client *c, uint32_t op)
{
    struct ring *r;
    uint64_t now;

    if (c == NULL)
        return;
    if (c->disabled) { /* an offline client is disabled too */
        if (c->offline)
            offline_mark(c, true);
        return;
    }
    if ((r = my_ring(c)) == NULL)
        return;
    now = rec_now(c);
    if (r->open)
        record(c, r, r->cur_op, r->cur_start, now - r->cur_start, 0, c->clock, 0);
    r->open = true;
    r->cur_op = op;
    r->cur_start = now;
}

void tc_end_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    struct ring *r;
    uint32_t shapes;
    uint64_t now;

    if (c == NULL)
        return;
    if (c->disabled) {
        if (c->offline)
            offline_mark(c, false);
        return;
    }
    if ((r = my_ring(c)) == NULL || !r->open)
        return;
    now = rec_now(c);
    shapes = shape_intern(c, out, in, n_in);
    record(c, r, r->cur_op, r->cur_start, now - r->cur_start, mem_bytes, shapes | c->clock, 0);
    r->open = false;
}

void tc_record_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns, uint64_t mem_bytes,
                const tc_shape *out, const tc_shape *in, size_t n_in, const char *device)
{
    struct ring *r;
    uint32_t shapes, dev = 0;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (device != NULL && *device)
        dev = device_id(c, r, device);
    shapes = shape_intern(c, out, in, n_in);
    record(c, r, op, start_ns, dur_ns, mem_bytes, shapes, dev);
}

/*
 * Room for n slots at r's head, waiting or dropping as ring_slot() does.
 * n beyond the ring's size never fits: dropped, even in blocking mode.
 */
static bool ring_reserve(tc_client *c, struct ring *r, uint64_t n)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t most = r->mask + 1 - n; /* the fill level that leaves n free */

    if (n > r->mask + 1) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
        return false;
    }
    return head - r->tail_seen <= most || ring_room(c, r, head, most);
}

/*
 * record() for an entry with elements or ext fields: the record flagged
 * REC_EXT and its two rec_ext slots (three with links), published with one
 * store of head.
 */
static void record_ext(tc_client *c, struct ring *r, const struct rec *e, uint64_t elements,
                       const tc_ext *x)
{
    uint64_t step = atomic_load_explicit(&c->step, memory_order_relaxed), head, marks;
    unsigned slots = x != NULL && (x->has & TC_EXT_THIRD) ? 4 : 3;
    struct rec_ext *x0, *x1;
    struct rec *rec;

    if (e->op == 0) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        return;
    }
    if (!ring_reserve(c, r, step != r->step ? slots + 1 : slots))
        return;
    head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (step != r->step) {
        rec = &r->buf[head++ & r->mask];
        rec->start = step;
        rec->op = 0;
        r->step = step;
    }
    rec = &r->buf[head & r->mask];
    rec->start = e->start;
    rec->dur = e->dur;
    rec->mem = e->mem;
    rec->op = e->op;
    rec->shapes = (uint16_t)(e->shapes | REC_EXT);
    rec->dev = e->dev;
    x0 = (struct rec_ext *)(void *)&r->buf[(head + 1) & r->mask];
    x1 = (struct rec_ext *)(void *)&r->buf[(head + 2) & r->mask];
    x0->w[0] = elements;
    x0->w[1] = x != NULL ? x->stream : 0;
    x0->w[2] = x != NULL ? x->peer : 0;
    x0->w[3] = x != NULL ? x->comm : 0;
    x1->w[0] = x != NULL ? x->seq : 0;
    x1->w[1] = x != NULL ? x->checksum : 0;
    x1->w[2] = x != NULL ? (uint64_t)x->tag : 0;
    x1->w[3] = x != NULL ? (x->has & TC_EXT_KNOWN) : 0;
    if (slots == 4) {
        struct rec_ext *x2 = (struct rec_ext *)(void *)&r->buf[(head + 3) & r->mask];
        x2->w[0] = (x->has & TC_EXT_ID) ? x->id : 0;
        x2->w[1] = (x->has & TC_EXT_PARENT) ? x->parent : 0;
        x2->w[2] = (x->has & TC_EXT_COMM_SIZE) ? x->comm_size : 0;
    }
    /* tc_recorded counts head minus marks: the step marker and the ext slots are not
     * entries. */
    marks = head + slots - atomic_load_explicit(&r->head, memory_order_relaxed) - 1;
    atomic_store_explicit(&r->marks, atomic_load_explicit(&r->marks, memory_order_relaxed) + marks,
                          memory_order_relaxed);
    atomic_store_explicit(&r->head, head + slots, memory_order_release);
}

void tc_record_ext_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                    uint64_t mem_bytes, uint64_t elements, const tc_shape *out, const tc_shape *in,
                    size_t n_in, const char *device, const tc_ext *ext)
{
    struct rec e = {.start = start_ns, .dur = dur_ns, .mem = mem_bytes, .op = op};
    struct ring *r;

    if ((ext == NULL || (ext->has & TC_EXT_KNOWN) == 0) && elements == TC_ELEMENTS_NONE) {
        tc_record_(c, op, start_ns, dur_ns, mem_bytes, out, in, n_in, device);
        return;
    }
    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if ((elements > INT64_MAX && elements != TC_ELEMENTS_NONE) ||
        (ext != NULL && (ext->has & TC_EXT_COMM_SIZE) &&
         (ext->comm_size == 0 || ext->comm_size > INT32_MAX))) {
        /* The daemon refuses it (PROTOCOL.md Parts 2, 3) and would close the connection. */
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
        return;
    }
    if (device != NULL && *device) {
        uint32_t dev = device_id(c, r, device);
        if (dev == 0)
            return;
        e.dev = (uint16_t)dev;
    }
    e.shapes = (uint16_t)shape_intern(c, out, in, n_in);
    record_ext(c, r, &e, elements, ext);
}

void tc_defer(tc_client *c, uint32_t op)
{
    struct ring *r;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (r->deferred == NULL && (r->deferred = malloc(DEFER_MAX * sizeof(*r->deferred))) == NULL)
        return;
    if (r->n_deferred == DEFER_MAX) {
        atomic_fetch_add(&c->dropped, 1);
        return;
    }
    r->deferred[r->n_deferred].op = op;
    r->deferred[r->n_deferred++].start = now_ns();
}

void tc_finalize(tc_client *c, uint64_t end_ns)
{
    struct ring *r;

    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    for (size_t i = 0; i < r->n_deferred; i++) {
        uint64_t start = r->deferred[i].start;
        record(c, r, r->deferred[i].op, start, end_ns > start ? end_ns - start : 0, 0, 0, 0);
    }
    r->n_deferred = 0;
}

void tc_step(tc_client *c)
{
    if (c != NULL && !c->disabled)
        atomic_fetch_add_explicit(&c->step, 1, memory_order_relaxed);
}

void tc_set_step(tc_client *c, uint64_t step)
{
    if (c != NULL && !c->disabled)
        atomic_store_explicit(&c->step, step, memory_order_relaxed);
}

/* ---- metadata and figures ------------------------------------------------------ */

static int meta(tc_client *c, struct proto_kv *kv)
{
    msgpack_packer pk;
    int rc;

    if (c == NULL || c->disabled)
        return -ENOTCONN;
    if (kv->key == NULL || strlen(kv->key) == 0 || strlen(kv->key) > PROTO_MAX_NAME ||
        (kv->type == PROTO_V_STR && (kv->v.s == NULL || strlen(kv->v.s) > PROTO_MAX_NAME)))
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    msgpack_packer_init(&pk, &c->control, msgpack_sbuffer_write);
    rc = proto_pack_meta(&pk, kv, 1);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_meta_str(tc_client *c, const char *key, const char *value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_STR, .v.s = (char *)value};
    return meta(c, &kv);
}

int tc_meta_int(tc_client *c, const char *key, int64_t value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_INT, .v.i = value};
    return meta(c, &kv);
}

int tc_meta_double(tc_client *c, const char *key, double value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_FLOAT, .v.f = value};
    return meta(c, &kv);
}

int tc_meta_bool(tc_client *c, const char *key, int value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_BOOL, .v.b = value != 0};
    return meta(c, &kv);
}

int tc_enabled(const tc_client *c)
{
    return c != NULL && !c->disabled;
}

uint64_t tc_dropped(const tc_client *c)
{
    return c != NULL ? atomic_load(&((tc_client *)c)->dropped) : 0;
}

uint64_t tc_recorded(const tc_client *c)
{
    tc_client *cc = (tc_client *)c;
    uint64_t n;

    if (c == NULL || c->disabled)
        return 0;
    /* Every entry either went into a ring (its head counts it, with the step
     * markers) or was refused. */
    n = atomic_load(&cc->rejected);
    pthread_mutex_lock(&cc->mu);
    for (struct ring *r = cc->rings; r != NULL; r = r->next)
        n += atomic_load(&r->head) - atomic_load(&r->marks);
    pthread_mutex_unlock(&cc->mu);
    return n;
}

int64_t tc_session_id(const tc_client *c)
{
    return c != NULL && !c->disabled ? c->session_id : -1;
}

/* ---- nested regions (tc_push / tc_pop) ---------------------------------------- */

/*
 * Kept apart from tc_begin/tc_end, which they do not slow: a region is
 * recorded through tc_record_ext_() with its links, and ids are handed out
 * lazily, only to a region that gets a region inside it, so that a region
 * with nothing around it and nothing in it is a plain one-slot entry.
 */

uint64_t tc_region_id(tc_client *c)
{
    if (c == NULL || c->disabled)
        return 0;
    return atomic_fetch_add_explicit(&c->region_ids, 1, memory_order_relaxed) + 1;
}

void tc_push_(tc_client *c, uint32_t op)
{
    struct region *reg;
    struct ring *r;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (r->regions == NULL && (r->regions = malloc(REGION_MAX * sizeof(*r->regions))) == NULL) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        return;
    }
    if (r->n_regions++ >= REGION_MAX) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        return; /* tc_pop drops it without recording */
    }
    reg = &r->regions[r->n_regions - 1];
    reg->op = op;
    reg->has_parent = r->n_regions > 1;
    reg->id = 0;
    reg->parent = 0;
    if (reg->has_parent) {
        struct region *outer = reg - 1;
        if (outer->id == 0)
            outer->id = tc_region_id(c);
        reg->parent = outer->id;
    }
    reg->start = now_ns();
}

void tc_pop_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    uint64_t end = now_ns();
    struct region *reg;
    struct ring *r;
    tc_ext x = {0};

    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL || r->n_regions == 0)
        return;
    if (r->n_regions-- > REGION_MAX)
        return; /* counted as dropped by its tc_push */
    reg = &r->regions[r->n_regions];
    x.has = (reg->id ? TC_EXT_ID : 0) | (reg->has_parent ? TC_EXT_PARENT : 0);
    x.id = reg->id;
    x.parent = reg->parent;
    tc_record_ext_(c, reg->op, reg->start, end - reg->start, mem_bytes, TC_ELEMENTS_NONE, out, in,
                   n_in, NULL, &x);
}
