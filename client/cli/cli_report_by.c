/*
 * cli_report_by — `tracectl report --by launcher` and `--by module` (see
 * cli_report_by.h).
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
#include "cli_report.h"
#include "cli_view.h"
#include "util.h"

#define BY_NCOLS(a) UTIL_ARRAY_LEN(a)
#define BY_INDENT   "  "
/* --by module: the leaf key of entries without a parent; regions followed up from an entry */
#define MOD_NONE      (1ull << 63)
#define MOD_MAX_DEPTH 256

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
    const struct proto_analysis *f;     /* the report filters: the entries counted */
    msgpack_sbuffer out;                /* the result map, packed at the end */
};

static uint64_t by_add(uint64_t a, uint64_t b)
{
    return util_sat_add(a, b);
}

/* ---- the report filters ------------------------------------------------------ */

/* The category an op counts in: the export dictionary says none as "". */
static enum proto_cat by_cat_code(const char *c)
{
    return proto_cat_code(c != NULL && c[0] == '\0' ? NULL : c);
}

static bool by_filtered(const struct proto_analysis *f)
{
    return f->n_ranks > 0 || f->steps || f->device != NULL || f->category != NULL;
}

/* Whether entry r matches every filter of f, as the report's filters match entries. */
static bool by_match(const struct proto_analysis *f, const struct cli_export_row *r)
{
    bool rank = f->n_ranks == 0;

    for (uint32_t i = 0; !rank && i < f->n_ranks; i++)
        rank = r->proc->has_rank && r->proc->rank == f->ranks[i];
    return rank && (!f->steps || (r->step >= f->step_min && r->step <= f->step_max)) &&
           (f->device == NULL || (r->dev != NULL && strcmp(r->dev->name, f->device) == 0)) &&
           (f->category == NULL || by_cat_code(r->op->category) == by_cat_code(f->category));
}

/* The "filter" key and map, as the report's (the category as applied); nothing without one. */
static void by_pack_filter(msgpack_packer *pk, const struct proto_analysis *f)
{
    if (!by_filtered(f))
        return;
    proto_pack_str(pk, "filter");
    msgpack_pack_map(pk, (f->n_ranks > 0) + f->steps + (f->device != NULL) + (f->category != NULL));
    if (f->n_ranks > 0) {
        proto_pack_str(pk, "ranks");
        msgpack_pack_array(pk, f->n_ranks);
        for (uint32_t i = 0; i < f->n_ranks; i++)
            msgpack_pack_int64(pk, f->ranks[i]);
    }
    if (f->steps) {
        proto_pack_str(pk, "steps");
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, f->step_min);
        msgpack_pack_uint64(pk, f->step_max);
    }
    if (f->device != NULL) {
        proto_pack_str(pk, "device");
        proto_pack_str(pk, f->device);
    }
    if (f->category != NULL) {
        proto_pack_str(pk, "category");
        proto_pack_str(pk, proto_cat_name(by_cat_code(f->category)));
    }
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
    uint64_t *i;

    if (!by_match(s->f, r))
        return 0;
    if ((i = pairmap_upsert(&s->idx, launcher, r->op_index, &created)) == NULL)
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
    if (s->n > 0) /* none: a filter no entry matches, or an empty session (pairs NULL) */
        qsort(s->pairs, s->n, sizeof(*s->pairs), by_cmp);
    if ((n = by_launchers(s, &l)) < 0)
        return (int)n;
    msgpack_packer_init(&pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5 + by_filtered(s->f));
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
    by_pack_filter(&pk, s->f);
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

/* A list cut to its first top rows. */
static msgpack_object by_cut(const msgpack_object *list, uint32_t top)
{
    msgpack_object cut = *list;

    if (cut.via.array.size > top)
        cut.via.array.size = top;
    return cut;
}

/* Both reports' head: the filter line, then the session and its total. Returns the filter
 * line's error, printing nothing more. */
