/*
 * cli_report — `tracectl report` (see cli_report.h).
 *
 * Each section of the report map has a renderer in cli_report_sections[];
 * table-shaped sections are described by column specs (cli_view).
 */
#include "cli_report.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bytesize.h"
#include "cli_bars.h"
#include "cli_fmt.h"
#include "cli_import.h"
#include "cli_obj.h"
#include "cli_report_ranks.h"
#include "cli_report_mpi.h"
#include "cli_offline.h"
#include "cli_outfile.h"
#include "cli_report_by.h"
#include "cli_report_html.h"
#include "cli_view.h"
#include "util.h"

#define CLI_REPORT_NCOLS(a) UTIL_ARRAY_LEN(a)
#define CLI_REPORT_INDENT   "  "
#define CLI_REPORT_OPS      1000 /* ops rows a table shows unless --ops says otherwise */

const char cli_report_usage[] =
    "Usage: tracectl report <id|name> [--top N] [--comm-min-ratio R]\n"
    "                       [--mem-threshold BYTES] [--ops N|all] [--ops-offset K]\n"
    "                       [--rank R[,R...]] [--step A[..B]] [--device D]\n"
    "                       [--category C] [--wide] [--no-bars]\n"
    "                       [--by launcher|module|callsite]\n"
    "                       [--json | --html FILE [--no-flame]]\n"
    "       tracectl report [--offline] [--cpu-ops] FILE.json[.gz]... [options]\n"
    "\n"
    "Shows the analysis report of one session: the verdict, the session header,\n"
    "then the time per operation, the slowest calls, memory peak and hotspots,\n"
    "time per device, load imbalance across devices and communication, the\n"
    "ranks and steps (caused, waited and untracked time; CPU WAIT, the wait for\n"
    "a CPU, when the producers report it: docs/analysis.md); for an MPI job\n"
    "also MPI time and MPI % per rank, the communicators, message sizes and\n"
    "the point-to-point matrix (docs/mpi.md). On a home daemon (--peer-listen)\n"
    "a session that spans hosts also has a Hosts section (each host's clock\n"
    "OFFSET within BOUND, FROM what, CUTS) and its late ranks across hosts, and\n"
    "its totals and operations merge every host (docs/hosts.md). An all-digits\n"
    "argument is a session id; anything else names the newest session of that\n"
    "name. A live session is reported as far as it has been stored.\n"
    "\n"
    "Given PyTorch profiler (Kineto) trace files instead (arguments ending in\n"
    ".json or .gz that are files, or any arguments with --offline), it needs no\n"
    "running daemon: it starts a private tracectld (the one in the directory of\n"
    "this tracectl, else the first in PATH) on a socket and data directory in a\n"
    "new temporary directory, imports the files into one session as `tracectl\n"
    "import` does, prints the same report, then stops that daemon and removes\n"
    "the directory. Nothing is sent to your own daemon.\n"
    "\n"
    "Options:\n"
    "  -n, --top N                 slowest calls and memory hotspots to list\n"
    "                              (an integer >= 1; default 10)\n"
    "  -r, --comm-min-ratio R      hide communication ops whose share of the\n"
    "                              session's time is below R (0 to 1; default 0)\n"
    "  -m, --mem-threshold BYTES   list as hotspots only entries larger than this;\n"
    "                              plain bytes or with a suffix K, KiB, M, MiB, G,\n"
    "                              GiB (all 1024-based; default 0)\n"
    "      --ops N|all             the top N operations of the ops table, by total\n"
    "                              time (default: 1000 in the table, all with\n"
    "                              --json); the communication list stops at N too\n"
    "                              (--top is the slowest calls and hotspots)\n"
    "      --ops-offset K          skip the first K operations (with --ops N)\n"
    "      --wide                  never cut op names, devices or shapes in the\n"
    "                              tables\n"
    "      --no-bars               no bars of step times (unicode blocks, one\n"
    "                              eighth to full height) ending the Ranks and\n"
    "                              Steps tables; they are drawn only when stdout\n"
    "                              is a terminal, scaled from the report's\n"
    "                              shortest step time to its longest\n"
    "\n"
    "  Filters: every section (the totals, operations with their percentiles,\n"
    "  slowest calls, memory, devices, imbalance, communication and the analysis)\n"
    "  counts only the entries that match all the filters given; the report\n"
    "  starts with a line naming them (--json: the \"filter\" key). At a home,\n"
    "  they count its own entries only, and say so (--json: \"filter_hosts\").\n"
    "      --rank R[,R...]         the entries of the processes of these ranks\n"
    "      --step A[..B]           the entries of steps A to B\n"
    "      --device D              the entries of device D\n"
    "      --category C            the entries of ops of category C (compute, comm,\n"
    "                              memory, wait; any other word: other)\n"
    "\n"
    "      --offline               the arguments are trace files (see above)\n"
    "      --cpu-ops               trace files: import CPU ops and annotations too\n"
    "                              (as tracectl import --cpu-ops)\n"
    "      --by launcher           instead of the report: the time of the entries\n"
    "                              by the CPU op that launched them (the kernels\n"
    "                              of an imported Kineto trace), and by (launcher,\n"
    "                              op) pair, the first --top N pairs (default 10)\n"
    "      --by module             instead of the report: the time of the entries\n"
    "                              by the region around them (the nn.Module of the\n"
    "                              torch bridge's profiler mode, a Python `with`\n"
    "                              block, tc_push): calls, self and total time,\n"
    "                              share; and by (module, op), the first --top N\n"
    "                              rows of each (default 10). Both --by apply to\n"
    "                              trace files too, and count only the entries the\n"
    "                              filters above select (a module's calls: its\n"
    "                              regions that match; nesting is not filtered);\n"
    "                              --ops, --ops-offset, --comm-min-ratio and\n"
    "                              --mem-threshold do not apply to them\n"
    "      --by callsite           instead of the report: an MPI job's call sites\n"
    "                              by time (the report's MPI callsites table), the\n"
    "                              first --top N (default 10); not with --step,\n"
    "                              --device or --category (sites count whole runs)\n"
    "  -j, --json                  print the report map as JSON\n"
    "      --html FILE             write the report as one HTML page to FILE\n"
    "                              instead (- : stdout), to open from disk in a\n"
    "                              browser, with no network: the verdict, a rank x\n"
    "                              step heatmap of step times, each rank's time by\n"
    "                              category, the collectives' waits per step and\n"
    "                              sortable tables; the same figures as --json\n"
    "                              (the report, not the entries: at most 1,000\n"
    "                              steps and 1,000 ops rows). FILE is written as\n"
    "                              export -o writes (a device or FIFO directly,\n"
    "                              a file through a temporary file renamed once\n"
    "                              complete). The page ends with flame graphs of\n"
    "                              the session's stacks by time and by memory (as\n"
    "                              export --format collapsed), which read every\n"
    "                              entry: a filtered report's page has none\n"
    "      --no-flame              --html: no flame graphs, so no entry is read\n"
    "                              (a session of millions of entries is written\n"
    "                              in the time its report takes)\n"
    "      --socket PATH           the daemon's socket (see tracectl --help)\n"
    "  -h, --help                  show this help\n"
    "\n"
    "Example:\n"
    "  tracectl report job-42 --top 5 --comm-min-ratio 0.01 --mem-threshold 64MiB\n"
    "  tracectl report 7 --json | jq '.ops[0]'\n"
    "  tracectl report job-42 --rank 3 --step 100..199 --category comm --ops 5\n"
    "  tracectl report rank0.json.gz rank1.json.gz --top 5\n"
    "  tracectl report nccl --by launcher --top 5 --category comm\n"
    "  tracectl report train --by module --top 20\n"
    "  tracectl report job-42 --html job-42.html\n";

