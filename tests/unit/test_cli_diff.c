/*
 * test_cli_diff — client/cli/cli_diff.c on hand-built report maps: rows
 * matched by name and by number (ranks, steps), categories summed over ops,
 * the regression rule at its edges (threshold, --min-time, a row new in B,
 * a row at 0 ns in A), the order by absolute change, sections only one
 * report has, and the reports' own verdicts in the human output. Every
 * expected figure is written out here from the maps the test packs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cli_diff.h"
#include "cli_obj.h"

TestSuite(cli_diff);

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void kv_u(msgpack_packer *pk, const char *k, uint64_t v)
{
    str(pk, k);
    msgpack_pack_uint64(pk, v);
}

/* An op row: {op, category, calls, total_ns, mem_bytes}. */
static void op(msgpack_packer *pk, const char *name, const char *cat, uint64_t calls,
               uint64_t total, uint64_t mem)
{
    msgpack_pack_map(pk, 5);
    str(pk, "op");
    str(pk, name);
    str(pk, "category");
    str(pk, cat);
    kv_u(pk, "calls", calls);
    kv_u(pk, "total_ns", total);
    kv_u(pk, "mem_bytes", mem);
}

/* Rank 1's CPU wait in the next report() (the other ranks': 0, as a daemon sends). */
static uint64_t cpu_wait_r1;

/*
 * A report: session totals, ops, one device, and with `ranks` the newer
 * sections (ranks 0 and 1 with totals r0 and r1, step 0 and 1, a verdict).
 */
static void report(msgpack_sbuffer *sb, uint64_t mm, uint64_t ar, bool gelu, bool ranks,
                   uint64_t r1)
{
    msgpack_packer pk;
    uint64_t total = mm + ar + (gelu ? 300 : 0);

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, ranks ? 7 : 4);
    str(&pk, "session");
    msgpack_pack_map(&pk, 5);
    kv_u(&pk, "id", 7);
    str(&pk, "name");
    str(&pk, "job");
    kv_u(&pk, "entries", gelu ? 30 : 20);
    kv_u(&pk, "total_ns", total);
    kv_u(&pk, "span_ns", 5000);
    str(&pk, "memory");
    msgpack_pack_map(&pk, 1);
    kv_u(&pk, "total_bytes", 4096);
    str(&pk, "ops");
    msgpack_pack_array(&pk, gelu ? 3 : 2);
    op(&pk, "matmul", "compute", 10, mm, 4096);
    op(&pk, "allreduce", "comm", 10, ar, 0);
    if (gelu)
        op(&pk, "gelu", "compute", 10, 300, 0);
    str(&pk, "devices");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 4);
    str(&pk, "device");
    str(&pk, "gpu:0");
    kv_u(&pk, "calls", gelu ? 30 : 20);
    kv_u(&pk, "total_ns", total);
    kv_u(&pk, "mem_bytes", 4096);
    if (!ranks)
        return;
    str(&pk, "ranks");
    msgpack_pack_array(&pk, 3);
    for (int r = -1; r < 2; r++) { /* -1: a process without a rank (nil) */
        msgpack_pack_map(&pk, 6);
        str(&pk, "rank");
        if (r < 0)
            msgpack_pack_nil(&pk);
        else
            msgpack_pack_int64(&pk, r);
        kv_u(&pk, "steps", 2);
        /* the ranks' total time is not what a rank row compares: a waiting rank's grows */
        kv_u(&pk, "total_ns", r == 1 ? 1000 : r1);
        kv_u(&pk, "caused_ns", r == 1 ? r1 : 1000);
        kv_u(&pk, "untracked_ns", r == 0 ? r1 / 5 : 100);
        kv_u(&pk, "cpu_wait_ns", r == 1 ? cpu_wait_r1 : 0);
    }
    str(&pk, "steps");
    msgpack_pack_array(&pk, 2);
    for (int s = 0; s < 2; s++) {
        msgpack_pack_map(&pk, 3);
        kv_u(&pk, "step", (uint64_t)s);
        kv_u(&pk, "ranks", 2);
        kv_u(&pk, "max_ns", s == 1 ? r1 : 800);
    }
    str(&pk, "verdict");
    str(&pk, r1 > 1000 ? "rank 1 arrived last at 100 % of collectives" : "balanced");
}

