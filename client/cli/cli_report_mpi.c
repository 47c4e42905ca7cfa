/*
 * cli_report_mpi — the report's MPI sections; see cli_report_mpi.h. The
 * ranks and the pairs go through cli_view; the communicators (a row per op
 * under each), the sizes (a row per bucket under each op) and the matrix are
 * built cell by cell with cli_table.
 */
#include "cli_report_mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_table.h"
#include "cli_view.h"
#include "util.h"

#define RM_INDENT "  "

static const msgpack_object *rm_array(const msgpack_object *map, const char *key)
{
    const msgpack_object *a = cli_obj_get(map, key);

    return a != NULL && a->type == MSGPACK_OBJECT_ARRAY ? a : NULL;
}

static uint64_t rm_u64(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;

    cli_obj_u64(cli_obj_get(map, key), &v);
    return v;
}

static int rm_add_u64(struct cli_table *t, uint64_t v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cli_table_add(t, buf);
}

static int rm_add_duration(struct cli_table *t, uint64_t ns)
{
    char buf[CLI_FMT_LEN];

    cli_fmt_duration(buf, sizeof(buf), ns);
    return cli_table_add(t, buf);
}

static int rm_add_bytes(struct cli_table *t, uint64_t bytes)
{
    char buf[CLI_FMT_LEN];

    cli_fmt_bytes(buf, sizeof(buf), bytes);
    return cli_table_add(t, buf);
}

/* The share (0 to 1) under key in map, as a percentage; 0 when it has none. */
static int rm_add_share(struct cli_table *t, const msgpack_object *map, const char *key)
{
    char buf[CLI_FMT_LEN];
    double share = 0;

    cli_obj_f64(cli_obj_get(map, key), &share);
    cli_fmt_share(buf, sizeof(buf), share);
    return cli_table_add(t, buf);
}

static int rm_print_table(FILE *f, struct cli_table *t, int rc)
{
    if (rc == 0)
        rc = cli_table_print(t, f, RM_INDENT);
    cli_table_free(t);
    return rc;
}

/* ---- ranks: MPI time and MPI % -------------------------------------------------- */

static const struct cli_table_col rm_ranks_cols[] = {
    {"RANK", true, 0}, {"WALL", true, 0},  {"MPI", true, 0},     {"APP", true, 0},
    {"MPI%", true, 0}, {"CALLS", true, 0}, {"DROPPED", true, 0},
};

/* What the WALL column measures: every rank's MPI_Init to MPI_Finalize, else say which not. */
static const char *rm_wall_note(const msgpack_object *ranks)
{
    size_t init = 0;

    for (uint32_t i = 0; i < ranks->via.array.size; i++)
        init += cli_obj_str_eq(cli_obj_get(&ranks->via.array.ptr[i], "wall_from"), "init_finalize");
    if (init == ranks->via.array.size)
        return "wall time from MPI_Init to MPI_Finalize";
    if (init == 0)
        return "wall time from each rank's first to its last MPI call";
    return "wall time from MPI_Init to MPI_Finalize where both were seen, else from the first"
           " to the last MPI call";
}

/* One row: rank (NULL: "*", the total), then the row map's figures. */
static int rm_rank_row(struct cli_table *t, const char *rank, const msgpack_object *row)
{
    char buf[CLI_FMT_LEN];
    int rc;

    if (rank == NULL) {
        cli_view_format(cli_obj_get(row, "rank"), CLI_VIEW_COUNT, buf, sizeof(buf));
        rank = buf;
    }
    rc = cli_table_add(t, rank);
    rc = rc ? rc : rm_add_duration(t, rm_u64(row, "wall_ns"));
    rc = rc ? rc : rm_add_duration(t, rm_u64(row, "mpi_ns"));
    rc = rc ? rc : rm_add_duration(t, rm_u64(row, "app_ns"));
    rc = rc ? rc : rm_add_share(t, row, "mpi_share");
    rc = rc ? rc : rm_add_u64(t, rm_u64(row, "calls"));
    return rc ? rc : rm_add_u64(t, rm_u64(row, "dropped_calls"));
}

