/* rkschema.c — the rank tables and their re-keying; see rkschema.h. */
#include "rkschema.h"

#include <errno.h>

#include "rkdelta.h"
#include "rkwrite.h"
#include "schema.h"

/* One row of rk_ops_v1 into the rk_ops and rk_devsteps deltas. */
static int rkschema_fold_row(sqlite3_stmt *st, void *arg)
{
    struct ranks *r = arg;
    int64_t pid = sqlite3_column_int64(st, 0);
    uint64_t step = (uint64_t)sqlite3_column_int64(st, 1);
    uint32_t dev = (uint32_t)sqlite3_column_int64(st, 2),
             op = (uint32_t)sqlite3_column_int64(st, 3);
    uint64_t calls = (uint64_t)sqlite3_column_int64(st, 4);
    uint64_t total = (uint64_t)sqlite3_column_int64(st, 5);
    uint64_t exposed = (uint64_t)sqlite3_column_int64(st, 7);
    uint64_t begin = (uint64_t)sqlite3_column_int64(st, 8);
    uint64_t end = (uint64_t)sqlite3_column_int64(st, 9);
    enum proto_cat cat = proto_cat_code((const char *)sqlite3_column_text(st, 10));
    struct rk_opsum *o = rkdelta_opsum(r, pid, dev, op);
    struct rk_devstep *d = rkdelta_devstep(r, pid, step, dev);

    if (o == NULL || d == NULL)
        return -ENOMEM;
    o->calls = rk_sat(o->calls, calls);
    o->total = rk_sat(o->total, total);
    o->elements = rk_sat(o->elements, (uint64_t)sqlite3_column_int64(st, 6));
    o->exposed = rk_sat(o->exposed, exposed);
    d->cat[cat] = rk_sat(d->cat[cat], total);
    d->exposed = rk_sat(d->exposed, exposed);
    d->first_row = 0;
    d->last_row = INT64_MAX;
    if (calls == 0)
        return 0; /* only exposure: no begin or end */
    o->begin = begin < o->begin ? begin : o->begin;
    o->end = end > o->end ? end : o->end;
    d->begin = begin < d->begin ? begin : d->begin;
    d->end = end > d->end ? end : d->end;
    return 0;
}

/*
 * Folds the rows of an rk_ops keyed by step (files written before rk_devsteps,
 * renamed rk_ops_v1 by rkschema_begin) into rk_ops and rk_devsteps. The rowids of
 * those steps' entries are not known: their bounds are all rowids.
 */
static int rkschema_fold(struct ranks *r)
{
    int err = rksql_each(r->db,
                         "SELECT v.process_id, v.step, v.device_id, v.op_id, v.calls,"
                         " v.total_ns, v.elements, v.exposed_ns, v.begin_ns, v.end_ns,"
                         " o.category FROM rk_ops_v1 v LEFT JOIN ops o ON o.id = v.op_id",
                         rkschema_fold_row, r);

    if (err != 0)
        return err;
    err = rkwrite_ops(r);
    rkdelta_reset(r);
    return err;
}

/*
 * The tables keyed by step first since info.ranks_layout 2 (schema/ranks.sql), and their
 * keys. A file written before has them keyed (process_id, step[, device_id]) and
 * (op_id, process_id, step): rkschema_begin renames those T_v1 and copies their rows into
 * the new tables, in the new key's order.
 */
static const struct {
    const char *table, *key;
} rk_rekeyed[] = {
    {"rk_devsteps", "step, process_id, device_id"},
    {"rk_steps", "step, process_id"},
    {"rk_coll_ranks", "step, op_id, process_id"},
};

#define RK_NREKEYED (sizeof(rk_rekeyed) / sizeof(rk_rekeyed[0]))

/* True when table exists and its key does not start with the step. */
static bool rkschema_old_key(sqlite3 *db, const char *table)
{
    int pk = rksql_column_pk(db, table, "step");

    return pk >= 0 && pk != 1;
}

