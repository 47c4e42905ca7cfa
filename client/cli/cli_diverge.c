/*
 * cli_diverge — `tracectl diff --divergence` (see cli_diverge.h).
 */
#include "cli_diverge.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_diff.h"
#include "cli_export_dict.h"
#include "cli_obj.h"
#include "cli_table.h"
#include "util.h"

#define CLI_DIVERGE_NCOLS(a) UTIL_ARRAY_LEN(a)

/* One session's export stream, read one row at a time. */
struct cli_diverge_stream {
    struct cli_conn conn;
    struct cli_export_dict dict;
    const msgpack_object *rows; /* the current ["rows", [...]] chunk, borrowed from conn */
    uint32_t next;              /* the next row of it */
    uint64_t count;             /* rows read */
    bool end;
    struct cli_export_row cur; /* the current row, when !end */
};

enum cli_diverge_kind {
    CLI_DIVERGE_OP,       /* another op at that position */
    CLI_DIVERGE_CHECKSUM, /* the same op, other output checksums */
    CLI_DIVERGE_LENGTH,   /* one rank's sequence ended (or the rank is missing) */
};

static const char *const cli_diverge_kinds[] = {"op", "checksum", "length"};

/* Where one rank's sequences part. Op names point into the dictionaries. */
struct cli_diverge_point {
    bool has_rank;
    int64_t rank;
    uint64_t position;
    enum cli_diverge_kind kind;
    bool in[2];           /* A, B have an entry at that position */
    uint64_t step[2];     /* when in[] */
    const char *op[2];    /* when in[] */
    bool has_checksum[2]; /* when in[] */
    uint64_t checksum[2];
};

struct cli_diverge {
    struct cli_diverge_stream s[2];
    struct cli_diverge_point *points; /* one per diverging rank, in rank order */
    size_t n_points, cap_points;
    uint64_t ranks, positions, checksums, one_sided;
};

/* ---- the streams ------------------------------------------------------------ */

static void cli_diverge_sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

/* ["error", {code, message}] in the middle of a stream: the usual exit codes. */
static int cli_diverge_daemon_error(const msgpack_object *map)
{
    char code[64], message[512];

    cli_obj_text(cli_obj_get(map, "code"), code, sizeof(code));
    cli_obj_text(cli_obj_get(map, "message"), message, sizeof(message));
    cli_diverge_sanitize(code);
    cli_diverge_sanitize(message);
    cli_error("the daemon refused the request: %s: %s", code, message);
    return strcmp(code, PROTO_E_NO_SESSION) == 0 ? CLI_EXIT_NO_SESSION : CLI_EXIT_REFUSED;
}

static int cli_diverge_failure(int rc, const char *msg)
{
    if (rc == -EPROTO)
        cli_error("bad reply from the daemon: %s", msg[0] ? msg : "malformed export stream");
    else if (rc == -ECONNRESET)
        cli_error("the daemon closed the connection before the end of the stream");
    else
        cli_error("diff: %s", strerror(-rc));
    return CLI_EXIT_ERROR;
}

/* Moves s to its next row (or its end). Returns CLI_EXIT_OK or an exit code (printed). */
static int cli_diverge_advance(struct cli_diverge_stream *s)
{
    char msg[256] = "";
    const msgpack_object *o, *a;
    uint64_t announced;
    int rc;

    while (s->rows == NULL || s->next >= s->rows->via.array.size) {
        if ((rc = cli_conn_next(&s->conn, &o, msg, sizeof(msg))) != 0)
            return cli_diverge_failure(rc, msg);
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
            return cli_diverge_failure(-EPROTO, "a message that is not [type, payload]");
        a = o->via.array.ptr;
        if (cli_obj_str_eq(&a[0], "error"))
            return cli_diverge_daemon_error(&a[1]);
        if (cli_obj_str_eq(&a[0], "end")) {
            if (cli_obj_u64(cli_obj_get(&a[1], "rows"), &announced) != 0 || announced != s->count)
                return cli_diverge_failure(-EPROTO, "the end of the stream counts other rows");
            s->end = true;
            s->rows = NULL;
            return CLI_EXIT_OK;
        }
        if (!cli_obj_str_eq(&a[0], "rows") || a[1].type != MSGPACK_OBJECT_ARRAY)
            return cli_diverge_failure(-EPROTO, "an unexpected message in the stream");
        s->rows = &a[1];
        s->next = 0;
    }
    rc = cli_export_row_decode(&s->dict, &s->rows->via.array.ptr[s->next++], &s->cur, msg,
                               sizeof(msg));
    if (rc != 0)
        return cli_diverge_failure(rc, msg);
    s->count++;
    return CLI_EXIT_OK;
}

