/*
 * test_users.c — the per-user records of daemon/loop/users.h: one per uid while
 * it has connections or a remembered cost, the queue of each user's waiting
 * requests (oldest first, a connection taken out from anywhere in it), and
 * the cost's decay by 1/64 a second. The scheduling itself needs the loop
 * and real connections: tests/integration/test_fair.c.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "conn.h"
#include "users.h"

static struct daemon d;

static void reset(void)
{
    memset(&d, 0, sizeof(d));
}

static void done(void)
{
    users_free_all(&d);
    cr_assert_null(d.users);
    cr_assert_eq(d.n_users, 0);
}

TestSuite(users, .init = reset, .fini = done);

Test(users, one_record_per_uid_freed_with_its_last_connection)
{
    struct user *a = users_get(&d, 1000), *b = users_get(&d, 1001), *a2 = users_get(&d, 1000);

    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_eq(a, a2);
    cr_assert_eq(a->conns, 2);
    cr_assert_eq(a->heavy_id, -1);
    cr_assert_eq(d.n_users, 2);
    users_put(&d, a);
    cr_assert_eq(d.n_users, 2);
    users_put(&d, a);
    cr_assert_eq(d.n_users, 1, "a user without connections or cost is freed");
    cr_assert_eq(d.users, b);
    users_put(&d, b);
    users_put(&d, NULL);
    cr_assert_eq(d.n_users, 0);
}

Test(users, a_cost_is_remembered_and_decays_by_a_64th_a_second)
{
    struct user *a = users_get(&d, 1000);
    uint64_t want = 6400;
    int ticks = 0;

    a->cost = 6400;
    a->heavy_id = 7;
    users_put(&d, a);
    cr_assert_eq(d.n_users, 1, "its cost keeps it");
    cr_assert_eq(users_get(&d, 1000), a, "the same record, heavy mark and cost included");
    cr_assert_eq(a->heavy_id, 7);
    users_put(&d, a);
    users_tick(&d);
    want -= want / 64;
    cr_assert_eq(a->cost, want); /* 6300 */
    while (d.n_users > 0 && ticks < 2000) {
        users_tick(&d);
        ticks++;
    }
    /* 6300 × (63/64)^n reaches 63 after ~292 ticks, then 63 more of 1 each at most */
    cr_assert_eq(d.n_users, 0);
    cr_assert_lt(ticks, 292 + 64 + 1, "freed after %d ticks", ticks);
    cr_assert_gt(ticks, 280, "freed after %d ticks", ticks);
}

Test(users, the_queue_is_oldest_first_and_any_can_leave)
{
    static struct conn c[4];
    struct user *u = users_get(&d, 1000);

    for (int i = 0; i < 4; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].user = u;
        users_wait(&c[i]);
    }
    users_wait(&c[1]); /* already queued: no change */
    cr_assert_eq(u->first, &c[0]);
    cr_assert_eq(u->last, &c[3]);
    users_unwait(&c[2]); /* from the middle */
    users_unwait(&c[2]); /* not queued: no change */
    cr_assert_eq(c[1].wait_next, &c[3]);
    users_unwait(&c[3]); /* the last */
    cr_assert_eq(u->last, &c[1]);
    users_unwait(&c[0]); /* the first */
    cr_assert_eq(u->first, &c[1]);
    cr_assert_eq(u->last, &c[1]);
    users_unwait(&c[1]);
    cr_assert_null(u->first);
    cr_assert_null(u->last);
    for (int i = 0; i < 4; i++)
        cr_assert(!c[i].waiting);
    users_put(&d, u);
}
