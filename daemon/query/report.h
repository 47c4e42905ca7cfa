/*
 * report — the report map of PROTOCOL.md as a C struct, the parameters of
 * a report request, and its msgpack encoding.
 *
 * query_report() (query.h) fills a struct report from one session file on a
 * worker thread, never the loop thread; report_pack() encodes it exactly as
 * PROTOCOL.md's "Report map" says; report_free() releases it. A struct
 * report owns every string and blob in it.
 */
#ifndef TRACECTLD_REPORT_H
#define TRACECTLD_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <msgpack.h>

#include "proto.h"

struct report_params {
    uint32_t top;           /* slowest / hotspots length (PROTOCOL default 10) */
    double comm_min_ratio;  /* comm rows need share >= this */
    uint64_t mem_threshold; /* hotspots need mem_bytes > this */
    uint32_t ops_limit;     /* extension: a page of ops (and the first comm rows); 0 = all */
    uint32_t ops_offset;    /* extension: ops rows before the page */
    /*
     * extension: the analysis sections (when on) and the filters, which restrict every
     * section (ranks_query.h, query.c); NULL: neither
     */
    const struct proto_analysis *analysis;
    /*
     * The worker's controls (query.h), both may be NULL: once *cancel is set
     * the report stops with -EINTR; *steps counts what it scanned.
     */
    const atomic_bool *cancel;
    atomic_uint_fast64_t *steps;
};

struct report_blob {
    char *data; /* canonical msgpack; NULL = nil */
    size_t len;
};

struct report_op {
    char *op;
    char *category;
    uint64_t calls, total_ns, avg_ns, min_ns, p50_ns, p95_ns, p99_ns, max_ns;
    double share;
    uint64_t mem_bytes, elements;
    uint64_t dropped_calls, dropped_ns; /* what producers dropped (never sent) of this op */
    uint64_t counted_calls, counted_ns; /* what they counted without entries (not dropped) */
};

struct report_entry {
    char *op;
    int64_t rank; /* -1: nil (the process gave no rank) */
    char *device; /* NULL: nil */
    uint64_t step, start_ns, dur_ns, mem_bytes;
    struct report_blob out_shape, in_shapes;
};

struct report_device {
    char *device;
    uint64_t calls, total_ns, mem_bytes;
};

struct report_imbalance {
    bool present; /* false: null (fewer than two devices) */
    uint64_t devices, total_ns, ideal_ns, max_ns;
    double ratio;
    char *slowest_device;
};

struct report_comm {
    char *op;
    uint64_t calls, total_ns;
    double share;
};

struct report {
    /* session header */
    int64_t id;
    char *name;
    char *state;      /* "live" or "ended" */
    int interrupted;  /* enum store_cut (store.h): why the session was cut short, if it was */
    int64_t ended_ns; /* CLOCK_REALTIME; 0 while live */
    uint64_t processes, devices_count, entries, dropped, total_ns, span_ns;

    struct report_op *ops;
    size_t n_ops;
    struct report_entry *slowest;
    size_t n_slowest;
    uint64_t peak_bytes, total_bytes;
    struct report_entry *hotspots;
    size_t n_hotspots;
    struct report_device *devices;
    size_t n_devices;
    struct report_imbalance imbalance;
    struct report_comm *comm;
    size_t n_comm;
    bool paged;         /* params.ops_limit > 0: the map gets "ops_total" (an extension) */
    uint64_t ops_total; /* ops rows before paging */
    /* extension: RANKS_QUERY_KEYS packed key/value pairs of the analysis; NULL: none */
    char *analysis;
    size_t analysis_len;
    /* extension: the packed "mpi" key and map (mpi_report.h); NULL: no MPI entries */
    char *mpi;
    size_t mpi_len;
    /* extension: the packed "filter" key and map (filters given); NULL: no filter */
    char *filter;
    size_t filter_len;
    /* extension: the packed "hosts" key and array (a session spanning hosts, peermerge.h) */
    char *hosts;
    size_t hosts_len;
    /* extension: the packed "hosts_late" key and map (the late-rank analysis across hosts,
     * peerlate.h); NULL: none */
    char *hosts_late;
    size_t hosts_late_len;
    /* extension: the packed "filter_hosts" key and map: at a home, a filtered report of a
     * session that spans hosts counts its own host's entries only, and names the hosts it
     * leaves out (control.c); NULL: none */
    char *filter_hosts;
    size_t filter_hosts_len;
};

/* Encodes the report map (one msgpack map). Returns 0 or -ENOMEM. */
int report_pack(msgpack_packer *pk, const struct report *r);

/* Frees what r owns and zeroes it; NULL is a no-op. */
void report_free(struct report *r);

#endif
