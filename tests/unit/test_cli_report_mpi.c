/*
 * test_cli_report_mpi — client/cli/cli_report_mpi.c, the report's MPI
 * sections as text, on reply maps built here with msgpack-c: what real jobs
 * of test_mpi_sections do not show: dropped calls said, a WALL column
 * partly from entries, pairs that differ, more ranks than the matrix holds
 * (the top pairs instead), buckets at 0 B and 2^63, a report without "mpi".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "cli_report_mpi.h"

TestSuite(cli_report_mpi);

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void kv(msgpack_packer *pk, const char *k, uint64_t v)
{
    str(pk, k);
    msgpack_pack_uint64(pk, v);
}

static void rank_row(msgpack_packer *pk, int rank, const char *from, uint64_t dropped)
{
    msgpack_pack_map(pk, 8);
    kv(pk, "rank", (uint64_t)rank);
    kv(pk, "wall_ns", 2000000000);
    kv(pk, "mpi_ns", 500000000);
    kv(pk, "app_ns", 1500000000);
    str(pk, "mpi_share");
    msgpack_pack_double(pk, 0.25);
    kv(pk, "calls", 1000);
    kv(pk, "dropped_calls", dropped);
    str(pk, "wall_from");
    str(pk, from);
}

/* The MPI sections of a report of `ranks` ranks in a ring (rank i sends i + 1 KiB to i + 1). */
static char *print(int ranks, bool differ, uint32_t top)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    str(&pk, "mpi");
    msgpack_pack_map(&pk, 7);
    kv(&pk, "dropped_calls", 7);
    str(&pk, "ranks");
    msgpack_pack_array(&pk, 2);
    rank_row(&pk, 0, "init_finalize", 7);
    rank_row(&pk, 1, "entries", 0);
    str(&pk, "total");
    msgpack_pack_map(&pk, 2);
    kv(&pk, "wall_ns", 4000000000);
    kv(&pk, "calls", 2000);
    str(&pk, "comms");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 7);
    str(&pk, "name");
    str(&pk, "split#2/dup#1");
    kv(&pk, "size", 5);
    str(&pk, "members");
    msgpack_pack_array(&pk, 5);
    for (int r = 0; r < 5; r++)
        msgpack_pack_uint64(&pk, (uint64_t)(r < 3 ? r : r + 5)); /* 0-2,8-9 */
    kv(&pk, "calls", 3);
    kv(&pk, "total_ns", 1500);
    kv(&pk, "bytes", 3072);
    str(&pk, "ops");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 4);
    str(&pk, "op");
    str(&pk, "MPI_Bcast");
    kv(&pk, "calls", 3);
    kv(&pk, "total_ns", 1500);
    kv(&pk, "bytes", 3072);
    str(&pk, "sizes");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    str(&pk, "op");
    str(&pk, "MPI_Send");
    str(&pk, "buckets");
    msgpack_pack_array(&pk, 3);
    for (int b = 0; b < 3; b++) {
        uint64_t lo = b == 0 ? 0 : b == 1 ? 4096 : (uint64_t)1 << 63;
        msgpack_pack_map(&pk, 4);
        kv(&pk, "min_bytes", lo);
        kv(&pk, "max_bytes", b == 0 ? 0 : b == 1 ? 8191 : UINT64_MAX);
        kv(&pk, "calls", 2);
        kv(&pk, "total_ns", 3000);
    }
    str(&pk, "p2p");
    msgpack_pack_map(&pk, 7);
    kv(&pk, "messages", (uint64_t)ranks);
    kv(&pk, "bytes", 1024);
    kv(&pk, "recv_messages", (uint64_t)ranks - differ);
    kv(&pk, "recv_bytes", 1024);
    kv(&pk, "pairs_differ", differ);
    kv(&pk, "pairs_total", (uint64_t)ranks);
    str(&pk, "pairs");
    msgpack_pack_array(&pk, (uint32_t)ranks);
    for (int i = 0; i < ranks; i++) {
        msgpack_pack_map(&pk, 6);
        kv(&pk, "from", (uint64_t)i);
        kv(&pk, "to", (uint64_t)(i + 1) % (uint64_t)ranks);
        kv(&pk, "messages", 1);
        kv(&pk, "bytes", (uint64_t)(i + 1) * 1024);
        kv(&pk, "recv_messages", differ && i == 0 ? 0 : 1);
        kv(&pk, "recv_bytes", (uint64_t)(i + 1) * 1024);
    }
    /* two sites in a module no addr2line can read: the symbol, else "?" */
    str(&pk, "callsites");
    msgpack_pack_map(&pk, 4);
    kv(&pk, "unsent", 3);
    kv(&pk, "lost_calls", 2);
    kv(&pk, "total", 2);
    str(&pk, "sites");
    msgpack_pack_array(&pk, 2);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(&pk, 12);
        kv(&pk, "max_ns", i == 0 ? 200000000 : 900);
        str(&pk, "max_rank");
        if (i == 0)
            msgpack_pack_uint64(&pk, 3);
        else
            msgpack_pack_nil(&pk);
        str(&pk, "op");
        str(&pk, i == 0 ? "MPI_Allreduce" : "MPI_Send");
        str(&pk, "module");
        str(&pk, "/nonexistent/dir/app");
        kv(&pk, "offset", i == 0 ? 0x1a2b : 0x99);
        str(&pk, "symbol");
        str(&pk, i == 0 ? "solve" : "");
        kv(&pk, "symbol_offset", 0x1f);
        kv(&pk, "ranks", 4);
        kv(&pk, "calls", 40);
        kv(&pk, "total_ns", i == 0 ? 250000000 : 1000);
        kv(&pk, "bytes", 320);
        str(&pk, "mpi_share");
        msgpack_pack_double(&pk, i == 0 ? 0.5 : 0.0);
    }
    msgpack_unpacked_init(&res);
    cr_assert_eq(msgpack_unpack_next(&res, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_not_null(f = open_memstream(&buf, &len));
    cr_assert_eq(cli_report_mpi_print(f, &res.data, top), 0);
    fclose(f);
    msgpack_unpacked_destroy(&res);
    msgpack_sbuffer_destroy(&sb);
    return buf;
}

Test(cli_report_mpi, small_job_matrix_drops_and_mixed_walls)
{
    char *out = print(3, false, 10);

    cr_assert_not_null(strstr(out, "MPI time (wall time from MPI_Init to MPI_Finalize where both"
                                   " were seen, else from the first to the last MPI call"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "\n     0  2.00 s  500 ms  1.50 s  25.0%   1000        7\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "\n     *  4.00 s "), "%s", out);
    cr_assert_not_null(strstr(out, "(7 MPI calls were dropped"), "%s", out);
    cr_assert_not_null(strstr(out, "  split#2/dup#1     5  0-2,8-9  (all)  "), "%s", out);
    cr_assert_not_null(strstr(out, "  MPI_Send  0 B "), "%s", out);
    cr_assert_not_null(strstr(out, "[4 KiB, 8 KiB)"), "%s", out);
    cr_assert_not_null(strstr(out, "[8 EiB, 16 EiB)"), "%s", out);
    cr_assert_not_null(strstr(out, "receives agree"), "%s", out);
    cr_assert_not_null(strstr(out, "  MESSAGES  →0  →1  →2\n"), "%s", out);
    cr_assert_not_null(strstr(out, "\n        2→   1   -   -\n"), "%s", out);
    cr_assert_not_null(strstr(out, "\n     0→         -  1.00 KiB         -\n"), "%s", out);
    cr_assert_not_null(strstr(out, "\n  solve+0x1f  MPI_Allreduce      4     40   250 ms  50.0%"
                                   "  200 ms (3)  320 B  app+0x1a2b\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "\n  ?           MPI_Send           4     40  1.00 µs   0.0%"
                                   "      900 ns  320 B  app+0x99\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "(not here: 3 sites past each process's 256 sent, 2 calls"),
                       "%s", out);
    free(out);
}

Test(cli_report_mpi, many_ranks_top_pairs_and_differences)
{
    char *out = print(CLI_REPORT_MPI_MATRIX + 4, true, 3);

    cr_assert_null(strstr(out, "MESSAGES  →0"), "no matrix past %d ranks: %s",
                   CLI_REPORT_MPI_MATRIX, out);
    cr_assert_not_null(strstr(out, "the 3 pairs with the most bytes of 20"), "%s", out);
    /* the heaviest first: 19 → 0 (20 KiB), 18 → 19, 17 → 18 */
    cr_assert_not_null(strstr(out, "\n    19   0 "), "%s", out);
    cr_assert_not_null(strstr(out, "\n    17  18 "), "%s", out);
    cr_assert_null(strstr(out, "\n    16  17 "), "%s", out);
    cr_assert_not_null(strstr(out, "the receives: 19, 1.00 KiB; 1 pair differs)"), "%s", out);
    /* --top 3 of 2 sites: both, no "shown" line */
    cr_assert_null(strstr(out, "sites shown"), "%s", out);
    free(out);
}

Test(cli_report_mpi, nothing_without_the_key)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    kv(&pk, "processes", 2);
    msgpack_unpacked_init(&res);
    cr_assert_eq(msgpack_unpack_next(&res, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_not_null(f = open_memstream(&buf, &len));
    cr_assert_eq(cli_report_mpi_print(f, &res.data, 10), 0);
    fclose(f);
    cr_assert_eq(len, 0);
    free(buf);
    msgpack_unpacked_destroy(&res);
    msgpack_sbuffer_destroy(&sb);
}
