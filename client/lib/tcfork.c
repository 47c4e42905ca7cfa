/*
 * tcfork.c — fork() after tc_open(): the list of open clients, the
 * pthread_atfork handlers that leave the child a consistent copy of each,
 * not connected, and that copy's restart (its own connection and writer
 * thread) at its first recording call or flush. See tracectl.h for the
 * rule as users see it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcint.h"
#include "util.h"

/*
 * A fork copies a client into the child without its writer thread, sharing
 * the parent's socket. The fork handlers make the copy consistent (no lock
 * held, no ring half-written: the prepare handler takes every client's locks,
 * so the writer thread is outside tcenc_drain() when the fork happens) and turn it
 * into a client that has not connected yet: the parent's socket, pipe and
 * rings are let go (what the rings hold is the parent's to send), the counts
 * start at 0. The child connects at its first recording call or flush
 * (tcfork_restart), so a child that only execs costs the daemon nothing.
 */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_client *live; /* every open client but the TRACECTL_DISABLE=1 ones */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

void tcfork_add(tc_client *c)
{
    pthread_mutex_lock(&live_mu);
    c->live_next = live;
    live = c;
    pthread_mutex_unlock(&live_mu);
}

void tcfork_remove(tc_client *c)
{
    pthread_mutex_lock(&live_mu);
    for (tc_client **p = &live; *p != NULL; p = &(*p)->live_next)
        if (*p == c) {
            *p = c->live_next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
}

/*
 * Parks c's writer thread (c->mu held) at the top of its loop for the fork:
 * there it holds no lock of its own and is in no allocation. glibc's malloc
 * is fork-safe without this, but an allocator without fork handlers (GCC
 * 12's AddressSanitizer, for one) is left locked in the child if the writer
 * was inside it, and the child's first thread creation then never returns.
 * A writer that does not park within PARK_MS (a forked child's, still
 * saying hello) is forked where it is, as before.
 */
#define PARK_MS 200

static void writer_park(tc_client *c)
{
    struct timespec until;

    if (!c->writer_running || c->writer_done)
        return;
    c->park = true;
    tcwriter_wake(c);
    until = util_deadline_in(CLOCK_REALTIME, PARK_MS);
    while (!c->parked && !c->writer_done)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
            break;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&live_mu);
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        pthread_mutex_lock(&c->mu);
        writer_park(c);
        pthread_mutex_lock(&c->shape_mu);
    }
}

static void fork_parent(void)
{
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        c->park = false;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->shape_mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&live_mu);
}

/* The child's copy of c: only stores and close(), nothing that could wait. */
static void client_forked(tc_client *c)
{
    struct ring **tail = &c->stale;

    c->writer_running = c->park = c->parked = false; /* the writer was the parent's */
    atomic_store(&c->dropped, 0);
    atomic_store(&c->rejected, 0);
    for (size_t i = 0; i < DROP_CHUNKS; i++) { /* the parent's drops are its own */
        struct op_drop *chunk = atomic_load(&c->drops[i]);
        if (chunk != NULL)
            memset(chunk, 0, DROP_CHUNK * sizeof(*chunk));
    }
    if (c->offline)
        return; /* it keeps counting what it would have sent, from 0 */
    atomic_store(&c->err_set, 0);
    atomic_store(&c->err_code, 0);
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    c->fd = c->wake[0] = c->wake[1] = -1;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = c->rings;
    c->rings = NULL;
    if (!c->forked)
        c->ops_at_fork = c->n_ops; /* a grandchild: its parent had not sent its own yet */
    c->forked = true;
    msgpack_sbuffer_clear(&c->control); /* the parent's to send */
    c->n_meta_keys = 0;                 /* metadata is per process */
    msgpack_sbuffer_clear(&c->out);
    c->out_off = 0;
    c->flush_req = c->flush_acked = c->flush_sent = c->flush_counted = 0;
    c->flush_rc = 0;
    c->closing = false;
    c->writer_done = false;
    atomic_store(&c->close_deadline, 0);
    c->broken = false;
    c->packed = 0;
    c->first_mark = c->n_marks = 0;
    atomic_store(&c->sent, 0);
    atomic_store(&c->acked, 0);
    atomic_store(&c->unconfirmed, 0);
    c->loss_counted = false;
    c->torn = false;
    c->session_id = -1;
    pthread_cond_init(&c->cv, NULL); /* its waiters were the parent's threads */
    if (tcring_tls.gen == c->gen)
        tcring_tls.gen = 0; /* this thread's next record takes my_ring's slow path */
}

static void fork_child(void)
{
    for (tc_client *c = live; c != NULL; c = c->live_next) {
        client_forked(c);
        pthread_mutex_unlock(&c->shape_mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&live_mu);
}

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Installs the fork handlers, once per process (tc_open calls it). */
void tcfork_init(void)
{
    pthread_once(&fork_once, fork_register);
}

/*
 * A forked child's client (c->mu held): a writer thread of its own that
 * connects and says hello as a new process of the session, resolved from
 * this process's environment, and sends first the ops the parent had
 * defined, then, when it kept its parent's rank (a worker of that rank, such
 * as a DataLoader worker, not a rank of its own), the metadata
 * PROTO_META_WORKER_OF with its parent's pid, then what this process queued
 * since. The daemon counts a worker's entries in its rank's totals but in no
 * step: the step they carry is the one the parent had at the fork, not the
 * step of the work they do. 0, or a negative errno after which c is an
 * offline client (it counts what it drops).
 */
int tcfork_restart(tc_client *c)
{
    int64_t parent_rank = c->h_rank;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = -ENOMEM;

    c->forked = false;
    tcring_free(c->stale);
    c->stale = NULL;
    if (c->reader_ok)
        proto_reader_deinit(&c->reader);
    if (!(c->reader_ok = proto_reader_init(&c->reader, 0) == 0) || (rc = tcconn_resolve(c)) < 0)
        goto fail;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < c->ops_at_fork; i++) {
        struct proto_opdef def = {.id = (uint32_t)i + 1, .name = c->ops[i], .category = c->cats[i]};
        proto_pack_ops(&pk, &def, 1);
    }
    if (parent_rank >= 0 && c->h_rank == parent_rank) {
        struct proto_kv kv = {.key = (char *)PROTO_META_WORKER_OF, .type = PROTO_V_INT};
        kv.v.i = (int64_t)getppid();
        proto_pack_meta(&pk, &kv, 1);
    }
    msgpack_sbuffer_write(&sb, c->control.data, c->control.size);
    msgpack_sbuffer_destroy(&c->control);
    c->control = sb;
    c->need_connect = true;
    if (c->clock) /* the parent's anchors hold here too, but may be old: a fresh one */
        tcclock_init(&c->tsc, tcclock_read_anchor(NULL), c->tsc.rate);
    if ((rc = tcwriter_start(c)) < 0)
        goto fail;
    return 0;
fail:
    tcclient_error(c, rc, "the forked process could not start its writer thread: %s",
                   strerror(-rc));
    c->disabled = true;
    c->offline = true;
    return rc;
}
