/*
 * rksql — how the rank aggregates talk to SQLite: batched upserts, one-off
 * statements, and what a file's schema has (the `info` table is info.h's).
 *
 * Writer thread (and `classify`'s worker, on its own connection), through
 * struct ranks. Every function returns 0 or a negative errno: SQLite's codes
 * are mapped by sql_errno() as they come back, and the caller logs them
 * once with sqlite3_errmsg() (store.c).
 *
 * Batched upserts (struct rksql_up): rows are buffered and written
 * RKSQL_BATCH to a statement (the rest one by one), which saves SQLite's cost
 * per statement. A statement is head, the rows' "(?, ...)" list, then tail.
 */
#ifndef TRACECTLD_RKSQL_H
#define TRACECTLD_RKSQL_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

#define RKSQL_BATCH   32
#define RKSQL_MAXCOLS 16

struct rksql_up {
    sqlite3_stmt *one, *many; /* many prepared when first needed (from many_sql) */
    sqlite3 *db;
    char *many_sql;
    int ncols, n;
    int64_t v[RKSQL_BATCH * RKSQL_MAXCOLS];
};

/* Rows of ncols values: "head (?, ...), ... tail". u zeroed before; rksql_up_free() after,
 * also on failure. */
int rksql_up_prepare(sqlite3 *db, struct rksql_up *u, const char *head, int ncols,
                     const char *tail);
/* The same with rows given as row, joined by sep: "head row sep row ... tail". */
int rksql_up_prepare_rows(sqlite3 *db, struct rksql_up *u, int ncols, const char *head,
                          const char *row, const char *sep, const char *tail);
void rksql_up_free(struct rksql_up *u);
/* Buffers one row of u->ncols values; writes RKSQL_BATCH of them at once. */
int rksql_up_add(struct rksql_up *u, const int64_t *v);
/* Writes the rows still buffered. */
int rksql_up_end(struct rksql_up *u);

/* Runs st once with the values v[0..n) (it must return no row), then resets it. agg.c
 * writes its aggregates with it too. */
int rksql_run(sqlite3_stmt *st, const int64_t *v, int n);
/* sqlite3_exec of sql. */
int rksql_exec(sqlite3 *db, const char *sql);

#endif
