/* listener.c — see listener.h. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "listener.h"
#include "log.h"
#include "sockdir.h"

#define LISTEN_BACKLOG 511
#define ACCEPT_BATCH   64  /* connections accepted per wake-up before others get the loop */
#define BACKOFF_MS     100 /* out of descriptors: how long to stop accepting */
#define FD_RESERVE     64  /* descriptors kept for files, the loop and the log */

static void listener_poll_cb(uv_poll_t *p, int status, int events);

static void listener_resume_cb(uv_timer_t *t)
{
    struct daemon *d = t->data;

    if (!uv_is_closing((uv_handle_t *)&d->accept_poll))
        uv_poll_start(&d->accept_poll, UV_READABLE, listener_poll_cb);
}

/*
 * Out of file descriptors: stop watching the socket for BACKOFF_MS, leaving
 * the pending connections in the backlog (libuv's own answer, accepting and
 * closing them, would drop them unanswered). Logged once per episode.
 */
static void listener_backoff(struct daemon *d, int err)
{
    uv_poll_stop(&d->accept_poll);
    uv_timer_start(&d->accept_backoff, listener_resume_cb, BACKOFF_MS, 0);
    if (!d->accept_paused)
        log_warn("accept: %s with %zu connections open: not accepting for %d ms at a time"
                 " until descriptors are free",
                 strerror(err), d->n_conns, BACKOFF_MS);
    d->accept_paused = true;
}

static void listener_poll_cb(uv_poll_t *p, int status, int events)
{
    struct daemon *d = p->data;
    int fd, rc, lfd;

    (void)events;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    if (uv_fileno((uv_handle_t *)&d->listener, &lfd) < 0)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                listener_backoff(d, errno);
            } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* the backlog is drained: the episode is over */
                if (d->accept_paused)
                    log_info("accepting again (%zu connections open)", d->n_conns);
                d->accept_paused = false;
            } else if (errno != ECONNABORTED && errno != EINTR) {
                log_warn("accept: %s", strerror(errno));
            }
            return;
        }
        if ((rc = conn_accept(d, fd)) < 0)
            log_warn("accept: %s", uv_strerror(rc));
    }
}

/* 1: a daemon answers at path; 0: nothing (or a stale file) there; <0: not a socket. */
static int listener_probe(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) < 0)
        return 0;
    if (!S_ISSOCK(st.st_mode))
        return -ENOTSOCK;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 1 : 0;
    close(fd);
    return rc;
}

static int listener_mkparent(const char *path, mode_t mode)
{
    char dir[PATH_MAX];
    char *slash;

    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    if (mkdir(dir, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* systemd socket activation: LISTEN_PID is us and LISTEN_FDS >= 1 → fd 3. */
static int listener_adopt(struct daemon *d)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

    if (pid == NULL || fds == NULL || atol(pid) != (long)getpid() || atoi(fds) < 1)
        return 0;
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return uv_pipe_open(&d->listener, 3) == 0 ? 1 : -EBADF;
}

static int listener_bind(struct daemon *d, char *errbuf, size_t errlen)
{
    const char *path = d->opt.socket_path;
    int rc;

    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(errbuf, errlen, "socket path is too long: %s", path);
        return -ENAMETOOLONG;
    }
    /* Per-user: 0600 in a 0700 directory. System-wide: anyone may connect; the
     * daemon filters what each uid sees (SO_PEERCRED). */
    if ((rc = listener_mkparent(path, d->opt.system ? 0755 : 0700)) < 0) {
        snprintf(errbuf, errlen, "cannot create the socket's directory for %s: %s", path,
                 strerror(-rc));
        return rc;
    }
    /* A directory that was already there may be another user's, who could then
     * replace the socket under the clients: it must be ours (or root's) and
     * writable by no one else. */
    if ((rc = sockdir_check_dir(path, geteuid(), errbuf, errlen)) < 0)
        return rc;
    rc = listener_probe(path);
    if (rc == 1) {
        snprintf(errbuf, errlen, "another tracectld is already listening on %s", path);
        return -EADDRINUSE;
    }
    if (rc < 0) {
        snprintf(errbuf, errlen, "%s exists and is not a socket", path);
        return rc;
    }
    if (unlink(path) == 0)
        log_info("replaced the stale socket %s", path);
    if ((rc = uv_pipe_bind(&d->listener, path)) < 0) {
        snprintf(errbuf, errlen, "cannot bind %s: %s", path, uv_strerror(rc));
        return rc;
    }
    chmod(path, d->opt.system ? 0666 : 0600);
    return 0;
}

/* --max-connections above what the descriptor limit allows would never be reached: the
 * daemon would run out of descriptors first, refusing nobody and logging nothing. */
static void listener_size_caps(struct daemon *d)
{
    struct rlimit rl;
    size_t room;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur <= 2 * FD_RESERVE)
        return;
    room = (size_t)rl.rlim_cur - FD_RESERVE;
    if (d->opt.max_conns > room) {
        log_info("--max-connections %zu lowered to %zu: the descriptor limit is %llu",
                 d->opt.max_conns, room, (unsigned long long)rl.rlim_cur);
        d->opt.max_conns = room;
    }
}

int listener_start(struct daemon *d, char *errbuf, size_t errlen)
{
    int rc, fd;

    listener_size_caps(d);

    uv_pipe_init(d->loop, &d->listener, 0);
    d->listener.data = d;
    rc = listener_adopt(d);
    if (rc < 0) {
        snprintf(errbuf, errlen, "cannot adopt the socket systemd passed (fd 3)");
        goto fail;
    }
    if (rc == 0 && (rc = listener_bind(d, errbuf, errlen)) < 0)
        goto fail;
    d->listening = rc == 0; /* we bound the path ourselves: remove it at exit */
    /* The loop watches the socket and accepts itself (listener_poll_cb), so
     * that running out of descriptors backs off instead of dropping clients. */
    if ((rc = uv_fileno((uv_handle_t *)&d->listener, &fd)) < 0 ||
        (rc = listen(fd, LISTEN_BACKLOG) < 0 ? -errno : 0) < 0 ||
        (rc = uv_poll_init(d->loop, &d->accept_poll, fd)) < 0) {
        snprintf(errbuf, errlen, "cannot listen on %s: %s", d->opt.socket_path, uv_strerror(rc));
        goto fail;
    }
    d->accept_poll.data = d;
    uv_timer_init(d->loop, &d->accept_backoff);
    d->accept_backoff.data = d;
    uv_poll_start(&d->accept_poll, UV_READABLE, listener_poll_cb);
    return 0;
fail:
    d->listening = false;
    uv_close((uv_handle_t *)&d->listener, NULL);
    return rc;
}

void listener_stop(struct daemon *d)
{
    if (uv_is_closing((uv_handle_t *)&d->listener))
        return;
    uv_close((uv_handle_t *)&d->accept_poll, NULL);
    uv_close((uv_handle_t *)&d->accept_backoff, NULL);
    uv_close((uv_handle_t *)&d->listener, NULL);
    if (d->listening)
        unlink(d->opt.socket_path);
    d->listening = false;
}
