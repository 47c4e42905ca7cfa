/*
 * test_bytesize — util/bytesize.c, the one SIZE grammar of the daemon's and
 * the CLI's options. Expected values are powers of two written out by hand.
 */
#include <errno.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "bytesize.h"

TestSuite(bytesize);

static const struct {
    const char *s;
    uint64_t want;
} good[] = {
    {"0", 0},
    {"1", 1},
    {"512", 512},
    {"7B", 7},
    {"7b", 7},
    {"1K", 1024},
    {"1k", 1024},
    {"1KB", 1024},
    {"1kib", 1024},
    {"1KiB", 1024},
    {"2M", 2097152},
    {"64MiB", 67108864},
    {"3G", 3221225472u},
    {"1T", 1099511627776u},
    {"1tb", 1099511627776u},
    {"18446744073709551615", UINT64_MAX},
    {"16777215T", 18446742974197923840u}, /* 2^64 - 2^40 */
};

static const struct {
    const char *s;
    int rc;
} bad[] = {
    {"", -EINVAL},
    {"K", -EINVAL},
    {"-1", -EINVAL},
    {"+1", -EINVAL},
    {" 1", -EINVAL},
    {"1 K", -EINVAL},
    {"1.5K", -EINVAL},
    {"1Ki", -EINVAL},
    {"1KiBB", -EINVAL},
    {"1X", -EINVAL},
    {"1P", -EINVAL},
    {"0x10", -EINVAL},
    {"18446744073709551616", -ERANGE}, /* 2^64 */
    {"16777216T", -ERANGE},            /* 2^24 * 2^40 = 2^64 */
    {"17179869184G", -ERANGE},         /* 2^34 * 2^30 = 2^64 */
};

Test(bytesize, good)
{
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 12345;

        cr_assert_eq(bytesize_parse(good[i].s, &v), 0, "'%s'", good[i].s);
        cr_assert_eq(v, good[i].want, "'%s' = %llu", good[i].s, (unsigned long long)v);
    }
}

Test(bytesize, bad)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 12345;

        cr_assert_eq(bytesize_parse(bad[i].s, &v), bad[i].rc, "'%s'", bad[i].s);
        cr_assert_eq(v, 12345, "'%s' wrote the output", bad[i].s);
    }
}
