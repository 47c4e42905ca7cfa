/*
 * cli_export_collapsed — flame-graph collapsed stacks (see
 * cli_export_collapsed.h).
 */
#include "cli_export_collapsed.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "util.h"

#define COLLAPSED_MAX_DEPTH 256 /* frames of nested regions followed up; deeper ones are cut */

struct cli_export_stack {
    char *text; /* "<session>;<device>;<op>", ... */
    uint64_t weight;
};

/* An entry with links (id or parent): kept until the end, when its stack is known. */
struct cli_export_node {
    size_t proc, op;
    uint32_t dev; /* device index, 0: none */
    bool has_parent;
    uint64_t parent, dur_ns, mem_bytes, child_ns;
};

struct cli_export_collapsed {
    struct pairmap flat; /* (device, op) or (process, launcher << 32 | op) → weight */
    struct pairmap ids;  /* (process, id) → node index */
    struct cli_export_node *nodes;
    size_t n_nodes, cap_nodes;
};

uint64_t cli_export_collapsed_time(uint64_t dur_ns)
{
    /* Rounds half up (durations are never negative) without dur_ns + 500 wrapping. */
    uint64_t us = dur_ns / 1000 + (dur_ns % 1000 >= 500);

    return us > 0 ? us : 1;
}

static uint64_t cli_export_collapsed_add(uint64_t a, uint64_t b)
{
    return util_sat_add(a, b);
}

static uint64_t cli_export_collapsed_weight(const struct cli_export *x, uint64_t dur_ns,
                                            uint64_t mem_bytes)
{
    if (x->weight == CLI_EXPORT_WEIGHT_TIME)
        return cli_export_collapsed_time(dur_ns);
    if (x->weight == CLI_EXPORT_WEIGHT_MEMORY)
        return mem_bytes;
    return 1;
}

static int cli_export_collapsed_begin(struct cli_export *x)
{
    struct cli_export_collapsed *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return -ENOMEM;
    pairmap_init(&m->flat);
    pairmap_init(&m->ids);
    x->state = m;
    return 0;
}

/* Keeps a linked row as a node (its stack is resolved at the end). */
static int cli_export_collapsed_node(struct cli_export_collapsed *m, const struct cli_export_row *r)
{
    struct cli_export_node *n;

    if (m->n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? 2 * m->cap_nodes : 256;
        void *p = realloc(m->nodes, cap * sizeof(*m->nodes));
        if (p == NULL)
            return -ENOMEM;
        m->nodes = p;
        m->cap_nodes = cap;
    }
    if (r->has_id) {
        uint64_t *v = pairmap_upsert(&m->ids, r->proc_index, r->id, NULL);
        if (v == NULL)
            return -ENOMEM;
        *v = m->n_nodes; /* an id given twice in a process: the later entry is the parent */
    }
    n = &m->nodes[m->n_nodes++];
    *n = (struct cli_export_node){.proc = r->proc_index,
                                  .op = r->op_index,
                                  .dev = r->dev ? r->dev->index : 0,
                                  .has_parent = r->has_parent,
                                  .parent = r->parent,
                                  .dur_ns = r->dur_ns,
                                  .mem_bytes = r->mem_bytes};
    return 0;
}

static int cli_export_collapsed_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct cli_export_collapsed *m = x->state;
    uint64_t *w;

    if (x->stacks == CLI_EXPORT_STACKS_LAUNCHER) {
        uint64_t launcher = r->launcher ? r->launcher_index + 1 : 0;
        w = pairmap_upsert(&m->flat, r->proc_index, launcher << 32 | r->op_index, NULL);
    } else if (r->has_id || r->has_parent) {
        return cli_export_collapsed_node(m, r);
    } else {
        /* Key: device index (0: none) and op index, both positions in the dictionaries. */
        w = pairmap_upsert(&m->flat, r->dev ? r->dev->index : 0, r->op_index, NULL);
    }
    if (w == NULL)
        return -ENOMEM;
    *w = cli_export_collapsed_add(*w, cli_export_collapsed_weight(x, r->dur_ns, r->mem_bytes));
    return 0;
}

static int cli_export_collapsed_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cli_export_stack *)a)->text,
                  ((const struct cli_export_stack *)b)->text);
}

/* A growing stack text; frames are cleaned as they are appended. */
struct cli_export_text {
    char *s;
    size_t len, cap;
    bool oom;
};

/*
 * Appends a frame: a ';' inside a name (the frame separator) becomes ':' and
 * a CR or LF a space (proto/PROTOCOL.md), so a name never adds a frame or
 * splits the line. The first frame gets no separator before it.
 */
