/* peerlate.c — the late-rank analysis across hosts; see peerlate.h. */
#include "peerlate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rq.h"
#include "verdict.h"

struct peerlate_rank {
    uint32_t host;
    int64_t rank;
    uint64_t colls, waited, waited_bound, caused, caused_bound, last;
};

/* What one rank caused in one step, and its bound. */
struct peerlate_by {
    uint32_t ri;
    uint64_t caused, bound;
    uint64_t uncertain; /* its instances in the step in which it may not have been last */
};

struct peerlate_step {
    uint64_t step;
    int64_t first_enter, last_exit;
    struct peerlate_by *by;
    uint32_t n_by, cap_by;
};

struct peerlate_sess {
    char *name;
    uint64_t fed; /* peerlate.tick when last fed */
    uint64_t instances, uncertain, unkept;
    struct peerlate_rank *ranks;
    size_t n_ranks, cap_ranks;
    uint32_t *slot; /* (host, rank) -> index + 1 in ranks, open addressing; 0: empty */
    size_t n_slot;  /* a power of two, at least twice n_ranks; 0 until the first rank */
    struct peerlate_step *steps; /* by step ascending */
    size_t n_steps, cap_steps;
};

struct peerlate {
    struct peerlate_sess sess[PEERLATE_SESSIONS]; /* name NULL: free */
    uint64_t tick;
    size_t n_by; /* (step, rank) figures kept in all sessions (PEERLATE_BY) */
};

/* A step's figures as a report shows them (peerlate_pack). */
struct peerlate_view {
    uint64_t step, len, held, bound;
    size_t ri; /* the rank that caused most */
    bool candidate, named, uncertain;
};

static uint64_t peerlate_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

struct peerlate *peerlate_new(void)
{
    return calloc(1, sizeof(struct peerlate));
}

static void peerlate_sess_clear(struct peerlate *pl, struct peerlate_sess *s)
{
    for (size_t i = 0; i < s->n_steps; i++) {
        pl->n_by -= s->steps[i].n_by;
        free(s->steps[i].by);
    }
    free(s->steps);
    free(s->ranks);
    free(s->slot);
    free(s->name);
    memset(s, 0, sizeof(*s));
}

void peerlate_free(struct peerlate *pl)
{
    if (pl == NULL)
        return;
    for (size_t i = 0; i < PEERLATE_SESSIONS; i++)
        peerlate_sess_clear(pl, &pl->sess[i]);
    free(pl);
}

static struct peerlate_sess *peerlate_find(const struct peerlate *pl, const char *name)
{
    for (size_t i = 0; i < PEERLATE_SESSIONS; i++)
        if (pl->sess[i].name != NULL && strcmp(pl->sess[i].name, name) == 0)
            return (struct peerlate_sess *)&pl->sess[i];
    return NULL;
}

/* The session of name, made if new in a free slot or the least recently fed one's. */
static struct peerlate_sess *peerlate_sess(struct peerlate *pl, const char *name)
{
    struct peerlate_sess *s = peerlate_find(pl, name), *old = &pl->sess[0];
    char *copy;

    if (s != NULL)
        return s;
    for (size_t i = 0; i < PEERLATE_SESSIONS; i++) {
        if (pl->sess[i].name == NULL) {
            old = &pl->sess[i];
            break;
        }
        if (pl->sess[i].fed < old->fed)
            old = &pl->sess[i];
    }
    if ((copy = strdup(name)) == NULL)
        return NULL;
    peerlate_sess_clear(pl, old);
    old->name = copy;
    return old;
}

