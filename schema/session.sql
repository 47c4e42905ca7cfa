-- One SQLite file per session: DATA_DIR/sessions/<id>.db.
-- Entries refer to ops, devices, processes and shapes by integer id; shapes
-- are canonical msgpack blobs (an array of uint; an array of arrays of uint).
-- The view `trace` shows every entry with its names, for people using sqlite3.
-- info: the file's format (schema_version, checked by every reader: daemon/shared/info.h;
-- format, rows or blocks) and its aggregates' state (aggregates, ranks, ...).
CREATE TABLE IF NOT EXISTS info (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS processes (
    id          INTEGER PRIMARY KEY,   -- the process_id of `welcome`
    rank        INTEGER,
    world       INTEGER,
    pid         INTEGER,               -- from the connection (SO_PEERCRED)
    uid         INTEGER,               -- from the connection (SO_PEERCRED)
    host        TEXT,
    device      TEXT,
    started_ns  INTEGER NOT NULL,      -- CLOCK_REALTIME
    ended_ns    INTEGER,
    bye         INTEGER NOT NULL DEFAULT 0,  -- 1: ended with `bye`; 2: cut by the daemon's stop
    dropped     INTEGER NOT NULL DEFAULT 0,
    claimed_pid INTEGER                -- the pid the hello said (unverified)
);
-- What each producer said of its own accounting (PROTOCOL.md Part 3, client
-- counters), as of the last flush or bye the daemon read: recorded, dropped
-- (never sent), sent (written to the socket); acked is the last ack the
-- process is known to have had (the bye's word; else the daemon's last ack
-- sent while it was connected). final: 1 when it came with bye.
CREATE TABLE IF NOT EXISTS process_counters (
    process_id  INTEGER PRIMARY KEY,
    recorded    INTEGER NOT NULL,
    dropped     INTEGER NOT NULL,
    sent        INTEGER NOT NULL,
    acked       INTEGER NOT NULL,
    final       INTEGER NOT NULL DEFAULT 0
);
-- What each producer did not send as entries per op, as its last flush or
-- bye said (cumulative): dropped (full ring, refused) or, the counted_*
-- part, counted by design (the MPI interposer's TRACECTL_MPI_P2P counters).
-- The report's ops rows add them as dropped_calls/_ns and counted_calls/_ns,
-- so that per-op totals stay exact.
CREATE TABLE IF NOT EXISTS process_op_drops (
    process_id    INTEGER NOT NULL,
    op_id         INTEGER NOT NULL,      -- the session's op id (ops.id)
    calls         INTEGER NOT NULL,      -- every call not sent, counted ones included
    total_ns      INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,      -- their mem_bytes
    counted       INTEGER NOT NULL DEFAULT 0, -- of calls: counted, no entry meant
    counted_ns    INTEGER NOT NULL DEFAULT 0,
    counted_bytes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (process_id, op_id)
) WITHOUT ROWID;
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
-- Shapes repeat constantly (the same layers every step): each distinct pair
-- of (out_shape, in_shapes) is stored once; entries refer to it.
CREATE TABLE IF NOT EXISTS shapes (
    id          INTEGER PRIMARY KEY,
    out_shape   BLOB,                  -- canonical msgpack array of uint, or NULL
    in_shapes   BLOB,                  -- canonical msgpack array of arrays, or NULL
    elements    INTEGER NOT NULL       -- the product of out_shape (0 without one)
);
CREATE TABLE IF NOT EXISTS entries (
    process_id  INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    op_id       INTEGER NOT NULL,
    device_id   INTEGER,               -- NULL: no device
    start_ns    INTEGER NOT NULL,
    dur_ns      INTEGER NOT NULL,
    elements    INTEGER,               -- NULL: the product of its out_shape (shapes.elements)
    mem_bytes   INTEGER NOT NULL,
    shape_id    INTEGER                -- NULL: no shapes
);
CREATE VIEW IF NOT EXISTS trace AS
    SELECT e.rowid AS id, p.rank AS rank, e.step AS step, o.name AS op,
           o.category AS category, d.name AS device, e.start_ns AS start_ns,
           e.dur_ns AS dur_ns, coalesce(e.elements, s.elements, 0) AS elements,
           e.mem_bytes AS mem_bytes, s.out_shape AS out_shape, s.in_shapes AS in_shapes
    FROM entries e
    JOIN ops o ON o.id = e.op_id
    JOIN processes p ON p.id = e.process_id
    LEFT JOIN devices d ON d.id = e.device_id
    LEFT JOIN shapes s ON s.id = e.shape_id;

-- Report aggregates, kept up to date by the writer in the same transaction
-- as the entries they summarise (info.aggregates = 1 while they are exact;
-- the query engine then reads these instead of scanning every entry).
CREATE TABLE IF NOT EXISTS agg_session (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    entries     INTEGER NOT NULL,
    total_ns    INTEGER NOT NULL,
    begin_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    peak_bytes  INTEGER NOT NULL,
    total_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agg_ops (
    op_id       INTEGER PRIMARY KEY,
    calls       INTEGER NOT NULL,
    total_ns    INTEGER NOT NULL,
    min_ns      INTEGER NOT NULL,
    max_ns      INTEGER NOT NULL,
    mem_bytes   INTEGER NOT NULL,
    elements    INTEGER NOT NULL
);
-- Per-op duration histogram: values under 256 ns exactly, above that 128
-- buckets per power of two (relative width 1/128 < 1 %); each bucket keeps
-- its count and the smallest duration seen in it, the value percentiles
-- report. One row per op and chunk of 64 buckets (bucket / 64) that has a
-- count, id = op_id << 7 | chunk; data: a little-endian uint64 whose bit i
-- says bucket chunk * 64 + i has a count, then for each such bucket two
-- LEB128 varints, the count and the smallest duration minus the bucket's
-- lowest value (agg.h, agg_chunk_decode).
CREATE TABLE IF NOT EXISTS agg_hist_chunks (
    id          INTEGER PRIMARY KEY,
    data        BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS agg_devices (
    device_id   INTEGER PRIMARY KEY,
    calls       INTEGER NOT NULL,
    total_ns    INTEGER NOT NULL,
    mem_bytes   INTEGER NOT NULL
);
-- The 1000 slowest entries and the 1000 with the most memory: entry is the
-- entry's rowid, the other columns are the entry's own (as in `entries`),
-- so that a report reads them without reading the entries.
CREATE TABLE IF NOT EXISTS top_slow (
    entry       INTEGER PRIMARY KEY,
    process_id  INTEGER,
    step        INTEGER,
    op_id       INTEGER,
    device_id   INTEGER,
    start_ns    INTEGER,
    dur_ns      INTEGER,
    mem_bytes   INTEGER,
    shape_id    INTEGER
);
CREATE TABLE IF NOT EXISTS top_mem (
    entry       INTEGER PRIMARY KEY,
    process_id  INTEGER,
    step        INTEGER,
    op_id       INTEGER,
    device_id   INTEGER,
    start_ns    INTEGER,
    dur_ns      INTEGER,
    mem_bytes   INTEGER,
    shape_id    INTEGER
);
