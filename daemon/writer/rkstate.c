/* rkstate.c — the rank aggregates' state saved between commits; see rkstate.h. */
#include "rkstate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "rkcoll.h"
#include "rkcover.h"
#include "rkdelta.h"
#include "rkexpose.h"
#include "store.h"
#include "sqlutil.h"

int rkstate_prepare(struct ranks *r)
{
    int rc;

    if ((rc = rksql_up_prepare(r->db, &r->ins_open, "INSERT OR REPLACE INTO rk_open VALUES", 15,
                               "")) != 0 ||
        /* not (kind, k1, k2, k3) IN (VALUES ...): SQLite would scan the table */
        (rc = rksql_up_prepare_rows(r->db, &r->del_open, 4, "DELETE FROM rk_open WHERE ",
                                    "(kind = ? AND k1 = ? AND k2 = ? AND k3 = ?)", " OR ", "")) !=
            0 ||
        (rc = rksql_up_prepare(r->db, &r->up_occ, "INSERT OR REPLACE INTO rk_occ VALUES", 4, "")) !=
            0 ||
        (rc = rksql_up_prepare(r->db, &r->ins_pend, "INSERT INTO rk_pend VALUES", 8, "")) != 0)
        return rc;
    if ((rc = sqlite3_prepare_v3(r->db,
                                 "DELETE FROM rk_pend WHERE process_id = ?1 AND device_id = ?2", -1,
                                 SQLITE_PREPARE_PERSISTENT, &r->del_pend, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v3(r->db, "DELETE FROM rk_open", -1, SQLITE_PREPARE_PERSISTENT,
                                 &r->clear_open, NULL)) != SQLITE_OK)
        return sql_errno(rc);
    return sql_errno(sqlite3_prepare_v3(
        r->db, "INSERT OR REPLACE INTO rk_devstate VALUES (?1, ?2, ?3, ?4, ?5, ?6)", -1,
        SQLITE_PREPARE_PERSISTENT, &r->up_devstate, NULL));
}

void rkstate_free(struct ranks *r)
{
    rksql_up_free(&r->ins_open);
    rksql_up_free(&r->del_open);
    rksql_up_free(&r->up_occ);
    rksql_up_free(&r->ins_pend);
    sqlite3_finalize(r->del_pend);
    sqlite3_finalize(r->up_devstate);
    sqlite3_finalize(r->clear_open);
    free(r->gone);
    free(r->orow);
}

/* qsort, which must not be given NULL (an empty array never allocated) */
static void rkstate_sort(void *a, size_t n, size_t sz, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(a, n, sz, cmp);
}

static int rkstate_orow_cmp(const void *x, const void *y)
{
    const struct rk_orow *a = x, *b = y;
    int c = 0;

    for (int i = 0; i < 5 && c == 0; i++)
        c = rk_cmp_i64(a->key[i], b->key[i]);
    return c;
}

/*
 * The arrivals at open instances in rk_open: those added since the last
 * commit inserted, the closed instances' deleted; or, when that is more
 * work, the table emptied and every open arrival written again. An insert
 * among the table's rows costs about twice one into an emptied table, and
 * deleting an instance's rows three times (callgrind, SQLite 3.40): a busy
 * session (many instances open and closed between two commits) rewrites
 * the table, a light one (an arrival or two per commit) does not. The rows
 * are the same either way, but for comm_size: a rewritten arrival carries
 * the instance's size now, the largest its rows had (what rkstate_load_open
 * reads back).
 */
static int rkstate_save_open(struct ranks *r)
{
    size_t open = 0, fresh = 0;
    int rc;

    for (size_t i = 0; i < r->n_inst; i++) {
        open += r->inst[i].n;
        fresh += r->inst[i].n - r->inst[i].n_saved;
    }
    if (open < 2 * fresh + 3 * r->n_gone) {
        if ((rc = rksql_run(r->clear_open, NULL, 0)) != 0)
            return rc;
        r->n_gone = 0;
        for (size_t i = 0; i < r->n_inst; i++) {
            r->inst[i].n_saved = 0;
            r->inst[i].in_table = false;
        }
    }

    for (size_t i = 0; i < r->n_gone; i++) {
        const struct rk_ikey *k = &r->gone[i];
        int64_t v[4] = {(int64_t)k->kind, (int64_t)k->k1, (int64_t)k->k2, (int64_t)k->k3};
        if ((rc = rksql_up_add(&r->del_open, v)) != 0)
            return rc;
    }
    r->n_gone = 0;
    /* before the arrivals: an instance may have closed and opened again under its key */
    if ((rc = rksql_up_end(&r->del_open)) != 0)
        return rc;
    /* in the table's key order: each row lands beside the last */
    r->n_orow = 0;
    for (size_t i = 0; i < r->n_inst; i++) {
        const struct rk_inst *in = &r->inst[i];
        for (size_t j = in->n_saved; j < in->n; j++) {
            struct rk_orow *o;
            if (rkmap_grow((void **)&r->orow, &r->cap_orow, r->n_orow, sizeof(*r->orow)) < 0)
                return -ENOMEM;
            o = &r->orow[r->n_orow++];
            o->key[0] = (int64_t)in->key.kind;
            o->key[1] = (int64_t)in->key.k1;
            o->key[2] = (int64_t)in->key.k2;
            o->key[3] = (int64_t)in->key.k3;
            o->key[4] = in->a[j].process_id;
            o->inst = (uint32_t)i;
            o->arrival = (uint32_t)j;
        }
    }
    rkstate_sort(r->orow, r->n_orow, sizeof(*r->orow), rkstate_orow_cmp);
    for (size_t k = 0; k < r->n_orow; k++) {
        const struct rk_inst *in = &r->inst[r->orow[k].inst];
        const struct rk_arrival *a = &in->a[r->orow[k].arrival];
        int64_t v[15] = {r->orow[k].key[0], r->orow[k].key[1],   r->orow[k].key[2],
                         r->orow[k].key[3], a->process_id,       (int64_t)r->orow[k].arrival,
                         in->op_id,         (int64_t)in->opened, (int64_t)a->step,
                         (int64_t)a->start, (int64_t)a->dur,     (int64_t)in->size,
                         a->flags,          (int64_t)a->wait_b,  (int64_t)a->wait_e};
        if ((rc = rksql_up_add(&r->ins_open, v)) != 0)
            return rc;
    }
    if ((rc = rksql_up_end(&r->ins_open)) != 0)
        return rc;
    for (size_t i = 0; i < r->n_inst; i++) {
        r->inst[i].n_saved = r->inst[i].n;
        r->inst[i].in_table = r->inst[i].n > 0;
    }
    for (size_t i = 0; i < r->n_occ; i++) {
        struct rk_occ *o = &r->occ[i];
        int64_t v[4] = {o->process_id, o->op_id, (int64_t)o->group, (int64_t)o->count};
        if (!o->dirty)
            continue;
        if ((rc = rksql_up_add(&r->up_occ, v)) != 0)
            return rc;
        o->dirty = false;
    }
    return rksql_up_end(&r->up_occ);
}

/* The intervals of the devices that changed. Not those of imported files (entries in file
 * order keep every interval until the end: rewriting them at each commit would cost more
 * than the import); ranks_load marks those inexact. */
static int rkstate_save_devs(struct ranks *r)
{
    int rc;

    for (size_t i = 0; i < r->n_devs; i++) {
        struct rk_dev *d = &r->devs[i];
        const struct rk_proc *p = rkdelta_proc_known(r, d->process_id);
        int64_t key[2] = {d->process_id, d->device_id};
        int64_t st[6] = {d->process_id,        d->device_id,        (int64_t)d->max_start,
                         (int64_t)d->disorder, (int64_t)d->fin_end, (int64_t)d->drop_end};

        if (!d->dirty || p == NULL || p->replay)
            continue;
        d->dirty = false;
        if ((d->unsaved = d->n_cu + d->n_pc > RK_SAVE_PEND))
            continue;
        if ((rc = rksql_run(r->del_pend, key, 2)) != 0 ||
            (rc = rksql_run(r->up_devstate, st, 6)) != 0)
            return rc;
        for (size_t k = 0; k < d->n_cu; k++) {
            int64_t v[8] = {d->process_id,       d->device_id,        0, (int64_t)k,
                            (int64_t)d->cu[k].b, (int64_t)d->cu[k].e, 0, 0};
            if ((rc = rksql_up_add(&r->ins_pend, v)) != 0)
                return rc;
        }
        for (size_t k = 0; k < d->n_pc; k++) {
            const struct rk_pend *c = &d->pc[k];
            int64_t v[8] = {d->process_id, d->device_id,     1,       (int64_t)k, (int64_t)c->b,
                            (int64_t)c->e, (int64_t)c->step, c->op_id};
            if ((rc = rksql_up_add(&r->ins_pend, v)) != 0)
                return rc;
        }
    }
    return rksql_up_end(&r->ins_pend);
}

/* The device id under which a process's union of top-level entries is saved (rkcover.h):
 * rk_devstate holds its max_start and disorder, rk_pend its slots (comm 3: a slot's step and
 * drop_end in begin_ns) and their intervals (comm 2), op_id the slot. */
#define RKSTATE_COVER (-1)

/*
 * Only the intervals an entry should still overlap are saved: those that end after the
 * process's latest start less twice its disorder (rkcover.c keeps more in memory, a slack for
 * disorder not seen yet). The others count as dropped for a writer that loads them: an entry
 * that overlaps them is counted late. Saving them all would cost a row each per commit.
 */
static int rkstate_save_cover(struct ranks *r, struct rk_proc *p)
{
    int64_t key[2] = {p->id, RKSTATE_COVER};
    int64_t st[6] = {
        p->id, RKSTATE_COVER, (int64_t)p->cover_max_start, (int64_t)p->cover_disorder, 0, 0};
    uint64_t margin = p->cover_disorder > UINT64_MAX / 2 ? UINT64_MAX : 2 * p->cover_disorder;
    uint64_t w = p->cover_max_start > margin ? p->cover_max_start - margin : 0;
    size_t n = 0, from[RK_WAYS] = {0};
    int rc;

    for (int k = 0; p->cover != NULL && k < RK_WAYS; k++) {
        const struct rk_cover *c = &p->cover[k];
        while (from[k] < c->n && c->iv[from[k]].e <= w)
            from[k]++;
        n += c->n - from[k];
    }
    if ((p->cover_unsaved = n > RK_SAVE_PEND))
        return 0;
    if ((rc = rksql_run(r->del_pend, key, 2)) != 0 || (rc = rksql_run(r->up_devstate, st, 6)) != 0)
        return rc;
    for (int k = 0; p->cover != NULL && k < RK_WAYS; k++) {
        const struct rk_cover *c = &p->cover[k];
        uint64_t drop = c->drop_end;
        if (from[k] > 0 && c->iv[from[k] - 1].e > drop)
            drop = c->iv[from[k] - 1].e;
        int64_t head[8] = {p->id, RKSTATE_COVER, 3, k, (int64_t)drop, 0, (int64_t)c->step, k};
        if (!c->used)
            continue;
        if ((rc = rksql_up_add(&r->ins_pend, head)) != 0)
            return rc;
        for (size_t j = from[k]; j < c->n; j++) {
            int64_t v[8] = {p->id,
                            RKSTATE_COVER,
                            2,
                            (int64_t)((uint64_t)k << 32 | j),
                            (int64_t)c->iv[j].b,
                            (int64_t)c->iv[j].e,
                            (int64_t)c->step,
                            k};
            if ((rc = rksql_up_add(&r->ins_pend, v)) != 0)
                return rc;
        }
    }
    return 0;
}

/* The unions of the processes whose intervals changed (not those of imported files). */
static int rkstate_save_covers(struct ranks *r)
{
    int rc;

    for (size_t i = 0; i < r->n_procs; i++) {
        struct rk_proc *p = &r->procs[i];
        if (!p->cover_dirty || p->replay)
            continue;
        p->cover_dirty = false;
        if ((rc = rkstate_save_cover(r, p)) != 0)
            return rc;
    }
    return rksql_up_end(&r->ins_pend);
}

/*
 * Saves what the next commit's writer needs to go on: the arrivals at open
 * instances (those added since the last commit; the closed ones deleted),
 * the occurrence counts that changed, the exposure intervals of the devices
 * that changed, and how many instances opened so far.
 */
int rkstate_save(struct ranks *r)
{
    int rc;

    if (r->resync) {
        if ((rc = rksql_exec(r->db, "DELETE FROM rk_open; DELETE FROM rk_occ; DELETE FROM rk_pend;"
                                    " DELETE FROM rk_devstate")) != 0)
            return rc;
        r->n_gone = 0;
        for (size_t i = 0; i < r->n_inst; i++) {
            r->inst[i].n_saved = 0;
            r->inst[i].in_table = false;
        }
        for (size_t i = 0; i < r->n_occ; i++)
            r->occ[i].dirty = true;
        for (size_t i = 0; i < r->n_devs; i++)
            r->devs[i].dirty = true;
        for (size_t i = 0; i < r->n_procs; i++)
            r->procs[i].cover_dirty = true;
        r->opened_written = UINT64_MAX;
        r->resync = false;
    }
    if ((rc = rkstate_save_open(r)) != 0 || (rc = rkstate_save_devs(r)) != 0 ||
        (rc = rkstate_save_covers(r)) != 0)
        return rc;
    if (r->state_written != 0) {
        int64_t want = 1;
        for (size_t i = 0; i < r->n_devs && want == 1; i++)
            want = r->devs[i].unsaved ? 2 : 1;
        for (size_t i = 0; i < r->n_procs && want == 1; i++)
            want = r->procs[i].cover_unsaved ? 2 : 1;
        if (want != r->state_written) {
            if ((rc = info_set(r->db, "ranks_state", want)) != 0)
                return rc;
            r->state_written = want;
        }
    }
    if (r->opened != r->opened_written) {
        if ((rc = info_set(r->db, "ranks_opened", (int64_t)r->opened)) != 0)
            return rc;
        r->opened_written = r->opened;
    }
    return 0;
}

/* One arrival of rk_open, in the order the instances opened: its instance opened again
 * (when it is the first arrival), the newest, then the arrival. */
static int rkstate_load_arrival(sqlite3_stmt *st, void *arg)
{
    struct ranks *r = arg;
    struct rk_ikey key = {
        (uint64_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
        (uint64_t)sqlite3_column_int64(st, 2), (uint64_t)sqlite3_column_int64(st, 3)};
    uint64_t opened = (uint64_t)sqlite3_column_int64(st, 6);
    uint64_t size = (uint64_t)sqlite3_column_int64(st, 10);
    size_t pos = rkcoll_find(r, &key);
    struct rk_inst *in = r->islot[pos] != 0 ? &r->inst[r->islot[pos] - 1] : NULL;
    int err;

    if (in == NULL) {
        if (r->n_inst >= RANKS_OPEN || opened >= r->opened)
            return -EIO;
        if ((in = rkcoll_open(r, &key, (uint32_t)sqlite3_column_int64(st, 5), opened)) == NULL)
            return -ENOMEM;
    }
    err = rkcoll_add_arrival(
        in,
        (struct rk_arrival){
            .process_id = sqlite3_column_int64(st, 4),
            .step = (uint64_t)sqlite3_column_int64(st, 7),
            .start = (uint64_t)sqlite3_column_int64(st, 8),
            .dur = (uint64_t)sqlite3_column_int64(st, 9),
            .flags = (uint32_t)sqlite3_column_int64(st, 11) & (RK_A_NB | RK_A_DONE),
            .wait_b = (uint64_t)sqlite3_column_int64(st, 12),
            .wait_e = (uint64_t)sqlite3_column_int64(st, 13),
        },
        size);
    in->n_saved = in->n;
    in->in_table = true;
    if (size > in->size) /* each row: the size then */
        in->size = size;
    return err;
}

/*
 * Reopens the instances of rk_open in the order they opened. (Files before
 * issue 27 also saved info.ranks_iq_first, where their window of 4,096
 * instances began: the order alone is what matters now.)
 */
static int rkstate_load_open(struct ranks *r)
{
    r->opened = (uint64_t)info_int(r->db, "ranks_opened", 0);
    return sql_each(r->db,
                    "SELECT kind, k1, k2, k3, process_id, op_id, opened, step, start_ns,"
                    " dur_ns, coalesce(comm_size, 0), coalesce(flags, 0),"
                    " coalesce(wait_b_ns, 0), coalesce(wait_e_ns, 0)"
                    " FROM rk_open ORDER BY opened, arrival",
                    rkstate_load_arrival, r);
}

static int rkstate_load_occ(sqlite3_stmt *st, void *arg)
{
    struct ranks *r = arg;
    struct rk_occ row = {sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1),
                         (uint64_t)sqlite3_column_int64(st, 2),
                         (uint64_t)sqlite3_column_int64(st, 3), false};
    struct rk_occ *o = rkmap_find(&r->occ_idx, (uint64_t)row.process_id, row.op_id, row.group,
                                  (void **)&r->occ, &r->n_occ, &r->cap_occ, sizeof(*r->occ), &row);

    if (o == NULL)
        return -ENOMEM;
    *o = row;
    return 0;
}

/* A device's exposure state, or a process's union's (device RKSTATE_COVER). */
static int rkstate_load_dev(sqlite3_stmt *st, void *arg)
{
    struct rk_dev *d;

    if (sqlite3_column_int64(st, 1) == RKSTATE_COVER) {
        struct rk_proc *p = rkdelta_proc(arg, sqlite3_column_int64(st, 0));
        if (p == NULL)
            return -ENOMEM;
        p->cover_max_start = (uint64_t)sqlite3_column_int64(st, 2);
        p->cover_disorder = (uint64_t)sqlite3_column_int64(st, 3);
        return 0;
    }
    d = rkdelta_dev(arg, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1));
    if (d == NULL)
        return -ENOMEM;
    d->max_start = (uint64_t)sqlite3_column_int64(st, 2);
    d->disorder = (uint64_t)sqlite3_column_int64(st, 3);
    d->fin_end = (uint64_t)sqlite3_column_int64(st, 4);
    d->drop_end = (uint64_t)sqlite3_column_int64(st, 5);
    return 0;
}