/* ---- options ------------------------------------------------------------- */

static int cli_report_top(const char *arg, struct proto_request *req)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(arg, &end, 10);
    if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < 1 || v > UINT32_MAX) {
        cli_error("report: --top wants an integer from 1 to %u, not '%s'", UINT32_MAX, arg);
        return CLI_EXIT_USAGE;
    }
    req->top = (uint32_t)v;
    return CLI_CONTINUE;
}

static int cli_report_ratio(const char *arg, struct proto_request *req)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno != 0 || !(v >= 0.0 && v <= 1.0)) {
        cli_error("report: --comm-min-ratio wants a number from 0 to 1, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    req->comm_min_ratio = v;
    return CLI_CONTINUE;
}

static int cli_report_threshold(const char *arg, struct proto_request *req)
{
    int rc = bytesize_parse(arg, &req->mem_threshold);

    if (rc == -ERANGE)
        cli_error("report: --mem-threshold '%s' is too large", arg);
    else if (rc != 0)
        cli_error("report: --mem-threshold wants bytes such as 1048576, 512K or 64MiB, "
                  "not '%s'",
                  arg);
    return rc ? CLI_EXIT_USAGE : CLI_CONTINUE;
}

/* --ops N|all and --ops-offset K: a page of the ops rows (a protocol extension). */
static int cli_report_page(int c, const char *arg, struct proto_request *req, bool *given)
{
    char *end;
    unsigned long long v;

    if (c == 'O' && strcmp(arg, "all") == 0) {
        req->ops_limit = 0;
        *given = true;
        return CLI_CONTINUE;
    }
    errno = 0;
    v = strtoull(arg, &end, 10);
    if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 ||
        (c == 'O' ? v < 1 || v > 1000000 : v > UINT32_MAX)) {
        if (c == 'O')
            cli_error("report: --ops wants an integer from 1 to 1000000 or 'all', not '%s'", arg);
        else
            cli_error("report: --ops-offset wants an integer from 0 to %u, not '%s'", UINT32_MAX,
                      arg);
        return CLI_EXIT_USAGE;
    }
    if (c == 'O') {
        req->ops_limit = (uint32_t)v;
        *given = true;
    } else {
        req->ops_offset = (uint32_t)v;
    }
    return CLI_CONTINUE;
}

static uint32_t cli_report_top_n; /* --top: rows of the Steps and Throughput tables */

/* Where the report comes from: a session of the daemon, or trace files (--offline). */
struct cli_report_src {
    bool offline;       /* --offline */
    bool cpu_ops;       /* --cpu-ops */
    const char *by;     /* --by launcher|module|callsite, NULL: none */
    const char *not_by; /* an option given that --by has no use for, NULL: none */
    const char *html;   /* --html FILE, NULL: none */
    FILE *out;          /* where --html writes (cli_outfile), set once it is open */
    char *session;      /* --html: the session as typed, for its stacks ("1" offline) */
    bool no_flame;      /* --no-flame */
};

/*
 * report --by: the grouping by (launcher or module) of session (an id or
 * name), of the entries that match req's filters.
 */
static int cli_report_by_run(struct cli_ctx *ctx, const char *by, char *session,
                             const struct proto_request *req)
{
    return strcmp(by, "module") == 0
               ? cli_report_by_module(ctx, session, req->top, &req->analysis)
               : cli_report_by_launcher(ctx, session, req->top, &req->analysis);
}

