/*
 * test_html.c — `tracectl report --html` read back from a real browser, and
 * the terminal's bars of step times.
 *
 * A real tracectld is fed by producer processes (libtracectl), one per rank,
 * each recording a compute entry and an allreduce per step with explicit
 * times: rank r's step s lasts T(r, s) = (r + 1) * 10 ms + s * 1 ms + 5 ms
 * (PROTOCOL.md Part 3: a step time is the latest end minus the earliest
 * start of the rank's entries of that step). The test checks `report --json`
 * against T, writes `report --html`, loads the page in Debian's headless
 * Chromium with every request sent to a proxy that refuses (127.0.0.1:9),
 * reads the DOM after the page's script ran (--dump-dom) and checks that
 * every heatmap cell and every stacked-bar segment carries the figure of
 * `report --json`; it also takes screenshots at two window sizes into
 * html_artifacts/ of the test's working directory (the build tree). The
 * bars are checked in a terminal made by script(1): the glyphs of rank r are
 * computed here from T; in `top`, a rank stepping every 40 ms shows the full
 * block and one stepping every 2 ms the lowest. Neither bars through a pipe
 * nor with --no-bars.
 *
 * Chromium missing: the browser tests are skipped, saying so
 * (scripts/deps.sh installs it).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "harness.h"
#include "tracectl.h"

#define RANKS   4
#define STEPS   5
#define MS      1000000ULL
#define BASE_NS 1000000000ULL

static struct tdaemon d;
static int hold[2] = {-1, -1}; /* open: producers wait for a byte before closing (live) */
static bool send_cpu_wait;     /* producers report cpu_wait_ns(r, s) per step */

static void fini(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(html, .fini = fini, .timeout = 240);

/* Rank r's step time in step s: its compute entry plus its allreduce of 5 ms. */
static uint64_t step_ns(int r, int s)
{
    return (uint64_t)(r + 1) * 10 * MS + (uint64_t)s * MS + 5 * MS;
}

/* Rank r's CPU wait in step s, when the producers report one. */
static uint64_t cpu_wait_ns(int r, int s)
{
    return (uint64_t)(r + 1) * 100000 + (uint64_t)s * 1000;
}

static void producer(const char *session, int rank)
{
    tc_options o;
    tc_client *c;
    char dev[16];
    int err = 0;
    uint32_t mm, ar;

    snprintf(dev, sizeof(dev), "gpu:%d", rank);
    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = session;
    o.rank = rank;
    o.world = RANKS;
    o.device = dev;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL || err != 0)
        _exit(2);
    mm = tc_op_cat(c, "matmul", "compute");
    ar = tc_op_cat(c, "allreduce", "comm");
    for (int s = 0; s < STEPS; s++) {
        uint64_t start = BASE_NS + (uint64_t)s * 100 * MS, dur = step_ns(rank, s) - 5 * MS;
        tc_ext x = {.has = TC_EXT_COMM | TC_EXT_SEQ, .comm = 1, .seq = (uint64_t)s};

        if (s > 0)
            tc_step(c);
        tc_record(c, mm, start, dur, 0, NULL, NULL, 0, NULL);
        tc_record_ext(c, ar, start + dur, 5 * MS, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
        if (send_cpu_wait) {
            char v[64];
            snprintf(v, sizeof(v), "%d %llu", s, (unsigned long long)cpu_wait_ns(rank, s));
            if (tc_meta_str(c, "tracectl.cpu_wait", v) != 0)
                _exit(5);
        }
    }
    if (hold[0] >= 0) {
        char b;
        close(hold[1]);
        if (tc_flush(c, -1) != 0 || read(hold[0], &b, 1) != 1)
            _exit(4);
    }
    _exit(tc_close(c) == 0 ? 0 : 3);
}

/* Starts the producers of session; returns once they exited (live: false) or started. */
static void start_producers(const char *session, bool live, pid_t *pids)
{
    if (live)
        harness_pipe(hold);
    for (int r = 0; r < RANKS; r++) {
        pids[r] = fork();
        cr_assert_geq(pids[r], 0);
        if (pids[r] == 0)
            producer(session, r);
    }
    if (!live)
        for (int r = 0; r < RANKS; r++) {
            int st;
            cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer %d failed", r);
        }
}

static void end_producers(pid_t *pids)
{
    char b[RANKS] = {0};

    cr_assert_eq(write(hold[1], b, RANKS), RANKS);
    for (int r = 0; r < RANKS; r++) {
        int st;
        cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer %d failed", r);
    }
    close(hold[0]), close(hold[1]);
    hold[0] = hold[1] = -1;
}

/* ---- the CLI and the browser ---------------------------------------------------- */

static char *cli(int *status, const char *a, const char *b, const char *c, const char *e)
{
    char *out = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket", d.sock,    "report", (char *)a,
                    (char *)b,    (char *)c,  (char *)e, NULL};

    *status = harness_run(&out, argv);
    return out;
}

