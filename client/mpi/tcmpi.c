/*
 * tcmpi.c — libtracectl-mpi's core: the client every rank opens in MPI_Init,
 * the op table, the communicator table, and the recording helpers the
 * MPI_* wrappers (tcmpi_wrap.c) call. See README.md "MPI jobs".
 *
 * DESIGN
 * The library is libtracectl linked in (hidden) plus PMPI wrappers: a
 * program gets it with LD_PRELOAD or -ltracectl-mpi and changes nothing.
 * MPI_Init opens one client (session from TRACECTL_SESSION, else the
 * launcher's job id, so that all ranks of one mpirun meet in one session;
 * rank and world from MPI_COMM_WORLD; device TRACECTL_DEVICE else cpu:<rank>)
 * and interns every op name, so that recording never takes a lock:
 * MPI_Finalize, or exit() without it, closes the client, within the close
 * timeout (TRACECTL_CLOSE_TIMEOUT, tracectl.h tc_close).
 *
 * Communicators get an id that is the same on every member, whatever the
 * order in which members first use them: it is given when the communicator
 * is made. MPI makes every member of a parent call a creating collective on
 * it (dup, idup, split, split_type, create, Cart/Graph/Dist_graph_create,
 * Cart_sub, Intercomm_merge) in the same order, so the parent's count of
 * creations so far (`made`) is the same on all of them: the new id hashes
 * the parent's id, that count and the new communicator's members' ranks in
 * MPI_COMM_WORLD (both groups of an intercommunicator), so the colours of
 * one split differ. MPI_COMM_WORLD is 0. MPI_Comm_create_group is collective
 * over its group only and MPI_Intercomm_create over two local communicators:
 * their ids hash what their members share (parent and tag, the groups) and
 * how many such creations this process saw before. A communicator made by a
 * call that is not intercepted (MPI_Comm_spawn, _connect, _accept, _join,
 * _get_parent; MPI_COMM_SELF) is named at first use, the fallback: a hash of
 * its members' ranks and of how many communicators of those members this
 * process registered before it, right only when members first use such
 * communicators in the same order.
 *
 * MPI makes ranks call collectives on each communicator in the same order,
 * so the k-th collective on a communicator has sequence number k on every
 * member; under MPI_THREAD_MULTIPLE the program orders them across threads,
 * and the number is taken with one atomic fetch-add. A collective also
 * carries the communicator's size (comm_size: both groups of an
 * intercommunicator), so that the daemon counts an instance on a
 * sub-communicator complete once its members arrived. The table is a fixed
 * open-addressing array keyed by the handle's bits: lookups are lock-free
 * atomic loads; registration (a few local PMPI calls and one malloc) and
 * MPI_Comm_free take a mutex.
 *
 * A non-blocking collective takes its sequence number at its I* call, and
 * its request is remembered (a chained hash under a mutex, touched only by
 * I* collectives, MPI_Comm_idup and completion calls while some request is
 * remembered) until the Wait/Test call that completes it, whose entry then
 * carries the same comm and seq (proto/PROTOCOL.md "MPI completion calls").
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcint.h"
#include "tcmpi.h"

#define COMM_SLOTS 4096 /* a power of two; communicators alive at once, at most 3/4 of it */
#define KEY_EMPTY  0
#define KEY_FREED  1

tc_client *_Atomic tcmpi_client;
uint32_t tcmpi_ops[TCMPI_N_OPS];

#define TCMPI_NAME(e, name, kind) name,
static const char *const op_names[] = {TCMPI_OPS(TCMPI_NAME)};
#undef TCMPI_NAME
#define TCMPI_KIND(e, name, kind) #kind,
static const char *const op_kinds[] = {TCMPI_OPS(TCMPI_KIND)};

const char *tcmpi_op_name(enum tcmpi_op op)
{
    return (unsigned)op < TCMPI_N_OPS ? op_names[op] : "?";
}
#undef TCMPI_KIND

/* The op whose calls on MPI_COMM_WORLD end a step ($TRACECTL_MPI_STEP_ON), or TCMPI_N_OPS. */
static enum tcmpi_op step_on = TCMPI_N_OPS;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int started; /* 1 once tcmpi_start ran, 2 once tcmpi_stop ran */
static struct tcmpi_comm world;
static struct tcmpi_comm table[COMM_SLOTS]; /* guarded by mu for writes */
static size_t n_used;                       /* slots not empty (live or freed); under mu */
/* How many communicators of each key were registered: the k of a fallback id (the key: the
 * membership hash) and of tcmpi_comm_base_keyed(). */
static struct {
    uint64_t hash, count;
} seen[COMM_SLOTS]; /* under mu */

/* ---- the client ------------------------------------------------------------- */

static pid_t start_pid;
/* tcmpi_ns() when MPI_Finalize was called (0: not called), for the meta mpi.finalize_ns. */
static _Atomic uint64_t finalize_ns;