/* --by launcher or module: a grouping of the entries of its own; callsite is the report's. */
static bool cli_report_grouped(const struct cli_report_src *src)
{
    return src->by != NULL && strcmp(src->by, "callsite") != 0;
}

static int cli_report_by(const char *arg, const char **by)
{
    if (strcmp(arg, "launcher") != 0 && strcmp(arg, "module") != 0 &&
        strcmp(arg, "callsite") != 0) {
        cli_error("report: --by wants launcher, module or callsite, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    *by = arg;
    return CLI_CONTINUE;
}

/* --html FILE: FILE, or stdout for "-"; the file itself is opened once the options are read. */
static int cli_report_html_opt(const char *arg, struct cli_report_src *src)
{
    src->html = strcmp(arg, "-") == 0 ? NULL : arg;
    src->out = stdout;
    return CLI_CONTINUE;
}

static int cli_report_opts(struct cli_ctx *ctx, int argc, char **argv, struct proto_request *req,
                           struct cli_report_src *src)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"top", required_argument, NULL, 'n'},
                                         {"comm-min-ratio", required_argument, NULL, 'r'},
                                         {"mem-threshold", required_argument, NULL, 'm'},
                                         {"ops", required_argument, NULL, 'O'},
                                         {"ops-offset", required_argument, NULL, 'K'},
                                         {"rank", required_argument, NULL, 'R'},
                                         {"step", required_argument, NULL, 'T'},
                                         {"device", required_argument, NULL, 'D'},
                                         {"category", required_argument, NULL, 'C'},
                                         {"wide", no_argument, NULL, 'W'},
                                         {"offline", no_argument, NULL, 'F'},
                                         {"cpu-ops", no_argument, NULL, 'P'},
                                         {"by", required_argument, NULL, 'B'},
                                         {"html", required_argument, NULL, 'H'},
                                         {"no-bars", no_argument, NULL, 'N'},
                                         {"no-flame", no_argument, NULL, 'L'},
                                         {NULL, 0, NULL, 0}};
    bool ops_given = false, no_bars = false;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "n:r:m:", opts, NULL)) != -1) {
        rc = CLI_CONTINUE;
        if (c == 'r' || c == 'm' || c == 'O' || c == 'K')
            src->not_by = c == 'r'   ? "--comm-min-ratio"
                          : c == 'm' ? "--mem-threshold"
                          : c == 'O' ? "--ops"
                                     : "--ops-offset";
        if (c == 'n')
            rc = cli_report_top(optarg, req);
        else if (c == 'r')
            rc = cli_report_ratio(optarg, req);
        else if (c == 'm')
            rc = cli_report_threshold(optarg, req);
        else if (c == 'O' || c == 'K')
            rc = cli_report_page(c, optarg, req, &ops_given);
        else if (c == 'R' || c == 'T' || c == 'D' || c == 'C')
            rc = cli_report_ranks_opt(c == 'R'   ? "rank"
                                      : c == 'T' ? "step"
                                      : c == 'D' ? "device"
                                                 : "category",
                                      optarg, req) == 0
                     ? CLI_CONTINUE
                     : CLI_EXIT_USAGE;
        else if (c == 'W')
            cli_view_set_wide(true), rc = CLI_CONTINUE;
        else if (c == 'F')
            src->offline = true, rc = CLI_CONTINUE;
        else if (c == 'P')
            src->cpu_ops = true, rc = CLI_CONTINUE;
        else if (c == 'B')
            rc = cli_report_by(optarg, &src->by);
        else if (c == 'H')
            rc = cli_report_html_opt(optarg, src);
        else if (c == 'N')
            no_bars = true, rc = CLI_CONTINUE;
        else if (c == 'L')
            src->no_flame = true, rc = CLI_CONTINUE;
        else
            rc = cli_common_opt(ctx, c, argv);
        if (rc != CLI_CONTINUE)
            return rc;
    }
    if (src->by != NULL && src->not_by != NULL) {
        /* the groupings have no ops table, no comm section and no hotspots */
        cli_error("report: %s does not apply to --by %s (its tables take --top N and the "
                  "filters --rank, --step, --device, --category)",
                  src->not_by, src->by);
        return CLI_EXIT_USAGE;
    }
    if (src->by != NULL && strcmp(src->by, "callsite") == 0 &&
        (req->analysis.steps || req->analysis.device != NULL || req->analysis.category != NULL)) {
        cli_error("report: --by callsite does not take --step, --device or --category (call "
                  "sites count whole runs; --rank applies)");
        return CLI_EXIT_USAGE;
    }
    if (src->no_flame && src->out == NULL) {
        cli_error("report: --no-flame goes with --html");
        return CLI_EXIT_USAGE;
    }
    if (src->out != NULL && (ctx->json || src->by != NULL)) {
        cli_error("report: --html does not go with %s", ctx->json ? "--json" : "--by");
        return CLI_EXIT_USAGE;
    }
    cli_bars_set(no_bars, ctx->json);
    if (req->ops_offset > 0 && req->ops_limit == 0) {
        cli_error("report: --ops-offset needs --ops N");
        return CLI_EXIT_USAGE;
    }
    /* A table of every op of a session with 100,000 of them helps nobody (and its reply
     * could pass the 64 MiB a reply may have): the table shows the first 1,000. */
    if (!ops_given && !ctx->json)
        req->ops_limit = CLI_REPORT_OPS;
    return CLI_CONTINUE;
}

