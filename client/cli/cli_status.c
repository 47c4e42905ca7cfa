/*
 * cli_status — `tracectl status` (see cli_status.h).
 */
#include "cli_status.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

#include "cli_obj.h"
#include "cli_table.h"
#include "cli_view.h"

/* A value in nanoseconds above this is a wall-clock time (after 1973), not a duration. */
#define CLI_STATUS_WALL_NS 100000000000000000ull

const char cli_status_usage[] =
    "Usage: tracectl status [--json]\n"
    "\n"
    "Shows the daemon's figures, one \"key: value\" line per key it reports:\n"
    "version, pid, uptime, connections, sessions (all and live), entries\n"
    "stored and per second over the last 10 s, queue depth, bytes on disk,\n"
    "data directory, socket and the last error; with tracectld --clickhouse,\n"
    "the sink's state (clickhouse), backlog, entries sent and last error.\n"
    "Keys ending in _ns are shown as durations (or local times), keys naming\n"
    "bytes in KiB/MiB/GiB.\n"
    "\n"
    "Options:\n"
    "  -j, --json          print the daemon's figures as JSON\n"
    "      --socket PATH   the daemon's socket (see tracectl --help)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  tracectl status\n"
    "  tracectl --socket /run/tracectl/tracectl.sock status --json\n";

static bool cli_status_ends_with(const char *s, size_t n, const char *suffix)
{
    size_t m = strlen(suffix);

    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* How to show a value, guessed from its key: the status map is open-ended. */
static enum cli_view_kind cli_status_kind(const msgpack_object_str *key, const msgpack_object *v)
{
    uint64_t u = 0;

    if (cli_status_ends_with(key->ptr, key->size, "_ns")) {
        cli_obj_u64(v, &u);
        return u >= CLI_STATUS_WALL_NS ? CLI_VIEW_TIME : CLI_VIEW_DURATION;
    }
    if (key->size == 5 && memcmp(key->ptr, "bytes", 5) == 0)
        return CLI_VIEW_BYTES;
    if (cli_status_ends_with(key->ptr, key->size, "_bytes"))
        return CLI_VIEW_BYTES;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        return CLI_VIEW_FLOAT;
    return CLI_VIEW_TEXT;
}

/* One "key:" / value pair of cells. */
static int cli_status_pair(struct cli_table *t, const msgpack_object_kv *kv)
{
    char key[128], val[512];
    int rc;

    cli_obj_text(&kv->key, key, sizeof(key) - 1);
    strcat(key, ":");
    if (kv->key.type == MSGPACK_OBJECT_STR)
        cli_view_format(&kv->val, cli_status_kind(&kv->key.via.str, &kv->val), val, sizeof(val));
    else
        cli_obj_text(&kv->val, val, sizeof(val));
    rc = cli_table_add(t, key);
    return rc ? rc : cli_table_add(t, val);
}

static int cli_status_print(const msgpack_object *map)
{
    static const struct cli_table_col cols[2] = {{NULL, false, 0}, {NULL, false, 0}};
    struct cli_table *t;
    int rc = 0;

    if (map->type != MSGPACK_OBJECT_MAP) {
        cli_error("bad reply from the daemon: the status is not a map");
        return CLI_EXIT_ERROR;
    }
    t = cli_table_new(cols, 2);
    if (t == NULL)
        return cli_print_status(-ENOMEM);
    for (uint32_t i = 0; i < map->via.map.size && rc == 0; i++)
        rc = cli_status_pair(t, &map->via.map.ptr[i]);
    if (rc == 0)
        rc = cli_table_print(t, stdout, "");
    cli_table_free(t);
    return cli_print_status(rc);
}

int cli_status_run(struct cli_ctx *ctx, int argc, char **argv)
{
    return cli_simple_run(ctx, argc, argv, PROTO_STATUS, cli_status_print);
}
