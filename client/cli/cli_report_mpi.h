/*
 * cli_report_mpi — the report's MPI sections for people (PROTOCOL.md Part 3,
 * "report mpi"): MPI time and MPI % per rank, the communicators, the message
 * sizes per MPI function and the point-to-point matrix, printed from the
 * reply's "mpi" map as the daemon computed it (daemon/query/mpi_report.c). A
 * report without that map (a session without MPI entries) prints nothing.
 */
#ifndef TRACECTL_CLI_REPORT_MPI_H
#define TRACECTL_CLI_REPORT_MPI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <msgpack.h>

/*
 * Prints the MPI sections of report (the reply map), each after a blank
 * line; the matrix as a table for at most CLI_REPORT_MPI_MATRIX ranks, else
 * the top pairs by bytes. Returns 0, -ENOMEM or -EIO.
 */
int cli_report_mpi_print(FILE *f, const msgpack_object *report, uint32_t top);

/*
 * report --by callsite: of report (the reply map), the callsites alone: the
 * table of the MPI sections' (top rows), or with json the "callsites" value
 * as JSON. Returns a CLI exit code (an error said on stderr: a session
 * without MPI entries, or one recorded before callsites).
 */
int cli_report_mpi_sites(bool json, const msgpack_object *report, uint32_t top);

/*
 * The name of one row x of the report's callsites ("sites"): "function
 * file:line" by binutils' addr2line -f on its module and offset when the
 * module is readable here and addr2line can tell, else "symbol+0xOFFSET"
 * when the interposer found a symbol, else "?". Into buf (size bytes).
 */
void cli_report_mpi_site_name(const msgpack_object *x, char *buf, size_t size);

/* Ranks up to which the point-to-point matrix is printed whole. */
#define CLI_REPORT_MPI_MATRIX 16

#endif
