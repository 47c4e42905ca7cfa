/*
 * cli_diff — `tracectl diff` (see cli_diff.h).
 */
#include "cli_diff.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_diverge.h"
#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_report_ranks.h"
#include "cli_table.h"
#include "cli_view.h"
#include "util.h"

#define CLI_DIFF_NCOLS(a) UTIL_ARRAY_LEN(a)
#define CLI_DIFF_INDENT   "  "
#define CLI_DIFF_TOP      20 /* rows a table shows unless --top says otherwise */

const char cli_diff_usage[] =
    "Usage: tracectl diff <A> <B> [--threshold PCT] [--min-time T] [--top N|all]\n"
    "                     [--json]\n"
    "       tracectl diff <A> <B> --divergence [--json]\n"
    "\n"
    "Compares two sessions (ids or names, as for report): the total time,\n"
    "calls and memory of each operation, category and device in A and in B\n"
    "(and of each rank and step when the reports have those sections), with\n"
    "the change in time, absolute and in percent of A, largest absolute\n"
    "change first. Operations only in B are \"new\", only in A \"vanished\".\n"
    "Live, ended and imported sessions (tracectl import) compare alike.\n"
    "\n"
    "A row (and the session's total) regressed when its time grew by at\n"
    "least --min-time and by more than --threshold percent of its time in A;\n"
    "a row A does not have only needs --min-time. It improved when its time\n"
    "fell by as much. The command exits 1 when anything regressed, 0 when\n"
    "nothing did, so that a CI job can gate on it. When both sessions' producers\n"
    "reported their wait for a CPU, the rank rows show it too (CPU WAIT A/B),\n"
    "which is no regression: it is the machine's load, not the code's.\n"
    "\n"
    "At a home daemon (--peer-listen), a session that spans hosts compares its\n"
    "merged report: operations, categories, devices, ranks and totals of every\n"
    "host; steps and the verdict of the home's own ranks (the output says so).\n"
    "\n"
    "With --divergence it compares the two sessions' op sequences instead:\n"
    "rank by rank, each rank's entries in start order (position 0, 1, ...),\n"
    "the op names and, where both entries carry one, the checksums of their\n"
    "output (tc_checksum, checksum= in Python). It names the first place\n"
    "(step, rank, op, position) where they differ, and each diverging rank's\n"
    "own first one; it exits 1 when they diverge, 0 when not. The entries\n"
    "stream from the daemon rank by rank (export \"order\": \"rank\"), so memory\n"
    "stays small whatever the sessions' size.\n"
    "\n"
    "Options:\n"
    "  -t, --threshold PCT     percent of change that counts (default 5; a\n"
    "                          number >= 0, \"5\" or \"5%\")\n"
    "  -T, --min-time T        change in time that counts, at least: plain\n"
    "                          nanoseconds or with a unit ns, us, ms, s\n"
    "                          (default 0)\n"
    "  -n, --top N|all         rows each table lists (default 20; --json\n"
    "                          lists every row)\n"
    "  -d, --divergence        compare op sequences and checksums (see above)\n"
    "  -j, --json              print the diff as one JSON document\n"
    "      --socket PATH       the daemon's socket (see tracectl --help)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit codes: 0 nothing regressed (did not diverge), 6 something did,\n"
    "others as for every command (tracectl --help).\n"
    "\n"
    "Example:\n"
    "  tracectl diff base-run new-run --threshold 10 --min-time 1ms\n"
    "  tracectl diff 3 4 --json | jq '.ops[] | select(.regressed)'\n"
    "  tracectl diff run-a run-b --divergence\n";

/* One side's figures of a row. */
struct cli_diff_side {
    uint64_t calls, total_ns, mem_bytes;
    uint64_t extra_ns; /* the section's second time (untracked time of a rank), else 0 */
    uint64_t cpu_ns;   /* a rank's CPU wait (cpu_wait_ns), else 0 */
};

/* A row's key as a report gives it: a name (op, category, device), a number (rank, step), nil. */
struct cli_diff_key {
    enum { CLI_DIFF_NIL, CLI_DIFF_INT, CLI_DIFF_STR } kind;
    int64_t n;
    const char *s; /* borrowed from a report */
    uint32_t len;
};

/* A row of one side before matching. */
struct cli_diff_item {
    struct cli_diff_key key;
    const char *cat; /* borrowed; "" when none */
    uint32_t cat_len;
    int side; /* 0: A, 1: B */
    struct cli_diff_side v;
};

/* A matched row. */
struct cli_diff_row {
    struct cli_diff_key key;
    const char *cat; /* ops only, else NULL */
    uint32_t cat_len;
    bool in[2];
    struct cli_diff_side v[2];
    int64_t delta_ns; /* B's total − A's */
    bool regressed, improved;
    const char *extra_ab[2]; /* the JSON keys of the section's second time; NULL: none */
    bool cpu;                /* cpu_wait_a_ns and cpu_wait_b_ns: both reports have a CPU wait */
};

struct cli_diff_rows {
    struct cli_diff_row *v;
    size_t n;
    bool present; /* either report has the section */
    bool cpu;     /* its rows compare the ranks' CPU wait */
};

/*
 * A section of the diff: rows of a report section matched by key. The
 * figures compared are the rows' `time` (what regresses, headed time_header),
 * `calls` and `mem` fields (NULL: none), and `extra` (NULL: none), a second
 * time that regresses too. Sections that neither report has are left out, so
 * the per-rank and per-step sections of newer daemons show when both have
 * them. A rank's row compares what it cost the others (caused time: a rank
 * that waits for a slow one has longer collectives, which is not a
 * regression of its own) and its untracked time, and when both reports have a CPU wait
 * (a rank's producers reported one), the ranks' CPU wait: shown beside the caused time, which
 * it may explain (the verdict's rule), but no regression: it is the machine's load, not the
 * code's.
 */
