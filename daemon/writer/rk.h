/*
 * rk — the rank aggregates' state (struct ranks) and what it holds, shared by
 * the files that keep them: ranks.c (the writer's API, ranks.h), rkdelta.c
 * (the deltas of the open transaction and their caches), rkexpose.c (exposed
 * communication), rkcover.c (the union of top-level entries), rkcoll.c (collective matching),
 * rkwrite.c (writing the deltas), rkstate.c (the state saved between commits), rkschema.c (the
 * tables). Nothing outside them includes it.
 *
 * Everything here is the writer thread's (or `classify`'s worker's, on a
 * struct ranks of its own): none of it is thread-safe. The functions of
 * these files return 0 or a negative errno, SQLite's codes mapped by
 * sql_errno() where they come back.
 */
#ifndef TRACECTLD_RK_H
#define TRACECTLD_RK_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

#include "proto.h"
#include "ranks.h"
#include "rkmap.h"
#include "rksql.h"

#define RANKS_CAP ((uint64_t)INT64_MAX)

/* a + b, saturating at INT64_MAX (the tables' integers) */
static inline uint64_t rk_sat(uint64_t a, uint64_t b)
{
    return a > RANKS_CAP - b ? RANKS_CAP : a + b;
}

/* -1, 0 or 1 as a is below, equal to or above b: the sorts' comparisons */
static inline int rk_cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static inline int rk_cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

/* r->coll_ok: not a collective, a blocking one, a non-blocking one (MPI_I...) */
enum { RK_COLL_NO, RK_COLL_BLOCKING, RK_COLL_NB };

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
    uint64_t covered;  /* the union of its top-level entries (rkcover.c) */
    uint64_t cpu_wait; /* run-queue delay its producer reported (meta PROTO_META_CPU_WAIT) */
};

/* rk_coll and rk_coll_ranks deltas (process_id -1 for rk_coll) */
struct rk_collsum {
    uint32_t op_id;
    int64_t process_id;
    uint64_t step, instances, partial, skew, skew_max, waited, last_count;
};

/* An arrival's flags: a non-blocking collective's (its wait is in its completion call, which
 * the instance waits for), and whether that completion came (wait_b..wait_e, its interval). */
#define RK_A_NB   1u
#define RK_A_DONE 2u

