-- Peer snapshot (daemon/peer/peersnap.c): a session's header from its aggregates,
-- for the member to send its home. Columns: aggregates exact (1), the file's
-- schema_version (daemon/shared/info.h), processes, dropped, distinct ranks, entries, total_ns,
-- end_ns, begin_ns, peak_bytes, total_bytes.
SELECT (SELECT value FROM info WHERE key = 'aggregates'),
       (SELECT value FROM info WHERE key = 'schema_version'),
       (SELECT count(*) FROM processes),
       (SELECT coalesce(sum(dropped), 0) FROM processes),
       (SELECT count(DISTINCT rank) FROM processes),
       coalesce((SELECT entries FROM agg_session), 0),
       coalesce((SELECT total_ns FROM agg_session), 0),
       coalesce((SELECT end_ns FROM agg_session), 0),
       coalesce((SELECT begin_ns FROM agg_session), 0),
       coalesce((SELECT peak_bytes FROM agg_session), 0),
       coalesce((SELECT total_bytes FROM agg_session), 0);
