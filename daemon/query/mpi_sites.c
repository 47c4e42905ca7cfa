/*
 * mpi_sites — the report's MPI callsites (mpi_sites.h). A process sends its
 * sites with the most time first; the sum over processes is kept in an array
 * searched linearly by (offset, op, module): a job's processes run the same
 * binary, so the sites of all of them are about those of one (at most 256
 * each), and the search stays short.
 */
#include "mpi_sites.h"

#include "proto.h"
#include "sqlutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mpi_sites_read {
    struct mpi_sites *s;
    int64_t (*rank_of)(void *arg, int64_t id);
    void *arg;
};

static uint64_t sites_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Splits s at tabs into at most n fields (s is changed); the number found. */
static size_t sites_fields(char *s, char **f, size_t n)
{
    size_t k = 0;

    while (k < n) {
        f[k++] = s;
        if ((s = strchr(s, '\t')) == NULL)
            break;
        *s++ = '\0';
    }
    return k;
}

static bool sites_hex(const char *s, uint64_t *v)
{
    char *end;

    if (*s == '\0')
        return false;
    *v = strtoull(s, &end, 16);
    return *end == '\0';
}

/* A new site of op, symbol and module (f[0], f[6], f[7], copied); NULL: no memory. */
static struct mpi_site *sites_new(struct mpi_sites *s, char *const f[8], uint64_t off,
                                  uint64_t symoff)
{
    struct mpi_site *x;

    if (s->n == s->cap) {
        size_t cap = s->cap > 0 ? 2 * s->cap : 64;
        if ((x = realloc(s->v, cap * sizeof(*x))) == NULL)
            return NULL;
        s->v = x;
        s->cap = cap;
    }
    x = &s->v[s->n];
    memset(x, 0, sizeof(*x));
    x->op = strdup(f[0]);
    x->symbol = strdup(f[6]);
    x->module = strdup(f[7]);
    if (x->op == NULL || x->symbol == NULL || x->module == NULL) {
        free(x->op);
        free(x->symbol);
        free(x->module);
        return NULL;
    }
    x->offset = off;
    x->symbol_offset = symoff;
    s->n++;
    return x;
}

/*
 * One mpi.site.<i> of the process of rank rank: "op\tcalls\tns\tbytes\t
 * offset\tsymoff\tsymbol\tmodule", summed by site.
 */
static int sites_add_value(struct mpi_sites *s, const char *value, int64_t rank)
{
    uint64_t ns;
    char *copy = strdup(value), *f[8];
    struct mpi_site *x = NULL;
    uint64_t off, symoff;

    if (copy == NULL)
        return -ENOMEM;
    if (sites_fields(copy, f, 8) != 8 || !sites_hex(f[4], &off) || !sites_hex(f[5], &symoff)) {
        free(copy); /* not the interposer's */
        return 0;
    }
    for (size_t i = 0; i < s->n && x == NULL; i++)
        if (s->v[i].offset == off && strcmp(s->v[i].op, f[0]) == 0 &&
            strcmp(s->v[i].module, f[7]) == 0)
            x = &s->v[i];
    if (x == NULL && (x = sites_new(s, f, off, symoff)) == NULL) {
        free(copy);
        return -ENOMEM;
    }
    ns = strtoull(f[2], NULL, 10);
    if (x->ranks == 0 || ns < x->min_ns)
        x->min_ns = ns;
    if (x->ranks == 0 || ns > x->max_ns) {
        x->max_ns = ns;
        x->max_rank = rank;
    }
    x->calls = sites_add(x->calls, strtoull(f[1], NULL, 10));
    x->ns = sites_add(x->ns, ns);
    x->bytes = sites_add(x->bytes, strtoull(f[3], NULL, 10));
    x->ranks++;
    free(copy);
    return 0;
}

static uint64_t sites_u64(sqlite3_stmt *st, int col)
{
    int64_t v = sqlite3_column_int64(st, col);
    return v > 0 ? (uint64_t)v : 0;
}

