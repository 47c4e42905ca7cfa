/*
 * test_analysis — the pure post-processing of reports (daemon/query/analysis.c):
 * nearest-rank percentiles, op classification, shares, load imbalance and
 * the op order. Every expected value is worked
 * out by hand in the comment next to it, from PROTOCOL.md's definitions.
 */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "analysis.h"

TestSuite(analysis);

/* ---- percentiles --------------------------------------------------------- */

Test(analysis, percentile_empty)
{
    cr_assert_eq(analysis_percentile(NULL, 0, 50), 0);
    cr_assert_eq(analysis_percentile_rank(0, 99), 0);
}

Test(analysis, percentile_one)
{
    const uint64_t v[] = {7};

    /* rank = max(1, ceil(p * 1 / 100)) = 1 for every p. */
    cr_assert_eq(analysis_percentile(v, 1, 0), 7);
    cr_assert_eq(analysis_percentile(v, 1, 50), 7);
    cr_assert_eq(analysis_percentile(v, 1, 95), 7);
    cr_assert_eq(analysis_percentile(v, 1, 99), 7);
    cr_assert_eq(analysis_percentile(v, 1, 100), 7);
}

Test(analysis, percentile_two)
{
    const uint64_t v[] = {10, 20};

    cr_assert_eq(analysis_percentile(v, 2, 0), 10);  /* rank max(1, 0) = 1 */
    cr_assert_eq(analysis_percentile(v, 2, 50), 10); /* ceil(100/100) = 1 */
    cr_assert_eq(analysis_percentile(v, 2, 51), 20); /* ceil(102/100) = 2 */
    cr_assert_eq(analysis_percentile(v, 2, 95), 20); /* ceil(190/100) = 2 */
    cr_assert_eq(analysis_percentile(v, 2, 99), 20); /* ceil(198/100) = 2 */
}

Test(analysis, percentile_ten)
{
    const uint64_t v[] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};

    cr_assert_eq(analysis_percentile(v, 10, 10), 10);  /* ceil(100/100) = 1 */
    cr_assert_eq(analysis_percentile(v, 10, 11), 20);  /* ceil(110/100) = 2 */
    cr_assert_eq(analysis_percentile(v, 10, 50), 50);  /* ceil(500/100) = 5 */
    cr_assert_eq(analysis_percentile(v, 10, 90), 90);  /* ceil(900/100) = 9 */
    cr_assert_eq(analysis_percentile(v, 10, 95), 100); /* ceil(950/100) = 10 */
    cr_assert_eq(analysis_percentile(v, 10, 99), 100); /* ceil(990/100) = 10 */
}

Test(analysis, percentile_hundred)
{
    uint64_t v[100];

    for (size_t i = 0; i < 100; i++)
        v[i] = i + 1; /* the value at rank k is k */
    cr_assert_eq(analysis_percentile(v, 100, 1), 1);
    cr_assert_eq(analysis_percentile(v, 100, 50), 50);
    cr_assert_eq(analysis_percentile(v, 100, 95), 95);
    cr_assert_eq(analysis_percentile(v, 100, 99), 99);
    cr_assert_eq(analysis_percentile(v, 100, 100), 100);
}

Test(analysis, percentile_exact_ceiling)
{
    uint64_t v[101];

    for (size_t i = 0; i < 101; i++)
        v[i] = i + 1; /* the value at rank k is k */
    /* n = 20: 95 * 20 / 100 = 19 exactly (0.95 * 20 in doubles is 19.000000000000004). */
    cr_assert_eq(analysis_percentile(v, 20, 95), 19);
    /* n = 101: ceil(50.5) = 51, ceil(95.95) = 96, ceil(99.99) = 100. */
    cr_assert_eq(analysis_percentile(v, 101, 50), 51);
    cr_assert_eq(analysis_percentile(v, 101, 95), 96);
    cr_assert_eq(analysis_percentile(v, 101, 99), 100);
    /* p above 100 counts as 100: the last rank. */
    cr_assert_eq(analysis_percentile(v, 101, 250), 101);
}

