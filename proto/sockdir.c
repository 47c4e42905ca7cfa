/* sockdir.c — see sockdir.h. */
#define _GNU_SOURCE /* struct ucred */
#include "sockdir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

int sockdir_check_dir(const char *path, uid_t uid, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    struct stat st;

    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (lstat(dir, &st) < 0) {
        int rc = -errno;
        snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(errno));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a directory (a symbolic link?): refusing to use it", dir);
        return -EPERM;
    }
    if (st.st_uid != uid && st.st_uid != 0) {
        snprintf(err, errlen, "%s is owned by uid %u, not by uid %u or root: refusing to use it",
                 dir, (unsigned)st.st_uid, (unsigned)uid);
        return -EPERM;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !(st.st_uid == 0 && (st.st_mode & S_ISVTX))) {
        snprintf(err, errlen,
                 "%s is writable by group or others (mode %03o): refusing to use it "
                 "(chmod go-w it, or remove it and let tracectld make it)",
                 dir, (unsigned)(st.st_mode & 0777));
        return -EPERM;
    }
    return 0;
}

int sockdir_check_peer(int fd, const char *path, uid_t uid, char *err, size_t errlen)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
        int rc = -errno;
        snprintf(err, errlen, "%s: SO_PEERCRED: %s", path, strerror(errno));
        return rc;
    }
    if (cr.uid != uid && cr.uid != 0) {
        snprintf(err, errlen,
                 "the daemon at %s runs as uid %u, not as uid %u or root: refusing to talk to it",
                 path, (unsigned)cr.uid, (unsigned)uid);
        return -EPERM;
    }
    return 0;
}
