/*
 * rq_complete.c — the report's `completeness` section (see rq.h): the world and the ranks
 * no process said, the ranks that dropped entries or ended without bye, each client's own
 * counters against what the file holds, and how exact the rank aggregates are.
 */
#include <stdio.h>

#include "rq.h"

/*
 * The missing ranks: those of 0..world-1 (within the ranks filter) no process
 * said, as ranges [first, last] ascending, each given to emit (which may be
 * NULL); returns how many ranks. The cost follows the ranks seen (and the
 * filter's), never the world: the gaps between the sorted ranks are the ranges.
 */
uint64_t rq_missing(const struct rq *q, int (*emit)(void *, uint64_t, uint64_t), void *arg,
                    int *err)
{
    uint64_t n = 0, next = 0;

    *err = 0;
    if (q->f->ranks != NULL) { /* the filter's ranks no process gave (q->ranks: the others) */
        uint64_t first = 0, last = 0;
        bool open = false;
        for (uint64_t r = 0; r < q->world && *err == 0; r = next) {
            bool found = false;
            next = UINT64_MAX; /* the smallest wanted rank above r */
            for (size_t i = 0; i < q->f->n_ranks; i++)
                if ((uint64_t)q->f->ranks[i] > r && (uint64_t)q->f->ranks[i] < next)
                    next = (uint64_t)q->f->ranks[i];
            if (!rq_rank_wanted(q, (int64_t)r))
                continue;
            for (size_t i = 0; i < q->n_ranks && !found; i++)
                found = q->ranks[i].rank == (int64_t)r;
            if (found)
                continue;
            n++;
            if (open && r == last + 1) {
                last = r;
                continue;
            }
            if (open && emit != NULL)
                *err = emit(arg, first, last);
            first = last = r;
            open = true;
        }
        if (open && emit != NULL && *err == 0)
            *err = emit(arg, first, last);
        return n;
    }
    for (size_t i = 0; i <= q->n_ranks && *err == 0; i++) { /* q->ranks ascending */
        uint64_t r = i < q->n_ranks ? (uint64_t)q->ranks[i].rank : q->world;
        if (i < q->n_ranks && (q->ranks[i].rank < 0 || r < next))
            continue;
        if (r > q->world)
            r = q->world;
        if (r > next) {
            n += r - next;
            if (emit != NULL)
                *err = emit(arg, next, r - 1);
        }
        next = r + 1;
        if (next > q->world)
            break;
    }
    return n;
}

static int rq_pack_range(void *pk, uint64_t first, uint64_t last)
{
    return msgpack_pack_array(pk, 2) || msgpack_pack_uint64(pk, first) ||
           msgpack_pack_uint64(pk, last);
}

/* Packs the ranks of a range, RQ_MISSING at most in all (*left counts down). */
struct rq_list {
    msgpack_packer *pk;
    uint64_t left;
};

static int rq_pack_listed(void *arg, uint64_t first, uint64_t last)
{
    struct rq_list *l = arg;

    for (uint64_t r = first; r <= last && l->left > 0; r++, l->left--)
        if (msgpack_pack_uint64(l->pk, r))
            return -1;
    return 0;
}

static int rq_count_range(void *arg, uint64_t first, uint64_t last)
{
    (void)first;
    (void)last;
    ++*(size_t *)arg;
    return 0;
}

/* `missing_ranks` (the first RQ_MISSING), `missing_rank_count`, `missing_rank_ranges`. */
static int rq_pack_missing(struct rq *q, msgpack_packer *pk)
{
    size_t ranges = 0;
    int err;
    uint64_t n = rq_missing(q, rq_count_range, &ranges, &err);
    struct rq_list l = {pk, n < RQ_MISSING ? n : RQ_MISSING};

    if (pk_str(pk, "missing_ranks") || msgpack_pack_array(pk, (uint32_t)l.left))
        return -1;
    rq_missing(q, rq_pack_listed, &l, &err);
    if (err != 0 || pk_u64(pk, "missing_rank_count", n) || pk_str(pk, "missing_rank_ranges") ||
        msgpack_pack_array(pk, (uint32_t)ranges))
        return -1;
    rq_missing(q, rq_pack_range, pk, &err);
    return err;
}

/*
 * `clients`: each process whose producer sent its own counters
 * (process_counters; PROTOCOL.md Part 3), by process id: what it said, what
 * this file holds of it (`stored`: its rank aggregates' calls when exact,
 * else a count of its entries), and of what it sent unacknowledged
 * (`unconfirmed` = sent - acked) how many are stored (`unconfirmed_stored`
 * = stored - acked). A file without the table has none.
 */
static const char rq_clients_sql[] =
    "SELECT c.process_id, coalesce(p.rank, -1), c.recorded, c.dropped, c.sent, c.acked, c.final, "
    "%s FROM process_counters c LEFT JOIN processes p ON p.id = c.process_id "
    "ORDER BY c.process_id";