/* exit() without MPI_Finalize. Not in a fork()ed child: the client is its parent's. */
static void stop_at_exit(void)
{
    if (getpid() == start_pid)
        tcmpi_stop();
}

/* The session: TRACECTL_SESSION, else the launcher's job id, else this process's own. */
static void session_name(char *buf, size_t len)
{
    const char *v;

    if ((v = getenv("TRACECTL_SESSION")) != NULL && *v)
        snprintf(buf, len, "%s", v);
    else if ((v = getenv("OMPI_MCA_orte_ess_jobid")) != NULL && *v)
        snprintf(buf, len, "mpi-%s", v);
    else if ((v = getenv("PMIX_NAMESPACE")) != NULL && *v)
        snprintf(buf, len, "mpi-%s", v);
    else if ((v = getenv("SLURM_JOB_ID")) != NULL && *v)
        snprintf(buf, len, "slurm-%s.%s", v,
                 getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "0");
    else if ((v = getenv("PMI_KVSNAME")) != NULL && *v) /* MPICH's hydra */
        snprintf(buf, len, "mpi-%s", v);
    else
        snprintf(buf, len, "mpi-%ld", (long)getpid()); /* a singleton: one process */
}

static void world_init(int rank, int size)
{
    world.id = 0;
    world.rank = rank;
    world.size = world.peers = size;
    world.world = NULL;
    world.inter = false;
}

/*
 * $TRACECTL_MPI_STEP_ON: a collective's MPI name (TCMPI_N_OPS: unset). An
 * unknown name or a call that is no collective changes nothing; rank 0 says
 * so on stderr, as the variable was meant to do something.
 */
static enum tcmpi_op step_op(int rank)
{
    const char *v = getenv("TRACECTL_MPI_STEP_ON");

    if (v == NULL || *v == '\0')
        return TCMPI_N_OPS;
    for (int i = 0; i < TCMPI_N_OPS; i++)
        if (strcmp(v, op_names[i]) == 0 && i <= TCMPI_IEXSCAN)
            return (enum tcmpi_op)i;
    if (rank == 0)
        fprintf(stderr,
                "tracectl: TRACECTL_MPI_STEP_ON=%s is not an MPI collective (e.g. MPI_Barrier):"
                " steps are not counted\n",
                v);
    return TCMPI_N_OPS;
}

/*
 * $TRACECTL_MPI_P2P: "counters" counts point-to-point calls per function,
 * communicator and peer instead of an entry each (tcmpi_count.c); "auto"
 * records entries until the process's point-to-point calls pass
 * $TRACECTL_MPI_P2P_RATE per second (TCMPI_AUTO_RATE when unset), then
 * counts; unset or "entries" records entries. Anything else records entries,
 * and rank 0 says so on stderr (as for a rate that is not a positive number:
 * the default is taken).
 */
static enum tcmpi_p2p_mode p2p_mode(int rank, uint64_t *rate)
{
    const char *v = getenv("TRACECTL_MPI_P2P"), *r = getenv("TRACECTL_MPI_P2P_RATE");
    char *end = NULL;
    unsigned long long n;

    *rate = TCMPI_AUTO_RATE;
    if (v == NULL || *v == '\0' || strcmp(v, "entries") == 0)
        return TCMPI_P2P_ENTRIES;
    if (strcmp(v, "counters") == 0)
        return TCMPI_P2P_COUNTERS;
    if (strcmp(v, "auto") != 0) {
        if (rank == 0)
            fprintf(stderr,
                    "tracectl: TRACECTL_MPI_P2P=%s is neither \"entries\", \"counters\" nor"
                    " \"auto\": point-to-point calls are recorded as entries\n",
                    v);
        return TCMPI_P2P_ENTRIES;
    }
    if (r != NULL && *r != '\0') {
        errno = 0;
        n = strtoull(r, &end, 10);
        if (errno == 0 && *end == '\0' && n > 0 && r[0] != '-')
            *rate = n;
        else if (rank == 0)
            fprintf(stderr,
                    "tracectl: TRACECTL_MPI_P2P_RATE=%s is not a positive number of calls per"
                    " second: %d is taken\n",
                    r, TCMPI_AUTO_RATE);
    }
    return TCMPI_P2P_AUTO;
}

bool tcmpi_tsc;

uint64_t tcmpi_dur_ns(const tc_client *c, uint64_t d)
{
    return tcmpi_tsc ? (uint64_t)((double)d * c->tick_ns) : d;
}

void tcmpi_record(tc_client *c, enum tcmpi_op op, uint64_t start, uint64_t dur, uint64_t bytes,
                  uint64_t elements, const tc_ext *x)
{
    tcrecord_ext_clock(c, tcmpi_ops[op], start, dur, tcmpi_tsc, bytes, elements, x);
}

void tcmpi_pcontrol(int level)
{
    tc_client *c = tcmpi_on();

    if (c != NULL && level == TCMPI_PCONTROL_STEP) {
        tc_cpu_wait(c); /* the step that ends: its wait for a CPU (Linux) */
        tc_step(c);
    }
}

