/*
 * store_writer.c — the writer thread's loop and queues; see store_writer.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <uv.h>

#include "batchpool.h"
#include "fault.h"
#include "log.h"
#include "store_apply.h"
#include "store_catalog.h"
#include "store_int.h"
#include "store_recover.h"
#include "store_writer.h"
#include "util.h"
#include "wsess.h"

#define QUANTUM_ENTRIES 4096  /* entries of one session applied per round */
#define COMMIT_ENTRIES  65536 /* a transaction commits at this many entries */
/*
 * In the blocks format a transaction may hold more: an entry costs a few
 * bytes of a block, and what a commit costs beyond the entries (the
 * aggregates' touched histogram chunks and rank rows) is then paid for that
 * many entries. What the daemon holds grows with it: the rank aggregates
 * keep each compute interval of the open transaction until its commit
 * (ranks.h, exposed communication), ~40 bytes per entry, beside the queue
 * (~100 bytes per queued entry, bounded by main.c's DEFAULT_QUEUE_HIGH).
 * 256 Ki with a queue of 128 Ki entries: in the 16 x 1 M ingest benchmark
 * the daemon's peak RSS was 49 MiB, for 0.36 us of writer CPU per entry;
 * 128 Ki with a queue of 256 Ki took 57 MiB and 0.42 us, 512 Ki 60 MiB and
 * no less CPU, 1 Mi 76 MiB (the section "Writer storage and stalls" of
 * docs/BENCHMARKS.md before 2026-11-28, in git).
 */
#define COMMIT_ENTRIES_BLOCKS (1u << 18)

void store_writer_finish(struct store *s, struct store_job *job)
{
    if (job->cookie != NULL || (job->type == STORE_BATCH && job->rc < 0)) {
        job->next = NULL;
        *s->wr.finished_tail = job;
        s->wr.finished_tail = &job->next;
    } else {
        store_job_free(job);
    }
}

/*
 * Applies one job of w. A job that fails rolls back w's whole transaction:
 * what a file holds is exactly what was counted stored, never a part of it.
 */
static void store_writer_ended(struct store *s, int64_t id);

static void writer_apply(struct store *s, struct wsess *w, struct store_job *job)
{
    job->next = NULL;
    switch (job->type) {
    case STORE_SESSION_END:
        job->rc = store_catalog_session_end(s, w, job);
        fault_end(); /* test builds: the session's fault ends with it */
        store_writer_ended(s, job->session_id);
        store_writer_finish(s, job);
        return;
    case STORE_DELETE:
        job->rc = store_catalog_session_delete(s, w, job);
        store_writer_finish(s, job);
        return;
    case STORE_FLUSH:
        w->txn.flush_waiting = true;
        break;
    case STORE_OPEN:
        fault_open(); /* test builds: a new session starts the fault's count over */
        job->rc = store_catalog_session_open(s, w, job);
        break;
    default:
        if (job->type == STORE_BATCH)
            fault_batch(); /* test builds: a fault counts from here (fault.h) */
        job->rc = store_apply_in_txn(s, w, job);
        /*
         * Applied or not, a batch's arrays are not needed again, only its count
         * is: they go back to the loop for the next batches (batchpool.h).
         */
        if (job->type == STORE_BATCH) {
            size_t n = job->u.batch.b.n;

            batchpool_put_batch(&job->u.batch.b, job->u.batch.dev_ids, job->u.batch.shape_ids,
                                job->u.batch.ids_cap);
            job->u.batch.b.n = n;
            job->u.batch.dev_ids = NULL;
            job->u.batch.shape_ids = NULL;
        }
        break;
    }
    *w->txn.applied_tail = job;
    w->txn.applied_tail = &job->next;
    if (job->rc < 0)
        wsess_abort(s, w);
}

/* ---- the writer thread --------------------------------------------------- */

/* Moves newly queued jobs into their sessions' queues; sessions with work join the round. */
static void writer_intake(struct store *s, struct store_job *list)
{
    struct store_job *job, *next;
    struct wsess *w;

    for (job = list; job != NULL; job = next) {
        next = job->next;
        job->next = NULL;
        if ((w = wsess_get(s, job->session_id)) == NULL) {
            log_error("storage: out of memory: a job of session %lld is lost",
                      (long long)job->session_id);
            store_job_uncharge(s, job);
            atomic_fetch_sub(&s->queued, store_job_entries(job));
            atomic_fetch_sub(&s->jobs, 1);
            atomic_fetch_add(&s->failed, store_job_entries(job));
            job->rc = -ENOMEM;
            if (job->type == STORE_SESSION_END)
                store_writer_ended(s, job->session_id); /* readers must not wait for it */
            store_writer_finish(s, job);
            continue;
        }
        *w->q_tail = job;
        w->q_tail = &job->next;
        if (!w->ready) {
            w->ready = true;
            w->ready_next = NULL;
            *s->wr.ready_tail = w;
            s->wr.ready_tail = &w->ready_next;
        }
    }
}

