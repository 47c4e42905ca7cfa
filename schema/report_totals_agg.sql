-- Report (aggregates): as report_totals.sql, from agg_session.
SELECT (SELECT count(*) FROM processes),
       (SELECT coalesce(satsum(dropped), 0) FROM processes),
       coalesce((SELECT entries FROM agg_session), 0),
       coalesce((SELECT total_ns FROM agg_session), 0),
       (SELECT end_ns FROM agg_session),
       (SELECT begin_ns FROM agg_session),
       coalesce((SELECT peak_bytes FROM agg_session), 0),
       coalesce((SELECT total_bytes FROM agg_session), 0);
