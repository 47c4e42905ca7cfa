/*
 * report — the msgpack encoding of a struct report and its release.
 *
 * report_pack() writes the "Report map" of PROTOCOL.md with exactly its keys
 * and order of sections; it runs where the report was computed (a worker
 * thread) and touches nothing but the report and the packer. Counts and
 * durations are unsigned integers, shares and the imbalance ratio float64,
 * absent values nil. Shapes are stored as canonical msgpack (query.c checked
 * each is one whole object), so their bytes go into the packer's buffer as
 * they are.
 */
#include "ranks_query.h"
#include "report.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Each helper returns 0, or -ENOMEM when the packer's buffer failed (msgpack-c's packers fail
 * only when their buffer cannot grow); report_nomem() turns a chain of them into that. */

static int report_nomem(int failed)
{
    return failed ? -ENOMEM : 0;
}

static int report_str(msgpack_packer *pk, const char *s)
{
    size_t len;

    if (s == NULL)
        return report_nomem(msgpack_pack_nil(pk));
    len = strlen(s);
    return report_nomem(msgpack_pack_str(pk, len) || msgpack_pack_str_body(pk, s, len));
}

static int report_key(msgpack_packer *pk, const char *key)
{
    return report_str(pk, key);
}

static int report_kv_str(msgpack_packer *pk, const char *key, const char *s)
{
    return report_nomem(report_key(pk, key) || report_str(pk, s));
}

static int report_kv_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
    return report_nomem(report_key(pk, key) || msgpack_pack_uint64(pk, v));
}

static int report_kv_f64(msgpack_packer *pk, const char *key, double v)
{
    return report_nomem(report_key(pk, key) || msgpack_pack_double(pk, v));
}

static int report_kv_blob(msgpack_packer *pk, const char *key, const struct report_blob *b)
{
    if (report_key(pk, key))
        return -ENOMEM;
    if (b->data == NULL)
        return report_nomem(msgpack_pack_nil(pk));
    return report_nomem(pk->callback(pk->data, b->data, b->len));
}

static int report_pack_session(msgpack_packer *pk, const struct report *r)
{
    if (report_key(pk, "session") || msgpack_pack_map(pk, 12) || report_key(pk, "id"))
        return -ENOMEM;
    if (r->id >= 0 ? msgpack_pack_uint64(pk, (uint64_t)r->id) : msgpack_pack_nil(pk))
        return -ENOMEM;
    if (report_kv_str(pk, "name", r->name) || report_kv_str(pk, "state", r->state) ||
        report_kv_u64(pk, "processes", r->processes) ||
        report_kv_u64(pk, "devices", r->devices_count) ||
        report_kv_u64(pk, "entries", r->entries) || report_kv_u64(pk, "dropped", r->dropped) ||
        report_kv_u64(pk, "total_ns", r->total_ns) || report_kv_u64(pk, "span_ns", r->span_ns))
        return -ENOMEM;
    /* Extensions (proto/PROTOCOL.md): whether and why the session was cut short, and when. */
    if (report_key(pk, "interrupted") ||
        (r->interrupted != 0 ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
        report_kv_str(pk, "interrupted_reason", session_cut_reason(r->interrupted)) ||
        report_key(pk, "interrupted_ns"))
        return -ENOMEM;
    return report_nomem(r->interrupted != 0 && r->ended_ns > 0 ? msgpack_pack_int64(pk, r->ended_ns)
                                                               : msgpack_pack_nil(pk));
}

static int report_pack_op(msgpack_packer *pk, const struct report_op *o)
{
    return report_nomem(
        msgpack_pack_map(pk, 17) || report_kv_str(pk, "op", o->op) ||
        report_kv_str(pk, "category", o->category) || report_kv_u64(pk, "calls", o->calls) ||
        report_kv_u64(pk, "total_ns", o->total_ns) || report_kv_u64(pk, "avg_ns", o->avg_ns) ||
        report_kv_u64(pk, "min_ns", o->min_ns) || report_kv_u64(pk, "p50_ns", o->p50_ns) ||
        report_kv_u64(pk, "p95_ns", o->p95_ns) || report_kv_u64(pk, "p99_ns", o->p99_ns) ||
        report_kv_u64(pk, "max_ns", o->max_ns) || report_kv_f64(pk, "share", o->share) ||
        report_kv_u64(pk, "mem_bytes", o->mem_bytes) ||
        report_kv_u64(pk, "elements", o->elements) ||
        report_kv_u64(pk, "dropped_calls", o->dropped_calls) ||
        report_kv_u64(pk, "dropped_ns", o->dropped_ns) ||
        report_kv_u64(pk, "counted_calls", o->counted_calls) ||
        report_kv_u64(pk, "counted_ns", o->counted_ns));
}

static int report_pack_entry(msgpack_packer *pk, const struct report_entry *e)
{
    if (msgpack_pack_map(pk, 9) || report_kv_str(pk, "op", e->op) || report_key(pk, "rank"))
        return -ENOMEM;
    if (e->rank >= 0 ? msgpack_pack_uint64(pk, (uint64_t)e->rank) : msgpack_pack_nil(pk))
        return -ENOMEM;
    return report_nomem(
        report_kv_str(pk, "device", e->device) || report_kv_u64(pk, "step", e->step) ||
        report_kv_u64(pk, "start_ns", e->start_ns) || report_kv_u64(pk, "dur_ns", e->dur_ns) ||
        report_kv_u64(pk, "mem_bytes", e->mem_bytes) ||
        report_kv_blob(pk, "out_shape", &e->out_shape) ||
        report_kv_blob(pk, "in_shapes", &e->in_shapes));
}

static int report_pack_entries(msgpack_packer *pk, const struct report_entry *e, size_t n)
{
    if (msgpack_pack_array(pk, n))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (report_pack_entry(pk, &e[i]))
            return -ENOMEM;
    }
    return 0;
}

