/* bench_util.c — see bench_util.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_thread_ns(void)
{
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

uint64_t bench_process_ns(void)
{
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

/* ---- the daemon ------------------------------------------------------------ */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int bench_rmtree(const char *dir)
{
    if (dir == NULL || dir[0] == '\0')
        return 0;
    return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT ? -errno : 0;
}

static int sock_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    int fd;

    if (len >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, len + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int bdaemon_start(struct bdaemon *d, const char *base)
{
    return bdaemon_start_args(d, base, NULL);
}

int bdaemon_start_args(struct bdaemon *d, const char *base, char *const *args)
{
    const char *tmp = base ? base : getenv("TMPDIR");
    int st;

    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "%s/tcbench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(d->dir) == NULL)
        return -errno;
    snprintf(d->sock, sizeof(d->sock), "%s/tracectl.sock", d->dir);
    snprintf(d->data, sizeof(d->data), "%s/data", d->dir);
    d->pid = fork();
    if (d->pid < 0) {
        int rc = -errno;
        bench_rmtree(d->dir);
        return rc;
    }
    if (d->pid == 0) {
        char *argv[32] = {TRACECTLD_BIN, "--socket",    d->sock, "--data-dir",
                          d->data,       "--log-level", "warn"};
        for (int i = 0; args != NULL && args[i] != NULL && i < 24; i++)
            argv[7 + i] = args[i];
        execv(argv[0], argv);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        int fd = sock_connect(d->sock);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            bench_rmtree(d->dir);
            return -ECHILD;
        }
        usleep(25000);
    }
    bdaemon_cleanup(d);
    return -ETIMEDOUT;
}

int bdaemon_stop(struct bdaemon *d, int sig)
{
    int st = 0;

    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    for (int i = 0; i < 3000; i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    return -1;
}

void bdaemon_cleanup(struct bdaemon *d)
{
    if (d->pid > 0)
        bdaemon_stop(d, SIGKILL);
    bench_rmtree(d->dir);
    d->dir[0] = '\0';
}

uint64_t bdaemon_session_bytes(const struct bdaemon *d, int64_t id)
{
    static const char *const suffixes[] = {"", "-wal"};
    char path[PATH_MAX + 64];
    uint64_t total = 0;
    struct stat st;

    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/sessions/%lld.db%s", d->data, (long long)id, suffixes[i]);
        if (stat(path, &st) == 0)
            total += (uint64_t)st.st_size;
    }
    return total;
}

/* ---- control requests -------------------------------------------------------- */

int bctl_open(struct bctl *ctl, const char *sock)
{
    int rc;

    ctl->fd = sock_connect(sock);
    if (ctl->fd < 0)
        return ctl->fd;
    if ((rc = proto_reader_init(&ctl->r, 64u << 20)) < 0) {
        close(ctl->fd);
        ctl->fd = -1;
    }
    return rc;
}

void bctl_close(struct bctl *ctl)
{
    if (ctl->fd < 0)
        return;
    proto_reader_deinit(&ctl->r);
    close(ctl->fd);
    ctl->fd = -1;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -errno;
        p += w, n -= (size_t)w;
    }
    return 0;
}

