/*
 * test_blocks.c — the blocks storage format (tracectld --storage-format
 * blocks) against the row format, on the same input.
 *
 * Two daemons, one per format, get the very same messages from this process
 * (so even the pid they record is the same): three sessions, two of them
 * with two ranks, interleaved, with only two session files open at once (so
 * files are closed and reopened mid-session and the partly filled block is
 * read back), entries with every field's edge values (INT64_MAX times,
 * nil and explicit elements, shapes, per-entry devices, ext maps), a flush
 * after each batch (so partly filled blocks are committed and rewritten),
 * batches that straddle blocks of 1024. Then every export format and the
 * report must be byte for byte the same from both daemons, and so must the
 * answers of SQL queries on both files (the blocks file read through the
 * loadable extension, as the sqlite3 shell's .load does), including those
 * whose constraints the virtual table pushes down.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "info.h"

static struct tdaemon dr, db; /* rows, blocks */

static void stop_and_clean(void)
{
    struct tdaemon *ds[] = {&dr, &db};

    for (int i = 0; i < 2; i++) {
        if (ds[i]->pid > 0)
            harness_daemon_stop(ds[i], SIGTERM);
        harness_cleanup(ds[i]);
    }
}

TestSuite(blocks, .fini = stop_and_clean, .timeout = 240);

/* ---- what both daemons get ----------------------------------------------- */

static const char *const op_names[] = {"matmul", "allreduce", "copy", "relu"};
static const char *const op_cats[] = {NULL, "comm", "memory", NULL};

struct producer {
    const char *session;
    int rank, world;
    const char *device; /* hello's */
};

static const struct producer producers[] = {
    {"same", 0, 2, "gpu:0"}, {"same", 1, 2, NULL},     {"other", 0, 1, "gpu:7"},
    {"third", 0, 2, NULL},   {"third", 1, 2, "gpu:1"},
};
#define NPROD (sizeof(producers) / sizeof(producers[0]))

/* Entries per batch, each followed by a flush: round r sends sizes[r] from every producer. */
static const size_t sizes[] = {1000, 1, 4095, 2, 4097, 7};
#define NROUNDS (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Entry i of producer k: every field derived from a hash of (k, i). */
static void pack_entry(msgpack_packer *pk, size_t k, uint64_t i)
{
    uint64_t h = mix(k * 1000003 + i), h2 = mix(h);
    uint64_t dur = h % 7 == 0 ? 0 : h % 100000;
    uint64_t start = 1000000 + i * 1000 + (h2 % 3000) - (k == 1 ? 0 : 1500);
    bool ext = h % 5 == 0, dev = h % 3 == 0;

    if (h % 499 == 0)
        start = INT64_MAX - dur; /* the latest end there can be */
    else if (h % 503 == 0)
        start = 0;
    msgpack_pack_array(pk, ext ? 10 : 9);
    msgpack_pack_uint64(pk, i / 64);
    msgpack_pack_uint32(pk, 1 + (uint32_t)(h2 % 4));
    msgpack_pack_uint64(pk, start);
    msgpack_pack_uint64(pk, dur);
    if (h % 4 == 0)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_uint64(pk, h % 17 == 0 ? INT64_MAX : (h >> 8) % 100000);
    if (h % 6 == 0)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_uint64(pk, h % 19 == 0 ? INT64_MAX : (h >> 16) % (1u << 30));
    if (h2 % 3 == 0) {
        msgpack_pack_nil(pk);
        msgpack_pack_nil(pk);
    } else {
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, 1 + h2 % 8);
        msgpack_pack_uint64(pk, 1 + (h2 >> 8) % 3);
        msgpack_pack_array(pk, 1);
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, 1 + (h2 >> 16) % 5);
    }
    if (dev) {
        char name[16];
        int n = snprintf(name, sizeof(name), "gpu:%u", (unsigned)((h >> 24) % 3));
        msgpack_pack_str(pk, (size_t)n);
        msgpack_pack_str_body(pk, name, (size_t)n);
    } else {
        msgpack_pack_nil(pk);
    }
    if (ext) {
        msgpack_pack_map(pk, 2);
        msgpack_pack_str(pk, 6);
        msgpack_pack_str_body(pk, "stream", 6);
        msgpack_pack_uint64(pk, h2 % 4);
        msgpack_pack_str(pk, 3);
        msgpack_pack_str_body(pk, "tag", 3);
        msgpack_pack_int64(pk, h2 % 2 ? INT64_MIN : -(int64_t)(h2 % 100));
    }
}

