/*
 * test_batchpool.c — the arrays of spent batches (daemon/shared/batchpool.h): which
 * array a take gets, the limits on what is kept, the trim, two threads at
 * once, and a stream of batches of every size decoded into reused arrays,
 * each checked against the same message decoded on its own.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batchpool.h"
#include "proto.h"

static void *filled(size_t n, int c)
{
    void *p = malloc(n);

    cr_assert_not_null(p);
    memset(p, c, n);
    return p;
}

static void drain(void)
{
    batchpool_drain();
}

TestSuite(batchpool, .init = drain, .fini = drain);

Test(batchpool, empty_pool_misses)
{
    struct batchpool_stats st;
    size_t cap = 99;

    cr_assert_null(batchpool_take(BATCHPOOL_ENTRIES, 0, &cap));
    cr_assert_eq(cap, 0);
    batchpool_stats(&st);
    cr_assert_eq(st.taken, 0);
    cr_assert_eq(st.missed, 1);
}

/* The most recently given back of those large enough; each kind apart. */
Test(batchpool, takes_the_newest_that_fits)
{
    void *a = filled(100, 1), *b = filled(200, 2), *c = filled(50, 3);
    size_t cap;

    batchpool_put(BATCHPOOL_IDS, a, 100);
    batchpool_put(BATCHPOOL_IDS, b, 200);
    batchpool_put(BATCHPOOL_IDS, c, 50);
    cr_assert_null(batchpool_take(BATCHPOOL_BLOB, 0, &cap));
    cr_assert_null(batchpool_take(BATCHPOOL_IDS, 201, &cap));
    cr_assert_eq(batchpool_take(BATCHPOOL_IDS, 150, &cap), b);
    cr_assert_eq(cap, 200);
    cr_assert_eq(batchpool_take(BATCHPOOL_IDS, 0, &cap), c);
    cr_assert_eq(cap, 50);
    cr_assert_eq(batchpool_take(BATCHPOOL_IDS, 100, &cap), a);
    cr_assert_eq(cap, 100);
    cr_assert_null(batchpool_take(BATCHPOOL_IDS, 0, &cap));
    free(a);
    free(b);
    free(c);
}

/* At most BATCHPOOL_MAX_ARRAYS / 2 entries arrays: past it a smaller one makes room, or it goes. */
Test(batchpool, count_limit_keeps_the_larger)
{
    enum { MAX = BATCHPOOL_MAX_ARRAYS / 2 };
    struct batchpool_stats st;
    size_t cap;

    for (size_t i = 0; i < MAX; i++)
        batchpool_put(BATCHPOOL_ENTRIES, filled(1000, 0), 1000);
    batchpool_put(BATCHPOOL_ENTRIES, filled(1000, 0), 1000); /* not larger: freed */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, MAX);
    cr_assert_eq(st.kept, MAX);
    cr_assert_eq(st.freed, 1);
    cr_assert_eq(st.bytes, MAX * 1000);
    batchpool_put(BATCHPOOL_ENTRIES, filled(3000, 0), 3000); /* larger: one of 1000 goes */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, MAX);
    cr_assert_eq(st.freed, 2);
    cr_assert_eq(st.bytes, (MAX - 1) * 1000 + 3000);
    free(batchpool_take(BATCHPOOL_ENTRIES, 2000, &cap));
    cr_assert_eq(cap, 3000);
    /* ids: twice as many (two arrays a batch) */
    for (size_t i = 0; i < 2 * MAX + 1; i++)
        batchpool_put(BATCHPOOL_IDS, filled(16, 0), 16);
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, MAX - 1 + 2 * MAX);
}

/* Bytes: 3/4 of BATCHPOOL_MAX_BYTES for entries, none over BATCHPOOL_MAX_ARRAY. */
Test(batchpool, byte_limits)
{
    const size_t share = BATCHPOOL_MAX_BYTES / 8 * 6, one = BATCHPOOL_MAX_ARRAY;
    struct batchpool_stats st;
    size_t cap;

    batchpool_put(BATCHPOOL_ENTRIES, filled(16, 0), one + 1); /* its room says too large */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, 0);
    for (size_t i = 0; i < share / one; i++)
        batchpool_put(BATCHPOOL_ENTRIES, malloc(one), one);
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, share / one);
    cr_assert_eq(st.bytes, share / one * one);
    batchpool_put(BATCHPOOL_ENTRIES, malloc(one), one); /* over the share, none smaller */
    batchpool_put(BATCHPOOL_BLOB, filled(64, 0), 64);   /* another kind's share */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, share / one + 1);
    cr_assert_eq(st.bytes, share / one * one + 64);
    cr_assert_eq(st.freed, 2);
    free(batchpool_take(BATCHPOOL_BLOB, 0, &cap));
    cr_assert_eq(cap, 64);
}

