-- Report (aggregates): as report_hotspots.sql, among the kept top entries,
-- whose fields top_mem holds: the entries are not read.
SELECT o.name, p.rank, d.name, t.step, t.start_ns, t.dur_ns, t.mem_bytes,
       s.out_shape, s.in_shapes
FROM top_mem t
JOIN ops o ON o.id = t.op_id
LEFT JOIN processes p ON p.id = t.process_id
LEFT JOIN devices d ON d.id = t.device_id
LEFT JOIN shapes s ON s.id = t.shape_id
WHERE t.mem_bytes > ?2
ORDER BY t.mem_bytes DESC, t.start_ns ASC, t.entry ASC
LIMIT ?1;