struct cli_diff_section {
    const char *section; /* in the report map */
    const char *name;    /* in the diff map */
    const char *key;     /* the rows' key field, in the report and the diff */
    const char *title, *header, *calls_header;
    bool by_cat;  /* key by the rows' category instead, summing them (categories from ops) */
    bool has_cat; /* the rows carry their category (ops) */
    const char *time, *calls, *mem;
    const char *time_header; /* "TIME" when NULL */
    /* a second time compared: the rows' key, the diff's keys for A and B, the header */
    const char *extra, *extra_a, *extra_b, *extra_header;
    bool cpu; /* compare the rows' cpu_wait_ns when both reports have one */
};

static const struct cli_diff_section cli_diff_sections[] = {
    {"ops", "ops", "op", "Operations", "OP", "CALLS", false, true, "total_ns", "calls", "mem_bytes",
     NULL, NULL, NULL, NULL, NULL, false},
    {"ops", "categories", "category", "Categories", "CATEGORY", "CALLS", true, false, "total_ns",
     "calls", "mem_bytes", NULL, NULL, NULL, NULL, NULL, false},
    {"devices", "devices", "device", "Devices", "DEVICE", "CALLS", false, false, "total_ns",
     "calls", "mem_bytes", NULL, NULL, NULL, NULL, NULL, false},
    {"ranks", "ranks", "rank", "Ranks", "RANK", "STEPS", false, false, "caused_ns", "steps", NULL,
     "CAUSED", "untracked_ns", "untracked_a_ns", "untracked_b_ns", "UNTRACKED", true},
    {"steps", "steps", "step", "Steps (time of the slowest rank)", "STEP", "RANKS", false, false,
     "max_ns", "ranks", NULL, NULL, NULL, NULL, NULL, NULL, false},
};

#define CLI_DIFF_NSECTIONS (sizeof(cli_diff_sections) / sizeof(cli_diff_sections[0]))

/* ---- options ------------------------------------------------------------- */

static int cli_diff_threshold_opt(const char *arg, struct cli_diff_opts *o)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end != arg && *end == '%')
        end++;
    if (end == arg || *end != '\0' || errno != 0 || !(v >= 0.0 && v <= 1e9)) {
        cli_error("diff: --threshold wants a percentage >= 0 such as 5 or 2.5%%, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    o->threshold = v;
    return CLI_CONTINUE;
}

/* A time: digits, an optional fraction, an optional unit ns, us, µs, ms, s (no unit: ns). */
static int cli_diff_time_opt(const char *arg, struct cli_diff_opts *o)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"", 1}, {"ns", 1}, {"us", 1e3}, {"µs", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end != arg && arg[0] >= '0' && arg[0] <= '9' && errno == 0 && v >= 0.0) {
        for (size_t i = 0; i < CLI_DIFF_NCOLS(units); i++) {
            double ns = v * units[i].ns;

            if (strcmp(end, units[i].unit) == 0 && ns < 9.2e18) {
                o->min_time_ns = (uint64_t)llround(ns);
                return CLI_CONTINUE;
            }
        }
    }
    cli_error("diff: --min-time wants a time such as 500us, 2ms or 1000000 (ns), not '%s'", arg);
    return CLI_EXIT_USAGE;
}

static int cli_diff_top_opt(const char *arg, struct cli_diff_opts *o)
{
    char *end;
    unsigned long long v;

    if (strcmp(arg, "all") == 0) {
        o->top = 0;
        return CLI_CONTINUE;
    }
    errno = 0;
    v = strtoull(arg, &end, 10);
    if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < 1 || v > 1000000) {
        cli_error("diff: --top wants an integer from 1 to 1000000 or 'all', not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    o->top = (size_t)v;
    return CLI_CONTINUE;
}

static int cli_diff_opts(struct cli_ctx *ctx, int argc, char **argv, struct cli_diff_opts *o)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"threshold", required_argument, NULL, 't'},
                                         {"min-time", required_argument, NULL, 'T'},
                                         {"top", required_argument, NULL, 'n'},
                                         {"divergence", no_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    bool given = false;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "t:T:n:d", opts, NULL)) != -1) {
        rc = CLI_CONTINUE;
        if (c == 't')
            rc = cli_diff_threshold_opt(optarg, o);
        else if (c == 'T')
            rc = cli_diff_time_opt(optarg, o);
        else if (c == 'n')
            rc = cli_diff_top_opt(optarg, o);
        else if (c == 'd')
            o->divergence = true;
        else
            rc = cli_common_opt(ctx, c, argv);
        if (rc != CLI_CONTINUE)
            return rc;
        given |= c == 't' || c == 'T' || c == 'n';
    }
    if (o->divergence && given) {
        cli_error("diff: --threshold, --min-time and --top do not apply to --divergence");
        return CLI_EXIT_USAGE;
    }
    if (optind + 2 != argc) {
        if (optind + 2 > argc)
            cli_error("diff: wants two sessions, A and B (see 'tracectl diff --help')");
        else
            cli_error("diff: unexpected argument '%s'", argv[optind + 2]);
        return CLI_EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

/* ---- matching ------------------------------------------------------------- */

static uint64_t cli_diff_sat_add(uint64_t a, uint64_t b)
{
    return a > (uint64_t)INT64_MAX - b ? (uint64_t)INT64_MAX : a + b;
}

/* Orders keys: nil, then numbers, then names (bytewise). */
static int cli_diff_keycmp(const struct cli_diff_key *a, const struct cli_diff_key *b)
{
    uint32_t n;
    int c;

    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->kind == CLI_DIFF_INT)
        return (a->n > b->n) - (a->n < b->n);
    n = a->len < b->len ? a->len : b->len;
    c = n > 0 ? memcmp(a->s, b->s, n) : 0; /* an empty msgpack str may have no pointer */
    return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

static int cli_diff_item_cmp(const void *pa, const void *pb)
{
    const struct cli_diff_item *a = pa, *b = pb;
    int c = cli_diff_keycmp(&a->key, &b->key);

    return c != 0 ? c : a->side - b->side;
}

static uint64_t cli_diff_u64(const msgpack_object *row, const char *key)
{
    uint64_t v = 0;

    (void)cli_obj_u64(cli_obj_get(row, key), &v);
    return v;
}

static void cli_diff_str(const msgpack_object *o, const char **s, uint32_t *len)
{
    *s = "";
    *len = 0;
    if (o != NULL && o->type == MSGPACK_OBJECT_STR) {
        *s = o->via.str.ptr;
        *len = o->via.str.size;
    }
}

static void cli_diff_key_of(const msgpack_object *o, struct cli_diff_key *k)
{
    memset(k, 0, sizeof(*k));
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        k->kind = CLI_DIFF_INT;
        k->n = (int64_t)o->via.u64;
    } else if (o != NULL && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        k->kind = CLI_DIFF_INT;
        k->n = o->via.i64;
    } else if (o != NULL && o->type == MSGPACK_OBJECT_STR) {
        k->kind = CLI_DIFF_STR;
        cli_diff_str(o, &k->s, &k->len);
    } else {
        k->kind = CLI_DIFF_NIL;
    }
}