static int by_print_head(const msgpack_object *res)
{
    const msgpack_object *session = cli_obj_get(res, "session");
    char id[32], name[300], total[CLI_FMT_LEN];
    int rc;

    cli_obj_text(cli_obj_get(session, "id"), id, sizeof(id));
    cli_obj_text(cli_obj_get(session, "name"), name, sizeof(name));
    cli_view_format(cli_obj_get(res, "total_ns"), CLI_VIEW_DURATION, total, sizeof(total));
    if ((rc = cli_report_filter(stdout, res)) != 0)
        return rc;
    printf("session  %s (%s)\ntotal    %s\n", id, name, total);
    return 0;
}

/* The two tables; the pairs cut to the first `top`. */
static int by_print(const msgpack_object *res, uint32_t top)
{
    const msgpack_object *pairs = cli_obj_get(res, "pairs");
    msgpack_object cut;
    int rc;

    if ((rc = by_print_head(res)) != 0)
        return rc;
    printf("\nTime by launching CPU op (- : none)\n");
    rc = cli_view_table(stdout, BY_INDENT, by_launcher_cols, BY_NCOLS(by_launcher_cols),
                        cli_obj_get(res, "launchers"));
    if (rc != 0 || pairs == NULL || pairs->type != MSGPACK_OBJECT_ARRAY)
        return rc;
    cut = by_cut(pairs, top);
    printf("\nBy launcher and op (first %u of %u)\n", cut.via.array.size, pairs->via.array.size);
    return cli_view_table(stdout, BY_INDENT, by_pair_cols, BY_NCOLS(by_pair_cols), &cut);
}

/* Streams session through fmt and prints the map it packed into *out with print. */
static int by_run(struct cli_ctx *ctx, char *session, const struct cli_export_format *fmt,
                  void *state, msgpack_sbuffer *out, int (*print)(const msgpack_object *, uint32_t),
                  uint32_t top)
{
    msgpack_unpacked u;
    int rc;

    rc = cli_export_each(ctx, session, fmt, state);
    if (rc == CLI_EXIT_OK) {
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, out->data, out->size, NULL) != MSGPACK_UNPACK_SUCCESS) {
            cli_error("report: out of memory");
            rc = CLI_EXIT_ERROR;
        } else {
            rc = ctx->json ? cli_print_json(&u.data) : cli_print_status(print(&u.data, top));
        }
        msgpack_unpacked_destroy(&u);
    }
    return rc;
}

int cli_report_by_launcher(struct cli_ctx *ctx, char *session, uint32_t top,
                           const struct proto_analysis *f)
{
    struct by_state s = {.f = f};
    int rc;

    msgpack_sbuffer_init(&s.out);
    rc = by_run(ctx, session, &by_launcher_format, &s, &s.out, by_print, top);
    msgpack_sbuffer_destroy(&s.out);
    return rc;
}

/* ---- --by module ---------------------------------------------------------- */

/*
 * A region: an entry with an `id`. Its own duration is not counted (the
 * entries inside it are); its name groups them.
 */
struct mod_region {
    size_t op;
    bool has_parent;
    bool counted; /* it matches the filters: one of its module's calls */
    uint64_t proc, parent;
};

/* The entries of one op with one parent id in one process (or with none). */
struct mod_leaf {
    uint64_t proc, parent;
    size_t op;
    bool has_parent;
    uint64_t calls, ns;
};

/* One row of the result: a module (op index; n_ops: none), or a (module, op) pair. */
struct mod_row {
    size_t mod, op;
    uint64_t calls, entries, self_ns, total_ns;
};

struct mod_state {
    struct pairmap regions; /* (process, id) → index into region */
    struct pairmap leaves;  /* (process << 32 | op, parent) → index into leaf (MOD_NONE: none) */
    struct mod_region *region;
    struct mod_leaf *leaf;
    size_t n_region, cap_region, n_leaf, cap_leaf;
    uint64_t total_ns;
    const struct cli_export_dict *dict;
    const struct proto_analysis *f; /* the report filters: the entries counted */
    msgpack_sbuffer out;
};

