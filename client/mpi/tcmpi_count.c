/*
 * tcmpi_count.c — TRACECTL_MPI_P2P=counters and =auto (issue 29 item 7):
 * point-to-point calls counted per function, communicator and peer in the
 * process instead of one entry each, so that a latency benchmark's millions
 * of messages cost neither the writer thread nor the daemon anything
 * (docs/mpi.md "Point-to-point counters").
 *
 * DESIGN
 * The recording path of a point-to-point call (p2p_x in tcmpi.c) hands the
 * call to tcmpi_count_p2p when a mode is on. Each thread counts in a table
 * of its own (TCMPI_COUNT_SLOTS, open addressing on (op, comm, peer)),
 * allocated when it first counts and linked into a list, with one writer:
 * plain relaxed loads and stores, no read-modify-write, no lock (as the call
 * sites' tables, tcmpi_site.c). Counters mode: the first call of each key is
 * recorded as an entry (so that its op has a row in the report's ops table,
 * which lists ops with a stored entry), the others are counted, each also
 * in its function's log2 size histogram (the same buckets as the report's
 * message sizes), so that those stay exact too. Auto mode: every call is an
 * entry (and counted as one in its key's slot) until the process's
 * point-to-point calls pass TRACECTL_MPI_P2P_RATE per second over a window
 * of TCMPI_AUTO_WINDOW_NS; from then on, as in counters mode (the time is
 * kept and sent as mpi.p2p_auto_ns). A call whose key finds no slot is not
 * counted either: the caller records its entry as usual, so every call is
 * in the totals either way. tcmpi_count_send(), from tcmpi_stop before the
 * bye (MPI_Finalize: no thread calls MPI any more), adds the tables up into
 * the client's per-op totals (counted: the "ops_dropped" rows' counted part,
 * so that the ops table's calls and time, and the MPI time per rank, stay
 * exact) and sends the per-peer rows (every call of the key, its entries
 * included) and the histograms (counted calls only) as metadata.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tcint.h"
#include "tcmpi.h"

#define TCMPI_COUNT_SLOTS  1024 /* per thread; a power of two */
#define TCMPI_SIZE_BUCKETS 65   /* 0 bytes, then [2^(k-1), 2^k) for k = 1 .. 64 */

struct count {
    _Atomic int op; /* op + 1; 0: empty */
    _Atomic uint64_t comm;
    _Atomic int64_t peer;
    _Atomic uint64_t calls, ns, bytes;               /* counted, without an entry */
    _Atomic uint64_t entries, entry_ns, entry_bytes; /* recorded as entries */
};

/* One function's counted calls by message size (bucket: count_bucket). */
struct count_hist {
    _Atomic uint64_t calls[TCMPI_SIZE_BUCKETS], ns[TCMPI_SIZE_BUCKETS];
};

struct count_table {
    struct count_table *next;
    struct count s[TCMPI_COUNT_SLOTS];
    struct count_hist hist[TCMPI_N_OPS];
};

bool tcmpi_p2p_counted;
enum tcmpi_p2p_mode tcmpi_p2p_mode;

/*
 * Auto mode: the window's start (the recording clock; 0: none yet) and its
 * calls, every thread's (relaxed read-modify-writes: before the switch
 * only); the window's length and calls in the recording clock
 * (tcmpi_count_start); switch_ns: tcmpi_ns() when counting began (0: not).
 */
static _Atomic uint64_t win_start, win_calls;
static uint64_t win_len, win_max;
static _Atomic bool switched;
static _Atomic uint64_t switch_ns;
static uint64_t auto_rate;

static struct count_table *_Atomic tables; /* every thread's, newest first */
static _Thread_local struct count_table *mine;
static _Thread_local bool no_table; /* its allocation failed: this thread records entries */

/* Adds v to a counter only this thread writes. */
static inline void count_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static struct count_table *count_table(void)
{
    struct count_table *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        no_table = true;
        return NULL;
    }
    t->next = atomic_load(&tables);
    while (!atomic_compare_exchange_weak(&tables, &t->next, t))
        ;
    return t;
}

void tcmpi_count_start(enum tcmpi_p2p_mode mode, uint64_t rate, double tick_ns)
{
    tcmpi_p2p_mode = mode;
    tcmpi_p2p_counted = mode != TCMPI_P2P_ENTRIES;
    auto_rate = rate;
    win_len = (uint64_t)((double)TCMPI_AUTO_WINDOW_NS / (tick_ns > 0 ? tick_ns : 1.0));
    win_max = rate / (1000000000u / TCMPI_AUTO_WINDOW_NS);
    if (win_max == 0)
        win_max = 1;
}

