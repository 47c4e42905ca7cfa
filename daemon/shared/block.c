/* block.c — see block.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"

enum {
    F_PROC = 0x01,  /* process_id differs from the previous entry's */
    F_STEP = 0x02,  /* step differs */
    F_OP = 0x04,    /* op_id differs */
    F_DEV = 0x08,   /* device_id differs */
    F_ELEM = 0x10,  /* elements is not NULL */
    F_MEM = 0x20,   /* mem_bytes is not 0 */
    F_SHAPE = 0x40, /* shape_id differs */
    F_ALL = 0x7f,
};

static uint64_t zigzag(uint64_t delta)
{
    return (delta << 1) ^ (uint64_t) - (int64_t)(delta >> 63);
}

static uint64_t unzigzag(uint64_t v)
{
    return (v >> 1) ^ (uint64_t) - (int64_t)(v & 1);
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* The difference cur - prev of two int64, wrapping, zigzagged. */
static uint8_t *put_delta(uint8_t *p, int64_t cur, int64_t prev)
{
    return put_varint(p, zigzag((uint64_t)cur - (uint64_t)prev));
}

void block_enc_init(struct block_enc *b)
{
    memset(b, 0, sizeof(*b));
}

void block_enc_deinit(struct block_enc *b)
{
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

void block_enc_reset(struct block_enc *b)
{
    b->len = 0;
    b->n = 0;
    memset(&b->prev, 0, sizeof(b->prev));
    memset(&b->stats, 0, sizeof(b->stats));
    memset(b->restart, 0, sizeof(b->restart));
}

uint32_t block_restarts(uint32_t n)
{
    return (n + BLOCK_RESTART - 1) / BLOCK_RESTART;
}

static void stats_add(struct block_stats *s, const struct block_entry *e, bool first)
{
    if (first) {
        s->min_start = s->max_start = e->start_ns;
        s->min_proc = s->max_proc = e->process_id;
    }
    if (e->start_ns < s->min_start)
        s->min_start = e->start_ns;
    if (e->start_ns > s->max_start)
        s->max_start = e->start_ns;
    if (e->process_id < s->min_proc)
        s->min_proc = e->process_id;
    if (e->process_id > s->max_proc)
        s->max_proc = e->process_id;
    s->proc_mask |= (uint64_t)1 << ((uint64_t)e->process_id & 63);
    s->op_mask |= (uint64_t)1 << ((uint64_t)e->op_id & 63);
}

int block_enc_add(struct block_enc *b, const struct block_entry *e)
{
    const struct block_entry *pv = &b->prev;
    uint8_t flags = 0, *p;

    if (b->n >= BLOCK_ENTRIES)
        return -ENOSPC;
    if (b->cap - b->len < BLOCK_ENTRY_MAX) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        uint8_t *buf = realloc(b->buf, cap);
        if (buf == NULL)
            return -ENOMEM;
        b->buf = buf;
        b->cap = cap;
    }
    if (b->n % BLOCK_RESTART == 0) {
        memset(&b->prev, 0, sizeof(b->prev)); /* a restart: deltas from zero */
        b->restart[b->n / BLOCK_RESTART] = (uint32_t)b->len;
    }
    p = b->buf + b->len + 1;
    if (e->process_id != pv->process_id) {
        flags |= F_PROC;
        p = put_delta(p, e->process_id, pv->process_id);
    }
    if (e->step != pv->step) {
        flags |= F_STEP;
        p = put_delta(p, e->step, pv->step);
    }
    if (e->op_id != pv->op_id) {
        flags |= F_OP;
        p = put_delta(p, e->op_id, pv->op_id);
    }
    if (e->device_id != pv->device_id) {
        flags |= F_DEV;
        p = put_delta(p, e->device_id, pv->device_id);
    }
    p = put_delta(p, e->start_ns, pv->start_ns);
    p = put_varint(p, (uint64_t)e->dur_ns);
    if (e->has_elements) {
        flags |= F_ELEM;
        p = put_varint(p, (uint64_t)e->elements);
    }
    if (e->mem_bytes != 0) {
        flags |= F_MEM;
        p = put_varint(p, (uint64_t)e->mem_bytes);
    }
    if (e->shape_id != pv->shape_id) {
        flags |= F_SHAPE;
        p = put_delta(p, e->shape_id, pv->shape_id);
    }
    b->buf[b->len] = flags;
    b->len = (size_t)(p - b->buf);
    stats_add(&b->stats, e, b->n == 0);
    b->prev = *e;
    b->n++;
    return 0;
}

int block_enc_load(struct block_enc *b, const void *data, size_t len, uint32_t n)
{
    struct block_dec d;
    struct block_entry e;
    int rc;

    block_enc_reset(b);
    if (n > BLOCK_ENTRIES)
        return -EINVAL;
    block_dec_init(&d, data, len, n);
    while ((rc = block_dec_next(&d, &e)) == 1)
        if (block_enc_add(b, &e) < 0)
            return -ENOMEM;
    if (rc < 0) {
        block_enc_reset(b);
        return -EINVAL;
    }
    return 0;
}

void block_dec_init(struct block_dec *d, const void *data, size_t len, uint32_t n)
{
    d->start = d->p = data;
    d->end = len > 0 ? d->p + len : d->p; /* data may be NULL when empty (an empty blob) */
    d->n = n;
    d->index = 0;
    memset(&d->prev, 0, sizeof(d->prev));
}

int block_dec_seek(struct block_dec *d, uint32_t k, uint32_t off)
{
    if (k >= block_restarts(d->n) || off >= (size_t)(d->end - d->start))
        return -1;
    d->p = d->start + off;
    d->index = k * BLOCK_RESTART;
    memset(&d->prev, 0, sizeof(d->prev));
    return 0;
}

/* A varint of at most 10 bytes (64 bits) within the block; false past its end or too long. */
static bool get_varint(struct block_dec *d, uint64_t *v)
{
    uint64_t x = 0;

    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t c;
        if (d->p >= d->end)
            return false;
        c = *d->p++;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) {
            *v = x;
            return true;
        }
    }
    return false;
}

