/*
 * sink — streams every stored entry into ClickHouse (tracectld --clickhouse
 * URL; docs/clickhouse.md), on a thread of its own, off by default.
 *
 * DESIGN
 * The sink never touches the writer or the loop: it reads what the writer
 * has committed, on its own read-only connections (the catalog for the list
 * of sessions, each session file through sink_rows.h), every SINK_POLL_MS,
 * so ingest never waits for it and its backlog is the session files
 * themselves (never memory). Per session it keeps, in DATA_DIR/clickhouse.db
 * (its own SQLite file, synchronous=FULL: the writer stays the only writer
 * of the catalog and the session files), `sent`: every entry with a rowid up
 * to it is in ClickHouse, none after it except possibly the one batch in
 * flight. A batch is up to SINK_BATCH entries after `sent`, of one UTC day:
 * one INSERT of one part, which MergeTree applies all or nothing; each row
 * carries batch = the batch's last rowid. `sent` moves to it once the server
 * answered 200, and is committed before the next batch is read.
 *
 * Exactly once: after any doubt (the start of the daemon, a failed or timed
 * out INSERT) the sink first waits until no query of that session's runs on
 * the server (system.processes, by query_id prefix), then asks whether the
 * batch after `sent` is there (max(batch) > sent, on that day's partition),
 * and moves `sent` to it if so; only then does it read and send. So an entry
 * acked by the daemon reaches ClickHouse once across a ClickHouse outage or
 * restart, a daemon restart and a kill -9 of the daemon. Failures are retried
 * with a backoff from SINK_RETRY_MIN_MS doubling to SINK_RETRY_MAX_MS.
 *
 * Producers' start_ns are a per-host monotonic clock: each row gets it plus
 * the session's clock offset (sink_offset in sink.c), fixed at its first
 * entry and kept in clickhouse.db, so that a batch falls on the same day
 * whenever it is sent. The sessions, processes and ranks tables are
 * ReplacingMergeTree rows sent when a session is first seen and again when
 * all of its entries are sent (it has ended): re-sending one is harmless.
 * Retention by age (--retain-days) keeps a session until it is sent
 * (sink_pending); one deleted before (tracectl delete, --retain-bytes)
 * loses what was not sent, which is logged.
 *
 * MEMORY: one batch at a time, SINK_BATCH entries encoded (about 110 bytes
 * each with short names: 7 MiB), and the names of the session being read;
 * a backlog of any size costs disk (the session files), never memory.
 *
 * Lifecycle: sink_new() on the loop thread at start-up (reads the auth file,
 * opens DATA_DIR/clickhouse.db), sink_start() starts the thread, sink_stop()
 * ends any transfer and joins it, sink_free() releases the rest.
 * sink_status() is safe from any thread.
 */
#ifndef TRACECTLD_SINK_H
#define TRACECTLD_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SINK_BATCH        65536 /* entries per INSERT at most */
#define SINK_POLL_MS      200   /* how often the committed entries are looked at when idle */
#define SINK_RETRY_MIN_MS 250
#define SINK_RETRY_MAX_MS 5000
#define SINK_TURN_BATCHES 4 /* batches of one session before the next one's turn */

struct sink;

/*
 * A sink into url (http[s]://host:port/) keeping its state in data_dir,
 * authenticating with the "user:password" line of auth_file (NULL: none),
 * which must be a regular file readable by its owner only (0600). host names
 * this daemon's rows (NULL: gethostname()). Returns NULL with a one-line
 * message in err on failure.
 */
struct sink *sink_new(const char *data_dir, const char *url, const char *auth_file,
                      const char *host, char *err, size_t errlen);
/* Starts the thread. 0 or a negative errno. */
int sink_start(struct sink *k);
/* Ends the transfer under way and joins the thread; what was not sent stays in the backlog. */
void sink_stop(struct sink *k);
/* NULL is a no-op. */
void sink_free(struct sink *k);

struct sink_status {
    const char *state;      /* "starting", "streaming", "idle" (all sent), "retrying" */
    uint64_t backlog;       /* committed entries not yet in ClickHouse, as of the last look */
    uint64_t sent;          /* entries sent since the daemon started */
    uint64_t batches;       /* INSERTs that succeeded since then */
    uint64_t sessions;      /* sessions not wholly sent yet */
    char last_error[256];   /* "" when none */
    uint64_t last_error_ns; /* CLOCK_REALTIME of it; 0: none */
    const char *url;
};

/*
 * Whether session id is not wholly in ClickHouse yet (true too before the
 * sink's first look at the catalog): retention by age keeps such a session
 * until it is. Any thread.
 */
bool sink_pending(struct sink *k, int64_t id);

/* A copy of the figures. Any thread. */
void sink_status(struct sink *k, struct sink_status *st);

#endif
