/*
 * ranks.c — the writer's side of the rank, step and collective aggregates:
 * the API of ranks.h, and what it needs of the session file besides them
 * (its ops, processes and entries, for a reload and a rebuild). The rest is
 * in the rk*.c files (rk.h lists them). Writer thread, or `classify`'s worker.
 */
#include "ranks.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "info.h"
#include "rk.h"
#include "rkcoll.h"
#include "rkcover.h"
#include "rkdelta.h"
#include "rkexpose.h"
#include "rkschema.h"
#include "rkstate.h"
#include "rkwrite.h"
#include "sqlutil.h"

struct ranks *ranks_new(sqlite3 *db)
{
    struct ranks *r = calloc(1, sizeof(*r));
    int err = -ENOMEM;

    if (r == NULL)
        return NULL;
    r->db = db;
    r->epoch = 1;
    r->islot = calloc(RK_ISLOTS, sizeof(*r->islot));
    r->n_islot = RK_ISLOTS;
    if (r->islot != NULL && (err = rkschema_create(r)) == 0 && (err = rkwrite_prepare(r)) == 0)
        err = rkstate_prepare(r);
    if (err != 0) {
        ranks_free(r);
        return NULL;
    }
    return r;
}

void ranks_free(struct ranks *r)
{
    if (r == NULL)
        return;
    rkwrite_free(r);
    rkstate_free(r);
    rkmap_free(&r->ops_idx);
    rkmap_free(&r->steps_idx);
    rkmap_free(&r->dsteps_idx);
    rkmap_free(&r->coll_idx);
    rkmap_free(&r->occ_idx);
    rkmap_free(&r->dev_idx);
    for (size_t i = 0; i < r->n_devs; i++) {
        free(r->devs[i].cu);
        free(r->devs[i].pc);
        free(r->devs[i].ops);
    }
    for (size_t i = 0; i < r->n_procs; i++) {
        free(r->procs[i].pop);
        rkcover_free(&r->procs[i]);
    }
    free(r->pslot);
    rkmap_free(&r->proc_idx);
    for (size_t i = 0; i < r->n_inst; i++)
        free(r->inst[i].a);
    for (size_t i = 0; i < r->n_apool; i++)
        free(r->apool[i].a);
    free(r->apool);
    free(r->collc);
    free(r->devs);
    free(r->inst);
    free(r->islot);
    free(r->ops);
    free(r->dsteps);
    free(r->steps);
    free(r->coll);
    free(r->occ);
    free(r->cat);
    free(r->coll_ok);
    free(r->procs);
    free(r);
}

int ranks_init_file(struct ranks *r)
{
    int err;

    r->inexact_written = false;
    if ((err = info_set(r->db, "ranks", 1)) != 0)
        return err;
    r->state_written = 1;
    return info_set(r->db, "ranks_state", 1);
}

/* ---- ops and processes --------------------------------------------------- */

/* True when word (lower case) occurs in name, compared ASCII lower-cased. */
static bool ranks_has(const char *name, const char *word)
{
    for (const char *p = name; *p != '\0'; p++) {
        size_t i = 0;
        while (word[i] != '\0' && p[i] != '\0' && (p[i] | 0x20) == word[i])
            i++;
        if (word[i] == '\0')
            return true;
    }
    return false;
}

/*
 * Point-to-point by name: send or recv (isend, MPI_Irecv), but not NCCL's
 * SendRecv kernels, which is how NCCL runs all-to-all on every rank; MPI's
 * Sendrecv(_replace) (a peer MPI_PROC_NULL sends no ext peer); probes
 * (MPI_Iprobe from MPI_ANY_SOURCE finding nothing has no peer either); and
 * MPI's completion calls, should a producer call them comm.
 */
static bool ranks_is_p2p(const char *name)
{
    bool mpi = (name[0] | 0x20) == 'm' && (name[1] | 0x20) == 'p' && (name[2] | 0x20) == 'i' &&
               name[3] == '_';

    /* (ranks_has lower-cases with | 0x20, which '_' does not survive: words without one) */
    if (ranks_has(name, "probe") || (mpi && (ranks_has(name, "sendrecv") ||
                                             ranks_has(name, "wait") || ranks_has(name, "test"))))
        return true;
    return (ranks_has(name, "send") || ranks_has(name, "recv")) && !ranks_has(name, "sendrecv");
}

