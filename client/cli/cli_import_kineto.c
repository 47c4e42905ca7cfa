/*
 * cli_import_kineto.c — see cli_import_kineto.h.
 */
#include "cli_import_kineto.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <msgpack.h>
#include <yajl/yajl_parse.h>
#include <zlib.h>

#include "cli_import_cut.h"
#include "proto_class.h"

#define KINETO_NAME_MAX   PROTO_MAX_NAME /* longer names are cut visibly: see name_cut() */
#define KINETO_READ_BUF   (256u << 10)   /* text read at a time (and the first buffer's size) */
#define KINETO_DEVICE_PID 1024           /* a device event's pid below this is its device's index */

struct kineto_op {
    int64_t ext, ts, dur, tid;
    uint32_t name, dims; /* indexes into names and dims; dims INTERN_NONE: no Input Dims */
    bool annotation;     /* a user_annotation, not a cpu_op */
};

struct kineto_launch {
    int64_t corr, ext, ts, tid;
    uint32_t op; /* index + 1 into ops of the launching CPU op; 0: unknown */
};

struct kineto_ext {
    int64_t ext;
    uint32_t op; /* index into ops */
};

struct kineto_step {
    int64_t begin, end, n;
};

enum frame {
    F_TOP,    /* the top-level map */
    F_EVENTS, /* traceEvents, or a top-level array (Chrome's JSON Array Format) */
    F_EVENT,  /* one event */
    F_ARGS,   /* its args */
    F_DIMS,   /* args["Input Dims"] */
    F_DIM,    /* one input's dims */
    F_DIST,   /* distributedInfo */
    F_PROPS,  /* deviceProperties */
    F_PROP,   /* one device's properties */
    F_SKIP,   /* anything else */
};

/*
 * K_KERNEL and K_MEMORY are the device events that become entries; K_HOST
 * are the other categories of the PyTorch profiler (not imported); K_OTHER
 * is a category the importer does not know (counted as skipped).
 */
enum kind { K_OTHER, K_KERNEL, K_MEMORY, K_CPU_OP, K_ANNOTATION, K_LAUNCH, K_HOST };

/* The event being read. */
struct event {
    char ph[4], cat[KINETO_CAT_MAX];
    char name[KINETO_NAME_MAX + 1];
    int64_t ts, dur, tid, pid, device, ext, corr, bytes, stream;
    bool has_ts, has_dur;
    bool bad_time;     /* a ts or dur that is not a number of ns in int64 */
    uint32_t n_inputs; /* Input Dims: at most PROTO_MAX_INPUTS, each at most PROTO_MAX_DIMS */
    uint64_t dim_v[PROTO_MAX_INPUTS][PROTO_MAX_DIMS];
    uint32_t dim_n[PROTO_MAX_INPUTS];
};

struct kineto_parse {
    struct kineto *k;
    bool replay, cpu_ops;
    kineto_emit_fn emit;
    void *emit_arg;
    int emit_rc; /* the first error emit returned */
    bool oom;    /* a table could not grow */
    enum frame stack[KINETO_MAX_DEPTH];
    int depth; /* stack[depth - 1] is the current container */
    char key[128];
    int prop_index;
    /* what the file is, for the scan's verdict */
    bool top_map;           /* the JSON text is a map (else an array or a lone value) */
    bool has_events;        /* a traceEvents array, or the top-level array */
    bool has_nodes;         /* a top-level "nodes" array: a PyTorch execution trace */
    uint64_t values;        /* elements of the events array */
    uint64_t arrays;        /* ... that are arrays */
    uint64_t maps;          /* ... that are maps (events) */
    uint64_t kineto_events; /* ... of a category of the PyTorch profiler */
    struct event ev;
    bool too_deep;         /* push() refused a container: KINETO_MAX_DEPTH */
    struct import_cut cut; /* token boundaries of the text read */
    uint64_t bytes;        /* compressed bytes read, for progress */
    struct timespec last;
};

/* ---- numbers ------------------------------------------------------------------- */

/* µs as JSON number text (e.g. "4458676983543.1835") → ns, rounded half away from zero. */
static bool us_to_ns(const char *s, size_t n, int64_t *out)
{
    char buf[64];
    int64_t ip = 0, frac = 0;
    int digits = 0;
    size_t i = 0;
    bool neg = false;

    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strpbrk(buf, "eE") != NULL) { /* exponent form: rare, a double is exact enough */
        double d = strtod(buf, NULL) * 1000.0;
        if (!(d >= -9.2e18 && d <= 9.2e18))
            return false;
        *out = (int64_t)(d >= 0 ? d + 0.5 : d - 0.5);
        return true;
    }
    if (buf[0] == '-')
        neg = true, i++;
    for (; i < n && isdigit((unsigned char)buf[i]); i++) {
        if (ip > (INT64_MAX - 9) / 10 / 1000 - 1)
            return false;
        ip = ip * 10 + (buf[i] - '0');
    }
    if (i < n && buf[i] == '.')
        for (i++; i < n && isdigit((unsigned char)buf[i]); i++, digits++) {
            if (digits < 3)
                frac = frac * 10 + (buf[i] - '0');
            else if (digits == 3 && buf[i] >= '5')
                frac++; /* the 4th decimal rounds the ns */
        }
    for (int d = digits; d < 3; d++)
        frac *= 10;
    *out = (neg ? -1 : 1) * (ip * 1000 + frac);
    return true;
}

