/*
 * test_import.c — `tracectl import` on real PyTorch-profiler (Kineto) traces
 * from tests/data/kineto, against a real daemon; reports are read over
 * the raw protocol, metadata and process ends from the session's SQLite
 * file. Expected values come from the files themselves, read here whole
 * into a yajl tree (not with the importer's streaming code; numbers
 * converted from their text with strtold), or from the data README and the
 * tb_plugin `.expected.txt` assertions. Every file a test writes is in the
 * daemon's temporary dir, removed by harness_cleanup().
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>
#include <yajl/yajl_tree.h>

#include "harness.h"

#define HTA TEST_DATA_DIR "/kineto/hta/"
#define TBP TEST_DATA_DIR "/kineto/tb_plugin_distributed/"

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(import, .init = NULL, .fini = fini, .timeout = 120);

/* ---- running the importer ---------------------------------------------------------- */

/*
 * Runs `tracectl --socket S import FILES... --session NAME --quiet [extra...]`
 * with stderr merged into *out (may be NULL). extra ends with NULL.
 */
static int run_import(char **out, const char *const *files, const char *session, ...)
{
    char cmd[8192];
    size_t n = 0;
    va_list ap;
    const char *a;

    n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "'%s' --socket '%s' import", TRACECTL_BIN,
                          d.sock);
    for (; *files != NULL; files++)
        n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " '%s'", *files);
    n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " --session '%s' --quiet", session);
    va_start(ap, session);
    while ((a = va_arg(ap, const char *)) != NULL)
        n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " '%s'", a);
    va_end(ap);
    snprintf(cmd + n, sizeof(cmd) - n, " 2>&1");
    cr_assert_lt(n, sizeof(cmd) - 8);
    char *sh[] = {"sh", "-c", cmd, NULL};
    char *text = NULL;
    int rc = harness_run(&text, sh);
    if (out != NULL)
        *out = text;
    else
        free(text);
    return rc;
}

/* Runs a shell command (printf-style), stderr merged into *out (may be NULL); its status. */
__attribute__((format(printf, 2, 3))) static int run_sh(char **out, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof(cmd) - 8);
    strcat(cmd, " 2>&1");
    char *sh[] = {"sh", "-c", cmd, NULL};
    char *text = NULL;
    int rc = harness_run(&text, sh);
    if (out != NULL)
        *out = text;
    else
        free(text);
    return rc;
}

/* Writes text to a file in the daemon's temporary dir; returns its path (static buffer i). */
static const char *write_file(int i, const char *name, const char *text)
{
    static char paths[8][PATH_MAX + 64];
    FILE *f;

    snprintf(paths[i], sizeof(paths[i]), "%s/%s", d.dir, name);
    f = fopen(paths[i], "w");
    cr_assert_not_null(f, "%s", paths[i]);
    cr_assert_eq(fputs(text, f) >= 0, true);
    cr_assert_eq(fclose(f), 0);
    return paths[i];
}

/* ---- reading what the daemon stored -------------------------------------------------- */

struct rep {
    struct proto_reader r;
    int fd;
    const msgpack_object *o; /* the report map */
};

static void report(struct rep *rp, const char *session, unsigned top)
{
    struct proto_request req;
    const msgpack_object *o;

    proto_request_init(&req);
    req.session.name = (char *)session;
    req.top = top;
    o = raw_control(d.sock, PROTO_REPORT, &req, &rp->r, &rp->fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "no report for %s", session);
    rp->o = &o->via.array.ptr[1];
}

static void report_done(struct rep *rp)
{
    proto_reader_deinit(&rp->r);
    close(rp->fd);
}

static const msgpack_object *rows(const struct rep *rp, const char *section)
{
    const msgpack_object *a = obj_get(rp->o, section);

    cr_assert(a != NULL && a->type == MSGPACK_OBJECT_ARRAY, "no %s in the report", section);
    return a;
}

static unsigned long long session_u64(const struct rep *rp, const char *key)
{
    return obj_u64(obj_get(obj_get(rp->o, "session"), key));
}

static bool op_contains(const msgpack_object *row, const char *needle)
{
    const msgpack_object *op = obj_get(row, "op");
    char buf[2048];

    if (op == NULL || op->type != MSGPACK_OBJECT_STR || op->via.str.size >= sizeof(buf))
        return false;
    memcpy(buf, op->via.str.ptr, op->via.str.size);
    buf[op->via.str.size] = '\0';
    return strstr(buf, needle) != NULL;
}

/*
 * The first value of a query on a session's SQLite file, as text ("" for
 * NULL); caller frees. The first call stops the daemon, so that the file is
 * read at rest: ask the daemon for reports before.
 */
static char *db_text(long long session_id, const char *sql)
{
    char path[PATH_MAX + 64];
    sqlite3 *db;
    sqlite3_stmt *st;
    char *v = NULL;

    if (d.pid > 0)
        cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, session_id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    if (sqlite3_step(st) == SQLITE_ROW)
        v = strdup(sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_not_null(v, "no row for %s", sql);
    return v;
}

static long long db_int(long long session_id, const char *sql)
{
    char *v = db_text(session_id, sql);
    long long n = atoll(v);

    free(v);
    return n;
}

/* The `sessions` rows (an array; borrowed from *r: deinit it and close *fd after). */
static const msgpack_object *sessions(struct proto_reader *r, int *fd)
{
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, r, fd);

    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    return &o->via.array.ptr[1];
}

/* ---- reading the files independently ------------------------------------------------- */

/*
 * A yajl tree (struct yajl_val_s, freed by yajl_tree_free) built from yajl's
 * callbacks. yajl_tree_parse grows an array one element at a time; under
 * ASan, whose realloc always copies, the 130k events of the ns-resolution
 * trace then take minutes. Here arrays and maps double.
 */
struct tree {
    yajl_val stack[64];
    size_t cap[64];
    int depth;
    char *key; /* the pending map key */
    yajl_val root;
};

static yajl_val tree_new(yajl_type type)
{
    yajl_val v = calloc(1, sizeof(*v));

    cr_assert_not_null(v);
    v->type = type;
    return v;
}

/* Adds v to the open container (or makes it the root); pushes it when a container. */
static int tree_add(void *ctx, yajl_val v)
{
    struct tree *t = ctx;
    yajl_val top = t->depth > 0 ? t->stack[t->depth - 1] : NULL;
    size_t *cap = t->depth > 0 ? &t->cap[t->depth - 1] : NULL;

    if (top == NULL) {
        t->root = v;
    } else if (top->type == yajl_t_array) {
        if (top->u.array.len == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            top->u.array.values = realloc(top->u.array.values, *cap * sizeof(yajl_val));
        }
        top->u.array.values[top->u.array.len++] = v;
    } else {
        if (top->u.object.len == *cap) {
            *cap = *cap ? *cap * 2 : 8;
            top->u.object.values = realloc(top->u.object.values, *cap * sizeof(yajl_val));
            top->u.object.keys = realloc(top->u.object.keys, *cap * sizeof(char *));
        }
        top->u.object.keys[top->u.object.len] = t->key;
        top->u.object.values[top->u.object.len++] = v;
        t->key = NULL;
    }
    if (v->type == yajl_t_array || v->type == yajl_t_object) {
        cr_assert_lt(t->depth, 64);
        t->cap[t->depth] = 0;
        t->stack[t->depth++] = v;
    }
    return 1;
}

static int tree_null(void *ctx)
{
    return tree_add(ctx, tree_new(yajl_t_null));
}

static int tree_bool(void *ctx, int b)
{
    return tree_add(ctx, tree_new(b ? yajl_t_true : yajl_t_false));
}

static int tree_number(void *ctx, const char *s, size_t n)
{
    yajl_val v = tree_new(yajl_t_number);
    char *end;

    v->u.number.r = strndup(s, n);
    errno = 0;
    v->u.number.i = strtoll(v->u.number.r, &end, 10);
    if (errno == 0 && *end == '\0')
        v->u.number.flags |= YAJL_NUMBER_INT_VALID;
    v->u.number.d = strtod(v->u.number.r, &end);
    if (*end == '\0')
        v->u.number.flags |= YAJL_NUMBER_DOUBLE_VALID;
    return tree_add(ctx, v);
}

static int tree_string(void *ctx, const unsigned char *s, size_t n)
{
    yajl_val v = tree_new(yajl_t_string);

    v->u.string = strndup((const char *)s, n);
    return tree_add(ctx, v);
}

static int tree_key(void *ctx, const unsigned char *s, size_t n)
{
    struct tree *t = ctx;

    free(t->key);
    t->key = strndup((const char *)s, n);
    return 1;
}

static int tree_start_map(void *ctx)
{
    return tree_add(ctx, tree_new(yajl_t_object));
}

static int tree_start_array(void *ctx)
{
    return tree_add(ctx, tree_new(yajl_t_array));
}

static int tree_end(void *ctx)
{
    ((struct tree *)ctx)->depth--;
    return 1;
}

