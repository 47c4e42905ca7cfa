/*
 * cli_export_lanes — slices on lanes without partial overlaps (see
 * cli_export_lanes.h).
 */
#include "cli_export_lanes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_export_lanes_init(struct cli_export_lanes *l)
{
    memset(l, 0, sizeof(*l));
    pairmap_init(&l->devs);
    pairmap_init(&l->tracks);
}

void cli_export_lanes_deinit(struct cli_export_lanes *l)
{
    for (size_t i = 0; i < l->n; i++) {
        for (size_t k = 0; k < l->t[i].n_lanes; k++) {
            free(l->t[i].lanes[k].open);
            free(l->t[i].lanes[k].ids);
            free(l->t[i].lanes[k].linked);
        }
        free(l->t[i].lanes);
    }
    free(l->t);
    pairmap_deinit(&l->devs);
    pairmap_deinit(&l->tracks);
    memset(l, 0, sizeof(*l));
}

/* The track of row r, made when new. NULL when out of memory. */
static struct cli_export_lanes_track *cli_export_lanes_track(struct cli_export_lanes *l,
                                                             const struct cli_export_row *r)
{
    uint64_t *dev, *slot, key;
    bool created;

    if (l->n == l->cap) { /* room for a new track first: a map slot is never left dangling */
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct cli_export_lanes_track *t = realloc(l->t, cap * sizeof(*t));

        if (t == NULL)
            return NULL;
        l->t = t;
        l->cap = cap;
    }
    dev =
        pairmap_upsert(&l->devs, (uint64_t)r->proc->view_pid, r->dev ? r->dev->index : 0, &created);
    if (dev == NULL)
        return NULL;
    if (created)
        *dev = ++l->n_dev_keys;
    key = *dev << 1 | (r->has_stream ? 1 : 0);
    slot = pairmap_upsert(&l->tracks, key, r->has_stream ? r->stream : 0, &created);
    if (slot == NULL)
        return NULL;
    if (!created)
        return &l->t[*slot - 1];
    *slot = l->n + 1;
    l->t[l->n] = (struct cli_export_lanes_track){
        .proc = r->proc, .dev = r->dev, .has_stream = r->has_stream, .stream = r->stream};
    return &l->t[l->n++];
}

/* Closes the slices of lane that end by t (all of them with t UINT64_MAX), innermost first. */
static int cli_export_lanes_close(struct cli_export_lanes_track *tr, struct cli_export_lane *lane,
                                  uint64_t t, cli_export_lanes_end_cb end, void *arg)
{
    while (lane->depth > 0 && lane->open[lane->depth - 1] <= t) {
        uint64_t at = lane->open[--lane->depth];
        int rc;

        /* an inner slice never ends after the one around it, so at never goes back */
        lane->last_ns = at;
        if (end != NULL && (rc = end(arg, tr, lane, at)) != 0)
            return rc;
    }
    return 0;
}

/*
 * Whether r's slice [start, stop) can go on lane (its open slices closed up
 * to start already). An entry with links nests only under its parent.
 */
static bool cli_export_lanes_fits(const struct cli_export_lanes_track *tr,
                                  const struct cli_export_lane *lane,
                                  const struct cli_export_row *r, uint64_t start, uint64_t stop)
{
    if (lane->last_ns > start)
        return false; /* an event after start is written there: rows out of start order */
    if (lane->depth == 0)
        return true;
    if (stop > lane->open[lane->depth - 1])
        return false;
    if (r->has_parent) {
        /* the innermost open slice with an id is the parent; those inside it have none (a
         * profiler op inside the op that called it, both under their module's range) */
        for (size_t d = lane->depth; d > 0; d--)
            if (lane->ids[d - 1] != 0)
                return lane->ids[d - 1] == r->parent + 1 && r->parent != UINT64_MAX;
        return false;
    }
    if (r->has_id && tr->has_stream) {
        /* a region with no parent, on one thread's track: inside the plain slices that hold
         * it (the torch bridge's Net.forward inside DistributedDataParallel.forward), never
         * inside another region, which would be its parent */
        for (size_t d = lane->depth; d > 0; d--)
            if (lane->ids[d - 1] != 0)
                return false;
        return true;
    }
    return !r->has_id;
}

/*
 * The lane for [start, stop) among those it fits on: the one whose innermost
 * open slice ends first, the tightest that holds it (its parent rather than a
 * grandparent on another lane, when a partial overlap split them), a lane
 * with nothing open only when no slice holds it, the first on a tie.
 *
 * Except for an entry without links on a track without a stream (tc_record
 * inside tc_push regions, with other threads' regions beside): a lane whose
 * innermost open slice is a region (it has links) is another thread's as
 * likely as its own, since the link rules put each thread's root regions on
 * a lane of their own and time says nothing of which thread the entry came
 * from; such a lane never displaces a lane before it that holds the entry too.
 * The track's first lanes hold the regions that began first (the training
 * loop's step, not the loader beside it that began inside it). n_lanes when
 * none fits.
 */
