/*
 * test_import.c — `tracectl import` on real PyTorch-profiler (Kineto) traces
 * from ../shared/data/kineto, against a real daemon. Expected values come
 * from the files themselves, read here with yajl's tree parser (not the
 * importer's streaming code), or from the data README's known values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"

#define HTA SHARED_DATA_DIR "/kineto/hta/"

static struct tdaemon d;

static void fini(void)
{
    if (d.pid > 0)
        harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
}

TestSuite(import, .init = NULL, .fini = fini, .timeout = 120);

static int import_opt(char **err, const char *const *files, const char *session, const char *rank,
                      bool cpu_ops)
{
    char *argv[16];
    int n = 0;

    argv[n++] = TRACECTL_BIN;
    argv[n++] = "--socket";
    argv[n++] = d.sock;
    argv[n++] = "import";
    for (; *files != NULL; files++)
        argv[n++] = (char *)*files;
    argv[n++] = "--session";
    argv[n++] = (char *)session;
    argv[n++] = "--quiet";
    if (rank != NULL) {
        argv[n++] = "--rank";
        argv[n++] = (char *)rank;
    }
    if (cpu_ops)
        argv[n++] = "--cpu-ops";
    argv[n] = NULL;
    /* stderr carries the error: capture it through sh */
    char cmd[4096] = "";
    for (int i = 0; argv[i] != NULL; i++) {
        strcat(cmd, "'");
        strcat(cmd, argv[i]);
        strcat(cmd, "' ");
    }
    strcat(cmd, "2>&1");
    char *sh[] = {"sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = harness_run(&out, sh);
    if (err != NULL)
        *err = out;
    else
        free(out);
    return rc;
}

static int import(char **err, const char *const *files, const char *session, const char *rank)
{
    return import_opt(err, files, session, rank, false);
}

static const msgpack_object *report(const char *session, unsigned top, struct proto_reader *r,
                                    int *fd)
{
    struct proto_request req;
    const msgpack_object *o;

    proto_request_init(&req);
    req.session.name = (char *)session;
    req.top = top;
    o = raw_control(d.sock, PROTO_REPORT, &req, r, fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "no report for %s", session);
    return &o->via.array.ptr[1];
}

/* A gzip'd JSON file parsed whole with yajl's tree API (the files are small). */
static yajl_val load_json(const char *path)
{
    char cmd[1024], *text = NULL, err[256];
    snprintf(cmd, sizeof(cmd), "zcat '%s'", path);
    char *sh[] = {"sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(&text, sh), 0);
    yajl_val v = yajl_tree_parse(text, err, sizeof(err));
    cr_assert_not_null(v, "%s: %s", path, err);
    free(text);
    return v;
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

Test(import, nccl_trace_longest_allreduce_and_comm_rows)
{
    const char *files[] = {HTA "nccl_data.json.gz", NULL};
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(import(NULL, files, "nccl", NULL), 0);
    const msgpack_object *rep = report("nccl", 5, &r, &fd);
    /* README: the longest is an AllReduce kernel of 5993.392 µs */
    const msgpack_object *first = &obj_get(rep, "slowest")->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(first, "dur_ns")), 5993392);
    cr_assert(op_contains(first, "AllReduce"));
    cr_assert(obj_str_eq(obj_get(first, "device"), "gpu:0"));
    /* README: 21 ncclKernel kernels, AllReduce ×15 and Broadcast ×6, all communication */
    const msgpack_object *comm = obj_get(rep, "comm");
    unsigned long long allreduce = 0, broadcast = 0;
    for (uint32_t i = 0; i < comm->via.array.size; i++) {
        const msgpack_object *row = &comm->via.array.ptr[i];
        if (op_contains(row, "ncclKernel_AllReduce"))
            allreduce += obj_u64(obj_get(row, "calls"));
        if (op_contains(row, "ncclKernel_Broadcast"))
            broadcast += obj_u64(obj_get(row, "calls"));
    }
    cr_assert_eq(allreduce, 15);
    cr_assert_eq(broadcast, 6);
    /* every kernel, memcpy and memset, counted from the file by a separate reader */
    yajl_val root = load_json(HTA "nccl_data.json.gz");
    const char *ev_path[] = {"traceEvents", NULL}, *cat_path[] = {"cat", NULL};
    yajl_val evs = yajl_tree_get(root, ev_path, yajl_t_array);
    unsigned long long expect = 0;
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val cat = yajl_tree_get(evs->u.array.values[i], cat_path, yajl_t_string);
        if (cat != NULL &&
            (strcmp(cat->u.string, "kernel") == 0 || strcmp(cat->u.string, "gpu_memcpy") == 0 ||
             strcmp(cat->u.string, "gpu_memset") == 0))
            expect++;
    }
    yajl_tree_free(root);
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "entries")), expect);
    proto_reader_deinit(&r);
    close(fd);
}

