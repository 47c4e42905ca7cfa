/*
 * cli_report_ranks — the report's analysis options and sections; see
 * cli_report_ranks.h. Tables go through cli_view like the v1 sections.
 */
#include "cli_report_ranks.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_bars.h"
#include "cli_obj.h"
#include "cli_view.h"
#include "util.h"

#define RR_NCOLS(a) UTIL_ARRAY_LEN(a)
#define RR_INDENT   "  "
/* The columns of a table, less its last (the bars) when bars are off. */
#define RR_NCOLS_BARS(a) (RR_NCOLS(a) - !cli_bars_on())

static bool rr_uint(const char *s, const char **end, uint64_t *out)
{
    char *e;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &e, 10);
    *end = e;
    return errno == 0 && *out <= INT64_MAX;
}

int cli_report_ranks_opt(const char *opt, const char *arg, struct proto_request *req)
{
    struct proto_analysis *an = &req->analysis;
    const char *p = arg;
    uint64_t v;

    if (strcmp(opt, "rank") == 0) {
        while (*p != '\0') {
            if (!rr_uint(p, &p, &v) || v > INT32_MAX || (*p != ',' && *p != '\0') ||
                an->n_ranks == PROTO_MAX_RANK_FILTER) {
                cli_error("report: --rank wants ranks such as 3 or 0,5,7, not '%s'", arg);
                return -1;
            }
            an->ranks[an->n_ranks++] = (int64_t)v;
            p += *p == ',';
        }
        if (an->n_ranks == 0) {
            cli_error("report: --rank wants at least one rank");
            return -1;
        }
        return 0;
    }
    if (strcmp(opt, "step") == 0) {
        if (!rr_uint(p, &p, &an->step_min))
            goto bad_step;
        an->step_max = an->step_min;
        if (strncmp(p, "..", 2) == 0 && !rr_uint(p + 2, &p, &an->step_max))
            goto bad_step;
        if (*p != '\0' || an->step_max < an->step_min)
            goto bad_step;
        an->steps = true;
        return 0;
    bad_step:
        cli_error("report: --step wants a step or a range such as 3..7, not '%s'", arg);
        return -1;
    }
    if (strcmp(opt, "device") == 0) {
        free(an->device);
        an->device = strdup(arg);
        return an->device != NULL ? 0 : -1;
    }
    free(an->category);
    an->category = strdup(arg);
    return an->category != NULL ? 0 : -1;
}

int cli_report_ranks_verdict(FILE *f, const msgpack_object *report)
{
    const msgpack_object *v = cli_obj_get(report, "verdict");

    if (v == NULL || v->type != MSGPACK_OBJECT_STR)
        return 0;
    fprintf(f, "Verdict\n%s%.*s\n\n", RR_INDENT, (int)v->via.str.size, v->via.str.ptr);
    return ferror(f) ? -EIO : 0;
}

static void rr_ms_per_step(const msgpack_object *row, const char *key, char *buf, size_t size)
{
    uint64_t ns = 0, steps = 0;
    msgpack_object o;

    cli_obj_u64(cli_obj_get(row, key), &ns);
    cli_obj_u64(cli_obj_get(row, "steps"), &steps);
    o.type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o.via.u64 = steps ? ns / steps : 0;
    cli_view_format(&o, CLI_VIEW_DURATION, buf, size);
}

static void rr_wait_step(const msgpack_object *row, char *buf, size_t size)
{
    rr_ms_per_step(row, "waited_ns", buf, size);
}

static void rr_rank_dropped(const msgpack_object *row, char *buf, size_t size)
{
    uint64_t d = 0;

    cli_obj_u64(cli_obj_get(row, "dropped"), &d);
    snprintf(buf, size, "%llu%s", (unsigned long long)d, d ? " (!)" : "");
}

/* The column of the run-queue delay the producers reported (rk_steps.cpu_wait_ns): shown only
 * when a rank of the report has one, so that sessions from producers without it read as
 * before. */
#define RR_CPU_WAIT "CPU WAIT"

/* At most CLI_VIEW_MAX_COLS: arrived_last and slowest_steps are in --json only (what a rank
 * cost the others is CAUSED; how often it came last says less). */
