/*
 * cli_delete — `tracectl rm <id|name>` (see cli_delete.h).
 */
#include "cli_delete.h"

#include <getopt.h>

#include "cli_obj.h"

const char cli_delete_usage[] =
    "Usage: tracectl rm <id|name> [--json]\n"
    "       tracectl delete <id|name> [--json]\n"
    "\n"
    "Deletes an ended session and its file. An all-digits argument is a\n"
    "session id; anything else names the newest session of that name. The\n"
    "daemon refuses to delete a live session (exit code 5).\n"
    "\n"
    "Options:\n"
    "  -j, --json          print the daemon's result as JSON ({\"deleted\": id})\n"
    "      --socket PATH   the daemon's socket (see tracectl --help)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  tracectl rm 7\n"
    "  tracectl rm job-42\n";

static int cli_delete_print(const struct cli_ctx *ctx, const msgpack_object *res)
{
    char id[64];

    cli_obj_text(cli_obj_get(res, "deleted"), id, sizeof(id));
    if (cli_obj_get(res, "deleted") == NULL)
        snprintf(id, sizeof(id), "%s", ctx->target);
    printf("deleted session %s\n", id);
    return CLI_EXIT_OK;
}

int cli_delete_run(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_LONGOPTS, {NULL, 0, NULL, 0}};
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *res;
    char *arg;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS, opts, NULL)) != -1) {
        if ((rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
            return rc;
    }
    if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE)
        return rc;
    proto_request_init(&req);
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    rc = cli_call(ctx, PROTO_DELETE, &req, &conn, &res);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = ctx->json ? cli_print_json(res) : cli_delete_print(ctx, res);
    cli_conn_close(&conn);
    return rc;
}
