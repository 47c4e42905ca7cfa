-- The catalog: DATA_DIR/catalog.db, the list of sessions.
-- Session ids are never reused (AUTOINCREMENT), even after a delete.
PRAGMA user_version = 1;
CREATE TABLE IF NOT EXISTS sessions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL DEFAULT 'live',   -- 'live' or 'ended'
    uid         INTEGER,                           -- uid of the first producer
    started_ns  INTEGER NOT NULL,                  -- CLOCK_REALTIME
    ended_ns    INTEGER,
    processes   INTEGER NOT NULL DEFAULT 0,
    entries     INTEGER NOT NULL DEFAULT 0,
    dropped     INTEGER NOT NULL DEFAULT 0,
    interrupted INTEGER NOT NULL DEFAULT 0         -- 1: the daemon was stopped while it was live,
                                                   -- 2: it died then (recovered at the next start)
);
CREATE INDEX IF NOT EXISTS sessions_name ON sessions(name, id);
