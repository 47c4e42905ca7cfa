/*
 * tcmpi_site.c — callsites (issue 29 item 5): per call site (the return
 * address of the program's call into an MPI_* wrapper), the calls, time and
 * bytes of its MPI function, counted in the process, exact whatever entries
 * are dropped, and sent at MPI_Finalize with the site resolved by dladdr.
 *
 * DESIGN
 * TCMPI_BEGIN (tcmpi.h) notes the wrapper's return address in a
 * thread-local, only while recording; the recording helpers count each call
 * they record under that address (an Irecv under its own call's, kept with
 * its request until it completes). Each thread counts in a table of its own
 * (TCMPI_SITE_SLOTS, open addressing), allocated when it first counts (as
 * its ring is) and linked into a list: one writer per table, so a count is
 * plain loads and stores (relaxed atomics, for the reader at the end), no
 * read-modify-write and no lock: 6-7.5 ns per call (9-13 ns with two threads
 * on one site) where three atomic adds in one shared table took 51-76 ns
 * (165-175 ns), 2-core VM, loaded, 2026-11-28.
 * A call whose site finds no slot (more sites in one thread than its table
 * takes) is counted as lost. A return address calls one function, so the
 * address alone is the key. tcmpi_site_send(), from tcmpi_stop before the
 * bye (MPI_Finalize: no thread calls MPI any more), adds the threads' tables
 * up, resolves the TCMPI_SITE_SEND sites with the most time — once each, off
 * the hot path — and sends them as metadata.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcmpi.h"

#define TCMPI_SITE_SLOTS 1024 /* per thread; a power of two */

struct site {
    _Atomic uintptr_t addr; /* 0: empty */
    _Atomic int op;
    _Atomic uint64_t calls, ns, bytes;
};

struct site_table {
    struct site_table *next;
    _Atomic uint64_t lost; /* calls whose site found no slot */
    struct site s[TCMPI_SITE_SLOTS];
};

static struct site_table *_Atomic tables; /* every thread's, newest first */
static _Atomic uint64_t lost_tables;      /* calls of threads whose table could not be made */
static _Thread_local struct site_table *mine;

_Thread_local void *tcmpi_site_now;

/* Adds v to a counter only this thread writes. */
static inline void site_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static struct site_table *site_table(void)
{
    struct site_table *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->next = atomic_load(&tables);
    while (!atomic_compare_exchange_weak(&tables, &t->next, t))
        ;
    return t;
}

void tcmpi_site_count(const void *site, enum tcmpi_op op, uint64_t ns, uint64_t bytes)
{
    uintptr_t a = (uintptr_t)site;
    size_t i = (size_t)(((uint64_t)a * 0x9e3779b97f4a7c15ull) >> 54) & (TCMPI_SITE_SLOTS - 1);
    struct site_table *t = mine;

    if (a == 0 || op == TCMPI_COMPLETED || op == TCMPI_RECEIVED)
        return; /* no site known; or no call of its own */
    if (t == NULL && (t = mine = site_table()) == NULL) {
        atomic_fetch_add_explicit(&lost_tables, 1, memory_order_relaxed);
        return;
    }
    for (size_t n = 0; n < TCMPI_SITE_SLOTS / 2; n++, i = (i + 1) & (TCMPI_SITE_SLOTS - 1)) {
        struct site *s = &t->s[i];
        uintptr_t at = atomic_load_explicit(&s->addr, memory_order_relaxed);

        if (at == 0) {
            atomic_store_explicit(&s->op, (int)op, memory_order_relaxed);
            atomic_store_explicit(&s->addr, a, memory_order_relaxed);
        } else if (at != a) {
            continue;
        }
        site_add(&s->calls, 1);
        site_add(&s->ns, ns);
        site_add(&s->bytes, bytes);
        return;
    }
    site_add(&t->lost, 1);
}

/* A site summed over the threads' tables (tcmpi_site_send). */
struct site_sum {
    uintptr_t addr;
    int op;
    uint64_t calls, ns, bytes;
};

