/*
 * cli_report_html_mpi — the MPI and Hosts sections of the HTML report (see
 * cli_report_html_mpi.h). Written as static markup, not by the page's
 * script: the exact uint64 figures stay exact (a JavaScript number is not
 * above 2^53) and the sections read without scripts; the script only makes
 * their tables (class "sort") sortable.
 */
#include "cli_report_html_mpi.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_obj.h"
#include "cli_report_mpi.h"

/* HK_SITE: a callsite row's name (cli_report_mpi_site_name), from the whole row */
enum cli_html_kind {
    HK_TEXT,
    HK_COUNT,
    HK_NS,
    HK_BYTES,
    HK_SHARE,
    HK_PPM,
    HK_HEX,
    HK_LIST,
    HK_SITE
};

struct cli_html_col {
    const char *head;
    const char *key;
    enum cli_html_kind kind;
};

/* v as human text: "-" for nil or missing, units by kind. */
static void cli_html_human(const msgpack_object *v, enum cli_html_kind kind, char *buf, size_t size)
{
    uint64_t u;
    double d;

    if (v == NULL || cli_obj_is_nil(v)) {
        snprintf(buf, size, "-");
        return;
    }
    if (kind == HK_NS && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        /* a clock offset: its sign, then its size */
        buf[0] = '-';
        cli_fmt_duration(buf + 1, size - 1, (uint64_t)0 - (uint64_t)v->via.i64);
    } else if (kind == HK_NS && cli_obj_u64(v, &u) == 0)
        cli_fmt_duration(buf, size, u);
    else if (kind == HK_BYTES && cli_obj_u64(v, &u) == 0)
        cli_fmt_bytes(buf, size, u);
    else if (kind == HK_SHARE && cli_obj_f64(v, &d) == 0)
        cli_fmt_share(buf, size, d);
    else if (kind == HK_HEX && cli_obj_u64(v, &u) == 0)
        snprintf(buf, size, "0x%" PRIx64, u);
    else if (kind == HK_PPM && cli_obj_f64(v, &d) == 0)
        snprintf(buf, size, "%+.1f ppm", d);
    else
        cli_obj_text(v, buf, size);
}

/* The exact figure of v for a data-* attribute: its JSON text, a string's own text. */
static void cli_html_exact(FILE *f, const msgpack_object *v)
{
    if (v == NULL || cli_obj_is_nil(v))
        return;
    if (v->type == MSGPACK_OBJECT_STR)
        cli_report_html_text(f, v->via.str.ptr, v->via.str.size);
    else if (v->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            if (i > 0)
                fputc(' ', f);
            cli_html_exact(f, &v->via.array.ptr[i]);
        }
    } else
        cli_json_write(f, v);
}

/* <td data-v="exact">human</td> */
static void cli_html_cell(FILE *f, const msgpack_object *v, enum cli_html_kind kind)
{
    char buf[128];

    fputs(kind == HK_TEXT || kind == HK_LIST ? "<td class=\"t\" data-v=\"" : "<td data-v=\"", f);
    cli_html_exact(f, v);
    fputs("\">", f);
    if (kind == HK_LIST && v != NULL && v->type == MSGPACK_OBJECT_ARRAY)
        cli_html_exact(f, v);
    else {
        cli_html_human(v, kind, buf, sizeof(buf));
        cli_report_html_text(f, buf, strlen(buf));
    }
    fputs("</td>", f);
}

/* A callsite's name, as the text report gives it: data-v and text alike. */
static void cli_html_site(FILE *f, const msgpack_object *row)
{
    char name[1100];

    cli_report_mpi_site_name(row, name, sizeof(name));
    fputs("<td class=\"t\" data-v=\"", f);
    cli_report_html_text(f, name, strlen(name));
    fputs("\">", f);
    cli_report_html_text(f, name, strlen(name));
    fputs("</td>", f);
}