/*
 * Rank 0's one line when the client found no daemon (or was refused): else a
 * job runs to its end and nothing says that it was not recorded.
 * TRACECTL_QUIET=1 silences it; TRACECTL_DISABLE=1 is no error, so no line.
 */
static void say_not_recorded(const tc_client *c, int err)
{
    const char *quiet = getenv("TRACECTL_QUIET"), *why = NULL;

    if (quiet != NULL && strcmp(quiet, "1") == 0)
        return;
    if (c != NULL && tc_last_error(c, &why) != 0 && why != NULL && *why != '\0')
        fprintf(stderr,
                "tracectl: this MPI job is not recorded: %s (TRACECTL_QUIET=1 silences"
                " this)\n",
                why);
    else /* blocking mode: no client to ask */
        fprintf(stderr,
                "tracectl: this MPI job is not recorded: no daemon: %s (TRACECTL_QUIET=1"
                " silences this)\n",
                strerror(-err));
}

void tcmpi_start(int thread_level)
{
    char session[300], device[64], lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int expect = 0, rank = 0, size = 1, len = 0, err = 0;
    enum tcmpi_p2p_mode mode;
    uint64_t rate;
    tc_options o;
    tc_client *c;

    if (!atomic_compare_exchange_strong(&started, &expect, 1))
        return;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    world_init(rank, size);
    session_name(session, sizeof(session));
    snprintf(device, sizeof(device), "cpu:%d", rank);
    tc_options_init(&o);
    o.session = session;
    o.rank = rank;
    o.world = size;
    o.device = getenv("TRACECTL_DEVICE") && *getenv("TRACECTL_DEVICE") ? NULL : device;
    c = tc_open(&o, &err);
    if (err != 0 && rank == 0)
        say_not_recorded(c, err);
    if (c == NULL)
        return; /* blocking mode and no daemon: nothing is recorded */
    for (int i = 0; i < TCMPI_N_OPS; i++)
        tcmpi_ops[i] = tc_op_cat(c, op_names[i], op_kinds[i][0] == 'C' ? "comm" : "wait");
    if (PMPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\n,")] = '\0'; /* "Open MPI v4.1.4, package: ...": its first part */
        tc_meta_str(c, "mpi.library", lib);
    }
    tc_meta_int(c, "mpi.thread_level", thread_level);
    /* The rank's wall time for the report's MPI %: from here, where MPI_Init returns to the
     * program (the connection to the daemon made), to mpi.finalize_ns (tcmpi_stop). */
    tc_meta_int(c, "mpi.init_ns", (int64_t)tcmpi_ns());
    step_on = step_op(rank);
    tcmpi_tsc = c->clock != 0; /* before the client is published: no call is timed yet */
    mode = p2p_mode(rank, &rate);
    tcmpi_count_start(mode, rate, tcmpi_tsc ? c->tick_ns : 1.0);
    atomic_store(&tcmpi_client, c);
    start_pid = getpid();
    atexit(stop_at_exit);
}

void tcmpi_finalizing(void)
{
    uint64_t expect = 0;

    atomic_compare_exchange_strong(&finalize_ns, &expect, tcmpi_ns());
}

void tcmpi_stop(void)
{
    int expect = 1;
    tc_client *c;

    if (!atomic_compare_exchange_strong(&started, &expect, 2))
        return;
    tcmpi_req_flush(); /* Irecvs never completed: recorded as posted */
    c = atomic_exchange(&tcmpi_client, NULL);
    if (atomic_load(&finalize_ns) != 0)
        tc_meta_int(c, "mpi.finalize_ns", (int64_t)atomic_load(&finalize_ns));
    if (c != NULL) {
        tcmpi_site_send(c);
        tcmpi_count_send(c);
    }
    /* Within the close timeout ($TRACECTL_CLOSE_TIMEOUT, else 5 s) in all: a stalled
     * daemon must not hold up MPI_Finalize (it held each rank 60 s before). A job whose
     * daemon may be slow to take its last entries sets a longer one. */
    tc_close(c);
}

/* ---- communicators ------------------------------------------------------------ */

static uintptr_t comm_key(MPI_Comm comm)
{
    uintptr_t k = 0;

    memcpy(&k, &comm, sizeof(comm) < sizeof(k) ? sizeof(comm) : sizeof(k));
    return k;
}

static size_t slot_of(uintptr_t k)
{
    uint64_t h = (uint64_t)k * 0x9e3779b97f4a7c15ull;

    return (size_t)(h >> 40) & (COMM_SLOTS - 1);
}

static uint64_t fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        h = (h ^ (v & 0xff)) * 0x100000001b3ull;
    return h;
}

uint64_t tcmpi_mix(uint64_t h, uint64_t v)
{
    return fnv(h, v);
}

/*
 * The MPI_COMM_WORLD ranks of group g's members, in rank order (malloc'd,
 * *n of them; MPI_UNDEFINED for a process outside it), and their hash.
 */