/*
 * A non-blocking collective by name (a collective's: not point-to-point): MPI's I* calls,
 * MPI_Iallreduce, MPI_Ibarrier, ... (ASCII case-insensitive "mpi_i" and a letter), not
 * MPI_Init* or MPI_Intercomm_*; and the launch of an asynchronous collective named with the
 * suffix "_async" (the torch bridge's DDP bucket allreduce, "allreduce_async"). Its wait is
 * in the completion call that completes it.
 */
static bool ranks_is_nb(const char *name)
{
    size_t n = strlen(name);

    if (n > 6 && strcasecmp(name + n - 6, "_async") == 0)
        return true;
    return strncasecmp(name, "mpi_i", 5) == 0 && isalpha((unsigned char)name[5]) &&
           strncasecmp(name, "mpi_init", 8) != 0 && strncasecmp(name, "mpi_intercomm", 13) != 0;
}

int ranks_op(struct ranks *r, uint32_t op_id, const char *name, const char *category)
{
    if (op_id >= r->n_cat) {
        size_t n = r->n_cat ? r->n_cat : 64;
        uint8_t *c, *k;
        while (n <= op_id)
            n *= 2;
        if ((c = realloc(r->cat, n)) == NULL)
            return -ENOMEM;
        r->cat = c;
        if ((k = realloc(r->coll_ok, n)) == NULL)
            return -ENOMEM;
        r->coll_ok = k;
        memset(r->cat + r->n_cat, PROTO_CAT_COMPUTE, n - r->n_cat);
        memset(r->coll_ok + r->n_cat, 0, n - r->n_cat);
        r->n_cat = n;
    }
    r->cat[op_id] = (uint8_t)proto_cat_code(category);
    r->coll_ok[op_id] = r->cat[op_id] != PROTO_CAT_COMM || ranks_is_p2p(name) ? RK_COLL_NO
                        : ranks_is_nb(name)                                   ? RK_COLL_NB
                                                                              : RK_COLL_BLOCKING;
    return 0;
}

int ranks_process(struct ranks *r, int64_t process_id, int64_t world)
{
    if (rkdelta_proc(r, process_id) == NULL)
        return -ENOMEM;
    if (world > RANKS_MAX_WORLD)
        world = RANKS_MAX_WORLD;
    if (world > 0 && (uint64_t)world > r->world)
        r->world = (uint64_t)world;
    return 0;
}

void ranks_process_end(struct ranks *r, int64_t process_id)
{
    struct rk_proc *p = rkdelta_proc_known(r, process_id);
    struct rk_dev *d =
        p != NULL && p->dev1 > 0 && p->dev1 <= r->n_devs ? &r->devs[p->dev1 - 1] : NULL;

    if (d != NULL && d->process_id == process_id) {
        free(d->ops); /* a cache: rkdelta_opsum_c allocates it again should the process return */
        d->ops = NULL;
    }
}

/* FNV-1a, never 0 (0 means "no group"). */
static uint64_t ranks_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ? h : 1;
}

/* A decimal integer 0 .. INT64_MAX at *s, ended by `end`: true and *v; false for any other
 * form (a sign, a leading zero, no digits, past INT64_MAX). *s moves past it. */
static bool ranks_dec(const char **s, char end, uint64_t *v)
{
    const char *p = *s;
    uint64_t x = 0;

    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != end))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (RANKS_CAP - (uint64_t)(*p - '0')) / 10)
            return false;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    if (*p != end)
        return false;
    *s = p + (end != '\0');
    *v = x;
    return true;
}

/* A step's run-queue delay, "<step> <ns>" (PROTO_META_CPU_WAIT): added to the process's step;
 * another form is left to the metadata table. 0 or -ENOMEM. */
