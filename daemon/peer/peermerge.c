/*
 * peermerge.c — merging the hosts' parts of one session (peermerge.h).
 */
#include "peermerge.h"
#include "analysis.h"
#include "peersnap.h"
#include "proto.h"
#include "ranks_query.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void peermerge_free(struct peermerge *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_parts; i++) {
        free(m->parts[i].host);
        free(m->parts[i].snap);
        free(m->parts[i].clock);
    }
    free(m->parts);
    free(m->home_host);
    free(m->late);
    memset(m, 0, sizeof(*m));
}

void peermerge_percentiles(const struct agg_hist_bucket *b, size_t n, uint64_t calls,
                           uint64_t out[3])
{
    static const unsigned pct[3] = {50, 95, 99};
    uint64_t seen = 0;

    out[0] = out[1] = out[2] = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < 3; k++) {
            uint64_t rank = analysis_percentile_rank(calls, pct[k]);
            if (rank > seen && rank <= seen + b[i].count)
                out[k] = b[i].min_ns;
        }
        seen += b[i].count;
    }
}

static uint64_t peermerge_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ---- ops -------------------------------------------------------------------------- */

static int peermerge_op_ptr_cmp(const void *a, const void *b)
{
    const struct peersnap_op *x = *(const struct peersnap_op *const *)a;
    const struct peersnap_op *y = *(const struct peersnap_op *const *)b;

    return strcmp(x->op, y->op);
}

static int peermerge_bucket_cmp(const void *a, const void *b)
{
    const struct agg_hist_bucket *x = a, *y = b;

    return x->bucket < y->bucket ? -1 : x->bucket > y->bucket;
}

/* Folds the k parts same[0..k) of one op name into o (percentiles from the merged buckets). */
static int peermerge_fold_op(struct peersnap_op *const *same, size_t k, struct report_op *o)
{
    struct agg_hist_bucket *h;
    size_t nh = 0, n = 0;
    uint64_t pct[3];

    for (size_t i = 0; i < k; i++)
        nh += same[i]->n_hist;
    h = malloc((nh ? nh : 1) * sizeof(*h));
    o->op = strdup(same[0]->op);
    o->category = strdup(same[0]->category);
    if (h == NULL || o->op == NULL || o->category == NULL) {
        free(h);
        return -ENOMEM;
    }
    o->min_ns = UINT64_MAX;
    for (size_t i = 0; i < k; i++) {
        const struct peersnap_op *s = same[i];
        o->calls = peermerge_add(o->calls, s->calls);
        o->total_ns = peermerge_add(o->total_ns, s->total_ns);
        o->mem_bytes = peermerge_add(o->mem_bytes, s->mem_bytes);
        o->elements = peermerge_add(o->elements, s->elements);
        o->min_ns = s->min_ns < o->min_ns ? s->min_ns : o->min_ns;
        o->max_ns = s->max_ns > o->max_ns ? s->max_ns : o->max_ns;
        memcpy(h + n, s->hist, s->n_hist * sizeof(*h));
        n += s->n_hist;
    }
    qsort(h, n, sizeof(*h), peermerge_bucket_cmp);
    nh = 0; /* fold equal buckets: counts add, the smallest duration stays */
    for (size_t i = 0; i < n; i++) {
        if (nh > 0 && h[nh - 1].bucket == h[i].bucket) {
            h[nh - 1].count = peermerge_add(h[nh - 1].count, h[i].count);
            if (h[i].min_ns < h[nh - 1].min_ns)
                h[nh - 1].min_ns = h[i].min_ns;
        } else {
            h[nh++] = h[i];
        }
    }
    peermerge_percentiles(h, nh, o->calls, pct);
    o->p50_ns = pct[0];
    o->p95_ns = pct[1];
    o->p99_ns = pct[2];
    o->avg_ns = o->calls ? o->total_ns / o->calls : 0;
    if (o->avg_ns < o->min_ns)
        o->avg_ns = o->min_ns; /* a saturated total: never below min (query.c does the same) */
    free(h);
    return 0;
}

