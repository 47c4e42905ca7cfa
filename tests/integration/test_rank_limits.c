/*
 * What a peer can make a report cost through the rank analysis (issue 28
 * items 3, 5 and 9): a hello's `world` is clamped to RANKS_MAX_WORLD and the
 * missing ranks are sent as ranges (a report's cost follows the ranks seen,
 * never the world). The real daemon on a temporary socket, hellos crafted
 * with the harness.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define T0        1000000000ull
#define MAX_WORLD (1u << 20) /* RANKS_MAX_WORLD, proto/PROTOCOL.md "report analysis" */

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(rank_limits, .fini = fini, .timeout = 120);

/* The analysis of session id (filtered to ranks[0..n) when n > 0): the reply's map. */
static const msgpack_object *analysis(long long id, const int64_t *ranks, uint32_t n,
                                      struct proto_reader *r)
{
    struct proto_request req;
    const msgpack_object *o;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    for (uint32_t i = 0; i < n; i++)
        req.analysis.ranks[i] = ranks[i];
    req.analysis.n_ranks = n;
    o = raw_control(d.sock, PROTO_REPORT, &req, r, &fd);
    close(fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report failed");
    return &o->via.array.ptr[1];
}

/* One producer per rank (worlds[k]), 4 allreduce entries each, then bye; the session's id. */
static long long producers(const char *name, const int *ranks, const int *worlds, int n)
{
    long long id = -1;

    for (int k = 0; k < n; k++) {
        int fd = raw_producer(d.sock, name, ranks[k], worlds[k], "gpu:0", &id);
        raw_send_ops(fd, 1, "allreduce");
        raw_send_batch(fd, 1, 4, T0, 1000);
        cr_assert_eq(raw_flush(fd, 1), 4);
        raw_bye(fd, 0);
    }
    raw_wait_state(d.sock, id, "ended", 30);
    return id;
}

static void expect_ranges(const msgpack_object *v, const uint64_t (*want)[2], uint32_t n)
{
    cr_assert_eq(v->type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(v->via.array.size, n);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *p = &v->via.array.ptr[i];
        cr_assert_eq(p->via.array.size, 2);
        cr_expect_eq(p->via.array.ptr[0].via.u64, want[i][0], "range %u", i);
        cr_expect_eq(p->via.array.ptr[1].via.u64, want[i][1], "range %u", i);
    }
}

/*
 * world 50,000,000 (the issue's: a 250 MB report listing every rank) is
 * counted as 2^20: missing ranks in two ranges, the list capped at 1,000, the
 * verdict counting them, and what the hello said kept as world_given.
 */
Test(rank_limits, huge_world_is_clamped_and_missing_ranks_are_ranges)
{
    static const int ranks[2] = {0, 5}, worlds[2] = {8, 50000000};
    static const uint64_t want[2][2] = {{1, 4}, {6, MAX_WORLD - 1}};
    struct proto_reader r;
    const msgpack_object *rep, *comp, *v;
    long long id;
    char line[64];

    harness_daemon_start(&d, "--linger", "1", NULL);
    id = producers("huge", ranks, worlds, 2);
    rep = analysis(id, NULL, 0, &r);
    comp = obj_get(rep, "completeness");
    cr_assert_not_null(comp);
    cr_expect_eq(obj_u64(obj_get(comp, "world")), MAX_WORLD);
    cr_expect_eq(obj_u64(obj_get(comp, "world_given")), 50000000);
    cr_assert_not_null(obj_get(comp, "missing_rank_count"));
    cr_expect_eq(obj_u64(obj_get(comp, "missing_rank_count")), MAX_WORLD - 2);
    v = obj_get(comp, "missing_ranks");
    cr_assert_eq(v->via.array.size, 1000);
    cr_expect_eq(v->via.array.ptr[0].via.u64, 1);
    cr_expect_eq(v->via.array.ptr[3].via.u64, 4);
    cr_expect_eq(v->via.array.ptr[4].via.u64, 6);
    cr_expect_eq(v->via.array.ptr[999].via.u64, 1001);
    expect_ranges(obj_get(comp, "missing_rank_ranges"), want, 2);
    /* the instances expected the clamped world: partial, not open forever */
    v = obj_get(rep, "collectives");
    cr_assert_eq(v->via.array.size, 1);
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[0], "partial")), 4);
    v = obj_get(rep, "verdict");
    snprintf(line, sizeof(line), "%u of %u ranks missing", MAX_WORLD - 2, MAX_WORLD);
    cr_expect(memmem(v->via.str.ptr, v->via.str.size, line, strlen(line)) != NULL, "%.*s",
              (int)v->via.str.size, v->via.str.ptr);
    proto_reader_deinit(&r);

    /* the CLI prints the ranges and the world given */
    snprintf(line, sizeof(line), "%lld", id);
    {
        char *argv[] = {TRACECTL_BIN, "--socket", d.sock, "report", line, NULL};
        char *out = NULL;
        cr_assert_eq(harness_run(&out, argv), 0);
        cr_expect(strstr(out, "missing: 1048574 of 1048576 ranks (1–4, 6–1048575); a hello said "
                              "world 50000000, counted as 1048576\n") != NULL,
                  "%s", out);
        free(out);
    }
}

