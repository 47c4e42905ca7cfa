/*
 * sock — the client's end of the transport (see sock.h).
 */
#include "sock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockdir.h"

char *sock_default_path(char *buf, size_t size)
{
    const char *env = getenv("TRACECTL_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");

    if (env != NULL && *env != '\0')
        snprintf(buf, size, "%s", env);
    else if (xdg != NULL && *xdg != '\0')
        snprintf(buf, size, "%s/tracectl/tracectl.sock", xdg);
    else
        snprintf(buf, size, "/tmp/tracectl-%u/tracectl.sock", (unsigned)getuid());
    return buf;
}

int sock_connect(const char *path, char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    int fd, rc;

    if (len >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "cannot connect to %s: %s", path, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    if ((rc = sockdir_check_dir(path, getuid(), why, whylen)) < 0)
        return rc;
    memcpy(sa.sun_path, path, len + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        snprintf(why, whylen, "cannot connect to %s: %s", path, strerror(-rc));
        return rc;
    }
    if ((rc = sockdir_check_peer(fd, path, getuid(), why, whylen)) < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int sock_send_all(int fd, const void *p, size_t n, int timeout_ms)
{
    const char *c = p;

    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (w > 0) {
            c += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (poll(&pfd, 1, timeout_ms) == 0)
            return -ETIMEDOUT;
    }
    return 0;
}