static int *group_world(MPI_Group g, int *n, uint64_t *hash)
{
    MPI_Group wg;
    int *in, *out;

    *hash = 0xcbf29ce484222325ull;
    if (PMPI_Group_size(g, n) != MPI_SUCCESS || *n <= 0)
        return NULL;
    in = malloc((size_t)*n * sizeof(int));
    out = malloc((size_t)*n * sizeof(int));
    if (in == NULL || out == NULL || PMPI_Comm_group(MPI_COMM_WORLD, &wg) != MPI_SUCCESS) {
        free(in), free(out);
        return NULL;
    }
    for (int i = 0; i < *n; i++)
        in[i] = i;
    if (PMPI_Group_translate_ranks(g, *n, in, wg, out) != MPI_SUCCESS) {
        free(out);
        out = NULL;
    }
    PMPI_Group_free(&wg);
    free(in);
    for (int i = 0; out != NULL && i < *n; i++)
        *hash = fnv(*hash, (uint64_t)(int64_t)out[i]);
    return out;
}

/* Counts one more communicator of membership h; returns how many came before. Under mu. */
static uint64_t seen_before(uint64_t h)
{
    size_t i = slot_of((uintptr_t)h);

    for (size_t n = 0; n < COMM_SLOTS; n++, i = (i + 1) & (COMM_SLOTS - 1)) {
        if (seen[i].count != 0 && seen[i].hash != h)
            continue;
        seen[i].hash = h;
        return seen[i].count++;
    }
    return 0; /* full: ids of later communicators may repeat */
}

uint64_t tcmpi_group_hash(MPI_Group g)
{
    uint64_t h = 0;
    int n;

    free(group_world(g, &n, &h));
    return h;
}

/* Fills k for comm but its id (under mu); *h: the hash of its members. False when MPI would
 * not describe it. */
static bool comm_describe(MPI_Comm comm, struct tcmpi_comm *k, uint64_t *h)
{
    MPI_Group local, remote;
    uint64_t hl, hr = 0;
    int inter = 0, n, *wl = NULL, *wr = NULL;

    k->inter = false;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS ||
        PMPI_Comm_rank(comm, &k->rank) != MPI_SUCCESS ||
        PMPI_Comm_size(comm, &k->size) != MPI_SUCCESS ||
        PMPI_Comm_group(comm, &local) != MPI_SUCCESS)
        return false;
    wl = group_world(local, &n, &hl);
    PMPI_Group_free(&local);
    if (inter && PMPI_Comm_remote_group(comm, &remote) == MPI_SUCCESS) {
        wr = group_world(remote, &k->peers, &hr);
        PMPI_Group_free(&remote);
        free(wl);
        /* Both sides must agree: combine the two groups' hashes in a fixed order. */
        *h = fnv(fnv(0xcbf29ce484222325ull, hl < hr ? hl : hr), hl < hr ? hr : hl);
        k->world = wr;
        k->inter = true;
    } else {
        *h = hl;
        k->peers = k->size;
        k->world = wl;
    }
    atomic_store_explicit(&k->seq, 0, memory_order_relaxed);
    atomic_store_explicit(&k->made, 0, memory_order_relaxed);
    return true;
}

/*
 * Registers comm (handle bits key): with the id hashed from base and its
 * members when born, else the fallback's. A communicator made again under a
 * handle still in the table (freed by a call not intercepted) replaces it;
 * at first use, another thread may have registered it meanwhile: that one
 * stays. NULL when the table is full or MPI would not describe comm.
 */
static struct tcmpi_comm *comm_register(MPI_Comm comm, uintptr_t key, bool born, uint64_t base)
{
    struct tcmpi_comm *k = NULL, *freed = NULL;
    size_t i = slot_of(key);
    uint64_t h;

    pthread_mutex_lock(&mu);
    for (size_t n = 0; n < COMM_SLOTS; n++, i = (i + 1) & (COMM_SLOTS - 1)) {
        uintptr_t s = atomic_load_explicit(&table[i].key, memory_order_relaxed);
        if (s == key) {
            k = &table[i];
            if (!born)
                goto out;
            atomic_store_explicit(&k->key, KEY_FREED, memory_order_relaxed);
            free(k->world);
            k->world = NULL;
            freed = k;
            break;
        }
        if (s == KEY_FREED && freed == NULL)
            freed = &table[i];
        if (s == KEY_EMPTY)
            break;
    }
    k = NULL;
    if (freed == NULL && n_used + 1 > COMM_SLOTS * 3 / 4)
        goto out; /* full: at least a quarter stays empty, so every probe ends */
    k = freed != NULL ? freed : &table[i];
    if (!comm_describe(comm, k, &h)) {
        k = NULL;
        goto out;
    }
    k->id = born ? fnv(base, h) : fnv(h, seen_before(h));
    if (k->id == 0)
        k->id = 1; /* 0 is MPI_COMM_WORLD */
    if (freed == NULL)
        n_used++;
    atomic_store_explicit(&k->key, key, memory_order_release); /* readers see it whole */
out:
    pthread_mutex_unlock(&mu);
    return k;
}

