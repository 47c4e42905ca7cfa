/*
 * peerarr.c — the home's table of collective instances across hosts
 * (peerarr.h, "THE HOME'S TABLE"). Instances live in one array; a chained
 * hash on (session, comm, seq) finds them, a list in order of creation ages
 * and evicts them, and free slots chain through the hash links.
 */
#include "peerarr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peerclock.h"

#define PEERARR_NIL UINT32_MAX

struct peerarr_part {
    uint32_t host;
    int64_t max_enter, min_exit; /* the host's own clock */
};

struct peerarr_kept {
    uint32_t host;
    int32_t rank;
    uint64_t step;
    int64_t enter, exit; /* the host's own clock */
};

struct peerarr_inst {
    uint32_t session;
    uint64_t comm, seq;
    uint64_t comm_size, world, n; /* the largest comm_size given, the session's world */
    int64_t first_ns;
    uint32_t hnext;      /* hash chain, or the free list */
    uint32_t prev, next; /* order of creation */
    struct peerarr_part *parts;
    uint32_t n_parts, cap_parts;
    struct peerarr_kept *kept; /* its arrivals one by one */
    uint32_t n_kept, cap_kept;
};

struct peerarr_session {
    char *name;    /* NULL: a free slot */
    uint64_t refs; /* instances of it in the table */
};

struct peerarr_table {
    struct peerarr_inst *inst;
    size_t max;
    uint32_t *heads;
    size_t mask; /* heads has mask + 1 entries, a power of two */
    uint32_t free, oldest, newest;
    struct peerarr_session sessions[PEERARR_SESSIONS];
    uint32_t last; /* the session of the previous arrival (a message is of one session) */
    size_t n_kept; /* arrivals kept one by one in all instances (PEERARR_KEPT) */
    struct peerarr_home *conv; /* the callback's arrivals, grown as needed */
    size_t cap_conv;
    struct peerarr_stats st;
};

struct peerarr_table *peerarr_table_new(size_t max_instances)
{
    struct peerarr_table *t;
    size_t n = 1;

    if (max_instances == 0 || max_instances >= PEERARR_NIL)
        return NULL;
    while (n < 2 * max_instances)
        n *= 2;
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    t->inst = calloc(max_instances, sizeof(*t->inst));
    t->heads = malloc(n * sizeof(*t->heads));
    if (t->inst == NULL || t->heads == NULL) {
        peerarr_table_free(t);
        return NULL;
    }
    t->max = max_instances;
    t->mask = n - 1;
    for (size_t i = 0; i < n; i++)
        t->heads[i] = PEERARR_NIL;
    for (size_t i = 0; i < max_instances; i++)
        t->inst[i].hnext = i + 1 < max_instances ? (uint32_t)(i + 1) : PEERARR_NIL;
    t->free = 0;
    t->oldest = t->newest = t->last = PEERARR_NIL;
    return t;
}

void peerarr_table_free(struct peerarr_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; t->inst != NULL && i < t->max; i++) {
        free(t->inst[i].parts);
        free(t->inst[i].kept);
    }
    free(t->conv);
    for (size_t i = 0; i < PEERARR_SESSIONS; i++)
        free(t->sessions[i].name);
    free(t->inst);
    free(t->heads);
    free(t);
}

void peerarr_table_stats(const struct peerarr_table *t, struct peerarr_stats *out)
{
    *out = t->st;
}

static size_t peerarr_hash(const struct peerarr_table *t, uint32_t session, uint64_t comm,
                           uint64_t seq)
{
    uint64_t h =
        comm * UINT64_C(0x9e3779b97f4a7c15) ^ (seq + session) * UINT64_C(0xbf58476d1ce4e5b9);

    h ^= h >> 31;
    h *= UINT64_C(0x94d049bb133111eb);
    return (size_t)(h ^ (h >> 29)) & t->mask;
}