/* Makes room for one more element of size sz in *a (n used of *cap). 0 or -ENOMEM. */
static int mod_grow(void **a, size_t *cap, size_t n, size_t sz)
{
    size_t c = *cap ? 2 * *cap : 64;
    void *p;

    if (n < *cap)
        return 0;
    if ((p = realloc(*a, c * sz)) == NULL)
        return -ENOMEM;
    *a = p;
    *cap = c;
    return 0;
}

static int mod_begin(struct cli_export *x)
{
    struct mod_state *s = x->arg;

    pairmap_init(&s->regions);
    pairmap_init(&s->leaves);
    s->dict = &x->dict;
    x->state = s;
    return 0;
}

static int mod_row_in(struct cli_export *x, const struct cli_export_row *r)
{
    struct mod_state *s = x->state;
    bool created;
    uint64_t *i;

    if (r->op_index > UINT32_MAX || r->proc_index > INT32_MAX)
        return -E2BIG;
    if (r->has_id) {
        if ((i = pairmap_upsert(&s->regions, r->proc_index, r->id, &created)) == NULL ||
            mod_grow((void **)&s->region, &s->cap_region, s->n_region, sizeof(*s->region)) < 0)
            return -ENOMEM;
        /* an id given twice in a process names the later entry */
        *i = s->n_region;
        s->region[s->n_region++] = (struct mod_region){.op = r->op_index,
                                                       .has_parent = r->has_parent,
                                                       .counted = by_match(s->f, r),
                                                       .proc = r->proc_index,
                                                       .parent = r->parent};
        return 0;
    }
    if (!by_match(s->f, r))
        return 0;
    i = pairmap_upsert(&s->leaves,
                       (uint64_t)r->proc_index << 32 | r->op_index | (r->has_parent ? 0 : MOD_NONE),
                       r->has_parent ? r->parent : 0, &created);
    if (i == NULL)
        return -ENOMEM;
    if (created) {
        if (mod_grow((void **)&s->leaf, &s->cap_leaf, s->n_leaf, sizeof(*s->leaf)) < 0)
            return -ENOMEM;
        *i = s->n_leaf;
        s->leaf[s->n_leaf++] = (struct mod_leaf){.proc = r->proc_index,
                                                 .parent = r->parent,
                                                 .op = r->op_index,
                                                 .has_parent = r->has_parent};
    }
    s->leaf[*i].calls++;
    s->leaf[*i].ns = by_add(s->leaf[*i].ns, r->dur_ns);
    s->total_ns = by_add(s->total_ns, r->dur_ns);
    return 0;
}

/* The region a leaf or region with that parent is in, or NULL. */
static const struct mod_region *mod_parent(const struct mod_state *s, uint64_t proc,
                                           bool has_parent, uint64_t parent)
{
    const uint64_t *i;

    if (!has_parent || (i = pairmap_get(&s->regions, proc, parent)) == NULL)
        return NULL;
    return &s->region[*i];
}

static const struct cli_export_dict *mod_sort_dict;

static const char *mod_name(const struct cli_export_dict *d, size_t mod)
{
    return mod < d->n_ops ? d->ops[mod].name : NULL;
}

/* By self time (pairs: time) descending, then module name (none last), then op name. */
static int mod_cmp(const void *a, const void *b)
{
    const struct mod_row *x = a, *y = b;
    const char *mx = mod_name(mod_sort_dict, x->mod), *my = mod_name(mod_sort_dict, y->mod);
    int c;

    if (x->self_ns != y->self_ns)
        return x->self_ns > y->self_ns ? -1 : 1;
    if (mx == NULL || my == NULL) {
        if ((c = (mx == NULL) - (my == NULL)) != 0)
            return c;
    } else if ((c = strcmp(mx, my)) != 0) {
        return c;
    }
    return strcmp(mod_sort_dict->ops[x->op].name, mod_sort_dict->ops[y->op].name);
}

/*
 * Sums the leaves per module (mods, n_ops + 1 of them, the last for none)
 * and per (module, op) pair (appended to *pairs). 0 or -ENOMEM.
 */