/*
 * Asks for the session named by arg by rank and reads its header; the daemon
 * then starts sorting it, so both sessions are opened before either is read.
 * Returns an exit code.
 */
static int cli_diverge_open(struct cli_ctx *ctx, char *arg, struct cli_diverge_stream *s)
{
    struct proto_request req;
    const msgpack_object *header;
    char msg[256] = "";
    int rc;

    proto_request_init(&req);
    req.by_rank = true;
    if ((rc = cli_session_ref(ctx, arg, &req.session)) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_call(ctx, PROTO_EXPORT, &req, &s->conn, &header)) != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_export_dict_init(&s->dict, header, msg, sizeof(msg))) != 0) {
        cli_conn_close(&s->conn);
        return cli_diverge_failure(rc, msg);
    }
    return CLI_EXIT_OK;
}

static void cli_diverge_close(struct cli_diverge_stream *s)
{
    cli_export_dict_deinit(&s->dict);
    cli_conn_close(&s->conn);
}

/* ---- the walk --------------------------------------------------------------- */

/* The current row's rank as a sort key: processes without a rank first, as the daemon sorts. */
static bool cli_diverge_key(const struct cli_diverge_stream *s, int64_t *key)
{
    if (s->end)
        return false;
    *key = s->cur.proc->has_rank ? s->cur.proc->rank : INT64_MIN;
    return true;
}

/* Notes rank key's divergence at position pos, from the sides that have an entry there. */
static int cli_diverge_note(struct cli_diverge *d, int64_t key, uint64_t pos,
                            enum cli_diverge_kind kind, bool in_a, bool in_b)
{
    struct cli_diverge_point *p;
    bool in[2] = {in_a, in_b};

    if (d->n_points == d->cap_points) {
        size_t cap = d->cap_points ? 2 * d->cap_points : 16;

        if ((p = realloc(d->points, cap * sizeof(*p))) == NULL)
            return -ENOMEM;
        d->points = p;
        d->cap_points = cap;
    }
    p = &d->points[d->n_points++];
    memset(p, 0, sizeof(*p));
    p->has_rank = key != INT64_MIN;
    p->rank = key;
    p->position = pos;
    p->kind = kind;
    for (int i = 0; i < 2; i++) {
        const struct cli_export_row *r = &d->s[i].cur;

        if ((p->in[i] = in[i])) {
            p->step[i] = r->step;
            p->op[i] = r->op->name;
            p->has_checksum[i] = r->has_checksum;
            p->checksum[i] = r->checksum;
        }
    }
    return 0;
}

/*
 * Compares the current rows of both streams (same rank, same position).
 * Returns 1 when they differ (noted), 0 when they match, or -ENOMEM.
 */
static int cli_diverge_compare(struct cli_diverge *d, int64_t key, uint64_t pos)
{
    const struct cli_export_row *a = &d->s[0].cur, *b = &d->s[1].cur;
    enum cli_diverge_kind kind;

    d->positions++;
    if (strcmp(a->op->name, b->op->name) != 0) {
        kind = CLI_DIVERGE_OP;
    } else if (a->has_checksum && b->has_checksum) {
        d->checksums++;
        if (a->checksum == b->checksum)
            return 0;
        kind = CLI_DIVERGE_CHECKSUM;
    } else {
        d->one_sided += a->has_checksum != b->has_checksum;
        return 0;
    }
    return cli_diverge_note(d, key, pos, kind, true, true) == 0 ? 1 : -ENOMEM;
}

