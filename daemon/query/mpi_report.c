/*
 * mpi_report — the report's MPI section (mpi_report.h).
 *
 * One scan of the MPI ops' entries (with their ext maps: comm, comm_size,
 * peer), each row counted in C where it belongs: its process (MPI time,
 * calls, first and last entries), its op's message-size histogram, its
 * communicator (by id, a hash map) and its pair of ranks (by from and to,
 * another), so that no GROUP BY sorts the entries: 400,000 MPI entries take
 * 0.43 s where three grouped scans took 1.76 s (2-core VM, loaded).
 * Calls are the "MPI_*" entries; the interposer's "tcmpi.*" entries (the
 * receive side of a Sendrecv, the further collectives one completion call
 * completed) are no calls and last 0 ns: only the matrix reads them, for the
 * receives of Sendrecvs.
 */
#include "mpi_report.h"
#include "mpi_sites.h"

#include "proto.h"
#include "util.h"
#include "sqlutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIST_BUCKETS 65 /* 0 bytes, then [2^(k-1), 2^k) for k = 1 .. 64 */

enum mpi_kind { KIND_OTHER, KIND_SEND, KIND_RECV, KIND_WAIT };

struct mpi_op {
    int64_t id;
    char *name;
    enum mpi_kind kind;
    bool aux; /* a "tcmpi.*" entry: no call (a Sendrecv's receive side is still a KIND_RECV) */
    uint64_t calls[HIST_BUCKETS], ns[HIST_BUCKETS]; /* the histogram */
    bool sized;                                     /* some call moved bytes */
};

struct mpi_proc {
    int64_t id, rank; /* rank -1: none */
    bool any;         /* has MPI entries */
    uint64_t calls, ns, first, last;
    uint64_t dropped_calls, counted_calls; /* not sent: dropped, counted (TRACECTL_MPI_P2P) */
    uint64_t unsent_ns;                    /* the time of both */
    bool has_counts;                       /* sent mpi.p2p.* rows */
    int64_t init_ns, fin_ns;               /* -1: not given */
    int64_t auto_ns, auto_rate;            /* TRACECTL_MPI_P2P=auto: switched, rate; -1: none */
};

/*
 * A process's per-peer counts (metadata mpi.p2p.<i>, TRACECTL_MPI_P2P=counters):
 * every call of (op, comm, peer), the first ones' entries included; the scan
 * adds up those entries (seen_*) so that only the rest is added after it.
 */
struct mpi_count {
    int64_t proc;
    size_t op;     /* index in ops */
    int64_t comm;  /* valid when has_comm */
    bool has_comm; /* "-": none */
    int64_t peer;  /* -1: none */
    uint64_t calls, ns, bytes, seen_calls, seen_ns, seen_bytes;
};

struct mpi_comm_op {
    size_t op; /* index in ops */
    uint64_t calls, ns, bytes;
};

struct mpi_comm {
    int64_t id;
    uint64_t size, first, calls, ns, bytes;
    int64_t *members; /* ranks, sorted, unique */
    size_t n_members;
    struct mpi_comm_op *ops;
    size_t n_ops;
    unsigned ordinal;  /* comm#N of one not named at creation: N by first entry */
    int64_t last_proc; /* the process of its last row counted in members (0: none) */
};

/* A communicator's name as its members said it (metadata mpi.comm.<id>, tcmpi.h). */
struct mpi_name {
    int64_t id, parent;
    char label[48]; /* "split#2" */
};

struct mpi_pair {
    int64_t from, to;
    uint64_t msgs, bytes, rmsgs, rbytes;
};

/*
 * 64-bit keys to array indexes (open addressing, linear probing, at most
 * half full): the communicators by id, the pairs by (from, to), so that the
 * scan's rows find theirs in constant time.
 */
struct mpi_map {
    uint64_t *keys;
    size_t *idx; /* index + 1; 0: an empty slot */
    size_t cap;  /* a power of two, or 0 */
    unsigned bits;
};

struct mpi {
    sqlite3 *db;
    bool whole;
    char *err;
    size_t errlen;
    struct mpi_op *ops;
    size_t n_ops, cap_ops;
    char *in_list; /* "(id, id, ...)" of the MPI ops */
    struct mpi_proc *procs;
    size_t n_procs, cap_procs;
    struct mpi_comm *comms;
    size_t n_comms, cap_comms;
    struct mpi_pair *pairs;
    size_t n_pairs, cap_pairs;
    struct mpi_name *names;
    size_t n_names, cap_names;
    struct mpi_count *counts; /* by (proc, op, comm, peer): mpi_count_cmp */
    size_t n_counts, cap_counts;
    struct mpi_map comm_map, pair_map; /* comms by id, pairs by (from, to) */
    struct mpi_sites sites;            /* whole: the callsites (mpi_sites.h) */
    struct mpi_proc *last_proc;        /* the scan's last row's */
};

/* A failed SQLite call (rc > 0: its code) or a row callback's negative errno, passed on. */
static int mpi_fail(struct mpi *m, int rc, const char *what)
{
    if (rc < 0)
        return rc;
    if (m->errlen > 0)
        snprintf(m->err, m->errlen, "report: mpi %s: %s", what, sqlite3_errmsg(m->db));
    return sql_errno(rc);
}

static int mpi_oom(struct mpi *m, const char *what)
{
    if (m->errlen > 0)
        snprintf(m->err, m->errlen, "report: mpi %s: out of memory", what);
    return -ENOMEM;
}

static uint64_t mpi_u64(sqlite3_stmt *st, int col)
{
    int64_t v = sqlite3_column_int64(st, col);
    return v > 0 ? (uint64_t)v : 0;
}

