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

struct cli_export_stack {
    char *text; /* "<session>;<device>;<op>" */
    uint64_t weight;
};

uint64_t cli_export_collapsed_time(uint64_t dur_ns)
{
    /* Rounds half up (durations are never negative) without dur_ns + 500 wrapping. */
    uint64_t us = dur_ns / 1000 + (dur_ns % 1000 >= 500);

    return us > 0 ? us : 1;
}

static uint64_t cli_export_collapsed_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int cli_export_collapsed_begin(struct cli_export *x)
{
    struct pairmap *m = malloc(sizeof(*m));

    if (m == NULL)
        return -ENOMEM;
    pairmap_init(m);
    x->state = m;
    return 0;
}

static int cli_export_collapsed_row(struct cli_export *x, const struct cli_export_row *r)
{
    /* Key: device index (0: none) and op index, both positions in the dictionaries. */
    uint64_t *w = pairmap_upsert(x->state, r->dev ? r->dev->index : 0, r->op_index, NULL);
    uint64_t add;

    if (w == NULL)
        return -ENOMEM;
    if (x->weight == CLI_EXPORT_WEIGHT_TIME)
        add = cli_export_collapsed_time(r->dur_ns);
    else if (x->weight == CLI_EXPORT_WEIGHT_MEMORY)
        add = r->mem_bytes;
    else
        add = 1;
    *w = cli_export_collapsed_add(*w, add);
    return 0;
}

static int cli_export_collapsed_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cli_export_stack *)a)->text,
                  ((const struct cli_export_stack *)b)->text);
}

/*
 * A frame name must not split the line format: in each of the three names a
 * ';' (the frame separator) becomes ':' and a CR or LF becomes a space
 * (proto/PROTOCOL.md). text is "<session>;<device>;<op>" with those lengths.
 */
static void cli_export_collapsed_clean(char *text, const char *session, const char *dev)
{
    size_t a = strlen(session), b = a + 1 + strlen(dev);

    for (char *p = text; *p; p++) {
        size_t i = (size_t)(p - text);
        if (*p == ';' && i != a && i != b)
            *p = ':';
        else if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
}

/* The map's keys as stack texts with their weights, unsorted. Returns 0 or -ENOMEM. */
static int cli_export_collapsed_stacks(const struct cli_export *x, struct cli_export_stack *st)
{
    const struct pairmap *m = x->state;
    size_t n = 0;

    for (size_t i = 0; i < m->cap; i++) {
        const struct pairmap_slot *s = &m->slots[i];
        const char *dev;
        size_t len;

        if (!s->used)
            continue;
        dev = s->a == 0 ? "unknown" : x->dict.devs[s->a - 1].name;
        len = strlen(x->dict.session_name) + strlen(dev) + strlen(x->dict.ops[s->b].name) + 3;
        st[n].weight = s->val;
        st[n].text = malloc(len);
        if (st[n].text == NULL)
            return -ENOMEM;
        snprintf(st[n].text, len, "%s;%s;%s", x->dict.session_name, dev, x->dict.ops[s->b].name);
        cli_export_collapsed_clean(st[n].text, x->dict.session_name, dev);
        n++;
    }
    return 0;
}

static int cli_export_collapsed_end(struct cli_export *x)
{
    const struct pairmap *m = x->state;
    struct cli_export_stack *st = calloc(m->len ? m->len : 1, sizeof(*st));
    int rc;

    if (st == NULL)
        return -ENOMEM;
    rc = cli_export_collapsed_stacks(x, st);
    if (rc == 0)
        qsort(st, m->len, sizeof(*st), cli_export_collapsed_cmp);
    for (size_t i = 0; rc == 0 && i < m->len; i++) {
        uint64_t w = st[i].weight;

        while (i + 1 < m->len && strcmp(st[i].text, st[i + 1].text) == 0)
            w = cli_export_collapsed_add(w, st[++i].weight);
        fprintf(x->out, "%s %" PRIu64 "\n", st[i].text, w);
    }
    for (size_t i = 0; i < m->len; i++)
        free(st[i].text);
    free(st);
    return rc != 0 ? rc : ferror(x->out) ? -EIO : 0;
}

static void cli_export_collapsed_free(struct cli_export *x)
{
    if (x->state != NULL)
        pairmap_deinit(x->state);
    free(x->state);
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