static void send_entries(int fd, size_t k, uint64_t first, size_t n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, n);
    for (size_t i = 0; i < n; i++)
        pack_entry(&pk, k, first + i);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static void send_ops(int fd)
{
    struct proto_opdef defs[4];
    msgpack_sbuffer sb;
    msgpack_packer pk;

    for (uint32_t i = 0; i < 4; i++)
        defs[i] = (struct proto_opdef){
            .id = i + 1, .name = (char *)op_names[i], .category = (char *)op_cats[i]};
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ops(&pk, defs, 4);
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* Every producer, every round, in the same order: returns the entries sent per producer. */
static uint64_t feed(struct tdaemon *d, long long ids[NPROD])
{
    int fds[NPROD];
    uint64_t sent = 0;

    for (size_t k = 0; k < NPROD; k++) {
        fds[k] = raw_producer(d->sock, producers[k].session, producers[k].rank, producers[k].world,
                              producers[k].device, &ids[k]);
        send_ops(fds[k]);
    }
    for (size_t r = 0; r < NROUNDS; r++) {
        for (size_t k = 0; k < NPROD; k++) {
            send_entries(fds[k], k, sent, sizes[r]);
            cr_assert_eq(raw_flush(fds[k], r + 1), (long long)(sent + sizes[r]),
                         "producer %zu round %zu", k, r);
        }
        sent += sizes[r];
    }
    for (size_t k = 0; k < NPROD; k++)
        raw_bye(fds[k], 0);
    for (size_t k = 0; k < NPROD; k++)
        raw_wait_state(d->sock, ids[k], "ended", 30);
    return sent;
}

/* Both daemons, with two session files open at once (the fd limit sets it). */
static void start_both(void)
{
    harness_daemon_start(&dr, "--storage-format", "rows", NULL);
    harness_daemon_start(&db, "--storage-format", "blocks", NULL);
    harness_daemon_stop(&dr, SIGTERM);
    harness_daemon_stop(&db, SIGTERM);
    dr.nofile = db.nofile = 40;
    harness_daemon_restart(&dr, "--storage-format", "rows", NULL);
    harness_daemon_restart(&db, "--storage-format", "blocks", NULL);
}

/* ---- comparing ------------------------------------------------------------ */

static void export_to(struct tdaemon *d, const char *session, const char *fmt, const char *path)
{
    char *argv[] = {TRACECTL_BIN, "--socket",  d->sock, "export",     (char *)session,
                    "--format",   (char *)fmt, "-o",    (char *)path, NULL};

    cr_assert_eq(harness_run(NULL, argv), 0, "export %s --format %s", session, fmt);
}

static void assert_same_exports(const char *session)
{
    static const char *const fmts[] = {"csv", "collapsed", "chrome", "perfetto"};

    for (size_t i = 0; i < 4; i++) {
        char pr[PATH_MAX + 32], pb[PATH_MAX + 32];
        size_t lr, lb;
        char *r, *b;

        snprintf(pr, sizeof(pr), "%s/export.%s", dr.dir, fmts[i]);
        snprintf(pb, sizeof(pb), "%s/export.%s", db.dir, fmts[i]);
        export_to(&dr, session, fmts[i], pr);
        export_to(&db, session, fmts[i], pb);
        r = harness_slurp(pr, &lr);
        b = harness_slurp(pb, &lb);
        cr_assert_gt(lr, 100, "%s %s: %zu bytes", session, fmts[i], lr);
        cr_assert_eq(lr, lb, "%s %s: %zu bytes in rows, %zu in blocks", session, fmts[i], lr, lb);
        cr_assert_eq(memcmp(r, b, lr), 0, "%s %s differs", session, fmts[i]);
        free(r);
        free(b);
    }
}

static void assert_same_report(const char *session)
{
    char *ar[] = {TRACECTL_BIN, "--socket", dr.sock, "report", (char *)session, "--json", NULL};
    char *ab[] = {TRACECTL_BIN, "--socket", db.sock, "report", (char *)session, "--json", NULL};
    char *r, *b;

    cr_assert_eq(harness_run(&r, ar), 0);
    cr_assert_eq(harness_run(&b, ab), 0);
    cr_assert_gt(strlen(r), 100);
    cr_assert_str_eq(r, b, "report %s differs", session);
    free(r);
    free(b);
}

static sqlite3 *open_file(struct tdaemon *d, long long id, bool blocks)
{
    char path[PATH_MAX + 32];
    char *err = NULL;
    sqlite3 *h;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d->data, id);
    cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    /* the writer may still be closing the file (its checkpoint): wait as its readers do */
    sqlite3_busy_timeout(h, 5000);
    if (blocks) {
        /* What the sqlite3 shell's `.load tracectl_blocks` does. */
        cr_assert_eq(sqlite3_enable_load_extension(h, 1), SQLITE_OK);
        cr_assert_eq(sqlite3_load_extension(h, TRACECTL_BLOCKS_SO, NULL, &err), SQLITE_OK, "%s",
                     err ? err : "");
    }
    return h;
}