static uint64_t mpi_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* qsort, but for an empty array, which may be NULL (qsort's base must not be). */
static void mpi_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

/* ---- ops and processes ----------------------------------------------------- */

static enum mpi_kind mpi_kind_of(const char *name, const char *category)
{
    static const char *const sends[] = {
        "MPI_Send",   "MPI_Ssend",  "MPI_Bsend",  "MPI_Rsend",    "MPI_Isend",
        "MPI_Issend", "MPI_Ibsend", "MPI_Irsend", "MPI_Sendrecv", "MPI_Sendrecv_replace"};
    static const char *const recvs[] = {"MPI_Recv", "MPI_Irecv", "tcmpi.recv"};

    for (size_t i = 0; i < sizeof(sends) / sizeof(sends[0]); i++)
        if (strcmp(name, sends[i]) == 0)
            return KIND_SEND;
    for (size_t i = 0; i < sizeof(recvs) / sizeof(recvs[0]); i++)
        if (strcmp(name, recvs[i]) == 0)
            return KIND_RECV;
    return proto_cat_code(category) == PROTO_CAT_WAIT ? KIND_WAIT : KIND_OTHER;
}

static struct mpi_op *mpi_op_find(struct mpi *m, int64_t id, size_t *index)
{
    for (size_t i = 0; i < m->n_ops; i++)
        if (m->ops[i].id == id) {
            if (index != NULL)
                *index = i;
            return &m->ops[i];
        }
    return NULL;
}

static int mpi_ops_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    struct mpi_op *o, *grown;
    const char *name = (const char *)sqlite3_column_text(st, 1);
    const char *cat = (const char *)sqlite3_column_text(st, 2);

    if (name == NULL)
        return 0;
    if ((grown = util_grow(m->ops, &m->cap_ops, m->n_ops, sizeof(*m->ops))) == NULL)
        return mpi_oom(m, "ops");
    m->ops = grown;
    o = &m->ops[m->n_ops];
    memset(o, 0, sizeof(*o));
    if ((o->name = strdup(name)) == NULL)
        return mpi_oom(m, "ops");
    m->n_ops++;
    o->id = sqlite3_column_int64(st, 0);
    o->kind = mpi_kind_of(name, cat != NULL ? cat : "");
    o->aux = strncmp(name, "tcmpi.", 6) == 0;
    return 0;
}

/* The MPI ops and the list "(id, ...)" the scans select them by. */
static int mpi_ops(struct mpi *m)
{
    sqlite3_str *s;
    int rc;

    rc = sql_each(m->db,
                  "SELECT id, name, category FROM ops WHERE name GLOB 'MPI_*' OR"
                  " name GLOB 'tcmpi.*' ORDER BY name",
                  mpi_ops_row, m);
    if (rc != 0)
        return mpi_fail(m, rc, "ops");
    if (m->n_ops == 0)
        return 0;
    s = sqlite3_str_new(m->db);
    for (size_t i = 0; i < m->n_ops; i++)
        sqlite3_str_appendf(s, "%s%lld", i == 0 ? "(" : ", ", (long long)m->ops[i].id);
    sqlite3_str_appendall(s, ")");
    if ((m->in_list = sqlite3_str_finish(s)) == NULL)
        return mpi_oom(m, "ops");
    return 0;
}

static int mpi_procs_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    struct mpi_proc *p;

    if ((p = util_grow(m->procs, &m->cap_procs, m->n_procs, sizeof(*m->procs))) == NULL)
        return mpi_oom(m, "processes");
    m->procs = p;
    p = &m->procs[m->n_procs++];
    memset(p, 0, sizeof(*p));
    p->id = sqlite3_column_int64(st, 0);
    p->rank = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
    p->init_ns = p->fin_ns = p->auto_ns = p->auto_rate = -1;
    p->first = UINT64_MAX;
    return 0;
}

static struct mpi_proc *mpi_proc_find(struct mpi *m, int64_t id)
{
    size_t lo = 0, hi = m->n_procs; /* by id: the query orders them */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->procs[mid].id == id)
            return &m->procs[mid];
        if (m->procs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Process id's rank, or MPI_SITES_NOT_COUNTED when the report does not count it. */
static int64_t mpi_rank_of(void *arg, int64_t id)
{
    const struct mpi_proc *p = mpi_proc_find(arg, id);

    return p != NULL ? p->rank : MPI_SITES_NOT_COUNTED;
}

static int mpi_meta_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    struct mpi_proc *p = mpi_proc_find(m, sqlite3_column_int64(st, 0));
    const char *key = (const char *)sqlite3_column_text(st, 1);

    if (p == NULL || key == NULL || sqlite3_column_type(st, 2) != SQLITE_INTEGER)
        return 0;
    if (strcmp(key, "mpi.init_ns") == 0)
        p->init_ns = sqlite3_column_int64(st, 2);
    else if (strcmp(key, "mpi.finalize_ns") == 0)
        p->fin_ns = sqlite3_column_int64(st, 2);
    else if (strcmp(key, "mpi.p2p_auto_ns") == 0)
        p->auto_ns = sqlite3_column_int64(st, 2);
    else
        p->auto_rate = sqlite3_column_int64(st, 2);
    return 0;
}

static uint64_t mpi_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static int mpi_drops_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    struct mpi_proc *p = mpi_proc_find(m, sqlite3_column_int64(st, 0));
    struct mpi_op *o = mpi_op_find(m, sqlite3_column_int64(st, 1), NULL);

    if (p == NULL || o == NULL || o->aux)
        return 0;
    p->dropped_calls = mpi_add(p->dropped_calls, mpi_sub(mpi_u64(st, 2), mpi_u64(st, 4)));
    p->counted_calls = mpi_add(p->counted_calls, mpi_u64(st, 4));
    p->unsent_ns = mpi_add(p->unsent_ns, mpi_u64(st, 3));
    return 0;
}

/* The processes (the report's: a rank filter's view), their init/finalize times and drops. */
static int mpi_procs(struct mpi *m)
{
    int rc = sql_each(m->db, "SELECT id, rank FROM processes ORDER BY id", mpi_procs_row, m);

    if (rc == 0 && m->whole)
        rc = sql_each(m->db,
                      "SELECT process_id, key, value FROM meta WHERE key IN ('mpi.init_ns',"
                      " 'mpi.finalize_ns', 'mpi.p2p_auto_ns', 'mpi.p2p_auto_rate')",
                      mpi_meta_row, m);
    if (rc == 0 && m->whole && sql_has_table(m->db, "process_op_drops"))
        rc = sql_each(m->db,
                      "SELECT process_id, op_id, calls, total_ns, counted FROM process_op_drops",
                      mpi_drops_row, m);
    return rc != 0 ? mpi_fail(m, rc, "processes") : 0;
}

