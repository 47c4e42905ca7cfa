-- Report (aggregates): as report_ops_page.sql, from agg_ops.
SELECT o.id, o.name, o.category, a.calls, a.total_ns, a.min_ns, a.max_ns, a.mem_bytes,
       a.elements
FROM agg_ops a
JOIN ops o ON o.id = a.op_id
WHERE a.calls > 0 AND (?3 = 0 OR o.category = 'comm')
ORDER BY a.total_ns DESC, o.name
LIMIT ?1 OFFSET ?2;