/*
 * Walks both streams to their ends, rank by rank. Returns an exit code.
 * Within a rank, pos counts the positions both sides went through; once the
 * rank diverged, the rest of it is read past.
 */
static int cli_diverge_walk(struct cli_diverge *d)
{
    int64_t ka, kb, rank = 0;
    bool has_a, has_b, started = false, diverged = false;
    uint64_t pos = 0;
    int rc = CLI_EXIT_OK;

    for (;;) {
        has_a = cli_diverge_key(&d->s[0], &ka);
        has_b = cli_diverge_key(&d->s[1], &kb);
        if (!has_a && !has_b)
            return CLI_EXIT_OK;
        /* the side(s) whose rank comes first move; both when it is the same */
        bool move_a = has_a && (!has_b || ka <= kb), move_b = has_b && (!has_a || kb <= ka);
        int64_t key = move_a ? ka : kb;

        if (!started || key != rank) {
            started = true;
            rank = key;
            pos = 0;
            diverged = false;
            d->ranks++;
        }
        if (!diverged) {
            if (move_a && move_b)
                rc = cli_diverge_compare(d, key, pos);
            else if ((rc = cli_diverge_note(d, key, pos, CLI_DIVERGE_LENGTH, move_a, move_b)) == 0)
                rc = 1;
            if (rc < 0)
                return cli_diverge_failure(rc, "");
            diverged = rc == 1;
        }
        pos++;
        if (move_a && (rc = cli_diverge_advance(&d->s[0])) != CLI_EXIT_OK)
            return rc;
        if (move_b && (rc = cli_diverge_advance(&d->s[1])) != CLI_EXIT_OK)
            return rc;
    }
}

/* The step of a divergence: A's entry's, else B's. */
static uint64_t cli_diverge_step(const struct cli_diverge_point *p)
{
    return p->in[0] ? p->step[0] : p->step[1];
}

/* The first divergence: lowest step, then rank (points are in rank order), then position. */
static const struct cli_diverge_point *cli_diverge_first(const struct cli_diverge *d)
{
    const struct cli_diverge_point *best = NULL;

    for (size_t i = 0; i < d->n_points; i++)
        if (best == NULL || cli_diverge_step(&d->points[i]) < cli_diverge_step(best))
            best = &d->points[i];
    return best;
}

/* ---- the result ------------------------------------------------------------- */

static void cli_diverge_pack_opt_u64(msgpack_packer *pk, bool present, uint64_t v)
{
    if (present)
        msgpack_pack_uint64(pk, v);
    else
        msgpack_pack_nil(pk);
}

static void cli_diverge_pack_point(msgpack_packer *pk, const struct cli_diverge_point *p)
{
    static const char *const side[2] = {"a", "b"};
    char key[16];

    msgpack_pack_map(pk, 5 + 3 * 2);
    proto_pack_str(pk, "rank");
    if (p->has_rank)
        msgpack_pack_int64(pk, p->rank);
    else
        msgpack_pack_nil(pk);
    proto_pack_str(pk, "step");
    msgpack_pack_uint64(pk, cli_diverge_step(p));
    proto_pack_str(pk, "position");
    msgpack_pack_uint64(pk, p->position);
    proto_pack_str(pk, "op"); /* A's op, else B's */
    proto_pack_str(pk, p->op[p->in[0] ? 0 : 1]);
    proto_pack_str(pk, "kind");
    proto_pack_str(pk, cli_diverge_kinds[p->kind]);
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof(key), "op_%s", side[i]);
        proto_pack_str(pk, key);
        if (p->in[i])
            proto_pack_str(pk, p->op[i]);
        else
            msgpack_pack_nil(pk);
        snprintf(key, sizeof(key), "step_%s", side[i]);
        proto_pack_str(pk, key);
        cli_diverge_pack_opt_u64(pk, p->in[i], p->step[i]);
        snprintf(key, sizeof(key), "checksum_%s", side[i]);
        proto_pack_str(pk, key);
        cli_diverge_pack_opt_u64(pk, p->in[i] && p->has_checksum[i], p->checksum[i]);
    }
}

