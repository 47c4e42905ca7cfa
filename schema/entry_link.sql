-- Links between entries (proto/PROTOCOL.md Part 3, "Links between entries"):
-- one row per entry whose ext map gave `id`, `parent` or `launcher`, keyed by
-- the entry's rowid; NULL where a key was absent. A side table of its own, so
-- that entry_ext keeps its columns: created by the writer with a session's
-- first link, files without links have no such table. id and parent are the producer's, unique within
-- its process (entries.process_id); launcher is an ops.id. Values above
-- INT64_MAX are stored as the int64 of the same 64 bits (SQL sees them
-- negative), and the export gives them back unsigned.
CREATE TABLE IF NOT EXISTS entry_link (
    entry_rowid INTEGER PRIMARY KEY,   -- entries.rowid
    id          INTEGER,               -- this entry's id within its process
    parent      INTEGER,               -- the id of the entry it is nested in
    launcher    INTEGER                -- ops.id of the CPU op that launched it
);