/* The report of session as JSON, parsed; asserts success. */
static yajl_val report_json(const char *session)
{
    char err[256];
    int st;
    char *out = cli(&st, session, "--json", NULL, NULL);
    yajl_val v = yajl_tree_parse(out, err, sizeof(err));

    cr_assert_eq(st, 0, "report --json failed");
    cr_assert_not_null(v, "report --json is not JSON: %s", err);
    free(out);
    return v;
}

static yajl_val jget(yajl_val map, const char *key)
{
    const char *path[] = {key, NULL};

    return yajl_tree_get(map, path, yajl_t_any);
}

static bool have_chromium(void)
{
    return system("command -v chromium >/dev/null 2>&1") == 0;
}

/*
 * Runs headless Chromium on file:// path with the network refused: every
 * request goes to a proxy at 127.0.0.1:9 (discard, closed), loopback too.
 * extra: --dump-dom (the DOM on stdout, returned) or screenshot options.
 */
static char *chromium(const char *path, const char *extra)
{
    char cmd[8192], *out = NULL;
    char *argv[] = {"sh", "-c", cmd, NULL};

    snprintf(cmd, sizeof(cmd),
             "timeout 120 chromium --headless=new --no-sandbox --disable-gpu --no-first-run "
             "--user-data-dir=%s/chromium --proxy-server=127.0.0.1:9 "
             "--proxy-bypass-list='<-loopback>' %s 'file://%s' 2>/dev/null",
             d.dir, extra, path);
    cr_assert_eq(harness_run(&out, argv), 0, "chromium failed: %s", cmd);
    return out;
}

/* The value of attribute name in the tag starting at tag (up to its '>'), or -1. */
static long long attr(const char *tag, const char *name)
{
    const char *end = strchr(tag, '>'), *p;
    char key[64];

    snprintf(key, sizeof(key), " %s=\"", name);
    p = strstr(tag, key);
    if (p == NULL || end == NULL || p > end)
        return -1;
    return strtoll(p + strlen(key), NULL, 10);
}

/* ---- the checks ------------------------------------------------------------------ */

/* report --json's times_ns against T; returns the parsed report (free it). */
static yajl_val check_json(const char *session)
{
    yajl_val rep = report_json(session), steps = jget(rep, "steps");

    cr_assert(YAJL_IS_ARRAY(steps));
    cr_assert_eq(steps->u.array.len, STEPS);
    for (int s = 0; s < STEPS; s++) {
        yajl_val t = jget(steps->u.array.values[s], "times_ns");
        cr_assert(YAJL_IS_ARRAY(t) && t->u.array.len == RANKS, "step %d: %zu times", s,
                  YAJL_IS_ARRAY(t) ? t->u.array.len : 0);
        for (int r = 0; r < RANKS; r++) {
            yajl_val p = t->u.array.values[r];
            cr_assert_eq(YAJL_GET_INTEGER(p->u.array.values[0]), r);
            cr_assert_eq((uint64_t)YAJL_GET_INTEGER(p->u.array.values[1]), step_ns(r, s),
                         "step %d rank %d", s, r);
        }
    }
    return rep;
}

/* The figure of rank r, step s in rep's steps; -1 when absent. */
static long long json_cell(yajl_val rep, long long r, long long s)
{
    yajl_val steps = jget(rep, "steps");

    for (size_t i = 0; i < steps->u.array.len; i++) {
        yajl_val st = steps->u.array.values[i], t = jget(st, "times_ns");
        if (YAJL_GET_INTEGER(jget(st, "step")) != s)
            continue;
        for (size_t k = 0; k < t->u.array.len; k++)
            if (YAJL_GET_INTEGER(t->u.array.values[k]->u.array.values[0]) == r)
                return YAJL_GET_INTEGER(t->u.array.values[k]->u.array.values[1]);
    }
    return -1;
}

/* The figure key of rank r in rep's ranks rows; -1 when absent. */
static long long json_rank(yajl_val rep, long long r, const char *key)
{
    yajl_val ranks = jget(rep, "ranks");

    for (size_t i = 0; i < ranks->u.array.len; i++)
        if (YAJL_GET_INTEGER(jget(ranks->u.array.values[i], "rank")) == r)
            return YAJL_GET_INTEGER(jget(ranks->u.array.values[i], key));
    return -1;
}

static const char *const cats[] = {"compute_ns", "comm_ns", "memory_ns", "wait_ns", "other_ns"};

/*
 * The DOM's heatmap cells and bar segments against rep; returns the cells
 * seen. dom is cut at its first script element (the page's data and code,
 * after what they drew).
 */
