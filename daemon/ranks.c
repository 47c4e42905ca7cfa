/* ranks.c — the rank, step and collective aggregates; see ranks.h. */
#include <errno.h>
#include <stdbool.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "schema.h"
#include "store.h"

#define RANKS_CAP ((uint64_t)INT64_MAX)

static uint64_t rk_sat(uint64_t a, uint64_t b)
{
    return a > RANKS_CAP - b ? RANKS_CAP : a + b;
}

/* rk_ops delta */
struct rk_opsum {
    int64_t process_id;
    uint32_t device_id, op_id;
    uint64_t calls, total, elements, exposed, begin, end;
};

/* rk_devsteps delta */
struct rk_devstep {
    int64_t process_id;
    uint64_t step;
    uint32_t device_id;
    uint64_t begin, end, cat[PROTO_NCAT], exposed;
    int64_t first_row, last_row;
};

/* rk_steps delta */
struct rk_stepsum {
    int64_t process_id;
    uint64_t step, begin, end;
    uint64_t cat[PROTO_NCAT];
    uint64_t exposed, coll, waited, last_count, caused;
};

/* rk_coll and rk_coll_ranks deltas (process_id -1 for rk_coll) */
struct rk_collsum {
    uint32_t op_id;
    int64_t process_id;
    uint64_t step, instances, partial, skew, skew_max, waited, last_count;
};

struct rk_arrival {
    int64_t process_id;
    uint64_t step, start, dur;
};

struct rk_ikey {
    uint64_t kind, k1, k2, k3; /* kind 1: (comm, seq); 2: (op, group, occurrence) */
};

struct rk_inst {
    struct rk_ikey key;
    uint32_t op_id;
    uint64_t opened; /* order of opening, for finalizing the oldest */
    uint64_t size;   /* ranks of its communicator: the largest ext comm_size given; 0 the world */
    struct rk_arrival *a;
    size_t n, cap;
    size_t n_saved; /* arrivals in rk_open */
    uint64_t procs; /* bit process_id % 64 of each arrival: most duplicate checks end here */
    uint32_t slot;  /* its slot in r->islot: closing it needs no look-up */
};

/* An rk_open row to write: its key, then arrival `arrival` of r->inst[inst]. */
struct rk_orow {
    int64_t key[5]; /* kind, k1, k2, k3, process_id: as SQLite orders them */
    uint32_t inst, arrival;
};

/* An arrival array kept for the next instance: one per instance would be an allocation
 * per collective. */
#define RK_APOOL 64

struct rk_abuf {
    struct rk_arrival *a;
    size_t cap;
};

/* Occurrence count of a collective op per (process, process group). */
struct rk_occ {
    int64_t process_id;
    uint32_t op_id;
    uint64_t group, count;
    bool dirty; /* changed since the last commit */
};

/*
 * The open instances: r->inst (unordered, at most RANKS_OPEN), a hash of their keys
 * (open addressing, linear probing, RK_ISLOTS slots of inst index + 1, 0 empty; deletion
 * shifts back, so no tombstones), and the order they opened in (a ring of RK_IQUEUE keys:
 * an entry whose instance has closed is skipped when it reaches the front). An instance
 * that RK_IQUEUE newer ones overtook is closed as it is.
 */
#define RK_ISLOTS 4096
#define RK_IQUEUE 4096

struct rk_iq {
    struct rk_ikey key;
    uint64_t opened;
};

/*
 * The lookup caches. A delta's index in its array, valid in the transaction
 * (epoch) that made it: the deltas reset at each commit, and so do the
 * caches, by the epoch moving on. key is what the index is for besides the
 * owner (a step); i1 is index + 1.
 */
struct rk_ref {
    uint32_t epoch, i1;
    uint64_t key;
};

/* The last steps' deltas, by step % RK_WAYS: a collective closes, and a comm entry's
 * exposure is counted, a step or two after the process's current one. */
#define RK_WAYS 4

struct rk_refs {
    struct rk_ref w[RK_WAYS];
};

/*
 * Per process and collective op: its occurrence count (r->occ index + 1, for
 * its group) and the rk_coll_ranks deltas of its last steps; per op for
 * rk_coll. RK_POPS slots by op id % RK_POPS (few ops are collectives), one op
 * at a time (op1: op id + 1).
 */
#define RK_POPS 16

struct rk_pop {
    uint32_t op1, occ1;
    struct rk_refs coll;
};

/* The rk_ops deltas of a (process, device): RK_DOPS slots by op id % RK_DOPS. */
#define RK_DOPS 256

struct rk_proc {
    uint64_t group; /* hash of its process_group metadata, 0 none */
    bool seen;
    bool replay;         /* an imported file (metadata import.file): entries in file order */
    uint32_t dev1;       /* r->devs index + 1 of its last device */
    struct rk_refs step; /* the rk_steps deltas of its last steps */
    struct rk_pop *pop;  /* RK_POPS, or NULL until its first collective */
};

struct rk_iv {
    uint64_t b, e;
};

struct rk_pend {
    uint64_t b, e, step;
    uint32_t op_id;
};

/* The intervals of one (process, device), for exposed communication. */
struct rk_dev {
    int64_t process_id;
    uint32_t device_id;
    struct rk_iv *cu; /* merged compute intervals, sorted */
    size_t n_cu, cap_cu;
    struct rk_pend *pc; /* comm entries not yet counted */
    size_t n_pc, cap_pc;
    uint64_t max_start;
    uint64_t disorder;    /* the most an entry started before the latest start seen before it */
    uint64_t fin_end;     /* latest end of a comm entry already counted */
    uint64_t drop_end;    /* latest end of a compute interval already dropped */
    bool dirty;           /* changed since the last commit: rk_pend and rk_devstate to write */
    bool unsaved;         /* more than RK_SAVE_PEND intervals at the last commit: not in rk_pend */
    struct rk_ref *ops;   /* RK_DOPS (key: the op id), or NULL until its first entry */
    struct rk_refs dstep; /* the rk_devsteps deltas of the last steps seen here */
    /* the step of its last entry in this transaction (epoch): its rk_devsteps and rk_steps
     * deltas' indexes + 1, found without a look-up while the step goes on */
    uint32_t cur_epoch, cur_ds1, cur_s1;
    uint64_t cur_step;
};

/* Intervals of one device saved at a commit at most: past that (a comm entry spanning many
 * others, far apart in time), rewriting them at each commit would cost more than the entries;
 * info.ranks_state says 2 while any is unsaved, and a reopen marks the aggregates inexact. */
#define RK_SAVE_PEND 4096

/*
 * The deltas' indexes: open addressing with linear probing, keys of three
 * integers stored in the slots (no allocation per key), emptied at each commit.
 */
struct rk_mslot {
    uint64_t a, b, c;
    uint32_t v1; /* value + 1; 0 empty */
};

struct rk_map {
    struct rk_mslot *s;
    size_t cap, len; /* cap 0 or a power of two */
};

/* A table's upsert of RK_BATCH rows and of one (rk_up_prepare), and the rows buffered. */
#define RK_BATCH   32
#define RK_MAXCOLS 14

struct rk_up {
    sqlite3_stmt *one, *many; /* many prepared when first needed (from many_sql) */
    sqlite3 *db;
    char *many_sql;
    int ncols, n;
    int64_t v[RK_BATCH * RK_MAXCOLS];
};

struct ranks {
    sqlite3 *db;
    uint8_t *cat;     /* by op id: enum proto_cat, 0xff unknown */
    uint8_t *coll_ok; /* by op id: a collective (comm and not point-to-point) */
    size_t n_cat;
    struct rk_proc *procs;
    size_t n_procs;
    uint64_t world, nprocs_seen;
    uint64_t late, late_written, opened;
    bool inexact, inexact_written;

    struct rk_map ops_idx, steps_idx, dsteps_idx, coll_idx, occ_idx, dev_idx;
    uint32_t epoch;       /* of the deltas, for struct rk_ref; never 0 */
    struct rk_pop *collc; /* RK_POPS: the rk_coll deltas of each op's last steps */
    struct rk_opsum *ops;
    size_t n_ops, cap_ops;
    struct rk_devstep *dsteps;
    size_t n_dsteps, cap_dsteps;
    struct rk_stepsum *steps;
    size_t n_steps, cap_steps;
    struct rk_collsum *coll;
    size_t n_coll, cap_coll;
    struct rk_occ *occ;
    size_t n_occ, cap_occ;
    struct rk_dev *devs;
    size_t n_devs, cap_devs;
    struct rk_inst *inst;
    size_t n_inst, cap_inst;
    struct rk_abuf *apool; /* arrival arrays of closed instances, for reuse (RK_APOOL) */
    size_t n_apool, cap_apool;
    uint32_t *islot;  /* RK_ISLOTS */
    struct rk_iq *iq; /* RK_IQUEUE, a ring */
    size_t iq_head, iq_len;

    struct rk_up up_ops, up_dsteps, up_steps, up_coll, up_collr;
    struct rk_kv *kv; /* rk_sort_keyed's keys: 2 x cap_kv */
    size_t cap_kv;
    void *sorted; /* and its rows in order, cap_sorted bytes */
    size_t cap_sorted;

    /* the state saved at each commit (rk_open, rk_occ, rk_devstate, rk_pend) */
    struct rk_ikey *gone; /* instances closed since the last commit with arrivals in rk_open */
    size_t n_gone, cap_gone;
    struct rk_orow *orow; /* the rk_open rows to write, sorted */
    size_t n_orow, cap_orow;
    bool resync; /* a rollback: rewrite it all */
    uint64_t opened_written, iq_first_written;
    int64_t state_written; /* info.ranks_state: 1 saved, 2 some intervals unsaved, 0 absent */
    struct rk_up ins_open, del_open, up_occ, ins_pend;
    sqlite3_stmt *del_pend, *up_devstate, *clear_open;
};

/* Grows *arr (of *cap elements of size sz) to hold n + 1. 0 or -ENOMEM. */
static int rk_grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    size_t c;
    void *p;

    if (n < *cap)
        return 0;
    c = *cap ? *cap * 2 : 64;
    if ((p = realloc(*arr, c * sz)) == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* "col = col + ?N" saturating at INT64_MAX, as in agg.c */
#define SAT_SET(col, p)                                                                            \
    col " = CASE WHEN " col " > 9223372036854775807 - " p " THEN 9223372036854775807"              \
        " ELSE " col " + " p " END"

/*
 * The upserts: what follows "INSERT INTO table VALUES (...), ..." (rk_up),
 * one SQL clause a line. The new values are excluded.*, so that one
 * statement writes up to RK_BATCH rows.
 */
#define X(col) "excluded." col
/* clang-format off */
static const char rk_up_ops_sql[] =
    " ON CONFLICT(process_id, device_id, op_id) DO UPDATE SET "
    SAT_SET("calls", X("calls")) ", "
    SAT_SET("total_ns", X("total_ns")) ", "
    SAT_SET("elements", X("elements")) ", "
    SAT_SET("exposed_ns", X("exposed_ns")) ", "
    "begin_ns = min(begin_ns, " X("begin_ns") "), end_ns = max(end_ns, " X("end_ns") ")";

static const char rk_up_dsteps_sql[] =
    " ON CONFLICT(step, process_id, device_id) DO UPDATE SET "
    "begin_ns = min(begin_ns, " X("begin_ns") "), end_ns = max(end_ns, " X("end_ns") "), "
    SAT_SET("compute_ns", X("compute_ns")) ", "
    SAT_SET("comm_ns", X("comm_ns")) ", "
    SAT_SET("memory_ns", X("memory_ns")) ", "
    SAT_SET("wait_ns", X("wait_ns")) ", "
    SAT_SET("other_ns", X("other_ns")) ", "
    SAT_SET("exposed_ns", X("exposed_ns")) ", "
    "first_row = min(first_row, " X("first_row") "), last_row = max(last_row, " X("last_row") ")";

static const char rk_up_steps_sql[] =
    " ON CONFLICT(step, process_id) DO UPDATE SET "
    "begin_ns = min(begin_ns, " X("begin_ns") "), end_ns = max(end_ns, " X("end_ns") "), "
    SAT_SET("compute_ns", X("compute_ns")) ", "
    SAT_SET("comm_ns", X("comm_ns")) ", "
    SAT_SET("memory_ns", X("memory_ns")) ", "
    SAT_SET("wait_ns", X("wait_ns")) ", "
    SAT_SET("other_ns", X("other_ns")) ", "
    SAT_SET("exposed_ns", X("exposed_ns")) ", "
    SAT_SET("coll", X("coll")) ", "
    SAT_SET("waited_ns", X("waited_ns")) ", "
    SAT_SET("last_count", X("last_count")) ", "
    SAT_SET("caused_ns", X("caused_ns"));

static const char rk_up_coll_sql[] =
    " ON CONFLICT(op_id, step) DO UPDATE SET "
    SAT_SET("instances", X("instances")) ", "
    SAT_SET("partial", X("partial")) ", "
    SAT_SET("skew_ns", X("skew_ns")) ", "
    "skew_max_ns = max(skew_max_ns, " X("skew_max_ns") ")";

static const char rk_up_collr_sql[] =
    " ON CONFLICT(step, op_id, process_id) DO UPDATE SET "
    SAT_SET("instances", X("instances")) ", "
    SAT_SET("waited_ns", X("waited_ns")) ", "
    SAT_SET("last_count", X("last_count"));
/* clang-format on */
#undef X

/*
 * Writing the deltas and the state: rows are buffered and written RK_BATCH
 * to a statement (the rest one by one), which saves SQLite's cost per
 * statement; the deltas are sorted by key first, so that consecutive rows
 * land on the same pages. A statement is head, the rows' "(?, ...)" list,
 * then tail.
 */
static int rk_up_prepare_rows(sqlite3 *db, struct rk_up *u, int ncols, const char *head,
                              const char *row, const char *sep, const char *tail)
{
    size_t cap = strlen(head) + RK_BATCH * (strlen(row) + strlen(sep)) + strlen(tail) + 1;
    char *sql = malloc(cap);
    int rc;

    if (sql == NULL)
        return SQLITE_NOMEM;
    u->db = db;
    u->ncols = ncols;
    u->many_sql = sql;
    strcpy(sql, head);
    for (int i = 0; i < RK_BATCH; i++) {
        if (i > 0)
            strcat(sql, sep);
        strcat(sql, row);
    }
    strcat(sql, tail);
    /* the same with one row: head, row, tail */
    sql = malloc(strlen(head) + strlen(row) + strlen(tail) + 1);
    if (sql == NULL)
        return SQLITE_NOMEM;
    strcat(strcat(strcpy(sql, head), row), tail);
    rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &u->one, NULL);
    free(sql);
    return rc;
}

