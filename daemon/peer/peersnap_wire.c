/*
 * peersnap_wire.c — the `snapshot` peer message (peersnap.h): packing, and
 * decoding that trusts nothing. Pure over msgpack, no SQLite: the fuzzer
 * (tests/fuzz/fuzz_peersnap.c) compiles it alone.
 */
#include "peersnap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void peersnap_free(struct peersnap *s)
{
    if (s == NULL)
        return;
    free(s->session);
    for (size_t i = 0; i < s->n_ops; i++) {
        free(s->ops[i].op);
        free(s->ops[i].category);
        free(s->ops[i].hist);
    }
    free(s->ops);
    for (size_t i = 0; i < s->n_devs; i++)
        free(s->devs[i].device);
    free(s->devs);
    for (size_t i = 0; i < s->n_slowest; i++) {
        free(s->slowest[i].op);
        free(s->slowest[i].device);
    }
    free(s->slowest);
    for (size_t i = 0; i < s->n_hotspots; i++) {
        free(s->hotspots[i].op);
        free(s->hotspots[i].device);
    }
    free(s->hotspots);
    free(s->rank_rows);
    memset(s, 0, sizeof(*s));
}

/* ---- packing --------------------------------------------------------------------- */

static void peersnap_kv(msgpack_packer *pk, const char *k, uint64_t v)
{
    proto_pack_str(pk, k);
    msgpack_pack_uint64(pk, v);
}

static int peersnap_pack_entries(msgpack_packer *pk, const struct peersnap_entry *e, size_t n)
{
    int rc = msgpack_pack_array(pk, n);

    for (size_t i = 0; i < n; i++) {
        rc |= msgpack_pack_array(pk, 7);
        rc |= proto_pack_str(pk, e[i].op);
        rc |= e[i].rank >= 0 ? msgpack_pack_int64(pk, e[i].rank) : msgpack_pack_nil(pk);
        rc |= e[i].device != NULL ? proto_pack_str(pk, e[i].device) : msgpack_pack_nil(pk);
        rc |= msgpack_pack_uint64(pk, e[i].step);
        rc |= msgpack_pack_uint64(pk, e[i].start_ns);
        rc |= msgpack_pack_uint64(pk, e[i].dur_ns);
        rc |= msgpack_pack_uint64(pk, e[i].mem_bytes);
    }
    return rc;
}

/* nil when !known, else v */
static int peersnap_pack_known(msgpack_packer *pk, uint64_t v, bool known)
{
    return known ? msgpack_pack_uint64(pk, v) : msgpack_pack_nil(pk);
}

/* `rank_rows`: each row an array of PEERSNAP_RANK_FIELDS in struct ranks_row's order. */
static int peersnap_pack_ranks(msgpack_packer *pk, const struct ranks_row *r, size_t n)
{
    int rc = msgpack_pack_array(pk, n);

    for (size_t i = 0; i < n; i++) {
        const uint64_t u[] = {r[i].processes,   r[i].dropped,       r[i].steps,
                              r[i].step_ns,     r[i].step_mean_ns,  r[i].total_ns,
                              r[i].compute_ns,  r[i].comm_ns,       r[i].memory_ns,
                              r[i].wait_ns,     r[i].other_ns,      r[i].exposed_comm_ns,
                              r[i].collectives, r[i].waited_ns,     r[i].arrived_last,
                              r[i].caused_ns,   r[i].slowest_steps, r[i].late_steps};
        rc |= msgpack_pack_array(pk, PEERSNAP_RANK_FIELDS);
        rc |= r[i].rank >= 0 ? msgpack_pack_int64(pk, r[i].rank) : msgpack_pack_nil(pk);
        for (size_t k = 0; k < sizeof(u) / sizeof(u[0]); k++)
            rc |= msgpack_pack_uint64(pk, u[k]);
        rc |= peersnap_pack_known(pk, r[i].late_first_step, r[i].late_steps > 0);
        rc |= peersnap_pack_known(pk, r[i].late_last_step, r[i].late_steps > 0);
        rc |= peersnap_pack_known(pk, r[i].untracked_ns, r[i].untracked_known);
        rc |= msgpack_pack_uint64(pk, r[i].cpu_wait_ns);
        rc |= msgpack_pack_double(pk, r[i].comm_share);
    }
    return rc;
}