static int check_dom(char *dom, yajl_val rep)
{
    char *script = strstr(dom, "<script");
    int cells = 0, segs = 0;

    cr_assert_not_null(strstr(dom, "data-ready=\"1\""), "the page's script did not finish");
    cr_assert_not_null(script);
    *script = '\0';
    for (const char *p = dom; (p = strstr(p, "<i class=\"h")) != NULL; p++) {
        long long r = attr(p, "data-rank"), s = attr(p, "data-step"), ns = attr(p, "data-ns");
        cr_assert_eq(ns, json_cell(rep, r, s), "cell rank %lld step %lld: %lld", r, s, ns);
        cells++;
    }
    for (const char *p = dom; (p = strstr(p, "<div class=\"seg ")) != NULL; p++) {
        char key[32] = "";
        const char *k = strstr(p, "data-key=\"");
        long long r = attr(p, "data-rank"), ns = attr(p, "data-ns");

        cr_assert(k != NULL && k < strchr(p, '>'));
        sscanf(k + 10, "%31[a-z_]", key);
        cr_assert_eq(ns, json_rank(rep, r, key), "bar rank %lld %s: %lld", r, key, ns);
        segs++;
    }
    cr_assert_eq(segs, RANKS * (int)(sizeof(cats) / sizeof(cats[0])));
    return cells;
}

