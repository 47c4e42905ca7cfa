/*
 * tcconn.c — the connection's opening: what the hello says (options, else
 * the environment), connecting to the daemon's socket once sure no other
 * user controls it, and hello → welcome. Run by the thread in tc_open(),
 * or by a forked child's writer thread (tcfork.c); tcconn_read() also by
 * the writer thread for the daemon's replies.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "tcint.h"

static const char *env_first(const char *const *names)
{
    for (; *names != NULL; names++) {
        const char *v = getenv(*names);
        if (v != NULL && *v)
            return v;
    }
    return NULL;
}

static int64_t env_int(const char *const *names)
{
    const char *v = env_first(names);
    char *end;
    long long n;

    if (v == NULL)
        return -1;
    errno = 0;
    n = strtoll(v, &end, 10);
    return errno || *end || n < 0 ? -1 : n;
}

/*
 * Whether the daemon would take a hello with these fields (PROTOCOL.md
 * "hello"): else the reason, naming the limit, is kept for tc_last_error()
 * and tc_last_refusal(), and -EINVAL is returned, so that tc_open() fails
 * here with a clear message, not with the daemon's refusal.
 */
static int hello_check(tc_client *c)
{
    char why[200];

    if (tcnames_check("the session name", c->h_session, 1, PROTO_MAX_SESSION, why, sizeof(why)) <
            0 ||
        (c->device != NULL &&
         tcnames_check("the device name", c->device, 1, PROTO_MAX_NAME, why, sizeof(why)) < 0) ||
        (c->opt_host != NULL && *c->opt_host &&
         tcnames_check("the host name", c->opt_host, 1, PROTO_MAX_NAME, why, sizeof(why)) < 0))
        goto bad;
    if (c->h_world == 0 || c->h_world > INT32_MAX) {
        snprintf(why, sizeof(why), "world %lld is outside 1 <= world <= %d", (long long)c->h_world,
                 INT32_MAX);
        goto bad;
    }
    if (c->h_world > 0 && c->h_rank >= c->h_world) {
        snprintf(why, sizeof(why), "rank %lld is outside 0 <= rank < world (%lld)",
                 (long long)c->h_rank, (long long)c->h_world);
        goto bad;
    }
    if (c->h_rank > INT32_MAX) {
        snprintf(why, sizeof(why), "rank %lld is over %d", (long long)c->h_rank, INT32_MAX);
        goto bad;
    }
    return 0;
bad:
    tcclient_error(c, -EINVAL, "tc_open: %s (options or environment)", why);
    tcclient_refuse("tc_open: %s (options or environment)", why);
    return -EINVAL;
}

/*
 * What the next hello says, resolved now from the options and, where they
 * leave it open, the environment (a forked child resolves it again: a
 * launcher may have given it its own RANK). 0, -ENOMEM, or -EINVAL for a
 * hello the daemon would refuse (hello_check).
 */
int tcconn_resolve(tc_client *c)
{
    static const char *const session_env[] = {"TRACECTL_SESSION", "SLURM_JOB_ID",
                                              "TORCHELASTIC_RUN_ID", NULL};
    static const char *const rank_env[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                           "SLURM_PROCID", NULL};
    static const char *const world_env[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                            "SLURM_NTASKS", NULL};
    const char *session = c->opt_session ? c->opt_session : env_first(session_env);
    char *copy = strdup(session ? session : "default");

    if (copy == NULL)
        return -ENOMEM;
    free(c->h_session);
    c->h_session = copy;
    c->h_rank = c->opt_rank >= 0 ? c->opt_rank : env_int(rank_env);
    c->h_world = c->opt_world >= 0 ? c->opt_world : env_int(world_env);
    return hello_check(c);
}

/* ---- socket I/O (the opening thread, then the writer thread only) ------- */

/* Reads what is there (waiting up to timeout_ms for the first byte). 0, or -errno / -EPIPE. */
int tcconn_read(int fd, struct proto_reader *r, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char *buf;
    ssize_t n;

    if (poll(&pfd, 1, timeout_ms) <= 0)
        return 0;
    buf = proto_reader_buffer(r, 4096);
    if (buf == NULL)
        return -ENOMEM;
    n = recv(fd, buf, 4096, MSG_DONTWAIT);
    if (n == 0)
        return -EPIPE;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    proto_reader_commit(r, (size_t)n);
    return 0;
}