/* ---- human output ---------------------------------------------------------- */

static void cli_report_id_name(const msgpack_object *s, char *buf, size_t size)
{
    char id[32], name[300];

    cli_obj_text(cli_obj_get(s, "id"), id, sizeof(id));
    cli_obj_text(cli_obj_get(s, "name"), name, sizeof(name));
    snprintf(buf, size, "%s (%s)", id, name);
}

static const struct cli_view_col cli_report_session_cols[] = {
    {"session", NULL, CLI_VIEW_TEXT, 0, cli_report_id_name},
    {"state", NULL, CLI_VIEW_TEXT, 0, cli_view_state},
    {"processes", "processes", CLI_VIEW_TEXT, 0, NULL},
    {"devices", "devices", CLI_VIEW_TEXT, 0, NULL},
    {"entries", "entries", CLI_VIEW_TEXT, 0, NULL},
    {"dropped", "dropped", CLI_VIEW_TEXT, 0, NULL},
    {"total", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"span", "span_ns", CLI_VIEW_DURATION, 0, NULL},
};

/*
 * An ops row's calls: every call made, then what the producers did not send
 * as entries, "(N counted only)" for the calls they counted by design
 * (counted_calls: TRACECTL_MPI_P2P) and "(N dropped)" for the entries they
 * dropped (dropped_calls: full ring, daemon away), so that the column is
 * exact even when detail was lost (the time, TOTAL, is the stored one).
 */
static void cli_report_calls_cell(const msgpack_object *row, char *buf, size_t size)
{
    uint64_t calls = 0, dropped = 0, counted = 0;
    unsigned long long all;

    cli_obj_u64(cli_obj_get(row, "calls"), &calls);
    cli_obj_u64(cli_obj_get(row, "dropped_calls"), &dropped);
    cli_obj_u64(cli_obj_get(row, "counted_calls"), &counted);
    all = (unsigned long long)calls + dropped + counted;
    if (counted > 0 && dropped > 0)
        snprintf(buf, size, "%llu (%llu counted only, %llu dropped)", all,
                 (unsigned long long)counted, (unsigned long long)dropped);
    else if (counted > 0)
        snprintf(buf, size, "%llu (%llu counted only)", all, (unsigned long long)counted);
    else if (dropped > 0)
        snprintf(buf, size, "%llu (%llu dropped)", all, (unsigned long long)dropped);
    else
        snprintf(buf, size, "%llu", all);
}

static const struct cli_view_col cli_report_ops_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"CATEGORY", "category", CLI_VIEW_TEXT, 10, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, cli_report_calls_cell},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"AVG", "avg_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MIN", "min_ns", CLI_VIEW_DURATION, 0, NULL},
    {"P50", "p50_ns", CLI_VIEW_DURATION, 0, NULL},
    {"P95", "p95_ns", CLI_VIEW_DURATION, 0, NULL},
    {"P99", "p99_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MAX", "max_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
    {"MEM", "mem_bytes", CLI_VIEW_BYTES, 0, NULL},
};

static const struct cli_view_col cli_report_slowest_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"RANK", "rank", CLI_VIEW_COUNT, 0, NULL},
    {"DEVICE", "device", CLI_VIEW_TEXT, 16, NULL},
    {"STEP", "step", CLI_VIEW_COUNT, 0, NULL},
    {"DURATION", "dur_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MEM", "mem_bytes", CLI_VIEW_BYTES, 0, NULL},
    {"OUT_SHAPE", "out_shape", CLI_VIEW_TEXT, 24, NULL},
    {"IN_SHAPES", "in_shapes", CLI_VIEW_TEXT, 48, NULL},
};

/* Hotspots are entries too, listed by size: MEM comes first. */
static const struct cli_view_col cli_report_hotspot_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"RANK", "rank", CLI_VIEW_COUNT, 0, NULL},
    {"DEVICE", "device", CLI_VIEW_TEXT, 16, NULL},
    {"STEP", "step", CLI_VIEW_COUNT, 0, NULL},
    {"MEM", "mem_bytes", CLI_VIEW_BYTES, 0, NULL},
    {"DURATION", "dur_ns", CLI_VIEW_DURATION, 0, NULL},
    {"OUT_SHAPE", "out_shape", CLI_VIEW_TEXT, 24, NULL},
    {"IN_SHAPES", "in_shapes", CLI_VIEW_TEXT, 48, NULL},
};

static const struct cli_view_col cli_report_devices_cols[] = {
    {"DEVICE", "device", CLI_VIEW_TEXT, 24, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MEM", "mem_bytes", CLI_VIEW_BYTES, 0, NULL},
};

static const struct cli_view_col cli_report_imbalance_cols[] = {
    {"devices", "devices", CLI_VIEW_TEXT, 0, NULL},
    {"total", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"ideal", "ideal_ns", CLI_VIEW_DURATION, 0, NULL},
    {"max", "max_ns", CLI_VIEW_DURATION, 0, NULL},
    {"ratio", "ratio", CLI_VIEW_SHARE, 0, NULL},
    {"slowest device", "slowest_device", CLI_VIEW_TEXT, 0, NULL},
};

static const struct cli_view_col cli_report_comm_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
};

/*
 * A clock figure of ns in µs below 1 ms and in ms above, with a sign when
 * signed, to the µs (an offset of seconds still shows its µs): "-2000.004 ms",
 * "3.2 µs". "-": nil (not measured).
 */
