/* session.c — the session registry; see session.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis.h"
#include "log.h"
#include "session.h"
#include "peerarr.h"
#include "util.h"

#ifdef TRACECTLD_TEST_CLOCK
/* The test offset in seconds ($TRACECTLD_TEST_CLOCK names a file holding it). */
static int64_t session_test_offset_ns(void)
{
    const char *path = getenv("TRACECTLD_TEST_CLOCK");
    long long v = 0;
    FILE *f;

    if (path == NULL || (f = fopen(path, "r")) == NULL)
        return 0;
    if (fscanf(f, "%lld", &v) != 1)
        v = 0;
    fclose(f);
    return (int64_t)v * 1000000000;
}
#endif

int64_t session_now_ns(void)
{
    struct timespec ts;
    int64_t now;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#ifdef TRACECTLD_TEST_CLOCK
    now += session_test_offset_ns();
#endif
    return now;
}

uint64_t session_mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

int64_t session_wall_ns(const struct session *s)
{
    return s->started_ns + (int64_t)(session_mono_ns() - s->started_mono);
}

int64_t session_clock_anchor(int64_t wall_now, int64_t newest, uint64_t retain_ns)
{
    if (newest > 0 && wall_now > newest && (uint64_t)(wall_now - newest) > retain_ns)
        return newest;
    return wall_now;
}

void session_clock_start(struct registry *reg, uint64_t retain_ns)
{
    int64_t newest = 0, wall = session_now_ns();

    for (const struct session *s = reg->list; s != NULL; s = s->next) {
        if (s->started_ns > newest)
            newest = s->started_ns;
        if (s->ended_ns > newest)
            newest = s->ended_ns;
    }
    reg->anchor_mono = session_mono_ns();
    reg->anchor_wall = retain_ns > 0 ? session_clock_anchor(wall, newest, retain_ns) : wall;
    if (reg->anchor_wall != wall)
        log_warn("the clock is %lld days past the newest session: not trusted for --retain-days,"
                 " which counts age from that session's time instead",
                 (long long)((wall - newest) / 86400000000000LL));
}

int64_t session_retention_clock(int64_t anchor_wall, uint64_t anchor_mono, int64_t wall_now,
                                uint64_t mono_now)
{
    int64_t t = anchor_wall + (int64_t)(mono_now - anchor_mono);

    return wall_now < t ? wall_now : t;
}

int64_t session_retention_now(const struct registry *reg)
{
    return session_retention_clock(reg->anchor_wall, reg->anchor_mono, session_now_ns(),
                                   session_mono_ns());
}

int session_registry_init(struct registry *reg, uv_loop_t *loop, struct store *store,
                          int64_t last_id, uint64_t linger_ms)
{
    memset(reg, 0, sizeof(*reg));
    reg->loop = loop;
    reg->store = store;
    reg->last_id = last_id;
    reg->linger_ms = linger_ms;
    reg->opening = store_budget_new();
    return reg->opening != NULL ? 0 : -ENOMEM;
}

bool session_opening_full(const struct registry *reg)
{
    return atomic_load(&reg->opening->bytes) >= (uint64_t)SESSION_MAX_OPENING * STORE_OPEN_COST;
}

static void session_free(struct session *s)
{
    peerarr_queue_free(s->arrq);
    free(s->op_sync);
    free(s->shape_cache);
    free(s->op_counts);
    strmap_deinit(&s->ops);
    strmap_deinit(&s->devices);
    strmap_deinit(&s->shapes);
    free(s->name);
    free(s);
}

static struct session *session_new(const char *name)
{
    struct session *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->name = strdup(name)) == NULL) {
        free(s);
        return NULL;
    }
    s->uid = -1;
    s->world = -1;
    strmap_init(&s->ops);
    strmap_init(&s->devices);
    strmap_init(&s->shapes);
    return s;
}