struct diffed {
    msgpack_sbuffer a, b, out;
    msgpack_unpacked ua, ub, diff;
    size_t regressed;
};

static void compare(struct diffed *x, const struct cli_diff_opts *o)
{
    const msgpack_object *rep[2];

    msgpack_sbuffer_init(&x->out);
    msgpack_unpacked_init(&x->ua);
    msgpack_unpacked_init(&x->ub);
    msgpack_unpacked_init(&x->diff);
    cr_assert_eq(msgpack_unpack_next(&x->ua, x->a.data, x->a.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(msgpack_unpack_next(&x->ub, x->b.data, x->b.size, NULL), MSGPACK_UNPACK_SUCCESS);
    rep[0] = &x->ua.data;
    rep[1] = &x->ub.data;
    cr_assert_eq(cli_diff_compare(rep, o, &x->out, &x->regressed), 0);
    cr_assert_eq(msgpack_unpack_next(&x->diff, x->out.data, x->out.size, NULL),
                 MSGPACK_UNPACK_SUCCESS);
}

static void release(struct diffed *x)
{
    msgpack_unpacked_destroy(&x->diff);
    msgpack_unpacked_destroy(&x->ua);
    msgpack_unpacked_destroy(&x->ub);
    msgpack_sbuffer_destroy(&x->out);
    msgpack_sbuffer_destroy(&x->a);
    msgpack_sbuffer_destroy(&x->b);
}

/* Row i of section name. */
static const msgpack_object *nth(const struct diffed *x, const char *name, uint32_t i)
{
    const msgpack_object *a = cli_obj_get(&x->diff.data, name);

    cr_assert(a != NULL && a->type == MSGPACK_OBJECT_ARRAY && i < a->via.array.size, "%s[%u]", name,
              i);
    return &a->via.array.ptr[i];
}

static bool flag(const msgpack_object *row, const char *key)
{
    const msgpack_object *v = cli_obj_get(row, key);

    cr_assert(v != NULL && v->type == MSGPACK_OBJECT_BOOLEAN, "%s", key);
    return v->via.boolean;
}

static int64_t delta(const msgpack_object *row)
{
    const msgpack_object *v = cli_obj_get(row, "delta_ns");

    cr_assert_not_null(v);
    return v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? v->via.i64 : (int64_t)v->via.u64;
}

Test(cli_diff, rows_matched_by_name_and_judged)
{
    struct cli_diff_opts o = {.threshold = 5.0, .min_time_ns = 0, .top = 20};
    struct diffed x;
    double pct;

    /* A: matmul 1000, allreduce 500; B: matmul 1050 (+5.0 %: not over 5), allreduce 400, gelu */
    msgpack_sbuffer_init(&x.a);
    msgpack_sbuffer_init(&x.b);
    report(&x.a, 1000, 500, false, false, 0);
    report(&x.b, 1050, 400, true, false, 0);
    compare(&x, &o);
    /* by absolute change: gelu +300, allreduce -100, matmul +50 */
    cr_assert(cli_obj_str_eq(cli_obj_get(nth(&x, "ops", 0), "op"), "gelu"));
    cr_assert(flag(nth(&x, "ops", 0), "new"));
    cr_assert(flag(nth(&x, "ops", 0), "regressed")); /* new, and 300 ns >= --min-time 0 */
    cr_assert(cli_obj_is_nil(cli_obj_get(nth(&x, "ops", 0), "delta_pct")));
    cr_assert(cli_obj_is_nil(cli_obj_get(nth(&x, "ops", 0), "calls_a")));
    cr_assert(cli_obj_str_eq(cli_obj_get(nth(&x, "ops", 1), "op"), "allreduce"));
    cr_assert_eq(delta(nth(&x, "ops", 1)), -100);
    cr_assert(flag(nth(&x, "ops", 1), "improved"));
    cr_assert(cli_obj_str_eq(cli_obj_get(nth(&x, "ops", 2), "op"), "matmul"));
    cr_assert_eq(cli_obj_f64(cli_obj_get(nth(&x, "ops", 2), "delta_pct"), &pct), 0);
    cr_assert_float_eq(pct, 5.0, 1e-12);
    cr_assert_not(flag(nth(&x, "ops", 2), "regressed"));
    /* categories: compute 1000 -> 1350 (+35 %), comm 500 -> 400 */
    cr_assert(cli_obj_str_eq(cli_obj_get(nth(&x, "categories", 0), "category"), "compute"));
    cr_assert_eq(delta(nth(&x, "categories", 0)), 350);
    cr_assert(flag(nth(&x, "categories", 0), "regressed"));
    /* gelu, compute, gpu:0 (+250 of 1500) and the total: 4 regressions; no ranks or steps */
    cr_assert_eq(x.regressed, 4);
    cr_assert_null(cli_obj_get(&x.diff.data, "ranks"));
    cr_assert_null(cli_obj_get(&x.diff.data, "steps"));
    cr_assert(cli_obj_is_nil(cli_obj_get(&x.diff.data, "verdict_a")));
    release(&x);

    /* --min-time above gelu's 300 ns and the total's +250: only compute (+350) is left */
    o.min_time_ns = 301;
    msgpack_sbuffer_init(&x.a);
    msgpack_sbuffer_init(&x.b);
    report(&x.a, 1000, 500, false, false, 0);
    report(&x.b, 1050, 400, true, false, 0);
    compare(&x, &o);
    cr_assert_eq(x.regressed, 1);
    cr_assert_not(flag(nth(&x, "ops", 0), "regressed"));
    release(&x);
}

Test(cli_diff, ranks_steps_and_verdicts_when_the_reports_have_them)
{
    struct cli_diff_opts o = {.threshold = 5.0, .min_time_ns = 0, .top = 20};
    struct diffed x;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    msgpack_sbuffer_init(&x.a);
    msgpack_sbuffer_init(&x.b);
    report(&x.a, 1000, 500, false, true, 1000);
    report(&x.b, 1000, 500, false, true, 1500);
    compare(&x, &o);
    /* rank 1 +500 first, then rank nil and rank 0 (no change) by key: nil before numbers */
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 0), "rank")->via.u64, 1);
    cr_assert_eq(delta(nth(&x, "ranks", 0)), 500);
    cr_assert(flag(nth(&x, "ranks", 0), "regressed"));
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 0), "calls_b")->via.u64, 2);
    cr_assert(cli_obj_is_nil(cli_obj_get(nth(&x, "ranks", 1), "rank")));
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 2), "rank")->via.u64, 0);
    /* rank 0 caused as much, but spent 200 ns untracked where it spent 300 */
    cr_assert_eq(delta(nth(&x, "ranks", 2)), 0);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 2), "untracked_a_ns")->via.u64, 200);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 2), "untracked_b_ns")->via.u64, 300);
    cr_assert(flag(nth(&x, "ranks", 2), "regressed"));
    cr_assert(!flag(nth(&x, "ranks", 1), "regressed"));
    /* step 1's slowest rank: 1000 -> 1500 */
    cr_assert_eq(cli_obj_get(nth(&x, "steps", 0), "step")->via.u64, 1);
    cr_assert_eq(delta(nth(&x, "steps", 0)), 500);
    cr_assert_eq(x.regressed, 3);
    cr_assert(cli_obj_str_eq(cli_obj_get(&x.diff.data, "verdict_a"), "balanced"));

    f = open_memstream(&text, &len);
    cr_assert_eq(cli_diff_print(f, &x.diff.data, &o), 0);
    fclose(f);
    cr_assert_not_null(strstr(text, "\nA: balanced\nB: rank 1 arrived last at 100 % of "
                                    "collectives\n"),
                       "%s", text);
    cr_assert_not_null(strstr(text,
                              "Ranks (by absolute change in caused time)\n"
                              "  RANK  STEPS A  STEPS B  CAUSED A  CAUSED B   CHANGE  CHANGE%  "
                              "UNTRACKED A  UNTRACKED B  STATUS\n"
                              "  1           2        2   1.00 \xc2\xb5s   1.50 \xc2\xb5s  +500 ns"
                              "   +50.0%       100 ns       100 ns  regressed\n"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "Steps (time of the slowest rank)"), "%s", text);
    free(text);
    release(&x);
}

