/*
 * sockdir — who may own the socket a client talks to (PROTOCOL.md Part 1,
 * "Transport"). The daemon, the CLI and libtracectl all check, so that
 * another local user cannot put a socket of their own where one of them
 * looks (a pre-created /tmp/tracectl-$UID, a swapped socket): the socket's
 * directory must be owned by the expected user or root and writable by no
 * one else, and the daemon at the other end must run as the expected user
 * or root (ssh and tmux refuse the same way).
 *
 * Plain functions over the file system and a connected socket: no state, no
 * threads, no printing; the caller reports the message.
 */
#ifndef TRACECTL_SOCKDIR_H
#define TRACECTL_SOCKDIR_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Checks the directory that holds the socket at path (the directory itself,
 * not a symbolic link to one): owned by uid or by root, and not writable by
 * group or others — unless it is a root-owned sticky directory such as /tmp,
 * where no one can remove or replace another user's socket. Returns 0, or
 * -EPERM (or the errno of lstat) with a one-line message in err.
 */
int sockdir_check_dir(const char *path, uid_t uid, char *err, size_t errlen);

/*
 * Checks that the process at the other end of the connected Unix socket fd
 * runs as uid or as root (SO_PEERCRED). Returns 0, or -EPERM (or the errno of
 * getsockopt) with a one-line message in err.
 */
int sockdir_check_peer(int fd, const char *path, uid_t uid, char *err, size_t errlen);

#endif