static void cli_html_head(FILE *f, const struct cli_html_col *cols, size_t n)
{
    fputs("<div class=\"scroll\"><table class=\"sort\"><thead><tr>", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "<th%s>%s</th>",
                cols[i].kind == HK_TEXT || cols[i].kind == HK_LIST || cols[i].kind == HK_SITE
                    ? " class=\"t\""
                    : "",
                cols[i].head);
    fputs("</tr></thead><tbody>\n", f);
}

static void cli_html_row(FILE *f, const msgpack_object *row, const struct cli_html_col *cols,
                         size_t n)
{
    fputs("<tr>", f);
    for (size_t i = 0; i < n; i++)
        if (cols[i].kind == HK_SITE)
            cli_html_site(f, row);
        else
            cli_html_cell(f, cli_obj_get(row, cols[i].key), cols[i].kind);
    fputs("</tr>\n", f);
}

/* rows (an array of maps) as a table with id; "(none)" when empty or missing. */
static void cli_html_table(FILE *f, const char *id, const msgpack_object *rows,
                           const struct cli_html_col *cols, size_t n)
{
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY || rows->via.array.size == 0) {
        fprintf(f, "<p class=\"note\" id=\"%s\">(none)</p>\n", id);
        return;
    }
    if (rows->via.array.size > CLI_REPORT_HTML_ROWS_MAX)
        fprintf(f,
                "<p class=\"note\">the first %d of %" PRIu32 " rows (report --json has them "
                "all)</p>\n",
                CLI_REPORT_HTML_ROWS_MAX, rows->via.array.size);
    fprintf(f, "<div id=\"%s\">", id);
    cli_html_head(f, cols, n);
    for (uint32_t i = 0; i < rows->via.array.size && i < CLI_REPORT_HTML_ROWS_MAX; i++)
        cli_html_row(f, &rows->via.array.ptr[i], cols, n);
    fputs("</tbody></table></div></div>\n", f);
}

#define NCOLS(a) (sizeof(a) / sizeof((a)[0]))

static const struct cli_html_col cli_html_rank_cols[] = {
    {"RANK", "rank", HK_COUNT},
    {"WALL", "wall_ns", HK_NS},
    {"MPI", "mpi_ns", HK_NS},
    {"APP", "app_ns", HK_NS},
    {"MPI%", "mpi_share", HK_SHARE},
    {"CALLS", "calls", HK_COUNT},
    {"DROPPED", "dropped_calls", HK_COUNT},
    {"WALL FROM", "wall_from", HK_TEXT},
    {"COUNTED", "counted_calls", HK_COUNT},  /* without an entry each: TRACECTL_MPI_P2P */
    {"COUNTERS FROM", "p2p_auto_ns", HK_NS}, /* =auto: after MPI_Init; "-": never */
};

static const struct cli_html_col cli_html_comm_cols[] = {
    {"COMMUNICATOR", "name", HK_TEXT}, {"ID", "id", HK_COUNT},       {"SIZE", "size", HK_COUNT},
    {"MEMBERS", "members", HK_LIST},   {"CALLS", "calls", HK_COUNT}, {"TOTAL", "total_ns", HK_NS},
    {"BYTES", "bytes", HK_BYTES},
};

static const struct cli_html_col cli_html_bucket_cols[] = {
    {"OP", "op", HK_TEXT},        {"FROM", "min_bytes", HK_BYTES}, {"TO", "max_bytes", HK_BYTES},
    {"CALLS", "calls", HK_COUNT}, {"TOTAL", "total_ns", HK_NS},
};

static const struct cli_html_col cli_html_pair_cols[] = {
    {"FROM", "from", HK_COUNT},
    {"TO", "to", HK_COUNT},
    {"MESSAGES", "messages", HK_COUNT},
    {"BYTES", "bytes", HK_BYTES},
    {"RECV MSGS", "recv_messages", HK_COUNT},
    {"RECV BYTES", "recv_bytes", HK_BYTES},
};