/* The index of session name, taking a free slot for a new one; PEERARR_NIL when none is free. */
static uint32_t peerarr_session(struct peerarr_table *t, const char *name, int *rc)
{
    uint32_t free_slot = PEERARR_NIL;

    if (t->last != PEERARR_NIL && t->sessions[t->last].name != NULL &&
        strcmp(t->sessions[t->last].name, name) == 0)
        return t->last;
    for (uint32_t i = 0; i < PEERARR_SESSIONS; i++) {
        struct peerarr_session *s = &t->sessions[i];
        if (s->name != NULL && strcmp(s->name, name) == 0)
            return t->last = i;
        if (free_slot == PEERARR_NIL && (s->name == NULL || s->refs == 0))
            free_slot = i;
    }
    *rc = -ENOSPC;
    if (free_slot == PEERARR_NIL)
        return PEERARR_NIL;
    char *copy = strdup(name);
    *rc = -ENOMEM;
    if (copy == NULL)
        return PEERARR_NIL;
    free(t->sessions[free_slot].name);
    t->sessions[free_slot] = (struct peerarr_session){.name = copy};
    *rc = 0;
    return t->last = free_slot;
}

/* Unlinks instance i from its hash chain and the age list and frees its slot. */
static void peerarr_remove(struct peerarr_table *t, uint32_t i)
{
    struct peerarr_inst *x = &t->inst[i];
    uint32_t *p = &t->heads[peerarr_hash(t, x->session, x->comm, x->seq)];

    while (*p != i)
        p = &t->inst[*p].hnext;
    *p = x->hnext;
    if (x->prev != PEERARR_NIL)
        t->inst[x->prev].next = x->next;
    else
        t->oldest = x->next;
    if (x->next != PEERARR_NIL)
        t->inst[x->next].prev = x->prev;
    else
        t->newest = x->prev;
    t->sessions[x->session].refs--;
    x->n_parts = 0;
    t->n_kept -= x->n_kept;
    x->n_kept = 0;
    /* a large instance's memory goes back; a small one's is used again */
    if (x->cap_kept > 64) {
        free(x->kept);
        x->kept = NULL;
        x->cap_kept = 0;
    }
    x->hnext = t->free;
    t->free = i;
}

/* The instance (session, comm, seq), made if new (evicting the oldest when full). */
static struct peerarr_inst *peerarr_find(struct peerarr_table *t, uint32_t session, uint64_t comm,
                                         uint64_t seq, int64_t now_ns)
{
    size_t h = peerarr_hash(t, session, comm, seq);
    uint32_t i;

    for (i = t->heads[h]; i != PEERARR_NIL; i = t->inst[i].hnext)
        if (t->inst[i].session == session && t->inst[i].comm == comm && t->inst[i].seq == seq)
            return &t->inst[i];
    if (t->free == PEERARR_NIL) {
        peerarr_remove(t, t->oldest);
        t->st.evicted++;
    }
    i = t->free;
    struct peerarr_inst *x = &t->inst[i];
    t->free = x->hnext;
    x->session = session;
    x->comm = comm;
    x->seq = seq;
    x->comm_size = x->world = x->n = 0;
    x->first_ns = now_ns;
    x->hnext = t->heads[h];
    t->heads[h] = i;
    x->prev = t->newest;
    x->next = PEERARR_NIL;
    if (t->newest != PEERARR_NIL)
        t->inst[t->newest].next = i;
    else
        t->oldest = i;
    t->newest = i;
    t->sessions[session].refs++;
    return x;
}