/* A device's pending interval, compute or comm, in the order they were; or a row of a
 * process's union (device RKSTATE_COVER, comm 2 or 3: rkstate_save_cover). */
static int rkstate_load_pend(sqlite3_stmt *st, void *arg)
{
    uint64_t b = (uint64_t)sqlite3_column_int64(st, 3), e = (uint64_t)sqlite3_column_int64(st, 4);
    struct rk_dev *d;

    if (sqlite3_column_int64(st, 1) == RKSTATE_COVER) {
        struct rk_proc *p = rkdelta_proc(arg, sqlite3_column_int64(st, 0));
        if (p == NULL)
            return -ENOMEM;
        return rkcover_load(p, (uint32_t)sqlite3_column_int64(st, 6),
                            (uint64_t)sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 2) == 3,
                            b, e);
    }
    d = rkdelta_dev(arg, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1));
    if (d == NULL)
        return -ENOMEM;
    if (sqlite3_column_int64(st, 2) == 0)
        return rkexpose_add_compute(d, b, e);
    return rkexpose_add_comm(d, b, e, (uint64_t)sqlite3_column_int64(st, 5),
                             (uint32_t)sqlite3_column_int64(st, 6));
}

int rkstate_load(struct ranks *r)
{
    int rc;

    if ((rc = rkstate_load_open(r)) != 0 ||
        (rc = sql_each(r->db, "SELECT process_id, op_id, grp, count FROM rk_occ", rkstate_load_occ,
                       r)) != 0 ||
        (rc = sql_each(r->db,
                       "SELECT process_id, device_id, max_start, disorder, fin_end,"
                       " drop_end FROM rk_devstate",
                       rkstate_load_dev, r)) != 0 ||
        (rc = sql_each(r->db,
                       "SELECT process_id, device_id, comm, begin_ns, end_ns, step, op_id"
                       " FROM rk_pend ORDER BY process_id, device_id, comm, i",
                       rkstate_load_pend, r)) != 0)
        return rc;
    r->opened_written = r->opened;
    return 0;
}
