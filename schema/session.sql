-- One SQLite file per session: DATA_DIR/sessions/<id>.db.
-- Entries refer to ops, devices and processes by integer id; shapes are
-- canonical msgpack blobs (an array of uint; an array of arrays of uint).
-- The view `trace` shows every entry with its names, for people using sqlite3.
PRAGMA user_version = 1;
CREATE TABLE IF NOT EXISTS info (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS processes (
    id          INTEGER PRIMARY KEY,   -- the process_id of `welcome`
    rank        INTEGER,
    world       INTEGER,
    pid         INTEGER,
    uid         INTEGER,
    host        TEXT,
    device      TEXT,
    started_ns  INTEGER NOT NULL,      -- CLOCK_REALTIME
    ended_ns    INTEGER,
    bye         INTEGER NOT NULL DEFAULT 0,  -- 1: ended with `bye`
    dropped     INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (
    process_id  INTEGER NOT NULL,
    key         TEXT    NOT NULL,
    value,
    PRIMARY KEY (process_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ops (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    category    TEXT NOT NULL          -- given by a producer, else classified by name
);
CREATE TABLE IF NOT EXISTS devices (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS entries (
    process_id  INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    op_id       INTEGER NOT NULL,
    device_id   INTEGER,               -- NULL: no device
    start_ns    INTEGER NOT NULL,
    dur_ns      INTEGER NOT NULL,
    elements    INTEGER NOT NULL,
    mem_bytes   INTEGER NOT NULL,
    out_shape   BLOB,
    in_shapes   BLOB
);
CREATE VIEW IF NOT EXISTS trace AS
    SELECT e.rowid AS id, p.rank AS rank, e.step AS step, o.name AS op,
           o.category AS category, d.name AS device, e.start_ns AS start_ns,
           e.dur_ns AS dur_ns, e.elements AS elements, e.mem_bytes AS mem_bytes,
           e.out_shape AS out_shape, e.in_shapes AS in_shapes
    FROM entries e
    JOIN ops o ON o.id = e.op_id
    JOIN processes p ON p.id = e.process_id
    LEFT JOIN devices d ON d.id = e.device_id;