/* An integer's text → *out; false when not an integer or outside int64. */
static bool parse_int(const char *s, size_t n, int64_t *out)
{
    char buf[32], *end;
    long long v;

    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static int64_t int_or(const char *s, size_t n, int64_t dflt)
{
    int64_t v;

    return parse_int(s, n, &v) ? v : dflt;
}

/* Copies s[0..n) into dst (cap bytes), cut on a UTF-8 boundary. */
static void copy_str(char *dst, size_t cap, const unsigned char *s, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && (s[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/*
 * A name longer than the protocol allows (s[0..n), n > KINETO_NAME_MAX) cut
 * visibly, into dst (KINETO_NAME_MAX + 1 bytes): its first bytes (cut on a
 * UTF-8 boundary), then "…#" and the top 32 bits of the 64-bit FNV-1a hash
 * of the whole name in 8 lower-case hex digits, KINETO_NAME_MAX bytes in
 * all. Two long names that share their first ~1,000 bytes stay two names.
 */
static void name_cut(char *dst, const unsigned char *s, size_t n)
{
    char tail[16];
    size_t keep;

    snprintf(tail, sizeof(tail), "\xe2\x80\xa6#%08" PRIx32, (uint32_t)(map_hash_bytes(s, n) >> 32));
    keep = KINETO_NAME_MAX - strlen(tail);
    while (keep > 0 && (s[keep] & 0xc0) == 0x80)
        keep--;
    memcpy(dst, s, keep);
    memcpy(dst + keep, tail, strlen(tail) + 1);
}

/* Grows an array of elements of size sz to hold one more. false when out of memory. */
static bool grow(void **v, size_t *cap, size_t n, size_t sz)
{
    size_t c = *cap ? *cap * 2 : 256;
    void *p;

    if (n < *cap)
        return true;
    if ((p = realloc(*v, c * sz)) == NULL)
        return false;
    *v = p;
    *cap = c;
    return true;
}

/* ---- categories ---------------------------------------------------------------- */

const char *kineto_category(const char *name, bool memory)
{
    if (memory)
        return "memory";
    /* the strict words: a trace's every kernel and operator, "broadcast" in compute ones */
    return proto_class_comm(name, true) ? "comm" : "compute";
}

/*
 * The PyTorch profiler's event categories (libkineto's ActivityType names,
 * and the older Kernel/Memcpy/Memset/Operator/Runtime), compared without
 * case, with the device-name prefix of the device events.
 */
static const struct category {
    const char *cat;
    enum kind kind;
    const char *device; /* K_KERNEL, K_MEMORY: "gpu" → gpu:<N> */
} categories[] = {
    {"kernel", K_KERNEL, "gpu"},
    {"gpu_memcpy", K_MEMORY, "gpu"},
    {"gpu_memset", K_MEMORY, "gpu"},
    {"memcpy", K_MEMORY, "gpu"},
    {"memset", K_MEMORY, "gpu"},
    {"mtia_ccp_events", K_KERNEL, "mtia"}, /* what an MTIA device ran (newer: "kernel") */
    {"cpu_op", K_CPU_OP, NULL},
    {"operator", K_CPU_OP, NULL},
    {"user_annotation", K_ANNOTATION, NULL},
    {"cuda_runtime", K_LAUNCH, NULL},
    {"cuda_driver", K_LAUNCH, NULL},
    {"runtime", K_LAUNCH, NULL},
    {"driver", K_LAUNCH, NULL},
    {"hpu_op", K_LAUNCH, NULL},
    {"mtia_runtime", K_LAUNCH, NULL},
    {"xpu_runtime", K_LAUNCH, NULL},
    {"xpu_driver", K_LAUNCH, NULL},
    {"privateuse1_runtime", K_LAUNCH, NULL},
    {"privateuse1_driver", K_LAUNCH, NULL},
    /* Known and not imported: GPU-side annotations span kernels already counted; the rest
     * is host-side bookkeeping, or counters. */
    {"gpu_user_annotation", K_HOST, NULL},
    {"external_correlation", K_HOST, NULL},
    {"cpu_instant_event", K_HOST, NULL},
    {"python_function", K_HOST, NULL},
    {"overhead", K_HOST, NULL},
    {"cuda_sync", K_HOST, NULL},
    {"cuda_event", K_HOST, NULL},
    {"cuda_profiler_range", K_HOST, NULL},
    {"glow_runtime", K_HOST, NULL},
    {"mtia_insight", K_HOST, NULL},
    {"mtia_counters", K_HOST, NULL},
    {"mtia_workloadd", K_HOST, NULL},
    {"collective_comm", K_HOST, NULL},
    {"xpu_scope_profiler", K_HOST, NULL},
    {"trace", K_HOST, NULL}, /* the profiler's own span */
    {"ac2g", K_HOST, NULL},  /* flow arrows */
    {"fwdbwd", K_HOST, NULL},
};

static const struct category *event_category(const struct event *e)
{
    for (size_t i = 0; i < sizeof(categories) / sizeof(categories[0]); i++)
        if (strcasecmp(e->cat, categories[i].cat) == 0)
            return &categories[i];
    return NULL;
}

static enum kind event_kind(const struct event *e)
{
    const struct category *c = event_category(e);

    return c != NULL ? c->kind : K_OTHER;
}

/* ---- metadata ------------------------------------------------------------------ */

/* A scalar of distributedInfo or of one deviceProperties map, as a typed pair. */
static void meta_scalar(struct kineto_parse *p, const char *v, size_t n, int type)
{
    struct kineto *k = p->k;
    char key[192];
    struct proto_kv *kv;
    int64_t i;

    bool dist = p->stack[p->depth - 1] == F_DIST;
    bool integral =
        memchr(v, '.', n) == NULL && memchr(v, 'e', n) == NULL && memchr(v, 'E', n) == NULL;

    if (dist && strcmp(p->key, "rank") == 0 && type == 'n')
        k->rank = int_or(v, n, -1);
    if (dist && strcmp(p->key, "world_size") == 0 && type == 'n')
        k->world = int_or(v, n, -1);
    if (dist)
        snprintf(key, sizeof(key), "distributedInfo.%s", p->key);
    else
        snprintf(key, sizeof(key), "deviceProperties.%d.%s", p->prop_index, p->key);
    if (type == 'z' || n > PROTO_MAX_NAME || k->n_meta >= KINETO_MAX_META ||
        !grow((void **)&k->meta, &k->cap_meta, k->n_meta, sizeof(*k->meta)))
        return; /* null, a long value, or too many: left out */
    kv = &k->meta[k->n_meta];
    memset(kv, 0, sizeof(*kv));
    if (type == 'b') {
        kv->type = PROTO_V_BOOL, kv->v.b = n == 4;
    } else if (type == 'n' && integral && parse_int(v, n, &i)) {
        kv->type = PROTO_V_INT, kv->v.i = i;
    } else if (type == 'n' && integral) {
        kv->type = PROTO_V_STR; /* an integer beyond int64: kept exact, as text */
    } else if (type == 'n') {
        char buf[64];
        copy_str(buf, sizeof(buf), (const unsigned char *)v, n);
        kv->type = PROTO_V_FLOAT, kv->v.f = strtod(buf, NULL);
    } else {
        kv->type = PROTO_V_STR;
    }
    if (kv->type == PROTO_V_STR && (kv->v.s = strndup(v, n)) == NULL)
        return;
    if ((kv->key = strdup(key)) == NULL) {
        if (kv->type == PROTO_V_STR)
            free(kv->v.s);
        return;
    }
    k->n_meta++;
}

/* ---- the scan pass: what pass 2 will need ------------------------------------- */

/* Packs the event's Input Dims (non-integer dims were skipped) and interns the bytes. */
static uint32_t event_dims(struct kineto_parse *p)
{
    const struct event *e = &p->ev;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint32_t id;

    if (e->n_inputs == 0)
        return INTERN_NONE;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, e->n_inputs);
    for (uint32_t i = 0; i < e->n_inputs; i++)
        proto_pack_shape(&pk, e->dim_v[i], e->dim_n[i]);
    id = sb.data ? intern_get(&p->k->dims, sb.data, sb.size) : INTERN_NONE;
    msgpack_sbuffer_destroy(&sb);
    return id;
}

static void scan_op(struct kineto_parse *p, enum kind kind)
{
    struct kineto *k = p->k;
    const struct event *e = &p->ev;
    struct kineto_op *op;

    if (!grow((void **)&k->ops, &k->cap_ops, k->n_ops, sizeof(*k->ops))) {
        p->oom = true;
        return;
    }
    op = &k->ops[k->n_ops];
    *op = (struct kineto_op){.ext = e->ext,
                             .ts = e->ts,
                             .dur = e->has_dur && e->dur > 0 ? e->dur : 0,
                             .tid = e->tid,
                             .name = intern_str(&k->names, e->name),
                             .dims = event_dims(p),
                             .annotation = kind == K_ANNOTATION};
    if (op->name == INTERN_NONE)
        p->oom = true;
    else
        k->n_ops++;
}

/* A complete event of a category the importer does not know: counted by category. */
static void scan_skipped(struct kineto *k, const char *cat)
{
    size_t i;

    for (i = 0; i < k->n_skipped && strcmp(k->skipped[i].cat, cat) != 0; i++)
        ;
    if (i == k->n_skipped && i < KINETO_MAX_SKIPPED)
        snprintf(k->skipped[k->n_skipped++].cat, sizeof(k->skipped[i].cat), "%s", cat);
    if (i < k->n_skipped)
        k->skipped[i].n++;
    else
        k->skipped_other++;
}

/*
 * Whether a complete event's times can be imported: ts and dur (when given)
 * at least 0 and ts + dur within int64 ns. The others are skipped, counted
 * in out_of_range by the scan.
 */
static bool event_in_range(const struct event *e)
{
    return !e->bad_time && e->ts >= 0 &&
           (!e->has_dur || (e->dur >= 0 && e->dur <= INT64_MAX - e->ts));
}

static void scan_event(struct kineto_parse *p)
{
    struct kineto *k = p->k;
    const struct event *e = &p->ev;
    enum kind kind = event_kind(e);

    if (kind != K_OTHER)
        p->kineto_events++;
    /* CPU ops, annotations and launches carry the traced process's pid; device-side events
     * (kernels, GPU annotations, the ends of flows) their device's index */
    if ((kind == K_CPU_OP || kind == K_ANNOTATION || kind == K_LAUNCH) && k->pid < 0 && e->pid >= 0)
        k->pid = e->pid;
    if (strcmp(e->ph, "X") != 0 || !e->has_ts)
        return;
    if (!event_in_range(e)) {
        k->out_of_range++;
        return;
    }
    k->events++;
    if (kind == K_OTHER)
        scan_skipped(k, e->cat[0] ? e->cat : "(none)");
    if ((kind == K_CPU_OP || kind == K_ANNOTATION) && strncmp(e->name, "ProfilerStep#", 13) == 0) {
        if (!grow((void **)&k->steps, &k->cap_steps, k->n_steps, sizeof(*k->steps))) {
            p->oom = true;
            return;
        }
        k->steps[k->n_steps++] = (struct kineto_step){e->ts, e->ts + (e->has_dur ? e->dur : 0),
                                                      strtoll(e->name + 13, NULL, 10)};
    } else if (kind == K_CPU_OP || kind == K_ANNOTATION) {
        k->cpu_events++;
        scan_op(p, kind);
    } else if (kind == K_LAUNCH && e->corr >= 0) {
        if (!grow((void **)&k->launches, &k->cap_launches, k->n_launches, sizeof(*k->launches))) {
            p->oom = true;
            return;
        }
        k->launches[k->n_launches++] =
            (struct kineto_launch){.corr = e->corr, .ext = e->ext, .ts = e->ts, .tid = e->tid};
    } else if (kind == K_KERNEL || kind == K_MEMORY) {
        k->gpu_events++;
    }
}

/* ---- after the scan: indexes -------------------------------------------------- */

static int cmp_i64(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

static int cmp_op_tid_ts(const void *a, const void *b)
{
    const struct kineto_op *x = a, *y = b;
    int c = cmp_i64(x->tid, y->tid);

    if (c == 0)
        c = cmp_i64(x->ts, y->ts);
    if (c == 0)
        c = cmp_i64(y->dur, x->dur); /* the enclosing (longer) one first */
    /* the very same interval: the caller first, whose External id is the smaller */
    return c ? c : cmp_i64(x->ext, y->ext);
}

static int cmp_by_ext(const void *a, const void *b)
{
    return cmp_i64(((const struct kineto_ext *)a)->ext, ((const struct kineto_ext *)b)->ext);
}

static int cmp_launch_tid_ts(const void *a, const void *b)
{
    const struct kineto_launch *x = a, *y = b;
    int c = cmp_i64(x->tid, y->tid);

    return c ? c : cmp_i64(x->ts, y->ts);
}

static int cmp_launch_corr(const void *a, const void *b)
{
    return cmp_i64(((const struct kineto_launch *)a)->corr,
                   ((const struct kineto_launch *)b)->corr);
}

/* qsort with an empty (possibly NULL) array is undefined: skip it. */
static void sort(void *v, size_t n, size_t sz, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(v, n, sz, cmp);
}

static int cmp_step(const void *a, const void *b)
{
    return cmp_i64(((const struct kineto_step *)a)->begin, ((const struct kineto_step *)b)->begin);
}

/*
 * The first of n elements of `size` bytes, sorted by the int64_t at `off` in
 * each, whose key is `key`; NULL when none (or key < 0: no id).
 */
static const void *find_sorted(const void *base, size_t n, size_t size, size_t off, int64_t key)
{
    const char *b = base;
    size_t lo = 0, hi = n;
    int64_t v;

    if (key < 0)
        return NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        memcpy(&v, b + mid * size + off, sizeof(v));
        if (v < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return NULL;
    memcpy(&v, b + lo * size + off, sizeof(v));
    return v == key ? b + lo * size : NULL;
}

static const struct kineto_op *find_op(const struct kineto *k, int64_t ext)
{
    const struct kineto_ext *e = find_sorted(k->by_ext, k->n_by_ext, sizeof(*k->by_ext),
                                             offsetof(struct kineto_ext, ext), ext);

    return e != NULL ? &k->ops[e->op] : NULL;
}

static const struct kineto_launch *find_launch(const struct kineto *k, int64_t corr)
{
    return find_sorted(k->launches, k->n_launches, sizeof(*k->launches),
                       offsetof(struct kineto_launch, corr), corr);
}

/*
 * For each launch without a CPU op by External id: the innermost cpu_op of
 * its thread containing its start. One sweep over both lists sorted by
 * (thread, start) with a stack of the ops open at that time.
 */
static int resolve_enclosing(struct kineto *k)
{
    uint32_t *stack = NULL;
    size_t sp = 0, cap = 0, j = 0;
    int64_t tid = INT64_MIN;

    sort(k->launches, k->n_launches, sizeof(*k->launches), cmp_launch_tid_ts);
    for (size_t i = 0; i < k->n_launches; i++) {
        struct kineto_launch *l = &k->launches[i];
        if (l->tid != tid)
            sp = 0, tid = l->tid;
        for (; j < k->n_ops &&
               (k->ops[j].tid < tid || (k->ops[j].tid == tid && k->ops[j].ts <= l->ts));
             j++) {
            const struct kineto_op *o = &k->ops[j];
            if (o->tid != tid || o->annotation)
                continue;
            while (sp > 0 && k->ops[stack[sp - 1]].ts + k->ops[stack[sp - 1]].dur <= o->ts)
                sp--;
            if (!grow((void **)&stack, &cap, sp, sizeof(*stack))) {
                free(stack);
                return -1;
            }
            stack[sp++] = (uint32_t)j;
        }
        if (l->op != 0)
            continue;
        for (size_t s = sp; s > 0; s--) {
            const struct kineto_op *o = &k->ops[stack[s - 1]];
            if (o->ts + o->dur > l->ts) {
                l->op = stack[s - 1] + 1;
                break;
            }
        }
    }
    free(stack);
    return 0;
}

/* Sorts the tables of the scan and links each launch to its CPU op. 0 or -1 (memory). */
static int build_indexes(struct kineto *k)
{
    const struct kineto_op *op;

    sort(k->ops, k->n_ops, sizeof(*k->ops), cmp_op_tid_ts);
    sort(k->steps, k->n_steps, sizeof(*k->steps), cmp_step);
    if (k->n_ops > 0 && (k->by_ext = malloc(k->n_ops * sizeof(*k->by_ext))) == NULL)
        return -1;
    for (size_t i = 0; i < k->n_ops; i++)
        if (k->ops[i].ext >= 0)
            k->by_ext[k->n_by_ext++] = (struct kineto_ext){k->ops[i].ext, (uint32_t)i};
    sort(k->by_ext, k->n_by_ext, sizeof(*k->by_ext), cmp_by_ext);
    for (size_t i = 0; i < k->n_launches; i++)
        if ((op = find_op(k, k->launches[i].ext)) != NULL)
            k->launches[i].op = (uint32_t)(op - k->ops) + 1;
    if (resolve_enclosing(k) < 0)
        return -1;
    sort(k->launches, k->n_launches, sizeof(*k->launches), cmp_launch_corr);
    return 0;
}

/* ---- the replay pass: entries ------------------------------------------------- */

/* The N of the ProfilerStep#N containing ts; 0, counted in steps_unknown, when none does. */
static uint64_t step_of(struct kineto *k, int64_t ts)
{
    size_t lo = 0, hi = k->n_steps;

    /* the last step starting at or before ts (steps do not overlap) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (k->steps[mid].begin <= ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && ts < k->steps[lo - 1].end && k->steps[lo - 1].n >= 0)
        return (uint64_t)k->steps[lo - 1].n;
    k->steps_unknown++;
    return 0;
}

static uint64_t clamp_u(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

/*
 * The device of a device event: <prefix>:<args.device>; without args.device,
 * <prefix>:<pid> (the profiler puts a device's events under pid = its
 * index) when the pid is small, else <prefix>:0. Both fallbacks are counted.
 */
static void event_device(struct kineto *k, const struct event *e, const char *prefix, char *buf,
                         size_t len)
{
    int64_t n = e->device;

    if (n < 0 && e->pid >= 0 && e->pid < KINETO_DEVICE_PID)
        n = e->pid, k->device_from_pid++;
    else if (n < 0)
        n = 0, k->device_default++;
    snprintf(buf, len, "%s:%" PRId64, prefix, n);
}

static void replay_event(struct kineto_parse *p)
{
    struct kineto *k = p->k;
    const struct event *e = &p->ev;
    const struct category *cat = event_category(e);
    enum kind kind = cat != NULL ? cat->kind : K_OTHER;
    const struct kineto_op *op;
    const struct kineto_launch *l = NULL;
    struct kineto_entry en = {.op = e->name, .stream = e->stream};
    char device[48];
    int64_t step_ts = e->ts;

    if (strcmp(e->ph, "X") != 0 || !e->has_ts || !event_in_range(e) ||
        (kind != K_KERNEL && kind != K_MEMORY) || e->name[0] == '\0' || p->emit_rc != 0)
        return;
    if ((op = find_op(k, e->ext)) == NULL && (l = find_launch(k, e->corr)) != NULL) {
        op = l->op ? &k->ops[l->op - 1] : NULL;
        step_ts = l->ts;
    }
    if (op != NULL) {
        step_ts = op->ts;
        en.launcher = k->names.v[op->name];
        if (op->dims != INTERN_NONE)
            en.in_shapes = k->dims.v[op->dims], en.in_len = k->dims.len[op->dims];
    }
    event_device(k, e, cat->device, device, sizeof(device));
    en.device = device;
    en.category = kineto_category(e->name, kind == K_MEMORY);
    en.mem_bytes = kind == K_MEMORY ? clamp_u(e->bytes) : 0;
    en.step = step_of(k, step_ts);
    en.start_ns = clamp_u(e->ts);
    en.dur_ns = e->has_dur ? clamp_u(e->dur) : 0;
    p->emit_rc = p->emit(p->emit_arg, &en);
}

static int emit_cpu_op(struct kineto_parse *p, const struct kineto_op *op, int64_t self)
{
    struct kineto *k = p->k;
    const char *name = k->names.v[op->name];
    struct kineto_entry en = {.op = name,
                              .category = kineto_category(name, false),
                              .device = "cpu",
                              .step = step_of(k, op->ts),
                              .start_ns = clamp_u(op->ts),
                              .dur_ns = clamp_u(self),
                              .span_ns = clamp_u(op->dur),
                              .stream = op->tid};

    if (op->dims != INTERN_NONE)
        en.in_shapes = k->dims.v[op->dims], en.in_len = k->dims.len[op->dims];
    return p->emit(p->emit_arg, &en);
}

static void progress(struct kineto_parse *p, bool done);

/*
 * --cpu-ops: each op's self time, its duration minus the part of it covered
 * by the ops directly nested in it on the same thread (a child that runs
 * past its parent's end counts only up to that end). The ops are sent in
 * their sorted order, each parent before its children, so that of two with
 * the very same interval the caller (the smaller External id) is stored
 * first, which an export's "start" order keeps as the outer one.
 */
static int replay_cpu_ops(struct kineto_parse *p)
{
    struct open_op {
        size_t i;
        int64_t end, child;
    } *stack = NULL;
    const struct kineto *k = p->k;
    int64_t *self = k->n_ops > 0 ? malloc(k->n_ops * sizeof(*self)) : NULL;
    size_t sp = 0, cap = 0;
    int rc = k->n_ops > 0 && self == NULL ? -ENOMEM : 0;

    for (size_t i = 0; i <= k->n_ops && rc == 0; i++) {
        const struct kineto_op *op = i < k->n_ops ? &k->ops[i] : NULL;
        /* close the ops that ended before this one starts (or are on another thread) */
        while (sp > 0 && (op == NULL || op->tid != k->ops[stack[sp - 1].i].tid ||
                          op->ts >= stack[sp - 1].end)) {
            sp--;
            self[stack[sp].i] = k->ops[stack[sp].i].dur - stack[sp].child;
        }
        if (op == NULL)
            break;
        if (sp > 0) {
            int64_t end = op->ts + op->dur;
            stack[sp - 1].child += (end < stack[sp - 1].end ? end : stack[sp - 1].end) - op->ts;
        }
        if (!grow((void **)&stack, &cap, sp, sizeof(*stack))) {
            rc = -ENOMEM;
            break;
        }
        stack[sp++] = (struct open_op){i, op->ts + op->dur, 0};
    }
    for (size_t i = 0; i < k->n_ops && rc == 0; i++) {
        if (i % 256 == 0)
            progress(p, false);
        rc = emit_cpu_op(p, &k->ops[i], self[i]);
    }
    free(stack);
    free(self);
    progress(p, true);
    return rc;
}

/* ---- yajl callbacks ------------------------------------------------------------- */

static enum frame top(const struct kineto_parse *p)
{
    return p->depth > 0 ? p->stack[p->depth - 1] : F_SKIP;
}

static int push(struct kineto_parse *p, enum frame f)
{
    if (p->depth >= KINETO_MAX_DEPTH) {
        p->too_deep = true; /* deeper than any Kineto file: stop with a clear error */
        return 0;
    }
    p->stack[p->depth++] = f;
    return 1;
}

static void event_scalar(struct kineto_parse *p, const unsigned char *s, size_t n, bool is_str)
{
    struct event *e = &p->ev;
    const char *t = (const char *)s;
    const char *key = p->key;

    if (top(p) == F_EVENT) {
        if (strcmp(key, "ph") == 0 && is_str)
            copy_str(e->ph, sizeof(e->ph), s, n);
        else if (strcmp(key, "cat") == 0 && is_str)
            copy_str(e->cat, sizeof(e->cat), s, n);
        else if (strcmp(key, "name") == 0 && is_str && n > KINETO_NAME_MAX)
            name_cut(e->name, s, n), p->k->names_cut += !p->replay;
        else if (strcmp(key, "name") == 0 && is_str)
            copy_str(e->name, sizeof(e->name), s, n);
        else if (strcmp(key, "ts") == 0 && !is_str)
            e->has_ts = true, e->bad_time |= !us_to_ns(t, n, &e->ts);
        else if (strcmp(key, "dur") == 0 && !is_str)
            e->has_dur = true, e->bad_time |= !us_to_ns(t, n, &e->dur);
        else if (strcmp(key, "tid") == 0) /* "stream 7" or 1234: a key, nothing more */
            e->tid = is_str ? (int64_t)(map_hash_bytes(t, n) >> 1) : int_or(t, n, -1);
        else if (strcmp(key, "pid") == 0 && !is_str)
            e->pid = int_or(t, n, -1);
    } else if (top(p) == F_ARGS && !is_str) {
        if (strcmp(key, "device") == 0)
            e->device = int_or(t, n, -1);
        else if (strcasecmp(key, "External id") == 0) /* "external id" in older files */
            e->ext = int_or(t, n, -1);
        else if (strcmp(key, "correlation") == 0)
            e->corr = int_or(t, n, -1);
        else if (strcmp(key, "bytes") == 0) /* memcpy, memset */
            e->bytes = int_or(t, n, -1);
        else if (strcmp(key, "stream") == 0)
            e->stream = int_or(t, n, -1);
    } else if (top(p) == F_DIM && !is_str && e->n_inputs > 0) {
        uint32_t i = e->n_inputs - 1;
        int64_t v;
        if (parse_int(t, n, &v) && v >= 0 && e->dim_n[i] < PROTO_MAX_DIMS)
            e->dim_v[i][e->dim_n[i]++] = (uint64_t)v;
    }
}

/* type: 's' string, 'n' number, 'b' bool, 'z' null */
static int on_scalar(void *ctx, const unsigned char *s, size_t n, int type)
{
    struct kineto_parse *p = ctx;

    switch (top(p)) {
    case F_EVENT:
    case F_ARGS:
    case F_DIM:
        event_scalar(p, s, n, type == 's');
        break;
    case F_DIST:
    case F_PROP:
        if (!p->replay)
            meta_scalar(p, (const char *)s, n, type);
        break;
    case F_TOP:
        if (!p->replay && type == 's' && p->k->host == NULL && n > 0 &&
            (strcmp(p->key, "host_name") == 0 || strcmp(p->key, "hostname") == 0)) {
            char host[PROTO_MAX_NAME + 1];
            copy_str(host, sizeof(host), s, n);
            if ((p->k->host = strdup(host)) == NULL)
                p->oom = true;
        }
        break;
    case F_EVENTS:
        p->values++; /* a value that is not an event */
        break;
    default:
        break;
    }
    return !p->oom;
}

static int on_null(void *ctx)
{
    return on_scalar(ctx, (const unsigned char *)"null", 4, 'z');
}

static int on_bool(void *ctx, int b)
{
    return on_scalar(ctx, (const unsigned char *)(b ? "true" : "false"), b ? 4 : 5, 'b');
}

/* Numbers arrive as text: yajl's integer callback would fail on values beyond int64. */
static int on_number(void *ctx, const char *s, size_t n)
{
    return on_scalar(ctx, (const unsigned char *)s, n, 'n');
}

static int on_string(void *ctx, const unsigned char *s, size_t n)
{
    return on_scalar(ctx, s, n, 's');
}

static int on_map_key(void *ctx, const unsigned char *s, size_t n)
{
    struct kineto_parse *p = ctx;

    copy_str(p->key, sizeof(p->key), s, n);
    return 1;
}

static void event_reset(struct event *e)
{
    e->ph[0] = e->cat[0] = e->name[0] = '\0';
    e->ts = e->dur = 0;
    e->tid = e->pid = e->device = e->ext = e->corr = e->bytes = e->stream = -1;
    e->has_ts = e->has_dur = e->bad_time = false;
    e->n_inputs = 0;
}

static int on_start_map(void *ctx)
{
    struct kineto_parse *p = ctx;
    enum frame t = top(p), f = F_SKIP;

    if (p->depth == 0)
        f = F_TOP, p->top_map = true;
    else if (t == F_TOP && strcmp(p->key, "distributedInfo") == 0)
        f = F_DIST;
    else if (t == F_EVENTS)
        f = F_EVENT, event_reset(&p->ev), p->values++, p->maps++;
    else if (t == F_EVENT && strcmp(p->key, "args") == 0)
        f = F_ARGS;
    else if (t == F_PROPS)
        f = F_PROP;
    p->key[0] = '\0';
    return push(p, f);
}

static int on_end_map(void *ctx)
{
    struct kineto_parse *p = ctx;
    enum frame t = top(p);

    p->depth--;
    if (t == F_EVENT && p->replay)
        replay_event(p);
    else if (t == F_EVENT)
        scan_event(p);
    else if (t == F_PROP)
        p->prop_index++;
    return !p->oom && p->emit_rc == 0;
}

static int on_start_array(void *ctx)
{
    struct kineto_parse *p = ctx;
    enum frame t = top(p), f = F_SKIP;

    if (p->depth == 0 || (t == F_TOP && strcmp(p->key, "traceEvents") == 0))
        f = F_EVENTS, p->has_events = true;
    else if (t == F_EVENTS)
        p->values++, p->arrays++;
    else if (t == F_TOP && strcmp(p->key, "nodes") == 0)
        p->has_nodes = true;
    else if (t == F_TOP && strcmp(p->key, "deviceProperties") == 0)
        f = F_PROPS;
    else if (t == F_ARGS && strcmp(p->key, "Input Dims") == 0)
        f = F_DIMS, p->ev.n_inputs = 0;
    else if (t == F_DIMS && p->ev.n_inputs < PROTO_MAX_INPUTS)
        f = F_DIM, p->ev.dim_n[p->ev.n_inputs++] = 0;
    return push(p, f);
}

static int on_end_array(void *ctx)
{
    struct kineto_parse *p = ctx;

    p->depth--;
    return 1;
}

static const yajl_callbacks kineto_callbacks = {
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

static void progress(struct kineto_parse *p, bool done)
{
    struct kineto *k = p->k;
    struct timespec now;

    if (k->progress == NULL)
        return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!done &&
        (now.tv_sec - p->last.tv_sec) * 1000000000L + (now.tv_nsec - p->last.tv_nsec) < 100000000L)
        return; /* at most 10 updates a second */
    p->last = now;
    k->progress(k->progress_arg, p->replay, p->bytes, k->events, done);
}

static const char *parse_gz_note(const struct kineto *k)
{
    return k->path && strstr(k->path, ".gz") ? " of the decompressed text" : "";
}

/* Why the parse stopped, into k->errmsg. */
static void parse_error(struct kineto_parse *p, yajl_handle h, uint64_t offset)
{
    struct kineto *k = p->k;
    unsigned char *msg;

    if (p->oom) {
        snprintf(k->errmsg, sizeof(k->errmsg), "out of memory at byte %" PRIu64, offset);
        return;
    }
    if (p->too_deep) {
        snprintf(k->errmsg, sizeof(k->errmsg),
                 "not a Kineto trace: arrays and objects nested more than %d deep at byte %" PRIu64
                 "%s (the importer follows %d levels; a profiler trace uses about 6)",
                 KINETO_MAX_DEPTH, offset, parse_gz_note(k), KINETO_MAX_DEPTH);
        return;
    }
    msg = yajl_get_error(h, 0, NULL, 0);
    snprintf(k->errmsg, sizeof(k->errmsg), "not valid JSON at byte %" PRIu64 "%s: %s", offset,
             parse_gz_note(k), msg ? (const char *)msg : "?");
    /* yajl's message ends with a newline */
    k->errmsg[strcspn(k->errmsg, "\n")] = '\0';
    yajl_free_error(h, msg);
}

/* Gives yajl text[0..n), which ends at a token boundary. 0, or -1 with the reason in errmsg. */
static int parse_feed(struct kineto_parse *p, yajl_handle h, const unsigned char *text, size_t n)
{
    if (n > 0 && yajl_parse(h, text, n) != yajl_status_ok) {
        parse_error(p, h, p->k->work.fed + yajl_get_bytes_consumed(h));
        return -1;
    }
    p->k->work.fed += n;
    return 0;
}

/*
 * Room for more text after an unfinished token of len bytes in *buf (*cap
 * bytes): doubles the buffer, up to KINETO_MAX_TOKEN. 0, or -1 with the
 * reason in errmsg.
 */
static int parse_room(struct kineto_parse *p, unsigned char **buf, size_t *cap)
{
    struct kineto *k = p->k;
    unsigned char *b;

    if (*cap >= KINETO_MAX_TOKEN) {
        snprintf(k->errmsg, sizeof(k->errmsg),
                 "a JSON string, key or number starting at byte %" PRIu64
                 "%s is longer than %u MiB, the longest the importer reads",
                 k->work.fed + 1, parse_gz_note(k), KINETO_MAX_TOKEN >> 20);
        return -1;
    }
    if ((b = realloc(*buf, *cap * 2)) == NULL) {
        p->oom = true;
        snprintf(k->errmsg, sizeof(k->errmsg), "out of memory at byte %" PRIu64, k->work.fed);
        return -1;
    }
    *buf = b;
    *cap *= 2;
    return 0;
}

/*
 * Reads the next piece of text after the len bytes held in *buf, and gives
 * yajl all that ends at a token boundary, keeping the rest (an unfinished
 * token) at the start of *buf. Returns gzread's count (0 at the end, < 0 on
 * a read error) or, with the reason in errmsg, INT_MIN.
 */
static int parse_step(struct kineto_parse *p, gzFile gz, yajl_handle h, unsigned char **buf,
                      size_t *cap, size_t *len)
{
    size_t want, cut;
    int n;

    if (*len == *cap && parse_room(p, buf, cap) != 0)
        return INT_MIN;
    want = *cap - *len < KINETO_READ_BUF ? *cap - *len : KINETO_READ_BUF;
    if ((n = gzread(gz, *buf + *len, (unsigned)want)) <= 0)
        return n;
    p->bytes = (uint64_t)gzoffset(gz);
    cut = import_cut_scan(&p->cut, *buf + *len, (size_t)n);
    p->k->work.scanned += (uint64_t)n;
    cut = cut > 0 ? *len + cut : 0; /* no boundary in the new bytes: none since the held ones */
    *len += (size_t)n;
    if (cut == 0)
        return n;
    if (parse_feed(p, h, *buf, cut) != 0)
        return INT_MIN;
    memmove(*buf, *buf + cut, *len - cut);
    *len -= cut;
    p->k->work.moved += *len;
    return n;
}

/* One pass over the file. 0, or -1 with the reason in errmsg (emit's error in emit_rc). */
static int parse_file(struct kineto_parse *p)
{
    struct kineto *k = p->k;
    size_t cap = KINETO_READ_BUF, len = 0;
    unsigned char *buf = malloc(cap);
    gzFile gz = buf ? gzopen(k->path, "rb") : NULL;
    yajl_handle h = gz ? yajl_alloc(&kineto_callbacks, NULL, p) : NULL;
    int n = 0, rc = 0, zerr;

    k->work = (struct kineto_work){0};
    p->cut = (struct import_cut){0};
    if (h == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "cannot open: %s",
                 buf && gz == NULL && errno ? strerror(errno) : "out of memory");
        rc = -1;
        goto out;
    }
    gzbuffer(gz, 128u << 10);
    while ((n = parse_step(p, gz, h, &buf, &cap, &len)) > 0)
        progress(p, false);
    if (n == INT_MIN) {
        rc = -1;
    } else if (n < 0) {
        snprintf(k->errmsg, sizeof(k->errmsg), "cannot read after byte %" PRIu64 ": %s",
                 k->work.fed + len, gzerror(gz, &zerr));
        rc = -1;
    } else if (parse_feed(p, h, buf, len) != 0) {
        rc = -1;
    } else if (yajl_complete_parse(h) != yajl_status_ok) {
        parse_error(p, h, k->work.fed);
        rc = -1;
    }
    progress(p, !(p->replay && p->cpu_ops)); /* the CPU ops follow the replay's parse */
out:
    if (h)
        yajl_free(h);
    if (gz)
        gzclose(gz);
    free(buf);
    return rc;
}

/*
 * Whether valid JSON is a PyTorch profiler (Kineto) trace: a map with a
 * traceEvents array, or a top-level array (the older form), holding events
 * (maps) of which at least one has a category of the profiler. 0, or -1
 * with "not a Kineto trace: <why>" in errmsg.
 */
static int scan_verdict(const struct kineto_parse *p)
{
    struct kineto *k = p->k;
    const char *why = NULL;
    char buf[320];

    if (!p->has_events && p->has_nodes)
        why = "it has \"nodes\" and no \"traceEvents\", as a PyTorch execution trace (Chakra) "
              "has; import the profiler's trace (*.pt.trace.json) of the same run";
    else if (!p->has_events && p->top_map)
        why = "there is no \"traceEvents\" array";
    else if (!p->has_events)
        why = "the JSON text is a single value, not a list of events";
    else if (p->values == 0)
        why = "it holds no events";
    else if (p->maps == 0 && p->arrays == p->values) {
        snprintf(buf, sizeof(buf),
                 "its %" PRIu64 " elements are arrays, not events (a memory-timeline export "
                 "looks like this)",
                 p->values);
        why = buf;
    } else if (p->maps == 0) {
        snprintf(buf, sizeof(buf), "its %" PRIu64 " elements are not events (JSON objects)",
                 p->values);
        why = buf;
    } else if (p->kineto_events == 0) {
        snprintf(buf, sizeof(buf),
                 "none of its %" PRIu64 " events has a category of the PyTorch profiler "
                 "(cpu_op, kernel, gpu_memcpy, cuda_runtime, ...), as in a Chrome trace "
                 "written by another tool",
                 p->maps);
        why = buf;
    }
    if (why == NULL)
        return 0;
    snprintf(k->errmsg, sizeof(k->errmsg), "not a Kineto trace: %s", why);
    return -1;
}

int kineto_scan(struct kineto *k)
{
    int rc;

    k->rank = k->world = k->pid = -1;
    if ((k->p = calloc(1, sizeof(*k->p))) == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "out of memory");
        return -1;
    }
    k->p->k = k;
    if ((rc = parse_file(k->p)) == 0)
        rc = scan_verdict(k->p);
    if (rc == 0 && build_indexes(k) < 0) {
        snprintf(k->errmsg, sizeof(k->errmsg), "out of memory");
        rc = -1;
    }
    return rc;
}

int kineto_replay(struct kineto *k, bool cpu_ops, kineto_emit_fn emit, void *arg)
{
    struct kineto_parse *p = k->p;

    memset(p, 0, sizeof(*p));
    *p = (struct kineto_parse){
        .k = k, .replay = true, .cpu_ops = cpu_ops, .emit = emit, .emit_arg = arg};
    k->steps_unknown = k->device_from_pid = k->device_default = 0;
    if (parse_file(p) < 0)
        return p->emit_rc != 0 ? p->emit_rc : -1;
    if (cpu_ops)
        return replay_cpu_ops(p);
    return 0;
}

void kineto_deinit(struct kineto *k)
{
    proto_kv_free(k->meta, k->n_meta);
    free(k->ops);
    free(k->by_ext);
    free(k->launches);
    free(k->steps);
    intern_deinit(&k->names);
    intern_deinit(&k->dims);
    free(k->host);
    free(k->p);
    k->meta = NULL;
    k->ops = NULL;
    k->by_ext = NULL;
    k->launches = NULL;
    k->steps = NULL;
    k->p = NULL;
    k->host = NULL;
    k->n_meta = k->n_ops = k->n_by_ext = k->n_launches = k->n_steps = 0;
}