static const struct cli_html_col cli_html_site_cols[] = {
    {"SITE", NULL, HK_SITE}, /* "main app.c:105": addr2line -f, as the text report */
    {"OP", "op", HK_TEXT},
    {"SYMBOL", "symbol", HK_TEXT},
    {"OFFSET", "offset", HK_HEX},
    {"MODULE", "module", HK_TEXT},
    {"RANKS", "ranks", HK_COUNT},
    {"CALLS", "calls", HK_COUNT},
    {"TOTAL", "total_ns", HK_NS},
    {"BYTES", "bytes", HK_BYTES},
    {"MIN", "min_ns", HK_NS},
    {"MAX", "max_ns", HK_NS},
    {"MAX RANK", "max_rank", HK_COUNT},
    {"MPI%", "mpi_share", HK_SHARE},
};

/* The MPI time per rank, its total row last (tfoot: sorting leaves it there). */
static void cli_html_mpi_ranks(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *rows = cli_obj_get(mpi, "ranks"), *total = cli_obj_get(mpi, "total");

    fputs("<h3>MPI time per rank</h3>\n<div id=\"mpi-ranks\">", f);
    cli_html_head(f, cli_html_rank_cols, NCOLS(cli_html_rank_cols));
    for (uint32_t i = 0;
         rows != NULL && rows->type == MSGPACK_OBJECT_ARRAY && i < rows->via.array.size; i++)
        cli_html_row(f, &rows->via.array.ptr[i], cli_html_rank_cols, NCOLS(cli_html_rank_cols));
    fputs("</tbody>", f);
    if (total != NULL && total->type == MSGPACK_OBJECT_MAP) {
        fputs("<tfoot><tr class=\"total\"><td class=\"t\">*</td>", f);
        for (size_t c = 1; c < NCOLS(cli_html_rank_cols); c++) {
            const msgpack_object *v = cli_obj_get(total, cli_html_rank_cols[c].key);

            if (v == NULL) /* a rank's own (wall_from, p2p_auto_ns): no total */
                fputs("<td></td>", f);
            else
                cli_html_cell(f, v, cli_html_rank_cols[c].kind);
        }
        fputs("</tr></tfoot>", f);
    }
    fputs("</table></div></div>\n", f);
}

/* The message sizes: one row per (op, bucket). */
static void cli_html_mpi_sizes(FILE *f, const msgpack_object *sizes)
{
    const struct cli_html_col *cols = cli_html_bucket_cols;
    size_t n = NCOLS(cli_html_bucket_cols);

    fputs("<h3>Message sizes</h3>\n", f);
    if (sizes == NULL || sizes->type != MSGPACK_OBJECT_ARRAY || sizes->via.array.size == 0) {
        fputs("<p class=\"note\" id=\"mpi-sizes\">(none)</p>\n", f);
        return;
    }
    fputs("<div id=\"mpi-sizes\">", f);
    cli_html_head(f, cols, n);
    for (uint32_t i = 0; i < sizes->via.array.size; i++) {
        const msgpack_object *op = &sizes->via.array.ptr[i];
        const msgpack_object *b = cli_obj_get(op, "buckets");

        for (uint32_t j = 0; b != NULL && b->type == MSGPACK_OBJECT_ARRAY && j < b->via.array.size;
             j++) {
            fputs("<tr>", f);
            cli_html_cell(f, cli_obj_get(op, "op"), HK_TEXT);
            for (size_t c = 1; c < n; c++)
                cli_html_cell(f, cli_obj_get(&b->via.array.ptr[j], cols[c].key), cols[c].kind);
            fputs("</tr>\n", f);
        }
    }
    fputs("</tbody></table></div></div>\n", f);
}