/* The merged ops rows of snaps[0..n) into *ops (report order), carrying local drops. */
static int peermerge_ops(const struct report *local, struct peersnap *snaps, size_t n,
                         struct report_op **ops, size_t *n_ops)
{
    struct peersnap_op **all;
    size_t total = 0, k = 0, rows = 0;
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        total += snaps[i].n_ops;
    all = malloc((total ? total : 1) * sizeof(*all));
    *ops = calloc(total ? total : 1, sizeof(**ops));
    if (all == NULL || *ops == NULL) {
        free(all);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < snaps[i].n_ops; j++)
            all[k++] = &snaps[i].ops[j];
    qsort(all, total, sizeof(*all), peermerge_op_ptr_cmp);
    for (size_t i = 0; rc == 0 && i < total;) {
        size_t j = i + 1;
        while (j < total && strcmp(all[j]->op, all[i]->op) == 0)
            j++;
        rc = peermerge_fold_op(all + i, j - i, &(*ops)[rows++]);
        for (size_t l = 0; rc == 0 && l < local->n_ops; l++)
            if (strcmp(local->ops[l].op, all[i]->op) == 0) {
                (*ops)[rows - 1].dropped_calls = local->ops[l].dropped_calls;
                (*ops)[rows - 1].dropped_ns = local->ops[l].dropped_ns;
                (*ops)[rows - 1].counted_calls = local->ops[l].counted_calls;
                (*ops)[rows - 1].counted_ns = local->ops[l].counted_ns;
            }
        i = j;
    }
    *n_ops = rows;
    free(all);
    return rc;
}

/* ---- devices, comm, the header ------------------------------------------------------ */

static int peermerge_dev_cmp(const void *a, const void *b)
{
    return strcmp(((const struct report_device *)a)->device,
                  ((const struct report_device *)b)->device);
}

/* Every host's devices as `host/device`, sorted by name. */
static int peermerge_devices(struct peersnap *snaps, char *const *hosts, size_t n,
                             struct report_device **devs, size_t *n_devs)
{
    size_t total = 0, k = 0;

    for (size_t i = 0; i < n; i++)
        total += snaps[i].n_devs;
    *devs = calloc(total ? total : 1, sizeof(**devs));
    if (*devs == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < snaps[i].n_devs; j++) {
            const struct peersnap_dev *d = &snaps[i].devs[j];
            struct report_device *o = &(*devs)[k];
            size_t len = strlen(hosts[i]) + 1 + strlen(d->device) + 1;
            if ((o->device = malloc(len)) == NULL) {
                *n_devs = k;
                return -ENOMEM;
            }
            snprintf(o->device, len, "%s/%s", hosts[i], d->device);
            o->calls = d->calls;
            o->total_ns = d->total_ns;
            o->mem_bytes = d->mem_bytes;
            k++;
        }
    *n_devs = k;
    qsort(*devs, k, sizeof(**devs), peermerge_dev_cmp);
    return 0;
}

static int peermerge_comm(struct report *r, double min_ratio)
{
    r->comm = calloc(r->n_ops ? r->n_ops : 1, sizeof(*r->comm));
    if (r->comm == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < r->n_ops; i++) {
        const struct report_op *op = &r->ops[i];
        struct report_comm *c = &r->comm[r->n_comm];
        if (!analysis_is_comm(op->category) || op->share < min_ratio)
            continue;
        if ((c->op = strdup(op->op)) == NULL)
            return -ENOMEM;
        c->calls = op->calls;
        c->total_ns = op->total_ns;
        c->share = op->share;
        r->n_comm++;
    }
    return 0;
}

/*
 * The header of the merged report: sums, the largest peak of one host, and
 * the span from the first begin to the last end of the hosts whose times are
 * on the home's clock (aligned[i]), at least the longest span of one host.
 */
