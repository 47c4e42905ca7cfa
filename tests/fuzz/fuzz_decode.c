/*
 * fuzz_decode.c — libFuzzer target for the wire-format decoder (proto/).
 *
 * The input is fed to a proto_reader in two reads (split where the first
 * byte says), as a connection would deliver it. Every message that decodes
 * is re-encoded with the proto_pack_* functions and decoded again; the two
 * decoded messages must be equal (decode → re-encode → decode is stable).
 * The re-encoded bytes must also pass a reader whose limit is exactly their
 * size and fail one whose limit is a byte less (the streaming size bound is
 * exact). The whole input also goes through proto_decode_bytes(). Crashes,
 * sanitizer reports and failed invariants abort.
 *
 * Two decoders, one answer: batches are decoded in one pass over the bytes
 * (proto/onepass.c) and every message can also go through msgpack-c's object
 * tree (proto_decode_bytes_tree(), a reader with .tree set). The input is fed
 * to a reader of each kind, split alike, and decoded whole both ways; the two
 * must give the same return, the same error code and message, and the same
 * message (a batch's entries and blob byte for byte), or the target aborts.
 * A reader that slices batches (proto_reader_set_slice, 3 entries) must give
 * the same answers too, a larger batch as consecutive slices of its entries.
 *
 *   scripts/fuzz.sh [SECONDS]    builds with clang -fsanitize=fuzzer and runs it
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_decode: invariant failed: %s (line %d)\n", #cond, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool str_eq(const char *a, const char *b)
{
    /* An absent string and an empty one re-encode alike (error code, message). */
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static bool kv_eq(const struct proto_kv *a, const struct proto_kv *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!str_eq(a[i].key, b[i].key) || a[i].type != b[i].type)
            return false;
        if ((a[i].type == PROTO_V_STR && !str_eq(a[i].v.s, b[i].v.s)) ||
            (a[i].type == PROTO_V_INT && a[i].v.i != b[i].v.i) ||
            (a[i].type == PROTO_V_BOOL && a[i].v.b != b[i].v.b) ||
            (a[i].type == PROTO_V_FLOAT && memcmp(&a[i].v.f, &b[i].v.f, sizeof(double)) != 0))
            return false;
    }
    return true;
}

/* n bytes at a+i and b+j are equal (a batch without shapes has no blob at all). */
static bool part_eq(const char *a, uint32_t i, const char *b, uint32_t j, uint32_t n)
{
    return n == 0 || memcmp(a + i, b + j, n) == 0;
}

static bool batch_eq(const struct proto_batch *a, const struct proto_batch *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        const struct proto_entry *x = &a->entries[i], *y = &b->entries[i];
        if (x->step != y->step || x->op_id != y->op_id || x->start_ns != y->start_ns ||
            x->dur_ns != y->dur_ns || x->elements != y->elements || x->mem_bytes != y->mem_bytes ||
            x->out_len != y->out_len || x->in_len != y->in_len || x->dev_len != y->dev_len ||
            !part_eq(a->blob, x->out_off, b->blob, y->out_off, x->out_len) ||
            !part_eq(a->blob, x->in_off, b->blob, y->in_off, x->in_len) ||
            !part_eq(a->blob, x->dev_off, b->blob, y->dev_off, x->dev_len) ||
            x->ext_len != y->ext_len ||
            !part_eq(a->blob, x->ext_off, b->blob, y->ext_off, x->ext_len))
            return false;
    }
    return true;
}

