-- Report (aggregates): as report_durations.sql, from the histogram chunks
-- ascending within an op: query.c decodes each chunk
-- into its buckets' smallest durations with their counts (agg_chunk_decode).
-- Columns: op_id, chunk, data.
SELECT h.id >> 7, h.id & 127, h.data
FROM agg_hist_chunks h
JOIN ops o ON o.id = h.id >> 7
ORDER BY h.id;
