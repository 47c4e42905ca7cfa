/* agg.c — incremental report aggregates; see agg.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg.h"
#include "info.h"
#include "rksql.h"
#include "store.h"
#include "util.h"
#include "sqlutil.h"

/*
 * Every sum saturates at INT64_MAX, the largest value a file holds: entry
 * fields are at most INT64_MAX each (proto_entry.c), so adding two never wraps a
 * uint64_t, and a saturated delta added to a saturated column stays exact
 * up to the cap. SAT_ADD is the same addition in SQL (?N is never negative).
 */
#define AGG_CAP ((uint64_t)INT64_MAX)
#define SAT_ADD(col, p)                                                                            \
    "CASE WHEN " col " > 9223372036854775807 - " p " THEN 9223372036854775807 ELSE " col " + " p   \
    " END"

static uint64_t agg_sat(uint64_t a, uint64_t b)
{
    return a > AGG_CAP - b ? AGG_CAP : a + b;
}

/* agg_sat() of a and b both at most AGG_CAP (a delta, an entry's field): their sum cannot wrap. */
static inline uint64_t agg_cap_add(uint64_t a, uint64_t b)
{
    uint64_t s = a + b;

    return s > AGG_CAP ? AGG_CAP : s;
}

/*
 * Per-op or per-device sums since the last flush; min is UINT64_MAX while
 * calls is 0. A device's has calls, total and mem alone.
 */
struct agg_sum {
    uint64_t calls, total, min, max, mem, elements;
};

/*
 * One kept top entry: ordered by key (dur or mem) desc, start asc, rowid
 * asc. What the heap compares and moves stays 32 bytes; the rest of the
 * entry's row waits in the heap's f[slot], which does not move.
 */
struct agg_top {
    uint64_t key, start;
    int64_t rowid;
    uint32_t slot; /* its fields: agg_heap.f[slot] */
    bool saved;    /* in the table since the last flush */
};

/* The columns of a kept entry's row besides entry and start_ns (0 ids: NULL). */
struct agg_topf {
    int64_t process_id;
    uint64_t step, dur, mem;
    uint32_t op_id, device_id, shape_id;
    bool known; /* false: read from its entry at the flush (agg_entries) */
};

#define AGG_INS_ROWS 16 /* rows of the longest INSERT of kept entries; then 4, then 1 */

/*
 * The table changes at the flush, not at each offer: while a heap fills (a
 * new session's first AGG_TOP entries) every offer is kept, and a statement
 * per offer was most of agg_entry's SQL.
 */
struct agg_heap {
    struct agg_top *v;  /* a min-heap of the kept entries: v[0] is the first to evict */
    struct agg_topf *f; /* AGG_TOP: f[v[i].slot] is v[i]'s; slots 0 .. n-1 are in use */
    size_t n;
    uint64_t floor; /* no key below it is kept: 0 while the heap fills, then v[0].key */
    int64_t *gone;  /* saved entries evicted since the last flush: to delete */
    size_t n_gone;
    bool changed;
    const char *table;
    sqlite3_stmt *ins[3];   /* AGG_INS_ROWS, 4 and 1 rows (agg_heap_insert) */
    sqlite3_stmt *ins_read; /* the entries of unknown fields, read from `entries` */
    sqlite3_stmt *del;
};

struct agg_bkt {
    uint64_t count, min;
};

/*
 * One chunk of an op's histogram in memory: the buckets that have a count,
 * in bucket order (bucket i of the chunk is b[popcount(mask below bit i)]).
 * The mask sits in the op's array of chunks, not with the buckets: an entry
 * then costs one cache miss (its bucket), not two.
 */
struct agg_chunk {
    uint64_t mask;     /* bit i: bucket i of the chunk has a count */
    struct agg_bkt *b; /* NULL while the mask is 0 */
    uint8_t n, cap;    /* buckets in b, room for */
    bool dirty;        /* changed since the last flush: listed in agg.dirty */
};

/* An op's histogram: its chunks first .. first + n - 1. */
struct agg_hops {
    uint32_t first, n;
    struct agg_chunk *c;
};

struct agg {
    sqlite3 *db;
    bool inexact, broken_written;
    /* session deltas */
    uint64_t entries, total, begin, end, peak, bytes;
    /* op and device deltas, indexed by id (ids are dense from 1) */
    struct agg_sum *ops, *devs;
    size_t n_ops, n_devs;
    /* the histograms, indexed by op id, and the chunks touched since the last flush */
    struct agg_hops *hist;
    size_t n_hist;
    uint64_t hist_gen; /* moves when a bucket moves (agg_entries' noted places) */
    int64_t *dirty;    /* agg_hist_chunks ids */
    size_t n_dirty, cap_dirty;
    struct agg_heap slow, mem;
    sqlite3_stmt *up_session, *up_op, *up_hist, *up_dev;
};

uint32_t agg_bucket(uint64_t v)
{
    return agg_bucket_of(v);
}

/* ---- histograms ---------------------------------------------------------- */

#define AGG_BUCKETS (256 + 56 * 128) /* agg_bucket(UINT64_MAX) + 1 */

/* The smallest duration of bucket b: the inverse of agg_bucket. */
static uint64_t agg_bucket_lo(uint32_t b)
{
    uint32_t k = b - 256;

    if (b < 256)
        return b;
    return (uint64_t)(128 + k % 128) << (k / 128 + 1);
}