int peersnap_pack(msgpack_packer *pk, const struct peersnap *s)
{
    int rc = 0;

    rc |= msgpack_pack_array(pk, 2);
    rc |= proto_pack_str(pk, "snapshot");
    rc |= msgpack_pack_map(pk, 22);
    rc |= proto_pack_str(pk, "session");
    rc |= proto_pack_str(pk, s->session);
    peersnap_kv(pk, "seq", s->seq);
    peersnap_kv(pk, "sid", s->sid);
    peersnap_kv(pk, "started_ns", s->started_ns);
    peersnap_kv(pk, "ended_ns", s->ended_ns);
    rc |= proto_pack_str(pk, "ended");
    rc |= s->ended ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    peersnap_kv(pk, "processes", s->processes);
    peersnap_kv(pk, "ranks", s->ranks);
    peersnap_kv(pk, "entries", s->entries);
    peersnap_kv(pk, "dropped", s->dropped);
    peersnap_kv(pk, "total_ns", s->total_ns);
    peersnap_kv(pk, "span_ns", s->span_ns);
    peersnap_kv(pk, "begin_ns", s->begin_ns);
    peersnap_kv(pk, "end_ns", s->end_ns);
    peersnap_kv(pk, "peak_bytes", s->peak_bytes);
    peersnap_kv(pk, "total_bytes", s->total_bytes);
    rc |= proto_pack_str(pk, "ops");
    rc |= msgpack_pack_array(pk, s->n_ops);
    for (size_t i = 0; i < s->n_ops; i++) {
        const struct peersnap_op *op = &s->ops[i];
        rc |= msgpack_pack_array(pk, 9);
        rc |= proto_pack_str(pk, op->op);
        rc |= proto_pack_str(pk, op->category);
        rc |= msgpack_pack_uint64(pk, op->calls);
        rc |= msgpack_pack_uint64(pk, op->total_ns);
        rc |= msgpack_pack_uint64(pk, op->min_ns);
        rc |= msgpack_pack_uint64(pk, op->max_ns);
        rc |= msgpack_pack_uint64(pk, op->mem_bytes);
        rc |= msgpack_pack_uint64(pk, op->elements);
        rc |= msgpack_pack_array(pk, 3 * op->n_hist);
        for (size_t j = 0; j < op->n_hist; j++) {
            rc |= msgpack_pack_uint32(pk, op->hist[j].bucket);
            rc |= msgpack_pack_uint64(pk, op->hist[j].min_ns);
            rc |= msgpack_pack_uint64(pk, op->hist[j].count);
        }
    }
    rc |= proto_pack_str(pk, "devices");
    rc |= msgpack_pack_array(pk, s->n_devs);
    for (size_t i = 0; i < s->n_devs; i++) {
        rc |= msgpack_pack_array(pk, 4);
        rc |= proto_pack_str(pk, s->devs[i].device);
        rc |= msgpack_pack_uint64(pk, s->devs[i].calls);
        rc |= msgpack_pack_uint64(pk, s->devs[i].total_ns);
        rc |= msgpack_pack_uint64(pk, s->devs[i].mem_bytes);
    }
    rc |= proto_pack_str(pk, "slowest");
    rc |= peersnap_pack_entries(pk, s->slowest, s->n_slowest);
    rc |= proto_pack_str(pk, "hotspots");
    rc |= peersnap_pack_entries(pk, s->hotspots, s->n_hotspots);
    rc |= proto_pack_str(pk, "rank_rows");
    rc |= peersnap_pack_ranks(pk, s->rank_rows, s->n_rank_rows);
    peersnap_kv(pk, "ranks_cut", s->ranks_cut);
    return rc != 0 ? -ENOMEM : 0;
}

