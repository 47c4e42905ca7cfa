/*
 * test_import.c — `tracectl import` on real PyTorch-profiler (Kineto) traces
 * from tests/data/kineto, against a real daemon; reports are read over
 * the raw protocol, metadata and process ends from the session's SQLite
 * file. Expected values come from the files themselves, read here with
 * yajl's tree parser (not the importer's streaming code; numbers converted
 * from their text with strtold), or from the data README and the
 * tb_plugin `.expected.txt` assertions. Every file a test writes is in the
 * daemon's temporary dir, removed by harness_cleanup().
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"

#define HTA TEST_DATA_DIR "/kineto/hta/"
#define TBP TEST_DATA_DIR "/kineto/tb_plugin_distributed/"

static struct tdaemon d;

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
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

/* ---- reading the files independently ------------------------------------------------- */

/* A JSON file (gzip'd or plain) parsed whole with yajl's tree API (the test files are small). */
static yajl_val load_json(const char *path)
{
    char cmd[PATH_MAX + 32], *text = NULL, err[256];

    snprintf(cmd, sizeof(cmd), "zcat -f '%s'", path);
    char *sh[] = {"sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(&text, sh), 0);
    yajl_val v = yajl_tree_parse(text, err, sizeof(err));
    cr_assert_not_null(v, "%s: %s", path, err);
    free(text);
    return v;
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
    cr_assert_eq(db_int(1, "SELECT world FROM processes"),
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
    /* ranks and world from distributedInfo (rank 0 and 1 of 128) */
    char *ranks = db_text(1, "SELECT group_concat(rank || '/' || world, ' ') FROM "
                             "(SELECT rank, world FROM processes ORDER BY rank)");
    cr_assert_str_eq(ranks, "0/128 1/128");
    free(ranks);
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
    cr_assert_eq(run_import(NULL, files, "cpu", NULL), 0);
    /* GPU events only by default: a CPU-only trace gives no entries */
    report(&rp, "cpu", 5);
    cr_assert_eq(session_u64(&rp, "entries"), 0);
    report_done(&rp);

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