/*
 * One session's turn: up to QUANTUM_ENTRIES of its queued entries (at least
 * one job), so that a flood in one session delays another session's flush
 * by at most a quantum per busy session. Its transaction commits when a
 * flush waits, when it holds COMMIT_ENTRIES, or when stopping; otherwise it
 * stays open for more (up to the commit interval, writer_commit_due()).
 */
static void writer_turn(struct store *s, struct wsess *w, bool stopping)
{
    uint64_t budget = 0;

    while (w->q != NULL && budget < QUANTUM_ENTRIES) {
        struct store_job *job = w->q;
        uint64_t n = store_job_entries(job);

        if ((w->q = job->next) == NULL)
            w->q_tail = &w->q;
        budget += n ? n : 1;
        store_job_uncharge(s, job);
        writer_apply(s, w, job); /* may complete (and free) the job */
        atomic_fetch_sub(&s->queued, n);
        atomic_fetch_sub(&s->jobs, 1);
    }
    if (w->txn.applied != NULL &&
        (w->txn.flush_waiting || !w->txn.open ||
         w->txn.entries >= (w->bk.on ? COMMIT_ENTRIES_BLOCKS : COMMIT_ENTRIES) || stopping))
        wsess_commit(s, w);
}

/* Every session with queued jobs takes one turn, in order. */
static void writer_round(struct store *s, bool stopping)
{
    struct wsess *w = s->wr.ready, *next;

    s->wr.ready = NULL;
    s->wr.ready_tail = &s->wr.ready;
    for (; w != NULL; w = next) {
        next = w->ready_next;
        w->ready = false;
        writer_turn(s, w, stopping);
        if (w->q != NULL) {
            w->ready = true;
            w->ready_next = NULL;
            *s->wr.ready_tail = w;
            s->wr.ready_tail = &w->ready_next;
        }
    }
}

/*
 * Commits transactions open for the commit interval, frees the state of
 * sessions that ended. Returns the ms until the next transaction is due, or
 * -1 when none is open.
 */
static int64_t writer_commit_due(struct store *s)
{
    uint64_t now = store_now_ms();
    int64_t wait = -1;
    struct wsess *w, **pp;

    for (pp = &s->wr.sess; (w = *pp) != NULL;) {
        if (w->txn.open) {
            uint64_t due = w->txn.started + s->wr.commit_ms;
            if (due <= now)
                wsess_commit(s, w);
            else if (wait < 0 || (int64_t)(due - now) < wait)
                wait = (int64_t)(due - now);
        }
        if (w->ended && w->q == NULL && w->txn.applied == NULL && !w->ready)
            wsess_free(s, w); /* unlinks *pp */
        else
            pp = &w->next;
    }
    return wait;
}

/* Hands what completed back to the loop, in order; the async also reports progress. */
static void writer_publish(struct store *s)
{
    pthread_mutex_lock(&s->q.mu);
    if (s->wr.finished != NULL) {
        struct store_job **pp = &s->q.done;
        while (*pp != NULL)
            pp = &(*pp)->next;
        *pp = s->wr.finished; /* keep completion order across rounds */
        s->wr.finished = NULL;
        s->wr.finished_tail = &s->wr.finished;
    }
    pthread_mutex_unlock(&s->q.mu);
    uv_async_send(&s->async);
}

static void writer_wait(struct store *s, int64_t ms)
{
    struct timespec ts;

    if (ms < 0) {
        pthread_cond_wait(&s->q.cv, &s->q.mu);
        return;
    }
    ts = util_deadline_in(CLOCK_MONOTONIC, (uint64_t)ms);
    pthread_cond_timedwait(&s->q.cv, &s->q.mu, &ts);
}