/* ---- decoding (trusts nothing) ----------------------------------------------------- */

struct peersnap_dec {
    char *err;
    size_t errlen;
};

static int peersnap_bad(struct peersnap_dec *d, const char *what)
{
    snprintf(d->err, d->errlen, "snapshot: %s", what);
    return -EPROTO;
}

static bool peersnap_u64(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *v = o->via.u64;
    return true;
}

/* A copy of a string object of 1..PEERSNAP_MAX_NAME bytes of UTF-8 (empty allowed when empty_ok).
 */
static int peersnap_str(struct peersnap_dec *d, const msgpack_object *o, bool empty_ok, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > PEERSNAP_MAX_NAME ||
        (!empty_ok && o->via.str.size == 0) || !proto_utf8_valid(o->via.str.ptr, o->via.str.size))
        return peersnap_bad(d, "a name is not a string of UTF-8 of the allowed length");
    *out = strndup(o->via.str.ptr, o->via.str.size);
    return *out != NULL ? 0 : -ENOMEM;
}

/* The flat [bucket, min_ns, count, ...] array of an op into op->hist. */
static int peersnap_dec_hist(struct peersnap_dec *d, const msgpack_object *o,
                             struct peersnap_op *op)
{
    uint64_t sum = 0, v[3];
    size_t n;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size % 3 != 0 ||
        o->via.array.size / 3 > PEERSNAP_MAX_BUCKETS)
        return peersnap_bad(d, "a histogram is not an array of bucket triples");
    n = o->via.array.size / 3;
    op->hist = n ? calloc(n, sizeof(*op->hist)) : NULL;
    if (n && op->hist == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < 3; k++)
            if (!peersnap_u64(&o->via.array.ptr[3 * i + k], &v[k]))
                return peersnap_bad(d, "a histogram bucket is not three unsigned integers");
        if (v[0] >= PEERSNAP_MAX_BUCKETS || agg_bucket_of(v[1]) != v[0] || v[2] == 0 ||
            (i > 0 && v[0] <= op->hist[i - 1].bucket) || v[1] < op->min_ns || v[1] > op->max_ns)
            return peersnap_bad(d, "a histogram bucket is out of order or out of range");
        if (v[2] > UINT64_MAX - sum)
            return peersnap_bad(d, "histogram counts overflow");
        sum += v[2];
        op->hist[i] =
            (struct agg_hist_bucket){.bucket = (uint32_t)v[0], .min_ns = v[1], .count = v[2]};
        op->n_hist = i + 1;
    }
    if (sum != op->calls)
        return peersnap_bad(d, "an op's histogram does not count its calls");
    return 0;
}

static int peersnap_dec_op(struct peersnap_dec *d, const msgpack_object *o, struct peersnap_op *op)
{
    uint64_t *u[6] = {&op->calls,  &op->total_ns,  &op->min_ns,
                      &op->max_ns, &op->mem_bytes, &op->elements};
    const msgpack_object *a;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 9)
        return peersnap_bad(d, "an op is not an array of 9");
    a = o->via.array.ptr;
    if ((rc = peersnap_str(d, &a[0], false, &op->op)) < 0 ||
        (rc = peersnap_str(d, &a[1], true, &op->category)) < 0)
        return rc;
    for (size_t i = 0; i < 6; i++)
        if (!peersnap_u64(&a[2 + i], u[i]))
            return peersnap_bad(d, "an op's figure is not an unsigned integer");
    if (op->calls == 0 || op->min_ns > op->max_ns || op->total_ns < op->max_ns)
        return peersnap_bad(d, "an op's calls, min, max and total disagree");
    return peersnap_dec_hist(d, &a[8], op);
}

