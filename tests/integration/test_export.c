/*
 * test_export.c — `tracectl export` end to end: a real tracectld fed over
 * the raw protocol, then the real tracectl binary for each format.
 *
 * The entries (two ranks, two devices, entries without a device, op names
 * with quotes, a backslash, a control character, a comma and non-ASCII
 * UTF-8, plus a bulk of entries so the stream spans several chunks) are
 * described by the tables below; every expected value (CSV fields,
 * collapsed lines and weights, event counts, names and times) is computed
 * here from those tables, not by the code under test. CSV is parsed with an
 * RFC 4180 reader written here, Chrome JSON with yajl, the Perfetto trace is
 * decoded by protoc with Perfetto's own schema.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"

#define SESSION "export-test"
#define NBULK   9000 /* more than two daemon chunks of 4096 rows */

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(export, .fini = stop_and_clean, .timeout = 120);

/* ---- what the test sends ------------------------------------------------ */

struct top {
    uint32_t id;
    const char *name, *category; /* category NULL: classified by name */
    const char *want_category;   /* what the daemon stores */
};

static const struct top ops[] = {
    {1, "matmul", NULL, "compute"},
    {2, "we\"ird\\op\x01", NULL, "compute"},
    {3, "\xc3\xbcn\xc3\xaf\xe2\x86\x92", "comm", "comm"}, /* "ünï→" */
    {4, "copy,\"x\"", "memory", "memory"},
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

/* Rank 0 says hello with device gpu:0; rank 1 with none. */
static const char *const hello_device[2] = {"gpu:0", NULL};

struct tentry {
    int rank;
    uint32_t op;
    uint64_t step, start, dur, mem;
    const char *device; /* NULL: the hello device */
    bool shapes;        /* out [2,3], in [[2,3],[3,4]] */
};

static const struct tentry small[] = {
    {0, 1, 0, 1000, 1500, 64, NULL, true},      {0, 2, 0, 5000, 499, 0, NULL, false},
    {0, 3, 1, 7000, 2500, 20, "gpu:1", false},  {0, 4, 1, 9000, 500, 8, NULL, false},
    {0, 1, 2, 12000, 1499, 64, "gpu:1", true},  {1, 1, 0, 100, 0, 2, NULL, false},
    {1, 1, 1, 200, 1000000, 2, NULL, false},    {1, 3, 1, 2000000, 3500, 4, "gpu:0", false},
    {1, 2, 2, 2100000, 2501, 0, "gpu:1", true},
};
#define NSMALL (sizeof(small) / sizeof(small[0]))
#define NTOTAL (NSMALL + NBULK)

/* Entry i in storage order: rank 0's small ones, rank 1's small ones, then the bulk (rank 1). */
static struct tentry entry(size_t i)
{
    struct tentry e;

    if (i < NSMALL)
        return small[i];
    i -= NSMALL;
    e = (struct tentry){
        1,    4, 3 + i / 100, 10000000 + i * 10000, (i * 37) % 5000, i % 7, i % 3 ? NULL : "gpu:0",
        false};
    return e;
}

/* The device an entry ends up on, or NULL for none. */
static const char *entry_device(const struct tentry *e)
{
    return e->device ? e->device : hello_device[e->rank];
}

static const struct top *op_of(uint32_t id)
{
    for (size_t i = 0; i < NOPS; i++)
        if (ops[i].id == id)
            return &ops[i];
    cr_assert_fail("no op %u", id);
    return NULL;
}

static void send_msg(int fd, msgpack_sbuffer *sb)
{
    raw_send(fd, sb);
}

static void send_ops(int fd, msgpack_sbuffer *sb, msgpack_packer *pk)
{
    struct proto_opdef defs[NOPS];

    for (size_t i = 0; i < NOPS; i++)
        defs[i] = (struct proto_opdef){ops[i].id, (char *)ops[i].name, (char *)ops[i].category};
    proto_pack_ops(pk, defs, NOPS);
    send_msg(fd, sb);
}

static void pack_entry(msgpack_packer *pk, const struct tentry *e)
{
    msgpack_pack_array(pk, 9);
    msgpack_pack_uint64(pk, e->step);
    msgpack_pack_uint32(pk, e->op);
    msgpack_pack_uint64(pk, e->start);
    msgpack_pack_uint64(pk, e->dur);
    msgpack_pack_nil(pk); /* elements: the product of out_shape */
    msgpack_pack_uint64(pk, e->mem);
    if (e->shapes) {
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, 2);
        msgpack_pack_uint64(pk, 3);
        msgpack_pack_array(pk, 2);
        for (int k = 0; k < 2; k++) {
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint64(pk, 2 + (uint64_t)k);
            msgpack_pack_uint64(pk, 3 + (uint64_t)k);
        }
    } else {
        msgpack_pack_nil(pk);
        msgpack_pack_nil(pk);
    }
    if (e->device)
        proto_pack_str(pk, e->device);
    else
        msgpack_pack_nil(pk);
}