Test(analysis, percentile_duplicates)
{
    const uint64_t v[] = {5, 5, 5, 7, 7, 9};

    cr_assert_eq(analysis_percentile(v, 6, 50), 5); /* ceil(300/100) = 3 -> 5 */
    cr_assert_eq(analysis_percentile(v, 6, 51), 7); /* ceil(306/100) = 4 -> 7 */
    cr_assert_eq(analysis_percentile(v, 6, 80), 7); /* ceil(480/100) = 5 -> 7 */
    cr_assert_eq(analysis_percentile(v, 6, 95), 9); /* ceil(570/100) = 6 -> 9 */
    cr_assert_eq(analysis_percentile(v, 6, 99), 9); /* ceil(594/100) = 6 -> 9 */
}

Test(analysis, percentile_rank_no_overflow)
{
    /* SIZE_MAX is odd: ceil(SIZE_MAX / 2) = SIZE_MAX / 2 + 1. */
    cr_assert_eq(analysis_percentile_rank(SIZE_MAX, 100), SIZE_MAX);
    cr_assert_eq(analysis_percentile_rank(SIZE_MAX, 50), SIZE_MAX / 2 + 1);
}

/* ---- classification ------------------------------------------------------ */

Test(analysis, classify_every_keyword)
{
    /* PROTOCOL.md "Analysis rules", typed again here from the page. */
    static const char *const words[] = {
        "allreduce",     "all_reduce", "all_gather", "allgather", "reduce_scatter",
        "reducescatter", "alltoall",   "all_to_all", "broadcast", "send",
        "recv",          "barrier",    "nccl",       "comm",
    };
    char buf[64];

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        cr_assert_str_eq(analysis_classify(words[i]), "comm", "%s", words[i]);
        /* Inside a longer name, and upper-cased. */
        snprintf(buf, sizeof(buf), "x.%s_fp16", words[i]);
        cr_assert_str_eq(analysis_classify(buf), "comm", "%s", buf);
        for (char *c = buf; *c != '\0'; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        cr_assert_str_eq(analysis_classify(buf), "comm", "%s", buf);
    }
}

Test(analysis, classify_mixed_case_and_mpi)
{
    cr_assert_str_eq(analysis_classify("ncclAllReduce"), "comm");
    cr_assert_str_eq(analysis_classify("c10d::AllGather_"), "comm");
    /* extensions: DeepEP's kernels, gloo and c10d names */
    cr_assert_str_eq(analysis_classify("void deep_ep::internode::dispatch<8, 1024>(int*)"), "comm");
    cr_assert_str_eq(analysis_classify("ep::internode::combine"), "comm");
    cr_assert_str_eq(analysis_classify("ep::intranode::notify_dispatch"), "comm");
    cr_assert_str_eq(analysis_classify("gloo:all_reduce"), "comm");
    cr_assert_str_eq(analysis_classify("MPI_Allreduce"), "comm");
    /* Only the mpi_ prefix makes these comm: no keyword inside. */
    cr_assert_str_eq(analysis_classify("MPI_Wait"), "comm");
    cr_assert_str_eq(analysis_classify("mpi_test"), "comm");
    /* mpi_ elsewhere than at the start, or without the underscore: not comm. */
    cr_assert_str_eq(analysis_classify("xmpi_wait"), "compute");
    cr_assert_str_eq(analysis_classify("MPI"), "compute");
    cr_assert_str_eq(analysis_classify("mpiwait"), "compute");
}

/* The words the importer brought to the one list (proto_class.h), typed here. */
Test(analysis, classify_the_importers_words_too)
{
    cr_assert_str_eq(analysis_classify("mscclKernel_AllGather"), "comm");
    cr_assert_str_eq(analysis_classify("cross_device_reduce_1stage<half, 8>"), "comm");
    cr_assert_str_eq(analysis_classify("record_param_comms"), "comm");
    cr_assert_str_eq(analysis_classify("ncclDevKernel_SendRecv"), "comm");
    cr_assert_str_eq(analysis_classify("RCCL_kernel"), "comm");
    cr_assert_str_eq(analysis_classify("nvshmemx_barrier_all"), "comm");
    cr_assert_str_eq(analysis_classify("aten::mm"), "compute");
}