static int peersnap_dec_dev(struct peersnap_dec *d, const msgpack_object *o,
                            struct peersnap_dev *dev)
{
    const msgpack_object *a;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4)
        return peersnap_bad(d, "a device is not an array of 4");
    a = o->via.array.ptr;
    if ((rc = peersnap_str(d, &a[0], false, &dev->device)) < 0)
        return rc;
    if (!peersnap_u64(&a[1], &dev->calls) || !peersnap_u64(&a[2], &dev->total_ns) ||
        !peersnap_u64(&a[3], &dev->mem_bytes))
        return peersnap_bad(d, "a device's figure is not an unsigned integer");
    return 0;
}

static int peersnap_dec_list(struct peersnap_dec *d, const msgpack_object *o, struct peersnap *s,
                             bool ops)
{
    size_t n, max = ops ? PEERSNAP_MAX_OPS : PEERSNAP_MAX_DEVICES;
    int rc = 0;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > max)
        return peersnap_bad(d, ops ? "ops is not an array within the limit"
                                   : "devices is not an array within the limit");
    n = o->via.array.size;
    if (n == 0)
        return 0;
    if (ops) {
        if ((s->ops = calloc(n, sizeof(*s->ops))) == NULL)
            return -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++, s->n_ops++)
            rc = peersnap_dec_op(d, &o->via.array.ptr[i], &s->ops[i]);
        for (size_t i = 1; rc == 0 && i < n; i++)
            if (strcmp(s->ops[i - 1].op, s->ops[i].op) >= 0)
                rc = peersnap_bad(d, "ops are not sorted by name, each once");
        return rc;
    }
    if ((s->devs = calloc(n, sizeof(*s->devs))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++, s->n_devs++)
        rc = peersnap_dec_dev(d, &o->via.array.ptr[i], &s->devs[i]);
    for (size_t i = 1; rc == 0 && i < n; i++)
        if (strcmp(s->devs[i - 1].device, s->devs[i].device) >= 0)
            rc = peersnap_bad(d, "devices are not sorted by name, each once");
    return rc;
}

static int peersnap_dec_entry(struct peersnap_dec *d, const msgpack_object *o,
                              struct peersnap_entry *e)
{
    const msgpack_object *a;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 7)
        return peersnap_bad(d, "a top-list entry is not an array of 7");
    a = o->via.array.ptr;
    e->rank = -1;
    if ((rc = peersnap_str(d, &a[0], false, &e->op)) < 0)
        return rc;
    if (a[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER && a[1].via.u64 <= INT32_MAX)
        e->rank = (int64_t)a[1].via.u64;
    else if (a[1].type != MSGPACK_OBJECT_NIL)
        return peersnap_bad(d, "a top-list entry's rank is not a rank or nil");
    if (a[2].type != MSGPACK_OBJECT_NIL && (rc = peersnap_str(d, &a[2], false, &e->device)) < 0)
        return rc;
    if (!peersnap_u64(&a[3], &e->step) || !peersnap_u64(&a[4], &e->start_ns) ||
        !peersnap_u64(&a[5], &e->dur_ns) || !peersnap_u64(&a[6], &e->mem_bytes))
        return peersnap_bad(d, "a top-list entry's figure is not an unsigned integer");
    return 0;
}

static int peersnap_dec_entries(struct peersnap_dec *d, const msgpack_object *o,
                                struct peersnap_entry **out, size_t *n_out)
{
    size_t n;
    int rc = 0;

    if (*out != NULL)
        return peersnap_bad(d, "a top list given twice");
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PEERSNAP_TOP)
        return peersnap_bad(d, "a top list is not an array within the limit");
    n = o->via.array.size;
    if (n == 0)
        return 0;
    if ((*out = calloc(n, sizeof(**out))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++, (*n_out)++)
        rc = peersnap_dec_entry(d, &o->via.array.ptr[i], &(*out)[i]);
    return rc;
}