static const struct cli_view_col rr_ranks_cols[] = {
    {"RANK", "rank", CLI_VIEW_COUNT, 0, NULL},
    {"STEPS", "steps", CLI_VIEW_COUNT, 0, NULL},
    {"STEP_AVG", "step_mean_ns", CLI_VIEW_DURATION, 0, NULL},
    {"CAUSED", "caused_ns", CLI_VIEW_DURATION, 0, NULL},
    {"WAITED", "waited_ns", CLI_VIEW_DURATION, 0, NULL},
    {"WAIT/STEP", NULL, CLI_VIEW_DURATION, 0, rr_wait_step},
    {"MPI %", "comm_share", CLI_VIEW_SHARE, 0, NULL},
    {"COMPUTE", "compute_ns", CLI_VIEW_DURATION, 0, NULL},
    {"UNTRACKED", "untracked_ns", CLI_VIEW_DURATION, 0, NULL},
    {RR_CPU_WAIT, "cpu_wait_ns", CLI_VIEW_DURATION, 0, NULL},
    {"COMM", "comm_ns", CLI_VIEW_DURATION, 0, NULL},
    {"EXPOSED", "exposed_comm_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MEMORY", "memory_ns", CLI_VIEW_DURATION, 0, NULL},
    {"OTHER", "other_ns", CLI_VIEW_DURATION, 0, NULL},
    {"COLL", "collectives", CLI_VIEW_COUNT, 0, NULL},
    {"LATE", "late_steps", CLI_VIEW_COUNT, 0, NULL},
    {"DROPPED", NULL, CLI_VIEW_TEXT, 0, rr_rank_dropped},
    {"STEP_TIMES", NULL, CLI_VIEW_TEXT, 0, cli_bars_rank_cell}, /* last: off without bars */
};

static const struct cli_view_col rr_steps_cols[] = {
    {"STEP", "step", CLI_VIEW_COUNT, 0, NULL},
    {"RANKS", "ranks", CLI_VIEW_COUNT, 0, NULL},
    {"MIN", "min_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MEAN", "mean_ns", CLI_VIEW_DURATION, 0, NULL},
    {"MAX", "max_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SPREAD", "spread_ns", CLI_VIEW_DURATION, 0, NULL},
    {"CAUSED", "caused_ns", CLI_VIEW_DURATION, 0, NULL},
    {"LATE", "late_rank", CLI_VIEW_COUNT, 0, NULL},
    {"WAITED", "waited_ns", CLI_VIEW_DURATION, 0, NULL},
    {"UNTRACKED", "untracked_ns", CLI_VIEW_DURATION, 0, NULL},
    {RR_CPU_WAIT, "cpu_wait_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SLOWEST", "slowest_rank", CLI_VIEW_COUNT, 0, NULL},
    {"LAST", "last_rank", CLI_VIEW_COUNT, 0, NULL},
    {"BY_RANK", NULL, CLI_VIEW_TEXT, 0, cli_bars_step_cell}, /* last: off without bars */
};

static const struct cli_view_col rr_coll_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"INSTANCES", "instances", CLI_VIEW_COUNT, 0, NULL},
    {"PARTIAL", "partial", CLI_VIEW_COUNT, 0, NULL},
    {"SKEW_AVG", "skew_mean_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SKEW_MAX", "skew_max_ns", CLI_VIEW_DURATION, 0, NULL},
    {"WAITED", "waited_ns", CLI_VIEW_DURATION, 0, NULL},
    {"LAST_RANK", "last_rank", CLI_VIEW_COUNT, 0, NULL},
    {"LAST_SHARE", "last_rank_share", CLI_VIEW_SHARE, 0, NULL},
};

