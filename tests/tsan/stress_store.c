/*
 * stress_store.c — a ThreadSanitizer stress program for the storage writer.
 *
 * A plain program (Criterion forks and runs its own threads, which TSan does
 * not follow well): it creates a store in a temporary directory, and from the
 * loop thread, spread over many loop iterations, enqueues sessions, processes,
 * ops, devices, metadata, batches and flush markers for a few sessions while
 * the writer thread commits; with more than MAX_OUT flushes in flight the loop
 * waits for completions, so enqueues, commits and completions interleave
 * hundreds of times. Every flush must come back once, with rc 0, in
 * submission order per process; the loop thread meanwhile reads the store's
 * figures (atomics, the mutex-guarded last error) as `status` does. After the
 * last flush it ends the sessions, stops and frees the store, closes the loop
 * and counts the rows in each session file with SQLite.
 *
 * Exit status 0 when everything matches, 1 otherwise (TSan's own reports
 * make it exit non-zero too: scripts/tsan.sh sets halt_on_error=1).
 *
 *   stress_store [ROUNDS]      default 300 (scripts/tsan.sh runs 1000)
 */
#include <limits.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "store.h"
#include "vtab.h"

#define SESSIONS    4
#define PROCS       2  /* per session */
#define PER_BATCH   64 /* entries per batch */
#define FLUSH_EVERY 5  /* rounds between flushes of a process */
#define MAX_OUT     8  /* flushes in flight before the loop waits (as backpressure would) */

struct proc {
    uint64_t sent;      /* entries enqueued */
    uint64_t flushes;   /* flush markers enqueued */
    uint64_t acked;     /* flush completions seen */
    uint64_t last_seq;  /* seq of the last completion (order check) */
    uint64_t ack_count; /* entries the last completion covered */
};

struct stress {
    uv_loop_t loop;
    uv_idle_t idle;
    struct store *store;
    int rounds, round;
    struct proc procs[SESSIONS][PROCS];
    uint64_t flushes_out; /* enqueued and not yet completed */
    uint64_t progress_calls;
    bool waiting; /* the idle handle is stopped until flushes come back */
    int errors;
};

#define FAIL(st, ...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "stress_store: " __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                                       \
        (st)->errors++;                                                                            \
    } while (0)

static int64_t session_id(int s)
{
    return s + 1;
}

static int64_t process_id(int s, int p)
{
    return s * PROCS + p + 1;
}

static void stress_idle_cb(uv_idle_t *idle);

static void stress_done_cb(struct store *store, struct store_job *job, void *data)
{
    struct stress *st = data;
    struct proc *pr = job->cookie;

    (void)store;
    if (job->type != STORE_FLUSH)
        FAIL(st, "a completed job of type %d", (int)job->type);
    else if (job->rc != 0)
        FAIL(st, "flush of session %lld failed: %d", (long long)job->session_id, job->rc);
    else if (job->u.flush.seq != pr->last_seq + 1)
        FAIL(st, "flush %llu came back after %llu", (unsigned long long)job->u.flush.seq,
             (unsigned long long)pr->last_seq);
    pr->last_seq = job->u.flush.seq;
    pr->ack_count = job->u.flush.stored;
    pr->acked++;
    st->flushes_out--;
    store_job_free(job);
    if (st->waiting && st->flushes_out < MAX_OUT / 2) {
        st->waiting = false;
        uv_idle_start(&st->idle, stress_idle_cb);
    }
}

static void stress_progress_cb(struct store *store, void *data)
{
    struct stress *st = data;

    /* read what `status` reads, from the loop thread, while the writer runs */
    (void)store_queued(store);
    (void)store_queue_jobs(store);
    st->progress_calls++;
}

static void enqueue_name(struct stress *st, enum store_job_type type, int s, uint32_t id,
                         const char *name, const char *category)
{
    struct store_job *j = store_job_new(type, session_id(s));

    j->u.name.id = id;
    j->u.name.name = strdup(name);
    j->u.name.category = category ? strdup(category) : NULL;
    store_enqueue(st->store, j);
}

