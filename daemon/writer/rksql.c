/* rksql.c — the rank aggregates' SQLite helpers; see rksql.h. */
#include "rksql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "sqlutil.h"

int rksql_up_prepare_rows(sqlite3 *db, struct rksql_up *u, int ncols, const char *head,
                          const char *row, const char *sep, const char *tail)
{
    size_t cap = strlen(head) + RKSQL_BATCH * (strlen(row) + strlen(sep)) + strlen(tail) + 1;
    char *sql = malloc(cap);
    int rc;

    if (sql == NULL)
        return -ENOMEM;
    u->db = db;
    u->ncols = ncols;
    u->many_sql = sql;
    strcpy(sql, head);
    for (int i = 0; i < RKSQL_BATCH; i++) {
        if (i > 0)
            strcat(sql, sep);
        strcat(sql, row);
    }
    strcat(sql, tail);
    /* the same with one row: head, row, tail */
    sql = malloc(strlen(head) + strlen(row) + strlen(tail) + 1);
    if (sql == NULL)
        return -ENOMEM;
    strcat(strcat(strcpy(sql, head), row), tail);
    rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &u->one, NULL);
    free(sql);
    return sql_errno(rc);
}

int rksql_up_prepare(sqlite3 *db, struct rksql_up *u, const char *head, int ncols, const char *tail)
{
    char row[2 + 3 * RKSQL_MAXCOLS] = "(";

    for (int k = 0; k < ncols; k++)
        strcat(row, k + 1 < ncols ? "?, " : "?)");
    return rksql_up_prepare_rows(db, u, ncols, head, row, ", ", tail);
}

void rksql_up_free(struct rksql_up *u)
{
    sqlite3_finalize(u->one);
    sqlite3_finalize(u->many);
    free(u->many_sql);
}

int rksql_run(sqlite3_stmt *st, const int64_t *v, int n)
{
    int rc;

    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, i + 1, v[i]);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return sql_errno(rc);
}

int rksql_up_add(struct rksql_up *u, const int64_t *v)
{
    memcpy(u->v + (size_t)u->n * (size_t)u->ncols, v, (size_t)u->ncols * sizeof(*v));
    if (++u->n < RKSQL_BATCH)
        return 0;
    u->n = 0;
    if (u->many == NULL) {
        int rc =
            sqlite3_prepare_v3(u->db, u->many_sql, -1, SQLITE_PREPARE_PERSISTENT, &u->many, NULL);
        if (rc != SQLITE_OK)
            return sql_errno(rc);
    }
    return rksql_run(u->many, u->v, RKSQL_BATCH * u->ncols);
}

int rksql_up_end(struct rksql_up *u)
{
    int n = u->n, err = 0;

    u->n = 0;
    for (int i = 0; i < n && err == 0; i++)
        err = rksql_run(u->one, u->v + (size_t)i * (size_t)u->ncols, u->ncols);
    return err;
}

int rksql_exec(sqlite3 *db, const char *sql)
{
    return sql_errno(sqlite3_exec(db, sql, NULL, NULL, NULL));
}
