/* verdict.c — the analysis' verdict in English; see verdict.h. */
#include "verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The paragraph being written: appends never overrun buf, and stop once it is full. */
struct vbuf {
    char *b;
    size_t n, len;
};

static void vb_add(struct vbuf *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void vb_add(struct vbuf *v, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (v->len + 1 >= v->n)
        return;
    va_start(ap, fmt);
    k = vsnprintf(v->b + v->len, v->n - v->len, fmt, ap);
    va_end(ap);
    if (k > 0)
        v->len = v->len + (size_t)k < v->n ? v->len + (size_t)k : v->n - 1;
}

void verdict_ns(char *b, size_t n, uint64_t ns)
{
    if (ns >= 1000000000ull)
        snprintf(b, n, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000)
        snprintf(b, n, "%.1f ms", (double)ns / 1e6);
    else if (ns >= 1000)
        snprintf(b, n, "%.1f µs", (double)ns / 1e3);
    else
        snprintf(b, n, "%llu ns", (unsigned long long)ns);
}

/* Appends lo..hi as "1.8 s", "1.8–1.9 s" (one unit), or "900.0 ms–1.10 s". */
static void vb_range(struct vbuf *v, uint64_t lo, uint64_t hi)
{
    char a[32], b[32];
    const char *ua, *ub;

    verdict_ns(a, sizeof(a), lo);
    verdict_ns(b, sizeof(b), hi);
    ua = strchr(a, ' ');
    ub = strchr(b, ' ');
    if (strcmp(a, b) == 0)
        vb_add(v, "%s", a);
    else if (ua != NULL && ub != NULL && strcmp(ua, ub) == 0)
        vb_add(v, "%.*s–%s", (int)(ua - a), a, b);
    else
        vb_add(v, "%s–%s", a, b);
}

/* Appends the ranks of in (those i with pick(i) true, but skip) as "0–4, 6". */
static size_t vb_ranks(struct vbuf *v, const struct verdict_in *in, size_t skip)
{
    size_t count = 0;

    for (size_t i = 0; i < in->n_ranks; i++) {
        size_t j = i;
        if (i == skip)
            continue;
        while (j + 1 < in->n_ranks && j + 1 != skip &&
               in->ranks[j + 1].rank == in->ranks[j].rank + 1)
            j++;
        if (j > i)
            vb_add(v, "%s%lld–%lld", count ? ", " : "", (long long)in->ranks[i].rank,
                   (long long)in->ranks[j].rank);
        else
            vb_add(v, "%s%lld", count ? ", " : "", (long long)in->ranks[i].rank);
        count += j - i + 1;
        i = j;
    }
    return count;
}

/* The mean of the ranks' step time: how long the run took, as the steps say. */
static uint64_t verdict_run(const struct verdict_in *in)
{
    unsigned __int128 sum = 0;

    for (size_t i = 0; i < in->n_ranks; i++)
        sum += in->ranks[i].step_ns;
    return in->n_ranks ? (uint64_t)(sum / in->n_ranks) : 0;
}

/* True when r's late steps held the others up no longer than noise does (verdict.h). */
static bool verdict_noise(const struct verdict_rank *r)
{
    if (r->other_steps < VERDICT_BASELINE)
        return false; /* no baseline */
    return (double)r->late_median < VERDICT_NOISE * (double)r->other_median;
}

/* True when r was the late rank of enough of the steps to be the job's, not a step's (verdict.h).
 */
static bool verdict_often(const struct verdict_in *in, const struct verdict_rank *r)
{
    return r->late_steps >= VERDICT_MIN_LATE &&
           (double)r->late_steps >= VERDICT_STEPS * (double)in->n_steps;
}

/* True when r's held-up time in its late steps is mostly its own wait for a CPU (verdict.h). */
static bool verdict_cpu(const struct verdict_rank *r)
{
    return r->late_caused > 0 && (double)r->late_cpu >= VERDICT_CPU * (double)r->late_caused;
}

/* The rank that stands out by every condition but the CPU's, or SIZE_MAX. */
static size_t verdict_standout(const struct verdict_in *in)
{
    size_t top = SIZE_MAX;
    uint64_t next = 0;

    if (in->n_ranks < 2)
        return SIZE_MAX;
    for (size_t i = 0; i < in->n_ranks; i++)
        if (top == SIZE_MAX || in->ranks[i].caused > in->ranks[top].caused)
            top = i;
    for (size_t i = 0; i < in->n_ranks; i++)
        if (i != top && in->ranks[i].caused > next)
            next = in->ranks[i].caused;
    if (in->ranks[top].caused == 0 || !verdict_often(in, &in->ranks[top]) ||
        (double)in->ranks[top].caused < VERDICT_RATIO * (double)next ||
        (double)in->ranks[top].caused < VERDICT_SHARE * (double)verdict_run(in) ||
        verdict_noise(&in->ranks[top]))
        return SIZE_MAX;
    return top;
}

size_t verdict_culprit(const struct verdict_in *in)
{
    size_t top = verdict_standout(in);

    return top != SIZE_MAX && !verdict_cpu(&in->ranks[top]) ? top : SIZE_MAX;
}

/* "no rank stands out (rank 1 was late in 9 steps, holding the others up for 161.2 ms, but
 * 140.0 ms of it was its wait for a CPU: more busy threads than CPUs)" */
static void verdict_cpu_bound(struct vbuf *v, const struct verdict_rank *r)
{
    char a[32], b[32];

    verdict_ns(a, sizeof(a), r->late_caused);
    verdict_ns(b, sizeof(b), r->late_cpu);
    vb_add(v,
           "no rank stands out (rank %lld was late in %llu steps, holding the others up for %s, "
           "but %s of it was its wait for a CPU: more busy threads than CPUs)",
           (long long)r->rank, (unsigned long long)r->late_steps, a, b);
}

/* "rank 2 held the others up for 1.80 s in steps 20–35; ranks 0, 1, 3 waited 1.8–1.9 s" */
static void verdict_lead(struct vbuf *v, const struct verdict_in *in, size_t c)
{
    const struct verdict_rank *r = &in->ranks[c];
    uint64_t lo = UINT64_MAX, hi = 0;
    char a[32];

    verdict_ns(a, sizeof(a), r->caused);
    vb_add(v, "rank %lld held the others up for %s", (long long)r->rank, a);
    if (r->late_steps > 0 && r->late_last - r->late_first + 1 == r->late_steps)
        vb_add(v, r->late_steps > 1 ? " in steps %llu–%llu" : " in step %llu",
               (unsigned long long)r->late_first, (unsigned long long)r->late_last);
    else if (r->late_steps > 0)
        vb_add(v, " in %llu steps between %llu and %llu", (unsigned long long)r->late_steps,
               (unsigned long long)r->late_first, (unsigned long long)r->late_last);
    for (size_t i = 0; i < in->n_ranks; i++) {
        if (i == c)
            continue;
        lo = in->ranks[i].waited < lo ? in->ranks[i].waited : lo;
        hi = in->ranks[i].waited > hi ? in->ranks[i].waited : hi;
    }
    vb_add(v, "; rank%s ", in->n_ranks > 2 ? "s" : "");
    vb_ranks(v, in, c);
    vb_add(v, " waited ");
    vb_range(v, lo, hi);
}

/* "no rank stands out (most caused: rank 1, 3.1 ms, 1.2 x the next; ...)" */
static void verdict_nobody(struct vbuf *v, const struct verdict_in *in)
{
    size_t top = 0;
    uint64_t next = 0;
    char a[32];

    if (in->instances == 0) {
        vb_add(v, "no rank stands out: no collective instance was matched");
        return;
    }
    if ((top = verdict_standout(in)) != SIZE_MAX) { /* named but for its wait for a CPU */
        verdict_cpu_bound(v, &in->ranks[top]);
        return;
    }
    top = 0;
    for (size_t i = 1; i < in->n_ranks; i++)
        if (in->ranks[i].caused > in->ranks[top].caused)
            top = i;
    for (size_t i = 0; i < in->n_ranks; i++)
        if (i != top && in->ranks[i].caused > next)
            next = in->ranks[i].caused;
    verdict_ns(a, sizeof(a), in->ranks[top].caused);
    vb_add(v, "no rank stands out (the most caused wait is rank %lld's %s",
           (long long)in->ranks[top].rank, a);
    if (next > 0)
        vb_add(v, ", %.1f × the next rank's", (double)in->ranks[top].caused / (double)next);
    vb_add(v,
           "; a rank is named at %.0f × the next rank's, %.0f %% of the run, late in %.0f %% of "
           "the steps, %d at least (rank %lld: %llu of %llu), and in its late steps %.0f × "
           "what other ranks held the others up in theirs",
           VERDICT_RATIO, VERDICT_SHARE * 100, VERDICT_STEPS * 100, VERDICT_MIN_LATE,
           (long long)in->ranks[top].rank, (unsigned long long)in->ranks[top].late_steps,
           (unsigned long long)in->n_steps, VERDICT_NOISE);
    if (in->ranks[top].late_steps > 0) {
        const struct verdict_rank *r = &in->ranks[top];
        char b[32];
        verdict_ns(a, sizeof(a), r->late_median);
        verdict_ns(b, sizeof(b), r->other_median);
        if (r->other_steps >= VERDICT_BASELINE)
            vb_add(v, ": %s against %s", a, b);
        else
            vb_add(v, ": %s, theirs too few to compare (%llu step%s)", a,
                   (unsigned long long)r->other_steps, r->other_steps == 1 ? "" : "s");
    }
    vb_add(v, ")");
}

/* (max - mean) / mean of v over the ranks, and the index of the max. */
static double verdict_imbalance(const uint64_t *v, size_t n, size_t *imax)
{
    unsigned __int128 sum = 0;
    double mean;

    *imax = 0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > v[*imax])
            *imax = i;
    }
    mean = n ? (double)sum / (double)n : 0;
    return mean > 0 ? ((double)v[*imax] - mean) / mean : 0;
}