static size_t cli_export_lanes_best(const struct cli_export_lanes_track *tr,
                                    const struct cli_export_row *r, uint64_t start, uint64_t stop)
{
    bool by_order = !tr->has_stream && !r->has_id && !r->has_parent;
    size_t best = tr->n_lanes;

    for (size_t k = 0; k < tr->n_lanes; k++) {
        const struct cli_export_lane *l = &tr->lanes[k], *b = &tr->lanes[best];

        if (!cli_export_lanes_fits(tr, l, r, start, stop))
            continue;
        if (best == tr->n_lanes)
            best = k;
        else if (l->depth > 0 && (b->depth == 0 || (l->open[l->depth - 1] < b->open[b->depth - 1] &&
                                                    !(by_order && l->linked[l->depth - 1]))))
            best = k;
    }
    return best;
}

static int cli_export_lanes_push(struct cli_export_lane *lane, const struct cli_export_row *r,
                                 uint64_t start, uint64_t stop)
{
    if (lane->depth == lane->cap) {
        size_t cap = lane->cap ? 2 * lane->cap : 8;
        uint64_t *open = realloc(lane->open, cap * sizeof(*open)), *ids;
        bool *linked;

        if (open == NULL)
            return -ENOMEM;
        lane->open = open;
        if ((ids = realloc(lane->ids, cap * sizeof(*ids))) == NULL)
            return -ENOMEM;
        lane->ids = ids;
        if ((linked = realloc(lane->linked, cap * sizeof(*linked))) == NULL)
            return -ENOMEM;
        lane->linked = linked;
        lane->cap = cap;
    }
    lane->ids[lane->depth] = r->has_id && r->id != UINT64_MAX ? r->id + 1 : 0;
    lane->linked[lane->depth] = r->has_id || r->has_parent;
    lane->open[lane->depth++] = stop;
    lane->last_ns = start;
    return 0;
}

int cli_export_lanes_place(struct cli_export_lanes *l, const struct cli_export_row *r,
                           cli_export_lanes_end_cb end, void *arg,
                           struct cli_export_lanes_track **track, struct cli_export_lane **lane)
{
    /* start_ns and span_ns are at most INT64_MAX each (proto/PROTOCOL.md): no wrap. */
    uint64_t start = r->start_ns, stop = r->start_ns + r->span_ns;
    struct cli_export_lanes_track *tr = cli_export_lanes_track(l, r);
    size_t k;
    int rc;

    if (tr == NULL)
        return -ENOMEM;
    for (k = 0; k < tr->n_lanes; k++)
        if ((rc = cli_export_lanes_close(tr, &tr->lanes[k], start, end, arg)) != 0)
            return rc;
    k = cli_export_lanes_best(tr, r, start, stop);
    if (k == tr->n_lanes) {
        struct cli_export_lane *lanes = realloc(tr->lanes, (k + 1) * sizeof(*lanes));

        if (lanes == NULL)
            return -ENOMEM;
        tr->lanes = lanes;
        memset(&lanes[k], 0, sizeof(lanes[k]));
        tr->n_lanes = k + 1;
    }
    if (stop == start) /* an instant: nothing stays open, no END */
        tr->lanes[k].last_ns = start;
    else if ((rc = cli_export_lanes_push(&tr->lanes[k], r, start, stop)) != 0)
        return rc;
    *track = tr;
    *lane = &tr->lanes[k];
    return 0;
}

int cli_export_lanes_close_all(struct cli_export_lanes *l, cli_export_lanes_end_cb end, void *arg)
{
    int rc;

    for (size_t i = 0; i < l->n; i++)
        for (size_t k = 0; k < l->t[i].n_lanes; k++)
            if ((rc = cli_export_lanes_close(&l->t[i], &l->t[i].lanes[k], UINT64_MAX, end, arg)) !=
                0)
                return rc;
    return 0;
}

void cli_export_lanes_name(const struct cli_export_lanes_track *t, size_t lane, char *buf,
                           size_t size)
{
    int n = snprintf(buf, size, "%s", t->dev ? t->dev->name : "no device");

    if (n >= 0 && (size_t)n < size && t->has_stream)
        n += snprintf(buf + n, size - (size_t)n, " stream %" PRIu64, t->stream);
    if (n >= 0 && (size_t)n < size && lane > 0)
        snprintf(buf + n, size - (size_t)n, " #%zu", lane + 1);
}
