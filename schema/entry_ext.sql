-- The ext maps of entries (proto/PROTOCOL.md Part 3, "entry ext"): one row
-- per entry that carried one, keyed by the entry's rowid; NULL where a key was
-- absent. Created by the writer when a session's first ext map arrives, so
-- session files without ext maps have no such table. Unsigned values above INT64_MAX (a 64-bit checksum, a
-- hashed communicator id) are stored as the int64 of the same 64 bits: SQL
-- sees them negative, the export gives them back as unsigned.
CREATE TABLE IF NOT EXISTS entry_ext (
    entry_rowid INTEGER PRIMARY KEY,   -- entries.rowid
    stream      INTEGER,               -- the producer's track: CUDA stream, thread id
    peer        INTEGER,               -- peer rank of a point-to-point call
    tag         INTEGER,               -- MPI tag (may be negative)
    comm        INTEGER,               -- communicator / process-group id
    seq         INTEGER,               -- per-communicator collective sequence number
    checksum    INTEGER,               -- 64-bit checksum of the op's output
    comm_size   INTEGER                -- ranks in the communicator
);
