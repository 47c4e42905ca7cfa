/*
 * tcmpi_wrap.c — the MPI_* functions of libtracectl-mpi. Each calls its
 * PMPI_* twin with the caller's arguments untouched and returns what it
 * returned; around it, two clock reads and one tc_record_ext. What an entry
 * counts (README.md "MPI jobs"):
 * - elements: the call's count; mem: count × the datatype's size. For calls
 *   with a send and a receive side, a collective counts this rank's own share
 *   (what it sends; what it receives where it sends nothing: Scatter's
 *   non-roots, MPI_IN_PLACE), Alltoall(v/w) everything it sends, Sendrecv
 *   both sides. A v-form sums its counts. Barrier, Probe: 0.
 * - completion calls (Wait*, Test*): elements = the number of requests; the
 *   comm and seq of the non-blocking collectives they completed (tcmpi_wait).
 * The calls that make communicators are not recorded: they name the new
 * communicator from its parent (tcmpi.c, DESIGN).
 * Arguments MPI calls "not significant" at a rank are never read there, and
 * nothing is derived from a call that failed (the entry then has its time
 * only): the datatype or communicator may not be valid.
 */
#include <stdlib.h>
#include <string.h>

#include "tcmpi.h"

/* Elements and bytes of an entry. */
struct amount {
    uint64_t n, bytes;
};

static struct amount amt(int count, MPI_Datatype type)
{
    return (struct amount){count > 0 ? (uint64_t)count : 0, tcmpi_bytes(count, type)};
}

static struct amount amt_sum(const int *counts, int n, MPI_Datatype type)
{
    uint64_t sum = tcmpi_sum(counts, n);

    return (struct amount){sum, sum * tcmpi_bytes(1, type)};
}

static struct amount amt_times(struct amount a, int n)
{
    uint64_t k = n > 0 ? (uint64_t)n : 0;

    return (struct amount){a.n * k, a.bytes * k};
}

/* The communicator of a call that returned rc, or NULL when it failed. */
static struct tcmpi_comm *comm_after(int rc, MPI_Comm comm)
{
    return rc == MPI_SUCCESS ? tcmpi_comm(comm) : NULL;
}

