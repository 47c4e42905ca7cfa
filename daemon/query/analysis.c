/*
 * analysis — the C post-processing of a report (see analysis.h).
 *
 * Everything here is a pure function: integer arithmetic where PROTOCOL.md
 * asks for exact figures (ranks, floors, rounding), doubles only for shares
 * and the imbalance ratio, which the report carries as floats.
 */
#include "analysis.h"
#include "proto_class.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* PROTOCOL.md "Analysis rules": substrings of a lower-cased op name (communication: proto_class.h).
 */
static const char *const analysis_memory_words[] = {"memcpy", "memset"};

size_t analysis_percentile_rank(size_t n, unsigned p)
{
    size_t q = n / 100, r = n % 100, rank;

    if (n == 0)
        return 0;
    if (p > 100)
        p = 100;
    /*
     * n = 100q + r, so ceil(p * n / 100) = p * q + ceil(p * r / 100): no
     * product exceeds n, and no float rounding can move the rank (with
     * doubles 0.95 * 20 is 19.000000000000004, whose ceiling is 20).
     */
    rank = (size_t)p * q + ((size_t)p * r + 99) / 100;
    return rank < 1 ? 1 : rank;
}

uint64_t analysis_percentile(const uint64_t *sorted, size_t n, unsigned p)
{
    if (n == 0)
        return 0;
    return sorted[analysis_percentile_rank(n, p) - 1];
}

static bool analysis_contains_any(const char *name, const char *const *words, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (proto_class_contains(name, words[i]))
            return true;
    }
    return false;
}

const char *analysis_classify(const char *name)
{
    size_t nmem = UTIL_ARRAY_LEN(analysis_memory_words);

    if (name == NULL)
        return "compute";
    if (proto_class_comm(name, false))
        return "comm";
    if (analysis_contains_any(name, analysis_memory_words, nmem))
        return "memory";
    return "compute";
}

bool analysis_is_comm(const char *category)
{
    return category != NULL && strcmp(category, "comm") == 0;
}

double analysis_share(uint64_t part, uint64_t whole)
{
    return whole == 0 ? 0.0 : (double)part / (double)whole;
}

/* True when row a is the slower device: larger total, ties to the smaller name. */
static bool analysis_slower(const struct report_device *a, const struct report_device *b)
{
    if (a->total_ns != b->total_ns)
        return a->total_ns > b->total_ns;
    return strcmp(a->device, b->device) < 0;
}

void analysis_imbalance(const struct report_device *rows, size_t n, struct report_imbalance *out)
{
    const struct report_device *slowest;
    unsigned __int128 total = 0; /* n rows of at most INT64_MAX each: cannot wrap */
    double ideal;

    memset(out, 0, sizeof(*out));
    if (n < 2)
        return;
    slowest = &rows[0];
    for (size_t i = 0; i < n; i++) {
        total += rows[i].total_ns;
        if (i > 0 && analysis_slower(&rows[i], slowest))
            slowest = &rows[i];
    }
    out->present = true;
    out->devices = n;
    /* The reported total saturates like every sum (PROTOCOL.md Part 2); the
     * ideal and the ratio use the exact one. */
    out->total_ns = total > INT64_MAX ? INT64_MAX : (uint64_t)total;
    out->ideal_ns = (uint64_t)(total / n);
    out->max_ns = slowest->total_ns;
    out->slowest_device = slowest->device;
    if (total == 0)
        return;
    ideal = (double)total / (double)n;
    out->ratio = ((double)out->max_ns - ideal) / ideal;
    if (out->ratio < 0.0)
        out->ratio = 0.0;
}

static int analysis_op_cmp(const void *pa, const void *pb)
{
    const struct report_op *a = pa, *b = pb;

    if (a->total_ns != b->total_ns)
        return a->total_ns > b->total_ns ? -1 : 1;
    return strcmp(a->op, b->op);
}

void analysis_sort_ops(struct report_op *ops, size_t n)
{
    if (n > 1)
        qsort(ops, n, sizeof(*ops), analysis_op_cmp);
}
