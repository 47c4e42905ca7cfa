/*
 * test_rkkey.c — a session file whose rk_devsteps, rk_steps and rk_coll_ranks
 * are keyed the old way (process or op first, files written before
 * info.ranks_layout 2): the report's rank figures read from it as it is, then
 * after a writer opened it (ranks_new re-keys those tables step first), then
 * after the writer added to it, against sums computed here from the rows the
 * test wrote; and every row kept across the re-keying.
 */
#include <criterion/criterion.h>
#include <msgpack.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "ranks.h"
#include "ranks_query.h"
#include "schema.h"

TestSuite(ranks_rekey, .timeout = 60);

#define NP 4 /* processes 1..NP, ranks 0..NP-1 */
#define NS 6 /* steps 0..NS-1 */
#define NC 2 /* collective ops 2 (allreduce), 3 (all_gather) */

struct step {
    int64_t begin, end, cat[5], exposed, coll, waited, last, caused;
};
struct coll {
    int64_t instances, partial, skew, skew_max;
};
struct collr {
    int64_t instances, waited, last;
};

static struct step steps[NP][NS];
static struct coll colls[NC][NS];
static struct collr collrs[NC][NP][NS];
static uint64_t seed = 424242;

static int64_t rnd(int64_t n)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)((seed >> 33) % (uint64_t)n);
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;

    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
}

static int64_t one(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = -1;

    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* satsum() as the daemon's readers have it (query.c): the report's filtered statements use it */
static void satsum_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    int64_t *s = sqlite3_aggregate_context(ctx, sizeof(*s)), v;

    (void)argc;
    if (s == NULL || sqlite3_value_type(argv[0]) == SQLITE_NULL)
        return;
    v = sqlite3_value_int64(argv[0]);
    if (v > 0)
        *s = *s > INT64_MAX - v ? INT64_MAX : *s + v;
}

static void satsum_final(sqlite3_context *ctx)
{
    int64_t *s = sqlite3_aggregate_context(ctx, 0);

    sqlite3_result_int64(ctx, s != NULL ? *s : 0);
}