/*
 * Creates the tables if needed. Inside a savepoint (*migrating) when the file
 * needs more: an rk_ops keyed by step is renamed rk_ops_v1 (*legacy:
 * rkschema_fold folds it once the statements are prepared), and the tables of
 * rk_rekeyed keyed the old way are renamed T_v1, then copied.
 */
int rkschema_begin(struct ranks *r, bool *legacy, bool *migrating)
{
    bool add_covered;
    unsigned rekey = 0;
    int rc;

    *legacy = rksql_has_column(r->db, "rk_ops", "step");
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if (rkschema_old_key(r->db, rk_rekeyed[i].table))
            rekey |= 1u << i;
    /* an rk_steps written before covered_ns (NULL there: its untracked time is not known),
     * added before a re-key copies its rows column for column */
    add_covered =
        rksql_has_table(r->db, "rk_steps") && !rksql_has_column(r->db, "rk_steps", "covered_ns");
    *migrating = *legacy || rekey != 0 || add_covered;
    if (*migrating && (rc = rksql_exec(r->db, "SAVEPOINT rk_migrate")) != 0)
        return rc;
    if (*legacy && (rc = rksql_exec(r->db, "ALTER TABLE rk_ops RENAME TO rk_ops_v1")) != 0)
        return rc;
    if (add_covered &&
        (rc = rksql_exec(r->db, "ALTER TABLE rk_steps ADD COLUMN covered_ns INTEGER")) != 0)
        return rc;
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((rekey & 1u << i) != 0 &&
            (rc = rksql_execf(r->db, "ALTER TABLE %s RENAME TO %s_v1", rk_rekeyed[i].table,
                              rk_rekeyed[i].table, "")) != 0)
            return rc;
    if ((rc = rksql_exec(r->db, schema_ranks_sql)) != 0)
        return rc;
    /* the columns are the same, in the same order: only the key moved */
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((rekey & 1u << i) != 0 &&
            (rc = rksql_execf(r->db, "INSERT INTO %s SELECT * FROM %s_v1 ORDER BY %s",
                              rk_rekeyed[i].table, rk_rekeyed[i].table, rk_rekeyed[i].key)) != 0)
            return rc;
    for (size_t i = 0; i < RK_NREKEYED; i++)
        if ((rekey & 1u << i) != 0 &&
            (rc = rksql_execf(r->db, "DROP TABLE %s_v1", rk_rekeyed[i].table, "", "")) != 0)
            return rc;
    /* an rk_open saved before ext comm_size: its instances expect the world, as they did */
    if (!rksql_has_column(r->db, "rk_open", "comm_size") &&
        (rc = rksql_exec(r->db, "ALTER TABLE rk_open ADD COLUMN comm_size INTEGER")) != 0)
        return rc;
    /* and one saved before non-blocking collectives waited for their completion calls: its
     * arrivals are blocking calls', as they were counted */
    if (!rksql_has_column(r->db, "rk_open", "flags") &&
        (rc = rksql_exec(r->db, "ALTER TABLE rk_open ADD COLUMN flags INTEGER;"
                                " ALTER TABLE rk_open ADD COLUMN wait_b_ns INTEGER;"
                                " ALTER TABLE rk_open ADD COLUMN wait_e_ns INTEGER")) != 0)
        return rc;
    return 0;
}

int rkschema_end(struct ranks *r, bool legacy, int err)
{
    if (err == 0 && (!legacy || (err = rkschema_fold(r)) == 0) &&
        (!legacy || (err = rksql_exec(r->db, "DROP TABLE rk_ops_v1")) == 0) &&
        (err = rksql_exec(r->db, "RELEASE rk_migrate")) == 0)
        return 0;
    rksql_exec(r->db, "ROLLBACK TO rk_migrate; RELEASE rk_migrate");
    return err != 0 ? err : -EIO;
}