/* The ranks of the pairs, ascending, into r; how many, or max + 1 when there are more than max. */
static size_t cli_html_p2p_ranks(const msgpack_object *pairs, int64_t *r, size_t max)
{
    size_t n = 0;

    for (uint32_t i = 0; i < pairs->via.array.size; i++) {
        for (int side = 0; side < 2; side++) {
            const msgpack_object *v = cli_obj_get(&pairs->via.array.ptr[i], side ? "to" : "from");
            int64_t x;
            size_t k = 0;

            if (v == NULL || (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
                              v->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
                continue;
            x = v->via.i64;
            while (k < n && r[k] < x)
                k++;
            if (k < n && r[k] == x)
                continue;
            if (n == max)
                return max + 1;
            memmove(&r[k + 1], &r[k], (n - k) * sizeof(*r));
            r[k] = x;
            n++;
        }
    }
    return n;
}

static uint64_t cli_html_bytes_of(const msgpack_object *pair)
{
    uint64_t u;

    return cli_obj_u64(cli_obj_get(pair, "bytes"), &u) == 0 ? u : 0;
}

/* qsort: pairs by bytes sent, most first */
static int cli_html_by_bytes(const void *a, const void *b)
{
    uint64_t x = cli_html_bytes_of(*(const msgpack_object *const *)a);
    uint64_t y = cli_html_bytes_of(*(const msgpack_object *const *)b);

    return x < y ? 1 : x > y ? -1 : 0;
}

/* More ranks than a matrix shows: the pairs with the most bytes sent, as a table. */
static void cli_html_pairs_list(FILE *f, const msgpack_object *pairs)
{
    uint32_t n = pairs->via.array.size,
             k = n < CLI_REPORT_HTML_ROWS_MAX ? n : CLI_REPORT_HTML_ROWS_MAX;
    const msgpack_object **by = malloc(n * sizeof(*by));

    fprintf(f,
            "<p class=\"note\">more than %d ranks, %" PRIu32 " pairs: the %" PRIu32
            " with the most bytes sent</p>\n",
            CLI_REPORT_HTML_P2P_MAX_RANKS, n, by == NULL ? 0 : k);
    if (by == NULL)
        return;
    for (uint32_t i = 0; i < n; i++)
        by[i] = &pairs->via.array.ptr[i];
    qsort(by, n, sizeof(*by), cli_html_by_bytes);
    fputs("<div id=\"mpi-p2p-pairs\">", f);
    cli_html_head(f, cli_html_pair_cols, NCOLS(cli_html_pair_cols));
    for (uint32_t i = 0; i < k; i++)
        cli_html_row(f, by[i], cli_html_pair_cols, NCOLS(cli_html_pair_cols));
    fputs("</tbody></table></div></div>\n", f);
    free(by);
}

/* The point-to-point matrix: rows the senders, columns the receivers, shaded by bytes. */
static void cli_html_mpi_p2p(FILE *f, const msgpack_object *p2p)
{
    const msgpack_object *pairs = cli_obj_get(p2p, "pairs");
    int64_t r[CLI_REPORT_HTML_P2P_MAX_RANKS];
    uint64_t max = 0, u;
    double shade;
    size_t n;
    char buf[64];

    fputs("<h3>Point to point</h3>\n", f);
    if (p2p == NULL || p2p->type != MSGPACK_OBJECT_MAP)
        return;
    fputs("<p class=\"note\" id=\"mpi-p2p-sum\">", f);
    cli_html_human(cli_obj_get(p2p, "messages"), HK_COUNT, buf, sizeof(buf));
    fprintf(f, "%s messages, ", buf);
    cli_html_human(cli_obj_get(p2p, "bytes"), HK_BYTES, buf, sizeof(buf));
    fprintf(f, "%s sent; ", buf);
    cli_html_human(cli_obj_get(p2p, "recv_messages"), HK_COUNT, buf, sizeof(buf));
    fprintf(f, "%s messages, ", buf);
    cli_html_human(cli_obj_get(p2p, "recv_bytes"), HK_BYTES, buf, sizeof(buf));
    fprintf(f, "%s received; ", buf);
    cli_html_human(cli_obj_get(p2p, "pairs_differ"), HK_COUNT, buf, sizeof(buf));
    fprintf(f, "%s of ", buf);
    cli_html_human(cli_obj_get(p2p, "pairs_total"), HK_COUNT, buf, sizeof(buf));
    fprintf(f, "%s pairs whose sends and receives differ</p>\n", buf);
    if (pairs == NULL || pairs->type != MSGPACK_OBJECT_ARRAY || pairs->via.array.size == 0)
        return;
    n = cli_html_p2p_ranks(pairs, r, CLI_REPORT_HTML_P2P_MAX_RANKS);
    if (n > CLI_REPORT_HTML_P2P_MAX_RANKS) {
        cli_html_pairs_list(f, pairs);
        return;
    }
    for (uint32_t i = 0; i < pairs->via.array.size; i++)
        if (cli_obj_u64(cli_obj_get(&pairs->via.array.ptr[i], "bytes"), &u) == 0 && u > max)
            max = u;
    fputs("<div class=\"scroll\"><table id=\"mpi-p2p\" class=\"p2p\"><thead><tr><th>from \\ "
          "to</th>",
          f);
    for (size_t j = 0; j < n; j++)
        fprintf(f, "<th>%lld</th>", (long long)r[j]);
    fputs("</tr></thead><tbody>\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<tr><th>%lld</th>", (long long)r[i]);
        for (size_t j = 0; j < n; j++) {
            const msgpack_object *pair = NULL;

            /* pairs are by (from, to): a linear scan keeps this simple at <= 64 ranks */
            for (uint32_t k = 0; k < pairs->via.array.size && pair == NULL; k++) {
                const msgpack_object *p = &pairs->via.array.ptr[k], *a = cli_obj_get(p, "from"),
                                     *b = cli_obj_get(p, "to");
                if (a != NULL && b != NULL && !cli_obj_is_nil(a) && !cli_obj_is_nil(b) &&
                    a->via.i64 == r[i] && b->via.i64 == r[j])
                    pair = p;
            }
            if (pair == NULL) {
                fputs("<td class=\"nil\"></td>", f);
                continue;
            }
            if (cli_obj_u64(cli_obj_get(pair, "bytes"), &u) != 0)
                u = 0;
            shade = max ? (double)u / (double)max : 0; /* the page's heat(): yellow to red */
            fprintf(f,
                    "<td style=\"background:hsl(%.0f,90%%,%.0f%%)%s\" data-from=\"%lld\" "
                    "data-to=\"%lld\" data-bytes=\"",
                    55 - 55 * shade, 88 - 50 * shade, shade > 0.6 ? ";color:#fff" : "",
                    (long long)r[i], (long long)r[j]);
            cli_html_exact(f, cli_obj_get(pair, "bytes"));
            fputs("\" data-messages=\"", f);
            cli_html_exact(f, cli_obj_get(pair, "messages"));
            fputs("\" data-recv-bytes=\"", f);
            cli_html_exact(f, cli_obj_get(pair, "recv_bytes"));
            fputs("\" data-recv-messages=\"", f);
            cli_html_exact(f, cli_obj_get(pair, "recv_messages"));
            cli_html_human(cli_obj_get(pair, "bytes"), HK_BYTES, buf, sizeof(buf));
            fprintf(f, "\" title=\"%lld to %lld: ", (long long)r[i], (long long)r[j]);
            cli_report_html_text(f, buf, strlen(buf));
            cli_html_human(cli_obj_get(pair, "messages"), HK_COUNT, buf, sizeof(buf));
            fputs(" in ", f);
            cli_report_html_text(f, buf, strlen(buf));
            fputs(" messages\">", f);
            cli_html_human(cli_obj_get(pair, "bytes"), HK_BYTES, buf, sizeof(buf));
            cli_report_html_text(f, buf, strlen(buf));
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table></div>\n", f);
}

int cli_report_html_mpi(FILE *f, const msgpack_object *mpi)
{
    const msgpack_object *sites;
    uint64_t counted = 0;
    char buf[64];

    if (mpi == NULL || mpi->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    fputs("<section id=\"mpi\"><h2>MPI</h2>\n<p class=\"note\">MPI calls (ops MPI_*) as the "
          "interposer libtracectl-mpi sent them; dropped calls: ",
          f);
    cli_html_human(cli_obj_get(mpi, "dropped_calls"), HK_COUNT, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
    if (cli_obj_u64(cli_obj_get(mpi, "counted_calls"), &counted) == 0 && counted > 0) {
        /* TRACECTL_MPI_P2P: in every figure below, as in the text report */
        fputs("; calls counted without an entry each (TRACECTL_MPI_P2P): ", f);
        cli_html_human(cli_obj_get(mpi, "counted_calls"), HK_COUNT, buf, sizeof(buf));
        cli_report_html_text(f, buf, strlen(buf));
    }
    if (cli_obj_u64(cli_obj_get(mpi, "p2p_auto_rate"), &counted) == 0) {
        snprintf(buf, sizeof(buf), "; TRACECTL_MPI_P2P=auto past %" PRIu64 " calls/s", counted);
        cli_report_html_text(f, buf, strlen(buf));
    }
    fputs("</p>\n", f);
    cli_html_mpi_ranks(f, mpi);
    fputs("<h3>Communicators</h3>\n", f);
    cli_html_table(f, "mpi-comms", cli_obj_get(mpi, "comms"), cli_html_comm_cols,
                   NCOLS(cli_html_comm_cols));
    cli_html_mpi_sizes(f, cli_obj_get(mpi, "sizes"));
    cli_html_mpi_p2p(f, cli_obj_get(mpi, "p2p"));
    fputs("<h3>Call sites</h3>\n", f);
    sites = cli_obj_get(mpi, "callsites");
    if (sites == NULL || sites->type != MSGPACK_OBJECT_MAP)
        fputs("<p class=\"note\" id=\"mpi-sites\">(not counted under a steps, device or "
              "category filter)</p>\n",
              f);
    else
        cli_html_table(f, "mpi-sites", cli_obj_get(sites, "sites"), cli_html_site_cols,
                       NCOLS(cli_html_site_cols));
    fputs("</section>\n", f);
    return ferror(f) ? -EIO : 0;
}

static const struct cli_html_col cli_html_host_cols[] = {
    {"HOST", "host", HK_TEXT},
    {"STATE", "state", HK_TEXT},
    {"RANKS", "ranks", HK_COUNT},
    {"PROCESSES", "processes", HK_COUNT},
    {"ENTRIES", "entries", HK_COUNT},
    {"DROPPED", "dropped", HK_COUNT},
    {"SNAPSHOT AGE", "snapshot_age_ns", HK_NS},
    {"OFFSET", "offset_ns", HK_NS},
    {"BOUND", "bound_ns", HK_NS},
    {"DRIFT", "drift_ppm", HK_PPM},
    {"VIOLATIONS", "violations", HK_COUNT},
};

int cli_report_html_hosts(FILE *f, const msgpack_object *hosts)
{
    if (hosts == NULL || hosts->type != MSGPACK_OBJECT_ARRAY)
        return -EINVAL;
    fputs("<section id=\"hosts\"><h2>Hosts</h2>\n<p class=\"note\">OFFSET: a host's clock "
          "minus the home's, within BOUND; DRIFT: its rate against the home's over the last "
          "minute (-: not measured yet)</p>\n",
          f);
    cli_html_table(f, "hosts-table", hosts, cli_html_host_cols, NCOLS(cli_html_host_cols));
    fputs("</section>\n", f);
    return ferror(f) ? -EIO : 0;
}

static const struct cli_html_col cli_html_late_rank_cols[] = {
    {"RANK", "rank", HK_COUNT},
    {"HOST", "host", HK_TEXT},
    {"COLLECTIVES", "collectives", HK_COUNT},
    {"LAST", "last", HK_COUNT},
    {"CAUSED", "caused_ns", HK_NS},
    {"± CAUSED", "caused_bound_ns", HK_NS},
    {"WAITED", "waited_ns", HK_NS},
    {"± WAITED", "waited_bound_ns", HK_NS},
    {"LATE STEPS", "late_steps", HK_COUNT},
};

static const struct cli_html_col cli_html_late_step_cols[] = {
    {"STEP", "step", HK_COUNT},
    {"STEP TIME", "step_ns", HK_NS},
    {"RANK", "rank", HK_COUNT},
    {"HOST", "host", HK_TEXT},
    {"LATE RANK", "late_rank", HK_COUNT},
    {"HELD UP", "held_up_ns", HK_NS},
    {"±", "bound_ns", HK_NS},
    {"WITHIN BOUND", "within_bound", HK_TEXT},
};

int cli_report_html_hosts_late(FILE *f, const msgpack_object *late)
{
    const msgpack_object *clock = cli_obj_get(late, "clock");
    const msgpack_object *verdict = cli_obj_get(late, "verdict");
    char buf[64];

    if (late == NULL || late->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    fputs("<section id=\"hosts-late\"><h2>Late ranks across hosts</h2>\n<p class=\"note\">"
          "Times on ",
          f);
    if (clock != NULL && clock->type == MSGPACK_OBJECT_STR)
        cli_report_html_text(f, clock->via.str.ptr, clock->via.str.size);
    else
        fputs("the home", f);
    fputs("'s clock; ± each figure's clock bound. Instances analysed: ", f);
    cli_html_human(cli_obj_get(late, "instances"), HK_COUNT, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
    fputs(" (who came last uncertain in ", f);
    cli_html_human(cli_obj_get(late, "uncertain"), HK_COUNT, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
    fputs("); steps with a late rank named: ", f);
    cli_html_human(cli_obj_get(late, "steps_named"), HK_COUNT, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
    fputs(", within the clock bound: ", f);
    cli_html_human(cli_obj_get(late, "steps_within_bound"), HK_COUNT, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
    fputs("</p>\n<p id=\"hosts-late-verdict\">", f);
    if (verdict != NULL && verdict->type == MSGPACK_OBJECT_STR)
        cli_report_html_text(f, verdict->via.str.ptr, verdict->via.str.size);
    fputs("</p>\n<h3>Ranks</h3>\n", f);
    cli_html_table(f, "hosts-late-ranks", cli_obj_get(late, "ranks"), cli_html_late_rank_cols,
                   NCOLS(cli_html_late_rank_cols));
    fputs("<h3>Steps whose top rank cost 10 % of the step</h3>\n", f);
    cli_html_table(f, "hosts-late-steps", cli_obj_get(late, "steps"), cli_html_late_step_cols,
                   NCOLS(cli_html_late_step_cols));
    fputs("</section>\n", f);
    return ferror(f) ? -EIO : 0;
}

int cli_report_html_filter_hosts(FILE *f, const msgpack_object *fh)
{
    const msgpack_object *keys[2] = {cli_obj_get(fh, "counted"), cli_obj_get(fh, "left_out")};

    if (fh == NULL || fh->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    fputs("<p class=\"note\" id=\"filter-hosts\">The filters cover ", f);
    for (int k = 0; k < 2; k++) {
        const msgpack_object *a = keys[k];

        for (uint32_t i = 0; a != NULL && a->type == MSGPACK_OBJECT_ARRAY && i < a->via.array.size;
             i++) {
            const msgpack_object *s = &a->via.array.ptr[i];

            if (i > 0)
                fputs(", ", f);
            if (s->type == MSGPACK_OBJECT_STR)
                cli_report_html_text(f, s->via.str.ptr, s->via.str.size);
        }
        fputs(k == 0 ? "'s entries only; not " : "", f);
    }
    fputs(" (entries stay on their hosts: ask each host's tracectl with the same filters)</p>\n",
          f);
    return ferror(f) ? -EIO : 0;
}
