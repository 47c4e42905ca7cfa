/*
 * test_cli_report_ranks — client/cli/cli_report_ranks.c, the report's Ranks and Steps tables
 * as text, on reply maps built here with msgpack-c: the CPU WAIT column is there, in human
 * units, when a rank reported a CPU wait, and absent (the tables as before) when none did.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "cli_bars.h"
#include "cli_report_ranks.h"

TestSuite(cli_report_ranks);

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

/* A report of 2 ranks and 1 step whose CPU waits are cw0 and cw1 (the step's: their sum). */
static char *print(uint64_t cw0, uint64_t cw1)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    str(&pk, "ranks");
    msgpack_pack_array(&pk, 2);
    for (int r = 0; r < 2; r++) {
        msgpack_pack_map(&pk, 4);
        kv(&pk, "rank", (uint64_t)r);
        kv(&pk, "steps", 1);
        kv(&pk, "caused_ns", 7000000);
        kv(&pk, "cpu_wait_ns", r == 0 ? cw0 : cw1);
    }
    str(&pk, "steps");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 4);
    kv(&pk, "step", 3);
    kv(&pk, "ranks", 2);
    kv(&pk, "caused_ns", 7000000);
    kv(&pk, "cpu_wait_ns", cw0 + cw1);
    msgpack_unpacked_init(&res);
    cr_assert_eq(msgpack_unpack_next(&res, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cli_bars_set(true, false);
    f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert_eq(cli_report_ranks_print(f, &res.data, 10), 0);
    fclose(f);
    msgpack_unpacked_destroy(&res);
    msgpack_sbuffer_destroy(&sb);
    return buf;
}

/* The line of out that starts with prefix (after the indent), as a new string. */
static char *line(const char *out, const char *prefix)
{
    for (const char *p = out; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n'), *q = p;
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (*q == ' ')
            q++;
        if (strncmp(q, prefix, strlen(prefix)) == 0)
            return strndup(p, n);
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

Test(cli_report_ranks, cpu_wait_column_in_ranks_and_steps_when_a_rank_has_one)
{
    char *out = print(1234000, 0), *hdr = line(out, "RANK "), *shdr = line(out, "STEP ");

    cr_assert_not_null(hdr, "%s", out);
    cr_assert_not_null(shdr, "%s", out);
    cr_assert_not_null(strstr(hdr, "CPU WAIT"), "%s", out);
    cr_assert_not_null(strstr(shdr, "CPU WAIT"), "%s", out);
    /* rank 0: 1.234 ms → "1.23 ms"; rank 1: 0 ns; step 3: the sum, 1.23 ms */
    {
        char *r0 = line(out, "0 "), *r1 = line(out, "1 "), *s3 = line(out, "3 ");
        size_t col = (size_t)(strstr(hdr, "CPU WAIT") - hdr);
        cr_assert_not_null(r0, "%s", out);
        cr_assert_not_null(r1, "%s", out);
        cr_assert_not_null(s3, "%s", out);
        cr_assert_not_null(strstr(r0, "1.23 ms"), "%s", out);
        cr_assert_not_null(strstr(r1, "0 ns"), "%s", out);
        cr_assert_not_null(strstr(s3, "1.23 ms"), "%s", out);
        /* right-aligned under its header: the cell ends where the header ends */
        cr_assert_eq(strncmp(r0 + col + strlen("CPU WAIT") - strlen("1.23 ms"), "1.23 ms", 7), 0,
                     "%s", out);
        free(r0);
        free(r1);
        free(s3);
    }
    free(hdr);
    free(shdr);
    free(out);
}

Test(cli_report_ranks, cpu_wait_in_seconds_and_microseconds)
{
    char *out = print(2500000000, 42000);

    cr_assert_not_null(strstr(out, "2.50 s"), "%s", out);
    cr_assert_not_null(strstr(out, "42.0 µs"), "%s", out);
    free(out);
}

Test(cli_report_ranks, no_cpu_wait_column_when_no_rank_has_one)
{
    char *out = print(0, 0);

    cr_assert_null(strstr(out, "CPU WAIT"), "%s", out);
    cr_assert_not_null(strstr(out, "CAUSED"), "%s", out);
    free(out);
}
