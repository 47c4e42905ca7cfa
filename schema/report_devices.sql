-- Report: one row per device that has entries, by name in byte order
-- (devices.name has the BINARY collation); entries without a device
-- (device_id NULL) are in no row.
-- Columns: device, calls, total_ns, mem_bytes.
SELECT d.name, count(*), satsum(e.dur_ns), satsum(e.mem_bytes)
FROM entries e
JOIN devices d ON d.id = e.device_id
GROUP BY d.id
ORDER BY d.name;
