/*
 * store_recover — the sessions the last run left live (it was killed or
 * crashed): at start-up their counts are read back from their files, their
 * rank aggregates finished, and their catalog rows marked ended and
 * interrupted.
 *
 * DESIGN
 * Reading needs no space; writing does. When a write fails for want of
 * space (SQLITE_FULL: the disk is full), the daemon still starts: the
 * session is listed as its row will be (ended, interrupted, the counts read
 * from its file: store_recover_row), reads and reports work, and the writes
 * are deferred. The writer thread retries them every STORE_RECOVER_RETRY_MS
 * (store_recover_retry, from its loop) until they succeed; status shows how
 * many wait (store_deferred) and the log says when they were deferred and
 * when written. Any other error still fails start-up, as before.
 *
 * Threads: store_recover() runs in store_new on the loop thread, before the
 * writer starts; store_recover_row() in store_catalog_load (the same);
 * store_recover_retry() on the writer thread; store_deferred() anywhere.
 */
#ifndef TRACECTLD_STORE_RECOVER_H
#define TRACECTLD_STORE_RECOVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_RECOVER_RETRY_MS 1000

/* A session whose recovery is not written yet: what its catalog row will say. */
struct store_recovery {
    int64_t id, processes, entries, dropped, ended_ns;
    bool ranks_done; /* its file's rank aggregates are finished (or cannot be) */
};

/* In struct store: the deferred recoveries (the writer's once it runs). */
struct store_recover_state {
    struct store_recovery *v;
    size_t n;
    uint64_t retry_at; /* store_now_ms() of the next try */
    _Atomic uint64_t count;
};

/* Start-up: recovers every session left live, deferring what a full disk refuses. 0 or -EIO. */
int store_recover(struct store *s);
/* Rewrites a catalog row as its deferred recovery will write it (a no-op for any other row). */
void store_recover_row(struct store *s, struct store_catalog_row *row);
/*
 * Writer: retries the deferred writes when due. Returns the ms until the next
 * try, or wait (the caller's own timeout, -1: none) when that is sooner or
 * nothing waits.
 */
int64_t store_recover_retry(struct store *s, int64_t wait);
/* Frees what is still deferred (store_free). */
void store_recover_free(struct store *s);

#endif
