/*
 * cli_report — `tracectl report` (see cli_report.h).
 *
 * Each section of the report map has a renderer in cli_report_sections[];
 * table-shaped sections are described by column specs (cli_view).
 */
#include "cli_report.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bytesize.h"
#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_view.h"

#define CLI_REPORT_NCOLS(a) (sizeof(a) / sizeof((a)[0]))
#define CLI_REPORT_INDENT   "  "
#define CLI_REPORT_OPS      1000 /* ops rows a table shows unless --ops says otherwise */

const char cli_report_usage[] =
    "Usage: tracectl report <id|name> [--top N] [--comm-min-ratio R]\n"
    "                       [--mem-threshold BYTES] [--ops N|all] [--ops-offset K]\n"
    "                       [--json]\n"
    "\n"
    "Shows the analysis report of one session: the session header, then the\n"
    "time per operation, the slowest calls, memory peak and hotspots, time per\n"
    "device, load imbalance across devices and communication. An all-digits\n"
    "argument is a session id; anything else names the newest session of that\n"
    "name. A live session is reported as far as it has been stored.\n"
    "\n"
    "Options:\n"
    "  -n, --top N                 slowest calls and memory hotspots to list\n"
    "                              (an integer >= 1; default 10)\n"
    "  -r, --comm-min-ratio R      hide communication ops whose share of the\n"
    "                              session's time is below R (0 to 1; default 0)\n"
    "  -m, --mem-threshold BYTES   list as hotspots only entries larger than this;\n"
    "                              plain bytes or with a suffix K, KiB, M, MiB, G,\n"
    "                              GiB (all 1024-based; default 0)\n"
    "      --ops N|all             operations to list, by total time (default: 1000\n"
    "                              in the table, all with --json); the communication\n"
    "                              list stops at N too\n"
    "      --ops-offset K          skip the first K operations (with --ops N)\n"
    "  -j, --json                  print the report map as JSON\n"
    "      --socket PATH           the daemon's socket (see tracectl --help)\n"
    "  -h, --help                  show this help\n"
    "\n"
    "Example:\n"
    "  tracectl report job-42 --top 5 --comm-min-ratio 0.01 --mem-threshold 64MiB\n"
    "  tracectl report 7 --json | jq '.ops[0]'\n";

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

static int cli_report_opts(struct cli_ctx *ctx, int argc, char **argv, struct proto_request *req)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"top", required_argument, NULL, 'n'},
                                         {"comm-min-ratio", required_argument, NULL, 'r'},
                                         {"mem-threshold", required_argument, NULL, 'm'},
                                         {"ops", required_argument, NULL, 'O'},
                                         {"ops-offset", required_argument, NULL, 'K'},
                                         {NULL, 0, NULL, 0}};
    bool ops_given = false;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "n:r:m:", opts, NULL)) != -1) {
        if (c == 'n')
            rc = cli_report_top(optarg, req);
        else if (c == 'r')
            rc = cli_report_ratio(optarg, req);
        else if (c == 'm')
            rc = cli_report_threshold(optarg, req);
        else if (c == 'O' || c == 'K')
            rc = cli_report_page(c, optarg, req, &ops_given);
        else
            rc = cli_common_opt(ctx, c, argv);
        if (rc != CLI_CONTINUE)
            return rc;
    }
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
    {"state", "state", CLI_VIEW_TEXT, 0, NULL},
    {"processes", "processes", CLI_VIEW_TEXT, 0, NULL},
    {"devices", "devices", CLI_VIEW_TEXT, 0, NULL},
    {"entries", "entries", CLI_VIEW_TEXT, 0, NULL},
    {"dropped", "dropped", CLI_VIEW_TEXT, 0, NULL},
    {"total", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"span", "span_ns", CLI_VIEW_DURATION, 0, NULL},
};

static const struct cli_view_col cli_report_ops_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"CATEGORY", "category", CLI_VIEW_TEXT, 10, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
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

static int cli_report_session(FILE *f, const msgpack_object *s)
{
    return cli_view_fields(f, "", cli_report_session_cols,
                           CLI_REPORT_NCOLS(cli_report_session_cols), s);
}

static int cli_report_ops(FILE *f, const msgpack_object *ops)
{
    fputs("Operations (by total time)\n", f);
    return cli_view_table(f, CLI_REPORT_INDENT, cli_report_ops_cols,
                          CLI_REPORT_NCOLS(cli_report_ops_cols), ops);
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

int cli_report_print(FILE *f, const msgpack_object *report)
{
    int rc = 0;

    if (report->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    for (size_t i = 0; i < CLI_REPORT_NCOLS(cli_report_sections) && rc == 0; i++) {
        const msgpack_object *section = cli_obj_get(report, cli_report_sections[i].key);
        const msgpack_object *total = cli_obj_get(report, "ops_total");

        if (i > 0)
            fputc('\n', f);
        rc = cli_report_sections[i].print(f, section);
        /* A page of ops (--ops): say which, and how to see the rest. */
        if (rc == 0 && strcmp(cli_report_sections[i].key, "ops") == 0 && total != NULL &&
            total->type == MSGPACK_OBJECT_POSITIVE_INTEGER && section != NULL &&
            section->type == MSGPACK_OBJECT_ARRAY && section->via.array.size < total->via.u64)
            fprintf(f, "%s(%u of %llu operations shown: tracectl report --ops all)\n",
                    CLI_REPORT_INDENT, section->via.array.size, (unsigned long long)total->via.u64);
    }
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

int cli_report_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *res;
    char *arg;
    int rc;

    proto_request_init(&req);
    if ((rc = cli_report_opts(ctx, argc, argv, &req)) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    rc = cli_call(ctx, PROTO_REPORT, &req, &conn, &res);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = ctx->json ? cli_print_json(res) : cli_report_human(res);
    cli_conn_close(&conn);
    return rc;
}
