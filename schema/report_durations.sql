-- Report: every distinct duration of an op with its count, grouped by op id
-- like report_ops.sql and ascending within an op, for exact nearest-rank
-- percentiles. Read in the same transaction as report_ops.sql, so the groups
-- and counts agree.
-- Columns: op_id, dur_ns, count.
SELECT e.op_id, e.dur_ns, count(*)
FROM entries e
JOIN ops o ON o.id = e.op_id
GROUP BY e.op_id, e.dur_ns
ORDER BY e.op_id, e.dur_ns;
