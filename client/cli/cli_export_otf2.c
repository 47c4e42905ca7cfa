/*
 * cli_export_otf2 — the OTF2 archive format (see cli_export_otf2.h).
 */
#include "cli_export_otf2.h"

#include <errno.h>

#ifdef TRACECTL_HAVE_OTF2

#include <inttypes.h>
#include <otf2/otf2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_export_lanes.h"

/* What an open slice writes at its end besides its Leave. */
enum otf2_mpi { MPI_NONE, MPI_COLL, MPI_RECV, MPI_SEND };

struct otf2_open {
    uint32_t region;
    enum otf2_mpi mpi;
    OTF2_CollectiveOp coll;
    uint32_t comm, peer, tag;
    uint64_t bytes;
};

/* A location: one lane of one track. */
struct otf2_loc {
    OTF2_EvtWriter *w;
    size_t proc; /* in the dictionary */
    char name[128];
    uint64_t events;
    struct otf2_open *open; /* the lane's open slices, innermost last */
    size_t depth, cap;
};

/* A communicator: its id and the ranks whose entries named it, ascending. */
struct otf2_comm {
    uint64_t id;
    uint64_t *ranks;
    size_t n, cap;
};

struct otf2_state {
    OTF2_Archive *archive;
    struct cli_export_lanes lanes; /* a lane's id: its location + 1 */
    struct otf2_loc *locs;
    size_t n_locs, cap_locs;
    struct otf2_comm *comms; /* [0]: MPI_COMM_WORLD (id 0) */
    size_t n_comms, cap_comms;
    int *coll; /* per op: its OTF2_CollectiveOp, or -1 */
    enum otf2_mpi *p2p;
    uint64_t t_min, t_max;
    uint32_t n_strings;
};

/* ---- ops ----------------------------------------------------------------------------- */

static const struct {
    const char *name;
    OTF2_CollectiveOp op;
} otf2_colls[] = {
    {"MPI_Barrier", OTF2_COLLECTIVE_OP_BARRIER},
    {"MPI_Bcast", OTF2_COLLECTIVE_OP_BCAST},
    {"MPI_Gather", OTF2_COLLECTIVE_OP_GATHER},
    {"MPI_Gatherv", OTF2_COLLECTIVE_OP_GATHERV},
    {"MPI_Scatter", OTF2_COLLECTIVE_OP_SCATTER},
    {"MPI_Scatterv", OTF2_COLLECTIVE_OP_SCATTERV},
    {"MPI_Allgather", OTF2_COLLECTIVE_OP_ALLGATHER},
    {"MPI_Allgatherv", OTF2_COLLECTIVE_OP_ALLGATHERV},
    {"MPI_Alltoall", OTF2_COLLECTIVE_OP_ALLTOALL},
    {"MPI_Alltoallv", OTF2_COLLECTIVE_OP_ALLTOALLV},
    {"MPI_Alltoallw", OTF2_COLLECTIVE_OP_ALLTOALLW},
    {"MPI_Allreduce", OTF2_COLLECTIVE_OP_ALLREDUCE},
    {"MPI_Reduce", OTF2_COLLECTIVE_OP_REDUCE},
    {"MPI_Reduce_scatter", OTF2_COLLECTIVE_OP_REDUCE_SCATTER},
    {"MPI_Reduce_scatter_block", OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK},
    {"MPI_Scan", OTF2_COLLECTIVE_OP_SCAN},
    {"MPI_Exscan", OTF2_COLLECTIVE_OP_EXSCAN},
};

static const char *const otf2_sends[] = {
    "MPI_Send",   "MPI_Ssend",  "MPI_Bsend",  "MPI_Rsend",    "MPI_Isend",
    "MPI_Issend", "MPI_Ibsend", "MPI_Irsend", "MPI_Sendrecv", "MPI_Sendrecv_replace",
};
static const char *const otf2_recvs[] = {"MPI_Recv", "MPI_Irecv", "tcmpi.recv"};

