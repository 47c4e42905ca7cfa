/* harness.c — see harness.h. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MAX_ARGS     32
#define MAX_CHILDREN 64

static pid_t children[MAX_CHILDREN];
static int n_children;
static bool in_child; /* this process is a harness_fork_as() child */

/*
 * Every SQLite connection of a test process gets the module tracectl_blocks,
 * as the sqlite3 shell gets it from `.load tracectl_blocks` (README): a
 * session file in the blocks format (the default) reads through it, one in
 * the row format needs nothing. A test that wants a connection without it
 * calls sqlite3_reset_auto_extension().
 */
__attribute__((constructor)) static void load_blocks_module(void)
{
    void *so = dlopen(TRACECTL_BLOCKS_SO, RTLD_NOW | RTLD_LOCAL);
    void (*init)(void) = NULL;

    if (so != NULL)
        *(void **)&init = dlsym(so, "sqlite3_tracectlblocks_init"); /* POSIX's idiom */
    if (init != NULL)
        sqlite3_auto_extension(init);
}

/* A child whose assertion failed runs the suite's fini: it ends there, touching nothing. */
static void child_exit_in_fini(void)
{
    if (in_child)
        _exit(122);
}

/* In a child: SIGKILL when parent dies; false when it died already. */
static bool die_with(pid_t parent)
{
    return prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent;
}

