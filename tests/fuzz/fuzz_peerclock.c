/*
 * fuzz_peerclock.c — libFuzzer target for what a member daemon sends the
 * home's clock estimator: the probe messages (daemon/peer/peerclock_wire.c) and
 * the samples and collective times they become (daemon/peer/peerclock.c).
 * Whatever the bytes: decoding never reads past them; a message that decodes
 * re-encodes into bytes that decode to the same message; and the estimator,
 * fed the decoded times as samples in bursts and asked for offsets,
 * conversions and collectives at times from the input, never overflows
 * (UBSan) and keeps its bursts ascending in both clocks, each bound ≥ 0.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "peerclock.h"
#include "peerclock_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const struct peerclock_msg *m)
{
    uint8_t buf[PEERCLOCK_WIRE_MAX];
    struct peerclock_msg again;
    int len = peerclock_wire_encode(m, buf, sizeof(buf));
    if (len <= 0 || peerclock_wire_decode(buf, (size_t)len, &again) != len)
        abort();
    if (again.type != m->type || again.seq != m->seq || again.t1 != m->t1 || again.t2 != m->t2 ||
        again.t3 != m->t3)
        abort();
}

static void check(const struct peerclock *pc)
{
    for (size_t i = 0; i < pc->n; i++) {
        if (pc->bursts[i].bound < 0)
            abort();
        if (i > 0 && (pc->bursts[i].at <= pc->bursts[i - 1].at ||
                      pc->bursts[i].at + pc->bursts[i].offset <=
                          pc->bursts[i - 1].at + pc->bursts[i - 1].offset))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct peerclock pc;
    struct peerclock_sample s[8];
    size_t n = 0, off = 0;
    peerclock_init(&pc);
    while (off < size) {
        struct peerclock_msg m;
        int len = peerclock_wire_decode(data + off, size - off, &m);
        if (len <= 0)
            break;
        roundtrip(&m);
        off += (size_t)len;
        /* a reply becomes a sample, its t4 = t1 + the seq (a round trip of up to 4 s) */
        s[n++] = (struct peerclock_sample){m.t1, m.t2, m.t3, m.t1 + m.seq};
        if (n == 8 || m.type == PEERCLOCK_PROBE) {
            peerclock_add_burst(&pc, s, n, NULL);
            check(&pc);
            n = 0;
            struct peerclock_at a, b;
            peerclock_offset_at(&pc, m.t1, &a);
            peerclock_to_home(&pc, m.t2, &a);
            double ppm, ppm_bound;
            if (peerclock_drift(&pc, m.t3, &ppm, &ppm_bound) == 0 && !(ppm_bound >= 0))
                abort();
            struct peerclock_coll c = {m.t1, m.t2, m.t3, m.t1, (int64_t)m.seq};
            if (peerclock_collective(&pc, &c, &a, &b) == 0 && (a.bound_ns < 0 || b.bound_ns < 0))
                abort();
        }
    }
    return 0;
}