/* What each op of the dictionary is to MPI: a collective, a send or a receive. */
static int otf2_classify(struct otf2_state *st, const struct cli_export_dict *d)
{
    st->coll = malloc((d->n_ops + 1) * sizeof(*st->coll));
    st->p2p = malloc((d->n_ops + 1) * sizeof(*st->p2p));
    if (st->coll == NULL || st->p2p == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < d->n_ops; i++) {
        const char *n = d->ops[i].name;
        st->coll[i] = -1;
        st->p2p[i] = MPI_NONE;
        for (size_t k = 0; k < sizeof(otf2_colls) / sizeof(otf2_colls[0]); k++)
            if (strcmp(n, otf2_colls[k].name) == 0)
                st->coll[i] = otf2_colls[k].op;
        for (size_t k = 0; k < sizeof(otf2_sends) / sizeof(otf2_sends[0]); k++)
            if (strcmp(n, otf2_sends[k]) == 0)
                st->p2p[i] = MPI_SEND;
        for (size_t k = 0; k < sizeof(otf2_recvs) / sizeof(otf2_recvs[0]); k++)
            if (strcmp(n, otf2_recvs[k]) == 0)
                st->p2p[i] = MPI_RECV;
    }
    return 0;
}

/* ---- communicators --------------------------------------------------------------------- */

/* The index of communicator id, made a member of by rank (< 0: none). -1: out of memory. */
static long otf2_comm(struct otf2_state *st, uint64_t id, int64_t rank)
{
    struct otf2_comm *c = NULL;
    size_t i;

    for (i = 0; i < st->n_comms && c == NULL; i++)
        if (st->comms[i].id == id)
            c = &st->comms[i];
    if (c == NULL) {
        if (st->n_comms == st->cap_comms) {
            size_t cap = st->cap_comms ? 2 * st->cap_comms : 8;
            struct otf2_comm *p = realloc(st->comms, cap * sizeof(*p));
            if (p == NULL)
                return -1;
            st->comms = p, st->cap_comms = cap;
        }
        c = &st->comms[st->n_comms++];
        *c = (struct otf2_comm){.id = id};
        i = st->n_comms;
    }
    if (rank >= 0) {
        size_t k = 0;
        while (k < c->n && c->ranks[k] < (uint64_t)rank)
            k++;
        if (k == c->n || c->ranks[k] != (uint64_t)rank) {
            if (c->n == c->cap) {
                size_t cap = c->cap ? 2 * c->cap : 8;
                uint64_t *p = realloc(c->ranks, cap * sizeof(*p));
                if (p == NULL)
                    return -1;
                c->ranks = p, c->cap = cap;
            }
            memmove(&c->ranks[k + 1], &c->ranks[k], (c->n - k) * sizeof(*c->ranks));
            c->ranks[k] = (uint64_t)rank;
            c->n++;
        }
    }
    return (long)(c - st->comms);
}

/* ---- locations and events -------------------------------------------------------------- */

static OTF2_FlushType otf2_pre_flush(void *data, OTF2_FileType type, OTF2_LocationRef loc,
                                     void *caller, bool final)
{
    (void)data, (void)type, (void)loc, (void)caller, (void) final;
    return OTF2_FLUSH;
}

static OTF2_TimeStamp otf2_post_flush(void *data, OTF2_FileType type, OTF2_LocationRef loc)
{
    (void)data, (void)type, (void)loc;
    return 0;
}

static const OTF2_FlushCallbacks otf2_flush = {.otf2_pre_flush = otf2_pre_flush,
                                               .otf2_post_flush = otf2_post_flush};

/* A new location of process proc (its event writer open). NULL: out of memory or OTF2 failed. */
static struct otf2_loc *otf2_loc_new(struct otf2_state *st, size_t proc, const char *name)
{
    struct otf2_loc *l;

