/*
 * cli — tracectl's entry point: global options, the command table, help,
 * and the helpers every command shares (see cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_classify.h"
#include "cli_delete.h"
#include "cli_diff.h"
#include "cli_export.h"
#include "cli_import.h"
#include "cli_json.h"
#include "cli_report.h"
#include "cli_sessions.h"
#include "cli_status.h"
#include "cli_top.h"

#ifndef TRACECTL_VERSION
#define TRACECTL_VERSION "unknown"
#endif

struct cli_command {
    const char *name;
    const char *alias; /* or NULL */
    const char *summary;
    const char *help; /* the full text of `tracectl help <name>` */
    int (*run)(struct cli_ctx *ctx, int argc, char **argv);
};

static int cli_help_run(struct cli_ctx *ctx, int argc, char **argv);

static const char cli_help_usage[] =
    "Usage: tracectl help [COMMAND]\n"
    "\n"
    "Shows the general help, or the help of one command (the same as\n"
    "`tracectl COMMAND --help`).\n"
    "\n"
    "Example:\n"
    "  tracectl help report\n";

static const struct cli_command cli_commands[] = {
    {"sessions", NULL, "list the sessions, newest first", cli_sessions_usage, cli_sessions_run},
    {"report", NULL, "show the analysis report of one session", cli_report_usage, cli_report_run},
    {"status", NULL, "show the daemon's figures", cli_status_usage, cli_status_run},
    {"top", NULL, "watch a running session live", cli_top_usage, cli_top_run},
    {"rm", "delete", "delete an ended session", cli_delete_usage, cli_delete_run},
    {"export", NULL, "export a session as CSV or a trace file", cli_export_usage, cli_export_run},
    {"import", NULL, "import PyTorch profiler (Kineto) traces", cli_import_usage, cli_import_run},
    {"classify", NULL, "re-classify a session's ops by name", cli_classify_usage, cli_classify_run},
    {"diff", NULL, "compare two sessions; exit 1 on a regression", cli_diff_usage, cli_diff_run},
    {"help", NULL, "show this help, or a command's help", cli_help_usage, cli_help_run},
};

#define CLI_NCOMMANDS (sizeof(cli_commands) / sizeof(cli_commands[0]))

static const char cli_usage_head[] =
    "Usage: tracectl [--socket PATH] <command> [options]\n"
    "\n"
    "The command-line client of tracectld, the trace-collecting daemon: lists\n"
    "sessions, shows their analysis reports, the daemon's status, and deletes\n"
    "sessions.\n"
    "\n"
    "Commands:\n";

static const char cli_usage_tail[] =
    "\n"
    "Global options:\n"
    "  --socket PATH   the daemon's socket; default $TRACECTL_SOCKET, else\n"
    "                  $XDG_RUNTIME_DIR/tracectl/tracectl.sock, else\n"
    "                  /tmp/tracectl-$UID/tracectl.sock\n"
    "  -h, --help      show this help\n"
    "  -V, --version   show the version\n"
    "\n"
    "Every command takes --help, and --socket PATH after the command too.\n"
    "With --json a command prints the daemon's result as one JSON document:\n"
    "integers exact, floats round-trip (an integral float keeps \".0\"), NaN\n"
    "and infinities as null, binary data as base64 strings.\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  other error (I/O, a bad reply from the daemon); diff: something regressed\n"
    "     (with --divergence: the sessions diverge)\n"
    "  2  usage error (bad flag, missing argument, unknown command)\n"
    "  3  no daemon at the socket\n"
    "  4  unknown session\n"
    "  5  the daemon refused the request (its error code and message are shown)\n"
    "  7  diff: could not compare (I/O, a bad reply)\n"
    "\n"
    "Example:\n"
    "  tracectl sessions\n"
    "  tracectl report job-42 --top 5\n";