static void agg_hist_free(struct agg *a)
{
    for (size_t i = 0; i < a->n_hist; i++) {
        for (uint32_t k = 0; k < a->hist[i].n; k++)
            free(a->hist[i].c[k].b);
        free(a->hist[i].c);
    }
    free(a->hist);
    free(a->dirty);
    a->hist_gen++;
    a->hist = NULL;
    a->dirty = NULL;
    a->n_hist = a->n_dirty = a->cap_dirty = 0;
}

/* The chunks written (or loaded): none is dirty any more. */
static void agg_hist_clean(struct agg *a)
{
    for (size_t k = 0; k < a->n_dirty; k++) {
        const struct agg_hops *h = &a->hist[a->dirty[k] >> AGG_CHUNK_SHIFT];
        uint32_t ci = (uint32_t)(a->dirty[k] & ((1 << AGG_CHUNK_SHIFT) - 1));
        h->c[ci - h->first].dirty = false;
    }
    a->n_dirty = 0;
}

/* The slot of chunk ci of op's histogram, widening its range; NULL on out of memory. */
static struct agg_chunk *agg_chunk_slot(struct agg *a, uint32_t op, uint32_t ci)
{
    struct agg_hops *h;
    struct agg_chunk *c;
    uint32_t first, last;

    if (op >= a->n_hist) {
        size_t cap = a->n_hist ? a->n_hist : 16;
        while (cap <= op)
            cap *= 2;
        struct agg_hops *p = realloc(a->hist, cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        memset(p + a->n_hist, 0, (cap - a->n_hist) * sizeof(*p));
        a->hist = p;
        a->n_hist = cap;
    }
    h = &a->hist[op];
    if (ci - h->first < h->n)
        return &h->c[ci - h->first];
    first = h->n == 0 || ci < h->first ? ci : h->first;
    last = h->n == 0 || ci >= h->first + h->n ? ci : h->first + h->n - 1;
    if ((c = calloc(last - first + 1, sizeof(*c))) == NULL)
        return NULL;
    if (h->n > 0)
        memcpy(c + (h->first - first), h->c, h->n * sizeof(*c));
    free(h->c);
    h->c = c;
    h->first = first;
    h->n = last - first + 1;
    return &h->c[ci - first];
}

/* Makes room for a bucket at b[i] of c. 0 or -ENOMEM. */
static int agg_chunk_grow(struct agg *a, struct agg_chunk *c, unsigned i)
{
    a->hist_gen++;
    if (c->n == c->cap) {
        unsigned cap = c->cap ? c->cap * 2u : 2u; /* at most AGG_CHUNK: n < AGG_CHUNK here */
        struct agg_bkt *b = realloc(c->b, cap * sizeof(*b));
        if (b == NULL)
            return -ENOMEM;
        c->b = b;
        c->cap = (uint8_t)cap;
    }
    memmove(&c->b[i + 1], &c->b[i], (c->n - i) * sizeof(c->b[0]));
    c->n++;
    return 0;
}

/* The bits set in m (__builtin_popcountll is a libgcc call without -mpopcnt). */
static unsigned agg_popcount(uint64_t m)
{
    m = m - (m >> 1 & UINT64_C(0x5555555555555555));
    m = (m & UINT64_C(0x3333333333333333)) + (m >> 2 & UINT64_C(0x3333333333333333));
    m = (m + (m >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
    return (unsigned)((m * UINT64_C(0x0101010101010101)) >> 56);
}

/*
 * Adds `count` durations of bucket b, the smallest of them min, to op's
 * histogram, and lists the chunk for the next flush. 0 or -ENOMEM. The
 * common case (the bucket has a count) is two array lookups and a popcount.
 */
static int agg_hist_put(struct agg *a, uint32_t op, uint32_t b, uint64_t min, uint64_t count)
{
    uint32_t ci = b / AGG_CHUNK, bit = b % AGG_CHUNK;
    struct agg_chunk *c;
    unsigned i;

    if (op < a->n_hist && ci - a->hist[op].first < a->hist[op].n)
        c = &a->hist[op].c[ci - a->hist[op].first];
    else if ((c = agg_chunk_slot(a, op, ci)) == NULL)
        return -ENOMEM;
    i = agg_popcount(c->mask & ((UINT64_C(1) << bit) - 1));
    if (!(c->mask >> bit & 1)) {
        if (agg_chunk_grow(a, c, i) < 0)
            return -ENOMEM;
        c->mask |= UINT64_C(1) << bit;
        c->b[i].count = 0;
        c->b[i].min = min;
    }
    c->b[i].count = agg_sat(c->b[i].count, count);
    if (min < c->b[i].min)
        c->b[i].min = min;
    if (!c->dirty) {
        if (a->n_dirty == a->cap_dirty) {
            size_t cap = a->cap_dirty ? a->cap_dirty * 2 : 64;
            int64_t *d = realloc(a->dirty, cap * sizeof(*d));
            if (d == NULL)
                return -ENOMEM;
            a->dirty = d;
            a->cap_dirty = cap;
        }
        a->dirty[a->n_dirty++] = (int64_t)op << AGG_CHUNK_SHIFT | ci;
        c->dirty = true;
    }
    return 0;
}

static size_t agg_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;

    for (; v >= 0x80; v >>= 7)
        p[n++] = (uint8_t)(v | 0x80);
    p[n++] = (uint8_t)v;
    return n;
}

static int agg_varint_get(const uint8_t *p, size_t len, size_t *pos, uint64_t *v)
{
    uint64_t x = 0;

    for (unsigned shift = 0; shift < 64 && *pos < len; shift += 7) {
        uint8_t byte = p[(*pos)++];
        if (shift == 63 && byte > 1)
            return -EINVAL; /* past 64 bits */
        x |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -EINVAL;
}

/* The blob of chunk ci (agg_chunk_decode's format) into out[AGG_CHUNK_MAX_LEN]; its length. */
static size_t agg_chunk_encode(const struct agg_chunk *c, uint32_t ci, uint8_t *out)
{
    size_t len = 0;
    uint64_t m = c->mask;

    for (int j = 0; j < 8; j++)
        out[len++] = (uint8_t)(c->mask >> (8 * j));
    for (unsigned i = 0; m != 0; i++, m &= m - 1) {
        uint32_t b = ci * AGG_CHUNK + (uint32_t)__builtin_ctzll(m);
        len += agg_varint_put(out + len, c->b[i].count);
        len += agg_varint_put(out + len, c->b[i].min - agg_bucket_lo(b));
    }
    return len;
}

int agg_chunk_decode(const void *data, size_t len, uint32_t chunk,
                     struct agg_hist_bucket out[AGG_CHUNK])
{
    const uint8_t *p = data;
    uint64_t mask = 0, off, lo;
    size_t pos = 8;
    int n = 0;

    if (len < 8 || chunk >= AGG_BUCKETS / AGG_CHUNK)
        return -EINVAL;
    for (int j = 0; j < 8; j++)
        mask |= (uint64_t)p[j] << (8 * j);
    for (; mask != 0; mask &= mask - 1, n++) {
        struct agg_hist_bucket *o = &out[n];
        o->bucket = chunk * AGG_CHUNK + (uint32_t)__builtin_ctzll(mask);
        if (agg_varint_get(p, len, &pos, &o->count) < 0 || o->count == 0 ||
            agg_varint_get(p, len, &pos, &off) < 0)
            return -EINVAL;
        lo = agg_bucket_lo(o->bucket);
        if (off > UINT64_MAX - lo || agg_bucket(lo + off) != o->bucket)
            return -EINVAL; /* min_ns outside its bucket */
        o->min_ns = lo + off;
    }
    return pos == len ? n : -EINVAL;
}

/* Writes the chunks touched since the last flush. */
static int agg_hist_flush(struct agg *a)
{
    uint8_t buf[AGG_CHUNK_MAX_LEN];
    int rc;

    for (size_t k = 0; k < a->n_dirty; k++) {
        int64_t id = a->dirty[k];
        const struct agg_hops *h = &a->hist[id >> AGG_CHUNK_SHIFT];
        uint32_t ci = (uint32_t)(id & ((1 << AGG_CHUNK_SHIFT) - 1));
        size_t len = agg_chunk_encode(&h->c[ci - h->first], ci, buf);

        sqlite3_bind_int64(a->up_hist, 1, id);
        sqlite3_bind_blob(a->up_hist, 2, buf, (int)len, SQLITE_STATIC);
        rc = sqlite3_step(a->up_hist);
        sqlite3_reset(a->up_hist);
        if ((rc = sql_errno(rc)) != 0)
            return rc;
    }
    agg_hist_clean(a);
    return 0;
}

/* One stored chunk into the histograms. 0 or -errno. */
static int agg_hist_load_row(struct agg *a, sqlite3_stmt *st)
{
    struct agg_hist_bucket b[AGG_CHUNK];
    int64_t id = sqlite3_column_int64(st, 0);
    int n, rc;

    if (id < 0 || id >> AGG_CHUNK_SHIFT > UINT32_MAX)
        return -EINVAL;
    n = agg_chunk_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                         (uint32_t)(id & ((1 << AGG_CHUNK_SHIFT) - 1)), b);
    for (int i = 0; i < n; i++) {
        if ((rc = agg_hist_put(a, (uint32_t)(id >> AGG_CHUNK_SHIFT), b[i].bucket, b[i].min_ns,
                               b[i].count)) != 0)
            return rc;
    }
    return n < 0 ? n : 0;
}

/* Loads every op's histogram. */
static int agg_hist_load(struct agg *a)
{
    sqlite3_stmt *st;
    int rc, err = 0;

    agg_hist_free(a);
    rc = sqlite3_prepare_v2(a->db, "SELECT id, data FROM agg_hist_chunks", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_errno(rc);
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW)
        err = agg_hist_load_row(a, st);
    sqlite3_finalize(st);
    if (err == 0 && rc != SQLITE_DONE)
        err = sql_errno(rc);
    if (err != 0) {
        agg_hist_free(a);
        return err;
    }
    agg_hist_clean(a);
    return 0;
}

static int agg_prepare(struct agg *a)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        {offsetof(struct agg, up_session),
         "INSERT INTO agg_session VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE"
         " SET entries = " SAT_ADD("entries", "?1") ", total_ns = " SAT_ADD(
             "total_ns", "?2") ", begin_ns = min(begin_ns, ?3), end_ns = max(end_ns, ?4),"
                               " peak_bytes = max(peak_bytes, ?5), total_bytes = " SAT_ADD(
                                   "total_bytes", "?6")},
        {offsetof(struct agg, up_op),
         "INSERT INTO agg_ops VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(op_id) DO UPDATE"
         " SET calls = " SAT_ADD("calls", "?2") ", total_ns = " SAT_ADD(
             "total_ns", "?3") ", min_ns = min(min_ns, ?4), max_ns = max(max_ns, ?5),"
                               " mem_bytes = " SAT_ADD("mem_bytes", "?6") ", elements = " SAT_ADD(
                                   "elements", "?7")},
        {offsetof(struct agg, up_hist), "INSERT OR REPLACE INTO agg_hist_chunks VALUES (?1, ?2)"},
        {offsetof(struct agg, up_dev),
         "INSERT INTO agg_devices VALUES (?1, ?2, ?3, ?4) ON CONFLICT(device_id) DO UPDATE"
         " SET calls = " SAT_ADD("calls", "?2") ", total_ns = " SAT_ADD(
             "total_ns", "?3") ", mem_bytes = " SAT_ADD("mem_bytes", "?4")},
        {offsetof(struct agg, slow.del), "DELETE FROM top_slow WHERE entry = ?"},
        {offsetof(struct agg, mem.del), "DELETE FROM top_mem WHERE entry = ?"},
    };

