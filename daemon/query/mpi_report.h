/*
 * mpi_report — the report's MPI section (PROTOCOL.md Part 3, "report mpi"),
 * as mpiP and IPM give it: per rank the time in MPI calls against the rank's
 * wall time (MPI %), a table per communicator, message-size histograms per
 * MPI function, the point-to-point matrix (sender rank × receiver rank) and
 * the call sites (mpi_sites.h).
 *
 * It reads the entries of the MPI interposer's ops (names "MPI_*" and
 * "tcmpi.*", client/mpi) in one scan, their ext maps
 * (entry_ext: comm, comm_size, peer), the processes' meta mpi.init_ns and
 * mpi.finalize_ns and the per-op drop counts (process_op_drops), on the
 * report's worker thread inside the report's read transaction (query.c), and
 * encodes the section straight into msgpack. Under a report's filters it runs
 * while query.c's temporary views shadow entries and processes, so it counts
 * the same entries as the other sections.
 */
#ifndef TRACECTLD_MPI_REPORT_H
#define TRACECTLD_MPI_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include <msgpack.h>
#include <sqlite3.h>

/* At most this many point-to-point pairs (those with most bytes) go into the reply. */
#define MPI_REPORT_MAX_PAIRS 65536
/* At most this many communicators (those with most time) go into the reply. */
#define MPI_REPORT_MAX_COMMS 4096

/*
 * Packs the "mpi" key and its map into pk when the session (as filtered)
 * has entries of MPI calls, else nothing. whole: every entry of the
 * processes shown is counted (no step, device or category filter), so the
 * ranks' wall time may run from MPI_Init to MPI_Finalize and their MPI time
 * may add what producers dropped; otherwise both come from the entries
 * counted. Returns 1 (packed), 0 (no MPI
 * entries: nothing packed), or a negative errno with a message in err (pk
 * may then hold part of the map: the caller drops it).
 */
int mpi_report(sqlite3 *db, bool whole, msgpack_packer *pk, char *err, size_t errlen);

#endif