/* Sends entries [from, to) in batches of 1000, then flush → ack. */
static void send_entries(int fd, size_t from, size_t to)
{
    struct proto_reader r;
    struct proto_msg m;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    send_ops(fd, &sb, &pk);
    for (size_t i = from; i < to; i += 1000) {
        size_t n = to - i < 1000 ? to - i : 1000;

        proto_pack_batch_header(&pk, n);
        for (size_t k = 0; k < n; k++) {
            struct tentry e = entry(i + k);
            pack_entry(&pk, &e);
        }
        send_msg(fd, &sb);
    }
    proto_pack_flush(&pk, 1);
    send_msg(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    proto_reader_init(&r, 0);
    cr_assert_eq(raw_recv(fd, &r, &m), 0, "no ack");
    cr_assert_eq(m.type, PROTO_ACK, "flush got %s", proto_type_name(m.type));
    cr_assert_eq(m.u.ack.stored, to - from);
    proto_msg_free(&m);
    proto_reader_deinit(&r);
}

/* Starts the daemon and stores every entry; returns the session id. */
static long long load(void)
{
    long long id0, id1;
    size_t first1 = 0;
    int fd0, fd1;

    while (first1 < NSMALL && small[first1].rank == 0)
        first1++;
    harness_daemon_start(&d, NULL);
    fd0 = raw_producer(d.sock, SESSION, 0, 2, hello_device[0], &id0);
    send_entries(fd0, 0, first1);
    fd1 = raw_producer(d.sock, SESSION, 1, 2, hello_device[1], &id1);
    cr_assert_eq(id0, id1, "both ranks must join one session");
    send_entries(fd1, first1, NTOTAL);
    close(fd0);
    close(fd1);
    return id0;
}

/* Runs `tracectl export ID --format FMT [extra]`; returns its stdout (caller frees). */
static char *export(long long id, const char *fmt, const char *extra1, const char *extra2)
{
    char ids[32], *out = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket",  d.sock,         "export",       ids,
                    "--format",   (char *)fmt, (char *)extra1, (char *)extra2, NULL};
    int rc;

    snprintf(ids, sizeof(ids), "%lld", id);
    rc = harness_run(&out, argv);
    cr_assert_eq(rc, 0, "tracectl export --format %s exited %d", fmt, rc);
    return out;
}

/* ---- csv ------------------------------------------------------------------ */

#define NCOLS 18 /* the 13 of v1, then the ext map's peer, tag, comm, seq, comm_size */

/*
 * Reads one RFC 4180 record at *p into fields (malloc'd). Returns the
 * number of fields, 0 at the end of the input.
 */
static int csv_record(const char **p, char *fields[NCOLS + 1])
{
    const char *s = *p;
    int n = 0;

    if (*s == '\0')
        return 0;
    for (;;) {
        /* grown by doubling: sized by the rest of the input, the parse was quadratic */
        size_t cap = 64, len = 0;
        char *f = malloc(cap);

        if (*s == '"') {
            for (s++; !(*s == '"' && s[1] != '"'); s++) {
                cr_assert_neq(*s, '\0', "unterminated quoted field");
                if (*s == '"')
                    s++;
                if (len + 1 == cap)
                    cr_assert_not_null(f = realloc(f, cap *= 2));
                f[len++] = *s;
            }
            s++;
        } else {
            while (*s != ',' && *s != '\r' && *s != '\n' && *s != '\0') {
                cr_assert_neq(*s, '"', "a quote inside an unquoted field");
                if (len + 1 == cap)
                    cr_assert_not_null(f = realloc(f, cap *= 2));
                f[len++] = *s++;
            }
        }
        f[len] = '\0';
        cr_assert_lt(n, NCOLS + 1, "too many fields");
        fields[n++] = f;
        if (*s == ',') {
            s++;
            continue;
        }
        cr_assert(s[0] == '\r' && s[1] == '\n', "a record must end with CRLF");
        *p = s + 2;
        return n;
    }
}

static void csv_free(char **fields, int n)
{
    for (int i = 0; i < n; i++)
        free(fields[i]);
}

static void csv_check_row(char **f, size_t i)
{
    struct tentry e = entry(i);
    const char *dev = entry_device(&e);
    char want[NCOLS][64];

    snprintf(want[0], 64, "%d", e.rank);
    snprintf(want[1], 64, "%d", (int)getpid());
    snprintf(want[2], 64, "%s", "");
    snprintf(want[3], 64, "%llu", (unsigned long long)e.step);
    snprintf(want[7], 64, "%llu", (unsigned long long)e.start);
    snprintf(want[8], 64, "%llu", (unsigned long long)e.dur);
    snprintf(want[9], 64, "%s", e.shapes ? "6" : "0");
    snprintf(want[10], 64, "%llu", (unsigned long long)e.mem);
    snprintf(want[11], 64, "%s", e.shapes ? "[2,3]" : "");
    snprintf(want[12], 64, "%s", e.shapes ? "[[2,3],[3,4]]" : "");
    for (int c = 13; c < NCOLS; c++)
        want[c][0] = '\0'; /* no MPI keys in these entries' ext maps */
    for (int c = 0; c < NCOLS; c++) {
        if (c >= 4 && c <= 6)
            continue;
        cr_assert_str_eq(f[c], want[c], "row %zu column %d", i, c);
    }
    cr_assert_str_eq(f[4], op_of(e.op)->name, "row %zu op", i);
    cr_assert_str_eq(f[5], op_of(e.op)->want_category, "row %zu category", i);
    cr_assert_str_eq(f[6], dev ? dev : "", "row %zu device", i);
}

Test(export, csv_rows_and_quoting)
{
    long long id = load();
    char *out = export(id, "csv", NULL, NULL), *f[NCOLS + 1];
    const char *p = out;
    size_t rows = 0;
    int n;

    n = csv_record(&p, f);
    cr_assert_eq(n, NCOLS);
    cr_assert_str_eq(f[0], "rank");
    cr_assert_str_eq(f[4], "op");
    cr_assert_str_eq(f[12], "in_shapes");
    cr_assert_str_eq(f[13], "peer");
    cr_assert_str_eq(f[17], "comm_size");
    csv_free(f, n);
    /* the comma and quotes of op 4 need quoting: the raw line shows it */
    cr_assert_not_null(strstr(out, ",\"copy,\"\"x\"\"\","), "op 4 not quoted as RFC 4180 says");
    while ((n = csv_record(&p, f)) > 0) {
        cr_assert_eq(n, NCOLS, "row %zu has %d fields", rows, n);
        cr_assert_lt(rows, NTOTAL, "more rows than entries");
        csv_check_row(f, rows);
        csv_free(f, n);
        rows++;
    }
    cr_assert_eq(rows, NTOTAL);
    free(out);
}

