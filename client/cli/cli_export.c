/*
 * cli_export — `tracectl export` (see cli_export.h).
 */
#include "cli_export.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_export_chrome.h"
#include "cli_export_collapsed.h"
#include "cli_export_csv.h"
#include "cli_export_perfetto.h"
#include "cli_export_otf2.h"
#include "cli_obj.h"
#include "cli_outfile.h"

const char cli_export_usage[] =
    "Usage: tracectl export <id|name> --format FMT [-o FILE]\n"
    "                       [--weight time|memory|calls] [--stacks device|launcher]\n"
    "                       [--no-args]\n"
    "\n"
    "Writes every entry of one session in a format other tools read. The\n"
    "entries stream from the daemon, so memory stays small whatever the size\n"
    "of the session. An all-digits argument is a session id; anything else\n"
    "names the newest session of that name. A live session is exported as far\n"
    "as it has been stored.\n"
    "\n"
    "Formats:\n"
    "  csv        a header, then one row per entry (rank, pid, host, step, op,\n"
    "             category, device, start_ns, dur_ns, elements, mem_bytes,\n"
    "             out_shape, in_shapes, then the ext fields peer, tag, comm,\n"
    "             seq, comm_size: empty where an entry has none); RFC 4180\n"
    "             quoting and CRLF line ends\n"
    "  collapsed  flame-graph collapsed stacks, one line per distinct\n"
    "             \"<session>;<device>;<op> <weight>\" (device \"unknown\" when\n"
    "             none), sorted; for flamegraph.pl, speedscope, inferno.\n"
    "             Nested regions (tc_push, Python's nested `with`) put their\n"
    "             enclosing ops before <op> and weigh their self time\n"
    "  chrome     Chrome trace-event JSON: one process per rank, one thread per\n"
    "             track, one complete event per entry (an instant for one of\n"
    "             duration 0); for chrome://tracing, ui.perfetto.dev, speedscope\n"
    "  perfetto   a binary Perfetto trace (.pftrace): one process track per\n"
    "             rank, its tracks under it, one slice per entry (an instant\n"
    "             for one of duration 0); for ui.perfetto.dev and trace_processor\n"
    "  otf2       an OTF2 archive in the directory -o DIR (DIR/traces.otf2):\n"
    "             a location per track, a region per op, Enter/Leave per\n"
    "             entry, MPI collective and point-to-point records with\n"
    "             their communicators; for Vampir and otf2-print (only when\n"
    "             built with libotf2)\n"
    "\n"
    "Entries stay on the host that recorded them: at a home daemon (--peer-listen)\n"
    "a session that spans hosts exports the home's entries only, and says so on\n"
    "stderr; export on each host for its part (docs/hosts.md).\n"
    "\n"
    "A track of chrome and perfetto is (rank, device, stream): the stream the\n"
    "producer gave (a CUDA stream, a thread), as in \"gpu:0 stream 7\". Entries\n"
    "that overlap partially go on further lanes of their track (\"gpu:0 #2\"),\n"
    "so that a viewer shows every duration as recorded; an entry inside another\n"
    "shows as its child. An entry whose duration is its self time (profiler\n"
    "mode, import --cpu-ops) is drawn over its whole interval, children\n"
    "included (its ext span), so that it covers them.\n"
    "\n"
    "Options:\n"
    "  -f, --format FMT        csv, collapsed, chrome, perfetto or otf2 (required)\n"
    "  -o, --output FILE       write to FILE instead of standard output, as a\n"
    "                          shell's > would: a regular FILE is replaced\n"
    "                          only once the export is complete (keeping its\n"
    "                          mode), a device or FIFO is written into, a\n"
    "                          symbolic link is followed, a directory refused\n"
    "  -w, --weight W          collapsed only: what a stack weighs: time (µs:\n"
    "                          the sum of max(1, round(dur_ns / 1000)); the\n"
    "                          default), memory (the sum of mem_bytes) or calls\n"
    "  -s, --stacks S          collapsed only: device (the default, above) or\n"
    "                          launcher: \"<session>;rank <R>;<cpu op>;<kernel>\",\n"
    "                          the CPU op that launched each kernel of an\n"
    "                          imported Kineto trace (entries without one:\n"
    "                          \"<session>;rank <R>;<op>\")\n"
    "      --no-args           chrome only: events without their args (step,\n"
    "                          shapes...): speedscope names each frame by its\n"
    "                          name and args together, so that with args every\n"
    "                          step and shape is a frame of its own\n"
    "      --socket PATH       the daemon's socket (see tracectl --help)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Example:\n"
    "  tracectl export job-42 --format perfetto -o job-42.pftrace\n"
    "  tracectl export job-42 --format chrome -o job-42.json\n"
    "  tracectl export job-42 --format chrome --no-args -o job-42.json   # speedscope\n"
    "  tracectl export job-42 --format otf2 -o job-42.otf2.d\n"
    "  tracectl export 7 --format collapsed --weight memory | flamegraph.pl > mem.svg\n"
    "  tracectl export 7 --format collapsed --stacks launcher | flamegraph.pl > k.svg\n"
    "  tracectl export 7 --format csv > entries.csv\n";

