/*
 * cli_report_by — `tracectl report --by launcher` (see cli_report_by.h).
 */
#include "cli_report_by.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_export.h"
#include "map.h"
#include "cli_fmt.h"
#include "cli_obj.h"
#include "cli_view.h"

#define BY_NCOLS(a) (sizeof(a) / sizeof((a)[0]))
#define BY_INDENT   "  "

/* One (launcher, op) pair, or one launcher (op unused). */
struct by_row {
    uint64_t launcher; /* dictionary index + 1; 0: no launcher */
    size_t op;
    uint64_t calls, total_ns, kernels;
};

struct by_state {
    struct pairmap idx; /* (launcher, op) → index into pairs */
    struct by_row *pairs;
    size_t n, cap;
    uint64_t total_ns;
    const struct cli_export_dict *dict; /* for sorting by name */
    msgpack_sbuffer out;                /* the result map, packed at the end */
};

static uint64_t by_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int by_begin(struct cli_export *x)
{
    struct by_state *s = x->arg;

    pairmap_init(&s->idx);
    s->dict = &x->dict;
    x->state = s;
    return 0;
}

static int by_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct by_state *s = x->state;
    uint64_t launcher = r->launcher ? r->launcher_index + 1 : 0;
    bool created;
    uint64_t *i = pairmap_upsert(&s->idx, launcher, r->op_index, &created);

    if (i == NULL)
        return -ENOMEM;
    if (created) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 64;
            void *p = realloc(s->pairs, cap * sizeof(*s->pairs));
            if (p == NULL)
                return -ENOMEM;
            s->pairs = p;
            s->cap = cap;
        }
        *i = s->n;
        s->pairs[s->n++] = (struct by_row){.launcher = launcher, .op = r->op_index};
    }
    s->pairs[*i].calls++;
    s->pairs[*i].total_ns = by_add(s->pairs[*i].total_ns, r->dur_ns);
    s->total_ns = by_add(s->total_ns, r->dur_ns);
    return 0;
}

/* The dictionary's name of a launcher (index + 1), or NULL for none. */
static const char *by_launcher_name(const struct cli_export_dict *d, uint64_t launcher)
{
    return launcher ? d->ops[launcher - 1].name : NULL;
}

static const struct cli_export_dict *by_sort_dict; /* qsort has no context argument */

/* By total descending, then launcher name (none last), then op name. */
static int by_cmp(const void *a, const void *b)
{
    const struct by_row *x = a, *y = b;
    const char *lx = by_launcher_name(by_sort_dict, x->launcher);
    const char *ly = by_launcher_name(by_sort_dict, y->launcher);
    int c;

    if (x->total_ns != y->total_ns)
        return x->total_ns > y->total_ns ? -1 : 1;
    if (lx == NULL || ly == NULL)
        return (lx == NULL) - (ly == NULL);
    if ((c = strcmp(lx, ly)) != 0)
        return c;
    return strcmp(by_sort_dict->ops[x->op].name, by_sort_dict->ops[y->op].name);
}

/* The pairs summed per launcher, sorted. Returns the count, or -ENOMEM. */
static long by_launchers(const struct by_state *s, struct by_row **out)
{
    struct pairmap idx;
    struct by_row *l = calloc(s->n ? s->n : 1, sizeof(*l));
    size_t n = 0;

    if (l == NULL)
        return -ENOMEM;
    pairmap_init(&idx);
    for (size_t i = 0; i < s->n; i++) {
        bool created;
        uint64_t *j = pairmap_upsert(&idx, s->pairs[i].launcher, 0, &created);
        if (j == NULL) {
            pairmap_deinit(&idx);
            free(l);
            return -ENOMEM;
        }
        if (created) {
            *j = n;
            l[n++] = (struct by_row){.launcher = s->pairs[i].launcher};
        }
        l[*j].calls += s->pairs[i].calls;
        l[*j].total_ns = by_add(l[*j].total_ns, s->pairs[i].total_ns);
        l[*j].kernels++;
    }
    pairmap_deinit(&idx);
    qsort(l, n, sizeof(*l), by_cmp);
    *out = l;
    return (long)n;
}

static void by_pack_str(msgpack_packer *pk, const char *key, const char *v)
{
    proto_pack_str(pk, key);
    if (v != NULL)
        proto_pack_str(pk, v);
    else
        msgpack_pack_nil(pk);
}

static void by_pack_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
    proto_pack_str(pk, key);
    msgpack_pack_uint64(pk, v);
}