static void peermerge_header(struct report *r, const struct peersnap *snaps, const bool *aligned,
                             size_t n)
{
    uint64_t begin = UINT64_MAX, end = 0;

    r->processes = r->entries = r->dropped = r->total_ns = r->span_ns = 0;
    r->peak_bytes = r->total_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (aligned[i] && snaps[i].end_ns > 0) {
            begin = snaps[i].begin_ns < begin ? snaps[i].begin_ns : begin;
            end = snaps[i].end_ns > end ? snaps[i].end_ns : end;
        }
        const struct peersnap *s = &snaps[i];
        r->processes = peermerge_add(r->processes, s->processes);
        r->entries = peermerge_add(r->entries, s->entries);
        r->dropped = peermerge_add(r->dropped, s->dropped);
        r->total_ns = peermerge_add(r->total_ns, s->total_ns);
        r->total_bytes = peermerge_add(r->total_bytes, s->total_bytes);
        if (s->span_ns > r->span_ns)
            r->span_ns = s->span_ns;
        if (s->peak_bytes > r->peak_bytes)
            r->peak_bytes = s->peak_bytes;
    }
    if (end > begin && end - begin > r->span_ns)
        r->span_ns = end - begin;
}

/* ---- top lists -------------------------------------------------------------------------- */

static int peermerge_slow_cmp(const void *a, const void *b)
{
    const struct report_entry *x = a, *y = b;

    if (x->dur_ns != y->dur_ns)
        return x->dur_ns > y->dur_ns ? -1 : 1;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

static int peermerge_mem_cmp(const void *a, const void *b)
{
    const struct report_entry *x = a, *y = b;

    if (x->mem_bytes != y->mem_bytes)
        return x->mem_bytes > y->mem_bytes ? -1 : 1;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

/* "host/device" in a new string, or NULL for no device; *nomem set when out of memory. */
static char *peermerge_host_dev(const char *host, const char *device, bool *nomem)
{
    size_t len;
    char *s;

    if (device == NULL)
        return NULL;
    len = strlen(host) + strlen(device) + 2;
    if ((s = malloc(len)) == NULL)
        *nomem = true;
    else
        snprintf(s, len, "%s/%s", host, device);
    return s;
}

/*
 * One merged top list into *list (replacing the home's own, which it takes
 * in with its devices renamed host/device): the home's entries, then every
 * member's (kept, when mem_min is set, above it), sorted by cmp, the first
 * top kept.
 */
static int peermerge_top(struct report_entry **list, size_t *n_list, const char *home_host,
                         struct peersnap *snaps, char **hosts, size_t from, size_t n, bool slow,
                         uint32_t top, uint64_t mem_min)
{
    size_t total = *n_list, k = 0;
    struct report_entry *all;
    bool nomem = false;

    for (size_t i = from; i < n; i++)
        total += slow ? snaps[i].n_slowest : snaps[i].n_hotspots;
    if ((all = calloc(total ? total : 1, sizeof(*all))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < *n_list; i++, k++) {
        all[k] = (*list)[i]; /* moved: shapes and all */
        char *dev = peermerge_host_dev(home_host, all[k].device, &nomem);
        free(all[k].device);
        all[k].device = dev;
    }
    free(*list);
    for (size_t i = from; i < n; i++) {
        const struct peersnap_entry *e = slow ? snaps[i].slowest : snaps[i].hotspots;
        size_t m = slow ? snaps[i].n_slowest : snaps[i].n_hotspots;
        for (size_t j = 0; j < m; j++) {
            if (!slow && e[j].mem_bytes <= mem_min)
                continue;
            all[k] = (struct report_entry){.rank = e[j].rank,
                                           .step = e[j].step,
                                           .start_ns = e[j].start_ns,
                                           .dur_ns = e[j].dur_ns,
                                           .mem_bytes = e[j].mem_bytes};
            all[k].device = peermerge_host_dev(hosts[i], e[j].device, &nomem);
            if ((all[k++].op = strdup(e[j].op)) == NULL)
                nomem = true;
        }
    }
    qsort(all, k, sizeof(*all), slow ? peermerge_slow_cmp : peermerge_mem_cmp);
    for (size_t i = top < k ? top : k; i < k; i++) {
        free(all[i].op);
        free(all[i].device);
        free(all[i].out_shape.data);
        free(all[i].in_shapes.data);
    }
    *list = all;
    *n_list = top < k ? top : k;
    return nomem ? -ENOMEM : 0;
}

/* ---- hosts rows ----------------------------------------------------------------------- */

static void peermerge_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    proto_pack_str(pk, k);
    msgpack_pack_uint64(pk, v);
}

/* key: v, or nil when `known` is false. */
static void peermerge_kv_i64_or_nil(msgpack_packer *pk, const char *k, bool known, int64_t v)
{
    proto_pack_str(pk, k);
    if (known)
        msgpack_pack_int64(pk, v);
    else
        msgpack_pack_nil(pk);
}

/*
 * The clock keys of one row of `hosts` (c is NULL for the home's own row: its
 * own clock, offset 0 within 0, drift 0, nothing refined). offset_ns is member
 * clock minus home clock now, within bound_ns, and bound_source says what that
 * bound is: the probes' ("probes"), narrower by collectives near now
 * ("collectives") or widened by a contradiction ("contradiction"); before the
 * first burst of probes all are nil, and drift_ppm until two. refined counts
 * the collectives' cuts kept (docs/clocks.md "Collectives"), and the three
 * refined_* keys are the estimate at the latest one's time (nil before any):
 * its offset, its bound and the probes' bound alone then.
 */
static void peermerge_host_clock(msgpack_packer *pk, const struct peermerge_part *c)
{
    bool known = c == NULL || c->bound_ns >= 0;
    struct peerclock_at at = {0};
    bool refined = c != NULL && c->clock != NULL && c->clock->refined > 0 &&
                   peerclock_offset_at(c->clock, c->clock->refined_at, &at) == 0;

    peermerge_kv_i64_or_nil(pk, "offset_ns", known, c != NULL ? c->offset_ns : 0);
    peermerge_kv_i64_or_nil(pk, "bound_ns", known, c != NULL ? c->bound_ns : 0);
    proto_pack_str(pk, "bound_source");
    if (c == NULL || !known)
        msgpack_pack_nil(pk);
    else
        proto_pack_str(pk, c->bound_ns < c->probe_bound_ns   ? "collectives"
                           : c->bound_ns > c->probe_bound_ns ? "contradiction"
                                                             : "probes");
    proto_pack_str(pk, "drift_ppm");
    if (c != NULL && isnan(c->drift_ppm))
        msgpack_pack_nil(pk);
    else
        msgpack_pack_double(pk, c != NULL ? c->drift_ppm : 0.0);
    peermerge_kv_u64(pk, "violations", c != NULL ? c->violations : 0);
    peermerge_kv_u64(pk, "refined", c != NULL && c->clock != NULL ? c->clock->refined : 0);
    peermerge_kv_i64_or_nil(pk, "refined_offset_ns", refined, at.offset_ns);
    peermerge_kv_i64_or_nil(pk, "refined_bound_ns", refined, at.bound_ns);
    peermerge_kv_i64_or_nil(pk, "refined_probe_bound_ns", refined, at.probe_bound_ns);
    peermerge_kv_u64(pk, "arrivals", c != NULL ? c->arrivals : 0);
    peermerge_kv_u64(pk, "arrivals_dropped", c != NULL ? c->arrivals_dropped : 0);
}

/* One row of `hosts`: p is NULL for the home's own. */
static void peermerge_host_row(msgpack_packer *pk, const char *host, const char *state,
                               const struct peersnap *s, uint64_t age_ns,
                               const struct peermerge_part *p)
{
    msgpack_pack_map(pk, 19);
    proto_pack_str(pk, "host");
    proto_pack_str(pk, host);
    proto_pack_str(pk, "state");
    proto_pack_str(pk, state);
    peermerge_kv_u64(pk, "ranks", s != NULL ? s->ranks : 0);
    peermerge_kv_u64(pk, "processes", s != NULL ? s->processes : 0);
    peermerge_kv_u64(pk, "entries", s != NULL ? s->entries : 0);
    peermerge_kv_u64(pk, "dropped", s != NULL ? s->dropped : 0);
    peermerge_kv_u64(pk, "snapshot_age_ns", age_ns);
    peermerge_host_clock(pk, p);
    peermerge_kv_u64(pk, "ranks_cut", s != NULL ? s->ranks_cut : 0);
}

/* r->hosts: the key and its array, the home's row first, then the members' in order. */
static int peermerge_hosts(struct report *r, const struct peermerge *m,
                           const struct peersnap *snaps, const bool *have, bool home_part)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_str(&pk, "hosts");
    msgpack_pack_array(&pk, m->n_parts + 1);
    peermerge_host_row(&pk, m->home_host, home_part ? m->home_state : "none",
                       home_part ? &snaps[0] : NULL, 0, NULL);
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct peermerge_part *p = &m->parts[i];
        peermerge_host_row(&pk, p->host, p->state, have[i + 1] ? &snaps[i + 1] : NULL, p->age_ns,
                           p);
    }
    if (sb.data == NULL) {
        msgpack_sbuffer_destroy(&sb);
        return -ENOMEM;
    }
    free(r->hosts);
    r->hosts_len = sb.size;
    r->hosts = msgpack_sbuffer_release(&sb);
    return 0;
}

