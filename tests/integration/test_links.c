/*
 * test_links.c — nested regions of the C library (tc_push/tc_pop, and
 * tc_record_ext with explicit ids) through a real daemon to the collapsed
 * export: the exact stack strings and weights, written out here from what
 * the producer process recorded; and in the Chrome export (the lanes Perfetto
 * shares), each child on its parent's lane. (The Kineto launcher links are tested in
 * test_import.c, the Python package's nesting in tests/python/test_links.py.)
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"
#include "tracectl.h"

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(links, .fini = fini, .timeout = 120);

static tc_client *open_client(const char *session)
{
    tc_options o = {0};
    int err;

    o.socket_path = d.sock;
    o.session = session;
    o.rank = 0;
    o.world = 1;
    o.device = "cpu:0";
    o.blocking = 1;
    return tc_open(&o, &err);
}

/* Runs fn in a child process (a real producer) and checks it exited 0. */
static void producer(int (*fn)(void))
{
    pid_t pid = fork();
    int status;

    cr_assert(pid >= 0);
    if (pid == 0)
        _exit(fn());
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer status %d", status);
}

static void check_collapsed(const char *session, const char *weight, const char *want)
{
    char *out = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket",  d.sock,     "export",       (char *)session,
                    "--format",   "collapsed", "--weight", (char *)weight, NULL};

    cr_assert_eq(harness_run(&out, argv), 0);
    cr_assert_str_eq(out, want);
    free(out);
}

/* Ten steps of train_step { forward { matmul, matmul }, backward }, then a lone region. */
static int push_pop(void)
{
    tc_client *c = open_client("nest-c");
    uint32_t step, fwd, bwd, mm, lone;

    if (c == NULL)
        return 10;
    step = tc_op(c, "train_step");
    fwd = tc_op(c, "forward");
    bwd = tc_op(c, "backward");
    mm = tc_op(c, "matmul");
    lone = tc_op(c, "lone");
    for (int i = 0; i < 10; i++) {
        tc_push(c, step);
        tc_push(c, fwd);
        tc_push(c, mm);
        tc_pop(c, 0, NULL, NULL, 0);
        tc_push(c, mm);
        tc_pop(c, 0, NULL, NULL, 0);
        tc_pop(c, 0, NULL, NULL, 0);
        tc_push(c, bwd);
        tc_pop(c, 0, NULL, NULL, 0);
        tc_pop(c, 0, NULL, NULL, 0);
        tc_step(c);
    }
    tc_push(c, lone);
    tc_pop(c, 0, NULL, NULL, 0);
    tc_pop(c, 0, NULL, NULL, 0); /* nothing open: nothing recorded */
    if (tc_recorded(c) != 51 || tc_dropped(c) != 0)
        return 11;
    return tc_close(c) == 0 ? 0 : 12;
}

Test(links, push_pop_regions_are_stacks_in_the_collapsed_export)
{
    harness_daemon_start(&d, NULL);
    producer(push_pop);
    check_collapsed("nest-c", "calls",
                    "nest-c;cpu:0;lone 1\n"
                    "nest-c;cpu:0;train_step 10\n"
                    "nest-c;cpu:0;train_step;backward 10\n"
                    "nest-c;cpu:0;train_step;forward 10\n"
                    "nest-c;cpu:0;train_step;forward;matmul 20\n");
}