/* One category's balance: nothing recorded is said as such, never "balanced". */
static void verdict_category(struct vbuf *v, const struct verdict_in *in, const char *what,
                             const uint64_t *vals)
{
    size_t imax;
    double imb = verdict_imbalance(vals, in->n_ranks, &imax);

    if (vals[imax] == 0) {
        vb_add(v, "; no %s recorded", what);
        return;
    }
    if (imb < VERDICT_BALANCED)
        vb_add(v, "; %s balanced (%+.0f %%)", what, imb * 100);
    else
        vb_add(v, "; %s imbalanced (%+.0f %%, rank %lld)", what, imb * 100,
               (long long)in->ranks[imax].rank);
}

/* Compute (with untracked time), communication, and the rank with the most untracked time. */
static void verdict_sides(struct vbuf *v, const struct verdict_in *in, uint64_t *vals)
{
    size_t most = 0;
    char a[32];

    for (size_t i = 0; i < in->n_ranks; i++)
        vals[i] = in->ranks[i].compute + (in->untracked_known ? in->ranks[i].untracked : 0);
    verdict_category(v, in, in->untracked_known ? "compute (with untracked time)" : "compute",
                     vals);
    for (size_t i = 0; i < in->n_ranks; i++)
        vals[i] = in->ranks[i].comm;
    verdict_category(v, in, "communication", vals);
    if (!in->untracked_known)
        return;
    for (size_t i = 1; i < in->n_ranks; i++)
        if (in->ranks[i].untracked > in->ranks[most].untracked)
            most = i;
    if (in->ranks[most].step_ns > 0 &&
        (double)in->ranks[most].untracked >= VERDICT_UNTRACKED * (double)in->ranks[most].step_ns) {
        verdict_ns(a, sizeof(a), in->ranks[most].untracked);
        vb_add(v, "; rank %lld spent %s (%.0f %% of its step time) in no recorded entry",
               (long long)in->ranks[most].rank, a,
               100.0 * (double)in->ranks[most].untracked / (double)in->ranks[most].step_ns);
    }
}

