/*
 * fault — test-only fault injection for the writer's storage, as SQLite's
 * own tests do it (its test VFS and malloc hooks): fail the N-th call of one
 * kind and see that the daemon rolls back cleanly, that its acks stay true
 * and that nothing leaks.
 *
 * Compiled only into Debug builds (TRACECTLD_FAULT_INJECT, like
 * TRACECTLD_TEST_CLOCK); in a Release build every function here is an empty
 * inline and the environment is never read.
 *
 * $TRACECTLD_FAULT = KIND:N[:persist][:full][:open] arms one fault, or
 * $TRACECTLD_FAULT = @FILE names a file holding such a spec, read again for
 * each new session (so one daemon can run a whole loop over N, a session a
 * run; an empty or missing file: no fault for that session):
 *   KIND     write, sync, read, truncate (methods of the files the writer's
 *            connections open through walvfs) or malloc (SQLite's
 *            allocations, through SQLITE_CONFIG_MALLOC: malloc and realloc)
 *            or own (the daemon's own malloc, calloc, realloc and strdup,
 *            in the tracectld executable only: linked with -Wl,--wrap,
 *            fault_wrap.c; not the libraries' own, libuv's or msgpack-c's)
 *   N        the N-th such call fails, N >= 1
 *   persist  every call from the N-th on fails (default: only the N-th)
 *   full     I/O fails with SQLITE_FULL instead of SQLITE_IOERR_<KIND>
 *   open     count from the session's creation (its file and catalog row);
 *            by default counting starts at the session's first batch
 * Counting starts over for each session the writer creates (fault_open())
 * and stops when the writer has applied that session's end (fault_end()):
 * a persistent fault lasts the session's run, not into the next one.
 * Only calls made on the writer thread count (fault_thread()): start-up's
 * catalog work, the checkpointer and the query workers (their own
 * connections, the default VFS) never count, so the same session sent the
 * same way meets the same N-th call.
 * $TRACECTLD_FAULT_HITS names a file to which each injected failure appends
 * a line "failed KIND N", so a test knows whether its run met the fault.
 *
 * Threads: fault_configure() runs in main() before SQLite initialises and
 * before any thread; the rest runs on the writer thread, except the
 * allocation wrapper, which every thread calls (and which counts only the
 * writer's calls).
 */
#ifndef TRACECTLD_FAULT_H
#define TRACECTLD_FAULT_H

#include <stdbool.h>

enum fault_kind { FAULT_WRITE, FAULT_SYNC, FAULT_READ, FAULT_TRUNCATE, FAULT_MALLOC, FAULT_OWN };

#ifdef TRACECTLD_FAULT_INJECT
/*
 * Reads $TRACECTLD_FAULT and installs the allocation wrapper (before
 * sqlite3_initialize()). 0 (also when unset), -EINVAL for a bad spec
 * (logged), -EBUSY when SQLite refused the allocator.
 */
int fault_configure(void);
/* The calling thread's storage calls are the ones counted (the writer thread). */
void fault_thread(void);
/* The writer creates a session: the count starts over (counting now with `open`). */
void fault_open(void);
/* The writer applies a batch: counting starts, if it has not for this session. */
void fault_batch(void);
/* The writer applied a session's end: counting stops until the next session's. */
void fault_end(void);
/* An I/O method of kind is called: SQLITE_OK, or the error it must return. */
int fault_io(enum fault_kind kind);
/* The daemon allocates (fault_wrap.c): true when the allocation must fail. */
bool fault_own(void);
#else
static inline int fault_configure(void)
{
    return 0;
}
static inline void fault_thread(void)
{
}
static inline void fault_open(void)
{
}
static inline void fault_batch(void)
{
}
static inline void fault_end(void)
{
}
static inline int fault_io(enum fault_kind kind)
{
    (void)kind;
    return 0;
}
#endif

#endif
