/*
 * tcrecord.c — the recording calls, on the program's threads: tc_begin,
 * tc_end, tc_record(_ext), tc_defer/tc_finalize, steps and nested regions
 * (tc_push/tc_pop). Each appends records to this thread's ring
 * (tcring.c) without a lock; an offline client only counts.
 */
#include <stdlib.h>

#include "tcint.h"

/*
 * Whether op is one this client defined with tc_op (ids 1..n_ops_pub). The
 * daemon answers any other (0, what tc_op returns on failure, or an id never
 * handed out) with unknown_op and ends the connection, losing everything
 * after it: such an entry is refused at the call (op_refused).
 */
static inline bool op_known(tc_client *c, uint32_t op)
{
    return op - 1u < atomic_load_explicit(&c->n_ops_pub, memory_order_relaxed);
}

void tcrecord_op_add(tc_client *c, uint32_t op, uint64_t calls, uint64_t ns, uint64_t bytes,
                     bool counted)
{
    struct op_drop *chunk;
    uint32_t i = op - 1;

    if (c == NULL || op == 0 || i >= DROP_CHUNK * DROP_CHUNKS ||
        (chunk = atomic_load_explicit(&c->drops[i / DROP_CHUNK], memory_order_acquire)) == NULL)
        return;
    chunk += i % DROP_CHUNK;
    atomic_fetch_add_explicit(&chunk->calls, calls, memory_order_relaxed);
    atomic_fetch_add_explicit(&chunk->ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&chunk->bytes, bytes, memory_order_relaxed);
    if (!counted)
        return;
    atomic_fetch_add_explicit(&chunk->counted, calls, memory_order_relaxed);
    atomic_fetch_add_explicit(&chunk->counted_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&chunk->counted_bytes, bytes, memory_order_relaxed);
}

void tcrecord_op_dropped(tc_client *c, uint32_t op, uint64_t dur, bool ticks, uint64_t bytes)
{
    if (ticks) /* a tc_begin/tc_end duration in TSC ticks, at the calibrated rate */
        dur = (uint64_t)((double)dur * c->tick_ns);
    /* A figure out of the protocol's range (the entry was refused for it) is no time. */
    if (dur > INT64_MAX)
        dur = 0;
    if (bytes > INT64_MAX)
        bytes = 0;
    tcrecord_op_add(c, op, 1, dur, bytes, false);
}

/* A total as the protocol takes it: 0 .. INT64_MAX, saturating (PROTOCOL.md Part 2). */
static uint64_t sat(uint64_t v)
{
    return v > INT64_MAX ? INT64_MAX : v;
}

size_t tcrecord_op_drops(tc_client *c, struct proto_opdrop **rows)
{
    uint32_t n_ops = atomic_load_explicit(&c->n_ops_pub, memory_order_acquire);
    size_t n = 0, cap = 0;
    struct proto_opdrop *r = NULL, *grown;

    for (uint32_t i = 0; i < n_ops && i < DROP_CHUNK * DROP_CHUNKS; i++) {
        struct op_drop *chunk =
            atomic_load_explicit(&c->drops[i / DROP_CHUNK], memory_order_acquire);
        struct op_drop *d = chunk != NULL ? &chunk[i % DROP_CHUNK] : NULL;
        uint64_t calls;

        if (d == NULL || (calls = atomic_load_explicit(&d->calls, memory_order_relaxed)) == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            if ((grown = realloc(r, cap * sizeof(*r))) == NULL)
                break; /* out of memory: the rows so far */
            r = grown;
        }
        r[n++] = (struct proto_opdrop){
            i + 1,
            sat(calls),
            sat(atomic_load_explicit(&d->ns, memory_order_relaxed)),
            sat(atomic_load_explicit(&d->bytes, memory_order_relaxed)),
            sat(atomic_load_explicit(&d->counted, memory_order_relaxed)),
            sat(atomic_load_explicit(&d->counted_ns, memory_order_relaxed)),
            sat(atomic_load_explicit(&d->counted_bytes, memory_order_relaxed))};
        /* a row counted while another thread adds may be ahead of its calls: never above */
        if (r[n - 1].counted > r[n - 1].calls)
            r[n - 1].counted = r[n - 1].calls;
    }
    *rows = r;
    return n;
}

/*
 * An entry that never reaches a ring: recorded (tc_recorded counts rejected)
 * and dropped.
 */
static void refused(tc_client *c)
{
    atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
}

