/*
 * cli_import.c — `tracectl import FILE...`.
 *
 * Each file is read twice through zlib (plain files read through gzread
 * too) and yajl's streaming parser, so a file larger than memory imports in
 * bounded memory:
 *  1. the scan pass checks the whole file is valid JSON (a malformed file is
 *     reported with its byte offset before anything is sent, so nothing from
 *     a half-read file can be stored as if complete) and keeps what the
 *     second pass needs: distributedInfo and deviceProperties (metadata), the
 *     ProfilerStep#N intervals, and, per CPU op `External id`, its name,
 *     input dims and start time. That map grows with the CPU ops of the file,
 *     not with its size in bytes.
 *  2. the send pass streams GPU kernels, memcpys and memsets as entries on
 *     device gpu:<args.device>: op = the kernel's name, in_shapes = the
 *     launching CPU op's Input Dims (through `External id`), step = the
 *     ProfilerStep#N containing the launching op (else the event). With
 *     --cpu-ops, CPU ops and user annotations (other than ProfilerStep#N) are
 *     entries too, on device `cpu`, with their self time (duration minus the
 *     time of the ops nested in them on the same thread), so nested time is
 *     not counted twice.
 * The launching CPU op of each kernel name is kept in the process metadata
 * (`launch:<kernel>` = `<cpu op>`). Timestamps are µs with up to 3 decimals
 * (ns resolution): they are converted from the number's text, not through a
 * double, so ns survive in 64-bit values.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <yajl/yajl_parse.h>
#include <zlib.h>

#include "cli_import.h"

#define BATCH     4096
#define NAME_MAX_ 1024
#define READ_BUF  (256u << 10)

const char cli_import_usage[] =
    "Usage: tracectl import FILE... [--session NAME] [--rank R] [--cpu-ops] [--quiet]\n"
    "\n"
    "Imports PyTorch profiler (Kineto) Chrome-trace JSON files, plain or .gz, one\n"
    "file per rank, into one session, through the daemon like any producer.\n"
    "GPU kernels, memcpy and memset events become entries on device gpu:<N>,\n"
    "with the input shapes of the CPU op that launched them and the step of the\n"
    "ProfilerStep#N that contains it. A malformed file is reported with its byte\n"
    "offset and nothing of it is sent.\n"
    "\n"
    "Options:\n"
    "  -s, --session NAME  the session (default: the first file's name, without\n"
    "                      .json/.gz)\n"
    "  -r, --rank R        the rank of the first file when the file has no\n"
    "                      distributedInfo (the next files get R+1, ...); default:\n"
    "                      the file's position in the list\n"
    "      --cpu-ops       also import CPU ops (device `cpu`, self time only)\n"
    "  -q, --quiet         no progress bar and no summary\n"
    "\n"
    "Example:\n"
    "  tracectl import rank0.json.gz rank1.json.gz --session resnet-run\n";

/* ---- small tables ---------------------------------------------------------- */

struct cpu_op {
    int64_t ext; /* External id */
    int64_t ts, dur;
    int64_t tid;
    uint32_t name; /* index into names */
    char *dims;    /* msgpack array of arrays, or NULL */
    size_t dims_len;
};

struct step_span {
    int64_t begin, end, n;
};

struct kv {
    char *key, *value; /* value as JSON scalar text; strings unquoted */
    bool is_str, is_num;
};

/* Interned strings with a hash index. */
struct names {
    char **v;
    size_t n, cap;
    uint32_t *slot; /* hash table of index+1 */
    size_t nslot;
};

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Index of s in the table, adding it. UINT32_MAX on ENOMEM. */
static uint32_t names_get(struct names *t, const char *s)
{
    size_t n = strlen(s), i;

    if ((t->n + 1) * 2 > t->nslot) {
        size_t ns = t->nslot ? t->nslot * 2 : 256;
        uint32_t *slot = calloc(ns, sizeof(*slot));
        if (slot == NULL)
            return UINT32_MAX;
        for (size_t k = 0; k < t->n; k++) {
            i = fnv(t->v[k], strlen(t->v[k])) & (ns - 1);
            while (slot[i])
                i = (i + 1) & (ns - 1);
            slot[i] = (uint32_t)k + 1;
        }
        free(t->slot);
        t->slot = slot;
        t->nslot = ns;
    }
    i = fnv(s, n) & (t->nslot - 1);
    while (t->slot[i]) {
        if (strcmp(t->v[t->slot[i] - 1], s) == 0)
            return t->slot[i] - 1;
        i = (i + 1) & (t->nslot - 1);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **v = realloc(t->v, cap * sizeof(*v));
        if (v == NULL)
            return UINT32_MAX;
        t->v = v;
        t->cap = cap;
    }
    if ((t->v[t->n] = strdup(s)) == NULL)
        return UINT32_MAX;
    t->slot[i] = (uint32_t)t->n + 1;
    return (uint32_t)t->n++;
}

