-- Report (aggregates): how many rows report_ops_agg.sql has.
SELECT count(*)
FROM agg_ops a
JOIN ops o ON o.id = a.op_id
WHERE a.calls > 0;