/* ---- collapsed ------------------------------------------------------------- */

struct stack {
    char text[128];
    unsigned long long w;
};

static int stack_cmp(const void *a, const void *b)
{
    return strcmp(((const struct stack *)a)->text, ((const struct stack *)b)->text);
}

/* The collapsed output PROTOCOL.md asks for, computed from the tables. */
static char *collapsed_want(char weight)
{
    static struct stack st[64];
    size_t n = 0, len = 0;
    char *out = malloc(64 * 160);

    for (size_t i = 0; i < NTOTAL; i++) {
        struct tentry e = entry(i);
        const char *dev = entry_device(&e);
        char text[128];
        unsigned long long w;
        size_t k;

        snprintf(text, sizeof(text), "%s;%s;%s", SESSION, dev ? dev : "unknown", op_of(e.op)->name);
        if (weight == 't') /* llround: halves away from zero */
            w = (unsigned long long)fmax(1.0, (double)llround((double)e.dur / 1000.0));
        else
            w = weight == 'm' ? e.mem : 1;
        for (k = 0; k < n && strcmp(st[k].text, text) != 0; k++)
            ;
        if (k == n) {
            snprintf(st[n].text, sizeof(st[n].text), "%s", text);
            st[n++].w = 0;
        }
        st[k].w += w;
    }
    qsort(st, n, sizeof(st[0]), stack_cmp);
    for (size_t k = 0; k < n; k++)
        len += (size_t)sprintf(out + len, "%s %llu\n", st[k].text, st[k].w);
    return out;
}

Test(export, collapsed_matches_protocol)
{
    static const struct {
        const char *flag;
        char weight;
    } cases[] = {{NULL, 't'}, {"time", 't'}, {"memory", 'm'}, {"calls", 'c'}};
    long long id = load();

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *want = collapsed_want(cases[i].weight);
        char *got = export(id, "collapsed", cases[i].flag ? "--weight" : NULL, cases[i].flag);

        cr_assert_str_eq(got, want, "--weight %s:\n%s\nwanted:\n%s",
                         cases[i].flag ? cases[i].flag : "(default)", got, want);
        free(got);
        free(want);
    }
}

/* ---- chrome ---------------------------------------------------------------- */

static yajl_val jget(yajl_val obj, const char *key)
{
    const char *path[] = {key, NULL};

    return yajl_tree_get(obj, path, yajl_t_any);
}

static const char *jstr(yajl_val obj, const char *key)
{
    yajl_val v = jget(obj, key);

    cr_assert(YAJL_IS_STRING(v), "\"%s\" is not a string", key);
    return YAJL_GET_STRING(v);
}

static long long jint(yajl_val obj, const char *key)
{
    yajl_val v = jget(obj, key);

    cr_assert(YAJL_IS_INTEGER(v), "\"%s\" is not an integer", key);
    return YAJL_GET_INTEGER(v);
}

/* A µs value: within 0.5 ns of want_ns, written with exactly three decimals. */
static void check_us(yajl_val obj, const char *key, uint64_t want_ns, size_t i)
{
    yajl_val v = jget(obj, key);
    const char *dot;

    cr_assert(YAJL_IS_DOUBLE(v), "event %zu: %s is not a decimal", i, key);
    cr_assert_lt(fabs(YAJL_GET_DOUBLE(v) * 1000.0 - (double)want_ns), 0.5, "event %zu: %s %s", i,
                 key, v->u.number.r);
    dot = strchr(v->u.number.r, '.');
    cr_assert(dot != NULL && strlen(dot) == 4, "event %zu: %s = %s", i, key, v->u.number.r);
}

/* thread_name events: the name of (pid, tid). */
struct tname {
    long long pid, tid;
    const char *name;
};

static const char *thread_name(const struct tname *t, size_t n, long long pid, long long tid)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].pid == pid && t[i].tid == tid)
            return t[i].name;
    return NULL;
}

static void chrome_check_x(yajl_val ev, size_t i, const struct tname *t, size_t nt)
{
    struct tentry e = entry(i);
    const char *dev = entry_device(&e), *tn;
    yajl_val args = jget(ev, "args");

    cr_assert_str_eq(jstr(ev, "name"), op_of(e.op)->name, "event %zu name", i);
    cr_assert_str_eq(jstr(ev, "cat"), op_of(e.op)->want_category, "event %zu cat", i);
    cr_assert_eq(jint(ev, "pid"), e.rank, "event %zu pid", i);
    tn = thread_name(t, nt, jint(ev, "pid"), jint(ev, "tid"));
    cr_assert_not_null(tn, "event %zu: its thread has no thread_name before it", i);
    cr_assert_str_eq(tn, dev ? dev : "no device", "event %zu thread", i);
    check_us(ev, "ts", e.start, i);
    /* an entry of duration 0 is an instant of its thread: a viewer never closes an X of 0 */
    cr_assert_str_eq(jstr(ev, "ph"), e.dur > 0 ? "X" : "i", "event %zu phase", i);
    if (e.dur > 0)
        check_us(ev, "dur", e.dur, i);
    else
        cr_assert_str_eq(jstr(ev, "s"), "t", "event %zu: an instant of its thread", i);
    cr_assert(YAJL_IS_OBJECT(args));
    cr_assert_eq(jint(args, "step"), (long long)e.step);
    cr_assert_eq(jint(args, "mem_bytes"), (long long)e.mem);
    cr_assert_eq(jint(args, "elements"), e.shapes ? 6 : 0);
    cr_assert_eq(YAJL_IS_ARRAY(jget(args, "in_shapes")), e.shapes);
}