/* A file as the writer left it before the step-first keys, with pseudo-random rank rows. */
static sqlite3 *old_layout_db(void)
{
    sqlite3 *db;
    char sql[512];

    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    cr_assert_eq(sqlite3_create_function(db, "satsum", 1, SQLITE_UTF8, NULL, NULL, satsum_step,
                                         satsum_final),
                 SQLITE_OK);
    exec_ok(db, schema_session_sql);
    exec_ok(db, "INSERT INTO ops VALUES (1, 'matmul', 'compute'), (2, 'allreduce', 'comm'),"
                " (3, 'all_gather', 'comm');"
                "INSERT INTO devices VALUES (1, 'gpu:0');"
                "INSERT INTO info VALUES ('ranks', 1), ('ranks_state', 1);"
                "CREATE TABLE rk_ops (process_id INTEGER NOT NULL, device_id INTEGER NOT NULL,"
                " op_id INTEGER NOT NULL, calls INTEGER NOT NULL, total_ns INTEGER NOT NULL,"
                " elements INTEGER NOT NULL, exposed_ns INTEGER NOT NULL,"
                " begin_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,"
                " PRIMARY KEY (process_id, device_id, op_id)) WITHOUT ROWID;"
                "CREATE TABLE rk_devsteps (process_id INTEGER NOT NULL, step INTEGER NOT NULL,"
                " device_id INTEGER NOT NULL, begin_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,"
                " compute_ns INTEGER NOT NULL, comm_ns INTEGER NOT NULL,"
                " memory_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL, other_ns INTEGER NOT NULL,"
                " exposed_ns INTEGER NOT NULL, first_row INTEGER NOT NULL,"
                " last_row INTEGER NOT NULL, PRIMARY KEY (process_id, step, device_id))"
                " WITHOUT ROWID;"
                "CREATE TABLE rk_steps (process_id INTEGER NOT NULL, step INTEGER NOT NULL,"
                " begin_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, compute_ns INTEGER NOT NULL,"
                " comm_ns INTEGER NOT NULL, memory_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL,"
                " other_ns INTEGER NOT NULL, exposed_ns INTEGER NOT NULL, coll INTEGER NOT NULL,"
                " waited_ns INTEGER NOT NULL, last_count INTEGER NOT NULL,"
                " caused_ns INTEGER NOT NULL, PRIMARY KEY (process_id, step)) WITHOUT ROWID;"
                "CREATE TABLE rk_coll (op_id INTEGER NOT NULL, step INTEGER NOT NULL,"
                " instances INTEGER NOT NULL, partial INTEGER NOT NULL, skew_ns INTEGER NOT NULL,"
                " skew_max_ns INTEGER NOT NULL, PRIMARY KEY (op_id, step)) WITHOUT ROWID;"
                "CREATE TABLE rk_coll_ranks (op_id INTEGER NOT NULL, process_id INTEGER NOT NULL,"
                " step INTEGER NOT NULL, instances INTEGER NOT NULL, waited_ns INTEGER NOT NULL,"
                " last_count INTEGER NOT NULL, PRIMARY KEY (op_id, process_id, step))"
                " WITHOUT ROWID");
    for (int p = 0; p < NP; p++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO processes (id, rank, world, started_ns) VALUES (%d, %d, %d, 1)",
                 p + 1, p, NP);
        exec_ok(db, sql);
        for (int s = 0; s < NS; s++) {
            struct step *x = &steps[p][s];
            x->begin = 1000000 * s + rnd(1000);
            x->end = x->begin + 1000 + rnd(100000);
            for (int c = 0; c < 5; c++)
                x->cat[c] = rnd(50000);
            x->exposed = rnd(x->cat[1] + 1);
            x->coll = 1 + rnd(5);
            x->waited = rnd(30000);
            x->last = rnd(3);
            x->caused = x->last ? rnd(20000) : 0;
            snprintf(sql, sizeof(sql),
                     "INSERT INTO rk_steps VALUES (%d, %d, %lld, %lld, %lld, %lld, %lld, %lld,"
                     " %lld, %lld, %lld, %lld, %lld, %lld)",
                     p + 1, s, (long long)x->begin, (long long)x->end, (long long)x->cat[0],
                     (long long)x->cat[1], (long long)x->cat[2], (long long)x->cat[3],
                     (long long)x->cat[4], (long long)x->exposed, (long long)x->coll,
                     (long long)x->waited, (long long)x->last, (long long)x->caused);
            exec_ok(db, sql);
            /* the step's figures on device 1 (what rk_steps sums over devices) */
            snprintf(sql, sizeof(sql),
                     "INSERT INTO rk_devsteps VALUES (%d, %d, 1, %lld, %lld, %lld, %lld, %lld,"
                     " %lld, %lld, %lld, %d, %d)",
                     p + 1, s, (long long)x->begin, (long long)x->end, (long long)x->cat[0],
                     (long long)x->cat[1], (long long)x->cat[2], (long long)x->cat[3],
                     (long long)x->cat[4], (long long)x->exposed, 100 * s, 100 * s + 99);
            exec_ok(db, sql);
            for (int o = 0; o < NC; o++) {
                struct collr *y = &collrs[o][p][s];
                y->instances = 1 + rnd(4);
                y->waited = rnd(9000);
                y->last = rnd(2);
                snprintf(sql, sizeof(sql),
                         "INSERT INTO rk_coll_ranks VALUES (%d, %d, %d, %lld, %lld, %lld)", o + 2,
                         p + 1, s, (long long)y->instances, (long long)y->waited,
                         (long long)y->last);
                exec_ok(db, sql);
            }
        }
    }
    for (int o = 0; o < NC; o++)
        for (int s = 0; s < NS; s++) {
            struct coll *z = &colls[o][s];
            z->instances = 1 + rnd(9);
            z->partial = rnd(z->instances + 1);
            z->skew_max = rnd(70000);
            z->skew = z->skew_max + rnd(70000);
            snprintf(sql, sizeof(sql),
                     "INSERT INTO rk_coll VALUES (%d, %d, %lld, %lld, %lld, %lld)", o + 2, s,
                     (long long)z->instances, (long long)z->partial, (long long)z->skew,
                     (long long)z->skew_max);
            exec_ok(db, sql);
        }
    return db;
}