/* Missing ranks, ranks that ended without closing, dropped entries, inexact aggregates. */
static void verdict_gaps(struct vbuf *v, const struct verdict_in *in)
{
    size_t dropping = 0, unclosed = 0;

    if (in->missing > 0)
        vb_add(v, "; %llu of %llu ranks missing", (unsigned long long)in->missing,
               (unsigned long long)in->world);
    for (size_t i = 0; i < in->n_ranks; i++)
        unclosed += in->ranks[i].unclosed > 0;
    if (unclosed > 0) {
        vb_add(v, "; rank%s ", unclosed > 1 ? "s" : "");
        for (size_t i = 0, k = 0; i < in->n_ranks; i++)
            if (in->ranks[i].unclosed > 0)
                vb_add(v, "%s%lld", k++ ? ", " : "", (long long)in->ranks[i].rank);
        vb_add(v, " ended without closing (MPI_Abort, a crash, or no MPI_Finalize / tc_close?)");
    }
    for (size_t i = 0; i < in->n_ranks; i++)
        dropping += in->ranks[i].dropped > 0;
    if (dropping > 0) {
        vb_add(v, "; entries dropped on rank%s ", dropping > 1 ? "s" : "");
        for (size_t i = 0, k = 0; i < in->n_ranks; i++)
            if (in->ranks[i].dropped > 0)
                vb_add(v, "%s%lld", k++ ? ", " : "", (long long)in->ranks[i].rank);
        vb_add(v, ": figures about %s incomplete", dropping > 1 ? "them are" : "it are");
    }
    if (in->capped > 0)
        vb_add(v,
               "; %llu collective instances closed unfinished (over %llu open at once): counted "
               "partial",
               (unsigned long long)in->capped, (unsigned long long)in->open_cap);
    if (in->inexact)
        vb_add(v, "; collective figures inexact (the daemon lost their state mid-session: "
                  "tracectl classify rebuilds them)");
}

void verdict_text(const struct verdict_in *in, char *buf, size_t n)
{
    struct vbuf v = {buf, n, 0};
    size_t c;

    buf[0] = '\0';
    if (in->n_ranks == 0 || in->n_steps == 0) {
        /* info.ranks is written with the session's first commit, and every file of
         * INFO_SCHEMA_VERSION has it after that: absent means a live session before it. */
        vb_add(&v, "no rank aggregates%s.",
               in->absent ? " (none stored yet: the daemon writes them with the session's first "
                            "commit)"
                          : "");
        return;
    }
    vb_add(&v, "%zu rank%s: ", in->n_ranks, in->n_ranks == 1 ? "" : "s");
    if (in->n_ranks > 1 && (c = verdict_culprit(in)) != SIZE_MAX)
        verdict_lead(&v, in, c);
    else if (in->n_ranks > 1)
        verdict_nobody(&v, in);
    else
        vb_add(&v, "one rank, nobody to wait for");
    if (in->n_ranks > 1)
        verdict_sides(&v, in, in->scratch);
    verdict_gaps(&v, in);
    vb_add(&v, ".");
}