static int ranks_cpu_wait(struct ranks *r, int64_t process_id, const char *s)
{
    struct rk_stepsum *st;
    uint64_t step, ns;

    if (s == NULL || !ranks_dec(&s, ' ', &step) || !ranks_dec(&s, '\0', &ns))
        return 0;
    if ((st = rkdelta_step_c(r, process_id, step)) == NULL)
        return -ENOMEM;
    st->cpu_wait = rk_sat(st->cpu_wait, ns);
    return 0;
}

int ranks_meta(struct ranks *r, int64_t process_id, const char *key, const char *sval, int64_t ival,
               bool is_str)
{
    struct rk_proc *p;

    if (strcmp(key, PROTO_META_CPU_WAIT) == 0)
        return ranks_cpu_wait(r, process_id, is_str ? sval : NULL);
    if (strcmp(key, "process_group") != 0 && strcmp(key, "import.file") != 0 &&
        strcmp(key, PROTO_META_WORKER_OF) != 0)
        return 0;
    if ((p = rkdelta_proc(r, process_id)) == NULL)
        return -ENOMEM;
    if (strcmp(key, "import.file") == 0) {
        p->replay = true;
        return 0;
    }
    if (strcmp(key, PROTO_META_WORKER_OF) == 0) {
        p->worker = true;
        return 0;
    }
    p->group = is_str ? ranks_hash(sval, strlen(sval)) : ranks_hash(&ival, sizeof(ival));
    return 0;
}

/* ---- entries ------------------------------------------------------------- */

/* The rk_devsteps and rk_steps deltas of an entry of d at step: d's current step's, else
 * looked up (and made current). False when out of memory. */
static bool ranks_cur_step(struct ranks *r, struct rk_dev *d, uint64_t step, struct rk_devstep **ds,
                           struct rk_stepsum **s)
{
    if (d->cur_epoch == r->epoch && d->cur_step == step) {
        *ds = &r->dsteps[d->cur_ds1 - 1];
        *s = &r->steps[d->cur_s1 - 1];
        return true;
    }
    if ((*ds = rkdelta_devstep_c(r, d, step)) == NULL ||
        (*s = rkdelta_step_c(r, d->process_id, step)) == NULL)
        return false;
    d->cur_epoch = r->epoch;
    d->cur_step = step;
    d->cur_ds1 = (uint32_t)(*ds - r->dsteps) + 1;
    d->cur_s1 = (uint32_t)(*s - r->steps) + 1;
    return true;
}

/* Widens the span of an entry's step deltas to [b, e). */
static void ranks_span(struct rk_devstep *ds, struct rk_stepsum *s, uint64_t b, uint64_t e)
{
    if (b < ds->begin)
        ds->begin = b;
    if (e > ds->end)
        ds->end = e;
    if (b < s->begin)
        s->begin = b;
    if (e > s->end)
        s->end = e;
}

int ranks_entry(struct ranks *r, int64_t process_id, const struct proto_entry *e, uint32_t dev_id,
                const struct proto_ext *x, int64_t rowid)
{
    enum proto_cat cat = e->op_id < r->n_cat ? (enum proto_cat)r->cat[e->op_id] : PROTO_CAT_COMPUTE;
    struct rk_proc *p = rkdelta_proc_c(r, process_id);
    struct rk_dev *d = p != NULL ? rkdelta_dev_c(r, p, process_id, dev_id) : NULL;
    struct rk_opsum *o = d != NULL ? rkdelta_opsum_c(r, d, e->op_id) : NULL;
    struct rk_devstep *ds;
    struct rk_stepsum *s;
    uint64_t end = e->start_ns + e->dur_ns;
    int err;

    if (o == NULL || !ranks_cur_step(r, d, e->step, &ds, &s))
        return -ENOMEM;
    o->calls++;
    o->total = rk_sat(o->total, e->dur_ns);
    o->elements = rk_sat(o->elements, e->elements);
    if (e->start_ns < o->begin)
        o->begin = e->start_ns;
    if (end > o->end)
        o->end = end;
    ds->cat[cat] = rk_sat(ds->cat[cat], e->dur_ns);
    s->cat[cat] = rk_sat(s->cat[cat], e->dur_ns);
    /* a worker's entries carry the step its parent had at the fork, not the step of the
     * work they do: they count in the totals, never in a step's span or union */
    if (!p->worker)
        ranks_span(ds, s, e->start_ns, end);
    if (rowid < ds->first_row)
        ds->first_row = rowid;
    if (rowid > ds->last_row)
        ds->last_row = rowid;
    if ((err = rkexpose_entry(r, d, e, cat)) != 0)
        return err;
    /* a nested entry lies in its parent's interval: the union counts its parent's */
    if (!p->worker && (x == NULL || (x->has & PROTO_EXT_PARENT) == 0) &&
        (err = rkcover_entry(r, p, e, s)) != 0)
        return err;
    if (e->op_id < r->n_cat && r->coll_ok[e->op_id] != RK_COLL_NO)
        return rkcoll_entry(r, process_id, e, x, r->coll_ok[e->op_id] == RK_COLL_NB);
    if (x != NULL && cat == PROTO_CAT_WAIT)
        return rkcoll_completion(r, p, process_id, e, x);
    return 0;
}

