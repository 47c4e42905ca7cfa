/*
 * cli_bars — step time bars in the terminal (see cli_bars.h).
 */
#include "cli_bars.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_obj.h"

static const char *const cli_bars_glyphs[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};

static bool cli_bars_enabled;
static const msgpack_object *cli_bars_steps; /* the report's steps, borrowed */
static uint64_t cli_bars_lo, cli_bars_hi;    /* their shortest and longest step time */

void cli_bars_set(bool no_bars, bool json)
{
    cli_bars_enabled = !no_bars && !json && isatty(STDOUT_FILENO);
}

bool cli_bars_on(void)
{
    return cli_bars_enabled;
}

static const char *cli_bars_glyph(uint64_t v, uint64_t lo, uint64_t hi)
{
    if (hi <= lo || v >= hi)
        return cli_bars_glyphs[7];
    if (v <= lo)
        return cli_bars_glyphs[0];
    return cli_bars_glyphs[(size_t)((double)(v - lo) * 7.0 / (double)(hi - lo) + 0.5)];
}

size_t cli_bars_line(char *buf, size_t size, const uint64_t *v, size_t n, uint64_t lo, uint64_t hi,
                     size_t width)
{
    size_t used = 0, glyphs = 0, groups = n < width ? n : width;

    if (size == 0)
        return 0;
    buf[0] = '\0';
    for (size_t g = 0; g < groups; g++) {
        /* group g holds figures [g*n/groups, (g+1)*n/groups): all of them, none twice */
        size_t a = g * n / groups, b = (g + 1) * n / groups;
        uint64_t max = v[a];
        const char *s;

        for (size_t i = a + 1; i < b; i++)
            max = v[i] > max ? v[i] : max;
        s = cli_bars_glyph(max, lo, hi);
        if (used + strlen(s) + 1 > size)
            break;
        memcpy(buf + used, s, strlen(s) + 1);
        used += strlen(s);
        glyphs++;
    }
    return glyphs;
}

/* Calls fn(rank, ns) for each [rank, ns, ...] of a step row's times_ns; stops when it returns
 * false. */
static void cli_bars_times(const msgpack_object *step, bool (*fn)(uint64_t, uint64_t, void *),
                           void *arg)
{
    const msgpack_object *t = cli_obj_get(step, "times_ns");

    if (t == NULL || t->type != MSGPACK_OBJECT_ARRAY)
        return;
    for (uint32_t i = 0; i < t->via.array.size; i++) {
        const msgpack_object *p = &t->via.array.ptr[i];
        uint64_t rank, ns;

        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size < 2 ||
            cli_obj_u64(&p->via.array.ptr[0], &rank) != 0 ||
            cli_obj_u64(&p->via.array.ptr[1], &ns) != 0)
            continue;
        if (!fn(rank, ns, arg))
            return;
    }
}

static bool cli_bars_range(uint64_t rank, uint64_t ns, void *arg)
{
    bool *first = arg;

    (void)rank;
    if (*first || ns < cli_bars_lo)
        cli_bars_lo = ns;
    if (*first || ns > cli_bars_hi)
        cli_bars_hi = ns;
    *first = false;
    return true;
}

void cli_bars_report(const msgpack_object *steps)
{
    bool first = true;

    cli_bars_steps = steps != NULL && steps->type == MSGPACK_OBJECT_ARRAY ? steps : NULL;
    cli_bars_lo = cli_bars_hi = 0;
    for (uint32_t i = 0; cli_bars_steps != NULL && i < steps->via.array.size; i++)
        cli_bars_times(&steps->via.array.ptr[i], cli_bars_range, &first);
}

/* Collects figures into a growing array; for a rank's bar, only that rank's. */
struct cli_bars_acc {
    uint64_t *v;
    size_t n, cap;
    bool one_rank;
    uint64_t rank;
    bool failed;
};

static bool cli_bars_add(uint64_t rank, uint64_t ns, void *arg)
{
    struct cli_bars_acc *a = arg;

    if (a->one_rank && rank != a->rank)
        return true;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        uint64_t *v = realloc(a->v, cap * sizeof(*v));
        if (v == NULL) {
            a->failed = true;
            return false;
        }
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = ns;
    return !a->one_rank; /* a rank has one time per step */
}

static void cli_bars_cell(struct cli_bars_acc *a, char *buf, size_t size)
{
    if (a->failed || a->n == 0)
        snprintf(buf, size, "-");
    else
        cli_bars_line(buf, size, a->v, a->n, cli_bars_lo, cli_bars_hi, CLI_BARS_WIDTH);
    free(a->v);
}

void cli_bars_rank_cell(const msgpack_object *row, char *buf, size_t size)
{
    struct cli_bars_acc a = {NULL, 0, 0, true, 0, false};

    if (cli_obj_u64(cli_obj_get(row, "rank"), &a.rank) != 0 || cli_bars_steps == NULL) {
        snprintf(buf, size, "-");
        return;
    }
    for (uint32_t i = 0; i < cli_bars_steps->via.array.size && !a.failed; i++)
        cli_bars_times(&cli_bars_steps->via.array.ptr[i], cli_bars_add, &a);
    cli_bars_cell(&a, buf, size);
}

void cli_bars_step_cell(const msgpack_object *row, char *buf, size_t size)
{
    struct cli_bars_acc a = {NULL, 0, 0, false, 0, false};

    cli_bars_times(row, cli_bars_add, &a);
    cli_bars_cell(&a, buf, size);
}
