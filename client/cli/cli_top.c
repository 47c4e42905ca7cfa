/*
 * cli_top — `tracectl top` (see cli_top.h).
 */
#include "cli_top.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli_bars.h"
#include "cli_fmt.h"
#include "cli_obj.h"
#include "utf8.h"
#include "util.h"

#define TOP_MAX_INTERVAL 3600.0
#define TOP_ONCE_OPS     10 /* op rows of each table with --once */
#define TOP_AN_SHARE     10 /* the late figures are asked at most every 10 times what they took */

const char cli_top_usage[] =
    "Usage: tracectl top [<id|name>] [--interval SECONDS] [--once] [--top N]\n"
    "                    [--no-bars] [--json]\n"
    "\n"
    "A live view of a running session, redrawn every interval: its ranks with\n"
    "their current step, steps per second and entries per second, the entries\n"
    "per second coming in, entries dropped, and the hottest operations over the\n"
    "last interval and since the start. Without an argument it shows the newest\n"
    "live session. The figures are the daemon's counters of what it has\n"
    "received, current to the last batch (a report shows what is stored).\n"
    "When producers report their step thread's wait for a CPU (tracectl\n"
    "report: CPU wait), a CPU WAIT column gives each rank's since the start.\n"
    "\n"
    "Once collectives have completed, a line names the rank that held the\n"
    "others up: the most caused time (the skews of the collectives it arrived\n"
    "last at), named only when the report's verdict would name it (its rule:\n"
    "tracectl report), with how often it arrived last, the time the other\n"
    "ranks lost waiting, and what the most caused since the previous analysis:\n"
    "  late rank 2 held the others up for 1.80 s (arrived last at 75% of 80\n"
    "  collectives), the others waited 1.85 s; last 1.0 s: 120 ms\n"
    "or, when none stands out, \"no rank stands out (most caused: rank 2, ...\".\n"
    "It comes from the report's late figures (the rank aggregates: what is\n"
    "committed), asked at most every ten times what that takes: every\n"
    "refresh (a daemon before them answers with its whole analysis, asked\n"
    "every few seconds on a session of millions of entries). At a home daemon\n"
    "(--peer-listen) the line covers every host's ranks (the late-rank analysis\n"
    "across hosts); the live rank rows and ops stay the home's own\n"
    "(docs/hosts.md).\n"
    "\n"
    "At a home daemon (--peer-listen), a table \"Ranks on member hosts\" follows\n"
    "the home's own: each member host's ranks from its last snapshot (steps,\n"
    "mean step time, CPU wait, waited and caused time since the start;\n"
    "member_ranks in --json). The live rates stay the home's own processes'.\n"
    "\n"
    "Keys: q quits (so do Ctrl-C, SIGTERM and the end of input: top </dev/null\n"
    "draws one frame); the view follows the terminal's size.\n"
    "\n"
    "Options:\n"
    "  -i, --interval SECONDS  time between two refreshes (default 1; a decimal\n"
    "                          number up to 3600; with --once, 0 takes a single\n"
    "                          sample and shows no rates)\n"
    "  -1, --once              print one snapshot (two samples an interval\n"
    "                          apart) and exit, for scripts\n"
    "  -n, --top N             operations in each table (default: what fits;\n"
    "                          10 with --once)\n"
    "      --no-bars           no STEP_TIME column: each rank's time per step over\n"
    "                          the interval, as a bar (lowest: the fastest rank,\n"
    "                          full: the slowest) and a figure; it is shown only\n"
    "                          when stdout is a terminal\n"
    "  -j, --json              with --once: the snapshot as JSON\n"
    "      --socket PATH       the daemon's socket (see tracectl --help)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Example:\n"
    "  tracectl top\n"
    "  tracectl top job-42 --interval 0.5\n"
    "  tracectl top 7 --once --json | jq '.ranks'\n";

/* ---- snapshots ------------------------------------------------------------ */

struct top_proc {
    int64_t process_id, rank, pid; /* rank -1: none */
    uint64_t entries, step;
    bool has_step;
};

struct top_op {
    char *name;
    uint64_t calls, total_ns;
};

/* A rank's collective figures in the report's analysis, since the start. */
struct top_an_rank {
    int64_t rank;
    uint64_t last, caused_ns, waited_ns; /* arrived_last, caused_ns, waited_ns */
    uint64_t cpu_wait_ns;                /* its steps' wait for a CPU; 0 from a daemon before it */
};

/* A rank on another host, as a home has it from that member's last snapshot. */
struct top_member_rank {
    int64_t rank;
    char host[128];
    uint64_t steps, step_mean_ns, cpu_wait_ns, waited_ns, caused_ns;
};

/* The collective part of a report's analysis (PROTOCOL.md Part 3). */
struct top_an {
    bool on;            /* the daemon answered with the analysis keys */
    bool has_culprit;   /* a daemon whose "late" says whom the verdict names */
    int64_t culprit;    /* that rank, -1: no rank stands out */
    uint64_t instances; /* collective instances of every op, since the start */
    bool cpu_wait;      /* a rank has a CPU wait: the rank rows show it */
    struct top_an_rank *ranks;
    size_t n_ranks;
    /* at a home, the members' ranks (the late reply's member_ranks); NULL: none */
    struct top_member_rank *members;
    size_t n_members;
};

/* The rank that held the others up over some span: the one with the most caused time. */
struct top_late {
    int64_t rank;
    uint64_t last, instances; /* arrived last at `last` of `instances` */
    uint64_t caused_ns;       /* the skews of those instances (the report's caused_ns) */
    uint64_t others_ns;       /* the other ranks' time lost waiting in collectives */
};

/* One `live` answer, owned. */
struct top_snap {
    int64_t id;
    char name[PROTO_MAX_SESSION + 1];
    bool live;
    bool interrupted;     /* the daemon cut the session short */
    char cut_reason[256]; /* why, when interrupted */
    uint64_t processes, connected, entries, dropped, now_ns;
    struct top_proc *procs;
    struct top_op *ops; /* by name */
    size_t n_procs, n_ops;
    struct top_an an, an_was;  /* the latest analysis asked, and the one asked before it */
    uint64_t an_ns, an_was_ns; /* now_ns of the samples they were asked with */
    double an_took;            /* seconds the ask of an took (0: carried over) */
};

/* A row of an op table: one op's calls and time, over the interval or overall. */
struct top_row {
    const char *name;
    uint64_t calls, total_ns;
};

struct top_opts {
    double interval;
    bool once;
    uint32_t top; /* 0: what fits */
};

static volatile sig_atomic_t top_quit, top_resized;