/* qsort order of entry indices: by start, longer first, then storage order (PROTOCOL.md). */
static int by_start_cmp(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    struct tentry x = entry(i), y = entry(j);

    if (x.start != y.start)
        return x.start < y.start ? -1 : 1;
    if (x.dur != y.dur)
        return x.dur > y.dur ? -1 : 1;
    return i < j ? -1 : i > j;
}

Test(export, chrome_is_valid_json)
{
    long long id = load();
    char *out = export(id, "chrome", NULL, NULL), err[256];
    yajl_val doc = yajl_tree_parse(out, err, sizeof(err)), evs;
    static struct tname names[16];
    static size_t order[NTOTAL];
    size_t nx = 0, nt = 0, nproc = 0;

    /* the trace-viewer formats write the entries by start time */
    for (size_t i = 0; i < NTOTAL; i++)
        order[i] = i;
    qsort(order, NTOTAL, sizeof(order[0]), by_start_cmp);
    cr_assert_not_null(doc, "not JSON: %s", err);
    cr_assert_str_eq(jstr(doc, "displayTimeUnit"), "ns");
    evs = jget(doc, "traceEvents");
    cr_assert(YAJL_IS_ARRAY(evs));
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val ev = evs->u.array.values[i];
        const char *ph = jstr(ev, "ph"), *name = jstr(ev, "name");

        if (strcmp(ph, "X") == 0 || strcmp(ph, "i") == 0) {
            cr_assert_lt(nx, NTOTAL, "more X and i events than entries");
            chrome_check_x(ev, order[nx++], names, nt);
        } else if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) {
            cr_assert_lt(nt, 16);
            names[nt++] =
                (struct tname){jint(ev, "pid"), jint(ev, "tid"), jstr(jget(ev, "args"), "name")};
        } else if (strcmp(ph, "M") == 0 && strcmp(name, "process_name") == 0) {
            char want[32];

            snprintf(want, sizeof(want), "rank %lld (", jint(ev, "pid"));
            cr_assert_eq(strncmp(jstr(jget(ev, "args"), "name"), want, strlen(want)), 0);
            nproc++;
        }
    }
    cr_assert_eq(nx, NTOTAL);
    cr_assert_eq(nproc, 2, "one process_name per rank");
    /* (rank 0: gpu:0, gpu:1) (rank 1: none, gpu:0, gpu:1) */
    cr_assert_eq(nt, 5, "one thread_name per (rank, device)");
    yajl_tree_free(doc);
    free(out);
}

/* ---- perfetto -------------------------------------------------------------- */

/* Undoes protoc's text-format string escapes (\" \\ \n \NNN ...) in place. */
static char *unescape(char *s)
{
    char *w = s, *r = s;

    while (*r) {
        if (*r != '\\') {
            *w++ = *r++;
            continue;
        }
        r++;
        if (*r >= '0' && *r <= '7') {
            int v = 0;
            for (int k = 0; k < 3 && *r >= '0' && *r <= '7'; k++)
                v = v * 8 + (*r++ - '0');
            *w++ = (char)v;
        } else {
            char c = *r++;
            *w++ = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        }
    }
    *w = '\0';
    return s;
}

/* A quoted value after "key: " on a line, unescaped (static buffer). */
static char *quoted(const char *line)
{
    static char buf[512];
    const char *q = strchr(line, '"');
    size_t n;

    cr_assert_not_null(q, "no string in: %s", line);
    n = strlen(q + 1);
    cr_assert(n > 0 && q[n] == '"');
    snprintf(buf, sizeof(buf), "%.*s", (int)(n - 1), q + 1);
    return unescape(buf);
}

#define MAXT 64

/* One TrackEvent of the decoded trace, in file order. */
enum pf_type { PF_END, PF_BEGIN, PF_INSTANT };
struct pf_ev {
    enum pf_type type;
    uint64_t ts, track, iid;
};

/* What the decoded text says: events in file order and the names they refer to. */
struct pf {
    struct pf_ev *ev;
    size_t nev, cap;
    char *iid_name[16];
    struct {
        uint64_t uuid, parent;
        char name[64];
    } track[MAXT];
    size_t ntracks;
};

