/*
 * cli_diverge — `tracectl diff <A> <B> --divergence`: where two runs of one
 * program part ways.
 *
 * A rank's sequence is its entries in start order (PROTOCOL.md "export",
 * "order": "rank"; position 0, 1, ... within the rank). The two sessions
 * are streamed side by side, each on its own connection, both sorted by
 * rank and then by start, and walked in step: at each position the op names
 * must match and, when both entries carry a checksum of their output (the
 * entry ext map's `checksum`), so must the checksums. The first position
 * where a rank's sequences differ is that rank's divergence (an op, a
 * checksum, or one sequence ending first); the session's is the one with
 * the lowest step, then rank, then position.
 *
 * DESIGN. Both streams are merge-joined on the rank: the CLI holds one
 * chunk (at most 4096 rows) of each stream, the two dictionaries and one
 * divergence per rank, so its memory follows the numbers of ops and
 * processes, never the entries; the daemon sorts each session once (SQLite
 * spills to temporary files rather than growing). Runs on the CLI's only
 * thread.
 */
#ifndef TRACECTL_CLI_DIVERGE_H
#define TRACECTL_CLI_DIVERGE_H

#include "cli.h"

/*
 * Compares the sessions named by args[0] and args[1] and prints the result
 * (JSON with ctx->json). Returns CLI_EXIT_OK when they do not diverge,
 * CLI_EXIT_DIFFERS when they do, another exit code on error (printed).
 */
int cli_diverge_run(struct cli_ctx *ctx, char **args);

#endif
