/*
 * ranks — the per-rank, per-step and per-collective aggregates behind the
 * report's Ranks, Steps, Collectives and Categories sections (schema/ranks.sql),
 * kept up to date by the storage writer as entries arrive, like agg.h.
 *
 * Owned by the writer thread, one per open session file. The writer tells it
 * each op's category (ranks_op), each process's world and process group
 * (ranks_process, ranks_meta), and each stored entry with its ext map
 * (ranks_entry); ranks_flush() writes the deltas inside the transaction that
 * commits the entries, and saves what it holds in memory between entries
 * (open instances, occurrence counts, pending intervals: the rows that
 * changed), so that closing the file mid-session, or a crash, loses nothing.
 *
 * Errors: 0 or a negative errno (SQLite codes mapped by sql_errno()).
 *
 * The code is in ranks.c (this API) and the rk*.c files it uses, one
 * subsystem each; rk.h lists them and holds the state they share.
 *
 * Collectives. An entry of category comm that is not point-to-point (no
 * `peer`, no send/recv in its name) is one rank's arrival at a collective
 * instance, keyed by its ext `comm` + `seq` when it has both, else by (op,
 * the process's `process_group` metadata, its occurrence count on that
 * process). An instance stays open in memory until every rank of its
 * communicator arrived (ext `comm_size`, the largest its arrivals gave, for
 * one keyed by comm + seq; else the world), then it is finalized: the last
 * arrival is the latest start, each rank's wait is last - own start capped at
 * its own duration, the skew last - first. A non-blocking collective's
 * arrival (an MPI_I* call with comm + seq) waits in the completion call (an
 * entry of category wait with the same comm + seq) instead: its wait is the
 * part of that call before the last arrival, and its instance also waits for
 * those calls (rkcoll.h). However many are open, an
 * arrival finds its own instance by its key (a hash lookup: the cost per
 * entry does not grow with the instances open), so one rank's entries may
 * run any distance ahead of another's at the daemon. Memory follows the
 * instances still open; at most RANKS_OPEN per session file: past that the
 * oldest is finalized as it is (partial) and counted in info.ranks_capped,
 * which the report gives (completeness.collectives_closed_at_cap, and the
 * verdict says so): a late arrival at such an instance then opens one of
 * its own, partial too, never another's. All of them are finalized when the
 * session ends (ranks_finish); those with fewer arrivals than they expect
 * (a rank's entries dropped, a rank that never came) count as partial.
 *
 * Exposed communication: per (process, device), the part of each comm entry
 * not covered by the union of the compute entries of that device, computed
 * from the intervals at flush time for the comm entries that end before the
 * latest start seen there (and for all at ranks_finish); compute intervals
 * are dropped once no pending comm entry can overlap them. An entry that
 * arrives too late to be counted exactly (a compute entry starting before
 * the end of a comm entry already counted, a comm entry starting before the
 * end of a compute interval already dropped) is counted in info.ranks_late
 * and the report flags it. So is a
 * device that holds more than RANKS_PENDING intervals (a comm entry spanning
 * everything after it): its pending entries are counted as they are.
 */
#ifndef TRACECTLD_RANKS_H
#define TRACECTLD_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "proto.h"

/* Collective instances kept open per session file at most: about 300 bytes each with up to
 * four arrivals (the instance, its arrivals, its hash slots), so at most ~20 MB for a job
 * whose ranks are that far apart at the daemon, or that lost that many arrivals. */
#define RANKS_OPEN    65536
#define RANKS_PENDING 65536 /* intervals kept per (process, device) for the exposure at most */
/*
 * The largest `world` the aggregates and reports use: a hello's larger world
 * is stored as given but counts as this one (collectives complete at it, a
 * report's missing ranks are counted up to it). 2^20 ranks is far more than
 * one daemon's sessions hold (a host runs a few hundred ranks), and keeps a
 * report's rank figures and its verdict's counts meaningful however large a
 * peer says the job is.
 */
#define RANKS_MAX_WORLD (1u << 20)

struct ranks;

/* Creates the tables if needed and prepares the statements. NULL on failure. */
struct ranks *ranks_new(sqlite3 *db);
/* NULL is a no-op. */
void ranks_free(struct ranks *r);
/* A new session file: marks its rank aggregates exact (inside the open transaction). */
int ranks_init_file(struct ranks *r);
/*
 * A file reopened mid-session: reloads the op categories, processes and
 * process groups, and the state the last commit saved (open instances,
 * occurrence counts, the exposure's pending intervals), so the aggregates go
 * on exactly. A file that did not save all of it (ranks_state 2, or an
 * import's intervals) is marked inexact. 0 or a negative errno.
 */
int ranks_load(struct ranks *r);
int ranks_op(struct ranks *r, uint32_t op_id, const char *name, const char *category);
int ranks_process(struct ranks *r, int64_t process_id, int64_t world);
/*
 * A process left: frees the look-up cache of its (last) device (RK_DOPS
 * slots, 4 KiB), which only its own entries use. Nothing else changes.
 */
void ranks_process_end(struct ranks *r, int64_t process_id);
/* Metadata of a process: `process_group` (a string or an integer) names its group;
 * PROTO_META_CPU_WAIT ("<step> <ns>") adds to its step's run-queue delay. */
int ranks_meta(struct ranks *r, int64_t process_id, const char *key, const char *sval, int64_t ival,
               bool is_str);
/* One stored entry (its rowid); x NULL: no ext map. 0 or a negative errno. */
int ranks_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e, uint32_t dev_id,
                const struct proto_ext *x, int64_t rowid);
/* True when open instances or pending comm entries wait for ranks_finish. */
bool ranks_pending(const struct ranks *r);
/* The session ends (or its file closes): finalizes every open instance and pending entry. */
int ranks_finish(struct ranks *r);
/* Writes the deltas since the last flush; inside the open transaction. 0 or a negative errno. */
int ranks_flush(struct ranks *r);
/* The transaction was rolled back: drops the deltas and marks the aggregates inexact. */
void ranks_discard(struct ranks *r);
/*
 * A session the last run left live (the daemon crashed or was killed): on
 * db (read-write, no transaction open), reloads the state its last commit
 * saved and finishes it as ranks_finish would have, in its own transaction.
 * 0 or a negative errno.
 */
int ranks_recover(sqlite3 *db);
/*
 * Rebuilds the rank aggregates of a whole file from its entries (ops'
 * current categories), keeping the steps' run-queue delays (no entry holds them): `tracectl
 * classify`, and files written before them. Runs in its own transaction on db (a read-write
 * connection, the session ended). 0, or a negative errno with why in err (SQLite's message of the
 * step that failed, e.g. a damaged block's, taken before the rollback).
 */
int ranks_rebuild(sqlite3 *db, char *err, size_t errlen);

#endif
