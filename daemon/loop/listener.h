/*
 * listener — the daemon's listening Unix socket, on the loop thread.
 *
 * Adopts a socket passed by systemd (LISTEN_PID/LISTEN_FDS, fd 3), else binds
 * its own: it creates a missing parent directory (0700; 0755 with --system),
 * refuses a directory another user could write to (sockdir.h), refuses to
 * start when a live daemon answers on the path, replaces a stale socket file
 * and makes the socket 0600 (0666 with --system: the daemon filters what each
 * uid sees). It lowers --max-connections to what the descriptor limit
 * allows.
 *
 * It accepts by itself (a uv_poll_t on the socket, accept4) rather than
 * through uv_listen: when accept fails for want of descriptors (EMFILE,
 * ENFILE), it stops watching the socket for 100 ms at a time, logging once,
 * and the waiting clients stay in the backlog until descriptors are free
 * (libuv would accept and close them unanswered).
 */
#ifndef TRACECTLD_LISTENER_H
#define TRACECTLD_LISTENER_H

#include <stddef.h>

#include "daemon.h"

/* Returns 0, or a negative errno with a one-line reason in errbuf. */
int listener_start(struct daemon *d, char *errbuf, size_t errlen);
/* Stops accepting and removes the socket file it bound. */
void listener_stop(struct daemon *d);

#endif