    if (st->n_locs == st->cap_locs) {
        size_t cap = st->cap_locs ? 2 * st->cap_locs : 16;
        struct otf2_loc *p = realloc(st->locs, cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        st->locs = p, st->cap_locs = cap;
    }
    l = &st->locs[st->n_locs];
    *l = (struct otf2_loc){.proc = proc};
    snprintf(l->name, sizeof(l->name), "%s", name);
    if ((l->w = OTF2_Archive_GetEvtWriter(st->archive, st->n_locs)) == NULL)
        return NULL;
    st->n_locs++;
    return l;
}

/* The lanes' end callback: a slice ends; its MPI record, then its Leave. */
static int otf2_end_cb(void *arg, const struct cli_export_lanes_track *t,
                       const struct cli_export_lane *lane, uint64_t end_ns)
{
    struct otf2_state *st = arg;
    struct otf2_loc *l = &st->locs[lane->id - 1];
    struct otf2_open *o;
    OTF2_ErrorCode e = OTF2_SUCCESS;

    (void)t;
    if (l->depth == 0)
        return -EPROTO; /* the lanes closed a slice never opened here: a bug */
    o = &l->open[--l->depth];
    if (end_ns > st->t_max)
        st->t_max = end_ns;
    if (o->mpi == MPI_COLL)
        e = OTF2_EvtWriter_MpiCollectiveEnd(l->w, NULL, end_ns, o->coll, o->comm,
                                            OTF2_UNDEFINED_UINT32, o->bytes, 0);
    else if (o->mpi == MPI_RECV)
        e = OTF2_EvtWriter_MpiRecv(l->w, NULL, end_ns, o->peer, o->comm, o->tag, o->bytes);
    if (e == OTF2_SUCCESS)
        e = OTF2_EvtWriter_Leave(l->w, NULL, end_ns, o->region);
    return e == OTF2_SUCCESS ? 0 : -EIO;
}

/* The slice of row r as it opens on l: its region and MPI record. */
static int otf2_open_slice(struct otf2_state *st, struct otf2_loc *l,
                           const struct cli_export_row *r, struct otf2_open *o)
{
    int64_t rank = r->proc->has_rank ? r->proc->rank : -1;
    long comm;

    *o = (struct otf2_open){.region = (uint32_t)r->op_index, .mpi = MPI_NONE};
    if (rank < 0 || !r->has_comm)
        return 0;
    if (st->coll[r->op_index] >= 0 && r->has_seq) {
        if ((comm = otf2_comm(st, r->comm, rank)) < 0)
            return -ENOMEM;
        o->mpi = MPI_COLL;
        o->coll = (OTF2_CollectiveOp)st->coll[r->op_index];
        o->comm = (uint32_t)comm;
        o->bytes = r->mem_bytes;
    } else if (st->p2p[r->op_index] != MPI_NONE && r->comm == 0 && r->has_peer &&
               r->peer <= UINT32_MAX) {
        o->mpi = st->p2p[r->op_index];
        o->comm = 0; /* MPI_COMM_WORLD: peers are its ranks */
        o->peer = (uint32_t)r->peer;
        o->tag = r->has_tag ? (uint32_t)r->tag : 0;
        o->bytes = r->mem_bytes;
    }
    (void)l;
    return 0;
}

static int otf2_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct otf2_state *st = x->state;
    struct cli_export_lanes_track *t;
    struct cli_export_lane *lane;
    struct otf2_loc *l;
    struct otf2_open o;
    OTF2_ErrorCode e;
    int rc;

