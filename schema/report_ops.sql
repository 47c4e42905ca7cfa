-- Report: one row per op that has entries (ops.name is UNIQUE, so one id is
-- one name), in op id order so that report_durations.sql can be merged into
-- it; the report order (total_ns descending, then name) is applied in C
-- after the percentiles.
-- Columns: id, name, category, calls, total_ns, min_ns, max_ns, mem_bytes,
-- elements.
SELECT o.id, o.name, o.category, count(*), satsum(e.dur_ns), min(e.dur_ns),
       max(e.dur_ns), satsum(e.mem_bytes), satsum(coalesce(e.elements, s.elements, 0))
FROM entries e
JOIN ops o ON o.id = e.op_id
LEFT JOIN shapes s ON s.id = e.shape_id
GROUP BY o.id
ORDER BY o.id;