/* A JSON file (gzip'd or plain) parsed whole into a yajl tree (see struct tree). */
static yajl_val load_json(const char *path)
{
    static const yajl_callbacks cb = {
        .yajl_null = tree_null,
        .yajl_boolean = tree_bool,
        .yajl_number = tree_number,
        .yajl_string = tree_string,
        .yajl_start_map = tree_start_map,
        .yajl_map_key = tree_key,
        .yajl_end_map = tree_end,
        .yajl_start_array = tree_start_array,
        .yajl_end_array = tree_end,
    };
    char cmd[PATH_MAX + 32], *text = NULL;
    struct tree t = {0};

    snprintf(cmd, sizeof(cmd), "zcat -f '%s'", path);
    char *sh[] = {"sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(&text, sh), 0);
    yajl_handle h = yajl_alloc(&cb, NULL, &t);
    cr_assert_not_null(h);
    cr_assert(yajl_parse(h, (const unsigned char *)text, strlen(text)) == yajl_status_ok &&
                  yajl_complete_parse(h) == yajl_status_ok,
              "%s is not valid JSON", path);
    yajl_free(h);
    free(text);
    free(t.key);
    cr_assert_not_null(t.root);
    return t.root;
}

static yajl_val events_of(yajl_val root)
{
    const char *path[] = {"traceEvents", NULL};

    return YAJL_IS_ARRAY(root) ? root : yajl_tree_get(root, path, yajl_t_array);
}

static const char *str_at(yajl_val e, const char *k1, const char *k2)
{
    const char *path[] = {k1, k2, NULL};
    yajl_val v = yajl_tree_get(e, path, yajl_t_string);

    return v ? YAJL_GET_STRING(v) : NULL;
}

static bool num_at(yajl_val e, const char *k1, const char *k2, yajl_val *out)
{
    const char *path[] = {k1, k2, NULL};

    *out = yajl_tree_get(e, path, yajl_t_number);
    return *out != NULL;
}

/* A number of µs (its text) → ns, through long double: exact for these magnitudes. */
static long long us_ns(yajl_val v)
{
    return llroundl(strtold(YAJL_GET_NUMBER(v), NULL) * 1000.0L);
}

static bool is_gpu(yajl_val e)
{
    const char *cat = str_at(e, "cat", NULL);

    return cat &&
           (!strcmp(cat, "kernel") || !strcmp(cat, "gpu_memcpy") || !strcmp(cat, "gpu_memset"));
}

/* ---- tests ------------------------------------------------------------------------------ */

Test(import, nccl_trace_longest_allreduce_comm_rows_and_metadata)
{
    const char *files[] = {HTA "nccl_data.json.gz", NULL};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_import(NULL, files, "nccl", NULL), 0);
    report(&rp, "nccl", 5);
    /* README: the longest is an AllReduce kernel of 5993.392 µs */
    const msgpack_object *first = &rows(&rp, "slowest")->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(first, "dur_ns")), 5993392);
    cr_assert(op_contains(first, "AllReduce"));
    cr_assert(obj_str_eq(obj_get(first, "device"), "gpu:0"));
    /* README: AllReduce ×15 and Broadcast ×6, all in the communication section */
    const msgpack_object *comm = rows(&rp, "comm");
    unsigned long long allreduce = 0, broadcast = 0;
    for (uint32_t i = 0; i < comm->via.array.size; i++) {
        const msgpack_object *row = &comm->via.array.ptr[i];
        if (op_contains(row, "AllReduce"))
            allreduce += obj_u64(obj_get(row, "calls"));
        if (op_contains(row, "Broadcast"))
            broadcast += obj_u64(obj_get(row, "calls"));
    }
    cr_assert_eq(allreduce, 15);
    cr_assert_eq(broadcast, 6);
    /* every kernel, memcpy and memset, counted and summed from the file by the tree parser */
    yajl_val root = load_json(files[0]), evs = events_of(root), v;
    unsigned long long expect = 0, expect_ns = 0;
    for (size_t i = 0; i < evs->u.array.len; i++)
        if (is_gpu(evs->u.array.values[i]) && num_at(evs->u.array.values[i], "dur", NULL, &v))
            expect++, expect_ns += (unsigned long long)us_ns(v);
    cr_assert_eq(session_u64(&rp, "entries"), expect);
    cr_assert_eq(session_u64(&rp, "total_ns"), expect_ns);
    /* memcpy/memset: args.bytes is the entry's memory (the peak is the largest one) */
    unsigned long long peak = 0, bytes = 0;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL);
        if (cat && (!strcmp(cat, "gpu_memcpy") || !strcmp(cat, "gpu_memset")) &&
            num_at(e, "dur", NULL, &v) && num_at(e, "args", "bytes", &v)) {
            unsigned long long b = (unsigned long long)YAJL_GET_INTEGER(v);
            bytes += b;
            peak = b > peak ? b : peak;
        }
    }
    cr_assert_gt(peak, 0);
    const msgpack_object *mem = obj_get(rp.o, "memory");
    cr_assert_eq(obj_u64(obj_get(mem, "peak_bytes")), peak);
    cr_assert_eq(obj_u64(obj_get(mem, "total_bytes")), bytes);
    report_done(&rp);
    /* the categories were sent explicitly: the 21 NCCL kernels' ops are comm */
    cr_assert_eq(db_int(1, "SELECT count(*) FROM trace WHERE op LIKE 'ncclKernel%' AND "
                           "category = 'comm'"),
                 21);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM ops WHERE name LIKE 'Memcpy%' AND "
                           "category <> 'memory'"),
                 0);
    /* metadata: distributedInfo and deviceProperties, typed, from the file */
    const char *rank_p[] = {"distributedInfo", "rank", NULL};
    const char *ws_p[] = {"distributedInfo", "world_size", NULL};
    const char *props_p[] = {"deviceProperties", NULL};
    yajl_val props = yajl_tree_get(root, props_p, yajl_t_array);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'distributedInfo.rank' AND "
                           "typeof(value) = 'integer'"),
                 YAJL_GET_INTEGER(yajl_tree_get(root, rank_p, yajl_t_number)));
    /* the session's world is what was imported (one file); the job's is in the metadata */
    cr_assert_eq(db_int(1, "SELECT world FROM processes"), 1);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'distributedInfo.world_size'"),
                 YAJL_GET_INTEGER(yajl_tree_get(root, ws_p, yajl_t_number)));
    char *name = db_text(1, "SELECT value FROM meta WHERE key = 'deviceProperties.0.name'");
    cr_assert_str_eq(name, str_at(props->u.array.values[0], "name", NULL));
    free(name);
    /* the process ended with bye */
    cr_assert_eq(db_int(1, "SELECT bye FROM processes"), 1);
    yajl_tree_free(root);
}

/* Sum over GPU events of their durations in ns per args.device (0..7), from the tree parser. */
static void device_sums(const char *path, unsigned long long sums[8])
{
    yajl_val root = load_json(path), evs = events_of(root), dur, dev;

    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        if (!is_gpu(e) || !num_at(e, "dur", NULL, &dur) || !num_at(e, "args", "device", &dev))
            continue;
        long long k = YAJL_GET_INTEGER(dev);
        if (k >= 0 && k < 8)
            sums[k] += (unsigned long long)us_ns(dur);
    }
    yajl_tree_free(root);
}

/*
 * GPU events whose launching cpu_op has Input Dims, found the long way: the
 * launch event of the same correlation, then every cpu_op of its thread
 * containing its start, the innermost (latest start, then shortest) kept.
 */
static unsigned long long launched_with_dims(const char *path)
{
    yajl_val root = load_json(path), evs = events_of(root), v, w;
    unsigned long long n = 0;
    size_t len = evs->u.array.len;

    for (size_t i = 0; i < len; i++) {
        yajl_val k = evs->u.array.values[i], launch = NULL, best = NULL;
        if (!is_gpu(k) || !num_at(k, "args", "correlation", &v))
            continue;
        for (size_t j = 0; j < len && launch == NULL; j++) {
            yajl_val r = evs->u.array.values[j];
            const char *cat = str_at(r, "cat", NULL);
            if (cat && !strcmp(cat, "cuda_runtime") && num_at(r, "args", "correlation", &w) &&
                YAJL_GET_INTEGER(w) == YAJL_GET_INTEGER(v))
                launch = r;
        }
        if (launch == NULL)
            continue;
        yajl_val lts, ots, odur, ltid, otid;
        num_at(launch, "ts", NULL, &lts);
        num_at(launch, "tid", NULL, &ltid);
        for (size_t j = 0; j < len; j++) {
            yajl_val o = evs->u.array.values[j];
            const char *cat = str_at(o, "cat", NULL), *name = str_at(o, "name", NULL);
            if (!cat || strcmp(cat, "cpu_op") || !name || !strncmp(name, "ProfilerStep#", 13) ||
                !num_at(o, "tid", NULL, &otid) || !num_at(o, "ts", NULL, &ots) ||
                !num_at(o, "dur", NULL, &odur) || YAJL_GET_INTEGER(otid) != YAJL_GET_INTEGER(ltid))
                continue;
            long long s = us_ns(ots), e = s + us_ns(odur), t = us_ns(lts);
            if (s > t || t >= e)
                continue;
            yajl_val bts, bdur;
            if (best != NULL) {
                num_at(best, "ts", NULL, &bts);
                num_at(best, "dur", NULL, &bdur);
                if (s < us_ns(bts) || (s == us_ns(bts) && us_ns(odur) >= us_ns(bdur)))
                    continue;
            }
            best = o;
        }
        const char *dims_p[] = {"args", "Input Dims", NULL};
        yajl_val dims = best ? yajl_tree_get(best, dims_p, yajl_t_array) : NULL;
        n += dims != NULL && dims->u.array.len > 0;
    }
    yajl_tree_free(root);
    return n;
}