static bool msg_eq(const struct proto_msg *a, const struct proto_msg *b)
{
    const struct proto_hello *h = &a->u.hello, *k = &b->u.hello;

    if (a->type != b->type)
        return false;
    switch (a->type) {
    case PROTO_HELLO:
        return h->proto == k->proto && str_eq(h->session, k->session) && h->rank == k->rank &&
               h->world == k->world && h->pid == k->pid && (h->host == NULL) == (k->host == NULL) &&
               str_eq(h->host, k->host) && str_eq(h->device, k->device) && h->n_meta == k->n_meta &&
               kv_eq(h->meta, k->meta, h->n_meta);
    case PROTO_OPS:
        if (a->u.ops.n != b->u.ops.n)
            return false;
        for (size_t i = 0; i < a->u.ops.n; i++)
            if (a->u.ops.defs[i].id != b->u.ops.defs[i].id ||
                !str_eq(a->u.ops.defs[i].name, b->u.ops.defs[i].name) ||
                !str_eq(a->u.ops.defs[i].category, b->u.ops.defs[i].category))
                return false;
        return true;
    case PROTO_BATCH:
        return batch_eq(&a->u.batch, &b->u.batch);
    case PROTO_META:
        return a->u.meta.n == b->u.meta.n && kv_eq(a->u.meta.kv, b->u.meta.kv, a->u.meta.n);
    case PROTO_FLUSH:
        return a->u.flush_seq == b->u.flush_seq;
    case PROTO_BYE:
        return a->u.bye_dropped == b->u.bye_dropped;
    case PROTO_SESSIONS:
    case PROTO_STATUS:
        return true;
    case PROTO_REPORT:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_LIVE:
        return a->u.req.session.id == b->u.req.session.id &&
               str_eq(a->u.req.session.name, b->u.req.session.name) &&
               a->u.req.by_start == b->u.req.by_start && a->u.req.by_rank == b->u.req.by_rank &&
               a->u.req.late == b->u.req.late &&
               (a->type != PROTO_REPORT ||
                (a->u.req.top == b->u.req.top && a->u.req.mem_threshold == b->u.req.mem_threshold &&
                 a->u.req.comm_min_ratio == b->u.req.comm_min_ratio));
    case PROTO_WELCOME:
        return a->u.welcome.session_id == b->u.welcome.session_id &&
               a->u.welcome.process_id == b->u.welcome.process_id;
    case PROTO_ACK:
        return a->u.ack.seq == b->u.ack.seq && a->u.ack.stored == b->u.ack.stored;
    case PROTO_ERROR:
        return str_eq(a->u.error.code, b->u.error.code) &&
               str_eq(a->u.error.message, b->u.error.message);
    default:
        return true;
    }
}

/* A batch the same byte for byte: entries (offsets included) and blob. */
static bool batch_same(const struct proto_batch *a, const struct proto_batch *b)
{
    if (a->n != b->n || a->blob_len != b->blob_len ||
        (a->blob_len > 0 && memcmp(a->blob, b->blob, a->blob_len) != 0))
        return false;
    for (size_t i = 0; i < a->n; i++) {
        const struct proto_entry *x = &a->entries[i], *y = &b->entries[i];
        if (x->step != y->step || x->op_id != y->op_id || x->start_ns != y->start_ns ||
            x->dur_ns != y->dur_ns || x->elements != y->elements || x->mem_bytes != y->mem_bytes ||
            x->out_off != y->out_off || x->out_len != y->out_len || x->in_off != y->in_off ||
            x->in_len != y->in_len || x->dev_off != y->dev_off || x->dev_len != y->dev_len ||
            x->ext_off != y->ext_off || x->ext_len != y->ext_len)
            return false;
    }
    return true;
}

/* The one-pass decoder (a) and the object tree (b) gave the same answer. */
static void same_answer(int ra, const struct proto_msg *a, const struct proto_error *ea, int rb,
                        const struct proto_msg *b, const struct proto_error *eb)
{
    if (ra != rb ||
        (ra < 0 && (strcmp(ea->code, eb->code) != 0 || strcmp(ea->message, eb->message) != 0))) {
        fprintf(stderr, "fuzz_decode: one pass: %d %s: %s\nfuzz_decode: object tree: %d %s: %s\n",
                ra, ra < 0 ? ea->code : "", ra < 0 ? ea->message : "", rb, rb < 0 ? eb->code : "",
                rb < 0 ? eb->message : "");
        abort();
    }
    if (ra >= 0) { /* a message (PROTO_NONE when a reader needs more bytes) */
        CHECK(msg_eq(a, b));
        CHECK(a->type != PROTO_BATCH || batch_same(&a->u.batch, &b->u.batch));
    }
}

/*
 * The input through a one-pass reader and a tree reader in two reads split at
 * `split`: each step's answer the same, up to the first error.
 */
static void differential_reader(const uint8_t *data, size_t size, size_t split)
{
    struct proto_reader r[2];
    struct proto_error err[2];
    struct proto_msg m[2];
    int rc[2] = {0, 0};

    if (proto_reader_init(&r[0], 1 << 16) < 0)
        return;
    if (proto_reader_init(&r[1], 1 << 16) < 0) {
        proto_reader_deinit(&r[0]);
        return;
    }
    r[1].tree = true;
    for (int part = 0; part < 2 && rc[0] >= 0; part++) {
        const uint8_t *p = part ? data + split : data;
        size_t n = part ? size - split : split;
        for (int k = 0; k < 2; k++) {
            char *buf = proto_reader_buffer(&r[k], n ? n : 1);
            CHECK(buf != NULL);
            memcpy(buf, p, n);
            proto_reader_commit(&r[k], n);
        }
        do {
            memset(m, 0, sizeof(m));
            for (int k = 0; k < 2; k++)
                rc[k] = proto_reader_next(&r[k], &m[k], &err[k]);
            same_answer(rc[0], &m[0], &err[0], rc[1], &m[1], &err[1]);
            if (rc[0] == 1) {
                proto_msg_free(&m[0]);
                proto_msg_free(&m[1]);
            }
        } while (rc[0] == 1);
    }
    proto_reader_deinit(&r[0]);
    proto_reader_deinit(&r[1]);
}