/* ---- clocks ---------------------------------------------------------------------------- */

/* A member time *t converted to the home's clock, with the offset in force then. */
static void peermerge_to_home(const struct peerclock *c, uint64_t *t)
{
    struct peerclock_at at;

    if (*t <= (uint64_t)PEERCLOCK_TIME_MAX && peerclock_to_home(c, (int64_t)*t, &at) == 0)
        *t = at.home_ns > 0 ? (uint64_t)at.home_ns : 0;
}

/*
 * Converts a member's times in s (its top lists' start_ns, its begin_ns and
 * end_ns) to the home's clock with its estimator c. False when c has no
 * estimate yet (NULL): the times stay the member's, and its begin and end
 * do not count in the merged span.
 */
static bool peermerge_align(struct peersnap *s, const struct peerclock *c)
{
    if (c == NULL || c->n == 0)
        return false;
    for (size_t i = 0; i < s->n_slowest; i++)
        peermerge_to_home(c, &s->slowest[i].start_ns);
    for (size_t i = 0; i < s->n_hotspots; i++)
        peermerge_to_home(c, &s->hotspots[i].start_ns);
    if (s->end_ns > 0) {
        peermerge_to_home(c, &s->begin_ns);
        peermerge_to_home(c, &s->end_ns);
    }
    return true;
}