void cli_error(const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fputs("tracectl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const struct cli_command *cli_find(const char *name)
{
    for (size_t i = 0; i < CLI_NCOMMANDS; i++) {
        const struct cli_command *c = &cli_commands[i];

        if (strcmp(c->name, name) == 0 || (c->alias != NULL && strcmp(c->alias, name) == 0))
            return c;
    }
    return NULL;
}

void cli_help(const char *cmd, FILE *f)
{
    const struct cli_command *c = cmd ? cli_find(cmd) : NULL;

    if (c != NULL) {
        fputs(c->help, f);
        return;
    }
    fputs(cli_usage_head, f);
    for (size_t i = 0; i < CLI_NCOMMANDS; i++) {
        char name[32];

        c = &cli_commands[i];
        if (c->alias)
            snprintf(name, sizeof(name), "%s (%s)", c->name, c->alias);
        else
            snprintf(name, sizeof(name), "%s", c->name);
        fprintf(f, "  %-14s  %s\n", name, c->summary);
    }
    fputs(cli_usage_tail, f);
}

static int cli_help_run(struct cli_ctx *ctx, int argc, char **argv)
{
    const char *topic = argc > 1 ? argv[1] : NULL;

    (void)ctx;
    if (topic != NULL && (strcmp(topic, "--help") == 0 || strcmp(topic, "-h") == 0))
        topic = "help";
    if (topic != NULL && cli_find(topic) == NULL) {
        cli_error("unknown command '%s' (see 'tracectl --help')", argv[1]);
        return CLI_EXIT_USAGE;
    }
    if (argc > 2) {
        cli_error("help: unexpected argument '%s'", argv[2]);
        return CLI_EXIT_USAGE;
    }
    cli_help(topic, stdout);
    return CLI_EXIT_OK;
}

static int cli_bad_option(const struct cli_ctx *ctx, int c, char *const *argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    char who[64] = "";

    if (ctx->cmd != NULL)
        snprintf(who, sizeof(who), "%s: ", ctx->cmd);
    if (c == ':')
        cli_error("%soption '%s' requires an argument", who, arg);
    else if (optopt != 0)
        cli_error("%sinvalid option '-%c'", who, optopt);
    else
        cli_error("%sunknown option '%s'", who, arg);
    return CLI_EXIT_USAGE;
}

int cli_common_opt(struct cli_ctx *ctx, int c, char *const *argv)
{
    switch (c) {
    case 'h':
        cli_help(ctx->cmd, stdout);
        return CLI_EXIT_OK;
    case 'j':
        ctx->json = true;
        return CLI_CONTINUE;
    case 'S':
        ctx->socket = optarg;
        return CLI_CONTINUE;
    default:
        return cli_bad_option(ctx, c, argv);
    }
}

int cli_one_operand(const struct cli_ctx *ctx, int argc, char *const *argv, const char *what,
                    char **out)
{
    if (optind >= argc) {
        cli_error("%s: missing %s (see 'tracectl %s --help')", ctx->cmd, what, ctx->cmd);
        return CLI_EXIT_USAGE;
    }
    if (optind + 1 < argc) {
        cli_error("%s: unexpected argument '%s'", ctx->cmd, argv[optind + 1]);
        return CLI_EXIT_USAGE;
    }
    *out = argv[optind];
    return CLI_CONTINUE;
}

int cli_no_operand(const struct cli_ctx *ctx, int argc, char *const *argv)
{
    if (optind < argc) {
        cli_error("%s: unexpected argument '%s'", ctx->cmd, argv[optind]);
        return CLI_EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

int cli_session_ref(struct cli_ctx *ctx, char *arg, struct proto_sessref *ref)
{
    size_t n = strlen(arg), digits = strspn(arg, "0123456789");
    unsigned long long id;

    ctx->target = arg;
    if (n == 0 || n > PROTO_MAX_SESSION) {
        cli_error("%s: a session name is 1 to %d bytes", ctx->cmd, PROTO_MAX_SESSION);
        return CLI_EXIT_USAGE;
    }
    if (digits < n) {
        ref->id = -1;
        ref->name = arg;
        return CLI_CONTINUE;
    }
    errno = 0;
    id = strtoull(arg, NULL, 10);
    if (errno != 0 || id > INT64_MAX) {
        cli_error("%s: session id '%s' is out of range", ctx->cmd, arg);
        return CLI_EXIT_USAGE;
    }
    ref->id = (int64_t)id;
    ref->name = NULL;
    return CLI_CONTINUE;
}

/* Replaces control characters of a message from the daemon before it reaches a terminal. */
static void cli_sanitize(char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
    }
}

static int cli_open_error(const struct cli_conn *conn, const char *path, int rc)
{
    if (rc == -EPERM && conn->why[0] != '\0') {
        cli_error("%s", conn->why);
        return CLI_EXIT_ERROR;
    }
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        cli_error("no daemon at %s (is tracectld running?)", path);
        return CLI_EXIT_NO_DAEMON;
    }
    if (rc == -ENAMETOOLONG)
        cli_error("socket path too long: %s", path);
    else
        cli_error("cannot connect to %s: %s", path, strerror(-rc));
    return CLI_EXIT_ERROR;
}

static int cli_reply_error(const struct cli_ctx *ctx, struct cli_conn_reply *rep)
{
    cli_sanitize(rep->code);
    cli_sanitize(rep->message);
    if (strcmp(rep->code, PROTO_E_NO_SESSION) == 0) {
        if (ctx->target != NULL)
            cli_error("unknown session '%s': %s", ctx->target, rep->message);
        else
            cli_error("unknown session: %s", rep->message);
        return CLI_EXIT_NO_SESSION;
    }
    cli_error("the daemon refused the request: %s: %s", rep->code, rep->message);
    return CLI_EXIT_REFUSED;
}

int cli_call(struct cli_ctx *ctx, enum proto_type type, const struct proto_request *req,
             struct cli_conn *conn, const msgpack_object **result)
{
    char buf[PATH_MAX];
    const char *path = cli_conn_path(ctx->socket, buf, sizeof(buf));
    struct cli_conn_reply rep;
    int rc = cli_conn_open(conn, path);

    if (rc != 0)
        return cli_open_error(conn, path, rc);
    rc = cli_conn_call(conn, type, req, &rep);
    if (rc != 0) {
        cli_sanitize(rep.message);
        if (rc == -EPROTO)
            cli_error("bad reply from the daemon: %s", rep.message);
        else
            cli_error("%s request to %s failed: %s", proto_type_name(type), path, rep.message);
        rc = CLI_EXIT_ERROR;
        goto fail_close;
    }
    if (!rep.ok) {
        rc = cli_reply_error(ctx, &rep);
        goto fail_close;
    }
    *result = rep.result;
    return CLI_EXIT_OK;

fail_close:
    cli_conn_close(conn);
    return rc;
}

int cli_print_status(int rc)
{
    if (rc == 0)
        return CLI_EXIT_OK;
    if (rc == -EIO)
        cli_error("cannot write the output: %s", strerror(errno));
    else
        cli_error("cannot print the reply: %s", strerror(-rc));
    return CLI_EXIT_ERROR;
}

int cli_print_json(const msgpack_object *o)
{
    int rc = cli_json_write_doc(stdout, o);

    if (rc == -EINVAL) {
        cli_error("bad reply from the daemon: nested deeper than %d levels", CLI_JSON_MAX_DEPTH);
        return CLI_EXIT_ERROR;
    }
    return cli_print_status(rc);
}

int cli_print_json_packed(const msgpack_sbuffer *sb, const char *cmd)
{
    msgpack_unpacked u;
    int rc;

    msgpack_unpacked_init(&u);
    if (sb->data == NULL ||
        msgpack_unpack_next(&u, sb->data, sb->size, NULL) != MSGPACK_UNPACK_SUCCESS) {
        cli_error("%s: out of memory", cmd);
        rc = CLI_EXIT_ERROR;
    } else {
        rc = cli_print_json(&u.data);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* Parses the options before the command. Returns CLI_CONTINUE or an exit code. */
static int cli_global_opts(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {"socket", required_argument, NULL, 'S'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'V':
            printf("tracectl %s (wire protocol %d)\n", TRACECTL_VERSION, PROTO_VERSION);
            return CLI_EXIT_OK;
        default:
            if ((c = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
                return c;
        }
    }
    return CLI_CONTINUE;
}

static int cli_dispatch(struct cli_ctx *ctx, int argc, char **argv)
{
    const struct cli_command *c;

    if (argc < 1) {
        cli_error("missing command (see 'tracectl --help')");
        return CLI_EXIT_USAGE;
    }
    c = cli_find(argv[0]);
    if (c == NULL) {
        cli_error("unknown command '%s' (see 'tracectl --help')", argv[0]);
        return CLI_EXIT_USAGE;
    }
    ctx->cmd = c->name;
    optind = 0; /* glibc: 0 restarts getopt from scratch for the command's own argv */
    return c->run(ctx, argc, argv);
}

/* Flushes stdout: a failed write (disk full, closed pipe) must not exit 0. */
static int cli_finish(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (rc == CLI_EXIT_OK)
            cli_error("cannot write the output: %s", strerror(errno));
        return rc == CLI_EXIT_OK ? CLI_EXIT_ERROR : rc;
    }
    return rc;
}

int cli_main(int argc, char **argv)
{
    struct cli_ctx ctx = {.cmd = NULL};
    int rc = cli_global_opts(&ctx, argc, argv);

    if (rc == CLI_CONTINUE)
        rc = cli_dispatch(&ctx, argc - optind, argv + optind);
    return cli_finish(rc);
}

int cli_simple_run(struct cli_ctx *ctx, int argc, char **argv, enum proto_type type,
                   int (*print)(const msgpack_object *result))
{
    static const struct option opts[] = {CLI_LONGOPTS, {NULL, 0, NULL, 0}};
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *res;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS, opts, NULL)) != -1) {
        if ((rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
            return rc;
    }
    if ((rc = cli_no_operand(ctx, argc, argv)) != CLI_CONTINUE)
        return rc;
    proto_request_init(&req);
    rc = cli_call(ctx, type, &req, &conn, &res);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = ctx->json ? cli_print_json(res) : print(res);
    cli_conn_close(&conn);
    return rc;
}