/* A spent batch's four arrays, by the room they say (or their counts when 0). */
Test(batchpool, put_batch_keeps_all_four)
{
    struct proto_batch b = {0};
    struct batchpool_stats st;
    size_t cap;

    b.entries = malloc(10 * sizeof(*b.entries));
    b.n = 7;
    b.cap = 10;
    b.blob = filled(40, 0);
    b.blob_len = 40;
    batchpool_put_batch(&b, filled(7 * 4, 0), filled(9 * 4, 0), 7);
    cr_assert_null(b.entries);
    cr_assert_null(b.blob);
    cr_assert_eq(b.n, 0);
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, 4);
    cr_assert_eq(st.bytes, 10 * sizeof(*b.entries) + 40 + 2 * 7 * 4);
    b.cap = 11;
    b.blob_cap = 41;
    batchpool_take_batch(NULL, &b); /* asks for more than was kept */
    cr_assert_null(b.entries);
    cr_assert_null(b.blob);
    b.cap = 3;
    b.blob_cap = 8;
    batchpool_take_batch(NULL, &b);
    cr_assert_not_null(b.entries);
    cr_assert_eq(b.cap, 10);
    cr_assert_not_null(b.blob);
    cr_assert_eq(b.blob_cap, 40);
    proto_batch_free(&b);
    free(batchpool_take(BATCHPOOL_IDS, 28, &cap));
    free(batchpool_take(BATCHPOOL_IDS, 28, &cap));
    cr_assert_null(batchpool_take(BATCHPOOL_IDS, 0, &cap));
}

/* Everything goes at the second trim without a take in between. */
Test(batchpool, trim_frees_when_idle)
{
    struct batchpool_stats st;
    size_t cap;

    batchpool_trim();
    batchpool_put(BATCHPOOL_BLOB, filled(64, 0), 64);
    batchpool_put(BATCHPOOL_BLOB, filled(64, 0), 64);
    free(batchpool_take(BATCHPOOL_BLOB, 0, &cap));
    batchpool_trim(); /* a take since the last: kept */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, 1);
    batchpool_trim(); /* none since: freed */
    batchpool_stats(&st);
    cr_assert_eq(st.arrays, 0);
    cr_assert_eq(st.bytes, 0);
}

/* ---- two threads, as the loop and the writer ------------------------------ */

enum { ROUNDS = 20000 };

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;

    for (int i = 0; i < ROUNDS; i++) {
        size_t want = 1 + (size_t)rand_r(&seed) % 4096, cap;
        enum batchpool_kind k = (enum batchpool_kind)(rand_r(&seed) % BATCHPOOL_KINDS);
        unsigned char *p = batchpool_take(k, want, &cap);

        if (p == NULL) {
            p = malloc(want);
            cap = want;
        }
        cr_assert_not_null(p);
        cr_assert_geq(cap, want);
        memset(p, (int)seed, cap); /* all its room is this thread's alone */
        for (size_t j = 0; j < cap; j += 512)
            cr_assert_eq(p[j], (unsigned char)seed);
        batchpool_put(k, p, cap);
    }
    return NULL;
}

Test(batchpool, two_threads)
{
    pthread_t t;
    struct batchpool_stats st;

    cr_assert_eq(pthread_create(&t, NULL, churn, (void *)(uintptr_t)1), 0);
    churn((void *)(uintptr_t)2);
    cr_assert_eq(pthread_join(t, NULL), 0);
    batchpool_stats(&st);
    cr_assert_eq(st.taken + st.missed, 2 * ROUNDS);
    cr_assert_eq(st.kept + st.freed, 2 * ROUNDS);
    cr_assert_gt(st.taken, ROUNDS); /* most takes found one */
    cr_assert_leq(st.arrays, BATCHPOOL_MAX_ARRAYS * 2);
}

/* ---- a stream of batches through a reader that takes from the pool ------ */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Batch number k: its size and every field from a hash, shapes and devices of every length. */
static void pack_batch(msgpack_packer *pk, uint64_t k)
{
    static const size_t sizes[] = {4096, 1, 3000, 17, 4096, 64, 2048, 5, 4095, 300, 1024, 2};
    size_t n = sizes[k % 12] - (mix(k) % 3 == 0 ? mix(k) % sizes[k % 12] : 0);

    msgpack_pack_array(pk, 2);
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "batch", 5);
    msgpack_pack_array(pk, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = mix(k << 20 | i);
        bool shapes = (k / 3 + h) % 4 != 0, dev = h % 5 == 0;

        msgpack_pack_array(pk, dev ? 9 : shapes ? 8 : 6);
        msgpack_pack_uint64(pk, i);
        msgpack_pack_uint32(pk, (uint32_t)(h % 7));
        msgpack_pack_uint64(pk, h >> 2);
        msgpack_pack_uint64(pk, h % 100000);
        if (h % 3 == 0)
            msgpack_pack_nil(pk);
        else
            msgpack_pack_uint64(pk, h % 1000);
        msgpack_pack_uint64(pk, (h >> 20) % (1u << 30));
        if (!shapes && !dev)
            continue;
        if (shapes) {
            uint32_t nd = (uint32_t)(h >> 8) % 9, ni = (uint32_t)(h >> 12) % 4;
            msgpack_pack_array(pk, nd);
            for (uint32_t d = 0; d < nd; d++)
                msgpack_pack_uint64(pk, 1 + mix(h + d) % (d % 2 ? 100000 : 64));
            msgpack_pack_array(pk, ni);
            for (uint32_t j = 0; j < ni; j++) {
                msgpack_pack_array(pk, j + 1);
                for (uint32_t d = 0; d <= j; d++)
                    msgpack_pack_uint64(pk, 1 + d + j);
            }
        } else {
            msgpack_pack_nil(pk);
            msgpack_pack_nil(pk);
        }
        if (dev) {
            char name[64];
            int len =
                snprintf(name, sizeof(name), "accelerator:%0*u", (int)(h % 40), (unsigned)(h % 9));
            msgpack_pack_str(pk, (size_t)len);
            msgpack_pack_str_body(pk, name, (size_t)len);
        }
    }
}