static void cli_export_text_frame(struct cli_export_text *t, const char *name)
{
    size_t n = strlen(name);

    if (t->len + n + 2 > t->cap) {
        size_t cap = (t->len + n + 2) * 2;
        char *p = realloc(t->s, cap);
        if (p == NULL) {
            t->oom = true;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    if (t->len > 0)
        t->s[t->len++] = ';';
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        t->s[t->len++] = ch == ';' ? ':' : ch == '\n' || ch == '\r' ? ' ' : ch;
    }
    t->s[t->len] = '\0';
}

/* A process as a frame of --stacks launcher: "rank 3", or "process 7" without a rank. */
static void cli_export_proc_frame(const struct cli_export *x, size_t proc, char *buf, size_t size)
{
    const struct cli_export_proc *p = &x->dict.procs[proc];

    if (p->has_rank)
        snprintf(buf, size, "rank %" PRId64, p->rank);
    else
        snprintf(buf, size, "process %zu", proc + 1);
}

/* One key of the flat map as its stack text. */
static void cli_export_collapsed_flat_text(const struct cli_export *x, const struct pairmap_slot *s,
                                           struct cli_export_text *t)
{
    char frame[48];

    cli_export_text_frame(t, x->dict.session_name);
    if (x->stacks == CLI_EXPORT_STACKS_LAUNCHER) {
        uint64_t launcher = s->b >> 32;
        cli_export_proc_frame(x, s->a, frame, sizeof(frame));
        cli_export_text_frame(t, frame);
        if (launcher != 0)
            cli_export_text_frame(t, x->dict.ops[launcher - 1].name);
        cli_export_text_frame(t, x->dict.ops[s->b & UINT32_MAX].name);
    } else {
        cli_export_text_frame(t, s->a == 0 ? "unknown" : x->dict.devs[s->a - 1].name);
        cli_export_text_frame(t, x->dict.ops[s->b].name);
    }
}

/* The parent node of n, or NULL (no parent, or one its process never sent). */
static const struct cli_export_node *
cli_export_collapsed_parent(const struct cli_export_collapsed *m, const struct cli_export_node *n)
{
    const uint64_t *i;

    if (!n->has_parent || (i = pairmap_get(&m->ids, n->proc, n->parent)) == NULL)
        return NULL;
    return &m->nodes[*i];
}

/*
 * A node's stack: session, its device, then the ops of its ancestors,
 * outermost first, then its own. A chain deeper than COLLAPSED_MAX_DEPTH (or
 * a loop of parents) is cut there.
 */
static void cli_export_collapsed_node_text(const struct cli_export *x,
                                           const struct cli_export_node *n,
                                           struct cli_export_text *t)
{
    const struct cli_export_collapsed *m = x->state;
    const struct cli_export_node *chain[COLLAPSED_MAX_DEPTH];
    size_t depth = 0;

    for (const struct cli_export_node *p = n; p != NULL && depth < COLLAPSED_MAX_DEPTH;
         p = cli_export_collapsed_parent(m, p))
        chain[depth++] = p;
    cli_export_text_frame(t, x->dict.session_name);
    cli_export_text_frame(t, n->dev == 0 ? "unknown" : x->dict.devs[n->dev - 1].name);
    while (depth > 0)
        cli_export_text_frame(t, x->dict.ops[chain[--depth]->op].name);
}

/*
 * Every stack with its weight, unsorted: the flat map's keys, then one per
 * node, weighed by its self time (its duration less its children's, at
 * least 0) so that a parent's frame is not counted twice. Returns the
 * number of stacks, or -ENOMEM.
 */
static long cli_export_collapsed_stacks(const struct cli_export *x, struct cli_export_stack *st)
{
    struct cli_export_collapsed *m = x->state;
    size_t n = 0;

    for (size_t i = 0; i < m->n_nodes; i++) {
        const struct cli_export_node *p = cli_export_collapsed_parent(m, &m->nodes[i]);
        if (p != NULL && p != &m->nodes[i])
            m->nodes[p - m->nodes].child_ns =
                cli_export_collapsed_add(p->child_ns, m->nodes[i].dur_ns);
    }
    for (size_t i = 0; i < m->flat.cap + m->n_nodes; i++) {
        struct cli_export_text t = {0};

        if (i < m->flat.cap) {
            if (!m->flat.slots[i].used)
                continue;
            cli_export_collapsed_flat_text(x, &m->flat.slots[i], &t);
            st[n].weight = m->flat.slots[i].val;
        } else {
            const struct cli_export_node *nd = &m->nodes[i - m->flat.cap];
            uint64_t self = nd->dur_ns - (nd->child_ns < nd->dur_ns ? nd->child_ns : nd->dur_ns);
            cli_export_collapsed_node_text(x, nd, &t);
            st[n].weight = cli_export_collapsed_weight(x, self, nd->mem_bytes);
        }
        st[n++].text = t.s;
        if (t.oom || t.s == NULL)
            return -ENOMEM;
    }
    return (long)n;
}

static int cli_export_collapsed_end(struct cli_export *x)
{
    const struct cli_export_collapsed *m = x->state;
    size_t total = m->flat.len + m->n_nodes;
    struct cli_export_stack *st = calloc(total ? total : 1, sizeof(*st));
    long n;
    int rc = 0;

    if (st == NULL)
        return -ENOMEM;
    n = cli_export_collapsed_stacks(x, st);
    if (n < 0)
        rc = (int)n;
    else
        qsort(st, (size_t)n, sizeof(*st), cli_export_collapsed_cmp);
    for (long i = 0; rc == 0 && i < n; i++) {
        uint64_t w = st[i].weight;

        while (i + 1 < n && strcmp(st[i].text, st[i + 1].text) == 0)
            w = cli_export_collapsed_add(w, st[++i].weight);
        fprintf(x->out, "%s %" PRIu64 "\n", st[i].text, w);
    }
    for (size_t i = 0; i < total; i++)
        free(st[i].text);
    free(st);
    return rc != 0 ? rc : ferror(x->out) ? -EIO : 0;
}

static void cli_export_collapsed_free(struct cli_export *x)
{
    struct cli_export_collapsed *m = x->state;

    if (m != NULL) {
        pairmap_deinit(&m->flat);
        pairmap_deinit(&m->ids);
        free(m->nodes);
    }
    free(m);
    x->state = NULL;
}

const struct cli_export_format cli_export_collapsed = {
    .name = "collapsed",
    .binary = false,
    .begin = cli_export_collapsed_begin,
    .row = cli_export_collapsed_row,
    .end = cli_export_collapsed_end,
    .free = cli_export_collapsed_free,
};