/* Room for one more of size bytes after n in *p (first `first` of them). 0 or -ENOMEM. */
static int peerlate_grow(void **p, size_t *cap, size_t n, size_t size, size_t first)
{
    void *q;
    size_t c;

    if (n < *cap)
        return 0;
    c = *cap ? 2 * *cap : first;
    if ((q = realloc(*p, c * size)) == NULL)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static size_t peerlate_home(const struct peerlate_sess *s, uint32_t host, int64_t rank)
{
    uint64_t h = ((uint64_t)host << 32 ^ (uint64_t)rank) * UINT64_C(0x9e3779b97f4a7c15);

    return (size_t)(h >> 32) & (s->n_slot - 1);
}

/* The slot of (host, rank): its entry, or the empty one where it would go. */
static size_t peerlate_find_rank(const struct peerlate_sess *s, uint32_t host, int64_t rank)
{
    size_t i = peerlate_home(s, host, rank);

    while (s->slot[i] != 0 &&
           (s->ranks[s->slot[i] - 1].host != host || s->ranks[s->slot[i] - 1].rank != rank))
        i = (i + 1) & (s->n_slot - 1);
    return i;
}

/* Doubles the slots when one more rank would fill them past half. 0 or -ENOMEM. */
static int peerlate_reserve(struct peerlate_sess *s)
{
    size_t n = s->n_slot ? 2 * s->n_slot : 64;
    uint32_t *old = s->slot;

    if ((s->n_ranks + 1) * 2 <= s->n_slot)
        return 0;
    if ((s->slot = calloc(n, sizeof(*s->slot))) == NULL) {
        s->slot = old;
        return -ENOMEM;
    }
    free(old);
    s->n_slot = n;
    for (size_t i = 0; i < s->n_ranks; i++)
        s->slot[peerlate_find_rank(s, s->ranks[i].host, s->ranks[i].rank)] = (uint32_t)i + 1;
    return 0;
}

/* The index of (host, rank) in s->ranks, added if new; SIZE_MAX past PEERLATE_RANKS. */
static size_t peerlate_rank(struct peerlate_sess *s, uint32_t host, int64_t rank)
{
    size_t pos;

    if (s->n_slot > 0 && s->slot[pos = peerlate_find_rank(s, host, rank)] != 0)
        return s->slot[pos] - 1;
    if (s->n_ranks >= PEERLATE_RANKS || peerlate_reserve(s) < 0 ||
        peerlate_grow((void **)&s->ranks, &s->cap_ranks, s->n_ranks, sizeof(*s->ranks), 16) < 0)
        return SIZE_MAX;
    pos = peerlate_find_rank(s, host, rank);
    s->ranks[s->n_ranks] = (struct peerlate_rank){.host = host, .rank = rank};
    s->slot[pos] = (uint32_t)s->n_ranks + 1;
    return s->n_ranks++;
}

/* Step `step` of s, added in order if new; NULL past PEERLATE_STEPS or without memory. */
static struct peerlate_step *peerlate_step(struct peerlate_sess *s, uint64_t step)
{
    size_t lo = 0, hi = s->n_steps;

    /* steps come mostly in order: look at the last one first */
    if (hi > 0 && s->steps[hi - 1].step < step)
        lo = hi;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->steps[mid].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n_steps && s->steps[lo].step == step)
        return &s->steps[lo];
    if (s->n_steps >= PEERLATE_STEPS ||
        peerlate_grow((void **)&s->steps, &s->cap_steps, s->n_steps, sizeof(*s->steps), 16) < 0)
        return NULL;
    memmove(&s->steps[lo + 1], &s->steps[lo], (s->n_steps - lo) * sizeof(*s->steps));
    s->steps[lo] =
        (struct peerlate_step){.step = step, .first_enter = INT64_MAX, .last_exit = INT64_MIN};
    s->n_steps++;
    return &s->steps[lo];
}

/* Adds caused (with its bound) to rank ri in step st. -ENOMEM, or -ENOSPC past PEERLATE_BY. */
static int peerlate_step_add(struct peerlate *pl, struct peerlate_step *st, size_t ri,
                             uint64_t caused, uint64_t bound, bool uncertain)
{
    size_t cap = st->cap_by;

    for (uint32_t k = 0; k < st->n_by; k++)
        if (st->by[k].ri == ri) {
            st->by[k].caused = peerlate_sat(st->by[k].caused, caused);
            st->by[k].bound = peerlate_sat(st->by[k].bound, bound);
            st->by[k].uncertain += uncertain;
            return 0;
        }
    if (pl->n_by >= PEERLATE_BY)
        return -ENOSPC;
    /* most steps have one late rank: room for one first */
    if (peerlate_grow((void **)&st->by, &cap, st->n_by, sizeof(*st->by), 1) < 0)
        return -ENOMEM;
    pl->n_by++;
    st->cap_by = (uint32_t)cap;
    st->by[st->n_by++] = (struct peerlate_by){
        .ri = (uint32_t)ri, .caused = caused, .bound = bound, .uncertain = uncertain};
    return 0;
}

/* The bound of enter_i - enter_j: 0 on one host (one clock), else both bounds. */
static uint64_t peerlate_pair(const struct peerarr_home *i, const struct peerarr_home *j)
{
    if (i->host == j->host)
        return 0;
    return (uint64_t)i->bound_ns + (uint64_t)j->bound_ns;
}

