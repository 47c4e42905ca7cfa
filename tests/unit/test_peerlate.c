/*
 * test_peerlate.c — the late-rank analysis across hosts (peerlate.c) on
 * arrivals built here, already on the home's clock with known bounds: the
 * figures of the `hosts_late` section it packs are checked against sums done
 * by hand, a lateness past the bound is named, one within it is not.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peerlate.h"

TestSuite(peerlate, .timeout = 30);

#define US 1000LL
#define MS 1000000LL

static const char *const hosts[] = {"node0", "node1"};

/* The value of key k in map m; fails the test without it. */
static const msgpack_object *get(const msgpack_object *m, const char *k)
{
    cr_assert_eq(m->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(k) &&
            memcmp(kv->key.via.str.ptr, k, strlen(k)) == 0)
            return &kv->val;
    }
    cr_assert_fail("no key %s", k);
    return NULL;
}

static uint64_t u(const msgpack_object *m, const char *k)
{
    const msgpack_object *v = get(m, k);
    cr_assert_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "%s", k);
    return v->via.u64;
}

static bool has_text(const msgpack_object *m, const char *k, const char *text)
{
    const msgpack_object *v = get(m, k);
    char buf[1024];

    cr_assert_eq(v->type, MSGPACK_OBJECT_STR);
    snprintf(buf, sizeof(buf), "%.*s", (int)v->via.str.size, v->via.str.ptr);
    return strstr(buf, text) != NULL;
}

/*
 * 5 steps, one allreduce each, 20 ms apart: ranks 0 and 1 on the home enter at t and t + r1,
 * rank 2 on node1 (bound 10 µs) at t + late; each leaves 100 µs after the last enter.
 */
static void feed(struct peerlate *pl, int64_t r1, int64_t late)
{
    for (int64_t s = 0; s < 5; s++) {
        int64_t t = 1000 * MS + s * 20 * MS, last = t + (late > r1 ? late : r1);
        struct peerarr_home a[3] = {
            {.host = 0, .rank = 0, .step = (uint64_t)s, .enter_ns = t},
            {.host = 0, .rank = 1, .step = (uint64_t)s, .enter_ns = t + r1},
            {.host = 1, .rank = 2, .step = (uint64_t)s, .enter_ns = t + late, .bound_ns = 10 * US},
        };
        for (int i = 0; i < 3; i++)
            a[i].exit_ns = last + 100 * US;
        peerlate_due_cb(pl, "job", 1, (uint64_t)s, a, 3);
    }
}

static void pack(struct peerlate *pl, msgpack_sbuffer *sb, msgpack_unpacked *u)
{
    msgpack_packer pk;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    cr_assert_eq(peerlate_pack(pl, "job", hosts, 2, &pk), 0);
    msgpack_unpacked_init(u);
    cr_assert_eq(msgpack_unpack_next(u, sb->data, sb->size, NULL), MSGPACK_UNPACK_SUCCESS);
}

Test(peerlate, late_past_the_bound_is_named)
{
    struct peerlate *pl = peerlate_new();
    msgpack_sbuffer sb;
    msgpack_unpacked un;

    cr_assert_not_null(pl);
    feed(pl, MS, 5 * MS);
    pack(pl, &sb, &un);
    const msgpack_object *r = get(&un.data, "hosts_late"), *ranks = get(r, "ranks");
    cr_assert_eq(u(r, "instances"), 5);
    cr_assert_eq(u(r, "uncertain"), 0);
    cr_assert_eq(u(r, "steps_named"), 5);
    cr_assert_eq(u(r, "steps_within_bound"), 0);
    cr_assert_eq(u(get(r, "culprit"), "rank"), 2);
    cr_assert(has_text(get(r, "culprit"), "host", "node1"));
    cr_assert(has_text(r, "verdict", "rank 2 on node1 held the others up for 25.0 ms"));
    cr_assert_eq(ranks->via.array.size, 3);
    /* rank 0 waited 5 ms and rank 1 4 ms per step, each within rank 2's bound (10 µs) */
    cr_assert_eq(u(&ranks->via.array.ptr[0], "waited_ns"), 5 * 5 * MS);
    cr_assert_eq(u(&ranks->via.array.ptr[0], "waited_bound_ns"), 5 * 10 * US);
    cr_assert_eq(u(&ranks->via.array.ptr[1], "waited_ns"), 5 * 4 * MS);
    cr_assert_eq(u(&ranks->via.array.ptr[2], "caused_ns"), 5 * 5 * MS);
    cr_assert_eq(u(&ranks->via.array.ptr[2], "caused_bound_ns"), 5 * 10 * US);
    cr_assert_eq(u(&ranks->via.array.ptr[2], "late_steps"), 5);
    const msgpack_object *steps = get(r, "steps");
    cr_assert_eq(steps->via.array.size, 5);
    cr_assert_eq(u(&steps->via.array.ptr[3], "late_rank"), 2);
    cr_assert_eq(u(&steps->via.array.ptr[3], "held_up_ns"), 5 * MS);
    cr_assert_eq(u(&steps->via.array.ptr[3], "bound_ns"), 10 * US);
    /* step 3 runs from step 2's last exit to its own: 20 ms */
    cr_assert_eq(u(&steps->via.array.ptr[3], "step_ns"), 20 * MS);
    msgpack_unpacked_destroy(&un);
    msgpack_sbuffer_destroy(&sb);
    peerlate_free(pl);
}

