/*
 * cli_offline — a private tracectld for one command, so that `tracectl
 * report FILE.json.gz` works without a running daemon.
 *
 * cli_offline_start() makes a temporary directory (mkdtemp under $TMPDIR,
 * else /tmp; mode 0700), binds and listens on a socket in it itself, and
 * starts tracectld with that socket handed over as systemd socket
 * activation does (fd 3, LISTEN_PID, LISTEN_FDS) and its data in the same
 * directory. Because the socket listens before the daemon runs, the CLI can
 * connect at once: its connection waits in the backlog until the daemon
 * accepts it, so there is no polling or sleeping for the daemon to be up.
 * The daemon binary is the `tracectld` next to the running `tracectl`
 * (/proc/self/exe's directory), else the first in PATH. The daemon gets
 * SIGTERM when the CLI dies (PR_SET_PDEATHSIG), and cli_offline_stop()
 * stops it (SIGTERM, then waits) and removes the directory.
 *
 * The session files live in the temporary directory for the duration of
 * the command only; nothing is left behind unless the CLI itself is killed
 * (then the daemon stops, but the directory stays). Single-threaded.
 */
#ifndef TRACECTL_CLI_OFFLINE_H
#define TRACECTL_CLI_OFFLINE_H

#include <limits.h>
#include <sys/types.h>

struct cli_offline {
    char dir[PATH_MAX - 64]; /* the temporary directory; "" before start */
    char sock[PATH_MAX];     /* dir/tracectl.sock: give it to the commands as --socket */
    pid_t pid;               /* the daemon, 0 when not running */
};

/*
 * Starts the private daemon. Returns CLI_EXIT_OK, or CLI_EXIT_ERROR after
 * printing why (nothing is left running or on disk then).
 */
int cli_offline_start(struct cli_offline *o);

/*
 * Stops the daemon and removes the directory; safe after a failed start.
 * Returns CLI_EXIT_OK, or CLI_EXIT_ERROR after printing why (the daemon
 * did not exit cleanly: its log is shown).
 */
int cli_offline_stop(struct cli_offline *o);

/* Copies the daemon's log (its stderr) to stderr, when there is one. */
void cli_offline_show_log(const struct cli_offline *o);

#endif