static double top_clock(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void top_an_free(struct top_an *an)
{
    free(an->ranks);
    free(an->members);
    memset(an, 0, sizeof(*an));
}

/* A copy of src into dst (cleared first). 0 or -ENOMEM. */
static int top_an_copy(struct top_an *dst, const struct top_an *src)
{
    *dst = *src;
    if ((dst->ranks = calloc(src->n_ranks + 1, sizeof(*dst->ranks))) == NULL) {
        memset(dst, 0, sizeof(*dst));
        return -ENOMEM;
    }
    if (src->n_ranks > 0)
        memcpy(dst->ranks, src->ranks, src->n_ranks * sizeof(*dst->ranks));
    dst->members = NULL;
    if (src->n_members > 0) {
        if ((dst->members = calloc(src->n_members, sizeof(*dst->members))) == NULL) {
            free(dst->ranks);
            memset(dst, 0, sizeof(*dst));
            return -ENOMEM;
        }
        memcpy(dst->members, src->members, src->n_members * sizeof(*dst->members));
    }
    return 0;
}

static void top_snap_free(struct top_snap *s)
{
    for (size_t i = 0; i < s->n_ops; i++)
        free(s->ops[i].name);
    free(s->ops);
    free(s->procs);
    top_an_free(&s->an);
    top_an_free(&s->an_was);
    memset(s, 0, sizeof(*s));
}

static uint64_t top_u64(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;

    if (cli_obj_u64(cli_obj_get(map, key), &v) != 0)
        v = 0;
    return v;
}

static int64_t top_i64(const msgpack_object *map, const char *key, int64_t none)
{
    const msgpack_object *v = cli_obj_get(map, key);

    if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT64_MAX)
        return (int64_t)v->via.u64;
    if (v != NULL && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return v->via.i64;
    return none;
}

static int top_cmp_proc(const void *a, const void *b)
{
    const struct top_proc *x = a, *y = b;

    if ((x->rank < 0) != (y->rank < 0))
        return x->rank < 0 ? 1 : -1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->process_id < y->process_id ? -1 : x->process_id > y->process_id;
}

static int top_cmp_op(const void *a, const void *b)
{
    return strcmp(((const struct top_op *)a)->name, ((const struct top_op *)b)->name);
}

static int top_copy_procs(struct top_snap *s, const msgpack_object *a)
{
    if (a == NULL || a->type != MSGPACK_OBJECT_ARRAY)
        return -EPROTO;
    if ((s->procs = calloc(a->via.array.size + 1, sizeof(*s->procs))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        const msgpack_object *p = &a->via.array.ptr[i];
        struct top_proc *t = &s->procs[s->n_procs++];

        t->process_id = top_i64(p, "process_id", 0);
        t->rank = top_i64(p, "rank", -1);
        t->pid = top_i64(p, "pid", -1);
        t->entries = top_u64(p, "entries");
        t->has_step = cli_obj_u64(cli_obj_get(p, "step"), &t->step) == 0;
    }
    qsort(s->procs, s->n_procs, sizeof(*s->procs), top_cmp_proc);
    return 0;
}

static int top_copy_ops(struct top_snap *s, const msgpack_object *a)
{
    if (a == NULL || a->type != MSGPACK_OBJECT_ARRAY)
        return -EPROTO;
    if ((s->ops = calloc(a->via.array.size + 1, sizeof(*s->ops))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        const msgpack_object *o = &a->via.array.ptr[i];
        struct top_op *t;

        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 3 ||
            o->via.array.ptr[0].type != MSGPACK_OBJECT_STR)
            return -EPROTO;
        t = &s->ops[s->n_ops++];
        if ((t->name = strndup(o->via.array.ptr[0].via.str.ptr,
                               o->via.array.ptr[0].via.str.size)) == NULL ||
            cli_obj_u64(&o->via.array.ptr[1], &t->calls) != 0 ||
            cli_obj_u64(&o->via.array.ptr[2], &t->total_ns) != 0)
            return t->name == NULL ? -ENOMEM : -EPROTO;
    }
    qsort(s->ops, s->n_ops, sizeof(*s->ops), top_cmp_op);
    return 0;
}

/* Copies a `live` result into s. Returns 0, -ENOMEM or -EPROTO. */
static int top_copy(struct top_snap *s, const msgpack_object *res)
{
    const msgpack_object *ses = cli_obj_get(res, "session");
    int rc;

    memset(s, 0, sizeof(*s));
    if (ses == NULL || ses->type != MSGPACK_OBJECT_MAP)
        return -EPROTO;
    s->id = top_i64(ses, "id", 0);
    cli_obj_text(cli_obj_get(ses, "name"), s->name, sizeof(s->name));
    s->live = cli_obj_str_eq(cli_obj_get(ses, "state"), "live");
    s->interrupted = cli_obj_is_true(cli_obj_get(ses, "interrupted"));
    cli_obj_text(cli_obj_get(ses, "interrupted_reason"), s->cut_reason, sizeof(s->cut_reason));
    s->processes = top_u64(ses, "processes");
    s->connected = top_u64(ses, "connected");
    s->entries = top_u64(ses, "entries");
    s->dropped = top_u64(ses, "dropped");
    s->now_ns = top_u64(res, "now_ns");
    if ((rc = top_copy_procs(s, cli_obj_get(res, "processes"))) != 0 ||
        (rc = top_copy_ops(s, cli_obj_get(res, "ops"))) != 0)
        top_snap_free(s);
    return rc;
}

/*
 * Copies the collective figures into an: ranks[] (rank, arrived_last,
 * caused_ns, waited_ns; processes without a rank are left out: they cannot
 * be named) and the instances, from the reply's "late" map, or, from a
 * daemon before "late" (which answers with the whole report), from the
 * analysis' ranks[] and the sum of its collectives[].instances. A reply
 * with neither (a daemon before the analysis) leaves an->on false.
 * 0 or -ENOMEM.
 */
/*
 * A home's member_ranks (proto/PROTOCOL.md "report option late"): the ranks of its
 * members' hosts, from their last snapshots. 0 or -ENOMEM.
 */
static int top_copy_members(struct top_an *an, const msgpack_object *rows)
{
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY || rows->via.array.size == 0)
        return 0;
    if ((an->members = calloc(rows->via.array.size, sizeof(*an->members))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *r = &rows->via.array.ptr[i];
        struct top_member_rank *t = &an->members[an->n_members++];

        t->rank = top_i64(r, "rank", -1);
        cli_obj_text(cli_obj_get(r, "host"), t->host, sizeof(t->host));
        t->steps = top_u64(r, "steps");
        t->step_mean_ns = top_u64(r, "step_mean_ns");
        t->cpu_wait_ns = top_u64(r, "cpu_wait_ns");
        t->waited_ns = top_u64(r, "waited_ns");
        t->caused_ns = top_u64(r, "caused_ns");
    }
    return 0;
}

static int top_copy_an(struct top_an *an, const msgpack_object *res)
{
    const msgpack_object *late = cli_obj_get(res, "late");
    const msgpack_object *members = cli_obj_get(res, "member_ranks");
    const msgpack_object *ranks, *coll = NULL;

    memset(an, 0, sizeof(*an));
    if (top_copy_members(an, members) < 0)
        return -ENOMEM;
    if (late != NULL && late->type == MSGPACK_OBJECT_MAP) /* a daemon with "late" */
        res = late;
    else if ((coll = cli_obj_get(res, "collectives")) == NULL || coll->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    if ((ranks = cli_obj_get(res, "ranks")) == NULL || ranks->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    if ((an->ranks = calloc(ranks->via.array.size + 1, sizeof(*an->ranks))) == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < ranks->via.array.size; i++) {
        const msgpack_object *r = &ranks->via.array.ptr[i];
        struct top_an_rank *t = &an->ranks[an->n_ranks];

        if ((t->rank = top_i64(r, "rank", -1)) < 0)
            continue;
        t->last = top_u64(r, "arrived_last");
        t->caused_ns = top_u64(r, "caused_ns");
        t->waited_ns = top_u64(r, "waited_ns");
        t->cpu_wait_ns = top_u64(r, "cpu_wait_ns");
        an->cpu_wait = an->cpu_wait || t->cpu_wait_ns > 0;
        an->n_ranks++;
    }
    if (coll == NULL) {
        const msgpack_object *c = cli_obj_get(res, "culprit");
        an->instances = top_u64(res, "instances");
        an->has_culprit = c != NULL;
        an->culprit = top_i64(res, "culprit", -1);
    }
    for (uint32_t i = 0; coll != NULL && i < coll->via.array.size; i++) {
        uint64_t n = top_u64(&coll->via.array.ptr[i], "instances");
        an->instances = util_sat_add(an->instances, n);
    }
    an->on = true;
    return 0;
}

/*
 * The late figures of the session: a `report` with "late" on (PROTOCOL.md
 * Part 3, "report option late"), which a daemon answers with only what the
 * late-rank line needs, read from its per-(process, step) rank aggregates
 * (never the entries), current to the last commit. A daemon before that
 * option ignores the key and answers as before: with "analysis" on and the
 * v1 part kept to one op and one entry per list, the whole report, from
 * which the same figures are read (top_copy_an). A failure (a daemon
 * without the analysis, a session gone) only leaves the view without the
 * late rank: nothing is printed, which would tear the frame. Returns 0 or
 * -ENOMEM.
 */
static int top_analysis(struct cli_ctx *ctx, const struct proto_request *req, struct top_an *an)
{
    char buf[PATH_MAX];
    struct proto_request r = *req;
    struct cli_conn conn;
    struct cli_conn_reply rep;
    int rc = 0;

    memset(an, 0, sizeof(*an));
    r.late = true;
    r.analysis.on = true; /* for a daemon before "late" */
    r.top = 1;
    r.ops_limit = 1;
    if (cli_conn_open(&conn, cli_conn_path(ctx->socket, buf, sizeof(buf))) == 0 &&
        cli_conn_call(&conn, PROTO_REPORT, &r, &rep) == 0 && rep.ok)
        rc = top_copy_an(an, rep.result);
    cli_conn_close(&conn);
    return rc;
}

/*
 * The analyses of sample s: asked now (ask), the one before it being prev's
 * latest; or both carried over from prev. 0 or -ENOMEM.
 */
static int top_sample_an(struct cli_ctx *ctx, const struct proto_request *req,
                         const struct top_snap *prev, struct top_snap *s, bool ask)
{
    int rc = 0;

    if (ask) {
        double t0 = top_clock();
        rc = top_analysis(ctx, req, &s->an);
        s->an_took = top_clock() - t0;
        s->an_ns = s->now_ns;
        if (rc == 0 && prev != NULL && prev->an.on) {
            rc = top_an_copy(&s->an_was, &prev->an);
            s->an_was_ns = prev->an_ns;
        }
    } else if (prev != NULL) {
        if ((rc = top_an_copy(&s->an, &prev->an)) == 0)
            rc = top_an_copy(&s->an_was, &prev->an_was);
        s->an_ns = prev->an_ns;
        s->an_was_ns = prev->an_was_ns;
    }
    return rc;
}

/*
 * One `live` request into s, and the analysis if ask (see top_sample_an).
 * Returns an exit code (an error is printed).
 */
static int top_sample(struct cli_ctx *ctx, const struct proto_request *req,
                      const struct top_snap *prev, struct top_snap *s, bool ask)
{
    struct cli_conn conn;
    const msgpack_object *res;
    int rc = cli_call(ctx, PROTO_LIVE, req, &conn, &res);

    if (rc != CLI_EXIT_OK)
        return rc;
    rc = top_copy(s, res);
    cli_conn_close(&conn);
    if (rc == 0 && (rc = top_sample_an(ctx, req, prev, s, ask)) != 0)
        top_snap_free(s);
    if (rc == -ENOMEM) {
        cli_error("top: out of memory");
        return CLI_EXIT_ERROR;
    }
    if (rc != 0) {
        cli_error("bad reply from the daemon: the live map is not as PROTOCOL.md says");
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}

/* The newest live session's id, from `sessions`. Returns an exit code. */
static int top_newest_live(struct cli_ctx *ctx, int64_t *id)
{
    struct proto_request req;
    struct cli_conn conn;
    const msgpack_object *res;
    int rc;

    proto_request_init(&req);
    if ((rc = cli_call(ctx, PROTO_SESSIONS, &req, &conn, &res)) != CLI_EXIT_OK)
        return rc;
    rc = CLI_EXIT_NO_SESSION;
    for (uint32_t i = 0; res->type == MSGPACK_OBJECT_ARRAY && i < res->via.array.size; i++) {
        const msgpack_object *s = &res->via.array.ptr[i];

        if (cli_obj_str_eq(cli_obj_get(s, "state"), "live")) {
            *id = top_i64(s, "id", 0);
            rc = CLI_EXIT_OK;
            break;
        }
    }
    cli_conn_close(&conn);
    if (rc != CLI_EXIT_OK)
        cli_error("top: no live session (name one: tracectl top <id|name>)");
    return rc;
}

/* ---- figures -------------------------------------------------------------- */

static double top_dt(const struct top_snap *prev, const struct top_snap *cur)
{
    if (prev == NULL || cur->now_ns <= prev->now_ns)
        return 0.0;
    return (double)(cur->now_ns - prev->now_ns) / 1e9;
}

/* Per second, or NAN without two samples. */
static double top_rate(uint64_t before, uint64_t after, double dt)
{
    if (dt <= 0.0)
        return NAN;
    return after >= before ? (double)(after - before) / dt : 0.0;
}

static const struct top_proc *top_prev_proc(const struct top_snap *prev, int64_t process_id)
{
    for (size_t i = 0; prev != NULL && i < prev->n_procs; i++)
        if (prev->procs[i].process_id == process_id)
            return &prev->procs[i];
    return NULL;
}

static int top_cmp_row(const void *a, const void *b)
{
    const struct top_row *x = a, *y = b;

    if (x->total_ns != y->total_ns)
        return x->total_ns > y->total_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

/*
 * The op rows, hottest first: overall (prev NULL), or over the interval
 * since prev (ops with no call in it are left out). Both snapshots' ops are
 * sorted by name: one merge. Returns the count; *rows is the caller's to free.
 */
static long top_rows(const struct top_snap *prev, const struct top_snap *cur, struct top_row **rows)
{
    size_t n = 0, j = 0;
    struct top_row *r = calloc(cur->n_ops + 1, sizeof(*r));

    if (r == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < cur->n_ops; i++) {
        const struct top_op *o = &cur->ops[i];
        uint64_t calls = o->calls, total = o->total_ns;

        while (prev != NULL && j < prev->n_ops && strcmp(prev->ops[j].name, o->name) < 0)
            j++;
        if (prev != NULL && j < prev->n_ops && strcmp(prev->ops[j].name, o->name) == 0) {
            calls = calls >= prev->ops[j].calls ? calls - prev->ops[j].calls : 0;
            total = total >= prev->ops[j].total_ns ? total - prev->ops[j].total_ns : 0;
        }
        if (calls > 0)
            r[n++] = (struct top_row){o->name, calls, total};
    }
    qsort(r, n, sizeof(*r), top_cmp_row);
    *rows = r;
    return (long)n;
}

/* The rank's figures in an, or NULL. */
static const struct top_an_rank *top_an_find(const struct top_an *an, int64_t rank)
{
    for (size_t i = 0; i < an->n_ranks; i++)
        if (an->ranks[i].rank == rank)
            return &an->ranks[i];
    return NULL;
}

/* now - was, or 0 when it went down (aggregates rebuilt). */
static uint64_t top_delta(uint64_t now, uint64_t was)
{
    return now >= was ? now - was : 0;
}

/*
 * The rank that held the others up the most: the most caused time (the
 * skews of the instances it arrived last at; ties: the most arrivals last,
 * then the lowest rank), how often it arrived last, and the other ranks'
 * waited_ns. Since the start (p NULL), or between analyses p and a: the
 * difference of their counts. Whether the verdict names it is the daemon's
 * to say (top_an.culprit). False when there is none: no analysis, fewer than
 * two ranks (as for the verdict), no collective instance in the span, or no
 * caused time and no last arrival in it.
 */
static bool top_late_rank(const struct top_an *p, const struct top_an *a, struct top_late *l)
{
    uint64_t waited = 0, own = 0;
    bool found = false;

    memset(l, 0, sizeof(*l));
    if (!a->on || a->n_ranks < 2 || (p != NULL && (!p->on || p->instances > a->instances)))
        return false;
    l->instances = a->instances - (p != NULL ? p->instances : 0);
    for (size_t i = 0; l->instances > 0 && i < a->n_ranks; i++) {
        const struct top_an_rank *r = &a->ranks[i], *q = p ? top_an_find(p, r->rank) : NULL;
        uint64_t last = top_delta(r->last, q ? q->last : 0);
        uint64_t w = top_delta(r->waited_ns, q ? q->waited_ns : 0);

        uint64_t caused = top_delta(r->caused_ns, q ? q->caused_ns : 0);

        waited = util_sat_add(waited, w);
        if ((caused > 0 || last > 0) &&
            (!found || caused > l->caused_ns ||
             (caused == l->caused_ns &&
              (last > l->last || (last == l->last && r->rank < l->rank))))) {
            l->rank = r->rank, l->last = last, own = w;
            l->caused_ns = caused;
            found = true;
        }
    }
    l->others_ns = waited - own;
    return found;
}

/* The late rank between the two latest analyses of cur, and their distance in seconds. */
static bool top_late_last(const struct top_snap *cur, struct top_late *l, double *span)
{
    *span = cur->an_ns > cur->an_was_ns ? (double)(cur->an_ns - cur->an_was_ns) / 1e9 : 0.0;
    return cur->an_was.on && top_late_rank(&cur->an_was, &cur->an, l);
}

/*
 * The late-rank line: the rank since the start and the other ranks' wait,
 * then (last: it is what a narrow terminal cuts) the late rank between the
 * two latest analyses when collectives completed in that time, named when
 * it is another rank.
 */
static void top_print_late(FILE *f, const struct top_snap *cur)
{
    struct top_late all, last;
    char others[CLI_FMT_LEN];
    double span;

    char caused[CLI_FMT_LEN];

    if (!top_late_rank(NULL, &cur->an, &all))
        return;
    cli_fmt_duration(others, sizeof(others), all.others_ns);
    cli_fmt_duration(caused, sizeof(caused), all.caused_ns);
    if (cur->an.has_culprit && cur->an.culprit != all.rank)
        fprintf(f, "no rank stands out (most caused: rank %" PRId64 ", %s", all.rank, caused);
    else
        fprintf(f, "late rank %" PRId64 " held the others up for %s (", all.rank, caused);
    fprintf(f, "%sarrived last at %.0f%% of %" PRIu64 " collectives), the others waited %s",
            cur->an.has_culprit && cur->an.culprit != all.rank ? "; " : "",
            100.0 * (double)all.last / (double)all.instances, all.instances, others);
    if (top_late_last(cur, &last, &span)) {
        cli_fmt_duration(caused, sizeof(caused), last.caused_ns);
        fprintf(f, "; last %.1f s: ", span);
        if (last.rank != all.rank)
            fprintf(f, "rank %" PRId64 " ", last.rank);
        fprintf(f, "%s", caused);
    }
    fputc('\n', f);
}

/* ---- text ----------------------------------------------------------------- */

static void top_rate_text(char *buf, size_t size, double r)
{
    if (isnan(r))
        snprintf(buf, size, "-");
    else if (r >= 100.0)
        snprintf(buf, size, "%.0f", r);
    else
        snprintf(buf, size, "%.1f", r);
}

/* A process's time per step over the interval in ns, 0 when it made no step in it. */
static uint64_t top_step_ns(const struct top_proc *p, const struct top_proc *q, double dt)
{
    if (q == NULL || !q->has_step || !p->has_step || p->step <= q->step || !(dt > 0))
        return 0;
    return (uint64_t)(dt * 1e9 / (double)(p->step - q->step));
}

/* The STEP_TIME cell (bars on only): a bar scaled from lo to hi and the figure. */
static void top_step_bar(char *buf, size_t size, uint64_t ns, uint64_t lo, uint64_t hi)
{
    char glyph[8], fig[CLI_FMT_LEN];

    if (ns == 0) {
        snprintf(buf, size, "-");
        return;
    }
    cli_bars_line(glyph, sizeof(glyph), &ns, 1, lo, hi, 1);
    cli_fmt_duration(fig, sizeof(fig), ns);
    snprintf(buf, size, "%s %s", glyph, fig);
}

/* The CPU WAIT cell of a process of rank (-1: none): its rank's since the start, or "-". */
static void top_cpu_wait(char *buf, size_t size, const struct top_an *an, int64_t rank)
{
    const struct top_an_rank *r = rank >= 0 ? top_an_find(an, rank) : NULL;

    if (r == NULL)
        snprintf(buf, size, "-");
    else
        cli_fmt_duration(buf, size, r->cpu_wait_ns);
}

/* The width to pad s to for n columns: "µs" takes 3 bytes for 2 columns. */
static int top_pad(const char *s, int n)
{
    int extra = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        extra += (*p & 0xC0) == 0x80;
    return n + extra;
}

static void top_print_procs(FILE *f, const struct top_snap *prev, const struct top_snap *cur,
                            double dt)
{
    uint64_t lo = 0, hi = 0;

    for (size_t i = 0; cli_bars_on() && i < cur->n_procs; i++) {
        const struct top_proc *p = &cur->procs[i];
        uint64_t ns = top_step_ns(p, top_prev_proc(prev, p->process_id), dt);
        if (ns != 0 && (lo == 0 || ns < lo))
            lo = ns;
        hi = ns > hi ? ns : hi;
    }
    fprintf(f, "  %6s %8s %10s %8s %12s %10s", "RANK", "PID", "STEP", "STEPS/S", "ENTRIES",
            "ENTRIES/S");
    if (cur->an.cpu_wait)
        fprintf(f, " %10s", "CPU WAIT");
    fprintf(f, "%s\n", cli_bars_on() ? "  STEP_TIME" : "");
    if (cur->n_procs == 0)
        fprintf(f, "  (no process connected)\n");
    for (size_t i = 0; i < cur->n_procs; i++) {
        const struct top_proc *p = &cur->procs[i], *q = top_prev_proc(prev, p->process_id);
        char rank[24], step[24], srate[24], erate[24];

        snprintf(rank, sizeof(rank), p->rank >= 0 ? "%" PRId64 : "-", p->rank);
        snprintf(step, sizeof(step), p->has_step ? "%" PRIu64 : "-", p->step);
        top_rate_text(srate, sizeof(srate),
                      q != NULL && q->has_step && p->has_step ? top_rate(q->step, p->step, dt)
                                                              : NAN);
        top_rate_text(erate, sizeof(erate), q != NULL ? top_rate(q->entries, p->entries, dt) : NAN);
        fprintf(f, "  %6s %8" PRId64 " %10s %8s %12" PRIu64 " %10s", rank, p->pid, step, srate,
                p->entries, erate);
        if (cur->an.cpu_wait) {
            char cw[CLI_FMT_LEN];
            top_cpu_wait(cw, sizeof(cw), &cur->an, p->rank);
            fprintf(f, " %*s", top_pad(cw, 10), cw);
        }
        if (cli_bars_on()) {
            char bar[CLI_FMT_LEN + 8];
            top_step_bar(bar, sizeof(bar), top_step_ns(p, q, dt), lo, hi);
            fprintf(f, "  %s", bar);
        }
        fputc('\n', f);
    }
}

/*
 * At a home, the ranks on its members' hosts: their report rows as of each member's last
 * snapshot (a second old at most while its link is up), figures since the start; the
 * live rates above are the home's own processes' (members send no live counters).
 */
static void top_print_members(FILE *f, const struct top_an *an)
{
    if (an->n_members == 0)
        return;
    fprintf(f, "\nRanks on member hosts (their last snapshots, since the start)\n");
    fprintf(f, "  %6s %-12s %8s %10s %10s %10s %10s\n", "RANK", "HOST", "STEPS", "STEP_AVG",
            "CPU WAIT", "WAITED", "CAUSED");
    for (size_t i = 0; i < an->n_members; i++) {
        const struct top_member_rank *m = &an->members[i];
        char rank[24], avg[CLI_FMT_LEN], cw[CLI_FMT_LEN], wt[CLI_FMT_LEN], cs[CLI_FMT_LEN];

        snprintf(rank, sizeof(rank), m->rank >= 0 ? "%" PRId64 : "-", m->rank);
        cli_fmt_duration(avg, sizeof(avg), m->step_mean_ns);
        cli_fmt_duration(cw, sizeof(cw), m->cpu_wait_ns);
        cli_fmt_duration(wt, sizeof(wt), m->waited_ns);
        cli_fmt_duration(cs, sizeof(cs), m->caused_ns);
        fprintf(f, "  %6s %-12s %8" PRIu64 " %*s %*s %*s %*s\n", rank, m->host, m->steps,
                top_pad(avg, 10), avg, top_pad(cw, 10), cw, top_pad(wt, 10), wt, top_pad(cs, 10),
                cs);
    }
}

static void top_print_ops(FILE *f, const char *title, const struct top_row *r, long n, size_t max)
{
    uint64_t sum = 0;

    for (long i = 0; i < n; i++)
        sum = util_sat_add(sum, r[i].total_ns);
    fprintf(f, "%s\n  %10s %10s %6s  %s\n", title, "CALLS", "TOTAL", "SHARE", "OP");
    if (n == 0)
        fprintf(f, "  (none)\n");
    for (long i = 0; i < n && (size_t)i < max; i++) {
        char total[CLI_FMT_LEN], share[CLI_FMT_LEN];

        cli_fmt_duration(total, sizeof(total), r[i].total_ns);
        cli_fmt_share(share, sizeof(share), sum ? (double)r[i].total_ns / (double)sum : 0.0);
        fprintf(f, "  %10" PRIu64 " %10s %6s  %s\n", r[i].calls, total, share, r[i].name);
    }
}

/*
 * The whole view as text: a header, the ranks, then the two op tables of
 * `ops` rows each. Returns 0 or -ENOMEM.
 */
static int top_print(FILE *f, const struct top_snap *prev, const struct top_snap *cur, size_t ops,
                     const struct top_opts *o)
{
    double dt = top_dt(prev, cur);
    struct top_row *last = NULL, *all = NULL;
    long n_last = 0, n_all;
    char erate[24];

    if (prev != NULL && (n_last = top_rows(prev, cur, &last)) < 0)
        return -ENOMEM;
    if ((n_all = top_rows(NULL, cur, &all)) < 0) {
        free(last);
        return -ENOMEM;
    }
    top_rate_text(erate, sizeof(erate), top_rate(prev ? prev->entries : 0, cur->entries, dt));
    fprintf(f,
            "tracectl top: session %" PRId64 " (%s) %s, %" PRIu64 " of %" PRIu64
            " processes connected%s\n",
            cur->id, cur->name,
            cur->live          ? "live"
            : cur->interrupted ? "ended (interrupted)"
                               : "ended",
            cur->connected, cur->processes, o->once ? "" : "; q quits");
    if (cur->interrupted)
        fprintf(f, "interrupted: %s.\n", cur->cut_reason);
    fprintf(f, "entries %" PRIu64 " (%s/s)  dropped %" PRIu64 "  interval %.1f s\n", cur->entries,
            erate, cur->dropped, dt > 0 ? dt : o->interval);
    top_print_late(f, cur);
    fputc('\n', f);
    top_print_procs(f, prev, cur, dt);
    top_print_members(f, &cur->an);
    fputc('\n', f);
    if (prev != NULL) {
        top_print_ops(f, "Hottest ops, last interval", last, n_last, ops);
        fputc('\n', f);
    }
    top_print_ops(f, "Hottest ops, overall", all, n_all, ops);
    free(last);
    free(all);
    return ferror(f) ? -EIO : 0;
}

/* ---- JSON ------------------------------------------------------------------ */

static void top_pack_rate(msgpack_packer *pk, const char *key, double r)
{
    proto_pack_str(pk, key);
    if (isnan(r))
        msgpack_pack_nil(pk);
    else
        msgpack_pack_double(pk, r);
}

static void top_pack_rows(msgpack_packer *pk, const char *key, const struct top_row *r, long n)
{
    proto_pack_str(pk, key);
    msgpack_pack_array(pk, n > 0 ? (size_t)n : 0);
    for (long i = 0; i < n; i++) {
        msgpack_pack_map(pk, 3);
        proto_pack_str(pk, "op");
        proto_pack_str(pk, r[i].name);
        proto_pack_str(pk, "calls");
        msgpack_pack_uint64(pk, r[i].calls);
        proto_pack_str(pk, "total_ns");
        msgpack_pack_uint64(pk, r[i].total_ns);
    }
}

static void top_pack_procs(msgpack_packer *pk, const struct top_snap *prev,
                           const struct top_snap *cur, double dt)
{
    proto_pack_str(pk, "ranks");
    msgpack_pack_array(pk, cur->n_procs);
    for (size_t i = 0; i < cur->n_procs; i++) {
        const struct top_proc *p = &cur->procs[i], *q = top_prev_proc(prev, p->process_id);

        msgpack_pack_map(pk, cur->an.cpu_wait ? 8 : 7);
        proto_pack_str(pk, "rank");
        if (p->rank >= 0)
            msgpack_pack_int64(pk, p->rank);
        else
            msgpack_pack_nil(pk);
        proto_pack_str(pk, "process_id");
        msgpack_pack_int64(pk, p->process_id);
        proto_pack_str(pk, "pid");
        msgpack_pack_int64(pk, p->pid);
        proto_pack_str(pk, "step");
        if (p->has_step)
            msgpack_pack_uint64(pk, p->step);
        else
            msgpack_pack_nil(pk);
        top_pack_rate(pk, "steps_per_s",
                      q && q->has_step && p->has_step ? top_rate(q->step, p->step, dt) : NAN);
        proto_pack_str(pk, "entries");
        msgpack_pack_uint64(pk, p->entries);
        top_pack_rate(pk, "entries_per_s", q ? top_rate(q->entries, p->entries, dt) : NAN);
        if (cur->an.cpu_wait) {
            const struct top_an_rank *r = p->rank >= 0 ? top_an_find(&cur->an, p->rank) : NULL;
            proto_pack_str(pk, "cpu_wait_ns");
            if (r != NULL)
                msgpack_pack_uint64(pk, r->cpu_wait_ns);
            else
                msgpack_pack_nil(pk);
        }
    }
}

/* "member_ranks": [{rank, host, steps, step_mean_ns, cpu_wait_ns, waited_ns, caused_ns}] */
static void top_pack_members(msgpack_packer *pk, const struct top_an *an)
{
    proto_pack_str(pk, "member_ranks");
    msgpack_pack_array(pk, an->n_members);
    for (size_t i = 0; i < an->n_members; i++) {
        const struct top_member_rank *m = &an->members[i];
        const uint64_t v[] = {m->steps, m->step_mean_ns, m->cpu_wait_ns, m->waited_ns,
                              m->caused_ns};
        static const char *const k[] = {"steps", "step_mean_ns", "cpu_wait_ns", "waited_ns",
                                        "caused_ns"};

        msgpack_pack_map(pk, 7);
        proto_pack_str(pk, "rank");
        if (m->rank >= 0)
            msgpack_pack_int64(pk, m->rank);
        else
            msgpack_pack_nil(pk);
        proto_pack_str(pk, "host");
        proto_pack_str(pk, m->host);
        for (size_t j = 0; j < 5; j++) {
            proto_pack_str(pk, k[j]);
            msgpack_pack_uint64(pk, v[j]);
        }
    }
}

/* {rank, arrived_last, collectives, share, caused_ns, others_waited_ns[, seconds]} */
static void top_pack_late_span(msgpack_packer *pk, const struct top_late *l, double span)
{
    msgpack_pack_map(pk, span > 0 ? 7 : 6);
    proto_pack_str(pk, "rank");
    msgpack_pack_int64(pk, l->rank);
    proto_pack_str(pk, "arrived_last");
    msgpack_pack_uint64(pk, l->last);
    proto_pack_str(pk, "collectives");
    msgpack_pack_uint64(pk, l->instances);
    proto_pack_str(pk, "share");
    msgpack_pack_double(pk, (double)l->last / (double)l->instances);
    proto_pack_str(pk, "caused_ns");
    msgpack_pack_uint64(pk, l->caused_ns);
    proto_pack_str(pk, "others_waited_ns");
    msgpack_pack_uint64(pk, l->others_ns);
    if (span > 0) {
        proto_pack_str(pk, "seconds");
        msgpack_pack_double(pk, span);
    }
}

/*
 * "late_rank": the rank or null; "late": null, or {"total": its figures since
 * the start, "interval": the late rank between the two latest analyses, with
 * their distance in "seconds" (null when no collective completed between)}.
 */
static void top_pack_late(msgpack_packer *pk, const struct top_snap *cur)
{
    struct top_late all, last;
    bool has = top_late_rank(NULL, &cur->an, &all);
    double span;

    proto_pack_str(pk, "late_rank"); /* whom the verdict names (an older daemon: the most caused) */
    if (has && (!cur->an.has_culprit || cur->an.culprit == all.rank))
        msgpack_pack_int64(pk, all.rank);
    else
        msgpack_pack_nil(pk);
    proto_pack_str(pk, "late");
    if (!has) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_map(pk, 2);
    proto_pack_str(pk, "total");
    top_pack_late_span(pk, &all, 0.0);
    proto_pack_str(pk, "interval");
    if (top_late_last(cur, &last, &span))
        top_pack_late_span(pk, &last, span);
    else
        msgpack_pack_nil(pk);
}

/*
 * {"session": {id, name, state, processes, connected}, "interval_s",
 *  "entries", "entries_per_s", "dropped", "late_rank", "late", "ranks": [...],
 *  "ops_interval": [...], "ops_total": [...]}; rates null without two samples.
 */
static int top_json(const struct top_snap *prev, const struct top_snap *cur)
{
    double dt = top_dt(prev, cur);
    struct top_row *last = NULL, *all = NULL;
    long n_last = 0, n_all;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if ((prev != NULL && (n_last = top_rows(prev, cur, &last)) < 0) ||
        (n_all = top_rows(NULL, cur, &all)) < 0) {
        free(last);
        cli_error("top: out of memory");
        return CLI_EXIT_ERROR;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, cur->an.n_members > 0 ? 11 : 10);
    proto_pack_str(&pk, "session");
    msgpack_pack_map(&pk, 7);
    proto_pack_str(&pk, "id");
    msgpack_pack_int64(&pk, cur->id);
    proto_pack_str(&pk, "name");
    proto_pack_str(&pk, cur->name);
    proto_pack_str(&pk, "state");
    proto_pack_str(&pk, cur->live ? "live" : "ended");
    proto_pack_str(&pk, "processes");
    msgpack_pack_uint64(&pk, cur->processes);
    proto_pack_str(&pk, "connected");
    msgpack_pack_uint64(&pk, cur->connected);
    proto_pack_str(&pk, "interrupted");
    if (cur->interrupted)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    proto_pack_str(&pk, "interrupted_reason");
    if (cur->interrupted)
        proto_pack_str(&pk, cur->cut_reason);
    else
        msgpack_pack_nil(&pk);
    top_pack_rate(&pk, "interval_s", dt > 0 ? dt : NAN);
    proto_pack_str(&pk, "entries");
    msgpack_pack_uint64(&pk, cur->entries);
    top_pack_rate(&pk, "entries_per_s", top_rate(prev ? prev->entries : 0, cur->entries, dt));
    proto_pack_str(&pk, "dropped");
    msgpack_pack_uint64(&pk, cur->dropped);
    top_pack_late(&pk, cur);
    top_pack_procs(&pk, prev, cur, dt);
    if (cur->an.n_members > 0)
        top_pack_members(&pk, &cur->an);
    top_pack_rows(&pk, "ops_interval", last, n_last);
    top_pack_rows(&pk, "ops_total", all, n_all);
    free(last);
    free(all);
    rc = cli_print_json_packed(&sb, "top");
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ---- the terminal ----------------------------------------------------------- */

static void top_on_signal(int sig)
{
    if (sig == SIGWINCH)
        top_resized = 1;
    else
        top_quit = 1;
}

struct top_term {
    struct termios saved;
    bool raw;
    unsigned rows, cols;
};

static void top_term_size(struct top_term *t)
{
    struct winsize ws;

    t->rows = 24, t->cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        t->rows = ws.ws_row, t->cols = ws.ws_col;
}

/* Unbuffered, unechoed input (signals kept); hides the cursor and clears the screen. */
static void top_term_start(struct top_term *t)
{
    struct termios raw;
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    /*
     * SA_RESTART: a resize while a request is under way (connect, read,
     * write) must not fail it; poll(), never restarted, still returns EINTR
     * at once, so top_wait() sees the flags without delay.
     */
    sa.sa_handler = top_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGWINCH, &sa, NULL);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
        raw = t->saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        t->raw = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    top_term_size(t);
    fputs("\033[?25l\033[H\033[2J", stdout);
    fflush(stdout);
}

static void top_term_stop(struct top_term *t)
{
    if (t->raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
    t->raw = false;
    fputs("\033[?25h\n", stdout);
    fflush(stdout);
}

/* Bytes of s (up to its newline) that fill at most cols columns (one per code point). */
static size_t top_cut(const char *s, size_t n, unsigned cols)
{
    size_t i = 0;
    unsigned used = 0;

    while (i < n && s[i] != '\n' && used < cols) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, n - i, &cp);
        i += k ? k : 1;
        used++;
    }
    return i;
}

/*
 * All of buf to the terminal, through signals: a write(2) cut short by a
 * resize (a partial write, or EINTR) goes on where it stopped, where stdio
 * would report an error and end the view. 0 or -EIO.
 */
static int top_write(const char *buf, size_t len)
{
    if (fflush(stdout) != 0)
        return -EIO;
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, buf, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EIO;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * One frame: the view's text cut to the terminal, written at once from the
 * top-left corner, each line cleared to its end and the rest of the screen
 * cleared, so nothing flickers and nothing of a longer frame stays.
 */
static int top_draw(const struct top_term *t, const struct top_snap *prev,
                    const struct top_snap *cur, const struct top_opts *o)
{
    char *text = NULL, *frame = NULL;
    size_t len = 0, flen = 0, fixed = 10 + cur->n_procs, ops;
    FILE *f = open_memstream(&text, &len);
    FILE *out;
    struct top_late late;
    int rc;

    if (f == NULL)
        return -ENOMEM;
    fixed += top_late_rank(NULL, &cur->an, &late); /* its line */
    /* what is left below the header and the ranks goes to the two op tables */
    ops = o->top ? o->top : t->rows > fixed + 2 ? (t->rows - fixed) / 2 : 1;
    rc = top_print(f, prev, cur, ops, o);
    if (fclose(f) != 0 || rc != 0) {
        free(text);
        return rc ? rc : -ENOMEM;
    }
    if ((out = open_memstream(&frame, &flen)) == NULL) {
        free(text);
        return -ENOMEM;
    }
    fputs("\033[H", out);
    for (size_t i = 0, row = 0; i < len && row < t->rows; row++) {
        size_t cut = top_cut(text + i, len - i, t->cols), eol = i + cut;

        fwrite(text + i, 1, cut, out);
        fputs("\033[K", out);
        while (eol < len && text[eol] != '\n')
            eol++;
        i = eol + 1;
        if (i < len && row + 1 < t->rows)
            fputs("\r\n", out);
    }
    fputs("\033[J", out);
    rc = fclose(out) != 0 ? -ENOMEM : top_write(frame, flen);
    free(frame);
    free(text);
    return rc;
}

/*
 * Waits up to ms for a key or a signal. Returns true to go on, false to
 * quit (q, Ctrl-C, SIGTERM, or the end of input). A resize returns early.
 * The end of input is a hangup, a read of 0 bytes (stdin a file or a pipe
 * at its end: poll says readable at once, forever) or of an error, or stdin
 * closed (POLLNVAL): waiting on such a stdin would spin.
 */
static bool top_wait(int ms)
{
    struct timespec end, now;

    end = util_deadline_in(CLOCK_MONOTONIC, ms < 0 ? 0 : (uint64_t)ms);
    for (;;) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int left, n;
        ssize_t got;
        char key;

        if (top_quit)
            return false;
        if (top_resized)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &now);
        left = (int)((end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000);
        if (left <= 0)
            return true;
        n = poll(&p, 1, left);
        if (n < 0 && errno != EINTR)
            return false;
        if (n <= 0)
            continue;
        if (p.revents & POLLNVAL)
            return false;
        if ((p.revents & (POLLHUP | POLLERR)) && !(p.revents & POLLIN))
            return false;
        if ((got = read(STDIN_FILENO, &key, 1)) == 0 ||
            (got < 0 && errno != EINTR && errno != EAGAIN))
            return false;
        if (got == 1 && (key == 'q' || key == 'Q' || key == 3))
            return false;
    }
}

/*
 * A sample of the live view. The late figures are asked again only once
 * TOP_AN_SHARE times what their last ask took has passed since it was
 * asked, so a top left open keeps the daemon's workers busy a tenth of the
 * time at most. With "late" that is every refresh: the ask reads two rank
 * aggregate tables, a small fraction of what the whole analysis costs (the
 * section "top's late figures" of docs/BENCHMARKS.md before 2026-11-28, in
 * git); a daemon before "late" answers with the whole analysis, asked every
 * few seconds.
 */
static int top_live_sample(struct cli_ctx *ctx, const struct proto_request *req,
                           const struct top_snap *prev, struct top_snap *s, double *next)
{
    double start = top_clock();
    bool ask = prev == NULL || start >= *next;
    int rc = top_sample(ctx, req, prev, s, ask);

    if (ask && rc == CLI_EXIT_OK)
        *next = start + TOP_AN_SHARE * s->an_took;
    return rc;
}

/* The live view until q. Returns an exit code. */
static int top_loop(struct cli_ctx *ctx, const struct proto_request *req, const struct top_opts *o)
{
    struct top_snap snaps[2] = {0};
    struct top_snap *prev = NULL, *cur = &snaps[0];
    struct top_term t = {0};
    double next = 0.0;
    int rc;

    if ((rc = top_live_sample(ctx, req, NULL, cur, &next)) != CLI_EXIT_OK)
        return rc;
    top_term_start(&t);
    for (;;) {
        if (top_draw(&t, prev, cur, o) != 0) {
            rc = CLI_EXIT_ERROR;
            break;
        }
        if (!top_wait((int)(o->interval * 1000.0)))
            break;
        if (top_resized) {
            top_resized = 0;
            top_term_size(&t);
            fputs("\033[2J", stdout);
            continue; /* redraw the same figures at the new size */
        }
        prev = cur;
        cur = cur == &snaps[0] ? &snaps[1] : &snaps[0];
        top_snap_free(cur);
        if ((rc = top_live_sample(ctx, req, prev, cur, &next)) != CLI_EXIT_OK) {
            cur = prev; /* the error is on stderr; keep the last frame */
            break;
        }
    }
    top_term_stop(&t);
    top_snap_free(&snaps[0]);
    top_snap_free(&snaps[1]);
    return rc;
}

/* --once: one sample, or two an interval apart. Returns an exit code. */
static int top_once(struct cli_ctx *ctx, const struct proto_request *req, const struct top_opts *o)
{
    struct top_snap a = {0}, b = {0};
    struct timespec ts;
    int rc = top_sample(ctx, req, NULL, &a, true);

    if (rc == CLI_EXIT_OK && o->interval > 0) {
        ts.tv_sec = (time_t)o->interval;
        ts.tv_nsec = (long)((o->interval - (double)ts.tv_sec) * 1e9);
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        rc = top_sample(ctx, req, &a, &b, true);
    }
    if (rc == CLI_EXIT_OK) {
        const struct top_snap *prev = o->interval > 0 ? &a : NULL;
        const struct top_snap *cur = o->interval > 0 ? &b : &a;
        size_t ops = o->top ? o->top : TOP_ONCE_OPS;
        rc = ctx->json ? top_json(prev, cur)
                       : cli_print_status(top_print(stdout, prev, cur, ops, o));
    }
    top_snap_free(&a);
    top_snap_free(&b);
    return rc;
}

/* ---- options ----------------------------------------------------------------- */

static int top_interval_opt(const char *arg, struct top_opts *o)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno != 0 || !(v >= 0.0 && v <= TOP_MAX_INTERVAL)) {
        cli_error("top: --interval wants seconds from 0 to %.0f, not '%s'", TOP_MAX_INTERVAL, arg);
        return CLI_EXIT_USAGE;
    }
    o->interval = v;
    return CLI_CONTINUE;
}

static int top_top_opt(const char *arg, struct top_opts *o)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(arg, &end, 10);
    if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < 1 || v > 100000) {
        cli_error("top: --top wants an integer from 1 to 100000, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    o->top = (uint32_t)v;
    return CLI_CONTINUE;
}

static int top_opts(struct cli_ctx *ctx, int argc, char **argv, struct top_opts *o)
{
    static const struct option opts[] = {CLI_LONGOPTS,
                                         {"interval", required_argument, NULL, 'i'},
                                         {"once", no_argument, NULL, '1'},
                                         {"top", required_argument, NULL, 'n'},
                                         {"no-bars", no_argument, NULL, 'N'},
                                         {NULL, 0, NULL, 0}};
    bool no_bars = false;
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "i:1n:", opts, NULL)) != -1) {
        if (c == 'i')
            rc = top_interval_opt(optarg, o);
        else if (c == '1')
            o->once = true, rc = CLI_CONTINUE;
        else if (c == 'n')
            rc = top_top_opt(optarg, o);
        else if (c == 'N')
            no_bars = true, rc = CLI_CONTINUE;
        else
            rc = cli_common_opt(ctx, c, argv);
        if (rc != CLI_CONTINUE)
            return rc;
    }
    cli_bars_set(no_bars, ctx->json);
    if (ctx->json && !o->once) {
        cli_error("top: --json needs --once");
        return CLI_EXIT_USAGE;
    }
    if (!o->once && o->interval < 0.1) {
        cli_error("top: --interval wants at least 0.1 s for the live view");
        return CLI_EXIT_USAGE;
    }
    if (!o->once && !isatty(STDOUT_FILENO)) {
        cli_error("top: the live view needs a terminal (use --once)");
        return CLI_EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

int cli_top_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct top_opts o = {.interval = 1.0};
    struct proto_request req;
    char *arg;
    int rc;

    if ((rc = top_opts(ctx, argc, argv, &o)) != CLI_CONTINUE)
        return rc;
    proto_request_init(&req);
    if (optind < argc) {
        if ((rc = cli_one_operand(ctx, argc, argv, "session id or name", &arg)) != CLI_CONTINUE ||
            (rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
            return rc;
    } else if ((rc = top_newest_live(ctx, &req.session.id)) != CLI_EXIT_OK) {
        return rc;
    }
    return o.once ? top_once(ctx, &req, &o) : top_loop(ctx, &req, &o);
}
