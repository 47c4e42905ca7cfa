/*
 * fuzz_peersnap.c — libFuzzer target for the `snapshot` peer message
 * decoder (daemon/peer/peersnap_wire.c), which reads what another host sends:
 * whatever the bytes, decoding never reads out of bounds or leaks, and a
 * snapshot that decodes re-encodes (peersnap_pack) into one that decodes to
 * the same snapshot, field by field, bucket by bucket and rank row by rank row.
 *
 * Input: a stream of peer messages, framed as the daemon frames a link's
 * bytes (peerframe.h, the peer limit): each whole message is tried.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peerframe.h"
#include "peerlink.h"
#include "peersnap.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_peersnap: invariant failed: %s (line %d)\n", #cond, __LINE__);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(const struct peersnap *a, const struct peersnap *b)
{
    CHECK(strcmp(a->session, b->session) == 0);
    CHECK(a->seq == b->seq && a->ended == b->ended && a->processes == b->processes);
    CHECK(a->sid == b->sid && a->started_ns == b->started_ns && a->ended_ns == b->ended_ns);
    CHECK(a->ranks == b->ranks && a->entries == b->entries && a->dropped == b->dropped);
    CHECK(a->total_ns == b->total_ns && a->span_ns == b->span_ns);
    CHECK(a->begin_ns == b->begin_ns && a->end_ns == b->end_ns);
    CHECK(a->peak_bytes == b->peak_bytes && a->total_bytes == b->total_bytes);
    CHECK(a->n_ops == b->n_ops && a->n_devs == b->n_devs);
    for (size_t i = 0; i < a->n_ops; i++) {
        const struct peersnap_op *x = &a->ops[i], *y = &b->ops[i];
        CHECK(strcmp(x->op, y->op) == 0 && strcmp(x->category, y->category) == 0);
        CHECK(x->calls == y->calls && x->total_ns == y->total_ns && x->min_ns == y->min_ns);
        CHECK(x->max_ns == y->max_ns && x->mem_bytes == y->mem_bytes);
        CHECK(x->elements == y->elements && x->n_hist == y->n_hist);
        CHECK(x->n_hist == 0 || memcmp(x->hist, y->hist, x->n_hist * sizeof(*x->hist)) == 0);
    }
    CHECK(a->n_slowest == b->n_slowest && a->n_hotspots == b->n_hotspots);
    for (size_t k = 0; k < 2; k++) {
        const struct peersnap_entry *x = k ? a->hotspots : a->slowest;
        const struct peersnap_entry *y = k ? b->hotspots : b->slowest;
        for (size_t i = 0; i < (k ? a->n_hotspots : a->n_slowest); i++) {
            CHECK(strcmp(x[i].op, y[i].op) == 0 && x[i].rank == y[i].rank);
            CHECK((x[i].device == NULL) == (y[i].device == NULL));
            CHECK(x[i].device == NULL || strcmp(x[i].device, y[i].device) == 0);
            CHECK(x[i].step == y[i].step && x[i].start_ns == y[i].start_ns);
            CHECK(x[i].dur_ns == y[i].dur_ns && x[i].mem_bytes == y[i].mem_bytes);
        }
    }
    CHECK(a->n_rank_rows == b->n_rank_rows && a->ranks_cut == b->ranks_cut);
    for (size_t i = 0; i < a->n_rank_rows; i++) {
        const struct ranks_row *x = &a->rank_rows[i], *y = &b->rank_rows[i];
        CHECK(x->rank == y->rank && x->processes == y->processes && x->dropped == y->dropped);
        CHECK(x->steps == y->steps && x->step_ns == y->step_ns && x->total_ns == y->total_ns);
        CHECK(x->compute_ns == y->compute_ns && x->comm_ns == y->comm_ns);
        CHECK(x->memory_ns == y->memory_ns && x->wait_ns == y->wait_ns);
        CHECK(x->other_ns == y->other_ns && x->exposed_comm_ns == y->exposed_comm_ns);
        CHECK(x->collectives == y->collectives && x->waited_ns == y->waited_ns);
        CHECK(x->arrived_last == y->arrived_last && x->caused_ns == y->caused_ns);
        CHECK(x->slowest_steps == y->slowest_steps && x->late_steps == y->late_steps);
        CHECK(x->late_first_step == y->late_first_step && x->late_last_step == y->late_last_step);
        CHECK(x->untracked_known == y->untracked_known && x->untracked_ns == y->untracked_ns);
        CHECK(x->cpu_wait_ns == y->cpu_wait_ns && x->step_mean_ns == y->step_mean_ns);
        CHECK(memcmp(&x->comm_share, &y->comm_share, sizeof(double)) == 0);
        /* what the decoder promises of every row it takes */
        CHECK(x->comm_share >= 0 && x->comm_share <= 1 && x->late_steps <= x->steps);
        CHECK(i == 0 || a->rank_rows[i - 1].rank < x->rank);
    }
    for (size_t i = 0; i < a->n_devs; i++) {
        CHECK(strcmp(a->devs[i].device, b->devs[i].device) == 0);
        CHECK(a->devs[i].calls == b->devs[i].calls && a->devs[i].total_ns == b->devs[i].total_ns);
        CHECK(a->devs[i].mem_bytes == b->devs[i].mem_bytes);
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
        struct peersnap s, t;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        size_t off = 0;

        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, f.buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            peersnap_decode(&u.data, &s, err, sizeof(err)) != 0) {
            msgpack_unpacked_destroy(&u);
            peerframe_take(&f, len);
            continue;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        CHECK(peersnap_pack(&pk, &s) == 0);
        msgpack_unpacked_init(&v);
        CHECK(msgpack_unpack_next(&v, sb.data, sb.size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK(peersnap_decode(&v.data, &t, err, sizeof(err)) == 0);
        same(&s, &t);
        peersnap_free(&s);
        peersnap_free(&t);
        msgpack_unpacked_destroy(&v);
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&sb);
        peerframe_take(&f, len);
    }
    peerframe_deinit(&f);
    return 0;
}
