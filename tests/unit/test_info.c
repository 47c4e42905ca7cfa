/*
 * test_info.c — the `info` table's one reader and its writer (daemon/shared/info.h)
 * on an in-memory SQLite file made here with the table's own definition
 * (schema/session.sql): absent keys and NULL values give the default, a
 * file without the table an error (and info_int the default), info_set
 * replaces a value, and the schema check refuses other versions and files
 * without the table with the messages info.h states.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "info.h"

static sqlite3 *db;

static void db_open(void)
{
    cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
}

static void db_with_table(void)
{
    db_open();
    cr_assert_eq(sqlite3_exec(db, "CREATE TABLE info (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
                              NULL, NULL, NULL),
                 SQLITE_OK);
}

static void db_close(void)
{
    cr_assert_eq(sqlite3_close(db), SQLITE_OK);
}

TestSuite(info, .init = db_with_table, .fini = db_close);
TestSuite(info_none, .init = db_open, .fini = db_close);

Test(info, absent_key_and_null_value_give_the_default)
{
    int64_t v = 1;

    harness_db_exec(db, "INSERT INTO info VALUES ('nothing', NULL)");
    cr_assert_eq(info_get(db, "absent", 7, &v), 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(info_get(db, "nothing", -3, &v), 0);
    cr_assert_eq(v, -3);
    cr_assert_eq(info_int(db, "nothing", 0), 0);
    cr_assert_eq(info_int(db, "absent", 42), 42);
}

Test(info, reads_what_sql_wrote)
{
    int64_t v = 0;

    harness_db_exec(db,
                    "INSERT INTO info VALUES ('ranks', 2), ('big', 9007199254740993), ('neg', -5)");
    cr_assert_eq(info_get(db, "ranks", 0, &v), 0);
    cr_assert_eq(v, 2);
    cr_assert_eq(info_int(db, "big", 0), 9007199254740993LL);
    cr_assert_eq(info_int(db, "neg", 0), -5);
}

Test(info, set_inserts_then_replaces)
{
    sqlite3_stmt *st;

    cr_assert_eq(info_set(db, "ranks_late", 3), 0);
    cr_assert_eq(info_int(db, "ranks_late", 0), 3);
    cr_assert_eq(info_set(db, "ranks_late", INT64_MAX), 0);
    cr_assert_eq(info_int(db, "ranks_late", 0), INT64_MAX);
    /* one row for the key, read back with plain SQL */
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*), max(value) FROM info", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), 1);
    cr_assert_eq(sqlite3_column_int64(st, 1), INT64_MAX);
    sqlite3_finalize(st);
}

Test(info, schema_version_is_checked)
{
    char msg[200], want[200];

    cr_assert_eq(info_schema_check(db, msg, sizeof(msg)), -EPROTO);
    snprintf(want, sizeof(want),
             "made by an incompatible tracectl (schema 0, this build reads %d): "
             "report or export it with the tracectl that made it",
             INFO_SCHEMA_VERSION);
    cr_assert_str_eq(msg, want);
    cr_assert_eq(info_schema_set(db), 0);
    cr_assert_eq(info_int(db, "schema_version", 0), INFO_SCHEMA_VERSION);
    cr_assert_eq(info_schema_check(db, NULL, 0), 0);
    harness_db_exec(db, "UPDATE info SET value = value + 1 WHERE key = 'schema_version'");
    cr_assert_eq(info_schema_check(db, msg, sizeof(msg)), -EPROTO);
    snprintf(want, sizeof(want), "(schema %d, this build reads %d)", INFO_SCHEMA_VERSION + 1,
             INFO_SCHEMA_VERSION);
    cr_assert(strstr(msg, want) != NULL, "%s", msg);
}

Test(info_none, a_file_without_the_table)
{
    int64_t v = 0;
    char msg[200];

    cr_assert_eq(info_get(db, "ranks", 5, &v), -EIO);
    cr_assert_eq(v, 5);
    cr_assert_eq(info_int(db, "ranks", 5), 5);
    cr_assert_eq(info_schema_check(db, msg, sizeof(msg)), -EPROTO);
    cr_assert_str_eq(msg, "no info table: not a session file, or one still being made");
    cr_assert_lt(info_set(db, "ranks", 1), 0);
}