static int rm_ranks(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *ranks = rm_array(mpi, "ranks"), *total = cli_obj_get(mpi, "total");
    struct cli_table *t;
    int rc = 0;

    if (ranks == NULL)
        return 0;
    fprintf(f, "MPI time (%s; APP = WALL - MPI)\n", rm_wall_note(ranks));
    if ((t = cli_table_new(rm_ranks_cols, UTIL_ARRAY_LEN(rm_ranks_cols))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < ranks->via.array.size; i++)
        rc = rm_rank_row(t, NULL, &ranks->via.array.ptr[i]);
    if (rc == 0 && total != NULL && ranks->via.array.size > 1)
        rc = rm_rank_row(t, "*", total);
    return rm_print_table(f, t, rc);
}

/* ---- communicators ---------------------------------------------------------------- */

static const struct cli_table_col rm_comm_cols[] = {
    {"COMM", false, 0}, {"SIZE", true, 0}, {"RANKS", false, 24}, {"OP", false, 32},
    {"CALLS", true, 0}, {"TIME", true, 0}, {"BYTES", true, 0},
};

/* members (an array of ranks, sorted) as "0-3,8,10-11" into buf. */
static void rm_members(const msgpack_object *members, char *buf, size_t size)
{
    size_t len = 0;
    uint32_t n = members != NULL ? members->via.array.size : 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < n && len < size;) {
        uint64_t first = 0, last, v;
        uint32_t j = i + 1;

        cli_obj_u64(&members->via.array.ptr[i], &first);
        last = first;
        while (j < n && cli_obj_u64(&members->via.array.ptr[j], &v) == 0 && v == last + 1) {
            last = v;
            j++;
        }
        len += (size_t)snprintf(buf + len, size - len,
                                last > first ? "%s%" PRIu64 "-%" PRIu64 : "%s%" PRIu64,
                                i > 0 ? "," : "", first, last);
        i = j;
    }
}

static int rm_comm_line(struct cli_table *t, const char *comm, const char *size, const char *ranks,
                        const char *op, const msgpack_object *row)
{
    int rc = cli_table_add(t, comm);

    rc = rc ? rc : cli_table_add(t, size);
    rc = rc ? rc : cli_table_add(t, ranks);
    rc = rc ? rc : cli_table_add(t, op);
    rc = rc ? rc : rm_add_u64(t, rm_u64(row, "calls"));
    rc = rc ? rc : rm_add_duration(t, rm_u64(row, "total_ns"));
    return rc ? rc : rm_add_bytes(t, rm_u64(row, "bytes"));
}

static int rm_comm(struct cli_table *t, const msgpack_object *c)
{
    const msgpack_object *ops = rm_array(c, "ops");
    char name[CLI_FMT_LEN], size[32], ranks[256];
    int rc;

    cli_obj_text(cli_obj_get(c, "name"), name, sizeof(name));
    snprintf(size, sizeof(size), "%" PRIu64, rm_u64(c, "size"));
    rm_members(rm_array(c, "members"), ranks, sizeof(ranks));
    rc = rm_comm_line(t, name, size, ranks, "(all)", c);
    for (uint32_t i = 0; rc == 0 && ops != NULL && i < ops->via.array.size; i++) {
        char op[CLI_FMT_LEN];

        cli_obj_text(cli_obj_get(&ops->via.array.ptr[i], "op"), op, sizeof(op));
        rc = rm_comm_line(t, "", "", "", op, &ops->via.array.ptr[i]);
    }
    return rc;
}