/* No request can leave the page: no URL of any scheme but file's own, no external resource. */
static void check_self_contained(const char *html)
{
    static const char *const bad[] = {"http://", "https://", "//cdn",  "<link",         " src=",
                                      "@import", "url(",     "fetch(", "XMLHttpRequest"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_null(strcasestr(html, bad[i]), "the page holds \"%s\"", bad[i]);
}

/* `tracectl export session --format collapsed --weight weight`: the stacks a flame graph draws. */
static char *collapsed(const char *session, const char *weight)
{
    char *out = NULL;
    char *argv[] = {TRACECTL_BIN, "--socket",  d.sock,     "export",       (char *)session,
                    "--format",   "collapsed", "--weight", (char *)weight, NULL};

    cr_assert_eq(harness_run(&out, argv), 0, "export --format collapsed failed");
    return out;
}

/*
 * The page's flame graphs: the stacks it carries are `export --format
 * collapsed`'s by time and by memory, byte for byte, and the DOM's top frame
 * weighs the sum of the time stacks.
 */
static void check_flame(const char *session, const char *html, const char *dom)
{
    const char *p = strstr(html, "<script type=\"application/json\" id=\"stacks\">"), *top;
    char err[256], *json, *want;
    unsigned long long sum = 0, w;
    yajl_val v;

    cr_assert_not_null(p, "the page has no stacks");
    p = strchr(p, '>') + 1;
    json = strndup(p, (size_t)(strstr(p, "</script>") - p));
    v = yajl_tree_parse(json, err, sizeof(err));
    cr_assert_not_null(v, "the stacks are not JSON: %s", err);
    for (int i = 0; i < 2; i++) {
        const char *weight = i == 0 ? "time" : "memory";
        want = collapsed(session, weight);
        cr_assert_str_eq(YAJL_GET_STRING(jget(v, weight)), want, "stacks by %s", weight);
        for (const char *l = want; i == 0 && *l; l = strchr(l, '\n') + 1) {
            cr_assert_eq(
                sscanf(strrchr(strndupa(l, (size_t)(strchr(l, '\n') - l)), ' '), " %llu", &w), 1);
            sum += w;
        }
        free(want);
    }
    top = strstr(dom, "<div class=\"fr\"");
    cr_assert_not_null(top, "no flame graph frame in the DOM");
    cr_assert_eq((unsigned long long)attr(top, "data-v"), sum);
    yajl_tree_free(v);
    free(json);
}

/* Screenshots of the page at path at two window sizes: html_artifacts/<name>-<size>.png. */
static void screenshots(const char *path, const char *name)
{
    static const char *const sizes[] = {"1280,1000", "640,1200"};
    char extra[1024];

    mkdir("html_artifacts", 0777);
    for (int i = 0; i < 2; i++) {
        char png[256], *img;
        snprintf(png, sizeof(png), "html_artifacts/%s-%s.png", name, sizes[i]);
        snprintf(extra, sizeof(extra),
                 "--hide-scrollbars --run-all-compositor-stages-before-draw "
                 "--virtual-time-budget=2000 --window-size=%s --screenshot=%s",
                 sizes[i], png);
        free(chromium(path, extra));
        img = harness_slurp(png, NULL);
        cr_assert_eq(memcmp(img, "\x89PNG", 4), 0, "%s is no PNG", png);
        free(img);
    }
}

/* Writes the page of session, checks it in the browser; returns the DOM's cells. */
static int check_page(const char *session, yajl_val rep, bool shots)
{
    char path[512];
    char *html, *dom;
    int st, cells;

    snprintf(path, sizeof(path), "%s/%s.html", d.dir, session);
    free(cli(&st, session, "--html", path, NULL));
    cr_assert_eq(st, 0, "report --html failed");
    html = harness_slurp(path, NULL);
    check_self_contained(html);
    cr_assert_not_null(strstr(html, "<section id=\"verdict\">"));
    cr_assert_null(strstr(html, "<section id=\"mpi\">"), "an MPI section without MPI calls");
    dom = chromium(path, "--dump-dom");
    cells = check_dom(dom, rep);
    check_flame(session, html, dom);
    if (shots)
        screenshots(path, session);
    free(html);
    free(dom);
    return cells;
}

Test(html, ended_session_page_matches_json)
{
    pid_t pids[RANKS];
    yajl_val rep;

    if (!have_chromium())
        cr_skip_test("chromium is not installed (scripts/deps.sh installs Debian's chromium)");
    harness_daemon_start(&d, NULL);
    start_producers("ended", false, pids);
    rep = check_json("ended");
    cr_assert_eq(check_page("ended", rep, true), RANKS * STEPS);
    yajl_tree_free(rep);
}

Test(html, live_session_page_matches_json)
{
    pid_t pids[RANKS];
    yajl_val rep;

    if (!have_chromium())
        cr_skip_test("chromium is not installed (scripts/deps.sh installs Debian's chromium)");
    harness_daemon_start(&d, NULL);
    start_producers("live", true, pids);
    /* the producers flushed their entries and wait: poll until the report has them all */
    for (int i = 0;; i++) {
        int st;
        char *out = cli(&st, "live", "--json", NULL, NULL);
        bool all = out != NULL && strstr(out, "\"entries\":40") != NULL;
        free(out);
        if (all)
            break;
        cr_assert_lt(i, 200, "the live session never showed its 40 entries");
        usleep(50000);
    }
    rep = check_json("live");
    cr_assert_eq(check_page("live", rep, false), RANKS * STEPS);
    yajl_tree_free(rep);
    end_producers(pids);
}

/* A trace file, reported offline (a private daemon), makes a page too. */
Test(html, offline_trace_file_page)
{
    char path[512], *dom, *html;
    int st;
    char *argv[] = {TRACECTL_BIN, "report", TEST_DATA_DIR "/kineto/after_fix_trace.json",
                    "--html",     path,     NULL};

    if (!have_chromium())
        cr_skip_test("chromium is not installed (scripts/deps.sh installs Debian's chromium)");
    harness_daemon_start(&d, NULL); /* only for its temporary directory */
    snprintf(path, sizeof(path), "%s/offline.html", d.dir);
    st = harness_run(NULL, argv);
    cr_assert_eq(st, 0, "report FILE --html failed");
    html = harness_slurp(path, NULL);
    check_self_contained(html);
    dom = chromium(path, "--dump-dom");
    cr_assert_not_null(strstr(dom, "data-ready=\"1\""), "the page's script did not finish");
    cr_assert_not_null(strstr(dom, "<section id=\"ops\">"));
    free(html);
    free(dom);
}

/* ---- the MPI section ------------------------------------------------------------- */

#if defined(MPI_PROFILE_BIN) && defined(TRACECTL_MPI_LIB)

/* The text of attribute name in the tag at tag (up to its '>'), or NULL (caller frees). */
static char *attr_str(const char *tag, const char *name)
{
    const char *end = strchr(tag, '>'), *p;
    char key[64];

    snprintf(key, sizeof(key), " %s=\"", name);
    p = strstr(tag, key);
    if (p == NULL || end == NULL || p > end)
        return NULL;
    p += strlen(key);
    return strndup(p, strcspn(p, "\""));
}

/* A cell's data-v against the JSON value v: integers and doubles exactly, strings as text. */
static void same_figure(const char *dv, yajl_val v, const char *what)
{
    if (v == NULL || YAJL_IS_NULL(v))
        cr_assert_str_eq(dv, "", "%s: %s, json null", what, dv);
    else if (YAJL_IS_INTEGER(v))
        cr_assert_eq(strtoll(dv, NULL, 10), YAJL_GET_INTEGER(v), "%s: %s", what, dv);
    else if (YAJL_IS_DOUBLE(v))
        cr_assert_eq(strtod(dv, NULL), YAJL_GET_DOUBLE(v), "%s: %s vs %.17g", what, dv,
                     YAJL_GET_DOUBLE(v));
    else if (YAJL_IS_ARRAY(v)) { /* members: the ranks, space-separated */
        char want[512] = "";
        for (size_t i = 0; i < v->u.array.len; i++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", i ? " " : "",
                     YAJL_GET_INTEGER(v->u.array.values[i]));
        cr_assert_str_eq(dv, want, "%s", what);
    } else
        cr_assert_str_eq(dv, YAJL_GET_STRING(v), "%s", what);
}

/*
 * The rows of the table in <div id="id"> of dom against rows, key by key in
 * the table's columns; returns the rows seen.
 */
/*
 * The name of a callsites row as the report should give it, found here with
 * binutils' addr2line -f on its module and offset: "function file:line" (the
 * file's base name).
 */
static void site_name(yajl_val row, char *buf, size_t size)
{
    char off[32], *out = NULL, *nl, *file;
    const char *module = YAJL_GET_STRING(jget(row, "module"));
    char *argv[] = {"addr2line", "-f", "-e", (char *)module, off, NULL};

    cr_assert_not_null(module);
    snprintf(off, sizeof(off), "%llx", (unsigned long long)YAJL_GET_INTEGER(jget(row, "offset")));
    cr_assert_eq(harness_run(&out, argv), 0);
    cr_assert_not_null(nl = strchr(out, '\n'), "%s", out);
    *nl++ = '\0';
    nl[strcspn(nl, " \n")] = '\0';
    file = strrchr(nl, '/') != NULL ? strrchr(nl, '/') + 1 : nl;
    snprintf(buf, size, "%s %s", out, file);
    free(out);
}

/*
 * The table id of dom against rows, cell by cell: keys[k] names the JSON key
 * of column k, NULL a callsite's name (site_name).
 */
static size_t check_rows(const char *dom, const char *id, yajl_val rows, const char *const *keys,
                         size_t nkeys)
{
    char open[64];
    const char *p, *end;
    size_t n = 0;

    snprintf(open, sizeof(open), "<div id=\"%s\">", id);
    p = strstr(dom, open);
    cr_assert_not_null(p, "no table %s in the DOM", id);
    p = strstr(p, "<tbody>");
    end = strstr(p, "</tbody>");
    while ((p = strstr(p, "<tr>")) != NULL && p < end) {
        cr_assert_lt(n, rows->u.array.len, "%s: more rows than the JSON", id);
        for (size_t k = 0; k < nkeys; k++) {
            char what[96], *dv;
            p = strstr(p, "<td");
            dv = attr_str(p, "data-v");
            cr_assert_not_null(dv, "%s row %zu: no data-v", id, n);
            snprintf(what, sizeof(what), "%s row %zu %s", id, n, keys[k] ? keys[k] : "site");
            if (keys[k] == NULL) {
                char want[1100];

                site_name(rows->u.array.values[n], want, sizeof(want));
                cr_assert_str_eq(dv, want, "%s", what);
                cr_assert(strstr(want, "mpi_profile.c:") != NULL, "%s: %s", what, want);
                /* and the cell's text says the same */
                cr_assert(strncmp(strchr(p, '>') + 1, want, strlen(want)) == 0, "%s", what);
            } else {
                same_figure(dv, jget(rows->u.array.values[n], keys[k]), what);
            }
            free(dv);
            p++;
        }
        n++;
    }
    cr_assert_eq(n, rows->u.array.len, "%s: %zu rows, JSON %zu", id, n, rows->u.array.len);
    return n;
}

/*
 * mpi_profile (4 ranks, under LD_PRELOAD of libtracectl-mpi): the page's
 * MPI section holds report --json's figures exactly: the MPI time per rank,
 * the communicators, the call sites (12 lines of mpi_profile.c call MPI, at
 * least as many sites; each named "function mpi_profile.c:LINE" as addr2line
 * says here), and every cell of the point-to-point matrix (checked too
 * against the messages and bytes the program counted itself).
 */
Test(html, mpi_session_page_matches_json)
{
    static const char *const rank_keys[] = {"rank",      "wall_ns", "mpi_ns",        "app_ns",
                                            "mpi_share", "calls",   "dropped_calls", "wall_from"};
    static const char *const comm_keys[] = {"name",  "id",       "size", "members",
                                            "calls", "total_ns", "bytes"};
    static const char *const site_keys[] = {NULL,     "op",       "symbol",   "offset", "module",
                                            "ranks",  "calls",    "total_ns", "bytes",  "min_ns",
                                            "max_ns", "max_rank", "mpi_share"};
    char cmd[8192], path[512], *out = NULL, *html, *dom, *sec;
    char *argv[] = {"sh", "-c", cmd, NULL};
    yajl_val rep = NULL, mpi, pairs, sites, state;
    size_t cells = 0;
    int st;

    if (!have_chromium())
        cr_skip_test("chromium is not installed (scripts/deps.sh installs Debian's chromium)");
    harness_daemon_start(&d, NULL);
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "TRACECTL_SOCKET='%s' TRACECTL_SESSION=mpijob TRACECTL_BLOCKING=1 '%s' "
             "--oversubscribe -np 4 -x LD_PRELOAD='%s' '%s'",
             d.dir, d.sock, MPIEXEC_BIN, TRACECTL_MPI_LIB, MPI_PROFILE_BIN);
    cr_assert_eq(harness_run(&out, argv), 0, "mpirun failed: %s", cmd);
    /* every rank said bye: poll until the session is ended */
    for (int i = 0;; i++) {
        rep = report_json("mpijob");
        state = yajl_tree_get(rep, (const char *[]){"session", "state", NULL}, yajl_t_string);
        if (state != NULL && strcmp(state->u.string, "ended") == 0)
            break;
        yajl_tree_free(rep);
        cr_assert_lt(i, 200, "the MPI session never ended");
        usleep(50000);
    }
    mpi = jget(rep, "mpi");
    cr_assert(YAJL_IS_OBJECT(mpi), "report --json has no mpi");
    snprintf(path, sizeof(path), "%s/mpijob.html", d.dir);
    free(cli(&st, "mpijob", "--html", path, NULL));
    cr_assert_eq(st, 0, "report --html failed");
    html = harness_slurp(path, NULL);
    check_self_contained(html);
    dom = chromium(path, "--dump-dom");
    cr_assert_not_null(strstr(dom, "data-ready=\"1\""), "the page's script did not finish");
    sec = strstr(dom, "<section id=\"mpi\">");
    cr_assert_not_null(sec, "no MPI section in the DOM");
    *strstr(sec, "</section>") = '\0';
    cr_assert_eq(check_rows(sec, "mpi-ranks", jget(mpi, "ranks"), rank_keys, 8), 4);
    cr_assert_geq(check_rows(sec, "mpi-comms", jget(mpi, "comms"), comm_keys, 7), 4);
    sites = yajl_tree_get(mpi, (const char *[]){"callsites", "sites", NULL}, yajl_t_array);
    cr_assert_not_null(sites);
    cr_assert_geq(check_rows(sec, "mpi-sites", sites, site_keys, 13), 12);
    /* the matrix: one cell per pair, its figures those of --json and of the program */
    pairs = yajl_tree_get(mpi, (const char *[]){"p2p", "pairs", NULL}, yajl_t_array);
    cr_assert_not_null(pairs);
    for (const char *p = sec; (p = strstr(p, "<td ")) != NULL; p++) {
        long long from = attr(p, "data-from"), to = attr(p, "data-to");
        long long bytes = attr(p, "data-bytes"), msgs = attr(p, "data-messages");
        char line[128];
        size_t k;

        if (from < 0)
            continue;
        for (k = 0; k < pairs->u.array.len; k++)
            if (YAJL_GET_INTEGER(jget(pairs->u.array.values[k], "from")) == from &&
                YAJL_GET_INTEGER(jget(pairs->u.array.values[k], "to")) == to)
                break;
        cr_assert_lt(k, pairs->u.array.len, "cell %lld -> %lld is no pair of --json", from, to);
        cr_assert_eq(bytes, YAJL_GET_INTEGER(jget(pairs->u.array.values[k], "bytes")));
        cr_assert_eq(msgs, YAJL_GET_INTEGER(jget(pairs->u.array.values[k], "messages")));
        snprintf(line, sizeof(line), "p2p %lld %lld %lld %lld\n", from, to, msgs, bytes);
        cr_assert_not_null(strstr(out, line), "the program did not count %s", line);
        cells++;
    }
    /* the ring (4 pairs), 0 -> 2 and 3 -> 1 */
    cr_assert_eq(cells, 6);
    cr_assert_eq(cells, pairs->u.array.len);
    cr_assert_null(strstr(html, "<section id=\"hosts\">"), "a one-host session has no hosts");
    screenshots(path, "mpijob");
    yajl_tree_free(rep);
    free(out);
    free(html);
    free(dom);
}