struct tcmpi_comm *tcmpi_comm(MPI_Comm comm)
{
    uintptr_t key;
    size_t i;

    if (comm == MPI_COMM_WORLD)
        return &world;
    if (comm == MPI_COMM_NULL)
        return NULL;
    key = comm_key(comm);
    i = slot_of(key);
    for (size_t n = 0; n < COMM_SLOTS; n++, i = (i + 1) & (COMM_SLOTS - 1)) {
        uintptr_t s = atomic_load_explicit(&table[i].key, memory_order_acquire);
        if (s == key)
            return &table[i];
        if (s == KEY_EMPTY)
            break;
    }
    return comm_register(comm, key, false, 0);
}

bool tcmpi_comm_base(MPI_Comm parent, uint64_t *base, struct tcmpi_origin *o)
{
    struct tcmpi_comm *p = tcmpi_comm(parent);
    uint64_t made;

    if (p == NULL)
        return false;
    /* The program orders creations on one parent across threads, as it does collectives. */
    made = atomic_fetch_add(&p->made, 1);
    *base = fnv(fnv(0x6d616465ull, p->id), made);
    if (o != NULL) {
        o->parent = p->id;
        o->n = made + 1;
    }
    return true;
}

void tcmpi_comm_name(MPI_Comm newcomm, const struct tcmpi_origin *o, const char *kind)
{
    static _Atomic unsigned named;
    tc_client *c = tcmpi_on();
    struct tcmpi_comm *k;
    char key[32], value[64];

    if (c == NULL || newcomm == MPI_COMM_NULL || (k = tcmpi_comm(newcomm)) == NULL ||
        atomic_fetch_add(&named, 1) >= TCMPI_NAMED_MAX)
        return;
    snprintf(key, sizeof(key), "mpi.comm.%016llx", (unsigned long long)k->id);
    snprintf(value, sizeof(value), "%s#%llu %016llx", kind, (unsigned long long)o->n,
             (unsigned long long)o->parent);
    tc_meta_str(c, key, value);
}

uint64_t tcmpi_comm_base_keyed(uint64_t key)
{
    uint64_t k;

    pthread_mutex_lock(&mu);
    k = seen_before(fnv(0x6b657965ull, key));
    pthread_mutex_unlock(&mu);
    return fnv(fnv(0x6b657965ull, key), k);
}

void tcmpi_comm_born(MPI_Comm newcomm, uint64_t base)
{
    if (newcomm != MPI_COMM_NULL && newcomm != MPI_COMM_WORLD)
        comm_register(newcomm, comm_key(newcomm), true, base);
}

void tcmpi_comm_forget(MPI_Comm comm)
{
    uintptr_t key = comm_key(comm);
    size_t i = slot_of(key);

    pthread_mutex_lock(&mu);
    for (size_t n = 0; n < COMM_SLOTS; n++, i = (i + 1) & (COMM_SLOTS - 1)) {
        uintptr_t s = atomic_load_explicit(&table[i].key, memory_order_relaxed);
        if (s == key) {
            atomic_store_explicit(&table[i].key, KEY_FREED, memory_order_release);
            free(table[i].world);
            table[i].world = NULL;
            break;
        }
        if (s == KEY_EMPTY)
            break;
    }
    pthread_mutex_unlock(&mu);
}

/* ---- requests: non-blocking collectives, idups, Irecvs ------------------------------ */

#define REQ_BUCKETS 1024 /* a power of two */

enum req_kind { REQ_COLL, REQ_IDUP, REQ_IRECV };

/* An Irecv as its call left it; its entry is recorded when it completes (tcmpi_irecv). */
struct irecv {
    uint64_t t0, t1;
    const void *site;     /* the Irecv call's (tcmpi_site_now then) */
    struct tcmpi_comm *k; /* NULL: the call failed */
    uint64_t comm;        /* k's id then: k may be freed (and its slot reused) meanwhile */
    int source, tag, count;
    uint64_t size; /* the datatype's size (the handle may be freed before completion) */
};

struct req {
    uintptr_t key; /* the request handle's bits */
    enum req_kind kind;
    int at;                        /* in a completion call's copy: its index in the array */
    uint64_t comm, seq, comm_size; /* a collective's */
    MPI_Comm *newcomm;             /* an idup's: where MPI puts the communicator, and its base */
    uint64_t base;
    struct irecv rv; /* an Irecv's */
    struct req *next;
};

static pthread_mutex_t req_mu = PTHREAD_MUTEX_INITIALIZER;
static struct req *req_bucket[REQ_BUCKETS]; /* under req_mu */
static struct req *req_free;                /* unused nodes; under req_mu */
static _Atomic size_t n_reqs;               /* remembered; written under req_mu */

static void irecv_record(tc_client *c, const struct irecv *rv, const MPI_Status *st);

static uintptr_t req_key(MPI_Request r)
{
    uintptr_t k = 0;

    memcpy(&k, &r, sizeof(r) < sizeof(k) ? sizeof(r) : sizeof(k));
    return k;
}

