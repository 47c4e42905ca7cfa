-- Report: the session header and the memory totals, in one scan of entries.
-- Columns: processes, dropped, entries, total_ns, end_ns (max start+dur),
-- begin_ns (min start), peak_bytes, total_bytes. Aggregates of an empty
-- session are 0, except end_ns and begin_ns, NULL when there are no entries.
SELECT (SELECT count(*) FROM processes),
       (SELECT coalesce(satsum(dropped), 0) FROM processes),
       count(*),
       coalesce(satsum(dur_ns), 0),
       max(start_ns + dur_ns),
       min(start_ns),
       coalesce(max(mem_bytes), 0),
       coalesce(satsum(mem_bytes), 0)
FROM entries;