struct rk_arrival {
    int64_t process_id;
    uint64_t step, start, dur;
    uint64_t wait_b, wait_e; /* RK_A_DONE: the completion call's start and end */
    uint32_t flags;
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
    size_t n_saved; /* arrivals in rk_open from the first (a completion lowers it: write again) */
    bool in_table;  /* rows of it are in rk_open: closing it deletes them */
    uint64_t procs; /* bit process_id % 64 of each arrival: most duplicate checks end here */
    uint32_t owed;  /* arrivals RK_A_NB without RK_A_DONE: their completion calls to come */
    uint32_t slot;  /* its slot in r->islot: closing it needs no look-up */
    uint32_t older1, newer1; /* its neighbours in the order of opening: r->inst index + 1 */
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

struct rk_iv {
    uint64_t b, e;
};

/* The merged intervals of a process's top-level entries in one step (rkcover.c). */
struct rk_cover {
    uint64_t step;
    /* the last interval's end when an entry after it may be appended as is (the slot used,
     * an interval in it, room for another, under RANKS_PENDING), else UINT64_MAX: the one
     * test of rkcover_entry's common case (rkcover_retail keeps it) */
    uint64_t tail;
    bool used;
    struct rk_iv *iv; /* sorted, disjoint */
    size_t n, cap;
    size_t lim;        /* min(cap, RANKS_PENDING): room for the common case's appends */
    uint64_t drop_end; /* latest end of an interval already dropped */
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
 * (open addressing, linear probing, r->n_islot slots of inst index + 1, 0 empty, at most
 * half full: it doubles from RK_ISLOTS as instances open; deletion shifts back, so no
 * tombstones), and the order they opened in, a list through the instances (r->oldest1 to
 * r->newest1): the oldest is closed, partial, when RANKS_OPEN are open and another opens.
 */
#define RK_ISLOTS 4096

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

/*
 * The processes, in the order they were first seen: r->procs. Their ids
 * are dense in a live session (1, 2, ...) but any integer in a file, so an
 * id below RK_PSLOTS finds its process through r->pslot (index + 1, grown
 * on demand), a larger one through r->proc_idx: memory follows the
 * processes, never the largest id.
 */
#define RK_PSLOTS 65536

struct rk_proc {
    int64_t id;
    uint64_t group;         /* hash of its process_group metadata, 0 none */
    bool replay;            /* an imported file (metadata import.file): entries in file order */
    bool worker;            /* a forked worker of a rank (PROTO_META_WORKER_OF): in no step */
    uint32_t dev1;          /* r->devs index + 1 of its last device */
    struct rk_refs step;    /* the rk_steps deltas of its last steps */
    struct rk_pop *pop;     /* RK_POPS, or NULL until its first collective */
    struct rk_cover *cover; /* RK_WAYS, by step % RK_WAYS; rkcover_none until its first entry */
    uint64_t cover_max_start, cover_disorder; /* as struct rk_dev's, over its top-level entries */
    bool cover_dirty;   /* its intervals changed since the last commit: to save (rkstate.c) */
    bool cover_unsaved; /* more than RK_SAVE_PEND of them at the last commit: not saved */
    /* its last completion call with an ext id (wid): the interval of the tcmpi.completed
     * entries that follow it with that parent */
    uint64_t wid, wid_b, wid_e;
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

/* A delta's key for the radix sort of rkwrite.c: its key packed in 64 bits, its index. */
struct rk_kv {
    uint64_t k;
    size_t i;
};

struct ranks {
    sqlite3 *db;
    uint8_t *cat;     /* by op id: enum proto_cat, 0xff unknown */
    uint8_t *coll_ok; /* by op id: a collective (comm and not point-to-point): RK_COLL_* */
    size_t n_cat;
    struct rk_proc *procs; /* r->n_procs seen */
    size_t n_procs, cap_procs;
    uint32_t *pslot; /* by process id < RK_PSLOTS: r->procs index + 1, 0 none */
    size_t n_pslot;
    struct rkmap proc_idx; /* process id >= RK_PSLOTS -> r->procs index */
    uint64_t world;
    uint64_t late, late_written, opened;
    bool inexact, inexact_written;

    struct rkmap ops_idx, steps_idx, dsteps_idx, coll_idx, occ_idx, dev_idx;
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
    uint32_t *islot; /* n_islot, a power of 2 */
    size_t n_islot;
    uint32_t oldest1, newest1;       /* the open instances' list: r->inst index + 1, 0 none */
    uint64_t capped, capped_written; /* instances closed at RANKS_OPEN (info.ranks_capped) */

    struct rksql_up up_ops, up_dsteps, up_steps, up_coll, up_collr;
    struct rk_kv *kv; /* rkwrite's sort keys: 2 x cap_kv */
    size_t cap_kv;
    void *sorted; /* and its rows in order, cap_sorted bytes */
    size_t cap_sorted;

    /* the state saved at each commit (rk_open, rk_occ, rk_devstate, rk_pend) */
    struct rk_ikey *gone; /* instances closed since the last commit with arrivals in rk_open */
    size_t n_gone, cap_gone;
    struct rk_orow *orow; /* the rk_open rows to write, sorted */
    size_t n_orow, cap_orow;
    bool resync; /* a rollback: rewrite it all */
    uint64_t opened_written;
    int64_t state_written; /* info.ranks_state: 1 saved, 2 some intervals unsaved, 0 absent */
    struct rksql_up ins_open, del_open, up_occ, ins_pend;
    sqlite3_stmt *del_pend, *up_devstate, *clear_open;
};

/* A cache entry, valid when it was made in this transaction (and for key). */
static inline bool rk_ref_ok(const struct ranks *r, const struct rk_ref *c, uint64_t key)
{
    return c->epoch == r->epoch && c->i1 != 0 && c->key == key;
}

#endif