bool tcmpi_req_any(void)
{
    return atomic_load_explicit(&n_reqs, memory_order_relaxed) != 0;
}

/* Unlinks and returns key's node, or NULL. Under req_mu. */
static struct req *req_take(uintptr_t key)
{
    for (struct req **p = &req_bucket[slot_of(key) & (REQ_BUCKETS - 1)]; *p != NULL;
         p = &(*p)->next) {
        struct req *q = *p;
        if (q->key == key) {
            *p = q->next;
            atomic_store_explicit(&n_reqs, atomic_load(&n_reqs) - 1, memory_order_relaxed);
            return q;
        }
    }
    return NULL;
}

/*
 * Gives a node back. An Irecv's that no completion call completed (freed,
 * its handle given again by a call not intercepted, MPI_Finalize) is
 * recorded first, as it was posted, so that no call goes unrecorded.
 */
static void req_recycle(struct req *q)
{
    q->next = req_free;
    req_free = q;
}

static void req_put(struct req *q)
{
    tc_client *c;

    if (q->kind == REQ_IRECV && (c = tcmpi_on()) != NULL)
        irecv_record(c, &q->rv, NULL);
    req_recycle(q);
}

/* Remembers *r under its key, replacing what the key was (a handle given again). False when
 * TCMPI_REQ_MAX are remembered already or out of memory. */