static int mpi_count_cmp(const void *a, const void *b)
{
    const struct mpi_count *x = a, *y = b;

    if (x->proc != y->proc)
        return x->proc < y->proc ? -1 : 1;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    if (x->has_comm != y->has_comm)
        return x->has_comm ? 1 : -1;
    if (x->has_comm && x->comm != y->comm)
        return (uint64_t)x->comm < (uint64_t)y->comm ? -1 : 1;
    return x->peer < y->peer ? -1 : x->peer > y->peer;
}

/* One mpi.p2p.<i> row; a value not of its form, or of an op without entries, is ignored. */
static int mpi_counts_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    struct mpi_proc *p = mpi_proc_find(m, sqlite3_column_int64(st, 0));
    const char *value = (const char *)sqlite3_column_text(st, 1);
    char name[64], comm[24];
    unsigned long long calls, ns, bytes, id = 0;
    long long peer;
    struct mpi_count c = {0}, *grown;
    int end = -1;

    if (p == NULL || value == NULL ||
        sscanf(value, "%63[^\t]\t%23[^\t]\t%lld\t%llu\t%llu\t%llu%n", name, comm, &peer, &calls,
               &ns, &bytes, &end) != 6 ||
        end < 0 || value[end] != '\0')
        return 0;
    c.has_comm = strcmp(comm, "-") != 0;
    if (c.has_comm && (strlen(comm) != 16 || strspn(comm, "0123456789abcdef") != 16 ||
                       sscanf(comm, "%16llx", &id) != 1))
        return 0;
    for (c.op = 0; c.op < m->n_ops && strcmp(m->ops[c.op].name, name) != 0; c.op++)
        ;
    if (c.op == m->n_ops)
        return 0;
    c.proc = p->id;
    c.comm = (int64_t)id;
    c.peer = peer >= 0 ? peer : -1;
    c.calls = calls;
    c.ns = ns;
    c.bytes = bytes;
    if ((grown = util_grow(m->counts, &m->cap_counts, m->n_counts, sizeof(*m->counts))) == NULL)
        return mpi_oom(m, "point-to-point counts");
    m->counts = grown;
    m->counts[m->n_counts++] = c;
    p->has_counts = true;
    return 0;
}

/* The per-peer counts of TRACECTL_MPI_P2P=counters: whole runs', so without a filter but ranks. */
static int mpi_counts(struct mpi *m)
{
    int rc = sql_each(m->db, "SELECT process_id, value FROM meta WHERE key GLOB 'mpi.p2p.[0-9]*'",
                      mpi_counts_row, m);

    if (rc != 0)
        return mpi_fail(m, rc, "point-to-point counts");
    mpi_sort(m->counts, m->n_counts, sizeof(*m->counts), mpi_count_cmp);
    return 0;
}

/*
 * One mpi.p2p_sizes.<op> row: the calls of op the process counted without
 * entries, "<bucket>:<calls>:<ns>" space-separated, into op's histogram (the
 * entries add theirs in the scan). A token not of that form ends the row;
 * an op without entries, a "tcmpi.*" op or a completion call's is ignored.
 */
static int mpi_sizes_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    const struct mpi_proc *p = mpi_proc_find(m, sqlite3_column_int64(st, 0));
    const char *key = (const char *)sqlite3_column_text(st, 1);
    const char *value = (const char *)sqlite3_column_text(st, 2);
    struct mpi_op *o = NULL;
    unsigned b;
    unsigned long long calls, ns;
    int used;

    if (p == NULL || key == NULL || value == NULL)
        return 0;
    for (size_t i = 0; i < m->n_ops && o == NULL; i++)
        if (strcmp(m->ops[i].name, key + strlen("mpi.p2p_sizes.")) == 0)
            o = &m->ops[i];
    if (o == NULL || o->aux || o->kind == KIND_WAIT)
        return 0;
    while (sscanf(value, " %u:%llu:%llu%n", &b, &calls, &ns, &used) == 3 && b < HIST_BUCKETS) {
        o->calls[b] = mpi_add(o->calls[b], calls);
        o->ns[b] = mpi_add(o->ns[b], ns);
        o->sized |= b > 0 && calls > 0;
        value += used;
    }
    return 0;
}

/* The counted calls' message sizes (TRACECTL_MPI_P2P): whole runs', so without a filter but ranks.
 */
static int mpi_sizes(struct mpi *m)
{
    int rc =
        sql_each(m->db, "SELECT process_id, key, value FROM meta WHERE key GLOB 'mpi.p2p_sizes.*'",
                 mpi_sizes_row, m);

    return rc != 0 ? mpi_fail(m, rc, "point-to-point sizes") : 0;
}

/* ---- the scan ------------------------------------------------------------------ */

static size_t mpi_map_slot(const struct mpi_map *mp, uint64_t key)
{
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - mp->bits));

    while (mp->idx[i] != 0 && mp->keys[i] != key)
        i = (i + 1) & (mp->cap - 1);
    return i;
}

/* The index key maps to, or SIZE_MAX. */
static size_t mpi_map_get(const struct mpi_map *mp, uint64_t key)
{
    size_t i;

    if (mp->cap == 0)
        return SIZE_MAX;
    i = mpi_map_slot(mp, key);
    return mp->idx[i] != 0 ? mp->idx[i] - 1 : SIZE_MAX;
}

/* Maps key (not there yet) to index, the map's n-th key. false: no memory. */
static bool mpi_map_put(struct mpi_map *mp, uint64_t key, size_t index, size_t n)
{
    if (2 * (n + 1) > mp->cap) {
        struct mpi_map big = {.bits = mp->cap == 0 ? 6 : mp->bits + 1};

        big.cap = (size_t)1 << big.bits;
        big.keys = calloc(big.cap, sizeof(*big.keys));
        big.idx = calloc(big.cap, sizeof(*big.idx));
        if (big.keys == NULL || big.idx == NULL) {
            free(big.keys);
            free(big.idx);
            return false;
        }
        for (size_t k = 0; k < mp->cap; k++)
            if (mp->idx[k] != 0) {
                size_t slot = mpi_map_slot(&big, mp->keys[k]);
                big.keys[slot] = mp->keys[k];
                big.idx[slot] = mp->idx[k];
            }
        free(mp->keys);
        free(mp->idx);
        *mp = big;
    }
    {
        size_t slot = mpi_map_slot(mp, key);
        mp->keys[slot] = key;
        mp->idx[slot] = index + 1;
    }
    return true;
}