static void enqueue_session(struct stress *st, int s)
{
    char name[32];
    struct store_job *j = store_job_new(STORE_OPEN, session_id(s));

    snprintf(name, sizeof(name), "stress-%d", s);
    j->u.open.name = strdup(name);
    j->u.open.started_ns = 1000 + s;
    j->u.open.uid = -1;
    store_enqueue(st->store, j);
    for (int p = 0; p < PROCS; p++) {
        j = store_job_new(STORE_PROCESS, session_id(s));
        j->u.process.id = process_id(s, p);
        j->u.process.rank = p;
        j->u.process.world = PROCS;
        j->u.process.pid = 4000 + p;
        j->u.process.uid = -1;
        j->u.process.host = strdup("node1");
        j->u.process.device = strdup(p ? "gpu:1" : "gpu:0");
        store_enqueue(st->store, j);

        j = store_job_new(STORE_META, session_id(s));
        j->u.meta.process_id = process_id(s, p);
        j->u.meta.n = 1;
        j->u.meta.kv = calloc(1, sizeof(struct proto_kv));
        j->u.meta.kv[0].key = strdup("model");
        j->u.meta.kv[0].type = PROTO_V_STR;
        j->u.meta.kv[0].v.s = strdup("resnet50");
        store_enqueue(st->store, j);
    }
    enqueue_name(st, STORE_OP, s, 1, "matmul", "compute");
    enqueue_name(st, STORE_OP, s, 2, "allreduce", "comm");
    enqueue_name(st, STORE_DEVICE, s, 1, "gpu:0", NULL);
    enqueue_name(st, STORE_DEVICE, s, 2, "gpu:1", NULL);
}

/*
 * A batch of PER_BATCH entries; every other entry has out_shape [2, 3], shape id 1 (the loop's
 * session_shape gives ids; the writer writes the row).
 */
static void enqueue_batch(struct stress *st, int s, int p)
{
    static const char shape[] = {(char)0x92, 0x02, 0x03};
    struct proc *pr = &st->procs[s][p];
    struct store_job *j = store_job_new(STORE_BATCH, session_id(s));
    struct proto_batch *b = &j->u.batch.b;

    j->u.batch.process_id = process_id(s, p);
    b->n = PER_BATCH;
    b->entries = calloc(PER_BATCH, sizeof(*b->entries));
    b->blob = malloc(sizeof(shape));
    memcpy(b->blob, shape, sizeof(shape));
    b->blob_len = sizeof(shape);
    j->u.batch.dev_ids = calloc(PER_BATCH, sizeof(uint32_t));
    j->u.batch.shape_ids = calloc(PER_BATCH, sizeof(uint32_t));
    for (size_t i = 0; i < PER_BATCH; i++) {
        struct proto_entry *e = &b->entries[i];
        e->step = pr->sent / 100;
        e->op_id = 1 + (uint32_t)(i % 2);
        e->start_ns = 1000 * (pr->sent + i);
        e->dur_ns = 10 + i;
        e->elements = i % 2 ? 6 : 0;
        e->mem_bytes = 4 * i;
        e->out_len = i % 2 ? sizeof(shape) : 0;
        j->u.batch.shape_ids[i] = i % 2 ? 1 : 0;
        j->u.batch.dev_ids[i] = 1 + (uint32_t)p;
    }
    pr->sent += PER_BATCH;
    store_enqueue(st->store, j);
}

static void enqueue_flush(struct stress *st, int s, int p)
{
    struct proc *pr = &st->procs[s][p];
    struct store_job *j = store_job_new(STORE_FLUSH, session_id(s));

    j->cookie = pr;
    j->u.flush.process_id = process_id(s, p);
    j->u.flush.seq = ++pr->flushes;
    j->u.flush.stored = pr->sent;
    st->flushes_out++;
    store_enqueue(st->store, j);
}

/* One round per loop iteration, so that enqueues interleave with commits and completions. */
static void stress_idle_cb(uv_idle_t *idle)
{
    struct stress *st = idle->data;
    char err[256];

    if (st->round == st->rounds) {
        uv_idle_stop(idle);
        return;
    }
    if (st->flushes_out >= MAX_OUT) {
        /* let the writer catch up: the loop blocks until completions come back, so that
         * enqueues, commits and completions interleave many times */
        uv_idle_stop(idle);
        st->waiting = true;
        return;
    }
    for (int s = 0; s < SESSIONS; s++)
        for (int p = 0; p < PROCS; p++) {
            enqueue_batch(st, s, p);
            /* the last round always flushes, so that every entry gets acked */
            if (st->round % FLUSH_EVERY == (s + p) % FLUSH_EVERY || st->round == st->rounds - 1)
                enqueue_flush(st, s, p);
        }
    store_last_error(st->store, err, sizeof(err));
    if (err[0] != '\0')
        FAIL(st, "storage error: %s", err);
    st->round++;
}

static void end_sessions(struct stress *st)
{
    for (int s = 0; s < SESSIONS; s++) {
        uint64_t entries = 0;
        for (int p = 0; p < PROCS; p++) {
            struct store_job *j = store_job_new(STORE_PROCESS_END, session_id(s));
            j->u.process_end.process_id = process_id(s, p);
            j->u.process_end.ended_ns = 2000;
            j->u.process_end.bye = true;
            store_enqueue(st->store, j);
            entries += st->procs[s][p].sent;
        }
        struct store_job *j = store_job_new(STORE_SESSION_END, session_id(s));
        j->u.session_end.ended_ns = 3000;
        j->u.session_end.processes = PROCS;
        j->u.session_end.entries = entries;
        store_enqueue(st->store, j);
    }
}