const msgpack_object *bctl_request(struct bctl *ctl, enum proto_type type,
                                   const struct proto_request *req)
{
    struct proto_request dflt;
    struct proto_error err;
    const msgpack_object *o = NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (req == NULL) {
        proto_request_init(&dflt);
        req = &dflt;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = proto_pack_request(&pk, type, req) < 0 ? -ENOMEM : send_all(ctl->fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc < 0)
        return NULL;
    while ((rc = proto_reader_next_object(&ctl->r, &o, &err)) == 0) {
        struct pollfd p = {.fd = ctl->fd, .events = POLLIN};
        char *buf;
        ssize_t n;

        if (poll(&p, 1, 30000) <= 0 || (buf = proto_reader_buffer(&ctl->r, 65536)) == NULL)
            return NULL;
        n = read(ctl->fd, buf, 65536);
        if (n <= 0)
            return NULL;
        proto_reader_commit(&ctl->r, (size_t)n);
    }
    if (rc < 0 || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        !bobj_str_eq(&o->via.array.ptr[0], "ok"))
        return NULL;
    return &o->via.array.ptr[1];
}

bool bobj_str_eq(const msgpack_object *o, const char *s)
{
    return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

const msgpack_object *bobj_get(const msgpack_object *map, const char *key)
{
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (bobj_str_eq(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

uint64_t bobj_u64(const msgpack_object *o)
{
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return o->via.u64;
    if (o != NULL && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32))
        return (uint64_t)o->via.f64;
    return 0;
}

const msgpack_object *bobj_session_row(const msgpack_object *list, const char *name)
{
    if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if (bobj_str_eq(bobj_get(&list->via.array.ptr[i], "name"), name))
            return &list->via.array.ptr[i];
    return NULL;
}

/* ---- synthetic entries ---------------------------------------------------------- */

const char *const bench_op_names[BENCH_OPS] = {
    "matmul",
    "conv2d",
    "layer_norm",
    "softmax",
    "gelu",
    "add",
    "mul",
    "linear",
    "attention",
    "embedding",
    "dropout",
    "relu",
    "batch_norm",
    "conv2d_backward",
    "matmul_backward",
    "softmax_backward",
    "gelu_backward",
    "layer_norm_backward",
    "adam_step",
    "sgd_step",
    "allreduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "barrier",
    "nccl_send",
    "nccl_recv",
    "alltoall",
    "memcpy_h2d",
    "memcpy_d2h",
    "memset",
    "copy_",
    "cat",
    "transpose",
    "reshape",
    "view",
    "index_select",
    "scatter_add",
    "gather",
    "topk",
    "sort",
    "cumsum",
    "sum",
    "mean",
    "max_pool2d",
    "avg_pool2d",
    "cross_entropy",
    "nll_loss",
    "rotary_embedding",
    "flash_attention",
};

void bgen_init(struct bgen *g, uint64_t seed)
{
    g->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (g->s == 0)
        g->s = 1;
}

/* xorshift64*: fast, and plenty for load generation. */
uint64_t bgen_next(struct bgen *g)
{
    g->s ^= g->s >> 12;
    g->s ^= g->s << 25;
    g->s ^= g->s >> 27;
    return g->s * 0x2545F4914F6CDD1Dull;
}

/* Dimensions as tensors have them: batch sizes, channels, hidden sizes. */
static const uint64_t dim_values[16] = {1,   2,   3,   8,   16,   32,   64,   128,
                                        224, 256, 512, 768, 1024, 2048, 4096, 50257};

static void gen_shape(struct bgen *g, tc_shape *s)
{
    uint64_t r = bgen_next(g);

    s->ndim = 1 + (uint32_t)(r % 4);
    for (uint32_t i = 0; i < s->ndim; i++) {
        /* later dims of 3-4 dim shapes stay small (images, heads), as in real tensors */
        uint32_t span = s->ndim > 2 && i > 0 ? 8 : 16;
        s->dims[i] = dim_values[(r >> (8 + 5 * i)) % span];
    }
}

void bench_program_init(struct bprogram *p)
{
    struct bgen g;

    bgen_init(&g, 42);
    for (size_t k = 0; k < BENCH_SITES; k++) {
        struct bsite *s = &p->site[k];
        uint64_t r = bgen_next(&g), a = r % BENCH_OPS, b = (r >> 8) % BENCH_OPS;

        s->op = (uint32_t)(a < b ? a : b);          /* the min of two uniforms: a few hot ops */
        s->base_ns = 1ull << (10 + (r >> 16) % 13); /* 1 µs .. 4 ms */
        gen_shape(&g, &s->out);
        s->n_in = (size_t)((r >> 56) % 4);
        for (size_t i = 0; i < s->n_in; i++)
            gen_shape(&g, &s->in[i]);
        s->elements = 1;
        for (uint32_t i = 0; i < s->out.ndim; i++)
            s->elements *= s->out.dims[i];
        s->mem_bytes = s->elements * (s->op % 3 == 0 ? 2 : 4);
    }
}

const struct bsite *bgen_entry(struct bgen *g, const struct bprogram *p, uint64_t n,
                               uint64_t *dur_ns)
{
    const struct bsite *s = &p->site[n % BENCH_SITES];

    /* base × [0.5, 1.5): run-to-run jitter, an occasional 4× straggler */
    uint64_t r = bgen_next(g);
    *dur_ns = s->base_ns / 2 + (r & (s->base_ns - 1));
    if ((r >> 40) % 1000 == 0)
        *dur_ns *= 4;
    return s;
}

/* ---- /proc, statistics, output -------------------------------------------------- */

long bench_proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t flen = strlen(field);
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            v = strtol(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

double bench_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* comm may hold spaces: fields 14 and 15 count from after its closing paren */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct bstat bench_stat(double *v, size_t n)
{
    struct bstat s = {0, 0, 0};

    if (n == 0)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return s;
}

void bjson_begin(const char *bench, const char *kind)
{
    printf("{\"bench\":\"%s\",\"kind\":\"%s\"", bench, kind);
}

void bjson_num(const char *key, double v)
{
    if (v != v) /* NaN: not measured */
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%.6g", key, v);
}

void bjson_u64(const char *key, uint64_t v)
{
    printf(",\"%s\":%llu", key, (unsigned long long)v);
}

void bjson_str(const char *key, const char *v)
{
    if (v == NULL) {
        printf(",\"%s\":null", key);
        return;
    }
    printf(",\"%s\":\"", key);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

void bjson_bool(const char *key, bool v)
{
    printf(",\"%s\":%s", key, v ? "true" : "false");
}

void bjson_stat(const char *key, struct bstat st, size_t n)
{
    printf(",\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,\"n\":%zu}", key, st.median, st.min,
           st.max, n);
}

void bjson_end(void)
{
    printf("}\n");
    fflush(stdout);
}

void bench_machine(char *buf, size_t len)
{
    char line[256], model[128] = "?";
    long mem_kib = 0;
    FILE *f;

    if ((f = fopen("/proc/cpuinfo", "r")) != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
                snprintf(model, sizeof(model), "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    if ((f = fopen("/proc/meminfo", "r")) != NULL) {
        if (fgets(line, sizeof(line), f) != NULL)
            sscanf(line, "MemTotal: %ld", &mem_kib);
        fclose(f);
    }
    snprintf(buf, len, "%ld CPUs, %s, %.1f GiB RAM", sysconf(_SC_NPROCESSORS_ONLN), model,
             (double)mem_kib / 1048576.0);
}