static void mpi_map_free(struct mpi_map *mp)
{
    free(mp->keys);
    free(mp->idx);
}

static unsigned mpi_bucket(uint64_t bytes)
{
    unsigned k = 0;

    while (bytes != 0) {
        bytes >>= 1;
        k++;
    }
    return k; /* 0 for 0; else bytes in [2^(k-1), 2^k) */
}

static struct mpi_comm *mpi_comm_get(struct mpi *m, int64_t id)
{
    size_t i = mpi_map_get(&m->comm_map, (uint64_t)id);
    struct mpi_comm *c;

    if (i != SIZE_MAX)
        return &m->comms[i];
    if ((c = util_grow(m->comms, &m->cap_comms, m->n_comms, sizeof(*m->comms))) == NULL)
        return NULL;
    m->comms = c;
    if (!mpi_map_put(&m->comm_map, (uint64_t)id, m->n_comms, m->n_comms))
        return NULL;
    c = &m->comms[m->n_comms++];
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->first = UINT64_MAX;
    return c;
}
static bool mpi_comm_member(struct mpi_comm *c, int64_t rank)
{
    size_t i = 0;
    int64_t *grown;

    while (i < c->n_members && c->members[i] < rank)
        i++;
    if (i < c->n_members && c->members[i] == rank)
        return true;
    if ((grown = realloc(c->members, (c->n_members + 1) * sizeof(*grown))) == NULL)
        return false;
    c->members = grown;
    memmove(&c->members[i + 1], &c->members[i], (c->n_members - i) * sizeof(*grown));
    c->members[i] = rank;
    c->n_members++;
    return true;
}

static bool mpi_comm_add_op(struct mpi_comm *c, size_t op, uint64_t calls, uint64_t ns,
                            uint64_t bytes)
{
    struct mpi_comm_op *grown;
    size_t i = 0;

    while (i < c->n_ops && c->ops[i].op != op)
        i++;
    if (i == c->n_ops) {
        if ((grown = realloc(c->ops, (c->n_ops + 1) * sizeof(*grown))) == NULL)
            return false;
        c->ops = grown;
        memset(&c->ops[c->n_ops++], 0, sizeof(*grown));
        c->ops[i].op = op;
    }
    c->ops[i].calls = mpi_add(c->ops[i].calls, calls);
    c->ops[i].ns = mpi_add(c->ops[i].ns, ns);
    c->ops[i].bytes = mpi_add(c->ops[i].bytes, bytes);
    return true;
}

/* Counts one call of process p on communicator id (a row of the scan). */
static int mpi_count_comm(struct mpi *m, const struct mpi_proc *p, size_t op, sqlite3_stmt *st,
                          int64_t id)
{
    uint64_t bytes = mpi_u64(st, 2), ns = mpi_u64(st, 3), start = mpi_u64(st, 4);
    struct mpi_comm *c = mpi_comm_get(m, id);

    if (c == NULL)
        return mpi_oom(m, "communicators");
    if (mpi_u64(st, 6) > c->size)
        c->size = mpi_u64(st, 6);
    if (start < c->first)
        c->first = start;
    c->calls = mpi_add(c->calls, 1);
    c->ns = mpi_add(c->ns, ns);
    c->bytes = mpi_add(c->bytes, bytes);
    if (p->rank >= 0 && c->last_proc != p->id) {
        if (!mpi_comm_member(c, p->rank))
            return mpi_oom(m, "communicators");
        c->last_proc = p->id;
    }
    return mpi_comm_add_op(c, op, 1, ns, bytes) ? 0 : mpi_oom(m, "communicators");
}

/* Counts one message from rank from to rank to: a send's, else a receive's. */
static int mpi_count_pair(struct mpi *m, int64_t from, int64_t to, bool send, uint64_t msgs,
                          uint64_t bytes)
{
    uint64_t key = (uint64_t)from << 32 | (uint64_t)to;
    size_t i = mpi_map_get(&m->pair_map, key);
    struct mpi_pair *p;

    if (i == SIZE_MAX) {
        if ((p = util_grow(m->pairs, &m->cap_pairs, m->n_pairs, sizeof(*m->pairs))) == NULL)
            return mpi_oom(m, "point to point");
        m->pairs = p;
        if (!mpi_map_put(&m->pair_map, key, m->n_pairs, m->n_pairs))
            return mpi_oom(m, "point to point");
        i = m->n_pairs++;
        memset(&m->pairs[i], 0, sizeof(*p));
        m->pairs[i].from = from;
        m->pairs[i].to = to;
    }
    p = &m->pairs[i];
    if (send) {
        p->msgs = mpi_add(p->msgs, msgs);
        p->bytes = mpi_add(p->bytes, bytes);
    } else {
        p->rmsgs = mpi_add(p->rmsgs, msgs);
        p->rbytes = mpi_add(p->rbytes, bytes);
    }
    return 0;
}

/* An entry of process p that its per-peer counts include (the first call of their key). */
static void mpi_count_seen(struct mpi *m, const struct mpi_proc *p, size_t op, sqlite3_stmt *st)
{
    struct mpi_count key = {.proc = p->id,
                            .op = op,
                            .has_comm = sqlite3_column_type(st, 5) != SQLITE_NULL,
                            .comm = sqlite3_column_int64(st, 5),
                            .peer = sqlite3_column_int64(st, 7)};
    struct mpi_count *c;

    if (sqlite3_column_type(st, 7) == SQLITE_NULL || key.peer < 0)
        key.peer = -1;
    c = m->n_counts > 0 ? bsearch(&key, m->counts, m->n_counts, sizeof(*m->counts), mpi_count_cmp)
                        : NULL;
    if (c == NULL)
        return;
    c->seen_calls = mpi_add(c->seen_calls, 1);
    c->seen_ns = mpi_add(c->seen_ns, mpi_u64(st, 3));
    c->seen_bytes = mpi_add(c->seen_bytes, mpi_u64(st, 2));
}

