/*
 * tcmpi_count.c — TRACECTL_MPI_P2P=counters (issue 29 item 7): point-to-point
 * calls counted per function, communicator and peer in the process instead
 * of one entry each, so that a latency benchmark's millions of messages cost
 * neither the writer thread nor the daemon anything (README "MPI jobs").
 *
 * DESIGN
 * The recording path of a point-to-point call (p2p_x in tcmpi.c) hands the
 * call to tcmpi_count_p2p when the mode is on. Each thread counts in a table
 * of its own (TCMPI_COUNT_SLOTS, open addressing on (op, comm, peer)),
 * allocated when it first counts and linked into a list, with one writer:
 * plain relaxed loads and stores, no read-modify-write, no lock (as the call
 * sites' tables, tcmpi_site.c). The first call of each key is recorded as
 * an entry (so that its op has a row in the report's ops table, which lists
 * ops with a stored entry), the others are counted; a call whose key finds
 * no slot is not counted either: the caller records its entry as usual, so
 * every call is in the totals either way. tcmpi_count_send(), from tcmpi_stop before the bye
 * (MPI_Finalize: no thread calls MPI any more), adds the tables up into the
 * client's per-op totals (the "ops_dropped" rows the bye carries: the ops
 * table's calls and time, and the MPI time per rank, stay exact) and sends
 * the per-peer rows (every call of the key, its first included) as metadata.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tcint.h"
#include "tcmpi.h"

#define TCMPI_COUNT_SLOTS 1024 /* per thread; a power of two */

struct count {
    _Atomic int op; /* op + 1; 0: empty */
    _Atomic uint64_t comm;
    _Atomic int64_t peer;
    _Atomic uint64_t calls, ns, bytes;      /* counted: every call but the first */
    _Atomic uint64_t first_ns, first_bytes; /* the first, recorded as an entry */
};

struct count_table {
    struct count_table *next;
    struct count s[TCMPI_COUNT_SLOTS];
};

bool tcmpi_p2p_counted;

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

bool tcmpi_count_p2p(enum tcmpi_op op, uint64_t comm, int64_t peer, uint64_t ns, uint64_t bytes)
{
    uint64_t h = ((uint64_t)op * 0x100000001b3ull ^ comm) * 0x9e3779b97f4a7c15ull ^ (uint64_t)peer;
    size_t i = (size_t)((h * 0x9e3779b97f4a7c15ull) >> 54) & (TCMPI_COUNT_SLOTS - 1);
    struct count_table *t = mine;

    if (t == NULL && (no_table || (t = mine = count_table()) == NULL))
        return false;
    for (size_t n = 0; n < TCMPI_COUNT_SLOTS / 2; n++, i = (i + 1) & (TCMPI_COUNT_SLOTS - 1)) {
        struct count *s = &t->s[i];
        int at = atomic_load_explicit(&s->op, memory_order_relaxed);

        if (at == 0) {
            atomic_store_explicit(&s->comm, comm, memory_order_relaxed);
            atomic_store_explicit(&s->peer, peer, memory_order_relaxed);
            atomic_store_explicit(&s->first_ns, ns, memory_order_relaxed);
            atomic_store_explicit(&s->first_bytes, bytes, memory_order_relaxed);
            atomic_store_explicit(&s->op, (int)op + 1, memory_order_relaxed);
            return false; /* the first call of a key is an entry: its op has a row */
        } else if (at != (int)op + 1 ||
                   atomic_load_explicit(&s->comm, memory_order_relaxed) != comm ||
                   atomic_load_explicit(&s->peer, memory_order_relaxed) != peer) {
            continue;
        }
        count_add(&s->calls, 1);
        count_add(&s->ns, ns);
        count_add(&s->bytes, bytes);
        return true;
    }
    return false; /* the table is half full: the entry is recorded */
}

/* One (op, comm, peer) summed over the threads' tables. */
struct count_sum {
    int op;
    uint64_t comm;
    int64_t peer;
    uint64_t calls, ns, bytes;               /* counted */
    uint64_t entries, entry_ns, entry_bytes; /* the first calls, recorded as entries */
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
            sum[k].entries++;
            sum[k].entry_ns += atomic_load(&s->first_ns);
            sum[k].entry_bytes += atomic_load(&s->first_bytes);
        }
    *out = sum;
    return (long)n;
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
