-- Report (aggregates of a file without info.histogram, written by older
-- daemons): as report_durations.sql, from the histogram's rows: each
-- bucket's smallest duration with its count, ascending within an op.
SELECT h.op_id, h.min_ns, h.count
FROM agg_hist h
JOIN ops o ON o.id = h.op_id
ORDER BY h.op_id, h.bucket;