/*
 * world 2^31 - 1 with 64 ranks, every other rank missing: the old report
 * compared every rank of the world with every rank seen (2^31 x 64 steps:
 * the 585 s, SIGTERM unanswered); now it answers at once, with a
 * range per gap. A ranks filter lists only its own missing ranks.
 */
Test(rank_limits, report_cost_does_not_follow_the_world)
{
    int ranks[64], worlds[64];
    uint64_t want[64][2];
    int64_t filter[4] = {2, 3, 4, 3000000};
    static const uint64_t want_f[1][2] = {{3, 3}};
    struct proto_reader r;
    const msgpack_object *comp;
    long long id;
    double t;

    for (int k = 0; k < 64; k++) {
        ranks[k] = 2 * k;
        worlds[k] = 2147483647;
        want[k][0] = want[k][1] = 2 * (uint64_t)k + 1;
    }
    want[63][1] = MAX_WORLD - 1;
    harness_daemon_start(&d, "--linger", "1", NULL);
    id = producers("gaps", ranks, worlds, 64);
    t = harness_now_s();
    comp = obj_get(analysis(id, NULL, 0, &r), "completeness");
    cr_expect_lt(harness_now_s() - t, 10.0, "the report took %.1f s", harness_now_s() - t);
    cr_expect_eq(obj_u64(obj_get(comp, "world")), MAX_WORLD);
    cr_expect_eq(obj_u64(obj_get(comp, "missing_rank_count")), MAX_WORLD - 64);
    expect_ranges(obj_get(comp, "missing_rank_ranges"), (const uint64_t(*)[2])want, 64);
    proto_reader_deinit(&r);

    comp = obj_get(analysis(id, filter, 4, &r), "completeness");
    cr_expect_eq(obj_u64(obj_get(comp, "missing_rank_count")), 1);
    cr_assert_eq(obj_get(comp, "missing_ranks")->via.array.size, 1);
    cr_expect_eq(obj_get(comp, "missing_ranks")->via.array.ptr[0].via.u64, 3);
    expect_ranges(obj_get(comp, "missing_rank_ranges"), want_f, 1);
    proto_reader_deinit(&r);
}

/* ---- a session file's process ids, and a damaged one (item 9) ---------------------------- */

/* Runs sql on the file of session id (the daemon stopped), asserting it succeeds. */
static void edit_file(long long id, const char *sql)
{
    char path[PATH_MAX + 32];
    sqlite3 *h;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
}

/* classify on session id with a --comm rule: the reply, borrowed from r. */
static const msgpack_object *classify(long long id, struct proto_reader *r)
{
    struct proto_request req;
    const msgpack_object *o;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.re_comm = "allreduce";
    o = raw_control(d.sock, PROTO_CLASSIFY, &req, r, &fd);
    close(fd);
    return o;
}

/*
 * A process id of 2^24 in a session file (the writer numbers them 1, 2, ...;
 * a crafted or edited file need not): the report sized an array by the
 * largest id (128 MiB a report), classify one of ~100 bytes an id (3.3 GiB).
 * Now both follow the processes: the daemon's peak RSS moves by less than
 * 16 MiB (x4 under ASan) for a report and a classify.
 */
Test(rank_limits, a_large_process_id_costs_no_memory)
{
    static const int ranks[2] = {0, 1}, worlds[2] = {2, 2};
    struct proto_reader r;
    const msgpack_object *o, *v;
    long hwm0, hwm1;
    long long id;

    harness_asan_small_quarantine();
    harness_daemon_start(&d, NULL);
    id = producers("bigpid", ranks, worlds, 2);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    edit_file(id, "UPDATE processes SET id = 16777216 WHERE id = 2");
    harness_daemon_restart(&d, NULL);
    hwm0 = harness_proc_kib(d.pid, "VmHWM");
    o = analysis(id, NULL, 0, &r);
    v = obj_get(o, "ranks");
    cr_assert_eq(v->via.array.size, 2);
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[1], "rank")), 1);
    proto_reader_deinit(&r);
    hwm1 = harness_proc_kib(d.pid, "VmHWM");
    cr_log_info("report: peak RSS %ld -> %ld KiB", hwm0, hwm1);
    cr_assert_lt(hwm1 - hwm0, 16 * 1024 * HARNESS_RSS_SCALE, "report: peak RSS %ld -> %ld KiB",
                 hwm0, hwm1);
    o = classify(id, &r);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "classify failed");
    proto_reader_deinit(&r);
    hwm1 = harness_proc_kib(d.pid, "VmHWM");
    cr_log_info("classify: peak RSS %ld -> %ld KiB", hwm0, hwm1);
    cr_expect_lt(hwm1 - hwm0, 16 * 1024 * HARNESS_RSS_SCALE, "classify: peak RSS %ld -> %ld KiB",
                 hwm0, hwm1);
}

