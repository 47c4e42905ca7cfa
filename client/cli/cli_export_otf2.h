/*
 * cli_export_otf2 — the `otf2` export format: an OTF2 archive (Score-P's
 * format, which Vampir and otf2-print read) written with Debian's libotf2
 * into the directory of -o DIR, as DIR/traces.otf2 and its files.
 *
 * What it holds: a location group per process ("rank N ..."), a location
 * per lane of each track (cli_export_lanes: the Chrome export's threads), a
 * region per op, and per entry an Enter and a Leave event. Entries of the
 * MPI interposer add MPI records: a blocking collective with `comm` and
 * `seq` is wrapped in MpiCollectiveBegin/End on its communicator (a Comm
 * definition per communicator id, its group the ranks whose entries carry
 * it; MPI_COMM_WORLD, id 0, has every rank); a point-to-point entry on
 * MPI_COMM_WORLD with a `peer` gets an MpiSend after its Enter (sends,
 * Sendrecv's send side) or an MpiRecv before its Leave (receives, Irecv at
 * completion, "tcmpi.recv"), with its tag and bytes. Non-blocking
 * collectives and requests are only Enter/Leave.
 *
 * Events are written as rows come (by start time); definitions at the end.
 * Memory follows the ops, processes, lanes, communicators and slices open
 * at once, never the number of entries. Built only when CMake finds libotf2
 * (pkg-config otf2); otherwise the format exists and says so at its start.
 * Single-threaded; no globals.
 */
#ifndef TRACECTL_CLI_EXPORT_OTF2_H
#define TRACECTL_CLI_EXPORT_OTF2_H

#include "cli_export.h"

extern const struct cli_export_format cli_export_otf2;

#endif