/* ---- ranks ----------------------------------------------------------------------------- */

/* A row of the merged `ranks`: the home's own (a map of its analysis) or a member's. */
struct peermerge_rank {
    int64_t rank;
    size_t host; /* the hosts' order: the home's 0 */
    const msgpack_object *home;
    const struct ranks_row *row;
};

static int peermerge_rank_cmp(const void *a, const void *b)
{
    const struct peermerge_rank *x = a, *y = b;

    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->host < y->host ? -1 : x->host > y->host;
}

/* The home's own row o (a map) with "host": host first. */
static int peermerge_pack_home_row(msgpack_packer *pk, const msgpack_object *o, const char *host)
{
    int rc = msgpack_pack_map(pk, o->via.map.size + 1) | proto_pack_str(pk, "host") |
             proto_pack_str(pk, host);

    for (uint32_t i = 0; i < o->via.map.size; i++)
        rc |= msgpack_pack_object(pk, o->via.map.ptr[i].key) |
              msgpack_pack_object(pk, o->via.map.ptr[i].val);
    return rc;
}

/* The rank a row of the home's analysis names (-1: nil). */
static int64_t peermerge_row_rank(const msgpack_object *o)
{
    for (uint32_t i = 0; o->type == MSGPACK_OBJECT_MAP && i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == 4 &&
            memcmp(k->via.str.ptr, "rank", 4) == 0)
            return v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)v->via.u64 : -1;
    }
    return -1;
}

/*
 * The merged `ranks` array: the home's own rows (home, a msgpack array; NULL: none) and
 * every member's snapshot rows, each with its "host", sorted by rank then host order.
 * Only the ranks in the filter's list when ranks is not NULL.
 */