/*
 * Connects c->fd to the daemon at c->path, once sure that no other user
 * controls it (sockdir.h): the socket's directory is this user's or root's
 * and writable by no one else, and the daemon runs as this user or root.
 * 0 or a negative errno, the reason kept for tc_last_error().
 */
int tcconn_socket(tc_client *c)
{
    char why[PATH_MAX + 160];

    if ((c->fd = sock_connect(c->path, why, sizeof(why))) < 0) {
        int rc = c->fd;

        c->fd = -1;
        tcclient_error(c, rc, "%s", why);
        return rc;
    }
    return 0;
}

/* The daemon's answer to the hello: 0 on welcome, else -EPROTO with the reason kept. */
static int hello_answer(tc_client *c, struct proto_msg *m)
{
    if (m->type == PROTO_WELCOME) {
        c->session_id = m->u.welcome.session_id;
        c->counters_ok = m->u.welcome.counters;
        return 0;
    }
    if (m->type == PROTO_ERROR)
        tcclient_error(c, -EPROTO, "the daemon refused the hello: %s: %s",
                       m->u.error.code ? m->u.error.code : "?",
                       m->u.error.message ? m->u.error.message : "");
    else
        tcclient_error(c, -EPROTO, "the daemon answered the hello with %s",
                       proto_type_name(m->type));
    return -EPROTO;
}

/* Whether tc_close's time ran out while a forked child's writer waits for the welcome. */
static bool closed_meanwhile(tc_client *c)
{
    uint64_t deadline = atomic_load(&c->close_deadline);

    return deadline != 0 && tc_now_ns() > deadline;
}

/* hello → welcome on c->fd, as tcconn_resolve() left it. 0 or a negative errno. */
int tcconn_hello(tc_client *c)
{
    char host[256] = "";
    struct proto_hello h = {.proto = PROTO_VERSION,
                            .session = c->h_session,
                            .rank = c->h_rank,
                            .world = c->h_world,
                            .pid = getpid(),
                            .device = c->device};
    msgpack_packer pk;
    struct proto_msg m;
    struct proto_error err;
    uint64_t deadline = tc_now_ns() + OPEN_TIMEOUT_MS * 1000000ull;
    int rc;

    if (c->opt_host != NULL)
        snprintf(host, sizeof(host), "%s", c->opt_host);
    else
        gethostname(host, sizeof(host) - 1);
    h.host = host[0] ? host : NULL;
    /* The session's home daemon (docs/hosts.md): sent only when the daemon would take it. */
    h.home = getenv("TRACECTL_HOME");
    if (h.home != NULL && (h.home[0] == '\0' || strlen(h.home) > PROTO_MAX_NAME ||
                           !proto_utf8_valid(h.home, strlen(h.home))))
        h.home = NULL;
    msgpack_packer_init(&pk, &c->out, msgpack_sbuffer_write);
    if (proto_pack_hello(&pk, &h) < 0)
        return -ENOMEM;
    rc = sock_send_all(c->fd, c->out.data, c->out.size, OPEN_TIMEOUT_MS);
    msgpack_sbuffer_clear(&c->out);
    while (rc == 0) {
        rc = proto_reader_next(&c->reader, &m, &err);
        if (rc > 0) {
            rc = hello_answer(c, &m);
            proto_msg_free(&m);
            return rc;
        }
        if (rc < 0) {
            tcclient_error(c, -EPROTO, "the daemon's answer to the hello: %s", err.message);
            return -EPROTO;
        }
        if (tc_now_ns() > deadline) {
            tcclient_error(c, -ETIMEDOUT, "no answer to the hello from %s within %d ms", c->path,
                           OPEN_TIMEOUT_MS);
            return -ETIMEDOUT;
        }
        if (closed_meanwhile(c)) {
            tcclient_error(c, -ETIMEDOUT, "no answer to the hello from %s within tc_close's time",
                           c->path);
            return -ETIMEDOUT;
        }
        rc = tcconn_read(c->fd, &c->reader, 100);
    }
    tcclient_error(c, rc, "saying hello to %s: %s", c->path,
                   rc == -EPIPE ? "the daemon closed the connection" : strerror(-rc));
    return rc;
}
