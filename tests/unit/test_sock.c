/*
 * test_sock — proto/sock.c, the client's end of the transport that
 * libtracectl, the CLI and the daemon share: the default path from the
 * environment, the checked connect (to a listening socket this test makes in
 * a temporary directory) and send-all over a socketpair.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "sock.h"

TestSuite(sock);

Test(sock, default_path)
{
    char buf[PATH_MAX], want[PATH_MAX];

    setenv("TRACECTL_SOCKET", "/x/y.sock", 1);
    setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
    cr_assert_str_eq(sock_default_path(buf, sizeof(buf)), "/x/y.sock");
    setenv("TRACECTL_SOCKET", "", 1); /* empty counts as unset */
    cr_assert_str_eq(sock_default_path(buf, sizeof(buf)), "/run/user/7/tracectl/tracectl.sock");
    unsetenv("TRACECTL_SOCKET");
    setenv("XDG_RUNTIME_DIR", "", 1);
    snprintf(want, sizeof(want), "/tmp/tracectl-%u/tracectl.sock", (unsigned)getuid());
    cr_assert_str_eq(sock_default_path(buf, sizeof(buf)), want);
    unsetenv("XDG_RUNTIME_DIR");
    cr_assert_str_eq(sock_default_path(buf, sizeof(buf)), want);
    cr_assert_str_eq(sock_default_path(buf, 5), "/tmp"); /* cut to size */
}

/* A listening socket at <fresh 0700 dir>/s; returns its fd, the path in path. */
static int listen_at(char *dir, char *path, size_t size)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    strcpy(dir, "/tmp/test_sock.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, size, "%s/s", dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    cr_assert_eq(listen(fd, 4), 0);
    return fd;
}

static void unlisten(int fd, const char *dir, const char *path)
{
    close(fd);
    unlink(path);
    rmdir(dir);
}

Test(sock, connect_checks)
{
    char dir[64], path[128], why[256], longp[200];
    int lfd = listen_at(dir, path, sizeof(path)), fd;

    fd = sock_connect(path, why, sizeof(why));
    cr_assert_geq(fd, 0, "%s", why);
    close(fd);

    /* another user could replace a socket in a directory everyone may write */
    cr_assert_eq(chmod(dir, 0777), 0);
    why[0] = '\0';
    cr_assert_eq(sock_connect(path, why, sizeof(why)), -EPERM);
    cr_assert(strstr(why, "writable by group or others") != NULL, "%s", why);
    cr_assert_eq(chmod(dir, 0700), 0);

    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    cr_assert_eq(sock_connect(longp, why, sizeof(why)), -ENAMETOOLONG);
    cr_assert(strstr(why, "cannot connect to") != NULL, "%s", why);

    unlisten(lfd, dir, path);
    why[0] = '\0';
    cr_assert_eq(sock_connect(path, why, sizeof(why)), -ENOENT); /* the directory is gone */
    cr_assert(strstr(why, path) != NULL, "%s", why);
}

Test(sock, connect_refused)
{
    char dir[64], path[128], why[256];
    int lfd = listen_at(dir, path, sizeof(path));

    close(lfd); /* the socket file stays, nothing listens */
    cr_assert_eq(sock_connect(path, why, sizeof(why)), -ECONNREFUSED);
    cr_assert(strstr(why, "cannot connect to") != NULL, "%s", why);
    unlink(path);
    rmdir(dir);
}

Test(sock, send_all)
{
    static char big[1 << 20];
    int sv[2];
    char got[16];

    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cr_assert_eq(sock_send_all(sv[0], "hello", 5, -1), 0);
    cr_assert_eq(read(sv[1], got, sizeof(got)), 5);
    cr_assert_eq(memcmp(got, "hello", 5), 0);

    /* a peer that never reads: the socket fills, and the wait ends at the timeout */
    cr_assert_eq(sock_send_all(sv[0], big, sizeof(big), 10), -ETIMEDOUT);

    close(sv[1]); /* no SIGPIPE: the error comes back */
    cr_assert_eq(sock_send_all(sv[0], "x", 1, -1), -EPIPE);
    close(sv[0]);
}