static void cli_diverge_pack_session(msgpack_packer *pk, const struct cli_diverge_stream *s)
{
    msgpack_pack_map(pk, 4);
    proto_pack_str(pk, "id");
    msgpack_pack_int64(pk, s->dict.session_id);
    proto_pack_str(pk, "name");
    proto_pack_str(pk, s->dict.session_name ? s->dict.session_name : "");
    proto_pack_str(pk, "entries");
    msgpack_pack_uint64(pk, s->count);
    proto_pack_str(pk, "processes");
    msgpack_pack_uint64(pk, s->dict.n_procs);
}

static void cli_diverge_pack(msgpack_packer *pk, const struct cli_diverge *d)
{
    const struct cli_diverge_point *first = cli_diverge_first(d);

    msgpack_pack_map(pk, 6);
    proto_pack_str(pk, "a");
    cli_diverge_pack_session(pk, &d->s[0]);
    proto_pack_str(pk, "b");
    cli_diverge_pack_session(pk, &d->s[1]);
    proto_pack_str(pk, "diverged");
    if (first != NULL)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    proto_pack_str(pk, "compared");
    msgpack_pack_map(pk, 4);
    proto_pack_str(pk, "ranks");
    msgpack_pack_uint64(pk, d->ranks);
    proto_pack_str(pk, "positions");
    msgpack_pack_uint64(pk, d->positions);
    proto_pack_str(pk, "checksums");
    msgpack_pack_uint64(pk, d->checksums);
    proto_pack_str(pk, "checksum_one_side");
    msgpack_pack_uint64(pk, d->one_sided);
    proto_pack_str(pk, "first");
    if (first != NULL)
        cli_diverge_pack_point(pk, first);
    else
        msgpack_pack_nil(pk);
    proto_pack_str(pk, "ranks");
    msgpack_pack_array(pk, (uint32_t)d->n_points);
    for (size_t i = 0; i < d->n_points; i++)
        cli_diverge_pack_point(pk, &d->points[i]);
}

/* ---- human output ------------------------------------------------------------- */

/* "op" of side i at a divergence: "matmul", "matmul #0123456789abcdef", or "(none)". */
static void cli_diverge_entry_text(const struct cli_diverge_point *p, int i, char *buf, size_t size)
{
    if (!p->in[i])
        snprintf(buf, size, "(its sequence ends)");
    else if (p->has_checksum[i])
        snprintf(buf, size, "%s, checksum %016" PRIx64, p->op[i], p->checksum[i]);
    else
        snprintf(buf, size, "%s", p->op[i]);
}

static void cli_diverge_rank_text(const struct cli_diverge_point *p, char *buf, size_t size)
{
    if (p->has_rank)
        snprintf(buf, size, "%" PRId64, p->rank);
    else
        snprintf(buf, size, "-");
}