/* Auto mode, before the switch: one more call ending at t (recording clock); true: switch. */
static bool auto_rate_passed(uint64_t t)
{
    uint64_t start;

    if (atomic_fetch_add_explicit(&win_calls, 1, memory_order_relaxed) + 1 < win_max)
        return false;
    start = atomic_load_explicit(&win_start, memory_order_relaxed);
    if (start != 0 && t - start <= win_len) {
        uint64_t expect = 0;

        atomic_compare_exchange_strong(&switch_ns, &expect, tcmpi_ns());
        atomic_store_explicit(&switched, true, memory_order_relaxed);
        return true;
    }
    /* too slow: a new window from here (racing threads may each start one: no matter) */
    atomic_store_explicit(&win_start, t, memory_order_relaxed);
    atomic_store_explicit(&win_calls, 0, memory_order_relaxed);
    return false;
}

static inline unsigned count_bucket(uint64_t bytes)
{
    return bytes == 0 ? 0 : 64 - (unsigned)__builtin_clzll(bytes);
}

/* The slot of (op, comm, peer) in t, taken if new (*fresh); NULL: the table is half full. */
static struct count *count_slot(struct count_table *t, enum tcmpi_op op, uint64_t comm,
                                int64_t peer, bool *fresh)
{
    uint64_t h = ((uint64_t)op * 0x100000001b3ull ^ comm) * 0x9e3779b97f4a7c15ull ^ (uint64_t)peer;
    size_t i = (size_t)((h * 0x9e3779b97f4a7c15ull) >> 54) & (TCMPI_COUNT_SLOTS - 1);

    for (size_t n = 0; n < TCMPI_COUNT_SLOTS / 2; n++, i = (i + 1) & (TCMPI_COUNT_SLOTS - 1)) {
        struct count *s = &t->s[i];
        int at = atomic_load_explicit(&s->op, memory_order_relaxed);

        if (at == 0) {
            atomic_store_explicit(&s->comm, comm, memory_order_relaxed);
            atomic_store_explicit(&s->peer, peer, memory_order_relaxed);
            atomic_store_explicit(&s->op, (int)op + 1, memory_order_relaxed);
            *fresh = true;
            return s;
        }
        if (at == (int)op + 1 && atomic_load_explicit(&s->comm, memory_order_relaxed) == comm &&
            atomic_load_explicit(&s->peer, memory_order_relaxed) == peer) {
            *fresh = false;
            return s;
        }
    }
    return NULL;
}

bool tcmpi_count_p2p(enum tcmpi_op op, uint64_t comm, int64_t peer, uint64_t t1, uint64_t ns,
                     uint64_t bytes)
{
    struct count_table *t = mine;
    struct count_hist *hist;
    struct count *s;
    bool fresh;
    unsigned b;

    if (t == NULL && (no_table || (t = mine = count_table()) == NULL))
        return false;
    if ((s = count_slot(t, op, comm, peer, &fresh)) == NULL)
        return false; /* the table is half full: the entry is recorded */
    /* the first call of a key is an entry (its op has a row); in auto mode, every call until
     * the process's rate passes the threshold */
    if (fresh ||
        (tcmpi_p2p_mode == TCMPI_P2P_AUTO &&
         !atomic_load_explicit(&switched, memory_order_relaxed) && !auto_rate_passed(t1))) {
        count_add(&s->entries, 1);
        count_add(&s->entry_ns, ns);
        count_add(&s->entry_bytes, bytes);
        return false;
    }
    count_add(&s->calls, 1);
    count_add(&s->ns, ns);
    count_add(&s->bytes, bytes);
    hist = &t->hist[op];
    b = count_bucket(bytes);
    count_add(&hist->calls[b], 1);
    count_add(&hist->ns[b], ns);
    return true;
}

/* One (op, comm, peer) summed over the threads' tables. */
struct count_sum {
    int op;
    uint64_t comm;
    int64_t peer;
    uint64_t calls, ns, bytes;               /* counted */
    uint64_t entries, entry_ns, entry_bytes; /* recorded as entries */
};

static int sum_by_bytes(const void *pa, const void *pb)
{
    const struct count_sum *a = pa, *b = pb;

    uint64_t ab = a->bytes + a->entry_bytes, bb = b->bytes + b->entry_bytes;

    if (ab != bb)
        return ab > bb ? -1 : 1;
    return a->calls > b->calls ? -1 : a->calls < b->calls;
}