/*
 * One entry of an MPI op: process_id, op_id, mem_bytes, dur_ns, start_ns,
 * and its ext comm, comm_size, peer (NULL: none).
 */
static int mpi_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    int64_t pid = sqlite3_column_int64(st, 0), peer = sqlite3_column_int64(st, 7);
    struct mpi_proc *p = m->last_proc;
    uint64_t bytes = mpi_u64(st, 2), ns = mpi_u64(st, 3), start = mpi_u64(st, 4);
    unsigned b = mpi_bucket(bytes);
    struct mpi_op *o;
    size_t op;
    int rc;

    if (p == NULL || p->id != pid)
        m->last_proc = p = mpi_proc_find(m, pid);
    if (p == NULL || (o = mpi_op_find(m, sqlite3_column_int64(st, 1), &op)) == NULL)
        return 0; /* a process the filter left out */
    if (p->has_counts)
        mpi_count_seen(m, p, op, st);
    if (!o->aux) {
        p->any = true;
        p->calls = mpi_add(p->calls, 1);
        p->ns = mpi_add(p->ns, ns);
        if (start < p->first)
            p->first = start;
        if (mpi_add(start, ns) > p->last)
            p->last = mpi_add(start, ns);
        if (o->kind != KIND_WAIT) {
            o->calls[b] = mpi_add(o->calls[b], 1);
            o->ns[b] = mpi_add(o->ns[b], ns);
            o->sized |= bytes > 0;
        }
        if (sqlite3_column_type(st, 5) != SQLITE_NULL &&
            (rc = mpi_count_comm(m, p, op, st, sqlite3_column_int64(st, 5))) < 0)
            return rc;
    }
    /* a negative peer is none (an Irecv from MPI_ANY_SOURCE never completed) */
    if ((o->kind == KIND_SEND || o->kind == KIND_RECV) &&
        sqlite3_column_type(st, 7) != SQLITE_NULL && peer >= 0 && peer <= INT32_MAX &&
        p->rank >= 0 && p->rank <= INT32_MAX)
        return o->kind == KIND_SEND ? mpi_count_pair(m, p->rank, peer, true, 1, bytes)
                                    : mpi_count_pair(m, peer, p->rank, false, 1, bytes);
    return 0;
}

/*
 * After the scan: the counted calls (a count's calls but its entries) into
 * their communicator and pair (their process's counted_calls are its
 * ops_dropped rows' counted).
 */
static int mpi_counts_add(struct mpi *m)
{
    for (size_t i = 0; i < m->n_counts; i++) {
        const struct mpi_count *c = &m->counts[i];
        const struct mpi_op *o = &m->ops[c->op];
        struct mpi_proc *p = mpi_proc_find(m, c->proc);
        uint64_t calls = mpi_sub(c->calls, c->seen_calls), ns = mpi_sub(c->ns, c->seen_ns);
        uint64_t bytes = mpi_sub(c->bytes, c->seen_bytes);
        struct mpi_comm *k;
        int rc;

        if (p == NULL || calls == 0)
            continue;
        if (!o->aux) {
            if (c->has_comm) {
                if ((k = mpi_comm_get(m, c->comm)) == NULL ||
                    (p->rank >= 0 && !mpi_comm_member(k, p->rank)) ||
                    !mpi_comm_add_op(k, c->op, calls, ns, bytes))
                    return mpi_oom(m, "communicators");
                k->calls = mpi_add(k->calls, calls);
                k->ns = mpi_add(k->ns, ns);
                k->bytes = mpi_add(k->bytes, bytes);
            }
        }
        if ((o->kind == KIND_SEND || o->kind == KIND_RECV) && c->peer >= 0 &&
            c->peer <= INT32_MAX && p->rank >= 0 && p->rank <= INT32_MAX &&
            (rc = o->kind == KIND_SEND
                      ? mpi_count_pair(m, p->rank, c->peer, true, calls, bytes)
                      : mpi_count_pair(m, c->peer, p->rank, false, calls, bytes)) < 0)
            return rc;
    }
    return 0;
}

/* The one scan of the MPI ops' entries, with their ext maps when the file has them. */
static int mpi_scan(struct mpi *m)
{
    bool ext = sql_has_table(m->db, "entry_ext");
    char *sql;
    int rc;

    if (ext)
        sql = sqlite3_mprintf("SELECT e.process_id, e.op_id, e.mem_bytes, e.dur_ns, e.start_ns,"
                              " x.comm, x.comm_size, x.peer FROM entries e"
                              " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid"
                              " WHERE +e.op_id IN %s",
                              m->in_list);
    else
        sql = sqlite3_mprintf("SELECT process_id, op_id, mem_bytes, dur_ns, start_ns, NULL, NULL,"
                              " NULL FROM entries WHERE +op_id IN %s",
                              m->in_list);
    if (sql == NULL)
        return mpi_oom(m, "entries");
    rc = sql_each(m->db, sql, mpi_row, m);
    sqlite3_free(sql);
    return rc != 0 ? mpi_fail(m, rc, "entries") : 0;
}