#endif

/* ---- bars ---------------------------------------------------------------------- */

static const char *const glyphs[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};

/* The glyph of v on the report's scale lo..hi, from the definition in cli_bars.h. */
static const char *glyph(uint64_t v, uint64_t lo, uint64_t hi)
{
    return glyphs[(int)((double)(v - lo) * 7.0 / (double)(hi - lo) + 0.5)];
}

/* `tracectl report` in a terminal (script(1)); its output with \r\n as \n. */
static char *in_terminal(const char *args)
{
    char cmd[8192], *out = NULL, *w;
    char *argv[] = {"script", "-qec", cmd, "/dev/null", NULL};

    snprintf(cmd, sizeof(cmd), "%s --socket %s report %s", TRACECTL_BIN, d.sock, args);
    cr_assert_eq(harness_run(&out, argv), 0, "%s failed", cmd);
    w = out;
    for (char *r = out; *r; r++)
        if (*r != '\r')
            *w++ = *r;
    *w = '\0';
    return out;
}

Test(html, bars_in_a_terminal_only)
{
    pid_t pids[RANKS];
    uint64_t lo = step_ns(0, 0), hi = step_ns(RANKS - 1, STEPS - 1);
    char *out, want[256];
    int st;

    harness_daemon_start(&d, NULL);
    start_producers("bars", false, pids);
    out = in_terminal("bars");
    cr_assert_not_null(strstr(out, "STEP_TIMES"), "%s", out);
    cr_assert_not_null(strstr(out, "BY_RANK"), "%s", out);
    for (int r = 0; r < RANKS; r++) { /* a rank's row ends with its steps' bar */
        want[0] = '\0';
        for (int s = 0; s < STEPS; s++)
            strcat(want, glyph(step_ns(r, s), lo, hi));
        strcat(want, "\n");
        cr_assert_not_null(strstr(out, want), "rank %d: no \"%s\" in\n%s", r, want, out);
    }
    for (int s = 0; s < STEPS; s++) { /* a step's row ends with its ranks' bar */
        want[0] = '\0';
        for (int r = 0; r < RANKS; r++)
            strcat(want, glyph(step_ns(r, s), lo, hi));
        strcat(want, "\n");
        cr_assert_not_null(strstr(out, want), "step %d: no \"%s\" in\n%s", s, want, out);
    }
    free(out);
    out = in_terminal("bars --no-bars");
    cr_assert_null(strstr(out, "STEP_TIMES"), "%s", out);
    cr_assert_null(strstr(out, "▁"), "%s", out);
    free(out);
    out = cli(&st, "bars", NULL, NULL, NULL); /* a pipe */
    cr_assert_eq(st, 0);
    cr_assert_null(strstr(out, "STEP_TIMES"), "%s", out);
    cr_assert_null(strstr(out, "█"), "%s", out);
    free(out);
}