/* One line of the decoded text, inside the blocks stack[0..depth). */
static void pf_line(struct pf *pf, char *l, char stack[][32], int depth, uint64_t *ts,
                    uint64_t *iid)
{
    const char *blk = depth > 0 ? stack[depth - 1] : "";
    struct pf_ev *e = pf->nev > 0 ? &pf->ev[pf->nev - 1] : NULL;
    unsigned long long v;
    enum pf_type type = PF_END;

    if (depth == 1 && sscanf(l, "timestamp: %llu", &v) == 1) {
        *ts = v;
    } else if (strcmp(blk, "track_event") == 0 &&
               ((!strcmp(l, "type: TYPE_SLICE_BEGIN") && (type = PF_BEGIN)) ||
                (!strcmp(l, "type: TYPE_INSTANT") && (type = PF_INSTANT)) ||
                !strcmp(l, "type: TYPE_SLICE_END"))) {
        if (pf->nev == pf->cap) {
            pf->cap = pf->cap ? 2 * pf->cap : 1024;
            pf->ev = realloc(pf->ev, pf->cap * sizeof(*pf->ev));
            cr_assert_not_null(pf->ev);
        }
        pf->ev[pf->nev++] = (struct pf_ev){type, *ts, 0, 0};
    } else if (strcmp(blk, "track_event") == 0 && sscanf(l, "name_iid: %llu", &v) == 1) {
        e->iid = v;
    } else if (strcmp(blk, "track_event") == 0 && sscanf(l, "track_uuid: %llu", &v) == 1) {
        e->track = v;
    } else if (strcmp(blk, "event_names") == 0 && sscanf(l, "iid: %llu", &v) == 1) {
        *iid = v;
    } else if (strcmp(blk, "event_names") == 0 && strncmp(l, "name: ", 6) == 0) {
        cr_assert_lt(*iid, 16);
        pf->iid_name[*iid] = strdup(quoted(l));
    } else if (strcmp(blk, "track_descriptor") == 0 && sscanf(l, "uuid: %llu", &v) == 1) {
        cr_assert_lt(pf->ntracks, MAXT);
        pf->track[pf->ntracks++].uuid = v;
    } else if (strcmp(blk, "track_descriptor") == 0 && sscanf(l, "parent_uuid: %llu", &v) == 1) {
        pf->track[pf->ntracks - 1].parent = v;
    } else if ((strcmp(blk, "track_descriptor") == 0 && strncmp(l, "name: ", 6) == 0) ||
               (strcmp(blk, "process") == 0 && strncmp(l, "process_name: ", 14) == 0)) {
        snprintf(pf->track[pf->ntracks - 1].name, 64, "%s", quoted(l));
    }
}

static void pf_parse(struct pf *pf, char *text)
{
    char stack[8][32];
    int depth = 0;
    uint64_t ts = 0, iid = 0;

    for (char *l = strtok(text, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        size_t n;

        while (*l == ' ')
            l++;
        n = strlen(l);
        if (n >= 2 && strcmp(l + n - 2, " {") == 0) {
            cr_assert_lt(depth, 8);
            snprintf(stack[depth++], 32, "%.*s", (int)(n - 2), l);
        } else if (strcmp(l, "}") == 0) {
            cr_assert_gt(depth, 0);
            depth--;
        } else {
            pf_line(pf, l, stack, depth, &ts, &iid);
        }
    }
}

static void pf_free(struct pf *pf)
{
    for (size_t i = 0; i < 16; i++)
        free(pf->iid_name[i]);
    free(pf->ev);
    free(pf);
}

static const char *pf_track_name(const struct pf *pf, uint64_t uuid, uint64_t *parent)
{
    for (size_t i = 0; i < pf->ntracks; i++) {
        if (pf->track[i].uuid == uuid) {
            if (parent != NULL)
                *parent = pf->track[i].parent;
            return pf->track[i].name;
        }
    }
    cr_assert_fail("no track descriptor for uuid %llu", (unsigned long long)uuid);
    return NULL;
}

/* A slice as a viewer shows it, or as the test sent it. */
struct vslice {
    const char *name, *track, *process; /* process: the parent track's name */
    uint64_t start, dur;
};

static int vslice_cmp(const void *a, const void *b)
{
    const struct vslice *x = a, *y = b;
    int c;

    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->dur != y->dur)
        return x->dur < y->dur ? -1 : 1;
    if ((c = strcmp(x->name, y->name)) != 0)
        return c;
    return strcmp(x->track, y->track);
}

/*
 * What a viewer makes of the events: per track, in file order, a BEGIN opens
 * a slice and an END closes the innermost open one (Perfetto's TrackEvent
 * model); an INSTANT is a slice of duration 0 by itself. Asserts that time never goes back on a
 * track and that every slice is closed. Returns the slices (caller frees), sorted, in *n.
 */
static struct vslice *pf_view(const struct pf *pf, size_t *n)
{
    struct vslice *out = calloc(pf->nev + 1, sizeof(*out));
    size_t *open = calloc(pf->nev + 1, sizeof(*open)), count = 0;

    for (size_t t = 0; t < pf->ntracks; t++) {
        uint64_t uuid = pf->track[t].uuid, last = 0, parent = 0;
        size_t depth = 0;

        for (size_t i = 0; i < pf->nev; i++) {
            const struct pf_ev *e = &pf->ev[i];

            if (e->track != uuid)
                continue;
            cr_assert_geq(e->ts, last, "track \"%s\": time goes back from %llu to %llu",
                          pf->track[t].name, (unsigned long long)last, (unsigned long long)e->ts);
            last = e->ts;
            if (e->type != PF_END) {
                cr_assert_lt(e->iid, 16);
                cr_assert_not_null(pf->iid_name[e->iid], "iid %llu not interned",
                                   (unsigned long long)e->iid);
            }
            if (e->type == PF_INSTANT) {
                out[count++] = (struct vslice){pf->iid_name[e->iid],
                                               pf_track_name(pf, uuid, &parent), NULL, e->ts, 0};
                out[count - 1].process = pf_track_name(pf, parent, NULL);
                continue;
            }
            if (e->type == PF_BEGIN) {
                open[depth++] = i;
                continue;
            }
            cr_assert_gt(depth, 0, "track \"%s\": an END with no open slice", pf->track[t].name);
            const struct pf_ev *b = &pf->ev[open[--depth]];
            out[count++] = (struct vslice){pf->iid_name[b->iid], pf_track_name(pf, uuid, &parent),
                                           NULL, b->ts, e->ts - b->ts};
            out[count - 1].process = pf_track_name(pf, parent, NULL);
        }
        cr_assert_eq(depth, 0, "track \"%s\": %zu slices never end", pf->track[t].name, depth);
    }
    for (size_t i = 0; i < pf->nev; i++) {
        bool known = false;
        for (size_t t = 0; t < pf->ntracks && !known; t++)
            known = pf->track[t].uuid == pf->ev[i].track;
        cr_assert(known, "event %zu on a track without a descriptor", i);
    }
    free(open);
    qsort(out, count, sizeof(*out), vslice_cmp);
    *n = count;
    return out;
}