void peerlate_due_cb(void *arg, const char *session, uint64_t comm, uint64_t seq,
                     const struct peerarr_home *a, size_t n)
{
    struct peerlate *pl = arg;
    struct peerlate_sess *s;
    struct peerlate_step *st;
    size_t li = 0, wi = SIZE_MAX, lri;
    uint64_t caused = 0;
    bool uncertain = false;

    (void)comm;
    (void)seq;
    if (n < 2 || (s = peerlate_sess(pl, session)) == NULL)
        return;
    s->fed = ++pl->tick;
    for (size_t i = 1; i < n; i++)
        if (a[i].enter_ns > a[li].enter_ns ||
            (a[i].enter_ns == a[li].enter_ns && a[i].rank < a[li].rank))
            li = i;
    if ((lri = peerlate_rank(s, a[li].host, a[li].rank)) == SIZE_MAX ||
        (st = peerlate_step(s, a[li].step)) == NULL) {
        s->unkept++;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t gap = (uint64_t)(a[li].enter_ns - a[i].enter_ns);
        /* a member's enter and exit are converted apart: never below 0 */
        uint64_t dur = a[i].exit_ns > a[i].enter_ns ? (uint64_t)(a[i].exit_ns - a[i].enter_ns) : 0;
        uint64_t wait = gap < dur ? gap : dur, pb = peerlate_pair(&a[li], &a[i]);
        size_t ri = peerlate_rank(s, a[i].host, a[i].rank);

        if (a[i].enter_ns < st->first_enter)
            st->first_enter = a[i].enter_ns;
        if (a[i].exit_ns > st->last_exit)
            st->last_exit = a[i].exit_ns;
        if (ri == SIZE_MAX)
            continue;
        s->ranks[ri].colls++;
        if (i == li)
            continue;
        uncertain |= pb > 0 && gap <= pb;
        s->ranks[ri].waited = peerlate_sat(s->ranks[ri].waited, wait);
        s->ranks[ri].waited_bound = peerlate_sat(s->ranks[ri].waited_bound, pb);
        if (wi == SIZE_MAX || wait > caused) {
            caused = wait;
            wi = i;
        }
    }
    uint64_t cb = wi != SIZE_MAX ? peerlate_pair(&a[li], &a[wi]) : 0;
    s->ranks[lri].last++;
    s->ranks[lri].caused = peerlate_sat(s->ranks[lri].caused, caused);
    s->ranks[lri].caused_bound = peerlate_sat(s->ranks[lri].caused_bound, cb);
    if (peerlate_step_add(pl, st, lri, caused, cb, uncertain) < 0)
        s->unkept++;
    s->instances++;
    s->uncertain += uncertain;
}

/* ---- the report's section ------------------------------------------------------------ */

/* Fills v (s->n_steps of them) with each step's figures. */
static void peerlate_views(const struct peerlate_sess *s, struct peerlate_view *v)
{
    for (size_t i = 0; i < s->n_steps; i++) {
        const struct peerlate_step *st = &s->steps[i];
        int64_t from = st->first_enter;
        struct peerlate_view *w = &v[i];

        if (i > 0 && s->steps[i - 1].step + 1 == st->step && s->steps[i - 1].last_exit < from)
            from = s->steps[i - 1].last_exit;
        *w = (struct peerlate_view){.step = st->step, .ri = SIZE_MAX};
        w->len = st->last_exit > from ? (uint64_t)(st->last_exit - from) : 0;
        for (uint32_t k = 0; k < st->n_by; k++) {
            const struct peerlate_by *b = &st->by[k];
            if (w->ri == SIZE_MAX || b->caused > w->held ||
                (b->caused == w->held && s->ranks[b->ri].rank < s->ranks[w->ri].rank)) {
                w->ri = b->ri;
                w->held = b->caused;
                w->bound = b->bound;
                w->uncertain = b->uncertain > 0;
            }
        }
        w->candidate =
            w->ri != SIZE_MAX && w->held > 0 && (double)w->held >= RQ_LATE * (double)w->len;
        w->named = w->candidate && w->held > w->bound && !w->uncertain;
    }
}

static int peerlate_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median of the held-up times of the named steps whose late rank is (or is not) ri. */
static uint64_t peerlate_median(const struct peerlate_view *v, size_t n, size_t ri, bool mine,
                                uint64_t *tmp, uint64_t *count)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (v[i].named && (v[i].ri == ri) == mine)
            tmp[k++] = v[i].held;
    *count = k;
    if (k == 0)
        return 0;
    qsort(tmp, k, sizeof(*tmp), peerlate_u64_cmp);
    return tmp[(k - 1) / 2];
}

