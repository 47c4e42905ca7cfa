/*
 * jitter_relay — a TCP relay that holds every chunk it reads for a random
 * time, for tests/tools/clock_ns.sh: the clock bound must hold under jitter.
 *
 *   jitter_relay --to ADDR:PORT [--bind ADDR] [--port P] [--jitter-us J] [--seed S]
 *                [--many]
 *
 * Prints "port P" once listening, accepts one connection, connects to ADDR:PORT
 * and relays both ways, each chunk delivered a uniform 0..J µs (default 1000)
 * after it was read, never before the chunk read before it in the same
 * direction (a stream keeps its order). Exits when either side closes, once
 * what it read from that side was delivered. Exit status 0, or 2 on an error.
 *
 * --many: accepts connection after connection (a daemon's several links and
 * its reconnections, tests/hosts/test_jitter.sh), each relayed by a child
 * process of its own, which dies with the relay; runs until killed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK   4096
#define PENDING 256 /* chunks held per direction */

struct chunk {
    int64_t due;
    size_t len;
    char data[CHUNK];
};

/* One direction: what was read from `from`, waiting to be written to `to`. */
struct dir {
    int from, to;
    int eof;
    size_t head, n;
    int64_t last_due;
    struct chunk q[PENDING];
};

static uint64_t rng;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int parse_addr(const char *host, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

/* Reads one chunk into the queue. Returns 0, or -1 on EOF or error. */
static int dir_read(struct dir *d, int64_t jitter_ns)
{
    struct chunk *c = &d->q[(d->head + d->n) % PENDING];
    ssize_t got = read(d->from, c->data, CHUNK);
    if (got <= 0)
        return -1;
    int64_t due = now_ns() + (jitter_ns > 0 ? (int64_t)(rnd() % (uint64_t)(jitter_ns + 1)) : 0);
    c->due = due > d->last_due ? due : d->last_due;
    d->last_due = c->due;
    c->len = (size_t)got;
    d->n++;
    return 0;
}

/* Writes every chunk that is due. Returns 0, or -1 on a write error. */
static int dir_flush(struct dir *d, int64_t now)
{
    while (d->n > 0 && d->q[d->head].due <= now) {
        struct chunk *c = &d->q[d->head];
        if (write_all(d->to, c->data, c->len) < 0)
            return -1;
        d->head = (d->head + 1) % PENDING;
        d->n--;
    }
    return 0;
}

static int relay(int a, int b, int64_t jitter_ns)
{
    static struct dir d[2];
    d[0] = (struct dir){.from = a, .to = b};
    d[1] = (struct dir){.from = b, .to = a};
    for (;;) {
        int64_t now = now_ns(), next = -1;
        for (int i = 0; i < 2; i++) {
            if (dir_flush(&d[i], now) < 0)
                return -1;
            if (d[i].eof && d[i].n == 0)
                return 0; /* one side closed and all it sent was delivered */
            if (d[i].n > 0 && (next < 0 || d[i].q[d[i].head].due < next))
                next = d[i].q[d[i].head].due;
        }
        struct pollfd p[2];
        for (int i = 0; i < 2; i++)
            p[i] = (struct pollfd){.fd = d[i].from,
                                   .events = d[i].eof || d[i].n == PENDING ? 0 : POLLIN};
        int timeout = next < 0 ? -1 : (int)((next - now + 999999) / 1000000);
        /* poll's ms are coarse: spin the last millisecond */
        if (next >= 0 && next - now < 1000000)
            timeout = 0;
        if (poll(p, 2, timeout) < 0 && errno != EINTR)
            return -1;
        for (int i = 0; i < 2; i++)
            if (p[i].revents & (POLLIN | POLLHUP | POLLERR))
                if (dir_read(&d[i], jitter_ns) < 0)
                    d[i].eof = 1;
    }
}

/* Relays the accepted connection a to up. Returns the exit status. */
static int serve(int a, const struct sockaddr_in *up, const char *to, int64_t jitter_us)
{
    int one = 1;
    int b = socket(AF_INET, SOCK_STREAM, 0);
    if (a < 0 || b < 0 || connect(b, (const struct sockaddr *)up, sizeof(*up)) < 0) {
        fprintf(stderr, "jitter_relay: connect %s: %s\n", to, strerror(errno));
        return 2;
    }
    setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int rc = relay(a, b, jitter_us * 1000);
    close(a);
    close(b);
    return rc < 0 ? 2 : 0;
}

int main(int argc, char **argv)
{
    const char *bind_addr = "127.0.0.1", *to = NULL;
    int port = 0;
    int64_t jitter_us = 1000;
    int many = 0;
    rng = 0x9e3779b97f4a7c15u ^ (uint64_t)getpid();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--to") && i + 1 < argc)
            to = argv[++i];
        else if (!strcmp(argv[i], "--bind") && i + 1 < argc)
            bind_addr = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--jitter-us") && i + 1 < argc)
            jitter_us = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--many"))
            many = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng = strtoull(argv[++i], NULL, 10) | 1;
        else
            to = NULL, i = argc;
    }
    char host[64];
    const char *colon = to ? strrchr(to, ':') : NULL;
    struct sockaddr_in up, sa;
    if (!colon || (size_t)(colon - to) >= sizeof(host) || jitter_us < 0) {
        fprintf(stderr, "usage: jitter_relay --to ADDR:PORT [--bind ADDR] [--port P] "
                        "[--jitter-us J] [--seed S] [--many]\n");
        return 2;
    }
    memcpy(host, to, (size_t)(colon - to));
    host[colon - to] = '\0';
    if (parse_addr(host, atoi(colon + 1), &up) < 0 || parse_addr(bind_addr, port, &sa) < 0)
        return 2;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    socklen_t len = sizeof(sa);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 16) < 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &len) < 0) {
        fprintf(stderr, "jitter_relay: listen: %s\n", strerror(errno));
        return 2;
    }
    printf("port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    if (!many) {
        int rc = serve(accept(ls, NULL, NULL), &up, to, jitter_us);
        close(ls);
        return rc;
    }
    signal(SIGCHLD, SIG_IGN); /* children reaped by the kernel */
    for (;;) {
        int a = accept(ls, NULL, NULL);
        if (a < 0 && errno == EINTR)
            continue;
        if (a < 0) {
            fprintf(stderr, "jitter_relay: accept: %s\n", strerror(errno));
            return 2;
        }
        rnd(); /* each child its own jitter */
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(ls);
            return serve(a, &up, to, jitter_us);
        }
        if (pid < 0)
            fprintf(stderr, "jitter_relay: fork: %s\n", strerror(errno));
        close(a);
    }
}