/* The part of host in x, added if new. NULL: out of memory. */
static struct peerarr_part *peerarr_part(struct peerarr_inst *x, uint32_t host)
{
    for (uint32_t k = 0; k < x->n_parts; k++)
        if (x->parts[k].host == host)
            return &x->parts[k];
    if (x->n_parts == x->cap_parts) {
        uint32_t cap = x->cap_parts ? 2 * x->cap_parts : 2;
        struct peerarr_part *p = realloc(x->parts, cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        x->parts = p;
        x->cap_parts = cap;
    }
    x->parts[x->n_parts] =
        (struct peerarr_part){.host = host, .max_enter = INT64_MIN, .min_exit = INT64_MAX};
    return &x->parts[x->n_parts++];
}

/* Keeps a copy of arrival a of host in x, or counts it in `unkept`. */
static void peerarr_keep(struct peerarr_table *t, struct peerarr_inst *x, uint32_t host,
                         const struct peerarr_arrival *a)
{
    if (t->n_kept >= PEERARR_KEPT) {
        t->st.unkept++;
        return;
    }
    if (x->n_kept == x->cap_kept) {
        uint32_t cap = x->cap_kept ? 2 * x->cap_kept : 4;
        struct peerarr_kept *k = realloc(x->kept, cap * sizeof(*k));
        if (k == NULL) {
            t->st.unkept++;
            return;
        }
        x->kept = k;
        x->cap_kept = cap;
    }
    x->kept[x->n_kept++] = (struct peerarr_kept){.host = host,
                                                 .rank = (int32_t)a->rank,
                                                 .step = a->step,
                                                 .enter = a->enter_ns,
                                                 .exit = a->exit_ns};
    t->n_kept++;
}

int peerarr_table_add(struct peerarr_table *t, const char *session, uint32_t host,
                      const struct peerarr_arrival *a, uint64_t world, int64_t now_ns)
{
    int rc = 0;
    uint32_t s;

    if (a->enter_ns < 0 || a->exit_ns < a->enter_ns || a->exit_ns > PEERARR_TIME_MAX) {
        t->st.refused++;
        return -EINVAL;
    }
    if ((s = peerarr_session(t, session, &rc)) == PEERARR_NIL) {
        t->st.refused++;
        return rc;
    }
    struct peerarr_inst *x = peerarr_find(t, s, a->comm, a->seq, now_ns);
    struct peerarr_part *p = peerarr_part(x, host);
    if (p == NULL)
        return -ENOMEM; /* x stays, perhaps empty: it ages out */
    if (a->enter_ns > p->max_enter)
        p->max_enter = a->enter_ns;
    if (a->exit_ns < p->min_exit)
        p->min_exit = a->exit_ns;
    x->n++;
    peerarr_keep(t, x, host, a);
    if (a->comm_size > x->comm_size)
        x->comm_size = a->comm_size;
    if (world > x->world)
        x->world = world;
    t->st.added++;
    return 0;
}

/* The home-time enter and exit of part p and its bound; false when its clock is unknown. */
static bool peerarr_home_times(const struct peerarr_part *p, struct peerclock *const *clocks,
                               size_t n_clocks, int64_t *enter, int64_t *exit, int64_t *bound)
{
    struct peerclock_at en, ex;

    if (p->host == 0) {
        *enter = p->max_enter;
        *exit = p->min_exit;
        *bound = 0;
        return true;
    }
    if (p->host >= n_clocks || clocks[p->host] == NULL ||
        peerclock_to_home(clocks[p->host], p->max_enter, &en) < 0 ||
        peerclock_to_home(clocks[p->host], p->min_exit, &ex) < 0 ||
        en.bound_ns == PEERCLOCK_UNBOUNDED || ex.bound_ns == PEERCLOCK_UNBOUNDED)
        return false;
    *enter = en.home_ns;
    *exit = ex.home_ns;
    *bound = en.bound_ns > ex.bound_ns ? en.bound_ns : ex.bound_ns;
    return true;
}

/* One peerclock_collective per member host of x with a clock, against all the others. */
static void peerarr_check(struct peerarr_table *t, const struct peerarr_inst *x,
                          struct peerclock *const *clocks, size_t n_clocks)
{
    for (uint32_t m = 0; m < x->n_parts; m++) {
        const struct peerarr_part *me = &x->parts[m];
        struct peerclock_coll c = {.member_enter = me->max_enter,
                                   .member_exit = me->min_exit,
                                   .others_enter = INT64_MIN,
                                   .others_exit = INT64_MAX};
        bool any = false;

        if (me->host == 0 || me->host >= n_clocks || clocks[me->host] == NULL)
            continue;
        for (uint32_t k = 0; k < x->n_parts; k++) {
            int64_t en, ex, b;
            if (k == m || !peerarr_home_times(&x->parts[k], clocks, n_clocks, &en, &ex, &b))
                continue;
            c.others_enter = en > c.others_enter ? en : c.others_enter;
            c.others_exit = ex < c.others_exit ? ex : c.others_exit;
            c.others_bound = b > c.others_bound ? b : c.others_bound;
            any = true;
        }
        if (any && peerclock_collective(clocks[me->host], &c, NULL, NULL) == 0)
            t->st.checks++;
    }
}

/* fn with x's kept arrivals whose clocks are known, on the home's clock. */
static void peerarr_give(struct peerarr_table *t, const struct peerarr_inst *x,
                         struct peerclock *const *clocks, size_t n_clocks, peerarr_due_fn fn,
                         void *arg)
{
    size_t n = 0;

    if (x->n_kept == 0)
        return;
    if (x->n_kept > t->cap_conv) {
        struct peerarr_home *c = realloc(t->conv, x->n_kept * sizeof(*c));
        if (c == NULL)
            return;
        t->conv = c;
        t->cap_conv = x->n_kept;
    }
    for (uint32_t i = 0; i < x->n_kept; i++) {
        const struct peerarr_kept *k = &x->kept[i];
        struct peerarr_home *h = &t->conv[n];
        struct peerclock_at en, ex;

        *h = (struct peerarr_home){.host = k->host,
                                   .rank = k->rank,
                                   .step = k->step,
                                   .enter_ns = k->enter,
                                   .exit_ns = k->exit};
        if (k->host != 0) {
            if (k->host >= n_clocks || clocks[k->host] == NULL ||
                peerclock_to_home(clocks[k->host], k->enter, &en) < 0 ||
                peerclock_to_home(clocks[k->host], k->exit, &ex) < 0 ||
                en.bound_ns == PEERCLOCK_UNBOUNDED || ex.bound_ns == PEERCLOCK_UNBOUNDED)
                continue;
            h->enter_ns = en.home_ns;
            h->exit_ns = ex.home_ns;
            h->bound_ns = en.bound_ns > ex.bound_ns ? en.bound_ns : ex.bound_ns;
        }
        n++;
    }
    if (n > 0)
        fn(arg, t->sessions[x->session].name, x->comm, x->seq, t->conv, n);
}

size_t peerarr_table_due(struct peerarr_table *t, int64_t now_ns, int64_t age_ns,
                         struct peerclock *const *clocks, size_t n_clocks, peerarr_due_fn fn,
                         void *arg)
{
    size_t done = 0;
    uint32_t i = t->oldest;

    while (i != PEERARR_NIL) {
        struct peerarr_inst *x = &t->inst[i];
        uint32_t next = x->next;
        uint64_t expected = x->comm_size != 0 ? x->comm_size : x->world;
        bool complete = expected != 0 && x->n >= expected;

        if (complete || now_ns - x->first_ns >= age_ns) {
            peerarr_check(t, x, clocks, n_clocks);
            if (fn != NULL)
                peerarr_give(t, x, clocks, n_clocks, fn, arg);
            t->st.instances++;
            t->st.complete += complete;
            peerarr_remove(t, i);
            done++;
        }
        i = next;
    }
    return done;
}

/* ---- the member's queue ---------------------------------------------------------- */

struct peerarr_queue *peerarr_queue_new(void)
{
    return calloc(1, sizeof(struct peerarr_queue));
}

void peerarr_queue_free(struct peerarr_queue *q)
{
    if (q == NULL)
        return;
    free(q->ring);
    free(q);
}

void peerarr_queue_push(struct peerarr_queue *q, const struct peerarr_arrival *a)
{
    if (q->ring == NULL && (q->ring = malloc(PEERARR_QUEUE * sizeof(*q->ring))) == NULL) {
        q->dropped++;
        return;
    }
    if (q->n == PEERARR_QUEUE) {
        q->dropped++;
        return;
    }
    q->ring[(q->head + q->n) % PEERARR_QUEUE] = *a;
    q->n++;
}

size_t peerarr_queue_take(struct peerarr_queue *q, struct peerarr_arrival *out, size_t max)
{
    size_t n = q->n < max ? q->n : max;

    for (size_t i = 0; i < n; i++)
        out[i] = q->ring[(q->head + i) % PEERARR_QUEUE];
    q->head = (q->head + n) % PEERARR_QUEUE;
    q->n -= n;
    return n;
}

bool peerarr_sync_op(const char *name)
{
    static const char *const words[] = {"allreduce", "allgather", "alltoall", "barrier"};
    char low[256];
    size_t n = 0;

    /* lower case without '_', so that all_reduce and Allreduce read as allreduce */
    for (const char *p = name; *p != '\0' && n < sizeof(low) - 1; p++)
        if (*p != '_')
            low[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    low[n] = '\0';
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(low, words[i]) != NULL)
            return true;
    return false;
}