/* The rows of sql as text, one line each ('|' between columns, NULL as "NULL"). */
static char *query_text(sqlite3 *h, const char *sql, size_t *rows)
{
    sqlite3_stmt *st;
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    int rc;

    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(h));
    *rows = 0;
    out[0] = '\0';
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const char *v = sqlite3_column_type(st, i) == SQLITE_NULL
                                ? "NULL"
                                : (const char *)sqlite3_column_text(st, i);
            size_t n = strlen(v) + 2;
            if (len + n + 1 > cap) {
                cap = 2 * (len + n + 1);
                out = realloc(out, cap);
            }
            len += (size_t)sprintf(out + len, "%s%c", v,
                                   i + 1 < sqlite3_column_count(st) ? '|' : '\n');
        }
        ++*rows;
    }
    cr_assert_eq(rc, SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(h));
    sqlite3_finalize(st);
    return out;
}

static void assert_same_sql(long long id, uint64_t entries)
{
    static const char *const queries[] = {
        "SELECT * FROM trace",
        "SELECT rowid, * FROM entries ORDER BY rowid",
        "SELECT rowid, * FROM entries ORDER BY rowid DESC",
        "SELECT * FROM trace WHERE start_ns BETWEEN 2000000 AND 2500000",
        "SELECT * FROM trace WHERE start_ns > 9000000000000000000",
        "SELECT * FROM trace WHERE start_ns >= 1999999.5 AND start_ns < 3000000.5",
        "SELECT * FROM trace WHERE start_ns = 0 OR start_ns < 'text' ORDER BY id",
        "SELECT count(*) FROM entries WHERE start_ns > NULL",
        "SELECT * FROM trace WHERE rank = 1 AND start_ns < 5000000",
        "SELECT * FROM trace WHERE op = 'allreduce' ORDER BY start_ns, id",
        "SELECT rowid, * FROM entries WHERE process_id = 2 AND op_id = 3",
        "SELECT rowid, * FROM entries WHERE process_id = 2.0 AND op_id = 3.5",
        "SELECT rowid, * FROM entries WHERE rowid IN (1, 4095, 4096, 4097, 8192, 8193, 20000,"
        " 9223372036854775807)",
        "SELECT rowid, * FROM entries WHERE rowid > 4090 AND rowid <= 4100",
        "SELECT rowid, * FROM entries WHERE rowid < 3 OR rowid >= (SELECT max(rowid) FROM entries)"
        " ORDER BY rowid",
        "SELECT e.rowid, x.* FROM entries e JOIN entry_ext x ON x.entry_rowid = e.rowid",
        "SELECT t.entry, e.dur_ns FROM top_slow t CROSS JOIN entries e ON e.rowid = t.entry",
        /* lookups by rowid (one restart interval each), forwards, backwards, past the end */
        "WITH RECURSIVE s(r) AS (SELECT 0 UNION ALL SELECT r + 37 FROM s WHERE r < 25000)"
        " SELECT s.r, e.* FROM s CROSS JOIN entries e ON e.rowid = s.r",
        "WITH RECURSIVE s(r) AS (SELECT 25000 UNION ALL SELECT r - 61 FROM s WHERE r > 0)"
        " SELECT s.r, e.* FROM s CROSS JOIN entries e ON e.rowid = s.r",
        "WITH RECURSIVE s(r) AS (SELECT 1 UNION ALL SELECT r + 1 FROM s WHERE r < 300)"
        " SELECT s.r, e.start_ns FROM s CROSS JOIN entries e ON e.rowid = 4096 + s.r * 3 % 400",
        "SELECT count(*), sum(dur_ns), min(start_ns), max(start_ns), sum(elements IS NULL),"
        " sum(device_id IS NULL), sum(shape_id IS NULL) FROM entries",
    };
    sqlite3 *hr = open_file(&dr, id, false), *hb = open_file(&db, id, true);
    size_t nr, nb;
    char *r, *b;

    r = query_text(hr, "SELECT value FROM info WHERE key = 'format'", &nr);
    cr_assert_str_eq(r, "1\n");
    free(r);
    b = query_text(hb, "SELECT value FROM info WHERE key = 'format'", &nb);
    cr_assert_str_eq(b, "2\n");
    free(b);
    b = query_text(hb, "SELECT count(*) FROM entries", &nb);
    cr_assert_eq(strtoull(b, NULL, 10), entries);
    free(b);
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
        r = query_text(hr, queries[i], &nr);
        b = query_text(hb, queries[i], &nb);
        cr_assert_eq(nr, nb, "%s: %zu rows from rows, %zu from blocks", queries[i], nr, nb);
        cr_assert_str_eq(r, b, "%s", queries[i]);
        free(r);
        free(b);
    }
    sqlite3_close(hr);
    sqlite3_close(hb);
}