static bool req_add(MPI_Request req, const struct req *r)
{
    uintptr_t key = req_key(req);
    struct req *q;
    size_t b = slot_of(key) & (REQ_BUCKETS - 1);

    if (req == MPI_REQUEST_NULL)
        return false;
    pthread_mutex_lock(&req_mu);
    if ((q = req_take(key)) != NULL)
        req_put(q);
    if ((q = req_free) != NULL)
        req_free = q->next;
    else if (atomic_load(&n_reqs) < TCMPI_REQ_MAX)
        q = malloc(sizeof(*q));
    if (q != NULL) {
        *q = *r;
        q->key = key;
        q->next = req_bucket[b];
        req_bucket[b] = q;
        atomic_store_explicit(&n_reqs, atomic_load(&n_reqs) + 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&req_mu);
    return q != NULL;
}

void tcmpi_req_coll(MPI_Request req, const tc_ext *x)
{
    struct req r = {.kind = REQ_COLL, .comm = x->comm, .seq = x->seq, .comm_size = x->comm_size};

    req_add(req, &r);
}

void tcmpi_req_idup(MPI_Request req, MPI_Comm *newcomm, uint64_t base)
{
    struct req r = {.kind = REQ_IDUP, .newcomm = newcomm, .base = base};

    req_add(req, &r);
}

void tcmpi_req_forget(MPI_Request req)
{
    struct req *q;

    if (!tcmpi_req_any() || req == MPI_REQUEST_NULL)
        return;
    pthread_mutex_lock(&req_mu);
    if ((q = req_take(req_key(req))) != NULL)
        req_put(q);
    pthread_mutex_unlock(&req_mu);
}

void tcmpi_req_flush(void)
{
    pthread_mutex_lock(&req_mu);
    for (size_t b = 0; b < REQ_BUCKETS; b++)
        while (req_bucket[b] != NULL) {
            struct req *q = req_bucket[b];
            req_bucket[b] = q->next;
            atomic_store_explicit(&n_reqs, atomic_load(&n_reqs) - 1, memory_order_relaxed);
            req_put(q);
        }
    pthread_mutex_unlock(&req_mu);
}

void tcmpi_irecv(tc_client *c, uint64_t t0, int rc, MPI_Comm comm, int source, int tag, int count,
                 MPI_Datatype type, MPI_Request req)
{
    struct req r = {.kind = REQ_IRECV,
                    .rv = {.t0 = t0,
                           .t1 = tcmpi_now(),
                           .site = tcmpi_site_now,
                           .source = source,
                           .tag = tag,
                           .count = 0}};

    if (rc == MPI_SUCCESS && (r.rv.k = tcmpi_comm(comm)) != NULL) {
        r.rv.comm = r.rv.k->id;
        r.rv.count = count;
        r.rv.size = tcmpi_bytes(1, type);
    }
    /* a failed call, or one that cannot be remembered: recorded now, as posted */
    if (r.rv.k == NULL || !req_add(req, &r))
        irecv_record(c, &r.rv, NULL);
}

/* ---- recording -------------------------------------------------------------------- */

/*
 * The size of a datatype, 0 when MPI cannot tell. The predefined types point-to-point
 * benchmarks and most codes send are compared first (issue 29 item 7: PMPI_Type_size is
 * ~30 instructions, a fifth of a Send's recording); a derived type's handle may be freed and
 * given again with another size, so nothing else is cached.
 */
static uint64_t type_size(MPI_Datatype type)
{
    int size = 0;

    if (type == MPI_BYTE || type == MPI_CHAR)
        return 1;
    if (type == MPI_DOUBLE)
        return sizeof(double);
    if (type == MPI_INT)
        return sizeof(int);
    if (type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS || size < 0)
        return 0;
    return (uint64_t)size;
}

uint64_t tcmpi_bytes(int count, MPI_Datatype type)
{
    return count <= 0 ? 0 : (uint64_t)count * type_size(type);
}

uint64_t tcmpi_sum(const int *counts, int n)
{
    uint64_t s = 0;

    for (int i = 0; counts != NULL && i < n; i++)
        s += counts[i] > 0 ? (uint64_t)counts[i] : 0;
    return s;
}

void tcmpi_coll(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
                uint64_t elements, uint64_t bytes, const MPI_Request *req)
{
    tc_ext x = {0};

    if (k != NULL) {
        x.has = TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE;
        x.comm = k->id;
        /* every member arrives: both groups of an intercommunicator */
        x.comm_size = (uint64_t)(k->inter ? k->size + k->peers : k->size);
        /* MPI makes the program order collectives on one communicator across threads, but
         * not with a happens-before this counter could rely on: a read-modify-write. */
        x.seq = atomic_fetch_add_explicit(&k->seq, 1, memory_order_relaxed);
        if (req != NULL)
            tcmpi_req_coll(*req, &x);
    }
    tcmpi_record(c, op, t0, t1 - t0, bytes, elements, &x);
    tcmpi_site_count(tcmpi_site_now, op, t1 - t0, bytes);
    if (op == step_on && k == &world) {
        tc_cpu_wait(c);
        tc_step(c);
    }
}

/*
 * A point-to-point entry; id (0: none) and parent (0: none) link a
 * Sendrecv's two sides; site: the call's (tcmpi_site_count).
 */
static void p2p_x(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1,
                  const struct tcmpi_comm *k, int peer, int tag, uint64_t elements, uint64_t bytes,
                  uint64_t id, uint64_t parent, const void *site)
{
    int64_t wpeer = -1; /* the peer's rank in MPI_COMM_WORLD, -1: none */
    tc_ext x;

    if (k != NULL && peer >= 0 && peer < k->peers && (k->world == NULL || k->world[peer] >= 0))
        wpeer = k->world != NULL ? k->world[peer] : peer;
    /* counted before the entry's ext map is even made: the counters' hot path */
    if (tcmpi_p2p_counted &&
        tcmpi_count_p2p(op, k != NULL ? k->id : TCMPI_COUNT_NO_COMM, wpeer, t1, t1 - t0, bytes)) {
        tcmpi_site_count(site, op, t1 - t0, bytes);
        return;
    }
    x = (tc_ext){.has = TC_EXT_TAG, .tag = tag};
    if (k != NULL) {
        x.has |= TC_EXT_COMM;
        x.comm = k->id;
        if (wpeer >= 0) {
            x.has |= TC_EXT_PEER;
            x.peer = (uint64_t)wpeer;
        }
    }
    if (id != 0)
        x.has |= TC_EXT_ID, x.id = id;
    if (parent != 0)
        x.has |= TC_EXT_PARENT, x.parent = parent;
    tcmpi_record(c, op, t0, t1 - t0, bytes, elements, &x);
    tcmpi_site_count(site, op, t1 - t0, bytes);
}

void tcmpi_p2p(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
               int peer, int tag, uint64_t elements, uint64_t bytes)
{
    p2p_x(c, op, t0, t1, k, peer, tag, elements, bytes, 0, 0, tcmpi_site_now);
}

void tcmpi_received(const MPI_Status *st, uint64_t size, int *source, int *tag, uint64_t *elements,
                    uint64_t *bytes)
{
    uint64_t n;

    if (st == NULL)
        return;
    *source = st->MPI_SOURCE, *tag = st->MPI_TAG;
#if defined(OPEN_MPI) && OPEN_MPI
    /* Open MPI keeps the received size in bytes in the status's _ucount, which
     * PMPI_Get_count(MPI_BYTE) returns (below INT_MAX): read at no call's cost (issue 29
     * item 7: a third of a Recv's recording was PMPI_Get_count). */
    n = (uint64_t)st->_ucount;
#else
    {
        int got = 0;

        /* MPI_BYTE counts the bytes whatever the receive's datatype (MPICH keeps the
         * received size in bytes in the status too) */
        if (PMPI_Get_count(st, MPI_BYTE, &got) != MPI_SUCCESS || got == MPI_UNDEFINED || got < 0)
            return;
        n = (uint64_t)got;
    }
#endif
    *bytes = n;
    *elements = size > 0 ? n / size : 0;
}

static _Atomic uint64_t next_id = 1; /* ext ids of entries that others name as their parent */

/*
 * Records an Irecv: with st (its completion's status), what arrived and from
 * whom; without, as posted. Its communicator may have been freed since:
 * then the entry has its id but no peer.
 */
static void irecv_record(tc_client *c, const struct irecv *rv, const MPI_Status *st)
{
    uint64_t n = rv->count > 0 ? (uint64_t)rv->count : 0, bytes = n * rv->size;
    int source = rv->source, tag = rv->tag;
    struct tcmpi_comm gone = {.id = rv->comm, .peers = 0};

    tcmpi_received(st, rv->size, &source, &tag, &n, &bytes);
    if (rv->k == NULL || rv->k == &world) {
        p2p_x(c, TCMPI_IRECV, rv->t0, rv->t1, rv->k, source, tag, n, bytes, 0, 0, rv->site);
        return;
    }
    pthread_mutex_lock(&mu); /* the table's writers: k stays as it is while we read it */
    if (atomic_load_explicit(&rv->k->key, memory_order_relaxed) > KEY_FREED &&
        rv->k->id == rv->comm)
        p2p_x(c, TCMPI_IRECV, rv->t0, rv->t1, rv->k, source, tag, n, bytes, 0, 0, rv->site);
    else
        p2p_x(c, TCMPI_IRECV, rv->t0, rv->t1, &gone, source, tag, n, bytes, 0, 0, rv->site);
    pthread_mutex_unlock(&mu);
}

void tcmpi_sendrecv(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, struct tcmpi_comm *k,
                    int dest, int stag, uint64_t sn, uint64_t sbytes, int source, int rtag,
                    uint64_t rn, uint64_t rbytes, uint64_t rsize, const MPI_Status *st)
{
    uint64_t id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);

    p2p_x(c, op, t0, t1, k, dest, stag, sn, sbytes, id, 0, tcmpi_site_now);
    if (k != NULL)
        tcmpi_received(st, rsize, &source, &rtag, &rn, &rbytes);
    p2p_x(c, TCMPI_RECEIVED, t1, t1, k, source, rtag, rn, rbytes, 0, id, NULL);
}

