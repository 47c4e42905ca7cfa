/*
 * onepass_inc.c — a batch decoded as its bytes arrive (onepass.h, struct onepass_inc): the
 * header, then the entries that are whole in the buffer (onepass_entry), in slices when the
 * reader takes them so, then what follows the entries. Pure functions over bytes.
 */
#include <stdio.h>
#include <stdlib.h>

#include "onepass_int.h"

int onepass_inc_begin(struct onepass_inc *s, const uint8_t *p, size_t avail)
{
    struct rd r = {p, p + avail, false};
    size_t k, last_n = s->last_n, last_blob = s->last_blob;
    struct val top, type, l;

    memset(s, 0, sizeof(*s));
    s->last_n = last_n;
    s->last_blob = last_blob;
    /* onepass_kind() saw the array header and the type "batch" whole */
    if (rd_next(&r, &top) < 0 || rd_next(&r, &type) < 0)
        return 0;
    if (top.n < 2)
        return -1;
    if (r.p == r.end)
        return 0;
    if (*r.p >= 0x90 && *r.p <= 0x9f)
        k = 1;
    else if (*r.p == 0xdc || *r.p == 0xdd)
        k = *r.p == 0xdc ? 3 : 5;
    else
        return -1; /* not an array: the scanner and onepass_batch() say what it is */
    if ((size_t)(r.end - r.p) < k)
        return 0;
    if (rd_next(&r, &l) < 0)
        return 0;
    if (l.n == 0)
        return -1;
    s->top_n = top.n;
    s->n = l.n;
    s->pos = (size_t)(r.p - p);
    return (int)s->pos;
}

/* The entries b holds once its part is decoded: the message's rest, within a slice's bound. */
static size_t inc_left(const struct onepass_inc *s)
{
    size_t left = s->n - s->base;

    return s->slice != 0 && s->slice < left ? s->slice : left;
}

/*
 * Room for entry s->b.n and more: first for as many as the bytes buffered
 * after it can hold (an entry takes five at least: its array header and four
 * values) or as the last batch taken whole had, then twice as many each time,
 * never more than decoded + bytes buffered (or the last batch's), nor than
 * announced. A peer's batches are mostly alike: most need no realloc.
 */
static int inc_grow(struct onepass_inc *s, size_t avail)
{
    size_t want = s->b.n + (avail - s->pos), ncap = s->b.cap ? 2 * s->b.cap : (avail - s->pos) / 5;
    size_t left = inc_left(s);
    struct proto_entry *e;

    if (ncap < 64)
        ncap = 64;
    if (s->b.cap == 0 && ncap < s->last_n)
        ncap = s->last_n;
    if (want < s->last_n)
        want = s->last_n;
    if (want > left)
        want = left;
    if (ncap > want)
        ncap = want;
    if ((e = realloc(s->b.entries, ncap * sizeof(*e))) == NULL)
        return -1;
    s->b.entries = e;
    s->b.cap = ncap;
    return 0;
}

int onepass_inc_step(struct onepass_inc *s, const uint8_t *p, size_t avail, size_t max_msg,
                     bool strict, struct proto_error *err)
{
    struct rd r = {p + s->pos, p + avail, strict};
    struct blob b = {s->b.blob, s->b.blob_len, s->b.blob_cap};

    /* room for as many bytes as the last batch's blob took (a peer's batches are alike), and
     * BLOB_SLACK */
    if (b.data == NULL && s->last_blob > 0 && (b.data = malloc(s->last_blob + BLOB_SLACK)) != NULL)
        b.alloc = s->last_blob + BLOB_SLACK;
    /* what the message needs at least after entry i: a byte for each element not started */
    uint64_t after = (uint64_t)s->n - 1 + (s->top_n - 2);
    int rc = ONEPASS_DONE;

    size_t left = inc_left(s);

    while (s->b.n < left) {
        uint32_t i = s->base + (uint32_t)s->b.n; /* the entry's number in the message */
        size_t mark = b.size;

        if (s->pos == avail) {
            rc = strict ? ONEPASS_STOP : cut_short(err);
            break;
        }
        if (s->b.n == s->b.cap && inc_grow(s, avail) < 0) {
            rc = strict ? ONEPASS_STOP : proto_fail(err, PROTO_E_INTERNAL, "out of memory");
            break;
        }
        rc = onepass_entry(&r, &b, &s->b.entries[s->b.n], err);
        if (rc == 0 && strict && (size_t)(r.p - p) + after - i > max_msg)
            rc = -1; /* the scanner finds where it no longer fits */
        if (rc < 0) {
            if (strict) {
                b.size = mark;
                rc = ONEPASS_STOP;
            } else if (err != NULL) {
                size_t k = strlen(err->message);
                snprintf(err->message + k, sizeof(err->message) - k, " (entry %u)", i);
            }
            break;
        }
        s->b.n++;
        s->pos = (size_t)(r.p - p);
        rc = ONEPASS_DONE;
    }
    s->b.blob = b.data;
    s->b.blob_len = b.size;
    s->b.blob_cap = b.alloc;
    return rc;
}

bool onepass_inc_cut(struct onepass_inc *s, struct proto_batch *out)
{
    s->base += (uint32_t)s->b.n;
    if (out != NULL) {
        *out = s->b;
        memset(&s->b, 0, sizeof(s->b));
    } else {
        s->b.n = 0; /* the arrays stay for the next slice */
        s->b.blob_len = 0;
    }
    return s->base == s->n;
}

int onepass_inc_finish(struct onepass_inc *s, const uint8_t *p, size_t avail,
                       struct proto_batch *out, size_t *len, struct proto_error *err)
{
    struct rd r = {p + s->pos, p + avail, false};
    struct val l;

    /* elements after the entries are not v1's: stepped over */
    for (uint32_t i = 2; i < s->top_n; i++) {
        if (rd_next(&r, &l) < 0 || onepass_skip_body(&r, &l) < 0) {
            onepass_inc_free(s);
            return cut_short(err);
        }
    }
    *out = s->b;
    *len = (size_t)(r.p - p);
    memset(s, 0, sizeof(*s));
    s->last_n = out->n;
    s->last_blob = out->blob_len;
    return 0;
}

void onepass_inc_free(struct onepass_inc *s)
{
    proto_batch_free(&s->b);
    memset(s, 0, sizeof(*s));
}