/*
 * 120 batches of every size, in reads of 16 KiB (the daemon's), through a
 * reader that takes the pool's arrays; each batch taken is checked against
 * the same message decoded on its own, then its arrays are scribbled over
 * and given back with two arrays of ids, as the writer does.
 */
Test(batchpool, reused_arrays_decode_every_batch_exactly)
{
    enum { BATCHES = 120, READ = 16 << 10 };
    struct proto_reader r;
    struct proto_error err = {0};
    struct batchpool_stats st;
    msgpack_sbuffer all;
    msgpack_packer pk;
    size_t *ends = calloc(BATCHES, sizeof(*ends)), off = 0, taken = 0;
    int rc;

    cr_assert_not_null(ends);
    msgpack_sbuffer_init(&all);
    msgpack_packer_init(&pk, &all, msgpack_sbuffer_write);
    for (uint64_t k = 0; k < BATCHES; k++) {
        pack_batch(&pk, k);
        ends[k] = all.size;
    }
    cr_assert_eq(proto_reader_init(&r, 0), 0);
    proto_reader_set_take(&r, batchpool_take_batch, NULL);
    while (off < all.size) {
        size_t n = all.size - off < READ ? all.size - off : READ;
        char *dst = proto_reader_buffer(&r, n);
        struct proto_msg m, want;

        cr_assert_not_null(dst);
        memcpy(dst, all.data + off, n);
        proto_reader_commit(&r, n);
        off += n;
        while ((rc = proto_reader_next(&r, &m, &err)) == 1) {
            size_t start = taken ? ends[taken - 1] : 0, dev_cap, shape_cap;
            struct proto_batch *b = &m.u.batch;
            uint32_t *dev, *shape;

            cr_assert_eq(m.type, PROTO_BATCH);
            cr_assert_eq(
                proto_decode_bytes_tree(all.data + start, ends[taken] - start, &want, &err), 0,
                "%s", err.message);
            cr_assert_eq(b->n, want.u.batch.n, "batch %zu", taken);
            cr_assert_eq(memcmp(b->entries, want.u.batch.entries, b->n * sizeof(*b->entries)), 0,
                         "batch %zu: entries differ", taken);
            cr_assert_eq(b->blob_len, want.u.batch.blob_len, "batch %zu", taken);
            cr_assert(b->blob_len == 0 || memcmp(b->blob, want.u.batch.blob, b->blob_len) == 0,
                      "batch %zu: blob differs", taken);
            cr_assert_geq(b->cap, b->n);
            cr_assert_geq(b->blob_cap, b->blob_len);
            proto_msg_free(&want);
            /* what the loop and the writer do with it */
            if ((dev = batchpool_take(BATCHPOOL_IDS, b->n * 4, &dev_cap)) == NULL)
                dev_cap = b->n * 4, dev = malloc(dev_cap);
            if ((shape = batchpool_take(BATCHPOOL_IDS, b->n * 4, &shape_cap)) == NULL)
                shape_cap = b->n * 4, shape = malloc(shape_cap);
            cr_assert(dev != NULL && shape != NULL);
            memset(dev, 0xa5, dev_cap);
            memset(shape, 0xa5, shape_cap);
            memset(b->entries, 0xa5, b->cap * sizeof(*b->entries));
            if (b->blob != NULL)
                memset(b->blob, 0xa5, b->blob_cap);
            batchpool_put_batch(b, dev, shape, (dev_cap < shape_cap ? dev_cap : shape_cap) / 4);
            taken++;
        }
        cr_assert_eq(rc, 0, "%s", err.message);
    }
    cr_assert_eq(taken, BATCHES);
    batchpool_stats(&st);
    /* after the first, the batches' arrays are the pool's (those of a smaller batch grow) */
    cr_assert_geq(st.taken, 3 * (BATCHES - 2), "%llu taken, %llu missed",
                  (unsigned long long)st.taken, (unsigned long long)st.missed);
    proto_reader_deinit(&r);
    msgpack_sbuffer_destroy(&all);
    free(ends);
}
