/*
 * cli_sessions — `tracectl sessions` (see cli_sessions.h).
 */
#include "cli_sessions.h"

#include <getopt.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_view.h"

const char cli_sessions_usage[] =
    "Usage: tracectl sessions [--json]\n"
    "\n"
    "Lists the daemon's sessions, newest first: id, name, state (live or\n"
    "ended), processes, stored and dropped entries, start (local time),\n"
    "duration (so far, for a live session) and size on disk.\n"
    "\n"
    "Options:\n"
    "  -j, --json          print the list as JSON (the daemon's result as is)\n"
    "      --socket PATH   the daemon's socket (see tracectl --help)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  tracectl sessions\n"
    "  tracectl sessions --json | jq '.[] | select(.state == \"live\") | .id'\n";

/* ended_ns − started_ns, or now − started_ns while the session is live. */
static void cli_sessions_duration(const msgpack_object *row, char *buf, size_t size)
{
    uint64_t start, end;
    struct timespec now;

    if (cli_obj_u64(cli_obj_get(row, "started_ns"), &start) != 0) {
        snprintf(buf, size, "-");
        return;
    }
    if (cli_obj_u64(cli_obj_get(row, "ended_ns"), &end) != 0) {
        clock_gettime(CLOCK_REALTIME, &now);
        end = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    }
    if (end < start)
        snprintf(buf, size, "-");
    else
        cli_fmt_duration(buf, size, end - start);
}

static const struct cli_view_col cli_sessions_cols[] = {
    {"ID", "id", CLI_VIEW_COUNT, 0, NULL},
    {"NAME", "name", CLI_VIEW_TEXT, 32, NULL},
    {"STATE", NULL, CLI_VIEW_TEXT, 20, cli_view_state},
    {"PROCS", "processes", CLI_VIEW_COUNT, 0, NULL},
    {"ENTRIES", "entries", CLI_VIEW_COUNT, 0, NULL},
    {"DROPPED", "dropped", CLI_VIEW_COUNT, 0, NULL},
    {"STARTED", "started_ns", CLI_VIEW_TIME, 0, NULL},
    {"DURATION", NULL, CLI_VIEW_DURATION, 0, cli_sessions_duration},
    {"SIZE", "bytes", CLI_VIEW_BYTES, 0, NULL},
};

/* The same with the owner, when the daemon names it (an admin under --system). */
static const struct cli_view_col cli_sessions_owner_cols[] = {
    {"ID", "id", CLI_VIEW_COUNT, 0, NULL},
    {"NAME", "name", CLI_VIEW_TEXT, 32, NULL},
    {"OWNER", "owner", CLI_VIEW_TEXT, 16, NULL},
    {"STATE", NULL, CLI_VIEW_TEXT, 20, cli_view_state},
    {"PROCS", "processes", CLI_VIEW_COUNT, 0, NULL},
    {"ENTRIES", "entries", CLI_VIEW_COUNT, 0, NULL},
    {"DROPPED", "dropped", CLI_VIEW_COUNT, 0, NULL},
    {"STARTED", "started_ns", CLI_VIEW_TIME, 0, NULL},
    {"DURATION", NULL, CLI_VIEW_DURATION, 0, cli_sessions_duration},
    {"SIZE", "bytes", CLI_VIEW_BYTES, 0, NULL},
};

static int cli_sessions_print(const msgpack_object *list)
{
    if (list->type != MSGPACK_OBJECT_ARRAY) {
        cli_error("bad reply from the daemon: the session list is not an array");
        return CLI_EXIT_ERROR;
    }
    if (list->via.array.size == 0) {
        puts("no sessions");
        return CLI_EXIT_OK;
    }
    if (cli_obj_get(&list->via.array.ptr[0], "owner") != NULL)
        return cli_print_status(cli_view_table(
            stdout, "", cli_sessions_owner_cols,
            sizeof(cli_sessions_owner_cols) / sizeof(cli_sessions_owner_cols[0]), list));
    return cli_print_status(cli_view_table(stdout, "", cli_sessions_cols,
                                           sizeof(cli_sessions_cols) / sizeof(cli_sessions_cols[0]),
                                           list));
}

int cli_sessions_run(struct cli_ctx *ctx, int argc, char **argv)
{
    return cli_simple_run(ctx, argc, argv, PROTO_SESSIONS, cli_sessions_print);
}