static void by_pack_row(const struct by_state *s, msgpack_packer *pk, const struct by_row *r,
                        bool pair)
{
    msgpack_pack_map(pk, 5);
    by_pack_str(pk, "launcher", by_launcher_name(s->dict, r->launcher));
    if (pair)
        by_pack_str(pk, "op", s->dict->ops[r->op].name);
    else
        by_pack_u64(pk, "kernels", r->kernels);
    by_pack_u64(pk, "calls", r->calls);
    by_pack_u64(pk, "total_ns", r->total_ns);
    proto_pack_str(pk, "share");
    msgpack_pack_double(pk, s->total_ns ? (double)r->total_ns / (double)s->total_ns : 0.0);
}

static int by_end(struct cli_export *x)
{
    struct by_state *s = x->state;
    struct by_row *l = NULL;
    msgpack_packer pk;
    long n;

    by_sort_dict = &x->dict;
    qsort(s->pairs, s->n, sizeof(*s->pairs), by_cmp);
    if ((n = by_launchers(s, &l)) < 0)
        return (int)n;
    msgpack_packer_init(&pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    proto_pack_str(&pk, "session");
    msgpack_pack_map(&pk, 2);
    proto_pack_str(&pk, "id");
    msgpack_pack_int64(&pk, x->dict.session_id);
    by_pack_str(&pk, "name", x->dict.session_name);
    by_pack_str(&pk, "by", "launcher");
    by_pack_u64(&pk, "total_ns", s->total_ns);
    proto_pack_str(&pk, "launchers");
    msgpack_pack_array(&pk, (size_t)n);
    for (long i = 0; i < n; i++)
        by_pack_row(s, &pk, &l[i], false);
    proto_pack_str(&pk, "pairs");
    msgpack_pack_array(&pk, s->n);
    for (size_t i = 0; i < s->n; i++)
        by_pack_row(s, &pk, &s->pairs[i], true);
    free(l);
    return 0;
}

static void by_free(struct cli_export *x)
{
    struct by_state *s = x->arg;

    pairmap_deinit(&s->idx);
    free(s->pairs);
    s->pairs = NULL;
    x->state = NULL;
}

static const struct cli_export_format by_launcher_format = {
    .name = "by launcher",
    .begin = by_begin,
    .row = by_row,
    .end = by_end,
    .free = by_free,
};

static const struct cli_view_col by_launcher_cols[] = {
    {"LAUNCHER", "launcher", CLI_VIEW_TEXT, 40, NULL},
    {"KERNELS", "kernels", CLI_VIEW_COUNT, 0, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
};

static const struct cli_view_col by_pair_cols[] = {
    {"LAUNCHER", "launcher", CLI_VIEW_TEXT, 32, NULL},
    {"OP", "op", CLI_VIEW_TEXT, 40, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
};

/* The two tables; the pairs cut to the first `top`. */
static int by_print(const msgpack_object *res, uint32_t top)
{
    const msgpack_object *session = cli_obj_get(res, "session");
    const msgpack_object *pairs = cli_obj_get(res, "pairs");
    msgpack_object cut;
    char id[32], name[300], total[CLI_FMT_LEN];
    int rc;

    cli_obj_text(cli_obj_get(session, "id"), id, sizeof(id));
    cli_obj_text(cli_obj_get(session, "name"), name, sizeof(name));
    cli_view_format(cli_obj_get(res, "total_ns"), CLI_VIEW_DURATION, total, sizeof(total));
    printf("session  %s (%s)\ntotal    %s\n\nTime by launching CPU op (- : none)\n", id, name,
           total);
    rc = cli_view_table(stdout, BY_INDENT, by_launcher_cols, BY_NCOLS(by_launcher_cols),
                        cli_obj_get(res, "launchers"));
    if (rc != 0 || pairs == NULL || pairs->type != MSGPACK_OBJECT_ARRAY)
        return rc;
    cut = *pairs;
    if (cut.via.array.size > top)
        cut.via.array.size = top;
    printf("\nBy launcher and op (first %u of %u)\n", cut.via.array.size, pairs->via.array.size);
    return cli_view_table(stdout, BY_INDENT, by_pair_cols, BY_NCOLS(by_pair_cols), &cut);
}

int cli_report_by_launcher(struct cli_ctx *ctx, char *session, uint32_t top)
{
    struct by_state s = {0};
    msgpack_unpacked u;
    int rc;

    msgpack_sbuffer_init(&s.out);
    rc = cli_export_each(ctx, session, &by_launcher_format, &s);
    if (rc == CLI_EXIT_OK) {
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, s.out.data, s.out.size, NULL) != MSGPACK_UNPACK_SUCCESS) {
            cli_error("report: out of memory");
            rc = CLI_EXIT_ERROR;
        } else {
            rc = ctx->json ? cli_print_json(&u.data) : cli_print_status(by_print(&u.data, top));
        }
        msgpack_unpacked_destroy(&u);
    }
    msgpack_sbuffer_destroy(&s.out);
    return rc;
}