static int report_pack_ops(msgpack_packer *pk, const struct report *r)
{
    if (report_key(pk, "ops") || msgpack_pack_array(pk, r->n_ops))
        return -ENOMEM;
    for (size_t i = 0; i < r->n_ops; i++) {
        if (report_pack_op(pk, &r->ops[i]))
            return -ENOMEM;
    }
    return 0;
}

static int report_pack_memory(msgpack_packer *pk, const struct report *r)
{
    return report_nomem(report_key(pk, "memory") || msgpack_pack_map(pk, 3) ||
                        report_kv_u64(pk, "peak_bytes", r->peak_bytes) ||
                        report_kv_u64(pk, "total_bytes", r->total_bytes) ||
                        report_key(pk, "hotspots") ||
                        report_pack_entries(pk, r->hotspots, r->n_hotspots));
}

static int report_pack_devices(msgpack_packer *pk, const struct report *r)
{
    if (report_key(pk, "devices") || msgpack_pack_array(pk, r->n_devices))
        return -ENOMEM;
    for (size_t i = 0; i < r->n_devices; i++) {
        const struct report_device *d = &r->devices[i];

        if (msgpack_pack_map(pk, 4) || report_kv_str(pk, "device", d->device) ||
            report_kv_u64(pk, "calls", d->calls) || report_kv_u64(pk, "total_ns", d->total_ns) ||
            report_kv_u64(pk, "mem_bytes", d->mem_bytes))
            return -ENOMEM;
    }
    return 0;
}

static int report_pack_imbalance(msgpack_packer *pk, const struct report_imbalance *im)
{
    if (report_key(pk, "imbalance"))
        return -ENOMEM;
    if (!im->present)
        return report_nomem(msgpack_pack_nil(pk));
    return report_nomem(msgpack_pack_map(pk, 6) || report_kv_u64(pk, "devices", im->devices) ||
                        report_kv_u64(pk, "total_ns", im->total_ns) ||
                        report_kv_u64(pk, "ideal_ns", im->ideal_ns) ||
                        report_kv_u64(pk, "max_ns", im->max_ns) ||
                        report_kv_f64(pk, "ratio", im->ratio) ||
                        report_kv_str(pk, "slowest_device", im->slowest_device));
}