/* ---- the report's figures, decoded ---- */

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
    cr_assert_eq(map->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    cr_assert_fail("no key %s", key);
    return NULL;
}

static int64_t num(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = get(map, key);

    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o->via.i64;
    cr_assert_eq(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "%s", key);
    return (int64_t)o->via.u64;
}

static bool op_is(const msgpack_object *o, const char *name)
{
    const msgpack_object *v = get(o, "op");

    return v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(name) &&
           memcmp(v->via.str.ptr, name, v->via.str.size) == 0;
}

/*
 * Checks ranks_query's ranks and collectives sections and ranks_late's figures for the steps
 * lo..hi (every step without a step filter) against the rows the test wrote.
 */
static void check_report(sqlite3 *db, bool by_step, int lo, int hi)
{
    static const char *names[NC] = {"allreduce", "all_gather"};
    struct ranks_filter f = {.steps = by_step, .step_min = (uint64_t)lo, .step_max = (uint64_t)hi};
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked u;
    char err[256] = "";
    const msgpack_object *ranks, *colls_o;

    if (!by_step)
        lo = 0, hi = NS - 1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, RANKS_QUERY_KEYS);
    cr_assert_eq(ranks_query(db, &f, &pk, err, sizeof(err)), 0, "%s", err);
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);

    ranks = get(&u.data, "ranks");
    cr_assert_eq(ranks->via.array.size, NP);
    for (int p = 0; p < NP; p++) {
        const msgpack_object *r = &ranks->via.array.ptr[p];
        int64_t cat[5] = {0}, coll = 0, waited = 0, last = 0, caused = 0, n = 0;
        for (int s = lo; s <= hi; s++) {
            const struct step *x = &steps[p][s];
            for (int c = 0; c < 5; c++)
                cat[c] += x->cat[c];
            coll += x->coll, waited += x->waited, last += x->last, caused += x->caused, n++;
        }
        cr_expect_eq(num(r, "rank"), p);
        cr_expect_eq(num(r, "steps"), n);
        cr_expect_eq(num(r, "compute_ns"), cat[0]);
        cr_expect_eq(num(r, "comm_ns"), cat[1]);
        cr_expect_eq(num(r, "memory_ns"), cat[2]);
        cr_expect_eq(num(r, "wait_ns"), cat[3]);
        cr_expect_eq(num(r, "other_ns"), cat[4]);
        cr_expect_eq(num(r, "collectives"), coll);
        cr_expect_eq(num(r, "waited_ns"), waited, "rank %d", p);
        cr_expect_eq(num(r, "arrived_last"), last);
        cr_expect_eq(num(r, "caused_ns"), caused);
    }

    colls_o = get(&u.data, "collectives");
    cr_assert_eq(colls_o->via.array.size, NC);
    for (int o = 0; o < NC; o++) {
        const msgpack_object *c = NULL, *al;
        int64_t inst = 0, partial = 0, skew_max = 0, waited = 0, arrived[NP] = {0};
        for (uint32_t k = 0; k < colls_o->via.array.size; k++)
            if (op_is(&colls_o->via.array.ptr[k], names[o]))
                c = &colls_o->via.array.ptr[k];
        cr_assert_not_null(c, "%s", names[o]);
        for (int s = lo; s <= hi; s++) {
            inst += colls[o][s].instances, partial += colls[o][s].partial;
            if (colls[o][s].skew_max > skew_max)
                skew_max = colls[o][s].skew_max;
            for (int p = 0; p < NP; p++) {
                waited += collrs[o][p][s].waited;
                arrived[p] += collrs[o][p][s].last;
            }
        }
        cr_expect_eq(num(c, "instances"), inst, "%s", names[o]);
        cr_expect_eq(num(c, "partial"), partial);
        cr_expect_eq(num(c, "skew_max_ns"), skew_max);
        cr_expect_eq(num(c, "waited_ns"), waited, "%s", names[o]);
        al = get(c, "arrived_last");
        cr_assert_eq(al->via.array.size, NP);
        for (int p = 0; p < NP; p++)
            cr_expect_eq((int64_t)al->via.array.ptr[p].via.u64, arrived[p], "%s rank %d", names[o],
                         p);
    }
    msgpack_unpacked_destroy(&u);

    /* the late figures (tracectl top) */
    msgpack_sbuffer_clear(&sb);
    cr_assert_eq(ranks_late(db, &f, &pk, err, sizeof(err)), 0, "%s", err);
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    {
        int64_t inst = 0;
        for (int o = 0; o < NC; o++)
            for (int s = lo; s <= hi; s++)
                inst += colls[o][s].instances;
        cr_expect_eq(num(&u.data, "instances"), inst);
        ranks = get(&u.data, "ranks");
        cr_assert_eq(ranks->via.array.size, NP);
        for (int p = 0; p < NP; p++) {
            const msgpack_object *r = &ranks->via.array.ptr[p];
            int64_t waited = 0, last = 0, caused = 0;
            for (int s = lo; s <= hi; s++)
                waited += steps[p][s].waited, last += steps[p][s].last,
                    caused += steps[p][s].caused;
            cr_expect_eq(num(r, "rank"), p);
            cr_expect_eq(num(r, "waited_ns"), waited);
            cr_expect_eq(num(r, "arrived_last"), last);
            cr_expect_eq(num(r, "caused_ns"), caused);
        }
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* The position of column col in table's primary key (1 first), 0 none. */
static int64_t pk_pos(sqlite3 *db, const char *table, const char *col)
{
    char sql[200];

    snprintf(sql, sizeof(sql), "SELECT pk FROM pragma_table_info('%s') WHERE name = '%s'", table,
             col);
    return one(db, sql);
}

/* Every row of the three re-keyed tables against the rows written. */
static void check_rows(sqlite3 *db)
{
    sqlite3_stmt *st;
    int n = 0;

    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT * FROM rk_steps", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int p = sqlite3_column_int(st, 0) - 1, s = sqlite3_column_int(st, 1);
        const struct step *x = &steps[p][s];
        int64_t want[12] = {x->begin,  x->end,     x->cat[0], x->cat[1], x->cat[2], x->cat[3],
                            x->cat[4], x->exposed, x->coll,   x->waited, x->last,   x->caused};
        for (int k = 0; k < 12; k++)
            cr_expect_eq(sqlite3_column_int64(st, 2 + k), want[k], "rk_steps %d %d col %d", p, s,
                         k);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NP * NS);
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT * FROM rk_devsteps", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int p = sqlite3_column_int(st, 0) - 1, s = sqlite3_column_int(st, 1);
        const struct step *x = &steps[p][s];
        cr_expect_eq(sqlite3_column_int(st, 2), 1);
        cr_expect_eq(sqlite3_column_int64(st, 3), x->begin);
        cr_expect_eq(sqlite3_column_int64(st, 6), x->cat[1]);
        cr_expect_eq(sqlite3_column_int64(st, 10), x->exposed);
        cr_expect_eq(sqlite3_column_int64(st, 11), 100 * s);
        cr_expect_eq(sqlite3_column_int64(st, 12), 100 * s + 99);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NP * NS);
    n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT * FROM rk_coll_ranks", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int o = sqlite3_column_int(st, 0) - 2, p = sqlite3_column_int(st, 1) - 1;
        int s = sqlite3_column_int(st, 2);
        const struct collr *y = &collrs[o][p][s];
        cr_expect_eq(sqlite3_column_int64(st, 3), y->instances);
        cr_expect_eq(sqlite3_column_int64(st, 4), y->waited);
        cr_expect_eq(sqlite3_column_int64(st, 5), y->last);
        n++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(n, NC * NP * NS);
}