/* classify on a file whose block cannot be decoded says why, not "not an error". */
Test(rank_limits, classify_of_a_damaged_block_says_why)
{
    static const int ranks[1] = {0}, worlds[1] = {1};
    struct proto_reader r;
    const msgpack_object *o, *msg;
    long long id;

    harness_daemon_start(&d, "--storage-format", "blocks", NULL);
    id = producers("damaged", ranks, worlds, 1);
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    edit_file(id, "UPDATE blocks SET data = x'0102'");
    harness_daemon_restart(&d, NULL);
    o = classify(id, &r);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "error"), "classify succeeded");
    msg = obj_get(&o->via.array.ptr[1], "message");
    cr_assert_not_null(msg);
    cr_expect(memmem(msg->via.str.ptr, msg->via.str.size, "not an error", 12) == NULL, "%.*s",
              (int)msg->via.str.size, msg->via.str.ptr);
    cr_expect(memmem(msg->via.str.ptr, msg->via.str.size, "rebuild the rank aggregates: ", 29) !=
                  NULL,
              "%.*s", (int)msg->via.str.size, msg->via.str.ptr);
    cr_log_info("classify said: %.*s", (int)msg->via.str.size, msg->via.str.ptr);
    proto_reader_deinit(&r);
}

/* ---- per-step rows (item 5) ------------------------------------------------------------ */

#define MANY_STEPS 400000

/* MANY_STEPS entries of op 1 on one connection, entry i in step i, in batches of 50,000. */
static void send_steps(int fd)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (uint64_t i = 0; i < MANY_STEPS; i += 50000) {
        proto_pack_batch_header(&pk, 50000);
        for (uint64_t k = i; k < i + 50000; k++) {
            msgpack_pack_array(&pk, 4);
            msgpack_pack_uint64(&pk, k);
            msgpack_pack_uint32(&pk, 1);
            msgpack_pack_uint64(&pk, T0 + k * 1000);
            msgpack_pack_uint64(&pk, 500 + k % 7);
        }
        raw_send(fd, &sb);
    }
    msgpack_sbuffer_destroy(&sb);
}

/*
 * A report on 400,000 steps of one rank held a row (~200 bytes) per rank
 * and step (the 4 M steps: 826 MiB): it now reads them in step
 * order, one step's rows at a time, and keeps the 1,000 steps it lists.
 * The report's figures: every step counted, the widest 1,000 listed.
 */
Test(rank_limits, per_step_rows_do_not_cost_memory_per_step)
{
    struct proto_reader r;
    const msgpack_object *rep, *v;
    long hwm0, hwm1;
    long long id = -1;
    int fd;

    harness_asan_small_quarantine();
    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "long", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    send_steps(fd);
    cr_assert_eq(raw_flush(fd, 1), MANY_STEPS);
    raw_bye(fd, 0);
    raw_wait_state(d.sock, id, "ended", 60);
    /* a daemon that has not held the entries: its peak is the report's */
    cr_assert_eq(harness_daemon_stop(&d, SIGTERM), 0);
    harness_daemon_restart(&d, NULL);
    hwm0 = harness_proc_kib(d.pid, "VmHWM");
    rep = analysis(id, NULL, 0, &r);
    hwm1 = harness_proc_kib(d.pid, "VmHWM");
    cr_log_info("report: peak RSS %ld -> %ld KiB", hwm0, hwm1);
    cr_expect_eq(obj_u64(obj_get(obj_get(rep, "completeness"), "steps")), MANY_STEPS);
    v = obj_get(rep, "steps");
    cr_assert_eq(v->via.array.size, 1000);
    /* one rank: every spread is 0, so the earliest 1,000 steps are listed, in order */
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[0], "step")), 0);
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[999], "step")), 999);
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[5], "max_ns")), 505);
    v = obj_get(rep, "ranks");
    cr_expect_eq(obj_u64(obj_get(&v->via.array.ptr[0], "steps")), MANY_STEPS);
    proto_reader_deinit(&r);
    cr_expect_lt(hwm1 - hwm0, 16 * 1024 * HARNESS_RSS_SCALE, "report: peak RSS %ld -> %ld KiB",
                 hwm0, hwm1);
}