Test(blocks, same_as_rows_byte_for_byte)
{
    long long ir[NPROD], ib[NPROD];
    uint64_t sent;

    start_both();
    sent = feed(&dr, ir);
    cr_assert_eq(feed(&db, ib), sent);
    cr_assert_arr_eq(ir, ib, sizeof(ir));
    for (const char *s = "same"; s != NULL; s = strcmp(s, "same") == 0    ? "other"
                                                : strcmp(s, "other") == 0 ? "third"
                                                                          : NULL) {
        assert_same_exports(s);
        assert_same_report(s);
    }
    assert_same_sql(ir[0], 2 * sent);
    assert_same_sql(ir[2], sent);
    assert_same_sql(ir[3], 2 * sent);
}

/*
 * The top tables hold, column for column (NULLs included), the rows of the
 * entries that rank first, as the file's own entries say: top_slow by
 * dur_ns desc, start_ns, rowid; top_mem the same by mem_bytes, among
 * entries with memory. The writer fills them from the fields the kept
 * entries carry, over many commits (a flush per batch) that evict entries
 * kept earlier, some of them loaded again when a file was reopened.
 */
static void assert_top_tables(struct tdaemon *d, long long id, bool blocks, int procs)
{
    static const char *const cols = "process_id, step, op_id, device_id, start_ns, dur_ns,"
                                    " mem_bytes, shape_id, typeof(device_id), typeof(shape_id)";
    static const struct {
        const char *table, *where, *key;
    } tops[] = {{"top_slow", "", "dur_ns"}, {"top_mem", "WHERE mem_bytes != 0", "mem_bytes"}};
    sqlite3 *h = open_file(d, id, blocks);

    for (size_t k = 0; k < 2; k++) {
        char kept[512], want[512], *t, *w;
        size_t nt, nw;

        snprintf(kept, sizeof(kept), "SELECT entry, %s FROM %s ORDER BY entry", cols,
                 tops[k].table);
        snprintf(want, sizeof(want),
                 "SELECT r, %s FROM (SELECT rowid AS r, * FROM entries %s"
                 " ORDER BY %s DESC, start_ns, rowid LIMIT 1000) ORDER BY r",
                 cols, tops[k].where, tops[k].key);
        t = query_text(h, kept, &nt);
        w = query_text(h, want, &nw);
        cr_assert_eq(nt, 1000, "%s: %zu rows", tops[k].table, nt);
        cr_assert_eq(nw, 1000);
        cr_assert_str_eq(t, w, "%s of session %lld", tops[k].table, id);
        free(t);
        free(w);
        /* what the comparison covered: every column with values of each kind */
        snprintf(
            kept, sizeof(kept),
            "SELECT count(DISTINCT process_id), count(DISTINCT op_id) > 1,"
            " count(device_id) > 0, count(device_id) < 1000, count(shape_id) BETWEEN 1 AND 999,"
            " max(entry) > 5000, count(DISTINCT step) > 1 FROM %s",
            tops[k].table);
        t = query_text(h, kept, &nt);
        /* a session of two ranks: one has a device, the other none */
        snprintf(want, sizeof(want), "%d|1|1|%d|1|1|1\n", procs, procs == 2);
        cr_assert_str_eq(t, want, "%s of session %lld: %s", tops[k].table, id, t);
        free(t);
    }
    sqlite3_close(h);
}

Test(blocks, top_tables_are_the_first_entries_of_the_file)
{
    long long ir[NPROD], ib[NPROD];

    start_both();
    feed(&dr, ir);
    feed(&db, ib);
    for (size_t i = 0; i < 3; i++) {
        size_t k = (size_t[]){0, 2, 3}[i]; /* each session's first producer */
        assert_top_tables(&dr, ir[k], false, producers[k].world);
        assert_top_tables(&db, ib[k], true, producers[k].world);
    }
}

/*
 * kill -9 right after an ack: every acked entry is in the file, the partly
 * filled block included, and the restarted daemon reports them.
 */