struct peerlate_vr {
    struct verdict_rank r;
    size_t ri;
};

static int peerlate_vr_cmp(const void *a, const void *b)
{
    const struct peerlate_vr *x = a, *y = b;
    return (x->r.rank > y->r.rank) - (x->r.rank < y->r.rank);
}

static const char *peerlate_host(const char *const *hosts, size_t n_hosts, uint32_t h)
{
    return h < n_hosts && hosts[h] != NULL ? hosts[h] : "?";
}

/*
 * The verdict (buf) and the culprit's index in s->ranks (SIZE_MAX: none): verdict_culprit()
 * over the ranks' figures, then its caused time must exceed its bound.
 */
static size_t peerlate_verdict(const struct peerlate_sess *s, const struct peerlate_view *v,
                               const char *const *hosts, size_t n_hosts, char *buf, size_t len)
{
    struct peerlate_vr *vr = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*vr));
    uint64_t *tmp = calloc(s->n_steps ? s->n_steps : 1, sizeof(*tmp));
    uint64_t *scratch = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*scratch));
    uint64_t run = 0, within = 0, named = 0;
    size_t c = SIZE_MAX, ci = SIZE_MAX;
    char a[32], b[32], w[32], x[32], y[32];

    snprintf(buf, len, "no verdict across hosts: out of memory");
    if (vr == NULL || tmp == NULL || scratch == NULL)
        goto done;
    for (size_t i = 0; i < s->n_steps; i++) {
        run = peerlate_sat(run, v[i].len);
        within += v[i].candidate && !v[i].named;
        named += v[i].named;
    }
    for (size_t i = 0; i < s->n_ranks; i++) {
        struct verdict_rank *r = &vr[i].r;
        vr[i].ri = i;
        r->rank = s->ranks[i].rank;
        r->step_ns = run;
        r->caused = s->ranks[i].caused;
        r->waited = s->ranks[i].waited;
        r->late_first = UINT64_MAX;
        for (size_t k = 0; k < s->n_steps; k++)
            if (v[k].named && v[k].ri == i) {
                r->late_steps++;
                r->late_first = v[k].step < r->late_first ? v[k].step : r->late_first;
                r->late_last = v[k].step;
            }
        if (r->late_steps == 0)
            r->late_first = 0;
        r->late_median = peerlate_median(v, s->n_steps, i, true, tmp, &(uint64_t){0});
        r->other_median = peerlate_median(v, s->n_steps, i, false, tmp, &r->other_steps);
    }
    qsort(vr, s->n_ranks, sizeof(*vr), peerlate_vr_cmp);
    struct verdict_in in = {.n_ranks = s->n_ranks,
                            .n_steps = s->n_steps,
                            .instances = s->instances,
                            .scratch = scratch};
    /* verdict_culprit reads an array of struct verdict_rank: copy them out of vr */
    struct verdict_rank *flat = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*flat));
    if (flat == NULL)
        goto done;
    for (size_t i = 0; i < s->n_ranks; i++)
        flat[i] = vr[i].r;
    in.ranks = flat;
    c = verdict_culprit(&in);
    free(flat);
    if (c != SIZE_MAX)
        ci = vr[c].ri;
    if (ci != SIZE_MAX && s->ranks[ci].caused <= s->ranks[ci].caused_bound)
        ci = SIZE_MAX; /* it stands out, but not beyond what the clocks allow */
    if (ci != SIZE_MAX) {
        const struct verdict_rank *r = &vr[c].r;
        uint64_t lo = UINT64_MAX, hi = 0, lob = 0, hib = 0;
        for (size_t i = 0; i < s->n_ranks; i++)
            if (i != c) {
                if (vr[i].r.waited < lo) {
                    lo = vr[i].r.waited;
                    lob = s->ranks[vr[i].ri].waited_bound;
                }
                if (vr[i].r.waited >= hi) {
                    hi = vr[i].r.waited;
                    hib = s->ranks[vr[i].ri].waited_bound;
                }
            }
        verdict_ns(a, sizeof(a), r->caused);
        verdict_ns(b, sizeof(b), s->ranks[ci].caused_bound);
        verdict_ns(w, sizeof(w), lo);
        verdict_ns(x, sizeof(x), hi);
        verdict_ns(y, sizeof(y), lob > hib ? lob : hib);
        snprintf(buf, len,
                 "across hosts, rank %lld on %s held the others up for %s (± %s) in %llu of "
                 "%zu steps (%llu–%llu); the others waited %s–%s (± %s); %llu steps' late rank "
                 "within the clock bound",
                 (long long)r->rank, peerlate_host(hosts, n_hosts, s->ranks[ci].host), a, b,
                 (unsigned long long)r->late_steps, s->n_steps, (unsigned long long)r->late_first,
                 (unsigned long long)r->late_last, w, x, y, (unsigned long long)within);
    } else {
        snprintf(buf, len,
                 "across hosts, no rank stands out beyond the clock bound: %llu of %zu steps "
                 "have a late rank named, %llu within the clock bound (%llu of %llu collectives "
                 "uncertain in order)",
                 (unsigned long long)named, s->n_steps, (unsigned long long)within,
                 (unsigned long long)s->uncertain, (unsigned long long)s->instances);
    }