/* Appends the rows of a report section (an array of maps) as sec says. */
static void cli_diff_collect(struct cli_diff_item *items, size_t *n, const msgpack_object *rows,
                             const struct cli_diff_section *sec, int side)
{
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY)
        return;
    for (uint32_t i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *r = &rows->via.array.ptr[i];
        struct cli_diff_item *it = &items[(*n)++];

        cli_diff_key_of(cli_obj_get(r, sec->by_cat ? "category" : sec->key), &it->key);
        cli_diff_str(cli_obj_get(r, "category"), &it->cat, &it->cat_len);
        it->side = side;
        it->v.calls = cli_diff_u64(r, sec->calls);
        it->v.total_ns = cli_diff_u64(r, sec->time);
        it->v.mem_bytes = sec->mem != NULL ? cli_diff_u64(r, sec->mem) : 0;
        it->v.extra_ns = sec->extra != NULL ? cli_diff_u64(r, sec->extra) : 0;
        it->v.cpu_ns = sec->cpu ? cli_diff_u64(r, "cpu_wait_ns") : 0;
    }
}

/* Whether a -> b is a change past the thresholds (+1 up, -1 down, 0 none). */
static int cli_diff_moved(uint64_t a, uint64_t b, const struct cli_diff_opts *o)
{
    uint64_t change = a > b ? a - b : b - a;
    double pct = a > 0 ? (double)change * 100.0 / (double)a : INFINITY;

    if (a == b || change < o->min_time_ns || !(pct > o->threshold))
        return 0;
    return b > a ? 1 : -1;
}

static void cli_diff_judge(struct cli_diff_row *r, const struct cli_diff_opts *o)
{
    uint64_t a = r->v[0].total_ns, b = r->v[1].total_ns;
    int t = cli_diff_moved(a, b, o);
    int x = r->extra_ab[0] ? cli_diff_moved(r->v[0].extra_ns, r->v[1].extra_ns, o) : 0;

    /* Both totals are at most INT64_MAX, so their difference fits. */
    r->delta_ns = b >= a ? (int64_t)(b - a) : -(int64_t)(a - b);
    r->regressed = t > 0 || x > 0;
    r->improved = !r->regressed && (t < 0 || x < 0);
}

static int cli_diff_row_cmp(const void *pa, const void *pb)
{
    const struct cli_diff_row *a = pa, *b = pb;
    uint64_t da = a->delta_ns < 0 ? -(uint64_t)a->delta_ns : (uint64_t)a->delta_ns;
    uint64_t db = b->delta_ns < 0 ? -(uint64_t)b->delta_ns : (uint64_t)b->delta_ns;

    if (da != db)
        return da > db ? -1 : 1;
    return cli_diff_keycmp(&a->key, &b->key);
}

/*
 * Matches the rows of section sec of reports a and b by key into *out,
 * largest change first. Returns 0 or -ENOMEM.
 */
