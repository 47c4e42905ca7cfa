/*
 * store_rows — the rows format (info.format 1): one row of `entries` per
 * entry, ENTRY_ROWS rows per INSERT while a batch has that many. Writer
 * thread only.
 */
#ifndef TRACECTLD_STORE_ROWS_H
#define TRACECTLD_STORE_ROWS_H

#include <sqlite3.h>

#include "store.h"

struct wsess;

struct wsess_rows {
    sqlite3_stmt *ins_entries; /* ENTRY_ROWS rows at once */
    sqlite3_stmt *ins_entry;   /* one */
};

/* Prepares the INSERT statements of w's freshly opened file. 0 or -EIO. */
int store_rows_prepare(struct store *s, struct wsess *w);
/* Finalizes them. */
void store_rows_close(struct wsess *w);
/* Inserts a batch's entries, with their aggregates and side rows. 0 or a negative errno. */
int store_rows_batch(struct store *s, struct wsess *w, struct store_job *job);

#endif