Test(import, two_sampled_ranks_make_one_session)
{
    const char *files[] = {HTA "sampled_rank-0.json.gz", HTA "sampled_rank-1.json.gz", NULL};
    unsigned long long sums[8] = {0};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_import(NULL, files, "sampled", NULL), 0);
    device_sums(files[0], sums);
    device_sums(files[1], sums);
    report(&rp, "sampled", 10);
    cr_assert_eq(session_u64(&rp, "processes"), 2);
    const msgpack_object *devs = rows(&rp, "devices");
    int checked = 0;
    for (uint32_t i = 0; i < devs->via.array.size; i++) {
        const msgpack_object *row = &devs->via.array.ptr[i];
        for (int k = 0; k < 8; k++) {
            char name[16];
            snprintf(name, sizeof(name), "gpu:%d", k);
            if (obj_str_eq(obj_get(row, "device"), name)) {
                cr_assert_eq(obj_u64(obj_get(row, "total_ns")), sums[k], "%s", name);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, 2, "two devices, one per rank");
    cr_assert_eq(devs->via.array.size, 2);
    report_done(&rp);
    /* ranks from distributedInfo (rank 0 and 1 of 128); the session's world is the two files
     * imported, the job's 128 stays in the metadata */
    char *ranks = db_text(1, "SELECT group_concat(rank || '/' || world, ' ') FROM "
                             "(SELECT rank, world FROM processes ORDER BY rank)");
    cr_assert_str_eq(ranks, "0/2 1/2");
    free(ranks);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM meta WHERE key = 'distributedInfo.world_size' "
                           "AND value = 128"),
                 2);
    /* the kernels' External ids name no cpu_op in these sampled files: the launcher is
     * found through the correlation id and the launch's enclosing cpu_op */
    unsigned long long dims = launched_with_dims(files[0]) + launched_with_dims(files[1]);
    cr_assert_gt(dims, 0);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM trace WHERE in_shapes IS NOT NULL"), dims);
}

/* The entry of an op in a `slowest` list for a rank; NULL when absent. */
static const msgpack_object *slow_row(const struct rep *rp, const char *needle, unsigned rank)
{
    const msgpack_object *s = rows(rp, "slowest");

    for (uint32_t i = 0; i < s->via.array.size; i++) {
        const msgpack_object *row = &s->via.array.ptr[i];
        if (op_contains(row, needle) && obj_u64(obj_get(row, "rank")) == rank)
            return row;
    }
    return NULL;
}

static unsigned long long row_end(const msgpack_object *row)
{
    return obj_u64(obj_get(row, "start_ns")) + obj_u64(obj_get(row, "dur_ns"));
}

Test(import, tb_plugin_distributed_nccl_matches_the_expected_values)
{
    const char *files[] = {TBP "test_distributed_nccl.worker0.json",
                           TBP "test_distributed_nccl.worker1.json", NULL};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    /* a top-level JSON array, cat "Kernel", args "external id": the older Kineto form */
    cr_assert_eq(run_import(NULL, files, "tbp", "--cpu-ops", NULL), 0);
    report(&rp, "tbp", 20);
    /* no distributedInfo: ranks are the positions; 3 kernels and 3 CPU ops each */
    cr_assert_eq(session_u64(&rp, "processes"), 2);
    cr_assert_eq(session_u64(&rp, "entries"), 12);
    /* expected.txt: len(comm_node_list) == 2 per worker: nccl:broadcast, nccl:all_reduce */
    const msgpack_object *comm = rows(&rp, "comm");
    unsigned long long cpu_comm = 0;
    for (uint32_t i = 0; i < comm->via.array.size; i++)
        if (op_contains(&comm->via.array.ptr[i], "nccl:"))
            cpu_comm += obj_u64(obj_get(&comm->via.array.ptr[i], "calls"));
    cr_assert_eq(cpu_comm, 4);
    cr_assert_eq(comm->via.array.size, 4, "2 NCCL kernels and 2 NCCL ops");
    /* expected.txt comm_ops: worker0 all_reduce latency 1558 µs (the op's start to its
     * kernel's end), broadcast 75 µs on worker0 and 39 µs on worker1 (to the later end) */
    const msgpack_object *op0 = slow_row(&rp, "nccl:all_reduce", 0);
    const msgpack_object *k0 = slow_row(&rp, "ncclKernel_AllReduce", 0);
    cr_assert(op0 && k0);
    cr_assert_eq(row_end(k0) - obj_u64(obj_get(op0, "start_ns")), 1558000);
    for (unsigned w = 0; w < 2; w++) {
        const msgpack_object *op = slow_row(&rp, "nccl:broadcast", w);
        const msgpack_object *k = slow_row(&rp, "ncclKernel_Broadcast", w);
        cr_assert(op && k);
        unsigned long long end = row_end(k) > row_end(op) ? row_end(k) : row_end(op);
        cr_assert_eq(end - obj_u64(obj_get(op, "start_ns")), w == 0 ? 75000 : 39000);
    }
    /* expected.txt: the all_reduce moves 8196000 bytes = 2049000 floats: the kernel carries
     * the launching op's Input Dims, [[2049000]] */
    const msgpack_object *in = obj_get(k0, "in_shapes");
    cr_assert(in != NULL && in->type == MSGPACK_OBJECT_ARRAY && in->via.array.size == 1);
    cr_assert_eq(in->via.array.ptr[0].via.array.size, 1);
    cr_assert_eq(obj_u64(&in->via.array.ptr[0].via.array.ptr[0]) * 4, 8196000);
    report_done(&rp);
    char *launch = db_text(1, "SELECT value FROM meta WHERE process_id = 1 AND key = "
                              "'launch:ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)'");
    cr_assert_str_eq(launch, "nccl:all_reduce");
    free(launch);
}

Test(import, large_integers_ns_timestamps_and_missing_rank)
{
    const char *big[] = {HTA "large_integer_rank-70.json.gz", NULL};
    const char *ns[] = {HTA "ns_resolution_rank-0.json.gz", NULL};
    const char *norank[] = {HTA "distributed_info_not_found.json.gz", NULL};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    /* "Comms Id": 10159970886766084423 beyond INT64_MAX: the file imports; its kernel has no
     * args, so its device is its pid's (0) */
    cr_assert_eq(run_import(NULL, big, "bigint", NULL), 0);
    report(&rp, "bigint", 5);
    const msgpack_object *first = &rows(&rp, "slowest")->via.array.ptr[0];
    cr_assert_eq(session_u64(&rp, "entries"), 1);
    cr_assert_eq(obj_u64(obj_get(first, "dur_ns")), 50000);
    cr_assert_eq(obj_u64(obj_get(first, "start_ns")), 100000);
    cr_assert(obj_str_eq(obj_get(first, "device"), "gpu:0"));
    report_done(&rp);

    /* fractional µs: the slowest GPU event's exact ns (ties: the earlier start) */
    cr_assert_eq(run_import(NULL, ns, "nsres", NULL), 0);
    yajl_val root = load_json(ns[0]), evs = events_of(root), ts, dur;
    long long best_dur = -1, best_ts = 0, total = 0;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        if (!is_gpu(e) || !num_at(e, "ts", NULL, &ts) || !num_at(e, "dur", NULL, &dur))
            continue;
        total += us_ns(dur);
        if (us_ns(dur) > best_dur || (us_ns(dur) == best_dur && us_ns(ts) < best_ts))
            best_dur = us_ns(dur), best_ts = us_ns(ts);
    }
    yajl_tree_free(root);
    cr_assert_neq(best_ts % 1000, 0, "the test wants a start that is not a whole µs");
    report(&rp, "nsres", 1);
    first = &rows(&rp, "slowest")->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(first, "start_ns")), (unsigned long long)best_ts);
    cr_assert_eq(obj_u64(obj_get(first, "dur_ns")), (unsigned long long)best_dur);
    cr_assert_eq(session_u64(&rp, "total_ns"), (unsigned long long)total);
    report_done(&rp);

    /* no distributedInfo (a CPU-only trace): --rank 5, CPU ops with --cpu-ops */
    cr_assert_eq(run_import(NULL, norank, "norank", "--rank", "5", "--cpu-ops", NULL), 0);
    report(&rp, "norank", 10);
    const msgpack_object *slow = rows(&rp, "slowest");
    cr_assert_eq(slow->via.array.size, 10);
    for (uint32_t i = 0; i < slow->via.array.size; i++)
        cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[i], "rank")), 5);
    report_done(&rp);
}