static bool get_delta(struct block_dec *d, int64_t prev, int64_t *v)
{
    uint64_t z;

    if (!get_varint(d, &z))
        return false;
    *v = (int64_t)((uint64_t)prev + unzigzag(z));
    return true;
}

int block_dec_next(struct block_dec *d, struct block_entry *e)
{
    const struct block_entry *pv = &d->prev;
    uint64_t u;
    uint8_t flags;

    if (d->index >= d->n)
        return d->p == d->end ? 0 : -1;
    if (d->index % BLOCK_RESTART == 0)
        memset(&d->prev, 0, sizeof(d->prev)); /* a restart */
    if (d->p >= d->end || ((flags = *d->p++) & ~F_ALL) != 0)
        return -1;
    *e = *pv;
    if ((flags & F_PROC) && !get_delta(d, pv->process_id, &e->process_id))
        return -1;
    if ((flags & F_STEP) && !get_delta(d, pv->step, &e->step))
        return -1;
    if ((flags & F_OP) && !get_delta(d, pv->op_id, &e->op_id))
        return -1;
    if ((flags & F_DEV) && !get_delta(d, pv->device_id, &e->device_id))
        return -1;
    if (!get_delta(d, pv->start_ns, &e->start_ns) || !get_varint(d, &u))
        return -1;
    e->dur_ns = (int64_t)u;
    e->has_elements = (flags & F_ELEM) != 0;
    e->elements = 0;
    if (e->has_elements) {
        if (!get_varint(d, &u))
            return -1;
        e->elements = (int64_t)u;
    }
    e->mem_bytes = 0;
    if (flags & F_MEM) {
        if (!get_varint(d, &u))
            return -1;
        e->mem_bytes = (int64_t)u;
    }
    if ((flags & F_SHAPE) && !get_delta(d, pv->shape_id, &e->shape_id))
        return -1;
    d->prev = *e;
    d->index++;
    return 1;
}