done:
    free(vr);
    free(tmp);
    free(scratch);
    return ci;
}

static int pk_kv_bool(msgpack_packer *pk, const char *k, bool v)
{
    return pk_str(pk, k) || (v ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

struct peerlate_order {
    int64_t rank;
    uint32_t host;
    size_t i;
};

static int peerlate_order_cmp(const void *a, const void *b)
{
    const struct peerlate_order *x = a, *y = b;

    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->host > y->host) - (x->host < y->host);
}

/* `ranks`: one map per (host, rank), by rank then host. */
static int peerlate_pack_ranks(const struct peerlate_sess *s, const struct peerlate_view *v,
                               const char *const *hosts, size_t n_hosts, msgpack_packer *pk)
{
    int rc = pk_str(pk, "ranks") || msgpack_pack_array(pk, (uint32_t)s->n_ranks);
    struct peerlate_order *o = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*o));
    uint64_t *late = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*late));

    if (o == NULL || late == NULL) {
        free(o);
        free(late);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n_ranks; i++)
        o[i] = (struct peerlate_order){s->ranks[i].rank, s->ranks[i].host, i};
    qsort(o, s->n_ranks, sizeof(*o), peerlate_order_cmp);
    for (size_t k = 0; k < s->n_steps; k++)
        if (v[k].named)
            late[v[k].ri]++;
    for (size_t n = 0; rc == 0 && n < s->n_ranks; n++) {
        const struct peerlate_rank *r = &s->ranks[o[n].i];
        rc = msgpack_pack_map(pk, 9) || pk_rank(pk, "rank", r->rank) || pk_str(pk, "host") ||
             pk_str(pk, peerlate_host(hosts, n_hosts, r->host)) ||
             pk_u64(pk, "collectives", r->colls) || pk_u64(pk, "last", r->last) ||
             pk_u64(pk, "caused_ns", r->caused) || pk_u64(pk, "caused_bound_ns", r->caused_bound) ||
             pk_u64(pk, "waited_ns", r->waited) || pk_u64(pk, "waited_bound_ns", r->waited_bound) ||
             pk_u64(pk, "late_steps", late[o[n].i]);
    }
    free(o);
    free(late);
    return rc ? -ENOMEM : 0;
}

/* `steps`: the first PEERLATE_LISTED steps whose late rank cost RQ_LATE of the step. */
static int peerlate_pack_steps(const struct peerlate_sess *s, const struct peerlate_view *v,
                               const char *const *hosts, size_t n_hosts, msgpack_packer *pk)
{
    size_t n = 0;
    int rc;

    for (size_t i = 0; i < s->n_steps; i++)
        n += v[i].candidate;
    n = n < PEERLATE_LISTED ? n : PEERLATE_LISTED;
    rc = pk_str(pk, "steps") || msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; rc == 0 && n > 0 && i < s->n_steps; i++) {
        const struct peerlate_view *w = &v[i];
        if (!w->candidate)
            continue;
        n--;
        rc = msgpack_pack_map(pk, 8) || pk_u64(pk, "step", w->step) ||
             pk_u64(pk, "step_ns", w->len) ||
             pk_rank(pk, "late_rank", w->named ? s->ranks[w->ri].rank : -1) ||
             pk_rank(pk, "rank", s->ranks[w->ri].rank) || pk_str(pk, "host") ||
             pk_str(pk, peerlate_host(hosts, n_hosts, s->ranks[w->ri].host)) ||
             pk_u64(pk, "held_up_ns", w->held) || pk_u64(pk, "bound_ns", w->bound) ||
             pk_kv_bool(pk, "within_bound", !w->named);
    }
    return rc ? -ENOMEM : 0;
}