Test(analysis, classify_substring_rule)
{
    /*
     * PROTOCOL.md says "contains", so a keyword anywhere counts, even where
     * a person would not call the op communication. Decided: follow the
     * contract literally (every client classifies alike); a producer that
     * disagrees gives the op a category.
     */
    cr_assert_str_eq(analysis_classify("sendfile"), "comm");
    cr_assert_str_eq(analysis_classify("torch.broadcast_to"), "comm");
    cr_assert_str_eq(analysis_classify("command_queue"), "comm");
}

Test(analysis, classify_memory_and_compute)
{
    cr_assert_str_eq(analysis_classify("memcpy"), "memory");
    cr_assert_str_eq(analysis_classify("cudaMemcpyAsync"), "memory");
    cr_assert_str_eq(analysis_classify("MEMSET_zero"), "memory");
    /* comm is decided first. */
    cr_assert_str_eq(analysis_classify("memcpy_send"), "comm");
    cr_assert_str_eq(analysis_classify("matmul"), "compute");
    cr_assert_str_eq(analysis_classify("conv2d"), "compute");
    cr_assert_str_eq(analysis_classify("aten::add"), "compute");
    /* Parts of keywords are not keywords. */
    cr_assert_str_eq(analysis_classify("reduce"), "compute");
    cr_assert_str_eq(analysis_classify("gather"), "compute");
    cr_assert_str_eq(analysis_classify("scatter"), "compute");
    cr_assert_str_eq(analysis_classify("sen"), "compute");
    cr_assert_str_eq(analysis_classify("memcp"), "compute");
    cr_assert_str_eq(analysis_classify(""), "compute");
    cr_assert_str_eq(analysis_classify(NULL), "compute");
}

Test(analysis, is_comm)
{
    cr_assert(analysis_is_comm("comm"));
    cr_assert_not(analysis_is_comm("compute"));
    cr_assert_not(analysis_is_comm("communication"));
    cr_assert_not(analysis_is_comm("Comm"));
    cr_assert_not(analysis_is_comm(""));
    cr_assert_not(analysis_is_comm(NULL));
}

/* ---- shares -------------------------------------------------------------- */

Test(analysis, share)
{
    cr_assert_eq(analysis_share(1, 4), 0.25);
    cr_assert_eq(analysis_share(4, 4), 1.0);
    cr_assert_eq(analysis_share(0, 4), 0.0);
    cr_assert_eq(analysis_share(0, 0), 0.0);
    cr_assert_eq(analysis_share(5, 0), 0.0);
}

/* ---- imbalance ----------------------------------------------------------- */

Test(analysis, imbalance_fewer_than_two)
{
    struct report_device one = {.device = "gpu:0", .calls = 3, .total_ns = 100};
    struct report_imbalance im;

    memset(&im, 0xff, sizeof(im));
    analysis_imbalance(NULL, 0, &im);
    cr_assert_not(im.present);
    cr_assert_eq(im.devices, 0);
    cr_assert_null(im.slowest_device);
    memset(&im, 0xff, sizeof(im));
    analysis_imbalance(&one, 1, &im);
    cr_assert_not(im.present);
    cr_assert_eq(im.total_ns, 0);
    cr_assert_null(im.slowest_device);
}

Test(analysis, imbalance_equal)
{
    struct report_device rows[] = {
        {.device = "gpu:0", .total_ns = 100},
        {.device = "gpu:1", .total_ns = 100},
        {.device = "gpu:2", .total_ns = 100},
    };
    struct report_imbalance im;

    analysis_imbalance(rows, 3, &im);
    cr_assert(im.present);
    cr_assert_eq(im.devices, 3);
    cr_assert_eq(im.total_ns, 300);
    cr_assert_eq(im.ideal_ns, 100);
    cr_assert_eq(im.max_ns, 100);
    cr_assert_eq(im.ratio, 0.0);
    /* All tie: the first by name. */
    cr_assert_str_eq(im.slowest_device, "gpu:0");
}

