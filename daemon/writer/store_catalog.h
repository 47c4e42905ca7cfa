/*
 * store_catalog — DATA_DIR/catalog.db and the data dir's invariants: the lock
 * (one daemon per data dir), the catalog row a session file needs before it
 * is created, the quarantine of files without one (sessions/orphans/), and
 * at start-up the recovery of the sessions the last run left live.
 *
 * Threads: store_catalog_open() and store_catalog_load() run on the loop
 * thread in start-up, before the writer starts; the session jobs
 * (store_catalog_session_*) run on the writer thread, which then owns the
 * catalog connection. store_catalog_load and store_last_session_id are
 * declared in store.h.
 */
#ifndef TRACECTLD_STORE_CATALOG_H
#define TRACECTLD_STORE_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

struct store;
struct store_job;
struct wsess;

struct store_cat {
    sqlite3 *db;
    int lock_fd;         /* DATA_DIR/lock, flock()ed from store_new to store_free; -1: none */
    int64_t max_file_id; /* largest id of a file found in sessions/ at start */
};

/*
 * Start-up: creates DATA_DIR/sessions, takes the lock, opens the catalog,
 * recovers the sessions left live and quarantines files without a row.
 * Returns 0, or a negative errno with a message in errbuf.
 */
int store_catalog_open(struct store *s, char *errbuf, size_t errlen);

/*
 * Writer: the session jobs. Opening commits the catalog row first (a crash
 * never leaves a file without a row to own it), then creates the file
 * exclusively. Ending commits and closes the file, then writes the row with
 * what the file holds. Deleting removes the file and the row. Each returns 0
 * or a negative errno.
 */
int store_catalog_session_open(struct store *s, struct wsess *w, struct store_job *job);
int store_catalog_session_end(struct store *s, struct wsess *w, struct store_job *job);
int store_catalog_session_delete(struct store *s, struct wsess *w, struct store_job *job);

#endif
