/*
 * test_session.c — daemon/loop/session.c's shape interning (session_shape): the
 * cache in front of the session's strmap gives each distinct pair of shapes
 * the id the strmap alone gives it, whatever the layout of the pair's bytes.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "session.h"

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

#define PAIRS    700
#define MAX_SIDE 40

struct pair {
    uint8_t out[MAX_SIDE], in[MAX_SIDE];
    uint32_t out_len, in_len;
    uint32_t id; /* expected: the rank of its first lookup among distinct pairs, from 1 */
};

/* The reference: pairs are the same when out_len, out and in are (the strmap's key). */
static bool pair_same(const struct pair *a, const struct pair *b)
{
    return a->out_len == b->out_len && a->in_len == b->in_len &&
           memcmp(a->out, b->out, a->out_len) == 0 && memcmp(a->in, b->in, a->in_len) == 0;
}

/*
 * 40 000 lookups of 700 pairs, 1..40 bytes a side or none (out and in
 * together over the cache's 48-byte slots too), pairs that differ in their
 * last byte only or only where out ends and in starts, each looked up by
 * several ops and in every layout (out and in adjacent, apart, one of them
 * empty): the id of each is the one a table of the pairs seen gives.
 */
Test(session, shape_ids_whatever_the_cache)
{
    static struct pair pairs[PAIRS];
    static uint8_t run[2 * MAX_SIDE + 16], apart_out[MAX_SIDE + 8], apart_in[MAX_SIDE + 8];
    struct session s;
    uint32_t next_id = 1;

    memset(&s, 0, sizeof(s));
    strmap_init(&s.shapes);
    for (size_t i = 0; i < PAIRS; i++) {
        struct pair *p = &pairs[i];
        if (i > 0 && i % 7 == 0) { /* the last one with its last byte changed */
            *p = pairs[i - 1];
            if (p->in_len > 0)
                p->in[p->in_len - 1] ^= 1;
            else
                p->out[p->out_len - 1] ^= 1;
        } else if (i > 0 && i % 7 == 3 && pairs[i - 1].out_len > 1) { /* split one byte earlier */
            *p = pairs[i - 1];
            memmove(p->in + 1, p->in, p->in_len < MAX_SIDE ? p->in_len : MAX_SIDE - 1);
            p->in[0] = p->out[--p->out_len];
            if (p->in_len < MAX_SIDE)
                p->in_len++;
        } else {
            p->out_len = (uint32_t)(rnd() % 5 == 0 ? 0 : 1 + rnd() % MAX_SIDE);
            p->in_len = (uint32_t)(rnd() % 4 == 0 ? 0 : 1 + rnd() % (rnd() % 3 ? 12 : MAX_SIDE));
            if (p->out_len + p->in_len == 0)
                p->out_len = 1;
            for (uint32_t k = 0; k < p->out_len; k++)
                p->out[k] = (uint8_t)(rnd() % 4); /* few values: many near twins */
            for (uint32_t k = 0; k < p->in_len; k++)
                p->in[k] = (uint8_t)(rnd() % 4);
        }
        p->id = 0;
    }
    for (size_t n = 0; n < 40000; n++) {
        struct pair *p = &pairs[rnd() % (n < 2000 ? 50 : PAIRS)];
        uint32_t op = (uint32_t)(rnd() % 3), id = 0, layout = (uint32_t)(rnd() % 3);
        const char *out, *in;

        if (p->id == 0) { /* its first lookup: a new id, unless a twin had one */
            for (size_t j = 0; j < PAIRS && p->id == 0; j++)
                if (pairs[j].id != 0 && pair_same(&pairs[j], p))
                    p->id = pairs[j].id;
            if (p->id == 0)
                p->id = next_id++;
        }
        if (layout == 0) { /* one run, as the decoder's blob has them */
            memcpy(run + 3, p->out, p->out_len);
            memcpy(run + 3 + p->out_len, p->in, p->in_len);
            out = (const char *)run + 3;
            in = out + p->out_len;
        } else { /* apart, at odd offsets */
            memcpy(apart_out + layout, p->out, p->out_len);
            memcpy(apart_in + 5, p->in, p->in_len);
            out = (const char *)apart_out + layout;
            in = (const char *)apart_in + 5;
        }
        cr_assert_eq(session_shape(&s, op, out, p->out_len, in, p->in_len, &id), 0);
        cr_assert_eq(id, p->id, "lookup %zu: pair %zu (%u + %u bytes, layout %u): id %u, not %u", n,
                     (size_t)(p - pairs), p->out_len, p->in_len, layout, id, p->id);
    }
    cr_assert_eq(s.shapes.len, next_id - 1);
    free(s.shape_cache);
    strmap_deinit(&s.shapes);
}

/* No shapes: id 0, nothing interned. */
Test(session, shape_none)
{
    struct session s;
    uint32_t id = 7;

    memset(&s, 0, sizeof(s));
    strmap_init(&s.shapes);
    cr_assert_eq(session_shape(&s, 1, "", 0, "", 0, &id), 0);
    cr_assert_eq(id, 0);
    cr_assert_eq(s.shapes.len, 0);
    strmap_deinit(&s.shapes);
}
