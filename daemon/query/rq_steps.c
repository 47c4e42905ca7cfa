/*
 * rq_steps.c — folding the report's steps, one at a time (see rq.h).
 *
 * rq_read_steps() (ranks_query.c) hands over each step's rows as they end; rq_step_done()
 * merges a rank's processes, adds each rank's figures to its sums, keeps the step among the
 * RQ_STEPS listed if it is one of the widest (a heap: memory follows the ranks, never the
 * steps), and counts its held-up time in half-octave buckets for the verdict's medians.
 * Then it packs what that folded: the `steps` and `ranks` sections and the verdict's
 * figures of each rank.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rq.h"

static int rq_row_cmp(const void *pa, const void *pb)
{
    const struct rq_row *a = pa, *b = pb;

    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->ri < b->ri ? -1 : a->ri > b->ri;
}

/* Sorts the rows by (step, rank) and merges rows of one rank and step (several processes). */
static void rq_merge_rows(struct rq *q)
{
    size_t k = 0;

    if (q->n_rows == 0)
        return;
    qsort(q->rows, q->n_rows, sizeof(*q->rows), rq_row_cmp);
    for (size_t i = 0; i < q->n_rows; i++) {
        struct rq_row *a = &q->rows[i];
        if (k > 0 && q->rows[k - 1].step == a->step && q->rows[k - 1].ri == a->ri) {
            struct rq_row *m = &q->rows[k - 1];
            if (a->begin < m->begin)
                m->begin = a->begin;
            if (a->end > m->end)
                m->end = a->end;
            for (int c = 0; c < PROTO_NCAT; c++)
                m->cat[c] = rq_sat(m->cat[c], a->cat[c]);
            m->exposed = rq_sat(m->exposed, a->exposed);
            m->coll += a->coll;
            m->waited = rq_sat(m->waited, a->waited);
            m->last += a->last;
            m->caused = rq_sat(m->caused, a->caused);
            m->covered = rq_sat(m->covered, a->covered); /* processes of a rank: covers add */
            m->cpu_wait = rq_sat(m->cpu_wait, a->cpu_wait);
        } else {
            q->rows[k++] = *a;
        }
    }
    q->n_rows = k;
}

static uint64_t rq_span(const struct rq_row *w)
{
    return w->end > w->begin ? w->end - w->begin : 0;
}

/* A rank's step time in no top-level entry: its span less their union (0 when they cover it
 * all; more only through late entries, rkcover.h). */
static uint64_t rq_untracked(const struct rq_row *w)
{
    uint64_t t = rq_span(w);

    return w->covered < t ? t - w->covered : 0;
}

/* True when step a is listed after b: less caused time, as much but a shorter slowest rank,
 * or both equal and later. */
static bool rq_shown_after(const struct rq_shown *a, const struct rq_shown *b)
{
    if (a->caused != b->caused)
        return a->caused < b->caused;
    if (a->max != b->max)
        return a->max < b->max;
    return a->step > b->step;
}

static void rq_shown_swap(struct rq_shown *a, struct rq_shown *b)
{
    struct rq_shown t = *a;

    *a = *b;
    *b = t;
}

/* Restores the heap (the step listed last at the root) from node k down. */
static void rq_shown_down(struct rq *q, size_t k)
{
    for (;;) {
        size_t l = 2 * k + 1, m = k;
        if (l < q->n_shown && rq_shown_after(&q->shown[l], &q->shown[m]))
            m = l;
        if (l + 1 < q->n_shown && rq_shown_after(&q->shown[l + 1], &q->shown[m]))
            m = l + 1;
        if (m == k)
            return;
        rq_shown_swap(&q->shown[k], &q->shown[m]);
        k = m;
    }
}

