/*
 * cli_offline — a private tracectld for one command (see cli_offline.h).
 */
#define _GNU_SOURCE /* nftw's FTW_DEPTH and FTW_PHYS */
#include "cli_offline.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define CLI_OFFLINE_DAEMON "tracectld"

/* The tracectld beside this executable, else NULL (PATH is searched). */
static const char *cli_offline_daemon_path(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    char *slash;

    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    if ((slash = strrchr(buf, '/')) == NULL ||
        (size_t)(slash + 1 - buf) + sizeof(CLI_OFFLINE_DAEMON) > size)
        return NULL;
    strcpy(slash + 1, CLI_OFFLINE_DAEMON);
    return access(buf, X_OK) == 0 ? buf : NULL;
}

/* A listening socket at o->sock. Returns the fd, or -errno. */
static int cli_offline_listen(const struct cli_offline *o)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, err;

    if (strlen(o->sock) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, o->sock);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
        err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

/* In the child: the socket as fd 3 with LISTEN_* for it, then exec. Never returns. */
static void cli_offline_exec(const struct cli_offline *o, int lfd, const char *daemon)
{
    char data[PATH_MAX + 8], log[PATH_MAX + 16], pid[32];
    int null = open("/dev/null", O_RDWR), err;

    snprintf(data, sizeof(data), "%s/data", o->dir);
    snprintf(log, sizeof(log), "%s/daemon.log", o->dir);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    /* dup2 onto itself keeps close-on-exec: when the socket is fd 3 already, clear it */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || null < 0 || err < 0 || dup2(null, 0) < 0 ||
        dup2(null, 1) < 0 || dup2(err, 2) < 0 ||
        (lfd == 3 ? fcntl(lfd, F_SETFD, 0) : dup2(lfd, 3)) < 0 ||
        setenv("LISTEN_PID", pid, 1) < 0 || setenv("LISTEN_FDS", "1", 1) < 0)
        _exit(127);
    unsetenv("LISTEN_FDNAMES");
    if (daemon != NULL)
        execl(daemon, CLI_OFFLINE_DAEMON, "--socket", o->sock, "--data-dir", data, "--log-level",
              "error", (char *)NULL);
    else
        execlp(CLI_OFFLINE_DAEMON, CLI_OFFLINE_DAEMON, "--socket", o->sock, "--data-dir", data,
               "--log-level", "error", (char *)NULL);
    dprintf(2, "cannot run %s: %s\n", daemon ? daemon : CLI_OFFLINE_DAEMON " (in PATH)",
            strerror(errno));
    _exit(127);
}

int cli_offline_start(struct cli_offline *o)
{
    const char *tmp = getenv("TMPDIR");
    char exe[PATH_MAX];
    const char *daemon = cli_offline_daemon_path(exe, sizeof(exe));
    int lfd;

    o->pid = 0;
    o->sock[0] = '\0';
    snprintf(o->dir, sizeof(o->dir), "%s/tracectl-offline.XXXXXX",
             tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdtemp(o->dir) == NULL) {
        cli_error("cannot make a temporary directory for the private daemon (%s): %s", o->dir,
                  strerror(errno));
        o->dir[0] = '\0';
        return CLI_EXIT_ERROR;
    }
    snprintf(o->sock, sizeof(o->sock), "%s/tracectl.sock", o->dir);
    if ((lfd = cli_offline_listen(o)) < 0) {
        cli_error("cannot listen on %s: %s", o->sock, strerror(-lfd));
        cli_offline_stop(o);
        return CLI_EXIT_ERROR;
    }
    fflush(NULL);
    if ((o->pid = fork()) == 0)
        cli_offline_exec(o, lfd, daemon);
    close(lfd);
    if (o->pid < 0) {
        o->pid = 0;
        cli_error("cannot start the private daemon: %s", strerror(errno));
        cli_offline_stop(o);
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}

static int cli_offline_rm_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

void cli_offline_show_log(const struct cli_offline *o)
{
    char path[PATH_MAX + 16], line[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/daemon.log", o->dir);
    if (o->dir[0] == '\0' || (f = fopen(path, "r")) == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL)
        fprintf(stderr, "tracectl: private tracectld: %s", line);
    fclose(f);
}

int cli_offline_stop(struct cli_offline *o)
{
    int rc = CLI_EXIT_OK, st;

    if (o->pid > 0) {
        kill(o->pid, SIGTERM);
        while (waitpid(o->pid, &st, 0) < 0 && errno == EINTR)
            ;
        /* killed by our SIGTERM before its handler was set (a failed import): not a failure */
        if ((WIFEXITED(st) && WEXITSTATUS(st) != 0) ||
            (WIFSIGNALED(st) && WTERMSIG(st) != SIGTERM)) {
            cli_error("the private tracectld failed (%s %d)",
                      WIFEXITED(st) ? "exit status" : "signal",
                      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            cli_offline_show_log(o);
            rc = CLI_EXIT_ERROR;
        }
        o->pid = 0;
    }
    if (o->dir[0] != '\0' && nftw(o->dir, cli_offline_rm_cb, 16, FTW_DEPTH | FTW_PHYS) != 0) {
        cli_error("cannot remove %s: %s", o->dir, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    o->dir[0] = '\0';
    return rc;
}
