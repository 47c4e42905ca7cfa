/*
 * test_map — util/map.c: strmap, u32map and pairmap against plain arrays
 * that hold the same keys (the model), through growth well past the first
 * capacity; and map_hash_bytes against FNV-1a's published test vectors.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "map.h"

TestSuite(map);

Test(map, fnv1a_vectors)
{
    /* From the FNV reference (isthe.com/chongo/tech/comp/fnv): 64-bit FNV-1a. */
    cr_assert_eq(map_hash_bytes("", 0), UINT64_C(0xcbf29ce484222325));
    cr_assert_eq(map_hash_bytes("a", 1), UINT64_C(0xaf63dc4c8601ec8c));
    cr_assert_eq(map_hash_bytes("foobar", 6), UINT64_C(0x85944171f73967e8));
}

Test(map, strmap_keys_of_any_bytes)
{
    struct strmap m;
    uint32_t v = 0;

    strmap_init(&m);
    cr_assert_not(strmap_get(&m, "a", 1, &v)); /* empty map */
    cr_assert_eq(strmap_put(&m, "a", 1, 10), 0);
    cr_assert_eq(strmap_put(&m, "a\0", 2, 20), 0); /* same prefix, one byte longer */
    cr_assert_eq(strmap_put(&m, "a\0b", 3, 30), 0);
    cr_assert_eq(strmap_put(&m, "", 0, 40), 0);
    cr_assert(strmap_get(&m, "a", 1, &v) && v == 10);
    cr_assert(strmap_get(&m, "a\0", 2, &v) && v == 20);
    cr_assert(strmap_get(&m, "a\0b", 3, &v) && v == 30);
    cr_assert(strmap_get(&m, "", 0, &v) && v == 40);
    cr_assert_not(strmap_get(&m, "b", 1, &v));
    cr_assert_eq(m.len, 4);
    strmap_deinit(&m);
    cr_assert_eq(m.cap, 0);
}

Test(map, strmap_growth)
{
    struct strmap m;
    char key[32];
    uint32_t v;

    strmap_init(&m);
    for (uint32_t i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "op-%u", i);
        cr_assert_eq(strmap_put(&m, key, (size_t)n, i * 3 + 1), 0);
    }
    cr_assert_eq(m.len, 5000);
    cr_assert_geq(m.cap, 10000, "at most half full: cap %zu", m.cap);
    for (uint32_t i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "op-%u", i);
        cr_assert(strmap_get(&m, key, (size_t)n, &v), "op-%u lost", i);
        cr_assert_eq(v, i * 3 + 1);
    }
    cr_assert_not(strmap_get(&m, "op-5000", 7, &v));
    strmap_deinit(&m);
}

Test(map, u32map_insert_replace)
{
    struct u32map m;
    uint32_t v;

    u32map_init(&m);
    cr_assert_not(u32map_get(&m, 0, &v));
    cr_assert_eq(u32map_put(&m, 0, 5), 0);
    cr_assert_eq(u32map_put(&m, UINT32_MAX, 6), 0);
    cr_assert_eq(u32map_put(&m, 0, 7), 0); /* replaces */
    cr_assert_eq(m.len, 2);
    cr_assert(u32map_get(&m, 0, &v) && v == 7);
    cr_assert(u32map_get(&m, UINT32_MAX, &v) && v == 6);
    /* dense ids, as a connection defines them, then sparse ones */
    for (uint32_t i = 1; i <= 3000; i++)
        cr_assert_eq(u32map_put(&m, i, i + 100), 0);
    for (uint32_t i = 1; i <= 3000; i++)
        cr_assert_eq(u32map_put(&m, i << 20, i), 0);
    cr_assert_eq(m.len, 6002);
    for (uint32_t i = 1; i <= 3000; i++) {
        cr_assert(u32map_get(&m, i, &v) && v == i + 100, "key %u", i);
        cr_assert(u32map_get(&m, i << 20, &v) && v == i, "key %u << 20", i);
    }
    cr_assert_not(u32map_get(&m, 3001, &v));
    u32map_deinit(&m);
}

Test(map, pairmap_upsert)
{
    struct pairmap m;
    bool created = false;
    uint64_t *p;

    pairmap_init(&m);
    cr_assert_null(pairmap_get(&m, 1, 2));
    p = pairmap_upsert(&m, 1, 2, &created);
    cr_assert(p != NULL && created && *p == 0);
    *p = 42;
    p = pairmap_upsert(&m, 1, 2, &created);
    cr_assert(p != NULL && !created && *p == 42);
    p = pairmap_upsert(&m, 2, 1, NULL); /* (a, b) and (b, a) are two keys */
    cr_assert(p != NULL && *p == 0);
    *p = 7;
    cr_assert_eq(*pairmap_get(&m, 1, 2), 42);
    cr_assert_eq(*pairmap_get(&m, 2, 1), 7);
    cr_assert_eq(m.len, 2);
    pairmap_deinit(&m);
}

Test(map, pairmap_growth)
{
    struct pairmap m;
    uint64_t *p;
    size_t used = 0;

    pairmap_init(&m);
    for (uint64_t a = 0; a < 100; a++)
        for (uint64_t b = 0; b < 100; b++) {
            cr_assert_not_null(p = pairmap_upsert(&m, a, b << 40, NULL));
            *p += a * 1000 + b;
        }
    cr_assert_eq(m.len, 10000);
    for (size_t i = 0; i < m.cap; i++)
        used += m.slots[i].used;
    cr_assert_eq(used, 10000);
    cr_assert_geq(m.cap, 20000);
    for (uint64_t a = 0; a < 100; a++)
        for (uint64_t b = 0; b < 100; b++) {
            cr_assert_not_null(p = pairmap_get(&m, a, b << 40));
            cr_assert_eq(*p, a * 1000 + b);
        }
    cr_assert_null(pairmap_get(&m, 100, 0));
    pairmap_deinit(&m);
}