/* Entry i of a and entry j of b hold the same values, blob parts compared by their bytes. */
static bool entry_same(const struct proto_batch *a, size_t i, const struct proto_batch *b, size_t j)
{
    const struct proto_entry *x = &a->entries[i], *y = &b->entries[j];

    /* lengths first: part_eq reads that many bytes of each */
    return x->step == y->step && x->op_id == y->op_id && x->start_ns == y->start_ns &&
           x->dur_ns == y->dur_ns && x->elements == y->elements && x->mem_bytes == y->mem_bytes &&
           x->out_len == y->out_len && x->in_len == y->in_len && x->dev_len == y->dev_len &&
           x->ext_len == y->ext_len &&
           part_eq(a->blob, x->out_off, b->blob, y->out_off, x->out_len) &&
           part_eq(a->blob, x->in_off, b->blob, y->in_off, x->in_len) &&
           part_eq(a->blob, x->dev_off, b->blob, y->dev_off, x->dev_len) &&
           part_eq(a->blob, x->ext_off, b->blob, y->ext_off, x->ext_len);
}

#define FUZZ_SLICE 3

/*
 * The input through a reader that returns batches whole and one that slices
 * them (proto_reader_set_slice, FUZZ_SLICE entries), split alike: the same
 * answers, a batch of more entries coming as consecutive slices of at most
 * FUZZ_SLICE whose entries are the whole batch's, in order.
 */
static void differential_sliced(const uint8_t *data, size_t size, size_t split)
{
    struct proto_reader w, sl;
    struct proto_error ew, es;
    struct proto_msg mw, ms;
    int rw = 0, rs;

    if (proto_reader_init(&w, 1 << 16) < 0)
        return;
    if (proto_reader_init(&sl, 1 << 16) < 0) {
        proto_reader_deinit(&w);
        return;
    }
    proto_reader_set_slice(&sl, FUZZ_SLICE);
    for (int part = 0; part < 2 && rw >= 0; part++) {
        const uint8_t *p = part ? data + split : data;
        size_t n = part ? size - split : split;
        struct proto_reader *r[2] = {&w, &sl};
        for (int k = 0; k < 2; k++) {
            char *buf = proto_reader_buffer(r[k], n ? n : 1);
            CHECK(buf != NULL);
            memcpy(buf, p, n);
            proto_reader_commit(r[k], n);
        }
        do {
            memset(&mw, 0, sizeof(mw));
            memset(&ms, 0, sizeof(ms));
            rw = proto_reader_next(&w, &mw, &ew);
            rs = proto_reader_next(&sl, &ms, &es);
            if (rw != 1 || mw.type != PROTO_BATCH || mw.u.batch.n <= FUZZ_SLICE) {
                same_answer(rw, &mw, &ew, rs, &ms, &es);
            } else {
                size_t got = 0;
                for (;;) {
                    CHECK(rs == 1 && ms.type == PROTO_BATCH);
                    CHECK(ms.u.batch.n ==
                          (mw.u.batch.n - got < FUZZ_SLICE ? mw.u.batch.n - got : FUZZ_SLICE));
                    for (size_t i = 0; i < ms.u.batch.n; i++)
                        CHECK(entry_same(&mw.u.batch, got + i, &ms.u.batch, i));
                    got += ms.u.batch.n;
                    proto_msg_free(&ms);
                    memset(&ms, 0, sizeof(ms)); /* freed: the free below is a no-op */
                    if (got == mw.u.batch.n)
                        break;
                    rs = proto_reader_next(&sl, &ms, &es);
                }
            }
            if (rw == 1) {
                proto_msg_free(&mw);
                proto_msg_free(&ms);
            }
        } while (rw == 1);
    }
    proto_reader_deinit(&w);
    proto_reader_deinit(&sl);
}

static void differential_bytes(const uint8_t *data, size_t size)
{
    struct proto_error err[2];
    struct proto_msg m[2];
    int rc[2];

    rc[0] = proto_decode_bytes((const char *)data, size, &m[0], &err[0]);
    rc[1] = proto_decode_bytes_tree((const char *)data, size, &m[1], &err[1]);
    same_answer(rc[0], &m[0], &err[0], rc[1], &m[1], &err[1]);
    proto_msg_free(&m[0]);
    proto_msg_free(&m[1]);
}