static int mod_sum(const struct mod_state *s, struct mod_row *mods, struct mod_row **pairs,
                   size_t *n_pairs)
{
    size_t none = s->dict->n_ops, cap = 0;
    struct pairmap idx;
    int rc = 0;

    for (size_t i = 0; i <= none; i++)
        mods[i] = (struct mod_row){.mod = i, .op = 0};
    for (size_t i = 0; i < s->n_region; i++)
        mods[s->region[i].op].calls += s->region[i].counted;
    pairmap_init(&idx);
    for (size_t i = 0; i < s->n_leaf && rc == 0; i++) {
        const struct mod_leaf *l = &s->leaf[i];
        const struct mod_region *in = mod_parent(s, l->proc, l->has_parent, l->parent);
        size_t mod = in != NULL ? in->op : none, seen[MOD_MAX_DEPTH], n_seen = 0, depth = 0;
        bool created;
        uint64_t *j;

        mods[mod].entries += l->calls;
        mods[mod].self_ns = by_add(mods[mod].self_ns, l->ns);
        if (in == NULL)
            mods[none].total_ns = by_add(mods[none].total_ns, l->ns);
        /* every module around it, once per name (a loop of parents is cut at the depth) */
        for (const struct mod_region *p = in; p != NULL && depth < MOD_MAX_DEPTH;
             p = mod_parent(s, p->proc, p->has_parent, p->parent), depth++) {
            size_t k = 0;
            while (k < n_seen && seen[k] != p->op)
                k++;
            if (k < n_seen)
                continue;
            seen[n_seen++] = p->op;
            mods[p->op].total_ns = by_add(mods[p->op].total_ns, l->ns);
        }
        if ((j = pairmap_upsert(&idx, mod, l->op, &created)) == NULL) {
            rc = -ENOMEM;
        } else if (created) {
            if (mod_grow((void **)pairs, &cap, *n_pairs, sizeof(**pairs)) < 0) {
                rc = -ENOMEM;
                break;
            }
            *j = (*n_pairs)++;
            (*pairs)[*j] = (struct mod_row){.mod = mod, .op = l->op};
        }
        if (rc == 0) {
            (*pairs)[*j].calls += l->calls;
            (*pairs)[*j].self_ns = by_add((*pairs)[*j].self_ns, l->ns);
        }
    }
    pairmap_deinit(&idx);
    return rc;
}

static void mod_pack_row(const struct mod_state *s, msgpack_packer *pk, const struct mod_row *r,
                         bool pair)
{
    msgpack_pack_map(pk, pair ? 5 : 6);
    by_pack_str(pk, "module", mod_name(s->dict, r->mod));
    if (pair) {
        by_pack_str(pk, "op", s->dict->ops[r->op].name);
        by_pack_u64(pk, "calls", r->calls);
        by_pack_u64(pk, "total_ns", r->self_ns);
    } else {
        by_pack_u64(pk, "calls", r->calls);
        by_pack_u64(pk, "entries", r->entries);
        by_pack_u64(pk, "self_ns", r->self_ns);
        by_pack_u64(pk, "total_ns", r->total_ns);
    }
    proto_pack_str(pk, "share");
    msgpack_pack_double(pk, s->total_ns ? (double)r->self_ns / (double)s->total_ns : 0.0);
}