/* Explicit ids and durations, children recorded before their parents as tc_pop does. */
static int explicit_ids(void)
{
    tc_client *c = open_client("nest-x");
    uint32_t outer, mid, leaf, orphan;
    tc_ext x = {0};

    if (c == NULL)
        return 10;
    outer = tc_op(c, "outer");
    mid = tc_op(c, "mid");
    leaf = tc_op(c, "leaf");
    orphan = tc_op(c, "orphan");
    x.has = TC_EXT_PARENT, x.parent = 2; /* two leaves of 2.4 µs in mid */
    tc_record_ext(c, leaf, 1000, 2400, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    tc_record_ext(c, leaf, 4000, 2400, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    x.has = TC_EXT_ID | TC_EXT_PARENT, x.id = 2, x.parent = 1; /* mid: 6 µs in outer */
    tc_record_ext(c, mid, 500, 6000, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    x.has = TC_EXT_ID, x.id = 1; /* outer: 10 µs */
    tc_record_ext(c, outer, 0, 10000, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    x.has = TC_EXT_PARENT, x.parent = 99; /* a parent never sent: a stack of its own */
    tc_record_ext(c, orphan, 20000, 3000, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    return tc_close(c) == 0 ? 0 : 12;
}

Test(links, explicit_ids_weigh_self_time)
{
    harness_daemon_start(&d, NULL);
    producer(explicit_ids);
    /* self times: leaf 2.4 µs each (2 + 2), mid 6 - 4.8 = 1.2 µs (1), outer 10 - 6 = 4 µs */
    check_collapsed("nest-x", "time",
                    "nest-x;cpu:0;orphan 3\n"
                    "nest-x;cpu:0;outer 4\n"
                    "nest-x;cpu:0;outer;mid 1\n"
                    "nest-x;cpu:0;outer;mid;leaf 4\n");
    check_collapsed("nest-x", "calls",
                    "nest-x;cpu:0;orphan 1\n"
                    "nest-x;cpu:0;outer 1\n"
                    "nest-x;cpu:0;outer;mid 1\n"
                    "nest-x;cpu:0;outer;mid;leaf 2\n");
}

/*
 * Two regions that overlap partially in time, each with a child: B's child b
 * lies inside A's child a in time, but is B's. Recorded with explicit ids and
 * times; in the trace-viewer exports each child must sit on its parent's lane.
 */
static int overlapping(void)
{
    tc_client *c = open_client("nest-lanes");
    uint32_t ops[4];
    const char *names[4] = {"A", "B", "a", "b"};
    /* start, dur, id (0: none), parent (0: none) */
    static const uint64_t rows[4][4] = {
        {0, 10000, 1, 0}, {1000, 11000, 2, 0}, {2000, 1000, 0, 1}, {2100, 800, 0, 2}};
    tc_ext x;

    if (c == NULL)
        return 10;
    for (int i = 3; i >= 0; i--) { /* children first, as tc_pop records them */
        ops[i] = tc_op(c, names[i]);
        x = (tc_ext){.has = (rows[i][2] ? TC_EXT_ID : 0) | (rows[i][3] ? TC_EXT_PARENT : 0),
                     .id = rows[i][2],
                     .parent = rows[i][3]};
        tc_record_ext(c, ops[i], rows[i][0], rows[i][1], 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL,
                      &x);
    }
    return tc_close(c) == 0 ? 0 : 12;
}

/* The tid of the chrome export's complete event named name. */
static long long chrome_tid(yajl_val doc, const char *name)
{
    const char *ev[] = {"traceEvents", NULL}, *np[] = {"name", NULL}, *php[] = {"ph", NULL},
               *tp[] = {"tid", NULL};
    yajl_val evs = yajl_tree_get(doc, ev, yajl_t_array);

    cr_assert_not_null(evs);
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val e = evs->u.array.values[i];
        const char *n = YAJL_GET_STRING(yajl_tree_get(e, np, yajl_t_string));
        const char *ph = YAJL_GET_STRING(yajl_tree_get(e, php, yajl_t_string));
        if (n != NULL && ph != NULL && strcmp(n, name) == 0 && strcmp(ph, "X") == 0)
            return YAJL_GET_INTEGER(yajl_tree_get(e, tp, yajl_t_number));
    }
    cr_assert_fail("no event %s", name);
    return -1;
}

Test(links, children_sit_on_their_parents_lane)
{
    char *out = NULL, err[256];
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock,   "export",
                    "nest-lanes", "--format", "chrome", NULL};
    yajl_val doc;

    harness_daemon_start(&d, NULL);
    producer(overlapping);
    cr_assert_eq(harness_run(&out, argv), 0);
    doc = yajl_tree_parse(out, err, sizeof(err));
    cr_assert_not_null(doc, "%s", err);
    cr_assert_neq(chrome_tid(doc, "A"), chrome_tid(doc, "B")); /* partial overlap: two lanes */
    cr_assert_eq(chrome_tid(doc, "a"), chrome_tid(doc, "A"));
    cr_assert_eq(chrome_tid(doc, "b"), chrome_tid(doc, "B")); /* not under a, which holds it */
    yajl_tree_free(doc);
    free(out);
}