/* Every thread's rows added up into *out (caller frees); their number, or -1 (no memory). */
static long count_sum(struct count_sum **out)
{
    struct count_sum *sum = NULL;
    size_t n = 0, cap = 0;

    for (struct count_table *t = atomic_load(&tables); t != NULL; t = t->next)
        for (size_t i = 0; i < TCMPI_COUNT_SLOTS; i++) {
            const struct count *s = &t->s[i];
            int op = atomic_load(&s->op) - 1;
            uint64_t comm = atomic_load(&s->comm);
            int64_t peer = atomic_load(&s->peer);
            size_t k = 0;

            if (op < 0)
                continue;
            while (k < n && (sum[k].op != op || sum[k].comm != comm || sum[k].peer != peer))
                k++;
            if (k == n) {
                if (n == cap) {
                    struct count_sum *grown =
                        realloc(sum, (cap = cap ? 2 * cap : 64) * sizeof(*sum));
                    if (grown == NULL) {
                        free(sum);
                        return -1;
                    }
                    sum = grown;
                }
                sum[n++] = (struct count_sum){.op = op, .comm = comm, .peer = peer};
            }
            sum[k].calls += atomic_load(&s->calls);
            sum[k].ns += atomic_load(&s->ns);
            sum[k].bytes += atomic_load(&s->bytes);
            sum[k].entries += atomic_load(&s->entries);
            sum[k].entry_ns += atomic_load(&s->entry_ns);
            sum[k].entry_bytes += atomic_load(&s->entry_bytes);
        }
    *out = sum;
    return (long)n;
}

/*
 * The counted calls' size histograms, every thread's, one metadata key per
 * function: mpi.p2p_sizes.<op> = "<bucket>:<calls>:<ns>" for each bucket
 * with calls, space-separated (at most 65 x 45 characters: under a string's
 * 4,096).
 */
static void count_send_sizes(tc_client *c)
{
    char key[64], value[TCMPI_SIZE_BUCKETS * 48];

    for (int op = 0; op < TCMPI_N_OPS; op++) {
        size_t len = 0;

        for (unsigned b = 0; b < TCMPI_SIZE_BUCKETS; b++) {
            uint64_t calls = 0, ns = 0;

            for (struct count_table *t = atomic_load(&tables); t != NULL; t = t->next) {
                calls += atomic_load(&t->hist[op].calls[b]);
                ns += atomic_load(&t->hist[op].ns[b]);
            }
            if (calls > 0)
                len += (size_t)snprintf(value + len, sizeof(value) - len, "%s%u:%llu:%llu",
                                        len > 0 ? " " : "", b, (unsigned long long)calls,
                                        (unsigned long long)tcmpi_dur_ns(c, ns));
        }
        if (len == 0)
            continue;
        snprintf(key, sizeof(key), "mpi.p2p_sizes.%s", tcmpi_op_name((enum tcmpi_op)op));
        tc_meta_str(c, key, value);
    }
}

/*
 * The per-op totals go into the client's op totals however the rows below
 * fare; those are the TCMPI_COUNT_SEND rows with the most bytes.
 */
void tcmpi_count_send(tc_client *c)
{
    struct count_sum *sum = NULL;
    char key[32], value[128], comm[20];
    long n;

    if (!tcmpi_p2p_counted || (n = count_sum(&sum)) < 0)
        return;
    for (long i = 0; i < n; i++)
        tcrecord_op_add(c, tcmpi_ops[sum[i].op], sum[i].calls, tcmpi_dur_ns(c, sum[i].ns),
                        sum[i].bytes, true);
    if (n > 1)
        qsort(sum, (size_t)n, sizeof(*sum), sum_by_bytes);
    count_send_sizes(c);
    if (tcmpi_p2p_mode == TCMPI_P2P_AUTO) {
        tc_meta_int(c, "mpi.p2p_auto_rate", (int64_t)auto_rate);
        if (atomic_load(&switch_ns) != 0)
            tc_meta_int(c, "mpi.p2p_auto_ns", (int64_t)atomic_load(&switch_ns));
    }
    tc_meta_int(c, "mpi.p2p", (int64_t)n);
    for (long i = 0; i < n && i < TCMPI_COUNT_SEND; i++) {
        if (sum[i].comm == TCMPI_COUNT_NO_COMM)
            snprintf(comm, sizeof(comm), "-");
        else
            snprintf(comm, sizeof(comm), "%016llx", (unsigned long long)sum[i].comm);
        snprintf(value, sizeof(value), "%s\t%s\t%lld\t%llu\t%llu\t%llu", tcmpi_op_name(sum[i].op),
                 comm, (long long)sum[i].peer, (unsigned long long)(sum[i].calls + sum[i].entries),
                 (unsigned long long)tcmpi_dur_ns(c, sum[i].ns + sum[i].entry_ns),
                 (unsigned long long)(sum[i].bytes + sum[i].entry_bytes));
        snprintf(key, sizeof(key), "mpi.p2p.%ld", i);
        tc_meta_str(c, key, value);
    }
    free(sum);
}