static int cli_diff_match(const msgpack_object *rep[2], const struct cli_diff_section *sec,
                          const struct cli_diff_opts *o, struct cli_diff_rows *out)
{
    const msgpack_object *rows[2];
    struct cli_diff_item *items;
    size_t n = 0, cap = 0;

    out->n = 0;
    out->present = false;
    for (int s = 0; s < 2; s++) {
        rows[s] = cli_obj_get(rep[s], sec->section);
        if (rows[s] != NULL && rows[s]->type == MSGPACK_OBJECT_ARRAY) {
            cap += rows[s]->via.array.size;
            out->present = true;
        }
    }
    if ((items = calloc(cap + 1, sizeof(*items))) == NULL ||
        (out->v = calloc(cap + 1, sizeof(*out->v))) == NULL) {
        free(items);
        return -ENOMEM;
    }
    out->cpu = sec->cpu && cli_report_ranks_any_cpu_wait(rows[0]) &&
               cli_report_ranks_any_cpu_wait(rows[1]);
    for (int s = 0; s < 2; s++)
        cli_diff_collect(items, &n, rows[s], sec, s);
    qsort(items, n, sizeof(*items), cli_diff_item_cmp);
    for (size_t i = 0; i < n; i++) {
        struct cli_diff_item *it = &items[i];
        struct cli_diff_row *r = out->n > 0 ? &out->v[out->n - 1] : NULL;

        /* items are sorted by key: a key's items of A and B (and ops of one category) adjoin */
        if (r == NULL || cli_diff_keycmp(&r->key, &it->key) != 0) {
            r = &out->v[out->n++];
            r->key = it->key;
            r->extra_ab[0] = sec->extra_a;
            r->extra_ab[1] = sec->extra_b;
            r->cpu = out->cpu;
        }
        if (sec->has_cat && !r->in[1]) { /* B's category, else A's */
            r->cat = it->cat;
            r->cat_len = it->cat_len;
        }
        r->in[it->side] = true;
        r->v[it->side].calls = cli_diff_sat_add(r->v[it->side].calls, it->v.calls);
        r->v[it->side].total_ns = cli_diff_sat_add(r->v[it->side].total_ns, it->v.total_ns);
        r->v[it->side].mem_bytes = cli_diff_sat_add(r->v[it->side].mem_bytes, it->v.mem_bytes);
        r->v[it->side].extra_ns = cli_diff_sat_add(r->v[it->side].extra_ns, it->v.extra_ns);
        r->v[it->side].cpu_ns = cli_diff_sat_add(r->v[it->side].cpu_ns, it->v.cpu_ns);
    }
    free(items);
    for (size_t i = 0; i < out->n; i++)
        cli_diff_judge(&out->v[i], o);
    qsort(out->v, out->n, sizeof(*out->v), cli_diff_row_cmp);
    return 0;
}

/* ---- the result map -------------------------------------------------------- */

static void cli_diff_pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
}

static void cli_diff_pack_key(msgpack_packer *pk, const char *s)
{
    cli_diff_pack_str(pk, s, strlen(s));
}

static void cli_diff_pack_bool(msgpack_packer *pk, bool v)
{
    if (v)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
}

static void cli_diff_pack_opt(msgpack_packer *pk, bool present, uint64_t v)
{
    if (present)
        msgpack_pack_uint64(pk, v);
    else
        msgpack_pack_nil(pk);
}

/* One row: {[key], [category], calls_a, calls_b, total_a_ns, ..., status}; key NULL: none. */
static void cli_diff_pack_row(msgpack_packer *pk, const struct cli_diff_row *r, const char *key)
{
    uint64_t a = r->v[0].total_ns;

    msgpack_pack_map(pk, 13 + (key != NULL) + (r->cat != NULL) + 2 * (r->extra_ab[0] != NULL) +
                             2 * r->cpu);
    if (key != NULL) {
        cli_diff_pack_key(pk, key);
        if (r->key.kind == CLI_DIFF_STR)
            cli_diff_pack_str(pk, r->key.s, r->key.len);
        else if (r->key.kind == CLI_DIFF_INT)
            msgpack_pack_int64(pk, r->key.n);
        else
            msgpack_pack_nil(pk);
    }
    if (r->cat != NULL) {
        cli_diff_pack_key(pk, "category");
        cli_diff_pack_str(pk, r->cat, r->cat_len);
    }
    cli_diff_pack_key(pk, "calls_a");
    cli_diff_pack_opt(pk, r->in[0], r->v[0].calls);
    cli_diff_pack_key(pk, "calls_b");
    cli_diff_pack_opt(pk, r->in[1], r->v[1].calls);
    cli_diff_pack_key(pk, "total_a_ns");
    cli_diff_pack_opt(pk, r->in[0], r->v[0].total_ns);
    cli_diff_pack_key(pk, "total_b_ns");
    cli_diff_pack_opt(pk, r->in[1], r->v[1].total_ns);
    cli_diff_pack_key(pk, "delta_ns");
    msgpack_pack_int64(pk, r->delta_ns);
    cli_diff_pack_key(pk, "delta_pct"); /* nil: A's time is 0 and B's is not */
    if (a > 0)
        msgpack_pack_double(pk, (double)r->delta_ns * 100.0 / (double)a);
    else if (r->delta_ns == 0)
        msgpack_pack_double(pk, 0.0);
    else
        msgpack_pack_nil(pk);
    cli_diff_pack_key(pk, "mem_a");
    cli_diff_pack_opt(pk, r->in[0], r->v[0].mem_bytes);
    cli_diff_pack_key(pk, "mem_b");
    cli_diff_pack_opt(pk, r->in[1], r->v[1].mem_bytes);
    for (int s = 0; r->extra_ab[0] != NULL && s < 2; s++) {
        cli_diff_pack_key(pk, r->extra_ab[s]);
        cli_diff_pack_opt(pk, r->in[s], r->v[s].extra_ns);
    }
    for (int s = 0; r->cpu && s < 2; s++) {
        cli_diff_pack_key(pk, s ? "cpu_wait_b_ns" : "cpu_wait_a_ns");
        cli_diff_pack_opt(pk, r->in[s], r->v[s].cpu_ns);
    }
    cli_diff_pack_key(pk, "new");
    cli_diff_pack_bool(pk, r->in[1] && !r->in[0]);
    cli_diff_pack_key(pk, "vanished");
    cli_diff_pack_bool(pk, r->in[0] && !r->in[1]);
    cli_diff_pack_key(pk, "regressed");
    cli_diff_pack_bool(pk, r->regressed);
    cli_diff_pack_key(pk, "improved");
    cli_diff_pack_bool(pk, r->improved);
    cli_diff_pack_key(pk, "status");
    cli_diff_pack_key(pk, r->regressed ? "regressed" : r->improved ? "improved" : "same");
}