bool ranks_pending(const struct ranks *r)
{
    if (r == NULL)
        return false;
    if (r->n_inst > 0)
        return true;
    for (size_t i = 0; i < r->n_devs; i++)
        if (r->devs[i].n_pc > 0)
            return true;
    return false;
}

int ranks_finish(struct ranks *r)
{
    int err;

    while (r->n_inst > 0)
        if ((err = rkcoll_close_oldest(r)) != 0)
            return err;
    for (size_t i = 0; i < r->n_devs; i++)
        if ((err = rkexpose_settle(r, &r->devs[i], UINT64_MAX)) != 0)
            return err;
    return 0;
}

/* ---- commit and rollback ------------------------------------------------- */

int ranks_flush(struct ranks *r)
{
    int err;

    for (size_t i = 0; i < r->n_devs; i++)
        if ((err = rkexpose_settle_live(r, &r->devs[i])) != 0)
            return err;
    for (size_t i = 0; i < r->n_procs; i++)
        rkcover_settle(&r->procs[i]);
    if ((err = rkwrite_ops(r)) != 0 || (err = rkwrite_steps(r)) != 0)
        return err;
    if (r->late != r->late_written) {
        if ((err = info_set(r->db, "ranks_late", (int64_t)r->late)) != 0)
            return err;
        r->late_written = r->late;
    }
    if (r->capped != r->capped_written) {
        if ((err = info_set(r->db, "ranks_capped", (int64_t)r->capped)) != 0)
            return err;
        r->capped_written = r->capped;
    }
    if (r->inexact && !r->inexact_written) {
        if ((err = info_set(r->db, "ranks", 2)) != 0)
            return err;
        r->inexact_written = true;
    }
    if ((err = rkstate_save(r)) != 0)
        return err;
    rkdelta_reset(r);
    return 0;
}

void ranks_discard(struct ranks *r)
{
    rkdelta_reset(r);
    r->inexact = true;
    r->resync = true; /* what the rolled back commit wrote of the state is not there */
}

/* ---- reload and rebuild -------------------------------------------------- */

static int ranks_load_op(sqlite3_stmt *st, void *arg)
{
    const char *name = (const char *)sqlite3_column_text(st, 1);
    int64_t id = sqlite3_column_int64(st, 0);

    if (id < 0 || id > UINT32_MAX || name == NULL)
        return 0;
    return ranks_op(arg, (uint32_t)id, name, (const char *)sqlite3_column_text(st, 2));
}

