/*
 * cli_classify — `tracectl classify` and the classification rules of
 * `tracectl import` (see cli_classify.h).
 */
#include "cli_classify.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_obj.h"

const char cli_classify_usage[] =
    "Usage: tracectl classify <id|name> [--comm RE] [--compute RE] [--memory RE]\n"
    "                         [--json]\n"
    "\n"
    "Re-classifies the operations of an ended session by name: an op whose name\n"
    "matches --comm becomes communication, else --memory memory, else --compute\n"
    "compute; other ops keep their category. The daemon then rebuilds the\n"
    "session's rank aggregates (the report's Ranks, Steps, Collectives and\n"
    "Categories); with no option it only rebuilds them (a session written\n"
    "before them, or whose report says they are inexact). The\n"
    "patterns are POSIX extended regular expressions, matched anywhere in the\n"
    "name, without case. The daemon refuses a live session (exit code 5).\n"
    "\n"
    "Options:\n"
    "      --comm RE       these ops are communication (category comm)\n"
    "      --compute RE    these ops are compute\n"
    "      --memory RE     these ops are memory transfers\n"
    "  -j, --json          print the daemon's result as JSON\n"
    "      --socket PATH   the daemon's socket (see tracectl --help)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  tracectl classify 7 --comm 'ep::(internode|intranode)::|all_to_all'\n";

static const char *const cli_classes_names[3] = {"comm", "memory", "compute"};

int cli_classes_add(struct cli_classes *c, const char *which, const char *pattern)
{
    int i, rc;

    for (i = 0; i < 3 && strcmp(which, cli_classes_names[i]) != 0; i++)
        ;
    if (i == 3)
        return -1;
    if (c->set[i])
        regfree(&c->re[i]);
    c->set[i] = false;
    if ((rc = regcomp(&c->re[i], pattern, REG_EXTENDED | REG_ICASE | REG_NOSUB)) != 0) {
        char why[128];
        regerror(rc, &c->re[i], why, sizeof(why));
        cli_error("--%s '%s': %s", which, pattern, why);
        return -1;
    }
    c->set[i] = true;
    return 0;
}

const char *cli_classes_match(const struct cli_classes *c, const char *name)
{
    for (int i = 0; i < 3; i++)
        if (c->set[i] && regexec(&c->re[i], name, 0, NULL, 0) == 0)
            return cli_classes_names[i];
    return NULL;
}

void cli_classes_free(struct cli_classes *c)
{
    for (int i = 0; i < 3; i++)
        if (c->set[i])
            regfree(&c->re[i]);
    memset(c, 0, sizeof(*c));
}

static int cli_classify_print(const msgpack_object *res)
{
    char id[32], ops[32], changed[32];

    cli_obj_text(cli_obj_get(res, "session"), id, sizeof(id));
    cli_obj_text(cli_obj_get(res, "ops"), ops, sizeof(ops));
    cli_obj_text(cli_obj_get(res, "changed"), changed, sizeof(changed));
    printf("session %s: %s of %s ops re-classified, rank aggregates rebuilt\n", id, changed, ops);
    return CLI_EXIT_OK;
}

int cli_classify_run(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"comm", required_argument, NULL, 'C'},
                                         {"compute", required_argument, NULL, 'P'},
                                         {"memory", required_argument, NULL, 'M'},
                                         {NULL, 0, NULL, 0}};
    struct cli_classes check = {0};
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *res;
    char *arg;
    int c, rc;

    proto_request_init(&req);
    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS, opts, NULL)) != -1) {
        const char *which = c == 'C' ? "comm" : c == 'P' ? "compute" : "memory";
        if (c != 'C' && c != 'P' && c != 'M') {
            if ((rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
                return rc;
            continue;
        }
        /* checked here too, so that a bad pattern is a usage error before any connection */
        if (cli_classes_add(&check, which, optarg) < 0) {
            cli_classes_free(&check);
            return CLI_EXIT_USAGE;
        }
        if (c == 'C')
            req.re_comm = optarg;
        else if (c == 'P')
            req.re_compute = optarg;
        else
            req.re_memory = optarg;
    }
    cli_classes_free(&check);
    if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    rc = cli_call(ctx, PROTO_CLASSIFY, &req, &conn, &res);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = ctx->json ? cli_print_json(res) : cli_classify_print(res);
    cli_conn_close(&conn);
    return rc;
}
