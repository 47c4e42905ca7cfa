/*
 * tcring.c — the per-thread rings: one single-producer/single-consumer ring
 * of 32-byte records per recording thread, mapped and faulted in at once,
 * found through a thread-local cache; room for a record (dropping, or in
 * blocking mode sleeping on a futex until the writer thread drained); the
 * writer's side of a drain (tcring_drained). See tcint.h for the design.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "tcint.h"

_Thread_local __attribute__((tls_model("initial-exec"))) struct tcring_cache tcring_tls;

/*
 * Faults in the whole pages of [p, p + n) with one call, where the kernel
 * can (MADV_POPULATE_WRITE, Linux 5.14): page by page, each first touch is a
 * trap, ~40 µs each on this VM. Only a hint: the memory is ours either way.
 * False where the kernel could not (the pages are then faulted in as used).
 */
bool tcring_populate(void *p, size_t n)
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
/* A ring's records: whole pages of their own (ring_map), so that they are unmapped by size. */
static size_t ring_bytes(size_t entries)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return (entries * sizeof(struct rec) + page - 1) / page * page;
}

void tcring_free(struct ring *r)
{
    for (struct ring *next; r != NULL; r = next) {
        next = r->next;
        munmap(r->buf, ring_bytes(r->mask + 1));
        free(r->deferred);
        free(r->regions);
        free(r);
    }
}

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
    if (!tcring_populate(p, bytes)) {
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
__attribute__((noinline)) struct ring *tcring_mine_slow(tc_client *c)
{
    bool failed = false;

    pthread_mutex_lock(&c->mu);
    if (c->forked)
        failed = tcfork_restart(c) < 0;
    pthread_mutex_unlock(&c->mu);
    if (failed)
        return NULL;
    tcring_tls.ring = ring_new(c);
    tcring_tls.gen = tcring_tls.ring != NULL ? c->gen : 0;
    return tcring_tls.ring;
}

/*
 * Blocking mode's wait: the recording thread sleeps on its ring's wake_seq
 * until the writer thread has drained the ring down to the tail it asked for
 * in wait_for (tcring_drained), not in a sleep loop that wakes to look. It
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
__attribute__((noinline)) bool tcring_room(tc_client *c, struct ring *r, uint64_t head,
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
                tcwriter_wake(c);
            woke = true;
            ring_sleep(r, seq);
        }
        atomic_store_explicit(&r->wait_for, 0, memory_order_relaxed);
    }
    return true;
}

/*
 * Room for n slots at r's head, waiting or dropping as ring_slot() does.
 * n beyond the ring's size never fits: dropped, even in blocking mode.
 */
bool tcring_reserve(tc_client *c, struct ring *r, uint64_t n)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t most = r->mask + 1 - n; /* the fill level that leaves n free */

    if (n > r->mask + 1) {
        atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
        return false;
    }
    return head - r->tail_seen <= most || tcring_room(c, r, head, most);
}

/*
 * Publishes the drain of r up to tail, and wakes its recording thread if it
 * sleeps for a tail this reaches (tcring_room: the seq_cst store and load pair
 * with its own, so one of the two sees the other's).
 */
void tcring_drained(struct ring *r, uint64_t tail)
{
    uint64_t w;

    atomic_store_explicit(&r->tail, tail, memory_order_seq_cst);
    w = atomic_load_explicit(&r->wait_for, memory_order_seq_cst);
    if (w != 0 && (int64_t)(tail - w) >= 0 && atomic_compare_exchange_strong(&r->wait_for, &w, 0))
        ring_wakeup(r);
}
