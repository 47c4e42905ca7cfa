/*
 * test_mpi_report — mpi_report() over a small hand-made session (the real
 * schema, in memory): the figures real jobs do not give on demand, each
 * worked out by hand below: dropped calls in the MPI time, a rank without
 * MPI_Finalize (wall from its entries), a filtered report (no drops, wall
 * from entries), a receive missing (pairs_differ), a peer of -1 (none), a
 * hashed communicator id above INT64_MAX, a process without a rank, and
 * buckets at 0, 1 and 1024 bytes. (test_mpi_sections in tests/integration
 * checks the same figures against a real Open MPI job's own counts.)
 *
 * processes: 1 rank 0 (mpi.init_ns 1000, mpi.finalize_ns 1001000),
 *            2 rank 1 (mpi.init_ns only), 3 no rank (no MPI entries)
 * ops: 1 MPI_Send, 2 MPI_Recv, 3 MPI_Wait (wait), 4 tcmpi.recv, 5 MPI_Sendrecv,
 *      6 matmul, 7 MPI_Allreduce, 8 MPI_Irecv
 * entries (process op start dur bytes | ext comm comm_size peer):
 *   p1 Send       2000  100     0 | 0 - 1
 *   p1 Send       3000  200     1 | 0 - 1
 *   p1 Send       4000  300  1024 | 0 - 1
 *   p1 Allreduce  5000 1000     8 | 0 2 -
 *   p1 Wait       7000   50     0 | (no ext)
 *   p1 Sendrecv   8000  400    16 | 0 - 1
 *   p1 tcmpi.recv 8400    0    32 | 0 - 1
 *   p2 Recv       2500  600     0 | 0 - 0
 *   p2 Recv       3500  700     1 | 0 - 0
 *   p2 Allreduce  5000 1200     8 | 0 2 -
 *   p2 Allreduce  6500   30     8 | 2^64-5 NULL -
 *   p2 Sendrecv   8000  500    32 | 0 - 0
 *   p2 tcmpi.recv 8500    0    16 | 0 - 0
 *   p2 Irecv      9000   10     8 | 0 - -1
 *   p3 matmul     1000 5000     0 |
 * process_op_drops: p1 MPI_Send 5 calls 5000 ns; p1 tcmpi.recv 2 (no calls); p3 matmul 9.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <msgpack.h>
#include <sqlite3.h>

#include "mpi_report.h"
#include "schema.h"

static const char data_sql[] =
    "INSERT INTO processes(id, rank, started_ns) VALUES (1, 0, 1), (2, 1, 1), (3, NULL, 1);"
    "INSERT INTO meta VALUES (1, 'mpi.init_ns', 1000), (1, 'mpi.finalize_ns', 1001000),"
    " (2, 'mpi.init_ns', 1000);"
    "INSERT INTO ops VALUES (1, 'MPI_Send', 'comm'), (2, 'MPI_Recv', 'comm'),"
    " (3, 'MPI_Wait', 'wait'), (4, 'tcmpi.recv', 'comm'), (5, 'MPI_Sendrecv', 'comm'),"
    " (6, 'matmul', 'compute'), (7, 'MPI_Allreduce', 'comm'), (8, 'MPI_Irecv', 'comm');"
    "INSERT INTO entries(rowid, process_id, step, op_id, start_ns, dur_ns, mem_bytes) VALUES"
    " (1, 1, 0, 1, 2000, 100, 0), (2, 1, 0, 1, 3000, 200, 1), (3, 1, 0, 1, 4000, 300, 1024),"
    " (4, 1, 0, 7, 5000, 1000, 8), (5, 1, 0, 3, 7000, 50, 0), (6, 1, 0, 5, 8000, 400, 16),"
    " (7, 1, 0, 4, 8400, 0, 32), (8, 2, 0, 2, 2500, 600, 0), (9, 2, 0, 2, 3500, 700, 1),"
    " (10, 2, 0, 7, 5000, 1200, 8), (11, 2, 0, 7, 6500, 30, 8), (12, 2, 0, 5, 8000, 500, 32),"
    " (13, 2, 0, 4, 8500, 0, 16), (14, 2, 0, 8, 9000, 10, 8), (15, 3, 0, 6, 1000, 5000, 0);"
    "INSERT INTO entry_ext(entry_rowid, comm, comm_size, peer) VALUES"
    " (1, 0, NULL, 1), (2, 0, NULL, 1), (3, 0, NULL, 1), (4, 0, 2, NULL), (6, 0, NULL, 1),"
    " (7, 0, NULL, 1), (8, 0, NULL, 0), (9, 0, NULL, 0), (10, 0, 2, NULL), (11, -5, NULL, NULL),"
    " (12, 0, NULL, 0), (13, 0, NULL, 0), (14, 0, NULL, -1);"
    "INSERT INTO process_op_drops(process_id, op_id, calls, total_ns, bytes)"
    " VALUES (1, 1, 5, 5000, 50), (1, 4, 2, 0, 64), (3, 6, 9, 90, 0);";

static sqlite3 *db;
static msgpack_unpacked un;

static void setup(void)
{
    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, schema_session_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, schema_entry_ext_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, data_sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    msgpack_unpacked_init(&un);
}

static void teardown(void)
{
    msgpack_unpacked_destroy(&un);
    sqlite3_close(db);
}

TestSuite(mpi_report, .init = setup, .fini = teardown);

/* mpi_report() into a buffer; returns the map after the key "mpi" (NULL: nothing packed). */
static const msgpack_object *run(bool whole)
{
    static msgpack_sbuffer sb;
    msgpack_packer pk;
    char err[256] = "";
    size_t off = 0;
    int rc;

    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = mpi_report(db, whole, &pk, err, sizeof(err));
    cr_assert_geq(rc, 0, "%s", err);
    if (rc == 0) {
        cr_assert_eq(sb.size, 0);
        return NULL;
    }
    cr_assert_eq(msgpack_unpack_next(&un, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert(un.data.type == MSGPACK_OBJECT_STR && un.data.via.str.size == 3 &&
              memcmp(un.data.via.str.ptr, "mpi", 3) == 0);
    cr_assert_eq(msgpack_unpack_next(&un, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, sb.size, "one key, one map");
    cr_assert_eq(un.data.type, MSGPACK_OBJECT_MAP);
    return &un.data;
}

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
    cr_assert_eq(map->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->via.str.size == strlen(key) && memcmp(k->via.str.ptr, key, k->via.str.size) == 0)
            return &map->via.map.ptr[i].val;
    }
    cr_assert_fail("no key %s", key);
    return NULL;
}

static uint64_t u(const msgpack_object *map, const char *key)
{
    const msgpack_object *v = get(map, key);

    cr_assert_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER, "%s", key);
    return v->via.u64;
}

