-- Report, a page of ops (ops_limit, a PROTOCOL.md Part 3 extension): the
-- rows of report_ops.sql in report order (total_ns descending, then name,
-- like analysis_sort_ops()), ?1 of them after the first ?2; with ?3 = 1 only
-- the "comm" ops. SQLite sorts, spilling to temporary files, so a page never
-- holds every op name of a session in memory.
-- Columns: id, name, category, calls, total_ns, min_ns, max_ns, mem_bytes,
-- elements.
SELECT o.id, o.name, o.category, count(*), satsum(e.dur_ns) AS total, min(e.dur_ns),
       max(e.dur_ns), satsum(e.mem_bytes), satsum(coalesce(e.elements, s.elements, 0))
FROM entries e
JOIN ops o ON o.id = e.op_id
LEFT JOIN shapes s ON s.id = e.shape_id
WHERE ?3 = 0 OR o.category = 'comm'
GROUP BY o.id
ORDER BY total DESC, o.name
LIMIT ?1 OFFSET ?2;
