-- The blocks storage format (info.format = 2; the row format is 1): entries
-- are stored in blocks of up to 1024, one row each, encoded as daemon/shared/block.h
-- says, and `entries` is a read-only virtual table over them (module
-- tracectl_blocks, daemon/shared/vtab.h) with the columns and rowids the row
-- format's table has, so that the rest of session.sql (the `trace` view),
-- the reports and the exports read either format unchanged. Run before
-- session.sql, whose CREATE TABLE IF NOT EXISTS entries then does nothing.
CREATE TABLE IF NOT EXISTS blocks (
    id          INTEGER PRIMARY KEY,   -- rowid of its first entry: it holds id .. id + n - 1
    n           INTEGER NOT NULL,      -- entries, 1 .. 1024
    min_start   INTEGER NOT NULL,      -- the smallest and largest start_ns of its entries
    max_start   INTEGER NOT NULL,
    min_proc    INTEGER NOT NULL,      -- the smallest and largest process_id
    max_proc    INTEGER NOT NULL,
    proc_mask   INTEGER NOT NULL,      -- bit (process_id & 63) of each of its entries
    op_mask     INTEGER NOT NULL,      -- bit (op_id & 63) of each of its entries
    restarts    BLOB NOT NULL,         -- byte offset in data of every 128th entry (uint32 LE)
    data        BLOB NOT NULL          -- the entries (daemon/shared/block.h)
);
CREATE VIRTUAL TABLE IF NOT EXISTS entries USING tracectl_blocks(blocks);
