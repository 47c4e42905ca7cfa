/*
 * decode.c — tc_bench_decode: the loop thread's decoding of batch messages,
 * one pass (proto/onepass.c) against msgpack-c's object tree, per entry.
 *
 *   tc_bench_decode [--entries N per batch (4096)] [--batches B (200)] [--runs K (5)]
 *
 * The batches hold the entries tc_bench_ingest's producers record (the same
 * program of 256 call sites, bench_util.h), packed as libtracectl packs
 * them (canonical msgpack, elements nil, shapes inline). Each run feeds all
 * B batches to a proto_reader in 16 KiB pieces, as the daemon reads a
 * connection, and takes every message: once with the one-pass decoder
 * (the daemon's path) and once with .tree set (the object tree, the path
 * before issue 17). Time is this thread's CPU time, so that the other
 * processes of a shared machine change it less than wall time. Output: one
 * JSON line per path with the median ns per entry over the runs, and the
 * ratio.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "proto.h"

#define READ_SIZE (16u << 10) /* daemon/loop/conn.c's */

static void pack_batch(msgpack_packer *pk, const struct bprogram *prog, struct bgen *g, uint64_t *n,
                       size_t entries)
{
    static const uint64_t t0 = 1700000000000000000ull; /* a CLOCK_REALTIME-like start */

    proto_pack_batch_header(pk, entries);
    for (size_t i = 0; i < entries; i++, (*n)++) {
        uint64_t dur;
        const struct bsite *s = bgen_entry(g, prog, *n, &dur);

        msgpack_pack_array(pk, 8);
        msgpack_pack_uint64(pk, *n / BENCH_SITES);
        msgpack_pack_uint32(pk, s->op + 1);
        msgpack_pack_uint64(pk, t0 + *n * 1000);
        msgpack_pack_uint64(pk, dur);
        msgpack_pack_nil(pk);
        msgpack_pack_uint64(pk, s->mem_bytes);
        proto_pack_shape(pk, s->out.dims, s->out.ndim);
        msgpack_pack_array(pk, s->n_in);
        for (size_t k = 0; k < s->n_in; k++)
            proto_pack_shape(pk, s->in[k].dims, s->in[k].ndim);
    }
}

/* Thread CPU ns per entry to read every batch of buf through a reader. */
static double run(const char *buf, size_t len, uint64_t entries, bool tree)
{
    struct proto_reader r;
    struct proto_error err;
    struct proto_msg m;
    uint64_t got = 0, t;
    int rc;

    if (proto_reader_init(&r, 0) < 0)
        exit(1);
    r.tree = tree;
    t = bench_thread_ns();
    for (size_t off = 0; off < len; off += READ_SIZE) {
        size_t n = len - off < READ_SIZE ? len - off : READ_SIZE;
        char *dst = proto_reader_buffer(&r, n);
        if (dst == NULL)
            exit(1);
        memcpy(dst, buf + off, n);
        proto_reader_commit(&r, n);
        while ((rc = proto_reader_next(&r, &m, &err)) == 1) {
            got += m.u.batch.n;
            proto_msg_free(&m);
        }
        if (rc < 0) {
            fprintf(stderr, "decode: %s: %s\n", err.code, err.message);
            exit(1);
        }
    }
    t = bench_thread_ns() - t;
    proto_reader_deinit(&r);
    if (got != entries) {
        fprintf(stderr, "decode: %llu entries of %llu\n", (unsigned long long)got,
                (unsigned long long)entries);
        exit(1);
    }
    return (double)t / (double)entries;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"entries", required_argument, NULL, 'e'},
                                       {"batches", required_argument, NULL, 'b'},
                                       {"runs", required_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
    size_t per = 4096, batches = 200;
    int runs = 5, ch;
    struct bprogram prog;
    struct bgen g;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t n = 0;
    double v[2][64];

    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (ch == 'e')
            per = strtoul(optarg, NULL, 10);
        else if (ch == 'b')
            batches = strtoul(optarg, NULL, 10);
        else if (ch == 'r')
            runs = atoi(optarg);
        else
            return 2;
    }
    if (runs < 1 || runs > 64 || per == 0 || batches == 0)
        return 2;
    bench_program_init(&prog);
    bgen_init(&g, 1);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < batches; i++)
        pack_batch(&pk, &prog, &g, &n, per);
    for (int k = 0; k < runs; k++) {
        v[0][k] = run(sb.data, sb.size, n, false);
        v[1][k] = run(sb.data, sb.size, n, true);
    }
    for (int p = 0; p < 2; p++) {
        bjson_begin("decode", p == 0 ? "one_pass" : "object_tree");
        bjson_u64("entries_per_batch", per);
        bjson_u64("batches", batches);
        bjson_num("bytes_per_entry", (double)sb.size / (double)n);
        bjson_stat("thread_ns_per_entry", bench_stat(v[p], (size_t)runs), (size_t)runs);
        bjson_end();
    }
    fprintf(stderr, "decode: %.1f B/entry; one pass %.0f ns/entry, object tree %.0f ns/entry\n",
            (double)sb.size / (double)n, bench_stat(v[0], (size_t)runs).median,
            bench_stat(v[1], (size_t)runs).median);
    msgpack_sbuffer_destroy(&sb);
    return 0;
}