/* A collective whose amount is count × type at every rank. */
void tcmpi_rec_count(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int count,
                     MPI_Datatype type, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = k != NULL ? amt(count, type) : (struct amount){0, 0};

    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

/* Gather(v): what this rank sends; the root of an intracommunicator with MPI_IN_PLACE, its
 * own block; the root of an intercommunicator (MPI_ROOT), all it receives. */
void tcmpi_rec_gather(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                      const void *sbuf, int scount, MPI_Datatype stype, int rcount,
                      const int *rcounts, MPI_Datatype rtype, int root, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    if (k == NULL || (k->inter && root == MPI_PROC_NULL))
        ;
    else if (k->inter && root == MPI_ROOT)
        a = rcounts != NULL ? amt_sum(rcounts, k->peers, rtype)
                            : amt_times(amt(rcount, rtype), k->peers);
    else if (!k->inter && k->rank == root && sbuf == MPI_IN_PLACE)
        a = rcounts != NULL ? amt(rcounts[root], rtype) : amt(rcount, rtype);
    else
        a = amt(scount, stype);
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

/* Scatter(v): what this rank receives; the root with MPI_IN_PLACE, its own block; the root of
 * an intercommunicator, all it sends. */
void tcmpi_rec_scatter(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                       int scount, const int *scounts, MPI_Datatype stype, const void *rbuf,
                       int rcount, MPI_Datatype rtype, int root, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    if (k == NULL || (k->inter && root == MPI_PROC_NULL))
        ;
    else if (k->inter && root == MPI_ROOT)
        a = scounts != NULL ? amt_sum(scounts, k->peers, stype)
                            : amt_times(amt(scount, stype), k->peers);
    else if (!k->inter && k->rank == root && rbuf == MPI_IN_PLACE)
        a = scounts != NULL ? amt(scounts[root], stype) : amt(scount, stype);
    else
        a = amt(rcount, rtype);
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

/* Allgather(v): what this rank sends (with MPI_IN_PLACE: its block of the receive buffer). */
void tcmpi_rec_allgather(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                         const void *sbuf, int scount, MPI_Datatype stype, int rcount,
                         const int *rcounts, MPI_Datatype rtype, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    if (k != NULL && sbuf == MPI_IN_PLACE)
        a = rcounts != NULL ? amt(rcounts[k->rank], rtype) : amt(rcount, rtype);
    else if (k != NULL)
        a = amt(scount, stype);
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

/* Alltoall(v): everything this rank sends (MPI_IN_PLACE: the receive side, which it sends). */
void tcmpi_rec_alltoall(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                        const void *sbuf, int scount, const int *scounts, MPI_Datatype stype,
                        int rcount, const int *rcounts, MPI_Datatype rtype, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    if (k != NULL && sbuf == MPI_IN_PLACE)
        a = rcounts != NULL ? amt_sum(rcounts, k->peers, rtype)
                            : amt_times(amt(rcount, rtype), k->peers);
    else if (k != NULL)
        a = scounts != NULL ? amt_sum(scounts, k->peers, stype)
                            : amt_times(amt(scount, stype), k->peers);
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

static void coll_alltoallw(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                           const void *sbuf, const int *scounts, const MPI_Datatype *stypes,
                           const int *rcounts, const MPI_Datatype *rtypes, const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    const int *counts = sbuf == MPI_IN_PLACE ? rcounts : scounts;
    const MPI_Datatype *types = sbuf == MPI_IN_PLACE ? rtypes : stypes;
    struct amount a = {0, 0};

    for (int i = 0; k != NULL && i < k->peers; i++) {
        struct amount b = amt(counts[i], types[i]);
        a.n += b.n, a.bytes += b.bytes;
    }
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

/* Reduce_scatter(_block): the vector reduced, n blocks (MPI_IN_PLACE: the same length). */
static void coll_reduce_scatter(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                                int rcount, const int *rcounts, MPI_Datatype type,
                                const MPI_Request *req)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    /* The local group's blocks: an intercommunicator's input is scattered there too. */
    if (k != NULL)
        a = rcounts != NULL ? amt_sum(rcounts, k->size, type)
                            : amt_times(amt(rcount, type), k->size);
    tcmpi_coll(c, op, t0, t1, k, a.n, a.bytes, req);
}

void tcmpi_rec_p2p(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int peer,
                   int tag, int count, MPI_Datatype type, int times)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = k != NULL ? amt_times(amt(count, type), times) : (struct amount){0, 0};

    tcmpi_p2p(c, op, t0, t1, k, peer, tag, a.n, a.bytes);
}

void tcmpi_rec_recv(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm, int source,
                    int tag, int count, MPI_Datatype type, const MPI_Status *st)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount a = {0, 0};

    if (k != NULL) {
        uint64_t size = tcmpi_bytes(1, type); /* one lookup for both */

        a = (struct amount){count > 0 ? (uint64_t)count : 0,
                            count > 0 ? (uint64_t)count * size : 0};
        tcmpi_received(st, size, &source, &tag, &a.n, &a.bytes);
    }
    tcmpi_p2p(c, op, t0, t1, k, source, tag, a.n, a.bytes);
}

void tcmpi_rec_sendrecv(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                        int scount, MPI_Datatype stype, int dest, int stag, int rcount,
                        MPI_Datatype rtype, int source, int rtag, const MPI_Status *st)
{
    uint64_t t1 = tcmpi_now();
    struct tcmpi_comm *k = comm_after(rc, comm);
    struct amount s = {0, 0}, r = {0, 0};

    if (k != NULL)
        s = amt(scount, stype), r = amt(rcount, rtype);
    tcmpi_sendrecv(c, op, t0, t1, k, dest, stag, s.n, s.bytes, source, rtag, r.n, r.bytes,
                   k != NULL ? tcmpi_bytes(1, rtype) : 0, st);
}

/*
 * The requests a completion call was given, as they were before it: a copy
 * only while some request is remembered (one atomic load otherwise), on the
 * stack up to BEFORE_STACK; and then, when the caller ignores the statuses,
 * ours in their place (the actual source and size of a completed Irecv are
 * in them).
 */
#define BEFORE_STACK 64

struct before {
    MPI_Request *r; /* NULL: no copy */
    MPI_Request stack[BEFORE_STACK];
    MPI_Status *st; /* our statuses, or NULL */
    MPI_Status st_stack[BEFORE_STACK];
};

static void before_take(struct before *b, const MPI_Request *reqs, int n)
{
    b->r = NULL;
    b->st = NULL;
    if (n <= 0 || reqs == NULL || !tcmpi_req_any())
        return;
    b->r = n <= BEFORE_STACK ? b->stack : malloc((size_t)n * sizeof(*reqs));
    if (b->r != NULL)
        memcpy(b->r, reqs, (size_t)n * sizeof(*reqs));
}

/* The statuses to give MPI for n requests: the caller's, or ours in place of
 * MPI_STATUS(ES)_IGNORE while a copy was taken. */
static MPI_Status *before_status(struct before *b, MPI_Status *statuses, int n)
{
    if (b->r == NULL || n <= 0 ||
        (statuses != MPI_STATUS_IGNORE && statuses != MPI_STATUSES_IGNORE))
        return statuses;
    b->st = n <= BEFORE_STACK ? b->st_stack : malloc((size_t)n * sizeof(*b->st));
    return b->st != NULL ? b->st : statuses;
}

/* After a completion call over n requests, reqs as they are now, the statuses in st (kind:
 * TCMPI_ST_*; index: TCMPI_ST_ONE's; indices, outcount: TCMPI_ST_SOME's). */
static void wait_done(tc_client *c, enum tcmpi_op op, uint64_t t0, int n, struct before *b,
                      const MPI_Request *reqs, int rc, const MPI_Status *st, int kind, int index,
                      const int *indices, int outcount)
{
    struct tcmpi_status s = {rc == MPI_SUCCESS ? st : NULL, kind, index, outcount, indices};

    if (st == MPI_STATUS_IGNORE || (kind == TCMPI_ST_SOME && rc != MPI_SUCCESS))
        s.st = NULL;
    if (c != NULL || b->r != NULL)
        tcmpi_wait(c, op, t0, tcmpi_now(), n, b->r, reqs, &s);
    if (b->r != b->stack)
        free(b->r);
    if (b->st != b->st_stack)
        free(b->st);
}

/* Probe and Iprobe: the actual source and tag when found (a message was, and st holds it). */
static void rec_probe(tc_client *c, enum tcmpi_op op, uint64_t t0, int rc, MPI_Comm comm,
                      int source, int tag, const MPI_Status *st, int found)
{
    if (found)
        source = st->MPI_SOURCE, tag = st->MPI_TAG;
    tcmpi_rec_p2p(c, op, t0, rc, comm, source, tag, 0, MPI_DATATYPE_NULL, 1);
}

void tcmpi_made(int rc, MPI_Comm parent, MPI_Comm newcomm, const char *kind)
{
    struct tcmpi_origin o;
    uint64_t base;

    if (rc == MPI_SUCCESS && tcmpi_tracking() && tcmpi_comm_base(parent, &base, &o)) {
        tcmpi_comm_born(newcomm, base);
        tcmpi_comm_name(newcomm, &o, kind);
    }
}

/*
 * The wrappers' common shapes: name is the MPI function's name without MPI_,
 * params its parameter list, args the PMPI twin's argument list; record
 * (done, for a completion call) what the call records, an expression on c,
 * t0, rc and the arguments, evaluated after the call only when tracing.
 * Macros, not functions, because TCMPI_BEGIN takes the call's site from
 * __builtin_return_address(0): it must expand in the function the program
 * called (tcmpi_fort.c does the same for the Fortran bindings).
 */

/* A call recorded after it returns. */
#define WRAP(name, params, args, record)                                                           \
    int MPI_##name params                                                                          \
    {                                                                                              \
        TCMPI_BEGIN;                                                                               \
        int rc = PMPI_##name args;                                                                 \
                                                                                                   \
        if (c != NULL)                                                                             \
            record;                                                                                \
        return rc;                                                                                 \
    }

/* A collective, MPI_<name>, and its non-blocking form, MPI_<iname> (one more param, req; op
 * TCMPI_I<UC>), recorded by rec(c, op, t0, rc, comm, <amount>, req), req NULL for the first. */
#define UNPAREN(...) __VA_ARGS__
#define WRAP_COLL(name, iname, UC, params, args, rec, amount)                                      \
    WRAP(name, params, args, rec(c, TCMPI_##UC, t0, rc, comm, UNPAREN amount, NULL))               \
    WRAP(iname, (UNPAREN params, MPI_Request * req), (UNPAREN args, req),                          \
         rec(c, TCMPI_I##UC, t0, rc, comm, UNPAREN amount, req))

/* The parameters several collectives share: the reductions (Allreduce, Scan, Exscan), Gather
 * and Scatter, Allgather and Alltoall. */
#define REDUCTION_PARAMS                                                                           \
    (const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op o, MPI_Comm comm)
#define REDUCTION_ARGS (sbuf, rbuf, count, type, o, comm)
#define ROOTED_PARAMS                                                                              \
    (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount, MPI_Datatype rtype, \
     int root, MPI_Comm comm)
#define ROOTED_ARGS (sbuf, scount, stype, rbuf, rcount, rtype, root, comm)
#define ALL_PARAMS                                                                                 \
    (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount, MPI_Datatype rtype, \
     MPI_Comm comm)
#define ALL_ARGS (sbuf, scount, stype, rbuf, rcount, rtype, comm)

/* A call that fills a status (its param named status): st is the caller's, or ours in place of
 * MPI_STATUS_IGNORE while tracing. */
#define WRAP_STATUS(name, params, args, record)                                                    \
    int MPI_##name params                                                                          \
    {                                                                                              \
        MPI_Status own;                                                                            \
        TCMPI_BEGIN;                                                                               \
        MPI_Status *st = c != NULL && status == MPI_STATUS_IGNORE ? &own : status;                 \
        int rc = PMPI_##name args;                                                                 \
                                                                                                   \
        if (c != NULL)                                                                             \
            record;                                                                                \
        return rc;                                                                                 \
    }

/* A blocking send and its non-blocking form (op TCMPI_<UC>), recorded at the call. */
#define WRAP_SEND(name, UC)                                                                        \
    WRAP(name, (const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm),  \
         (buf, count, type, dest, tag, comm),                                                      \
         tcmpi_rec_p2p(c, TCMPI_##UC, t0, rc, comm, dest, tag, count, type, 1))
#define WRAP_ISEND(name, UC)                                                                       \
    int MPI_##name(const void *buf, int count, MPI_Datatype type, int dest, int tag,               \
                   MPI_Comm comm, MPI_Request *req)                                                \
    {                                                                                              \
        TCMPI_BEGIN;                                                                               \
        int rc = PMPI_##name(buf, count, type, dest, tag, comm, req);                              \
                                                                                                   \
        if (c != NULL)                                                                             \
            tcmpi_rec_p2p(c, TCMPI_##UC, t0, rc, comm, dest, tag, count, type, 1);                 \
        tcmpi_req_forget(*req); /* a handle MPI gives again: no collective's now */                \
        return rc;                                                                                 \
    }

/* A completion call over n requests reqs, giving MPI nst statuses in place of the caller's
 * statuses; the rest, wait_done's from kind on. */
#define WRAP_WAIT(name, UC, params, reqs, n, statuses, nst, args, ...)                             \
    int MPI_##name params                                                                          \
    {                                                                                              \
        struct before b;                                                                           \
        before_take(&b, reqs, n);                                                                  \
        MPI_Status *st = before_status(&b, statuses, nst);                                         \
        TCMPI_BEGIN;                                                                               \
        int rc = PMPI_##name args;                                                                 \
                                                                                                   \
        wait_done(c, TCMPI_##UC, t0, n, &b, reqs, rc, st, __VA_ARGS__);                            \
        return rc;                                                                                 \
    }

/* A call that makes *newcomm collectively over comm: named kind. */
#define WRAP_MADE(name, params, args, kind)                                                        \
    int MPI_##name params                                                                          \
    {                                                                                              \
        int rc = PMPI_##name args;                                                                 \
                                                                                                   \
        tcmpi_made(rc, comm, *newcomm, kind);                                                      \
        return rc;                                                                                 \
    }

/* A call that frees *comm: a freed handle may come back for a new communicator, forget it. */
#define WRAP_COMM_FREE(name)                                                                       \
    int MPI_##name(MPI_Comm *comm)                                                                 \
    {                                                                                              \
        MPI_Comm old = *comm;                                                                      \
        int rc = PMPI_##name(comm);                                                                \
                                                                                                   \
        if (rc == MPI_SUCCESS)                                                                     \
            tcmpi_comm_forget(old);                                                                \
        return rc;                                                                                 \
    }

/* ---- start and end ----------------------------------------------------------------- */

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv), level = MPI_THREAD_SINGLE;

    if (rc == MPI_SUCCESS) {
        PMPI_Query_thread(&level);
        tcmpi_start(level);
    }
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);

    if (rc == MPI_SUCCESS)
        tcmpi_start(*provided);
    return rc;
}

int MPI_Finalize(void)
{
    int rc;

    tcmpi_finalizing();
    rc = PMPI_Finalize();
    tcmpi_stop();
    return rc;
}

/* Level TCMPI_PCONTROL_STEP ends a step; every level goes on to MPI (and a tool behind us). */
int MPI_Pcontrol(const int level, ...)
{
    tcmpi_pcontrol(level);
    return PMPI_Pcontrol(level);
}

/* ---- communicators: named where they are made ------------------------------------ */

WRAP_MADE(Comm_dup, (MPI_Comm comm, MPI_Comm *newcomm), (comm, newcomm), "dup")
WRAP_MADE(Comm_dup_with_info, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm),
          (comm, info, newcomm), "dup")

/* The new communicator is there once the request completes: tcmpi_wait names it then. */
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *req)
{
    int rc = PMPI_Comm_idup(comm, newcomm, req);
    uint64_t base;

    if (rc == MPI_SUCCESS && tcmpi_tracking() && tcmpi_comm_base(comm, &base, NULL))
        tcmpi_req_idup(*req, newcomm, base);
    return rc;
}

WRAP_MADE(Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm),
          (comm, color, key, newcomm), "split")
WRAP_MADE(Comm_split_type, (MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *newcomm),
          (comm, type, key, info, newcomm), "split_type")
WRAP_MADE(Comm_create, (MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm), (comm, group, newcomm),
          "create")

/* Collective over group's members only: named from what they share (parent, tag, group). */
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_create_group(comm, group, tag, newcomm);
    struct tcmpi_comm *p;

    if (rc == MPI_SUCCESS && tcmpi_tracking() && (p = tcmpi_comm(comm)) != NULL)
        tcmpi_comm_born(*newcomm, tcmpi_comm_base_keyed(tcmpi_mix(tcmpi_mix(p->id, (uint64_t)tag),
                                                                  tcmpi_group_hash(group))));
    return rc;
}

/* Collective over two local communicators: named from the two groups and the tag. */
int MPI_Intercomm_create(MPI_Comm local, int local_leader, MPI_Comm peer, int remote_leader,
                         int tag, MPI_Comm *newcomm)
{
    int rc = PMPI_Intercomm_create(local, local_leader, peer, remote_leader, tag, newcomm);
    MPI_Group lg, rg;
    uint64_t hl, hr;

    if (rc != MPI_SUCCESS || !tcmpi_tracking() || *newcomm == MPI_COMM_NULL)
        return rc;
    if (PMPI_Comm_group(*newcomm, &lg) != MPI_SUCCESS)
        return rc;
    hl = tcmpi_group_hash(lg);
    PMPI_Group_free(&lg);
    if (PMPI_Comm_remote_group(*newcomm, &rg) != MPI_SUCCESS)
        return rc;
    hr = tcmpi_group_hash(rg);
    PMPI_Group_free(&rg);
    /* both sides: the two groups in a fixed order */
    tcmpi_comm_born(*newcomm, tcmpi_comm_base_keyed(tcmpi_mix(
                                  tcmpi_mix((uint64_t)tag, hl < hr ? hl : hr), hl < hr ? hr : hl)));
    return rc;
}

WRAP_MADE(Intercomm_merge, (MPI_Comm comm, int high, MPI_Comm *newcomm), (comm, high, newcomm),
          "merge")
WRAP_MADE(Cart_create,
          (MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
           MPI_Comm *newcomm),
          (comm, ndims, dims, periods, reorder, newcomm), "cart")
WRAP_MADE(Cart_sub, (MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm),
          (comm, remain_dims, newcomm), "cart_sub")
WRAP_MADE(Graph_create,
          (MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder,
           MPI_Comm *newcomm),
          (comm, nnodes, index, edges, reorder, newcomm), "graph")
WRAP_MADE(Dist_graph_create,
          (MPI_Comm comm, int n, const int sources[], const int degrees[], const int destinations[],
           const int weights[], MPI_Info info, int reorder, MPI_Comm *newcomm),
          (comm, n, sources, degrees, destinations, weights, info, reorder, newcomm), "dist_graph")
WRAP_MADE(Dist_graph_create_adjacent,
          (MPI_Comm comm, int indegree, const int sources[], const int sourceweights[],
           int outdegree, const int destinations[], const int destweights[], MPI_Info info,
           int reorder, MPI_Comm *newcomm),
          (comm, indegree, sources, sourceweights, outdegree, destinations, destweights, info,
           reorder, newcomm),
          "dist_graph")

WRAP_COMM_FREE(Comm_free)
WRAP_COMM_FREE(Comm_disconnect)

/* ---- collectives ----------------------------------------------------------------- */

WRAP_COLL(Barrier, Ibarrier, BARRIER, (MPI_Comm comm), (comm), tcmpi_rec_count,
          (0, MPI_DATATYPE_NULL))
WRAP_COLL(Bcast, Ibcast, BCAST, (void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm),
          (buf, count, type, root, comm), tcmpi_rec_count, (count, type))
WRAP_COLL(Reduce, Ireduce, REDUCE,
          (const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op o, int root,
           MPI_Comm comm),
          (sbuf, rbuf, count, type, o, root, comm), tcmpi_rec_count, (count, type))
WRAP_COLL(Allreduce, Iallreduce, ALLREDUCE, REDUCTION_PARAMS, REDUCTION_ARGS, tcmpi_rec_count,
          (count, type))
WRAP_COLL(Scan, Iscan, SCAN, REDUCTION_PARAMS, REDUCTION_ARGS, tcmpi_rec_count, (count, type))
WRAP_COLL(Exscan, Iexscan, EXSCAN, REDUCTION_PARAMS, REDUCTION_ARGS, tcmpi_rec_count, (count, type))

WRAP_COLL(Gather, Igather, GATHER, ROOTED_PARAMS, ROOTED_ARGS, tcmpi_rec_gather,
          (sbuf, scount, stype, rcount, NULL, rtype, root))
WRAP_COLL(Gatherv, Igatherv, GATHERV,
          (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, const int rcounts[],
           const int displs[], MPI_Datatype rtype, int root, MPI_Comm comm),
          (sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm), tcmpi_rec_gather,
          (sbuf, scount, stype, 0, rcounts, rtype, root))
WRAP_COLL(Scatter, Iscatter, SCATTER, ROOTED_PARAMS, ROOTED_ARGS, tcmpi_rec_scatter,
          (scount, NULL, stype, rbuf, rcount, rtype, root))
WRAP_COLL(Scatterv, Iscatterv, SCATTERV,
          (const void *sbuf, const int scounts[], const int displs[], MPI_Datatype stype,
           void *rbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm),
          (sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm), tcmpi_rec_scatter,
          (0, scounts, stype, rbuf, rcount, rtype, root))

WRAP_COLL(Allgather, Iallgather, ALLGATHER, ALL_PARAMS, ALL_ARGS, tcmpi_rec_allgather,
          (sbuf, scount, stype, rcount, NULL, rtype))
WRAP_COLL(Allgatherv, Iallgatherv, ALLGATHERV,
          (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, const int rcounts[],
           const int displs[], MPI_Datatype rtype, MPI_Comm comm),
          (sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm), tcmpi_rec_allgather,
          (sbuf, scount, stype, 0, rcounts, rtype))
WRAP_COLL(Alltoall, Ialltoall, ALLTOALL, ALL_PARAMS, ALL_ARGS, tcmpi_rec_alltoall,
          (sbuf, scount, NULL, stype, rcount, NULL, rtype))
WRAP_COLL(Alltoallv, Ialltoallv, ALLTOALLV,
          (const void *sbuf, const int scounts[], const int sdispls[], MPI_Datatype stype,
           void *rbuf, const int rcounts[], const int rdispls[], MPI_Datatype rtype, MPI_Comm comm),
          (sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm), tcmpi_rec_alltoall,
          (sbuf, 0, scounts, stype, 0, rcounts, rtype))
WRAP_COLL(Alltoallw, Ialltoallw, ALLTOALLW,
          (const void *sbuf, const int scounts[], const int sdispls[], const MPI_Datatype stypes[],
           void *rbuf, const int rcounts[], const int rdispls[], const MPI_Datatype rtypes[],
           MPI_Comm comm),
          (sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes, comm), coll_alltoallw,
          (sbuf, scounts, stypes, rcounts, rtypes))

WRAP_COLL(Reduce_scatter, Ireduce_scatter, REDUCE_SCATTER,
          (const void *sbuf, void *rbuf, const int rcounts[], MPI_Datatype type, MPI_Op o,
           MPI_Comm comm),
          (sbuf, rbuf, rcounts, type, o, comm), coll_reduce_scatter, (0, rcounts, type))
WRAP_COLL(Reduce_scatter_block, Ireduce_scatter_block, REDUCE_SCATTER_BLOCK,
          (const void *sbuf, void *rbuf, int rcount, MPI_Datatype type, MPI_Op o, MPI_Comm comm),
          (sbuf, rbuf, rcount, type, o, comm), coll_reduce_scatter, (rcount, NULL, type))

/* ---- point to point ------------------------------------------------------------- */

WRAP_SEND(Send, SEND)
WRAP_SEND(Ssend, SSEND)
WRAP_SEND(Bsend, BSEND)
WRAP_SEND(Rsend, RSEND)
WRAP_ISEND(Isend, ISEND)
WRAP_ISEND(Issend, ISSEND)
WRAP_ISEND(Ibsend, IBSEND)
WRAP_ISEND(Irsend, IRSEND)

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    TCMPI_BEGIN;
    int rc = PMPI_Irecv(buf, count, type, source, tag, comm, req);

    if (c != NULL)
        tcmpi_irecv(c, t0, rc, comm, source, tag, count, type, *req); /* recorded at completion */
    else
        tcmpi_req_forget(*req); /* a handle MPI gives again */
    return rc;
}

/*
 * Recv and Probe see the actual source and tag in the status: with
 * MPI_STATUS_IGNORE the call gets one of ours (which MPI may fill at no
 * cost to the caller; the caller's never changes).
 */
WRAP_STATUS(Recv,
            (void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status),
            (buf, count, type, source, tag, comm, st),
            tcmpi_rec_recv(c, TCMPI_RECV, t0, rc, comm, source, tag, count, type, st))
WRAP_STATUS(Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status),
            (source, tag, comm, st),
            rec_probe(c, TCMPI_PROBE, t0, rc, comm, source, tag, st, rc == MPI_SUCCESS))
WRAP_STATUS(Iprobe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status),
            (source, tag, comm, flag, st),
            rec_probe(c, TCMPI_IPROBE, t0, rc, comm, source, tag, st, rc == MPI_SUCCESS && *flag))

