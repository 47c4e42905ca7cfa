-- Report (aggregates of a file without info.top, written by older daemons):
-- as report_slowest.sql, among the kept top entries, read from the entries.
SELECT o.name, p.rank, d.name, e.step, e.start_ns, e.dur_ns, e.mem_bytes,
       s.out_shape, s.in_shapes
FROM top_slow t  -- CROSS JOIN: the kept rows drive the join, never a scan of entries
CROSS JOIN entries e ON e.rowid = t.entry
JOIN ops o ON o.id = e.op_id
LEFT JOIN processes p ON p.id = e.process_id
LEFT JOIN devices d ON d.id = e.device_id
LEFT JOIN shapes s ON s.id = e.shape_id
ORDER BY e.dur_ns DESC, e.start_ns ASC, e.rowid ASC
LIMIT ?1;