static int peermerge_pack_ranks(msgpack_packer *pk, const msgpack_object *home,
                                const struct peersnap *snaps, char *const *hosts, size_t from,
                                size_t n, const int64_t *ranks, size_t n_ranks)
{
    size_t total = home != NULL ? home->via.array.size : 0, k = 0;
    struct peermerge_rank *all;
    int rc = 0;

    for (size_t i = from; i < n; i++)
        total += snaps[i].n_rank_rows;
    if ((all = calloc(total ? total : 1, sizeof(*all))) == NULL)
        return -ENOMEM;
    for (uint32_t j = 0; home != NULL && j < home->via.array.size; j++)
        if (home->via.array.ptr[j].type == MSGPACK_OBJECT_MAP)
            all[k++] = (struct peermerge_rank){.rank = peermerge_row_rank(&home->via.array.ptr[j]),
                                               .home = &home->via.array.ptr[j]};
    for (size_t i = from; i < n; i++)
        for (size_t j = 0; j < snaps[i].n_rank_rows; j++) {
            const struct ranks_row *row = &snaps[i].rank_rows[j];
            bool wanted = ranks == NULL;
            for (size_t f = 0; !wanted && f < n_ranks; f++)
                wanted = ranks[f] == row->rank;
            if (wanted)
                all[k++] = (struct peermerge_rank){.rank = row->rank, .host = i, .row = row};
        }
    qsort(all, k, sizeof(*all), peermerge_rank_cmp);
    rc = msgpack_pack_array(pk, (uint32_t)k);
    for (size_t i = 0; rc == 0 && i < k; i++)
        rc = all[i].home != NULL ? peermerge_pack_home_row(pk, all[i].home, hosts[0])
                                 : ranks_row_pack(pk, all[i].row, hosts[all[i].host]);
    free(all);
    return rc != 0 ? -ENOMEM : 0;
}

/*
 * r->analysis with its `ranks` key's rows of every host (peermerge_pack_ranks); the
 * other analysis keys stay the home's own. snaps[0..n) named hosts[0..n), the members'
 * from `from` on (hosts[0] is the home's, whether or not it has a part). 0 or -ENOMEM;
 * -EPROTO when r->analysis is not RANKS_QUERY_KEYS pairs (a bug).
 */
