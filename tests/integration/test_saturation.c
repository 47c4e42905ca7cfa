/*
 * test_saturation.c — a real tracectld given numbers at the limits of their
 * range (PROTOCOL.md Part 2 "Integers"): sums saturate at INT64_MAX, in the
 * aggregates and in the scan path, and an entry ending past INT64_MAX is
 * refused without losing what came before.
 *
 * Expected figures are computed here, by hand, from the entries sent; never
 * from the code under test.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

/* Children first (they may hold connections), then the daemon: even after a failed assertion. */
static void stop_and_clean(void)
{
    harness_teardown(&d, SIGKILL);
}

TestSuite(saturation, .fini = stop_and_clean, .timeout = 120);

/* One entry [0, op, start, dur, nil, mem, nil, nil, device]. */
static void pack_entry(msgpack_packer *pk, uint32_t op, uint64_t start, uint64_t dur, uint64_t mem,
                       const char *device)
{
    msgpack_pack_array(pk, 9);
    msgpack_pack_uint64(pk, 0);
    msgpack_pack_uint32(pk, op);
    msgpack_pack_uint64(pk, start);
    msgpack_pack_uint64(pk, dur);
    msgpack_pack_nil(pk);
    msgpack_pack_uint64(pk, mem);
    msgpack_pack_nil(pk);
    msgpack_pack_nil(pk);
    msgpack_pack_str(pk, strlen(device));
    msgpack_pack_str_body(pk, device, strlen(device));
}

/* ---- arithmetic at the edge ---------------------------------------------- */

#define MAX63 9223372036854775807ull

/* The report of session id, with its figures checked against the entries of
 * at_the_limits (two of INT64_MAX on gpu:0 and gpu:1, one of 5 on gpu:2). */
static void check_limits_report(long long id, const char *how)
{
    struct proto_request req;
    struct proto_reader r;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    const msgpack_object *o = raw_control(d.sock, PROTO_REPORT, &req, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "%s: the report failed", how);
    const msgpack_object *rep = &o->via.array.ptr[1];
    const msgpack_object *s = obj_get(rep, "session");
    cr_assert_eq(obj_u64(obj_get(s, "entries")), 3, "%s", how);
    /* sums saturate at INT64_MAX: never wrap (2 * INT64_MAX + 5 wrapped is 3) */
    cr_assert_eq(obj_u64(obj_get(s, "total_ns")), MAX63, "%s: total", how);
    cr_assert_eq(obj_u64(obj_get(s, "span_ns")), MAX63, "%s: span", how);
    const msgpack_object *ops = obj_get(rep, "ops");
    cr_assert_eq(ops->via.array.size, 1);
    const msgpack_object *op = &ops->via.array.ptr[0];
    cr_assert_eq(obj_u64(obj_get(op, "calls")), 3, "%s", how);
    cr_assert_eq(obj_u64(obj_get(op, "total_ns")), MAX63, "%s: op total", how);
    cr_assert_eq(obj_u64(obj_get(op, "avg_ns")), MAX63 / 3, "%s: avg", how);
    cr_assert_eq(obj_u64(obj_get(op, "min_ns")), 5, "%s", how);
    cr_assert_eq(obj_u64(obj_get(op, "max_ns")), MAX63, "%s", how);
    cr_assert_eq(obj_u64(obj_get(op, "mem_bytes")), MAX63, "%s: op memory", how);
    cr_assert_float_eq(obj_f64(obj_get(op, "share")), 1.0, 1e-12, "%s", how);
    const msgpack_object *mem = obj_get(rep, "memory");
    cr_assert_eq(obj_u64(obj_get(mem, "peak_bytes")), MAX63, "%s", how);
    cr_assert_eq(obj_u64(obj_get(mem, "total_bytes")), MAX63, "%s: total_bytes < peak", how);
    const msgpack_object *devs = obj_get(rep, "devices");
    cr_assert_eq(devs->via.array.size, 3);
    uint64_t want[3] = {MAX63, MAX63, 5};
    for (uint32_t i = 0; i < 3; i++) {
        const msgpack_object *dv = &devs->via.array.ptr[i];
        cr_assert_eq(obj_u64(obj_get(dv, "total_ns")), want[i], "%s: device %u", how, i);
        cr_assert_eq(obj_u64(obj_get(dv, "mem_bytes")), want[i], "%s: device %u", how, i);
    }
    /* imbalance from the exact sum 2 * INT64_MAX + 5 = 18446744073709551619:
     * ideal = floor(/3) = 6148914691236517206, ratio = (max - ideal) / ideal = 0.5 */
    const msgpack_object *im = obj_get(rep, "imbalance");
    cr_assert_eq(obj_u64(obj_get(im, "total_ns")), MAX63, "%s", how);
    cr_assert_eq(obj_u64(obj_get(im, "ideal_ns")), 6148914691236517206ull, "%s: ideal", how);
    cr_assert_eq(obj_u64(obj_get(im, "max_ns")), MAX63, "%s", how);
    cr_assert_float_eq(obj_f64(obj_get(im, "ratio")), 0.5, 1e-9, "%s: ratio", how);
    proto_reader_deinit(&r);
    close(fd);
}

Test(saturation, sums_at_the_limits_saturate_and_ends_past_int64_are_refused)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    long long id;
    char path[PATH_MAX + 32];
    sqlite3 *db;

    harness_daemon_start(&d, NULL);
    int fd = raw_producer(d.sock, "limits", 0, 1, NULL, &id);
    raw_send_ops(fd, 1, "matmul");
    /* two commits: the second's saturated deltas are added to stored sums */
    raw_pack_init(&sb, &pk);
    proto_pack_batch_header(&pk, 1);
    pack_entry(&pk, 1, 0, MAX63, MAX63, "gpu:0");
    raw_send(fd, &sb);
    cr_assert_eq(raw_flush(fd, 1), 1);
    proto_pack_batch_header(&pk, 2);
    pack_entry(&pk, 1, 0, MAX63, MAX63, "gpu:1");
    pack_entry(&pk, 1, 0, 5, 5, "gpu:2");
    raw_send(fd, &sb);
    cr_assert_eq(raw_flush(fd, 2), 3);
    /* an entry that would end after INT64_MAX: refused, what came before stays */
    proto_pack_batch_header(&pk, 1);
    pack_entry(&pk, 1, 1, MAX63, 0, "gpu:0");
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    raw_expect_error(fd, "bad_message");
    cr_assert(raw_closed(fd));
    close(fd);
    raw_wait_state(d.sock, id, "ended", 10);
    check_limits_report(id, "aggregates");

    /* the scan path (what reports use after a failed commit): no "integer overflow" */
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000); /* the writer may be closing the file */
    cr_assert_eq(
        sqlite3_exec(db, "UPDATE info SET value = 0 WHERE key = 'aggregates'", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    check_limits_report(id, "scan");
}