Test(blocks, acked_entries_survive_kill)
{
    long long id;
    size_t n;
    sqlite3 *h;
    char *t;
    int fd;

    harness_daemon_start(&db, "--storage-format", "blocks", NULL);
    fd = raw_producer(db.sock, "killed", 0, 1, "gpu:0", &id);
    send_ops(fd);
    send_entries(fd, 0, 0, 5000);
    cr_assert_eq(raw_flush(fd, 1), 5000);
    send_entries(fd, 0, 5000, 3);
    cr_assert_eq(raw_flush(fd, 2), 5003);
    harness_daemon_stop(&db, SIGKILL);
    close(fd);
    h = open_file(&db, id, true);
    t = query_text(h, "SELECT count(*), count(DISTINCT rowid), min(rowid), max(rowid) FROM entries",
                   &n);
    cr_assert_str_eq(t, "5003|5003|1|5003\n");
    free(t);
    t = query_text(h, "SELECT n FROM blocks ORDER BY id", &n);
    cr_assert_str_eq(t, "1024\n1024\n1024\n1024\n907\n");
    free(t);
    sqlite3_close(h);
    harness_daemon_restart(&db, "--storage-format", "blocks", NULL);
    {
        char *argv[] = {TRACECTL_BIN, "--socket", db.sock, "report", "killed", "--json", NULL};
        cr_assert_eq(harness_run(&t, argv), 0);
        cr_assert_not_null(strstr(t, "\"entries\":5003"), "%s", t);
        free(t);
    }
}

/*
 * A session file of the row format (every file written before the blocks
 * format) reads the same in a daemon that writes blocks, and stays rows.
 */
Test(blocks, row_files_stay_readable)
{
    long long ir[NPROD];
    char pr[PATH_MAX + 32], pb[PATH_MAX + 32];
    size_t lr, lb, n;
    char *r, *b;
    sqlite3 *h;

    harness_daemon_start(&dr, "--storage-format", "rows", NULL);
    feed(&dr, ir);
    snprintf(pr, sizeof(pr), "%s/before.csv", dr.dir);
    snprintf(pb, sizeof(pb), "%s/after.csv", dr.dir);
    export_to(&dr, "same", "csv", pr);
    harness_daemon_stop(&dr, SIGTERM);
    harness_daemon_restart(&dr, NULL); /* the default: blocks */
    export_to(&dr, "same", "csv", pb);
    r = harness_slurp(pr, &lr);
    b = harness_slurp(pb, &lb);
    cr_assert_eq(lr, lb);
    cr_assert_eq(memcmp(r, b, lr), 0);
    free(r);
    free(b);
    h = open_file(&dr, ir[0], false);
    r = query_text(h, "SELECT value FROM info WHERE key = 'format'", &n);
    cr_assert_str_eq(r, "1\n");
    free(r);
    sqlite3_close(h);
}

/*
 * A CSV export as it was before the ext columns were appended (peer, tag, comm, seq,
 * comm_size): each line's last five fields are cut, in place. None of the entries
 * it is used on has one (their fields are empty). Returns the new length.
 */
static size_t csv_without_ext(char *buf, size_t len)
{
    static const char head[] = ",peer,tag,comm,seq,comm_size\r\n", row[] = ",,,,,\r\n";
    size_t in = 0, out = 0;

    while (in < len) {
        char *nl = memchr(buf + in, '\n', len - in);
        size_t end = nl != NULL ? (size_t)(nl - buf) + 1 : len, n = end - in;
        const char *cut = out == 0 ? head : row;
        size_t k = strlen(cut);

        cr_assert(n >= k && memcmp(buf + end - k, cut, k) == 0, "a line without the ext columns");
        memmove(buf + out, buf + in, n - k);
        out += n - k;
        memcpy(buf + out, "\r\n", 2);
        out += 2;
        in = end;
    }
    return out;
}

/* Runs `tracectl CMD session` on d's socket: its exit status, stdout and stderr in *out. */
static int cli_all(char **out, const char *cmd, const char *session)
{
    char line[PATH_MAX + 256];
    char *argv[] = {"sh", "-c", line, NULL};

    snprintf(line, sizeof(line), "'%s' --socket '%s' %s %s 2>&1", TRACECTL_BIN, db.sock, cmd,
             session);
    return harness_run(out, argv);
}

/* Both the report and the export of session are refused with "(schema N, this build reads M)". */
static void assert_refused(const char *session, const char *schema)
{
    static const char *const cmds[] = {"report", "export --format csv -o /dev/null"};
    char want[128];

    snprintf(want, sizeof(want), "made by an incompatible tracectl (%s, this build reads %d)",
             schema, INFO_SCHEMA_VERSION);
    for (size_t i = 0; i < 2; i++) {
        char *out = NULL;
        int st = cli_all(&out, cmds[i], session);
        cr_expect_neq(st, 0, "%s %s: status 0", cmds[i], session);
        cr_expect_not_null(strstr(out, want), "%s %s: %s", cmds[i], session, out);
        free(out);
    }
}

/*
 * One schema version (daemon/shared/info.h): tests/data/rows-format/data.tar.gz is a
 * data dir written before files recorded info.schema_version (tracectld at
 * commit 3414df7: session 1 `demo`, session 2 `streams`). Its sessions are
 * listed, but reading them is refused with what they are; a new session is
 * written beside them with the version, and refused in turn once its file
 * says another. `classify` refuses such a file too, and leaves it as it is.
 */
