/*
 * test_reuse.c — the daemon reuses the arrays of spent batches for the next
 * ones (daemon/shared/batchpool.h): four producers send batches of every size from
 * 1 to 4096 entries, with shapes of 1 to 8 dimensions or none and device
 * names of every length or none, so that a batch often lands in arrays a
 * larger or a different one held before; flushes come only every few
 * rounds, so many batches are in flight at once. Every entry stored must be
 * what was sent, field by field, in the order sent, computed here from the
 * generator, not read back from the daemon's own structures.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NPROD   4
#define NROUNDS 28

static struct tdaemon d;

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(reuse, .fini = fini, .timeout = 240);

static const size_t sizes[] = {4096, 1, 3000, 17, 4096, 64, 2048, 5, 4095, 300, 1024, 2, 3500};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Entries of producer k in round r. */
static size_t batch_size(size_t k, size_t r)
{
    return sizes[(r * 5 + k * 3) % NSIZES];
}

/* Entry i of producer k, every field from a hash of (k, i). */
struct gen {
    uint64_t step, start, dur, mem, elements; /* elements: as the trace view shows it */
    uint32_t op;
    bool elements_nil;
    uint32_t nd, ni; /* nd 0: no shapes */
    uint64_t dims[8];
    char dev[48]; /* "": none (the hello's device) */
};

static void gen(size_t k, uint64_t i, struct gen *g)
{
    uint64_t h = mix(k << 32 | i), h2 = mix(h);

    memset(g, 0, sizeof(*g));
    g->step = i / 100;
    g->op = 1 + (uint32_t)(h % 3);
    g->start = 1000000 + i * 1000;
    g->dur = h % 100000;
    g->mem = (h >> 20) % (1u << 30);
    /* the shapes come and go in runs, so a blob's size changes from batch to batch */
    g->nd = ((i / 700 + k) % 3 == 0) ? 0 : 1 + (uint32_t)(h2 % 8);
    g->ni = 1 + (uint32_t)((h2 >> 8) % 3);
    g->elements = g->nd ? 1 : 0;
    for (uint32_t j = 0; j < g->nd; j++) {
        /* 64 shapes of each rank (the session's table has a limit), every width of integer */
        static const uint64_t first[4] = {3, 200, 1000, 1}, rest[4] = {3, 130, 1, 7};
        uint64_t x = mix((h2 % 64) * 8 + j) % 4;
        g->dims[j] = j == 0 ? first[x] : rest[x];
        g->elements *= g->dims[j];
    }
    g->elements_nil = h % 3 == 0;
    if (!g->elements_nil)
        g->elements = h % 5000;
    if (h % 4 == 0)
        snprintf(g->dev, sizeof(g->dev), "accelerator:%0*u", (int)(h2 % 30), (unsigned)(h % 5));
}

static void pack_shapes(msgpack_packer *pk, const struct gen *g)
{
    msgpack_pack_array(pk, g->nd);
    for (uint32_t j = 0; j < g->nd; j++)
        msgpack_pack_uint64(pk, g->dims[j]);
}

static void pack_in(msgpack_packer *pk, const struct gen *g)
{
    msgpack_pack_array(pk, g->ni);
    for (uint32_t j = 0; j < g->ni; j++) {
        msgpack_pack_array(pk, j + 1);
        for (uint32_t x = 0; x <= j; x++)
            msgpack_pack_uint64(pk, g->dims[0] + x);
    }
}

