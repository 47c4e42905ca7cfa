-- Report: every entry's duration, grouped by op id like report_ops.sql and
-- ascending within an op, for exact nearest-rank percentiles. Read in the
-- same transaction as report_ops.sql, so the groups and counts agree.
-- Columns: op_id, dur_ns.
SELECT e.op_id, e.dur_ns
FROM entries e
JOIN ops o ON o.id = e.op_id
ORDER BY e.op_id, e.dur_ns;