static int cli_diverge_print(FILE *f, const struct cli_diverge *d)
{
    static const struct cli_table_col cols[] = {
        {"RANK", true, 0},  {"STEP", true, 0}, {"POSITION", true, 0},
        {"KIND", false, 0}, {"A", false, 64},  {"B", false, 64},
    };
    const struct cli_diverge_point *first = cli_diverge_first(d);
    struct cli_table *t;
    char a[1200], b[1200], line[2600], rank[32], num[2][32];
    int rc = 0;

    for (int i = 0; i < 2 && rc == 0; i++) {
        snprintf(a, sizeof(a), "%s  session %" PRId64 " (%s): %" PRIu64 " entries, %zu processes",
                 i ? "B" : "A", d->s[i].dict.session_id, d->s[i].dict.session_name, d->s[i].count,
                 d->s[i].dict.n_procs);
        rc = cli_diff_print_line(f, a); /* names off the wire: sanitized */
    }
    if (rc != 0)
        return rc;
    fprintf(f,
            "compared %" PRIu64 " positions on %" PRIu64 " ranks, %" PRIu64
            " checksum pairs (%" PRIu64 " entries had a checksum on one side only)\n\n",
            d->positions, d->ranks, d->checksums, d->one_sided);
    if (first == NULL) {
        fputs("No divergence: every rank ran the same ops in the same order, with equal "
              "checksums\n",
              f);
        return ferror(f) ? -EIO : 0;
    }
    cli_diverge_rank_text(first, rank, sizeof(rank));
    cli_diverge_entry_text(first, 0, a, sizeof(a));
    cli_diverge_entry_text(first, 1, b, sizeof(b));
    snprintf(line, sizeof(line),
             "Diverged at step %" PRIu64 ", rank %s, position %" PRIu64 " (%s): A %s; B %s",
             cli_diverge_step(first), rank, first->position, cli_diverge_kinds[first->kind], a, b);
    if ((rc = cli_diff_print_line(f, line)) != 0)
        return rc;
    fputs("\nRanks that diverge (the first place of each)\n", f);
    if ((t = cli_table_new(cols, CLI_DIVERGE_NCOLS(cols))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < d->n_points && rc == 0; i++) {
        const struct cli_diverge_point *p = &d->points[i];

        cli_diverge_rank_text(p, rank, sizeof(rank));
        snprintf(num[0], sizeof(num[0]), "%" PRIu64, cli_diverge_step(p));
        snprintf(num[1], sizeof(num[1]), "%" PRIu64, p->position);
        cli_diverge_entry_text(p, 0, a, sizeof(a));
        cli_diverge_entry_text(p, 1, b, sizeof(b));
        rc = cli_table_add(t, rank) | cli_table_add(t, num[0]) | cli_table_add(t, num[1]) |
             cli_table_add(t, cli_diverge_kinds[p->kind]) | cli_table_add(t, a) |
             cli_table_add(t, b);
    }
    if (rc == 0)
        rc = cli_table_print(t, f, "  ");
    cli_table_free(t);
    return rc != 0 && rc != -EIO ? -ENOMEM : rc;
}

/* ---- the command ------------------------------------------------------------ */

static int cli_diverge_output(const struct cli_ctx *ctx, const struct cli_diverge *d)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    if (!ctx->json)
        return cli_print_status(cli_diverge_print(stdout, d));
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cli_diverge_pack(&pk, d);
    rc = cli_print_json_packed(&sb, "diff");
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int cli_diverge_run(struct cli_ctx *ctx, char **args)
{
    struct cli_diverge d;
    int rc;

    memset(&d, 0, sizeof(d));
    if ((rc = cli_diverge_open(ctx, args[0], &d.s[0])) != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_diverge_open(ctx, args[1], &d.s[1])) != CLI_EXIT_OK) {
        cli_diverge_close(&d.s[0]);
        return rc;
    }
    if ((rc = cli_diverge_advance(&d.s[0])) == CLI_EXIT_OK &&
        (rc = cli_diverge_advance(&d.s[1])) == CLI_EXIT_OK)
        rc = cli_diverge_walk(&d);
    if (rc == CLI_EXIT_OK)
        rc = cli_diverge_output(ctx, &d);
    if (rc == CLI_EXIT_OK && d.n_points > 0)
        rc = CLI_EXIT_DIFFERS;
    free(d.points);
    cli_diverge_close(&d.s[1]);
    cli_diverge_close(&d.s[0]);
    return rc;
}