/* ---- top's bars -------------------------------------------------------------------- */

/* A rank that makes a step every pause_ms until its end of stop is closed. */
static void spinner(int rank, int pause_ms, int stop)
{
    tc_options o;
    tc_client *c;
    int err = 0;
    uint32_t op;
    struct pollfd p = {.fd = stop, .events = POLLIN};

    tc_options_init(&o);
    o.socket_path = d.sock;
    o.session = "spin";
    o.rank = rank;
    o.world = 2;
    o.blocking = 1;
    if ((c = tc_open(&o, &err)) == NULL || err != 0)
        _exit(2);
    op = tc_op_cat(c, "matmul", "compute");
    for (uint64_t s = 0; poll(&p, 1, pause_ms) == 0; s++) {
        tc_record(c, op, BASE_NS + s * MS, MS / 2, 0, NULL, NULL, 0, NULL);
        tc_step(c);
    }
    _exit(tc_close(c) == 0 ? 0 : 3);
}

/* `tracectl top spin --once` in a terminal (script(1)) with extra options; \r removed. */
static char *top_in_terminal(const char *extra)
{
    char cmd[8192], *out = NULL, *w;
    char *argv[] = {"script", "-qec", cmd, "/dev/null", NULL};

    snprintf(cmd, sizeof(cmd), "%s --socket %s top spin --once --interval 0.5 %s", TRACECTL_BIN,
             d.sock, extra);
    cr_assert_eq(harness_run(&out, argv), 0, "%s failed", cmd);
    w = out;
    for (char *r = out; *r; r++)
        if (*r != '\r')
            *w++ = *r;
    *w = '\0';
    return out;
}