int peerlate_pack(const struct peerlate *pl, const char *session, const char *const *hosts,
                  size_t n_hosts, msgpack_packer *pk)
{
    const struct peerlate_sess *s = pl != NULL ? peerlate_find(pl, session) : NULL;
    struct peerlate_view *v;
    uint64_t named = 0, within = 0;
    char verdict[1024];
    size_t ci;
    int rc;

    if (s == NULL || s->instances == 0)
        return -ENOENT;
    if ((v = calloc(s->n_steps ? s->n_steps : 1, sizeof(*v))) == NULL)
        return -ENOMEM;
    peerlate_views(s, v);
    for (size_t i = 0; i < s->n_steps; i++) {
        named += v[i].named;
        within += v[i].candidate && !v[i].named;
    }
    ci = peerlate_verdict(s, v, hosts, n_hosts, verdict, sizeof(verdict));
    rc = pk_str(pk, "hosts_late") || msgpack_pack_map(pk, 11) || pk_str(pk, "clock") ||
         pk_str(pk, peerlate_host(hosts, n_hosts, 0)) || pk_u64(pk, "instances", s->instances) ||
         pk_u64(pk, "uncertain", s->uncertain) || pk_u64(pk, "unkept", s->unkept) ||
         pk_u64(pk, "steps_total", s->n_steps) || pk_u64(pk, "steps_named", named) ||
         pk_u64(pk, "steps_within_bound", within) || pk_str(pk, "verdict") || pk_str(pk, verdict) ||
         pk_str(pk, "culprit");
    if (rc == 0 && ci == SIZE_MAX)
        rc = msgpack_pack_nil(pk);
    else if (rc == 0)
        rc = msgpack_pack_map(pk, 4) || pk_rank(pk, "rank", s->ranks[ci].rank) ||
             pk_str(pk, "host") || pk_str(pk, peerlate_host(hosts, n_hosts, s->ranks[ci].host)) ||
             pk_u64(pk, "caused_ns", s->ranks[ci].caused) ||
             pk_u64(pk, "bound_ns", s->ranks[ci].caused_bound);
    if (rc == 0)
        rc = peerlate_pack_ranks(s, v, hosts, n_hosts, pk);
    if (rc == 0)
        rc = peerlate_pack_steps(s, v, hosts, n_hosts, pk);
    free(v);
    return rc ? -ENOMEM : 0;
}

int peerlate_pack_late(const struct peerlate *pl, const char *session, msgpack_packer *pk)
{
    const struct peerlate_sess *s = pl != NULL ? peerlate_find(pl, session) : NULL;
    struct peerlate_view *v;
    struct peerlate_order *o;
    char verdict[1024];
    size_t ci;
    int rc;

    if (s == NULL || s->instances == 0)
        return -ENOENT;
    v = calloc(s->n_steps ? s->n_steps : 1, sizeof(*v));
    o = calloc(s->n_ranks ? s->n_ranks : 1, sizeof(*o));
    if (v == NULL || o == NULL) {
        free(v);
        free(o);
        return -ENOMEM;
    }
    peerlate_views(s, v);
    ci = peerlate_verdict(s, v, NULL, 0, verdict, sizeof(verdict));
    for (size_t i = 0; i < s->n_ranks; i++)
        o[i] = (struct peerlate_order){s->ranks[i].rank, s->ranks[i].host, i};
    qsort(o, s->n_ranks, sizeof(*o), peerlate_order_cmp);
    rc = msgpack_pack_map(pk, 4) || pk_u64(pk, "instances", s->instances) ||
         pk_rank(pk, "culprit", ci == SIZE_MAX ? -1 : s->ranks[ci].rank) ||
         pk_kv_bool(pk, "hosts", true) || pk_str(pk, "ranks") ||
         msgpack_pack_array(pk, (uint32_t)s->n_ranks);
    for (size_t n = 0; rc == 0 && n < s->n_ranks; n++) {
        const struct peerlate_rank *r = &s->ranks[o[n].i];
        rc = msgpack_pack_map(pk, 4) || pk_rank(pk, "rank", r->rank) ||
             pk_u64(pk, "arrived_last", r->last) || pk_u64(pk, "caused_ns", r->caused) ||
             pk_u64(pk, "waited_ns", r->waited);
    }
    free(v);
    free(o);
    return rc ? -ENOMEM : 0;
}