Test(import, malformed_file_names_the_offset_and_sends_nothing)
{
    char cut[PATH_MAX + 32], cmd[PATH_MAX * 2 + 64];
    char *err = NULL;
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    /* the first 100,000 bytes of a real trace: valid up to there, then cut */
    snprintf(cut, sizeof(cut), "%s/cut.json", d.dir);
    snprintf(cmd, sizeof(cmd), "zcat '%s' | head -c 100000 > '%s'", HTA "sampled_rank-0.json.gz",
             cut);
    char *sh[] = {"sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(NULL, sh), 0);
    const char *files[] = {cut, NULL};
    cr_assert_eq(run_import(&err, files, "broken", NULL), 1);
    cr_assert_not_null(strstr(err, "byte 100000:"), "the error does not name the offset: %s", err);
    free(err);
    /* a bad byte inside: a stray 'x' is the 31st byte */
    FILE *f = fopen(cut, "w");
    cr_assert_not_null(f);
    fputs("{\"traceEvents\": [{\"ph\": \"X\"}, x]}", f);
    fclose(f);
    cr_assert_eq(run_import(&err, files, "broken", NULL), 1);
    cr_assert_not_null(strstr(err, "byte 31:"), "%s", err);
    free(err);
    /* nothing of them was sent: no session, so no process recorded at all */
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert_eq(o->via.array.ptr[1].via.array.size, 0, "a session was started");
    proto_reader_deinit(&r);
    close(fd);
    /* a good file then the broken one: the first is imported whole, the run fails */
    const char *two[] = {TBP "test_distributed_nccl.worker0.json", cut, NULL};
    cr_assert_eq(run_import(NULL, two, "half", NULL), 1);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM processes"), 1);
    cr_assert_eq(db_int(1, "SELECT bye FROM processes"), 1);
    /* a file that does not exist */
    const char *missing[] = {"/nonexistent/trace.json", NULL};
    cr_assert_eq(run_import(NULL, missing, "missing", NULL), 1);
}

/*
 * A forked writer: gives the FIFO's first reader (the importer's pass 1)
 * `first`; once the importer has said hello (its session file exists, so
 * pass 1 has closed the FIFO), gives the next reader (pass 2) `second`.
 */
static pid_t fifo_writer(const char *fifo, const char *first, const char *second)
{
    char db[PATH_MAX + 32];
    struct stat st;
    pid_t pid = fork();

    cr_assert_neq(pid, -1);
    if (pid == 0) {
        const char *texts[] = {first, second};
        alarm(30); /* never outlives a failed test */
        snprintf(db, sizeof(db), "%s/sessions/1.db", d.data);
        for (int i = 0; i < 2; i++) {
            for (int tries = 0; i > 0 && stat(db, &st) != 0; tries++) {
                if (tries > 1000)
                    _exit(2);
                usleep(10000);
            }
            int fd = open(fifo, O_WRONLY);
            size_t n = strlen(texts[i]);
            if (fd < 0 || write(fd, texts[i], n) != (ssize_t)n)
                _exit(1);
            close(fd);
        }
        _exit(0);
    }
    return pid;
}

Test(import, a_file_that_breaks_between_the_passes_is_marked_incomplete)
{
    /* pass 1 reads a valid trace, pass 2 the same trace cut after its first kernel */
    static const char good[] =
        "{\"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k1\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": 10, \"dur\": 5, \"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k2\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": 20, \"dur\": 5, \"args\": {\"device\": 0}}]}";
    char fifo[PATH_MAX + 32], *err = NULL;
    int st;

    harness_daemon_start(&d, NULL);
    snprintf(fifo, sizeof(fifo), "%s/trace.json", d.dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    char cutdoc[sizeof(good)];
    snprintf(cutdoc, sizeof(cutdoc), "%s", good);
    cutdoc[strstr(good, "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k2\"") - good] = '\0';
    pid_t w = fifo_writer(fifo, good, cutdoc);
    const char *files[] = {fifo, NULL};
    cr_assert_eq(run_import(&err, files, "changed", NULL), 1);
    cr_assert_not_null(strstr(err, "incomplete"), "%s", err);
    cr_assert_not_null(strstr(err, "premature EOF"), "%s", err);
    free(err);
    cr_assert_eq(waitpid(w, &st, 0), w);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the process: ended, without bye, marked incomplete with the reason; the entry that
     * was parsed before the error is stored */
    raw_wait_state(d.sock, 1, "ended", 10);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM processes WHERE bye = 0 AND ended_ns > 0"), 1);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.incomplete'"), 1);
    char *why = db_text(1, "SELECT value FROM meta WHERE key = 'import.error'");
    cr_assert_not_null(strstr(why, "not valid JSON at byte"), "%s", why);
    free(why);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM entries"), 1);
}

Test(import, cpu_ops_self_time_does_not_double_count)
{
    const char *files[] = {HTA "cpu_only_rank-34.json.gz", NULL};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    /* GPU events only by default: a CPU-only trace has nothing to import without --cpu-ops,
     * and is refused with the option that imports it (tested in
     * not_kineto_traces_and_cpu_only_traces_are_refused) */

    cr_assert_eq(run_import(NULL, files, "cpu2", "--cpu-ops", NULL), 0);
    /* README: gloo:all_reduce ×10 (user annotations), communication; none is nested in
     * another op on its thread, so its total is the sum of its durations in the file */
    report(&rp, "cpu2", 5);
    const msgpack_object *comm = rows(&rp, "comm");
    unsigned long long gloo = 0, gloo_ns = 0, expect_ns = 0;
    for (uint32_t i = 0; i < comm->via.array.size; i++)
        if (op_contains(&comm->via.array.ptr[i], "gloo:all_reduce")) {
            gloo += obj_u64(obj_get(&comm->via.array.ptr[i], "calls"));
            gloo_ns += obj_u64(obj_get(&comm->via.array.ptr[i], "total_ns"));
        }
    cr_assert_eq(gloo, 10);
    yajl_val root = load_json(files[0]), evs = events_of(root), du;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        const char *nm = str_at(evs->u.array.values[i], "name", NULL);
        if (nm && !strcmp(nm, "gloo:all_reduce") &&
            num_at(evs->u.array.values[i], "dur", NULL, &du))
            expect_ns += (unsigned long long)us_ns(du);
    }
    yajl_tree_free(root);
    cr_assert_eq(gloo_ns, expect_ns);
    report_done(&rp);

    /* nesting on one thread: parent 100 µs holding children of 30 and 20 µs; on another
     * thread a child running 20 µs past its parent's end counts for its parent only up to
     * that end; a ProfilerStep is not an entry (it would count everything twice) */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/nested.json", d.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"traceEvents\": ["
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"child_b\", \"tid\": 1, "
          "\"ts\": 1050, \"dur\": 20},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"parent\", \"tid\": 1, "
          "\"ts\": 1000, \"dur\": 100},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"child_a\", \"tid\": 1, "
          "\"ts\": 1010, \"dur\": 30},"
          "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#3\", "
          "\"tid\": 1, \"ts\": 900, \"dur\": 1000},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"other\", \"tid\": 2, "
          "\"ts\": 1000, \"dur\": 50},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"late\", \"tid\": 2, "
          "\"ts\": 1040, \"dur\": 30}]}",
          f);
    fclose(f);
    const char *nested[] = {path, NULL};
    cr_assert_eq(run_import(NULL, nested, "nested", "--cpu-ops", NULL), 0);
    report(&rp, "nested", 10);
    /* thread 1: 50 + 30 + 20 = 100; thread 2: (50 − 10) + 30 = 70: the time covered */
    cr_assert_eq(session_u64(&rp, "total_ns"), 170000);
    cr_assert_eq(session_u64(&rp, "entries"), 5);
    const msgpack_object *ops = rows(&rp, "ops");
    int seen = 0;
    for (uint32_t i = 0; i < ops->via.array.size; i++) {
        const msgpack_object *row = &ops->via.array.ptr[i];
        if (op_contains(row, "parent")) {
            cr_assert_eq(obj_u64(obj_get(row, "total_ns")), 50000);
            seen++;
        }
        if (op_contains(row, "other")) {
            cr_assert_eq(obj_u64(obj_get(row, "total_ns")), 40000);
            seen++;
        }
    }
    cr_assert_eq(seen, 2);
    /* every entry is in step 3 */
    const msgpack_object *slow = rows(&rp, "slowest");
    for (uint32_t i = 0; i < slow->via.array.size; i++)
        cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[i], "step")), 3);
    report_done(&rp);
}

/* ---- what import refuses, and what it keeps ------------------------------------------ */

