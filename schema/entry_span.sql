-- The whole interval of entries whose dur_ns is their self time (proto/PROTOCOL.md
-- Part 3, "ext key span"): one row per entry whose ext map gave `span`, keyed by the
-- entry's rowid. A side table of its own, as entry_link, so that the other side
-- tables keep their columns and files written before the key need no migration:
-- created by the writer with a session's first span. Reports never read it; the
-- export gives it back in each row's ext map, for the trace viewers' timelines.
CREATE TABLE IF NOT EXISTS entry_span (
    entry_rowid INTEGER PRIMARY KEY,   -- entries.rowid
    span        INTEGER NOT NULL       -- ns from start_ns to the entry's end, children included
);