static int site_by_ns(const void *pa, const void *pb)
{
    const struct site_sum *a = pa, *b = pb;

    return a->ns > b->ns ? -1 : a->ns < b->ns;
}

/*
 * The module, its offset and the symbol of address a: the offset is the
 * one addr2line -e MODULE takes (from the load base; the address itself in
 * a non-PIE executable), of the call instruction (a - 1: a is the return
 * address, after it).
 */
static void site_resolve(uintptr_t a, char *buf, size_t size, const uint64_t op_calls[3], int op)
{
    Dl_info di;
    uintptr_t pc = a - 1, off = pc, symoff = 0;
    const char *module = "?", *symbol = "";

    if (dladdr((void *)pc, &di) != 0) {
        const unsigned char *base = di.dli_fbase;
        if (di.dli_fname != NULL && di.dli_fname[0] != '\0')
            module = di.dli_fname;
        /* e_type is at the same offset in 32- and 64-bit headers */
        if (base != NULL && ((const Elf64_Ehdr *)(const void *)base)->e_type != ET_EXEC)
            off = pc - (uintptr_t)base;
        if (di.dli_sname != NULL && di.dli_saddr != NULL) {
            symbol = di.dli_sname;
            symoff = pc - (uintptr_t)di.dli_saddr;
        }
    }
    snprintf(buf, size, "%s\t%llu\t%llu\t%llu\t%llx\t%llx\t%s\t%.700s",
             tcmpi_op_name((enum tcmpi_op)op), (unsigned long long)op_calls[0],
             (unsigned long long)op_calls[1], (unsigned long long)op_calls[2],
             (unsigned long long)off, (unsigned long long)symoff, symbol, module);
}

/* Every thread's sites added up into *out (caller frees); their number, or -1 (no memory). */
static long site_sum(struct site_sum **out, uint64_t *lost)
{
    struct site_sum *sum = NULL;
    size_t n = 0, cap = 0;

    *lost = atomic_load(&lost_tables);
    for (struct site_table *t = atomic_load(&tables); t != NULL; t = t->next) {
        *lost += atomic_load(&t->lost);
        for (size_t i = 0; i < TCMPI_SITE_SLOTS; i++) {
            uintptr_t a = atomic_load(&t->s[i].addr);
            size_t k = 0;

            if (a == 0)
                continue;
            while (k < n && sum[k].addr != a)
                k++;
            if (k == n) {
                if (n == cap) {
                    struct site_sum *grown =
                        realloc(sum, (cap = cap ? 2 * cap : 64) * sizeof(*sum));
                    if (grown == NULL) {
                        free(sum);
                        return -1;
                    }
                    sum = grown;
                }
                sum[n++] = (struct site_sum){.addr = a, .op = atomic_load(&t->s[i].op)};
            }
            sum[k].calls += atomic_load(&t->s[i].calls);
            sum[k].ns += atomic_load(&t->s[i].ns);
            sum[k].bytes += atomic_load(&t->s[i].bytes);
        }
    }
    *out = sum;
    return (long)n;
}

void tcmpi_site_send(tc_client *c)
{
    struct site_sum *sum = NULL;
    char key[32], value[1024];
    uint64_t lost;
    long n = site_sum(&sum, &lost);

    if (n < 0)
        return; /* no memory: no sites rather than wrong ones */
    if (n > 1)  /* by time: ticks sort as ns do */
        qsort(sum, (size_t)n, sizeof(*sum), site_by_ns);
    tc_meta_int(c, "mpi.sites", (int64_t)n);
    tc_meta_int(c, "mpi.sites_lost", (int64_t)lost);
    for (long i = 0; i < n && i < TCMPI_SITE_SEND; i++) {
        uint64_t counts[3] = {sum[i].calls, tcmpi_dur_ns(c, sum[i].ns), sum[i].bytes};

        site_resolve(sum[i].addr, value, sizeof(value), counts, sum[i].op);
        snprintf(key, sizeof(key), "mpi.site.%ld", i);
        tc_meta_str(c, key, value);
    }
    free(sum);
}
