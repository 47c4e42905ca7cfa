/*
 * fuzz_peerarr.c — libFuzzer target for the `arrivals` peer message decoder
 * (daemon/peer/peerarr_wire.c), which reads what another host sends: whatever the
 * bytes, decoding never reads out of bounds or leaks, and a message that
 * decodes re-encodes (peerarr_pack) into one that decodes to the same
 * arrivals, field by field.
 *
 * Input: a stream of peer messages, framed as the daemon frames a link's
 * bytes (peerframe.h, the peer limit): each whole message is tried.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peerarr.h"
#include "peerframe.h"
#include "peerlink.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_peerarr: invariant failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(const struct peerarr_msg *a, const struct peerarr_msg *b)
{
    CHECK(strcmp(a->session, b->session) == 0 && strcmp(a->host, b->host) == 0);
    CHECK(a->dropped == b->dropped && a->n == b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct peerarr_arrival *x = &a->arr[i], *y = &b->arr[i];
        CHECK(x->comm == y->comm && x->seq == y->seq && x->rank == y->rank);
        CHECK(x->enter_ns == y->enter_ns && x->exit_ns == y->exit_ns && x->bytes == y->bytes);
        CHECK(x->comm_size == y->comm_size);
        CHECK(x->rank >= 0 && x->enter_ns >= 0 && x->enter_ns <= x->exit_ns);
        CHECK(x->exit_ns <= PEERARR_TIME_MAX);
        CHECK(x->comm_size == 0 || (uint64_t)x->rank < x->comm_size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct peerframe f;
    const char *why;
    size_t len;
    char err[256];

    peerframe_init(&f, PEERLINK_MAX_MSG);
    CHECK(peerframe_push(&f, (const char *)data, size) == 0);
    while (peerframe_next(&f, &len, &why) == 1) {
        msgpack_unpacked u, v;
        struct peerarr_msg s, t;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        size_t off = 0;

        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, f.buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            peerarr_decode(&u.data, &s, err, sizeof(err)) != 0) {
            msgpack_unpacked_destroy(&u);
            peerframe_take(&f, len);
            continue;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        CHECK(peerarr_pack(&pk, s.session, s.host, s.dropped, s.arr, s.n) == 0);
        msgpack_unpacked_init(&v);
        CHECK(msgpack_unpack_next(&v, sb.data, sb.size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK(peerarr_decode(&v.data, &t, err, sizeof(err)) == 0);
        same(&s, &t);
        peerarr_msg_free(&s);
        peerarr_msg_free(&t);
        msgpack_unpacked_destroy(&v);
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&sb);
        peerframe_take(&f, len);
    }
    peerframe_deinit(&f);
    return 0;
}
