-- Report (aggregates): as report_devices.sql, from agg_devices.
SELECT d.name, a.calls, a.total_ns, a.mem_bytes
FROM agg_devices a
JOIN devices d ON d.id = a.device_id
WHERE a.calls > 0
ORDER BY d.name;