/* An unsigned integer or nil (*known false). */
static bool peersnap_u64_or_nil(const msgpack_object *o, uint64_t *v, bool *known)
{
    *v = 0;
    *known = o->type != MSGPACK_OBJECT_NIL;
    return !*known || peersnap_u64(o, v);
}

/* One `rank_rows` row (an array of PEERSNAP_RANK_FIELDS) into *r, checked on its own. */
static int peersnap_dec_rank(struct peersnap_dec *d, const msgpack_object *o, struct ranks_row *r)
{
    uint64_t *u[] = {&r->processes,     &r->dropped,   &r->steps,        &r->step_ns,
                     &r->step_mean_ns,  &r->total_ns,  &r->compute_ns,   &r->comm_ns,
                     &r->memory_ns,     &r->wait_ns,   &r->other_ns,     &r->exposed_comm_ns,
                     &r->collectives,   &r->waited_ns, &r->arrived_last, &r->caused_ns,
                     &r->slowest_steps, &r->late_steps};
    const size_t nu = sizeof(u) / sizeof(u[0]);
    const msgpack_object *a;
    bool first, last;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != PEERSNAP_RANK_FIELDS)
        return peersnap_bad(d, "a rank row is not an array of 24");
    a = o->via.array.ptr;
    r->rank = -1;
    if (a[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER && a[0].via.u64 <= INT32_MAX)
        r->rank = (int64_t)a[0].via.u64;
    else if (a[0].type != MSGPACK_OBJECT_NIL)
        return peersnap_bad(d, "a rank row's rank is not a rank or nil");
    for (size_t k = 0; k < nu; k++)
        if (!peersnap_u64(&a[1 + k], u[k]))
            return peersnap_bad(d, "a rank row's figure is not an unsigned integer");
    if (!peersnap_u64_or_nil(&a[1 + nu], &r->late_first_step, &first) ||
        !peersnap_u64_or_nil(&a[2 + nu], &r->late_last_step, &last) ||
        !peersnap_u64_or_nil(&a[3 + nu], &r->untracked_ns, &r->untracked_known) ||
        !peersnap_u64(&a[4 + nu], &r->cpu_wait_ns))
        return peersnap_bad(d, "a rank row's figure is not an unsigned integer or nil");
    if (a[5 + nu].type != MSGPACK_OBJECT_FLOAT64 && a[5 + nu].type != MSGPACK_OBJECT_FLOAT32)
        return peersnap_bad(d, "a rank row's comm_share is not a float");
    r->comm_share = a[5 + nu].via.f64;
    /* what one host's report of its ranks cannot hold */
    if (first != (r->late_steps > 0) || last != first || r->late_first_step > r->late_last_step ||
        r->late_steps > r->steps || r->slowest_steps > r->steps ||
        r->step_mean_ns != (r->steps ? r->step_ns / r->steps : 0) ||
        !(r->comm_share >= 0 && r->comm_share <= 1))
        return peersnap_bad(d, "a rank row's figures disagree");
    return 0;
}

/* `rank_rows`: at most PEERSNAP_MAX_RANKS rows, sorted by rank, each rank once (nil first). */
static int peersnap_dec_ranks(struct peersnap_dec *d, const msgpack_object *o, struct peersnap *s)
{
    size_t n;
    int rc = 0;

    if (s->rank_rows != NULL)
        return peersnap_bad(d, "rank_rows given twice");
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PEERSNAP_MAX_RANKS)
        return peersnap_bad(d, "rank_rows is not an array within the limit");
    if ((n = o->via.array.size) == 0)
        return 0;
    if ((s->rank_rows = calloc(n, sizeof(*s->rank_rows))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++, s->n_rank_rows++) {
        rc = peersnap_dec_rank(d, &o->via.array.ptr[i], &s->rank_rows[i]);
        if (rc == 0 && i > 0 && s->rank_rows[i - 1].rank >= s->rank_rows[i].rank)
            rc = peersnap_bad(d, "rank rows are not sorted by rank, each once");
    }
    return rc;
}