    for (size_t i = 0; i < UTIL_ARRAY_LEN(stmts); i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)a + stmts[i].off);
        if (sqlite3_prepare_v3(a->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) !=
            SQLITE_OK)
            return -EIO;
    }
    return 0;
}

/* Empties sums s[0..n). */
static void agg_sums_clear(struct agg_sum *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s[i] = (struct agg_sum){.min = UINT64_MAX};
}

static void agg_reset_deltas(struct agg *a)
{
    a->entries = a->total = a->peak = a->bytes = a->end = 0;
    a->begin = UINT64_MAX;
    agg_sums_clear(a->ops, a->n_ops);
    agg_sums_clear(a->devs, a->n_devs);
}

struct agg *agg_new(sqlite3 *db)
{
    struct agg *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->db = db;
    a->slow.v = malloc(AGG_TOP * sizeof(struct agg_top));
    a->mem.v = malloc(AGG_TOP * sizeof(struct agg_top));
    a->slow.f = malloc(AGG_TOP * sizeof(struct agg_topf));
    a->mem.f = malloc(AGG_TOP * sizeof(struct agg_topf));
    a->slow.gone = malloc(AGG_TOP * sizeof(int64_t));
    a->mem.gone = malloc(AGG_TOP * sizeof(int64_t));
    a->slow.table = "top_slow";
    a->mem.table = "top_mem";
    if (a->slow.v == NULL || a->mem.v == NULL || a->slow.f == NULL || a->mem.f == NULL ||
        a->slow.gone == NULL || a->mem.gone == NULL || agg_prepare(a) < 0) {
        agg_free(a);
        return NULL;
    }
    agg_reset_deltas(a);
    return a;
}