static const struct cli_view_col rr_cat_cols[] = {
    {"CATEGORY", "category", CLI_VIEW_TEXT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
    {"MAX_VS_MEAN", "imbalance", CLI_VIEW_SHARE, 0, NULL},
    {"MAX/MEDIAN", "max_vs_median", CLI_VIEW_FLOAT, 0, NULL},
    {"MAX_RANK", "max_rank", CLI_VIEW_COUNT, 0, NULL},
};

static void rr_rate(const msgpack_object *row, char *buf, size_t size)
{
    double r = 0;

    cli_obj_f64(cli_obj_get(row, "elements_per_s"), &r);
    if (r >= 1e9)
        snprintf(buf, size, "%.2f G/s", r / 1e9);
    else if (r >= 1e6)
        snprintf(buf, size, "%.2f M/s", r / 1e6);
    else if (r >= 1e3)
        snprintf(buf, size, "%.2f k/s", r / 1e3);
    else
        snprintf(buf, size, "%.0f /s", r);
}

static const struct cli_view_col rr_tput_cols[] = {
    {"OP", "op", CLI_VIEW_TEXT, 32, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"ELEMENTS", "elements", CLI_VIEW_COUNT, 0, NULL},
    {"ELEMENTS/S", NULL, CLI_VIEW_TEXT, 0, rr_rate},
};

bool cli_report_ranks_any_cpu_wait(const msgpack_object *ranks)
{
    if (ranks == NULL || ranks->type != MSGPACK_OBJECT_ARRAY)
        return false;
    for (uint32_t i = 0; i < ranks->via.array.size; i++) {
        uint64_t ns = 0;
        if (cli_obj_u64(cli_obj_get(&ranks->via.array.ptr[i], "cpu_wait_ns"), &ns) == 0 && ns > 0)
            return true;
    }
    return false;
}

/*
 * Copies the first n of cols into out (CLI_VIEW_MAX_COLS of them), without the CPU WAIT
 * column unless cpu; returns how many it copied.
 */
static size_t rr_cols(const struct cli_view_col *cols, size_t n, bool cpu, struct cli_view_col *out)
{
    size_t k = 0;

    for (size_t i = 0; i < n && k < CLI_VIEW_MAX_COLS; i++)
        if (cpu || strcmp(cols[i].name, RR_CPU_WAIT) != 0)
            out[k++] = cols[i];
    return k;
}

/* The steps that matter first: the most caused time (what the late rank cost the others),
 * then the longest slowest rank. The spread is small in exactly the slow steps of a job whose
 * collectives make every rank wait for the last one (DDP). */
static int rr_steps_cmp(const void *pa, const void *pb)
{
    const msgpack_object *a = pa, *b = pb;
    uint64_t x = 0, y = 0, sx = 0, sy = 0;

    cli_obj_u64(cli_obj_get(a, "caused_ns"), &x);
    cli_obj_u64(cli_obj_get(b, "caused_ns"), &y);
    if (x != y)
        return x > y ? -1 : 1;
    x = y = 0;
    cli_obj_u64(cli_obj_get(a, "max_ns"), &x);
    cli_obj_u64(cli_obj_get(b, "max_ns"), &y);
    if (x != y)
        return x > y ? -1 : 1;
    cli_obj_u64(cli_obj_get(a, "step"), &sx);
    cli_obj_u64(cli_obj_get(b, "step"), &sy);
    return sx < sy ? -1 : sx > sy;
}

/* The late steps of the session, as "rank 5: steps 3–7". */
static void rr_late_steps(FILE *f, const msgpack_object *steps)
{
    bool any = false;

    for (uint32_t i = 0; i < steps->via.array.size; i++) {
        const msgpack_object *s = &steps->via.array.ptr[i];
        uint64_t rank, step, end;
        uint32_t j = i;

        if (cli_obj_u64(cli_obj_get(s, "late_rank"), &rank) != 0)
            continue;
        cli_obj_u64(cli_obj_get(s, "step"), &step);
        end = step;
        while (j + 1 < steps->via.array.size) {
            uint64_t r2, s2;
            const msgpack_object *n = &steps->via.array.ptr[j + 1];
            if (cli_obj_u64(cli_obj_get(n, "late_rank"), &r2) != 0 || r2 != rank ||
                cli_obj_u64(cli_obj_get(n, "step"), &s2) != 0 || s2 != end + 1)
                break;
            end = s2;
            j++;
        }
        fprintf(f, "%s%s rank %llu in step%s %llu", any ? ";" : RR_INDENT "late:", any ? "" : "",
                (unsigned long long)rank, end > step ? "s" : "", (unsigned long long)step);
        if (end > step)
            fprintf(f, "–%llu", (unsigned long long)end);
        any = true;
        i = j;
    }
    if (any)
        fputc('\n', f);
}

#define RR_RANGES 20 /* missing rank ranges printed at most */

/*
 * "ended without closing: ranks 1, 3 (...)": completeness.ended_without_bye, the ranks whose
 * process ended without bye while the daemon ran. Nothing when there is none.
 */
static void rr_unclosed(FILE *f, const msgpack_object *comp)
{
    const msgpack_object *u = cli_obj_get(comp, "ended_without_bye");
    char r[32];

    if (u == NULL || u->type != MSGPACK_OBJECT_ARRAY || u->via.array.size == 0)
        return;
    fprintf(f, "%sended without closing: rank%s ", RR_INDENT, u->via.array.size > 1 ? "s" : "");
    for (uint32_t i = 0; i < u->via.array.size; i++) {
        cli_obj_text(&u->via.array.ptr[i], r, sizeof(r));
        fprintf(f, "%s%s", i > 0 ? ", " : "", r);
    }
    fputs(" (MPI_Abort, a crash, or an exit without MPI_Finalize / tc_close?): their last "
          "entries may be missing\n",
          f);
}

/* "missing: N of W ranks (a–b, c, ...)": the first RR_RANGES ranges of the completeness map. */
static void rr_missing(FILE *f, const msgpack_object *comp)
{
    const msgpack_object *m = cli_obj_get(comp, "missing_rank_ranges");
    uint64_t world = 0, given = 0, n = 0;

    cli_obj_u64(cli_obj_get(comp, "world"), &world);
    cli_obj_u64(cli_obj_get(comp, "world_given"), &given);
    cli_obj_u64(cli_obj_get(comp, "missing_rank_count"), &n);
    if (n == 0 || m == NULL || m->type != MSGPACK_OBJECT_ARRAY)
        return;
    fprintf(f, "%smissing: %llu of %llu ranks (", RR_INDENT, (unsigned long long)n,
            (unsigned long long)world);
    for (uint32_t i = 0; i < m->via.array.size && i < RR_RANGES; i++) {
        const msgpack_object *r = &m->via.array.ptr[i];
        uint64_t first = 0, last = 0;
        if (r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size != 2)
            continue;
        cli_obj_u64(&r->via.array.ptr[0], &first);
        cli_obj_u64(&r->via.array.ptr[1], &last);
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)first);
        if (last > first)
            fprintf(f, "–%llu", (unsigned long long)last);
    }
    fputs(m->via.array.size > RR_RANGES ? ", ...)" : ")", f);
    if (given > world)
        fprintf(f, "; a hello said world %llu, counted as %llu", (unsigned long long)given,
                (unsigned long long)world);
    fputc('\n', f);
}