/* One key of the map; unknown keys are ignored (forward compatibility). */
static int peersnap_dec_key(struct peersnap_dec *d, const char *k, size_t kl,
                            const msgpack_object *v, struct peersnap *s, unsigned *seen)
{
    static const char *const names[] = {"seq",         "processes", "ranks",      "entries",
                                        "dropped",     "total_ns",  "span_ns",    "peak_bytes",
                                        "total_bytes", "sid",       "started_ns", "ended_ns",
                                        "begin_ns",    "end_ns",    "ranks_cut"};
    uint64_t *fields[] = {&s->seq,         &s->processes, &s->ranks,      &s->entries,
                          &s->dropped,     &s->total_ns,  &s->span_ns,    &s->peak_bytes,
                          &s->total_bytes, &s->sid,       &s->started_ns, &s->ended_ns,
                          &s->begin_ns,    &s->end_ns,    &s->ranks_cut};

#define KEY(name) (kl == strlen(name) && memcmp(k, name, kl) == 0)
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (KEY(names[i])) {
            *seen |= 1u << i;
            return peersnap_u64(v, fields[i]) ? 0 : peersnap_bad(d, "a counter is not unsigned");
        }
    if (KEY("session")) {
        if (s->session != NULL)
            return peersnap_bad(d, "session given twice");
        if (v->type == MSGPACK_OBJECT_STR && v->via.str.size > PROTO_MAX_SESSION)
            return peersnap_bad(d, "the session name is too long");
        return peersnap_str(d, v, false, &s->session);
    }
    if (KEY("ended")) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return peersnap_bad(d, "ended is not a boolean");
        s->ended = v->via.boolean;
        return 0;
    }
    if (KEY("ops"))
        return s->ops != NULL ? peersnap_bad(d, "ops given twice")
                              : peersnap_dec_list(d, v, s, true);
    if (KEY("devices"))
        return s->devs != NULL ? peersnap_bad(d, "devices given twice")
                               : peersnap_dec_list(d, v, s, false);
    if (KEY("slowest"))
        return peersnap_dec_entries(d, v, &s->slowest, &s->n_slowest);
    if (KEY("hotspots"))
        return peersnap_dec_entries(d, v, &s->hotspots, &s->n_hotspots);
    if (KEY("rank_rows"))
        return peersnap_dec_ranks(d, v, s);
#undef KEY
    return 0;
}

int peersnap_decode(const msgpack_object *m, struct peersnap *out, char *err, size_t errlen)
{
    struct peersnap_dec d = {.err = err, .errlen = errlen};
    const msgpack_object *map;
    uint64_t calls = 0;
    unsigned seen = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size < 2 ||
        m->via.array.ptr[1].type != MSGPACK_OBJECT_MAP)
        return peersnap_bad(&d, "not [\"snapshot\", map]");
    map = &m->via.array.ptr[1];
    for (uint32_t i = 0; rc == 0 && i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            rc = peersnap_bad(&d, "a key is not a string");
        else
            rc = peersnap_dec_key(&d, kv->key.via.str.ptr, kv->key.via.str.size, &kv->val, out,
                                  &seen);
    }
    if (rc == 0 && (out->session == NULL || !(seen & 1u)))
        rc = peersnap_bad(&d, "session and seq are required");
    for (size_t i = 0; rc == 0 && i < out->n_ops; i++)
        calls = calls > UINT64_MAX - out->ops[i].calls ? UINT64_MAX : calls + out->ops[i].calls;
    if (rc == 0 && calls != out->entries)
        rc = peersnap_bad(&d, "the ops' calls do not sum to entries");
    if (rc == 0 && out->begin_ns > out->end_ns)
        rc = peersnap_bad(&d, "begin_ns is after end_ns");
    if (rc == -ENOMEM)
        snprintf(err, errlen, "snapshot: out of memory");
    if (rc < 0)
        peersnap_free(out);
    return rc;
}
