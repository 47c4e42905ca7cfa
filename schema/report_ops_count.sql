-- Report: how many rows report_ops.sql has (ops_total of a paged report).
SELECT count(DISTINCT o.id)
FROM entries e
JOIN ops o ON o.id = e.op_id;