/*
 * The session header of one side: {id, name, state, entries, total_ns, span_ns, interrupted,
 * interrupted_reason, interrupted_ns} (the last three nil from a daemon that does not send them).
 */
static void cli_diff_pack_session(msgpack_packer *pk, const msgpack_object *rep)
{
    static const char *const keys[] = {"id",
                                       "name",
                                       "state",
                                       "entries",
                                       "total_ns",
                                       "span_ns",
                                       "interrupted",
                                       "interrupted_reason",
                                       "interrupted_ns"};
    const msgpack_object *s = cli_obj_get(rep, "session");
    const msgpack_object *hosts = cli_obj_get(rep, "hosts");

    msgpack_pack_map(pk, CLI_DIFF_NCOLS(keys) + 1);
    for (size_t i = 0; i < CLI_DIFF_NCOLS(keys); i++) {
        const msgpack_object *v = cli_obj_get(s, keys[i]);

        cli_diff_pack_key(pk, keys[i]);
        if (v != NULL)
            msgpack_pack_object(pk, *v);
        else
            msgpack_pack_nil(pk);
    }
    /* a home's report of a session that spans hosts: the hosts it merges (its `hosts` rows'
     * names); nil from a report without them (one host) */
    cli_diff_pack_key(pk, "hosts");
    if (hosts == NULL || hosts->type != MSGPACK_OBJECT_ARRAY) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_array(pk, hosts->via.array.size);
    for (uint32_t i = 0; i < hosts->via.array.size; i++) {
        const msgpack_object *h = cli_obj_get(&hosts->via.array.ptr[i], "host");

        if (h != NULL && h->type == MSGPACK_OBJECT_STR)
            msgpack_pack_object(pk, *h);
        else
            msgpack_pack_nil(pk);
    }
}

/* The session totals as a row: calls = entries, memory = memory.total_bytes. */
static void cli_diff_total(const msgpack_object *rep[2], const struct cli_diff_opts *o,
                           struct cli_diff_row *r)
{
    memset(r, 0, sizeof(*r));
    for (int s = 0; s < 2; s++) {
        const msgpack_object *sess = cli_obj_get(rep[s], "session");

        r->in[s] = true;
        r->v[s].calls = cli_diff_u64(sess, "entries");
        r->v[s].total_ns = cli_diff_u64(sess, "total_ns");
        r->v[s].mem_bytes = cli_diff_u64(cli_obj_get(rep[s], "memory"), "total_bytes");
    }
    cli_diff_judge(r, o);
}

/* The verdict line of a report (a newer daemon's per-rank analysis), or nil. */
static void cli_diff_pack_verdict(msgpack_packer *pk, const msgpack_object *rep)
{
    const msgpack_object *v = cli_obj_get(rep, "verdict");

    if (v != NULL && v->type == MSGPACK_OBJECT_STR)
        msgpack_pack_object(pk, *v);
    else
        msgpack_pack_nil(pk);
}

int cli_diff_compare(const msgpack_object *rep[2], const struct cli_diff_opts *o,
                     msgpack_sbuffer *sb, size_t *regressed)
{
    struct cli_diff_rows rows[CLI_DIFF_NSECTIONS];
    struct cli_diff_row total;
    msgpack_packer pk;
    size_t present = 0;
    int rc = 0;

    memset(rows, 0, sizeof(rows));
    cli_diff_total(rep, o, &total);
    *regressed = total.regressed;
    for (size_t i = 0; i < CLI_DIFF_NSECTIONS && rc == 0; i++) {
        rc = cli_diff_match(rep, &cli_diff_sections[i], o, &rows[i]);
        present += rows[i].present || i < 3; /* ops, categories, devices: always */
        for (size_t k = 0; rc == 0 && k < rows[i].n; k++)
            *regressed += rows[i].v[k].regressed;
    }
    if (rc == 0) {
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 9 + present);
        cli_diff_pack_key(&pk, "a");
        cli_diff_pack_session(&pk, rep[0]);
        cli_diff_pack_key(&pk, "b");
        cli_diff_pack_session(&pk, rep[1]);
        cli_diff_pack_key(&pk, "threshold_pct");
        msgpack_pack_double(&pk, o->threshold);
        cli_diff_pack_key(&pk, "min_time_ns");
        msgpack_pack_uint64(&pk, o->min_time_ns);
        cli_diff_pack_key(&pk, "regressions");
        msgpack_pack_uint64(&pk, *regressed);
        cli_diff_pack_key(&pk, "regressed");
        cli_diff_pack_bool(&pk, *regressed > 0);
        cli_diff_pack_key(&pk, "verdict_a");
        cli_diff_pack_verdict(&pk, rep[0]);
        cli_diff_pack_key(&pk, "verdict_b");
        cli_diff_pack_verdict(&pk, rep[1]);
        cli_diff_pack_key(&pk, "total");
        cli_diff_pack_row(&pk, &total, NULL);
        for (size_t i = 0; i < CLI_DIFF_NSECTIONS; i++) {
            if (!rows[i].present && i >= 3)
                continue;
            cli_diff_pack_key(&pk, cli_diff_sections[i].name);
            msgpack_pack_array(&pk, (uint32_t)rows[i].n);
            for (size_t k = 0; k < rows[i].n; k++)
                cli_diff_pack_row(&pk, &rows[i].v[k], cli_diff_sections[i].key);
        }
    }
    for (size_t i = 0; i < CLI_DIFF_NSECTIONS; i++)
        free(rows[i].v);
    return rc;
}