/* Sum over GPU events of round(dur µs × 1000) per args.device, from the tree parser. */
static void device_sums(const char *path, unsigned long long sums[8])
{
    yajl_val root = load_json(path);
    const char *ev_path[] = {"traceEvents", NULL}, *cat_path[] = {"cat", NULL},
               *dur_path[] = {"dur", NULL}, *dev_path[] = {"args", "device", NULL};
    yajl_val evs = yajl_tree_get(root, ev_path, yajl_t_array);

    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        yajl_val cat = yajl_tree_get(e, cat_path, yajl_t_string);
        yajl_val dur = yajl_tree_get(e, dur_path, yajl_t_number);
        yajl_val dev = yajl_tree_get(e, dev_path, yajl_t_number);
        if (cat == NULL || dur == NULL || dev == NULL)
            continue;
        if (strcmp(cat->u.string, "kernel") && strcmp(cat->u.string, "gpu_memcpy") &&
            strcmp(cat->u.string, "gpu_memset"))
            continue;
        long long k = YAJL_GET_INTEGER(dev);
        if (k >= 0 && k < 8)
            sums[k] += (unsigned long long)llround(YAJL_GET_DOUBLE(dur) * 1000.0);
    }
    yajl_tree_free(root);
}

Test(import, two_sampled_ranks_make_one_session)
{
    const char *files[] = {HTA "sampled_rank-0.json.gz", HTA "sampled_rank-1.json.gz", NULL};
    unsigned long long sums[8] = {0};
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(import(NULL, files, "sampled", NULL), 0);
    device_sums(files[0], sums);
    device_sums(files[1], sums);
    const msgpack_object *rep = report("sampled", 10, &r, &fd);
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "processes")), 2);
    const msgpack_object *devs = obj_get(rep, "devices");
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
    /* ranks from distributedInfo: 0 and 1 */
    const msgpack_object *slow = obj_get(rep, "slowest");
    bool rank0 = false, rank1 = false;
    for (uint32_t i = 0; i < slow->via.array.size; i++) {
        unsigned long long rk = obj_u64(obj_get(&slow->via.array.ptr[i], "rank"));
        rank0 |= rk == 0;
        rank1 |= rk == 1;
    }
    cr_assert(rank0 || rank1);
    proto_reader_deinit(&r);
    close(fd);
}

Test(import, odd_files_large_integers_ns_timestamps_missing_rank)
{
    const char *big[] = {HTA "large_integer_rank-70.json.gz", NULL};
    const char *ns[] = {HTA "ns_resolution_rank-0.json.gz", NULL};
    const char *norank[] = {HTA "distributed_info_not_found.json.gz", NULL};
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    /* an argument beyond INT64_MAX: imported, the kernel is there (ts 100 µs, dur 50 µs) */
    cr_assert_eq(import(NULL, big, "bigint", NULL), 0);
    const msgpack_object *rep = report("bigint", 5, &r, &fd);
    const msgpack_object *first = &obj_get(rep, "slowest")->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(first, "dur_ns")), 50000);
    cr_assert_eq(obj_u64(obj_get(first, "start_ns")), 100000);
    proto_reader_deinit(&r);
    close(fd);
    /* fractional µs: ns resolution survives (the start times are not whole µs) */
    cr_assert_eq(import(NULL, ns, "nsres", NULL), 0);
    rep = report("nsres", 20, &r, &fd);
    const msgpack_object *slow = obj_get(rep, "slowest");
    int fractional = 0;
    for (uint32_t i = 0; i < slow->via.array.size; i++)
        fractional += obj_u64(obj_get(&slow->via.array.ptr[i], "start_ns")) % 1000 != 0;
    cr_assert_gt(fractional, 0, "every start is a whole µs: ns were lost");
    proto_reader_deinit(&r);
    close(fd);
    /* no distributedInfo (a CPU-only trace): --rank */
    cr_assert_eq(import_opt(NULL, norank, "norank", "5", true), 0);
    rep = report("norank", 3, &r, &fd);
    slow = obj_get(rep, "slowest");
    cr_assert_gt(slow->via.array.size, 0);
    for (uint32_t i = 0; i < slow->via.array.size; i++)
        cr_assert_eq(obj_u64(obj_get(&slow->via.array.ptr[i], "rank")), 5);
    proto_reader_deinit(&r);
    close(fd);
}