static void names_free(struct names *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

/* ---- the parse state ---------------------------------------------------------- */

enum frame {
    F_TOP,    /* the top-level map */
    F_EVENTS, /* traceEvents */
    F_EVENT,  /* one event */
    F_ARGS,   /* its args */
    F_DIMS,   /* args["Input Dims"] */
    F_DIM,    /* one input's dims */
    F_DIST,   /* distributedInfo */
    F_PROPS,  /* deviceProperties */
    F_PROP,   /* one device's properties */
    F_SKIP,   /* anything else */
};

/* The event being read. */
struct event {
    char ph[4], cat[32];
    char name[NAME_MAX_ + 1];
    int64_t ts, dur, device, ext, tid;
    bool has_ts, has_dur;
    uint32_t n_inputs; /* Input Dims: at most PROTO_MAX_INPUTS, each at most PROTO_MAX_DIMS */
    uint64_t dim_v[PROTO_MAX_INPUTS][PROTO_MAX_DIMS];
    uint32_t dim_n[PROTO_MAX_INPUTS];
};

struct imp {
    /* options */
    const char *path;
    bool cpu_ops, quiet, send_pass;
    /* the parser's position */
    enum frame stack[64];
    int depth; /* stack[depth - 1] is the current container */
    char key[128];
    int prop_index;
    struct event ev;
    /* what the scan pass keeps */
    int64_t rank, world;
    struct kv *meta;
    size_t n_meta, cap_meta;
    struct step_span *steps;
    size_t n_steps, cap_steps;
    struct cpu_op *ops; /* sorted by ext after the scan */
    size_t n_ops, cap_ops;
    struct names names;
    uint64_t events, kernels;
    /* the send pass */
    int fd;
    struct proto_reader reader;
    msgpack_sbuffer batch;
    msgpack_packer bpk;
    size_t n_batch;
    struct names sent_ops; /* op names already defined on the connection */
    struct names launch;   /* kernel names whose launcher is in the metadata */
    uint64_t sent;
    int err;
    char errmsg[256];
    /* progress */
    uint64_t bytes, total_bytes;
    struct timespec t0, last;
};

static int64_t mono_ms(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000 + t->tv_nsec / 1000000;
}

/* µs as JSON number text (e.g. "4458676983543.183") → ns, exactly; INT64_MIN on failure. */
static int64_t us_to_ns(const char *s, size_t n)
{
    char buf[64];
    int64_t ip = 0, frac = 0;
    int digits = 0;
    size_t i = 0;
    bool neg = false;

    if (n == 0 || n >= sizeof(buf))
        return INT64_MIN;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strpbrk(buf, "eE") != NULL) {
        double d = strtod(buf, NULL) * 1000.0;
        return d >= -9.2e18 && d <= 9.2e18 ? (int64_t)(d >= 0 ? d + 0.5 : d - 0.5) : INT64_MIN;
    }
    if (buf[0] == '-')
        neg = true, i++;
    for (; i < n && isdigit((unsigned char)buf[i]); i++) {
        if (ip > (INT64_MAX - 9) / 10 / 1000)
            return INT64_MIN;
        ip = ip * 10 + (buf[i] - '0');
    }
    if (i < n && buf[i] == '.')
        for (i++; i < n && isdigit((unsigned char)buf[i]); i++, digits++) {
            if (digits < 3)
                frac = frac * 10 + (buf[i] - '0');
            else if (digits == 3 && buf[i] >= '5')
                frac++; /* round the 4th decimal, half up */
        }
    for (int k = digits; k < 3; k++)
        frac *= 10;
    return (neg ? -1 : 1) * (ip * 1000 + frac);
}

static int64_t parse_int(const char *s, size_t n)
{
    char buf[32];
    char *end;
    long long v;

    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtoll(buf, &end, 10);
    return errno || *end ? -1 : v; /* beyond INT64 range or not an integer: unknown */
}