static void cli_report_clock_ns(const msgpack_object *v, bool sign, char *buf, size_t size)
{
    double ns;

    if (v == NULL || cli_obj_is_nil(v) || cli_obj_f64(v, &ns) != 0 || !isfinite(ns))
        snprintf(buf, size, "-");
    else if (fabs(ns) < 1e6)
        snprintf(buf, size, sign ? "%+.1f µs" : "%.1f µs", ns / 1e3);
    else
        snprintf(buf, size, sign ? "%+.3f ms" : "%.3f ms", ns / 1e6);
}

static void cli_report_offset_cell(const msgpack_object *row, char *buf, size_t size)
{
    cli_report_clock_ns(cli_obj_get(row, "offset_ns"), true, buf, size);
}

static void cli_report_bound_cell(const msgpack_object *row, char *buf, size_t size)
{
    cli_report_clock_ns(cli_obj_get(row, "bound_ns"), false, buf, size);
}

static void cli_report_drift_cell(const msgpack_object *row, char *buf, size_t size)
{
    const msgpack_object *v = cli_obj_get(row, "drift_ppm");
    double ppm;

    if (v == NULL || cli_obj_is_nil(v) || cli_obj_f64(v, &ppm) != 0 || !isfinite(ppm))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%+.1f ppm", ppm);
}

/* What BOUND is (bound_source): the probes', cut by collectives, widened; - on the home's row. */
static void cli_report_source_cell(const msgpack_object *row, char *buf, size_t size)
{
    const msgpack_object *v = cli_obj_get(row, "bound_source");

    if (v == NULL || v->type != MSGPACK_OBJECT_STR)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.*s", (int)v->via.str.size, v->via.str.ptr);
}

/* The hosts of a session that spans hosts (the home's report; proto/PROTOCOL.md "hosts"). */
static const struct cli_view_col cli_report_hosts_cols[] = {
    {"HOST", "host", CLI_VIEW_TEXT, 24, NULL},
    {"STATE", "state", CLI_VIEW_TEXT, 0, NULL},
    {"RANKS", "ranks", CLI_VIEW_COUNT, 0, NULL},
    {"PROCESSES", "processes", CLI_VIEW_COUNT, 0, NULL},
    {"ENTRIES", "entries", CLI_VIEW_COUNT, 0, NULL},
    {"DROPPED", "dropped", CLI_VIEW_COUNT, 0, NULL},
    {"SNAPSHOT AGE", "snapshot_age_ns", CLI_VIEW_DURATION, 0, NULL},
    {"OFFSET", NULL, CLI_VIEW_COUNT, 0, cli_report_offset_cell},
    {"BOUND", NULL, CLI_VIEW_COUNT, 0, cli_report_bound_cell},
    {"FROM", NULL, CLI_VIEW_TEXT, 0, cli_report_source_cell},
    {"DRIFT", NULL, CLI_VIEW_COUNT, 0, cli_report_drift_cell},
    {"VIOLATIONS", "violations", CLI_VIEW_COUNT, 0, NULL},
    {"CUTS", "refined", CLI_VIEW_COUNT, 0, NULL},
};

static int cli_report_hosts(FILE *f, const msgpack_object *rows)
{
    int rc;

    fputs("\nHosts\n", f);
    rc = cli_view_table(f, CLI_REPORT_INDENT, cli_report_hosts_cols,
                        CLI_REPORT_NCOLS(cli_report_hosts_cols), rows);
    if (rc == 0)
        fprintf(f,
                "%sOFFSET: a host's clock minus the home's now, within BOUND, FROM the probes, "
                "collectives that narrowed it or a contradiction that widened it; DRIFT: its "
                "rate against the home's over the last minute (-: not measured yet); CUTS: "
                "collectives that refined its clock\n",
                CLI_REPORT_INDENT);
    return rc;
}

/* The late-rank analysis across hosts (proto/PROTOCOL.md "hosts_late"). */
static const struct cli_view_col cli_report_late_cols[] = {
    {"RANK", "rank", CLI_VIEW_COUNT, 0, NULL},
    {"HOST", "host", CLI_VIEW_TEXT, 24, NULL},
    {"COLLECTIVES", "collectives", CLI_VIEW_COUNT, 0, NULL},
    {"LAST", "last", CLI_VIEW_COUNT, 0, NULL},
    {"CAUSED", "caused_ns", CLI_VIEW_DURATION, 0, NULL},
    {"±", "caused_bound_ns", CLI_VIEW_DURATION, 0, NULL},
    {"WAITED", "waited_ns", CLI_VIEW_DURATION, 0, NULL},
    {"±", "waited_bound_ns", CLI_VIEW_DURATION, 0, NULL},
    {"LATE STEPS", "late_steps", CLI_VIEW_COUNT, 0, NULL},
};

static int cli_report_hosts_late(FILE *f, const msgpack_object *late)
{
    const msgpack_object *clock = cli_obj_get(late, "clock");
    const msgpack_object *verdict = cli_obj_get(late, "verdict");
    const msgpack_object *ranks = cli_obj_get(late, "ranks");

    fputs("\nLate ranks across hosts", f);
    if (clock != NULL && clock->type == MSGPACK_OBJECT_STR)
        fprintf(f, " (times on %.*s's clock; ± each figure's clock bound)",
                (int)clock->via.str.size, clock->via.str.ptr);
    fputc('\n', f);
    if (verdict != NULL && verdict->type == MSGPACK_OBJECT_STR)
        fprintf(f, "%s%.*s\n", CLI_REPORT_INDENT, (int)verdict->via.str.size, verdict->via.str.ptr);
    if (ranks == NULL)
        return 0;
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_late_cols,
                          CLI_REPORT_NCOLS(cli_report_late_cols), ranks);
}