Test(import, malformed_file_names_the_offset_and_sends_nothing)
{
    char cut[PATH_MAX + 32], cmd[PATH_MAX * 2 + 64];
    char *err = NULL;
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    snprintf(cut, sizeof(cut), "%s/cut.json", d.dir);
    /* the first 100,000 bytes of a real trace: valid up to there, then cut */
    snprintf(cmd, sizeof(cmd), "zcat '%s' | head -c 100000 > '%s'", HTA "sampled_rank-0.json.gz",
             cut);
    char *sh[] = {"sh", "-c", cmd, NULL};
    cr_assert_eq(harness_run(NULL, sh), 0);
    const char *files[] = {cut, NULL};
    cr_assert_neq(import(&err, files, "broken", NULL), 0);
    cr_assert_not_null(strstr(err, "byte 100000"), "the error does not name the offset: %s", err);
    free(err);
    /* nothing of it was stored */
    const msgpack_object *o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert_eq(o->via.array.ptr[1].via.array.size, 0, "a session was started");
    proto_reader_deinit(&r);
    close(fd);
    /* and a file that does not exist */
    const char *missing[] = {"/nonexistent/trace.json", NULL};
    cr_assert_eq(import(NULL, missing, "missing", NULL), 1);
}

Test(import, cpu_ops_self_time_does_not_double_count)
{
    const char *files[] = {HTA "cpu_only_rank-34.json.gz", NULL};
    struct proto_reader r;
    int fd;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(import(NULL, files, "cpu", NULL), 0);
    /* GPU events only by default: a CPU-only trace gives no entries */
    const msgpack_object *rep = report("cpu", 5, &r, &fd);
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "entries")), 0);
    proto_reader_deinit(&r);
    close(fd);

    char *argv[] = {TRACECTL_BIN, "--socket", d.sock,    "import",    (char *)files[0],
                    "--session",  "cpu2",     "--quiet", "--cpu-ops", NULL};
    cr_assert_eq(harness_run(NULL, argv), 0);
    /* README: gloo:all_reduce ×10 (user annotations); none is nested in another op on
     * its thread, so its total is the sum of its durations in the file */
    rep = report("cpu2", 5, &r, &fd);
    const msgpack_object *ops = obj_get(rep, "ops");
    unsigned long long gloo = 0, gloo_ns = 0, expect_ns = 0;
    for (uint32_t i = 0; i < ops->via.array.size; i++)
        if (op_contains(&ops->via.array.ptr[i], "gloo:all_reduce")) {
            gloo += obj_u64(obj_get(&ops->via.array.ptr[i], "calls"));
            gloo_ns += obj_u64(obj_get(&ops->via.array.ptr[i], "total_ns"));
        }
    cr_assert_eq(gloo, 10);
    yajl_val root = load_json(files[0]);
    const char *ev_path[] = {"traceEvents", NULL}, *name_path[] = {"name", NULL},
               *dur_path[] = {"dur", NULL};
    yajl_val evs = yajl_tree_get(root, ev_path, yajl_t_array);
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val nm = yajl_tree_get(evs->u.array.values[i], name_path, yajl_t_string);
        yajl_val du = yajl_tree_get(evs->u.array.values[i], dur_path, yajl_t_number);
        if (nm != NULL && du != NULL && strcmp(nm->u.string, "gloo:all_reduce") == 0)
            expect_ns += (unsigned long long)llround(YAJL_GET_DOUBLE(du) * 1000.0);
    }
    yajl_tree_free(root);
    cr_assert_eq(gloo_ns, expect_ns);
    proto_reader_deinit(&r);
    close(fd);

    /* nesting on one thread: parent 100 µs holding children of 30 and 20 µs */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/nested.json", d.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"traceEvents\": ["
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"parent\", \"tid\": 1, "
          "\"ts\": 1000, \"dur\": 100},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"child_a\", \"tid\": 1, "
          "\"ts\": 1010, \"dur\": 30},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"child_b\", \"tid\": 1, "
          "\"ts\": 1050, \"dur\": 20},"
          "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"other\", \"tid\": 2, "
          "\"ts\": 1000, \"dur\": 50}]}",
          f);
    fclose(f);
    const char *nested[] = {path, NULL};
    cr_assert_eq(import_opt(NULL, nested, "nested", NULL, true), 0);
    rep = report("nested", 10, &r, &fd);
    /* 100 − 30 − 20 = 50 for the parent: 50 + 30 + 20 + 50 = 150 µs in all */
    cr_assert_eq(obj_u64(obj_get(obj_get(rep, "session"), "total_ns")), 150000);
    ops = obj_get(rep, "ops");
    for (uint32_t i = 0; i < ops->via.array.size; i++)
        if (op_contains(&ops->via.array.ptr[i], "parent"))
            cr_assert_eq(obj_u64(obj_get(&ops->via.array.ptr[i], "total_ns")), 50000);
    proto_reader_deinit(&r);
    close(fd);
}
