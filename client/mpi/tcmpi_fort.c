/*
 * tcmpi_fort.c — Open MPI's Fortran bindings in libtracectl-mpi. Open MPI's
 * Fortran layer (libmpi_mpifh: mpif.h and `use mpi`; libmpi_usempif08:
 * `use mpi_f08`) calls PMPI_* directly, so a Fortran program never reaches
 * the MPI_* wrappers of tcmpi_wrap.c: without these it made no session.
 *
 * DESIGN
 * For each call covered (README.md "MPI jobs" lists them), this file defines
 * the names gfortran and other compilers call for mpif.h and `use mpi`
 * (mpi_x_, mpi_x__, mpi_x, MPI_X) and Open MPI's own ompi_x_f, which the
 * mpi_f08 bindings call with the handles' integer values (so one definition
 * covers all three bindings). Each calls the real binding, pmpi_x_ (found
 * once with dlsym: Open MPI's Fortran PMPI names are aliases of its ompi_x_f,
 * so Fortran's sentinels, MPI_IN_PLACE, MPI_STATUS_IGNORE..., are handled
 * there as without us), converts the handles with MPI_*_f2c and records
 * through the same helpers as the C wrappers: the entries are the same ops,
 * with the same amounts, comm, seq and peers as a C program's.
 * libtracectl-mpi does not link libmpi_mpifh: in a C program these names
 * are never called and nothing is looked up.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "tcmpi.h"

/* Open MPI's Fortran sentinels MPI_IN_PLACE, MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE (common
 * blocks in libmpi; gfortran's names). */
extern MPI_Fint mpi_fortran_in_place_, mpi_fortran_status_ignore_, mpi_fortran_statuses_ignore_;

/* The real binding's address: looked up once (a benign race: every thread finds the same). */
static void *real_fn(const char *name, void *_Atomic *cache)
{
    void *f = atomic_load_explicit(cache, memory_order_relaxed);

    if (f == NULL) {
        f = dlsym(RTLD_DEFAULT, name);
        atomic_store_explicit(cache, f, memory_order_relaxed);
    }
    return f;
}