Test(analysis, imbalance_hand_computed)
{
    struct report_device rows[] = {
        {.device = "gpu:0", .total_ns = 300},
        {.device = "gpu:1", .total_ns = 100},
        {.device = "gpu:2", .total_ns = 200},
    };
    struct report_imbalance im;

    /* total 600, ideal 600 / 3 = 200, max 300, ratio (300 - 200) / 200 = 0.5 */
    analysis_imbalance(rows, 3, &im);
    cr_assert(im.present);
    cr_assert_eq(im.devices, 3);
    cr_assert_eq(im.total_ns, 600);
    cr_assert_eq(im.ideal_ns, 200);
    cr_assert_eq(im.max_ns, 300);
    cr_assert_float_eq(im.ratio, 0.5, 1e-12);
    cr_assert_str_eq(im.slowest_device, "gpu:0");
    /* Borrowed from the rows, not copied. */
    cr_assert_eq(im.slowest_device, rows[0].device);
}

Test(analysis, imbalance_exact_ideal)
{
    struct report_device rows[] = {
        {.device = "a", .total_ns = 0},
        {.device = "b", .total_ns = 10},
        {.device = "c", .total_ns = 0},
    };
    struct report_imbalance im;

    /*
     * total 10: ideal_ns = floor(10 / 3) = 3, but the ratio uses 10 / 3:
     * (10 - 10/3) / (10/3) = 2 (with the floor it would be 7/3).
     */
    analysis_imbalance(rows, 3, &im);
    cr_assert_eq(im.ideal_ns, 3);
    cr_assert_eq(im.max_ns, 10);
    cr_assert_float_eq(im.ratio, 2.0, 1e-12);
    cr_assert_str_eq(im.slowest_device, "b");
}

Test(analysis, imbalance_ties_and_zero)
{
    /* Not in name order: the tie still goes to the smallest name ("B" < "a" < "b"). */
    struct report_device rows[] = {
        {.device = "b", .total_ns = 70},
        {.device = "a", .total_ns = 70},
        {.device = "B", .total_ns = 70},
        {.device = "c", .total_ns = 20},
    };
    struct report_device zero[] = {
        {.device = "y", .total_ns = 0},
        {.device = "x", .total_ns = 0},
    };
    struct report_imbalance im;

    /* total 230, ideal floor(230 / 4) = 57, ratio (70 - 57.5) / 57.5 */
    analysis_imbalance(rows, 4, &im);
    cr_assert_eq(im.total_ns, 230);
    cr_assert_eq(im.ideal_ns, 57);
    cr_assert_eq(im.max_ns, 70);
    cr_assert_float_eq(im.ratio, 12.5 / 57.5, 1e-12);
    cr_assert_str_eq(im.slowest_device, "B");
    /* Nothing measured: present, everything 0, ratio 0, first by name. */
    analysis_imbalance(zero, 2, &im);
    cr_assert(im.present);
    cr_assert_eq(im.devices, 2);
    cr_assert_eq(im.total_ns, 0);
    cr_assert_eq(im.ideal_ns, 0);
    cr_assert_eq(im.ratio, 0.0);
    cr_assert_str_eq(im.slowest_device, "x");
}

/* ---- op order ------------------------------------------------------------ */

Test(analysis, sort_ops)
{
    struct report_op ops[] = {
        {.op = "small", .total_ns = 1}, {.op = "b", .total_ns = 50}, {.op = "big", .total_ns = 900},
        {.op = "a", .total_ns = 50},    {.op = "Z", .total_ns = 50},
    };
    /* total descending; ties in byte order: "Z" (0x5a) < "a" < "b". */
    const char *want[] = {"big", "Z", "a", "b", "small"};

    analysis_sort_ops(ops, 5);
    for (size_t i = 0; i < 5; i++)
        cr_assert_str_eq(ops[i].op, want[i], "row %zu", i);
}