int session_load(struct registry *reg, const struct store_catalog_row *row)
{
    struct session *s = session_new(row->name ? row->name : "");

    if (s == NULL)
        return -ENOMEM;
    s->id = row->id;
    s->uid = row->uid;
    s->started_ns = row->started_ns;
    s->ended_ns = row->ended_ns;
    s->processes = row->processes;
    s->entries = row->entries;
    s->accepted_bytes = 0; /* ended: its bytes on disk are what counts */
    s->dropped = row->dropped;
    s->interrupted = row->interrupted;
    s->next = reg->list; /* rows come oldest first: prepending keeps newest first */
    reg->list = s;
    return 0;
}

const char *session_cut_reason(int cut)
{
    switch (cut) {
    case STORE_CUT_NONE:
        return NULL;
    case STORE_CUT_STOP:
        return "the daemon was stopped while the session was live; what it had received is "
               "stored";
    default:
        return "the daemon died while the session was live (a crash or kill -9) and recovered "
               "the session at its next start; entries in flight then were lost";
    }
}

static void session_end(struct registry *reg, struct session *s, enum store_cut interrupted)
{
    struct store_job *job = store_job_new(STORE_SESSION_END, s->id);

    s->live = false;
    s->interrupted = interrupted;
    s->ended_ns = session_wall_ns(s);
    s->linger_until = 0;
    reg->n_live--;
    /* The name tables are only for interning while live, and so are the op counts. */
    free(s->op_counts);
    s->op_counts = NULL;
    s->n_op_counts = 0;
    free(s->op_sync);
    s->op_sync = NULL;
    strmap_deinit(&s->ops);
    strmap_deinit(&s->devices);
    strmap_deinit(&s->shapes);
    free(s->shape_cache);
    s->shape_cache = NULL;
    log_info("session %lld (%s) ended%s: %llu processes, %llu entries, %llu dropped",
             (long long)s->id, s->name, interrupted ? " (interrupted)" : "",
             (unsigned long long)s->processes, (unsigned long long)s->entries,
             (unsigned long long)s->dropped);
    if (job == NULL) {
        log_error("out of memory: session %lld stays marked live in the catalog", (long long)s->id);
        return;
    }
    job->u.session_end.ended_ns = s->ended_ns;
    job->u.session_end.processes = s->processes;
    job->u.session_end.entries = s->entries;
    job->u.session_end.dropped = s->dropped - s->failed; /* the store adds what it lost itself */
    job->u.session_end.interrupted = interrupted;
    store_enqueue(reg->store, job);
}

void session_registry_deinit(struct registry *reg)
{
    struct session *s, *next;

    for (s = reg->list; s != NULL; s = s->next)
        if (s->live)
            session_end(reg, s, STORE_CUT_STOP);
    for (s = reg->list; s != NULL; s = next) {
        next = s->next;
        session_free(s);
    }
    reg->list = NULL;
    store_budget_unref(reg->opening);
    reg->opening = NULL;
}

static struct session *session_start(struct registry *reg, const char *name, int64_t uid)
{
    struct session *s = session_new(name);
    struct store_job *job = store_job_new(STORE_OPEN, reg->last_id + 1);

    if (s == NULL || job == NULL || (job->u.open.name = strdup(name)) == NULL) {
        if (s != NULL)
            session_free(s);
        store_job_free(job);
        return NULL;
    }
    s->id = ++reg->last_id;
    s->live = true;
    s->uid = uid;
    s->started_ns = session_now_ns();
    s->started_mono = session_mono_ns();
    s->accepted_bytes = SESSION_FILE_COST;
    s->next_op = 1;
    s->next_dev = 1;
    s->next = reg->list;
    reg->list = s;
    reg->n_live++;
    job->u.open.started_ns = s->started_ns;
    job->u.open.uid = uid;
    store_job_charge(job, reg->opening);
    store_enqueue(reg->store, job);
    log_info("session %lld (%s) started", (long long)s->id, s->name);
    return s;
}