static int mod_end(struct cli_export *x)
{
    struct mod_state *s = x->state;
    size_t n_ops = x->dict.n_ops, n_mods = 0, n_pairs = 0;
    struct mod_row *mods = calloc(n_ops + 1, sizeof(*mods)), *pairs = NULL;
    msgpack_packer pk;
    int rc;

    if (mods == NULL)
        return -ENOMEM;
    if ((rc = mod_sum(s, mods, &pairs, &n_pairs)) != 0) {
        free(mods);
        free(pairs);
        return rc;
    }
    for (size_t i = 0; i <= n_ops; i++) /* the modules, and none when something is outside */
        if (mods[i].calls > 0 || mods[i].entries > 0)
            mods[n_mods++] = mods[i];
    mod_sort_dict = &x->dict;
    qsort(mods, n_mods, sizeof(*mods), mod_cmp);
    if (n_pairs > 0) /* pairs NULL without one */
        qsort(pairs, n_pairs, sizeof(*pairs), mod_cmp);
    msgpack_packer_init(&pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5 + by_filtered(s->f));
    proto_pack_str(&pk, "session");
    msgpack_pack_map(&pk, 2);
    proto_pack_str(&pk, "id");
    msgpack_pack_int64(&pk, x->dict.session_id);
    by_pack_str(&pk, "name", x->dict.session_name);
    by_pack_str(&pk, "by", "module");
    by_pack_u64(&pk, "total_ns", s->total_ns);
    proto_pack_str(&pk, "modules");
    msgpack_pack_array(&pk, n_mods);
    for (size_t i = 0; i < n_mods; i++)
        mod_pack_row(s, &pk, &mods[i], false);
    proto_pack_str(&pk, "pairs");
    msgpack_pack_array(&pk, n_pairs);
    for (size_t i = 0; i < n_pairs; i++)
        mod_pack_row(s, &pk, &pairs[i], true);
    by_pack_filter(&pk, s->f);
    free(mods);
    free(pairs);
    return 0;
}

static void mod_free(struct cli_export *x)
{
    struct mod_state *s = x->arg;

    pairmap_deinit(&s->regions);
    pairmap_deinit(&s->leaves);
    free(s->region);
    free(s->leaf);
    s->region = NULL;
    s->leaf = NULL;
    x->state = NULL;
}

static const struct cli_export_format by_module_format = {
    .name = "by module",
    .begin = mod_begin,
    .row = mod_row_in,
    .end = mod_end,
    .free = mod_free,
};

static const struct cli_view_col by_module_cols[] = {
    {"MODULE", "module", CLI_VIEW_TEXT, 40, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"ENTRIES", "entries", CLI_VIEW_COUNT, 0, NULL},
    {"SELF", "self_ns", CLI_VIEW_DURATION, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
};

static const struct cli_view_col by_module_pair_cols[] = {
    {"MODULE", "module", CLI_VIEW_TEXT, 32, NULL},
    {"OP", "op", CLI_VIEW_TEXT, 40, NULL},
    {"CALLS", "calls", CLI_VIEW_COUNT, 0, NULL},
    {"TOTAL", "total_ns", CLI_VIEW_DURATION, 0, NULL},
    {"SHARE", "share", CLI_VIEW_SHARE, 0, NULL},
};

static int mod_print(const msgpack_object *res, uint32_t top)
{
    const msgpack_object *mods = cli_obj_get(res, "modules"), *pairs = cli_obj_get(res, "pairs");
    msgpack_object cut;
    int rc;

    if (mods == NULL || mods->type != MSGPACK_OBJECT_ARRAY || pairs == NULL ||
        pairs->type != MSGPACK_OBJECT_ARRAY)
        return -EPROTO;
    if ((rc = by_print_head(res)) != 0)
        return rc;
    cut = by_cut(mods, top);
    printf("\nTime by enclosing module (- : none; first %u of %u)\n", cut.via.array.size,
           mods->via.array.size);
    rc = cli_view_table(stdout, BY_INDENT, by_module_cols, BY_NCOLS(by_module_cols), &cut);
    if (rc != 0)
        return rc;
    cut = by_cut(pairs, top);
    printf("\nBy module and op (first %u of %u)\n", cut.via.array.size, pairs->via.array.size);
    return cli_view_table(stdout, BY_INDENT, by_module_pair_cols, BY_NCOLS(by_module_pair_cols),
                          &cut);
}

int cli_report_by_module(struct cli_ctx *ctx, char *session, uint32_t top,
                         const struct proto_analysis *f)
{
    struct mod_state s = {.f = f};
    int rc;

    msgpack_sbuffer_init(&s.out);
    rc = by_run(ctx, session, &by_module_format, &s, &s.out, mod_print, top);
    msgpack_sbuffer_destroy(&s.out);
    return rc;
}