static int ranks_load_proc(sqlite3_stmt *st, void *arg)
{
    return ranks_process(arg, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
}

static int ranks_load_meta(sqlite3_stmt *st, void *arg)
{
    int64_t id = sqlite3_column_int64(st, 0);
    const char *key = (const char *)sqlite3_column_text(st, 1);

    if (sqlite3_column_type(st, 2) == SQLITE_TEXT)
        return ranks_meta(arg, id, key, (const char *)sqlite3_column_text(st, 2), 0, true);
    return ranks_meta(arg, id, key, NULL, sqlite3_column_int64(st, 2), false);
}

/* The file's op categories, processes and process groups. */
static int ranks_load_names(struct ranks *r)
{
    int err;

    if ((err = sql_each(r->db, "SELECT id, name, category FROM ops", ranks_load_op, r)) != 0 ||
        (err = sql_each(r->db, "SELECT id, world FROM processes", ranks_load_proc, r)) != 0)
        return err;
    return sql_each(r->db,
                    "SELECT process_id, key, value FROM meta"
                    " WHERE key IN ('process_group', 'import.file', '" PROTO_META_WORKER_OF "')",
                    ranks_load_meta, r);
}

int ranks_load(struct ranks *r)
{
    bool replay = false;
    int err;

    if ((err = ranks_load_names(r)) != 0)
        return err;
    r->late = r->late_written = (uint64_t)info_int(r->db, "ranks_late", 0);
    r->capped = r->capped_written = (uint64_t)info_int(r->db, "ranks_capped", 0);
    r->inexact = r->inexact_written = info_int(r->db, "ranks", 0) == 2;
    for (size_t i = 0; i < r->n_procs; i++)
        replay |= r->procs[i].replay;
    r->state_written = info_int(r->db, "ranks_state", 0);
    if (r->state_written != 1 || replay) {
        /* some intervals were not saved (ranks_state 2), or an import's file (none are):
         * open instances, occurrence counts and pending intervals were lost with the close */
        r->inexact = true;
        return 0;
    }
    return rkstate_load(r);
}

struct ranks_rebuild {
    struct ranks *r;
    uint64_t n; /* entries so far */
};

/* One entry of ranks_rebuild_entries' query. */
static int ranks_rebuild_entry(sqlite3_stmt *st, void *arg)
{
    struct ranks_rebuild *rb = arg;
    struct proto_entry e = {0};
    struct proto_ext x = {0};
    int err;

    e.step = (uint64_t)sqlite3_column_int64(st, 1);
    e.op_id = (uint32_t)sqlite3_column_int64(st, 2);
    e.start_ns = (uint64_t)sqlite3_column_int64(st, 4);
    e.dur_ns = (uint64_t)sqlite3_column_int64(st, 5);
    e.elements = (uint64_t)sqlite3_column_int64(st, 6);
    if (sqlite3_column_type(st, 7) != SQLITE_NULL)
        x.has |= PROTO_EXT_PEER;
    if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
        x.has |= PROTO_EXT_COMM;
        x.comm = (uint64_t)sqlite3_column_int64(st, 8);
    }
    if (sqlite3_column_type(st, 9) != SQLITE_NULL) {
        x.has |= PROTO_EXT_SEQ;
        x.seq = (uint64_t)sqlite3_column_int64(st, 9);
    }
    if (sqlite3_column_type(st, 11) != SQLITE_NULL) {
        x.has |= PROTO_EXT_COMM_SIZE;
        x.comm_size = (uint64_t)sqlite3_column_int64(st, 11);
    }
    if (sqlite3_column_type(st, 12) != SQLITE_NULL) {
        x.has |= PROTO_EXT_ID;
        x.id = (uint64_t)sqlite3_column_int64(st, 12);
    }
    if (sqlite3_column_type(st, 13) != SQLITE_NULL) {
        x.has |= PROTO_EXT_PARENT;
        x.parent = (uint64_t)sqlite3_column_int64(st, 13);
    }
    err = ranks_entry(rb->r, sqlite3_column_int64(st, 0), &e, (uint32_t)sqlite3_column_int64(st, 3),
                      x.has ? &x : NULL, sqlite3_column_int64(st, 10));
    /* count the exposure now and then, as the writer does at its commits */
    if (err == 0 && ++rb->n % 65536 == 0)
        for (size_t i = 0; i < rb->r->n_devs && err == 0; i++)
            err = rkexpose_settle_live(rb->r, &rb->r->devs[i]);
    return err;
}

/* Every entry of the file, in rowid order, as the writer saw them: with their ext map's
 * keys the aggregates use and their links (a completion call's id, a tcmpi.completed's
 * parent). */