struct session *session_find_live(struct registry *reg, const char *name, int64_t uid)
{
    for (struct session *s = reg->list; s != NULL; s = s->next)
        if (s->live && s->uid == uid && strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

static int enqueue_process(struct registry *reg, struct session *s, const struct proto_hello *h,
                           int64_t uid, int64_t pid, int64_t process_id)
{
    struct store_job *job = store_job_new(STORE_PROCESS, s->id);

    if (job == NULL)
        return -ENOMEM;
    job->u.process.id = process_id;
    job->u.process.rank = h->rank;
    job->u.process.world = h->world;
    job->u.process.pid = pid; /* the kernel's word (SO_PEERCRED), never the client's */
    job->u.process.claimed_pid = h->pid;
    job->u.process.uid = uid;
    job->u.process.started_ns = session_wall_ns(s);
    if ((h->host != NULL && (job->u.process.host = strdup(h->host)) == NULL) ||
        (h->device != NULL && (job->u.process.device = strdup(h->device)) == NULL)) {
        store_job_free(job);
        return -ENOMEM;
    }
    store_enqueue(reg->store, job);
    return 0;
}

struct session *session_join(struct registry *reg, const struct proto_hello *h, int64_t uid,
                             int64_t pid, int64_t *process_id, uint32_t *dev_id, int *err)
{
    struct session *s = session_find_live(reg, h->session, uid);

    *err = -ENOMEM;
    if (s == NULL && (s = session_start(reg, h->session, uid)) == NULL)
        return NULL;
    *dev_id = 0;
    if (h->device != NULL &&
        (*err = session_device(reg, s, h->device, strlen(h->device), NULL, dev_id)) < 0) {
        if (s->connected == 0 && s->processes == 0)
            session_end(reg, s,
                        STORE_CUT_NONE); /* just started: do not leave it live with nobody */
        return NULL;
    }
    if (s->processes >= SESSION_MAX_PROCESSES) {
        if (s->refused_processes++ == 0)
            log_warn("session %lld (%s) has %d processes, the limit: further hellos are refused",
                     (long long)s->id, s->name, SESSION_MAX_PROCESSES);
        *err = -EUSERS;
        return NULL;
    }
    *err = -ENOMEM;
    *process_id = (int64_t)s->processes + 1;
    if (enqueue_process(reg, s, h, uid, pid, *process_id) < 0)
        return NULL;
    s->processes++;
    s->connected++;
    s->linger_until = 0;
    if (h->world > s->world)
        s->world = h->world;
    return s;
}

void session_counters(struct registry *reg, struct session *s, int64_t process_id,
                      struct proto_counters *k, bool final, const struct u32map *ops)
{
    struct store_job *job = store_job_new(STORE_COUNTERS, s->id);
    size_t n = 0;

    for (size_t i = 0; i < k->n_ops; i++) { /* to session op ids, in place */
        uint32_t gid;
        if (ops != NULL && u32map_get(ops, k->ops[i].op, &gid)) {
            k->ops[n] = k->ops[i];
            k->ops[n++].op = gid;
        }
    }
    k->n_ops = n;
    if (job == NULL) {
        free(k->ops);
        k->ops = NULL;
        return;
    }
    job->u.counters.process_id = process_id;
    job->u.counters.k = *k;
    job->u.counters.final = final;
    k->ops = NULL; /* the job's now */
    store_enqueue(reg->store, job);
}

void session_leave(struct registry *reg, struct session *s, int64_t process_id, int bye,
                   uint64_t dropped, uint64_t refused)
{
    struct store_job *job = store_job_new(STORE_PROCESS_END, s->id);

    if (job != NULL) {
        job->u.process_end.process_id = process_id;
        job->u.process_end.ended_ns = session_wall_ns(s);
        job->u.process_end.bye = bye;
        job->u.process_end.dropped = dropped + refused;
        store_enqueue(reg->store, job);
    }
    s->dropped += dropped;
    if (--s->connected > 0 || reg->stopping)
        return;
    if (s->world > 0 && s->processes < (uint64_t)s->world)
        s->linger_until = uv_now(reg->loop) + reg->linger_ms; /* more processes are expected */
    else
        session_end(reg, s, STORE_CUT_NONE);
}

static int intern(struct registry *reg, struct session *s, struct strmap *map, uint32_t *next,
                  enum store_job_type type, const char *name, size_t len, const char *category,
                  struct store_budget *budget, uint32_t *id)
{
    struct store_job *job;

    if (strmap_get(map, name, len, id))
        return 0;
    job = store_job_new(type, s->id);
    if (job == NULL || (job->u.name.name = strndup(name, len)) == NULL ||
        (category != NULL && (job->u.name.category = strdup(category)) == NULL) ||
        strmap_put(map, name, len, *next) < 0) {
        store_job_free(job);
        return -ENOMEM;
    }
    *id = (*next)++;
    job->u.name.id = *id;
    if (budget != NULL)
        store_job_charge(job, budget);
    store_enqueue(reg->store, job);
    return 0;
}

int session_op(struct registry *reg, struct session *s, const char *name, const char *category,
               struct store_budget *budget, uint32_t *id)
{
    size_t len = strlen(name), bytes;
    int rc;

    if (strmap_get(&s->ops, name, len, id))
        return 0;
    /* The first producer to name an op fixes its category for the session. */
    if (category == NULL)
        category = analysis_classify(name);
    bytes = len + strlen(category);
    if (s->ops.len >= SESSION_MAX_OPS || s->op_bytes + bytes > SESSION_MAX_OP_BYTES)
        return -ENOSPC;
    if (s->next_op >= s->n_op_counts) { /* a slot for the id it gets, before it gets it */
        uint32_t n = s->n_op_counts ? 2 * s->n_op_counts : 64;
        struct session_op_count *p;
        while (n <= s->next_op)
            n *= 2;
        if ((p = realloc(s->op_counts, n * sizeof(*p))) == NULL)
            return -ENOMEM;
        memset(p + s->n_op_counts, 0, (n - s->n_op_counts) * sizeof(*p));
        s->op_counts = p;
        s->n_op_counts = n;
    }
    rc = intern(reg, s, &s->ops, &s->next_op, STORE_OP, name, len, category, budget, id);
    if (rc == 0)
        s->op_bytes += bytes;
    return rc;
}

void session_count_entry(struct session *s, uint32_t op, uint64_t dur_ns)
{
    struct session_op_count *n;

    if (op >= s->n_op_counts)
        return;
    n = &s->op_counts[op];
    n->calls++;
    n->total_ns = util_sat_add(n->total_ns, dur_ns);
}

int session_device(struct registry *reg, struct session *s, const char *name, size_t len,
                   struct store_budget *budget, uint32_t *id)
{
    if (strmap_get(&s->devices, name, len, id))
        return 0;
    if (s->devices.len >= SESSION_MAX_DEVICES)
        return -ENOSPC;
    return intern(reg, s, &s->devices, &s->next_dev, STORE_DEVICE, name, len, NULL, budget, id);
}

/*
 * The most bytes of one entry's canonical shapes (the decoder writes them):
 * PROTO_MAX_INPUTS + 1 arrays of PROTO_MAX_DIMS uints of at most 9 bytes,
 * each array and the input list with a header of at most 3.
 */
#define SHAPES_MAX_BYTES ((PROTO_MAX_INPUTS + 1) * (3 + 9 * PROTO_MAX_DIMS) + 3)

/*
 * The shape cache, in front of the strmap: a pair's id by a cheap hash of
 * its bytes (eight at a time, with the op), in sets of two slots (the newer
 * first), so that the pairs a session repeats cost a hash and one compare
 * instead of FNV-1a over each byte, a key built and a probe. Pairs over
 * SHAPE_SLOT_BYTES skip it.
 */
#define SHAPE_SETS       512
#define SHAPE_SLOT_BYTES 48

struct session_shape_slot {
    uint32_t id; /* 0: empty */
    uint32_t op;
    uint16_t out_len, in_len;
    char bytes[SHAPE_SLOT_BYTES]; /* out, then in */
};

static uint64_t shape_word(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15u;
    return h ^ h >> 29;
}

/*
 * The n bytes at p into h, eight at a time: the last eight overlapping the
 * word before them when n is not a multiple of 8, two overlapping halves
 * for 4..7 bytes (a few loads, no loop over bytes).
 */
static inline uint64_t shape_mix(uint64_t h, const char *p, size_t n)
{
    uint64_t w;
    uint32_t a, b;
    size_t i;

    if (n >= 8) {
        for (i = 0; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            h = shape_word(h, w);
        }
        if (i < n) {
            memcpy(&w, p + n - 8, 8);
            h = shape_word(h, w);
        }
        return h;
    }
    if (n >= 4) {
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        return shape_word(h, (uint64_t)a << 32 | b);
    }
    w = 0;
    for (i = 0; i < n; i++)
        w = w << 8 | (unsigned char)p[i];
    return n > 0 ? shape_word(h, w) : h;
}

/* Whether the n bytes at a and b are the same, by words as shape_mix() reads them. */
static inline bool shape_bytes_eq(const char *a, const char *b, size_t n)
{
    uint64_t x, y;
    uint32_t u, v;
    size_t i;

    if (n >= 8) {
        for (i = 0; i + 8 <= n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y)
                return false;
        }
        if (i < n) {
            memcpy(&x, a + n - 8, 8);
            memcpy(&y, b + n - 8, 8);
            return x == y;
        }
        return true;
    }
    if (n >= 4) {
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        if (u != v)
            return false;
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return u == v;
    }
    for (i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/*
 * A pair's bytes as one run, when they are one: out and in adjacent (the
 * decoder's blob), or one of them empty. NULL otherwise.
 */
static inline const char *shape_run(const char *out, uint32_t out_len, const char *in,
                                    uint32_t in_len)
{
    if (in_len == 0 || in == out + out_len)
        return out;
    return out_len == 0 ? in : NULL;
}

/* The set a pair hashes to (two slots), or NULL (no memory for the cache). */
static inline struct session_shape_slot *shape_set(struct session *s, uint32_t op, const char *out,
                                                   uint32_t out_len, const char *in,
                                                   uint32_t in_len, const char *run)
{
    uint64_t h = ((uint64_t)op << 32 | out_len << 16 | in_len) * 0xff51afd7ed558ccdu;

    if (s->shape_cache == NULL &&
        (s->shape_cache = calloc(2 * SHAPE_SETS, sizeof(*s->shape_cache))) == NULL)
        return NULL; /* no cache: the strmap answers alone */
    if (run != NULL) {
        h = shape_mix(h, run, (size_t)out_len + in_len);
    } else {
        h = shape_mix(h, out, out_len);
        h = shape_mix(h, in, in_len);
    }
    return &s->shape_cache[2 * ((h >> 32) & (SHAPE_SETS - 1))];
}

static inline bool shape_slot_is(const struct session_shape_slot *slot, uint32_t op,
                                 const char *out, uint32_t out_len, const char *in, uint32_t in_len,
                                 const char *run)
{
    return slot->id != 0 && slot->op == op && slot->out_len == out_len && slot->in_len == in_len &&
           (run != NULL ? shape_bytes_eq(slot->bytes, run, (size_t)out_len + in_len)
                        : shape_bytes_eq(slot->bytes, out, out_len) &&
                              shape_bytes_eq(slot->bytes + out_len, in, in_len));
}

/* A pair the cache does not hold: the strmap's id, or a new one; then into the cache's set. */
static __attribute__((noinline)) int shape_intern(struct session *s, uint32_t op, const char *out,
                                                  uint32_t out_len, const char *in, uint32_t in_len,
                                                  struct session_shape_slot *set, uint32_t *id)
{
    /* the key: out's length (where the two split), then both */
    char key[4 + SHAPES_MAX_BYTES];
    uint64_t bytes = (uint64_t)out_len + in_len;

    memcpy(key, &out_len, 4);
    memcpy(key + 4, out, out_len);
    memcpy(key + 4 + out_len, in, in_len);
    if (!strmap_get(&s->shapes, key, 4 + bytes, id)) {
        if (s->shapes.len >= SESSION_MAX_SHAPES || s->shape_bytes + bytes > SESSION_MAX_SHAPE_BYTES)
            return -ENOSPC;
        if (strmap_put(&s->shapes, key, 4 + bytes, (uint32_t)s->shapes.len + 1) < 0)
            return -ENOMEM;
        *id = (uint32_t)s->shapes.len;
        s->shape_bytes += bytes;
    }
    if (set != NULL) {
        set[1] = set[0]; /* the newer first */
        set[0].id = *id;
        set[0].op = op;
        set[0].out_len = (uint16_t)out_len;
        set[0].in_len = (uint16_t)in_len;
        memcpy(set[0].bytes, key + 4, bytes);
    }
    return 0;
}

int session_shape(struct session *s, uint32_t op, const char *out, uint32_t out_len, const char *in,
                  uint32_t in_len, uint32_t *id)
{
    uint64_t bytes = (uint64_t)out_len + in_len;
    struct session_shape_slot *set = NULL;

    *id = 0;
    if (bytes == 0)
        return 0;
    if (bytes > SHAPES_MAX_BYTES)
        return -ENOSPC; /* cannot happen: the decoder re-encodes within the limits above */
    if (bytes <= SHAPE_SLOT_BYTES) {
        const char *run = shape_run(out, out_len, in, in_len);
        if ((set = shape_set(s, op, out, out_len, in, in_len, run)) != NULL) {
            for (int k = 0; k < 2; k++) {
                if (shape_slot_is(&set[k], op, out, out_len, in, in_len, run)) {
                    *id = set[k].id;
                    return 0;
                }
            }
        }
    }
    return shape_intern(s, op, out, out_len, in, in_len, set, id);
}

struct session *session_find(struct registry *reg, const struct proto_sessref *ref, int64_t uid)
{
    for (struct session *s = reg->list; s != NULL; s = s->next) {
        if (uid >= 0 && s->uid != uid)
            continue;
        if (ref->name != NULL ? strcmp(s->name, ref->name) == 0 : s->id == ref->id)
            return s; /* the list is newest first: the first name match is the newest */
    }
    return NULL;
}

uint64_t session_entry_cost(const struct proto_entry *e)
{
    /* shapes are stored once per distinct pair: counting them each time is an upper bound */
    return SESSION_ENTRY_COST + e->out_len + e->in_len;
}

uint64_t session_cap_bytes(const struct session *s)
{
    return s->bytes > s->accepted_bytes ? s->bytes : s->accepted_bytes;
}

uint64_t session_user_cap_bytes(struct registry *reg, int64_t uid)
{
    uint64_t total = 0;

    for (struct session *s = reg->list; s != NULL; s = s->next)
        if (s->uid == uid)
            total += session_cap_bytes(s);
    return total;
}

uint64_t session_user_bytes(struct registry *reg, int64_t uid)
{
    uint64_t total = 0;

    for (struct session *s = reg->list; s != NULL; s = s->next)
        if (uid < 0 || s->uid == uid)
            total += s->bytes;
    return total;
}

void session_lost(struct registry *reg, int64_t id, uint64_t n)
{
    for (struct session *s = reg->list; s != NULL; s = s->next) {
        if (s->id == id) {
            s->entries -= n < s->entries ? n : s->entries;
            s->dropped += n;
            s->failed += n;
            return;
        }
    }
}

void session_remove(struct registry *reg, struct session *s)
{
    for (struct session **pp = &reg->list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            session_free(s);
            return;
        }
    }
}

void session_tick(struct registry *reg)
{
    uint64_t now = uv_now(reg->loop);

    for (struct session *s = reg->list; s != NULL; s = s->next)
        if (s->live && s->connected == 0 && s->linger_until != 0 && now >= s->linger_until)
            session_end(reg, s, STORE_CUT_NONE);
}