/* Drops the heap's INSERT statements (prepared again when next needed). */
static void agg_heap_unprepare(struct agg_heap *h)
{
    for (size_t k = 0; k < 3; k++) {
        sqlite3_finalize(h->ins[k]);
        h->ins[k] = NULL;
    }
    sqlite3_finalize(h->ins_read);
    h->ins_read = NULL;
}

void agg_free(struct agg *a)
{
    sqlite3_stmt *stmts[6];

    if (a == NULL)
        return;
    stmts[0] = a->up_session, stmts[1] = a->up_op, stmts[2] = a->up_hist, stmts[3] = a->up_dev;
    stmts[4] = a->slow.del, stmts[5] = a->mem.del;
    for (size_t i = 0; i < 6; i++)
        sqlite3_finalize(stmts[i]);
    agg_heap_unprepare(&a->slow);
    agg_heap_unprepare(&a->mem);
    agg_hist_free(a);
    free(a->ops);
    free(a->devs);
    free(a->slow.v);
    free(a->mem.v);
    free(a->slow.f);
    free(a->mem.f);
    free(a->slow.gone);
    free(a->mem.gone);
    free(a);
}

int agg_init_file(struct agg *a)
{
    int rc = sqlite3_exec(a->db, "INSERT OR REPLACE INTO info VALUES ('aggregates', 1)", NULL, NULL,
                          NULL);

    return sql_errno(rc);
}

/* ---- deltas -------------------------------------------------------------- */

