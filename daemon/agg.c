/* agg.c — incremental report aggregates; see agg.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "agg.h"
#include "map.h"
#include "store.h"

/*
 * Every sum saturates at INT64_MAX, the largest value a file holds: entry
 * fields are at most INT64_MAX each (proto.c), so adding two never wraps a
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

/* Per-op or per-device sums since the last flush. */
struct agg_sum {
    uint64_t calls, total, min, max, mem, elements;
};

/* One kept top entry: ordered by key (dur or mem) desc, start asc, rowid asc. */
struct agg_top {
    uint64_t key, start;
    int64_t rowid;
};

struct agg_heap {
    struct agg_top *v; /* a min-heap of the kept entries: v[0] is the first to evict */
    size_t n;
    sqlite3_stmt *ins, *del;
};

struct agg {
    sqlite3 *db;
    bool inexact, broken_written;
    /* session deltas */
    uint64_t entries, total, begin, end, peak, bytes;
    /* op and device deltas, indexed by id (ids are dense from 1) */
    struct agg_sum *ops, *devs;
    size_t n_ops, n_devs;
    /* histogram deltas: key (op << 13 | bucket) → index into hist_* */
    struct u32map hist_index;
    uint32_t *hist_key;
    uint64_t *hist_count, *hist_min;
    size_t n_hist, cap_hist;
    struct agg_heap slow, mem;
    sqlite3_stmt *up_session, *up_op, *up_hist, *up_dev;
};

uint32_t agg_bucket(uint64_t v)
{
    int e;

    if (v < 256)
        return (uint32_t)v;
    e = 63 - __builtin_clzll(v); /* 8..63 */
    /* the top 8 bits of v, 128..255: 128 buckets per power of two */
    return 256 + (uint32_t)(e - 8) * 128 + (uint32_t)((v >> (e - 7)) - 128);
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
        {offsetof(struct agg, up_hist),
         "INSERT INTO agg_hist VALUES (?1, ?2, ?3, ?4) ON CONFLICT(op_id, bucket) DO UPDATE"
         " SET min_ns = min(min_ns, ?3), count = " SAT_ADD("count", "?4")},
        {offsetof(struct agg, up_dev),
         "INSERT INTO agg_devices VALUES (?1, ?2, ?3, ?4) ON CONFLICT(device_id) DO UPDATE"
         " SET calls = " SAT_ADD("calls", "?2") ", total_ns = " SAT_ADD(
             "total_ns", "?3") ", mem_bytes = " SAT_ADD("mem_bytes", "?4")},
        {offsetof(struct agg, slow.ins), "INSERT OR IGNORE INTO top_slow VALUES (?)"},
        {offsetof(struct agg, slow.del), "DELETE FROM top_slow WHERE entry = ?"},
        {offsetof(struct agg, mem.ins), "INSERT OR IGNORE INTO top_mem VALUES (?)"},
        {offsetof(struct agg, mem.del), "DELETE FROM top_mem WHERE entry = ?"},
    };

    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)a + stmts[i].off);
        if (sqlite3_prepare_v3(a->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) !=
            SQLITE_OK)
            return -EIO;
    }
    return 0;
}

static void agg_reset_deltas(struct agg *a)
{
    a->entries = a->total = a->peak = a->bytes = a->end = 0;
    a->begin = UINT64_MAX;
    if (a->n_ops > 0)
        memset(a->ops, 0, a->n_ops * sizeof(*a->ops));
    if (a->n_devs > 0)
        memset(a->devs, 0, a->n_devs * sizeof(*a->devs));
    u32map_deinit(&a->hist_index);
    u32map_init(&a->hist_index);
    a->n_hist = 0;
}

struct agg *agg_new(sqlite3 *db)
{
    struct agg *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->db = db;
    u32map_init(&a->hist_index);
    a->slow.v = malloc(AGG_TOP * sizeof(struct agg_top));
    a->mem.v = malloc(AGG_TOP * sizeof(struct agg_top));
    if (a->slow.v == NULL || a->mem.v == NULL || agg_prepare(a) < 0) {
        agg_free(a);
        return NULL;
    }
    agg_reset_deltas(a);
    return a;
}