/* Rows of ncols values: "head (?, ...), ... tail". */
static int rk_up_prepare(sqlite3 *db, struct rk_up *u, const char *head, int ncols,
                         const char *tail)
{
    char row[2 + 3 * RK_MAXCOLS] = "(";

    for (int k = 0; k < ncols; k++)
        strcat(row, k + 1 < ncols ? "?, " : "?)");
    return rk_up_prepare_rows(db, u, ncols, head, row, ", ", tail);
}

static void rk_up_free(struct rk_up *u)
{
    sqlite3_finalize(u->one);
    sqlite3_finalize(u->many);
    free(u->many_sql);
}

/* One statement with the values v[0..n). */
static int rk_run(sqlite3_stmt *st, const int64_t *v, int n)
{
    int rc;

    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, i + 1, v[i]);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

/* Buffers one row of u->ncols values; writes RK_BATCH of them at once. */
static int rk_up_add(struct rk_up *u, const int64_t *v)
{
    memcpy(u->v + (size_t)u->n * (size_t)u->ncols, v, (size_t)u->ncols * sizeof(*v));
    if (++u->n < RK_BATCH)
        return 0;
    u->n = 0;
    if (u->many == NULL) {
        int rc =
            sqlite3_prepare_v3(u->db, u->many_sql, -1, SQLITE_PREPARE_PERSISTENT, &u->many, NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return rk_run(u->many, u->v, RK_BATCH * u->ncols);
}

/* Writes the rows still buffered. */
static int rk_up_end(struct rk_up *u)
{
    int n = u->n, rc = 0;

    u->n = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = rk_run(u->one, u->v + (size_t)i * (size_t)u->ncols, u->ncols);
    return rc;
}

/* qsort, which must not be given NULL (an empty array never allocated) */
static void rk_sort(void *a, size_t n, size_t sz, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(a, n, sz, cmp);
}

static int rk_cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int rk_cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

static int rk_ops_cmp(const void *x, const void *y)
{
    const struct rk_opsum *a = x, *b = y;
    int c = rk_cmp_i64(a->process_id, b->process_id);

    if (c == 0)
        c = rk_cmp_u64(a->device_id, b->device_id);
    return c != 0 ? c : rk_cmp_u64(a->op_id, b->op_id);
}

static int rk_dsteps_cmp(const void *x, const void *y)
{
    const struct rk_devstep *a = x, *b = y;
    int c = rk_cmp_u64(a->step, b->step);

    if (c == 0)
        c = rk_cmp_i64(a->process_id, b->process_id);
    return c != 0 ? c : rk_cmp_u64(a->device_id, b->device_id);
}

static int rk_steps_cmp(const void *x, const void *y)
{
    const struct rk_stepsum *a = x, *b = y;
    int c = rk_cmp_u64(a->step, b->step);

    return c != 0 ? c : rk_cmp_i64(a->process_id, b->process_id);
}

static int rk_orow_cmp(const void *x, const void *y)
{
    const struct rk_orow *a = x, *b = y;
    int c = 0;

    for (int i = 0; i < 5 && c == 0; i++)
        c = rk_cmp_i64(a->key[i], b->key[i]);
    return c;
}

/* rk_coll's (process -1) first, each table's rows in its key's order: (op, step) for rk_coll,
 * (step, op, process) for rk_coll_ranks */
static int rk_coll_cmp(const void *x, const void *y)
{
    const struct rk_collsum *a = x, *b = y;
    int c = rk_cmp_i64(b->process_id < 0, a->process_id < 0);

    if (c == 0 && a->process_id >= 0)
        c = rk_cmp_u64(a->step, b->step);
    if (c == 0)
        c = rk_cmp_u64(a->op_id, b->op_id);
    if (c == 0)
        c = rk_cmp_i64(a->process_id, b->process_id);
    return c != 0 ? c : rk_cmp_u64(a->step, b->step);
}

/*
 * The deltas in their table's key order, sorted by a radix sort when every
 * key packs into 64 bits in that order (key() says false when one does
 * not: qsort with cmp then): a few passes over the rows, where qsort
 * calls cmp ~n log n times. The keys are unique (the maps' keys).
 */
struct rk_kv {
    uint64_t k;
    size_t i;
};

/* p's bits at shift, when p < 2^bits; false otherwise */
static bool rk_pack(uint64_t *k, uint64_t p, int bits, int shift)
{
    if (p >> bits != 0)
        return false;
    *k |= p << shift;
    return true;
}

static bool rk_ops_key(const void *x, uint64_t *k)
{
    const struct rk_opsum *o = x;

    *k = 0; /* process ids are < 2^25 (rk_proc) */
    return rk_pack(k, (uint64_t)o->process_id, 25, 39) && rk_pack(k, o->device_id, 19, 20) &&
           rk_pack(k, o->op_id, 20, 0);
}

static bool rk_dsteps_key(const void *x, uint64_t *k)
{
    const struct rk_devstep *d = x;

    *k = 0;
    return rk_pack(k, d->step, 27, 37) && rk_pack(k, (uint64_t)d->process_id, 25, 12) &&
           rk_pack(k, d->device_id, 12, 0);
}

static bool rk_steps_key(const void *x, uint64_t *k)
{
    const struct rk_stepsum *s = x;

    *k = 0;
    return rk_pack(k, s->step, 39, 25) && rk_pack(k, (uint64_t)s->process_id, 25, 0);
}

/* rk_coll's rows (process -1), (op, step), before rk_coll_ranks' (bit 63), (step, op, process) */
static bool rk_coll_key(const void *x, uint64_t *k)
{
    const struct rk_collsum *c = x;

    *k = 0;
    if (c->process_id < 0)
        return rk_pack(k, c->op_id, 16, 47) && rk_pack(k, c->step, 47, 0);
    *k = 1ull << 63;
    return rk_pack(k, c->step, 22, 41) && rk_pack(k, c->op_id, 16, 25) &&
           rk_pack(k, (uint64_t)c->process_id, 25, 0);
}

static void rk_sort_keyed(struct ranks *r, void *a, size_t n, size_t sz,
                          bool (*key)(const void *, uint64_t *),
                          int (*cmp)(const void *, const void *))
{
    struct rk_kv *kv, *tmp;
    uint64_t any = 0, all = UINT64_MAX;
    char *out;

    if (n < 2)
        return;
    if (n > r->cap_kv) {
        void *p = realloc(r->kv, 2 * n * sizeof(*r->kv));
        if (p == NULL)
            goto fallback;
        r->kv = p;
        r->cap_kv = n;
    }
    if (n * sz > r->cap_sorted) {
        void *p = realloc(r->sorted, n * sz);
        if (p == NULL)
            goto fallback;
        r->sorted = p;
        r->cap_sorted = n * sz;
    }
    kv = r->kv;
    tmp = r->kv + n;
    for (size_t i = 0; i < n; i++) {
        if (!key((const char *)a + i * sz, &kv[i].k))
            goto fallback;
        kv[i].i = i;
        any |= kv[i].k;
        all &= kv[i].k;
    }
    /* least significant byte first, skipping the bytes every key has the same */
    for (int shift = 0; shift < 64; shift += 8) {
        size_t pos[256] = {0}, sum = 0;
        if (((any ^ all) >> shift & 0xff) == 0)
            continue;
        for (size_t i = 0; i < n; i++)
            pos[kv[i].k >> shift & 0xff]++;
        for (int d = 0; d < 256; d++) {
            size_t c = pos[d];
            pos[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[pos[kv[i].k >> shift & 0xff]++] = kv[i];
        struct rk_kv *t = kv;
        kv = tmp;
        tmp = t;
    }
    out = r->sorted;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * sz, (const char *)a + kv[i].i * sz, sz);
    memcpy(a, out, n * sz);
    return;
fallback:
    qsort(a, n, sz, cmp);
}

/* ---- the deltas' indexes ------------------------------------------------- */

static size_t rk_mhome(const struct rk_map *m, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full ^ c * 0x165667b19e3779f9ull;

    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return (size_t)h & (m->cap - 1);
}

/* The value of (a, b, c), or -1 when absent. */
static ssize_t rk_map_get(const struct rk_map *m, uint64_t a, uint64_t b, uint64_t c)
{
    if (m->cap == 0)
        return -1;
    for (size_t i = rk_mhome(m, a, b, c);; i = (i + 1) & (m->cap - 1)) {
        const struct rk_mslot *sl = &m->s[i];
        if (sl->v1 == 0)
            return -1;
        if (sl->a == a && sl->b == b && sl->c == c)
            return (ssize_t)sl->v1 - 1;
    }
}

static void rk_map_place(struct rk_map *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v1)
{
    size_t i = rk_mhome(m, a, b, c);

    while (m->s[i].v1 != 0)
        i = (i + 1) & (m->cap - 1);
    m->s[i] = (struct rk_mslot){a, b, c, v1};
    m->len++;
}

/* Adds (a, b, c) -> v, absent. 0 or -ENOMEM. */
static int rk_map_put(struct rk_map *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v)
{
    if ((m->len + 1) * 2 > m->cap) {
        struct rk_map g = {calloc(m->cap ? m->cap * 2 : 64, sizeof(*m->s)),
                           m->cap ? m->cap * 2 : 64, 0};
        if (g.s == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].v1 != 0)
                rk_map_place(&g, m->s[i].a, m->s[i].b, m->s[i].c, m->s[i].v1);
        free(m->s);
        *m = g;
    }
    rk_map_place(m, a, b, c, v + 1);
    return 0;
}

static void rk_map_clear(struct rk_map *m)
{
    if (m->len > 0)
        memset(m->s, 0, m->cap * sizeof(*m->s));
    m->len = 0;
}

static void rk_map_free(struct rk_map *m)
{
    free(m->s);
    *m = (struct rk_map){NULL, 0, 0};
}

/* A cache entry, valid when it was made in this transaction (and for key). */
static bool rk_ref_ok(const struct ranks *r, const struct rk_ref *c, uint64_t key)
{
    return c->epoch == r->epoch && c->i1 != 0 && c->key == key;
}

static void rk_reset_deltas(struct ranks *r)
{
    rk_map_clear(&r->ops_idx);
    rk_map_clear(&r->steps_idx);
    rk_map_clear(&r->dsteps_idx);
    rk_map_clear(&r->coll_idx);
    r->n_ops = r->n_steps = r->n_dsteps = r->n_coll = 0;
    /* rows a failed flush left buffered */
    r->up_ops.n = r->up_dsteps.n = r->up_steps.n = r->up_coll.n = r->up_collr.n = 0;
    r->ins_open.n = r->del_open.n = r->up_occ.n = r->ins_pend.n = 0;
    if (++r->epoch == 0) { /* once in 2^32 commits: every cache entry might look valid */
        for (size_t i = 0; i < r->n_procs; i++) {
            memset(&r->procs[i].step, 0, sizeof(r->procs[i].step));
            for (size_t k = 0; r->procs[i].pop != NULL && k < RK_POPS; k++)
                memset(&r->procs[i].pop[k].coll, 0, sizeof(r->procs[i].pop[k].coll));
        }
        for (size_t i = 0; i < r->n_devs; i++) {
            memset(&r->devs[i].dstep, 0, sizeof(r->devs[i].dstep));
            r->devs[i].cur_epoch = 0;
            for (size_t k = 0; r->devs[i].ops != NULL && k < RK_DOPS; k++)
                r->devs[i].ops[k].epoch = 0;
        }
        for (size_t k = 0; r->collc != NULL && k < RK_POPS; k++)
            memset(&r->collc[k].coll, 0, sizeof(r->collc[k].coll));
        r->epoch = 1;
    }
}

static bool rk_has_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    bool found = false;

    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1,
                           &st, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

/* True when table has a column named col. */
static bool rk_has_column(sqlite3 *db, const char *table, const char *col)
{
    sqlite3_stmt *st;
    bool found = false;

    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

static int rk_write_ops(struct ranks *r);
static int rk_info(struct ranks *r, const char *key, int64_t v);
static int64_t rk_info_get(struct ranks *r, const char *key, int64_t dflt);
static struct rk_opsum *rk_opsum(struct ranks *r, int64_t process_id, uint32_t device_id,
                                 uint32_t op_id);
static struct rk_devstep *rk_devstep(struct ranks *r, int64_t process_id, uint64_t step,
                                     uint32_t device_id);
static void rk_reset_deltas(struct ranks *r);

/*
 * Folds the rows of an rk_ops keyed by step (files written before rk_devsteps,
 * renamed rk_ops_v1 by rk_schema) into rk_ops and rk_devsteps. The rowids of
 * those steps' entries are not known: their bounds are all rowids.
 */
static int rk_migrate(struct ranks *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db,
                                "SELECT v.process_id, v.step, v.device_id, v.op_id, v.calls,"
                                " v.total_ns, v.elements, v.exposed_ns, v.begin_ns, v.end_ns,"
                                " o.category FROM rk_ops_v1 v LEFT JOIN ops o ON o.id = v.op_id",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t pid = sqlite3_column_int64(st, 0);
        uint64_t step = (uint64_t)sqlite3_column_int64(st, 1);
        uint32_t dev = (uint32_t)sqlite3_column_int64(st, 2),
                 op = (uint32_t)sqlite3_column_int64(st, 3);
        uint64_t calls = (uint64_t)sqlite3_column_int64(st, 4);
        uint64_t total = (uint64_t)sqlite3_column_int64(st, 5);
        uint64_t exposed = (uint64_t)sqlite3_column_int64(st, 7);
        uint64_t begin = (uint64_t)sqlite3_column_int64(st, 8);
        uint64_t end = (uint64_t)sqlite3_column_int64(st, 9);
        enum proto_cat cat = proto_cat_code((const char *)sqlite3_column_text(st, 10));
        struct rk_opsum *o = rk_opsum(r, pid, dev, op);
        struct rk_devstep *d = rk_devstep(r, pid, step, dev);

        if (o == NULL || d == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        o->calls = rk_sat(o->calls, calls);
        o->total = rk_sat(o->total, total);
        o->elements = rk_sat(o->elements, (uint64_t)sqlite3_column_int64(st, 6));
        o->exposed = rk_sat(o->exposed, exposed);
        d->cat[cat] = rk_sat(d->cat[cat], total);
        d->exposed = rk_sat(d->exposed, exposed);
        d->first_row = 0;
        d->last_row = INT64_MAX;
        if (calls == 0)
            continue; /* only exposure: no begin or end */
        o->begin = begin < o->begin ? begin : o->begin;
        o->end = end > o->end ? end : o->end;
        d->begin = begin < d->begin ? begin : d->begin;
        d->end = end > d->end ? end : d->end;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    rc = rk_write_ops(r);
    rk_reset_deltas(r);
    return rc;
}

/*
 * The tables keyed by step first since info.ranks_layout 2 (schema/ranks.sql), and their
 * keys. A file written before has them keyed (process_id, step[, device_id]) and
 * (op_id, process_id, step): rk_schema renames those T_v1 and rk_schema_end copies their
 * rows into the new tables, in the new key's order.
 */
static const struct {
    const char *table, *key;
} rk_rekeyed[] = {
    {"rk_devsteps", "step, process_id, device_id"},
    {"rk_steps", "step, process_id"},
    {"rk_coll_ranks", "step, op_id, process_id"},
};

#define RK_NREKEYED (sizeof(rk_rekeyed) / sizeof(rk_rekeyed[0]))
#define RK_LAYOUT   2 /* info.ranks_layout */

/* True when table exists and its key does not start with the step. */
static bool rk_old_key(sqlite3 *db, const char *table)
{
    sqlite3_stmt *st;
    bool old = false;

    if (sqlite3_prepare_v2(db, "SELECT pk FROM pragma_table_info(?1) WHERE name = 'step'", -1, &st,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    old = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) != 1;
    sqlite3_finalize(st);
    return old;
}

/* sqlite3_exec of fmt with up to three strings. */
static int rk_execf(sqlite3 *db, const char *fmt, const char *a, const char *b, const char *c)
{
    char *sql = sqlite3_mprintf(fmt, a, b, c);
    int rc;

    if (sql == NULL)
        return SQLITE_NOMEM;
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_free(sql);
    return rc;
}

/*
 * Creates the tables if needed. Inside a savepoint (*migrating) when the file
 * needs more: an rk_ops keyed by step is renamed rk_ops_v1 (*legacy: rk_migrate
 * folds it once the statements are prepared), and the tables of rk_rekeyed
 * keyed the old way are renamed T_v1 (rk_schema_end copies them).
 */
static int rk_schema(struct ranks *r, bool *legacy, bool *migrating, unsigned *rekey)
{
    int rc;

    *legacy = rk_has_column(r->db, "rk_ops", "step");
    *rekey = 0;
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if (rk_old_key(r->db, rk_rekeyed[i].table))
            *rekey |= 1u << i;
    if (!*legacy && *rekey == 0) {
        *migrating = false;
    } else {
        if ((rc = sqlite3_exec(r->db, "SAVEPOINT rk_migrate", NULL, NULL, NULL)) != SQLITE_OK)
            return rc;
        *migrating = true;
    }
    if (*legacy && (rc = sqlite3_exec(r->db, "ALTER TABLE rk_ops RENAME TO rk_ops_v1", NULL, NULL,
                                      NULL)) != SQLITE_OK)
        return rc;
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((*rekey & 1u << i) != 0 &&
            (rc = rk_execf(r->db, "ALTER TABLE %s RENAME TO %s_v1", rk_rekeyed[i].table,
                           rk_rekeyed[i].table, "")) != SQLITE_OK)
            return rc;
    if ((rc = sqlite3_exec(r->db, schema_ranks_sql, NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    /* the columns are the same, in the same order: only the key moved */
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((*rekey & 1u << i) != 0 &&
            (rc = rk_execf(r->db, "INSERT INTO %s SELECT * FROM %s_v1 ORDER BY %s",
                           rk_rekeyed[i].table, rk_rekeyed[i].table, rk_rekeyed[i].key)) !=
                SQLITE_OK)
            return rc;
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((*rekey & 1u << i) != 0 &&
            (rc = rk_execf(r->db, "DROP TABLE %s_v1", rk_rekeyed[i].table, "", "")) != SQLITE_OK)
            return rc;
    /* an rk_open saved before ext comm_size: its instances expect the world, as they did */
    if (!rk_has_column(r->db, "rk_open", "comm_size") &&
        (rc = sqlite3_exec(r->db, "ALTER TABLE rk_open ADD COLUMN comm_size INTEGER", NULL, NULL,
                           NULL)) != SQLITE_OK)
        return rc;
    return SQLITE_OK;
}

/* Ends what rk_schema began: folds rk_ops_v1 and drops it, or rolls it all back. */
static int rk_schema_end(struct ranks *r, bool legacy, int rc)
{
    if (rc == 0 && (!legacy || (rc = rk_migrate(r)) == 0) &&
        (!legacy ||
         (rc = sqlite3_exec(r->db, "DROP TABLE rk_ops_v1", NULL, NULL, NULL)) == SQLITE_OK) &&
        (rc = sqlite3_exec(r->db, "RELEASE rk_migrate", NULL, NULL, NULL)) == SQLITE_OK)
        return 0;
    sqlite3_exec(r->db, "ROLLBACK TO rk_migrate; RELEASE rk_migrate", NULL, NULL, NULL);
    return rc != 0 ? rc : SQLITE_ERROR;
}

static int rk_prepare_state(struct ranks *r)
{
    int rc;

    if ((rc = rk_up_prepare(r->db, &r->ins_open, "INSERT OR REPLACE INTO rk_open VALUES", 12,
                            "")) != SQLITE_OK ||
        /* not (kind, k1, k2, k3) IN (VALUES ...): SQLite would scan the table */
        (rc = rk_up_prepare_rows(r->db, &r->del_open, 4, "DELETE FROM rk_open WHERE ",
                                 "(kind = ? AND k1 = ? AND k2 = ? AND k3 = ?)", " OR ", "")) !=
            SQLITE_OK ||
        (rc = rk_up_prepare(r->db, &r->up_occ, "INSERT OR REPLACE INTO rk_occ VALUES", 4, "")) !=
            SQLITE_OK ||
        (rc = rk_up_prepare(r->db, &r->ins_pend, "INSERT INTO rk_pend VALUES", 8, "")) !=
            SQLITE_OK ||
        (rc = sqlite3_prepare_v3(r->db,
                                 "DELETE FROM rk_pend WHERE process_id = ?1 AND device_id = ?2", -1,
                                 SQLITE_PREPARE_PERSISTENT, &r->del_pend, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v3(r->db, "DELETE FROM rk_open", -1, SQLITE_PREPARE_PERSISTENT,
                                 &r->clear_open, NULL)) != SQLITE_OK)
        return rc;
    return sqlite3_prepare_v3(r->db,
                              "INSERT OR REPLACE INTO rk_devstate VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                              -1, SQLITE_PREPARE_PERSISTENT, &r->up_devstate, NULL);
}

struct ranks *ranks_new(sqlite3 *db)
{
    struct ranks *r = calloc(1, sizeof(*r));
    bool legacy = false, migrating = false;
    unsigned rekey = 0;
    int rc = SQLITE_NOMEM;

    if (r == NULL)
        return NULL;
    r->db = db;
    r->epoch = 1;
    r->islot = calloc(RK_ISLOTS, sizeof(*r->islot));
    r->iq = calloc(RK_IQUEUE, sizeof(*r->iq));
    if (r->islot != NULL && r->iq != NULL &&
        (rc = rk_schema(r, &legacy, &migrating, &rekey)) == SQLITE_OK &&
        (rc = rk_up_prepare(db, &r->up_ops, "INSERT INTO rk_ops VALUES", 9, rk_up_ops_sql)) ==
            SQLITE_OK &&
        (rc = rk_up_prepare(db, &r->up_dsteps, "INSERT INTO rk_devsteps VALUES", 13,
                            rk_up_dsteps_sql)) == SQLITE_OK &&
        (rc = rk_up_prepare(db, &r->up_steps, "INSERT INTO rk_steps VALUES", 14,
                            rk_up_steps_sql)) == SQLITE_OK &&
        (rc = rk_up_prepare(db, &r->up_coll, "INSERT INTO rk_coll VALUES", 6, rk_up_coll_sql)) ==
            SQLITE_OK &&
        (rc = rk_up_prepare(db, &r->up_collr, "INSERT INTO rk_coll_ranks VALUES", 6,
                            rk_up_collr_sql)) == SQLITE_OK)
        rc = rk_prepare_state(r);
    if (rc == SQLITE_OK && rk_info_get(r, "ranks_layout", 0) != RK_LAYOUT)
        rc = rk_info(r, "ranks_layout", RK_LAYOUT);
    if (migrating)
        rc = rk_schema_end(r, legacy, rc);
    if (rc != SQLITE_OK) {
        ranks_free(r);
        return NULL;
    }
    return r;
}

void ranks_free(struct ranks *r)
{
    if (r == NULL)
        return;
    rk_up_free(&r->up_ops);
    rk_up_free(&r->up_dsteps);
    rk_up_free(&r->up_steps);
    rk_up_free(&r->up_coll);
    rk_up_free(&r->up_collr);
    rk_up_free(&r->ins_open);
    rk_up_free(&r->del_open);
    rk_up_free(&r->up_occ);
    rk_up_free(&r->ins_pend);
    sqlite3_finalize(r->del_pend);
    sqlite3_finalize(r->up_devstate);
    sqlite3_finalize(r->clear_open);
    free(r->gone);
    free(r->orow);
    free(r->kv);
    free(r->sorted);
    rk_map_free(&r->ops_idx);
    rk_map_free(&r->steps_idx);
    rk_map_free(&r->dsteps_idx);
    rk_map_free(&r->coll_idx);
    rk_map_free(&r->occ_idx);
    rk_map_free(&r->dev_idx);
    for (size_t i = 0; i < r->n_devs; i++) {
        free(r->devs[i].cu);
        free(r->devs[i].pc);
        free(r->devs[i].ops);
    }
    for (size_t i = 0; i < r->n_procs; i++)
        free(r->procs[i].pop);
    for (size_t i = 0; i < r->n_inst; i++)
        free(r->inst[i].a);
    for (size_t i = 0; i < r->n_apool; i++)
        free(r->apool[i].a);
    free(r->apool);
    free(r->collc);
    free(r->devs);
    free(r->inst);
    free(r->islot);
    free(r->iq);
    free(r->ops);
    free(r->dsteps);
    free(r->steps);
    free(r->coll);
    free(r->occ);
    free(r->cat);
    free(r->coll_ok);
    free(r->procs);
    free(r);
}

static int rk_info(struct ranks *r, const char *key, int64_t v)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db, "INSERT OR REPLACE INTO info VALUES (?, ?)", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int ranks_init_file_rc(struct ranks *r)
{
    int rc;

    r->inexact_written = false;
    if ((rc = rk_info(r, "ranks", 1)) != 0)
        return rc;
    r->state_written = 1;
    return rk_info(r, "ranks_state", 1);
}

/* ---- ops and processes --------------------------------------------------- */

/* True when word (lower case) occurs in name, compared ASCII lower-cased. */
static bool rk_has(const char *name, const char *word)
{
    for (const char *p = name; *p != '\0'; p++) {
        size_t i = 0;
        while (word[i] != '\0' && p[i] != '\0' && (p[i] | 0x20) == word[i])
            i++;
        if (word[i] == '\0')
            return true;
    }
    return false;
}

/*
 * Point-to-point by name: send or recv (isend, MPI_Irecv), but not NCCL's
 * SendRecv kernels, which is how NCCL runs all-to-all on every rank.
 */
static bool rk_is_p2p(const char *name)
{
    return (rk_has(name, "send") || rk_has(name, "recv")) && !rk_has(name, "sendrecv");
}

static int ranks_op_rc(struct ranks *r, uint32_t op_id, const char *name, const char *category)
{
    if (op_id >= r->n_cat) {
        size_t n = r->n_cat ? r->n_cat : 64;
        uint8_t *c, *k;
        while (n <= op_id)
            n *= 2;
        if ((c = realloc(r->cat, n)) == NULL)
            return SQLITE_NOMEM;
        r->cat = c;
        if ((k = realloc(r->coll_ok, n)) == NULL)
            return SQLITE_NOMEM;
        r->coll_ok = k;
        memset(r->cat + r->n_cat, PROTO_CAT_COMPUTE, n - r->n_cat);
        memset(r->coll_ok + r->n_cat, 0, n - r->n_cat);
        r->n_cat = n;
    }
    r->cat[op_id] = (uint8_t)proto_cat_code(category);
    r->coll_ok[op_id] = r->cat[op_id] == PROTO_CAT_COMM && !rk_is_p2p(name);
    return 0;
}

static struct rk_proc *rk_proc(struct ranks *r, int64_t process_id)
{
    size_t id = (size_t)process_id;

    if (process_id < 0 || process_id > (1 << 24))
        return NULL;
    if (id >= r->n_procs) {
        size_t n = r->n_procs ? r->n_procs : 16;
        struct rk_proc *p;
        while (n <= id)
            n *= 2;
        if ((p = realloc(r->procs, n * sizeof(*p))) == NULL)
            return NULL;
        memset(p + r->n_procs, 0, (n - r->n_procs) * sizeof(*p));
        r->procs = p;
        r->n_procs = n;
    }
    if (!r->procs[id].seen) {
        r->procs[id].seen = true;
        r->nprocs_seen++;
    }
    return &r->procs[id];
}

static int ranks_process_rc(struct ranks *r, int64_t process_id, int64_t world)
{
    if (rk_proc(r, process_id) == NULL)
        return SQLITE_NOMEM;
    if (world > 0 && (uint64_t)world > r->world)
        r->world = (uint64_t)world;
    return 0;
}

/* FNV-1a, never 0 (0 means "no group"). */
static uint64_t rk_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ? h : 1;
}

static int ranks_meta_rc(struct ranks *r, int64_t process_id, const char *key, const char *sval,
                         int64_t ival, bool is_str)
{
    struct rk_proc *p;

    if (strcmp(key, "process_group") != 0 && strcmp(key, "import.file") != 0)
        return 0;
    if ((p = rk_proc(r, process_id)) == NULL)
        return SQLITE_NOMEM;
    if (strcmp(key, "import.file") == 0) {
        p->replay = true;
        return 0;
    }
    p->group = is_str ? rk_hash(sval, strlen(sval)) : rk_hash(&ival, sizeof(ival));
    return 0;
}

/* ---- deltas -------------------------------------------------------------- */

/* The index of (a, b, c) in idx, appending a zeroed element to *arr when new; -1 on ENOMEM. */
static ssize_t rk_slot(struct rk_map *idx, uint64_t a, uint64_t b, uint64_t c, void **arr,
                       size_t *n, size_t *cap, size_t sz, bool *fresh)
{
    ssize_t i = rk_map_get(idx, a, b, c);

    *fresh = false;
    if (i >= 0)
        return i;
    *fresh = true;
    if (*n >= UINT32_MAX || rk_grow(arr, cap, *n, sz) < 0 ||
        rk_map_put(idx, a, b, c, (uint32_t)*n) < 0)
        return -1;
    memset((char *)*arr + *n * sz, 0, sz);
    return (ssize_t)(*n)++;
}

static struct rk_stepsum *rk_step(struct ranks *r, int64_t process_id, uint64_t step)
{
    bool fresh;
    ssize_t i = rk_slot(&r->steps_idx, (uint64_t)process_id, step, 0, (void **)&r->steps,
                        &r->n_steps, &r->cap_steps, sizeof(*r->steps), &fresh);
    struct rk_stepsum *s;

    if (i < 0)
        return NULL;
    s = &r->steps[i];
    if (fresh) {
        s->process_id = process_id;
        s->step = step;
        s->begin = UINT64_MAX;
    }
    return s;
}

static struct rk_opsum *rk_opsum(struct ranks *r, int64_t process_id, uint32_t device_id,
                                 uint32_t op_id)
{
    bool fresh;
    ssize_t i = rk_slot(&r->ops_idx, (uint64_t)process_id, device_id, op_id, (void **)&r->ops,
                        &r->n_ops, &r->cap_ops, sizeof(*r->ops), &fresh);
    struct rk_opsum *o;

    if (i < 0)
        return NULL;
    o = &r->ops[i];
    if (fresh) {
        o->process_id = process_id;
        o->device_id = device_id;
        o->op_id = op_id;
        o->begin = UINT64_MAX;
    }
    return o;
}

static struct rk_devstep *rk_devstep(struct ranks *r, int64_t process_id, uint64_t step,
                                     uint32_t device_id)
{
    bool fresh;
    ssize_t i = rk_slot(&r->dsteps_idx, (uint64_t)process_id, step, device_id, (void **)&r->dsteps,
                        &r->n_dsteps, &r->cap_dsteps, sizeof(*r->dsteps), &fresh);
    struct rk_devstep *d;

    if (i < 0)
        return NULL;
    d = &r->dsteps[i];
    if (fresh) {
        d->process_id = process_id;
        d->step = step;
        d->device_id = device_id;
        d->begin = UINT64_MAX;
        d->first_row = INT64_MAX;
        d->last_row = -1;
    }
    return d;
}

static struct rk_collsum *rk_collsum(struct ranks *r, uint32_t op_id, int64_t process_id,
                                     uint64_t step)
{
    bool fresh;
    ssize_t i = rk_slot(&r->coll_idx, op_id, (uint64_t)process_id, step, (void **)&r->coll,
                        &r->n_coll, &r->cap_coll, sizeof(*r->coll), &fresh);
    struct rk_collsum *c;

    if (i < 0)
        return NULL;
    c = &r->coll[i];
    c->op_id = op_id;
    c->process_id = process_id;
    c->step = step;
    return c;
}

static struct rk_dev *rk_dev(struct ranks *r, int64_t process_id, uint32_t device_id)
{
    bool fresh;
    ssize_t i = rk_slot(&r->dev_idx, (uint64_t)process_id, device_id, 0, (void **)&r->devs,
                        &r->n_devs, &r->cap_devs, sizeof(*r->devs), &fresh);

    if (i < 0)
        return NULL;
    r->devs[i].process_id = process_id;
    r->devs[i].device_id = device_id;
    return &r->devs[i];
}

/*
 * The cached look-ups of the entries' path. Process, device and op ids are
 * dense small ids and a process's steps go up: the deltas of its last step
 * and of each (device, op) are found by indexing, the maps only when a step
 * begins or a commit reset the deltas.
 */

/* The known process of id, or NULL (not rk_proc(): that would count it as seen). */
static struct rk_proc *rk_proc_known(struct ranks *r, int64_t process_id)
{
    return process_id >= 0 && (uint64_t)process_id < r->n_procs ? &r->procs[process_id] : NULL;
}

/* rk_step_c's look-up when the cache has not the step (apart: the hit is inlined). */
static __attribute__((noinline)) struct rk_stepsum *rk_step_miss(struct ranks *r,
                                                                 int64_t process_id, uint64_t step)
{
    struct rk_proc *p = rk_proc_known(r, process_id);
    struct rk_stepsum *s;
    struct rk_ref *c = p != NULL ? &p->step.w[step % RK_WAYS] : NULL;

    if ((s = rk_step(r, process_id, step)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(s - r->steps) + 1, step};
    return s;
}

static inline struct rk_stepsum *rk_step_c(struct ranks *r, int64_t process_id, uint64_t step)
{
    const struct rk_proc *p = rk_proc_known(r, process_id);
    const struct rk_ref *c = p != NULL ? &p->step.w[step % RK_WAYS] : NULL;

    if (c != NULL && rk_ref_ok(r, c, step))
        return &r->steps[c->i1 - 1];
    return rk_step_miss(r, process_id, step);
}

static __attribute__((noinline)) struct rk_devstep *rk_devstep_miss(struct ranks *r,
                                                                    struct rk_dev *d, uint64_t step)
{
    struct rk_ref *c = &d->dstep.w[step % RK_WAYS];
    struct rk_devstep *ds;

    if ((ds = rk_devstep(r, d->process_id, step, d->device_id)) != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(ds - r->dsteps) + 1, step};
    return ds;
}

static inline struct rk_devstep *rk_devstep_c(struct ranks *r, struct rk_dev *d, uint64_t step)
{
    const struct rk_ref *c = &d->dstep.w[step % RK_WAYS];

    if (rk_ref_ok(r, c, step))
        return &r->dsteps[c->i1 - 1];
    return rk_devstep_miss(r, d, step);
}

/* rk_opsum_c's look-up when the cache has not the op (apart: the hit is inlined). */
static __attribute__((noinline)) struct rk_opsum *rk_opsum_miss(struct ranks *r, struct rk_dev *d,
                                                                uint32_t op_id)
{
    struct rk_ref *c;
    struct rk_opsum *o;

    if (d->ops == NULL)
        d->ops = calloc(RK_DOPS, sizeof(*d->ops));
    c = d->ops != NULL ? &d->ops[op_id % RK_DOPS] : NULL;
    if ((o = rk_opsum(r, d->process_id, d->device_id, op_id)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(o - r->ops) + 1, op_id};
    return o;
}

static inline struct rk_opsum *rk_opsum_c(struct ranks *r, struct rk_dev *d, uint32_t op_id)
{
    const struct rk_ref *c = d->ops != NULL ? &d->ops[op_id % RK_DOPS] : NULL;

    if (c != NULL && rk_ref_ok(r, c, op_id))
        return &r->ops[c->i1 - 1];
    return rk_opsum_miss(r, d, op_id);
}

/* The slot of op in a table of RK_POPS (allocated on first use), taken over when another
 * op had it. NULL when out of memory. */
static struct rk_pop *rk_pop(struct rk_pop **tab, uint32_t op_id)
{
    struct rk_pop *p;

    if (*tab == NULL && (*tab = calloc(RK_POPS, sizeof(**tab))) == NULL)
        return NULL;
    p = &(*tab)[op_id % RK_POPS];
    if (p->op1 != op_id + 1) {
        memset(p, 0, sizeof(*p));
        p->op1 = op_id + 1;
    }
    return p;
}

/* rk_collsum_c's look-up when the cache has not the (op, step) (apart: the hit is inlined). */
static __attribute__((noinline)) struct rk_collsum *
rk_collsum_miss(struct ranks *r, uint32_t op_id, int64_t process_id, uint64_t step)
{
    struct rk_proc *p = process_id >= 0 ? rk_proc_known(r, process_id) : NULL;
    struct rk_pop *pop = p != NULL        ? rk_pop(&p->pop, op_id)
                         : process_id < 0 ? rk_pop(&r->collc, op_id)
                                          : NULL;
    struct rk_ref *c = pop != NULL ? &pop->coll.w[step % RK_WAYS] : NULL;
    struct rk_collsum *cs;

    if (c != NULL && rk_ref_ok(r, c, step))
        return &r->coll[c->i1 - 1];
    if ((cs = rk_collsum(r, op_id, process_id, step)) != NULL && c != NULL)
        *c = (struct rk_ref){r->epoch, (uint32_t)(cs - r->coll) + 1, step};
    return cs;
}

/* The rk_coll_ranks delta (process_id >= 0) or the rk_coll delta (-1) of op at step. */
static inline struct rk_collsum *rk_collsum_c(struct ranks *r, uint32_t op_id, int64_t process_id,
                                              uint64_t step)
{
    const struct rk_proc *p = process_id >= 0 ? rk_proc_known(r, process_id) : NULL;
    const struct rk_pop *tab = p != NULL ? p->pop : process_id < 0 ? r->collc : NULL;
    const struct rk_pop *pop = tab != NULL ? &tab[op_id % RK_POPS] : NULL;
    const struct rk_ref *c = pop != NULL ? &pop->coll.w[step % RK_WAYS] : NULL;

    if (pop != NULL && pop->op1 == op_id + 1 && rk_ref_ok(r, c, step))
        return &r->coll[c->i1 - 1];
    return rk_collsum_miss(r, op_id, process_id, step);
}

/* The (process, device) of an entry; p is its process. */
static struct rk_dev *rk_dev_c(struct ranks *r, struct rk_proc *p, int64_t process_id,
                               uint32_t device_id)
{
    struct rk_dev *d;

    if (p->dev1 != 0 && r->devs[p->dev1 - 1].device_id == device_id)
        return &r->devs[p->dev1 - 1];
    if ((d = rk_dev(r, process_id, device_id)) != NULL)
        p->dev1 = (uint32_t)(d - r->devs) + 1;
    return d;
}

/* ---- exposed communication ----------------------------------------------- */

static int rk_cu_insert(struct rk_dev *d, uint64_t b, uint64_t e);

/* Adds [b, e) to the merged, sorted compute intervals of d. */
static inline int rk_cu_add(struct rk_dev *d, uint64_t b, uint64_t e)
{
    struct rk_iv *last = d->n_cu > 0 ? &d->cu[d->n_cu - 1] : NULL;

    /* entries come nearly in time order: most start after the last interval, or in it */
    if (last != NULL && b >= last->b && b <= last->e) {
        if (e > last->e)
            last->e = e;
        return 0;
    }
    if (last != NULL && b > last->e && d->n_cu < d->cap_cu) {
        d->cu[d->n_cu++] = (struct rk_iv){b, e};
        return 0;
    }
    return rk_cu_insert(d, b, e);
}

/* rk_cu_add's other cases (apart: the common ones are inlined). */
static __attribute__((noinline)) int rk_cu_insert(struct rk_dev *d, uint64_t b, uint64_t e)
{
    size_t lo = 0, hi = d->n_cu, j;
    struct rk_iv *last = d->n_cu > 0 ? &d->cu[d->n_cu - 1] : NULL;

    if (last == NULL || b > last->e) {
        if (rk_grow((void **)&d->cu, &d->cap_cu, d->n_cu, sizeof(*d->cu)) < 0)
            return -ENOMEM;
        d->cu[d->n_cu++] = (struct rk_iv){b, e};
        return 0;
    }

    /* the first interval that ends at or after b */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->cu[mid].e < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    j = lo;
    while (j < d->n_cu && d->cu[j].b <= e) {
        if (d->cu[j].b < b)
            b = d->cu[j].b;
        if (d->cu[j].e > e)
            e = d->cu[j].e;
        j++;
    }
    if (j > lo) { /* [lo, j) merge into one */
        d->cu[lo] = (struct rk_iv){b, e};
        memmove(d->cu + lo + 1, d->cu + j, (d->n_cu - j) * sizeof(*d->cu));
        d->n_cu -= j - lo - 1;
        return 0;
    }
    if (rk_grow((void **)&d->cu, &d->cap_cu, d->n_cu, sizeof(*d->cu)) < 0)
        return -ENOMEM;
    memmove(d->cu + lo + 1, d->cu + lo, (d->n_cu - lo) * sizeof(*d->cu));
    d->cu[lo] = (struct rk_iv){b, e};
    d->n_cu++;
    return 0;
}

/* The length of [b, e) covered by the compute intervals of d. */
static uint64_t rk_cu_overlap(const struct rk_dev *d, uint64_t b, uint64_t e, size_t *hint)
{
    size_t lo = 0, hi = d->n_cu;
    uint64_t sum = 0;

    /* the comm entries come nearly in time order: the previous one's place, a few further
     * (found there, no search) */
    if (*hint <= d->n_cu && (*hint == 0 || d->cu[*hint - 1].e <= b)) {
        lo = *hint;
        for (int k = 0; k < 8 && lo < hi && d->cu[lo].e <= b; k++)
            lo++;
        if (lo == hi || d->cu[lo].e > b)
            hi = lo;
    }
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->cu[mid].e <= b)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t j = lo; j < d->n_cu && d->cu[j].b < e; j++) {
        uint64_t x = d->cu[j].b > b ? d->cu[j].b : b, y = d->cu[j].e < e ? d->cu[j].e : e;
        if (y > x)
            sum += y - x;
    }
    *hint = lo;
    return sum;
}

/* Counts the pending comm entries of d that end at or before w; drops what no longer matters. */
static int rk_dev_settle(struct ranks *r, struct rk_dev *d, uint64_t w)
{
    size_t keep = 0, drop = 0, hint = 0;
    uint64_t low = w;

    for (size_t i = 0; i < d->n_pc; i++) {
        struct rk_pend *p = &d->pc[i];
        if (p->e <= w) {
            uint64_t exp = (p->e - p->b) - rk_cu_overlap(d, p->b, p->e, &hint);
            struct rk_opsum *o = rk_opsum_c(r, d, p->op_id);
            struct rk_devstep *ds = rk_devstep_c(r, d, p->step);
            struct rk_stepsum *s = rk_step_c(r, d->process_id, p->step);
            if (o == NULL || ds == NULL || s == NULL)
                return SQLITE_NOMEM;
            o->exposed = rk_sat(o->exposed, exp);
            ds->exposed = rk_sat(ds->exposed, exp);
            s->exposed = rk_sat(s->exposed, exp);
            if (p->e > d->fin_end)
                d->fin_end = p->e;
        } else {
            if (p->b < low)
                low = p->b;
            d->pc[keep++] = *p;
        }
    }
    if (keep != d->n_pc)
        d->dirty = true;
    d->n_pc = keep;
    /* compute intervals that end before every pending and future comm entry (they are
     * disjoint and sorted: their ends go up, the last dropped ends latest) */
    for (size_t hi = d->n_cu; drop < hi;) {
        size_t mid = (drop + hi) / 2;
        if (d->cu[mid].e <= low)
            drop = mid + 1;
        else
            hi = mid;
    }
    if (drop > 0) {
        if (d->cu[drop - 1].e > d->drop_end)
            d->drop_end = d->cu[drop - 1].e;
        d->dirty = true;
        memmove(d->cu, d->cu + drop, (d->n_cu - drop) * sizeof(*d->cu));
        d->n_cu -= drop;
    }
    return 0;
}

/*
 * At a commit: counts the comm entries of d that no entry still to come should overlap.
 * Live producers send nearly in time order: what ends before the latest start, less twice
 * the most an entry of d has come late so far. An imported file comes in file order, not
 * time order: its entries are counted when the session ends (or at RANKS_PENDING).
 */
static int rk_dev_settle_live(struct ranks *r, struct rk_dev *d)
{
    const struct rk_proc *p = (size_t)d->process_id < r->n_procs ? &r->procs[d->process_id] : NULL;
    uint64_t margin = d->disorder > UINT64_MAX / 2 ? UINT64_MAX : 2 * d->disorder;

    if (p != NULL && p->replay)
        return 0;
    return rk_dev_settle(r, d, d->max_start > margin ? d->max_start - margin : 0);
}

/* The entry e of (process, device) d. */
static int rk_exposure(struct ranks *r, struct rk_dev *d, const struct proto_entry *e,
                       enum proto_cat cat)
{
    uint64_t end = e->start_ns + e->dur_ns;

    if ((cat != PROTO_CAT_COMPUTE && cat != PROTO_CAT_COMM) || e->dur_ns == 0)
        return 0;
    d->dirty = true;
    /* too late to be counted exactly: a compute entry over a comm entry already counted,
     * a comm entry over compute intervals already dropped */
    if (e->start_ns < (cat == PROTO_CAT_COMPUTE ? d->fin_end : d->drop_end))
        r->late++;
    if (e->start_ns > d->max_start)
        d->max_start = e->start_ns;
    else if (d->max_start - e->start_ns > d->disorder)
        d->disorder = d->max_start - e->start_ns;
    if (d->n_cu >= RANKS_PENDING || d->n_pc >= RANKS_PENDING) {
        /* a comm entry open over too many others (a peer could make it endless): count
         * what is pending now, and flag the session's exposure as inexact */
        int rc = rk_dev_settle(r, d, UINT64_MAX);
        r->late++;
        if (rc != 0)
            return rc;
    }
    if (cat == PROTO_CAT_COMPUTE)
        return rk_cu_add(d, e->start_ns, end) < 0 ? SQLITE_NOMEM : 0;
    if (rk_grow((void **)&d->pc, &d->cap_pc, d->n_pc, sizeof(*d->pc)) < 0)
        return SQLITE_NOMEM;
    d->pc[d->n_pc++] = (struct rk_pend){e->start_ns, end, e->step, e->op_id};
    return 0;
}

/* ---- collectives --------------------------------------------------------- */

static size_t rk_ihome(const struct rk_ikey *k)
{
    uint64_t h = k->kind * 0x9e3779b97f4a7c15ull;

    h = (h ^ k->k1) * 0xff51afd7ed558ccdull;
    h = (h ^ k->k2) * 0xc4ceb9fe1a85ec53ull;
    h = (h ^ k->k3) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 40) & (RK_ISLOTS - 1);
}

static bool rk_ikey_eq(const struct rk_ikey *a, const struct rk_ikey *b)
{
    return a->kind == b->kind && a->k1 == b->k1 && a->k2 == b->k2 && a->k3 == b->k3;
}

/* The slot of key: where it is, else the empty slot where it would go. */
static size_t rk_ifind(const struct ranks *r, const struct rk_ikey *key)
{
    size_t i = rk_ihome(key);

    while (r->islot[i] != 0 && !rk_ikey_eq(&r->inst[r->islot[i] - 1].key, key))
        i = (i + 1) & (RK_ISLOTS - 1);
    return i;
}

/* Removes instance in from the hash, shifting back the entries after it. */
static void rk_idel(struct ranks *r, const struct rk_inst *in)
{
    size_t i = in->slot, j = i;

    r->islot[i] = 0;
    for (;;) {
        size_t k;
        j = (j + 1) & (RK_ISLOTS - 1);
        if (r->islot[j] == 0)
            return;
        k = rk_ihome(&r->inst[r->islot[j] - 1].key);
        /* the entry at j may move to i when its home is not in (i, j] (cyclically) */
        if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
            r->islot[i] = r->islot[j];
            r->islot[j] = 0;
            r->inst[r->islot[i] - 1].slot = (uint32_t)i;
            i = j;
        }
    }
}

/* The arrivals that complete an instance: its communicator's size when given, else the world. */
static uint64_t rk_expected(const struct ranks *r, const struct rk_inst *in)
{
    if (in->size != 0)
        return in->size;
    return r->world > r->nprocs_seen ? r->world : r->nprocs_seen;
}

static int rk_inst_finalize(struct ranks *r, size_t idx)
{
    struct rk_inst *in = &r->inst[idx];
    uint64_t first = UINT64_MAX, last = 0, expected = rk_expected(r, in);
    size_t li = 0;
    struct rk_collsum *c;
    int rc = 0;

    for (size_t i = 0; i < in->n; i++) {
        if (in->a[i].start < first)
            first = in->a[i].start;
        if (i == 0 || in->a[i].start > last) {
            last = in->a[i].start;
            li = i;
        }
    }
    for (size_t i = 0; i < in->n; i++) {
        const struct rk_arrival *a = &in->a[i];
        uint64_t wait = last - a->start;
        struct rk_stepsum *s = rk_step_c(r, a->process_id, a->step);
        struct rk_collsum *cr = rk_collsum_c(r, in->op_id, a->process_id, a->step);

        if (s == NULL || cr == NULL) {
            rc = SQLITE_NOMEM;
            goto done;
        }
        if (wait > a->dur)
            wait = a->dur;
        s->coll++;
        s->waited = rk_sat(s->waited, wait);
        cr->instances++;
        cr->waited = rk_sat(cr->waited, wait);
        if (i == li) {
            s->last_count++;
            s->caused = rk_sat(s->caused, last - first);
            cr->last_count++;
        }
    }
    if ((c = rk_collsum_c(r, in->op_id, -1, in->a[li].step)) == NULL) {
        rc = SQLITE_NOMEM;
        goto done;
    }
    c->instances++;
    c->partial += in->n < expected;
    c->skew = rk_sat(c->skew, last - first);
    if (last - first > c->skew_max)
        c->skew_max = last - first;
done:
    if (in->n_saved > 0 && rc == 0) {
        if (rk_grow((void **)&r->gone, &r->cap_gone, r->n_gone, sizeof(*r->gone)) < 0)
            rc = SQLITE_NOMEM;
        else
            r->gone[r->n_gone++] = in->key;
    }
    if (r->n_apool < RK_APOOL && in->cap > 0 &&
        rk_grow((void **)&r->apool, &r->cap_apool, r->n_apool, sizeof(*r->apool)) == 0)
        r->apool[r->n_apool++] = (struct rk_abuf){in->a, in->cap};
    else
        free(in->a);
    rk_idel(r, in);
    if (idx != --r->n_inst) {
        r->inst[idx] = r->inst[r->n_inst];
        r->islot[r->inst[idx].slot] = (uint32_t)idx + 1;
    }
    return rc;
}

/* Closes the oldest open instance (the queue's front that is still open), if any. */
static int rk_inst_oldest(struct ranks *r)
{
    while (r->iq_len > 0) {
        struct rk_iq *q = &r->iq[r->iq_head];
        size_t pos = rk_ifind(r, &q->key);

        r->iq_head = (r->iq_head + 1) % RK_IQUEUE;
        r->iq_len--;
        if (r->islot[pos] != 0 && r->inst[r->islot[pos] - 1].opened == q->opened)
            return rk_inst_finalize(r, r->islot[pos] - 1);
    }
    return 0;
}

/* The occurrence count of op on process (seen) in its current group. */
static struct rk_occ *rk_occ(struct ranks *r, int64_t process_id, uint32_t op_id)
{
    struct rk_proc *p = rk_proc_known(r, process_id);
    struct rk_pop *pop = p != NULL ? rk_pop(&p->pop, op_id) : NULL;
    bool fresh;
    ssize_t i;

    if (p == NULL)
        return NULL;
    if (pop != NULL && pop->occ1 != 0 && r->occ[pop->occ1 - 1].group == p->group)
        return &r->occ[pop->occ1 - 1];
    i = rk_slot(&r->occ_idx, (uint64_t)process_id, op_id, p->group, (void **)&r->occ, &r->n_occ,
                &r->cap_occ, sizeof(*r->occ), &fresh);
    if (i < 0)
        return NULL;
    r->occ[i].process_id = process_id;
    r->occ[i].op_id = op_id;
    r->occ[i].group = p->group;
    if (pop != NULL)
        pop->occ1 = (uint32_t)i + 1;
    return &r->occ[i];
}

static int rk_collective(struct ranks *r, int64_t process_id, const struct proto_entry *e,
                         const struct proto_ext *x)
{
    struct rk_ikey key = {0};
    struct rk_inst *in;
    size_t pos;
    int rc;

    if (x != NULL && (x->has & PROTO_EXT_PEER))
        return 0; /* point-to-point */
    if (x != NULL && (x->has & PROTO_EXT_COMM) && (x->has & PROTO_EXT_SEQ)) {
        key.kind = 1, key.k1 = x->comm, key.k2 = x->seq;
    } else {
        struct rk_occ *o = rk_occ(r, process_id, e->op_id);
        if (o == NULL)
            return SQLITE_NOMEM;
        o->dirty = true;
        key.kind = 2, key.k1 = e->op_id, key.k2 = o->group, key.k3 = o->count++;
    }
    pos = rk_ifind(r, &key);
    if (r->islot[pos] != 0) {
        in = &r->inst[r->islot[pos] - 1];
        for (size_t i = 0; (in->procs >> (process_id & 63) & 1) && i < in->n; i++)
            if (in->a[i].process_id == process_id)
                return 0; /* the same (comm, seq) twice from one process: not an arrival */
    } else {
        /* room: at most RANKS_OPEN open, and a queue slot (an instance RK_IQUEUE newer ones
         * overtook is closed as it is) */
        while (r->n_inst >= RANKS_OPEN || r->iq_len == RK_IQUEUE) /* each pops the queue */
            if ((rc = rk_inst_oldest(r)) != 0)
                return rc;
        if (rk_grow((void **)&r->inst, &r->cap_inst, r->n_inst, sizeof(*r->inst)) < 0)
            return SQLITE_NOMEM;
        pos = rk_ifind(r, &key); /* closing may have moved the slots */
        in = &r->inst[r->n_inst++];
        memset(in, 0, sizeof(*in));
        if (r->n_apool > 0) {
            in->a = r->apool[--r->n_apool].a;
            in->cap = r->apool[r->n_apool].cap;
        }
        in->key = key;
        in->op_id = e->op_id;
        in->opened = r->opened++;
        in->slot = (uint32_t)pos;
        r->islot[pos] = (uint32_t)r->n_inst;
        r->iq[(r->iq_head + r->iq_len++) % RK_IQUEUE] = (struct rk_iq){key, in->opened};
    }
    if (rk_grow((void **)&in->a, &in->cap, in->n, sizeof(*in->a)) < 0)
        return SQLITE_NOMEM;
    in->a[in->n++] = (struct rk_arrival){process_id, e->step, e->start_ns, e->dur_ns};
    in->procs |= 1ull << (process_id & 63);
    if (key.kind == 1 && (x->has & PROTO_EXT_COMM_SIZE) && x->comm_size > in->size)
        in->size = x->comm_size;
    if (in->n >= rk_expected(r, in))
        return rk_inst_finalize(r, (size_t)(in - r->inst));
    return 0;
}

/* The rk_devsteps and rk_steps deltas of an entry of d at step: d's current step's, else
 * looked up (and made current). False when out of memory. */
static bool rk_cur_step(struct ranks *r, struct rk_dev *d, uint64_t step, struct rk_devstep **ds,
                        struct rk_stepsum **s)
{
    if (d->cur_epoch == r->epoch && d->cur_step == step) {
        *ds = &r->dsteps[d->cur_ds1 - 1];
        *s = &r->steps[d->cur_s1 - 1];
        return true;
    }
    if ((*ds = rk_devstep_c(r, d, step)) == NULL ||
        (*s = rk_step_c(r, d->process_id, step)) == NULL)
        return false;
    d->cur_epoch = r->epoch;
    d->cur_step = step;
    d->cur_ds1 = (uint32_t)(*ds - r->dsteps) + 1;
    d->cur_s1 = (uint32_t)(*s - r->steps) + 1;
    return true;
}

static int ranks_entry_rc(struct ranks *r, int64_t process_id, const struct proto_entry *e,
                          uint32_t dev_id, const struct proto_ext *x, int64_t rowid)
{
    enum proto_cat cat = e->op_id < r->n_cat ? (enum proto_cat)r->cat[e->op_id] : PROTO_CAT_COMPUTE;
    struct rk_proc *p =
        process_id >= 0 && (uint64_t)process_id < r->n_procs && r->procs[process_id].seen
            ? &r->procs[process_id]
            : rk_proc(r, process_id);
    struct rk_dev *d = p != NULL ? rk_dev_c(r, p, process_id, dev_id) : NULL;
    struct rk_opsum *o = d != NULL ? rk_opsum_c(r, d, e->op_id) : NULL;
    struct rk_devstep *ds;
    struct rk_stepsum *s;
    uint64_t end = e->start_ns + e->dur_ns;
    int rc;

    if (o == NULL || !rk_cur_step(r, d, e->step, &ds, &s))
        return SQLITE_NOMEM;
    o->calls++;
    o->total = rk_sat(o->total, e->dur_ns);
    o->elements = rk_sat(o->elements, e->elements);
    if (e->start_ns < o->begin)
        o->begin = e->start_ns;
    if (end > o->end)
        o->end = end;
    ds->cat[cat] = rk_sat(ds->cat[cat], e->dur_ns);
    if (e->start_ns < ds->begin)
        ds->begin = e->start_ns;
    if (end > ds->end)
        ds->end = end;
    if (rowid < ds->first_row)
        ds->first_row = rowid;
    if (rowid > ds->last_row)
        ds->last_row = rowid;
    s->cat[cat] = rk_sat(s->cat[cat], e->dur_ns);
    if (e->start_ns < s->begin)
        s->begin = e->start_ns;
    if (end > s->end)
        s->end = end;
    if ((rc = rk_exposure(r, d, e, cat)) != 0)
        return rc;
    if (e->op_id < r->n_cat && r->coll_ok[e->op_id])
        return rk_collective(r, process_id, e, x);
    return 0;
}

bool ranks_pending(const struct ranks *r)
{
    if (r == NULL)
        return false;
    if (r->n_inst > 0)
        return true;
    for (size_t i = 0; i < r->n_devs; i++)
        if (r->devs[i].n_pc > 0)
            return true;
    return false;
}

static int ranks_finish_rc(struct ranks *r)
{
    int rc;

    while (r->n_inst > 0 && r->iq_len > 0)
        if ((rc = rk_inst_oldest(r)) != 0)
            return rc;
    for (size_t i = 0; i < r->n_devs; i++)
        if ((rc = rk_dev_settle(r, &r->devs[i], UINT64_MAX)) != 0)
            return rc;
    return 0;
}

/* ---- flush --------------------------------------------------------------- */

/* Writes the rk_ops and rk_devsteps deltas (sorted: the deltas are reset next). */
static int rk_write_ops(struct ranks *r)
{
    int rc;

    rk_sort_keyed(r, r->ops, r->n_ops, sizeof(*r->ops), rk_ops_key, rk_ops_cmp);
    rk_sort_keyed(r, r->dsteps, r->n_dsteps, sizeof(*r->dsteps), rk_dsteps_key, rk_dsteps_cmp);
    for (size_t i = 0; i < r->n_ops; i++) {
        const struct rk_opsum *o = &r->ops[i];
        int64_t v[9] = {o->process_id,       o->device_id,      o->op_id,
                        (int64_t)o->calls,   (int64_t)o->total, (int64_t)o->elements,
                        (int64_t)o->exposed, (int64_t)o->begin, (int64_t)o->end};
        if (o->calls == 0) { /* only exposure: begin/end must not move */
            v[7] = INT64_MAX;
            v[8] = 0;
        }
        if ((rc = rk_up_add(&r->up_ops, v)) != 0)
            return rc;
    }
    if ((rc = rk_up_end(&r->up_ops)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_dsteps; i++) {
        const struct rk_devstep *d = &r->dsteps[i];
        int64_t v[13] = {d->process_id,
                         (int64_t)d->step,
                         d->device_id,
                         d->begin == UINT64_MAX ? INT64_MAX : (int64_t)d->begin,
                         (int64_t)d->end,
                         (int64_t)d->cat[PROTO_CAT_COMPUTE],
                         (int64_t)d->cat[PROTO_CAT_COMM],
                         (int64_t)d->cat[PROTO_CAT_MEMORY],
                         (int64_t)d->cat[PROTO_CAT_WAIT],
                         (int64_t)d->cat[PROTO_CAT_OTHER],
                         (int64_t)d->exposed,
                         d->first_row,
                         d->last_row};
        if ((rc = rk_up_add(&r->up_dsteps, v)) != 0)
            return rc;
    }
    return rk_up_end(&r->up_dsteps);
}

/* ---- the state saved at each commit -------------------------------------- */

/*
 * The arrivals at open instances in rk_open: those added since the last
 * commit inserted, the closed instances' deleted; or, when that is more
 * work, the table emptied and every open arrival written again. An insert
 * among the table's rows costs about twice one into an emptied table, and
 * deleting an instance's rows three times (callgrind, SQLite 3.40): a busy
 * session (many instances open and closed between two commits) rewrites
 * the table, a light one (an arrival or two per commit) does not. The rows
 * are the same either way, but for comm_size: a rewritten arrival carries
 * the instance's size now, the largest its rows had (what rk_load_open
 * reads back).
 */
static int rk_save_open(struct ranks *r)
{
    size_t open = 0, fresh = 0;
    int rc;

    for (size_t i = 0; i < r->n_inst; i++) {
        open += r->inst[i].n;
        fresh += r->inst[i].n - r->inst[i].n_saved;
    }
    if (open < 2 * fresh + 3 * r->n_gone) {
        rc = sqlite3_step(r->clear_open);
        sqlite3_reset(r->clear_open);
        if (rc != SQLITE_DONE)
            return rc;
        r->n_gone = 0;
        for (size_t i = 0; i < r->n_inst; i++)
            r->inst[i].n_saved = 0;
    }

    for (size_t i = 0; i < r->n_gone; i++) {
        const struct rk_ikey *k = &r->gone[i];
        int64_t v[4] = {(int64_t)k->kind, (int64_t)k->k1, (int64_t)k->k2, (int64_t)k->k3};
        if ((rc = rk_up_add(&r->del_open, v)) != 0)
            return rc;
    }
    r->n_gone = 0;
    /* before the arrivals: an instance may have closed and opened again under its key */
    if ((rc = rk_up_end(&r->del_open)) != 0)
        return rc;
    /* in the table's key order: each row lands beside the last */
    r->n_orow = 0;
    for (size_t i = 0; i < r->n_inst; i++) {
        const struct rk_inst *in = &r->inst[i];
        for (size_t j = in->n_saved; j < in->n; j++) {
            struct rk_orow *o;
            if (rk_grow((void **)&r->orow, &r->cap_orow, r->n_orow, sizeof(*r->orow)) < 0)
                return SQLITE_NOMEM;
            o = &r->orow[r->n_orow++];
            o->key[0] = (int64_t)in->key.kind;
            o->key[1] = (int64_t)in->key.k1;
            o->key[2] = (int64_t)in->key.k2;
            o->key[3] = (int64_t)in->key.k3;
            o->key[4] = in->a[j].process_id;
            o->inst = (uint32_t)i;
            o->arrival = (uint32_t)j;
        }
    }
    rk_sort(r->orow, r->n_orow, sizeof(*r->orow), rk_orow_cmp);
    for (size_t k = 0; k < r->n_orow; k++) {
        const struct rk_inst *in = &r->inst[r->orow[k].inst];
        const struct rk_arrival *a = &in->a[r->orow[k].arrival];
        int64_t v[12] = {r->orow[k].key[0], r->orow[k].key[1],   r->orow[k].key[2],
                         r->orow[k].key[3], a->process_id,       (int64_t)r->orow[k].arrival,
                         in->op_id,         (int64_t)in->opened, (int64_t)a->step,
                         (int64_t)a->start, (int64_t)a->dur,     (int64_t)in->size};
        if ((rc = rk_up_add(&r->ins_open, v)) != 0)
            return rc;
    }
    if ((rc = rk_up_end(&r->ins_open)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_inst; i++)
        r->inst[i].n_saved = r->inst[i].n;
    for (size_t i = 0; i < r->n_occ; i++) {
        struct rk_occ *o = &r->occ[i];
        int64_t v[4] = {o->process_id, o->op_id, (int64_t)o->group, (int64_t)o->count};
        if (!o->dirty)
            continue;
        if ((rc = rk_up_add(&r->up_occ, v)) != 0)
            return rc;
        o->dirty = false;
    }
    return rk_up_end(&r->up_occ);
}

/* The intervals of the devices that changed. Not those of imported files (entries in file
 * order keep every interval until the end: rewriting them at each commit would cost more
 * than the import); ranks_load marks those inexact. */
static int rk_save_devs(struct ranks *r)
{
    int rc;

    for (size_t i = 0; i < r->n_devs; i++) {
        struct rk_dev *d = &r->devs[i];
        const struct rk_proc *p =
            (size_t)d->process_id < r->n_procs ? &r->procs[d->process_id] : NULL;
        int64_t key[2] = {d->process_id, d->device_id};
        int64_t st[6] = {d->process_id,        d->device_id,        (int64_t)d->max_start,
                         (int64_t)d->disorder, (int64_t)d->fin_end, (int64_t)d->drop_end};

        if (!d->dirty || p == NULL || p->replay)
            continue;
        d->dirty = false;
        if ((d->unsaved = d->n_cu + d->n_pc > RK_SAVE_PEND))
            continue;
        if ((rc = rk_run(r->del_pend, key, 2)) != 0 || (rc = rk_run(r->up_devstate, st, 6)) != 0)
            return rc;
        for (size_t k = 0; k < d->n_cu; k++) {
            int64_t v[8] = {d->process_id,       d->device_id,        0, (int64_t)k,
                            (int64_t)d->cu[k].b, (int64_t)d->cu[k].e, 0, 0};
            if ((rc = rk_up_add(&r->ins_pend, v)) != 0)
                return rc;
        }
        for (size_t k = 0; k < d->n_pc; k++) {
            const struct rk_pend *c = &d->pc[k];
            int64_t v[8] = {d->process_id, d->device_id,     1,       (int64_t)k, (int64_t)c->b,
                            (int64_t)c->e, (int64_t)c->step, c->op_id};
            if ((rc = rk_up_add(&r->ins_pend, v)) != 0)
                return rc;
        }
    }
    return rk_up_end(&r->ins_pend);
}

/*
 * Saves what the next commit's writer needs to go on: the arrivals at open
 * instances (those added since the last commit; the closed ones deleted),
 * the occurrence counts that changed, the exposure intervals of the devices
 * that changed, and where the queue of open instances stands.
 */
static int rk_save_state(struct ranks *r)
{
    uint64_t iq_first = r->opened - r->iq_len;
    int rc;

    if (r->resync) {
        if ((rc = sqlite3_exec(r->db,
                               "DELETE FROM rk_open; DELETE FROM rk_occ; DELETE FROM rk_pend;"
                               " DELETE FROM rk_devstate",
                               NULL, NULL, NULL)) != SQLITE_OK)
            return rc;
        r->n_gone = 0;
        for (size_t i = 0; i < r->n_inst; i++)
            r->inst[i].n_saved = 0;
        for (size_t i = 0; i < r->n_occ; i++)
            r->occ[i].dirty = true;
        for (size_t i = 0; i < r->n_devs; i++)
            r->devs[i].dirty = true;
        r->opened_written = r->iq_first_written = UINT64_MAX;
        r->resync = false;
    }
    if ((rc = rk_save_open(r)) != 0 || (rc = rk_save_devs(r)) != 0)
        return rc;
    if (r->state_written != 0) {
        int64_t want = 1;
        for (size_t i = 0; i < r->n_devs && want == 1; i++)
            want = r->devs[i].unsaved ? 2 : 1;
        if (want != r->state_written) {
            if ((rc = rk_info(r, "ranks_state", want)) != 0)
                return rc;
            r->state_written = want;
        }
    }
    if (r->opened != r->opened_written) {
        if ((rc = rk_info(r, "ranks_opened", (int64_t)r->opened)) != 0)
            return rc;
        r->opened_written = r->opened;
    }
    if (iq_first != r->iq_first_written) {
        if ((rc = rk_info(r, "ranks_iq_first", (int64_t)iq_first)) != 0)
            return rc;
        r->iq_first_written = iq_first;
    }
    return 0;
}

static int ranks_flush_rc(struct ranks *r)
{
    int rc;

    for (size_t i = 0; i < r->n_devs; i++)
        if ((rc = rk_dev_settle_live(r, &r->devs[i])) != 0)
            return rc;
    if ((rc = rk_write_ops(r)) != 0)
        return rc;
    rk_sort_keyed(r, r->steps, r->n_steps, sizeof(*r->steps), rk_steps_key, rk_steps_cmp);
    rk_sort_keyed(r, r->coll, r->n_coll, sizeof(*r->coll), rk_coll_key, rk_coll_cmp);
    for (size_t i = 0; i < r->n_steps; i++) {
        const struct rk_stepsum *s = &r->steps[i];
        int64_t v[14] = {s->process_id,
                         (int64_t)s->step,
                         s->begin == UINT64_MAX ? INT64_MAX : (int64_t)s->begin,
                         (int64_t)s->end,
                         (int64_t)s->cat[PROTO_CAT_COMPUTE],
                         (int64_t)s->cat[PROTO_CAT_COMM],
                         (int64_t)s->cat[PROTO_CAT_MEMORY],
                         (int64_t)s->cat[PROTO_CAT_WAIT],
                         (int64_t)s->cat[PROTO_CAT_OTHER],
                         (int64_t)s->exposed,
                         (int64_t)s->coll,
                         (int64_t)s->waited,
                         (int64_t)s->last_count,
                         (int64_t)s->caused};
        if ((rc = rk_up_add(&r->up_steps, v)) != 0)
            return rc;
    }
    if ((rc = rk_up_end(&r->up_steps)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_coll; i++) {
        const struct rk_collsum *c = &r->coll[i];
        if (c->process_id < 0) {
            int64_t v[6] = {
                c->op_id,         (int64_t)c->step,    (int64_t)c->instances, (int64_t)c->partial,
                (int64_t)c->skew, (int64_t)c->skew_max};
            rc = rk_up_add(&r->up_coll, v);
        } else {
            int64_t v[6] = {c->op_id,           c->process_id,
                            (int64_t)c->step,   (int64_t)c->instances,
                            (int64_t)c->waited, (int64_t)c->last_count};
            rc = rk_up_add(&r->up_collr, v);
        }
        if (rc != 0)
            return rc;
    }
    if ((rc = rk_up_end(&r->up_coll)) != 0 || (rc = rk_up_end(&r->up_collr)) != 0)
        return rc;
    if (r->late != r->late_written) {
        if ((rc = rk_info(r, "ranks_late", (int64_t)r->late)) != 0)
            return rc;
        r->late_written = r->late;
    }
    if (r->inexact && !r->inexact_written) {
        if ((rc = rk_info(r, "ranks", 2)) != 0)
            return rc;
        r->inexact_written = true;
    }
    if ((rc = rk_save_state(r)) != 0)
        return rc;
    rk_reset_deltas(r);
    return 0;
}

void ranks_discard(struct ranks *r)
{
    rk_reset_deltas(r);
    r->inexact = true;
    r->resync = true; /* what the rolled back commit wrote of the state is not there */
}

/* ---- reload and rebuild -------------------------------------------------- */

static int rk_load_ops(struct ranks *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db, "SELECT id, name, category FROM ops", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        int64_t id = sqlite3_column_int64(st, 0);
        if (id >= 0 && id <= UINT32_MAX && name != NULL &&
            (rc = ranks_op_rc(r, (uint32_t)id, name, (const char *)sqlite3_column_text(st, 2))) !=
                0)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int rk_load_procs(struct ranks *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db, "SELECT id, world FROM processes", -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if ((rc = ranks_process_rc(r, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1))) !=
            0)
            break;
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != 0)
        return rc;
    rc = sqlite3_prepare_v2(r->db,
                            "SELECT process_id, key, value FROM meta"
                            " WHERE key IN ('process_group', 'import.file')",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        const char *key = (const char *)sqlite3_column_text(st, 1);
        if (sqlite3_column_type(st, 2) == SQLITE_TEXT)
            rc = ranks_meta_rc(r, id, key, (const char *)sqlite3_column_text(st, 2), 0, true);
        else
            rc = ranks_meta_rc(r, id, key, NULL, sqlite3_column_int64(st, 2), false);
        if (rc != 0)
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int64_t rk_info_get(struct ranks *r, const char *key, int64_t dflt)
{
    sqlite3_stmt *st;
    int64_t v = dflt;

    if (sqlite3_prepare_v2(r->db, "SELECT value FROM info WHERE key = ?", -1, &st, NULL) !=
        SQLITE_OK)
        return dflt;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Reopens the instances of rk_open, in the order they opened, and the queue they were in. */
static int rk_load_open(struct ranks *r)
{
    sqlite3_stmt *st;
    uint64_t first = (uint64_t)rk_info_get(r, "ranks_iq_first", 0);
    int rc;

    r->opened = (uint64_t)rk_info_get(r, "ranks_opened", 0);
    if (first > r->opened || r->opened - first > RK_IQUEUE)
        return SQLITE_CORRUPT;
    /* the queue holds every instance opened since `first`: the closed ones are skipped when
     * they reach its front (no open instance has kind 0) */
    r->iq_head = 0;
    r->iq_len = (size_t)(r->opened - first);
    for (size_t i = 0; i < r->iq_len; i++)
        r->iq[i] = (struct rk_iq){{0, 0, 0, 0}, first + i};
    rc = sqlite3_prepare_v2(r->db,
                            "SELECT kind, k1, k2, k3, process_id, op_id, opened, step, start_ns,"
                            " dur_ns, coalesce(comm_size, 0) FROM rk_open ORDER BY opened, arrival",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct rk_ikey key = {
            (uint64_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
            (uint64_t)sqlite3_column_int64(st, 2), (uint64_t)sqlite3_column_int64(st, 3)};
        uint64_t opened = (uint64_t)sqlite3_column_int64(st, 6);
        size_t pos = rk_ifind(r, &key);
        struct rk_inst *in;

        if (r->islot[pos] != 0) {
            in = &r->inst[r->islot[pos] - 1];
        } else {
            if (r->n_inst >= RANKS_OPEN || opened < first || opened >= r->opened) {
                rc = SQLITE_CORRUPT;
                break;
            }
            if (rk_grow((void **)&r->inst, &r->cap_inst, r->n_inst, sizeof(*r->inst)) < 0) {
                rc = SQLITE_NOMEM;
                break;
            }
            in = &r->inst[r->n_inst++];
            memset(in, 0, sizeof(*in));
            in->key = key;
            in->op_id = (uint32_t)sqlite3_column_int64(st, 5);
            in->opened = opened;
            in->slot = (uint32_t)pos;
            r->islot[pos] = (uint32_t)r->n_inst;
            r->iq[opened - first].key = key;
        }
        if (rk_grow((void **)&in->a, &in->cap, in->n, sizeof(*in->a)) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        in->a[in->n++] = (struct rk_arrival){
            sqlite3_column_int64(st, 4), (uint64_t)sqlite3_column_int64(st, 7),
            (uint64_t)sqlite3_column_int64(st, 8), (uint64_t)sqlite3_column_int64(st, 9)};
        in->procs |= 1ull << (in->a[in->n - 1].process_id & 63);
        in->n_saved = in->n;
        if ((uint64_t)sqlite3_column_int64(st, 10) > in->size) /* each row: the size then */
            in->size = (uint64_t)sqlite3_column_int64(st, 10);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int rk_load_occ(struct ranks *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db, "SELECT process_id, op_id, grp, count FROM rk_occ", -1, &st,
                                NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t okey[3] = {(uint64_t)sqlite3_column_int64(st, 0),
                            (uint64_t)sqlite3_column_int64(st, 1),
                            (uint64_t)sqlite3_column_int64(st, 2)};
        bool fresh;
        ssize_t i = rk_slot(&r->occ_idx, okey[0], okey[1], okey[2], (void **)&r->occ, &r->n_occ,
                            &r->cap_occ, sizeof(*r->occ), &fresh);
        if (i < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        r->occ[i] = (struct rk_occ){(int64_t)okey[0], (uint32_t)okey[1], okey[2],
                                    (uint64_t)sqlite3_column_int64(st, 3), false};
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int rk_load_devs(struct ranks *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->db,
                                "SELECT process_id, device_id, max_start, disorder, fin_end,"
                                " drop_end FROM rk_devstate",
                                -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct rk_dev *d =
            rk_dev(r, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1));
        if (d == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        d->max_start = (uint64_t)sqlite3_column_int64(st, 2);
        d->disorder = (uint64_t)sqlite3_column_int64(st, 3);
        d->fin_end = (uint64_t)sqlite3_column_int64(st, 4);
        d->drop_end = (uint64_t)sqlite3_column_int64(st, 5);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    rc = sqlite3_prepare_v2(r->db,
                            "SELECT process_id, device_id, comm, begin_ns, end_ns, step, op_id"
                            " FROM rk_pend ORDER BY process_id, device_id, comm, i",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct rk_dev *d =
            rk_dev(r, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1));
        uint64_t b = (uint64_t)sqlite3_column_int64(st, 3),
                 e = (uint64_t)sqlite3_column_int64(st, 4);
        if (d == NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (sqlite3_column_int64(st, 2) == 0) {
            if (rk_cu_add(d, b, e) < 0) {
                rc = SQLITE_NOMEM;
                break;
            }
            continue;
        }
        if (rk_grow((void **)&d->pc, &d->cap_pc, d->n_pc, sizeof(*d->pc)) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        d->pc[d->n_pc++] = (struct rk_pend){b, e, (uint64_t)sqlite3_column_int64(st, 5),
                                            (uint32_t)sqlite3_column_int64(st, 6)};
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int ranks_load_rc(struct ranks *r)
{
    bool replay = false;
    int rc;

    if ((rc = rk_load_ops(r)) != 0 || (rc = rk_load_procs(r)) != 0)
        return rc;
    r->late = r->late_written = (uint64_t)rk_info_get(r, "ranks_late", 0);
    r->inexact = r->inexact_written = rk_info_get(r, "ranks", 0) == 2;
    for (size_t i = 0; i < r->n_procs; i++)
        replay |= r->procs[i].seen && r->procs[i].replay;
    r->state_written = rk_info_get(r, "ranks_state", 0);
    if (r->state_written != 1 || replay) {
        /* a file that did not save the state, or an import's (its intervals are not saved):
         * open instances, occurrence counts and pending intervals were lost with the close */
        r->inexact = true;
        return 0;
    }
    if ((rc = rk_load_open(r)) != 0 || (rc = rk_load_occ(r)) != 0 || (rc = rk_load_devs(r)) != 0)
        return rc;
    r->opened_written = r->opened;
    r->iq_first_written = r->opened - r->iq_len;
    return 0;
}

static int rk_rebuild_entries(struct ranks *r)
{
    static const char with_ext[] =
        "SELECT e.process_id, e.step, e.op_id, coalesce(e.device_id, 0), e.start_ns, e.dur_ns,"
        " coalesce(e.elements, s.elements, 0), x.peer, x.comm, x.seq, e.rowid, x.comm_size"
        " FROM entries e LEFT JOIN shapes s ON s.id = e.shape_id"
        " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid ORDER BY e.rowid";
    /* an entry_ext written before ext comm_size has no such column */
    static const char with_ext_v1[] =
        "SELECT e.process_id, e.step, e.op_id, coalesce(e.device_id, 0), e.start_ns, e.dur_ns,"
        " coalesce(e.elements, s.elements, 0), x.peer, x.comm, x.seq, e.rowid, NULL"
        " FROM entries e LEFT JOIN shapes s ON s.id = e.shape_id"
        " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid ORDER BY e.rowid";
    static const char without[] =
        "SELECT e.process_id, e.step, e.op_id, coalesce(e.device_id, 0), e.start_ns, e.dur_ns,"
        " coalesce(e.elements, s.elements, 0), NULL, NULL, NULL, e.rowid, NULL FROM entries e"
        " LEFT JOIN shapes s ON s.id = e.shape_id ORDER BY e.rowid";
    const char *sql = !rk_has_table(r->db, "entry_ext")                ? without
                      : rk_has_column(r->db, "entry_ext", "comm_size") ? with_ext
                                                                       : with_ext_v1;
    sqlite3_stmt *st;
    uint64_t n = 0;
    int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct proto_entry e = {0};
        struct proto_ext x = {0};

        e.step = (uint64_t)sqlite3_column_int64(st, 1);
        e.op_id = (uint32_t)sqlite3_column_int64(st, 2);
        e.start_ns = (uint64_t)sqlite3_column_int64(st, 4);
        e.dur_ns = (uint64_t)sqlite3_column_int64(st, 5);
        e.elements = (uint64_t)sqlite3_column_int64(st, 6);
        if (sqlite3_column_type(st, 7) != SQLITE_NULL)
            x.has |= PROTO_EXT_PEER;
        if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
            x.has |= PROTO_EXT_COMM;
            x.comm = (uint64_t)sqlite3_column_int64(st, 8);
        }
        if (sqlite3_column_type(st, 9) != SQLITE_NULL) {
            x.has |= PROTO_EXT_SEQ;
            x.seq = (uint64_t)sqlite3_column_int64(st, 9);
        }
        if (sqlite3_column_type(st, 11) != SQLITE_NULL) {
            x.has |= PROTO_EXT_COMM_SIZE;
            x.comm_size = (uint64_t)sqlite3_column_int64(st, 11);
        }
        if ((rc = ranks_entry_rc(r, sqlite3_column_int64(st, 0), &e,
                                 (uint32_t)sqlite3_column_int64(st, 3), x.has ? &x : NULL,
                                 sqlite3_column_int64(st, 10))) != 0)
            break;
        /* count the exposure now and then, as the writer does at its commits */
        if (++n % 65536 == 0) {
            for (size_t i = 0; i < r->n_devs; i++)
                if ((rc = rk_dev_settle_live(r, &r->devs[i])) != 0)
                    goto out;
        }
    }
out:
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int ranks_rebuild_rc(sqlite3 *db)
{
    struct ranks *r = NULL;
    int rc;

    if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    /* an rk_ops keyed by step (rk_schema) is rebuilt, not folded */
    if (rk_has_column(db, "rk_ops", "step") &&
        (rc = sqlite3_exec(db, "DROP TABLE rk_ops", NULL, NULL, NULL)) != SQLITE_OK)
        goto rollback;
    if ((r = ranks_new(db)) == NULL) {
        rc = SQLITE_NOMEM;
        goto rollback;
    }
    if ((rc = sqlite3_exec(db,
                           "DELETE FROM rk_ops; DELETE FROM rk_devsteps; DELETE FROM rk_steps;"
                           " DELETE FROM rk_coll; DELETE FROM rk_coll_ranks; DELETE FROM rk_open;"
                           " DELETE FROM rk_occ; DELETE FROM rk_pend; DELETE FROM rk_devstate;",
                           NULL, NULL, NULL)) != SQLITE_OK ||
        (rc = rk_load_ops(r)) != 0 || (rc = rk_load_procs(r)) != 0 ||
        (rc = rk_rebuild_entries(r)) != 0 || (rc = ranks_finish_rc(r)) != 0 ||
        (rc = ranks_flush_rc(r)) != 0 || (rc = rk_info(r, "ranks", 1)) != 0 ||
        (rc = rk_info(r, "ranks_late", (int64_t)r->late)) != 0)
        goto rollback;
    ranks_free(r);
    return sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
rollback:
    ranks_free(r);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int ranks_recover_rc(sqlite3 *db)
{
    struct ranks *r;
    int rc;

    if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK)
        return rc;
    if ((r = ranks_new(db)) == NULL) {
        rc = SQLITE_NOMEM;
    } else if ((rc = ranks_load_rc(r)) == 0 && rk_info_get(r, "ranks", 0) != 0 &&
               (ranks_pending(r) || r->inexact) && (rc = ranks_finish_rc(r)) == 0) {
        rc = ranks_flush_rc(r); /* a file that saved no state says it lost some */
    }
    ranks_free(r);
    if (rc != 0) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    return sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
}

/* ---- the API: 0 or a negative errno (SQLite codes through store_errno) ---- */

static int rk_errno(int rc)
{
    return rc == 0 ? 0 : store_errno(rc);
}

int ranks_init_file(struct ranks *r)
{
    return rk_errno(ranks_init_file_rc(r));
}

int ranks_load(struct ranks *r)
{
    return rk_errno(ranks_load_rc(r));
}

int ranks_op(struct ranks *r, uint32_t op_id, const char *name, const char *category)
{
    return rk_errno(ranks_op_rc(r, op_id, name, category));
}

int ranks_process(struct ranks *r, int64_t process_id, int64_t world)
{
    return rk_errno(ranks_process_rc(r, process_id, world));
}

void ranks_process_end(struct ranks *r, int64_t process_id)
{
    struct rk_proc *p = rk_proc_known(r, process_id);
    struct rk_dev *d =
        p != NULL && p->dev1 > 0 && p->dev1 <= r->n_devs ? &r->devs[p->dev1 - 1] : NULL;

    if (d != NULL && d->process_id == process_id) {
        free(d->ops); /* a cache: rk_opsum_c allocates it again should the process come back */
        d->ops = NULL;
    }
}

int ranks_meta(struct ranks *r, int64_t process_id, const char *key, const char *sval, int64_t ival,
               bool is_str)
{
    return rk_errno(ranks_meta_rc(r, process_id, key, sval, ival, is_str));
}

int ranks_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e, uint32_t dev_id,
                const struct proto_ext *x, int64_t rowid)
{
    return rk_errno(ranks_entry_rc(r, process_id, e, dev_id, x, rowid));
}

int ranks_finish(struct ranks *r)
{
    return rk_errno(ranks_finish_rc(r));
}

int ranks_flush(struct ranks *r)
{
    return rk_errno(ranks_flush_rc(r));
}

int ranks_recover(sqlite3 *db)
{
    return rk_errno(ranks_recover_rc(db));
}

int ranks_rebuild(sqlite3 *db)
{
    return rk_errno(ranks_rebuild_rc(db));
}