static struct agg_sum *agg_slot(struct agg_sum **arr, size_t *n, uint32_t id)
{
    if (id >= *n) {
        size_t cap = *n ? *n : 16;
        while (cap <= id)
            cap *= 2;
        struct agg_sum *p = realloc(*arr, cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        agg_sums_clear(p + *n, cap - *n);
        *arr = p;
        *n = cap;
    }
    return &(*arr)[id];
}

static void agg_add(struct agg_sum *s, uint64_t dur, uint64_t mem, uint64_t elements)
{
    if (dur < s->min)
        s->min = dur;
    if (dur > s->max)
        s->max = dur;
    s->calls++;
    s->total = agg_cap_add(s->total, dur);
    s->mem = agg_cap_add(s->mem, mem);
    s->elements = agg_cap_add(s->elements, elements);
}

/* ---- top-K heaps --------------------------------------------------------- */

/* True when x should be evicted before y (x ranks lower). */
static bool agg_worse(const struct agg_top *x, const struct agg_top *y)
{
    if (x->key != y->key)
        return x->key < y->key;
    if (x->start != y->start)
        return x->start > y->start;
    return x->rowid > y->rowid;
}

static void agg_sift_down(struct agg_heap *h, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && agg_worse(&h->v[l], &h->v[m]))
            m = l;
        if (r < h->n && agg_worse(&h->v[r], &h->v[m]))
            m = r;
        if (m == i)
            return;
        struct agg_top t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
}

