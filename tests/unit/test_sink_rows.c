/*
 * test_sink_rows.c — what the ClickHouse sink reads from a session file and
 * how it encodes it (daemon/sink/sink_rows.h): a rows-format file made here from
 * the daemon's own schema, with entries on both sides of a UTC midnight,
 * read in batches and decoded by this test's own RowBinary reader (column
 * order of schema/clickhouse.sql's entries).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schema.h"
#include "sink_rows.h"

#define DAY    86400000000000ll
#define MIDDAY (20000 * DAY + DAY / 2) /* a wall-clock start, after 2001 */
#define OFFSET 1000                    /* the clock offset the test applies */

static char path[64];

static void setup(void)
{
    sqlite3 *db;
    char sql[512];

    snprintf(path, sizeof(path), "/tmp/tc-sinkrows-%d.db", (int)getpid());
    unlink(path);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, schema_session_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, schema_entry_ext_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "INSERT INTO processes (id, rank, world, pid, host, device,"
                              " started_ns) VALUES (1, 0, 2, 10, 'n1', 'gpu:0', 1),"
                              " (2, NULL, 2, 11, 'n2', NULL, 1);"
                              "INSERT INTO ops VALUES (1, 'matmul', 'compute'),"
                              " (2, 'allreduce', 'comm');"
                              "INSERT INTO devices VALUES (1, 'gpu:0');"
                              "INSERT INTO meta VALUES (1, 'torch', '2.3.1'), (1, 'n', 7);"
                              "INSERT INTO shapes VALUES (1, NULL, NULL, 96);",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    /* entries 1..6: 1-4 before midnight (4 at its last ns, offset included), 5-6 after */
    for (int i = 1; i <= 6; i++) {
        long long start = MIDDAY + (i <= 3 ? i : i == 4 ? DAY / 2 - 1 : DAY / 2 + i) - OFFSET;

        snprintf(sql, sizeof(sql),
                 "INSERT INTO entries VALUES (%d, %d, %d, %s, %lld, %d, %s, %d, %s)", i % 2 ? 1 : 2,
                 i, i % 2 ? 1 : 2, i % 2 ? "1" : "NULL", start, 100 * i, i == 2 ? "NULL" : "5",
                 64 * i, i == 2 ? "1" : "NULL");
        cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    }
    cr_assert_eq(sqlite3_exec(db,
                              "INSERT INTO entry_ext (entry_rowid, comm, seq, comm_size, tag)"
                              " VALUES (2, 7, 1, 2, -3)",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
}

static void teardown(void)
{
    unlink(path);
}

TestSuite(sink_rows, .init = setup, .fini = teardown);

/* This test's RowBinary reader. */
struct rd {
    const unsigned char *p, *end;
};

static uint64_t rd_le(struct rd *r, int n)
{
    uint64_t v = 0;

    cr_assert(r->p + n <= r->end, "read past the end");
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static void rd_str(struct rd *r, char *out, size_t size)
{
    uint64_t n = 0;
    int shift = 0;
    unsigned char b;

    do {
        cr_assert(r->p < r->end);
        b = *r->p++;
        n |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    cr_assert(n < size && r->p + n <= r->end);
    memcpy(out, r->p, n);
    out[n] = '\0';
    r->p += n;
}

/* A Nullable: -1 for NULL, else the value (n bytes). */
static long long rd_null(struct rd *r, int n)
{
    if (rd_le(r, 1) == 1)
        return -1;
    return (long long)rd_le(r, n);
}

struct row {
    char host[16], session[16], op[16], category[16], device[16];
    uint64_t session_id, step, start, dur, elements, mem, batch;
    int32_t rank;
    uint32_t process_id;
    long long ext[6];
};

static void rd_row(struct rd *r, struct row *w)
{
    rd_str(r, w->host, sizeof(w->host));
    w->session_id = rd_le(r, 8);
    rd_str(r, w->session, sizeof(w->session));
    w->rank = (int32_t)rd_le(r, 4);
    w->process_id = (uint32_t)rd_le(r, 4);
    w->step = rd_le(r, 8);
    rd_str(r, w->op, sizeof(w->op));
    rd_str(r, w->category, sizeof(w->category));
    rd_str(r, w->device, sizeof(w->device));
    w->start = rd_le(r, 8);
    w->dur = rd_le(r, 8);
    w->elements = rd_le(r, 8);
    w->mem = rd_le(r, 8);
    for (int i = 0; i < 5; i++)
        w->ext[i] = rd_null(r, 8);
    w->ext[5] = rd_null(r, 4);
    w->batch = rd_le(r, 8);
}

Test(sink_rows, a_batch_stops_at_midnight_and_carries_its_last_rowid)
{
    struct sink_origin o = {"hostA", 42, "job", OFFSET};
    struct sink_reader rdr;
    struct sink_buf buf = {0};
    struct row w;
    struct rd r;
    size_t n;
    int64_t last, start;

    cr_assert_eq(sink_rows_open(&rdr, path), 0);
    cr_assert_eq(sink_rows_read(&rdr, &o, 0, 100, &buf, &n, &last), 0);
    cr_assert_eq(n, 4, "entries 1-4 are of one day");
    cr_assert_eq(last, 4);
    r = (struct rd){(const unsigned char *)buf.data, (const unsigned char *)buf.data + buf.len};
    for (int i = 1; i <= 4; i++) {
        rd_row(&r, &w);
        cr_assert_str_eq(w.host, "hostA");
        cr_assert_eq(w.session_id, 42);
        cr_assert_str_eq(w.session, "job");
        cr_assert_eq(w.rank, i % 2 ? 0 : -1, "entry %d: rank", i);
        cr_assert_eq(w.process_id, i % 2 ? 1u : 2u);
        cr_assert_eq(w.step, (uint64_t)i);
        cr_assert_str_eq(w.op, i % 2 ? "matmul" : "allreduce");
        cr_assert_str_eq(w.category, i % 2 ? "compute" : "comm");
        cr_assert_str_eq(w.device, i % 2 ? "gpu:0" : "");
        cr_assert_eq(w.start, (uint64_t)(MIDDAY + (i <= 3 ? i : DAY / 2 - 1)), "entry %d", i);
        cr_assert_eq(w.dur, (uint64_t)(100 * i));
        cr_assert_eq(w.elements, i == 2 ? 96u : 5u, "entry %d: elements (shape's when NULL)", i);
        cr_assert_eq(w.mem, (uint64_t)(64 * i));
        cr_assert_eq(w.ext[0], -1, "stream");
        cr_assert_eq(w.ext[1], -1, "peer");
        cr_assert_eq(w.ext[2], i == 2 ? (long long)(uint64_t)-3 : -1, "tag");
        cr_assert_eq(w.ext[3], i == 2 ? 7 : -1, "comm");
        cr_assert_eq(w.ext[4], i == 2 ? 1 : -1, "seq");
        cr_assert_eq(w.ext[5], i == 2 ? 2 : -1, "comm_size");
        cr_assert_eq(w.batch, 4, "entry %d: batch", i);
    }
    cr_assert_eq(r.p, r.end);

    buf.len = 0;
    cr_assert_eq(sink_rows_next_start(&rdr, 4, &start), 0);
    cr_assert_eq(start, MIDDAY + DAY / 2 + 5 - OFFSET);
    cr_assert_eq(sink_rows_read(&rdr, &o, 4, 1, &buf, &n, &last), 0);
    cr_assert_eq(n, 1, "max 1");
    cr_assert_eq(last, 5);
    buf.len = 0;
    cr_assert_eq(sink_rows_read(&rdr, &o, 5, 100, &buf, &n, &last), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(last, 6);
    r = (struct rd){(const unsigned char *)buf.data, (const unsigned char *)buf.data + buf.len};
    rd_row(&r, &w);
    cr_assert_eq(w.batch, 6);
    buf.len = 0;
    cr_assert_eq(sink_rows_read(&rdr, &o, 6, 100, &buf, &n, &last), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(last, 6);
    cr_assert_eq(sink_rows_next_start(&rdr, 6, &start), -ENOENT);
    cr_assert_eq(sink_rows_last(&rdr, &last), 0);
    cr_assert_eq(last, 6);
    sink_buf_free(&buf);
    sink_rows_close(&rdr);
}

Test(sink_rows, processes_carry_their_metadata_and_hosts)
{
    struct sink_origin o = {"hostA", 42, "job", 0};
    struct sink_reader rdr;
    struct sink_buf procs = {0}, hosts = {0};
    char s[32];
    struct rd r;

    cr_assert_eq(sink_rows_open(&rdr, path), 0);
    cr_assert_eq(sink_rows_processes(&rdr, &o, 9, &procs, &hosts), 0);
    r = (struct rd){(const unsigned char *)procs.data,
                    (const unsigned char *)procs.data + procs.len};
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "hostA");
    cr_assert_eq(rd_le(&r, 8), 42);
    cr_assert_eq(rd_le(&r, 4), 1, "process_id");
    cr_assert_eq(rd_le(&r, 4), 0, "rank");
    cr_assert_eq(rd_le(&r, 4), 2, "world");
    cr_assert_eq(rd_le(&r, 8), 10, "pid");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "n1");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "gpu:0");
    cr_assert_eq(rd_le(&r, 8), 1, "started_ns");
    cr_assert_eq(rd_le(&r, 8), 0, "ended_ns");
    cr_assert_eq(rd_le(&r, 1), 0, "bye");
    cr_assert_eq(rd_le(&r, 8), 0, "dropped");
    cr_assert_eq(rd_le(&r, 1), 2, "two metadata keys");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "n");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "torch");
    cr_assert_eq(rd_le(&r, 1), 2);
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "7", "an integer value as text");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "2.3.1");
    cr_assert_eq(rd_le(&r, 8), 9, "version");
    r = (struct rd){(const unsigned char *)hosts.data,
                    (const unsigned char *)hosts.data + hosts.len};
    cr_assert_eq(rd_le(&r, 1), 2, "two hosts");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "n1");
    rd_str(&r, s, sizeof(s));
    cr_assert_str_eq(s, "n2");
    sink_buf_free(&procs);
    sink_buf_free(&hosts);
    sink_rows_close(&rdr);
}

Test(sink_rows, a_file_still_being_created_is_not_there_yet)
{
    struct sink_reader rdr;
    sqlite3 *db;

    unlink(path);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(
        sqlite3_exec(db, "CREATE TABLE info (key TEXT PRIMARY KEY, value)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    cr_assert_eq(sink_rows_open(&rdr, path), -ENOENT);
    unlink(path);
    cr_assert_eq(sink_rows_open(&rdr, path), -ENOENT, "no file");
}