static int cli_report_session(FILE *f, const msgpack_object *s)
{
    int rc = cli_view_fields(f, "", cli_report_session_cols,
                             CLI_REPORT_NCOLS(cli_report_session_cols), s);

    if (rc == 0)
        cli_view_cut_note(f, "", s);
    return rc;
}

/*
 * The ops table, and when producers dropped entries of some op, or counted
 * calls without entries, a line saying what the CALLS notes mean: calls
 * exact, the other figures from the entries kept.
 */
static int cli_report_ops(FILE *f, const msgpack_object *ops)
{
    uint64_t dropped = 0, ns = 0, counted = 0, counted_ns = 0, v;
    int rc;

    fputs("Operations (by total time)\n", f);
    rc = cli_view_table(f, CLI_REPORT_INDENT, cli_report_ops_cols,
                        CLI_REPORT_NCOLS(cli_report_ops_cols), ops);
    for (uint32_t i = 0;
         ops != NULL && ops->type == MSGPACK_OBJECT_ARRAY && i < ops->via.array.size; i++) {
        const msgpack_object *row = &ops->via.array.ptr[i];

        if (cli_obj_u64(cli_obj_get(row, "dropped_calls"), &v) == 0)
            dropped += v;
        if (cli_obj_u64(cli_obj_get(row, "dropped_ns"), &v) == 0)
            ns += v;
        if (cli_obj_u64(cli_obj_get(row, "counted_calls"), &v) == 0)
            counted += v;
        if (cli_obj_u64(cli_obj_get(row, "counted_ns"), &v) == 0)
            counted_ns += v;
    }
    if (rc == 0 && counted > 0)
        fprintf(f,
                "%s(N counted only): calls counted in the process without an entry each"
                " (%llu, %.3f s in all; TRACECTL_MPI_P2P): CALLS are exact, the times and sizes"
                " are those of the entries kept\n",
                CLI_REPORT_INDENT, (unsigned long long)counted, (double)counted_ns / 1e9);
    if (rc == 0 && dropped > 0)
        fprintf(f,
                "%s(N dropped): calls whose entries the clients dropped (%llu, %.3f s in all):"
                " CALLS are exact, the times and sizes are those of the entries kept\n",
                CLI_REPORT_INDENT, (unsigned long long)dropped, (double)ns / 1e9);
    return rc;
}

static int cli_report_slowest(FILE *f, const msgpack_object *rows)
{
    fputs("Slowest calls\n", f);
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_slowest_cols,
                          CLI_REPORT_NCOLS(cli_report_slowest_cols), rows);
}

static int cli_report_memory(FILE *f, const msgpack_object *m)
{
    char peak[CLI_FMT_LEN], total[CLI_FMT_LEN];

    cli_view_format(cli_obj_get(m, "peak_bytes"), CLI_VIEW_BYTES, peak, sizeof(peak));
    cli_view_format(cli_obj_get(m, "total_bytes"), CLI_VIEW_BYTES, total, sizeof(total));
    fprintf(f, "Memory: peak %s, total %s\n", peak, total);
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_hotspot_cols,
                          CLI_REPORT_NCOLS(cli_report_hotspot_cols), cli_obj_get(m, "hotspots"));
}

static int cli_report_devices(FILE *f, const msgpack_object *rows)
{
    fputs("Devices\n", f);
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_devices_cols,
                          CLI_REPORT_NCOLS(cli_report_devices_cols), rows);
}

static int cli_report_imbalance(FILE *f, const msgpack_object *im)
{
    if (cli_obj_is_nil(im)) {
        fputs("Load imbalance: n/a (fewer than two devices)\n", f);
        return ferror(f) ? -EIO : 0;
    }
    fputs("Load imbalance\n", f);
    return cli_view_fields(f, CLI_REPORT_INDENT, cli_report_imbalance_cols,
                           CLI_REPORT_NCOLS(cli_report_imbalance_cols), im);
}

static int cli_report_comm(FILE *f, const msgpack_object *rows)
{
    fputs("Communication\n", f);
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_comm_cols,
                          CLI_REPORT_NCOLS(cli_report_comm_cols), rows);
}

static const struct {
    const char *key;
    int (*print)(FILE *f, const msgpack_object *section);
} cli_report_sections[] = {
    {"session", cli_report_session}, {"ops", cli_report_ops},
    {"slowest", cli_report_slowest}, {"memory", cli_report_memory},
    {"devices", cli_report_devices}, {"imbalance", cli_report_imbalance},
    {"comm", cli_report_comm},
};