/* ---- human output ---------------------------------------------------------- */

static void cli_diff_delta_cell(const msgpack_object *row, char *buf, size_t size)
{
    const msgpack_object *v = cli_obj_get(row, "delta_ns");
    int64_t d = 0;
    char t[CLI_FMT_LEN];

    if (v != NULL && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        d = v->via.i64;
    else if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        d = (int64_t)v->via.u64;
    cli_fmt_duration(t, sizeof(t), d < 0 ? -(uint64_t)d : (uint64_t)d);
    snprintf(buf, size, "%s%s", d < 0 ? "-" : d > 0 ? "+" : "", t);
}

static void cli_diff_pct_cell(const msgpack_object *row, char *buf, size_t size)
{
    double p;

    if (cli_obj_f64(cli_obj_get(row, "delta_pct"), &p) != 0)
        snprintf(buf, size, "new");
    else
        snprintf(buf, size, "%+.1f%%", p);
}

static bool cli_diff_flag(const msgpack_object *row, const char *key)
{
    const msgpack_object *v = cli_obj_get(row, key);

    return v != NULL && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

/* "new", "vanished", "regressed", "improved", or two of them ("new, regressed"); "" if none. */
static void cli_diff_status_cell(const msgpack_object *row, char *buf, size_t size)
{
    const char *pres = cli_diff_flag(row, "new")        ? "new"
                       : cli_diff_flag(row, "vanished") ? "vanished"
                                                        : "";
    const char *verdict = cli_diff_flag(row, "regressed")  ? "regressed"
                          : cli_diff_flag(row, "improved") ? "improved"
                                                           : "";

    snprintf(buf, size, "%s%s%s", pres, pres[0] && verdict[0] ? ", " : "", verdict);
}

/*
 * The columns of a section's table: its key (and the category of ops), then
 * calls, time, change and memory of A and B (with cpu, the ranks' CPU wait of A and B), and
 * the status.
 */
static size_t cli_diff_cols(const struct cli_diff_section *sec, bool cpu, struct cli_view_col *cols,
                            char names[6][32])
{
    const char *th = sec->time_header ? sec->time_header : "TIME";
    size_t n = 0;

    cols[n++] = (struct cli_view_col){sec->header, sec->key, CLI_VIEW_TEXT, 32, NULL};
    if (sec->has_cat)
        cols[n++] = (struct cli_view_col){"CATEGORY", "category", CLI_VIEW_TEXT, 10, NULL};
    snprintf(names[0], sizeof(names[0]), "%s A", sec->calls_header);
    snprintf(names[1], sizeof(names[1]), "%s B", sec->calls_header);
    cols[n++] = (struct cli_view_col){names[0], "calls_a", CLI_VIEW_COUNT, 0, NULL};
    cols[n++] = (struct cli_view_col){names[1], "calls_b", CLI_VIEW_COUNT, 0, NULL};
    snprintf(names[2], sizeof(names[2]), "%s A", th);
    snprintf(names[3], sizeof(names[3]), "%s B", th);
    cols[n++] = (struct cli_view_col){names[2], "total_a_ns", CLI_VIEW_DURATION, 0, NULL};
    cols[n++] = (struct cli_view_col){names[3], "total_b_ns", CLI_VIEW_DURATION, 0, NULL};
    cols[n++] = (struct cli_view_col){"CHANGE", NULL, CLI_VIEW_COUNT, 0, cli_diff_delta_cell};
    cols[n++] = (struct cli_view_col){"CHANGE%", NULL, CLI_VIEW_COUNT, 0, cli_diff_pct_cell};
    if (sec->extra != NULL) {
        snprintf(names[4], sizeof(names[4]), "%s A", sec->extra_header);
        snprintf(names[5], sizeof(names[5]), "%s B", sec->extra_header);
        cols[n++] = (struct cli_view_col){names[4], sec->extra_a, CLI_VIEW_DURATION, 0, NULL};
        cols[n++] = (struct cli_view_col){names[5], sec->extra_b, CLI_VIEW_DURATION, 0, NULL};
    }
    if (cpu) {
        cols[n++] =
            (struct cli_view_col){"CPU WAIT A", "cpu_wait_a_ns", CLI_VIEW_DURATION, 0, NULL};
        cols[n++] =
            (struct cli_view_col){"CPU WAIT B", "cpu_wait_b_ns", CLI_VIEW_DURATION, 0, NULL};
    }
    if (sec->mem != NULL) {
        cols[n++] = (struct cli_view_col){"MEM A", "mem_a", CLI_VIEW_BYTES, 0, NULL};
        cols[n++] = (struct cli_view_col){"MEM B", "mem_b", CLI_VIEW_BYTES, 0, NULL};
    }
    cols[n++] = (struct cli_view_col){"STATUS", NULL, CLI_VIEW_TEXT, 0, cli_diff_status_cell};
    return n;
}

/* Sessions A and B with their totals, the change, and the verdict line. */
/*
 * At a home, a side that spans hosts: which sections cover them. Operations, categories,
 * devices, ranks and the totals come from the merged report (every host's: members send
 * their ranks' rows); steps and the verdict are the home's own ranks' (members send no
 * per-step tables).
 */
static int cli_diff_hosts_note(FILE *f, const msgpack_object *diff)
{
    for (int s = 0; s < 2; s++) {
        const msgpack_object *h = cli_obj_get(cli_obj_get(diff, s ? "b" : "a"), "hosts");
        char name[300];

        if (h == NULL || h->type != MSGPACK_OBJECT_ARRAY || h->via.array.size < 2)
            continue;
        if (fprintf(f, "%s spans %" PRIu32 " hosts (", s ? "B" : "A", h->via.array.size) < 0)
            return -EIO;
        for (uint32_t i = 0; i < h->via.array.size; i++) {
            cli_obj_text(&h->via.array.ptr[i], name, sizeof(name));
            if (fprintf(f, "%s%s", i ? ", " : "", name) < 0)
                return -EIO;
        }
        if (fputs("): operations, categories, devices, ranks and the totals cover every host; "
                  "steps and the verdict the home's own ranks only\n",
                  f) < 0)
            return -EIO;
    }
    return 0;
}

static int cli_diff_head(FILE *f, const msgpack_object *diff)
{
    static const struct cli_table_col cols[] = {
        {NULL, false, 0}, {NULL, false, 48}, {NULL, false, 48}, {NULL, true, 0}, {NULL, true, 0}};
    const msgpack_object *side[2] = {cli_obj_get(diff, "a"), cli_obj_get(diff, "b")};
    const msgpack_object *total = cli_obj_get(diff, "total");
    struct cli_table *t = cli_table_new(cols, CLI_DIFF_NCOLS(cols));
    static const struct {
        const char *label, *key;
        enum cli_view_kind kind;
    } lines[] = {{"state", "state", CLI_VIEW_TEXT},
                 {"entries", "entries", CLI_VIEW_COUNT},
                 {"total", "total_ns", CLI_VIEW_DURATION},
                 {"span", "span_ns", CLI_VIEW_DURATION}};
    char cell[2][CLI_FMT_LEN + 300], id[32], name[300];
    int rc = 0;

    if (t == NULL)
        return -ENOMEM;
    for (int s = 0; s < 2; s++) {
        cli_obj_text(cli_obj_get(side[s], "id"), id, sizeof(id));
        cli_obj_text(cli_obj_get(side[s], "name"), name, sizeof(name));
        snprintf(cell[s], sizeof(cell[s]), "%s %s (%s)", s ? "B" : "A", id, name);
    }
    rc |= cli_table_add(t, "session") | cli_table_add(t, cell[0]) | cli_table_add(t, cell[1]);
    rc |= cli_table_add(t, "CHANGE") | cli_table_add(t, "CHANGE%");
    for (size_t i = 0; i < CLI_DIFF_NCOLS(lines); i++) {
        rc |= cli_table_add(t, lines[i].label);
        for (int s = 0; s < 2; s++) {
            if (strcmp(lines[i].key, "state") == 0)
                cli_view_state(side[s], cell[s], sizeof(cell[s]));
            else
                cli_view_format(cli_obj_get(side[s], lines[i].key), lines[i].kind, cell[s],
                                sizeof(cell[s]));
            rc |= cli_table_add(t, cell[s]);
        }
        cell[0][0] = cell[1][0] = '\0';
        if (strcmp(lines[i].key, "total_ns") == 0) {
            cli_diff_delta_cell(total, cell[0], sizeof(cell[0]));
            cli_diff_pct_cell(total, cell[1], sizeof(cell[1]));
        }
        rc |= cli_table_add(t, cell[0]) | cli_table_add(t, cell[1]);
    }
    if (rc == 0)
        rc = cli_table_print(t, f, "");
    cli_table_free(t);
    if (rc == 0) {
        cli_view_cut_note(f, "A ", side[0]);
        cli_view_cut_note(f, "B ", side[1]);
    }
    return rc != 0 && rc != -EIO ? -ENOMEM : rc;
}

int cli_diff_print_line(FILE *f, const char *text)
{
    static const struct cli_table_col col = {NULL, false, 0};
    struct cli_table *t = cli_table_new(&col, 1);
    int rc;

    if (t == NULL)
        return -ENOMEM;
    rc = cli_table_add(t, text);
    if (rc == 0)
        rc = cli_table_print(t, f, "");
    cli_table_free(t);
    return rc;
}

/* "Verdict: ..." — what regressed, the largest few by name; then the reports' own verdicts. */
static int cli_diff_verdict(FILE *f, const msgpack_object *diff)
{
    uint64_t n = 0, min = 0;
    double thr = 0;
    char t[CLI_FMT_LEN], d[CLI_FMT_LEN + 8], p[CLI_FMT_LEN + 8], line[1024], name[64];
    const msgpack_object *ops = cli_obj_get(diff, "ops"), *v;
    int shown = 0, len, rc;

    (void)cli_obj_u64(cli_obj_get(diff, "regressions"), &n);
    (void)cli_obj_u64(cli_obj_get(diff, "min_time_ns"), &min);
    (void)cli_obj_f64(cli_obj_get(diff, "threshold_pct"), &thr);
    cli_fmt_duration(t, sizeof(t), min);
    if (n == 0)
        len = snprintf(line, sizeof(line), "Verdict: no regression");
    else
        len =
            snprintf(line, sizeof(line), "Verdict: %" PRIu64 " regression%s", n, n == 1 ? "" : "s");
    len += snprintf(line + len, sizeof(line) - (size_t)len, " (more than %+.1f%% and at least %s)",
                    thr, t);
    for (uint32_t i = 0; ops != NULL && ops->type == MSGPACK_OBJECT_ARRAY &&
                         i < ops->via.array.size && shown < 3 && (size_t)len < sizeof(line);
         i++) {
        const msgpack_object *r = &ops->via.array.ptr[i];

        if (!cli_diff_flag(r, "regressed"))
            continue;
        cli_obj_text(cli_obj_get(r, "op"), name, sizeof(name));
        cli_diff_delta_cell(r, d, sizeof(d));
        cli_diff_pct_cell(r, p, sizeof(p));
        len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %s (%s)", shown ? ", " : ": ",
                        name, d, p);
        shown++;
    }
    rc = cli_diff_print_line(f, line); /* names off the wire: sanitized by cli_table */
    for (int s = 0; s < 2 && rc == 0; s++) {
        if ((v = cli_obj_get(diff, s ? "verdict_b" : "verdict_a")) == NULL ||
            v->type != MSGPACK_OBJECT_STR)
            continue;
        snprintf(line, sizeof(line), "%s: %.*s", s ? "B" : "A", (int)v->via.str.size,
                 v->via.str.ptr);
        rc = cli_diff_print_line(f, line);
    }
    return rc;
}

/* One section's table, its first `top` rows (0: all); nothing when the diff lacks it. */
static int cli_diff_table(FILE *f, const struct cli_diff_section *sec, const msgpack_object *diff,
                          size_t top)
{
    const msgpack_object *rows = cli_obj_get(diff, sec->name);
    struct cli_view_col cols[CLI_VIEW_MAX_COLS];
    char names[6][32];
    size_t ncols;
    msgpack_object cut;
    int rc;

    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    /* the rows compare the CPU wait when the diff gave them its keys (both sides had one) */
    ncols = cli_diff_cols(sec,
                          rows->via.array.size > 0 &&
                              cli_obj_get(&rows->via.array.ptr[0], "cpu_wait_a_ns") != NULL,
                          cols, names);
    fprintf(f, "\n%s (by absolute change in %s)\n", sec->title,
            sec->time_header ? "caused time" : "time");
    cut = *rows;
    if (top > 0 && cut.via.array.size > top)
        cut.via.array.size = (uint32_t)top;
    rc = cli_view_table(f, CLI_DIFF_INDENT, cols, ncols, &cut);
    if (rc == 0 && cut.via.array.size < rows->via.array.size)
        fprintf(f, "%s(%u of %u rows shown: --top all)\n", CLI_DIFF_INDENT, cut.via.array.size,
                rows->via.array.size);
    return rc == 0 && ferror(f) ? -EIO : rc;
}

int cli_diff_print(FILE *f, const msgpack_object *diff, const struct cli_diff_opts *o)
{
    int rc = cli_diff_head(f, diff);

    if (rc == 0)
        rc = cli_diff_hosts_note(f, diff);
    if (rc == 0) {
        fputc('\n', f);
        rc = cli_diff_verdict(f, diff);
    }
    for (size_t i = 0; i < CLI_DIFF_NSECTIONS && rc == 0; i++)
        rc = cli_diff_table(f, &cli_diff_sections[i], diff, o->top);
    return rc;
}

/* ---- the command ------------------------------------------------------------ */

/* Fetches the report of the session named by arg on conn. Returns an exit code. */
static int cli_diff_fetch(struct cli_ctx *ctx, char *arg, struct cli_conn *conn,
                          const msgpack_object **rep)
{
    struct proto_request req;
    int rc;

    proto_request_init(&req);
    req.top = 1;            /* the slowest calls and hotspots are not compared */
    req.analysis.on = true; /* ranks, steps and the verdict are */
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    rc = cli_call(ctx, PROTO_REPORT, &req, conn, rep);
    if (rc == CLI_EXIT_OK && (*rep)->type != MSGPACK_OBJECT_MAP) {
        cli_error("bad reply from the daemon: the report is not a map");
        cli_conn_close(conn);
        return CLI_EXIT_ERROR;
    }
    return rc;
}

static int cli_diff_reports(struct cli_ctx *ctx, char **args, const struct cli_diff_opts *o)
{
    struct cli_conn conn[2];
    const msgpack_object *rep[2];
    msgpack_sbuffer sb;
    msgpack_unpacked diff;
    size_t regressed = 0;
    int rc;

    if ((rc = cli_diff_fetch(ctx, args[0], &conn[0], &rep[0])) != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_diff_fetch(ctx, args[1], &conn[1], &rep[1])) != CLI_EXIT_OK) {
        cli_conn_close(&conn[0]);
        return rc;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_unpacked_init(&diff);
    if (cli_diff_compare(rep, o, &sb, &regressed) != 0 ||
        msgpack_unpack_next(&diff, sb.data, sb.size, NULL) != MSGPACK_UNPACK_SUCCESS) {
        cli_error("diff: out of memory");
        rc = CLI_EXIT_ERROR;
    } else if (ctx->json) {
        rc = cli_print_json(&diff.data);
    } else {
        rc = cli_print_status(cli_diff_print(stdout, &diff.data, o));
    }
    if (rc == CLI_EXIT_OK && regressed > 0)
        rc = CLI_EXIT_DIFFERS;
    msgpack_unpacked_destroy(&diff);
    msgpack_sbuffer_destroy(&sb);
    cli_conn_close(&conn[1]);
    cli_conn_close(&conn[0]);
    return rc;
}

int cli_diff_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct cli_diff_opts o = {.threshold = 5.0, .min_time_ns = 0, .top = CLI_DIFF_TOP};
    int rc;

    if ((rc = cli_diff_opts(ctx, argc, argv, &o)) != CLI_CONTINUE)
        return rc;
    rc = o.divergence ? cli_diverge_run(ctx, &argv[optind])
                      : cli_diff_reports(ctx, &argv[optind], &o);
    /* diff(1)'s convention, so that CI can gate on it: 1 means "they differ";
     * what is 1 for the other commands (an I/O error, a bad reply) is 7 here. */
    if (rc == CLI_EXIT_ERROR)
        return CLI_EXIT_DIFF_FAILED;
    return rc == CLI_EXIT_DIFFERS ? CLI_EXIT_ERROR : rc;
}