static void send_batch(int fd, size_t k, uint64_t first, size_t n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct gen g;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_batch_header(&pk, n);
    for (uint64_t i = first; i < first + n; i++) {
        gen(k, i, &g);
        msgpack_pack_array(&pk, 9);
        msgpack_pack_uint64(&pk, g.step);
        msgpack_pack_uint32(&pk, g.op);
        msgpack_pack_uint64(&pk, g.start);
        msgpack_pack_uint64(&pk, g.dur);
        if (g.elements_nil)
            msgpack_pack_nil(&pk);
        else
            msgpack_pack_uint64(&pk, g.elements);
        msgpack_pack_uint64(&pk, g.mem);
        if (g.nd) {
            pack_shapes(&pk, &g);
            pack_in(&pk, &g);
        } else {
            msgpack_pack_nil(&pk);
            msgpack_pack_nil(&pk);
        }
        if (g.dev[0]) {
            msgpack_pack_str(&pk, strlen(g.dev));
            msgpack_pack_str_body(&pk, g.dev, strlen(g.dev));
        } else {
            msgpack_pack_nil(&pk);
        }
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static void hex(char *out, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02X", (unsigned char)p[i]);
    out[2 * n] = '\0';
}

/* The trace view's line for entry i of producer k (see check_rank's query). */
static void expected_line(size_t k, uint64_t i, char *line, size_t cap)
{
    char out[64] = "", in[128] = "";
    const char *hello = k % 2 == 0 ? (k == 0 ? "gpu:0" : "gpu:2") : NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct gen g;

    gen(k, i, &g);
    if (g.nd) {
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_shapes(&pk, &g);
        hex(out, sb.data, sb.size);
        msgpack_sbuffer_clear(&sb);
        pack_in(&pk, &g);
        hex(in, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
    }
    snprintf(line, cap, "%llu|op%u|%s|%llu|%llu|%llu|%llu|%s|%s\n", (unsigned long long)g.step,
             g.op,
             g.dev[0] ? g.dev
             : hello  ? hello
                      : "NULL",
             (unsigned long long)g.start, (unsigned long long)g.dur, (unsigned long long)g.elements,
             (unsigned long long)g.mem, out, in);
}

static void check_rank(sqlite3 *h, size_t k, uint64_t n)
{
    const char *sql = "SELECT step, op, device, start_ns, dur_ns, elements, mem_bytes,"
                      " hex(out_shape), hex(in_shapes) FROM trace WHERE rank = ? ORDER BY id";
    sqlite3_stmt *st;
    char want[512], got[512];
    uint64_t i = 0;
    int rc;

    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_int64(st, 1, (sqlite3_int64)k);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t len = 0;
        cr_assert_lt(i, n, "rank %zu: more entries than sent", k);
        for (int c = 0; c < 9; c++) {
            const char *v = sqlite3_column_type(st, c) == SQLITE_NULL
                                ? "NULL"
                                : (const char *)sqlite3_column_text(st, c);
            len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%s", v, c < 8 ? "|" : "\n");
        }
        expected_line(k, i, want, sizeof(want));
        cr_assert_str_eq(got, want, "rank %zu entry %llu", k, (unsigned long long)i);
        i++;
    }
    cr_assert_eq(rc, SQLITE_DONE, "%s", sqlite3_errmsg(h));
    cr_assert_eq(i, n, "rank %zu: %llu entries stored, %llu sent", k, (unsigned long long)i,
                 (unsigned long long)n);
    sqlite3_finalize(st);
}

Test(reuse, batches_of_every_size_stored_exactly)
{
    static const char *const devs[NPROD] = {"gpu:0", NULL, "gpu:2", NULL};
    char path[PATH_MAX + 32];
    long long ids[NPROD];
    uint64_t sent[NPROD] = {0};
    int fds[NPROD];
    sqlite3 *h;

    harness_daemon_start(&d, NULL);
    for (size_t k = 0; k < NPROD; k++) {
        fds[k] = raw_producer(d.sock, "reuse", (int)k, NPROD, devs[k], &ids[k]);
        for (uint32_t op = 1; op <= 3; op++) {
            char name[8];
            snprintf(name, sizeof(name), "op%u", op);
            raw_send_ops(fds[k], op, name);
        }
    }
    for (size_t r = 0; r < NROUNDS; r++) {
        for (size_t k = 0; k < NPROD; k++) {
            send_batch(fds[k], k, sent[k], batch_size(k, r));
            sent[k] += batch_size(k, r);
        }
        if (r % 7 == 6 || r == NROUNDS - 1)
            for (size_t k = 0; k < NPROD; k++) {
                long long got = raw_flush(fds[k], r + 1);
                cr_assert_eq(got, (long long)sent[k], "producer %zu: %lld of %llu", k, got,
                             (unsigned long long)sent[k]);
            }
    }
    for (size_t k = 0; k < NPROD; k++)
        raw_bye(fds[k], 0);
    raw_wait_state(d.sock, ids[0], "ended", 30);
    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, ids[0]);
    cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(h, 5000);
    if (getenv("TRACECTL_TEST_STORAGE") == NULL ||
        strcmp(getenv("TRACECTL_TEST_STORAGE"), "rows") != 0) {
        char *err = NULL;
        cr_assert_eq(sqlite3_enable_load_extension(h, 1), SQLITE_OK);
        cr_assert_eq(sqlite3_load_extension(h, TRACECTL_BLOCKS_SO, NULL, &err), SQLITE_OK, "%s",
                     err ? err : "");
    }
    for (size_t k = 0; k < NPROD; k++)
        check_rank(h, k, sent[k]);
    sqlite3_close(h);
}