/*
 * One line per process whose library lost entries or whose session holds
 * entries it sent without an ack (completeness.clients). With bye its
 * figures are final; without, they are as of its last flush, and only
 * what the session holds after its last ack is known.
 */
static void rr_client(FILE *f, const msgpack_object *r)
{
    const msgpack_object *rank = cli_obj_get(r, "rank"), *fin = cli_obj_get(r, "final");
    uint64_t rk = 0, pid = 0, rec = 0, drop = 0, st = 0, unc = 0, unc_st = 0;
    bool final = fin != NULL && fin->type == MSGPACK_OBJECT_BOOLEAN && fin->via.boolean;

    cli_obj_u64(cli_obj_get(r, "process_id"), &pid);
    cli_obj_u64(cli_obj_get(r, "recorded"), &rec);
    cli_obj_u64(cli_obj_get(r, "dropped"), &drop);
    cli_obj_u64(cli_obj_get(r, "stored"), &st);
    cli_obj_u64(cli_obj_get(r, "unconfirmed"), &unc);
    cli_obj_u64(cli_obj_get(r, "unconfirmed_stored"), &unc_st);
    if (drop == 0 && unc_st == 0 && (unc == 0 || !final))
        return;
    if (cli_obj_u64(rank, &rk) == 0)
        fprintf(f, "%srank %llu (process %llu): ", RR_INDENT, (unsigned long long)rk,
                (unsigned long long)pid);
    else
        fprintf(f, "%sprocess %llu: ", RR_INDENT, (unsigned long long)pid);
    if (final)
        fprintf(f,
                "recorded %llu, stored %llu, dropped %llu (never sent), unconfirmed %llu (sent "
                "without an ack; %llu of them stored)\n",
                (unsigned long long)rec, (unsigned long long)st, (unsigned long long)drop,
                (unsigned long long)unc, (unsigned long long)unc_st);
    else
        fprintf(f,
                "ended without bye: stored %llu, %llu of them sent after its last ack (its last "
                "flush said: recorded %llu, dropped %llu)\n",
                (unsigned long long)st, (unsigned long long)unc_st, (unsigned long long)rec,
                (unsigned long long)drop);
}

static void rr_clients(FILE *f, const msgpack_object *comp)
{
    const msgpack_object *l = cli_obj_get(comp, "clients");

    if (l != NULL && l->type == MSGPACK_OBJECT_ARRAY)
        for (uint32_t i = 0; i < l->via.array.size; i++)
            rr_client(f, &l->via.array.ptr[i]);
}