void agg_free(struct agg *a)
{
    sqlite3_stmt *stmts[8];

    if (a == NULL)
        return;
    stmts[0] = a->up_session, stmts[1] = a->up_op, stmts[2] = a->up_hist, stmts[3] = a->up_dev;
    stmts[4] = a->slow.ins, stmts[5] = a->slow.del, stmts[6] = a->mem.ins, stmts[7] = a->mem.del;
    for (size_t i = 0; i < 8; i++)
        sqlite3_finalize(stmts[i]);
    u32map_deinit(&a->hist_index);
    free(a->hist_key);
    free(a->hist_count);
    free(a->hist_min);
    free(a->ops);
    free(a->devs);
    free(a->slow.v);
    free(a->mem.v);
    free(a);
}

int agg_init_file(struct agg *a)
{
    int rc = sqlite3_exec(a->db, "INSERT OR REPLACE INTO info VALUES ('aggregates', 1)", NULL, NULL,
                          NULL);

    return store_errno(rc);
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
        memset(p + *n, 0, (cap - *n) * sizeof(*p));
        *arr = p;
        *n = cap;
    }
    return &(*arr)[id];
}

static void agg_add(struct agg_sum *s, uint64_t dur, uint64_t mem, uint64_t elements)
{
    if (s->calls == 0 || dur < s->min)
        s->min = dur;
    if (dur > s->max)
        s->max = dur;
    s->calls++;
    s->total = agg_sat(s->total, dur);
    s->mem = agg_sat(s->mem, mem);
    s->elements = agg_sat(s->elements, elements);
}

static int agg_hist_add(struct agg *a, uint32_t op, uint64_t dur)
{
    uint32_t key = op << 13 | agg_bucket(dur), i;

    if (op >= 1u << 19) {
        a->inexact = true; /* beyond the key space: reports scan the entries instead */
        return 0;
    }
    if (!u32map_get(&a->hist_index, key, &i)) {
        if (a->n_hist == a->cap_hist) {
            size_t cap = a->cap_hist ? a->cap_hist * 2 : 256;
            uint32_t *k = realloc(a->hist_key, cap * sizeof(*k));
            uint64_t *c = k ? realloc(a->hist_count, cap * sizeof(*c)) : NULL;
            uint64_t *m = c ? realloc(a->hist_min, cap * sizeof(*m)) : NULL;
            if (k != NULL)
                a->hist_key = k;
            if (c != NULL)
                a->hist_count = c;
            if (m == NULL)
                return -ENOMEM;
            a->hist_min = m;
            a->cap_hist = cap;
        }
        i = (uint32_t)a->n_hist++;
        a->hist_key[i] = key;
        a->hist_count[i] = 0;
        a->hist_min[i] = dur;
        if (u32map_put(&a->hist_index, key, i) < 0)
            return -ENOMEM;
    }
    a->hist_count[i]++;
    if (dur < a->hist_min[i])
        a->hist_min[i] = dur;
    return 0;
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

static int agg_step_id(sqlite3_stmt *st, int64_t rowid)
{
    int rc;

    sqlite3_bind_int64(st, 1, rowid);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return store_errno(rc);
}

static int agg_top_offer(struct agg_heap *h, const struct agg_top *t)
{
    int rc;

    if (h->n < AGG_TOP) {
        size_t i = h->n++;
        h->v[i] = *t;
        while (i > 0 && agg_worse(&h->v[i], &h->v[(i - 1) / 2])) {
            struct agg_top x = h->v[i];
            h->v[i] = h->v[(i - 1) / 2];
            h->v[(i - 1) / 2] = x;
            i = (i - 1) / 2;
        }
        return agg_step_id(h->ins, t->rowid);
    }
    if (!agg_worse(&h->v[0], t))
        return 0; /* not among the top: the common case once the session is warm */
    if ((rc = agg_step_id(h->del, h->v[0].rowid)) != 0)
        return rc;
    h->v[0] = *t;
    agg_sift_down(h, 0);
    return agg_step_id(h->ins, t->rowid);
}

int agg_entry(struct agg *a, const struct proto_entry *e, uint32_t dev_id, int64_t rowid)
{
    struct agg_sum *op = agg_slot(&a->ops, &a->n_ops, e->op_id);
    struct agg_top t = {.key = e->dur_ns, .start = e->start_ns, .rowid = rowid};
    int rc;

    if (op == NULL || agg_hist_add(a, e->op_id, e->dur_ns) < 0)
        return -ENOMEM;
    agg_add(op, e->dur_ns, e->mem_bytes, e->elements);
    if (dev_id != 0) {
        struct agg_sum *dev = agg_slot(&a->devs, &a->n_devs, dev_id);
        if (dev == NULL)
            return -ENOMEM;
        agg_add(dev, e->dur_ns, e->mem_bytes, 0);
    }
    a->entries++;
    a->total = agg_sat(a->total, e->dur_ns);
    a->bytes = agg_sat(a->bytes, e->mem_bytes);
    if (e->start_ns < a->begin)
        a->begin = e->start_ns;
    /* start + dur cannot wrap (both <= INT64_MAX); past the cap it is capped */
    if (agg_sat(e->start_ns, e->dur_ns) > a->end)
        a->end = agg_sat(e->start_ns, e->dur_ns);
    if (e->mem_bytes > a->peak)
        a->peak = e->mem_bytes;
    if ((rc = agg_top_offer(&a->slow, &t)) != 0)
        return rc;
    if (e->mem_bytes == 0)
        return 0;
    t.key = e->mem_bytes;
    return agg_top_offer(&a->mem, &t);
}

/* Refills a heap from its table: the kept entries' keys come from the entries themselves. */
static int agg_heap_load(struct agg_heap *h, sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return store_errno(rc);
    h->n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && h->n < AGG_TOP) {
        size_t i = h->n++;
        h->v[i] = (struct agg_top){.rowid = sqlite3_column_int64(st, 0),
                                   .key = (uint64_t)sqlite3_column_int64(st, 1),
                                   .start = (uint64_t)sqlite3_column_int64(st, 2)};
        while (i > 0 && agg_worse(&h->v[i], &h->v[(i - 1) / 2])) {
            struct agg_top x = h->v[i];
            h->v[i] = h->v[(i - 1) / 2];
            h->v[(i - 1) / 2] = x;
            i = (i - 1) / 2;
        }
    }
    sqlite3_finalize(st);
    return store_errno(rc);
}