static int sites_row(sqlite3_stmt *st, void *arg)
{
    struct mpi_sites_read *r = arg;
    struct mpi_sites *s = r->s;
    const char *key = (const char *)sqlite3_column_text(st, 1);
    int64_t rank = r->rank_of(r->arg, sqlite3_column_int64(st, 0));

    if (key == NULL || rank == MPI_SITES_NOT_COUNTED)
        return 0; /* a process a rank filter left out */
    if (strcmp(key, "mpi.sites") == 0) {
        s->unsent = sites_add(s->unsent, sites_u64(st, 2));
        return 0;
    }
    if (strcmp(key, "mpi.sites_lost") == 0) {
        s->lost = sites_add(s->lost, sites_u64(st, 2));
        return 0;
    }
    if (sqlite3_column_type(st, 2) != SQLITE_TEXT)
        return 0;
    if (s->unsent > 0) /* mpi.sites counted every site the process saw: this one was sent */
        s->unsent--;
    return sites_add_value(s, (const char *)sqlite3_column_text(st, 2), rank);
}

static int sites_by_time(const void *a, const void *b)
{
    const struct mpi_site *x = a, *y = b;

    if (x->ns != y->ns)
        return x->ns > y->ns ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return strcmp(x->op, y->op);
}

/*
 * A process's mpi.sites is read before its mpi.site.<i> rows (the ORDER BY),
 * so that each site it sent takes one off the count of those it did not.
 */
int mpi_sites_read(sqlite3 *db, int64_t (*rank_of)(void *arg, int64_t id), void *arg,
                   struct mpi_sites *out, char *err, size_t errlen)
{
    struct mpi_sites_read r = {.s = out, .rank_of = rank_of, .arg = arg};
    int rc;

    memset(out, 0, sizeof(*out));
    rc = sql_each(db,
                  "SELECT process_id, key, value FROM meta WHERE key GLOB 'mpi.site*'"
                  " ORDER BY process_id, key = 'mpi.sites' DESC, key",
                  sites_row, &r);
    if (rc < 0 && errlen > 0)
        snprintf(err, errlen, "report: mpi callsites: %s", strerror(-rc));
    else if (rc > 0 && errlen > 0)
        snprintf(err, errlen, "report: mpi callsites: %s", sqlite3_errmsg(db));
    if (rc != 0)
        return rc < 0 ? rc : sql_errno(rc);
    if (out->n > 1)
        qsort(out->v, out->n, sizeof(*out->v), sites_by_time);
    return 0;
}

static int sites_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return proto_pack_str(pk, k) < 0 || msgpack_pack_uint64(pk, v) != 0 ? -1 : 0;
}

static int sites_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    return proto_pack_str(pk, k) < 0 || proto_pack_str(pk, v) < 0 ? -1 : 0;
}

int mpi_sites_pack(msgpack_packer *pk, const struct mpi_sites *s, uint64_t mpi_ns)
{
    size_t n = s->n < MPI_SITES_MAX ? s->n : MPI_SITES_MAX;

    if (msgpack_pack_map(pk, 4) || sites_kv_u64(pk, "unsent", s->unsent) ||
        sites_kv_u64(pk, "lost_calls", s->lost) || sites_kv_u64(pk, "total", s->n) ||
        proto_pack_str(pk, "sites") < 0 || msgpack_pack_array(pk, n))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const struct mpi_site *x = &s->v[i];
        if (msgpack_pack_map(pk, 13) || sites_kv_str(pk, "op", x->op) ||
            sites_kv_str(pk, "module", x->module) || sites_kv_u64(pk, "offset", x->offset) ||
            sites_kv_str(pk, "symbol", x->symbol) ||
            sites_kv_u64(pk, "symbol_offset", x->symbol_offset) ||
            sites_kv_u64(pk, "ranks", x->ranks) || sites_kv_u64(pk, "calls", x->calls) ||
            sites_kv_u64(pk, "total_ns", x->ns) || sites_kv_u64(pk, "bytes", x->bytes) ||
            sites_kv_u64(pk, "min_ns", x->min_ns) || sites_kv_u64(pk, "max_ns", x->max_ns) ||
            proto_pack_str(pk, "max_rank") < 0 ||
            (x->max_rank >= 0 ? msgpack_pack_int64(pk, x->max_rank) : msgpack_pack_nil(pk)) ||
            proto_pack_str(pk, "mpi_share") < 0 ||
            msgpack_pack_double(pk, mpi_ns > 0 ? (double)x->ns / (double)mpi_ns : 0.0))
            return -1;
    }
    return 0;
}

void mpi_sites_free(struct mpi_sites *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].op);
        free(s->v[i].symbol);
        free(s->v[i].module);
    }
    free(s->v);
    memset(s, 0, sizeof(*s));
}
