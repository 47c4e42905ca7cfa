/* batchpool.c — the arrays of spent batches; see batchpool.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batchpool.h"

struct shelf {
    void *p[BATCHPOOL_MAX_ARRAYS]; /* the most recently given back last */
    size_t cap[BATCHPOOL_MAX_ARRAYS];
    size_t n, bytes;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shelf pool_shelves[BATCHPOOL_KINDS];
/* each kind's share of the bytes, by what a batch needs of it: 80 bytes an entry, 8 of ids, and
 * 10 to 30 of shapes for most */
static const size_t pool_max_bytes[BATCHPOOL_KINDS] = {
    BATCHPOOL_MAX_BYTES / 8 * 6, BATCHPOOL_MAX_BYTES / 8 * 1, BATCHPOOL_MAX_BYTES / 8 * 1};
/* two arrays of ids a batch */
static const size_t pool_max_arrays[BATCHPOOL_KINDS] = {
    BATCHPOOL_MAX_ARRAYS / 2, BATCHPOOL_MAX_ARRAYS / 2, BATCHPOOL_MAX_ARRAYS};
static struct batchpool_stats pool_st;

/* Removes array i of s (pool_lock held); returns it. */
static void *shelf_remove(struct shelf *s, size_t i)
{
    void *p = s->p[i];

    pool_st.arrays--;
    pool_st.bytes -= s->cap[i];
    s->bytes -= s->cap[i];
    memmove(&s->p[i], &s->p[i + 1], (s->n - i - 1) * sizeof(s->p[0]));
    memmove(&s->cap[i], &s->cap[i + 1], (s->n - i - 1) * sizeof(s->cap[0]));
    s->n--;
    return p;
}

void *batchpool_take(enum batchpool_kind k, size_t min, size_t *cap)
{
    struct shelf *s = &pool_shelves[k];
    void *p = NULL;

    *cap = 0;
    pthread_mutex_lock(&pool_lock);
    for (size_t i = s->n; i-- > 0;) {
        if (s->cap[i] >= min) {
            *cap = s->cap[i];
            p = shelf_remove(s, i);
            break;
        }
    }
    if (p != NULL)
        pool_st.taken++;
    else
        pool_st.missed++;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

/* The smallest array of s (pool_lock held, s not empty). */
static size_t shelf_smallest(const struct shelf *s)
{
    size_t best = 0;

    for (size_t i = 1; i < s->n; i++)
        if (s->cap[i] < s->cap[best])
            best = i;
    return best;
}

void batchpool_put(enum batchpool_kind k, void *p, size_t cap)
{
    struct shelf *s = &pool_shelves[k];
    void *evicted[BATCHPOOL_MAX_ARRAYS];
    size_t n_evicted = 0, i;

    if (p == NULL)
        return;
    pthread_mutex_lock(&pool_lock);
    /* Over a limit: smaller arrays make room for this one, or it goes. */
    while (cap > 0 && cap <= BATCHPOOL_MAX_ARRAY && s->n > 0 &&
           (s->n == pool_max_arrays[k] || s->bytes + cap > pool_max_bytes[k]) &&
           s->cap[i = shelf_smallest(s)] < cap) {
        evicted[n_evicted++] = shelf_remove(s, i);
        pool_st.freed++;
    }
    if (cap > 0 && cap <= BATCHPOOL_MAX_ARRAY && s->n < pool_max_arrays[k] &&
        s->bytes + cap <= pool_max_bytes[k]) {
        s->p[s->n] = p;
        s->cap[s->n++] = cap;
        s->bytes += cap;
        pool_st.arrays++;
        pool_st.bytes += cap;
        pool_st.kept++;
        p = NULL;
    } else {
        pool_st.freed++;
    }
    pthread_mutex_unlock(&pool_lock);
    /* free() outside the lock: it may give pages back to the kernel */
    free(p);
    for (i = 0; i < n_evicted; i++)
        free(evicted[i]);
}

void batchpool_put_batch(struct proto_batch *b, uint32_t *dev_ids, uint32_t *shape_ids,
                         size_t ids_cap)
{
    size_t cap = b->cap ? b->cap : b->n, blob_cap = b->blob_cap ? b->blob_cap : b->blob_len;

    if (ids_cap == 0)
        ids_cap = b->n;
    batchpool_put(BATCHPOOL_ENTRIES, b->entries, cap * sizeof(*b->entries));
    batchpool_put(BATCHPOOL_BLOB, b->blob, blob_cap);
    batchpool_put(BATCHPOOL_IDS, dev_ids, ids_cap * sizeof(*dev_ids));
    batchpool_put(BATCHPOOL_IDS, shape_ids, ids_cap * sizeof(*shape_ids));
    memset(b, 0, sizeof(*b));
}

void batchpool_take_batch(void *ctx, struct proto_batch *b)
{
    size_t cap;

    (void)ctx;
    b->entries = batchpool_take(BATCHPOOL_ENTRIES, b->cap * sizeof(*b->entries), &cap);
    b->cap = cap / sizeof(*b->entries);
    b->blob = batchpool_take(BATCHPOOL_BLOB, b->blob_cap, &cap);
    b->blob_cap = cap;
}

void batchpool_stats(struct batchpool_stats *st)
{
    pthread_mutex_lock(&pool_lock);
    *st = pool_st;
    pthread_mutex_unlock(&pool_lock);
}

/* Frees every array kept (pool_lock held). */
static void pool_free_all(void)
{
    for (size_t k = 0; k < BATCHPOOL_KINDS; k++) {
        struct shelf *s = &pool_shelves[k];
        for (size_t i = 0; i < s->n; i++)
            free(s->p[i]);
        s->n = s->bytes = 0;
    }
    pool_st.arrays = pool_st.bytes = 0;
}

void batchpool_trim(void)
{
    static uint64_t taken_then;

    pthread_mutex_lock(&pool_lock);
    if (pool_st.taken + pool_st.missed == taken_then)
        pool_free_all();
    taken_then = pool_st.taken + pool_st.missed;
    pthread_mutex_unlock(&pool_lock);
}

void batchpool_drain(void)
{
    pthread_mutex_lock(&pool_lock);
    pool_free_all();
    memset(&pool_st, 0, sizeof(pool_st));
    pthread_mutex_unlock(&pool_lock);
}