static int ranks_rebuild_entries(struct ranks *r)
{
    bool ext = sql_has_table(r->db, "entry_ext"), link = sql_has_table(r->db, "entry_link");
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT e.process_id, e.step, e.op_id, coalesce(e.device_id, 0), e.start_ns,"
             " e.dur_ns, coalesce(e.elements, s.elements, 0), %s, e.rowid, %s, %s"
             " FROM entries e LEFT JOIN shapes s ON s.id = e.shape_id%s%s ORDER BY e.rowid",
             ext ? "x.peer, x.comm, x.seq" : "NULL, NULL, NULL", ext ? "x.comm_size" : "NULL",
             link ? "l.id, l.parent" : "NULL, NULL",
             ext ? " LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid" : "",
             link ? " LEFT JOIN entry_link l ON l.entry_rowid = e.rowid" : "");
    return sql_each(r->db, sql, ranks_rebuild_entry, &(struct ranks_rebuild){r, 0});
}

int ranks_rebuild(sqlite3 *db, char *why, size_t whylen)
{
    struct ranks *r = NULL;
    int err;

    if ((err = rksql_exec(db, "BEGIN IMMEDIATE")) != 0)
        return err;
    if ((r = ranks_new(db)) == NULL) {
        err = -ENOMEM;
        goto rollback;
    }
    /* the run-queue delays came as metadata, whose table keeps only the last: kept aside */
    if ((err = rksql_exec(db, "CREATE TEMP TABLE rk_cpu_wait AS SELECT process_id, step,"
                              " cpu_wait_ns FROM rk_steps WHERE cpu_wait_ns > 0")) != 0 ||
        (err = rksql_exec(
             db, "DELETE FROM rk_ops; DELETE FROM rk_devsteps; DELETE FROM rk_steps;"
                 " DELETE FROM rk_coll; DELETE FROM rk_coll_ranks; DELETE FROM rk_open;"
                 " DELETE FROM rk_occ; DELETE FROM rk_pend; DELETE FROM rk_devstate;")) != 0 ||
        (err = ranks_load_names(r)) != 0 || (err = ranks_rebuild_entries(r)) != 0 ||
        (err = ranks_finish(r)) != 0 || (err = ranks_flush(r)) != 0 ||
        (err = rksql_exec(db, "INSERT INTO rk_steps SELECT process_id, step,"
                              " 9223372036854775807, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL,"
                              " cpu_wait_ns FROM temp.rk_cpu_wait WHERE true"
                              " ON CONFLICT(step, process_id) DO UPDATE SET"
                              " cpu_wait_ns = excluded.cpu_wait_ns;"
                              " DROP TABLE temp.rk_cpu_wait")) != 0 ||
        (err = info_set(db, "ranks", 1)) != 0 ||
        (err = info_set(db, "ranks_late", (int64_t)r->late)) != 0 ||
        (err = info_set(db, "ranks_capped", (int64_t)r->capped)) != 0)
        goto rollback;
    ranks_free(r);
    r = NULL;
    if ((err = rksql_exec(db, "COMMIT")) == 0)
        return 0;
rollback:
    /* the failing step's message, which the rollback would replace by "not an error" */
    if (whylen > 0)
        snprintf(why, whylen, "%s",
                 sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errmsg(db) : strerror(-err));
    ranks_free(r);
    rksql_exec(db, "ROLLBACK");
    return err;
}

int ranks_recover(sqlite3 *db)
{
    struct ranks *r;
    int err;

    if ((err = rksql_exec(db, "BEGIN IMMEDIATE")) != 0)
        return err;
    if ((r = ranks_new(db)) == NULL) {
        err = -ENOMEM;
    } else if ((err = ranks_load(r)) == 0 && info_int(db, "ranks", 0) != 0 &&
               (ranks_pending(r) || r->inexact) && (err = ranks_finish(r)) == 0) {
        err = ranks_flush(r); /* a file that saved no state says it lost some */
    }
    ranks_free(r);
    if (err != 0) {
        rksql_exec(db, "ROLLBACK");
        return err;
    }
    return rksql_exec(db, "COMMIT");
}
