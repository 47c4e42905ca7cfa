-- Report (aggregates): as report_ops_page_agg.sql, for a page far from the
-- first (query.c decides). The sort then holds every op: it carries each
-- op's rank by name (read in order from the name index) instead of the name,
-- a few bytes an op rather than up to 1 KiB, and names are read for the
-- page's rows only.
WITH ranked AS (SELECT id, row_number() OVER (ORDER BY name) AS rnk FROM ops),
page AS (
    SELECT a.op_id, a.total_ns AS total, r.rnk
    FROM agg_ops a
    JOIN ranked r ON r.id = a.op_id
    WHERE a.calls > 0 AND (?3 = 0 OR (SELECT category FROM ops WHERE id = a.op_id) = 'comm')
    ORDER BY a.total_ns DESC, r.rnk
    LIMIT ?1 OFFSET ?2)
SELECT o.id, o.name, o.category, a.calls, a.total_ns, a.min_ns, a.max_ns, a.mem_bytes,
       a.elements
FROM page p
JOIN agg_ops a ON a.op_id = p.op_id
JOIN ops o ON o.id = p.op_id
ORDER BY p.total DESC, p.rnk;