/* Keeps step st (its rows in q->rows) among the RQ_STEPS widest, if it is one. */
static int rq_step_keep(struct rq *q, struct rq_shown *st)
{
    size_t k;

    if (q->n_shown == RQ_STEPS && !rq_shown_after(&q->shown[0], st))
        return 0;
    if ((st->times = malloc(st->n * sizeof(*st->times))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < st->n; i++)
        st->times[i] = (struct rq_time){q->rows[i].ri, rq_span(&q->rows[i]), q->rows[i].cpu_wait};
    if (q->shown == NULL && (q->shown = malloc(RQ_STEPS * sizeof(*q->shown))) == NULL) {
        free(st->times);
        return -ENOMEM;
    }
    if (q->n_shown == RQ_STEPS) { /* it takes the place of the step listed last */
        free(q->shown[0].times);
        q->shown[0] = *st;
        rq_shown_down(q, 0);
        return 0;
    }
    q->shown[k = q->n_shown++] = *st;
    for (; k > 0 && rq_shown_after(&q->shown[(k - 1) / 2], &q->shown[k]); k = (k - 1) / 2)
        rq_shown_swap(&q->shown[k], &q->shown[(k - 1) / 2]);
    return 0;
}

/* The half-octave bucket of v: 0 for 0, else 1 + 2 x log2(v) + the bit below the top one. */
static size_t rq_hbucket(uint64_t v)
{
    int msb;

    if (v == 0)
        return 0;
    msb = 63 - __builtin_clzll(v);
    return 1 + 2 * (size_t)msb + (msb > 0 ? (v >> (msb - 1)) & 1 : 0);
}

/* The least value of bucket b. */
static uint64_t rq_hvalue(size_t b)
{
    size_t msb = (b - 1) / 2;

    if (b == 0)
        return 0;
    return ((uint64_t)1 << msb) + ((b - 1) % 2 ? (uint64_t)1 << msb >> 1 : 0);
}

/*
 * The lower median of the counts h minus sub (RQ_HB each, when not NULL) and minus sub2 (the
 * same), as its bucket's least value; 0 when they count nothing. *n: how many they count.
 */
static uint64_t rq_hmedian(const uint64_t *h, const uint64_t *sub, const uint64_t *sub2,
                           uint64_t *n)
{
    uint64_t seen = 0;

    *n = 0;
    for (size_t b = 0; b < RQ_HB; b++)
        *n += h[b] - (sub ? sub[b] : 0) - (sub2 ? sub2[b] : 0);
    for (size_t b = 0; b < RQ_HB; b++) {
        seen += h[b] - (sub ? sub[b] : 0) - (sub2 ? sub2[b] : 0);
        if (*n > 0 && seen >= (*n + 1) / 2)
            return rq_hvalue(b);
    }
    return 0;
}

/*
 * Rows without a span (begin after end: only a forked worker's entries, which the writer
 * keeps in no step's span, ranks.c) count in their rank's totals and in no step: folds
 * them and leaves q->rows with the others. Returns how many are left.
 */
static size_t rq_drop_spanless(struct rq *q)
{
    size_t k = 0;

    for (size_t j = 0; j < q->n_rows; j++) {
        const struct rq_row *w = &q->rows[j];
        struct rq_rank *r = &q->ranks[w->ri];
        if (w->begin <= w->end) {
            q->rows[k++] = *w;
            continue;
        }
        for (int c = 0; c < PROTO_NCAT; c++)
            r->cat[c] = rq_sat(r->cat[c], w->cat[c]);
        r->exposed = rq_sat(r->exposed, w->exposed);
    }
    q->n_rows = k;
    return k;
}

/* Adds a rank's row of one step to the rank's sums. */
static void rq_fold_rank(struct rq_rank *r, const struct rq_row *w)
{
    r->steps++;
    r->step_ns = rq_sat(r->step_ns, rq_span(w));
    for (int c = 0; c < PROTO_NCAT; c++)
        r->cat[c] = rq_sat(r->cat[c], w->cat[c]);
    r->exposed = rq_sat(r->exposed, w->exposed);
    r->coll += w->coll;
    r->waited = rq_sat(r->waited, w->waited);
    r->last += w->last;
    r->caused = rq_sat(r->caused, w->caused);
    r->untracked = rq_sat(r->untracked, rq_untracked(w));
    r->cpu_wait = rq_sat(r->cpu_wait, w->cpu_wait);
}

/* Row j's run-queue delay in its step and the step before (when that was the step folded
 * last): what its lateness at the step's collectives builds up in (verdict.h). */
static uint64_t rq_cpu_window(const struct rq *q, size_t j, uint64_t step)
{
    const struct rq_row *w = &q->rows[j];
    bool prev = q->cw_prev != NULL && step > 0 && q->prev_step == step - 1;

    return rq_sat(w->cpu_wait, prev ? q->cw_prev[w->ri] : 0);
}

/*
 * The late row lw's (index late) held-up time, and how much of it was its own wait for a CPU:
 * its delay in the window less the least of the other rows', at most the held-up time; added
 * to its rank's late_caused and late_cpu. Then keeps each rank's delay of this step for the
 * next. 0 or -ENOMEM.
 */
static int rq_step_cpu(struct rq *q, size_t late, bool named, uint64_t step)
{
    const struct rq_row *lw = &q->rows[late];

    if (named) {
        struct rq_rank *lr = &q->ranks[lw->ri];
        uint64_t mine = rq_cpu_window(q, late, step), least = UINT64_MAX, own = 0;
        for (size_t j = 0; j < q->n_rows; j++) {
            uint64_t t = j != late ? rq_cpu_window(q, j, step) : UINT64_MAX;
            least = t < least ? t : least;
        }
        if (least != UINT64_MAX && mine > least)
            own = mine - least < lw->caused ? mine - least : lw->caused;
        lr->late_caused = rq_sat(lr->late_caused, lw->caused);
        lr->late_cpu = rq_sat(lr->late_cpu, own);
    }
    if (q->cw_prev == NULL && (q->cw_prev = calloc(q->n_ranks, sizeof(*q->cw_prev))) == NULL)
        return -ENOMEM;
    memset(q->cw_prev, 0, q->n_ranks * sizeof(*q->cw_prev));
    for (size_t j = 0; j < q->n_rows; j++)
        q->cw_prev[q->rows[j].ri] = q->rows[j].cpu_wait;
    q->prev_step = step;
    return 0;
}

/*
 * The step's held-up time, row lw's caused time (the most of the step's rows; named: lw's
 * rank is the step's late rank), counted in q->hall and its rank's hlate; and the late
 * steps of the rank named. 0 or -ENOMEM.
 */
static int rq_step_held(struct rq *q, const struct rq_row *lw, bool named, uint64_t step)
{
    if (lw->caused > 0) { /* the held-up time: whose it is, named late or not */
        struct rq_rank *lr = &q->ranks[lw->ri];
        size_t b = rq_hbucket(lw->caused);
        if (lr->hlate == NULL && (lr->hlate = calloc(2 * RQ_HB, sizeof(*lr->hlate))) == NULL)
            return -ENOMEM;
        q->hall[b]++;
        lr->hlate[named ? b : RQ_HB + b]++;
    }
    if (named) {
        struct rq_rank *lr = &q->ranks[lw->ri];
        if (lr->late++ == 0)
            lr->late_first = step;
        lr->late_last = step; /* the steps come in order */
    }
    return 0;
}

/*
 * The rows of one step are all read (q->rows): merges those of one rank,
 * folds them into the per-rank sums, keeps the step's summary if it is to
 * be listed, and empties q->rows for the next step. 0 or -ENOMEM.
 */
int rq_step_done(struct rq *q)
{
    struct rq_shown st = {.step = q->rows[0].step, .min = UINT64_MAX};
    size_t slow = 0, lastr = 0, late = 0;
    unsigned __int128 sum = 0;
    bool named;

    rq_merge_rows(q); /* one step: by rank */
    if (rq_drop_spanless(q) == 0)
        return 0; /* only workers' entries: in no step */
    for (size_t j = 0; j < q->n_rows; j++) {
        struct rq_row *w = &q->rows[j];
        uint64_t t = rq_span(w);

        rq_fold_rank(&q->ranks[w->ri], w);
        sum += t;
        st.waited = rq_sat(st.waited, w->waited);
        st.caused = rq_sat(st.caused, w->caused);
        st.untracked = rq_sat(st.untracked, rq_untracked(w));
        st.cpu_wait = rq_sat(st.cpu_wait, w->cpu_wait);
        if (t < st.min)
            st.min = t;
        if (t > st.max || j == 0) {
            st.max = t;
            slow = j;
        }
        if (w->last > q->rows[lastr].last)
            lastr = j;
        if (w->caused > q->rows[late].caused)
            late = j;
    }
    st.n = q->n_rows;
    st.mean = (uint64_t)(sum / st.n);
    named = q->rows[late].caused > 0 && st.n > 1 &&
            (double)q->rows[late].caused >= RQ_LATE * (double)st.mean;
    st.slow = q->rows[slow].ri;
    st.last = q->rows[lastr].last > 0 ? q->rows[lastr].ri : SIZE_MAX;
    st.late = named ? q->rows[late].ri : SIZE_MAX;
    q->ranks[st.slow].slowest++;
    if (rq_step_held(q, &q->rows[late], named, st.step) < 0 ||
        rq_step_cpu(q, late, named, st.step) < 0)
        return -ENOMEM;
    q->step_sum += sum;
    q->step_cnt += st.n;
    q->n_steps++;
    q->n_rows = 0;
    return rq_step_keep(q, &st);
}

static int rq_shown_step_cmp(const void *pa, const void *pb)
{
    const struct rq_shown *a = pa, *b = pb;

    return a->step < b->step ? -1 : a->step > b->step;
}

static int64_t rq_rank_of(const struct rq *q, size_t ri)
{
    return ri == SIZE_MAX ? -1 : q->ranks[ri].rank;
}

/* [[rank, figure], ...] of a listed step: its ranks' step times, or (cpu) their CPU waits. */
static int rq_pack_by_rank(struct rq *q, msgpack_packer *pk, const struct rq_shown *st, bool cpu)
{
    if (msgpack_pack_array(pk, st->n))
        return -1;
    for (size_t k = 0; k < st->n; k++) {
        int64_t rank = q->ranks[st->times[k].ri].rank;
        if (msgpack_pack_array(pk, 2) ||
            (rank < 0 ? msgpack_pack_nil(pk) : msgpack_pack_int64(pk, rank)) ||
            msgpack_pack_uint64(pk, cpu ? st->times[k].cpu : st->times[k].t))
            return -1;
    }
    return 0;
}

/* A listed step; with cpu (a rank of the report has a CPU wait), its ranks' CPU waits too. */
static int rq_pack_step(struct rq *q, msgpack_packer *pk, const struct rq_shown *st, bool cpu)
{
    if (msgpack_pack_map(pk, 14 + cpu) || pk_u64(pk, "step", st->step) ||
        pk_u64(pk, "ranks", st->n) || pk_u64(pk, "min_ns", st->min) ||
        pk_u64(pk, "max_ns", st->max) || pk_u64(pk, "mean_ns", st->mean) ||
        pk_u64(pk, "spread_ns", st->max - st->min) ||
        pk_rank(pk, "slowest_rank", rq_rank_of(q, st->slow)) ||
        pk_rank(pk, "last_rank", rq_rank_of(q, st->last)) ||
        pk_rank(pk, "late_rank", rq_rank_of(q, st->late)) || pk_u64(pk, "waited_ns", st->waited) ||
        pk_u64(pk, "caused_ns", st->caused) ||
        pk_known(pk, "untracked_ns", st->untracked, q->cover) ||
        pk_u64(pk, "cpu_wait_ns", st->cpu_wait) || pk_str(pk, "times_ns") ||
        rq_pack_by_rank(q, pk, st, false))
        return -1;
    if (cpu && (pk_str(pk, "cpu_wait_times_ns") || rq_pack_by_rank(q, pk, st, true)))
        return -1;
    return 0;
}

/*
 * Packs `steps`: every step when there are at most RQ_STEPS, else the
 * RQ_STEPS with the widest spread (ties: the earlier), by step, so that
 * neither the reply nor the memory grows with the session's length.
 */
int rq_pack_steps(struct rq *q, msgpack_packer *pk, uint64_t *mean_step_out)
{
    bool cpu = false;

    for (size_t i = 0; i < q->n_ranks; i++)
        cpu = cpu || q->ranks[i].cpu_wait > 0;
    if (q->n_shown > 1)
        qsort(q->shown, q->n_shown, sizeof(*q->shown), rq_shown_step_cmp);
    if (pk_str(pk, "steps") || msgpack_pack_array(pk, q->n_shown))
        return -1;
    for (size_t k = 0; k < q->n_shown; k++)
        if (rq_pack_step(q, pk, &q->shown[k], cpu))
            return -1;
    *mean_step_out = q->step_cnt ? (uint64_t)(q->step_sum / q->step_cnt) : 0;
    return 0;
}

static uint64_t rq_total(const struct rq_rank *r)
{
    uint64_t t = 0;

    for (int c = 0; c < PROTO_NCAT; c++)
        t = rq_sat(t, r->cat[c]);
    return t;
}

void rq_rank_row(const struct rq *q, const struct rq_rank *r, struct ranks_row *o)
{
    uint64_t in_comm = rq_sat(r->cat[PROTO_CAT_COMM], r->cat[PROTO_CAT_WAIT]);
    double comm_share = r->step_ns ? (double)in_comm / (double)r->step_ns : 0;

    *o = (struct ranks_row){.rank = r->rank,
                            .processes = r->processes,
                            .dropped = r->dropped,
                            .steps = r->steps,
                            .step_ns = r->step_ns,
                            .step_mean_ns = r->steps ? r->step_ns / r->steps : 0,
                            .total_ns = rq_total(r),
                            .compute_ns = r->cat[PROTO_CAT_COMPUTE],
                            .comm_ns = r->cat[PROTO_CAT_COMM],
                            .memory_ns = r->cat[PROTO_CAT_MEMORY],
                            .wait_ns = r->cat[PROTO_CAT_WAIT],
                            .other_ns = r->cat[PROTO_CAT_OTHER],
                            .exposed_comm_ns = r->exposed,
                            .collectives = r->coll,
                            .waited_ns = r->waited,
                            .arrived_last = r->last,
                            .caused_ns = r->caused,
                            .slowest_steps = r->slowest,
                            .late_steps = r->late,
                            .late_first_step = r->late > 0 ? r->late_first : 0,
                            .late_last_step = r->late > 0 ? r->late_last : 0,
                            .untracked_ns = q->cover ? r->untracked : 0,
                            .untracked_known = q->cover,
                            .cpu_wait_ns = r->cpu_wait,
                            .comm_share = comm_share < 1 ? comm_share : 1};
}

int ranks_row_pack(msgpack_packer *pk, const struct ranks_row *r, const char *host)
{
    if (msgpack_pack_map(pk, RANKS_ROW_KEYS + (host != NULL)) ||
        (host != NULL && (pk_str(pk, "host") || pk_str(pk, host))))
        return -1;
    return pk_rank(pk, "rank", r->rank) || pk_u64(pk, "processes", r->processes) ||
           pk_u64(pk, "dropped", r->dropped) || pk_u64(pk, "steps", r->steps) ||
           pk_u64(pk, "step_ns", r->step_ns) || pk_u64(pk, "step_mean_ns", r->step_mean_ns) ||
           pk_u64(pk, "total_ns", r->total_ns) || pk_u64(pk, "compute_ns", r->compute_ns) ||
           pk_u64(pk, "comm_ns", r->comm_ns) || pk_u64(pk, "memory_ns", r->memory_ns) ||
           pk_u64(pk, "wait_ns", r->wait_ns) || pk_u64(pk, "other_ns", r->other_ns) ||
           pk_u64(pk, "exposed_comm_ns", r->exposed_comm_ns) ||
           pk_u64(pk, "collectives", r->collectives) || pk_u64(pk, "waited_ns", r->waited_ns) ||
           pk_u64(pk, "arrived_last", r->arrived_last) || pk_u64(pk, "caused_ns", r->caused_ns) ||
           pk_u64(pk, "slowest_steps", r->slowest_steps) ||
           pk_u64(pk, "late_steps", r->late_steps) ||
           pk_known(pk, "late_first_step", r->late_first_step, r->late_steps > 0) ||
           pk_known(pk, "late_last_step", r->late_last_step, r->late_steps > 0) ||
           pk_known(pk, "untracked_ns", r->untracked_ns, r->untracked_known) ||
           pk_u64(pk, "cpu_wait_ns", r->cpu_wait_ns) || pk_f64(pk, "comm_share", r->comm_share);
}

int rq_pack_ranks(struct rq *q, msgpack_packer *pk)
{
    if (pk_str(pk, "ranks") || msgpack_pack_array(pk, q->n_ranks))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++) {
        struct ranks_row row;
        rq_rank_row(q, &q->ranks[i], &row);
        if (ranks_row_pack(pk, &row, NULL))
            return -1;
    }
    return 0;
}

