/*
 * listener — the daemon's listening Unix socket, on the loop thread.
 *
 * Adopts a socket passed by systemd (LISTEN_PID/LISTEN_FDS, fd 3), else binds
 * its own: it refuses to start when a live daemon answers on the path,
 * replaces a stale socket file, creates a missing parent directory (0700)
 * and makes the socket 0600.
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