Test(ranks_rekey, an_old_layout_file_reads_the_same_before_and_after_the_writer_rekeys_it)
{
    sqlite3 *db = old_layout_db();
    struct ranks *r;

    /* as written: the report reads the old keys as they are */
    check_report(db, false, 0, 0);
    check_report(db, true, 2, 4);
    check_report(db, true, 0, 1);

    /* a writer opens it: the three tables keyed step first, every row kept */
    cr_assert_not_null(r = ranks_new(db), "%s", sqlite3_errmsg(db));
    cr_expect_eq(pk_pos(db, "rk_steps", "step"), 1);
    cr_expect_eq(pk_pos(db, "rk_steps", "process_id"), 2);
    cr_expect_eq(pk_pos(db, "rk_devsteps", "step"), 1);
    cr_expect_eq(pk_pos(db, "rk_devsteps", "process_id"), 2);
    cr_expect_eq(pk_pos(db, "rk_devsteps", "device_id"), 3);
    cr_expect_eq(pk_pos(db, "rk_coll_ranks", "step"), 1);
    cr_expect_eq(pk_pos(db, "rk_coll_ranks", "op_id"), 2);
    cr_expect_eq(pk_pos(db, "rk_coll_ranks", "process_id"), 3);
    cr_expect_eq(pk_pos(db, "rk_coll", "op_id"), 1); /* unchanged */
    cr_expect_eq(one(db, "SELECT value FROM info WHERE key = 'ranks_layout'"), 2);
    cr_expect_eq(one(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE '%_v1'"), 0);
    check_rows(db);
    check_report(db, false, 0, 0);
    check_report(db, true, 2, 4);
    check_report(db, true, 0, 1);

    /*
     * The writer adds to the re-keyed rows: a collective instance of allreduce in step 0
     * where process 1 arrives first and waits for process 2 (one rank of each, world 2
     * for this instance's comm_size): 300 ns waited.
     */
    {
        struct proto_entry e = {.op_id = 2, .step = 0, .start_ns = 100, .dur_ns = 1000};
        struct proto_ext x = {.has = PROTO_EXT_COMM | PROTO_EXT_SEQ | PROTO_EXT_COMM_SIZE,
                              .comm = 7,
                              .seq = 1,
                              .comm_size = 2};
        cr_assert_eq(ranks_load(r), 0);
        exec_ok(db, "BEGIN");
        cr_assert_eq(ranks_entry(r, 1, &e, 1, &x, 1000), 0);
        e.start_ns = 400;
        cr_assert_eq(ranks_entry(r, 2, &e, 1, &x, 1001), 0);
        cr_assert_eq(ranks_flush(r), 0);
        exec_ok(db, "COMMIT");
    }
    ranks_free(r);
    collrs[0][1][0].instances++;
    collrs[0][1][0].last++;
    collrs[0][0][0].instances++;
    colls[0][0].instances++;
    steps[0][0].cat[1] += 1000; /* comm */
    steps[1][0].cat[1] += 1000;
    steps[0][0].coll++;
    steps[1][0].coll++;
    steps[1][0].last++;
    steps[1][0].caused += 300;
    if (colls[0][0].skew_max < 300)
        colls[0][0].skew_max = 300;
    colls[0][0].skew += 300;
    steps[0][0].waited += 300;
    collrs[0][0][0].waited += 300;
    check_report(db, false, 0, 0);
    check_report(db, true, 0, 1);

    /* a second writer finds the layout it wants: nothing to re-key */
    cr_assert_not_null(r = ranks_new(db));
    ranks_free(r);
    cr_expect_eq(pk_pos(db, "rk_steps", "step"), 1);
    sqlite3_close(db);
}
