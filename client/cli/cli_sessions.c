/*
 * cli_sessions — `tracectl sessions` (see cli_sessions.h).
 */
#include "cli_sessions.h"

#include <getopt.h>
#include <string.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_view.h"
#include "util.h"

const char cli_sessions_usage[] =
    "Usage: tracectl sessions [--json]\n"
    "\n"
    "Lists the daemon's sessions, newest first: id, name, state (live or\n"
    "ended), processes, stored and dropped entries, start (local time),\n"
    "duration (so far, for a live session) and size on disk; on a home\n"
    "(--peer-listen), the hosts its report of each session merges.\n"
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

/*
 * The columns cols (n of them) into out with col after the one named after: OWNER after NAME
 * when the daemon names each session's owner (an admin under --system), HOSTS after STATE in
 * a home's rows (the hosts its report merges). Returns how many (n + 1).
 */
static size_t cli_sessions_add_col(const struct cli_view_col *cols, size_t n, const char *after,
                                   struct cli_view_col col, struct cli_view_col *out)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        out[k++] = cols[i];
        if (strcmp(cols[i].name, after) == 0)
            out[k++] = col;
    }
    return k;
}

static int cli_sessions_print(const msgpack_object *list)
{
    struct cli_view_col owner[UTIL_ARRAY_LEN(cli_sessions_cols) + 1];
    struct cli_view_col hosts[UTIL_ARRAY_LEN(owner) + 1];
    const struct cli_view_col *cols = cli_sessions_cols;
    size_t n = UTIL_ARRAY_LEN(cli_sessions_cols);

    if (list->type != MSGPACK_OBJECT_ARRAY) {
        cli_error("bad reply from the daemon: the session list is not an array");
        return CLI_EXIT_ERROR;
    }
    if (list->via.array.size == 0) {
        puts("no sessions");
        return CLI_EXIT_OK;
    }
    if (cli_obj_get(&list->via.array.ptr[0], "owner") != NULL) {
        n = cli_sessions_add_col(cols, n, "NAME",
                                 (struct cli_view_col){"OWNER", "owner", CLI_VIEW_TEXT, 16, NULL},
                                 owner);
        cols = owner;
    }
    if (cli_obj_get(&list->via.array.ptr[0], "hosts") != NULL) {
        n = cli_sessions_add_col(cols, n, "STATE",
                                 (struct cli_view_col){"HOSTS", "hosts", CLI_VIEW_COUNT, 0, NULL},
                                 hosts);
        cols = hosts;
    }
    return cli_print_status(cli_view_table(stdout, "", cols, n, list));
}

int cli_sessions_run(struct cli_ctx *ctx, int argc, char **argv)
{
    return cli_simple_run(ctx, argc, argv, PROTO_SESSIONS, cli_sessions_print);
}