/* Exports session id as perfetto, decodes it with protoc and Perfetto's schema; pf_free() it. */
static struct pf *pf_export(long long id)
{
    char path[PATH_MAX], ids[32], cmd[3 * PATH_MAX], *text = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock, "export", ids,
                    "--format",   "perfetto", "-o",   path,     NULL};
    char *probe[] = {"sh", "-c", "command -v protoc", NULL};
    char *decode[] = {"sh", "-c", cmd, NULL};
    struct pf *pf = calloc(1, sizeof(*pf));

    snprintf(ids, sizeof(ids), "%lld", id);
    snprintf(path, sizeof(path), "%s/out.pftrace", d.dir);
    cr_assert_eq(harness_run(NULL, argv), 0, "export --format perfetto failed");
    cr_assert_eq(access(path, F_OK), 0, "no %s", path);
    /* protoc is a test dependency (scripts/deps.sh installs it): no protoc, no pass. */
    cr_assert_eq(harness_run(NULL, probe), 0,
                 "protoc is not installed (Debian protobuf-compiler): cannot decode the trace");
    snprintf(cmd, sizeof(cmd),
             "protoc --decode=perfetto.protos.Trace -I '%s/perfetto' '%s/perfetto/"
             "perfetto_trace.proto' < '%s'",
             TEST_DATA_DIR, TEST_DATA_DIR, path);
    cr_assert_eq(harness_run(&text, decode), 0, "protoc could not decode the trace");
    unlink(path);
    pf_parse(pf, text);
    free(text);
    return pf;
}

/* The viewer's slices equal want[0..n) (sorted here), names, tracks and processes included. */
static void check_slices(const struct vslice *got, size_t ngot, struct vslice *want, size_t n)
{
    qsort(want, n, sizeof(*want), vslice_cmp);
    cr_assert_eq(ngot, n, "the viewer shows %zu slices, %zu were sent", ngot, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(got[i].name, want[i].name, "slice %zu", i);
        cr_assert_eq(got[i].start, want[i].start, "slice %zu (%s) start", i, want[i].name);
        cr_assert_eq(got[i].dur, want[i].dur, "slice %zu (%s) starting at %llu: duration", i,
                     want[i].name, (unsigned long long)want[i].start);
        cr_assert_str_eq(got[i].track, want[i].track, "slice %zu (%s) track", i, want[i].name);
        cr_assert_eq(strncmp(got[i].process, want[i].process, strlen(want[i].process)), 0,
                     "slice %zu (%s) process %s", i, want[i].name, got[i].process);
    }
}

Test(export, perfetto_decodes_with_protoc)
{
    long long id = load();
    struct pf *pf = pf_export(id);
    struct vslice *want = calloc(NTOTAL, sizeof(*want)), *got;
    static char procs[2][16];
    size_t n;

    for (int r = 0; r < 2; r++)
        snprintf(procs[r], sizeof(procs[r]), "rank %d (", r);
    for (size_t i = 0; i < NTOTAL; i++) {
        struct tentry e = entry(i);
        const char *dev = entry_device(&e);

        want[i] = (struct vslice){op_of(e.op)->name, dev ? dev : "no device", procs[e.rank],
                                  e.start, e.dur};
    }
    got = pf_view(pf, &n);
    check_slices(got, n, want, NTOTAL);
    cr_assert_eq(pf->ntracks, 2 + 5, "two process tracks, five (rank, device) tracks");
    free(got);
    free(want);
    pf_free(pf);
}

/* ---- the command line ------------------------------------------------------- */

Test(export, errors_and_output_file)
{
    long long id = load();
    char ids[32], path[PATH_MAX], *out = NULL;
    char *no_fmt[] = {TRACECTL_BIN, "--socket", d.sock, "export", ids, NULL};
    char *bad_weight[] = {TRACECTL_BIN, "--socket", d.sock,     "export", ids,
                          "--format",   "csv",      "--weight", "calls",  NULL};
    char *unknown[] = {TRACECTL_BIN,      "--socket", d.sock, "export",
                       "no-such-session", "--format", "csv",  NULL};
    char *to_file[] = {TRACECTL_BIN, "--socket", d.sock, "export", ids,
                       "--format",   "csv",      "-o",   path,     NULL};
    char *help[] = {TRACECTL_BIN, "export", "--help", NULL};
    FILE *f;
    long size;

    snprintf(ids, sizeof(ids), "%lld", id);
    snprintf(path, sizeof(path), "%s/out.csv", d.dir);
    cr_assert_eq(harness_run(NULL, no_fmt), 2, "a missing --format is a usage error");
    cr_assert_eq(harness_run(NULL, bad_weight), 2, "--weight needs collapsed");
    cr_assert_eq(harness_run(NULL, unknown), 4, "an unknown session exits 4");
    cr_assert_eq(harness_run(&out, help), 0);
    cr_assert_not_null(strstr(out, "--format"));
    free(out);
    cr_assert_eq(harness_run(&out, to_file), 0);
    cr_assert_str_eq(out, "", "with -o nothing goes to stdout");
    free(out);
    f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fclose(f);
    unlink(path);
    out = export(id, "csv", NULL, NULL);
    cr_assert_eq((size_t)size, strlen(out), "-o FILE holds what stdout would");
    free(out);
}