static int mpi_comm_by_first(const void *a, const void *b)
{
    const struct mpi_comm *x = a, *y = b;

    if ((x->id == 0) != (y->id == 0))
        return x->id == 0 ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int mpi_comm_by_time(const void *a, const void *b)
{
    const struct mpi_comm *x = a, *y = b;

    if (x->ns != y->ns)
        return x->ns > y->ns ? -1 : 1;
    return mpi_comm_by_first(a, b);
}

static int mpi_comm_op_by_time(const void *a, const void *b)
{
    const struct mpi_comm_op *x = a, *y = b;

    if (x->ns != y->ns)
        return x->ns > y->ns ? -1 : 1;
    return x->op < y->op ? -1 : x->op > y->op; /* ops are by name */
}

static void mpi_comm_free(struct mpi_comm *c)
{
    free(c->members);
    free(c->ops);
}

static int mpi_names_row(sqlite3_stmt *st, void *arg)
{
    struct mpi *m = arg;
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *value = (const char *)sqlite3_column_text(st, 1);
    struct mpi_name *n;
    uint64_t id, parent;
    char label[48], *end;

    if (key == NULL || value == NULL || strlen(key) != 9 + 16)
        return 0;
    id = strtoull(key + 9, &end, 16);
    if (*end != '\0' || sscanf(value, "%47s %" SCNx64, label, &parent) != 2)
        return 0; /* not the interposer's: no name */
    if ((n = util_grow(m->names, &m->cap_names, m->n_names, sizeof(*m->names))) == NULL)
        return mpi_oom(m, "communicator names");
    m->names = n;
    n = &m->names[m->n_names++];
    n->id = (int64_t)id;
    n->parent = (int64_t)parent;
    memcpy(n->label, label, sizeof(label));
    return 0;
}

static const struct mpi_name *mpi_name_find(const struct mpi *m, int64_t id)
{
    for (size_t i = 0; i < m->n_names; i++)
        if (m->names[i].id == id)
            return &m->names[i];
    return NULL;
}

/*
 * The name of communicator id into buf: WORLD; the labels from WORLD down
 * ("split#2/dup#1") when its members named it and its ancestors; else
 * comm#N (ordinal, N > 0: by first use), "?" for an ancestor not named.
 */
static void mpi_comm_name(const struct mpi *m, int64_t id, unsigned ordinal, char *buf, size_t size)
{
    const struct mpi_name *chain[16];
    size_t n = 0, len = 0;

    for (const struct mpi_name *x = mpi_name_find(m, id); x != NULL && n < 16;
         x = x->parent != 0 ? mpi_name_find(m, x->parent) : NULL)
        chain[n++] = x;
    if (id == 0) {
        snprintf(buf, size, "WORLD");
        return;
    }
    if (n == 0) {
        snprintf(buf, size, "comm#%u", ordinal);
        return;
    }
    buf[0] = '\0';
    if (chain[n - 1]->parent != 0) /* an ancestor not named (or a chain too long) */
        len = (size_t)snprintf(buf, size, "?/");
    for (size_t i = n; i-- > 0 && len < size;)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", chain[i]->label, i > 0 ? "/" : "");
}

/* After the scan: the names the members gave, comm#N for the others, the reply's order. */
static int mpi_comms_finish(struct mpi *m)
{
    int rc = sql_each(m->db,
                      "SELECT DISTINCT key, value FROM meta WHERE key GLOB 'mpi.comm.*'"
                      " ORDER BY key, value",
                      mpi_names_row, m);

    if (rc != 0)
        return mpi_fail(m, rc, "communicators");
    mpi_sort(m->comms, m->n_comms, sizeof(*m->comms), mpi_comm_by_first);
    for (size_t i = 0, k = 1; i < m->n_comms; i++)
        if (m->comms[i].id != 0 && mpi_name_find(m, m->comms[i].id) == NULL)
            m->comms[i].ordinal = (unsigned)k++;
    mpi_sort(m->comms, m->n_comms, sizeof(*m->comms), mpi_comm_by_time);
    for (size_t i = 0; i < m->n_comms; i++)
        mpi_sort(m->comms[i].ops, m->comms[i].n_ops, sizeof(*m->comms[i].ops), mpi_comm_op_by_time);
    if (m->n_comms > MPI_REPORT_MAX_COMMS) {
        for (size_t i = MPI_REPORT_MAX_COMMS; i < m->n_comms; i++)
            mpi_comm_free(&m->comms[i]);
        m->n_comms = MPI_REPORT_MAX_COMMS;
    }
    return 0;
}

/* ---- point to point: the reply's orders -------------------------------------- */

/*
 * The largest first (bytes sent, then received), so that a reply cut at
 * MPI_REPORT_MAX_PAIRS keeps the heaviest pairs; then by (from, to).
 */
static int mpi_pair_by_bytes(const void *a, const void *b)
{
    const struct mpi_pair *x = a, *y = b;

    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->rbytes != y->rbytes)
        return x->rbytes > y->rbytes ? -1 : 1;
    return 0;
}

static int mpi_pair_by_ranks(const void *a, const void *b)
{
    const struct mpi_pair *x = a, *y = b;

    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return x->to < y->to ? -1 : x->to > y->to;
}

/* ---- packing -------------------------------------------------------------------- */

static int mpi_str(msgpack_packer *pk, const char *s)
{
    return proto_pack_str(pk, s) < 0 ? -1 : 0;
}

static int mpi_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return mpi_str(pk, k) || msgpack_pack_uint64(pk, v);
}

static int mpi_kv_f64(msgpack_packer *pk, const char *k, double v)
{
    return mpi_str(pk, k) || msgpack_pack_double(pk, v);
}

static int mpi_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    return mpi_str(pk, k) || mpi_str(pk, v);
}

static int mpi_kv_rank(msgpack_packer *pk, const char *k, int64_t rank)
{
    return mpi_str(pk, k) || (rank < 0 ? msgpack_pack_nil(pk) : msgpack_pack_int64(pk, rank));
}

static double mpi_share(uint64_t part, uint64_t whole)
{
    return whole > 0 ? (double)part / (double)whole : 0.0;
}

/* A rank's wall time: from MPI_Init to MPI_Finalize when both were said, else its entries'. */
static uint64_t mpi_wall(const struct mpi *m, const struct mpi_proc *p, bool *from_init)
{
    *from_init = m->whole && p->init_ns >= 0 && p->fin_ns >= p->init_ns;
    if (*from_init)
        return (uint64_t)(p->fin_ns - p->init_ns);
    return p->last > p->first ? p->last - p->first : 0;
}