static int peermerge_ranks(struct report *r, const struct peersnap *snaps, char *const *hosts,
                           size_t from, size_t n, const int64_t *ranks, size_t n_ranks)
{
    msgpack_unpacked u;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t off = 0;
    int rc = 0;

    msgpack_unpacked_init(&u);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (int i = 0; rc == 0 && i < 2 * RANKS_QUERY_KEYS; i += 2) {
        msgpack_object key;
        if (msgpack_unpack_next(&u, r->analysis, r->analysis_len, &off) != MSGPACK_UNPACK_SUCCESS ||
            u.data.type != MSGPACK_OBJECT_STR) {
            rc = -EPROTO;
            break;
        }
        key = u.data;
        rc = msgpack_pack_object(&pk, key) ? -ENOMEM : 0;
        /* the key's bytes live in u's zone: compare them before the next unpack */
        bool is_ranks = key.via.str.size == 5 && memcmp(key.via.str.ptr, "ranks", 5) == 0;
        if (rc == 0 &&
            msgpack_unpack_next(&u, r->analysis, r->analysis_len, &off) != MSGPACK_UNPACK_SUCCESS)
            rc = -EPROTO;
        else if (rc == 0 && is_ranks)
            rc = peermerge_pack_ranks(&pk, u.data.type == MSGPACK_OBJECT_ARRAY ? &u.data : NULL,
                                      snaps, hosts, from, n, ranks, n_ranks);
        else if (rc == 0)
            rc = msgpack_pack_object(&pk, u.data) ? -ENOMEM : 0;
    }
    msgpack_unpacked_destroy(&u);
    if (rc == 0 && sb.data != NULL) {
        free(r->analysis);
        r->analysis_len = sb.size;
        r->analysis = msgpack_sbuffer_release(&sb);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ---- the merge -------------------------------------------------------------------------- */

/* Decodes member i's snapshot into snaps[i + 1]; one that fails is left out (have false). */
static bool peermerge_decode(const struct peermerge_part *p, struct peersnap *out)
{
    msgpack_unpacked u;
    char err[160];
    bool ok;

    msgpack_unpacked_init(&u);
    ok = msgpack_unpack_next(&u, p->snap, p->snap_len, NULL) == MSGPACK_UNPACK_SUCCESS &&
         peersnap_decode(&u.data, out, err, sizeof(err)) == 0;
    msgpack_unpacked_destroy(&u);
    return ok;
}

/* A page of ops (ops_limit, an extension): the rows [offset, offset + limit) of the merge. */
static void peermerge_page(struct report *r, uint32_t offset, uint32_t limit)
{
    size_t from = offset < r->n_ops ? offset : r->n_ops;
    size_t n = r->n_ops - from < limit ? r->n_ops - from : limit;

    r->paged = true;
    r->ops_total = r->n_ops;
    for (size_t i = 0; i < r->n_ops; i++)
        if (i < from || i >= from + n) {
            free(r->ops[i].op);
            free(r->ops[i].category);
        }
    memmove(r->ops, r->ops + from, n * sizeof(*r->ops));
    r->n_ops = n;
}

/*
 * Replaces r's summed sections with the merge of snaps[0..n) (hosts[i] named);
 * local: snaps[0] is the home's own part, whose top lists r already has.
 */
static int peermerge_apply(struct report *r, struct peersnap *snaps, const bool *aligned,
                           char **hosts, size_t n, bool local, const char *home_host,
                           const struct report_params *p)
{
    struct report merged = {0};
    uint32_t top = p != NULL ? p->top : 10;
    int rc;

    rc = peermerge_top(&r->slowest, &r->n_slowest, home_host, snaps, hosts, local, n, true, top, 0);
    if (rc == 0)
        rc = peermerge_top(&r->hotspots, &r->n_hotspots, home_host, snaps, hosts, local, n, false,
                           top, p != NULL ? p->mem_threshold : 0);
    if (rc < 0)
        return rc;

    peermerge_header(&merged, snaps, aligned, n);
    rc = peermerge_ops(r, snaps, n, &merged.ops, &merged.n_ops);
    if (rc == 0)
        rc = peermerge_devices(snaps, hosts, n, &merged.devices, &merged.n_devices);
    if (rc == 0) {
        for (size_t i = 0; i < merged.n_ops; i++)
            merged.ops[i].share = analysis_share(merged.ops[i].total_ns, merged.total_ns);
        analysis_sort_ops(merged.ops, merged.n_ops);
        rc = peermerge_comm(&merged, p != NULL ? p->comm_min_ratio : 0.0);
    }
    if (rc == 0) {
        analysis_imbalance(merged.devices, merged.n_devices, &merged.imbalance);
        if (merged.imbalance.present &&
            (merged.imbalance.slowest_device = strdup(merged.imbalance.slowest_device)) == NULL)
            rc = -ENOMEM;
    }
    if (rc < 0) {
        report_free(&merged);
        return rc;
    }
#define MOVE(f)                                                                                    \
    do {                                                                                           \
        __typeof__(r->f) t = r->f;                                                                 \
        r->f = merged.f;                                                                           \
        merged.f = t;                                                                              \
    } while (0)
    MOVE(ops);
    MOVE(n_ops);
    MOVE(devices);
    MOVE(n_devices);
    MOVE(comm);
    MOVE(n_comm);
    MOVE(imbalance);
#undef MOVE
    r->processes = merged.processes;
    r->entries = merged.entries;
    r->dropped = merged.dropped;
    r->total_ns = merged.total_ns;
    r->span_ns = merged.span_ns;
    r->peak_bytes = merged.peak_bytes;
    r->total_bytes = merged.total_bytes;
    r->devices_count = r->n_devices;
    report_free(&merged); /* the home's own sections it replaced */
    if (p != NULL && p->ops_limit > 0)
        peermerge_page(r, p->ops_offset, p->ops_limit);
    return 0;
}

int peermerge_filtered_ranks(struct report *r, const struct peermerge *m, const int64_t *ranks,
                             size_t n_ranks, bool *from)
{
    size_t n = m->n_parts + 1;
    struct peersnap *snaps = calloc(n, sizeof(*snaps));
    char **hosts = calloc(n, sizeof(*hosts));
    int rc = -ENOMEM;

    if (snaps != NULL && hosts != NULL) {
        hosts[0] = m->home_host;
        for (size_t i = 1; i < n; i++) {
            hosts[i] = m->parts[i - 1].host;
            (void)peermerge_decode(&m->parts[i - 1], &snaps[i]); /* one that fails: no rows */
            for (size_t j = 0; j < snaps[i].n_rank_rows; j++)
                for (size_t f = 0; f < n_ranks; f++)
                    from[i - 1] = from[i - 1] || snaps[i].rank_rows[j].rank == ranks[f];
        }
        rc = r->analysis != NULL ? peermerge_ranks(r, snaps, hosts, 1, n, ranks, n_ranks) : 0;
    }
    for (size_t i = 0; snaps != NULL && i < n; i++)
        peersnap_free(&snaps[i]);
    free(snaps);
    free(hosts);
    return rc;
}

int peermerge_member_ranks(msgpack_packer *pk, const struct peermerge *m)
{
    size_t n = m->n_parts, k = 0;
    struct peersnap *snaps = calloc(n + 1, sizeof(*snaps));
    char **hosts = calloc(n + 1, sizeof(*hosts));
    int rc = -ENOMEM;

    if (snaps != NULL && hosts != NULL) {
        for (size_t i = 0; i < n; i++)
            if (peermerge_decode(&m->parts[i], &snaps[k]))
                hosts[k++] = m->parts[i].host;
        rc = peermerge_pack_ranks(pk, NULL, snaps, hosts, 0, k, NULL, 0);
    }
    for (size_t i = 0; snaps != NULL && i < k; i++)
        peersnap_free(&snaps[i]);
    free(snaps);
    free(hosts);
    return rc;
}

int peermerge_report(struct report *r, const struct peermerge *m, const char *db_path,
                     const struct report_params *p, char *err, size_t errlen)
{
    size_t n = m->n_parts + 1, k = 0;
    struct peersnap *snaps = calloc(n, sizeof(*snaps)), *use;
    char **hosts = calloc(n, sizeof(*hosts));
    bool *have = calloc(n, sizeof(*have)), *aligned = calloc(n, sizeof(*aligned));
    int rc = 0;

    use = calloc(n, sizeof(*use));
    if (snaps == NULL || hosts == NULL || have == NULL || aligned == NULL || use == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (db_path != NULL) {
        rc = peersnap_read(db_path, false, &snaps[0], err, errlen);
        if (rc < 0)
            goto out;
        have[0] = true;
    }
    for (size_t i = 0; i < m->n_parts; i++)
        have[i + 1] = peermerge_decode(&m->parts[i], &snaps[i + 1]);
    /* The parts that count, packed to the front (use borrows snaps' contents), each member's
     * times on the home's clock (aligned) once its clock is measured. */
    for (size_t i = 0; i < n; i++)
        if (have[i]) {
            aligned[k] = i == 0 || peermerge_align(&snaps[i], m->parts[i - 1].clock);
            use[k] = snaps[i];
            hosts[k++] = i == 0 ? m->home_host : m->parts[i - 1].host;
        }
    rc = peermerge_apply(r, use, aligned, hosts, k, have[0], m->home_host, p);
    /* the analysis (the home's own report's, when asked) lists every host's ranks */
    if (rc == 0 && r->analysis != NULL && have[0])
        rc = peermerge_ranks(r, use, hosts, 1, k, NULL, 0);
    if (rc == 0)
        rc = peermerge_hosts(r, m, snaps, have, db_path != NULL);
    if (rc == 0 && m->late != NULL) {
        free(r->hosts_late);
        r->hosts_late_len = 0;
        if ((r->hosts_late = malloc(m->late_len)) == NULL)
            rc = -ENOMEM;
        else {
            memcpy(r->hosts_late, m->late, m->late_len);
            r->hosts_late_len = m->late_len;
        }
    }
out:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "report: merging the hosts: out of memory");
    else if (rc == -EPROTO)
        snprintf(err, errlen, "report: merging the hosts' ranks: the analysis is malformed");
    for (size_t i = 0; snaps != NULL && i < n; i++)
        peersnap_free(&snaps[i]);
    free(snaps);
    free(use);
    free(hosts);
    free(have);
    free(aligned);
    return rc;
}
