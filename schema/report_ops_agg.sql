-- Report (aggregates): as report_ops.sql, from agg_ops.
SELECT o.id, o.name, o.category, a.calls, a.total_ns, a.min_ns, a.max_ns, a.mem_bytes,
       a.elements
FROM agg_ops a
JOIN ops o ON o.id = a.op_id
WHERE a.calls > 0
ORDER BY o.id;
