/*
 * cli — the tracectl command-line client: entry point, command dispatch,
 * help, and what every command shares (common options, the request/reply
 * round trip, error reporting, exit codes).
 *
 * tracectl is a thin client: each command parses its options with
 * getopt_long, sends one control request (PROTOCOL.md "Control messages")
 * over cli_conn, and prints the reply's result, either as JSON (cli_json) or
 * for humans (cli_view, cli_table, cli_fmt). Commands live in
 * cli_<command>.c and are listed in the dispatch table of cli.c.
 *
 * Errors: unlike the lower cli_* modules, which return 0 or -errno, command
 * functions return a process exit code (enum cli_exit) and have already
 * printed the one-line "tracectl: ..." message on stderr, because that is
 * where the error is handled. Single-threaded.
 */
#ifndef TRACECTL_CLI_H
#define TRACECTL_CLI_H

#include <stdbool.h>

#include <msgpack.h>

#include "cli_conn.h"
#include "proto.h"

/* Process exit codes; the table is also in `tracectl --help`. */
enum cli_exit {
    CLI_EXIT_OK = 0,          /* success */
    CLI_EXIT_ERROR = 1,       /* any other error: I/O, a bad reply */
    CLI_EXIT_USAGE = 2,       /* bad flag, missing argument, unknown command */
    CLI_EXIT_NO_DAEMON = 3,   /* nothing listens at the socket */
    CLI_EXIT_NO_SESSION = 4,  /* the daemon replied no_session */
    CLI_EXIT_REFUSED = 5,     /* the daemon replied with any other error */
    CLI_EXIT_DIFFERS = 6,     /* diff, internally: regressed/diverged; exits 1 (cli_diff_run) */
    CLI_EXIT_DIFF_FAILED = 7, /* diff: could not compare (what is 1 for the other commands) */
};

/* Returned by option helpers when parsing goes on (never an exit code). */
#define CLI_CONTINUE (-1)

/* Options every command accepts, to put in its getopt_long tables. */
#define CLI_SHORTOPTS ":hj"
// clang-format off
/* clang-format would split the initializers of this macro across lines */
#define CLI_LONGOPTS                                                                               \
    {"help", no_argument, NULL, 'h'},                                                              \
    {"json", no_argument, NULL, 'j'},                                                              \
    {"socket", required_argument, NULL, 'S'}
// clang-format on

struct cli_ctx {
    const char *socket; /* --socket, or NULL for the default path */
    const char *cmd;    /* the command's name, for messages and help; NULL before one */
    const char *target; /* the session argument as typed, for messages; may be NULL */
    bool json;          /* --json */
};

/* Prints "tracectl: <message>" and a newline on stderr. */
__attribute__((format(printf, 1, 2))) void cli_error(const char *fmt, ...);

/*
 * Handles an option the command's own switch did not: --help (prints the
 * command's help on stdout), --json, --socket, and getopt's errors.
 * Returns CLI_CONTINUE or an exit code to return at once.
 */
int cli_common_opt(struct cli_ctx *ctx, int c, char *const *argv);

/*
 * After getopt: requires exactly one operand, named `what` in the error
 * message. Returns CLI_CONTINUE with *out set, or CLI_EXIT_USAGE.
 */
int cli_one_operand(const struct cli_ctx *ctx, int argc, char *const *argv, const char *what,
                    char **out);

/* After getopt: requires no operand. Returns CLI_CONTINUE or CLI_EXIT_USAGE. */
int cli_no_operand(const struct cli_ctx *ctx, int argc, char *const *argv);

/*
 * A session argument: all digits is a numeric id, anything else a name.
 * Fills *ref (borrowing arg) and ctx->target. Returns CLI_CONTINUE or
 * CLI_EXIT_USAGE (empty, id out of range, name too long).
 */
int cli_session_ref(struct cli_ctx *ctx, char *arg, struct proto_sessref *ref);

/*
 * Connects, sends the request, waits for the reply. Returns CLI_EXIT_OK
 * with *result set (borrowed from conn: call cli_conn_close(conn) when done
 * with it), or another exit code after printing why (conn is then closed).
 */
int cli_call(struct cli_ctx *ctx, enum proto_type type, const struct proto_request *req,
             struct cli_conn *conn, const msgpack_object **result);

/* Prints o on stdout as one JSON document. Returns an exit code. */
int cli_print_json(const msgpack_object *o);

/*
 * Prints the one msgpack object packed in sb (a command's own result) on
 * stdout as one JSON document; cmd names the command in the error. Returns an
 * exit code.
 */
int cli_print_json_packed(const msgpack_sbuffer *sb, const char *cmd);

/*
 * A command without operands or options of its own: sends `type` with the
 * default request and prints the result with print (or as JSON with --json).
 * Returns an exit code.
 */
int cli_simple_run(struct cli_ctx *ctx, int argc, char **argv, enum proto_type type,
                   int (*print)(const msgpack_object *result));

/* Maps a -errno from printing to an exit code, with a message. */
int cli_print_status(int rc);

/* Prints the help of a command (or the general help for NULL) on f. */
void cli_help(const char *cmd, FILE *f);

/* The whole program (main.c calls it): parses argv, runs the command, flushes stdout; returns
 * the process exit code. */
int cli_main(int argc, char **argv);

#endif