Test(import, not_kineto_traces_and_cpu_only_traces_are_refused)
{
    /* valid JSON that is not a PyTorch profiler trace: each refused with exit 1 (README:
     * "other error"), a message naming the file and why, and nothing sent */
    static const struct {
        const char *name, *text, *why;
    } cases[] = {
        {"object.json", "{\"a\": 1}", "no \"traceEvents\""},
        {"numbers.json", "[1, 2, 3]", "not events"},
        /* torch.profiler's export_memory_timeline: [times, sizes] */
        {"memory_timeline.json", "[[1700000000000, 1700000000100], [[0, 512], [1024, 512]]]",
         "memory-timeline"},
        /* a PyTorch execution trace (Chakra's input), as ExecutionTraceObserver writes it */
        {"et.json",
         "{\"schema\": \"1.1.1-chakra.0.0.4\", \"pid\": 1234, \"time\": \"2024-07-15 10:52:38\", "
         "\"start_ts\": 200, \"nodes\": [{\"name\": \"[pytorch|profiler|execution_trace|"
         "thread]\", \"id\": 2, \"rf_id\": 0, \"parent\": 1, \"fw_parent\": 0, \"seq_id\": -1, "
         "\"scope\": 7, \"tid\": 1, \"fw_tid\": 0, \"op_schema\": \"\", \"inputs\": {\"values\": "
         "[], \"shapes\": [], \"types\": []}, \"outputs\": {\"values\": [], \"shapes\": [], "
         "\"types\": []}, \"attrs\": []}], \"finish_ts\": 300}",
         "execution trace"},
        /* a Chrome trace of another tool: complete events, none of Kineto's categories */
        {"chrome.json",
         "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"blink\", \"name\": \"Paint\", \"pid\": 1, "
         "\"tid\": 2, \"ts\": 10, \"dur\": 5}, {\"ph\": \"M\", \"name\": \"process_name\", "
         "\"pid\": 1, \"args\": {\"name\": \"Renderer\"}}], \"displayTimeUnit\": \"ms\"}",
         "none of its 2 events"},
        {"empty.json", "{\"schemaVersion\": 1, \"traceEvents\": []}", "no events"},
    };
    struct proto_reader r;
    char *out = NULL;
    int fd;

    harness_daemon_start(&d, NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *files[] = {write_file(0, cases[i].name, cases[i].text), NULL};
        cr_assert_eq(run_import(&out, files, "refused", NULL), 1, "%s: %s", cases[i].name, out);
        cr_assert_not_null(strstr(out, files[0]), "the message names no file: %s", out);
        cr_assert_not_null(strstr(out, "not a Kineto trace"), "%s", out);
        cr_assert_not_null(strstr(out, cases[i].why), "%s", out);
        free(out);
    }
    /* a Kineto trace with CPU events only: refused, naming the option that imports them, with
     * the count of CPU ops and user annotations (not ProfilerStep#N), counted here */
    const char *cpu[] = {HTA "cpu_only_rank-34.json.gz", NULL};
    cr_assert_eq(run_import(&out, cpu, "refused", NULL), 1);
    yajl_val root = load_json(cpu[0]), evs = events_of(root);
    unsigned long long n_cpu = 0;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL), *ph = str_at(e, "ph", NULL);
        const char *name = str_at(e, "name", NULL);
        n_cpu += ph && !strcmp(ph, "X") && cat &&
                 (!strcmp(cat, "cpu_op") || !strcmp(cat, "user_annotation")) && name &&
                 strncmp(name, "ProfilerStep#", 13) != 0;
    }
    yajl_tree_free(root);
    char want[64];
    snprintf(want, sizeof(want), "only %llu CPU ops", n_cpu);
    cr_assert_not_null(strstr(out, want), "%s", out);
    cr_assert_not_null(strstr(out, "--cpu-ops imports them"), "%s", out);
    free(out);
    /* none of them left a session behind */
    const msgpack_object *rows_ = sessions(&r, &fd);
    cr_assert_eq(rows_->via.array.size, 0, "a session was started");
    proto_reader_deinit(&r);
    close(fd);
    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' sessions", TRACECTL_BIN, d.sock), 0);
    cr_assert_not_null(strstr(out, "no sessions"), "%s", out);
    free(out);
}

Test(import, mtia_device_events_imported_and_unknown_categories_counted)
{
    /* MTIA's on-device events (mtia_ccp_events) are device events like CUDA kernels; events
     * of a category the importer does not know are skipped, and said so with their count */
    const char *path = write_file(
        0, "mtia.json",
        "{\"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"mtia_ccp_events\", \"name\": \"mtia_fc\", \"pid\": 1, "
        "\"tid\": 3, \"ts\": 10, \"dur\": 5, \"args\": {\"device\": 1}},"
        "{\"ph\": \"X\", \"cat\": \"mtia_ccp_events\", \"name\": \"mtia_fc\", \"pid\": 1, "
        "\"tid\": 3, \"ts\": 20, \"dur\": 7, \"args\": {\"device\": 1}},"
        "{\"ph\": \"X\", \"cat\": \"mtia_runtime\", \"name\": \"launch\", \"pid\": 77, "
        "\"tid\": 1, \"ts\": 5, \"dur\": 1},"
        "{\"ph\": \"X\", \"cat\": \"npu_events\", \"name\": \"a\", \"pid\": 2, \"tid\": 1, "
        "\"ts\": 1, \"dur\": 1},"
        "{\"ph\": \"X\", \"cat\": \"npu_events\", \"name\": \"b\", \"pid\": 2, \"tid\": 1, "
        "\"ts\": 2, \"dur\": 1},"
        "{\"ph\": \"X\", \"cat\": \"npu_events\", \"name\": \"c\", \"pid\": 2, \"tid\": 1, "
        "\"ts\": 3, \"dur\": 1}]}");
    struct rep rp;
    char *out = NULL;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(
        run_sh(&out, "'%s' --socket '%s' import '%s' --session mtia", TRACECTL_BIN, d.sock, path),
        0, "%s", out);
    cr_assert_not_null(strstr(out, "2 entries"), "%s", out);
    cr_assert_not_null(strstr(out, "skipped 3 events"), "%s", out);
    cr_assert_not_null(strstr(out, "npu_events \xc3\x97"
                                   "3"),
                       "%s", out);
    free(out);
    report(&rp, "mtia", 5);
    const msgpack_object *devs = rows(&rp, "devices");
    cr_assert_eq(devs->via.array.size, 1);
    cr_assert(obj_str_eq(obj_get(&devs->via.array.ptr[0], "device"), "mtia:1"));
    cr_assert_eq(obj_u64(obj_get(&devs->via.array.ptr[0], "total_ns")), 12000);
    report_done(&rp);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.skipped.npu_events'"), 3);
}

/* Five events whose times cannot be imported, two that can: the five counted, said and stored. */
Test(import, out_of_range_events_are_counted_and_reported)
{
    const char *path = write_file(
        0, "range.json",
        "{\"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1e30, \"dur\": 1, "
        "\"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 99999999999999999999, "
        "\"dur\": 1, \"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": -5, \"dur\": 1, "
        "\"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 10, \"dur\": -1, "
        "\"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 9000000000000000, "
        "\"dur\": 9000000000000000, \"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 20, \"dur\": 4, "
        "\"args\": {\"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 30, \"dur\": 6, "
        "\"args\": {\"device\": 0}}]}");
    char *out = NULL;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(
        run_sh(&out, "'%s' --socket '%s' import '%s' --session range", TRACECTL_BIN, d.sock, path),
        0, "%s", out);
    cr_assert_not_null(strstr(out, "2 entries"), "%s", out);
    cr_assert_not_null(strstr(out, "skipped 5 events whose ts or dur is out of range"), "%s", out);
    free(out);
    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' import '%s' --session range2 --json",
                        TRACECTL_BIN, d.sock, path),
                 0, "%s", out);
    cr_assert_not_null(strstr(out, "\"out_of_range\":5"), "%s", out);
    free(out);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.out_of_range'"), 5);
}

/* FNV-1a, 64 bits (the standard offset basis and prime), written here from its definition. */
static unsigned long long fnv1a64(const char *s, size_t n)
{
    unsigned long long h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* The README's rule for a name over 1,024 bytes: its first bytes (on a UTF-8 boundary) + "…#"
 * + the top 32 bits of its FNV-1a hash as 8 hex digits, 1,024 bytes in all. */
static void cut_name(const char *s, char *out)
{
    size_t keep = 1024 - 12;

    while (keep > 0 && ((unsigned char)s[keep] & 0xc0) == 0x80)
        keep--;
    memcpy(out, s, keep);
    sprintf(out + keep, "\xe2\x80\xa6#%08llx", fnv1a64(s, strlen(s)) >> 32);
}

/* The row of `ops` whose op is exactly name; NULL when none. */
static const msgpack_object *op_row(const struct rep *rp, const char *name)
{
    const msgpack_object *ops = rows(rp, "ops");

    for (uint32_t i = 0; i < ops->via.array.size; i++)
        if (obj_str_eq(obj_get(&ops->via.array.ptr[i], "op"), name))
            return &ops->via.array.ptr[i];
    return NULL;
}

Test(import, long_names_are_cut_visibly_and_stay_distinct)
{
    /* A and B share their first 1,500 bytes; byte 1,012 (where a cut would fall) is inside a
     * two-byte character; C is exactly 1,024 bytes (kept whole), D 1,025 */
    static char a[1600], b[1600], c[1100], dd[1100], text[16384];
    char ca[1100], cb[1100], cd[1100];
    struct rep rp;

    memset(a, 'a', 1011);
    strcpy(a + 1011, "\xc3\xa9"); /* é at bytes 1011..1012 */
    memset(a + 1013, 'x', 500);
    a[1513] = '\0';
    strcpy(b, a);
    strcat(a, "_A");
    strcat(b, "_B");
    memset(c, 'c', 1024);
    c[1024] = '\0';
    memset(dd, 'd', 1025);
    dd[1025] = '\0';
    snprintf(text, sizeof(text),
             "{\"traceEvents\": ["
             "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"ts\": 1, \"dur\": 1, "
             "\"args\": {\"device\": 0}},"
             "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"ts\": 2, \"dur\": 1, "
             "\"args\": {\"device\": 0}},"
             "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"ts\": 3, \"dur\": 1, "
             "\"args\": {\"device\": 0}},"
             "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"ts\": 4, \"dur\": 1, "
             "\"args\": {\"device\": 0}},"
             "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"ts\": 5, \"dur\": 1, "
             "\"args\": {\"device\": 0}}]}",
             a, a, b, c, dd);
    const char *files[] = {write_file(0, "long.json", text), NULL};

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_import(NULL, files, "long", NULL), 0);
    cut_name(a, ca);
    cut_name(b, cb);
    cut_name(dd, cd);
    cr_assert_eq(strlen(ca), 1011 + 3 + 1 + 8, "the cut backs off to the character's start");
    cr_assert_eq(strlen(cd), 1024);
    report(&rp, "long", 10);
    cr_assert_eq(rows(&rp, "ops")->via.array.size, 4, "A and B merged, or C was cut");
    const msgpack_object *ra = op_row(&rp, ca), *rb = op_row(&rp, cb);
    const msgpack_object *rc = op_row(&rp, c), *rd = op_row(&rp, cd);
    cr_assert(ra && rb && rc && rd, "a name is not as the README's rule says");
    cr_assert_eq(obj_u64(obj_get(ra, "calls")), 2);
    cr_assert_eq(obj_u64(obj_get(rb, "calls")), 1);
    report_done(&rp);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.names_cut'"), 4);
}