Test(blocks, files_of_another_schema_version_are_refused)
{
    char arch[PATH_MAX], path[PATH_MAX + 32], want[32], sql[96], *out = NULL;
    long long id;
    sqlite3 *h;
    size_t n;
    char *t;
    int fd;

    harness_daemon_start(&db, NULL);
    {
        int st = harness_daemon_stop(&db, SIGTERM);
        cr_assert_eq(st, 0, "status %d", st);
    }
    snprintf(arch, sizeof(arch), "%s/rows-format/data.tar.gz", TEST_DATA_DIR);
    {
        char *rm[] = {"rm", "-rf", db.data, NULL};
        char *mk[] = {"mkdir", "-m", "700", db.data, NULL};
        char *tar[] = {"tar", "-xzf", arch, "-C", db.data, NULL};
        cr_assert_eq(harness_run(NULL, rm), 0);
        cr_assert_eq(harness_run(NULL, mk), 0);
        cr_assert_eq(harness_run(NULL, tar), 0);
    }
    harness_daemon_restart(&db, NULL);
    cr_assert_eq(cli_all(&out, "sessions", ""), 0, "%s", out);
    cr_expect_not_null(strstr(out, "demo"), "%s", out);
    cr_expect_not_null(strstr(out, "streams"), "%s", out);
    free(out);
    assert_refused("demo", "schema 0");
    assert_refused("streams", "schema 0");

    fd = raw_producer(db.sock, "new", 0, 1, "gpu:0", &id);
    cr_assert_eq(id, 3);
    send_ops(fd);
    send_entries(fd, 0, 0, 10);
    cr_assert_eq(raw_flush(fd, 1), 10);
    raw_bye(fd, 0);
    raw_wait_state(db.sock, id, "ended", 30);
    cr_assert_eq(cli_all(&out, "report --json", "new"), 0, "%s", out);
    cr_expect_not_null(strstr(out, "\"entries\":10"), "%s", out);
    free(out);
    cr_assert_eq(harness_daemon_stop(&db, SIGTERM), 0);

    snprintf(path, sizeof(path), "%s/sessions/3.db", db.data);
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    t = query_text(h, "SELECT value FROM info WHERE key = 'schema_version'", &n);
    snprintf(want, sizeof(want), "%d\n", INFO_SCHEMA_VERSION);
    cr_assert_str_eq(t, want);
    free(t);
    snprintf(sql, sizeof(sql), "UPDATE info SET value = %d WHERE key = 'schema_version'",
             INFO_SCHEMA_VERSION + 1);
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    harness_daemon_restart(&db, NULL);
    snprintf(want, sizeof(want), "schema %d", INFO_SCHEMA_VERSION + 1);
    assert_refused("new", want);
    cr_expect_neq(cli_all(&out, "classify", "new"), 0, "%s", out);
    snprintf(sql, sizeof(sql), "made by an incompatible tracectl (schema %d, this build reads %d)",
             INFO_SCHEMA_VERSION + 1, INFO_SCHEMA_VERSION);
    cr_expect_not_null(strstr(out, sql), "%s", out);
    free(out);
    cr_assert_eq(harness_daemon_stop(&db, SIGTERM), 0);
    cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    t = query_text(h, "SELECT value FROM info WHERE key = 'schema_version'", &n);
    snprintf(want, sizeof(want), "%d\n", INFO_SCHEMA_VERSION + 1);
    cr_assert_str_eq(t, want, "left as it is");
    free(t);
    sqlite3_close(h);
}

/*
 * A new session's tables and schema version are committed when its file is
 * made, before the first transaction (which holds info.aggregates and the
 * entries): a report of the live session in between reads it, no entries
 * yet, where a version written with that transaction would be "schema 0".
 */
Test(blocks, a_new_sessions_file_is_read_before_its_first_commit)
{
    char path[PATH_MAX + 32], *out = NULL;
    long long id = -1, version = -1;
    int fd;

    harness_daemon_start(&db, "--commit-interval", "60000", NULL);
    fd = raw_producer(db.sock, "early", 0, 1, "gpu:0", &id);
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", db.data, id);
    for (double end = harness_now() + HARNESS_DEADLINE_S;
         version != INFO_SCHEMA_VERSION && harness_now() < end;) {
        version = harness_db_int(path, "SELECT value FROM info WHERE key = 'schema_version'");
        if (version != INFO_SCHEMA_VERSION)
            usleep(10000);
    }
    cr_assert_eq(version, INFO_SCHEMA_VERSION, "the file's schema version");
    cr_assert_eq(harness_db_int(path, "SELECT count(*) FROM info WHERE key = 'aggregates'"), 0,
                 "the first transaction is not committed yet");
    cr_expect_eq(cli_all(&out, "report --json", "early"), 0, "%s", out);
    cr_expect_not_null(strstr(out, "\"state\":\"live\""), "%s", out);
    cr_expect_not_null(strstr(out, "\"entries\":0"), "%s", out);
    free(out);
    raw_bye(fd, 0);
    cr_assert_eq(harness_daemon_stop(&db, SIGTERM), 0);
}