/* ---- overlapping entries on one device: lanes ------------------------------- */

/* Entries of one rank whose slices overlap, and the track each must be shown on. */
struct oentry {
    const char *name, *device;
    bool has_stream;
    uint64_t stream, start, dur;
    const char *want_track; /* worked out by hand from the greedy rule of PROTOCOL.md */
};

static const struct oentry overlap[] = {
    /* the example: B starts inside A and ends after it */
    {"A", "gpu:0", false, 0, 1000000, 10000, "gpu:0"},
    {"B", "gpu:0", false, 0, 1005000, 10000, "gpu:0 #2"},
    /* fully nested: C stays inside P on P's track */
    {"P", "gpu:1", false, 0, 2000000, 10000, "gpu:1"},
    {"C", "gpu:1", false, 0, 2002000, 3000, "gpu:1"},
    /* a chain of partial overlaps: a lane is taken again once its slice ended */
    {"X1", "gpu:2", false, 0, 3000000, 10000, "gpu:2"},
    {"X2", "gpu:2", false, 0, 3005000, 10000, "gpu:2 #2"},
    {"X3", "gpu:2", false, 0, 3012000, 10000, "gpu:2"},
    {"X4", "gpu:2", false, 0, 3018000, 10000, "gpu:2 #2"},
    /* streams are tracks of their own: overlaps across streams need no lane */
    {"S7", "gpu:3", true, 7, 4000000, 10000, "gpu:3 stream 7"},
    {"S9", "gpu:3", true, 9, 4005000, 10000, "gpu:3 stream 9"},
    {"S7b", "gpu:3", true, 7, 4011000, 1000, "gpu:3 stream 7"},
    /* equal starts: the longer is the parent; a zero-length slice; N overlaps M only */
    {"L", "gpu:4", false, 0, 5000000, 5000, "gpu:4"},
    {"Z", "gpu:4", false, 0, 5000000, 0, "gpu:4"},
    {"M", "gpu:4", false, 0, 5000000, 2000, "gpu:4"},
    {"N", "gpu:4", false, 0, 5001000, 2000, "gpu:4 #2"},
};
#define NOVERLAP (sizeof(overlap) / sizeof(overlap[0]))

/* Stores the table in reverse (storage order is not time order); returns the session id. */
static long long load_overlap(void)
{
    struct proto_opdef defs[NOVERLAP];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    long long id;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "overlap", 0, 1, "gpu:0", &id);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < NOVERLAP; i++)
        defs[i] = (struct proto_opdef){(uint32_t)i + 1, (char *)overlap[i].name, NULL};
    proto_pack_ops(&pk, defs, NOVERLAP);
    raw_send(fd, &sb);
    proto_pack_batch_header(&pk, NOVERLAP);
    for (size_t k = NOVERLAP; k-- > 0;) {
        const struct oentry *e = &overlap[k];

        msgpack_pack_array(&pk, 10);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_uint64(&pk, k + 1);
        msgpack_pack_uint64(&pk, e->start);
        msgpack_pack_uint64(&pk, e->dur);
        for (int f = 0; f < 4; f++)
            msgpack_pack_nil(&pk);
        proto_pack_str(&pk, e->device);
        if (e->has_stream) {
            msgpack_pack_map(&pk, 1);
            proto_pack_str(&pk, "stream");
            msgpack_pack_uint64(&pk, e->stream);
        } else {
            msgpack_pack_nil(&pk);
        }
    }
    raw_send(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    cr_assert_eq(raw_flush(fd, 1), (long long)NOVERLAP);
    raw_bye(fd, 0);
    return id;
}

Test(export, perfetto_overlaps_on_lanes)
{
    long long id = load_overlap();
    struct pf *pf = pf_export(id);
    struct vslice want[NOVERLAP], *got;
    size_t n;

    for (size_t i = 0; i < NOVERLAP; i++)
        want[i] = (struct vslice){overlap[i].name, overlap[i].want_track, "rank 0 (",
                                  overlap[i].start, overlap[i].dur};
    /* the viewer's BEGIN/END matching per track gives back every slice as sent */
    got = pf_view(pf, &n);
    check_slices(got, n, want, NOVERLAP);
    cr_assert_eq(pf->ntracks, 1 + 9, "one process track and nine lanes");
    free(got);
    pf_free(pf);
}

/* A Chrome X event: where it is shown and when. */
struct xev {
    long long pid, tid;
    uint64_t ts, dur;
};

/* ns from a µs decimal with three places, exactly (no floating point). */
static uint64_t us_to_ns(yajl_val v)
{
    unsigned long long us;
    unsigned frac;

    cr_assert(YAJL_IS_NUMBER(v));
    cr_assert_eq(sscanf(v->u.number.r, "%llu.%3u", &us, &frac), 2, "%s", v->u.number.r);
    return us * 1000 + frac;
}

