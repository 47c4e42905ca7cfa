/*
 * schema — the SQL of schema/*.sql, embedded at build time by
 * cmake/embed_sql.cmake: schema/<name>.sql becomes schema_<name>_sql.
 */
#ifndef TRACECTLD_SCHEMA_H
#define TRACECTLD_SCHEMA_H

extern const char schema_catalog_sql[];
extern const char schema_session_sql[];

#endif