int agg_load(struct agg *a)
{
    sqlite3_stmt *st;
    int rc, exact = 0;

    rc =
        sqlite3_prepare_v2(a->db, "SELECT value FROM info WHERE key = 'aggregates'", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_errno(rc);
    if (sqlite3_step(st) == SQLITE_ROW)
        exact = sqlite3_column_int(st, 0) == 1;
    sqlite3_finalize(st);
    if (!exact) {
        a->inexact = a->broken_written = true;
        return 0;
    }
    if ((rc = agg_heap_load(&a->slow, a->db,
                            "SELECT e.rowid, e.dur_ns, e.start_ns FROM top_slow t"
                            " JOIN entries e ON e.rowid = t.entry")) != 0)
        return rc;
    return agg_heap_load(&a->mem, a->db,
                         "SELECT e.rowid, e.mem_bytes, e.start_ns FROM top_mem t"
                         " JOIN entries e ON e.rowid = t.entry");
}

/* ---- flush --------------------------------------------------------------- */

static int agg_run(sqlite3_stmt *st, const int64_t *v, int n)
{
    int rc;

    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, i + 1, v[i]);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return store_errno(rc);
}

static int agg_flush_sums(struct agg *a)
{
    int rc;

    for (size_t i = 0; i < a->n_ops; i++) {
        const struct agg_sum *s = &a->ops[i];
        int64_t v[7] = {(int64_t)i,      (int64_t)s->calls, (int64_t)s->total,   (int64_t)s->min,
                        (int64_t)s->max, (int64_t)s->mem,   (int64_t)s->elements};
        if (s->calls && (rc = agg_run(a->up_op, v, 7)) != 0)
            return rc;
    }
    for (size_t i = 0; i < a->n_devs; i++) {
        const struct agg_sum *s = &a->devs[i];
        int64_t v[4] = {(int64_t)i, (int64_t)s->calls, (int64_t)s->total, (int64_t)s->mem};
        if (s->calls && (rc = agg_run(a->up_dev, v, 4)) != 0)
            return rc;
    }
    for (size_t i = 0; i < a->n_hist; i++) {
        int64_t v[4] = {a->hist_key[i] >> 13, a->hist_key[i] & 8191, (int64_t)a->hist_min[i],
                        (int64_t)a->hist_count[i]};
        if ((rc = agg_run(a->up_hist, v, 4)) != 0)
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
            return store_errno(rc);
        a->broken_written = true;
    }
    if (a->entries == 0)
        return 0;
    if ((rc = agg_run(a->up_session, v, 6)) != 0 || (rc = agg_flush_sums(a)) != 0)
        return rc;
    agg_reset_deltas(a);
    return 0;
}

void agg_discard(struct agg *a)
{
    agg_reset_deltas(a);
    a->inexact = true;
}