/* Sendrecv(_replace): two entries, the send side and the receive side (tcmpi_sendrecv); the
 * status gives what arrived (with MPI_STATUS_IGNORE, ours). */
WRAP_STATUS(Sendrecv,
            (const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
             int rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm,
             MPI_Status *status),
            (sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, st),
            tcmpi_rec_sendrecv(c, TCMPI_SENDRECV, t0, rc, comm, scount, stype, dest, stag, rcount,
                               rtype, source, rtag, st))
WRAP_STATUS(Sendrecv_replace,
            (void *buf, int count, MPI_Datatype type, int dest, int stag, int source, int rtag,
             MPI_Comm comm, MPI_Status *status),
            (buf, count, type, dest, stag, source, rtag, comm, st),
            tcmpi_rec_sendrecv(c, TCMPI_SENDRECV_REPLACE, t0, rc, comm, count, type, dest, stag,
                               count, type, source, rtag, st))

/* ---- completion ----------------------------------------------------------------------- */

WRAP_WAIT(Wait, WAIT, (MPI_Request * req, MPI_Status *status), req, 1, status, 1, (req, st),
          TCMPI_ST_ONE, 0, NULL, 0)
WRAP_WAIT(Waitall, WAITALL, (int count, MPI_Request reqs[], MPI_Status statuses[]), reqs, count,
          statuses, count, (count, reqs, st), TCMPI_ST_EACH, 0, NULL, 0)