#define ALIAS(name, target)                                                                        \
    extern __typeof__(target) name __attribute__((alias(#target), visibility("default")))

/*
 * FORTRAN(lc, UC, params) { body }: defines ompi_<lc>_f(params) and its
 * aliases; in body, REAL is the real binding (its ierr set to MPI_ERR_INTERN
 * and nothing else done when Open MPI's Fortran library is not there).
 */
#define FORTRAN(lc, UC, params)                                                                    \
    typedef void lc##_fn params;                                                                   \
    __attribute__((visibility("default"))) lc##_fn ompi_##lc##_f;                                  \
    ALIAS(mpi_##lc, ompi_##lc##_f);                                                                \
    ALIAS(mpi_##lc##_, ompi_##lc##_f);                                                             \
    ALIAS(mpi_##lc##__, ompi_##lc##_f);                                                            \
    ALIAS(MPI_##UC, ompi_##lc##_f);                                                                \
    static void *_Atomic lc##_real;                                                                \
    void ompi_##lc##_f params

#define REAL(lc)                                                                                   \
    lc##_fn *real = (lc##_fn *)real_fn("pmpi_" #lc "_", &lc##_real);                               \
    if (real == NULL) {                                                                            \
        *ierr = MPI_ERR_INTERN;                                                                    \
        return;                                                                                    \
    }

#define COMM(f) PMPI_Comm_f2c(*(f))
#define TYPE(f) PMPI_Type_f2c(*(f))

/* A Fortran buffer argument as the C helpers compare it: MPI_IN_PLACE is Fortran's sentinel. */
static const void *buf_c(const void *b)
{
    return b == (const void *)&mpi_fortran_in_place_ ? MPI_IN_PLACE : b;
}

/* The C request a Fortran request handle names now (after a successful call). */
static MPI_Request req_c(const MPI_Fint *f, MPI_Fint ierr, MPI_Request *r)
{
    *r = ierr == MPI_SUCCESS ? PMPI_Request_f2c(*f) : MPI_REQUEST_NULL;
    return *r;
}

/*
 * The wrappers' common shapes, each over FORTRAN(lc, UC, params): args is
 * the real binding's argument list, record what the call records (an
 * expression on c, t0 and the arguments, evaluated after the call only when
 * tracing). Macros, not functions, because TCMPI_BEGIN takes the call's site
 * from __builtin_return_address(0): it must expand in the function the
 * program called.
 */

/* A blocking call. */
#define FORTRAN_REC(lc, UC, params, args, record)                                                  \
    FORTRAN(lc, UC, params)                                                                        \
    {                                                                                              \
        REAL(lc);                                                                                  \
        TCMPI_BEGIN;                                                                               \
                                                                                                   \
        real args;                                                                                 \
        if (c != NULL)                                                                             \
            record;                                                                                \
    }

/* A non-blocking collective (its request param named req): recorded with r, the C request. */
#define FORTRAN_IREC(lc, UC, params, args, record)                                                 \
    FORTRAN(lc, UC, params)                                                                        \
    {                                                                                              \
        MPI_Request r;                                                                             \
        REAL(lc);                                                                                  \
        TCMPI_BEGIN;                                                                               \
                                                                                                   \
        real args;                                                                                 \
        if (c != NULL && req_c(req, *ierr, &r) != MPI_REQUEST_NULL)                                \
            record;                                                                                \
    }

/* The collectives recorded as count x type at every rank (tcmpi_rec_count). */
#define FORTRAN_COUNT(lc, UC, params, args)                                                        \
    FORTRAN_REC(lc, UC, params, args,                                                              \
                tcmpi_rec_count(c, TCMPI_##UC, t0, *ierr, COMM(comm), *count, TYPE(type), NULL))
#define FORTRAN_ICOUNT(lc, UC, params, args)                                                       \
    FORTRAN_IREC(lc, UC, params, args,                                                             \
                 tcmpi_rec_count(c, TCMPI_##UC, t0, *ierr, COMM(comm), *count, TYPE(type), &r))

/* ---- start and end ----------------------------------------------------------------- */

FORTRAN(init, INIT, (MPI_Fint * ierr))
{
    int level = MPI_THREAD_SINGLE;
    REAL(init);

    real(ierr);
    if (*ierr == MPI_SUCCESS) {
        PMPI_Query_thread(&level);
        tcmpi_start(level);
    }
}

FORTRAN(init_thread, INIT_THREAD, (MPI_Fint * required, MPI_Fint *provided, MPI_Fint *ierr))
{
    REAL(init_thread);

    real(required, provided, ierr);
    if (*ierr == MPI_SUCCESS)
        tcmpi_start(*provided);
}

FORTRAN(finalize, FINALIZE, (MPI_Fint * ierr))
{
    REAL(finalize);

    tcmpi_finalizing();
    real(ierr);
    tcmpi_stop();
}

/* MPI_PCONTROL(LEVEL) has no IERROR. */
typedef void pcontrol_fn(MPI_Fint *level);
__attribute__((visibility("default"))) pcontrol_fn ompi_pcontrol_f;
ALIAS(mpi_pcontrol, ompi_pcontrol_f);
ALIAS(mpi_pcontrol_, ompi_pcontrol_f);
ALIAS(mpi_pcontrol__, ompi_pcontrol_f);
ALIAS(MPI_PCONTROL, ompi_pcontrol_f);
static void *_Atomic pcontrol_real;

void ompi_pcontrol_f(MPI_Fint *level)
{
    pcontrol_fn *real = (pcontrol_fn *)real_fn("pmpi_pcontrol_", &pcontrol_real);

    tcmpi_pcontrol(*level);
    if (real != NULL)
        real(level);
}

/* ---- communicators ------------------------------------------------------------------- */

FORTRAN(comm_dup, COMM_DUP, (MPI_Fint * comm, MPI_Fint *newcomm, MPI_Fint *ierr))
{
    REAL(comm_dup);

    real(comm, newcomm, ierr);
    if (*ierr == MPI_SUCCESS)
        tcmpi_made(*ierr, COMM(comm), COMM(newcomm), "dup");
}

FORTRAN(comm_split, COMM_SPLIT,
        (MPI_Fint * comm, MPI_Fint *color, MPI_Fint *key, MPI_Fint *newcomm, MPI_Fint *ierr))
{
    REAL(comm_split);

    real(comm, color, key, newcomm, ierr);
    if (*ierr == MPI_SUCCESS)
        tcmpi_made(*ierr, COMM(comm), COMM(newcomm), "split");
}

FORTRAN(comm_free, COMM_FREE, (MPI_Fint * comm, MPI_Fint *ierr))
{
    MPI_Comm old = COMM(comm);
    REAL(comm_free);

    real(comm, ierr);
    if (*ierr == MPI_SUCCESS)
        tcmpi_comm_forget(old);
}

/* ---- collectives ------------------------------------------------------------------------ */

FORTRAN_REC(barrier, BARRIER, (MPI_Fint * comm, MPI_Fint *ierr), (comm, ierr),
            tcmpi_rec_count(c, TCMPI_BARRIER, t0, *ierr, COMM(comm), 0, MPI_DATATYPE_NULL, NULL))
FORTRAN_IREC(ibarrier, IBARRIER, (MPI_Fint * comm, MPI_Fint *req, MPI_Fint *ierr),
             (comm, req, ierr),
             tcmpi_rec_count(c, TCMPI_IBARRIER, t0, *ierr, COMM(comm), 0, MPI_DATATYPE_NULL, &r))

FORTRAN_COUNT(bcast, BCAST,
              (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
               MPI_Fint *ierr),
              (buf, count, type, root, comm, ierr))
FORTRAN_ICOUNT(ibcast, IBCAST,
               (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
                MPI_Fint *req, MPI_Fint *ierr),
               (buf, count, type, root, comm, req, ierr))
FORTRAN_COUNT(reduce, REDUCE,
              (void *sbuf, void *rbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
               MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
              (sbuf, rbuf, count, type, op, root, comm, ierr))

/* Allreduce, Scan, Exscan: one signature. */
#define REDUCE_PARAMS                                                                              \
    (void *sbuf, void *rbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm,        \
     MPI_Fint *ierr)
#define REDUCE_ARGS (sbuf, rbuf, count, type, op, comm, ierr)
FORTRAN_COUNT(allreduce, ALLREDUCE, REDUCE_PARAMS, REDUCE_ARGS)
FORTRAN_ICOUNT(iallreduce, IALLREDUCE,
               (void *sbuf, void *rbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
                MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr),
               (sbuf, rbuf, count, type, op, comm, req, ierr))
FORTRAN_COUNT(scan, SCAN, REDUCE_PARAMS, REDUCE_ARGS)
FORTRAN_COUNT(exscan, EXSCAN, REDUCE_PARAMS, REDUCE_ARGS)

FORTRAN_REC(gather, GATHER,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcount,
             MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcount, rtype, root, comm, ierr),
            tcmpi_rec_gather(c, TCMPI_GATHER, t0, *ierr, COMM(comm), buf_c(sbuf), *scount,
                             TYPE(stype), *rcount, NULL, TYPE(rtype), *root, NULL))
FORTRAN_REC(gatherv, GATHERV,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcounts,
             MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm, ierr),
            tcmpi_rec_gather(c, TCMPI_GATHERV, t0, *ierr, COMM(comm), buf_c(sbuf), *scount,
                             TYPE(stype), 0, rcounts, TYPE(rtype), *root, NULL))
FORTRAN_REC(scatter, SCATTER,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcount,
             MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcount, rtype, root, comm, ierr),
            tcmpi_rec_scatter(c, TCMPI_SCATTER, t0, *ierr, COMM(comm), *scount, NULL, TYPE(stype),
                              buf_c(rbuf), *rcount, TYPE(rtype), *root, NULL))
FORTRAN_REC(scatterv, SCATTERV,
            (void *sbuf, MPI_Fint *scounts, MPI_Fint *displs, MPI_Fint *stype, void *rbuf,
             MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm, ierr),
            tcmpi_rec_scatter(c, TCMPI_SCATTERV, t0, *ierr, COMM(comm), 0, scounts, TYPE(stype),
                              buf_c(rbuf), *rcount, TYPE(rtype), *root, NULL))
FORTRAN_REC(allgather, ALLGATHER,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcount,
             MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcount, rtype, comm, ierr),
            tcmpi_rec_allgather(c, TCMPI_ALLGATHER, t0, *ierr, COMM(comm), buf_c(sbuf), *scount,
                                TYPE(stype), *rcount, NULL, TYPE(rtype), NULL))
FORTRAN_REC(allgatherv, ALLGATHERV,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcounts,
             MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm, ierr),
            tcmpi_rec_allgather(c, TCMPI_ALLGATHERV, t0, *ierr, COMM(comm), buf_c(sbuf), *scount,
                                TYPE(stype), 0, rcounts, TYPE(rtype), NULL))
FORTRAN_REC(alltoall, ALLTOALL,
            (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, void *rbuf, MPI_Fint *rcount,
             MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scount, stype, rbuf, rcount, rtype, comm, ierr),
            tcmpi_rec_alltoall(c, TCMPI_ALLTOALL, t0, *ierr, COMM(comm), buf_c(sbuf), *scount, NULL,
                               TYPE(stype), *rcount, NULL, TYPE(rtype), NULL))
FORTRAN_REC(alltoallv, ALLTOALLV,
            (void *sbuf, MPI_Fint *scounts, MPI_Fint *sdispls, MPI_Fint *stype, void *rbuf,
             MPI_Fint *rcounts, MPI_Fint *rdispls, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr),
            (sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm, ierr),
            tcmpi_rec_alltoall(c, TCMPI_ALLTOALLV, t0, *ierr, COMM(comm), buf_c(sbuf), 0, scounts,
                               TYPE(stype), 0, rcounts, TYPE(rtype), NULL))

/* ---- point to point ------------------------------------------------------------------- */

/* The blocking sends: one signature. */
#define FORTRAN_SEND(lc, UC)                                                                       \
    FORTRAN_REC(                                                                                   \
        lc, UC,                                                                                    \
        (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag,                \
         MPI_Fint *comm, MPI_Fint *ierr),                                                          \
        (buf, count, type, dest, tag, comm, ierr),                                                 \
        tcmpi_rec_p2p(c, TCMPI_##UC, t0, *ierr, COMM(comm), *dest, *tag, *count, TYPE(type), 1))

/* The non-blocking sends: one signature. */
#define FORTRAN_ISEND(lc, UC)                                                                      \
    FORTRAN(lc, UC,                                                                                \
            (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *peer, MPI_Fint *tag,            \
             MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr))                                       \
    {                                                                                              \
        MPI_Request r;                                                                             \
        REAL(lc);                                                                                  \
        TCMPI_BEGIN;                                                                               \
                                                                                                   \
        real(buf, count, type, peer, tag, comm, req, ierr);                                        \
        if (c != NULL)                                                                             \
            tcmpi_rec_p2p(c, TCMPI_##UC, t0, *ierr, COMM(comm), *peer, *tag, *count, TYPE(type),   \
                          1);                                                                      \
        tcmpi_req_forget(req_c(req, *ierr, &r)); /* a handle MPI gives again */                    \
    }

FORTRAN_SEND(send, SEND)
FORTRAN_SEND(ssend, SSEND)
FORTRAN_SEND(bsend, BSEND)
FORTRAN_SEND(rsend, RSEND)
FORTRAN_ISEND(isend, ISEND)
FORTRAN_ISEND(issend, ISSEND)
FORTRAN_ISEND(ibsend, IBSEND)
FORTRAN_ISEND(irsend, IRSEND)

/* Irecv: recorded at its completion (tcmpi_irecv), with what arrived. */
FORTRAN(irecv, IRECV,
        (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag,
         MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr))
{
    MPI_Request r;
    REAL(irecv);
    TCMPI_BEGIN;

    real(buf, count, type, source, tag, comm, req, ierr);
    req_c(req, *ierr, &r);
    if (c != NULL)
        tcmpi_irecv(c, t0, *ierr, COMM(comm), *source, *tag, *count, TYPE(type), r);
    else
        tcmpi_req_forget(r);
}

/*
 * A Fortran status the call fills: the caller's, or with MPI_STATUS_IGNORE
 * ours (so that the actual source is known; the caller's never changes).
 * *cst: it in C after a successful call, else NULL.
 */
struct fstatus {
    MPI_Fint own[sizeof(MPI_Status) / sizeof(MPI_Fint) + 1];
    MPI_Status c;
};

static bool status_ignored(const MPI_Fint *st)
{
    return st == MPI_F_STATUS_IGNORE || st == &mpi_fortran_status_ignore_;
}

static MPI_Fint *status_arg(struct fstatus *s, MPI_Fint *status, const tc_client *c)
{
    return c != NULL && status_ignored(status) ? s->own : status;
}

static const MPI_Status *status_c(struct fstatus *s, const MPI_Fint *st, MPI_Fint ierr)
{
    if (ierr != MPI_SUCCESS || status_ignored(st) || PMPI_Status_f2c(st, &s->c) != MPI_SUCCESS)
        return NULL;
    return &s->c;
}

/*
 * A call that fills a status (its param named status): MPI is given st, the
 * caller's or ours (status_arg); record may read status_c(&s, st, *ierr).
 */
#define FORTRAN_STATUS(lc, UC, params, args, record)                                               \
    FORTRAN(lc, UC, params)                                                                        \
    {                                                                                              \
        struct fstatus s;                                                                          \
        REAL(lc);                                                                                  \
        TCMPI_BEGIN;                                                                               \
        MPI_Fint *st = status_arg(&s, status, c);                                                  \
                                                                                                   \
        real args;                                                                                 \
        if (c != NULL)                                                                             \
            record;                                                                                \
    }

FORTRAN_STATUS(recv, RECV,
               (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag,
                MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr),
               (buf, count, type, source, tag, comm, st, ierr),
               tcmpi_rec_recv(c, TCMPI_RECV, t0, *ierr, COMM(comm), *source, *tag, *count,
                              TYPE(type), status_c(&s, st, *ierr)))
FORTRAN_STATUS(sendrecv, SENDRECV,
               (void *sbuf, MPI_Fint *scount, MPI_Fint *stype, MPI_Fint *dest, MPI_Fint *stag,
                void *rbuf, MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *source, MPI_Fint *rtag,
                MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr),
               (sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, st, ierr),
               tcmpi_rec_sendrecv(c, TCMPI_SENDRECV, t0, *ierr, COMM(comm), *scount, TYPE(stype),
                                  *dest, *stag, *rcount, TYPE(rtype), *source, *rtag,
                                  status_c(&s, st, *ierr)))
FORTRAN_STATUS(sendrecv_replace, SENDRECV_REPLACE,
               (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *stag,
                MPI_Fint *source, MPI_Fint *rtag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr),
               (buf, count, type, dest, stag, source, rtag, comm, st, ierr),
               tcmpi_rec_sendrecv(c, TCMPI_SENDRECV_REPLACE, t0, *ierr, COMM(comm), *count,
                                  TYPE(type), *dest, *stag, *count, TYPE(type), *source, *rtag,
                                  status_c(&s, st, *ierr)))

/* A probe: the source and tag it found (none when Iprobe found nothing), no bytes. */
static void fort_probe(tc_client *c, enum tcmpi_op op, uint64_t t0, MPI_Fint ierr, MPI_Fint *comm,
                       int source, int tag, const MPI_Status *st)
{
    if (st != NULL)
        source = st->MPI_SOURCE, tag = st->MPI_TAG;
    tcmpi_rec_p2p(c, op, t0, ierr, COMM(comm), source, tag, 0, MPI_DATATYPE_NULL, 1);
}

FORTRAN_STATUS(probe, PROBE,
               (MPI_Fint * source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr),
               (source, tag, comm, st, ierr),
               fort_probe(c, TCMPI_PROBE, t0, *ierr, comm, *source, *tag, status_c(&s, st, *ierr)))
FORTRAN_STATUS(iprobe, IPROBE,
               (MPI_Fint * source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *flag, MPI_Fint *status,
                MPI_Fint *ierr),
               (source, tag, comm, flag, st, ierr),
               fort_probe(c, TCMPI_IPROBE, t0, *ierr, comm, *source, *tag,
                          *flag ? status_c(&s, st, *ierr) : NULL))

/* ---- completion ------------------------------------------------------------------------- */

/*
 * The C requests of n Fortran ones, taken before a completion call while
 * some request is remembered (NULL otherwise, or when out of memory: the
 * call is then recorded without them).
 */
static MPI_Request *reqs_c(const MPI_Fint *f, int n)
{
    MPI_Request *r;

    if (n <= 0 || !tcmpi_req_any() || (r = malloc((size_t)n * sizeof(*r))) == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        r[i] = PMPI_Request_f2c(f[i]);
    return r;
}

#define FSTATUS (sizeof(MPI_Status) / sizeof(MPI_Fint)) /* Open MPI's MPI_STATUS_SIZE */

/* The Fortran statuses to give MPI for n requests: the caller's, or ours (*own, malloc'd) in
 * place of MPI_STATUS(ES)_IGNORE while the requests were copied. */
static MPI_Fint *fstatuses_arg(MPI_Fint *statuses, int n, const MPI_Request *before, MPI_Fint **own)
{
    *own = NULL;
    if (before == NULL || n <= 0 ||
        (!status_ignored(statuses) && statuses != MPI_F_STATUSES_IGNORE &&
         statuses != &mpi_fortran_statuses_ignore_))
        return statuses;
    *own = malloc((size_t)n * FSTATUS * sizeof(MPI_Fint));
    return *own != NULL ? *own : statuses;
}

/*
 * Where a Fortran completion call left its statuses fst (Fortran, n_st of
 * them): kind and index as struct tcmpi_status's (index 0-based), findices
 * the 1-based indices of Waitsome/Testsome (outcount of them).
 */
struct fwhere {
    int kind, index, outcount;
    const MPI_Fint *findices;
};

/* After a completion call over n Fortran requests f that were before[] before it. */
static void fort_wait_done(tc_client *c, enum tcmpi_op op, uint64_t t0, int n, MPI_Request *before,
                           const MPI_Fint *f, const MPI_Fint *fst, MPI_Fint ierr, MPI_Fint *own,
                           struct fwhere w)
{
    MPI_Request *after = before != NULL ? reqs_c(f, n) : NULL;
    MPI_Status *st = NULL;
    int *indices = NULL;
    int n_st = w.kind == TCMPI_ST_EACH ? n : w.kind == TCMPI_ST_ONE ? 1 : w.outcount;
    struct tcmpi_status s = {NULL, w.kind, w.index, 0, NULL};

    if (after != NULL && ierr == MPI_SUCCESS && n_st > 0 && (fst == own || !status_ignored(fst)) &&
        fst != MPI_F_STATUSES_IGNORE && fst != &mpi_fortran_statuses_ignore_ &&
        (st = malloc((size_t)n_st * sizeof(*st))) != NULL &&
        (w.kind != TCMPI_ST_SOME || (indices = malloc((size_t)n_st * sizeof(int))) != NULL)) {
        for (int i = 0; i < n_st; i++)
            PMPI_Status_f2c(fst + (size_t)i * FSTATUS, &st[i]);
        for (int i = 0; indices != NULL && i < n_st; i++)
            indices[i] = w.findices[i] - 1;
        s.st = st, s.indices = indices, s.outcount = indices != NULL ? n_st : 0;
    }
    if (c != NULL || after != NULL)
        tcmpi_wait(c, op, t0, tcmpi_now(), n, after != NULL ? before : NULL, after, &s);
    free(before);
    free(after);
    free(st);
    free(indices);
    free(own);
}

#define EACH ((struct fwhere){TCMPI_ST_EACH, 0, 0, NULL})

/*
 * A completion call over n requests reqs, giving MPI nst statuses in place
 * of status (fstatuses_arg); where: the struct fwhere of what it completed,
 * evaluated after the call.
 */
#define FORTRAN_WAIT(lc, UC, params, args, reqs, n, status, nst, where)                            \
    FORTRAN(lc, UC, params)                                                                        \
    {                                                                                              \
        MPI_Fint *own;                                                                             \
        REAL(lc);                                                                                  \
        MPI_Request *before = reqs_c(reqs, n);                                                     \
        MPI_Fint *st = fstatuses_arg(status, nst, before, &own);                                   \
        TCMPI_BEGIN;                                                                               \
                                                                                                   \
        real args;                                                                                 \
        fort_wait_done(c, TCMPI_##UC, t0, n, before, reqs, st, *ierr, own, where);                 \
    }

FORTRAN_WAIT(wait, WAIT, (MPI_Fint * req, MPI_Fint *status, MPI_Fint *ierr), (req, st, ierr), req,
             1, status, 1, EACH)
FORTRAN_WAIT(waitall, WAITALL,
             (MPI_Fint * count, MPI_Fint *reqs, MPI_Fint *statuses, MPI_Fint *ierr),
             (count, reqs, st, ierr), reqs, *count, statuses, *count, EACH)

/* Test, Testall: flag is a Fortran LOGICAL (an int with gfortran and Open MPI). */
FORTRAN_WAIT(test, TEST, (MPI_Fint * req, MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr),
             (req, flag, st, ierr), req, 1, status, 1, EACH)
FORTRAN_WAIT(testall, TESTALL,
             (MPI_Fint * count, MPI_Fint *reqs, MPI_Fint *flag, MPI_Fint *statuses, MPI_Fint *ierr),
             (count, reqs, flag, st, ierr), reqs, *count, statuses, *count, EACH)

/* Waitany, Testany: the index is 1-based (MPI_UNDEFINED: none). */
FORTRAN_WAIT(waitany, WAITANY,
             (MPI_Fint * count, MPI_Fint *reqs, MPI_Fint *index, MPI_Fint *status, MPI_Fint *ierr),
             (count, reqs, index, st, ierr), reqs, *count, status, 1,
             ((struct fwhere){TCMPI_ST_ONE, *index - 1, 0, NULL}))
FORTRAN_WAIT(testany, TESTANY,
             (MPI_Fint * count, MPI_Fint *reqs, MPI_Fint *index, MPI_Fint *flag, MPI_Fint *status,
              MPI_Fint *ierr),
             (count, reqs, index, flag, st, ierr), reqs, *count, status, 1,
             ((struct fwhere){TCMPI_ST_ONE, *flag ? *index - 1 : -1, 0, NULL}))

/* Waitsome, Testsome: outcount 1-based indices, a status for each. */
#define FORTRAN_SOME(lc, UC)                                                                       \
    FORTRAN_WAIT(lc, UC,                                                                           \
                 (MPI_Fint * incount, MPI_Fint * reqs, MPI_Fint * outcount, MPI_Fint * indices,    \
                  MPI_Fint * statuses, MPI_Fint * ierr),                                           \
                 (incount, reqs, outcount, indices, st, ierr), reqs, *incount, statuses, *incount, \
                 ((struct fwhere){TCMPI_ST_SOME, 0, *outcount, indices}))

FORTRAN_SOME(waitsome, WAITSOME)
FORTRAN_SOME(testsome, TESTSOME)