static int report_pack_comm(msgpack_packer *pk, const struct report *r)
{
    if (report_key(pk, "comm") || msgpack_pack_array(pk, r->n_comm))
        return -ENOMEM;
    for (size_t i = 0; i < r->n_comm; i++) {
        const struct report_comm *c = &r->comm[i];

        if (msgpack_pack_map(pk, 4) || report_kv_str(pk, "op", c->op) ||
            report_kv_u64(pk, "calls", c->calls) || report_kv_u64(pk, "total_ns", c->total_ns) ||
            report_kv_f64(pk, "share", c->share))
            return -ENOMEM;
    }
    return 0;
}

int report_pack(msgpack_packer *pk, const struct report *r)
{
    /* msgpack-c's packers fail only when their buffer cannot grow. */
    if (msgpack_pack_map(pk, (r->paged ? 8 : 7) + (r->analysis ? RANKS_QUERY_KEYS : 0) +
                                 (r->mpi != NULL) + (r->filter != NULL) + (r->hosts != NULL) +
                                 (r->hosts_late != NULL) + (r->filter_hosts != NULL)) ||
        report_pack_session(pk, r) || report_pack_ops(pk, r) || report_key(pk, "slowest") ||
        report_pack_entries(pk, r->slowest, r->n_slowest) || report_pack_memory(pk, r) ||
        report_pack_devices(pk, r) || report_pack_imbalance(pk, &r->imbalance) ||
        report_pack_comm(pk, r))
        return -ENOMEM;
    /* Extension: with ops_limit, how many ops rows there are in all. */
    if (r->paged && report_kv_u64(pk, "ops_total", r->ops_total))
        return -ENOMEM;
    /* Extension: the analysis sections, packed by ranks_query() where they were computed. */
    if (r->analysis != NULL && pk->callback(pk->data, r->analysis, r->analysis_len))
        return -ENOMEM;
    /* Extension: the MPI section, packed by mpi_report() where it was computed. */
    if (r->mpi != NULL && pk->callback(pk->data, r->mpi, r->mpi_len))
        return -ENOMEM;
    /* Extension: the filters the report was built with, packed by query.c. */
    if (r->filter != NULL && pk->callback(pk->data, r->filter, r->filter_len))
        return -ENOMEM;
    /* Extension: one row per host of a session that spans hosts, packed by peermerge.c. */
    if (r->hosts != NULL && pk->callback(pk->data, r->hosts, r->hosts_len))
        return -ENOMEM;
    /* Extension: the late-rank analysis across hosts, packed by peerlate.c. */
    if (r->hosts_late != NULL && pk->callback(pk->data, r->hosts_late, r->hosts_late_len))
        return -ENOMEM;
    /* Extension: the hosts a filtered report at a home leaves out, packed by control.c. */
    if (r->filter_hosts != NULL && pk->callback(pk->data, r->filter_hosts, r->filter_hosts_len))
        return -ENOMEM;
    return 0;
}

static void report_free_entries(struct report_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(e[i].op);
        free(e[i].device);
        free(e[i].out_shape.data);
        free(e[i].in_shapes.data);
    }
    free(e);
}

void report_free(struct report *r)
{
    if (r == NULL)
        return;
    free(r->name);
    free(r->state);
    for (size_t i = 0; i < r->n_ops; i++) {
        free(r->ops[i].op);
        free(r->ops[i].category);
    }
    free(r->ops);
    report_free_entries(r->slowest, r->n_slowest);
    report_free_entries(r->hotspots, r->n_hotspots);
    for (size_t i = 0; i < r->n_devices; i++)
        free(r->devices[i].device);
    free(r->devices);
    free(r->imbalance.slowest_device);
    for (size_t i = 0; i < r->n_comm; i++)
        free(r->comm[i].op);
    free(r->comm);
    free(r->analysis);
    free(r->mpi);
    free(r->filter);
    free(r->hosts);
    free(r->hosts_late);
    free(r->filter_hosts);
    memset(r, 0, sizeof(*r));
}