WRAP_WAIT(Waitany, WAITANY, (int count, MPI_Request reqs[], int *index, MPI_Status *status), reqs,
          count, status, 1, (count, reqs, index, st), TCMPI_ST_ONE, *index, NULL, 0)
WRAP_WAIT(Waitsome, WAITSOME,
          (int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]),
          reqs, incount, statuses, incount, (incount, reqs, outcount, indices, st), TCMPI_ST_SOME,
          0, indices, *outcount)
WRAP_WAIT(Test, TEST, (MPI_Request * req, int *flag, MPI_Status *status), req, 1, status, 1,
          (req, flag, st), TCMPI_ST_ONE, 0, NULL, 0)
WRAP_WAIT(Testall, TESTALL, (int count, MPI_Request reqs[], int *flag, MPI_Status statuses[]), reqs,
          count, statuses, count, (count, reqs, flag, st), TCMPI_ST_EACH, 0, NULL, 0)
WRAP_WAIT(Testany, TESTANY,
          (int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status), reqs, count,
          status, 1, (count, reqs, index, flag, st), TCMPI_ST_ONE, *flag ? *index : -1, NULL, 0)
WRAP_WAIT(Testsome, TESTSOME,
          (int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]),
          reqs, incount, statuses, incount, (incount, reqs, outcount, indices, st), TCMPI_ST_SOME,
          0, indices, *outcount)

/* A request freed without completion: it is no collective's any more. */
int MPI_Request_free(MPI_Request *req)
{
    MPI_Request old = *req;
    int rc = PMPI_Request_free(req);

    if (rc == MPI_SUCCESS)
        tcmpi_req_forget(old);
    return rc;
}