static int mpi_pack_ranks(struct mpi *m, msgpack_packer *pk)
{
    uint64_t wall_sum = 0, ns_sum = 0, calls_sum = 0, dropped_sum = 0, counted_sum = 0;
    size_t n = 0;
    bool from_init;

    for (size_t i = 0; i < m->n_procs; i++)
        n += m->procs[i].any || m->procs[i].dropped_calls > 0 || m->procs[i].counted_calls > 0;
    if (mpi_str(pk, "ranks") || msgpack_pack_array(pk, n))
        return -1;
    for (size_t i = 0; i < m->n_procs; i++) {
        const struct mpi_proc *p = &m->procs[i];
        uint64_t wall = mpi_wall(m, p, &from_init), ns = mpi_add(p->ns, p->unsent_ns);
        uint64_t dropped = p->dropped_calls, unsent = mpi_add(dropped, p->counted_calls);

        if (!p->any && unsent == 0)
            continue;
        wall_sum = mpi_add(wall_sum, wall);
        ns_sum = mpi_add(ns_sum, ns);
        calls_sum = mpi_add(calls_sum, mpi_add(p->calls, unsent));
        dropped_sum = mpi_add(dropped_sum, dropped);
        counted_sum = mpi_add(counted_sum, p->counted_calls);
        if (msgpack_pack_map(pk, 10) || mpi_kv_rank(pk, "rank", p->rank) ||
            mpi_kv_u64(pk, "wall_ns", wall) || mpi_kv_u64(pk, "mpi_ns", ns) ||
            mpi_kv_u64(pk, "app_ns", wall > ns ? wall - ns : 0) ||
            mpi_kv_f64(pk, "mpi_share", mpi_share(ns, wall)) ||
            mpi_kv_u64(pk, "calls", mpi_add(p->calls, unsent)) ||
            mpi_kv_u64(pk, "dropped_calls", dropped) ||
            mpi_kv_u64(pk, "counted_calls", p->counted_calls) ||
            mpi_kv_str(pk, "wall_from", from_init ? "init_finalize" : "entries") ||
            mpi_str(pk, "p2p_auto_ns") ||
            (p->auto_ns >= 0 && p->init_ns >= 0 && p->auto_ns >= p->init_ns
                 ? msgpack_pack_uint64(pk, (uint64_t)(p->auto_ns - p->init_ns))
                 : msgpack_pack_nil(pk)))
            return -1;
    }
    return mpi_str(pk, "total") || msgpack_pack_map(pk, 7) || mpi_kv_u64(pk, "wall_ns", wall_sum) ||
           mpi_kv_u64(pk, "mpi_ns", ns_sum) ||
           mpi_kv_u64(pk, "app_ns", wall_sum > ns_sum ? wall_sum - ns_sum : 0) ||
           mpi_kv_f64(pk, "mpi_share", mpi_share(ns_sum, wall_sum)) ||
           mpi_kv_u64(pk, "calls", calls_sum) || mpi_kv_u64(pk, "dropped_calls", dropped_sum) ||
           mpi_kv_u64(pk, "counted_calls", counted_sum);
}

static int mpi_pack_comms(struct mpi *m, msgpack_packer *pk)
{
    char name[256];

    if (mpi_str(pk, "comms") || msgpack_pack_array(pk, m->n_comms))
        return -1;
    for (size_t i = 0; i < m->n_comms; i++) {
        const struct mpi_comm *c = &m->comms[i];

        mpi_comm_name(m, c->id, c->ordinal, name, sizeof(name));
        if (msgpack_pack_map(pk, 8) || mpi_kv_str(pk, "name", name) ||
            mpi_kv_u64(pk, "id", (uint64_t)c->id) ||
            mpi_kv_u64(pk, "size", c->size > 0 ? c->size : c->n_members) ||
            mpi_str(pk, "members") || msgpack_pack_array(pk, c->n_members))
            return -1;
        for (size_t k = 0; k < c->n_members; k++)
            if (msgpack_pack_int64(pk, c->members[k]))
                return -1;
        if (mpi_kv_u64(pk, "calls", c->calls) || mpi_kv_u64(pk, "total_ns", c->ns) ||
            mpi_kv_u64(pk, "bytes", c->bytes) || mpi_str(pk, "ops") ||
            msgpack_pack_array(pk, c->n_ops))
            return -1;
        for (size_t k = 0; k < c->n_ops; k++) {
            const struct mpi_comm_op *o = &c->ops[k];
            if (msgpack_pack_map(pk, 4) || mpi_kv_str(pk, "op", m->ops[o->op].name) ||
                mpi_kv_u64(pk, "calls", o->calls) || mpi_kv_u64(pk, "total_ns", o->ns) ||
                mpi_kv_u64(pk, "bytes", o->bytes))
                return -1;
        }
    }
    return 0;
}

static int mpi_pack_sizes(struct mpi *m, msgpack_packer *pk)
{
    size_t n = 0;

    for (size_t i = 0; i < m->n_ops; i++)
        n += m->ops[i].sized;
    if (mpi_str(pk, "sizes") || msgpack_pack_array(pk, n))
        return -1;
    for (size_t i = 0; i < m->n_ops; i++) {
        const struct mpi_op *o = &m->ops[i];
        size_t buckets = 0;

        if (!o->sized)
            continue;
        for (unsigned b = 0; b < HIST_BUCKETS; b++)
            buckets += o->calls[b] > 0;
        if (msgpack_pack_map(pk, 2) || mpi_kv_str(pk, "op", o->name) || mpi_str(pk, "buckets") ||
            msgpack_pack_array(pk, buckets))
            return -1;
        for (unsigned b = 0; b < HIST_BUCKETS; b++) {
            uint64_t lo = b == 0 ? 0 : (uint64_t)1 << (b - 1);
            uint64_t hi = b == 0 ? 0 : b == 64 ? UINT64_MAX : ((uint64_t)1 << b) - 1;

            if (o->calls[b] == 0)
                continue;
            if (msgpack_pack_map(pk, 4) || mpi_kv_u64(pk, "min_bytes", lo) ||
                mpi_kv_u64(pk, "max_bytes", hi) || mpi_kv_u64(pk, "calls", o->calls[b]) ||
                mpi_kv_u64(pk, "total_ns", o->ns[b]))
                return -1;
        }
    }
    return 0;
}