static void copy_str(char *dst, size_t cap, const unsigned char *s, size_t n)
{
    /* Cut at cap - 1 bytes without splitting a UTF-8 sequence. */
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && (s[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static enum frame top(const struct imp *x)
{
    return x->depth > 0 ? x->stack[x->depth - 1] : F_SKIP;
}

static int push(struct imp *x, enum frame f)
{
    if (x->depth >= (int)(sizeof(x->stack) / sizeof(x->stack[0])))
        return 0; /* deeper than any Kineto file: stop with a parse error */
    x->stack[x->depth++] = f;
    return 1;
}

/* ---- metadata ------------------------------------------------------------------ */

static void meta_add(struct imp *x, const char *key, const char *v, size_t n, bool is_str,
                     bool is_num)
{
    if (x->send_pass || n > NAME_MAX_ || strlen(key) > NAME_MAX_ || x->n_meta >= 4096)
        return;
    if (x->n_meta == x->cap_meta) {
        size_t cap = x->cap_meta ? x->cap_meta * 2 : 64;
        struct kv *p = realloc(x->meta, cap * sizeof(*p));
        if (p == NULL)
            return;
        x->meta = p;
        x->cap_meta = cap;
    }
    struct kv *kv = &x->meta[x->n_meta];
    kv->key = strdup(key);
    kv->value = strndup(v, n);
    kv->is_str = is_str;
    kv->is_num = is_num;
    if (kv->key != NULL && kv->value != NULL)
        x->n_meta++;
}

/* A scalar inside distributedInfo or one deviceProperties map. */
static void meta_scalar(struct imp *x, const char *v, size_t n, bool is_str, bool is_num)
{
    char key[192];

    if (top(x) == F_DIST) {
        snprintf(key, sizeof(key), "distributedInfo.%s", x->key);
        if (strcmp(x->key, "rank") == 0 && is_num)
            x->rank = parse_int(v, n);
        if (strcmp(x->key, "world_size") == 0 && is_num)
            x->world = parse_int(v, n);
    } else {
        snprintf(key, sizeof(key), "deviceProperties.%d.%s", x->prop_index, x->key);
    }
    meta_add(x, key, v, n, is_str, is_num);
}

/* ---- events ---------------------------------------------------------------------- */

static void event_reset(struct event *e)
{
    e->ph[0] = e->cat[0] = e->name[0] = '\0';
    e->ts = e->dur = 0;
    e->device = e->ext = e->tid = -1;
    e->has_ts = e->has_dur = false;
    e->n_inputs = 0;
}

static void event_scalar(struct imp *x, const unsigned char *s, size_t n, bool is_str)
{
    struct event *e = &x->ev;

    if (top(x) == F_EVENT) {
        if (strcmp(x->key, "ph") == 0 && is_str)
            copy_str(e->ph, sizeof(e->ph), s, n);
        else if (strcmp(x->key, "cat") == 0 && is_str)
            copy_str(e->cat, sizeof(e->cat), s, n);
        else if (strcmp(x->key, "name") == 0 && is_str)
            copy_str(e->name, sizeof(e->name), s, n);
        else if (strcmp(x->key, "ts") == 0 && !is_str)
            e->ts = us_to_ns((const char *)s, n), e->has_ts = e->ts != INT64_MIN;
        else if (strcmp(x->key, "dur") == 0 && !is_str)
            e->dur = us_to_ns((const char *)s, n), e->has_dur = e->dur != INT64_MIN;
        else if (strcmp(x->key, "tid") == 0)
            e->tid = is_str ? (int64_t)fnv((const char *)s, n) : parse_int((const char *)s, n);
    } else if (top(x) == F_ARGS && !is_str) {
        if (strcmp(x->key, "device") == 0)
            e->device = parse_int((const char *)s, n);
        else if (strcmp(x->key, "External id") == 0)
            e->ext = parse_int((const char *)s, n);
    } else if (top(x) == F_DIM && !is_str && e->n_inputs > 0) {
        uint32_t k = e->n_inputs - 1;
        int64_t v = parse_int((const char *)s, n);
        if (v >= 0 && e->dim_n[k] < PROTO_MAX_DIMS)
            e->dim_v[k][e->dim_n[k]++] = (uint64_t)v;
    }
}

/* Packs the event's Input Dims (skipping non-integer dims) as a msgpack array of arrays. */
static char *event_dims(const struct event *e, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (e->n_inputs == 0)
        return NULL;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, e->n_inputs);
    for (uint32_t i = 0; i < e->n_inputs; i++)
        proto_pack_shape(&pk, e->dim_v[i], e->dim_n[i]);
    *len = sb.size;
    return sb.data;
}

static bool is_gpu_event(const struct event *e)
{
    return strcmp(e->cat, "kernel") == 0 || strcmp(e->cat, "gpu_memcpy") == 0 ||
           strcmp(e->cat, "gpu_memset") == 0;
}

static void scan_event(struct imp *x)
{
    struct event *e = &x->ev;

    if (strcmp(e->ph, "X") != 0 || !e->has_ts)
        return;
    x->events++;
    if (strncmp(e->name, "ProfilerStep#", 13) == 0 && e->has_dur) {
        if (x->n_steps == x->cap_steps) {
            size_t cap = x->cap_steps ? x->cap_steps * 2 : 16;
            struct step_span *p = realloc(x->steps, cap * sizeof(*p));
            if (p == NULL)
                return;
            x->steps = p;
            x->cap_steps = cap;
        }
        x->steps[x->n_steps++] =
            (struct step_span){e->ts, e->ts + e->dur, strtoll(e->name + 13, NULL, 10)};
        return;
    }
    if (is_gpu_event(e)) {
        x->kernels++;
        return;
    }
    /* CPU ops, and user annotations (gloo:all_reduce, ...) for --cpu-ops */
    if (strcmp(e->cat, "cpu_op") != 0 && strcmp(e->cat, "user_annotation") != 0)
        return;
    if (x->n_ops == x->cap_ops) {
        size_t cap = x->cap_ops ? x->cap_ops * 2 : 1024;
        struct cpu_op *p = realloc(x->ops, cap * sizeof(*p));
        if (p == NULL)
            return;
        x->ops = p;
        x->cap_ops = cap;
    }
    struct cpu_op *op = &x->ops[x->n_ops];
    op->ext = e->ext;
    op->ts = e->ts;
    op->dur = e->has_dur ? e->dur : 0;
    op->tid = e->tid;
    op->name = names_get(&x->names, e->name);
    op->dims = event_dims(e, &op->dims_len);
    if (op->name != UINT32_MAX)
        x->n_ops++;
}

/* ---- the protocol -------------------------------------------------------------- */

static int send_buf(struct imp *x, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(x->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(x->errmsg, sizeof(x->errmsg), "the daemon closed the connection: %s",
                     strerror(errno));
            return x->err = -EPIPE;
        }
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int send_packed(struct imp *x, msgpack_sbuffer *sb)
{
    int rc = send_buf(x, sb->data, sb->size);

    msgpack_sbuffer_clear(sb);
    return rc;
}

/* Waits for one reply; fills *m. 0, or -EPROTO with the daemon's message. */
static int recv_reply(struct imp *x, struct proto_msg *m)
{
    struct proto_error perr;
    int rc;

    while ((rc = proto_reader_next(&x->reader, m, &perr)) == 0) {
        char *buf = proto_reader_buffer(&x->reader, 4096);
        ssize_t n = buf ? read(x->fd, buf, 4096) : -1;
        if (n <= 0) {
            snprintf(x->errmsg, sizeof(x->errmsg), "the daemon closed the connection");
            return x->err = -ECONNRESET;
        }
        proto_reader_commit(&x->reader, (size_t)n);
    }
    if (rc < 0 || m->type == PROTO_ERROR) {
        snprintf(x->errmsg, sizeof(x->errmsg), "the daemon refused: %s: %s",
                 rc < 0 ? perr.code : m->u.error.code,
                 rc < 0 ? perr.message : (m->u.error.message ? m->u.error.message : ""));
        if (rc > 0)
            proto_msg_free(m);
        return x->err = -EPROTO;
    }
    return 0;
}

static int flush_batch(struct imp *x)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (x->n_batch == 0)
        return 0;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, x->n_batch);
    msgpack_sbuffer_write(&sb, x->batch.data, x->batch.size);
    rc = send_packed(x, &sb);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_clear(&x->batch);
    x->sent += x->n_batch;
    x->n_batch = 0;
    return rc;
}

/* The connection-local op id of a name (defining it first); 0 on failure. */
static uint32_t op_id(struct imp *x, const char *name, const char *category)
{
    size_t before = x->sent_ops.n;
    uint32_t i = names_get(&x->sent_ops, name);
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (i == UINT32_MAX)
        return 0;
    if (x->sent_ops.n > before) {
        struct proto_opdef def = {.id = i + 1, .name = (char *)name, .category = (char *)category};
        /* the batch so far may use earlier ids only: it can go after the definition */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        proto_pack_ops(&pk, &def, 1);
        send_packed(x, &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    return i + 1;
}

static const struct cpu_op *find_op(const struct imp *x, int64_t ext)
{
    size_t lo = 0, hi = x->n_ops;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x->ops[mid].ext < ext)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->n_ops && x->ops[lo].ext == ext ? &x->ops[lo] : NULL;
}

static int64_t step_of(const struct imp *x, int64_t ts)
{
    for (size_t i = 0; i < x->n_steps; i++)
        if (ts >= x->steps[i].begin && ts < x->steps[i].end)
            return x->steps[i].n;
    return 0;
}

static void pack_entry(struct imp *x, uint32_t op, int64_t step, int64_t ts, int64_t dur,
                       const char *dims, size_t dims_len, const char *device)
{
    msgpack_pack_array(&x->bpk, 9);
    msgpack_pack_uint64(&x->bpk, (uint64_t)(step > 0 ? step : 0));
    msgpack_pack_uint32(&x->bpk, op);
    msgpack_pack_uint64(&x->bpk, (uint64_t)(ts > 0 ? ts : 0));
    msgpack_pack_uint64(&x->bpk, (uint64_t)(dur > 0 ? dur : 0));
    msgpack_pack_nil(&x->bpk);
    msgpack_pack_nil(&x->bpk);
    msgpack_pack_nil(&x->bpk);
    if (dims != NULL)
        msgpack_sbuffer_write(&x->batch, dims, dims_len);
    else
        msgpack_pack_nil(&x->bpk);
    proto_pack_str(&x->bpk, device);
    if (++x->n_batch == BATCH)
        flush_batch(x);
}

/* Records which CPU op launched a kernel name, once per name, as process metadata. */
static void note_launcher(struct imp *x, const char *kernel, const char *cpu_op)
{
    size_t before = x->launch.n;
    char key[NAME_MAX_ + 1];
    struct proto_kv kv;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (names_get(&x->launch, kernel) == UINT32_MAX || x->launch.n == before || x->launch.n > 4096)
        return;
    snprintf(key, sizeof(key), "launch:%s", kernel);
    kv = (struct proto_kv){.key = key, .type = PROTO_V_STR, .v.s = (char *)cpu_op};
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_meta(&pk, &kv, 1);
    send_packed(x, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static void send_event(struct imp *x)
{
    struct event *e = &x->ev;
    const struct cpu_op *launcher;
    char device[48];
    const char *category;
    uint32_t op;

    if (strcmp(e->ph, "X") != 0 || !e->has_ts || !is_gpu_event(e) || x->err)
        return;
    launcher = e->ext >= 0 ? find_op(x, e->ext) : NULL;
    if (e->device >= 0)
        snprintf(device, sizeof(device), "gpu:%" PRId64, e->device);
    else
        snprintf(device, sizeof(device), "gpu");
    /* memcpy/memset are memory; kernels are classified by the daemon's name rule
     * (nccl, allreduce, broadcast, send/recv, ... are communication) */
    category = strcmp(e->cat, "kernel") != 0 ? "memory" : NULL;
    if (e->name[0] == '\0' || (op = op_id(x, e->name, category)) == 0)
        return;
    if (launcher != NULL)
        note_launcher(x, e->name, x->names.v[launcher->name]);
    pack_entry(x, op, step_of(x, launcher ? launcher->ts : e->ts), e->ts, e->has_dur ? e->dur : 0,
               launcher ? launcher->dims : NULL, launcher ? launcher->dims_len : 0, device);
}

/* ---- yajl callbacks -------------------------------------------------------------- */

static int on_scalar(void *ctx, const unsigned char *s, size_t n, bool is_str, bool is_num)
{
    struct imp *x = ctx;

    switch (top(x)) {
    case F_EVENT:
    case F_ARGS:
    case F_DIM:
        event_scalar(x, s, n, is_str);
        break;
    case F_DIST:
    case F_PROP:
        meta_scalar(x, (const char *)s, n, is_str, is_num);
        break;
    default:
        break;
    }
    return 1;
}

static int on_null(void *ctx)
{
    return on_scalar(ctx, (const unsigned char *)"null", 4, false, false);
}

static int on_bool(void *ctx, int b)
{
    return b ? on_scalar(ctx, (const unsigned char *)"true", 4, false, false)
             : on_scalar(ctx, (const unsigned char *)"false", 5, false, false);
}

static int on_number(void *ctx, const char *s, size_t n)
{
    return on_scalar(ctx, (const unsigned char *)s, n, false, true);
}

static int on_string(void *ctx, const unsigned char *s, size_t n)
{
    return on_scalar(ctx, s, n, true, false);
}

static int on_map_key(void *ctx, const unsigned char *s, size_t n)
{
    struct imp *x = ctx;

    copy_str(x->key, sizeof(x->key), s, n);
    return 1;
}

static int on_start_map(void *ctx)
{
    struct imp *x = ctx;
    enum frame t = top(x), f = F_SKIP;

    if (x->depth == 0)
        f = F_TOP;
    else if (t == F_TOP && strcmp(x->key, "distributedInfo") == 0)
        f = F_DIST;
    else if (t == F_EVENTS)
        f = F_EVENT, event_reset(&x->ev);
    else if (t == F_EVENT && strcmp(x->key, "args") == 0)
        f = F_ARGS;
    else if (t == F_PROPS)
        f = F_PROP;
    x->key[0] = '\0';
    return push(x, f);
}

static int on_end_map(void *ctx)
{
    struct imp *x = ctx;
    enum frame t = top(x);

    x->depth--;
    if (t == F_EVENT) {
        if (x->send_pass)
            send_event(x);
        else
            scan_event(x);
    } else if (t == F_PROP) {
        x->prop_index++;
    }
    return x->err == 0;
}

static int on_start_array(void *ctx)
{
    struct imp *x = ctx;
    enum frame t = top(x), f = F_SKIP;

    if (t == F_TOP && strcmp(x->key, "traceEvents") == 0)
        f = F_EVENTS;
    else if (t == F_TOP && strcmp(x->key, "deviceProperties") == 0)
        f = F_PROPS;
    else if (t == F_ARGS && strcmp(x->key, "Input Dims") == 0)
        f = F_DIMS, x->ev.n_inputs = 0;
    else if (t == F_DIMS && x->ev.n_inputs < PROTO_MAX_INPUTS)
        f = F_DIM, x->ev.dim_n[x->ev.n_inputs++] = 0;
    return push(x, f);
}

static int on_end_array(void *ctx)
{
    struct imp *x = ctx;

    x->depth--;
    return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_bool,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end_map,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end_array,
};

/* ---- reading a file ------------------------------------------------------------- */

static void progress(struct imp *x, bool done)
{
    struct timespec now;
    double s;

    if (x->quiet || !isatty(2))
        return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!done && mono_ms(&now) - mono_ms(&x->last) < 100)
        return;
    x->last = now;
    s = (double)(mono_ms(&now) - mono_ms(&x->t0)) / 1000.0;
    fprintf(stderr, "\r%s %s: %5.1f%% of %.1f MiB, %.0f events/s%s",
            x->send_pass ? "sending" : "reading", x->path,
            x->total_bytes ? 100.0 * (double)x->bytes / (double)x->total_bytes : 0.0,
            (double)x->total_bytes / 1048576.0,
            s > 0 ? (double)(x->send_pass ? x->sent : x->events) / s : 0.0, done ? "\n" : "");
}

/* One pass over the file. 0, or -1 with the reason (and byte offset) in errmsg. */
static int parse_file(struct imp *x)
{
    static unsigned char buf[READ_BUF];
    gzFile gz = gzopen(x->path, "rb");
    yajl_handle h;
    uint64_t offset = 0;
    int n, rc = 0;

    if (gz == NULL) {
        snprintf(x->errmsg, sizeof(x->errmsg), "cannot open: %s", strerror(errno));
        return -1;
    }
    h = yajl_alloc(&callbacks, NULL, x);
    x->depth = 0;
    x->bytes = 0;
    clock_gettime(CLOCK_MONOTONIC, &x->t0);
    while ((n = gzread(gz, buf, sizeof(buf))) > 0) {
        x->bytes = (uint64_t)gzoffset(gz);
        if (yajl_parse(h, buf, (size_t)n) != yajl_status_ok) {
            offset += yajl_get_bytes_consumed(h);
            rc = -1;
            break;
        }
        offset += (uint64_t)n;
        progress(x, false);
    }
    if (rc == 0 && n < 0) {
        int zerr;
        snprintf(x->errmsg, sizeof(x->errmsg), "cannot read (byte %" PRIu64 "): %s", offset,
                 gzerror(gz, &zerr));
        rc = -2;
    } else if (rc == 0 && yajl_complete_parse(h) != yajl_status_ok) {
        rc = -1;
    }
    if (rc == -1 && x->err == 0) {
        unsigned char *msg = yajl_get_error(h, 0, NULL, 0);
        snprintf(x->errmsg, sizeof(x->errmsg), "not valid JSON at byte %" PRIu64 ": %s", offset,
                 (const char *)msg);
        yajl_free_error(h, msg);
    }
    progress(x, true);
    yajl_free(h);
    gzclose(gz);
    return rc < 0 ? -1 : 0;
}

static int cmp_ext(const void *a, const void *b)
{
    int64_t x = ((const struct cpu_op *)a)->ext, y = ((const struct cpu_op *)b)->ext;

    return (x > y) - (x < y);
}

static int cmp_tid_ts(const void *a, const void *b)
{
    const struct cpu_op *x = a, *y = b;

    if (x->tid != y->tid)
        return (x->tid > y->tid) - (x->tid < y->tid);
    if (x->ts != y->ts)
        return (x->ts > y->ts) - (x->ts < y->ts);
    return (y->dur > x->dur) - (y->dur < x->dur); /* the enclosing (longer) one first */
}

/*
 * --cpu-ops: each CPU op's self time, its duration minus the CPU ops nested
 * directly in it on the same thread, so that no time is counted twice.
 */
static void send_cpu_ops(struct imp *x)
{
    struct open_op {
        size_t i;
        int64_t end, child;
    } stack[256];
    int sp = 0;

    qsort(x->ops, x->n_ops, sizeof(*x->ops), cmp_tid_ts);
    for (size_t i = 0; i <= x->n_ops && !x->err; i++) {
        const struct cpu_op *op = i < x->n_ops ? &x->ops[i] : NULL;
        /* close the ops that ended before this one starts (or on another thread) */
        while (sp > 0 && (op == NULL || op->tid != x->ops[stack[sp - 1].i].tid ||
                          op->ts >= stack[sp - 1].end)) {
            const struct cpu_op *done = &x->ops[stack[--sp].i];
            int64_t self = done->dur - stack[sp].child;
            uint32_t id = op_id(x, x->names.v[done->name], NULL);
            if (id != 0)
                pack_entry(x, id, step_of(x, done->ts), done->ts, self > 0 ? self : 0, done->dims,
                           done->dims_len, "cpu");
        }
        if (op == NULL)
            break;
        if (sp > 0)
            stack[sp - 1].child += op->dur;
        if (sp < 256)
            stack[sp++] = (struct open_op){i, op->ts + op->dur, 0};
    }
}

/* ---- one file ----------------------------------------------------------------------- */

static void imp_free(struct imp *x)
{
    for (size_t i = 0; i < x->n_meta; i++) {
        free(x->meta[i].key);
        free(x->meta[i].value);
    }
    for (size_t i = 0; i < x->n_ops; i++)
        free(x->ops[i].dims);
    free(x->meta);
    free(x->steps);
    free(x->ops);
    names_free(&x->names);
    names_free(&x->sent_ops);
    names_free(&x->launch);
    msgpack_sbuffer_destroy(&x->batch);
    if (x->fd >= 0)
        close(x->fd);
    proto_reader_deinit(&x->reader);
}

static int send_meta(struct imp *x)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < x->n_meta && x->err == 0; i++) {
        struct kv *m = &x->meta[i];
        struct proto_kv kv = {.key = m->key, .type = PROTO_V_STR, .v.s = m->value};
        if (m->is_num && strpbrk(m->value, ".eE") == NULL &&
            parse_int(m->value, strlen(m->value)) >= 0)
            kv.type = PROTO_V_INT, kv.v.i = parse_int(m->value, strlen(m->value));
        else if (m->is_num)
            kv.type = PROTO_V_FLOAT, kv.v.f = strtod(m->value, NULL);
        proto_pack_meta(&pk, &kv, 1);
        send_packed(x, &sb);
    }
    msgpack_sbuffer_destroy(&sb);
    return x->err;
}

static int hello(struct imp *x, const char *sock, const char *session, int64_t rank, int64_t world,
                 long long *session_id)
{
    struct cli_conn conn = {.fd = -1};
    char host[256] = "";
    struct proto_hello h = {.proto = 1,
                            .session = (char *)session,
                            .rank = rank,
                            .world = world,
                            .pid = getpid(),
                            .host = host};
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    gethostname(host, sizeof(host) - 1);
    if ((rc = cli_conn_open(&conn, sock)) < 0) {
        snprintf(x->errmsg, sizeof(x->errmsg), "no daemon at %s (is tracectld running?)", sock);
        return rc;
    }
    /* the connection is ours from here: its fd, with this import's own reader */
    x->fd = conn.fd;
    conn.fd = -1;
    cli_conn_close(&conn);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_hello(&pk, &h);
    rc = send_packed(x, &sb);
    msgpack_sbuffer_destroy(&sb);
    if (rc < 0 || (rc = recv_reply(x, &m)) < 0)
        return rc;
    *session_id = m.type == PROTO_WELCOME ? m.u.welcome.session_id : -1;
    proto_msg_free(&m);
    return 0;
}

/* flush → ack, then bye. Returns 0 or a negative errno. */
static int finish(struct imp *x)
{
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (flush_batch(x) < 0)
        return x->err;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_flush(&pk, 1);
    rc = send_packed(x, &sb);
    if (rc == 0 && (rc = recv_reply(x, &m)) == 0) {
        if (m.type != PROTO_ACK || m.u.ack.stored != x->sent) {
            snprintf(x->errmsg, sizeof(x->errmsg), "the daemon stored %" PRIu64 " of %" PRIu64,
                     m.type == PROTO_ACK ? m.u.ack.stored : 0, x->sent);
            rc = x->err = -EIO;
        }
        proto_msg_free(&m);
    }
    if (rc == 0) {
        proto_pack_bye(&pk, 0);
        rc = send_packed(x, &sb);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

struct import_opts {
    const char *session;
    int64_t rank;
    bool cpu_ops, quiet;
};

static int import_file(const char *sock, const char *path, const struct import_opts *o,
                       int64_t position, int64_t n_files)
{
    struct imp x = {
        .path = path, .cpu_ops = o->cpu_ops, .quiet = o->quiet, .fd = -1, .rank = -1, .world = -1};
    long long session_id = -1;
    struct stat st;
    int rc;

    msgpack_sbuffer_init(&x.batch);
    msgpack_packer_init(&x.bpk, &x.batch, msgpack_sbuffer_write);
    proto_reader_init(&x.reader, 0);
    if (stat(path, &st) == 0)
        x.total_bytes = (uint64_t)st.st_size;
    /* pass 1: the whole file must parse before anything is sent */
    if (parse_file(&x) < 0) {
        cli_error("import: %s: %s", path, x.errmsg);
        imp_free(&x);
        return CLI_EXIT_ERROR;
    }
    qsort(x.ops, x.n_ops, sizeof(*x.ops), cmp_ext);
    int64_t rank = x.rank >= 0 ? x.rank : (o->rank >= 0 ? o->rank + position : position);
    int64_t world = x.world > 0 ? x.world : n_files;
    if ((rc = hello(&x, sock, o->session, rank, world, &session_id)) < 0) {
        cli_error("import: %s: %s", path, x.errmsg);
        imp_free(&x);
        return rc == -ENOENT || rc == -ECONNREFUSED ? CLI_EXIT_NO_DAEMON : CLI_EXIT_ERROR;
    }
    send_meta(&x);
    /* pass 2: stream the entries */
    x.send_pass = true;
    if (x.err == 0 && parse_file(&x) < 0 && x.err == 0)
        x.err = -EIO;
    if (x.err == 0 && x.cpu_ops)
        send_cpu_ops(&x);
    if (x.err == 0)
        finish(&x);
    if (x.err != 0) {
        cli_error("import: %s: %s", path, x.errmsg);
        imp_free(&x);
        return CLI_EXIT_ERROR;
    }
    if (!x.quiet)
        fprintf(stderr, "%s: rank %" PRId64 ", %" PRIu64 " entries into session %lld (%s)\n", path,
                rank, x.sent, session_id, o->session);
    imp_free(&x);
    return CLI_EXIT_OK;
}

/* The default session name: the first file's base name without .gz and .json. */
static void default_session(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/');
    char *dot;

    snprintf(buf, len, "%s", base ? base + 1 : path);
    if ((dot = strstr(buf, ".json")) != NULL)
        *dot = '\0';
    if (buf[0] == '\0')
        snprintf(buf, len, "import");
}

int cli_import_run(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_LONGOPTS,
        {"session", required_argument, NULL, 's'},
        {"rank", required_argument, NULL, 'r'},
        {"cpu-ops", no_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    struct import_opts o = {.rank = -1};
    char session[PROTO_MAX_SESSION + 1], sockbuf[512];
    const char *sock;
    char *end;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "s:r:q", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            o.session = optarg;
            break;
        case 'r':
            o.rank = strtoll(optarg, &end, 10);
            if (*end || o.rank < 0 || end == optarg) {
                cli_error("import: --rank wants a non-negative integer, not '%s'", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        case 'c':
            o.cpu_ops = true;
            break;
        case 'q':
            o.quiet = true;
            break;
        default:
            if ((rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
                return rc;
            break;
        }
    }
    if (optind >= argc) {
        cli_error("import: which files? (see 'tracectl import --help')");
        return CLI_EXIT_USAGE;
    }
    if (o.session == NULL) {
        default_session(argv[optind], session, sizeof(session));
        o.session = session;
    }
    sock = cli_conn_path(ctx->socket, sockbuf, sizeof(sockbuf));
    for (int i = optind; i < argc; i++) {
        rc = import_file(sock, argv[i], &o, i - optind, argc - optind);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    return CLI_EXIT_OK;
}