/* The line of text that starts with prefix, as a new string, or NULL. */
static char *line_of(const char *text, const char *prefix)
{
    const char *p = strstr(text, prefix), *end;

    if (p == NULL)
        return NULL;
    end = strchr(p, '\n');
    return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

/* The ranks' CPU wait is compared when both reports have one, and is no regression. */
Test(cli_diff, ranks_cpu_wait_when_both_reports_have_one)
{
    struct cli_diff_opts o = {.threshold = 5.0, .min_time_ns = 0, .top = 20};
    struct diffed x;
    char *text = NULL, *hdr, *row;
    size_t len = 0;
    FILE *f;

    /* only A has one: no comparison, the rows as before */
    msgpack_sbuffer_init(&x.a);
    msgpack_sbuffer_init(&x.b);
    cpu_wait_r1 = 2000000;
    report(&x.a, 1000, 500, false, true, 1000);
    cpu_wait_r1 = 0;
    report(&x.b, 1000, 500, false, true, 1500);
    compare(&x, &o);
    cr_assert_null(cli_obj_get(nth(&x, "ranks", 0), "cpu_wait_a_ns"));
    release(&x);

    /* both: rank 1 2 ms -> 150 ms, the others 0 -> 0; the regressions as without it (3) */
    msgpack_sbuffer_init(&x.a);
    msgpack_sbuffer_init(&x.b);
    cpu_wait_r1 = 2000000;
    report(&x.a, 1000, 500, false, true, 1000);
    cpu_wait_r1 = 150000000;
    report(&x.b, 1000, 500, false, true, 1500);
    cpu_wait_r1 = 0;
    compare(&x, &o);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 0), "rank")->via.u64, 1);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 0), "cpu_wait_a_ns")->via.u64, 2000000);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 0), "cpu_wait_b_ns")->via.u64, 150000000);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 2), "cpu_wait_a_ns")->via.u64, 0);
    cr_assert_eq(cli_obj_get(nth(&x, "ranks", 2), "cpu_wait_b_ns")->via.u64, 0);
    cr_assert_eq(x.regressed, 3);
    cr_assert_null(cli_obj_get(nth(&x, "steps", 0), "cpu_wait_a_ns"));

    f = open_memstream(&text, &len);
    cr_assert_eq(cli_diff_print(f, &x.diff.data, &o), 0);
    fclose(f);
    hdr = line_of(text, "  RANK  STEPS A");
    row = line_of(strstr(text, "Ranks (by"), "  1 ");
    cr_assert_not_null(hdr, "%s", text);
    cr_assert_not_null(row, "%s", text);
    cr_assert_not_null(strstr(hdr, "UNTRACKED B  CPU WAIT A  CPU WAIT B  STATUS"), "%s", hdr);
    cr_assert_not_null(strstr(row, "   2.00 ms      150 ms  regressed"), "%s", row);
    free(hdr);
    free(row);
    free(text);
    release(&x);
}