/* Whether the line of rank r in a top frame holds glyph. */
static bool top_rank_has(const char *out, int r, const char *glyph)
{
    const char *p = strstr(out, "STEPS/S");
    long long rank;

    while (p != NULL && (p = strchr(p, '\n')) != NULL) {
        p++;
        if (sscanf(p, " %lld", &rank) == 1 && rank == r) {
            const char *end = strchr(p, '\n'), *g = strstr(p, glyph);
            return g != NULL && (end == NULL || g < end);
        }
    }
    return false;
}

Test(html, top_bars_in_a_terminal_only)
{
    int stop[2];
    pid_t pids[2];
    char *out, *argv[] = {TRACECTL_BIN, "--socket", d.sock, "top", "spin", "--once", NULL};

    harness_daemon_start(&d, NULL);
    harness_pipe(stop);
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        cr_assert_geq(pids[r], 0);
        if (pids[r] == 0) {
            close(stop[1]);
            spinner(r, r == 0 ? 40 : 2, stop[0]); /* rank 0's steps are 20 times as long */
        }
    }
    close(stop[0]);
    for (int i = 0;; i++) { /* until both ranks made steps in an interval */
        out = top_in_terminal("");
        if (top_rank_has(out, 0, "█") && top_rank_has(out, 1, "▁"))
            break;
        cr_assert_lt(i, 20, "no bars of rank 0 (slow) and 1 (fast) in\n%s", out);
        free(out);
    }
    cr_assert_not_null(strstr(out, "STEP_TIME"), "%s", out);
    free(out);
    out = top_in_terminal("--no-bars");
    cr_assert_null(strstr(out, "STEP_TIME"), "%s", out);
    cr_assert_null(strstr(out, "█"), "%s", out);
    free(out);
    cr_assert_eq(harness_run(&out, argv), 0); /* a pipe */
    cr_assert_null(strstr(out, "STEP_TIME"), "%s", out);
    cr_assert_null(strstr(out, "█"), "%s", out);
    free(out);
    close(stop[1]);
    for (int r = 0; r < 2; r++) {
        int st;
        cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "spinner %d failed", r);
    }
}

