/*
 * test_cli_fmt — client/cli/cli_fmt.c, the human units of the CLI's tables:
 * each threshold of durations and byte sizes on both sides, shares and
 * wall-clock times (in UTC). Expected texts are worked out by hand.
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <criterion/criterion.h>

#include "cli_fmt.h"

TestSuite(cli_fmt);

static const struct {
    uint64_t ns;
    const char *want;
} durations[] = {
    {0, "0 ns"},
    {999, "999 ns"},
    {1000, "1.00 \xc2\xb5s"},
    {12345, "12.3 \xc2\xb5s"}, /* 12.345 -> 3 significant digits */
    {999499, "999 \xc2\xb5s"},
    {999500, "1.00 ms"}, /* never "1000 µs" */
    {4560000, "4.56 ms"},
    {999500000, "1.00 s"},
    {1230000000, "1.23 s"},
    {59949999999, "59.9 s"},
    {59950000000, "1m 00s"}, /* (59.95 s + 0.5 s) rounds down to 60 s */
    {125000000000, "2m 05s"},
    {11040000000000, "3h 04m"},  /* 3 × 3600 + 4 × 60 s */
    {183600000000000, "2d 03h"}, /* 2 × 86400 + 3 × 3600 s */
};

Test(cli_fmt, duration)
{
    char buf[CLI_FMT_LEN];

    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        cli_fmt_duration(buf, sizeof(buf), durations[i].ns);
        cr_assert_str_eq(buf, durations[i].want, "%llu ns", (unsigned long long)durations[i].ns);
    }
}

static const struct {
    uint64_t bytes;
    const char *want;
} sizes[] = {
    {0, "0 B"},
    {1023, "1023 B"},
    {1024, "1.00 KiB"},
    {1536, "1.50 KiB"},
    {1048063, "1023 KiB"},  /* 1023.499 KiB */
    {1048064, "1.00 MiB"},  /* 1023.5 KiB: never "1024 KiB" */
    {12897485, "12.3 MiB"}, /* 12.3 × 2^20, rounded */
    {4294967296u, "4.00 GiB"},
    {1319413953331u, "1.20 TiB"}, /* 1.2 × 2^40 */
    {UINT64_MAX, "16.0 EiB"},
};

Test(cli_fmt, bytes)
{
    char buf[CLI_FMT_LEN];

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        cli_fmt_bytes(buf, sizeof(buf), sizes[i].bytes);
        cr_assert_str_eq(buf, sizes[i].want, "%llu bytes", (unsigned long long)sizes[i].bytes);
    }
}

Test(cli_fmt, share)
{
    char buf[CLI_FMT_LEN];

    cli_fmt_share(buf, sizeof(buf), 0.1234);
    cr_assert_str_eq(buf, "12.3%");
    cli_fmt_share(buf, sizeof(buf), 0);
    cr_assert_str_eq(buf, "0.0%");
    cli_fmt_share(buf, sizeof(buf), 1);
    cr_assert_str_eq(buf, "100.0%");
}

Test(cli_fmt, time_local)
{
    char buf[CLI_FMT_LEN];

    setenv("TZ", "UTC", 1);
    tzset();
    cli_fmt_time(buf, sizeof(buf), 0);
    cr_assert_str_eq(buf, "1970-01-01 00:00:00");
    cli_fmt_time(buf, sizeof(buf), UINT64_C(1700000000) * 1000000000 + 999999999);
    cr_assert_str_eq(buf, "2023-11-14 22:13:20"); /* seconds are cut, not rounded */
}

Test(cli_fmt, cut_to_the_buffer)
{
    char buf[4];

    cli_fmt_duration(buf, sizeof(buf), 999);
    cr_assert_str_eq(buf, "999");
}