/* An entry naming an op the client never defined: dropped, counted, and said why. */
static __attribute__((noinline, cold)) void op_refused(tc_client *c, uint32_t op, const char *call)
{
    refused(c);
    if (op == 0)
        tcclient_refuse("%s: op 0 is no op (tc_op's answer for a name it refused); the entry is "
                        "dropped",
                        call);
    else
        tcclient_refuse("%s: op %u was never defined on this client (it defined %u); the entry "
                        "is dropped",
                        call, op, atomic_load(&c->n_ops_pub));
}

/*
 * Appends an entry, after a step marker when the client's step moved since
 * this thread's last record. An op the client never defined is refused
 * (op_known): the entry is dropped and counted.
 */
static __attribute__((noinline)) bool record_marker(tc_client *c, struct ring *r, uint64_t step)
{
    struct rec *rec;

    if ((rec = ring_slot(c, r)) == NULL)
        return false;
    rec->start = step;
    rec->op = 0;
    atomic_store_explicit(&r->marks, atomic_load_explicit(&r->marks, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    ring_commit(r);
    r->step = step;
    return true;
}

/* Inlined into the recording calls; what is rare (a new step, a full ring) is not. */
static inline __attribute__((always_inline)) void record(tc_client *c, struct ring *r, uint32_t op,
                                                         uint64_t start, uint64_t dur, uint64_t mem,
                                                         uint32_t shapes, uint32_t dev)
{
    uint64_t step = atomic_load_explicit(&c->step, memory_order_relaxed);
    struct rec *rec;

    if (!op_known(c, op)) {
        op_refused(c, op, "tc_record");
        return;
    }
    if ((step != r->step && !record_marker(c, r, step)) || (rec = ring_slot(c, r)) == NULL) {
        tcrecord_op_dropped(c, op, dur, (shapes & REC_TICKS) != 0, mem);
        return;
    }
    rec->start = start;
    rec->dur = dur;
    rec->mem = mem;
    rec->op = op;
    rec->shapes = (uint16_t)shapes;
    rec->dev = (uint16_t)dev;
    ring_commit(r);
}

/*
 * An offline client keeps no ring: it only counts the entries it would have
 * recorded. tc_begin (opens) and tc_end (!opens) both end this thread's open
 * op, which is one dropped entry. A thread switching between two offline
 * clients forgets the other's open op (uncounted, as with my_ring's cache).
 */
static void offline_drop(tc_client *c)
{
    /* recorded (tc_recorded counts rejected for an offline client) and dropped */
    atomic_fetch_add_explicit(&c->dropped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
}

static void offline_mark(tc_client *c, bool opens)
{
    if (tcring_tls.off_gen == c->gen && tcring_tls.off_open)
        offline_drop(c);
    tcring_tls.off_gen = c->gen;
    tcring_tls.off_open = opens;
}

void tc_begin_(tc_client *c, uint32_t op)
{
    struct ring *r;
    uint64_t now;

    if (c == NULL)
        return;
    if (c->disabled) { /* an offline client is disabled too */
        if (c->offline)
            offline_mark(c, true);
        return;
    }
    if ((r = my_ring(c)) == NULL)
        return;
    now = rec_now(c);
    if (r->open)
        record(c, r, r->cur_op, r->cur_start, now - r->cur_start, 0, c->clock, 0);
    if (!op_known(c, op)) {
        op_refused(c, op, "tc_begin");
        r->open = false; /* the tc_end that follows has nothing to end */
        return;
    }
    r->open = true;
    r->cur_op = op;
    r->cur_start = now;
}

void tc_end_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    struct ring *r;
    uint32_t shapes;
    uint64_t now;

    if (c == NULL)
        return;
    if (c->disabled) {
        if (c->offline)
            offline_mark(c, false);
        return;
    }
    if ((r = my_ring(c)) == NULL || !r->open)
        return;
    now = rec_now(c);
    shapes = shape_intern(c, out, in, n_in);
    record(c, r, r->cur_op, r->cur_start, now - r->cur_start, mem_bytes, shapes | c->clock, 0);
    r->open = false;
}

void tc_record_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns, uint64_t mem_bytes,
                const tc_shape *out, const tc_shape *in, size_t n_in, const char *device)
{
    struct ring *r;
    uint32_t shapes, dev = 0;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (device != NULL && *device)
        dev = tcnames_device(c, r, device);
    shapes = shape_intern(c, out, in, n_in);
    record(c, r, op, start_ns, dur_ns, mem_bytes, shapes, dev);
}

/*
 * record() for an entry with elements or ext fields: the record flagged
 * REC_EXT and its two rec_ext slots (three with links), published with one
 * store of head.
 */
static void record_ext(tc_client *c, struct ring *r, const struct rec *e, uint64_t elements,
                       const tc_ext *x)
{
    uint64_t step = atomic_load_explicit(&c->step, memory_order_relaxed), head, marks;
    unsigned slots = x != NULL && (x->has & TC_EXT_THIRD) ? 4 : 3;
    struct rec_ext *x0, *x1;
    struct rec *rec;

    if (!op_known(c, e->op)) {
        op_refused(c, e->op, "tc_record_ext");
        return;
    }
    if (!tcring_reserve(c, r, step != r->step ? slots + 1 : slots)) {
        tcrecord_op_dropped(c, e->op, e->dur, (e->shapes & REC_TICKS) != 0, e->mem);
        return;
    }
    head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (step != r->step) {
        rec = &r->buf[head++ & r->mask];
        rec->start = step;
        rec->op = 0;
        r->step = step;
    }
    rec = &r->buf[head & r->mask];
    rec->start = e->start;
    rec->dur = e->dur;
    rec->mem = e->mem;
    rec->op = e->op;
    rec->shapes = (uint16_t)(e->shapes | REC_EXT);
    rec->dev = e->dev;
    x0 = (struct rec_ext *)(void *)&r->buf[(head + 1) & r->mask];
    x1 = (struct rec_ext *)(void *)&r->buf[(head + 2) & r->mask];
    x0->w[0] = elements;
    x0->w[1] = x != NULL ? x->stream : 0;
    x0->w[2] = x != NULL ? x->peer : 0;
    x0->w[3] = x != NULL ? x->comm : 0;
    x1->w[0] = x != NULL ? x->seq : 0;
    x1->w[1] = x != NULL ? x->checksum : 0;
    x1->w[2] = x != NULL ? (uint64_t)x->tag : 0;
    x1->w[3] = x != NULL ? (x->has & TC_EXT_KNOWN) : 0;
    if (slots == 4) {
        struct rec_ext *x2 = (struct rec_ext *)(void *)&r->buf[(head + 3) & r->mask];
        x2->w[0] = (x->has & TC_EXT_ID) ? x->id : 0;
        x2->w[1] = (x->has & TC_EXT_PARENT) ? x->parent : 0;
        x2->w[2] = (x->has & TC_EXT_COMM_SIZE) ? x->comm_size : 0;
        x2->w[3] = (x->has & TC_EXT_SPAN) ? x->span : 0;
    }
    /* tc_recorded counts head minus marks: the step marker and the ext slots are not
     * entries. */
    marks = head + slots - atomic_load_explicit(&r->head, memory_order_relaxed) - 1;
    atomic_store_explicit(&r->marks, atomic_load_explicit(&r->marks, memory_order_relaxed) + marks,
                          memory_order_relaxed);
    atomic_store_explicit(&r->head, head + slots, memory_order_release);
}

/*
 * tc_record_ext_ past its shortcut to tc_record_ for an entry with nothing
 * extended; ticks: start and dur are TSC ticks (REC_TICKS: the writer
 * converts them as tc_begin's).
 */
static void record_ext_clock(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                             bool ticks, uint64_t mem_bytes, uint64_t elements, const tc_shape *out,
                             const tc_shape *in, size_t n_in, const char *device, const tc_ext *ext)
{
    struct rec e = {.start = start_ns, .dur = dur_ns, .mem = mem_bytes, .op = op};
    struct ring *r;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if ((elements > INT64_MAX && elements != TC_ELEMENTS_NONE) ||
        (ext != NULL && (ext->has & TC_EXT_COMM_SIZE) &&
         (ext->comm_size == 0 || ext->comm_size > INT32_MAX))) {
        /* The daemon refuses it (PROTOCOL.md Parts 2, 3) and would close the connection. */
        refused(c);
        tcrecord_op_dropped(c, op_known(c, op) ? op : 0, dur_ns, ticks, mem_bytes);
        return;
    }
    if (device != NULL && *device) {
        uint32_t dev = tcnames_device(c, r, device);
        if (dev == 0)
            return;
        e.dev = (uint16_t)dev;
    }
    e.shapes = (uint16_t)(shape_intern(c, out, in, n_in) | (ticks ? REC_TICKS : 0));
    record_ext(c, r, &e, elements, ext);
}

void tc_record_ext_(tc_client *c, uint32_t op, uint64_t start_ns, uint64_t dur_ns,
                    uint64_t mem_bytes, uint64_t elements, const tc_shape *out, const tc_shape *in,
                    size_t n_in, const char *device, const tc_ext *ext)
{
    if ((ext == NULL || (ext->has & TC_EXT_KNOWN) == 0) && elements == TC_ELEMENTS_NONE) {
        tc_record_(c, op, start_ns, dur_ns, mem_bytes, out, in, n_in, device);
        return;
    }
    record_ext_clock(c, op, start_ns, dur_ns, false, mem_bytes, elements, out, in, n_in, device,
                     ext);
}

void tcrecord_ext_clock(tc_client *c, uint32_t op, uint64_t start, uint64_t dur, bool ticks,
                        uint64_t mem_bytes, uint64_t elements, const tc_ext *ext)
{
    record_ext_clock(c, op, start, dur, ticks && c != NULL && c->clock != 0, mem_bytes, elements,
                     NULL, NULL, 0, NULL, ext);
}

void tc_defer(tc_client *c, uint32_t op)
{
    struct ring *r;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (!op_known(c, op)) {
        op_refused(c, op, "tc_defer");
        return;
    }
    if (r->deferred == NULL && (r->deferred = malloc(DEFER_MAX * sizeof(*r->deferred))) == NULL)
        return;
    if (r->n_deferred == DEFER_MAX) {
        refused(c);
        tcrecord_op_dropped(c, op, 0, false, 0); /* never timed: a call, no time */
        return;
    }
    r->deferred[r->n_deferred].op = op;
    r->deferred[r->n_deferred++].start = now_ns();
}

void tc_finalize(tc_client *c, uint64_t end_ns)
{
    struct ring *r;

    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    for (size_t i = 0; i < r->n_deferred; i++) {
        uint64_t start = r->deferred[i].start;
        record(c, r, r->deferred[i].op, start, end_ns > start ? end_ns - start : 0, 0, 0, 0);
    }
    r->n_deferred = 0;
}

void tc_step(tc_client *c)
{
    if (c != NULL && !c->disabled)
        atomic_fetch_add_explicit(&c->step, 1, memory_order_relaxed);
}

void tc_set_step(tc_client *c, uint64_t step)
{
    if (c != NULL && !c->disabled)
        atomic_store_explicit(&c->step, step, memory_order_relaxed);
}

/* ---- nested regions (tc_push / tc_pop) ---------------------------------------- */

/*
 * Kept apart from tc_begin/tc_end, which they do not slow: a region is
 * recorded through tc_record_ext_() with its links, and ids are handed out
 * lazily, only to a region that gets a region inside it, so that a region
 * with nothing around it and nothing in it is a plain one-slot entry.
 */

uint64_t tc_region_id(tc_client *c)
{
    if (c == NULL || c->disabled)
        return 0;
    return atomic_fetch_add_explicit(&c->region_ids, 1, memory_order_relaxed) + 1;
}

void tc_push_(tc_client *c, uint32_t op)
{
    struct region *reg;
    struct ring *r;

    if (c != NULL && c->offline)
        offline_drop(c);
    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL)
        return;
    if (r->regions == NULL && (r->regions = malloc(REGION_MAX * sizeof(*r->regions))) == NULL) {
        refused(c);
        return;
    }
    if (r->n_regions++ >= REGION_MAX) {
        refused(c);
        return; /* tc_pop drops it without recording */
    }
    reg = &r->regions[r->n_regions - 1];
    reg->op = op;
    reg->has_parent = r->n_regions > 1;
    reg->id = 0;
    reg->parent = 0;
    if (reg->has_parent) {
        struct region *outer = reg - 1;
        if (outer->id == 0)
            outer->id = tc_region_id(c);
        reg->parent = outer->id;
    }
    reg->start = now_ns();
}

void tc_pop_(tc_client *c, uint64_t mem_bytes, const tc_shape *out, const tc_shape *in, size_t n_in)
{
    uint64_t end = now_ns();
    struct region *reg;
    struct ring *r;
    tc_ext x = {0};

    if (c == NULL || c->disabled || (r = my_ring(c)) == NULL || r->n_regions == 0)
        return;
    if (r->n_regions-- > REGION_MAX)
        return; /* counted as dropped by its tc_push */
    reg = &r->regions[r->n_regions];
    x.has = (reg->id ? TC_EXT_ID : 0) | (reg->has_parent ? TC_EXT_PARENT : 0);
    x.id = reg->id;
    x.parent = reg->parent;
    tc_record_ext_(c, reg->op, reg->start, end - reg->start, mem_bytes, TC_ELEMENTS_NONE, out, in,
                   n_in, NULL, &x);
}