/*
 * A HOST column after RANK when the rows name their host (a home's report of a session
 * that spans hosts lists every host's ranks: docs/hosts.md).
 */
static void rr_host_col(const msgpack_object *ranks, struct cli_view_col *cols, size_t *ncols)
{
    static const struct cli_view_col host = {"HOST", "host", CLI_VIEW_TEXT, 24, NULL};

    if (ranks == NULL || ranks->type != MSGPACK_OBJECT_ARRAY || ranks->via.array.size == 0 ||
        cli_obj_get(&ranks->via.array.ptr[0], "host") == NULL || *ncols < 1 ||
        *ncols >= CLI_VIEW_MAX_COLS)
        return;
    memmove(cols + 2, cols + 1, (*ncols - 1) * sizeof(*cols));
    cols[1] = host;
    (*ncols)++;
}

int cli_report_ranks_print(FILE *f, const msgpack_object *report, uint32_t top)
{
    const msgpack_object *ranks = cli_obj_get(report, "ranks");
    const msgpack_object *steps = cli_obj_get(report, "steps");
    const msgpack_object *comp = cli_obj_get(report, "completeness");
    struct cli_view_col cols[CLI_VIEW_MAX_COLS];
    bool cpu = cli_report_ranks_any_cpu_wait(ranks);
    msgpack_object widest;
    size_t ncols;
    int rc;

    if (ranks == NULL)
        return 0;
    if (top == 0)
        top = 10;
    cli_bars_report(steps);
    fputs("\nRanks\n", f);
    ncols = rr_cols(rr_ranks_cols, RR_NCOLS_BARS(rr_ranks_cols), cpu, cols);
    rr_host_col(ranks, cols, &ncols);
    if ((rc = cli_view_table(f, RR_INDENT, cols, ncols, ranks)) != 0)
        return rc;
    if (comp != NULL) {
        rr_missing(f, comp);
        rr_unclosed(f, comp);
        rr_clients(f, comp);
        if (!cli_obj_str_eq(cli_obj_get(comp, "aggregates"), "exact"))
            fprintf(f, "%s(rank aggregates %s)\n", RR_INDENT,
                    cli_obj_str_eq(cli_obj_get(comp, "aggregates"), "absent")
                        ? "absent: none stored yet, until the session's first commit"
                        : "inexact: tracectl classify rebuilds them");
    }
    if (steps != NULL && steps->type == MSGPACK_OBJECT_ARRAY) {
        uint32_t n = steps->via.array.size;
        msgpack_object *copy = malloc((n + 1) * sizeof(*copy));
        if (copy == NULL)
            return -ENOMEM;
        if (n > 0)
            memcpy(copy, steps->via.array.ptr, n * sizeof(*copy));
        qsort(copy, n, sizeof(*copy), rr_steps_cmp);
        widest.type = MSGPACK_OBJECT_ARRAY;
        widest.via.array.size = n < top ? n : top;
        widest.via.array.ptr = copy;
        fprintf(f, "\nSteps (%u; the %u with the most caused time, then the longest)\n", n,
                widest.via.array.size);
        ncols = rr_cols(rr_steps_cols, RR_NCOLS_BARS(rr_steps_cols), cpu, cols);
        rc = cli_view_table(f, RR_INDENT, cols, ncols, &widest);
        free(copy);
        if (rc != 0)
            return rc;
        rr_late_steps(f, steps);
    }
    fputs("\nCollectives\n", f);
    if ((rc = cli_view_table(f, RR_INDENT, rr_coll_cols, RR_NCOLS(rr_coll_cols),
                             cli_obj_get(report, "collectives"))) != 0)
        return rc;
    fputs("\nCategories\n", f);
    if ((rc = cli_view_table(f, RR_INDENT, rr_cat_cols, RR_NCOLS(rr_cat_cols),
                             cli_obj_get(report, "categories"))) != 0)
        return rc;
    fputs("\nThroughput\n", f);
    {
        const msgpack_object *t = cli_obj_get(report, "throughput");
        msgpack_object cut;
        if (t != NULL && t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size > top) {
            cut = *t;
            cut.via.array.size = top;
            t = &cut;
        }
        rc = cli_view_table(f, RR_INDENT, rr_tput_cols, RR_NCOLS(rr_tput_cols), t);
    }
    return rc;
}