static int rm_comms(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *comms = rm_array(mpi, "comms");
    struct cli_table *t;
    int rc = 0;

    fprintf(f, "MPI communicators (by time; kind#N: the N-th made from its parent, WORLD or"
               " the one before /)\n");
    if (comms == NULL || comms->via.array.size == 0) {
        fprintf(f, "%s(none)\n", RM_INDENT);
        return 0;
    }
    if ((t = cli_table_new(rm_comm_cols, UTIL_ARRAY_LEN(rm_comm_cols))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < comms->via.array.size; i++)
        rc = rm_comm(t, &comms->via.array.ptr[i]);
    return rm_print_table(f, t, rc);
}

/* ---- message sizes ------------------------------------------------------------------ */

static const struct cli_table_col rm_size_cols[] = {
    {"OP", false, 32}, {"SIZE", false, 0}, {"CALLS", true, 0}, {"TIME", true, 0}, {"AVG", true, 0},
};

/* A power of two (or 0) of bytes, exactly: "0 B", "512 B", "4 KiB", "2 MiB", "1 GiB". */
static void rm_pow2(char *buf, size_t size, uint64_t v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned u = 0;

    while (v >= 1024 && v % 1024 == 0 && u + 1 < UTIL_ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, "%" PRIu64 " %s", v, units[u]);
}

static int rm_bucket(struct cli_table *t, const char *op, const msgpack_object *b)
{
    char lo[32], hi[32], cell[80];
    uint64_t min = rm_u64(b, "min_bytes"), calls = rm_u64(b, "calls"), ns = rm_u64(b, "total_ns");
    int rc;

    rm_pow2(lo, sizeof(lo), min);
    if (min == 0) {
        snprintf(cell, sizeof(cell), "0 B");
    } else if (min >= (uint64_t)1 << 63) {
        snprintf(cell, sizeof(cell), "[%s, 16 EiB)", lo);
    } else {
        rm_pow2(hi, sizeof(hi), min * 2);
        snprintf(cell, sizeof(cell), "[%s, %s)", lo, hi);
    }
    rc = cli_table_add(t, op);
    rc = rc ? rc : cli_table_add(t, cell);
    rc = rc ? rc : rm_add_u64(t, calls);
    rc = rc ? rc : rm_add_duration(t, ns);
    return rc ? rc : rm_add_duration(t, calls > 0 ? ns / calls : 0);
}

static int rm_sizes(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *sizes = rm_array(mpi, "sizes");
    struct cli_table *t;
    int rc = 0;

    fprintf(f, "MPI message sizes (bytes per call, power-of-two buckets)\n");
    if (sizes == NULL || sizes->via.array.size == 0) {
        fprintf(f, "%s(none)\n", RM_INDENT);
        return 0;
    }
    if ((t = cli_table_new(rm_size_cols, UTIL_ARRAY_LEN(rm_size_cols))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < sizes->via.array.size; i++) {
        const msgpack_object *s = &sizes->via.array.ptr[i], *b = rm_array(s, "buckets");
        char op[CLI_FMT_LEN];

        cli_obj_text(cli_obj_get(s, "op"), op, sizeof(op));
        for (uint32_t k = 0; rc == 0 && b != NULL && k < b->via.array.size; k++)
            rc = rm_bucket(t, k == 0 ? op : "", &b->via.array.ptr[k]);
    }
    return rm_print_table(f, t, rc);
}

/* ---- point to point ------------------------------------------------------------------- */

static const struct cli_view_col rm_pair_cols[] = {
    {"FROM", "from", CLI_VIEW_COUNT, 0, NULL},
    {"TO", "to", CLI_VIEW_COUNT, 0, NULL},
    {"MESSAGES", "messages", CLI_VIEW_COUNT, 0, NULL},
    {"BYTES", "bytes", CLI_VIEW_BYTES, 0, NULL},
    {"RECEIVED", "recv_messages", CLI_VIEW_COUNT, 0, NULL},
    {"RECV_BYTES", "recv_bytes", CLI_VIEW_BYTES, 0, NULL},
};

/* The ranks of the pairs, sorted and unique, into *out (caller frees); their count, or -1. */
static int64_t rm_pair_ranks(const msgpack_object *pairs, int64_t **out)
{
    size_t n = 0;
    int64_t *r = malloc(2 * (size_t)pairs->via.array.size * sizeof(*r) + 1);

    if (r == NULL)
        return -1;
    for (uint32_t i = 0; i < pairs->via.array.size; i++)
        for (int k = 0; k < 2; k++) {
            uint64_t v;
            size_t j = 0;

            if (cli_obj_u64(cli_obj_get(&pairs->via.array.ptr[i], k ? "to" : "from"), &v) != 0 ||
                v > INT64_MAX)
                continue;
            while (j < n && r[j] < (int64_t)v)
                j++;
            if (j < n && r[j] == (int64_t)v)
                continue;
            memmove(&r[j + 1], &r[j], (n - j) * sizeof(*r));
            r[j] = (int64_t)v;
            n++;
        }
    *out = r;
    return (int64_t)n;
}

static const msgpack_object *rm_pair_find(const msgpack_object *pairs, int64_t from, int64_t to)
{
    for (uint32_t i = 0; i < pairs->via.array.size; i++) {
        const msgpack_object *p = &pairs->via.array.ptr[i];
        uint64_t a, b;

        if (cli_obj_u64(cli_obj_get(p, "from"), &a) == 0 && (int64_t)a == from &&
            cli_obj_u64(cli_obj_get(p, "to"), &b) == 0 && (int64_t)b == to)
            return p;
    }
    return NULL;
}

/* One matrix (key "messages" or "bytes"): a row per sender, a column per receiver. */
static int rm_matrix(FILE *f, const msgpack_object *pairs, const int64_t *ranks, size_t n,
                     const char *key)
{
    struct cli_table_col cols[CLI_REPORT_MPI_MATRIX + 1];
    char names[CLI_REPORT_MPI_MATRIX][24], cell[CLI_FMT_LEN];
    struct cli_table *t;
    int rc = 0;

    cols[0] = (struct cli_table_col){strcmp(key, "bytes") == 0 ? "BYTES" : "MESSAGES", true, 0};
    for (size_t j = 0; j < n; j++) {
        snprintf(names[j], sizeof(names[j]), "→%" PRId64, ranks[j]);
        cols[j + 1] = (struct cli_table_col){names[j], true, 0};
    }
    if ((t = cli_table_new(cols, n + 1)) == NULL)
        return -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        snprintf(cell, sizeof(cell), "%" PRId64 "→", ranks[i]);
        rc = cli_table_add(t, cell);
        for (size_t j = 0; rc == 0 && j < n; j++) {
            const msgpack_object *p = rm_pair_find(pairs, ranks[i], ranks[j]);

            if (p == NULL)
                snprintf(cell, sizeof(cell), "-");
            else if (strcmp(key, "bytes") == 0)
                cli_fmt_bytes(cell, sizeof(cell), rm_u64(p, "bytes"));
            else
                snprintf(cell, sizeof(cell), "%" PRIu64, rm_u64(p, "messages"));
            rc = cli_table_add(t, cell);
        }
    }
    return rm_print_table(f, t, rc);
}

static int rm_pair_by_bytes(const void *a, const void *b)
{
    uint64_t x = rm_u64(a, "bytes"), y = rm_u64(b, "bytes");

    return x > y ? -1 : x < y;
}

static int rm_top_pairs(FILE *f, const msgpack_object *pairs, uint32_t top)
{
    uint32_t n = pairs->via.array.size < top ? pairs->via.array.size : top;
    msgpack_object *sorted = malloc(((size_t)pairs->via.array.size + 1) * sizeof(*sorted));
    msgpack_object list = {.type = MSGPACK_OBJECT_ARRAY};
    int rc;

    if (sorted == NULL)
        return -ENOMEM;
    memcpy(sorted, pairs->via.array.ptr, pairs->via.array.size * sizeof(*sorted));
    qsort(sorted, pairs->via.array.size, sizeof(*sorted), rm_pair_by_bytes);
    list.via.array.ptr = sorted;
    list.via.array.size = n;
    fprintf(f, "%sthe %u pairs with the most bytes of %u (all in --json):\n", RM_INDENT, n,
            pairs->via.array.size);
    rc = cli_view_table(f, RM_INDENT, rm_pair_cols, UTIL_ARRAY_LEN(rm_pair_cols), &list);
    free(sorted);
    return rc;
}

static int rm_p2p(FILE *f, const msgpack_object *mpi, uint32_t top)
{
    const msgpack_object *p2p = cli_obj_get(mpi, "p2p"), *pairs = rm_array(p2p, "pairs");
    uint64_t differ = rm_u64(p2p, "pairs_differ");
    char b[CLI_FMT_LEN], rb[CLI_FMT_LEN];
    int64_t *ranks = NULL, n;
    int rc;

    cli_fmt_bytes(b, sizeof(b), rm_u64(p2p, "bytes"));
    cli_fmt_bytes(rb, sizeof(rb), rm_u64(p2p, "recv_bytes"));
    fprintf(f, "MPI point to point (sender → receiver; the sends: %" PRIu64 " messages, %s; ",
            rm_u64(p2p, "messages"), b);
    if (differ > 0)
        fprintf(f, "the receives: %" PRIu64 ", %s; %" PRIu64 " %s)\n", rm_u64(p2p, "recv_messages"),
                rb, differ, differ == 1 ? "pair differs" : "pairs differ");
    else
        fprintf(f, "receives agree)\n");
    if (pairs == NULL || pairs->via.array.size == 0) {
        fprintf(f, "%s(none)\n", RM_INDENT);
        return 0;
    }
    if ((n = rm_pair_ranks(pairs, &ranks)) < 0)
        return -ENOMEM;
    if (n <= CLI_REPORT_MPI_MATRIX && rm_u64(p2p, "pairs_total") == pairs->via.array.size) {
        rc = rm_matrix(f, pairs, ranks, (size_t)n, "messages");
        if (rc == 0)
            rc = rm_matrix(f, pairs, ranks, (size_t)n, "bytes");
    } else {
        rc = rm_top_pairs(f, pairs, top > 0 ? top : 10);
    }
    free(ranks);
    return rc;
}

/* ---- callsites ------------------------------------------------------------------------- */

static const struct cli_table_col rm_site_cols[] = {
    {"SITE", false, 48},   {"OP", false, 24},  {"RANKS", true, 0},
    {"CALLS", true, 0},    {"TIME", true, 0},  {"MPI%", true, 0},
    {"MAX_RANK", true, 0}, {"BYTES", true, 0}, {"MODULE+OFFSET", false, 48},
};

/* The base name of a path (what follows its last '/'). */
static const char *rm_base(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash != NULL ? slash + 1 : path;
}

/*
 * "function file:line" of module + offset by binutils' addr2line, run
 * without a shell (the module path is a producer's), into buf; false when it
 * cannot tell (no such file, no addr2line, no debug information).
 */
static bool rm_addr2line(const char *module, uint64_t offset, char *buf, size_t size)
{
    char off[32], out[1024] = "", *nl;
    int fds[2], status = 0;
    size_t len = 0;
    ssize_t got;
    pid_t pid;

    if (module[0] != '/' || access(module, R_OK) != 0 || pipe(fds) != 0)
        return false;
    snprintf(off, sizeof(off), "%" PRIx64, offset);
    if ((pid = fork()) == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(fds[1], STDOUT_FILENO);
        if (null >= 0)
            dup2(null, STDERR_FILENO), dup2(null, STDIN_FILENO);
        close(fds[0]);
        execlp("addr2line", "addr2line", "-f", "-e", module, off, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while (pid > 0 && len + 1 < sizeof(out) &&
           (got = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)got;
    close(fds[0]);
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return false;
    out[len] = '\0';
    /* two lines: the function, then file:line ("??" and "??:0" or "??:?" when unknown) */
    if ((nl = strchr(out, '\n')) == NULL)
        return false;
    *nl++ = '\0';
    nl[strcspn(nl, " \n")] = '\0';
    if (strncmp(nl, "??", 2) == 0 && strcmp(out, "??") == 0)
        return false;
    snprintf(buf, size, "%s %s", out, strncmp(nl, "??", 2) == 0 ? "?" : rm_base(nl));
    return true;
}

/* See cli_report_mpi.h. */
void cli_report_mpi_site_name(const msgpack_object *x, char *buf, size_t size)
{
    char symbol[256], module[1024];

    cli_obj_text(cli_obj_get(x, "symbol"), symbol, sizeof(symbol));
    cli_obj_text(cli_obj_get(x, "module"), module, sizeof(module));
    if (rm_addr2line(module, rm_u64(x, "offset"), buf, size))
        ; /* "main mpi_profile.c:105" */
    else if (symbol[0] != '\0' && strcmp(symbol, "-") != 0)
        snprintf(buf, size, "%s+0x%" PRIx64, symbol, rm_u64(x, "symbol_offset"));
    else
        snprintf(buf, size, "%s", "?");
}

static int rm_site(struct cli_table *t, const msgpack_object *x)
{
    char module[1024], cell[1100], buf[CLI_FMT_LEN];
    int rc;

    cli_report_mpi_site_name(x, cell, sizeof(cell));
    cli_obj_text(cli_obj_get(x, "module"), module, sizeof(module));
    rc = cli_table_add(t, cell);
    cli_obj_text(cli_obj_get(x, "op"), buf, sizeof(buf));
    rc = rc ? rc : cli_table_add(t, buf);
    rc = rc ? rc : rm_add_u64(t, rm_u64(x, "ranks"));
    rc = rc ? rc : rm_add_u64(t, rm_u64(x, "calls"));
    rc = rc ? rc : rm_add_duration(t, rm_u64(x, "total_ns"));
    rc = rc ? rc : rm_add_share(t, x, "mpi_share");
    /* the most time one rank spent there, and which rank */
    cli_fmt_duration(buf, sizeof(buf), rm_u64(x, "max_ns"));
    if (cli_obj_get(x, "max_rank") != NULL && !cli_obj_is_nil(cli_obj_get(x, "max_rank")))
        snprintf(cell, sizeof(cell), "%s (%" PRIu64 ")", buf, rm_u64(x, "max_rank"));
    else
        snprintf(cell, sizeof(cell), "%s", buf);
    rc = rc ? rc : cli_table_add(t, cell);
    rc = rc ? rc : rm_add_bytes(t, rm_u64(x, "bytes"));
    snprintf(cell, sizeof(cell), "%s+0x%" PRIx64, rm_base(module), rm_u64(x, "offset"));
    return rc ? rc : cli_table_add(t, cell);
}

static int rm_sites(FILE *f, const msgpack_object *mpi, uint32_t top)
{
    const msgpack_object *cs = cli_obj_get(mpi, "callsites"), *sites = rm_array(cs, "sites");
    uint32_t n = sites != NULL ? sites->via.array.size : 0, shown = n < top ? n : top;
    uint64_t unsent = rm_u64(cs, "unsent"), lost = rm_u64(cs, "lost_calls");
    struct cli_table *t;
    int rc = 0;

    if (cs == NULL || cs->type != MSGPACK_OBJECT_MAP)
        return 0; /* a filtered report: callsites count whole runs */
    fprintf(f, "MPI callsites (by time, counted in each process whatever was dropped; SITE by"
               " addr2line -f -e MODULE OFFSET)\n");
    if (n == 0) {
        fprintf(f, "%s(none)\n", RM_INDENT);
        return 0;
    }
    if ((t = cli_table_new(rm_site_cols, UTIL_ARRAY_LEN(rm_site_cols))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < shown; i++)
        rc = rm_site(t, &sites->via.array.ptr[i]);
    if ((rc = rm_print_table(f, t, rc)) != 0)
        return rc;
    if (shown < rm_u64(cs, "total"))
        fprintf(f, "%s(%u of %" PRIu64 " sites shown: --top N, or --json for up to 1024)\n",
                RM_INDENT, shown, rm_u64(cs, "total"));
    if (unsent > 0 || lost > 0)
        fprintf(f,
                "%s(not here: %" PRIu64 " sites past each process's 256 sent, %" PRIu64
                " calls past its table of sites)\n",
                RM_INDENT, unsent, lost);
    return 0;
}

int cli_report_mpi_sites(bool json, const msgpack_object *report, uint32_t top)
{
    const msgpack_object *mpi = cli_obj_get(report, "mpi");
    const msgpack_object *cs = cli_obj_get(mpi, "callsites");

    if (mpi == NULL || mpi->type != MSGPACK_OBJECT_MAP) {
        cli_error("report: no MPI calls in this session: no call sites");
        return CLI_EXIT_ERROR;
    }
    if (cs == NULL || cs->type != MSGPACK_OBJECT_MAP) {
        cli_error("report: this daemon gave no call sites (a filter, or a daemon before them)");
        return CLI_EXIT_ERROR;
    }
    if (json)
        return cli_print_json(cs);
    return cli_print_status(rm_sites(stdout, mpi, top > 0 ? top : 10));
}

/*
 * TRACECTL_MPI_P2P=auto: the rate, and when each rank that passed it began
 * counting (ns after its MPI_Init), e.g. "rank 0 from 1.20 s".
 */
static void rm_auto(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *ranks = rm_array(mpi, "ranks");
    char when[CLI_FMT_LEN];
    uint64_t rate = 0, v;
    size_t n = 0;

    if (cli_obj_u64(cli_obj_get(mpi, "p2p_auto_rate"), &rate) != 0 || ranks == NULL)
        return;
    fprintf(f, "%s(TRACECTL_MPI_P2P=auto, past %" PRIu64 " point-to-point calls/s: ", RM_INDENT,
            rate);
    for (uint32_t i = 0; i < ranks->via.array.size; i++) {
        const msgpack_object *row = &ranks->via.array.ptr[i];
        char rank[CLI_FMT_LEN];

        if (cli_obj_u64(cli_obj_get(row, "p2p_auto_ns"), &v) != 0)
            continue;
        cli_view_format(cli_obj_get(row, "rank"), CLI_VIEW_COUNT, rank, sizeof(rank));
        cli_fmt_duration(when, sizeof(when), v);
        fprintf(f, "%srank %s counted from %s after MPI_Init", n++ > 0 ? ", " : "", rank, when);
    }
    fprintf(f, "%s)\n",
            n == 0                      ? "no rank passed it: every call is an entry"
            : n < ranks->via.array.size ? "; the other ranks kept an entry per call"
                                        : "; an entry per call before that");
}

/* ---- the sections ----------------------------------------------------------------------- */

int cli_report_mpi_print(FILE *f, const msgpack_object *report, uint32_t top)
{
    const msgpack_object *mpi = cli_obj_get(report, "mpi");
    uint64_t dropped, counted;
    int rc;

    if (mpi == NULL || mpi->type != MSGPACK_OBJECT_MAP)
        return 0;
    fputc('\n', f);
    if ((rc = rm_ranks(f, mpi)) != 0)
        return rc;
    if ((dropped = rm_u64(mpi, "dropped_calls")) > 0)
        fprintf(f,
                "%s(%" PRIu64 " MPI calls were dropped: their time is in MPI and CALLS above;"
                " the tables below count the calls kept)\n",
                RM_INDENT, dropped);
    if ((counted = rm_u64(mpi, "counted_calls")) > 0)
        fprintf(f,
                "%s(%" PRIu64 " calls counted, not recorded one by one: TRACECTL_MPI_P2P;"
                " in MPI and CALLS above, in the communicators, message sizes and point to point"
                " below)\n",
                RM_INDENT, counted);
    rm_auto(f, mpi);
    fputc('\n', f);
    if ((rc = rm_comms(f, mpi)) != 0)
        return rc;
    fputc('\n', f);
    if ((rc = rm_sizes(f, mpi)) != 0)
        return rc;
    fputc('\n', f);
    if ((rc = rm_p2p(f, mpi, top)) != 0)
        return rc;
    if (cli_obj_get(mpi, "callsites") != NULL && !cli_obj_is_nil(cli_obj_get(mpi, "callsites"))) {
        fputc('\n', f);
        if ((rc = rm_sites(f, mpi, top > 0 ? top : 10)) != 0)
            return rc;
    }
    return ferror(f) ? -EIO : 0;
}