/*
 * Per file of a JSON summary: the object of `files` whose "file" is path; asserts it exists.
 */
static yajl_val json_file(yajl_val doc, const char *path)
{
    const char *files_p[] = {"files", NULL};
    yajl_val files = yajl_tree_get(doc, files_p, yajl_t_array);

    cr_assert_not_null(files);
    for (size_t i = 0; i < files->u.array.len; i++) {
        const char *f = str_at(files->u.array.values[i], "file", NULL);
        if (f && !strcmp(f, path))
            return files->u.array.values[i];
    }
    cr_assert_fail("no %s in the summary", path);
    return NULL;
}

static long long json_int(yajl_val o, const char *k1, const char *k2)
{
    yajl_val v;

    cr_assert(num_at(o, k1, k2, &v), "no %s in the summary", k1);
    return YAJL_GET_INTEGER(v);
}

/* Device events (any case: the older form says Kernel/Memcpy/Memset) of a file; pid of its
 * first cpu_op. */
static unsigned long long device_events(const char *path, long long *pid)
{
    yajl_val root = load_json(path), evs = events_of(root), v;
    unsigned long long n = 0;

    *pid = -1;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL);
        if (cat && (!strcasecmp(cat, "kernel") || !strcasecmp(cat, "gpu_memcpy") ||
                    !strcasecmp(cat, "gpu_memset") || !strcasecmp(cat, "memcpy") ||
                    !strcasecmp(cat, "memset")))
            n++;
        if (*pid < 0 && cat && !strcmp(cat, "cpu_op") && num_at(e, "pid", NULL, &v))
            *pid = YAJL_GET_INTEGER(v);
    }
    yajl_tree_free(root);
    return n;
}

Test(import, json_summary_and_the_traced_processes_pid)
{
    const char *files[] = {TBP "test_distributed_nccl.worker0.json",
                           TBP "test_distributed_nccl.worker1.json", NULL};
    char *out = NULL, err[256], host[256] = "";
    long long pid[2];
    unsigned long long n[2] = {device_events(files[0], &pid[0]), device_events(files[1], &pid[1])};

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' import '%s' '%s' --session js --json",
                        TRACECTL_BIN, d.sock, files[0], files[1]),
                 0, "%s", out);
    yajl_val doc = yajl_tree_parse(out, err, sizeof(err));
    cr_assert_not_null(doc, "not JSON: %s (%s)", err, out);
    const char *session_p[] = {"session", NULL}, *error_p[] = {"error", NULL};
    cr_assert_str_eq(YAJL_GET_STRING(yajl_tree_get(doc, session_p, yajl_t_string)), "js");
    cr_assert(YAJL_IS_NULL(yajl_tree_get(doc, error_p, yajl_t_any)));
    cr_assert_eq(json_int(doc, "session_id", NULL), 1);
    cr_assert_eq(json_int(doc, "world", NULL), 2);
    cr_assert_eq(json_int(doc, "entries", NULL), (long long)(n[0] + n[1]));
    for (int i = 0; i < 2; i++) {
        yajl_val f = json_file(doc, files[i]);
        cr_assert_eq(json_int(f, "rank", NULL), i, "no distributedInfo: the position");
        cr_assert_eq(json_int(f, "entries", NULL), (long long)n[i]);
        cr_assert_eq(json_int(f, "session_id", NULL), 1);
        cr_assert_eq(json_int(f, "process_id", NULL), i + 1);
        cr_assert_eq(json_int(f, "pid", NULL), pid[i]);
        cr_assert_str_eq(str_at(f, "session", NULL), "js");
    }
    yajl_tree_free(doc);
    free(out);
    /* the processes carry the traced process's pid (its cpu_ops') as the pid their hello
     * claimed (pid itself is the connection's, SO_PEERCRED), no host (the files name none);
     * who imported them is in the metadata */
    char *pids = db_text(1, "SELECT group_concat(claimed_pid, ' ') FROM "
                            "(SELECT claimed_pid FROM processes ORDER BY id)");
    char want[64];
    snprintf(want, sizeof(want), "%lld %lld", pid[0], pid[1]);
    cr_assert_str_eq(pids, want);
    free(pids);
    cr_assert_eq(db_int(1, "SELECT count(*) FROM processes WHERE host IS NULL"), 2);
    gethostname(host, sizeof(host) - 1);
    char *ih = db_text(1, "SELECT value FROM meta WHERE key = 'import.importer_host' AND "
                          "process_id = 1");
    cr_assert_str_eq(ih, host);
    free(ih);
    long long ipid =
        db_int(1, "SELECT value FROM meta WHERE key = 'import.importer_pid' AND process_id = 2");
    cr_assert(ipid > 0 && ipid != pid[1] && ipid != getpid(), "%lld", ipid);
}

Test(import, files_of_one_import_are_one_session_that_ends_with_it)
{
    /* two ranks whose files each say world_size 1, and a host; one rank of a 2-rank job */
    static const char fmt[] =
        "{\"distributedInfo\": {\"rank\": %d, \"world_size\": %d}, \"host_name\": \"node-%d\", "
        "\"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": %d, \"tid\": 1, "
        "\"ts\": 10, \"dur\": 20, \"args\": {\"External id\": 1}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": 15, \"dur\": 10, \"args\": {\"External id\": 1, \"device\": 0}}]}";
    char text[1024], *out = NULL;
    struct proto_reader r;
    int fd;

    snprintf(text, sizeof(text), fmt, 0, 1, 0, 1000);
    const char *r0 = write_file(0, "r0.json", text);
    snprintf(text, sizeof(text), fmt, 1, 1, 1, 1001);
    const char *r1 = write_file(1, "r1.json", text);
    snprintf(text, sizeof(text), fmt, 0, 2, 0, 2000);
    const char *half = write_file(2, "half.json", text);
    harness_daemon_start(&d, NULL);

    const char *two[] = {r0, r1, NULL};
    cr_assert_eq(run_import(NULL, two, "one", NULL), 0);
    /* one session of two processes, ended when import returned: no waiting here */
    const msgpack_object *ss = sessions(&r, &fd);
    cr_assert_eq(ss->via.array.size, 1, "files of one import made several sessions");
    cr_assert(obj_str_eq(obj_get(&ss->via.array.ptr[0], "name"), "one"));
    cr_assert_eq(obj_u64(obj_get(&ss->via.array.ptr[0], "processes")), 2);
    cr_assert(obj_str_eq(obj_get(&ss->via.array.ptr[0], "state"), "ended"));
    proto_reader_deinit(&r);
    close(fd);

    /* one rank of a job of two: the import is the session, ended at once, removable */
    const char *one[] = {half, NULL};
    cr_assert_eq(run_import(NULL, one, "half", NULL), 0);
    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' rm half", TRACECTL_BIN, d.sock), 0, "%s", out);
    free(out);

    /* --world 3: more processes are expected, so the session stays live for the linger time
     * (60 s) after the import */
    cr_assert_eq(run_import(NULL, one, "more", "--world", "3", NULL), 0);
    ss = sessions(&r, &fd);
    cr_assert(obj_str_eq(obj_get(&ss->via.array.ptr[0], "name"), "more"));
    cr_assert(obj_str_eq(obj_get(&ss->via.array.ptr[0], "state"), "live"));
    proto_reader_deinit(&r);
    close(fd);
    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' rm more", TRACECTL_BIN, d.sock), 5, "%s", out);
    free(out);

    /* the processes carry the files' pids (claimed by hello) and hosts, and the world */
    char *procs =
        db_text(1, "SELECT group_concat(rank || ':' || claimed_pid || ':' || host || ':' || "
                   "world, ' ') FROM (SELECT * FROM processes ORDER BY rank)");
    cr_assert_str_eq(procs, "0:1000:node-0:2 1:1001:node-1:2");
    free(procs);
    cr_assert_eq(db_int(3, "SELECT world FROM processes"), 3);
}

