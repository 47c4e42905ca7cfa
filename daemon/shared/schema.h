/*
 * schema — the SQL of the schema/ .sql files, embedded at build time by
 * cmake/embed_sql.cmake: schema/<name>.sql becomes schema_<name>_sql.
 */
#ifndef TRACECTLD_SCHEMA_H
#define TRACECTLD_SCHEMA_H

extern const char schema_catalog_sql[];
extern const char schema_session_sql[];
extern const char schema_session_blocks_sql[]; /* the blocks format: before session.sql */
extern const char schema_entry_ext_sql[];      /* created on demand: the first ext map */
extern const char schema_entry_link_sql[];     /* created on demand: the first id/parent/launcher */
extern const char schema_entry_span_sql[];     /* created on demand: the first span */
extern const char schema_ranks_sql[]; /* created when the writer opens a file (rkschema.c) */
/* The ClickHouse sink (sink.h): the server's tables, and its own state file. */
extern const char schema_clickhouse_sql[];
extern const char schema_sink_state_sql[];
/* The report queries of query.c, one statement each. */
extern const char schema_report_totals_sql[];
extern const char schema_report_ops_sql[];
extern const char schema_report_durations_sql[];
extern const char schema_report_slowest_sql[];
extern const char schema_report_hotspots_sql[];
extern const char schema_report_devices_sql[];
extern const char schema_report_totals_agg_sql[];
extern const char schema_report_ops_agg_sql[];
extern const char schema_report_durations_agg_sql[];
extern const char schema_report_slowest_agg_sql[];
extern const char schema_report_hotspots_agg_sql[];
extern const char schema_report_devices_agg_sql[];
extern const char schema_peer_totals_sql[]; /* a peer snapshot's header (peersnap.c) */
/* A page of ops (ops_limit): its rows sorted by SQLite, and how many there are in all. */
extern const char schema_report_ops_page_sql[];
extern const char schema_report_ops_page_agg_sql[];
extern const char schema_report_ops_far_agg_sql[];
extern const char schema_report_ops_count_sql[];
extern const char schema_report_ops_count_agg_sql[];

#endif