/* Rank 2 enters 5 ms + 8 µs in: 8 µs after rank 1, within their 10 µs bound. */
Test(peerlate, late_within_the_bound_is_not_named)
{
    struct peerlate *pl = peerlate_new();
    msgpack_sbuffer sb;
    msgpack_unpacked un;

    cr_assert_not_null(pl);
    feed(pl, 5 * MS, 5 * MS + 8 * US);
    pack(pl, &sb, &un);
    const msgpack_object *r = get(&un.data, "hosts_late");
    cr_assert_eq(u(r, "instances"), 5);
    cr_assert_eq(u(r, "uncertain"), 5);
    cr_assert_eq(u(r, "steps_named"), 0);
    cr_assert_eq(u(r, "steps_within_bound"), 5);
    cr_assert_eq(get(r, "culprit")->type, MSGPACK_OBJECT_NIL);
    cr_assert(has_text(r, "verdict", "no rank stands out beyond the clock bound"));
    const msgpack_object *steps = get(r, "steps");
    cr_assert_eq(steps->via.array.size, 5);
    cr_assert_eq(get(&steps->via.array.ptr[0], "late_rank")->type, MSGPACK_OBJECT_NIL);
    cr_assert_eq(u(&steps->via.array.ptr[0], "rank"), 2);
    cr_assert_eq(get(&steps->via.array.ptr[0], "within_bound")->type, MSGPACK_OBJECT_BOOLEAN);
    cr_assert(get(&steps->via.array.ptr[0], "within_bound")->via.boolean);
    /* what rank 2 caused: rank 0's wait, 5 ms + 8 µs, exact but for rank 2's bound */
    cr_assert_eq(u(&steps->via.array.ptr[0], "held_up_ns"), 5 * MS + 8 * US);
    msgpack_unpacked_destroy(&un);
    msgpack_sbuffer_destroy(&sb);
    peerlate_free(pl);
}

Test(peerlate, unknown_session_and_single_arrivals)
{
    struct peerlate *pl = peerlate_new();
    struct peerarr_home a = {.host = 1, .rank = 0, .enter_ns = 1, .exit_ns = 2};
    msgpack_sbuffer sb;
    msgpack_packer pk;

    cr_assert_not_null(pl);
    peerlate_due_cb(pl, "job", 1, 0, &a, 1);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cr_assert_eq(peerlate_pack(pl, "job", hosts, 2, &pk), -ENOENT);
    cr_assert_eq(peerlate_pack(pl, "other", hosts, 2, &pk), -ENOENT);
    cr_assert_eq(peerlate_pack(NULL, "job", hosts, 2, &pk), -ENOENT);
    cr_assert_eq(sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    peerlate_free(pl);
    peerlate_free(NULL);
}

/* 300 ranks on two hosts in one instance, the last rank 299: every rank kept once, in order. */
Test(peerlate, many_ranks)
{
    struct peerlate *pl = peerlate_new();
    struct peerarr_home a[300];
    msgpack_sbuffer sb;
    msgpack_unpacked un;

    cr_assert_not_null(pl);
    for (int i = 0; i < 300; i++)
        a[i] = (struct peerarr_home){.host = (uint32_t)(i % 2),
                                     .rank = 299 - i,
                                     .enter_ns = (299 - i) * US,
                                     .exit_ns = 400 * US};
    peerlate_due_cb(pl, "job", 1, 0, a, 300);
    peerlate_due_cb(pl, "job", 1, 1, a, 300);
    pack(pl, &sb, &un);
    const msgpack_object *ranks = get(get(&un.data, "hosts_late"), "ranks");
    cr_assert_eq(ranks->via.array.size, 300);
    for (uint32_t i = 0; i < 300; i++) {
        cr_assert_eq(u(&ranks->via.array.ptr[i], "rank"), i);
        cr_assert_eq(u(&ranks->via.array.ptr[i], "collectives"), 2);
        /* rank i waited 299 - i µs for rank 299 (host 0), with the bounds 0 */
        cr_assert_eq(u(&ranks->via.array.ptr[i], "waited_ns"), 2 * (299 - i) * US);
    }
    cr_assert_eq(u(&ranks->via.array.ptr[299], "last"), 2);
    cr_assert_eq(u(&ranks->via.array.ptr[299], "caused_ns"), 2 * 299 * US);
    msgpack_unpacked_destroy(&un);
    msgpack_sbuffer_destroy(&sb);
    peerlate_free(pl);
}
