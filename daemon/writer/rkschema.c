/* rkschema.c — the rank tables; see rkschema.h. */
#include "rkschema.h"

#include "rksql.h"
#include "schema.h"

int rkschema_create(struct ranks *r)
{
    return rksql_exec(r->db, schema_ranks_sql);
}
