/*
 * cli_report_html — `tracectl report --html FILE`: the report map as one
 * self-contained HTML page (no network: the style sheet and the script are
 * inline, written here, in client/cli/html/, embedded at build time).
 *
 * The page carries the report map itself, as JSON in a script element, and
 * its script draws from it: the verdict (also written as text, so it is
 * there without scripts), a rank × step heatmap of the steps' times_ns (a
 * toggle to any other [[rank, ns], ...] figure the steps rows carry), a
 * stacked bar per rank of its compute / comm / memory / wait / other time
 * (a toggle to its waited_ns, caused_ns and untracked_ns, where present),
 * the collectives' waits per step, and sortable tables of the ops, devices,
 * categories, collectives and ranks; and flame graphs of the session's
 * collapsed stacks by time and by memory (cli_report_flame), zoomable. So
 * the figures are the ones `report
 * --json` prints for the same request, and the page's size follows the
 * report's (at most 1,000 steps and 1,000 ops rows), never the session's
 * entries. Pure output: borrows the map, keeps nothing.
 */
#ifndef TRACECTL_CLI_REPORT_HTML_H
#define TRACECTL_CLI_REPORT_HTML_H

#include <stdio.h>

#include <msgpack.h>

#include "cli_report_flame.h"

/*
 * Writes the page for report (a report map with its analysis) on f, with
 * the stacks of flame (NULL, or without stacks: the page says flame->note,
 * or that there are none). Returns 0, -EINVAL (report is not a map),
 * -ENOMEM or -EIO.
 */
int cli_report_html_write(FILE *f, const msgpack_object *report,
                          const struct cli_report_flame *flame);

#endif
