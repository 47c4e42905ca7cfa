-- The ClickHouse schema of the sink (tracectld --clickhouse URL, docs/clickhouse.md):
-- every daemon of a fleet streams its sessions into these tables, created if
-- absent when the sink starts. Statements end with ';' at the end of a line
-- (the sink sends them one by one). Written for ClickHouse 18.16 (Debian 12):
-- it has no column codecs (Delta, DoubleDelta: a syntax error), LowCardinality
-- is experimental there (and measured no smaller: names sorted together
-- compress to almost nothing as plain String), and insert_deduplicate applies
-- to Replicated tables only, so exactly-once is the sink's own check of the
-- `batch` column (docs/clickhouse.md, "Exactly once").
CREATE DATABASE IF NOT EXISTS tracectl;

-- One row per stored entry. (host, session_id) names a session across the
-- fleet: host is the daemon's host name, session_id its id on that daemon.
-- start_ns is wall-clock time: producers send a per-host monotonic clock,
-- to which the sink adds the session's sessions.clock_offset_ns (so
-- start_ns - clock_offset_ns is what `tracectl export` gives). Partitioned
-- by UTC day of start_ns (a batch never spans two days, so an INSERT of one
-- batch writes one part: atomic); ordered by op first for per-op questions,
-- then by session and rank, then time.
CREATE TABLE IF NOT EXISTS tracectl.entries (
    host        String,
    session_id  UInt64,
    session     String,             -- the session's name
    rank        Int32,              -- -1: the process gave none
    process_id  UInt32,             -- the process in its session (tracectl.processes)
    step        UInt64,
    op          String,
    category    String,
    device      String,             -- '': none
    start_ns    UInt64,             -- wall clock (CLOCK_REALTIME), ns
    dur_ns      UInt64,
    elements    UInt64,
    mem_bytes   UInt64,
    stream      Nullable(UInt64),   -- the entry's ext map (proto/PROTOCOL.md Part 3); NULL: absent
    peer        Nullable(UInt64),
    tag         Nullable(Int64),
    comm        Nullable(UInt64),
    seq         Nullable(UInt64),
    comm_size   Nullable(UInt32),
    batch       UInt64              -- the session rowid of its batch's last entry
) ENGINE = MergeTree
PARTITION BY intDiv(start_ns, 86400000000000)
ORDER BY (op, host, session_id, rank, start_ns);

-- What `tracectl sessions` shows, one row per session, sent when the sink
-- first sees it and again when it has sent all of its entries. A newer
-- `version` replaces an older row: read with FINAL (or argMax by version).
CREATE TABLE IF NOT EXISTS tracectl.sessions (
    host        String,
    session_id  UInt64,
    session     String,
    state       String,             -- 'live' or 'ended'
    uid         Int64,
    started_ns  UInt64,
    ended_ns    UInt64,             -- 0 while live
    processes   UInt64,
    entries     UInt64,
    dropped     UInt64,
    interrupted UInt8,              -- 0 no, 1 the daemon was stopped, 2 it died (catalog.sql)
    hosts       Array(String),      -- the hosts its processes said they ran on
    clock_offset_ns Int64,          -- added to the producers' start_ns (entries.start_ns)
    version     UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (host, session_id);

-- Each process of a session, with its metadata (e.g. library versions) as
-- two parallel arrays: meta_value[indexOf(meta_key, 'torch')].
CREATE TABLE IF NOT EXISTS tracectl.processes (
    host         String,
    session_id   UInt64,
    process_id   UInt32,
    rank         Int32,
    world        Int32,
    pid          Int64,
    process_host String,
    device       String,
    started_ns   UInt64,
    ended_ns     UInt64,
    bye          UInt8,             -- 1 ended with bye, 2 cut by the daemon's stop
    dropped      UInt64,
    meta_key     Array(String),
    meta_value   Array(String),
    version      UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (host, session_id, process_id);

-- Per process of a session, what the report's `ranks` section sums: who
-- arrived last at collectives and the time that cost the others (caused_ns),
-- who waited, and the time per category, from the session file's rank
-- aggregates (rk_steps), sent with the session's rows. A file without them
-- sends none.
CREATE TABLE IF NOT EXISTS tracectl.ranks (
    host         String,
    session_id   UInt64,
    process_id   UInt32,
    rank         Int32,
    process_host String,
    steps        UInt64,
    collectives  UInt64,            -- collective instances it took part in
    arrived_last UInt64,            -- instances it arrived last at
    caused_ns    UInt64,            -- skew of those instances
    waited_ns    UInt64,            -- time it lost waiting for the last arrival
    compute_ns   UInt64,
    comm_ns      UInt64,
    memory_ns    UInt64,
    wait_ns      UInt64,
    exposed_ns   UInt64,            -- comm time not overlapped by compute
    version      UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (host, session_id, process_id);
