/*
 * mpi_sites — the callsites of the report's MPI section (PROTOCOL.md Part 3,
 * "report key mpi", callsites): what each process of an MPI job sent at its
 * end as the metadata mpi.site.<i>, mpi.sites and mpi.sites_lost
 * (client/mpi/tcmpi.h), summed by (op, module, offset) over the processes.
 * Read by mpi_report() on the report's worker thread, inside its read
 * transaction; the counts are whole runs', so only for a report that counts
 * whole processes.
 */
#ifndef TRACECTLD_MPI_SITES_H
#define TRACECTLD_MPI_SITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <sqlite3.h>

/* At most this many callsites (those with most time) go into the reply. */
#define MPI_SITES_MAX 1024

/* A call site summed over the processes that sent it. */
struct mpi_site {
    char *op, *symbol, *module;
    uint64_t offset, symbol_offset, calls, ns, bytes, ranks;
    uint64_t min_ns, max_ns; /* the least and most time one process spent there */
    int64_t max_rank;        /* that most's process's rank (-1: none) */
};

struct mpi_sites {
    struct mpi_site *v; /* by ns, most first */
    size_t n, cap;
    uint64_t unsent; /* sites the processes saw but did not send */
    uint64_t lost;   /* calls they could not count by site */
};

/*
 * Reads the sites of the processes the report counts into *out (zeroed
 * first; mpi_sites_free it after, on error too): rank_of(arg, process_id)
 * is a process's rank (-1: none), or MPI_SITES_NOT_COUNTED. A value not in
 * the interposer's form is ignored. Returns 0, or a negative errno with a
 * message in err.
 */
#define MPI_SITES_NOT_COUNTED INT64_MIN
int mpi_sites_read(sqlite3 *db, int64_t (*rank_of)(void *arg, int64_t id), void *arg,
                   struct mpi_sites *out, char *err, size_t errlen);

/*
 * Packs the "callsites" map (its value only): unsent, lost_calls, total and
 * the first MPI_SITES_MAX sites, each with its share of mpi_ns (all the MPI
 * time of the processes). Returns 0 or -1 (the packer's buffer could not grow).
 */
int mpi_sites_pack(msgpack_packer *pk, const struct mpi_sites *s, uint64_t mpi_ns);

/* Frees what s holds; a zeroed s is fine. */
void mpi_sites_free(struct mpi_sites *s);

#endif
