/*
 * test_cli_import_kineto.c — the importer's JSON reading (cli_import_kineto,
 * cli_import_cut) on generated traces: long strings and keys cost linear
 * work and give the right entries, the token cap, deep nesting and events
 * whose times are out of range get clear errors and counts.
 *
 * yajl_parse is wrapped (-Wl,--wrap=yajl_parse, tests/CMakeLists.txt): the
 * wrapper follows the text yajl is given with a JSON state machine of its
 * own and adds up, for each call, the bytes of the token left unfinished at
 * its end. yajl keeps such a token and lexes it again from its first byte on
 * every later call, which is what made a long string quadratic; the sum is
 * that extra lexing, and must be 0.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>

#include "cli_import_cut.h"
#include "cli_import_kineto.h"
#include "proto_class.h"

/* ---- the wrapped yajl_parse --------------------------------------------------- */

yajl_status __real_yajl_parse(yajl_handle h, const unsigned char *t, size_t n);
yajl_status __wrap_yajl_parse(yajl_handle h, const unsigned char *t, size_t n);

static struct {
    bool in_str, esc;
    uint64_t open;    /* bytes of the token unfinished so far */
    uint64_t relexed; /* sum over calls of `open` at the call's end */
    uint64_t calls, bytes;
} yw;

yajl_status __wrap_yajl_parse(yajl_handle h, const unsigned char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char b = t[i];
        bool ends = false; /* a token ends with this byte */

        if (yw.esc)
            yw.esc = false;
        else if (yw.in_str && b == '\\')
            yw.esc = true;
        else if (yw.in_str && b == '"')
            yw.in_str = false, ends = true;
        else if (!yw.in_str && b == '"')
            yw.in_str = true;
        else if (!yw.in_str && strchr(" \t\r\n,:[]{}", b) != NULL)
            ends = true;
        yw.open = ends ? 0 : yw.open + 1;
    }
    yw.relexed += yw.open;
    yw.calls++;
    yw.bytes += n;
    return __real_yajl_parse(h, t, n);
}

static void yw_reset(void)
{
    memset(&yw, 0, sizeof(yw));
}

/* ---- generated traces ---------------------------------------------------------- */

static char path[64];

static void remove_file(void)
{
    if (path[0] != '\0')
        unlink(path);
    path[0] = '\0';
}

TestSuite(kineto_json, .fini = remove_file, .timeout = 120);

/* A new temporary file (its name in path), open for writing. */
static FILE *new_trace(void)
{
    int fd;

    snprintf(path, sizeof(path), "/tmp/tckineto.XXXXXX");
    cr_assert_geq(fd = mkstemp(path), 0);
    return fdopen(fd, "w");
}

static void put_run(FILE *f, char c, size_t n)
{
    char buf[65536];

    memset(buf, c, sizeof(buf));
    for (size_t left = n; left > 0;) {
        size_t k = left < sizeof(buf) ? left : sizeof(buf);
        cr_assert_eq(fwrite(buf, 1, k, f), k);
        left -= k;
    }
}

struct got {
    size_t n;
    char op[8][PROTO_MAX_NAME + 1];
    uint64_t dur[8];
};

static int collect(void *arg, const struct kineto_entry *e)
{
    struct got *g = arg;

    cr_assert_lt(g->n, 8);
    snprintf(g->op[g->n], sizeof(g->op[g->n]), "%s", e->op);
    g->dur[g->n++] = e->dur_ns;
    return 0;
}

/*
 * A trace of four CPU ops on one thread, none inside another: aten::mm with
 * an args string of len bytes (escapes in it), an op whose name is len bytes,
 * an event with a key of len bytes, and aten::add.
 */
