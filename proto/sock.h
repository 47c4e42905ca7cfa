/*
 * sock — the client's end of the transport (PROTOCOL.md Part 1,
 * "Transport"), written once for libtracectl, the CLI and the daemon: where
 * the socket is by default, a connect that first makes sure no other user
 * controls it (sockdir.h), and writing a whole buffer.
 *
 * Plain functions over file descriptors: no state, no threads, no printing
 * (a reason goes into the caller's buffer) and no allocation, so
 * libtracectl compiles this file into itself.
 */
#ifndef TRACECTL_SOCK_H
#define TRACECTL_SOCK_H

#include <stddef.h>

/*
 * The default socket path: $TRACECTL_SOCKET, else
 * $XDG_RUNTIME_DIR/tracectl/tracectl.sock, else
 * /tmp/tracectl-$UID/tracectl.sock (empty variables count as unset; $UID is
 * the real uid). Writes it into buf (cut to size) and returns buf.
 */
char *sock_default_path(char *buf, size_t size);

/*
 * Connects a stream socket (close-on-exec, blocking) to the Unix socket at
 * path, once sure that no other user controls it: its directory is this
 * user's (real uid) or root's and writable by no one else, and the daemon
 * at the other end runs as this user or root. Returns the fd, or a negative
 * errno with a one-line reason in why: -ENAMETOOLONG (path too long for
 * sockaddr_un), -EPERM (sockdir.h refused the socket), -ENOENT or
 * -ECONNREFUSED (no daemon listens there), others as lstat(2), socket(2)
 * or connect(2).
 */
int sock_connect(const char *path, char *why, size_t whylen);

/*
 * Writes all n bytes of p to fd (never raising SIGPIPE), retrying after
 * EINTR and waiting in poll(2) while the socket is full, at most timeout_ms
 * per wait (-1: no limit). Returns 0, -ETIMEDOUT, or the negative errno of
 * send(2) (-EPIPE once the peer closed). Works on blocking and non-blocking
 * sockets alike.
 */
int sock_send_all(int fd, const void *p, size_t n, int timeout_ms);

#endif