Test(import, steps_and_devices_the_trace_does_not_give_are_in_the_metadata)
{
    /* k_step runs in ProfilerStep#0 (a real step 0); the others are in no step; k_pid has no
     * args.device but a device's pid (3), k_nodev neither (a host pid) */
    const char *path = write_file(
        0, "steps.json",
        "{\"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"gpu_user_annotation\", \"name\": \"fwd\", \"pid\": 0, "
        "\"tid\": 7, \"ts\": 140, \"dur\": 30},"
        "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#0\", \"pid\": 50, "
        "\"tid\": 1, \"ts\": 100, \"dur\": 100},"
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 50, \"tid\": 1, "
        "\"ts\": 110, \"dur\": 20, \"args\": {\"External id\": 1}},"
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::add\", \"pid\": 50, \"tid\": 1, "
        "\"ts\": 300, \"dur\": 20, \"args\": {\"External id\": 2}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k_step\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": 150, \"dur\": 10, \"args\": {\"External id\": 1, \"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k_outside\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": 310, \"dur\": 10, \"args\": {\"External id\": 2, \"device\": 0}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k_pid\", \"pid\": 3, \"tid\": 7, "
        "\"ts\": 400, \"dur\": 10},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k_nodev\", \"pid\": 123456, \"tid\": 7, "
        "\"ts\": 500, \"dur\": 10},"
        "{\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoD\", \"pid\": 0, "
        "\"tid\": 7, \"ts\": 600, \"dur\": 10, \"args\": {\"device\": 0, \"bytes\": 4096}}]}");
    const char *files[] = {path, NULL};
    struct rep rp;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_import(NULL, files, "steps", NULL), 0);
    report(&rp, "steps", 10);
    const msgpack_object *k = slow_row(&rp, "k_pid", 0), *n = slow_row(&rp, "k_nodev", 0);
    const msgpack_object *m = slow_row(&rp, "Memcpy HtoD", 0);
    cr_assert(k && n && m);
    cr_assert(obj_str_eq(obj_get(k, "device"), "gpu:3"));
    cr_assert(obj_str_eq(obj_get(n, "device"), "gpu:0"));
    cr_assert_eq(obj_u64(obj_get(m, "mem_bytes")), 4096);
    report_done(&rp);
    /* 4 of the 5 entries are in no ProfilerStep (sent as step 0, said in the metadata) */
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.steps_unknown'"), 4);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.device_from_pid'"), 1);
    cr_assert_eq(db_int(1, "SELECT value FROM meta WHERE key = 'import.device_default'"), 1);
    /* the traced pid is the host events' (50), not a device's (the GPU annotation's 0) */
    cr_assert_eq(db_int(1, "SELECT claimed_pid FROM processes"), 50);
}

Test(import, progress_line_counts_cpu_op_entries)
{
    /* a CPU-only trace with --cpu-ops on a terminal (script(1) gives it one): the last
     * progress line while sending shows every entry and a rate above 0 */
    const char *path = HTA "distributed_info_not_found.json.gz";
    yajl_val root = load_json(path), evs = events_of(root);
    unsigned long long expect = 0, shown = 0;
    double rate = 0;
    char *out = NULL;

    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL), *ph = str_at(e, "ph", NULL);
        const char *name = str_at(e, "name", NULL);
        expect += ph && !strcmp(ph, "X") && cat &&
                  (!strcmp(cat, "cpu_op") || !strcmp(cat, "user_annotation")) && name &&
                  strncmp(name, "ProfilerStep#", 13) != 0;
    }
    yajl_tree_free(root);
    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_sh(&out, "script -qec \"'%s' --socket '%s' import '%s' --cpu-ops\" /dev/null",
                        TRACECTL_BIN, d.sock, path),
                 0, "%s", out);
    char *last = NULL;
    for (char *p = out; (p = strstr(p, "sending [")) != NULL; p++)
        last = p;
    cr_assert_not_null(last, "no progress line: %s", out);
    char *comma = strstr(last, "MiB, ");
    cr_assert_not_null(comma, "%s", last);
    cr_assert_eq(sscanf(comma, "MiB, %llu entries, %lf entries/s", &shown, &rate), 2, "%s", last);
    cr_assert_eq(shown, expect);
    cr_assert_gt(rate, 0);
    free(out);
}

/* ---- the report's analysis sections on real traces ----------------------------------- */

/* Communication by kernel name, as README.md says the importer classifies (lower-cased). */
static bool comm_name(const char *name)
{
    static const char *const words[] = {"nccl",
                                        "rccl",
                                        "msccl",
                                        "gloo",
                                        "c10d::",
                                        "nvshmem",
                                        "allreduce",
                                        "all_reduce",
                                        "allgather",
                                        "all_gather",
                                        "reducescatter",
                                        "reduce_scatter",
                                        "alltoall",
                                        "all_to_all",
                                        "sendrecv",
                                        "cross_device_reduce",
                                        "record_param_comms",
                                        "ep::internode::",
                                        "ep::intranode::",
                                        "deep_ep"};
    char low[2048];
    size_t i;

    for (i = 0; name[i] != '\0' && i < sizeof(low) - 1; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = '\0';
    for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(low, words[i]) != NULL)
            return true;
    return strncmp(low, "mpi_", 4) == 0;
}

struct iv2 {
    long long b, e;
};

static int iv2_cmp(const void *a, const void *b)
{
    const struct iv2 *x = a, *y = b;

    return x->b < y->b ? -1 : x->b > y->b;
}

/*
 * Per-category totals of one rank's file (GPU events on a device, as imported) and its
 * exposed communication: for each comm kernel, its time not covered by the union of the
 * compute kernels of its device.
 */
static void rank_totals(const char *path, unsigned long long out[4])
{
    yajl_val root = load_json(path), evs = events_of(root), dur, ts, dev;
    struct iv2 *cu = calloc(evs->u.array.len + 1, sizeof(*cu));
    size_t n = 0, m = 0;

    cr_assert_not_null(cu);
    memset(out, 0, 4 * sizeof(*out)); /* compute, comm, memory, exposed */
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL), *name = str_at(e, "name", NULL);
        if (!is_gpu(e) || !num_at(e, "dur", NULL, &dur) || !num_at(e, "ts", NULL, &ts) ||
            !num_at(e, "args", "device", &dev) || name == NULL)
            continue;
        if (strcmp(cat, "kernel") != 0)
            out[2] += (unsigned long long)us_ns(dur);
        else if (comm_name(name))
            out[1] += (unsigned long long)us_ns(dur);
        else {
            out[0] += (unsigned long long)us_ns(dur);
            if (us_ns(dur) > 0)
                cu[n++] = (struct iv2){us_ns(ts), us_ns(ts) + us_ns(dur)};
        }
    }
    qsort(cu, n, sizeof(*cu), iv2_cmp);
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && cu[i].b <= cu[m - 1].e) {
            if (cu[i].e > cu[m - 1].e)
                cu[m - 1].e = cu[i].e;
        } else {
            cu[m++] = cu[i];
        }
    }
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL), *name = str_at(e, "name", NULL);
        long long b, en, cov = 0;
        if (!is_gpu(e) || !num_at(e, "dur", NULL, &dur) || !num_at(e, "ts", NULL, &ts) ||
            !num_at(e, "args", "device", &dev) || name == NULL || strcmp(cat, "kernel") != 0 ||
            !comm_name(name))
            continue;
        b = us_ns(ts);
        en = b + us_ns(dur);
        for (size_t k = 0; k < m; k++) {
            long long x = cu[k].b > b ? cu[k].b : b, y = cu[k].e < en ? cu[k].e : en;
            if (y > x)
                cov += y - x;
        }
        out[3] += (unsigned long long)(en - b - cov);
    }
    free(cu);
    yajl_tree_free(root);
}