static const struct cli_export_format *const cli_export_formats[] = {
    &cli_export_csv,      &cli_export_collapsed, &cli_export_chrome,
    &cli_export_perfetto, &cli_export_otf2,
};

#define CLI_EXPORT_NFORMATS (sizeof(cli_export_formats) / sizeof(cli_export_formats[0]))

struct cli_export_opts {
    const struct cli_export_format *fmt;
    const char *path; /* NULL: standard output */
    enum cli_export_weight weight;
    bool weighted; /* --weight was given */
    enum cli_export_stacks stacks;
    bool stacked; /* --stacks was given */
    bool no_args; /* --no-args */
};

/* ---- options ------------------------------------------------------------- */

static int cli_export_format_opt(const char *arg, struct cli_export_opts *o)
{
    for (size_t i = 0; i < CLI_EXPORT_NFORMATS; i++) {
        if (strcmp(arg, cli_export_formats[i]->name) == 0) {
            o->fmt = cli_export_formats[i];
            return CLI_CONTINUE;
        }
    }
    cli_error("export: --format wants csv, collapsed, chrome, perfetto or otf2, not '%s'", arg);
    return CLI_EXIT_USAGE;
}

static int cli_export_weight_opt(const char *arg, struct cli_export_opts *o)
{
    static const char *const names[] = {[CLI_EXPORT_WEIGHT_TIME] = "time",
                                        [CLI_EXPORT_WEIGHT_MEMORY] = "memory",
                                        [CLI_EXPORT_WEIGHT_CALLS] = "calls"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(arg, names[i]) == 0) {
            o->weight = (enum cli_export_weight)i;
            o->weighted = true;
            return CLI_CONTINUE;
        }
    }
    cli_error("export: --weight wants time, memory or calls, not '%s'", arg);
    return CLI_EXIT_USAGE;
}

static int cli_export_stacks_opt(const char *arg, struct cli_export_opts *o)
{
    if (strcmp(arg, "device") == 0)
        o->stacks = CLI_EXPORT_STACKS_DEVICE;
    else if (strcmp(arg, "launcher") == 0)
        o->stacks = CLI_EXPORT_STACKS_LAUNCHER;
    else {
        cli_error("export: --stacks wants device or launcher, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    o->stacked = true;
    return CLI_CONTINUE;
}

/* After getopt: the combination of options must make sense. */
static int cli_export_check_opts(const struct cli_ctx *ctx, const struct cli_export_opts *o)
{
    if (ctx->json) {
        cli_error("export: --json does not apply (see --format)");
        return CLI_EXIT_USAGE;
    }
    if (o->fmt == NULL) {
        cli_error("export: missing --format (csv, collapsed, chrome, perfetto or otf2)");
        return CLI_EXIT_USAGE;
    }
    if (o->no_args && o->fmt != &cli_export_chrome) {
        cli_error("export: --no-args applies to --format chrome only");
        return CLI_EXIT_USAGE;
    }
    if ((o->weighted || o->stacked) && o->fmt != &cli_export_collapsed) {
        cli_error("export: --%s applies to --format collapsed only",
                  o->weighted ? "weight" : "stacks");
        return CLI_EXIT_USAGE;
    }
    if (o->fmt->directory && o->path == NULL) {
        cli_error("export: --format %s writes a directory: give it with -o DIR", o->fmt->name);
        return CLI_EXIT_USAGE;
    }
    if (o->path == NULL && o->fmt->binary && isatty(STDOUT_FILENO)) {
        cli_error("export: not writing a binary %s trace to a terminal (use -o FILE)",
                  o->fmt->name);
        return CLI_EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

static int cli_export_opts(struct cli_ctx *ctx, int argc, char **argv, struct cli_export_opts *o)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"format", required_argument, NULL, 'f'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"weight", required_argument, NULL, 'w'},
                                         {"stacks", required_argument, NULL, 's'},
                                         {"no-args", no_argument, NULL, 'A'},
                                         {NULL, 0, NULL, 0}};
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "f:o:w:s:", opts, NULL)) != -1) {
        if (c == 'f') {
            rc = cli_export_format_opt(optarg, o);
        } else if (c == 'w') {
            rc = cli_export_weight_opt(optarg, o);
        } else if (c == 's') {
            rc = cli_export_stacks_opt(optarg, o);
        } else if (c == 'A') {
            o->no_args = true;
            rc = CLI_CONTINUE;
        } else if (c == 'o') {
            o->path = strcmp(optarg, "-") == 0 ? NULL : optarg;
            rc = CLI_CONTINUE;
        } else {
            rc = cli_common_opt(ctx, c, argv);
        }
        if (rc != CLI_CONTINUE)
            return rc;
    }
    return cli_export_check_opts(ctx, o);
}