static int mpi_pack_p2p(struct mpi *m, msgpack_packer *pk)
{
    uint64_t msgs = 0, bytes = 0, rmsgs = 0, rbytes = 0, differ = 0;
    size_t total = m->n_pairs;

    for (size_t i = 0; i < m->n_pairs; i++) {
        const struct mpi_pair *p = &m->pairs[i];
        msgs = mpi_add(msgs, p->msgs);
        bytes = mpi_add(bytes, p->bytes);
        rmsgs = mpi_add(rmsgs, p->rmsgs);
        rbytes = mpi_add(rbytes, p->rbytes);
        differ += p->msgs != p->rmsgs || p->bytes != p->rbytes;
    }
    if (m->n_pairs > MPI_REPORT_MAX_PAIRS) {
        mpi_sort(m->pairs, m->n_pairs, sizeof(*m->pairs), mpi_pair_by_bytes);
        m->n_pairs = MPI_REPORT_MAX_PAIRS;
    }
    mpi_sort(m->pairs, m->n_pairs, sizeof(*m->pairs), mpi_pair_by_ranks);
    if (mpi_str(pk, "p2p") || msgpack_pack_map(pk, 7) || mpi_kv_u64(pk, "messages", msgs) ||
        mpi_kv_u64(pk, "bytes", bytes) || mpi_kv_u64(pk, "recv_messages", rmsgs) ||
        mpi_kv_u64(pk, "recv_bytes", rbytes) || mpi_kv_u64(pk, "pairs_differ", differ) ||
        mpi_kv_u64(pk, "pairs_total", total) || mpi_str(pk, "pairs") ||
        msgpack_pack_array(pk, m->n_pairs))
        return -1;
    for (size_t i = 0; i < m->n_pairs; i++) {
        const struct mpi_pair *p = &m->pairs[i];
        if (msgpack_pack_map(pk, 6) || mpi_kv_rank(pk, "from", p->from) ||
            mpi_kv_rank(pk, "to", p->to) || mpi_kv_u64(pk, "messages", p->msgs) ||
            mpi_kv_u64(pk, "bytes", p->bytes) || mpi_kv_u64(pk, "recv_messages", p->rmsgs) ||
            mpi_kv_u64(pk, "recv_bytes", p->rbytes))
            return -1;
    }
    return 0;
}

static int mpi_proc_by_rank(const void *a, const void *b)
{
    const struct mpi_proc *x = a, *y = b;

    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1; /* no rank (-1) first */
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Packs the section; m->procs are then by rank (mpi_proc_find no longer works). */
static int mpi_pack(struct mpi *m, msgpack_packer *pk)
{
    uint64_t dropped = 0, counted = 0, mpi_ns = 0;
    int64_t rate = -1;

    mpi_sort(m->procs, m->n_procs, sizeof(*m->procs), mpi_proc_by_rank);
    for (size_t i = 0; i < m->n_procs; i++) {
        dropped = mpi_add(dropped, m->procs[i].dropped_calls);
        counted = mpi_add(counted, m->procs[i].counted_calls);
        mpi_ns = mpi_add(mpi_ns, mpi_add(m->procs[i].ns, m->procs[i].unsent_ns));
    }
    for (size_t i = 0; i < m->n_procs; i++)
        if (m->procs[i].auto_rate > 0)
            rate = m->procs[i].auto_rate;
    if (mpi_str(pk, "mpi") || msgpack_pack_map(pk, 9) || mpi_kv_u64(pk, "dropped_calls", dropped) ||
        mpi_kv_u64(pk, "counted_calls", counted) || mpi_str(pk, "p2p_auto_rate") ||
        (rate > 0 ? msgpack_pack_uint64(pk, (uint64_t)rate) : msgpack_pack_nil(pk)) ||
        mpi_pack_ranks(m, pk) || mpi_pack_comms(m, pk) || mpi_pack_sizes(m, pk) ||
        mpi_pack_p2p(m, pk) || mpi_str(pk, "callsites") ||
        (m->whole ? mpi_sites_pack(pk, &m->sites, mpi_ns) < 0 : msgpack_pack_nil(pk) != 0))
        return mpi_oom(m, "packing");
    return 0;
}

/* ---- the section --------------------------------------------------------------- */

static void mpi_free(struct mpi *m)
{
    for (size_t i = 0; i < m->n_ops; i++)
        free(m->ops[i].name);
    free(m->ops);
    sqlite3_free(m->in_list);
    free(m->procs);
    for (size_t i = 0; i < m->n_comms; i++)
        mpi_comm_free(&m->comms[i]);
    free(m->comms);
    free(m->pairs);
    free(m->names);
    free(m->counts);
    mpi_sites_free(&m->sites);
    mpi_map_free(&m->comm_map);
    mpi_map_free(&m->pair_map);
}

/* See mpi_report.h. */
int mpi_report(sqlite3 *db, bool whole, msgpack_packer *pk, char *err, size_t errlen)
{
    struct mpi m = {.db = db, .whole = whole, .err = err, .errlen = err != NULL ? errlen : 0};
    bool any = false;
    int rc = mpi_ops(&m);

    if (rc == 0 && m.n_ops > 0)
        rc = mpi_procs(&m);
    if (rc == 0 && m.n_ops > 0 && whole)
        rc = mpi_counts(&m);
    if (rc == 0 && m.n_ops > 0 && whole)
        rc = mpi_sizes(&m);
    if (rc == 0 && m.n_ops > 0)
        rc = mpi_scan(&m);
    if (rc == 0 && m.n_counts > 0)
        rc = mpi_counts_add(&m);
    for (size_t i = 0; rc == 0 && i < m.n_procs; i++)
        any |= m.procs[i].any || m.procs[i].dropped_calls > 0 || m.procs[i].counted_calls > 0;
    if (rc == 0 && any)
        rc = mpi_comms_finish(&m);
    if (rc == 0 && any && whole)
        rc = mpi_sites_read(db, mpi_rank_of, &m, &m.sites, err, m.errlen);
    if (rc == 0 && any)
        rc = mpi_pack(&m, pk);
    mpi_free(&m);
    return rc < 0 ? rc : any;
}