/* See cli_report.h. */
int cli_report_filter(FILE *f, const msgpack_object *report)
{
    const msgpack_object *m = cli_obj_get(report, "filter"), *v;
    const char *sep = "Filter: ";
    char buf[4096 + 1], last[32];

    if (m == NULL || m->type != MSGPACK_OBJECT_MAP)
        return 0;
    if ((v = cli_obj_get(m, "ranks")) != NULL && v->type == MSGPACK_OBJECT_ARRAY) {
        fprintf(f, "%s%s ", sep, v->via.array.size == 1 ? "rank" : "ranks");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            cli_obj_text(&v->via.array.ptr[i], last, sizeof(last));
            fprintf(f, "%s%s", i > 0 ? "," : "", last);
        }
        sep = "; ";
    }
    if ((v = cli_obj_get(m, "steps")) != NULL && v->type == MSGPACK_OBJECT_ARRAY &&
        v->via.array.size == 2) {
        cli_obj_text(&v->via.array.ptr[0], buf, sizeof(buf));
        cli_obj_text(&v->via.array.ptr[1], last, sizeof(last));
        if (strcmp(buf, last) == 0)
            fprintf(f, "%sstep %s", sep, buf);
        else
            fprintf(f, "%ssteps %s..%s", sep, buf, last);
        sep = "; ";
    }
    for (int i = 0; i < 2; i++) {
        const char *key = i == 0 ? "device" : "category";

        if ((v = cli_obj_get(m, key)) == NULL)
            continue;
        cli_obj_text(v, buf, sizeof(buf));
        fprintf(f, "%s%s %s", sep, key, buf);
        sep = "; ";
    }
    fputs(" (every section counts only these entries)\n", f);
    /* a home's filtered report of a session that spans hosts: this host's entries only */
    m = cli_obj_get(report, "filter_hosts");
    v = cli_obj_get(m, "left_out");
    if (v != NULL && v->type == MSGPACK_OBJECT_ARRAY && v->via.array.size > 0) {
        const msgpack_object *c = cli_obj_get(m, "counted");

        fputs("Hosts: the filters cover ", f);
        for (uint32_t i = 0; c != NULL && c->type == MSGPACK_OBJECT_ARRAY && i < c->via.array.size;
             i++) {
            cli_obj_text(&c->via.array.ptr[i], buf, sizeof(buf));
            fprintf(f, "%s%s", i > 0 ? ", " : "", buf);
        }
        fputs("'s entries only; not ", f);
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            cli_obj_text(&v->via.array.ptr[i], buf, sizeof(buf));
            fprintf(f, "%s%s", i > 0 ? ", " : "", buf);
        }
        fputs(" (entries stay on their hosts: ask each host's tracectl with the same filters)\n",
              f);
    }
    /* ... but for the rows of the filter's ranks the members sent in their snapshots */
    v = cli_obj_get(m, "ranks_rows");
    if (v != NULL && v->type == MSGPACK_OBJECT_ARRAY && v->via.array.size > 0) {
        fputs("Ranks: the Ranks table lists these ranks' rows of ", f);
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            cli_obj_text(&v->via.array.ptr[i], buf, sizeof(buf));
            fprintf(f, "%s%s", i > 0 ? ", " : "", buf);
        }
        fputs(" too, from their snapshots; every other section is this host's only\n", f);
    }
    fputc('\n', f);
    return ferror(f) ? -EIO : 0;
}