Test(import, analysis_per_rank_totals_match_the_traces)
{
    const char *files[] = {HTA "sampled_rank-0.json.gz", HTA "sampled_rank-1.json.gz", NULL};
    struct proto_request req;
    struct rep rp;
    const msgpack_object *o, *ranks;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(run_import(NULL, files, "sampled", NULL), 0);
    proto_request_init(&req);
    req.session.name = "sampled";
    req.analysis.on = true;
    o = raw_control(d.sock, PROTO_REPORT, &req, &rp.r, &rp.fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    rp.o = &o->via.array.ptr[1];
    ranks = rows(&rp, "ranks");
    cr_assert_eq(ranks->via.array.size, 2);
    for (unsigned k = 0; k < 2; k++) {
        const msgpack_object *row = &ranks->via.array.ptr[k];
        unsigned long long want[4];

        rank_totals(files[k], want);
        cr_assert_eq(obj_u64(obj_get(row, "rank")), k);
        cr_expect_eq(obj_u64(obj_get(row, "compute_ns")), want[0], "rank %u compute", k);
        cr_expect_eq(obj_u64(obj_get(row, "comm_ns")), want[1], "rank %u comm", k);
        cr_expect_eq(obj_u64(obj_get(row, "memory_ns")), want[2], "rank %u memory", k);
        cr_expect_eq(obj_u64(obj_get(row, "exposed_comm_ns")), want[3], "rank %u exposed", k);
        cr_expect_gt(want[1], 0, "the traces have communication kernels");
    }
    cr_expect_eq(obj_u64(obj_get(obj_get(rp.o, "completeness"), "late_entries")), 0);
    /* the SendRecv kernels (NCCL's all-to-all) matched across the two ranks in the order
     * of their starts: each rank's wait is the later start minus its own, capped at its
     * duration */
    {
        long long st[2][64], du[2][64], waited[2] = {0, 0}, last[2] = {0, 0};
        size_t n[2] = {0, 0};
        for (unsigned k = 0; k < 2; k++) {
            yajl_val root = load_json(files[k]), evs = events_of(root), dur, ts;
            for (size_t i = 0; i < evs->u.array.len; i++) {
                yajl_val e = evs->u.array.values[i];
                const char *name = str_at(e, "name", NULL);
                if (!is_gpu(e) || name == NULL || strstr(name, "SendRecv") == NULL ||
                    !num_at(e, "dur", NULL, &dur) || !num_at(e, "ts", NULL, &ts))
                    continue;
                cr_assert_lt(n[k], 64);
                size_t j = n[k]++;
                while (j > 0 && st[k][j - 1] > us_ns(ts)) { /* insertion by start */
                    st[k][j] = st[k][j - 1], du[k][j] = du[k][j - 1];
                    j--;
                }
                st[k][j] = us_ns(ts), du[k][j] = us_ns(dur);
            }
            yajl_tree_free(root);
        }
        cr_assert_eq(n[0], n[1]);
        for (size_t i = 0; i < n[0]; i++) {
            long long l = st[0][i] > st[1][i] ? st[0][i] : st[1][i];
            last[st[1][i] > st[0][i]]++;
            for (unsigned k = 0; k < 2; k++)
                waited[k] += l - st[k][i] < du[k][i] ? l - st[k][i] : du[k][i];
        }
        for (unsigned k = 0; k < 2; k++) {
            const msgpack_object *row = &ranks->via.array.ptr[k];
            cr_expect_eq(obj_u64(obj_get(row, "collectives")), n[0]);
            cr_expect_eq(obj_u64(obj_get(row, "waited_ns")), (unsigned long long)waited[k],
                         "rank %u waited", k);
            cr_expect_eq(obj_u64(obj_get(row, "arrived_last")), (unsigned long long)last[k]);
        }
    }
    report_done(&rp);
}

/* ---- links: report --by launcher, export --stacks launcher ------------------------------ */

struct launch_sum {
    char launcher[1100], kernel[1100]; /* as stored: cut_name() past 1,024 bytes */
    unsigned long long calls, total_ns;
};

struct ext_op {
    long long ext;
    const char *name;
};

static int cmp_ext_op(const void *a, const void *b)
{
    long long x = ((const struct ext_op *)a)->ext, y = ((const struct ext_op *)b)->ext;

    return (x > y) - (x < y);
}

static void stored_name(const char *s, char *out)
{
    if (strlen(s) > 1024)
        cut_name(s, out);
    else
        strcpy(out, s);
}

/* Adds one kernel to its (launcher, kernel) sum; n counts the sums in use. */
static void launch_add(struct launch_sum *s, size_t *n, size_t cap, const char *launcher,
                       const char *kernel, long long dur)
{
    char l[1100], k[1100];
    size_t i;

    stored_name(launcher, l);
    stored_name(kernel, k);
    for (i = 0; i < *n && (strcmp(s[i].launcher, l) != 0 || strcmp(s[i].kernel, k) != 0); i++)
        ;
    if (i == *n) {
        cr_assert_lt(*n, cap);
        memset(&s[i], 0, sizeof(s[i]));
        strcpy(s[i].launcher, l);
        strcpy(s[i].kernel, k);
        (*n)++;
    }
    s[i].calls++;
    s[i].total_ns += (unsigned long long)dur;
}

/*
 * The (launcher, kernel) sums of a trace, computed here: every kernel,
 * memcpy and memset event whose args["External id"] is that of a cpu_op
 * (every device event of the two files this is used on has one; the test
 * asserts it), its duration from the number's text.
 */
static size_t launch_sums(const char *path, struct launch_sum *s, size_t cap)
{
    yajl_val root = load_json(path), evs = events_of(root), ext;
    struct ext_op *ops = calloc(evs->u.array.len, sizeof(*ops)), key, *hit;
    size_t n_ops = 0, n = 0;

    cr_assert_not_null(ops);
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *cat = str_at(e, "cat", NULL), *ph = str_at(e, "ph", NULL);
        if (cat && ph && !strcmp(cat, "cpu_op") && !strcmp(ph, "X") &&
            num_at(e, "args", "External id", &ext))
            ops[n_ops++] = (struct ext_op){YAJL_GET_INTEGER(ext), str_at(e, "name", NULL)};
    }
    qsort(ops, n_ops, sizeof(*ops), cmp_ext_op);
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i], dur;
        const char *ph = str_at(e, "ph", NULL);
        if (!is_gpu(e) || ph == NULL || strcmp(ph, "X") != 0)
            continue;
        cr_assert(num_at(e, "args", "External id", &ext), "a device event without External id");
        key.ext = YAJL_GET_INTEGER(ext);
        hit = bsearch(&key, ops, n_ops, sizeof(*ops), cmp_ext_op);
        cr_assert_not_null(hit, "a device event whose External id is no cpu_op's");
        cr_assert(num_at(e, "dur", NULL, &dur));
        launch_add(s, &n, cap, hit->name, str_at(e, "name", NULL), us_ns(dur));
    }
    free(ops);
    yajl_tree_free(root);
    return n;
}

/* Frames of collapsed stacks: ';' becomes ':', CR and LF spaces (PROTOCOL.md). */
static void frame_clean(char *s)
{
    for (; *s; s++)
        *s = *s == ';' ? ':' : (*s == '\n' || *s == '\r') ? ' ' : *s;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* export --stacks launcher --weight calls: exactly one line per (launcher, kernel) pair. */
static void check_launcher_stacks(const char *session, const struct launch_sum *s, size_t n)
{
    char **want = calloc(n, sizeof(char *)), *out = NULL, *line, *save = NULL;
    size_t got = 0;

    cr_assert_not_null(want);
    for (size_t i = 0; i < n; i++) {
        char l[1100], k[1100];
        strcpy(l, s[i].launcher);
        strcpy(k, s[i].kernel);
        frame_clean(l);
        frame_clean(k);
        want[i] = malloc(strlen(session) + strlen(l) + strlen(k) + 40);
        cr_assert_not_null(want[i]);
        sprintf(want[i], "%s;rank 0;%s;%s %llu", session, l, k, s[i].calls);
    }
    qsort(want, n, sizeof(char *), cmp_str);
    cr_assert_eq(run_sh(&out,
                        "'%s' --socket '%s' export %s --format collapsed --stacks launcher"
                        " --weight calls",
                        TRACECTL_BIN, d.sock, session),
                 0, "%s", out);
    for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        cr_assert_lt(got, n, "more stacks than (launcher, kernel) pairs: %s", line);
        cr_assert_str_eq(line, want[got]);
        got++;
    }
    cr_assert_eq(got, n);
    for (size_t i = 0; i < n; i++)
        free(want[i]);
    free(want);
    free(out);
}

/* report --by launcher --json: each launcher's calls, time and kernels, and the pairs. */
static void check_by_launcher(const char *session, const struct launch_sum *s, size_t n)
{
    char *out = NULL, err[256];
    const char *lp[] = {"launchers", NULL}, *pp[] = {"pairs", NULL};
    yajl_val v, rows, pairs;
    unsigned long long total = 0;
    size_t launchers = 0;

    cr_assert_eq(run_sh(&out, "'%s' --socket '%s' report %s --by launcher --json", TRACECTL_BIN,
                        d.sock, session),
                 0, "%s", out);
    v = yajl_tree_parse(out, err, sizeof(err));
    cr_assert_not_null(v, "%s", err);
    rows = yajl_tree_get(v, lp, yajl_t_array);
    pairs = yajl_tree_get(v, pp, yajl_t_array);
    cr_assert(rows != NULL && pairs != NULL);
    cr_assert_eq(pairs->u.array.len, n);
    for (size_t i = 0; i < n; i++) {
        unsigned long long calls = 0, ns = 0, kernels = 0;
        bool first = true, found = false;
        total += s[i].total_ns;
        for (size_t j = 0; j < i; j++)
            first &= strcmp(s[j].launcher, s[i].launcher) != 0;
        if (!first)
            continue;
        launchers++;
        for (size_t j = i; j < n; j++) {
            if (strcmp(s[j].launcher, s[i].launcher) == 0)
                calls += s[j].calls, ns += s[j].total_ns, kernels++;
        }
        for (size_t r = 0; r < rows->u.array.len && !found; r++) {
            yajl_val row = rows->u.array.values[r];
            const char *name = str_at(row, "launcher", NULL);
            yajl_val c, t, k;
            if (name == NULL || strcmp(name, s[i].launcher) != 0)
                continue;
            found = num_at(row, "calls", NULL, &c) && num_at(row, "total_ns", NULL, &t) &&
                    num_at(row, "kernels", NULL, &k);
            cr_assert(found);
            cr_assert_eq((unsigned long long)YAJL_GET_INTEGER(c), calls, "%s: %lld calls, not %llu",
                         name, YAJL_GET_INTEGER(c), calls);
            cr_assert_eq((unsigned long long)YAJL_GET_INTEGER(t), ns, "%s: %lld ns, not %llu", name,
                         YAJL_GET_INTEGER(t), ns);
            cr_assert_eq((unsigned long long)YAJL_GET_INTEGER(k), kernels,
                         "%s: %lld kernels, not %llu", name, YAJL_GET_INTEGER(k), kernels);
        }
        cr_assert(found, "no row for launcher %s", s[i].launcher);
    }
    cr_assert_eq(rows->u.array.len, launchers); /* and no row without a launcher */
    cr_assert_eq((unsigned long long)YAJL_GET_INTEGER(
                     yajl_tree_get(v, (const char *[]){"total_ns", NULL}, yajl_t_number)),
                 total);
    yajl_tree_free(v);
    free(out);
}

Test(import, launcher_grouping_matches_the_trace)
{
    static const char *const paths[] = {HTA "nccl_data.json.gz",
                                        HTA "ns_resolution_rank-0.json.gz"};
    static struct launch_sum s[1024];

    harness_daemon_start(&d, NULL);
    for (size_t f = 0; f < 2; f++) {
        const char *files[] = {paths[f], NULL};
        char session[32];
        size_t n = launch_sums(paths[f], s, 1024);

        snprintf(session, sizeof(session), "links-%zu", f);
        cr_assert_gt(n, 10);
        cr_assert_eq(run_import(NULL, files, session, NULL), 0);
        check_by_launcher(session, s, n);
        check_launcher_stacks(session, s, n);
    }
}