static int rq_pack_client(msgpack_packer *pk, sqlite3_stmt *st)
{
    uint64_t sent = rq_pos(sqlite3_column_int64(st, 4)),
             acked = rq_pos(sqlite3_column_int64(st, 5));
    uint64_t stored = rq_pos(sqlite3_column_int64(st, 7));

    return msgpack_pack_map(pk, 10) || pk_rank(pk, "rank", sqlite3_column_int64(st, 1)) ||
           pk_u64(pk, "process_id", rq_pos(sqlite3_column_int64(st, 0))) ||
           pk_u64(pk, "recorded", rq_pos(sqlite3_column_int64(st, 2))) ||
           pk_u64(pk, "dropped", rq_pos(sqlite3_column_int64(st, 3))) || pk_u64(pk, "sent", sent) ||
           pk_u64(pk, "acked", acked) || pk_u64(pk, "stored", stored) ||
           pk_u64(pk, "unconfirmed", sent > acked ? sent - acked : 0) ||
           pk_u64(pk, "unconfirmed_stored", stored > acked ? stored - acked : 0) ||
           pk_str(pk, "final") ||
           (sqlite3_column_int(st, 6) ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

static int rq_pack_clients(struct rq *q, msgpack_packer *pk)
{
    char sql[sizeof(rq_clients_sql) + 128];
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int rc;

    snprintf(sql, sizeof(sql), rq_clients_sql,
             q->state == 1 ? "(SELECT coalesce(sum(calls), 0) FROM rk_ops r"
                             " WHERE r.process_id = c.process_id)"
                           : "(SELECT count(*) FROM entries e WHERE e.process_id = c.process_id)");
    if (pk_str(pk, "clients"))
        return -1;
    if ((rc = sqlite3_prepare_v2(q->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        sqlite3_finalize(st);
        return rq_fail(q, rc, "process counters");
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        n += rq_rank_wanted(q, sqlite3_column_int64(st, 1));
    sqlite3_reset(st);
    if (rc != SQLITE_DONE || msgpack_pack_array(pk, (uint32_t)n)) {
        sqlite3_finalize(st);
        return rc != SQLITE_DONE ? rq_fail(q, rc, "process counters") : -1;
    }
    /* A second pass over the same rows: nothing writes this read transaction's snapshot. */
    while (n > 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!rq_rank_wanted(q, sqlite3_column_int64(st, 1)))
            continue;
        n--;
        if (rq_pack_client(pk, st)) {
            sqlite3_finalize(st);
            return -1;
        }
    }
    sqlite3_finalize(st);
    return n == 0 ? 0 : rq_fail(q, rc, "process counters");
}

/*
 * `ended_without_bye`: the ranks (ascending) with a process that ended without `bye` while
 * the daemon ran (processes.bye 0 with an end): it died or exited without closing its client
 * (MPI_Abort, a crash, an exit without MPI_Finalize or tc_close), so its figures may lack its
 * last entries. A daemon's stop (bye 2) or kill (no end recorded) does not count.
 */
static int rq_pack_unclosed(struct rq *q, msgpack_packer *pk)
{
    size_t n = 0;

    for (size_t i = 0; i < q->n_ranks; i++)
        n += q->ranks[i].unclosed > 0 && rq_rank_wanted(q, q->ranks[i].rank);
    if (pk_str(pk, "ended_without_bye") || msgpack_pack_array(pk, (uint32_t)n))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++)
        if (q->ranks[i].unclosed > 0 && rq_rank_wanted(q, q->ranks[i].rank) &&
            (q->ranks[i].rank < 0 ? msgpack_pack_nil(pk)
                                  : msgpack_pack_int64(pk, q->ranks[i].rank)))
            return -1;
    return 0;
}

int rq_pack_completeness(struct rq *q, msgpack_packer *pk)
{
    size_t dropping = 0;

    for (size_t i = 0; i < q->n_ranks; i++)
        dropping += q->ranks[i].dropped > 0 && rq_rank_wanted(q, q->ranks[i].rank);
    if (pk_str(pk, "completeness") || msgpack_pack_map(pk, 14) || pk_u64(pk, "world", q->world) ||
        pk_u64(pk, "world_given", q->world_given) || pk_u64(pk, "steps", q->n_steps) ||
        rq_pack_missing(q, pk) != 0)
        return -1;
    if (pk_str(pk, "dropped") || msgpack_pack_array(pk, dropping))
        return -1;
    for (size_t i = 0; i < q->n_ranks; i++) {
        const struct rq_rank *r = &q->ranks[i];
        if (r->dropped > 0 && rq_rank_wanted(q, r->rank) &&
            (msgpack_pack_map(pk, 2) || pk_rank(pk, "rank", r->rank) ||
             pk_u64(pk, "dropped", r->dropped)))
            return -1;
    }
    if (rq_pack_unclosed(q, pk) != 0 || rq_pack_clients(q, pk) != 0)
        return -1;
    return pk_str(pk, "aggregates") ||
           pk_str(pk, q->state == 1   ? "exact"
                      : q->state == 2 ? "inexact"
                                      : "absent") ||
           pk_u64(pk, "late_entries", q->late_entries) ||
           pk_u64(pk, "collectives_closed_at_cap", q->capped) ||
           pk_u64(pk, "collectives_open_cap", RANKS_OPEN) || pk_str(pk, "collectives_matched_by") ||
           pk_str(pk, "ext comm+seq (complete at ext comm_size arrivals, else at world), else "
                      "(op, process_group metadata, occurrence per rank)");
}