static uint64_t write_long_trace(size_t len)
{
    FILE *f = new_trace();
    long size;

    fputs("{\"traceEvents\": [\n", f);
    fputs("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": 1, "
          "\"ts\": 10, \"dur\": 5, \"args\": {\"note\": \"\\\"",
          f);
    put_run(f, 'x', len);
    fputs("\\\\ , ] }\"}},\n", f);
    fputs("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"", f);
    put_run(f, 'n', len);
    fputs("\", \"pid\": 1, \"tid\": 1, \"ts\": 20, \"dur\": 3},\n", f);
    fputs("{\"", f);
    put_run(f, 'k', len);
    fputs("\": 1, \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::sub\", \"pid\": 1, "
          "\"tid\": 1, \"ts\": 30, \"dur\": 7.5},\n",
          f);
    fputs("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::add\", \"pid\": 1, \"tid\": 1, "
          "\"ts\": 40, \"dur\": 2}\n]}\n",
          f);
    size = ftell(f);
    fclose(f);
    return (uint64_t)size;
}

/*
 * 32 MiB in one string, one name and one key: the four entries with their
 * self times, the long name cut, and the work linear: every byte scanned and
 * fed once, nothing lexed twice, fewer bytes moved than the text holds.
 */
Test(kineto_json, long_string_name_and_key_are_linear)
{
    size_t len = 32u << 20;
    uint64_t size = write_long_trace(len);
    struct kineto k = {.path = path};
    struct got g = {0};

    yw_reset();
    cr_assert_eq(kineto_scan(&k), 0, "%s", k.errmsg);
    cr_assert_eq(k.work.scanned, size);
    cr_assert_eq(k.work.fed, size);
    cr_assert_lt(k.work.moved, size);
    cr_assert_eq(yw.bytes, size, "yajl was given each byte once");
    cr_assert_eq(yw.relexed, 0, "yajl lexed %llu bytes of unfinished tokens again",
                 (unsigned long long)yw.relexed);
    cr_assert_eq(k.cpu_events, 4);
    cr_assert_eq(k.names_cut, 1);

    yw_reset();
    cr_assert_eq(kineto_replay(&k, true, collect, &g), 0, "%s", k.errmsg);
    cr_assert_eq(yw.relexed, 0, "the replay too");
    cr_assert_eq(g.n, 4);
    cr_assert_str_eq(g.op[0], "aten::mm");
    cr_assert_eq(g.dur[0], 5000);
    cr_assert_eq(strlen(g.op[1]), PROTO_MAX_NAME, "the long name is cut to the protocol's limit");
    cr_assert_eq(strspn(g.op[1], "n"), PROTO_MAX_NAME - 12, "its first bytes, then …#<8 hex>");
    cr_assert_eq(strncmp(g.op[1] + PROTO_MAX_NAME - 12, "\xe2\x80\xa6#", 4), 0);
    cr_assert_eq(g.dur[1], 3000);
    cr_assert_str_eq(g.op[2], "aten::sub");
    cr_assert_eq(g.dur[2], 7500);
    cr_assert_str_eq(g.op[3], "aten::add");
    cr_assert_eq(g.dur[3], 2000);
    kineto_deinit(&k);
}

/* One string longer than KINETO_MAX_TOKEN: a clear error naming the limit, no gigabytes held. */
Test(kineto_json, token_past_the_cap_is_refused)
{
    FILE *f = new_trace();
    struct kineto k = {.path = path};

    fputs("{\"traceEvents\": [{\"name\": \"", f);
    put_run(f, 'x', KINETO_MAX_TOKEN + 1);
    fputs("\"}]}", f);
    fclose(f);
    cr_assert_eq(kineto_scan(&k), -1);
    cr_assert_str_eq(k.errmsg, "a JSON string, key or number starting at byte 27 is longer than "
                               "64 MiB, the longest the importer reads");
    kineto_deinit(&k);
}

Test(kineto_json, deep_nesting_names_the_limit)
{
    FILE *f = new_trace();
    struct kineto k = {.path = path};
    char want[256];

    fputs("{\"traceEvents\": [", f);
    put_run(f, '[', 100);
    put_run(f, ']', 100);
    fputs("]}", f);
    fclose(f);
    cr_assert_eq(kineto_scan(&k), -1);
    /* the 64th container (the map, the events array, 62 more) is refused at its '[' */
    snprintf(want, sizeof(want),
             "not a Kineto trace: arrays and objects nested more than %d deep at byte %d "
             "(the importer follows %d levels; a profiler trace uses about 6)",
             KINETO_MAX_DEPTH, 17 + 63, KINETO_MAX_DEPTH);
    cr_assert_str_eq(k.errmsg, want);
    kineto_deinit(&k);
}

/*
 * Five events whose times cannot be imported (ts past int64 ns, in exponent
 * form too, a negative ts, a negative dur, ts + dur past int64) and two that
 * can: five counted, two entries.
 */
Test(kineto_json, out_of_range_events_are_counted)
{
    static const char *const times[] = {
        "\"ts\": 99999999999999999999, \"dur\": 1",
        "\"ts\": 1e30, \"dur\": 1",
        "\"ts\": -5, \"dur\": 1",
        "\"ts\": 100, \"dur\": -3",
        "\"ts\": 9000000000000000, \"dur\": 9000000000000000",
        "\"ts\": 200, \"dur\": 4",
        "\"ts\": 300, \"dur\": 6.25",
    };
    FILE *f = new_trace();
    struct kineto k = {.path = path};
    struct got g = {0};

    fputs("{\"traceEvents\": [", f);
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
        fprintf(f,
                "%s{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k%zu\", %s, \"args\": "
                "{\"device\": 0}}",
                i ? ", " : "", i, times[i]);
    fputs("]}", f);
    fclose(f);
    cr_assert_eq(kineto_scan(&k), 0, "%s", k.errmsg);
    cr_assert_eq(k.out_of_range, 5);
    cr_assert_eq(k.gpu_events, 2);
    cr_assert_eq(kineto_replay(&k, false, collect, &g), 0, "%s", k.errmsg);
    cr_assert_eq(g.n, 2);
    cr_assert_str_eq(g.op[0], "k5");
    cr_assert_eq(g.dur[0], 4000);
    cr_assert_str_eq(g.op[1], "k6");
    cr_assert_eq(g.dur[1], 6250);
    kineto_deinit(&k);
}

/* ---- the boundaries themselves ------------------------------------------------------ */

/* The text inline: Criterion runs each case in a new process, where pointers would not hold. */
struct cut_case {
    char text[24];
    size_t want; /* the longest prefix ending at a boundary */
};

static const struct cut_case cut_cases[] = {
    {"", 0},
    {"123", 0},             /* a number needs the byte after it */
    {"123 ", 4},            /* ... a space ends it */
    {"true", 0},            /* so does a literal, the same way */
    {"[1,", 3},             /* after a comma */
    {"{\"a\"", 4},          /* after a string's closing quote */
    {"{\"a", 1},            /* inside a string: only before it */
    {"[\"a,b]{}:", 1},      /* structural bytes inside a string do not count */
    {"[\"a\\\"", 1},        /* an escaped quote does not close it */
    {"[\"a\\\\\"", 6},      /* an escaped backslash then the closing quote does */
    {"[\"\\u0022\"]", 10},  /* \u0022 is a quote only once decoded */
    {"{\"k\":\t\r\n12", 8}, /* whitespace of every kind */
    {"[\"\xc3\xa9\"", 5},   /* UTF-8 inside strings is just bytes */
};

ParameterizedTestParameters(kineto_json, cut)
{
    return cr_make_param_array(struct cut_case, cut_cases,
                               sizeof(cut_cases) / sizeof(cut_cases[0]));
}

/* Whole, and byte by byte (the state carries across pieces): the same boundary. */
ParameterizedTest(const struct cut_case *c, kineto_json, cut)
{
    struct import_cut whole = {0}, bytes = {0};
    size_t n = strlen(c->text), last = 0;

    cr_assert_eq(import_cut_scan(&whole, (const unsigned char *)c->text, n), c->want, "'%s'",
                 c->text);
    for (size_t i = 0; i < n; i++)
        if (import_cut_scan(&bytes, (const unsigned char *)c->text + i, 1) == 1)
            last = i + 1;
    cr_assert_eq(last, c->want, "byte by byte: '%s'", c->text);
}

/*
 * The importer's categories use the one list of communication words
 * (proto_class.h): every strict word makes a name comm, anywhere and in any
 * case; a loose word alone does not ("broadcast" names compute kernels too),
 * where the daemon's rule (analysis_classify) takes it. Then names typed from
 * real traces.
 */
Test(kineto_json, categories_follow_the_shared_communication_words)
{
    static const struct {
        const char *word;
        int loose;
    } words[] = {
#define ROW(w, l) {w, l},
        PROTO_COMM_WORDS(ROW)
#undef ROW
    };
    static const struct {
        const char *name, *category;
    } names[] = {
        {"ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", "comm"},
        {"gloo:broadcast", "comm"},
        {"c10d::broadcast_", "comm"},
        {"aten::broadcast_tensors", "compute"},
        {"void at::native::elementwise_kernel<128, 2>(int)", "compute"},
        {"mscclKernel_AllGather", "comm"},
        {"cross_device_reduce_1stage<half, 8>", "comm"},
        {"record_param_comms", "comm"},
        {"ncclDevKernel_SendRecv", "comm"},
        {"MPI_Isend", "comm"},
        {"aten::mm", "compute"},
    };
    char buf[64];

    cr_assert_gt(sizeof(words) / sizeof(words[0]), 20);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        snprintf(buf, sizeof(buf), "X.%s_fp16", words[i].word);
        for (char *c = buf; *c != '\0'; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        cr_expect_str_eq(kineto_category(buf, false), words[i].loose ? "compute" : "comm", "%s",
                         buf);
        cr_expect_eq(proto_class_comm(buf, false), true, "%s", buf);
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        cr_expect_str_eq(kineto_category(names[i].name, false), names[i].category, "%s",
                         names[i].name);
    cr_expect_str_eq(kineto_category("ncclKernel_AllReduce", true), "memory");
}
