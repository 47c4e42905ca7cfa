/*
 * cli_outfile — where a command writes its -o FILE: the one module every
 * tracectl command that writes a file goes through (`export -o`, `report --html`).
 *
 * It writes the way a shell redirect would, never hurting what is at FILE:
 *  - a symbolic link is followed (up to CLI_OUTFILE_MAX_LINKS links, each
 *    relative one resolved against its own directory), and the rules below
 *    apply to what it points at; the link itself stays;
 *  - a character device or a FIFO (/dev/null, a named pipe) is opened and
 *    written into directly (a FIFO waits for its reader, as `>` does);
 *  - a regular file, or a path where nothing is yet, is written through a
 *    temporary file "<target>.XXXXXX" in the same directory, renamed over
 *    the target only once the command succeeded, so a failed or interrupted
 *    command never leaves a truncated file that looks complete. An existing
 *    file keeps its permission bits (and, when the caller may, its owner and
 *    group); a new one gets 0666 minus the umask, as a redirect gives. One
 *    difference remains: the new file is a new inode, so other hard links
 *    to the old one keep the old content;
 *  - a directory is refused ("is a directory"), as are block devices and
 *    sockets, and a regular file the caller may not write (`>` would fail
 *    on it; a rename in a writable directory would not), all before
 *    anything is asked of the daemon.
 *
 * SIGNALS. While a temporary file exists, SIGINT, SIGTERM and SIGHUP are
 * caught by a handler that unlinks it (unlink() is async-signal-safe),
 * restores the previous disposition and raises the signal again, so the
 * process still dies of it (exit status 128 + signal for the shell). Its
 * path lives in a static buffer, the handler's only way to reach it: so one
 * output file at a time per process, which is all the CLI ever needs. On
 * every error path the temporary file is removed too.
 *
 * Runs on the CLI's only thread. Functions return a process exit code
 * (enum cli_exit) after printing the one-line message, like commands.
 */
#ifndef TRACECTL_CLI_OUTFILE_H
#define TRACECTL_CLI_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#define CLI_OUTFILE_MAX_LINKS 40 /* symbolic links followed, as the kernel's ELOOP limit */

struct cli_outfile {
    FILE *f;          /* where to write: stdout, the device, or the temporary file */
    const char *path; /* FILE as given (borrowed), for messages; NULL: stdout */
    char *target;     /* FILE with its symbolic links followed; NULL for stdout */
    bool tmp;         /* f is the temporary file (cli_outfile_tmp()) to rename over target */
};

/*
 * Opens the output: stdout when path is NULL, else path as above. cmd names
 * the command in messages. Returns CLI_EXIT_OK with o->f set, or
 * CLI_EXIT_ERROR after printing why (a directory, a block device or socket,
 * a link loop, a file that cannot be created); nothing is left behind then.
 */
int cli_outfile_open(struct cli_outfile *o, const char *path, const char *cmd);

/*
 * Finishes the output. rc is the command's exit code so far: with
 * CLI_EXIT_OK the temporary file is flushed, synced and renamed over the
 * target; otherwise it is removed. Returns rc, or CLI_EXIT_ERROR when
 * finishing failed (after printing why). stdout is left to cli_main(),
 * which flushes and checks it. Safe to call on an output that failed to
 * open.
 */
int cli_outfile_close(struct cli_outfile *o, int rc);

/* The temporary file's path while one exists, else NULL (for tests and messages). */
const char *cli_outfile_tmp(void);

#endif