/* ---- the stream ---------------------------------------------------------- */

/* Copies a string field of an error map, with control characters made harmless. */
static void cli_export_err_field(const msgpack_object *map, const char *key, char *buf, size_t size)
{
    cli_obj_text(cli_obj_get(map, key), buf, size);
    for (char *p = buf; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
}

/* ["error", {code, message}] in the middle of the stream: the usual exit codes. */
static int cli_export_daemon_error(const struct cli_ctx *ctx, const msgpack_object *map)
{
    char code[64], message[512];

    cli_export_err_field(map, "code", code, sizeof(code));
    cli_export_err_field(map, "message", message, sizeof(message));
    if (strcmp(code, PROTO_E_NO_SESSION) == 0) {
        cli_error("unknown session '%s': %s", ctx->target, message);
        return CLI_EXIT_NO_SESSION;
    }
    cli_error("the daemon refused the request: %s: %s", code, message);
    return CLI_EXIT_REFUSED;
}

/* Maps a -errno of the stream or of a format to an exit code, with a message. */
static int cli_export_failure(const struct cli_outfile *out, int rc, const char *msg)
{
    if (rc == -EPROTO)
        cli_error("bad reply from the daemon: %s", msg[0] ? msg : "malformed export stream");
    else if (rc == -ECONNRESET)
        cli_error("the daemon closed the connection before the end of the export");
    else if (rc == -EIO)
        cli_error("cannot write %s: %s", out->path ? out->path : "the output", strerror(errno));
    else if (rc == -EINVAL)
        cli_error("bad reply from the daemon: a shape nested too deep");
    else
        cli_error("export failed: %s", strerror(-rc));
    return CLI_EXIT_ERROR;
}

/* Passes every row of a ["rows", [...]] chunk to the format. Returns 0 or -errno. */
static int cli_export_rows(struct cli_export *x, const struct cli_export_format *fmt,
                           const msgpack_object *rows, uint64_t *count, char *msg, size_t size)
{
    struct cli_export_row r;
    int rc;

    if (rows->type != MSGPACK_OBJECT_ARRAY) {
        snprintf(msg, size, "a rows message without an array of rows");
        return -EPROTO;
    }
    for (uint32_t i = 0; i < rows->via.array.size; i++) {
        if ((rc = cli_export_row_decode(&x->dict, &rows->via.array.ptr[i], &r, msg, size)) != 0 ||
            (rc = fmt->row(x, &r)) != 0)
            return rc;
    }
    *count += rows->via.array.size;
    return ferror(x->out) ? -EIO : 0;
}

/* Reads the messages after the header until "end". Returns an exit code. */
static int cli_export_loop(const struct cli_ctx *ctx, struct cli_conn *conn, struct cli_export *x,
                           const struct cli_export_format *fmt, const struct cli_outfile *out)
{
    char msg[256] = "";
    uint64_t count = 0, announced;
    const msgpack_object *o, *a;
    int rc;

    for (;;) {
        if ((rc = cli_conn_next(conn, &o, msg, sizeof(msg))) != 0)
            return cli_export_failure(out, rc, msg);
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
            return cli_export_failure(out, -EPROTO, "a message that is not [type, payload]");
        a = o->via.array.ptr;
        if (cli_obj_str_eq(&a[0], "error"))
            return cli_export_daemon_error(ctx, &a[1]);
        if (cli_obj_str_eq(&a[0], "end"))
            break;
        if (!cli_obj_str_eq(&a[0], "rows"))
            return cli_export_failure(out, -EPROTO, "an unexpected message in the export");
        if ((rc = cli_export_rows(x, fmt, &a[1], &count, msg, sizeof(msg))) != 0)
            return cli_export_failure(out, rc, msg);
    }
    if (cli_obj_u64(cli_obj_get(&a[1], "rows"), &announced) != 0 || announced != count) {
        snprintf(msg, sizeof(msg), "the end of the export counts other rows than were sent");
        return cli_export_failure(out, -EPROTO, msg);
    }
    if ((rc = fmt->end(x)) != 0)
        return cli_export_failure(out, rc, "");
    return CLI_EXIT_OK;
}

/* From the header on: dictionaries, begin, rows, end. Returns an exit code. */
static int cli_export_stream(const struct cli_ctx *ctx, struct cli_conn *conn,
                             const msgpack_object *header, const struct cli_export_opts *o,
                             const struct cli_outfile *out, void *arg)
{
    struct cli_export x = {.out = out->f,
                           .weight = o->weight,
                           .stacks = o->stacks,
                           .no_args = o->no_args,
                           .arg = arg,
                           .state = NULL,
                           .dir = o->fmt->directory ? o->path : NULL};
    char msg[256] = "";
    int rc = cli_export_dict_init(&x.dict, header, msg, sizeof(msg));

    if (rc != 0)
        return cli_export_failure(out, rc, msg);
    if ((rc = o->fmt->begin(&x)) != 0)
        rc = cli_export_failure(out, rc, "");
    else
        rc = cli_export_loop(ctx, conn, &x, o->fmt, out);
    o->fmt->free(&x);
    cli_export_dict_deinit(&x.dict);
    return rc;
}

int cli_export_each(struct cli_ctx *ctx, char *session, const struct cli_export_format *fmt,
                    void *arg)
{
    struct cli_export_opts o = {.fmt = fmt, .weight = CLI_EXPORT_WEIGHT_TIME};
    struct cli_outfile out = {.f = stdout, .path = NULL};
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *header;
    int rc;

    proto_request_init(&req);
    if ((rc = cli_session_ref(ctx, session, &req.session)) != CLI_CONTINUE)
        return rc;
    req.by_start = fmt->by_start;
    if ((rc = cli_call(ctx, PROTO_EXPORT, &req, &conn, &header)) != CLI_EXIT_OK)
        return rc;
    rc = cli_export_stream(ctx, &conn, header, &o, &out, arg);
    cli_conn_close(&conn);
    return rc;
}

/*
 * At a home (the header's `hosts`, as `sessions` counts them) a session that spans hosts is
 * exported with this host's entries only: entries stay on their hosts, and members send the
 * home aggregates, not entries. Says so on stderr, so that the export is not taken for the
 * job's whole.
 */
static void cli_export_hosts_note(const msgpack_object *header, const char *arg)
{
    uint64_t hosts = 0;

    if (cli_obj_u64(cli_obj_get(header, "hosts"), &hosts) == 0 && hosts > 1)
        cli_error("note: session %s spans %" PRIu64 " hosts; this export has this host's "
                  "entries only (entries stay on their hosts): export on each host for the "
                  "others' (docs/hosts.md)",
                  arg, hosts);
}

int cli_export_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct cli_export_opts o = {.fmt = NULL, .weight = CLI_EXPORT_WEIGHT_TIME};
    struct cli_outfile out;
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *header;
    char *arg;
    int rc;

    if ((rc = cli_export_opts(ctx, argc, argv, &o)) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE)
        return rc;
    proto_request_init(&req);
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    req.by_start = o.fmt->by_start;
    /* a directory format writes its own files there: standard output stays unused */
    if ((rc = cli_outfile_open(&out, o.fmt->directory ? NULL : o.path, "export")) != CLI_EXIT_OK)
        return rc;
    rc = cli_call(ctx, PROTO_EXPORT, &req, &conn, &header);
    if (rc == CLI_EXIT_OK) {
        cli_export_hosts_note(header, arg);
        rc = cli_export_stream(ctx, &conn, header, &o, &out, NULL);
        cli_conn_close(&conn);
    }
    return cli_outfile_close(&out, rc);
}