Test(export, chrome_overlaps_on_lanes)
{
    long long id = load_overlap();
    char *out = export(id, "chrome", NULL, NULL), err[256];
    yajl_val doc = yajl_tree_parse(out, err, sizeof(err)), evs;
    struct tname names[32];
    struct xev x[NOVERLAP];
    bool seen[NOVERLAP] = {false};
    size_t nt = 0, nx = 0;

    cr_assert_not_null(doc, "not JSON: %s", err);
    evs = jget(doc, "traceEvents");
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val ev = evs->u.array.values[i];
        const char *ph = jstr(ev, "ph"), *name = jstr(ev, "name"), *tn;
        size_t k;

        if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) {
            cr_assert_lt(nt, 32);
            names[nt++] =
                (struct tname){jint(ev, "pid"), jint(ev, "tid"), jstr(jget(ev, "args"), "name")};
        }
        if (strcmp(ph, "X") != 0 && strcmp(ph, "i") != 0)
            continue;
        for (k = 0; k < NOVERLAP && strcmp(overlap[k].name, name) != 0; k++)
            ;
        cr_assert_lt(k, NOVERLAP, "an event %s that was not sent", name);
        cr_assert_not(seen[k], "%s twice", name);
        seen[k] = true;
        /* the zero-length slice is an instant, the others complete events */
        cr_assert_str_eq(ph, overlap[k].dur > 0 ? "X" : "i", "%s phase", name);
        x[nx] = (struct xev){jint(ev, "pid"), jint(ev, "tid"), us_to_ns(jget(ev, "ts")),
                             overlap[k].dur > 0 ? us_to_ns(jget(ev, "dur")) : 0};
        cr_assert_eq(x[nx].ts, overlap[k].start, "%s ts", name);
        cr_assert_eq(x[nx].dur, overlap[k].dur, "%s dur", name);
        tn = thread_name(names, nt, x[nx].pid, x[nx].tid);
        cr_assert_not_null(tn, "%s: no thread_name before it", name);
        cr_assert_str_eq(tn, overlap[k].want_track, "%s thread", name);
        /* per thread: in time order, and never partly over another slice */
        for (size_t j = 0; j < nx; j++) {
            uint64_t a0 = x[j].ts, a1 = x[j].ts + x[j].dur, b0 = x[nx].ts, b1 = b0 + x[nx].dur;

            if (x[j].pid != x[nx].pid || x[j].tid != x[nx].tid)
                continue;
            cr_assert_leq(a0, b0, "%s: thread %lld goes back in time", name, x[nx].tid);
            cr_assert(a1 <= b0 || b1 <= a1, "%s partly overlaps an earlier slice of its thread",
                      name);
        }
        nx++;
    }
    cr_assert_eq(nx, NOVERLAP);
    cr_assert_eq(nt, 9, "one thread per lane");
    yajl_tree_free(doc);
    free(out);
}

/* ---- Kineto streams: one track each ----------------------------------------- */

/* The id of the newest session named name, from `sessions`. */
static long long session_id_of(const char *name)
{
    struct proto_reader r;
    const msgpack_object *o, *list;
    long long id = -1;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    list = &o->via.array.ptr[1];
    for (uint32_t i = 0; i < list->via.array.size && id < 0; i++)
        if (obj_str_eq(obj_get(&list->via.array.ptr[i], "name"), name))
            id = (long long)obj_u64(obj_get(&list->via.array.ptr[i], "id"));
    close(fd);
    proto_reader_deinit(&r);
    cr_assert_geq(id, 0, "no session %s", name);
    return id;
}

/*
 * tests/data/kineto/handmade/streams.json: kernels overlapping across two
 * CUDA streams of gpu:0 and CPU ops overlapping across two threads. Each
 * stream (args.stream for GPU events, tid for CPU ops) is a track of its own,
 * and nothing needs a second lane. Times are the file's µs × 1000.
 */
Test(export, kineto_streams_one_track_each)
{
    static const char file[] = TEST_DATA_DIR "/kineto/handmade/streams.json";
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock,      "import",  (char *)file,
                    "--session",  "streams",  "--cpu-ops", "--quiet", NULL};
    struct vslice want[] = {
        {"aten::mm", "cpu stream 100", "rank 0 (", 1000000, 50000},
        {"aten::add", "cpu stream 200", "rank 0 (", 1010000, 30000},
        {"gemm_kernel", "gpu:0 stream 7", "rank 0 (", 1100000, 40000},
        {"add_kernel", "gpu:0 stream 13", "rank 0 (", 1120000, 40000},
        {"Memcpy HtoD (Pageable -> Device)", "gpu:0 stream 7", "rank 0 (", 1150000, 10000},
        {"gemm_kernel", "gpu:0 stream 13", "rank 0 (", 1165000, 10000},
    };
    size_t nwant = sizeof(want) / sizeof(want[0]), n;
    struct vslice *got;
    struct pf *pf;
    long long id;

    harness_daemon_start(&d, NULL);
    cr_assert_eq(harness_run(NULL, argv), 0, "import failed");
    id = session_id_of("streams");
    pf = pf_export(id);
    got = pf_view(pf, &n);
    check_slices(got, n, want, nwant);
    cr_assert_eq(pf->ntracks, 1 + 4, "a process track and one track per stream");
    free(got);
    pf_free(pf);

    /* chrome: one thread per stream, named as in perfetto */
    char *out = export(id, "chrome", NULL, NULL), err[256];
    yajl_val doc = yajl_tree_parse(out, err, sizeof(err)), evs;
    const char *threads[] = {"cpu stream 100", "cpu stream 200", "gpu:0 stream 7",
                             "gpu:0 stream 13"};
    size_t nt = 0;

    cr_assert_not_null(doc, "not JSON: %s", err);
    evs = jget(doc, "traceEvents");
    for (size_t i = 0; i < evs->u.array.len; i++) {
        yajl_val ev = evs->u.array.values[i];

        if (strcmp(jstr(ev, "ph"), "M") != 0 || strcmp(jstr(ev, "name"), "thread_name") != 0)
            continue;
        cr_assert_lt(nt, 4, "more threads than streams");
        cr_assert_str_eq(jstr(jget(ev, "args"), "name"), threads[nt], "thread %zu", nt);
        nt++;
    }
    cr_assert_eq(nt, 4);
    yajl_tree_free(doc);
    free(out);
}