/* Adds t (its slot set) to a heap that has room. */
static void agg_sift_in(struct agg_heap *h, const struct agg_top *t)
{
    size_t i = h->n++;

    h->v[i] = *t;
    while (i > 0 && agg_worse(&h->v[i], &h->v[(i - 1) / 2])) {
        struct agg_top x = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

/*
 * Keeps t when it ranks among the AGG_TOP first, in the slot of the entry
 * it evicts (or the next free one); the table follows at the flush. The
 * slot whose fields the caller then fills, or -1: not kept.
 */
static int agg_top_offer(struct agg_heap *h, struct agg_top t)
{
    if (h->n < AGG_TOP) {
        t.slot = (uint32_t)h->n;
        agg_sift_in(h, &t);
    } else {
        if (!agg_worse(&h->v[0], &t))
            return -1;     /* an equal key that starts later */
        if (h->v[0].saved) /* at most AGG_TOP saved entries, each evicted once */
            h->gone[h->n_gone++] = h->v[0].rowid;
        t.slot = h->v[0].slot;
        h->v[0] = t;
        agg_sift_down(h, 0);
    }
    h->floor = h->n < AGG_TOP ? 0 : h->v[0].key;
    h->changed = true;
    return (int)t.slot;
}

/*
 * Offers entry i of a batch, of this key and rowid, to h: the common case,
 * below the full heap's minimum, costs one comparison; the rest of its row
 * is copied only when it is kept. src NULL: its fields are not known here
 * (agg_entries).
 */
static inline void agg_top_check(struct agg_heap *h, uint64_t key, const struct proto_entry *e,
                                 const struct agg_src *src, size_t i, int64_t rowid)
{
    int slot;

    if (key < h->floor)
        return; /* not among the top: the common case once the session is warm */
    slot = agg_top_offer(h, (struct agg_top){.key = key, .start = e->start_ns, .rowid = rowid});
    if (slot < 0)
        return;
    if (src == NULL) {
        h->f[slot].known = false;
        return;
    }
    h->f[slot] = (struct agg_topf){
        .process_id = src->process_id,
        .step = e->step,
        .dur = e->dur_ns,
        .mem = e->mem_bytes,
        .op_id = e->op_id,
        .device_id = src->dev_ids[i],
        .shape_id = src->shape_ids != NULL ? src->shape_ids[i] : 0,
        .known = true,
    };
}

/*
 * Counts a duration in bucket b of op's histogram. The common case, a
 * bucket that has a count in a chunk already listed for the flush, is
 * inline; the rest is agg_hist_put(). 0 or -ENOMEM.
 */
static inline int agg_hist_add(struct agg *a, uint32_t op, uint32_t b, uint64_t dur)
{
    uint32_t bit = b % AGG_CHUNK, ci = b / AGG_CHUNK;

    if (op < a->n_hist && ci - a->hist[op].first < a->hist[op].n) {
        struct agg_chunk *c = &a->hist[op].c[ci - a->hist[op].first];
        if ((c->mask >> bit & 1) && c->dirty) {
            struct agg_bkt *k = &c->b[agg_popcount(c->mask & ((UINT64_C(1) << bit) - 1))];
            k->count = agg_sat(k->count, 1);
            if (dur < k->min)
                k->min = dur;
            return 0;
        }
    }
    return agg_hist_put(a, op, b, dur, 1);
}

/*
 * Where the chunk of bucket b of op's histogram is, or NULL: what
 * agg_entries() asks the cache for ahead of counting. The caller issues the
 * prefetch itself (a function whose only effect is a prefetch is "pure" to
 * GCC: its call is dropped).
 */
static inline const struct agg_chunk *agg_hist_chunk(const struct agg *a, uint32_t op, uint32_t b)
{
    uint32_t ci = b / AGG_CHUNK;

    if (op >= a->n_hist || ci - a->hist[op].first >= a->hist[op].n)
        return NULL;
    return &a->hist[op].c[ci - a->hist[op].first];
}

/*
 * With tens of thousands of buckets touched at random, an entry's bucket is
 * most often a cache miss, and its chunk often one. While agg_entries()
 * counts entry i, it asks for entry i + 2 * AGG_AHEAD's chunk, and for entry
 * i + AGG_AHEAD's bucket (its place needs the chunk's mask), noting where
 * that is: entry i then counts at the place noted, unless a bucket was
 * inserted since (hist_gen moved) or it had none (agg_hist_add). A ring
 * holds what is noted for the entries in between.
 */
#define AGG_AHEAD 8
#define AGG_RING  32 /* a power of two > 2 * AGG_AHEAD */

struct agg_ahead {
    uint32_t bucket;
    struct agg_bkt *where; /* NULL: count through agg_hist_add */
    uint64_t gen;          /* hist_gen when where was noted */
};

/* Notes where entry x's bucket (in r) is, and asks for its line. */
static inline void agg_ahead_note(struct agg *a, const struct proto_entry *x, struct agg_ahead *r)
{
    uint32_t bit = r->bucket % AGG_CHUNK, ci = r->bucket / AGG_CHUNK;
    const struct agg_chunk *c;

    r->where = NULL;
    if (x->op_id >= a->n_hist || ci - a->hist[x->op_id].first >= a->hist[x->op_id].n)
        return;
    c = &a->hist[x->op_id].c[ci - a->hist[x->op_id].first];
    if (!(c->mask >> bit & 1) || !c->dirty)
        return;
    r->where = &c->b[agg_popcount(c->mask & ((UINT64_C(1) << bit) - 1))];
    r->gen = a->hist_gen;
    __builtin_prefetch(r->where, 1);
}

/* agg_batch(), src NULL for agg_entries(): the kept entries' fields are read back at the flush. */
static int agg_count(struct agg *a, const struct proto_entry *e, size_t n, const uint32_t *dev_ids,
                     const struct agg_src *src, int64_t rowid)
{
    /* the session's deltas, in registers for the batch */
    uint64_t total = a->total, bytes = a->bytes, begin = a->begin, end = a->end, peak = a->peak;
    struct agg_ahead ring[AGG_RING];
    int rc = 0;

    for (size_t j = 0; j < 2 * AGG_AHEAD && j < n; j++)
        ring[j % AGG_RING] = (struct agg_ahead){.bucket = agg_bucket_of(e[j].dur_ns)};
    for (size_t i = 0; i < n; i++, e++) {
        struct agg_sum *op =
            e->op_id < a->n_ops ? &a->ops[e->op_id] : agg_slot(&a->ops, &a->n_ops, e->op_id);
        uint64_t stop;

        if (op == NULL) {
            rc = -ENOMEM;
            break;
        }
        if (!a->inexact) {
            const struct agg_ahead *r = &ring[i % AGG_RING];
            if (i + 2 * AGG_AHEAD < n) {
                const struct proto_entry *x = &e[2 * AGG_AHEAD];
                struct agg_ahead *q = &ring[(i + 2 * AGG_AHEAD) % AGG_RING];
                const struct agg_chunk *c;
                q->bucket = agg_bucket_of(x->dur_ns);
                q->where = NULL;
                if ((c = agg_hist_chunk(a, x->op_id, q->bucket)) != NULL)
                    __builtin_prefetch(c, 1);
            }
            if (i + AGG_AHEAD < n)
                agg_ahead_note(a, &e[AGG_AHEAD], &ring[(i + AGG_AHEAD) % AGG_RING]);
            if (r->where != NULL && r->gen == a->hist_gen) {
                r->where->count = agg_sat(r->where->count, 1);
                if (e->dur_ns < r->where->min)
                    r->where->min = e->dur_ns;
            } else if (agg_hist_add(a, e->op_id, r->bucket, e->dur_ns) < 0) {
                rc = -ENOMEM;
                break;
            }
        }
        agg_add(op, e->dur_ns, e->mem_bytes, e->elements);
        if (dev_ids[i] != 0) {
            struct agg_sum *dev = agg_slot(&a->devs, &a->n_devs, dev_ids[i]);
            if (dev == NULL) {
                rc = -ENOMEM;
                break;
            }
            /* agg_devices keeps these three alone */
            dev->calls++;
            dev->total = agg_cap_add(dev->total, e->dur_ns);
            dev->mem = agg_cap_add(dev->mem, e->mem_bytes);
        }
        total = agg_cap_add(total, e->dur_ns);
        bytes = agg_cap_add(bytes, e->mem_bytes);
        if (e->start_ns < begin)
            begin = e->start_ns;
        /* start + dur cannot wrap (both <= INT64_MAX); past the cap it is capped */
        if ((stop = agg_cap_add(e->start_ns, e->dur_ns)) > end)
            end = stop;
        if (e->mem_bytes > peak)
            peak = e->mem_bytes;
        agg_top_check(&a->slow, e->dur_ns, e, src, i, rowid + (int64_t)i);
        if (e->mem_bytes != 0)
            agg_top_check(&a->mem, e->mem_bytes, e, src, i, rowid + (int64_t)i);
        a->entries++;
    }
    a->total = total, a->bytes = bytes, a->begin = begin, a->end = end, a->peak = peak;
    return rc;
}

int agg_batch(struct agg *a, const struct proto_entry *e, size_t n, const struct agg_src *src,
              int64_t rowid)
{
    return agg_count(a, e, n, src->dev_ids, src, rowid);
}

int agg_entries(struct agg *a, const struct proto_entry *e, size_t n, const uint32_t *dev_ids,
                int64_t rowid)
{
    return agg_count(a, e, n, dev_ids, NULL, rowid);
}

int agg_entry(struct agg *a, const struct proto_entry *e, uint32_t dev_id, int64_t rowid)
{
    return agg_entries(a, e, 1, &dev_id, rowid);
}

/* Refills a heap from its table. */
static int agg_heap_load(struct agg_heap *h, sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return sql_errno(rc);
    h->n = h->n_gone = 0;
    h->changed = false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && h->n < AGG_TOP) {
        h->f[h->n].known = false; /* in the table already: never inserted again */
        agg_sift_in(h, &(struct agg_top){.rowid = sqlite3_column_int64(st, 0),
                                         .key = (uint64_t)sqlite3_column_int64(st, 1),
                                         .start = (uint64_t)sqlite3_column_int64(st, 2),
                                         .slot = (uint32_t)h->n,
                                         .saved = true});
    }
    h->floor = h->n < AGG_TOP ? 0 : h->v[0].key;
    sqlite3_finalize(st);
    return sql_errno(rc);
}

/* What the file's last commit left of the histograms and heaps, into memory. 0 or -errno. */
static int agg_reload(struct agg *a)
{
    int rc;

    if ((rc = agg_hist_load(a)) != 0 ||
        (rc = agg_heap_load(&a->slow, a->db, "SELECT entry, dur_ns, start_ns FROM top_slow")) != 0)
        return rc;
    return agg_heap_load(&a->mem, a->db, "SELECT entry, mem_bytes, start_ns FROM top_mem");
}

int agg_load(struct agg *a)
{
    int64_t exact;
    int rc;

    if ((rc = info_get(a->db, "aggregates", 0, &exact)) != 0)
        return rc;
    if (exact != 1) {
        a->inexact = a->broken_written = true;
        return 0;
    }
    return agg_reload(a);
}

/* ---- flush --------------------------------------------------------------- */

static int agg_step_id(sqlite3_stmt *st, int64_t rowid)
{
    int rc;

    sqlite3_bind_int64(st, 1, rowid);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return sql_errno(rc);
}

static int agg_rowid_cmp(const void *pa, const void *pb)
{
    int64_t x = *(const int64_t *)pa, y = *(const int64_t *)pb;

    return x < y ? -1 : x > y;
}

static int agg_top_rowid_cmp(const void *pa, const void *pb)
{
    int64_t x = ((const struct agg_top *)pa)->rowid, y = ((const struct agg_top *)pb)->rowid;

    return x < y ? -1 : x > y;
}

/*
 * Inserts the kept entries of unknown fields (agg_entries()), their fields copied from their
 * rows (the transaction's entries are all in the file by now, the blocks
 * format's last block included). One statement for all of them, their
 * rowids a JSON array in ascending order: the blocks format's table then
 * opens one cursor and decodes each block once.
 */
static int agg_heap_read(struct agg *a, struct agg_heap *h, const int64_t *rowid, size_t n)
{
    char json[AGG_TOP * 21 + 3];
    size_t len = 0;
    int rc;

    if (h->ins_read == NULL) {
        char sql[320];
        snprintf(sql, sizeof(sql),
                 "INSERT OR IGNORE INTO %s SELECT e.rowid, e.process_id, e.step, e.op_id,"
                 " e.device_id, e.start_ns, e.dur_ns, e.mem_bytes, e.shape_id"
                 " FROM json_each(?1) j CROSS JOIN entries e ON e.rowid = j.value",
                 h->table);
        rc = sqlite3_prepare_v3(a->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &h->ins_read, NULL);
        if (rc != SQLITE_OK)
            return sql_errno(rc);
    }
    json[len++] = '[';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(json + len, sizeof(json) - len, "%s%lld", i ? "," : "",
                                (long long)rowid[i]);
    json[len++] = ']';
    sqlite3_bind_text(h->ins_read, 1, json, (int)len, SQLITE_STATIC);
    rc = sqlite3_step(h->ins_read);
    sqlite3_reset(h->ins_read);
    return sql_errno(rc);
}

/* The INSERT of `rows` kept entries into h's table, nine parameters a row. */
static int agg_heap_prepare(struct agg *a, struct agg_heap *h, size_t k, size_t rows)
{
    char sql[160 + AGG_INS_ROWS * 20];
    int len = snprintf(sql, sizeof(sql),
                       "INSERT OR IGNORE INTO %s (entry, process_id, step, op_id, device_id,"
                       " start_ns, dur_ns, mem_bytes, shape_id) VALUES ",
                       h->table);

    for (size_t r = 0; r < rows; r++)
        len +=
            snprintf(sql + len, sizeof(sql) - (size_t)len, "%s(?,?,?,?,?,?,?,?,?)", r ? "," : "");
    return sql_errno(
        sqlite3_prepare_v3(a->db, sql, len, SQLITE_PREPARE_PERSISTENT, &h->ins[k], NULL));
}

/* Binds kept entry t's row as the nine parameters from base + 1 on; as `entries` has it. */
static void agg_heap_bind(sqlite3_stmt *st, int base, const struct agg_top *t,
                          const struct agg_topf *f)
{
    sqlite3_bind_int64(st, base + 1, t->rowid);
    sqlite3_bind_int64(st, base + 2, f->process_id);
    sqlite3_bind_int64(st, base + 3, (int64_t)f->step);
    sqlite3_bind_int64(st, base + 4, f->op_id);
    if (f->device_id != 0)
        sqlite3_bind_int64(st, base + 5, f->device_id);
    else
        sqlite3_bind_null(st, base + 5);
    sqlite3_bind_int64(st, base + 6, (int64_t)t->start);
    sqlite3_bind_int64(st, base + 7, (int64_t)f->dur);
    sqlite3_bind_int64(st, base + 8, (int64_t)f->mem);
    if (f->shape_id != 0)
        sqlite3_bind_int64(st, base + 9, f->shape_id);
    else
        sqlite3_bind_null(st, base + 9);
}

/*
 * Inserts the kept entries add[0..n), in ascending rowids, with the fields
 * they carry: AGG_INS_ROWS rows a statement while there are that many, then
 * 4, then 1 (a commit of a warm session keeps a few new entries).
 */
static int agg_heap_insert(struct agg *a, struct agg_heap *h, const struct agg_top *add, size_t n)
{
    static const size_t rows[3] = {AGG_INS_ROWS, 4, 1};
    size_t i = 0;
    int rc;

    for (size_t k = 0; k < 3; k++) {
        for (; n - i >= rows[k]; i += rows[k]) {
            if (h->ins[k] == NULL && (rc = agg_heap_prepare(a, h, k, rows[k])) != 0)
                return rc;
            for (size_t r = 0; r < rows[k]; r++)
                agg_heap_bind(h->ins[k], (int)(9 * r), &add[i + r], &h->f[add[i + r].slot]);
            rc = sqlite3_step(h->ins[k]);
            sqlite3_reset(h->ins[k]);
            if ((rc = sql_errno(rc)) != 0)
                return rc;
        }
    }
    return 0;
}

/*
 * Deletes the saved entries evicted since the last flush, inserts those kept
 * since: from the fields they carry, or, when they carry none, from their
 * rows (agg_heap_read).
 */
static int agg_heap_flush(struct agg *a, struct agg_heap *h)
{
    struct agg_top add[AGG_TOP];
    int64_t unknown[AGG_TOP];
    size_t n_add = 0, n_unknown = 0;
    int rc;

    if (!h->changed)
        return 0;
    for (size_t i = 0; i < h->n_gone; i++) {
        if ((rc = agg_step_id(h->del, h->gone[i])) != 0)
            return rc;
    }
    for (size_t i = 0; i < h->n; i++) {
        if (h->v[i].saved)
            continue;
        if (h->f[h->v[i].slot].known)
            add[n_add++] = h->v[i];
        else
            unknown[n_unknown++] = h->v[i].rowid;
    }
    qsort(add, n_add, sizeof(add[0]), agg_top_rowid_cmp);
    if ((rc = agg_heap_insert(a, h, add, n_add)) != 0)
        return rc;
    if (n_unknown > 0) {
        qsort(unknown, n_unknown, sizeof(unknown[0]), agg_rowid_cmp);
        if ((rc = agg_heap_read(a, h, unknown, n_unknown)) != 0)
            return rc;
    }
    for (size_t i = 0; i < h->n; i++)
        h->v[i].saved = true;
    h->n_gone = 0;
    h->changed = false;
    return 0;
}

static int agg_flush_sums(struct agg *a)
{
    int rc;

    for (size_t i = 0; i < a->n_ops; i++) {
        const struct agg_sum *s = &a->ops[i];
        int64_t v[7] = {(int64_t)i,      (int64_t)s->calls, (int64_t)s->total,   (int64_t)s->min,
                        (int64_t)s->max, (int64_t)s->mem,   (int64_t)s->elements};
        if (s->calls && (rc = rksql_run(a->up_op, v, 7)) != 0)
            return rc;
    }
    for (size_t i = 0; i < a->n_devs; i++) {
        const struct agg_sum *s = &a->devs[i];
        int64_t v[4] = {(int64_t)i, (int64_t)s->calls, (int64_t)s->total, (int64_t)s->mem};
        if (s->calls && (rc = rksql_run(a->up_dev, v, 4)) != 0)
            return rc;
    }
    return 0;
}

int agg_flush(struct agg *a)
{
    int64_t v[6] = {(int64_t)a->entries, (int64_t)a->total, (int64_t)a->begin,
                    (int64_t)a->end,     (int64_t)a->peak,  (int64_t)a->bytes};
    int rc;

    if (a->inexact && !a->broken_written) {
        rc = sqlite3_exec(a->db, "INSERT OR REPLACE INTO info VALUES ('aggregates', 0)", NULL, NULL,
                          NULL);
        if (rc != SQLITE_OK)
            return sql_errno(rc);
        a->broken_written = true;
    }
    if (!a->inexact && (rc = agg_hist_flush(a)) != 0)
        return rc;
    if (a->entries == 0)
        return 0;
    if ((rc = rksql_run(a->up_session, v, 6)) != 0 || (rc = agg_flush_sums(a)) != 0 ||
        (rc = agg_heap_flush(a, &a->slow)) != 0 || (rc = agg_heap_flush(a, &a->mem)) != 0)
        return rc;
    agg_reset_deltas(a);
    return 0;
}

void agg_discard(struct agg *a)
{
    agg_reset_deltas(a);
    /*
     * The histograms and heaps hold what was rolled back: they are read back
     * from the file, unless the transaction is still open (ROLLBACK failed).
     */
    if (a->inexact || !sqlite3_get_autocommit(a->db) || agg_reload(a) != 0) {
        agg_hist_free(a);
        a->inexact = true;
    }
}