static void *writer_thread(void *arg)
{
    struct store *s = arg;
    struct store_job *list;
    bool stopping;

    fault_thread(); /* test builds: this thread's storage calls are the ones that fail */
    for (;;) {
        int64_t wait = store_recover_retry(s, writer_commit_due(s));

        writer_publish(s);
        pthread_mutex_lock(&s->q.mu);
        if (s->q.head == NULL && s->wr.ready == NULL && !s->q.stopping)
            writer_wait(s, wait);
        list = s->q.head;
        s->q.head = s->q.tail = NULL;
        stopping = s->q.stopping;
        pthread_mutex_unlock(&s->q.mu);
        writer_intake(s, list);
        if (stopping && s->wr.ready == NULL)
            break;
        writer_round(s, stopping);
    }
    while (s->wr.sess != NULL) {
        wsess_commit(s, s->wr.sess);
        wsess_free(s, s->wr.sess);
    }
    writer_publish(s);
    return NULL;
}

/* Loop thread, under q.mu: notes that the end of session id is queued. */
static void store_writer_ending(struct store *s, int64_t id)
{
    if (s->q.n_ending == s->q.cap_ending) {
        size_t cap = s->q.cap_ending ? 2 * s->q.cap_ending : 16;
        int64_t *p = realloc(s->q.ending, cap * sizeof(*p));

        if (p == NULL)
            return; /* readers of this session will not wait: they read what is committed */
        s->q.ending = p;
        s->q.cap_ending = cap;
    }
    s->q.ending[s->q.n_ending++] = id;
}

/* Writer thread: the end of session id is applied; wakes the readers waiting for it. */
static void store_writer_ended(struct store *s, int64_t id)
{
    pthread_mutex_lock(&s->q.mu);
    for (size_t i = 0; i < s->q.n_ending; i++) {
        if (s->q.ending[i] == id) {
            s->q.ending[i] = s->q.ending[--s->q.n_ending];
            break;
        }
    }
    pthread_cond_broadcast(&s->q.ended_cv);
    pthread_mutex_unlock(&s->q.mu);
}

static bool store_writer_is_ending(const struct store *s, int64_t id)
{
    for (size_t i = 0; i < s->q.n_ending; i++)
        if (s->q.ending[i] == id)
            return true;
    return false;
}

int store_wait_ended(struct store *s, int64_t id, unsigned timeout_ms)
{
    struct timespec until = util_deadline_in(CLOCK_MONOTONIC, timeout_ms);
    int rc = 0;

    pthread_mutex_lock(&s->q.mu);
    while (rc == 0 && store_writer_is_ending(s, id))
        rc = pthread_cond_timedwait(&s->q.ended_cv, &s->q.mu, &until);
    pthread_mutex_unlock(&s->q.mu);
    return rc == ETIMEDOUT ? -ETIMEDOUT : 0;
}

void store_enqueue(struct store *s, struct store_job *job)
{
    job->next = NULL;
    job->cost = store_job_cost(job);
    atomic_fetch_add(&s->queued_bytes, job->cost);
    if (job->budget != NULL)
        atomic_fetch_add(&job->budget->bytes, job->cost);
    atomic_fetch_add(&s->queued, store_job_entries(job));
    atomic_fetch_add(&s->jobs, 1);
    pthread_mutex_lock(&s->q.mu);
    if (job->type == STORE_SESSION_END)
        store_writer_ending(s, job->session_id);
    if (s->q.tail != NULL)
        s->q.tail->next = job;
    else
        s->q.head = job;
    s->q.tail = job;
    pthread_cond_signal(&s->q.cv);
    pthread_mutex_unlock(&s->q.mu);
}

/* Sends coalesce: drain all. */
void store_writer_async_cb(uv_async_t *handle)
{
    struct store *s = handle->data;
    struct store_job *list, *next;

    pthread_mutex_lock(&s->q.mu);
    list = s->q.done;
    s->q.done = NULL;
    pthread_mutex_unlock(&s->q.mu);
    for (; list != NULL; list = next) {
        next = list->next;
        s->done_cb(s, list, s->cb_data);
    }
    if (s->progress_cb != NULL)
        s->progress_cb(s, s->cb_data);
}

int store_writer_start(struct store *s)
{
    int rc = pthread_create(&s->wr.thread, NULL, writer_thread, s);

    if (rc != 0)
        return -rc;
    s->wr.started = true;
    return 0;
}

void store_writer_stop(struct store *s)
{
    pthread_mutex_lock(&s->q.mu);
    s->q.stopping = true;
    pthread_cond_signal(&s->q.cv);
    pthread_mutex_unlock(&s->q.mu);
    pthread_join(s->wr.thread, NULL);
    s->wr.started = false;
}