int cli_report_print(FILE *f, const msgpack_object *report)
{
    int rc = 0;

    if (report->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    if ((rc = cli_report_filter(f, report)) != 0)
        return rc;
    if ((rc = cli_report_ranks_verdict(f, report)) != 0)
        return rc;
    for (size_t i = 0; i < CLI_REPORT_NCOLS(cli_report_sections) && rc == 0; i++) {
        const msgpack_object *section = cli_obj_get(report, cli_report_sections[i].key);
        const msgpack_object *total = cli_obj_get(report, "ops_total");

        if (i > 0)
            fputc('\n', f);
        rc = cli_report_sections[i].print(f, section);
        if (rc == 0 && i == 0 && cli_obj_get(report, "hosts") != NULL)
            rc = cli_report_hosts(f, cli_obj_get(report, "hosts"));
        if (rc == 0 && i == 0 && cli_obj_get(report, "hosts_late") != NULL)
            rc = cli_report_hosts_late(f, cli_obj_get(report, "hosts_late"));
        /* A page of ops (--ops): say which, and how to see the rest. */
        if (rc == 0 && strcmp(cli_report_sections[i].key, "ops") == 0 && total != NULL &&
            total->type == MSGPACK_OBJECT_POSITIVE_INTEGER && section != NULL &&
            section->type == MSGPACK_OBJECT_ARRAY && section->via.array.size < total->via.u64)
            fprintf(f, "%s(%u of %llu operations shown: tracectl report --ops all)\n",
                    CLI_REPORT_INDENT, section->via.array.size, (unsigned long long)total->via.u64);
    }
    if (rc == 0)
        rc = cli_report_ranks_print(f, report, cli_report_top_n);
    if (rc == 0)
        rc = cli_report_mpi_print(f, report, cli_report_top_n);
    return rc;
}

/* ---- the command ------------------------------------------------------------ */

static int cli_report_human(const msgpack_object *report)
{
    int rc = cli_report_print(stdout, report);

    if (rc == -EINVAL) {
        cli_error("bad reply from the daemon: the report is not a map");
        return CLI_EXIT_ERROR;
    }
    return cli_print_status(rc);
}

/* True when req restricts the report (--rank, --step, --device, --category). */
static bool cli_report_filtered(const struct proto_request *req)
{
    const struct proto_analysis *an = &req->analysis;

    return an->n_ranks > 0 || an->steps || an->device != NULL || an->category != NULL;
}

/*
 * The page of report, with the session's flame graphs: their stacks are
 * every entry's, so a filtered report's page goes without them (and says so).
 */
static int cli_report_html(struct cli_ctx *ctx, const struct cli_report_src *src,
                           const struct proto_request *req, const msgpack_object *report)
{
    struct cli_report_flame fl = {0};
    struct cli_ctx sub = *ctx;
    int rc;

    if (src->no_flame)
        fl.note = "none asked for (report --html --no-flame)";
    else if (cli_report_filtered(req))
        fl.note = "the flame graphs count every entry: a filtered report has none";
    else if ((rc = cli_report_flame_read(&sub, src->session, &fl)) != CLI_EXIT_OK)
        return rc;
    rc = cli_report_html_write(src->out, report, &fl);
    cli_report_flame_free(&fl);

    if (rc == -EINVAL) {
        cli_error("bad reply from the daemon: the report is not a map");
        return CLI_EXIT_ERROR;
    }
    if (rc != 0) {
        cli_error("report: cannot write the HTML page: %s", strerror(-rc));
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}

/* Asks for the report and prints it (or its page, --html). Returns an exit code. */
static int cli_report_call(struct cli_ctx *ctx, const struct proto_request *req,
                           const struct cli_report_src *src)
{
    struct cli_conn conn;
    const msgpack_object *res;
    int rc = cli_call(ctx, PROTO_REPORT, req, &conn, &res);

    if (rc != CLI_EXIT_OK)
        return rc;
    rc = src->out != NULL  ? cli_report_html(ctx, src, req, res)
         : src->by != NULL ? cli_report_mpi_sites(ctx->json, res, cli_report_top_n)
         : ctx->json       ? cli_print_json(res)
                           : cli_report_human(res);
    cli_conn_close(&conn);
    return rc;
}

/* True when arg is a trace file to report on without --offline: a file named *.json or *.gz. */
static bool cli_report_is_trace(const char *arg)
{
    size_t n = strlen(arg);
    struct stat st;

    return ((n > 5 && strcmp(arg + n - 5, ".json") == 0) ||
            (n > 3 && strcmp(arg + n - 3, ".gz") == 0)) &&
           stat(arg, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * The files' report through a private daemon (cli_offline): import them as
 * `tracectl import --quiet` does, then report on the session it made, the
 * only one of a fresh data dir, so id 1. Returns an exit code.
 */
static int cli_report_offline(struct cli_ctx *ctx, char **files, int n,
                              const struct cli_report_src *src, struct proto_request *req)
{
    struct cli_offline off;
    struct cli_ctx sub = *ctx;
    char **args = calloc((size_t)n + 5, sizeof(*args));
    int k = 0, rc;

    if (args == NULL) {
        cli_error("report: out of memory");
        return CLI_EXIT_ERROR;
    }
    args[k++] = "import";
    args[k++] = "--quiet";
    if (src->cpu_ops)
        args[k++] = "--cpu-ops";
    args[k++] = "--";
    for (int i = 0; i < n; i++)
        args[k++] = files[i];
    if ((rc = cli_offline_start(&off)) == CLI_EXIT_OK) {
        sub.socket = off.sock;
        sub.json = false;
        sub.cmd = "import";
        optind = 0; /* a fresh getopt for import's own argv, as cli_dispatch does */
        rc = cli_import_run(&sub, k, args);
        if (rc == CLI_EXIT_NO_DAEMON)
            cli_offline_show_log(&off);
        if (rc == CLI_EXIT_OK) {
            char one[] = "1";
            struct cli_report_src one_src = *src;
            sub.json = ctx->json;
            sub.cmd = ctx->cmd;
            req->session.id = 1;
            req->session.name = NULL;
            one_src.session = one;
            rc = cli_report_grouped(src) ? cli_report_by_run(&sub, src->by, one, req)
                                         : cli_report_call(&sub, req, &one_src);
        }
        int stop = cli_offline_stop(&off);
        if (rc == CLI_EXIT_OK)
            rc = stop;
    }
    free(args);
    return rc;
}

static int cli_report_run_req(struct cli_ctx *ctx, int argc, char **argv, struct proto_request *r,
                              const struct cli_report_src *src);

int cli_report_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct cli_report_src src = {false, false, NULL, NULL, NULL, NULL, NULL, false};
    struct proto_request req;
    int rc;

    proto_request_init(&req);
    req.analysis.on = true;
    rc = cli_report_opts(ctx, argc, argv, &req, &src);
    cli_report_top_n = req.top;
    if (rc == CLI_CONTINUE && src.html != NULL) {
        /* the file is checked (and its temporary made) before the daemon is asked */
        struct cli_outfile out;
        if ((rc = cli_outfile_open(&out, src.html, "report")) == CLI_EXIT_OK) {
            src.out = out.f;
            rc = cli_outfile_close(&out, cli_report_run_req(ctx, argc, argv, &req, &src));
        }
    } else if (rc == CLI_CONTINUE) {
        rc = cli_report_run_req(ctx, argc, argv, &req, &src);
    }
    free(req.analysis.device);
    free(req.analysis.category);
    return rc;
}

static int cli_report_run_req(struct cli_ctx *ctx, int argc, char **argv, struct proto_request *r,
                              const struct cli_report_src *src)
{
    struct proto_request req = *r;
    struct cli_report_src named;
    char *arg;
    int rc;

    if (src->offline || (optind < argc && cli_report_is_trace(argv[optind]))) {
        if (optind >= argc) {
            cli_error("report: which files? (see 'tracectl report --help')");
            return CLI_EXIT_USAGE;
        }
        return cli_report_offline(ctx, &argv[optind], argc - optind, src, &req);
    }
    if (src->cpu_ops) {
        cli_error("report: --cpu-ops applies to trace files only");
        return CLI_EXIT_USAGE;
    }
    if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE)
        return rc;
    if (cli_report_grouped(src))
        return cli_report_by_run(ctx, src->by, arg, &req);
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    named = *src;
    named.session = arg;
    return cli_report_call(ctx, &req, &named);
}