/* Re-encodes m; false for the types whose payload is not decoded (ok, rows, end). */
static bool encode(msgpack_packer *pk, const struct proto_msg *m)
{
    switch (m->type) {
    case PROTO_HELLO:
        return proto_pack_hello(pk, &m->u.hello) == 0;
    case PROTO_OPS:
        return proto_pack_ops(pk, m->u.ops.defs, m->u.ops.n) == 0;
    case PROTO_BATCH:
        return proto_pack_batch(pk, &m->u.batch) == 0;
    case PROTO_META:
        return proto_pack_meta(pk, m->u.meta.kv, m->u.meta.n) == 0;
    case PROTO_FLUSH:
        return proto_pack_flush(pk, m->u.flush_seq) == 0;
    case PROTO_BYE:
        return proto_pack_bye(pk, m->u.bye_dropped) == 0;
    case PROTO_SESSIONS:
    case PROTO_REPORT:
    case PROTO_STATUS:
    case PROTO_DELETE:
    case PROTO_EXPORT:
    case PROTO_LIVE:
        return proto_pack_request(pk, m->type, &m->u.req) == 0;
    case PROTO_WELCOME:
        if (m->u.welcome.process_id < 0) {
            /* absent in the input: leave it absent */
            msgpack_pack_array(pk, 2);
            proto_pack_str(pk, "welcome");
            msgpack_pack_map(pk, 1);
            proto_pack_str(pk, "session_id");
            return msgpack_pack_int64(pk, m->u.welcome.session_id) == 0;
        }
        return proto_pack_welcome(pk, m->u.welcome.session_id, m->u.welcome.process_id) == 0;
    case PROTO_ACK:
        return proto_pack_ack(pk, m->u.ack.seq, m->u.ack.stored) == 0;
    case PROTO_ERROR:
        return proto_pack_error(pk, m->u.error.code ? m->u.error.code : "",
                                m->u.error.message ? m->u.error.message : "") == 0;
    default:
        return false;
    }
}

/*
 * The reader's size bound is exact: the re-encoded bytes go through a reader
 * whose limit is their size (taken, and equal to m) and one byte less (refused
 * with too_large), in two reads split at `split`.
 */
static void bound_is_exact(const struct proto_msg *m, const char *buf, size_t len, size_t split)
{
    for (size_t limit = len; limit + 1 >= len && limit > 0; limit--) {
        struct proto_reader r;
        struct proto_error err = {0};
        struct proto_msg again;
        int rc = 0;

        if (proto_reader_init(&r, limit) < 0)
            return;
        for (int part = 0; part < 2 && rc == 0; part++) {
            size_t off = part ? split : 0, n = part ? len - split : split;
            char *dst = proto_reader_buffer(&r, n ? n : 1);
            CHECK(dst != NULL);
            memcpy(dst, buf + off, n);
            proto_reader_commit(&r, n);
            rc = proto_reader_next(&r, &again, &err);
        }
        if (limit == len) {
            if (rc != 1)
                fprintf(stderr, "fuzz_decode: %zu bytes refused at a limit of %zu: %s: %s\n", len,
                        limit, err.code, err.message);
            CHECK(rc == 1);
            CHECK(msg_eq(m, &again));
            proto_msg_free(&again);
        } else {
            CHECK(rc == -EMSGSIZE && strcmp(err.code, PROTO_E_TOO_LARGE) == 0);
        }
        proto_reader_deinit(&r);
    }
}

static void round_trip(const struct proto_msg *m, size_t split)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_msg again;
    struct proto_error err;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (encode(&pk, m)) {
        int rc = proto_decode_bytes(sb.data, sb.size, &again, &err);
        if (rc != 0)
            fprintf(stderr, "fuzz_decode: re-encoded %s does not decode: %s: %s\n",
                    proto_type_name(m->type), err.code, err.message);
        CHECK(rc == 0);
        CHECK(msg_eq(m, &again));
        proto_msg_free(&again);
        bound_is_exact(m, sb.data, sb.size, split % (sb.size + 1));
    }
    msgpack_sbuffer_destroy(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    size_t split = size ? data[0] % (size + 1) : 0;
    int rc;

    if (proto_reader_init(&r, 1 << 16) < 0)
        return 0;
    for (int part = 0; part < 2; part++) {
        const uint8_t *p = part ? data + split : data;
        size_t n = part ? size - split : split;
        char *buf = proto_reader_buffer(&r, n ? n : 1);
        if (buf == NULL)
            break;
        memcpy(buf, p, n);
        proto_reader_commit(&r, n);
        while ((rc = proto_reader_next(&r, &m, &err)) == 1) {
            round_trip(&m, split);
            proto_msg_free(&m);
        }
        if (rc < 0) {
            CHECK(err.code != NULL && err.message[0] != '\0');
            break;
        }
    }
    proto_reader_deinit(&r);
    differential_reader(data, size, split);
    differential_sliced(data, size, split);
    differential_bytes(data, size);
    if (proto_decode_bytes((const char *)data, size, &m, &err) == 0) {
        round_trip(&m, split);
        proto_msg_free(&m);
    }
    return 0;
}