    if ((rc = cli_export_lanes_place(&st->lanes, r, otf2_end_cb, st, &t, &lane)) != 0)
        return rc;
    if (lane->id == 0) {
        char name[128];
        cli_export_lanes_name(t, (size_t)(lane - t->lanes), name, sizeof(name));
        if (otf2_loc_new(st, r->proc_index, name) == NULL)
            return -ENOMEM;
        lane->id = st->n_locs;
    }
    l = &st->locs[lane->id - 1];
    if (l->depth == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        struct otf2_open *p = realloc(l->open, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        l->open = p, l->cap = cap;
    }
    if ((rc = otf2_open_slice(st, l, r, &o)) != 0)
        return rc;
    if (r->start_ns < st->t_min)
        st->t_min = r->start_ns;
    e = OTF2_EvtWriter_Enter(l->w, NULL, r->start_ns, o.region);
    if (e == OTF2_SUCCESS && o.mpi == MPI_COLL)
        e = OTF2_EvtWriter_MpiCollectiveBegin(l->w, NULL, r->start_ns);
    else if (e == OTF2_SUCCESS && o.mpi == MPI_SEND)
        e = OTF2_EvtWriter_MpiSend(l->w, NULL, r->start_ns, o.peer, o.comm, o.tag, o.bytes);
    if (e != OTF2_SUCCESS)
        return -EIO;
    l->open[l->depth++] = o;
    /* the lanes keep nothing open for an entry of length 0: it leaves where it entered */
    return r->span_ns == 0 ? otf2_end_cb(st, t, lane, r->start_ns) : 0;
}

/* ---- definitions --------------------------------------------------------------------- */

static uint32_t otf2_string(struct otf2_state *st, OTF2_GlobalDefWriter *g, const char *s)
{
    OTF2_GlobalDefWriter_WriteString(g, st->n_strings, s);
    return st->n_strings++;
}

/* The first location of each process (a process with none gets an empty one): the members of
 * the MPI locations group, by rank. */
static int otf2_rank_locs(struct otf2_state *st, const struct cli_export_dict *d, uint64_t **out,
                          size_t *n)
{
    int64_t max = -1;
    uint64_t *m;

    for (size_t p = 0; p < d->n_procs; p++) {
        bool found = false;
        for (size_t i = 0; i < st->n_locs && !found; i++)
            found = st->locs[i].proc == p;
        if (!found && otf2_loc_new(st, p, "no entries") == NULL)
            return -ENOMEM;
        if (d->procs[p].has_rank && d->procs[p].rank > max)
            max = d->procs[p].rank;
    }
    *n = (size_t)(max + 1);
    if ((m = malloc((*n + 1) * sizeof(*m))) == NULL)
        return -ENOMEM;
    for (size_t k = 0; k < *n; k++)
        m[k] = OTF2_UNDEFINED_LOCATION;
    for (size_t i = st->n_locs; i-- > 0;) {
        const struct cli_export_proc *p = &d->procs[st->locs[i].proc];
        if (p->has_rank && p->rank >= 0)
            m[p->rank] = i;
    }
    *out = m;
    return 0;
}

/* The global definitions; members: otf2_rank_locs()'s (n_ranks), taken over and freed. */
static int otf2_defs(struct otf2_state *st, const struct cli_export_dict *d, uint64_t *members,
                     size_t n_ranks)
{
    OTF2_GlobalDefWriter *g = OTF2_Archive_GetGlobalDefWriter(st->archive);
    char name[160];

    if (g == NULL) {
        free(members);
        return -EIO;
    }
    if (st->t_min > st->t_max)
        st->t_min = st->t_max = 0;
    OTF2_GlobalDefWriter_WriteClockProperties(g, 1000000000, st->t_min, st->t_max - st->t_min,
                                              OTF2_UNDEFINED_TIMESTAMP);
    OTF2_GlobalDefWriter_WriteSystemTreeNode(g, 0, otf2_string(st, g, d->session_name),
                                             otf2_string(st, g, "session"),
                                             OTF2_UNDEFINED_SYSTEM_TREE_NODE);
    for (size_t i = 0; i < d->n_ops; i++) {
        const char *n = d->ops[i].name;
        bool mpi = strncmp(n, "MPI_", 4) == 0 || strncmp(n, "tcmpi.", 6) == 0;
        uint32_t s = otf2_string(st, g, n);
        OTF2_GlobalDefWriter_WriteRegion(g, (uint32_t)i, s, s,
                                         otf2_string(st, g, d->ops[i].category),
                                         st->coll[i] >= 0         ? OTF2_REGION_ROLE_COLL_OTHER
                                         : st->p2p[i] != MPI_NONE ? OTF2_REGION_ROLE_POINT2POINT
                                                                  : OTF2_REGION_ROLE_FUNCTION,
                                         mpi ? OTF2_PARADIGM_MPI : OTF2_PARADIGM_USER,
                                         OTF2_REGION_FLAG_NONE, OTF2_UNDEFINED_STRING, 0, 0);
    }
    for (size_t p = 0; p < d->n_procs; p++)
        OTF2_GlobalDefWriter_WriteLocationGroup(
            g, (uint32_t)p, otf2_string(st, g, d->procs[p].label), OTF2_LOCATION_GROUP_TYPE_PROCESS,
            0, OTF2_UNDEFINED_LOCATION_GROUP);
    for (size_t i = 0; i < st->n_locs; i++)
        OTF2_GlobalDefWriter_WriteLocation(g, i, otf2_string(st, g, st->locs[i].name),
                                           OTF2_LOCATION_TYPE_CPU_THREAD, st->locs[i].events,
                                           (uint32_t)st->locs[i].proc);
    /* MPI: group 0 the locations by rank, then a group and a Comm per communicator */
    OTF2_GlobalDefWriter_WriteGroup(g, 0, otf2_string(st, g, "MPI ranks"),
                                    OTF2_GROUP_TYPE_COMM_LOCATIONS, OTF2_PARADIGM_MPI,
                                    OTF2_GROUP_FLAG_NONE, (uint32_t)n_ranks, members);
    for (size_t k = 0; k < n_ranks; k++)
        members[k] = k; /* MPI_COMM_WORLD: every rank */
    for (size_t c = 0; c < st->n_comms; c++) {
        const struct otf2_comm *m = &st->comms[c];
        if (m->id == 0)
            snprintf(name, sizeof(name), "MPI_COMM_WORLD");
        else
            snprintf(name, sizeof(name), "comm %" PRIu64, m->id);
        OTF2_GlobalDefWriter_WriteGroup(
            g, (uint32_t)c + 1, otf2_string(st, g, name), OTF2_GROUP_TYPE_COMM_GROUP,
            OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, (uint32_t)(m->id == 0 ? n_ranks : m->n),
            m->id == 0 ? members : m->ranks);
        OTF2_GlobalDefWriter_WriteComm(g, (uint32_t)c, otf2_string(st, g, name), (uint32_t)c + 1,
                                       m->id == 0 ? OTF2_UNDEFINED_COMM : 0, OTF2_COMM_FLAG_NONE);
    }
    free(members);
    return 0;
}

/* ---- the format ------------------------------------------------------------------------ */

static int otf2_begin(struct cli_export *x)
{
    struct otf2_state *st = calloc(1, sizeof(*st));
    char path[4096];

    if (st == NULL)
        return -ENOMEM;
    x->state = st;
    cli_export_lanes_init(&st->lanes);
    st->t_min = UINT64_MAX;
    if (otf2_classify(st, &x->dict) != 0 || otf2_comm(st, 0, -1) != 0)
        return -ENOMEM;
    /* OTF2 never overwrites: say so before it fails half way with its own messages */
    snprintf(path, sizeof(path), "%s/traces", x->dir);
    if (access(path, F_OK) == 0) {
        cli_error("export: %s exists: OTF2 does not overwrite an archive (remove it, or give"
                  " another -o DIR)",
                  path);
        return -EEXIST;
    }
    st->archive = OTF2_Archive_Open(x->dir, "traces", OTF2_FILEMODE_WRITE, 1024 * 1024,
                                    4 * 1024 * 1024, OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
    if (st->archive == NULL) {
        cli_error("export: cannot create an OTF2 archive in %s", x->dir);
        return -EIO;
    }
    if (OTF2_Archive_SetFlushCallbacks(st->archive, &otf2_flush, NULL) != OTF2_SUCCESS ||
        OTF2_Archive_SetSerialCollectiveCallbacks(st->archive) != OTF2_SUCCESS ||
        OTF2_Archive_SetCreator(st->archive, "tracectl " TRACECTL_VERSION) != OTF2_SUCCESS ||
        OTF2_Archive_OpenEvtFiles(st->archive) != OTF2_SUCCESS)
        return -EIO;
    return 0;
}

static int otf2_end(struct cli_export *x)
{
    struct otf2_state *st = x->state;
    uint64_t *members;
    size_t n_ranks;
    int rc;

    if ((rc = cli_export_lanes_close_all(&st->lanes, otf2_end_cb, st)) != 0 ||
        (rc = otf2_rank_locs(st, &x->dict, &members, &n_ranks)) != 0)
        return rc;
    for (size_t i = 0; i < st->n_locs; i++) {
        OTF2_EvtWriter_GetNumberOfEvents(st->locs[i].w, &st->locs[i].events);
        if (OTF2_Archive_CloseEvtWriter(st->archive, st->locs[i].w) != OTF2_SUCCESS)
            rc = -EIO;
    }
    if (rc != 0 || OTF2_Archive_CloseEvtFiles(st->archive) != OTF2_SUCCESS ||
        OTF2_Archive_OpenDefFiles(st->archive) != OTF2_SUCCESS)
        rc = -EIO;
    for (size_t i = 0; rc == 0 && i < st->n_locs; i++) {
        OTF2_DefWriter *w = OTF2_Archive_GetDefWriter(st->archive, i);
        if (w == NULL || OTF2_Archive_CloseDefWriter(st->archive, w) != OTF2_SUCCESS)
            rc = -EIO;
    }
    if (rc != 0 || OTF2_Archive_CloseDefFiles(st->archive) != OTF2_SUCCESS) {
        free(members);
        return -EIO;
    }
    if ((rc = otf2_defs(st, &x->dict, members, n_ranks)) != 0)
        return rc;
    rc = OTF2_Archive_Close(st->archive) == OTF2_SUCCESS ? 0 : -EIO;
    st->archive = NULL;
    return rc;
}

static void otf2_free(struct cli_export *x)
{
    struct otf2_state *st = x->state;

    if (st == NULL)
        return;
    if (st->archive != NULL)
        OTF2_Archive_Close(st->archive);
    for (size_t i = 0; i < st->n_locs; i++)
        free(st->locs[i].open);
    for (size_t c = 0; c < st->n_comms; c++)
        free(st->comms[c].ranks);
    free(st->locs);
    free(st->comms);
    free(st->coll);
    free(st->p2p);
    cli_export_lanes_deinit(&st->lanes);
    free(st);
    x->state = NULL;
}

#else /* no libotf2 */

static int otf2_begin(struct cli_export *x)
{
    (void)x;
    cli_error("export: this tracectl was built without OTF2 (CMake found no libotf2: "
              "install Debian's libotf2-trace-dev and build again)");
    return -ENOTSUP;
}

static int otf2_row(struct cli_export *x, const struct cli_export_row *r)
{
    (void)x, (void)r;
    return -ENOTSUP;
}

static int otf2_end(struct cli_export *x)
{
    (void)x;
    return -ENOTSUP;
}

static void otf2_free(struct cli_export *x)
{
    (void)x;
}

#endif

const struct cli_export_format cli_export_otf2 = {
    .name = "otf2",
    .binary = true,
    .by_start = true,
    .directory = true,
    .begin = otf2_begin,
    .row = otf2_row,
    .end = otf2_end,
    .free = otf2_free,
};
