/*
 * cli_report_html_mpi — the report map's `mpi`, `hosts`, `hosts_late` and
 * `filter_hosts` keys as static
 * sections of the `report --html` page (proto/PROTOCOL.md "report key mpi",
 * "Report map: hosts"). Every cell holds its exact figure in data-v (the
 * JSON text `report --json` prints for it) and shows it in human units; the
 * point-to-point matrix's cells carry data-from, data-to, data-bytes and
 * data-messages.
 */
#ifndef TRACECTL_CLI_REPORT_HTML_MPI_H
#define TRACECTL_CLI_REPORT_HTML_MPI_H

#include <stddef.h>
#include <stdio.h>

#include <msgpack.h>

/* Writes s[0..n) as HTML text: the five characters markup gives a meaning escaped. */
void cli_report_html_text(FILE *f, const char *s, size_t n);

/* Above this many ranks the p2p matrix is shown as a list of its pairs. */
#define CLI_REPORT_HTML_P2P_MAX_RANKS 64

/* A table shows at most this many rows (a note says so); `report --json` has them all. */
#define CLI_REPORT_HTML_ROWS_MAX 1024

/* Writes <section id="mpi"> for the map mpi. Returns 0, -EINVAL (not a map) or -EIO. */
int cli_report_html_mpi(FILE *f, const msgpack_object *mpi);

/* Writes <section id="hosts"> for the array hosts. Returns 0, -EINVAL or -EIO. */
int cli_report_html_hosts(FILE *f, const msgpack_object *hosts);

/*
 * Writes <section id="hosts-late"> for the map hosts_late (proto/PROTOCOL.md "Report map:
 * hosts_late"): its verdict, the ranks and steps tables. Returns 0, -EINVAL or -EIO.
 */
int cli_report_html_hosts_late(FILE *f, const msgpack_object *late);

/*
 * Writes the note of a home's filtered report (the map filter_hosts): the hosts counted and
 * those left out. Returns 0, -EINVAL or -EIO.
 */
int cli_report_html_filter_hosts(FILE *f, const msgpack_object *fh);

#endif