/* The cells of the heatmap in dom (up to its first script) against cpu_wait_ns(); the count. */
static int check_cpu_cells(char *dom)
{
    char *script = strstr(dom, "<script");
    int cells = 0;

    cr_assert_not_null(strstr(dom, "data-ready=\"1\""), "the page's script did not finish");
    cr_assert_not_null(strstr(dom, "data-metric=\"cpu_wait_times_ns\""), "not the CPU wait");
    *script = '\0';
    for (const char *p = dom; (p = strstr(p, "<i class=\"h")) != NULL; p++) {
        long long r = attr(p, "data-rank"), s = attr(p, "data-step"), ns = attr(p, "data-ns");
        cr_assert_eq((uint64_t)ns, cpu_wait_ns((int)r, (int)s), "cell rank %lld step %lld: %lld", r,
                     s, ns);
        cells++;
    }
    return cells;
}

/*
 * Producers that report a CPU wait: report --json has each step's cpu_wait_times_ns and each
 * rank's cpu_wait_ns, the page a CPU WAIT column in the ranks table and a heatmap of it (the
 * page's #metric=cpu_wait_times_ns draws it first) whose cells carry the exact figures; a page
 * without (the other tests' sessions) has neither.
 */
Test(html, cpu_wait_column_and_heatmap)
{
    pid_t pids[RANKS];
    yajl_val rep, steps;
    char path[512], url[600];
    char *html, *dom;
    int st;

    if (!have_chromium())
        cr_skip_test("chromium is not installed (scripts/deps.sh installs Debian's chromium)");
    harness_daemon_start(&d, NULL);
    send_cpu_wait = true;
    start_producers("cpu", false, pids);
    send_cpu_wait = false;
    rep = report_json("cpu");
    steps = jget(rep, "steps");
    cr_assert_eq(steps->u.array.len, STEPS);
    for (int s = 0; s < STEPS; s++) {
        yajl_val t = jget(steps->u.array.values[s], "cpu_wait_times_ns");
        cr_assert(YAJL_IS_ARRAY(t) && t->u.array.len == RANKS, "step %d", s);
        for (int r = 0; r < RANKS; r++) {
            yajl_val p = t->u.array.values[r];
            cr_assert_eq(YAJL_GET_INTEGER(p->u.array.values[0]), r);
            cr_assert_eq((uint64_t)YAJL_GET_INTEGER(p->u.array.values[1]), cpu_wait_ns(r, s));
        }
    }
    /* rank r's: 5 (r + 1) 100,000 + (0 + 1 + 2 + 3 + 4) 1,000 */
    for (int r = 0; r < RANKS; r++)
        cr_assert_eq(json_rank(rep, r, "cpu_wait_ns"), 5LL * (r + 1) * 100000 + 10000);
    snprintf(path, sizeof(path), "%s/cpu.html", d.dir);
    free(cli(&st, "cpu", "--html", path, NULL));
    cr_assert_eq(st, 0, "report --html failed");
    html = harness_slurp(path, NULL);
    /* drawn first: the step time, as on every page; the CPU wait is a toggle */
    dom = chromium(path, "--dump-dom");
    cr_assert_eq(check_dom(dom, rep), RANKS * STEPS);
    cr_assert_not_null(strstr(dom, "value=\"cpu_wait_times_ns\""), "no CPU wait toggle");
    cr_assert_not_null(strstr(dom, ">CPU WAIT</th>"), "no CPU WAIT column");
    /* rank 3's cell: 2,010,000 ns */
    cr_assert_not_null(strstr(dom, "data-v=\"2010000\">2.01 ms</td>"), "rank 3's CPU wait");
    free(dom);
    snprintf(url, sizeof(url), "%s#metric=cpu_wait_times_ns", path);
    dom = chromium(url, "--dump-dom");
    cr_assert_eq(check_cpu_cells(dom), RANKS * STEPS);
    free(dom);
    free(html);
    yajl_tree_free(rep);
    /* a session without: no column, no toggle */
    harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
    harness_daemon_start(&d, NULL);
    start_producers("plain", false, pids);
    snprintf(path, sizeof(path), "%s/plain.html", d.dir);
    free(cli(&st, "plain", "--html", path, NULL));
    cr_assert_eq(st, 0, "report --html failed");
    dom = chromium(path, "--dump-dom");
    cr_assert_null(strstr(dom, "cpu_wait_times_ns\""), "a CPU wait toggle without CPU wait");
    cr_assert_null(strstr(dom, ">CPU WAIT</th>"), "a CPU WAIT column without CPU wait");
    free(dom);
}
