-- DATA_DIR/clickhouse.db: the ClickHouse sink's own state (daemon/sink/sink.h),
-- kept apart from the catalog so that the writer stays the only writer of
-- the catalog and the session files. One row per session the sink has not
-- forgotten: every entry with a rowid up to `sent` is in ClickHouse, none
-- after it but possibly the one batch in flight; done: all of its entries
-- and its final sessions/processes rows are there. clock_offset: what the
-- sink adds to the producers' monotonic start_ns to make the wall-clock
-- start_ns of ClickHouse (NULL until the session has an entry); fixed at the
-- first entry so that a batch falls on the same day whenever it is sent.
PRAGMA user_version = 1;
CREATE TABLE IF NOT EXISTS sent (
    session_id  INTEGER PRIMARY KEY,
    sent        INTEGER NOT NULL,
    done        INTEGER NOT NULL DEFAULT 0,
    clock_offset INTEGER
);