static bool str_is(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static const msgpack_object *at(const msgpack_object *map, const char *key, uint32_t i, uint32_t n)
{
    const msgpack_object *a = get(map, key);

    cr_assert_eq(a->type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(a->via.array.size, n, "%s has %u rows", key, a->via.array.size);
    return &a->via.array.ptr[i];
}

Test(mpi_report, ranks_with_drops_and_a_rank_without_finalize)
{
    const msgpack_object *m = run(true), *r0, *r1, *total;

    cr_assert_eq(u(m, "dropped_calls"), 5);
    r0 = at(m, "ranks", 0, 2);
    cr_assert_eq(u(r0, "rank"), 0);
    cr_assert(str_is(get(r0, "wall_from"), "init_finalize"));
    cr_assert_eq(u(r0, "wall_ns"), 1000000);
    /* 100 + 200 + 300 + 1000 + 50 + 400 kept, + 5000 dropped */
    cr_assert_eq(u(r0, "mpi_ns"), 7050);
    cr_assert_eq(u(r0, "app_ns"), 1000000 - 7050);
    cr_assert_eq(u(r0, "calls"), 6 + 5);
    cr_assert_eq(u(r0, "dropped_calls"), 5);
    cr_assert_float_eq(get(r0, "mpi_share")->via.f64, 7050 / 1e6, 1e-12);
    r1 = at(m, "ranks", 1, 2);
    cr_assert_eq(u(r1, "rank"), 1);
    /* no mpi.finalize_ns: from 2500 to the Irecv's end, 9010 */
    cr_assert(str_is(get(r1, "wall_from"), "entries"));
    cr_assert_eq(u(r1, "wall_ns"), 9010 - 2500);
    cr_assert_eq(u(r1, "mpi_ns"), 600 + 700 + 1200 + 30 + 500 + 10);
    cr_assert_eq(u(r1, "calls"), 6);
    total = get(m, "total");
    cr_assert_eq(u(total, "wall_ns"), 1000000 + 6510);
    cr_assert_eq(u(total, "mpi_ns"), 7050 + 3040);
    cr_assert_eq(u(total, "calls"), 17);
    cr_assert_eq(u(total, "dropped_calls"), 5);
}

Test(mpi_report, filtered_counts_the_entries_only)
{
    const msgpack_object *m = run(false), *r0 = at(m, "ranks", 0, 2);

    cr_assert_eq(u(m, "dropped_calls"), 0);
    cr_assert(str_is(get(r0, "wall_from"), "entries"));
    cr_assert_eq(u(r0, "wall_ns"), 8400 - 2000);
    cr_assert_eq(u(r0, "mpi_ns"), 2050);
    cr_assert_eq(u(r0, "calls"), 6);
}

Test(mpi_report, communicators)
{
    const msgpack_object *m = run(true), *world = at(m, "comms", 0, 2), *other, *op;

    cr_assert(str_is(get(world, "name"), "WORLD"));
    cr_assert_eq(u(world, "id"), 0);
    cr_assert_eq(u(world, "size"), 2);
    cr_assert_eq(get(world, "members")->via.array.size, 2);
    /* every call with comm 0 but the tcmpi.recv entries (no calls) */
    cr_assert_eq(u(world, "calls"), 10);
    cr_assert_eq(u(world, "total_ns"), 100 + 200 + 300 + 1000 + 400 + 600 + 700 + 1200 + 500 + 10);
    cr_assert_eq(u(world, "bytes"), 0 + 1 + 1024 + 8 + 16 + 0 + 1 + 8 + 32 + 8);
    op = at(world, "ops", 0, 5); /* by time: Allreduce 2200, Recv 1300, Sendrecv 900, ... */
    cr_assert(str_is(get(op, "op"), "MPI_Allreduce"));
    cr_assert_eq(u(op, "calls"), 2);
    cr_assert_eq(u(op, "total_ns"), 2200);
    other = at(m, "comms", 1, 2);
    cr_assert(str_is(get(other, "name"), "comm#1"));
    cr_assert_eq(u(other, "id"), UINT64_MAX - 4); /* stored as -5 */
    cr_assert_eq(u(other, "size"), 1);            /* no comm_size: the members seen */
    cr_assert_eq(get(other, "members")->via.array.ptr[0].via.u64, 1);
    cr_assert_eq(u(other, "calls"), 1);
}

/* A name by comm id (as the reply gives ids). */
static const char *name_of(const msgpack_object *m, uint64_t id, char *buf, size_t size)
{
    const msgpack_object *comms = get(m, "comms");

    for (uint32_t i = 0; i < comms->via.array.size; i++)
        if (u(&comms->via.array.ptr[i], "id") == id) {
            const msgpack_object *n = get(&comms->via.array.ptr[i], "name");
            snprintf(buf, size, "%.*s", (int)n->via.str.size, n->via.str.ptr);
            return buf;
        }
    cr_assert_fail("no comm %llu", (unsigned long long)id);
    return NULL;
}

/*
 * Names the members sent (mpi.comm.<id>, tcmpi.h), from WORLD down; those
 * not named are comm#N by first use (N counts only them); an ancestor not
 * named is "?"; a value not in the interposer's form is no name.
 */
Test(mpi_report, communicator_names)
{
    const msgpack_object *m;
    char buf[64];

    cr_assert_eq(
        sqlite3_exec(db,
                     "INSERT INTO meta VALUES"
                     " (2, 'mpi.comm.fffffffffffffffb', 'split#2 0000000000000000'),"
                     " (2, 'mpi.comm.0000000000000007', 'dup#1 fffffffffffffffb'),"
                     " (1, 'mpi.comm.000000000000000b', 'cart#3 0000000000000055'),"
                     " (1, 'mpi.comm.000000000000000d', 'no parent');"
                     "INSERT INTO entries(rowid, process_id, step, op_id, start_ns, dur_ns,"
                     " mem_bytes) VALUES (16, 2, 0, 7, 6600, 20, 8), (17, 1, 0, 7, 6700, 9, 8),"
                     " (18, 1, 0, 7, 6800, 8, 8), (19, 1, 0, 7, 6900, 7, 8);"
                     "INSERT INTO entry_ext(entry_rowid, comm) VALUES (16, 7), (17, 9), (18, 11),"
                     " (19, 13);",
                     NULL, NULL, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    m = run(true);
    cr_assert_eq(get(m, "comms")->via.array.size, 6);
    cr_assert_str_eq(name_of(m, 0, buf, sizeof(buf)), "WORLD");
    cr_assert_str_eq(name_of(m, UINT64_MAX - 4, buf, sizeof(buf)), "split#2");
    cr_assert_str_eq(name_of(m, 7, buf, sizeof(buf)), "split#2/dup#1");
    cr_assert_str_eq(name_of(m, 9, buf, sizeof(buf)), "comm#1");
    cr_assert_str_eq(name_of(m, 11, buf, sizeof(buf)), "?/cart#3");
    cr_assert_str_eq(name_of(m, 13, buf, sizeof(buf)), "comm#2");
}

/*
 * Callsites as the processes sent them at their end (mpi.site.<i>), summed
 * by (op, module, offset) over the processes; a value not in the
 * interposer's form is none; sites seen but not sent and calls past a table
 * are counted; a filtered report has none (nil: they count whole runs).
 */
Test(mpi_report, callsites)
{
    const msgpack_object *m, *cs, *x;

    cr_assert_eq(sqlite3_exec(db,
                              "INSERT INTO meta VALUES"
                              " (1, 'mpi.sites', 3), (1, 'mpi.sites_lost', 4),"
                              " (1, 'mpi.site.0', 'MPI_Send	3	600	1025	1a2b	"
                              "10	main	/bin/app'),"
                              " (1, 'mpi.site.1', 'MPI_Allreduce	1	1000	8	"
                              "1c00	0		/bin/app'),"
                              " (2, 'mpi.sites', 2),"
                              " (2, 'mpi.site.0', 'MPI_Allreduce	1	1200	8	"
                              "1c00	0		/bin/app'),"
                              " (2, 'mpi.site.1', 'MPI_Recv	not the interposer''s'),"
                              " (3, 'mpi.sites', 1),"
                              " (3, 'mpi.site.0', 'MPI_Send	9	9	9	1a2b	"
                              "10	main	/bin/app');",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    m = run(true);
    cs = get(m, "callsites");
    /* process 1 saw 3 and sent 2, process 2 saw 2 and sent 2 (one unreadable); process 3 has
     * no MPI entries (no row in ranks) but is in the session: its site counts */
    cr_assert_eq(u(cs, "unsent"), 1);
    cr_assert_eq(u(cs, "lost_calls"), 4);
    cr_assert_eq(u(cs, "total"), 2);
    x = at(cs, "sites", 0, 2); /* Allreduce 2200 ns, then Send 609 */
    cr_assert(str_is(get(x, "op"), "MPI_Allreduce"));
    cr_assert(str_is(get(x, "module"), "/bin/app"));
    cr_assert(str_is(get(x, "symbol"), ""));
    cr_assert_eq(u(x, "offset"), 0x1c00);
    cr_assert_eq(u(x, "ranks"), 2);
    cr_assert_eq(u(x, "calls"), 2);
    cr_assert_eq(u(x, "total_ns"), 2200);
    cr_assert_eq(u(x, "bytes"), 16);
    cr_assert_eq(u(x, "min_ns"), 1000); /* rank 0's */
    cr_assert_eq(u(x, "max_ns"), 1200);
    cr_assert_eq(u(x, "max_rank"), 1);
    /* of the session's MPI time: 7050 + 3040 */
    cr_assert_float_eq(get(x, "mpi_share")->via.f64, 2200.0 / 10090.0, 1e-12);
    x = at(cs, "sites", 1, 2);
    cr_assert(str_is(get(x, "op"), "MPI_Send"));
    cr_assert(str_is(get(x, "symbol"), "main"));
    cr_assert_eq(u(x, "symbol_offset"), 0x10);
    cr_assert_eq(u(x, "calls"), 12);
    cr_assert_eq(u(x, "ranks"), 2);
    cr_assert_eq(u(x, "min_ns"), 9); /* process 3, no rank */
    cr_assert_eq(u(x, "max_ns"), 600);
    cr_assert_eq(u(x, "max_rank"), 0);
    m = run(false);
    cr_assert_eq(get(m, "callsites")->type, MSGPACK_OBJECT_NIL);
}

Test(mpi_report, sizes)
{
    const msgpack_object *m = run(true), *s, *b;

    /* Allreduce, Irecv, Recv, Send, Sendrecv by name; not Wait nor tcmpi.recv */
    s = at(m, "sizes", 3, 5);
    cr_assert(str_is(get(s, "op"), "MPI_Send"));
    b = at(s, "buckets", 0, 3);
    cr_assert_eq(u(b, "min_bytes"), 0);
    cr_assert_eq(u(b, "max_bytes"), 0);
    cr_assert_eq(u(b, "calls"), 1);
    cr_assert_eq(u(b, "total_ns"), 100);
    b = at(s, "buckets", 1, 3);
    cr_assert_eq(u(b, "min_bytes"), 1);
    cr_assert_eq(u(b, "max_bytes"), 1);
    b = at(s, "buckets", 2, 3);
    cr_assert_eq(u(b, "min_bytes"), 1024);
    cr_assert_eq(u(b, "max_bytes"), 2047);
    cr_assert_eq(u(b, "total_ns"), 300);
    s = at(m, "sizes", 0, 5);
    cr_assert(str_is(get(s, "op"), "MPI_Allreduce"));
    b = at(s, "buckets", 0, 1);
    cr_assert_eq(u(b, "min_bytes"), 8);
    cr_assert_eq(u(b, "max_bytes"), 15);
    cr_assert_eq(u(b, "calls"), 3);
}

Test(mpi_report, point_to_point)
{
    const msgpack_object *m = run(true), *p2p = get(m, "p2p"), *p;

    p = at(p2p, "pairs", 0, 2);
    cr_assert_eq(u(p, "from"), 0);
    cr_assert_eq(u(p, "to"), 1);
    cr_assert_eq(u(p, "messages"), 4); /* 3 Sends and a Sendrecv */
    cr_assert_eq(u(p, "bytes"), 0 + 1 + 1024 + 16);
    cr_assert_eq(u(p, "recv_messages"), 3); /* 2 Recvs and a Sendrecv's receive side */
    cr_assert_eq(u(p, "recv_bytes"), 0 + 1 + 16);
    p = at(p2p, "pairs", 1, 2);
    cr_assert_eq(u(p, "from"), 1);
    cr_assert_eq(u(p, "to"), 0);
    cr_assert_eq(u(p, "messages"), 1);
    cr_assert_eq(u(p, "bytes"), 32);
    cr_assert_eq(u(p, "recv_messages"), 1);
    cr_assert_eq(u(p, "recv_bytes"), 32);
    cr_assert_eq(u(p2p, "pairs_differ"), 1);
    cr_assert_eq(u(p2p, "pairs_total"), 2);
    cr_assert_eq(u(p2p, "messages"), 5);
    cr_assert_eq(u(p2p, "recv_messages"), 4); /* not the Irecv of peer -1 */
}

/*
 * TRACECTL_MPI_P2P=counters: the per-peer rows (mpi.p2p.<i>) count every
 * call, the entries stored included; the rest go into the matrix and the
 * communicators and are counted, not dropped. p1: its 3 Sends to rank 1
 * were 8 calls, 7000 ns, 1537 bytes (so 5 more, 6400 ns, 512 bytes: the 5
 * of process_op_drops), its Sendrecv's receive side 3 (2 more, 16 bytes; no
 * calls); p2: its 2 Recvs from rank 0 were 4, 1500 ns, 3 bytes (2 more,
 * 200 ns, 2 bytes; dropped 2 added here). The interposer says which calls
 * it counted in its ops_dropped rows' counted (process_op_drops.counted):
 * here all of them. Rows not of the form are ignored.
 */
Test(mpi_report, p2p_counters_count_every_call)
{
    const msgpack_object *m, *p, *world;

    cr_assert_eq(
        sqlite3_exec(
            db,
            "INSERT INTO meta VALUES (1, 'mpi.p2p', 6),"
            " (1, 'mpi.p2p.0', 'MPI_Send	0000000000000000	1	8	7000	"
            "1537'),"
            " (1, 'mpi.p2p.1', 'tcmpi.recv	0000000000000000	1	3	0	"
            "48'),"
            " (1, 'mpi.p2p.2', 'MPI_Send	0	1	100	100	100'),"
            " (1, 'mpi.p2p.3', 'MPI_Bogus	-	1	100	100	100'),"
            " (1, 'mpi.p2p.4', 'MPI_Send	0000000000000000	1	100	100'),"
            " (1, 'mpi.p2p.5', 'MPI_Send	0000000000000000	1	100	100	"
            "100 x'),"
            " (2, 'mpi.p2p.0', 'MPI_Recv	0000000000000000	0	4	1500	"
            "3');"
            "INSERT INTO process_op_drops VALUES (2, 2, 2, 200, 2, 2, 200, 2);"
            "UPDATE process_op_drops SET counted = calls, counted_ns = total_ns,"
            " counted_bytes = bytes WHERE process_id = 1 AND op_id = 1;",
            NULL, NULL, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    m = run(true);
    cr_assert_eq(u(m, "dropped_calls"), 0);
    cr_assert_eq(u(m, "counted_calls"), 5 + 2);
    p = at(m, "ranks", 0, 2);
    cr_assert_eq(u(p, "calls"), 6 + 5);
    cr_assert_eq(u(p, "mpi_ns"), 7050); /* as before: the counted calls were in the drops */
    cr_assert_eq(u(p, "dropped_calls"), 0);
    cr_assert_eq(u(p, "counted_calls"), 5);
    p = at(m, "ranks", 1, 2);
    cr_assert_eq(u(p, "calls"), 6 + 2);
    cr_assert_eq(u(p, "mpi_ns"), 3040 + 200);
    cr_assert_eq(u(p, "dropped_calls"), 0);
    cr_assert_eq(u(p, "counted_calls"), 2);
    cr_assert_eq(u(get(m, "total"), "dropped_calls"), 0);
    cr_assert_eq(u(get(m, "total"), "counted_calls"), 7);
    p = at(get(m, "p2p"), "pairs", 0, 2);
    cr_assert_eq(u(p, "messages"), 4 + 5);
    cr_assert_eq(u(p, "bytes"), 1041 + 512);
    cr_assert_eq(u(p, "recv_messages"), 3 + 2);
    cr_assert_eq(u(p, "recv_bytes"), 17 + 2);
    p = at(get(m, "p2p"), "pairs", 1, 2);
    cr_assert_eq(u(p, "messages"), 1);
    cr_assert_eq(u(p, "recv_messages"), 1 + 2); /* the Sendrecv's receive side */
    cr_assert_eq(u(p, "recv_bytes"), 32 + 16);
    world = at(m, "comms", 0, 2);
    cr_assert_eq(u(world, "calls"), 10 + 5 + 2); /* no tcmpi.recv */
    cr_assert_eq(u(world, "total_ns"), 5010 + 6400 + 200);
    cr_assert_eq(u(world, "bytes"), 1098 + 512 + 2);
    /* a filtered report counts the entries only */
    m = run(false);
    cr_assert_eq(u(m, "counted_calls"), 0);
    cr_assert_eq(u(at(get(m, "p2p"), "pairs", 0, 2), "messages"), 4);
}

Test(mpi_report, nothing_without_mpi_entries)
{
    cr_assert_eq(sqlite3_exec(db, "DELETE FROM entries WHERE op_id != 6", NULL, NULL, NULL),
                 SQLITE_OK);
    /* process 1's dropped MPI calls still make a row */
    cr_assert_not_null(run(true));
    cr_assert_null(run(false));
    cr_assert_eq(sqlite3_exec(db, "DELETE FROM ops WHERE name GLOB 'MPI_*'", NULL, NULL, NULL),
                 SQLITE_OK);
    cr_assert_null(run(true));
}