/* The verdict's figures of the ranks (vr: q->n_ranks of them). */
void rq_verdict_ranks(const struct rq *q, struct verdict_rank *vr)
{
    uint64_t named[RQ_HB] = {0}; /* the held-up time of the steps a late rank was named in */

    for (size_t i = 0; i < q->n_ranks; i++)
        for (size_t b = 0; q->ranks[i].hlate != NULL && b < RQ_HB; b++)
            named[b] += q->ranks[i].hlate[b];
    for (size_t i = 0; i < q->n_ranks; i++) {
        const struct rq_rank *r = &q->ranks[i];
        uint64_t n, m;

        vr[i] = (struct verdict_rank){.rank = r->rank,
                                      .step_ns = r->step_ns,
                                      .compute = r->cat[PROTO_CAT_COMPUTE],
                                      .comm = r->cat[PROTO_CAT_COMM],
                                      .untracked = r->untracked,
                                      .caused = r->caused,
                                      .waited = r->waited,
                                      .dropped = r->dropped,
                                      .unclosed = r->unclosed,
                                      .late_steps = r->late,
                                      .late_first = r->late_first,
                                      .late_last = r->late_last,
                                      .late_caused = r->late_caused,
                                      .late_cpu = r->late_cpu};
        /* its late steps against those another rank was named late in, or held the others up
         * most in under RQ_LATE: the larger median of the two with a baseline (verdict.h) */
        if (r->hlate != NULL)
            vr[i].late_median = rq_hmedian(r->hlate, NULL, NULL, &n);
        vr[i].other_median =
            rq_hmedian(q->hall, r->hlate, r->hlate ? r->hlate + RQ_HB : NULL, &vr[i].other_steps);
        m = rq_hmedian(named, r->hlate, NULL, &n);
        if (n >= VERDICT_BASELINE &&
            (vr[i].other_steps < VERDICT_BASELINE || m > vr[i].other_median)) {
            vr[i].other_median = m;
            vr[i].other_steps = n;
        }
    }
}