/* Request i's status after a completion call, or NULL. */
static const MPI_Status *status_of(const struct tcmpi_status *s, int i)
{
    if (s == NULL || s->st == NULL)
        return NULL;
    switch (s->kind) {
    case TCMPI_ST_EACH:
        return &s->st[i];
    case TCMPI_ST_ONE:
        return i == s->index ? s->st : NULL;
    default:
        for (int j = 0; j < s->outcount; j++)
            if (s->indices[j] == i)
                return &s->st[j];
        return NULL;
    }
}

/*
 * The remembered requests the call completed, in order, taken out of the
 * table: each Irecv recorded (c not NULL) with its status, the first max of
 * the others into done; returns their number.
 */
static size_t wait_completed(tc_client *c, int n, const MPI_Request *before,
                             const MPI_Request *after, const struct tcmpi_status *s,
                             struct req *done, size_t max)
{
    size_t n_done = 0;

    pthread_mutex_lock(&req_mu);
    for (int i = 0; i < n; i++) {
        struct req *q;
        if (before[i] == MPI_REQUEST_NULL || after[i] != MPI_REQUEST_NULL ||
            (q = req_take(req_key(before[i]))) == NULL)
            continue;
        if (q->kind == REQ_IRECV) {
            if (c != NULL)
                irecv_record(c, &q->rv, status_of(s, i));
        } else if (n_done < max) {
            done[n_done++] = *q;
        }
        req_recycle(q);
    }
    pthread_mutex_unlock(&req_mu);
    return n_done;
}

#define WAIT_DONE_MAX 64 /* collectives one completion call reports; more complete unreported */

void tcmpi_wait(tc_client *c, enum tcmpi_op op, uint64_t t0, uint64_t t1, int n,
                const MPI_Request *before, const MPI_Request *after, const struct tcmpi_status *s)
{
    struct req done[WAIT_DONE_MAX];
    size_t n_done =
        before != NULL ? wait_completed(c, n, before, after, s, done, WAIT_DONE_MAX) : 0;
    size_t n_coll = 0;
    tc_ext x = {0};

    for (size_t i = 0; i < n_done; i++) {
        if (done[i].kind == REQ_IDUP)
            tcmpi_comm_born(*done[i].newcomm, done[i].base);
        else
            done[n_coll++] = done[i];
    }
    n_done = n_coll;
    if (c == NULL)
        return;

    if (n_done > 0) {
        x.has = TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE;
        x.comm = done[0].comm, x.seq = done[0].seq, x.comm_size = done[0].comm_size;
    }
    if (n_done > 1) {
        x.has |= TC_EXT_ID;
        x.id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    }
    tcmpi_record(c, op, t0, t1 - t0, 0, n > 0 ? (uint64_t)n : 0, n_done > 0 ? &x : NULL);
    tcmpi_site_count(tcmpi_site_now, op, t1 - t0, 0);
    for (size_t i = 1; i < n_done; i++) {
        tc_ext y = {.has = TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE | TC_EXT_PARENT,
                    .comm = done[i].comm,
                    .seq = done[i].seq,
                    .comm_size = done[i].comm_size,
                    .parent = x.id};
        tcmpi_record(c, TCMPI_COMPLETED, t1, 0, 0, 0, &y);
    }
}