/*
 * A lookup by rowid reads one restart interval of a block, found through its
 * restarts column: where that column is damaged, the block is read whole
 * from its start instead, and the answers stay those of the intact file.
 */
Test(blocks, lookups_by_rowid_survive_damaged_restarts)
{
    static const char *const q =
        "WITH RECURSIVE s(r) AS (SELECT 1 UNION ALL SELECT r + 97 FROM s WHERE r < 5003)"
        " SELECT s.r, e.* FROM s CROSS JOIN entries e ON e.rowid = s.r";
    char path[PATH_MAX + 32];
    long long id;
    size_t n1, n2;
    char *before, *after;
    sqlite3 *h;
    int fd;

    harness_daemon_start(&db, "--storage-format", "blocks", NULL);
    fd = raw_producer(db.sock, "damaged", 0, 1, "gpu:0", &id);
    send_ops(fd);
    send_entries(fd, 0, 0, 5003);
    cr_assert_eq(raw_flush(fd, 1), 5003);
    raw_bye(fd, 0);
    raw_wait_state(db.sock, id, "ended", 30);
    cr_assert_eq(harness_daemon_stop(&db, SIGTERM), 0);
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", db.data, id);
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    before = query_text(h, q, &n1);
    cr_assert_eq(n1, 52);
    /* a restarts column of the wrong length, and one whose offsets are out of order */
    cr_assert_eq(sqlite3_exec(h,
                              "UPDATE blocks SET restarts = x'00' WHERE id = 1025;"
                              "UPDATE blocks SET restarts = zeroblob(length(restarts))"
                              " WHERE id = 3073",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    after = query_text(h, q, &n2);
    cr_assert_eq(n2, n1);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);
    sqlite3_close(h);
}

/* ---- shape ids across a closed and reopened file -------------------------- */

/* Shapes as the wire carries them (NULL: nil), and as CSV prints them. */
struct tshape {
    const uint64_t *out, (*in)[2];
    size_t nout, nin;
    const char *hex_out, *hex_in; /* the file's blobs, hex() ("" for NULL) */
    const char *csv_out, *csv_in; /* the export's fields, quoted when they hold a comma */
    uint64_t elements;            /* the product of out (0 without one) */
};

static const uint64_t out12[] = {1, 2}, out56[] = {5, 6};
static const uint64_t in34[][2] = {{3, 4}}, in78_910[][2] = {{7, 8}, {9, 10}};
static const struct tshape tshapes[] = {
    {out12, in34, 2, 1, "920102", "91920304", "\"[1,2]\"", "\"[[3,4]]\"", 2},
    {out56, NULL, 2, 0, "920506", "", "\"[5,6]\"", "", 30},
    {NULL, in78_910, 0, 2, "", "9292070892090A", "", "\"[[7,8],[9,10]]\"", 0},
    {out12, NULL, 2, 0, "920102", "", "\"[1,2]\"", "", 2}, /* S1's out, no in: another pair */
    {out56, in34, 2, 1, "920506", "91920304", "\"[5,6]\"", "\"[[3,4]]\"", 30},
};

/* Entries of op 1 with the shapes tshapes[k] for k in ks (-1: none), start at base + i. */
static void send_shaped(int fd, const int *ks, size_t n, uint64_t base)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, n);
    for (size_t i = 0; i < n; i++) {
        const struct tshape *t = ks[i] >= 0 ? &tshapes[ks[i]] : NULL;

        msgpack_pack_array(&pk, 9);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_uint32(&pk, 1);
        msgpack_pack_uint64(&pk, base + i);
        msgpack_pack_uint64(&pk, 10);
        msgpack_pack_nil(&pk); /* elements: the product of out_shape */
        msgpack_pack_nil(&pk);
        if (t != NULL && t->nout > 0) {
            msgpack_pack_array(&pk, t->nout);
            for (size_t j = 0; j < t->nout; j++)
                msgpack_pack_uint64(&pk, t->out[j]);
        } else {
            msgpack_pack_nil(&pk);
        }
        if (t != NULL && t->nin > 0) {
            msgpack_pack_array(&pk, t->nin);
            for (size_t j = 0; j < t->nin; j++) {
                msgpack_pack_array(&pk, 2);
                msgpack_pack_uint64(&pk, t->in[j][0]);
                msgpack_pack_uint64(&pk, t->in[j][1]);
            }
        } else {
            msgpack_pack_nil(&pk);
        }
        msgpack_pack_nil(&pk);
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/*
 * A session's file is closed mid-session (two files open at once, two other
 * sessions take them) and reopened: its new entries reuse the shapes it
 * already wrote and add new ones. Shape ids are the order of first use, in
 * the file and in the export, whichever the storage format: the reopened
 * file's pairs keep their ids and are not written twice.
 */
static void check_resumed_shapes(struct tdaemon *d, bool blocks)
{
    static const int first[] = {0, 1, 0, 2, -1, 1}, second[] = {1, 3, 0, 4, 3, -1, 2};
    char path[PATH_MAX + 32], want[2048], *csv, *t;
    long long id, other;
    size_t n, len = 0, len_csv;
    struct stat sb;
    int fd, ofd[2];
    sqlite3 *h;

    fd = raw_producer(d->sock, "resumed", 0, 1, NULL, &id);
    raw_send_ops(fd, 1, "matmul");
    send_shaped(fd, first, 6, 1000);
    cr_assert_eq(raw_flush(fd, 1), 6);
    for (int k = 0; k < 2; k++) { /* the two files open at most: the first one closes */
        ofd[k] = raw_producer(d->sock, k ? "bystander1" : "bystander0", 0, 1, NULL, &other);
        raw_send_ops(ofd[k], 1, "copy");
        send_shaped(ofd[k], second, 7, 0); /* their own ids, from 1 again */
        cr_assert_eq(raw_flush(ofd[k], 1), 7);
    }
    snprintf(path, sizeof(path), "%s/sessions/%lld.db-wal", d->data, id);
    cr_assert_neq(stat(path, &sb), 0, "session %lld's file is still open (its WAL is there)", id);
    send_shaped(fd, second, 7, 2000);
    cr_assert_eq(raw_flush(fd, 2), 13);
    raw_bye(fd, 0);
    for (int k = 0; k < 2; k++)
        raw_bye(ofd[k], 0);
    raw_wait_state(d->sock, id, "ended", 30);

    h = open_file(d, id, blocks);
    sqlite3_busy_timeout(h, 10000); /* the writer may still be closing the file */
    t = query_text(h,
                   "SELECT id, hex(out_shape), hex(in_shapes), elements"
                   " FROM shapes ORDER BY id",
                   &n);
    for (size_t k = 0; k < 5; k++) {
        const struct tshape *s = &tshapes[k];
        len += (size_t)snprintf(want + len, sizeof(want) - len, "%zu|%s|%s|%llu\n", k + 1,
                                s->hex_out, s->hex_in, (unsigned long long)s->elements);
    }
    cr_assert_str_eq(t, want, "shapes of session %lld:\n%s\nwant\n%s", id, t, want);
    free(t);
    t = query_text(h, "SELECT ifnull(shape_id, 0) FROM entries ORDER BY rowid", &n);
    cr_assert_str_eq(t, "1\n2\n1\n3\n0\n2\n2\n4\n1\n5\n4\n0\n3\n");
    free(t);
    sqlite3_close(h);

    /* The export: elements, out_shape and in_shapes of each entry, in order (before the
     * ext columns, empty here). */
    snprintf(path, sizeof(path), "%s/resumed.csv", d->dir);
    export_to(d, "resumed", "csv", path);
    csv = harness_slurp(path, &len_csv);
    len_csv = csv_without_ext(csv, len_csv);
    csv = realloc(csv, len_csv + 1);
    csv[len_csv] = '\0';
    t = strstr(csv, "\r\n");
    cr_assert_not_null(t);
    t += 2;
    for (size_t i = 0; i < 13; i++) {
        int k = i < 6 ? first[i] : second[i - 6];
        const struct tshape *s = k >= 0 ? &tshapes[k] : NULL;
        char tail[128];
        char *end = strstr(t, "\r\n");

        cr_assert_not_null(end, "entry %zu is missing from the export", i);
        *end = '\0';
        snprintf(tail, sizeof(tail), ",%llu,0,%s,%s", s ? (unsigned long long)s->elements : 0ull,
                 s ? s->csv_out : "", s ? s->csv_in : "");
        cr_assert(strlen(t) > strlen(tail) && strcmp(t + strlen(t) - strlen(tail), tail) == 0,
                  "entry %zu: \"%s\" does not end with \"%s\"", i, t, tail);
        t = end + 2;
    }
    cr_assert_str_eq(t, "", "more entries than sent");
    free(csv);
}

Test(blocks, shapes_keep_their_ids_when_a_file_is_reopened)
{
    start_both();
    check_resumed_shapes(&dr, false);
    check_resumed_shapes(&db, true);
}