static void daemon_spawn(struct tdaemon *d, va_list ap)
{
    char *argv[MAX_ARGS];
    int n = 0;
    const char *a, *storage;

    argv[n++] = TRACECTLD_BIN;
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--data-dir";
    argv[n++] = d->data;
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    /* The row-format lane (scripts/test.sh): before the test's own arguments, which win. */
    if ((storage = getenv("TRACECTL_TEST_STORAGE")) != NULL && storage[0] != '\0') {
        argv[n++] = "--storage-format";
        argv[n++] = (char *)storage;
    }
    while ((a = va_arg(ap, const char *)) != NULL && n < MAX_ARGS - 1)
        argv[n++] = (char *)a;
    argv[n] = NULL;
    pid_t parent = getpid();
    d->pid = fork();
    cr_assert_neq(d->pid, -1, "fork: %s", strerror(errno));
    if (d->pid == 0) {
        struct rlimit rl = {d->nofile, d->nofile};
        if (!die_with(parent)) /* kept across execv: tracectld is not set-uid */
            _exit(125);
        if (d->nofile != 0 && setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    /* Ready when it answers on the socket. */
    for (double end = harness_now() + HARNESS_DEADLINE_S; harness_now() < end;) {
        int fd = raw_connect(d->sock);
        if (fd >= 0) {
            close(fd);
            return;
        }
        int st;
        cr_assert_eq(waitpid(d->pid, &st, WNOHANG), 0, "tracectld exited at start-up");
        usleep(25000);
    }
    cr_assert_fail("tracectld did not answer on %s within %d s", d->sock, HARNESS_DEADLINE_S);
}

void harness_daemon_start(struct tdaemon *d, ...)
{
    va_list ap;

    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/tctest.XXXXXX");
    cr_assert_not_null(mkdtemp(d->dir));
    snprintf(d->sock, sizeof(d->sock), "%s/tracectl.sock", d->dir);
    snprintf(d->data, sizeof(d->data), "%s/data", d->dir);
    va_start(ap, d);
    daemon_spawn(d, ap);
    va_end(ap);
}

void harness_daemon_restart(struct tdaemon *d, ...)
{
    va_list ap;

    va_start(ap, d);
    daemon_spawn(d, ap);
    va_end(ap);
}

int harness_daemon_stop(struct tdaemon *d, int sig)
{
    int st = 0;

    child_exit_in_fini();
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    for (double end = harness_now() + HARNESS_DEADLINE_S; harness_now() < end;) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(25000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    cr_assert_fail("tracectld did not stop within %d s of signal %d", HARNESS_DEADLINE_S, sig);
    return -1;
}

void harness_cleanup(struct tdaemon *d)
{
    char *argv[] = {"rm", "-rf", d->dir, NULL};

    child_exit_in_fini();
    if (d->pid > 0)
        harness_daemon_stop(d, SIGKILL);
    if (d->dir[0] != '\0')
        harness_run(NULL, argv);
}

pid_t harness_fork_as(uid_t uid, unsigned seconds)
{
    pid_t parent = getpid();
    pid_t pid;

    cr_assert_lt(n_children, MAX_CHILDREN, "too many children");
    pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid > 0) {
        children[n_children++] = pid;
        return pid;
    }
    n_children = 0; /* the parent's children are not this one's to reap */
    in_child = true;
    alarm(seconds);
    if (uid != 0 && (setgid(uid) != 0 || setuid(uid) != 0))
        _exit(120);
    if (!die_with(parent)) /* after setuid, which clears the death signal */
        _exit(121);
    return 0;
}

int harness_wait_child(pid_t pid)
{
    int st;
    pid_t rc;

    while ((rc = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid)
            children[i] = children[--n_children];
    if (rc != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void harness_reap(void)
{
    while (n_children > 0) {
        kill(children[n_children - 1], SIGKILL);
        harness_wait_child(children[n_children - 1]);
    }
}

void harness_teardown(struct tdaemon *d, int sig)
{
    harness_reap();
    if (d->pid > 0)
        harness_daemon_stop(d, sig);
    harness_cleanup(d);
}

void harness_pipe(int fds[2])
{
    cr_assert_eq(pipe(fds), 0, "pipe: %s", strerror(errno));
    cr_assert_eq(fcntl(fds[0], F_SETFD, FD_CLOEXEC), 0);
    cr_assert_eq(fcntl(fds[1], F_SETFD, FD_CLOEXEC), 0);
}

int harness_read_within(int fd, void *buf, size_t len, int seconds)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    size_t off = 0;

    while (off < len) {
        int rc = poll(&p, 1, seconds * 1000);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        ssize_t n = read(fd, (char *)buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

char *harness_sh(const char *dir, const char *fmt, ...)
{
    char cmd[2048], *out = NULL;
    va_list ap;
    int n;

    n = snprintf(cmd, sizeof(cmd), "cd '%s' && ", dir);
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
    va_end(ap);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(&out, argv), 0, "failed: %s", cmd);
    return out;
}

void harness_mpi_env(void)
{
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    unsetenv("TRACECTL_SESSION");
    unsetenv("TRACECTL_DEVICE");
    unsetenv("TRACECTL_DISABLE");
    unsetenv("TRACECTL_BLOCKING");
    unsetenv("TRACECTL_CLOSE_TIMEOUT");
}

int harness_run(char **out, char *const argv[])
{
    int pfd[2], st;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t n;
    pid_t pid;

    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        dup2(pfd[1], 1);
        if (out == NULL)
            dup2(devnull, 1);
        close(pfd[0]);
        close(pfd[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    while ((n = read(pfd[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    close(pfd[0]);
    buf[len] = '\0';
    waitpid(pid, &st, 0);
    if (out != NULL)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int raw_connect(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void raw_send(int fd, msgpack_sbuffer *sb)
{
    size_t off = 0;

    while (off < sb->size) {
        ssize_t n = send(fd, sb->data + off, sb->size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        cr_assert_gt(n, 0, "send: %s", strerror(errno));
        off += (size_t)n;
    }
    msgpack_sbuffer_clear(sb);
}

static int raw_fill(int fd, struct proto_reader *r)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char *buf;
    ssize_t n;

    if (poll(&p, 1, HARNESS_DEADLINE_S * 1000) <= 0)
        return -1;
    buf = proto_reader_buffer(r, 65536);
    n = read(fd, buf, 65536);
    if (n <= 0)
        return -1;
    proto_reader_commit(r, (size_t)n);
    return 0;
}

int raw_recv_object(int fd, struct proto_reader *r, const msgpack_object **o)
{
    struct proto_error err;
    int rc;

    while ((rc = proto_reader_next_object(r, o, &err)) == 0)
        if (raw_fill(fd, r) < 0)
            return -1;
    return rc == 1 ? 0 : -1;
}

int raw_recv(int fd, struct proto_reader *r, struct proto_msg *m)
{
    struct proto_error err;
    int rc;

    while ((rc = proto_reader_next(r, m, &err)) == 0)
        if (raw_fill(fd, r) < 0)
            return -1;
    return rc == 1 ? 0 : -1;
}

bool raw_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char buf[4096];

    for (;;) {
        if (poll(&p, 1, HARNESS_DEADLINE_S * 1000) <= 0)
            return false;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0)
            return false;
    }
}

int raw_producer(const char *sock, const char *session, int rank, int world, const char *device,
                 long long *session_id)
{
    struct proto_hello h = {.proto = 1,
                            .session = (char *)session,
                            .rank = rank,
                            .world = world,
                            .pid = getpid(),
                            .device = (char *)device};
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fd = raw_connect(sock);

    cr_assert_geq(fd, 0, "connect %s: %s", sock, strerror(errno));
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_hello(&pk, &h);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no reply to hello");
    cr_assert_eq(m.type, PROTO_WELCOME, "hello got %s", proto_type_name(m.type));
    if (session_id != NULL)
        *session_id = m.u.welcome.session_id;
    proto_msg_free(&m);
    proto_reader_deinit(&r);
    return fd;
}

const msgpack_object *obj_get(const msgpack_object *map, const char *key)
{
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (obj_str_eq(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

unsigned long long obj_u64(const msgpack_object *o)
{
    cr_assert_not_null(o, "missing field");
    cr_assert_eq(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "not a uint (type %d)", o->type);
    return o->via.u64;
}

double obj_f64(const msgpack_object *o)
{
    cr_assert_not_null(o, "missing field");
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (double)o->via.u64;
    cr_assert(o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32,
              "not a float (type %d)", o->type);
    return o->via.f64;
}

bool obj_str_eq(const msgpack_object *o, const char *s)
{
    return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static void pack_init(msgpack_sbuffer *sb, msgpack_packer *pk)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

void raw_send_ops(int fd, uint32_t id, const char *name)
{
    struct proto_opdef def = {.id = id, .name = (char *)name};
    msgpack_sbuffer sb;
    msgpack_packer pk;

    pack_init(&sb, &pk);
    proto_pack_ops(&pk, &def, 1);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

void raw_send_batch(int fd, uint32_t op, size_t n, uint64_t base, uint64_t dur0)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    pack_init(&sb, &pk);
    proto_pack_batch_header(&pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint64(&pk, i);
        msgpack_pack_uint32(&pk, op);
        msgpack_pack_uint64(&pk, base + i * 1000);
        msgpack_pack_uint64(&pk, dur0 + i);
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

long long raw_flush(int fd, uint64_t seq)
{
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    long long stored = -1;

    pack_init(&sb, &pk);
    proto_pack_flush(&pk, seq);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    if (raw_recv(fd, &r, &m) == 0) {
        if (m.type == PROTO_ACK && m.u.ack.seq == seq)
            stored = (long long)m.u.ack.stored;
        proto_msg_free(&m);
    }
    proto_reader_deinit(&r);
    return stored;
}

void raw_bye(int fd, uint64_t dropped)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    pack_init(&sb, &pk);
    proto_pack_bye(&pk, dropped);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    cr_assert(raw_closed(fd), "the daemon did not close after bye");
    close(fd);
}

const msgpack_object *raw_control(const char *sock, enum proto_type type,
                                  const struct proto_request *req, struct proto_reader *r,
                                  int *fd_out)
{
    const msgpack_object *o;
    struct proto_request dflt;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fd = raw_connect(sock);

    cr_assert_geq(fd, 0, "connect %s", sock);
    if (req == NULL) {
        proto_request_init(&dflt);
        req = &dflt;
    }
    pack_init(&sb, &pk);
    proto_pack_request(&pk, type, req);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(r, 64 << 20);
    cr_assert_eq(raw_recv_object(fd, r, &o), 0, "no reply to %s", proto_type_name(type));
    cr_assert_eq(o->type, MSGPACK_OBJECT_ARRAY);
    *fd_out = fd;
    return o;
}

long long raw_one_session(const char *sock, const char *name)
{
    long long id;
    int fd = raw_producer(sock, name, 0, 1, "gpu:0", &id);

    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 1, 1000, 10);
    cr_assert_eq(raw_flush(fd, 1), 1);
    raw_bye(fd, 0);
    raw_wait_state(sock, id, "ended", 10);
    return id;
}

long long raw_session_id(const char *sock, const char *name)
{
    struct proto_reader r;
    const msgpack_object *o;
    long long id = -1;
    int fd;

    o = raw_control(sock, PROTO_SESSIONS, NULL, &r, &fd);
    for (uint32_t i = 0; i < o->via.array.ptr[1].via.array.size; i++) {
        const msgpack_object *row = &o->via.array.ptr[1].via.array.ptr[i];
        if (obj_str_eq(obj_get(row, "name"), name))
            id = (long long)obj_u64(obj_get(row, "id"));
    }
    proto_reader_deinit(&r);
    close(fd);
    cr_assert_geq(id, 0, "no session %s", name);
    return id;
}

void raw_wait_state(const char *sock, long long id, const char *want, int seconds)
{
    for (int i = 0; i < seconds * 20; i++) {
        struct proto_reader r;
        int fd;
        const msgpack_object *o = raw_control(sock, PROTO_SESSIONS, NULL, &r, &fd);
        const msgpack_object *list = &o->via.array.ptr[1];
        bool done = false;

        for (uint32_t k = 0; k < list->via.array.size; k++) {
            const msgpack_object *row = &list->via.array.ptr[k];
            if ((long long)obj_u64(obj_get(row, "id")) == id)
                done = obj_str_eq(obj_get(row, "state"), want);
        }
        proto_reader_deinit(&r);
        close(fd);
        if (done)
            return;
        usleep(50000);
    }
    cr_assert_fail("session %lld did not become %s within %d s", id, want, seconds);
}

void harness_asan_small_quarantine(void)
{
#if defined(__SANITIZE_ADDRESS__)
    static char env[512];
    const char *cur = getenv("ASAN_OPTIONS");

    snprintf(env, sizeof(env), "%s%squarantine_size_mb=4", cur ? cur : "", cur ? ":" : "");
    setenv("ASAN_OPTIONS", env, 1);
#endif
}

long harness_proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t n = strlen(field);
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = atol(line + n + 1);
    fclose(f);
    return v;
}

long long harness_cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    long long ut = 0, st = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        char *p = strrchr(buf, ')');
        /* fields after the command: state(3) ... utime(14) stime(15) */
        if (p != NULL)
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st);
    }
    fclose(f);
    return ut + st;
}

void harness_wait_idle(pid_t pid, int max_s)
{
    long long last = harness_cpu_ticks(pid), now;

    for (int i = 0; i < max_s; i++) {
        sleep(1); /* not a fixed wait: the window over which "idle" is measured, up to max_s */
        now = harness_cpu_ticks(pid);
        if (now == last)
            return;
        last = now;
    }
    cr_assert_fail("the daemon is still busy after %d s", max_s);
}

double harness_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether pid's state in /proc/<pid>/stat is T (stopped by a signal). */
static bool proc_stopped(pid_t pid)
{
    char path[64], buf[512];
    bool stopped = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return false;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        char *p = strrchr(buf, ')'); /* the state follows the command's name */
        stopped = p != NULL && p[1] == ' ' && p[2] == 'T';
    }
    fclose(f);
    return stopped;
}

void harness_sigstop(pid_t pid, bool stop)
{
    kill(pid, stop ? SIGSTOP : SIGCONT);
    for (int i = 0; i < 1000 && proc_stopped(pid) != stop; i++)
        usleep(10000);
    cr_assert_eq(proc_stopped(pid), stop, "process %d did not %s", (int)pid,
                 stop ? "stop" : "resume");
}

double harness_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

long long harness_sessions_field(const char *sock, long long id, const char *key)
{
    struct proto_reader r;
    long long v = -1;
    int fd;
    const msgpack_object *o = raw_control(sock, PROTO_SESSIONS, NULL, &r, &fd);
    const msgpack_object *list = &o->via.array.ptr[1];

    for (uint32_t i = 0; i < list->via.array.size; i++) {
        const msgpack_object *row = &list->via.array.ptr[i];
        if ((long long)obj_u64(obj_get(row, "id")) == id)
            v = (long long)obj_u64(obj_get(row, key));
    }
    proto_reader_deinit(&r);
    close(fd);
    return v;
}

unsigned long long harness_status_u64(const char *sock, const char *key)
{
    struct proto_reader r;
    int fd;
    const msgpack_object *o = raw_control(sock, PROTO_STATUS, NULL, &r, &fd);
    unsigned long long v = obj_u64(obj_get(&o->via.array.ptr[1], key));

    proto_reader_deinit(&r);
    close(fd);
    return v;
}

long long harness_db_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;

    if (access(path, F_OK) == 0 &&
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
            if (sqlite3_step(st) == SQLITE_ROW)
                n = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
        sqlite3_close(db);
    }
    return n;
}

void harness_db_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;

    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
}

int64_t harness_db_one(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = -1;

    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

char *harness_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    cr_assert_not_null(f, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len != NULL)
        *len = (size_t)n;
    return buf;
}

bool harness_integrity_ok(const char *path)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    bool ok = false;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK) {
        ok = sqlite3_step(st) == SQLITE_ROW &&
             strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return ok;
}

void raw_pack_init(msgpack_sbuffer *sb, msgpack_packer *pk)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

void raw_expect_error(int fd, const char *code)
{
    struct proto_reader r;
    struct proto_msg m;

    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no reply, expected %s", code);
    cr_assert_eq(m.type, PROTO_ERROR, "expected error %s", code);
    cr_assert_str_eq(m.u.error.code, code);
    cr_assert_gt(strlen(m.u.error.message), 0);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
}

const msgpack_object *raw_session_row(const char *sock, long long id, struct proto_reader *r,
                                      int *fd)
{
    const msgpack_object *o = raw_control(sock, PROTO_SESSIONS, NULL, r, fd);
    const msgpack_object *list = &o->via.array.ptr[1];

    for (uint32_t k = 0; k < list->via.array.size; k++)
        if ((long long)obj_u64(obj_get(&list->via.array.ptr[k], "id")) == id)
            return &list->via.array.ptr[k];
    return NULL;
}

void harness_system_daemon(struct tdaemon *d, const char *opt, const char *val)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to switch uids");
    harness_daemon_start(d, "--system", "--admin-group", "tracectl-test-nonexistent", opt, val,
                         NULL);
    chmod(d->dir, 0755); /* other uids must reach the socket; the daemon filters by uid */
}

void raw_user_session(const char *sock, uid_t uid, const char *name, int n, int claimed, int got[2])
{
    int pfd[2];
    pid_t pid;

    harness_pipe(pfd);
    pid = harness_fork_as(uid, 60);
    if (pid == 0) {
        struct proto_hello h = {
            .proto = 1, .session = (char *)name, .rank = 0, .world = 1, .pid = claimed};
        struct proto_reader r;
        struct proto_msg m;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int out[2] = {(int)getpid(), 0};
        int fd = raw_connect(sock);
        raw_pack_init(&sb, &pk);
        proto_pack_hello(&pk, &h);
        raw_send(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        proto_reader_init(&r, 0);
        if (raw_recv(fd, &r, &m) != 0 || m.type != PROTO_WELCOME)
            _exit(3);
        out[1] = (int)m.u.welcome.session_id;
        proto_msg_free(&m);
        proto_reader_deinit(&r);
        raw_send_ops(fd, 1, "matmul");
        raw_send_batch(fd, 1, (size_t)n, 0, 1);
        if (raw_flush(fd, 1) != n)
            _exit(4);
        raw_bye(fd, 0);
        if (write(pfd[1], out, sizeof(out)) != sizeof(out))
            _exit(5);
        _exit(0);
    }
    close(pfd[1]);
    cr_assert_eq(harness_read_within(pfd[0], got, 2 * sizeof(int), 30), 0,
                 "the producer as uid %u failed", uid);
    close(pfd[0]);
    cr_assert_eq(harness_wait_child(pid), 0);
    raw_wait_state(sock, got[1], "ended", 10);
}