static long long query_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt;
    long long n = -1;

    /* vtab_register: a file in the blocks format (the default) reads through the module. */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        vtab_register(db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK) {
        if (sqlite3_step(stmt) == SQLITE_ROW)
            n = sqlite3_column_int64(stmt, 0);
        sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
    return n;
}

static void verify_files(struct stress *st, const char *dir)
{
    char path[PATH_MAX];

    for (int s = 0; s < SESSIONS; s++) {
        long long want = 0, got;
        snprintf(path, sizeof(path), "%s/sessions/%lld.db", dir, (long long)session_id(s));
        for (int p = 0; p < PROCS; p++) {
            char sql[128];
            snprintf(sql, sizeof(sql), "SELECT count(*) FROM entries WHERE process_id = %lld",
                     (long long)process_id(s, p));
            got = query_int(path, sql);
            if (got != (long long)st->procs[s][p].sent)
                FAIL(st, "%s: process %lld has %lld entries, want %llu", path,
                     (long long)process_id(s, p), got, (unsigned long long)st->procs[s][p].sent);
            want += (long long)st->procs[s][p].sent;
        }
        if ((got = query_int(path, "SELECT count(*) FROM entries")) != want)
            FAIL(st, "%s: %lld entries, want %lld", path, got, want);
        if ((got = query_int(path, "SELECT count(*) FROM processes")) != PROCS)
            FAIL(st, "%s: %lld processes, want %d", path, got, PROCS);
    }
    snprintf(path, sizeof(path), "%s/catalog.db", dir);
    long long n = query_int(path, "SELECT count(*) FROM sessions WHERE state = 'ended'");
    if (n != SESSIONS)
        FAIL(st, "catalog: %lld ended sessions, want %d", n, SESSIONS);
}

static int stress_run(struct stress *st, const char *dir)
{
    char err[256];
    int rc;

    if (uv_loop_init(&st->loop) != 0)
        return -1;
    st->store =
        store_new(&st->loop, dir, stress_done_cb, stress_progress_cb, st, &rc, err, sizeof(err));
    if (st->store == NULL) {
        fprintf(stderr, "stress_store: store_new: %s\n", err);
        return -1;
    }
    if (store_start(st->store) != 0) {
        fprintf(stderr, "stress_store: store_start failed\n");
        return -1;
    }
    for (int s = 0; s < SESSIONS; s++)
        enqueue_session(st, s);
    uv_idle_init(&st->loop, &st->idle);
    st->idle.data = st;
    uv_idle_start(&st->idle, stress_idle_cb);
    /* the idle handle keeps the loop turning until the last round is enqueued */
    while (st->round < st->rounds || st->flushes_out > 0)
        uv_run(&st->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&st->idle, NULL);
    if (store_stored(st->store) != (uint64_t)st->rounds * SESSIONS * PROCS * PER_BATCH)
        FAIL(st, "store_stored() = %llu after the last ack",
             (unsigned long long)store_stored(st->store));
    for (int s = 0; s < SESSIONS; s++)
        for (int p = 0; p < PROCS; p++) {
            struct proc *pr = &st->procs[s][p];
            if (pr->acked != pr->flushes || pr->ack_count != pr->sent)
                FAIL(st, "process %d/%d: %llu of %llu flushes acked", s, p,
                     (unsigned long long)pr->acked, (unsigned long long)pr->flushes);
        }
    end_sessions(st);
    store_free(st->store); /* drains, commits, joins the writer; closes the async handle */
    uv_run(&st->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&st->loop) != 0)
        FAIL(st, "the loop did not close cleanly");
    if (st->progress_calls == 0)
        FAIL(st, "no progress callback ran");
    return 0;
}

int main(int argc, char **argv)
{
    static struct stress st;
    char dir[] = "/tmp/tcstress.XXXXXX", cmd[64];

    st.rounds = argc > 1 ? atoi(argv[1]) : 300;
    if (st.rounds <= 0 || store_configure() != 0 || mkdtemp(dir) == NULL) {
        fprintf(stderr, "usage: stress_store [ROUNDS]\n");
        return 1;
    }
    if (stress_run(&st, dir) == 0)
        verify_files(&st, dir);
    else
        st.errors++;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        st.errors++;
    printf("stress_store: %d sessions x %d processes, %d rounds, %llu entries, %llu commit"
           " callbacks: %s\n",
           SESSIONS, PROCS, st.rounds, (unsigned long long)st.rounds * SESSIONS * PROCS * PER_BATCH,
           (unsigned long long)st.progress_calls, st.errors ? "FAILED" : "ok");
    return st.errors ? 1 : 0;
}
