/*
 * test_mpi.c — libtracectl-mpi under real Open MPI jobs and a real daemon:
 * - mpi_counts (ours, linked with -ltracectl-mpi): every op's calls,
 *   elements and bytes per rank, and the ext map (comm, seq, peer, tag),
 *   against numbers worked out by hand from tests/mpi/mpi_counts.c;
 * - Debian's hpcc with 4 ranks under LD_PRELOAD: one session of 4
 *   processes, the same collectives in the same order on every member of each
 *   communicator, and `report` naming the MPI calls;
 * - NetPIPE (NPmpi) under LD_PRELOAD: entries stored + dropped = the calls
 *   made, counted by a run under mpi_callcount (a PMPI counter of its own);
 * - mpi_threads: 4 threads per rank under MPI_THREAD_MULTIPLE, each on its own
 *   communicator;
 * - an mpi4py program under LD_PRELOAD;
 * - mpi_halves: two halves from MPI_Comm_split, one rank late in its half:
 *   every collective instance complete at its communicator's size;
 * - mpi_comms (issue 27): two MPI_Comm_dup's first used in different orders
 *   on different ranks, by processes and by threads; 1,000 MPI_Iprobe;
 *   20,000 and 200,000 MPI_Allreduce; non-blocking collectives and their completions;
 * - mpi_nbwait (issue 27): MPI_Iallreduce + MPI_Wait on halves, one rank late:
 *   the waits are in the MPI_Wait calls, within 5 % of the program's clock;
 * - MPI_Finalize with the daemon stopped: within TRACECTL_CLOSE_TIMEOUT;
 * - mpi_steps: steps by MPI_Pcontrol(100) and by TRACECTL_MPI_STEP_ON, the
 *   late rank named in each;
 * - mpi_p2p: point-to-point peers and bytes per rank as the program counts
 *   them (received sizes, ANY_SOURCE, Irecvs at completion, Sendrecv's sides);
 * - the OTF2 export of mpi_counts' session read back with otf2-print;
 * - no daemon: rank 0's one line on stderr (TRACECTL_QUIET=1: none);
 * - mpi_fortran (mpif90): Open MPI's three Fortran bindings, counted as the
 *   program counts itself, and their call sites.
 * No run sets TRACECTL_SESSION: the ranks find each other through the
 * launcher's job id. The daemon lingers 600 s, so a session that is ended
 * when mpirun returns was ended by its world's byes, not by the linger.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#ifdef MPI_COUNTS_BIN

static struct tdaemon d;

static void setup(void)
{
    harness_mpi_env();
    harness_daemon_start(&d, "--linger", "600", NULL);
    setenv("TRACECTL_SOCKET", d.sock, 1);
}

static void teardown(void)
{
    harness_daemon_stop(&d, SIGTERM);
    harness_cleanup(&d);
}

TestSuite(mpi, .init = setup, .fini = teardown, .timeout = 180);

/* Runs a shell command line (in the daemon's temp dir); returns its stdout (caller frees). */
#define sh(...) harness_sh(d.dir, __VA_ARGS__)

/* The one session of the run: its id, after checking its name, process count and end. */
static long long the_session(int procs)
{
    struct proto_reader r;
    const msgpack_object *o, *list, *s, *name;
    long long id;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    list = &o->via.array.ptr[1];
    cr_assert_eq(list->via.array.size, 1, "all ranks in one session");
    s = &list->via.array.ptr[0];
    id = (long long)obj_u64(obj_get(s, "id"));
    name = obj_get(s, "name");
    cr_assert(name->via.str.size > 4 && memcmp(name->via.str.ptr, "mpi-", 4) == 0,
              "named after the job id: %.*s", (int)name->via.str.size, name->via.str.ptr);
    cr_assert_eq(obj_u64(obj_get(s, "processes")), (unsigned long long)procs);
    close(fd);
    proto_reader_deinit(&r);
    /* Every rank said bye before mpirun returned: ended now, not after the 600 s linger. */
    raw_wait_state(d.sock, id, "ended", 10);
    return id;
}

static sqlite3 *open_session(long long id)
{
    char path[PATH_MAX + 32];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/sessions/%lld.db", d.data, id);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    /* as the daemon's own readers: the writer's last close of the file (its checkpoint and
     * the WAL's removal) locks it out briefly */
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* The first column of the first row of a query, as an integer (NULL: -1). */
static long long q(sqlite3 *db, const char *fmt, ...)
{
    char sql[2048];
    sqlite3_stmt *st;
    long long v = -1;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The same for a text result, copied into buf. */
static const char *qs(sqlite3 *db, char *buf, size_t len, const char *fmt, ...)
{
    char sql[2048];
    sqlite3_stmt *st;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    buf[0] = '\0';
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return buf;
}

/* Entries with their ext map: the trace view joined with entry_ext. */
#define TX "trace t JOIN entry_ext x ON x.entry_rowid = t.id"

/* (comm, seq) pairs naming more than one op across ranks: the same collective must match.
 * Arrivals only: the completion call of a non-blocking one carries its (comm, seq) too. */
static long long seq_mismatches(sqlite3 *db)
{
    return q(db, "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE x.seq IS NOT NULL AND"
                 " t.category = 'comm' GROUP BY x.comm, x.seq HAVING count(DISTINCT t.op) > 1)");
}

/* ---- mpi_counts: every number ------------------------------------------------ */

struct want {
    const char *op, *category;
    long long calls, elements, bytes; /* per rank; Gatherv is rank-dependent (below) */
};

static const struct want counts_want[] = {
    {"MPI_Barrier", "comm", 3, 0, 0},
    {"MPI_Bcast", "comm", 4, 3 * 10 + 1, 3 * 40 + 4},
    {"MPI_Allreduce", "comm", 8, 5 * 8 + 3 * 2, 5 * 64 + 3 * 8},
    {"MPI_Reduce", "comm", 2, 8, 32},
    {"MPI_Gather", "comm", 1, 3, 12},
    {"MPI_Scatter", "comm", 1, 2, 16},
    {"MPI_Allgather", "comm", 1, 5, 20},
    {"MPI_Alltoall", "comm", 1, 8, 32},
    {"MPI_Alltoallv", "comm", 1, 10, 40},
    {"MPI_Gatherv", "comm", 1, -1, -1},
    {"MPI_Reduce_scatter_block", "comm", 1, 8, 32},
    {"MPI_Scan", "comm", 1, 1, 8},
    {"MPI_Exscan", "comm", 1, 1, 8},
    {"MPI_Iallreduce", "comm", 1, 4, 16},
    {"MPI_Ibcast", "comm", 1, 6, 6},
    {"MPI_Wait", "wait", 2, 2, 0},
    {"MPI_Sendrecv", "comm", 4, 4 * 16, 4 * 16}, /* its send side */
    {"tcmpi.recv", "comm", 4, 4 * 16, 4 * 16},   /* and its receive side */
    {"MPI_Send", "comm", 1, 100, 400},
    {"MPI_Recv", "comm", 1, 100, 400},
    {"MPI_Irecv", "comm", 3, 96, 768},
    {"MPI_Isend", "comm", 3, 96, 768},
    {"MPI_Waitall", "wait", 3, 6, 0},
};

#define N_WANT (sizeof(counts_want) / sizeof(counts_want[0]))

static const char world_order[] =
    "MPI_Barrier,MPI_Barrier,MPI_Bcast,MPI_Bcast,MPI_Bcast,MPI_Allreduce,MPI_Allreduce,"
    "MPI_Allreduce,MPI_Allreduce,MPI_Allreduce,MPI_Reduce,MPI_Reduce,MPI_Gather,MPI_Scatter,"
    "MPI_Allgather,MPI_Alltoall,MPI_Alltoallv,MPI_Gatherv,MPI_Reduce_scatter_block,MPI_Scan,"
    "MPI_Exscan,MPI_Iallreduce,MPI_Ibcast";
static const char split_order[] = "MPI_Allreduce,MPI_Allreduce,MPI_Allreduce,MPI_Bcast,MPI_Barrier";

static void check_counts(sqlite3 *db, int rank)
{
    long long total = 0;

    for (size_t i = 0; i < N_WANT; i++) {
        const struct want *w = &counts_want[i];
        long long el = w->elements >= 0 ? w->elements : rank + 1;
        long long by = w->bytes >= 0 ? w->bytes : 4 * (rank + 1);
        char cat[16];

        cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = '%s'", rank, w->op),
                     w->calls, "rank %d %s calls", rank, w->op);
        cr_assert_eq(
            q(db, "SELECT sum(elements) FROM trace WHERE rank = %d AND op = '%s'", rank, w->op), el,
            "rank %d %s elements", rank, w->op);
        cr_assert_eq(
            q(db, "SELECT sum(mem_bytes) FROM trace WHERE rank = %d AND op = '%s'", rank, w->op),
            by, "rank %d %s bytes", rank, w->op);
        cr_assert_str_eq(
            qs(db, cat, sizeof(cat), "SELECT category FROM ops WHERE name = '%s'", w->op),
            w->category);
        total += w->calls;
    }
    cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank), total,
                 "no entry of another op");
    cr_assert_eq(total, 49);
}

/* The ext map: seq in order on both communicators, peers as world ranks, tags. */
static void check_ext(sqlite3 *db, int rank)
{
    int right = (rank + 1) % 4, left = (rank + 3) % 4;
    char got[1024];

    qs(db, got, sizeof(got),
       "SELECT group_concat(op) FROM (SELECT t.op FROM " TX
       " WHERE t.rank = %d AND x.comm = 0 AND x.seq IS NOT NULL AND t.category = 'comm'"
       " ORDER BY x.seq)",
       rank);
    cr_assert_str_eq(got, world_order, "rank %d: MPI_COMM_WORLD's collectives by seq", rank);
    cr_assert_eq(q(db, "SELECT max(x.seq) FROM " TX " WHERE t.rank = %d AND x.comm = 0", rank), 22);
    cr_assert_eq(
        q(db, "SELECT count(DISTINCT x.seq) FROM " TX " WHERE t.rank = %d AND x.comm = 0", rank),
        23);
    qs(db, got, sizeof(got),
       "SELECT group_concat(op) FROM (SELECT t.op FROM " TX
       " WHERE t.rank = %d AND x.comm != 0 AND x.seq IS NOT NULL ORDER BY x.seq)",
       rank);
    cr_assert_str_eq(got, split_order, "rank %d: its half's collectives by seq", rank);
    cr_assert_eq(q(db, "SELECT max(x.seq) FROM " TX " WHERE t.rank = %d AND x.comm != 0", rank), 4);

    /* Point to point, all on MPI_COMM_WORLD (comm 0), no seq. The Recv came from
     * MPI_ANY_SOURCE with MPI_STATUS_IGNORE: its peer is the actual source. */
    static const struct {
        const char *op;
        int to_right, tag, calls;
    } p2p[] = {{"MPI_Sendrecv", 1, 7, 4}, {"tcmpi.recv", 0, 7, 4}, {"MPI_Send", 1, 11, 1},
               {"MPI_Recv", 0, 11, 1},    {"MPI_Isend", 1, 5, 3},  {"MPI_Irecv", 0, 5, 3}};
    for (size_t i = 0; i < sizeof(p2p) / sizeof(p2p[0]); i++)
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = '%s' AND x.peer = "
                       "%d AND x.tag = %d AND x.comm = 0 AND x.seq IS NULL AND x.stream IS NULL",
                       rank, p2p[i].op, p2p[i].to_right ? right : left, p2p[i].tag),
                     p2p[i].calls, "rank %d %s", rank, p2p[i].op);
}

Test(mpi, counts_bytes_and_ext_of_a_known_program)
{
    long long id;
    sqlite3 *db;

    free(sh("'%s' --oversubscribe -np 4 '%s'", MPIEXEC_BIN, MPI_COUNTS_BIN));
    id = the_session(4);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT count(*) FROM entries"), 4 * 49);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cr_assert_eq(q(db, "SELECT count(*) FROM processes WHERE bye = 1 AND world = 4"), 4);
    for (int rank = 0; rank < 4; rank++) {
        char dev[16], want[16];
        snprintf(want, sizeof(want), "cpu:%d", rank);
        cr_assert_str_eq(
            qs(db, dev, sizeof(dev), "SELECT device FROM processes WHERE rank = %d", rank), want);
        check_counts(db, rank);
        check_ext(db, rank);
    }
    /* The same collective has the same (comm, seq) everywhere: 4 ranks on MPI_COMM_WORLD,
     * 2 on each half, whose ids differ from each other and from MPI_COMM_WORLD's. */
    cr_assert_eq(seq_mismatches(db), 0);
    cr_assert_eq(q(db, "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE x.comm = 0 AND x.seq IS"
                       " NOT NULL AND t.category = 'comm' GROUP BY x.seq HAVING count(*) = 4)"),
                 23);
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE x.comm != 0"), 2);
    for (int rank = 0; rank < 2; rank++)
        cr_assert_eq(q(db,
                       "SELECT count(DISTINCT x.comm) FROM " TX
                       " WHERE x.comm != 0 AND t.rank IN (%d, %d)",
                       rank, rank + 2),
                     1, "ranks %d and %d share their half", rank, rank + 2);
    /* Each MPI_Wait of the Iallreduce (seq 21) and Ibcast (22) carries its (comm, seq); the
     * Waitalls of point-to-point requests carry nothing. */
    for (int rank = 0; rank < 4; rank++)
        for (int seq = 21; seq <= 22; seq++)
            cr_assert_eq(q(db,
                           "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = 'MPI_Wait'"
                           " AND x.comm = 0 AND x.seq = %d AND x.comm_size = 4",
                           rank, seq),
                         1, "rank %d: the wait of seq %d", rank, seq);
    cr_assert_eq(q(db, "SELECT count(*) FROM " TX " WHERE t.category = 'wait'"), 8,
                 "only the waits of non-blocking collectives carry an ext map");
    sqlite3_close(db);
}

/* ---- MPI_THREAD_MULTIPLE -------------------------------------------------------- */

Test(mpi, thread_multiple)
{
    long long id;
    sqlite3 *db;

    /* Blocking mode: 4 threads per rank must not lose an entry to make the counts exact. */
    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' '%s'", MPIEXEC_BIN,
            TRACECTL_MPI_LIB, MPI_THREADS_BIN));
    id = the_session(2);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    for (int rank = 0; rank < 2; rank++) {
        /* 1200 calls and 1200 Sendrecvs of two entries each */
        cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank), 3600);
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = 'MPI_Sendrecv'"
                       " AND x.peer = %d AND x.tag BETWEEN 0 AND 3 AND t.mem_bytes = 4",
                       rank, 1 - rank),
                     1200);
        /* 4 communicators, each with its 300 Allreduces numbered 0..299 */
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM (SELECT x.comm FROM " TX " WHERE t.rank = %d AND"
                       " t.op = 'MPI_Allreduce' GROUP BY x.comm HAVING count(*) = 300 AND"
                       " count(DISTINCT x.seq) = 300 AND min(x.seq) = 0 AND max(x.seq) = 299)",
                       rank),
                     4);
    }
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE x.comm != 0"), 4,
                 "the 4 duplicates of MPI_COMM_WORLD: the same 4 ids on both ranks");
    cr_assert_eq(seq_mismatches(db), 0);
    sqlite3_close(db);
}

/* ---- HPCC ------------------------------------------------------------------ */

/* Debian's example input with a small problem: N 200, NB 20 on a 2 × 2 grid. */
static const msgpack_object *mpi_analysis(long long id, struct proto_reader *r);

static const char hpccinf[] =
    "HPLinpack benchmark input file\n"
    "Innovative Computing Laboratory, University of Tennessee\n"
    "HPL.out      output file name (if any)\n"
    "8            device out (6=stdout,7=stderr,file)\n"
    "1            # of problems sizes (N)\n"
    "200          Ns\n"
    "1            # of NBs\n"
    "20           NBs\n"
    "0            PMAP process mapping (0=Row-,1=Column-major)\n"
    "1            # of process grids (P x Q)\n"
    "2            Ps\n"
    "2            Qs\n"
    "16.0         threshold\n"
    "1            # of panel fact\n"
    "2            PFACTs (0=left, 1=Crout, 2=Right)\n"
    "1            # of recursive stopping criterium\n"
    "4            NBMINs (>= 1)\n"
    "1            # of panels in recursion\n"
    "2            NDIVs\n"
    "1            # of recursive panel fact.\n"
    "1            RFACTs (0=left, 1=Crout, 2=Right)\n"
    "1            # of broadcast\n"
    "1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)\n"
    "1            # of lookahead depth\n"
    "1            DEPTHs (>=0)\n"
    "2            SWAP (0=bin-exch,1=long,2=mix)\n"
    "64           swapping threshold\n"
    "0            L1 in (0=transposed,1=no-transposed) form\n"
    "0            U  in (0=transposed,1=no-transposed) form\n"
    "1            Equilibration (0=no,1=yes)\n"
    "8            memory alignment in double (> 0)\n"
    "##### This line (no. 32) is ignored (it serves as a separator). ######\n"
    "0                      \t\tNumber of additional problem sizes for PTRANS\n"
    "1200 10000 30000        \tvalues of N\n"
    "0                       \tnumber of additional blocking sizes for PTRANS\n"
    "40 9 8 13 13 20 16 32 64       \tvalues of NB\n";

static void write_file(const char *name, const char *text)
{
    char path[PATH_MAX + 64];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", d.dir, name);
    cr_assert_not_null(f = fopen(path, "w"));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

Test(mpi, hpcc_four_ranks)
{
    char *out, cmd[2 * PATH_MAX + 64], *comm;
    long long id;
    sqlite3 *db;

    write_file("hpccinf.txt", hpccinf);
    /* Blocking mode: nothing dropped, so every rank's counts are complete. */
    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 4 -x LD_PRELOAD='%s' hpcc", MPIEXEC_BIN,
            TRACECTL_MPI_LIB));
    id = the_session(4);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cr_assert_gt(q(db, "SELECT count(*) FROM entries"), 10000);
    cr_assert_gt(q(db, "SELECT count(*) FROM " TX " WHERE x.comm = 0 AND t.op = 'MPI_Allreduce'"),
                 0);
    /* On every communicator, each collective op was called as often by every member that used
     * the communicator, and the k-th collective is the same op everywhere. */
    cr_assert_eq(seq_mismatches(db), 0);
    cr_assert_eq(q(db, "SELECT count(*) FROM (SELECT comm, op FROM (SELECT x.comm, t.op, t.rank,"
                       " count(*) AS n FROM " TX " WHERE x.seq IS NOT NULL AND t.category ="
                       " 'comm' GROUP BY x.comm, t.op,"
                       " t.rank) GROUP BY comm, op HAVING count(DISTINCT n) > 1)"),
                 0);
    cr_assert_eq(q(db, "SELECT count(DISTINCT t.rank) FROM " TX " WHERE x.comm = 0"), 4);
    /* the report's MPI section (issue 29 item 4): every rank from MPI_Init to MPI_Finalize,
     * its calls its MPI entries, and each pair's receives what its sends sent */
    {
        struct proto_reader r;
        const msgpack_object *mpi = obj_get(mpi_analysis(id, &r), "mpi"), *ranks, *p2p;

        cr_assert_not_null(mpi);
        ranks = obj_get(mpi, "ranks");
        cr_assert_eq(ranks->via.array.size, 4);
        for (uint32_t i = 0; i < 4; i++) {
            const msgpack_object *row = &ranks->via.array.ptr[i];
            int rank = (int)obj_u64(obj_get(row, "rank"));
            cr_assert(obj_str_eq(obj_get(row, "wall_from"), "init_finalize"));
            cr_assert_eq(
                (long long)obj_u64(obj_get(row, "calls")),
                q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op GLOB 'MPI_*'", rank),
                "rank %d", rank);
        }
        p2p = obj_get(mpi, "p2p");
        cr_assert_gt(obj_u64(obj_get(p2p, "messages")), 1000);
        cr_assert_eq(obj_u64(obj_get(p2p, "pairs_differ")), 0);
        cr_assert_eq(obj_u64(obj_get(p2p, "recv_bytes")), obj_u64(obj_get(p2p, "bytes")));
        proto_reader_deinit(&r);
    }
    sqlite3_close(db);

    snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' report %lld", TRACECTL_BIN, d.sock, id);
    out = sh("%s", cmd);
    comm = strstr(out, "\nCommunication\n");
    cr_assert_not_null(comm, "%s", out);
    cr_assert_not_null(strstr(comm, "MPI_Allreduce"), "%s", out);
    cr_assert_not_null(strstr(comm, "MPI_Bcast"), "%s", out);
    free(out);
}

/* ---- NetPIPE ----------------------------------------------------------------- */

/* "calls <rank> <n>" lines of mpi_callcount, per rank. */
static void parse_calls(const char *out, long long calls[2])
{
    const char *p = out;
    int rank;
    long long n;

    calls[0] = calls[1] = -1;
    while ((p = strstr(p, "calls ")) != NULL) {
        if (sscanf(p, "calls %d %lld", &rank, &n) == 2 && rank >= 0 && rank < 2)
            calls[rank] = n;
        p += 6;
    }
    cr_assert(calls[0] > 0 && calls[1] > 0, "%s", out);
}

Test(mpi, netpipe_stored_plus_dropped_is_calls_made)
{
    long long calls[2], id;
    sqlite3 *db;
    char *out;

    /* A fixed repeat count (-n) makes NetPIPE's calls the same in both runs. */
    out = sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' NPopenmpi -n 200 -u 1024 -o np0.out "
             "2>np0.err",
             MPIEXEC_BIN, MPI_CALLCOUNT_LIB);
    parse_calls(out, calls);
    free(out);
    free(sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' NPopenmpi -n 200 -u 1024 -o np1.out "
            "2>np1.err",
            MPIEXEC_BIN, TRACECTL_MPI_LIB));
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++) {
        long long stored = q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank);
        long long dropped = q(db, "SELECT dropped FROM processes WHERE rank = %d", rank);
        cr_assert_eq(stored + dropped, calls[rank],
                     "rank %d: %lld stored + %lld dropped, %lld calls", rank, stored, dropped,
                     calls[rank]);
    }
    sqlite3_close(db);
}

/*
 * TRACECTL_MPI_P2P=auto at 2,000 point-to-point calls/s (200 in a 100 ms window: the
 * default 20,000 was crossed a window late once, on a loaded machine, when a rank ran
 * below it for 100 ms) on NetPIPE's latency run (1-8 byte messages, -n 20000: 720,000
 * calls per rank, far past the rate from the start): each rank stores at most two windows'
 * worth of point-to-point entries (and the first call of each function and peer), yet
 * its calls, stored + counted (process_op_drops.counted), are what mpi_callcount counted
 * in the same run without tracectl; nothing dropped (blocking), and the report says when
 * each rank switched.
 */
Test(mpi, netpipe_auto_counts_past_the_rate)
{
    long long calls[2], id, p2p_entries = 0;
    struct proto_reader r;
    const msgpack_object *mpi;
    sqlite3 *db;
    char *out;

    out = sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' NPopenmpi -l 1 -u 8 -p 0 -n 20000"
             " -o np0.out 2>np0.err",
             MPIEXEC_BIN, MPI_CALLCOUNT_LIB);
    parse_calls(out, calls);
    free(out);
    free(sh("TRACECTL_BLOCKING=1 TRACECTL_MPI_P2P=auto TRACECTL_MPI_P2P_RATE=2000 '%s'"
            " --oversubscribe -np 2 -x TRACECTL_BLOCKING -x TRACECTL_MPI_P2P"
            " -x TRACECTL_MPI_P2P_RATE -x LD_PRELOAD='%s' NPopenmpi -l 1 -u 8"
            " -p 0 -n 20000 -o np1.out 2>np1.err",
            MPIEXEC_BIN, TRACECTL_MPI_LIB));
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++) {
        long long stored = q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank);
        long long p2p = q(db,
                          "SELECT count(*) FROM trace WHERE rank = %d AND op IN ('MPI_Send',"
                          " 'MPI_Recv', 'MPI_Irecv', 'MPI_Ssend')",
                          rank);
        long long counted = q(db,
                              "SELECT coalesce(sum(d.counted), 0) FROM process_op_drops d JOIN"
                              " processes p ON p.id = d.process_id WHERE p.rank = %d",
                              rank);

        cr_assert_gt(calls[rank], 700000);
        cr_assert_eq(q(db, "SELECT dropped FROM processes WHERE rank = %d", rank), 0);
        cr_assert_eq(stored + counted, calls[rank],
                     "rank %d: %lld stored + %lld counted, %lld calls", rank, stored, counted,
                     calls[rank]);
        cr_assert_leq(p2p, 2 * 200 + 8, "rank %d: %lld point-to-point entries", rank, p2p);
        p2p_entries += p2p;
    }
    sqlite3_close(db);
    mpi = obj_get(mpi_analysis(id, &r), "mpi");
    cr_assert_eq(obj_u64(obj_get(mpi, "p2p_auto_rate")), 2000);
    for (uint32_t i = 0; i < 2; i++)
        cr_assert_eq(obj_get(&obj_get(mpi, "ranks")->via.array.ptr[i], "p2p_auto_ns")->type,
                     MSGPACK_OBJECT_POSITIVE_INTEGER, "rank row %u switched", i);
    proto_reader_deinit(&r);
    cr_assert_gt(p2p_entries, 0);
}

/* The default close timeout ($TRACECTL_CLOSE_TIMEOUT unset), in seconds (client/README.md). */
#define CLOSE_DEFAULT_S 5.0

/*
 * The pids of the processes named comm below pid (its children, theirs, ...):
 * how many, at most max.
 */
static int descendants_named(pid_t pid, const char *comm, pid_t out[], int max)
{
    char path[64], buf[512], name[64];
    struct dirent *e;
    DIR *dir = opendir("/proc");
    int n = 0;

    cr_assert_not_null(dir);
    while ((e = readdir(dir)) != NULL && n < max) {
        pid_t p = (pid_t)atoi(e->d_name), up = p;
        int ppid = 0;
        if (p <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)p);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        bool named = fgets(name, sizeof(name), f) != NULL &&
                     strncmp(name, comm, strlen(comm)) == 0 && name[strlen(comm)] == '\n';
        fclose(f);
        /* up the parent chain to pid (or to init) */
        for (int depth = 0; named && up > 1 && up != pid && depth < 16; depth++) {
            snprintf(path, sizeof(path), "/proc/%d/stat", (int)up);
            if ((f = fopen(path, "r")) == NULL)
                break;
            char *close_paren = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
            fclose(f);
            if (close_paren == NULL || sscanf(close_paren + 2, "%*c %d", &ppid) != 1)
                break;
            up = (pid_t)ppid;
        }
        if (named && up == pid)
            out[n++] = p;
    }
    closedir(dir);
    return n;
}

/*
 * Waits (up to max_s) until the two NetPIPE ranks below mpirun pid are blocked: their CPU
 * time unchanged over a second. Their MPI calls spin (Open MPI polls shared memory) and
 * recording never blocks (client/README.md), so with the daemon stopped a rank that uses
 * no CPU is in its last flush: tc_close, called by MPI_Finalize, waiting for the daemon.
 */
static void wait_ranks_in_close(pid_t pid, int max_s)
{
    pid_t ranks[2];

    for (double t0 = harness_now_s(); harness_now_s() - t0 < max_s; usleep(100000)) {
        if (descendants_named(pid, "NPopenmpi", ranks, 2) != 2)
            continue;
        long long before[2] = {harness_cpu_ticks(ranks[0]), harness_cpu_ticks(ranks[1])};
        usleep(1000000);
        if (before[0] >= 0 && before[1] >= 0 && harness_cpu_ticks(ranks[0]) == before[0] &&
            harness_cpu_ticks(ranks[1]) == before[1])
            return;
    }
    cr_assert_fail("the NetPIPE ranks were not blocked in MPI_Finalize within %d s", max_s);
}

/*
 * The daemon stops (SIGSTOP) near NetPIPE's end. Once both ranks wait for it in
 * MPI_Finalize, it stays stopped longer than the default close timeout of 5 s (plus
 * 1 s), and mpirun must still be running all that time: with TRACECTL_CLOSE_TIMEOUT=30,
 * MPI_Finalize waits for the daemon, so that every call is still either stored or
 * counted as dropped (past the timeout, the unsent tail is neither). That hold is the
 * test's point, not a wait for an event: it is measured from the ranks blocking, not
 * guessed from the stop.
 */
Test(mpi, netpipe_daemon_stalled_at_finalize)
{
    char cmd[PATH_MAX * 3], path[PATH_MAX + 16];
    long long calls[2], id;
    int st, lines = 0;
    sqlite3 *db;
    char *out;
    pid_t pid;

    out = sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' NPopenmpi -n 200 -u 1024 -o np0.out "
             "2>np0.err",
             MPIEXEC_BIN, MPI_CALLCOUNT_LIB);
    parse_calls(out, calls);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec '%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' -x "
             "TRACECTL_CLOSE_TIMEOUT=30 NPopenmpi -n 200 -u 1024 -o np1.out >/dev/null 2>np1.err",
             d.dir, MPIEXEC_BIN, TRACECTL_MPI_LIB);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* NetPIPE's output has a line per message size (46 in all), written through stdio, so
     * at the latest as it ends: stop the daemon once 44 are there. */
    snprintf(path, sizeof(path), "%s/np1.out", d.dir);
    for (int i = 0; i < 2400 && lines < 44; i++) {
        FILE *f = fopen(path, "r");
        int ch;
        lines = 0;
        while (f != NULL && (ch = fgetc(f)) != EOF)
            lines += ch == '\n';
        if (f != NULL)
            fclose(f);
        usleep(50000);
    }
    cr_assert_geq(lines, 44, "NetPIPE did not get to its end");
    cr_assert_eq(kill(d.pid, SIGSTOP), 0);
    wait_ranks_in_close(pid, 60);
    for (double t0 = harness_now_s(); harness_now_s() - t0 < CLOSE_DEFAULT_S + 1; usleep(50000))
        cr_assert_eq(waitpid(pid, &st, WNOHANG), 0,
                     "MPI_Finalize returned %.1f s into the daemon's stall, before "
                     "TRACECTL_CLOSE_TIMEOUT=30",
                     harness_now_s() - t0);
    cr_assert_eq(kill(d.pid, SIGCONT), 0);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++) {
        long long stored = q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank);
        long long dropped = q(db, "SELECT dropped FROM processes WHERE rank = %d", rank);
        cr_assert_eq(stored + dropped, calls[rank],
                     "rank %d: %lld stored + %lld dropped, %lld calls", rank, stored, dropped,
                     calls[rank]);
    }
    sqlite3_close(db);
}

/* ---- MPI_Finalize with the daemon stopped (issue 26 #2) ---------------------------- */

/*
 * Each rank records 20 barriers, says it is ready (rank 0 writes `ready`),
 * waits for `go` (written once the test stopped the daemon), records 20 more,
 * and times MPI_Finalize, which closes the client: "finalize <rank> <seconds>" into
 * fin.<rank>.
 */
static const char m4stall[] = "import os, sys, time\n"
                              "from mpi4py import MPI\n"
                              "comm = MPI.COMM_WORLD\n"
                              "rank = comm.Get_rank()\n"
                              "for _ in range(20):\n"
                              "    comm.Barrier()\n"
                              "if rank == 0:\n"
                              "    open('ready', 'w').close()\n"
                              "t = time.monotonic()\n"
                              "while not os.path.exists('go'):\n"
                              "    if time.monotonic() - t > 60:\n"
                              "        sys.exit('no go')\n"
                              "    time.sleep(0.01)\n"
                              "for _ in range(20):\n"
                              "    comm.Barrier()\n"
                              "t = time.monotonic()\n"
                              "MPI.Finalize()\n"
                              "took = time.monotonic() - t\n"
                              "with open('fin.%d' % rank, 'w') as f:\n"
                              "    f.write('finalize %d %.3f\\n' % (rank, took))\n";

/*
 * Runs m4stall on 2 ranks (env: "-x TRACECTL_CLOSE_TIMEOUT=..." or ""), the
 * daemon stopped between `ready` and `go`, resumed once mpirun is done; fills
 * took[] with each rank's MPI_Finalize time.
 */
static void finalize_stopped(const char *env, double took[2])
{
    char cmd[PATH_MAX * 3], path[PATH_MAX + 16], *out;
    int st, n = 0;
    pid_t pid;

    write_file("m4stall.py", m4stall);
    for (int rank = 0; rank < 2; rank++) {
        snprintf(path, sizeof(path), "%s/fin.%d", d.dir, rank);
        unlink(path);
    }
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec '%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' %s /usr/bin/python3 "
             "m4stall.py >fin.out 2>fin.err",
             d.dir, MPIEXEC_BIN, TRACECTL_MPI_LIB, env);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    snprintf(path, sizeof(path), "%s/ready", d.dir);
    for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++)
        usleep(10000);
    cr_assert_eq(access(path, F_OK), 0, "the ranks did not get ready");
    harness_sigstop(d.pid, true);
    write_file("go", "");
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    harness_sigstop(d.pid, false);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mpirun: status %d", st);
    /* each rank writes its own file: mpirun may not forward what a rank prints after
     * MPI_Finalize (it lost a line once in a fresh clone under load) */
    out = sh("cat fin.0 fin.1 2>/dev/null");
    took[0] = took[1] = -1;
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        int rank;
        double s;
        if (sscanf(line, "finalize %d %lf", &rank, &s) == 2 && rank >= 0 && rank < 2)
            took[rank] = s, n++;
    }
    free(out);
    cr_assert_eq(n, 2, "both ranks timed MPI_Finalize");
}

/* The daemon answers after SIGCONT, with the run's one session of 2 processes. */
static void daemon_fine(void)
{
    struct proto_reader r;
    const msgpack_object *o, *list;
    int fd;

    o = raw_control(d.sock, PROTO_SESSIONS, NULL, &r, &fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"));
    list = &o->via.array.ptr[1];
    cr_assert_eq(list->via.array.size, 1);
    cr_assert_eq(obj_u64(obj_get(&list->via.array.ptr[0], "processes")), 2);
    close(fd);
    proto_reader_deinit(&r);
}

#define FINALIZE_MARGIN                                                                            \
    2.0 /* seconds past the timeout PMPI_Finalize on a loaded machine may add                      \
         */

/* m4stall with env (see finalize_stopped): each rank's MPI_Finalize within timeout s. */
static void finalize_within(const char *env, double timeout)
{
    double took[2];

    finalize_stopped(env, took);
    for (int rank = 0; rank < 2; rank++)
        cr_assert(took[rank] >= timeout - 0.05 && took[rank] <= timeout + FINALIZE_MARGIN,
                  "rank %d: MPI_Finalize took %.3f s (close timeout %.1f s)", rank, took[rank],
                  timeout);
    daemon_fine();
}

/* Before: 60 s per rank (a flush of up to 60 s, then tc_close's 5 s), not changeable. */
Test(mpi, finalize_within_close_timeout_with_daemon_stopped)
{
    finalize_within("-x TRACECTL_CLOSE_TIMEOUT=1", 1);
}

Test(mpi, finalize_within_default_close_timeout_with_daemon_stopped)
{
    finalize_within("", 5);
}

/* ---- mpi4py ------------------------------------------------------------------------ */

static const char m4py[] =
    "from array import array\n"
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "rank, size = comm.Get_rank(), comm.Get_size()\n"
    "a, b = array('d', [rank] * 8), array('d', [0] * 8)\n"
    "for _ in range(5):\n"
    "    comm.Allreduce([a, MPI.DOUBLE], [b, MPI.DOUBLE], op=MPI.SUM)\n"
    "assert b[7] == size * (size - 1) / 2\n"
    "comm.Barrier()\n"
    "peer = 1 - rank\n"
    "c = array('i', [0] * 3)\n"
    "comm.Sendrecv([array('i', [rank] * 3), MPI.INT], dest=peer, sendtag=4,\n"
    "              recvbuf=[c, MPI.INT], source=peer, recvtag=4)\n"
    "assert c[2] == peer\n";

Test(mpi, mpi4py_under_preload)
{
    long long id;
    sqlite3 *db;

    write_file("m4.py", m4py);
    free(sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' /usr/bin/python3 m4.py", MPIEXEC_BIN,
            TRACECTL_MPI_LIB));
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank), 8);
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM trace WHERE rank = %d AND op = 'MPI_Allreduce'"
                       " AND elements = 8 AND mem_bytes = 64",
                       rank),
                     5);
        cr_assert_eq(
            q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = 'MPI_Barrier'", rank), 1);
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = 'MPI_Sendrecv'"
                       " AND x.peer = %d AND x.tag = 4 AND t.mem_bytes = 12",
                       rank, 1 - rank),
                     1);
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = 'tcmpi.recv'"
                       " AND x.peer = %d AND x.tag = 4 AND t.mem_bytes = 12 AND t.dur_ns = 0",
                       rank, 1 - rank),
                     1);
    }
    cr_assert_eq(seq_mismatches(db), 0);
    sqlite3_close(db);
}

/* ---- two halves from MPI_Comm_split, rank 3 late in its half (issue 14) --------- */

#define HALF_ROUNDS 4 /* mpi_halves.c's ROUNDS */
#define MAX_ARR     64

struct arrival {
    int rank;
    long long comm, seq, size, start, dur;
    char op[32];
};

/* The report's analysis map on session id; the reply stays in *r (deinit it). */
static const msgpack_object *mpi_analysis(long long id, struct proto_reader *r)
{
    struct proto_request req;
    const msgpack_object *o;
    int fd;

    proto_request_init(&req);
    req.session.id = id;
    req.analysis.on = true;
    o = raw_control(d.sock, PROTO_REPORT, &req, r, &fd);
    close(fd);
    cr_assert(obj_str_eq(&o->via.array.ptr[0], "ok"), "report failed");
    return &o->via.array.ptr[1];
}

static const msgpack_object *mpi_row(const msgpack_object *list, const char *key, const char *s,
                                     long long v)
{
    for (uint32_t i = 0; i < list->via.array.size; i++) {
        const msgpack_object *x = obj_get(&list->via.array.ptr[i], key);
        if (x != NULL &&
            (s != NULL ? obj_str_eq(x, s)
                       : x->type == MSGPACK_OBJECT_POSITIVE_INTEGER && x->via.u64 == (uint64_t)v))
            return &list->via.array.ptr[i];
    }
    cr_assert_fail("no row with %s = %s %lld", key, s ? s : "", v);
    return NULL;
}

/*
 * Four ranks split into {0, 1} and {2, 3}, each half running 4 MPI_Allreduce
 * (comm_size 2), rank 3 sleeping before each, then an MPI_Barrier on the
 * world (comm_size 4). Each collective instance is complete: none is
 * partial, and the waits, last arrivals, skews and late rank are those the
 * entries the session stored give by PROTOCOL.md Part 3's definitions,
 * worked out here. Without comm_size the halves' 8 instances were partial.
 */
Test(mpi, comm_split_halves_are_complete_with_their_late_rank)
{
    static struct arrival a[MAX_ARR];
    long long waited[4] = {0}, last[4] = {0}, caused[4] = {0}, ar_waited = 0, ar_skew_max = 0;
    long long span_sum = 0, top = 0;
    int r3_last = 0;
    size_t n = 0;
    struct proto_reader r;
    const msgpack_object *rep, *row, *late;
    sqlite3_stmt *st;
    long long id;
    sqlite3 *db;

    free(sh("'%s' --oversubscribe -np 4 '%s'", MPIEXEC_BIN, MPI_HALVES_BIN));
    id = the_session(4);
    db = open_session(id);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT t.rank, x.comm, x.seq, x.comm_size, t.start_ns,"
                                    " t.dur_ns, t.op FROM " TX " WHERE x.seq IS NOT NULL"
                                    " ORDER BY x.comm, x.seq, t.id",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        cr_assert_lt(n, MAX_ARR);
        a[n] = (struct arrival){sqlite3_column_int(st, 0),
                                sqlite3_column_int64(st, 1),
                                sqlite3_column_int64(st, 2),
                                sqlite3_column_int64(st, 3),
                                sqlite3_column_int64(st, 4),
                                sqlite3_column_int64(st, 5),
                                ""};
        snprintf(a[n].op, sizeof(a[n].op), "%s", (const char *)sqlite3_column_text(st, 6));
        n++;
    }
    sqlite3_finalize(st);
    cr_assert_eq(n, 4 * HALF_ROUNDS + 4, "every rank's allreduces and the barrier");
    /* one instance per run of equal (comm, seq) */
    for (size_t i = 0, j; i < n; i = j) {
        long long first = a[i].start, lst = a[i].start;
        int lr = a[i].rank;
        bool allreduce = strcmp(a[i].op, "MPI_Allreduce") == 0;

        for (j = i; j < n && a[j].comm == a[i].comm && a[j].seq == a[i].seq; j++) {
            cr_assert_eq(a[j].size, allreduce ? 2 : 4, "rank %d %s comm_size", a[j].rank, a[j].op);
            first = a[j].start < first ? a[j].start : first;
            if (a[j].start > lst)
                lst = a[j].start, lr = a[j].rank;
        }
        cr_assert_eq(j - i, allreduce ? 2 : 4, "arrivals at (%lld, %lld)", a[i].comm, a[i].seq);
        /* rank 3 sleeps before each of its half's allreduces: last, unless the loaded
         * machine kept rank 2 off a CPU longer (the figures below follow the entries) */
        if (allreduce && (a[i].rank == 2 || a[i].rank == 3))
            r3_last += lr == 3;
        last[lr]++;
        caused[lr] += lst - first;
        for (size_t k = i; k < j; k++) {
            long long w = lst - a[k].start < a[k].dur ? lst - a[k].start : a[k].dur;
            waited[a[k].rank] += w;
            if (allreduce)
                ar_waited += w;
        }
        if (allreduce && lst - first > ar_skew_max)
            ar_skew_max = lst - first;
    }
    cr_assert_gt(r3_last, HALF_ROUNDS / 2, "rank 3 last in %d of its half's %d allreduces", r3_last,
                 HALF_ROUNDS);
    for (int k = 0; k < 4; k++) {
        span_sum +=
            q(db, "SELECT max(start_ns + dur_ns) - min(start_ns) FROM trace WHERE rank = %d", k);
        if (caused[k] > caused[top])
            top = k;
    }
    sqlite3_close(db);

    rep = mpi_analysis(id, &r);
    row = mpi_row(obj_get(rep, "collectives"), "op", "MPI_Allreduce", 0);
    cr_expect_eq(obj_u64(obj_get(row, "instances")), 2 * HALF_ROUNDS);
    cr_expect_eq(obj_u64(obj_get(row, "partial")), 0);
    cr_expect_eq(obj_u64(obj_get(row, "waited_ns")), (uint64_t)ar_waited);
    cr_expect_eq(obj_u64(obj_get(row, "skew_max_ns")), (uint64_t)ar_skew_max);
    row = mpi_row(obj_get(rep, "collectives"), "op", "MPI_Barrier", 0);
    cr_expect_eq(obj_u64(obj_get(row, "instances")), 1);
    cr_expect_eq(obj_u64(obj_get(row, "partial")), 0);
    for (int k = 0; k < 4; k++) {
        row = mpi_row(obj_get(rep, "ranks"), "rank", NULL, k);
        cr_expect_eq(obj_u64(obj_get(row, "collectives")), HALF_ROUNDS + 1, "rank %d", k);
        cr_expect_eq(obj_u64(obj_get(row, "waited_ns")), (uint64_t)waited[k], "rank %d", k);
        cr_expect_eq(obj_u64(obj_get(row, "arrived_last")), (uint64_t)last[k], "rank %d", k);
        cr_expect_eq(obj_u64(obj_get(row, "caused_ns")), (uint64_t)caused[k], "rank %d", k);
    }
    /* one step (the interposer counts none): its late rank, by the 10 % rule */
    cr_assert_eq(obj_get(rep, "steps")->via.array.size, 1);
    late = obj_get(&obj_get(rep, "steps")->via.array.ptr[0], "late_rank");
    if ((double)caused[top] >= 0.10 * (double)(span_sum / 4))
        cr_expect(late->type == MSGPACK_OBJECT_POSITIVE_INTEGER && late->via.u64 == (uint64_t)top,
                  "late rank: want %lld", top);
    else
        cr_expect(late->type == MSGPACK_OBJECT_NIL, "no late rank");
    cr_expect_eq(obj_get(obj_get(rep, "completeness"), "missing_ranks")->via.array.size, 0);
    proto_reader_deinit(&r);
}

/* ---- mpi_comms: communicators, probes, non-blocking collectives (issue 27) ---------- */

#define ORDER_A    30 /* mpi_comms.c's */
#define ORDER_B    20
#define IPROBES    1000
#define NBC_ROUNDS 5
#define MAKERS     13

/* The report's collectives rows: each wanted op with its instances, none partial, no other. */
static void check_instances(long long id, int n, const char *const ops[], const long long want[])
{
    struct proto_reader r;
    const msgpack_object *rep = mpi_analysis(id, &r), *list = obj_get(rep, "collectives");

    for (int i = 0; i < n; i++) {
        const msgpack_object *row = mpi_row(list, "op", ops[i], 0);
        unsigned long long got = obj_u64(obj_get(row, "instances")),
                           partial = obj_u64(obj_get(row, "partial"));
        cr_expect_eq(got, (unsigned long long)want[i], "%s instances: %llu, want %lld", ops[i], got,
                     want[i]);
        cr_expect_eq(partial, 0, "%s partial: %llu", ops[i], partial);
    }
    cr_expect_eq(list->via.array.size, (uint32_t)n, "collective rows: only the real collectives");
    proto_reader_deinit(&r);
}

/* Collectives of op: on one communicator other than the world, n per rank, seq 0..n-1 at each
 * of the ranks. Returns that communicator's id. */
static long long check_one_comm(sqlite3 *db, const char *op, int ranks, int n)
{
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE t.op = '%s'", op), 1,
                 "%s on one communicator, the same id on every rank", op);
    cr_assert_eq(q(db,
                   "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE t.op = '%s' GROUP BY t.rank"
                   " HAVING count(*) = %d AND count(DISTINCT x.seq) = %d AND min(x.seq) = 0 AND"
                   " max(x.seq) = %d)",
                   op, n, n, n - 1),
                 ranks, "%s: seq 0..%d at every rank", op, n - 1);
    return q(db, "SELECT x.comm FROM " TX " WHERE t.op = '%s' AND x.comm != 0", op);
}

/* Every (comm, seq) reached by every member once: ranks arrivals from ranks distinct ranks. */
static void check_every_member_once(sqlite3 *db, int ranks)
{
    cr_assert_eq(seq_mismatches(db), 0);
    cr_assert_eq(q(db,
                   "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE x.seq IS NOT NULL AND"
                   " t.category = 'comm' GROUP BY x.comm, x.seq HAVING count(*) != %d OR"
                   " count(DISTINCT t.rank) != %d)",
                   ranks, ranks),
                 0);
}

/* The two MPI_Comm_dup's A (Allreduce) and B (Bcast) of mpi_comms' order and threads modes. */
static void check_two_dups(long long id, int ranks)
{
    static const char *const ops[] = {"MPI_Allreduce", "MPI_Bcast"};
    static const long long want[] = {ORDER_A, ORDER_B};
    long long ca, cb;
    sqlite3 *db = open_session(id);

    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE x.comm != 0"), 2,
                 "two communicators besides the world");
    ca = check_one_comm(db, "MPI_Allreduce", ranks, ORDER_A);
    cb = check_one_comm(db, "MPI_Bcast", ranks, ORDER_B);
    cr_assert_neq(ca, cb);
    check_every_member_once(db, ranks);
    sqlite3_close(db);
    check_instances(id, 2, ops, want);
}

/*
 * Two MPI_Comm_dup's of the world, A and B, first used in different orders: B
 * first on ranks 0 and 1 (a Sendrecv_replace), A first on 2 and 3. Named at
 * first use, A on ranks 0 and 1 had B's id on 2 and 3: 30 instances mixing
 * Allreduces and Bcasts, 10 of them partial.
 */
Test(mpi, dups_first_used_in_different_orders_keep_their_ids)
{
    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 4 '%s' order", MPIEXEC_BIN,
            MPI_COMMS_BIN));
    check_two_dups(the_session(4), 4);
}

/* The same with one thread per communicator under MPI_THREAD_MULTIPLE, each rank's threads
 * first touching their communicators in the other order. */
Test(mpi, dups_first_used_by_threads_in_different_orders)
{
    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 '%s' threads", MPIEXEC_BIN,
            MPI_COMMS_BIN));
    check_two_dups(the_session(2), 2);
}

/*
 * One communicator from each creating call (mpi_comms.c's makers: 13 of 4, 3
 * or 2 ranks, an intercommunicator among them), first touched in creation
 * order on even ranks, in reverse on odd ones, then i + 1 MPI_Allreduce on
 * the i-th call's: 13 ids, 73 instances, each reached by exactly its
 * communicator's ranks.
 * Named at first use, the communicators of the same members (Cart_create,
 * Graph_create, Dist_graph_create_adjacent, Comm_split_type, dup_with_info)
 * swapped ids between even and odd ranks.
 */
Test(mpi, every_creating_call_names_its_communicator_alike_everywhere)
{
    static const char *const ops[] = {"MPI_Allreduce"};
    /* instances: the calls' i + 1 times their communicators (two for split and Cart_sub) */
    static const long long want[] = {2 * 1 + 2 + 3 + 4 + 5 + 2 * 6 + 7 + 8 + 9 + 10 + 11};
    long long id;
    sqlite3 *db;

    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 4 '%s' makers", MPIEXEC_BIN,
            MPI_COMMS_BIN));
    id = the_session(4);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE x.seq IS NOT NULL"),
                 MAKERS);
    /* arrivals: i + 1 times the ranks in the i-th call's communicators */
    cr_assert_eq(q(db, "SELECT count(*) FROM " TX " WHERE t.op = 'MPI_Allreduce'"),
                 1 * 4 + 2 * 3 + 3 * 4 + 4 * 4 + 5 * 4 + 6 * 4 + 7 * 4 + 8 * 4 + 9 * 4 + 10 * 3 +
                     11 * 4);
    cr_assert_eq(q(db, "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE x.seq IS NOT NULL GROUP"
                       " BY x.comm, x.seq HAVING count(*) != max(x.comm_size) OR"
                       " count(DISTINCT t.rank) != max(x.comm_size) OR min(x.comm_size) !="
                       " max(x.comm_size))"),
                 0, "each instance reached by its communicator's ranks, once each");
    sqlite3_close(db);
    check_instances(id, 1, ops, want);
}

/* 1,000 MPI_Iprobe per rank are no collective: the one Barrier is the only instance. */
Test(mpi, iprobes_are_no_collectives)
{
    static const char *const ops[] = {"MPI_Barrier"};
    static const long long want[] = {1};
    long long id;
    sqlite3 *db;

    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 '%s' iprobe", MPIEXEC_BIN,
            MPI_COMMS_BIN));
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++)
        cr_assert_eq(
            q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = 'MPI_Iprobe'", rank),
            IPROBES);
    cr_assert_eq(q(db, "SELECT count(*) FROM " TX " WHERE x.seq IS NOT NULL AND t.op ="
                       " 'MPI_Iprobe'"),
                 0);
    sqlite3_close(db);
    check_instances(id, 1, ops, want);
}

/*
 * n back-to-back 8-byte MPI_Allreduce on 2 ranks: n instances, none partial. Before
 * issue 27 item 1 the daemon's matcher closed instances once 1,024 were open, and one
 * rank's entries run that far ahead of the other's at the daemon: measured on the
 * mpi-comms branch (2-core VM, 2026-11-28), 20,000 calls gave 39,052 and 39,183
 * instances, 38,104 and 38,366 partial, while the session file had seq 0..19,999 once on
 * each rank (the interposer's half was right). Instances are now found by their key
 * however many are open (daemon/writer/rkcoll.c).
 */
static void back_to_back_allreduces(int n)
{
    static const char *const ops[] = {"MPI_Allreduce"};
    const long long want[] = {n};
    long long id;
    sqlite3 *db;

    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 '%s' allreduce %d", MPIEXEC_BIN,
            MPI_COMMS_BIN, n));
    id = the_session(2);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cr_assert_eq(q(db,
                   "SELECT count(*) FROM (SELECT 1 FROM " TX " WHERE x.comm = 0 GROUP BY"
                   " t.rank HAVING count(DISTINCT x.seq) = %d AND max(x.seq) = %d)",
                   n, n - 1),
                 2);
    sqlite3_close(db);
    check_instances(id, 1, ops, want);
}

Test(mpi, twenty_thousand_allreduces_are_twenty_thousand_instances)
{
    back_to_back_allreduces(20000);
}

Test(mpi, two_hundred_thousand_allreduces_are_two_hundred_thousand_instances)
{
    back_to_back_allreduces(200000);
}

/*
 * Non-blocking collectives: each arrives at its I* call with its (comm, seq);
 * the completion call that completes its request carries the same (comm, seq),
 * a call completing several carries the first and an `id`, and each other one
 * is a zero-length "tcmpi.completed" entry at the call's end whose `parent` is
 * that id (PROTOCOL.md "MPI completion calls"). The two idup'ed communicators
 * C and D are named at their creation, not by the order of first use (which
 * differs between the ranks): each has one id on both ranks.
 */
Test(mpi, nonblocking_collectives_complete_with_their_comm_and_seq)
{
    long long id, cid;
    char got[256];
    sqlite3 *db;

    free(sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 '%s' nbc", MPIEXEC_BIN, MPI_COMMS_BIN));
    id = the_session(2);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cid = check_one_comm(db, "MPI_Allreduce", 2, NBC_ROUNDS);
    cr_assert_neq(check_one_comm(db, "MPI_Bcast", 2, NBC_ROUNDS), cid);
    check_every_member_once(db, 2);
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.comm) FROM " TX " WHERE x.comm != 0"), 2);
    for (int rank = 0; rank < 2; rank++) {
        /* arrivals: the world's 0..4, C's 0..NBC_ROUNDS */
        qs(db, got, sizeof(got),
           "SELECT group_concat(op) FROM (SELECT t.op FROM " TX " WHERE t.rank = %d AND"
           " t.category = 'comm' AND x.comm = 0 AND x.seq IS NOT NULL ORDER BY x.seq)",
           rank);
        cr_assert_str_eq(got, "MPI_Iallreduce,MPI_Ibcast,MPI_Ibarrier,MPI_Ireduce,MPI_Iallreduce");
        cr_assert_eq(q(db,
                       "SELECT x.seq FROM " TX " WHERE t.rank = %d AND t.op = 'MPI_Iallreduce'"
                       " AND x.comm = %lld",
                       rank, cid),
                     NBC_ROUNDS);
        /* completions, in the order they were called */
        qs(db, got, sizeof(got),
           "SELECT group_concat(w) FROM (SELECT t.op || ':' || coalesce(x.comm = 0, 'c') || ':' ||"
           " x.seq || ':' || x.comm_size AS w FROM " TX " WHERE t.rank = %d AND"
           " t.category = 'wait' AND x.seq IS NOT NULL ORDER BY t.start_ns + t.dur_ns, t.id)",
           rank);
        cr_assert(strcmp(got, "MPI_Wait:1:0:2,MPI_Waitall:1:1:2,tcmpi.completed:1:2:2,"
                              "MPI_Test:1:3:2,MPI_Waitany:1:4:2,MPI_Waitany:0:5:2") == 0 ||
                      strcmp(got, "MPI_Wait:1:0:2,MPI_Waitall:1:1:2,tcmpi.completed:1:2:2,"
                                  "MPI_Test:1:3:2,MPI_Waitany:0:5:2,MPI_Waitany:1:4:2") == 0,
                  "rank %d completions: %s", rank, got);
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " JOIN entry_link l ON l.entry_rowid = t.id"
                       " WHERE t.rank = %d AND t.op = 'tcmpi.completed' AND t.dur_ns = 0 AND"
                       " l.parent = (SELECT l2.id FROM entry_link l2 JOIN trace t2 ON"
                       " l2.entry_rowid = t2.id WHERE t2.rank = %d AND t2.op = 'MPI_Waitall')",
                       rank, rank),
                     1, "rank %d: the Waitall's second collective, linked to it", rank);
        /* the other completion calls carry nothing: the Tests that completed nothing (all
         * but the last Test) and the idups' Waitall */
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM trace t LEFT JOIN entry_ext x ON x.entry_rowid ="
                       " t.id WHERE t.rank = %d AND t.category = 'wait' AND x.seq IS NULL",
                       rank),
                     q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = 'MPI_Test'", rank) -
                         1 + 1);
    }
    sqlite3_close(db);
}

/*
 * Waits where they happen (issue 27 item 4): mpi_nbwait's halves make
 * MPI_Iallreduce + MPI_Wait, rank 3 sleeping 30 ms before 4 of its 8. A
 * non-blocking collective arrives at its I* call's start and its wait is the
 * part of its MPI_Wait before the last arrival (PROTOCOL.md "report option
 * analysis", *Non-blocking collective*). Checked two ways:
 * - exactly, against that rule applied here in SQL to the stored entries: each
 *   rank's waited_ns, and the caused_ns of the last arrival (the longest wait of
 *   another rank at each instance it arrived last at);
 * - against the program's own clock: each rank's waited_ns and caused_ns
 *   against the same rule applied to the program's own readings around its
 *   calls (rule_wait_ns, rule_caused_ns), within 1 % + 50 µs: the two differ
 *   only by where the clocks are read (the interposer's just inside the
 *   program's, around the PMPI call), a few µs per call; and rank 2's
 *   waited_ns and rank 3's caused_ns against the delay injected, rank 3's
 *   measured sleeps (4 x 30 ms), within 10 %: on top of the sleep comes what
 *   the scheduler adds between a rank's previous MPI_Wait and its sleep or its
 *   next MPI_Wait, up to a few ms per round when 4 ranks share 2 cores busy
 *   with other work (seen: 3.8 %; and rank 0 once waited 66 ms for rank 1, a
 *   real wait the rule check above counts exactly); 10 % of 120 ms is 12 ms,
 *   well below the 30 ms one late round adds or loses.
 *   The time rank 2 spent in MPI_Wait in all is only logged: it also holds the
 *   time from rank 3's arrival until rank 2 runs again, which under load was
 *   up to 9 ms over the 120 (a waiting rank's wait ends at the last arrival).
 * Before, the MPI_Wait was charged to nobody: rank 2 waited 0 and rank 3
 * caused only the few µs between the I* calls.
 */
#define NB_ROUNDS 8
#define NB_LATE   4

/* mpi_nbwait's figures for rank: [0] time in MPI_Wait, [1] slept, [2] rule wait, [3] caused. */
static void nb_measured(const char *out, int rank, long long m[4])
{
    for (const char *p = out; (p = strstr(p, "nbwait rank ")) != NULL; p++) {
        int r;
        if (sscanf(p,
                   "nbwait rank %d wait_ns %lld sleep_ns %lld rule_wait_ns %lld rule_caused_ns"
                   " %lld",
                   &r, &m[0], &m[1], &m[2], &m[3]) == 5 &&
            r == rank)
            return;
    }
    cr_assert_fail("rank %d printed no figures: %s", rank, out);
}

/* got within 1 % + 50 µs of want (see above) */
static bool nb_near(long long got, long long want)
{
    long long diff = got > want ? got - want : want - got;

    return (double)diff <= 0.01 * (double)want + 50000;
}

#define NB_A                                                                                       \
    "a AS (SELECT x.comm, x.seq, t.rank, t.start_ns AS s FROM " TX                                 \
    " WHERE t.op = 'MPI_Iallreduce'), l AS (SELECT comm, seq, max(s) AS last FROM a GROUP BY"      \
    " comm, seq), w AS (SELECT x.comm, x.seq, t.rank, max(0, min(l.last, t.start_ns +"             \
    " t.dur_ns) - t.start_ns) AS wait FROM " TX " JOIN l ON l.comm = x.comm AND l.seq = x.seq"     \
    " WHERE t.category = 'wait')"

Test(mpi, nonblocking_waits_are_in_their_completion_calls)
{
    static const char *const ops[] = {"MPI_Iallreduce"};
    static const long long want[] = {2 * NB_ROUNDS};
    long long waited[4], caused[4], id;
    struct proto_reader r;
    const msgpack_object *rep, *row;
    char *out;
    sqlite3 *db;

    out = sh("'%s' --oversubscribe -np 4 '%s'", MPIEXEC_BIN, MPI_NBWAIT_BIN);
    id = the_session(4);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT sum(dropped) FROM processes"), 0);
    cr_assert_eq(q(db, "SELECT count(*) FROM " TX " WHERE t.op = 'MPI_Wait' AND x.seq IS NOT NULL"),
                 4 * NB_ROUNDS, "every MPI_Wait names its collective");
    for (int k = 0; k < 4; k++) {
        waited[k] = q(db, "WITH " NB_A " SELECT coalesce(sum(wait), 0) FROM w WHERE rank = %d", k);
        caused[k] = q(db,
                      "WITH " NB_A " SELECT coalesce(sum(m), 0) FROM (SELECT max(w.wait) AS m FROM"
                      " l JOIN a ON a.comm = l.comm AND a.seq = l.seq AND a.s = l.last AND"
                      " a.rank = %d JOIN w ON w.comm = l.comm AND w.seq = l.seq AND w.rank != %d"
                      " GROUP BY l.comm, l.seq)",
                      k, k);
    }
    sqlite3_close(db);
    check_instances(id, 1, ops, want);

    rep = mpi_analysis(id, &r);
    for (int k = 0; k < 4; k++) {
        row = mpi_row(obj_get(rep, "ranks"), "rank", NULL, k);
        cr_expect_eq(obj_u64(obj_get(row, "collectives")), NB_ROUNDS, "rank %d", k);
        cr_expect_eq(obj_u64(obj_get(row, "waited_ns")), (uint64_t)waited[k], "rank %d", k);
        cr_expect_eq(obj_u64(obj_get(row, "caused_ns")), (uint64_t)caused[k], "rank %d", k);
    }
    for (int k = 0; k < 4; k++) {
        long long m[4];
        nb_measured(out, k, m);
        row = mpi_row(obj_get(rep, "ranks"), "rank", NULL, k);
        cr_log_info("rank %d: waited %llu ns, caused %llu ns; its clock: rule %lld / %lld ns,"
                    " in MPI_Wait %lld ns, slept %lld ns",
                    k, (unsigned long long)obj_u64(obj_get(row, "waited_ns")),
                    (unsigned long long)obj_u64(obj_get(row, "caused_ns")), m[2], m[3], m[0], m[1]);
        cr_expect(nb_near((long long)obj_u64(obj_get(row, "waited_ns")), m[2]),
                  "rank %d waited %lld ns, by its clock %lld", k, waited[k], m[2]);
        cr_expect(nb_near((long long)obj_u64(obj_get(row, "caused_ns")), m[3]),
                  "rank %d caused %lld ns, by its clock %lld", k, caused[k], m[3]);
    }
    {
        long long m3[4];
        double w2 = (double)waited[2], c3 = (double)caused[3], s3;
        nb_measured(out, 3, m3);
        s3 = (double)m3[1];
        cr_assert_geq(s3, NB_LATE * 30e6, "rank 3 slept 4 x 30 ms: %.0f ns", s3);
        /* at least its sleep: a busy machine (ctest -j8) deschedules rank 3 past it, and rank
         * 2 waits for that too (the exact figures are checked against the ranks' clocks above) */
        cr_expect(w2 >= 0.9 * s3, "rank 2 waited %.0f ns, rank 3 slept %.0f", w2, s3);
        cr_expect(c3 >= 0.9 * s3, "rank 3 caused %.0f ns, slept %.0f", c3, s3);
    }
    proto_reader_deinit(&r);
    free(out);

    /* `classify` rebuilds the aggregates from the stored entries (the completion calls' ext
     * and links): the same figures */
    free(sh("'%s' --socket '%s' classify %lld", TRACECTL_BIN, d.sock, id));
    rep = mpi_analysis(id, &r);
    for (int k = 0; k < 4; k++) {
        row = mpi_row(obj_get(rep, "ranks"), "rank", NULL, k);
        cr_expect_eq(obj_u64(obj_get(row, "waited_ns")), (uint64_t)waited[k], "rebuilt: rank %d",
                     k);
        cr_expect_eq(obj_u64(obj_get(row, "caused_ns")), (uint64_t)caused[k], "rebuilt: rank %d",
                     k);
    }
    proto_reader_deinit(&r);
}

/* ---- steps (issue 29 item 2) ----------------------------------------------------- */

#define STEPS 6                                          /* mpi_steps.c's */
static const int steps_late[STEPS] = {1, 1, 0, 1, 0, 0}; /* its late rank in each step */

/*
 * mpi_steps under LD_PRELOAD with env (the way it ends a step: mode): every
 * rank has STEPS steps, each with its Allreduce, both Barriers in barrier
 * mode (the dup's never ends a step), and the report's steps table names
 * the rank that slept 300 ms late in each step.
 */
static void check_steps(const char *env, const char *mode)
{
    struct proto_reader r;
    const msgpack_object *rep, *steps;
    long long id;
    sqlite3 *db;

    /* Waiting ranks yield the CPU instead of polling: on a loaded machine a rank that is
     * not the late one must not be held up for want of a core (a flaky late rank). */
    free(sh("%s '%s' --oversubscribe --mca mpi_yield_when_idle 1 -np 2 -x LD_PRELOAD='%s' '%s' %s",
            env, MPIEXEC_BIN, TRACECTL_MPI_LIB, MPI_STEPS_BIN, mode));
    id = the_session(2);
    db = open_session(id);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(q(db, "SELECT count(DISTINCT step) FROM trace WHERE rank = %d", rank), STEPS);
        cr_assert_eq(q(db, "SELECT max(step) FROM trace WHERE rank = %d", rank), STEPS - 1);
        for (int s = 0; s < STEPS; s++) {
            cr_assert_eq(q(db,
                           "SELECT count(*) FROM trace WHERE rank = %d AND step = %d AND"
                           " op = 'MPI_Allreduce'",
                           rank, s),
                         1, "rank %d step %d", rank, s);
            cr_assert_eq(q(db,
                           "SELECT count(*) FROM trace WHERE rank = %d AND step = %d AND"
                           " op = 'MPI_Barrier'",
                           rank, s),
                         strcmp(mode, "barrier") == 0 ? 2 : 1, "rank %d step %d", rank, s);
        }
    }
    sqlite3_close(db);

    rep = mpi_analysis(id, &r);
    steps = obj_get(rep, "steps");
    cr_assert_eq(steps->via.array.size, STEPS);
    for (int s = 0; s < STEPS; s++) {
        const msgpack_object *row = &steps->via.array.ptr[s], *late = obj_get(row, "late_rank");
        cr_assert_eq(obj_u64(obj_get(row, "step")), (uint64_t)s);
        cr_assert_eq(obj_u64(obj_get(row, "ranks")), 2);
        cr_expect(late->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                      late->via.u64 == (uint64_t)steps_late[s],
                  "%s: step %d's late rank is %d", mode, s, steps_late[s]);
    }
    for (int rank = 0; rank < 2; rank++) {
        const msgpack_object *row = mpi_row(obj_get(rep, "ranks"), "rank", NULL, rank);
        cr_assert_eq(obj_u64(obj_get(row, "steps")), STEPS, "rank %d", rank);
        cr_expect_eq(obj_u64(obj_get(row, "late_steps")), 3, "rank %d: late in 3 of the 6 steps",
                     rank);
    }
    proto_reader_deinit(&r);
}

Test(mpi, pcontrol_100_ends_a_step)
{
    check_steps("", "pcontrol");
}

Test(mpi, step_on_world_barrier_ends_a_step)
{
    check_steps("TRACECTL_MPI_STEP_ON=MPI_Barrier", "barrier");
}

/* Without a step marker, the same program is one step (and Pcontrol(1) changes nothing). */
Test(mpi, no_step_marker_is_one_step)
{
    long long id;
    sqlite3 *db;

    free(sh("'%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' '%s' barrier", MPIEXEC_BIN,
            TRACECTL_MPI_LIB, MPI_STEPS_BIN));
    id = the_session(2);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT count(DISTINCT step) FROM trace"), 1);
    cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE op = 'MPI_Barrier'"), 2 * 2 * STEPS);
    sqlite3_close(db);
}

/* ---- OTF2 export (issue 29 item 6) ------------------------------------------------- */

#ifdef OTF2_PRINT_BIN
/*
 * otf2_count.py DIR: otf2-print's events of DIR/traces.otf2 counted per rank
 * (its locations' groups are "rank N ..."): "<event> RANK COUNT" lines, and
 * "comms N", the communicators its collective ends name.
 */
static const char otf2_count_py[] =
    "import collections, re, subprocess, sys\n"
    "def run(*a):\n"
    "    return subprocess.run([sys.argv[1], *a], check=True, capture_output=True,\n"
    "                          text=True).stdout.splitlines()\n"
    "trace = sys.argv[2] + '/traces.otf2'\n"
    "rank = {}\n"
    "for l in run('-G', trace):\n"
    "    m = re.match(r'LOCATION +(\\d+) .*Group: \"rank (\\d+)', l)\n"
    "    if m: rank[int(m.group(1))] = int(m.group(2))\n"
    "n = collections.Counter(); comms = set()\n"
    "for l in run(trace):\n"
    "    f = l.split()\n"
    "    if len(f) > 2 and f[0] in ('ENTER', 'LEAVE', 'MPI_COLLECTIVE_BEGIN',\n"
    "                               'MPI_COLLECTIVE_END', 'MPI_SEND', 'MPI_RECV'):\n"
    "        n[(f[0], rank[int(f[1])])] += 1\n"
    "        m = re.search(r'Communicator: (\"[^\"]*\")', l)\n"
    "        if f[0] == 'MPI_COLLECTIVE_END' and m: comms.add(m.group(1))\n"
    "for (e, r), c in sorted(n.items()): print(e, r, c)\n"
    "print('comms', len(comms))\n";

/* The COUNT of "<event> RANK COUNT" in out (0 when absent). */
static long long otf2_n(const char *out, const char *event, int rank)
{
    char key[64];
    const char *p;
    long long n = 0;

    snprintf(key, sizeof(key), "%s %d ", event, rank);
    for (p = out; (p = strstr(p, key)) != NULL; p++)
        if (p == out || p[-1] == '\n')
            return sscanf(p + strlen(key), "%lld", &n) == 1 ? n : 0;
    return 0;
}

#define OTF2_COLLS                                                                                 \
    "'MPI_Barrier', 'MPI_Bcast', 'MPI_Gather', 'MPI_Gatherv', 'MPI_Scatter', 'MPI_Scatterv',"      \
    " 'MPI_Allgather', 'MPI_Allgatherv', 'MPI_Alltoall', 'MPI_Alltoallv', 'MPI_Alltoallw',"        \
    " 'MPI_Allreduce', 'MPI_Reduce', 'MPI_Reduce_scatter', 'MPI_Reduce_scatter_block',"            \
    " 'MPI_Scan', 'MPI_Exscan'"

/*
 * mpi_counts (4 ranks: MPI_COMM_WORLD and two halves, point to point,
 * non-blocking collectives) exported as OTF2: otf2-print reads it, and per
 * rank its Enter and Leave events are the rank's entries, its collective
 * begin/end pairs its blocking collectives, its MPI_SEND / MPI_RECV its
 * sends and receives on MPI_COMM_WORLD; 3 communicators.
 */
Test(mpi, otf2_export_has_the_session_s_events)
{
    long long id;
    sqlite3 *db;
    char *out;

    free(sh("'%s' --oversubscribe -np 4 '%s'", MPIEXEC_BIN, MPI_COUNTS_BIN));
    id = the_session(4);
    write_file("otf2_count.py", otf2_count_py);
    out = sh("'%s' --socket '%s' export %lld --format otf2 -o otf2 && python3 otf2_count.py '%s'"
             " otf2",
             TRACECTL_BIN, d.sock, id, OTF2_PRINT_BIN);
    db = open_session(id);
    for (int rank = 0; rank < 4; rank++) {
        long long entries = q(db, "SELECT count(*) FROM trace WHERE rank = %d", rank);
        long long colls = q(db,
                            "SELECT count(*) FROM " TX " WHERE t.rank = %d AND x.seq IS NOT NULL"
                            " AND t.op IN (" OTF2_COLLS ")",
                            rank);
        cr_assert_eq(otf2_n(out, "ENTER", rank), entries, "rank %d: %s", rank, out);
        cr_assert_eq(otf2_n(out, "LEAVE", rank), entries, "rank %d", rank);
        cr_assert_eq(otf2_n(out, "MPI_COLLECTIVE_BEGIN", rank), colls, "rank %d", rank);
        cr_assert_eq(otf2_n(out, "MPI_COLLECTIVE_END", rank), colls, "rank %d", rank);
        cr_assert_eq(otf2_n(out, "MPI_SEND", rank),
                     q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND x.peer IS NOT NULL AND"
                       " x.comm = 0 AND t.op IN ('MPI_Send', 'MPI_Isend', 'MPI_Sendrecv')",
                       rank),
                     "rank %d", rank);
        cr_assert_eq(otf2_n(out, "MPI_RECV", rank),
                     q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND x.peer IS NOT NULL AND"
                       " x.comm = 0 AND t.op IN ('MPI_Recv', 'MPI_Irecv', 'tcmpi.recv')",
                       rank),
                     "rank %d", rank);
        cr_assert_gt(colls, 0);
    }
    cr_assert(strstr(out, "comms 3\n") != NULL, "MPI_COMM_WORLD and two halves: %s", out);
    sqlite3_close(db);
    free(out);
}
#endif

/* ---- no daemon: rank 0 says so (issue 29 item 8) ------------------------------------ */

/* How many lines of out contain s. */
static int lines_with(const char *out, const char *s)
{
    int n = 0;

    for (const char *p = out; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

/* mpi_steps with 3 ranks and no daemon at its socket (env added): its stderr and stdout. */
static char *run_without_daemon(const char *env)
{
    return sh("TRACECTL_SOCKET='%s/none.sock' %s '%s' --oversubscribe -np 3 -x LD_PRELOAD='%s'"
              " '%s' pcontrol 2>&1",
              d.dir, env, MPIEXEC_BIN, TRACECTL_MPI_LIB, MPI_STEPS_BIN);
}

Test(mpi, no_daemon_rank_0_says_the_job_is_not_recorded)
{
    char want[PATH_MAX + 64];
    char *out;

    snprintf(want, sizeof(want), "cannot connect to %s/none.sock", d.dir);
    out = run_without_daemon("");
    cr_assert_eq(lines_with(out, "tracectl: this MPI job is not recorded: "), 1, "%s", out);
    cr_assert(strstr(out, want) != NULL, "the reason: %s", out);
    free(out);
    out = run_without_daemon("TRACECTL_BLOCKING=1");
    cr_assert_eq(lines_with(out, "tracectl: this MPI job is not recorded: no daemon: "), 1, "%s",
                 out);
    free(out);
    out = run_without_daemon("TRACECTL_QUIET=1");
    cr_assert_eq(lines_with(out, "tracectl"), 0, "%s", out);
    free(out);
    out = run_without_daemon("TRACECTL_DISABLE=1");
    cr_assert_eq(lines_with(out, "tracectl"), 0, "%s", out);
    free(out);
    /* with the daemon: nothing said */
    out = sh("'%s' --oversubscribe -np 3 -x LD_PRELOAD='%s' '%s' pcontrol 2>&1", MPIEXEC_BIN,
             TRACECTL_MPI_LIB, MPI_STEPS_BIN);
    cr_assert_eq(lines_with(out, "tracectl"), 0, "%s", out);
    free(out);
}

/* A TRACECTL_MPI_STEP_ON that names no collective: rank 0 says so, and there are no steps. */
Test(mpi, step_on_not_a_collective_is_said_and_ignored)
{
    long long id;
    sqlite3 *db;
    char *out;

    out = sh("TRACECTL_MPI_STEP_ON=MPI_Send '%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' '%s'"
             " barrier 2>&1",
             MPIEXEC_BIN, TRACECTL_MPI_LIB, MPI_STEPS_BIN);
    cr_assert_eq(lines_with(out, "tracectl: TRACECTL_MPI_STEP_ON=MPI_Send is not an MPI"
                                 " collective"),
                 1, "%s", out);
    id = the_session(2);
    db = open_session(id);
    cr_assert_eq(q(db, "SELECT count(DISTINCT step) FROM trace"), 1);
    sqlite3_close(db);
    free(out);
}

/* ---- point to point done right (issue 29 item 4) --------------------------------- */

/*
 * mpi_p2p (4 ranks) under LD_PRELOAD: per rank, op and peer, the entries'
 * calls and bytes equal the program's own count ("p2p RANK OP PEER CALLS
 * BYTES"): received bytes are what arrived (not the posted 10,000 / 20,000 /
 * 1,000 / 512), receives from MPI_ANY_SOURCE and Irecvs completed by Wait,
 * Waitall and Test have their actual source, and each Sendrecv(_replace) is
 * its send side plus a "tcmpi.recv" entry for its receive side, linked by
 * parent. No point-to-point entry is without a peer.
 */
/*
 * p2p_sum.py FORMAT FILE: the point-to-point entries of a CSV or Chrome
 * export summed per rank, op and peer, as mpi_p2p prints its own count
 * ("p2p RANK OP PEER CALLS BYTES"), sorted. An entry without a peer counts
 * under peer -1 (there must be none). Written independently of the CLI.
 */
static const char p2p_sum_py[] =
    "import csv, json, re, sys\n"
    "OPS = {'MPI_Send', 'MPI_Recv', 'MPI_Isend', 'MPI_Irecv', 'MPI_Sendrecv', 'tcmpi.recv',\n"
    "       'MPI_Sendrecv_replace'}\n"
    "sums = {}\n"
    "def add(rank, op, peer, b):\n"
    "    c = sums.setdefault((rank, op, peer), [0, 0])\n"
    "    c[0] += 1; c[1] += b\n"
    "if sys.argv[1] == 'csv':\n"
    "    for r in csv.DictReader(open(sys.argv[2], newline='')):\n"
    "        if r['op'] in OPS:\n"
    "            assert r['comm'] == '0' and r['tag'] != '' and r['seq'] == '', r\n"
    "            add(int(r['rank']), r['op'], int(r['peer'] or -1), int(r['mem_bytes']))\n"
    "else:\n"
    "    ev = json.load(open(sys.argv[2]))\n"
    "    ev = ev['traceEvents'] if isinstance(ev, dict) else ev\n"
    "    rank = {e['pid']: int(re.match(r'rank (\\d+)', e['args']['name']).group(1))\n"
    "            for e in ev if e.get('ph') == 'M' and e.get('name') == 'process_name'}\n"
    "    for e in ev:\n"
    "        if e.get('ph') in ('X', 'i') and e['name'] in OPS:  # tcmpi.recv: an instant\n"
    "            a = e['args']\n"
    "            assert a['comm'] == '0' and 'tag' in a and 'seq' not in a, a\n"
    "            add(rank[e['pid']], e['name'], a.get('peer', -1), a['mem_bytes'])\n"
    "for (r, op, p), (n, b) in sorted(sums.items()):\n"
    "    print('p2p %d %s %d %d %d' % (r, op, p, n, b))\n";

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The "p2p ..." lines of out, sorted, one string (caller frees). */
static char *p2p_lines(const char *out)
{
    char *lines[256], *all = calloc(1, 1 << 16);
    size_t n = 0, len = 0;

    cr_assert_not_null(all);
    for (const char *p = out; (p = strstr(p, "p2p ")) != NULL && n < 256; p += 4) {
        size_t l = strcspn(p, "\n");
        lines[n] = strndup(p, l);
        cr_assert_not_null(lines[n]);
        n++;
    }
    qsort(lines, n, sizeof(lines[0]), cmp_str);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(all + len, (1 << 16) - len, "%s\n", lines[i]);
        free(lines[i]);
    }
    return all;
}

Test(mpi, point_to_point_peers_and_bytes_as_the_program_counts)
{
    long long calls, bytes, id, want[4] = {0};
    int rank, peer, lines = 0;
    char op[32];
    const char *p;
    sqlite3 *db;
    char *out;

    out = sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 4 -x LD_PRELOAD='%s' '%s'", MPIEXEC_BIN,
             TRACECTL_MPI_LIB, MPI_P2P_BIN);
    id = the_session(4);
    db = open_session(id);
    for (p = out; (p = strstr(p, "p2p ")) != NULL; p += 4) {
        if (sscanf(p, "p2p %d %31s %d %lld %lld", &rank, op, &peer, &calls, &bytes) != 5)
            continue;
        lines++;
        cr_assert(rank >= 0 && rank < 4, "%s", out);
        want[rank] += calls;
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = '%s' AND"
                       " x.peer = %d AND x.comm = 0",
                       rank, op, peer),
                     calls, "rank %d %s peer %d calls", rank, op, peer);
        cr_assert_eq(q(db,
                       "SELECT coalesce(sum(t.mem_bytes), 0) FROM " TX " WHERE t.rank = %d AND"
                       " t.op = '%s' AND x.peer = %d",
                       rank, op, peer),
                     bytes, "rank %d %s peer %d bytes", rank, op, peer);
    }
    cr_assert_gt(lines, 4 * 6, "%s", out);
    /* the CSV and Chrome exports carry the same peers, tags and comm (python3 sums them) */
    write_file("p2p_sum.py", p2p_sum_py);
    char *want_lines = p2p_lines(out);
    for (int f = 0; f < 2; f++) {
        const char *fmt = f == 0 ? "csv" : "chrome";
        char *got = sh("'%s' --socket '%s' export %lld --format %s -o p2p.%s && python3 p2p_sum.py"
                       " %s p2p.%s",
                       TRACECTL_BIN, d.sock, id, fmt, fmt, fmt, fmt);
        char *got_lines = p2p_lines(got);
        cr_assert_str_eq(got_lines, want_lines, "%s export", fmt);
        free(got_lines);
        free(got);
    }
    free(want_lines);
    for (rank = 0; rank < 4; rank++)
        cr_assert_eq(q(db,
                       "SELECT count(*) FROM trace WHERE rank = %d AND op IN ('MPI_Send',"
                       " 'MPI_Recv', 'MPI_Isend', 'MPI_Irecv', 'MPI_Sendrecv', 'tcmpi.recv',"
                       " 'MPI_Sendrecv_replace')",
                       rank),
                     want[rank], "rank %d: no point-to-point entry but those counted", rank);
    /* each receive side names its Sendrecv: same rank, parent = the send side's id, at its end */
    cr_assert_eq(q(db, "SELECT count(*) FROM trace t JOIN entry_link l ON l.entry_rowid = t.id"
                       " JOIN entry_link m ON m.parent = l.id JOIN trace s ON s.id = m.entry_rowid"
                       " WHERE t.op IN ('MPI_Sendrecv', 'MPI_Sendrecv_replace') AND"
                       " s.op = 'tcmpi.recv' AND s.rank = t.rank AND s.dur_ns = 0 AND"
                       " s.start_ns = t.start_ns + t.dur_ns"),
                 4 * 2);
    sqlite3_close(db);
    free(out);
}

/* ---- Fortran (issue 29 item 1) ------------------------------------------------ */

#ifdef MPI_FORTRAN_BIN
/*
 * mpi_fortran (mpif90: `use mpi`, mpif.h and `use mpi_f08`) under LD_PRELOAD:
 * one session of 2 ranks whose calls and bytes per rank and op equal what the
 * program counted itself ("rank R OP CALLS BYTES" lines: received sizes,
 * Irecvs at their MPI_TEST, WAITANY or WAITSOME, Sendrecv_replace's two
 * sides), steps from
 * MPI_PCONTROL, receives with the actual peer, and the collectives of all three bindings in one
 * sequence on MPI_COMM_WORLD.
 */
Test(mpi, fortran_bindings_count_like_the_program)
{
    char op[32];
    long long calls, bytes, id;
    int rank, lines = 0;
    const char *p;
    sqlite3 *db;
    char *out;

    out = sh("TRACECTL_BLOCKING=1 '%s' --oversubscribe -np 2 -x LD_PRELOAD='%s' '%s'", MPIEXEC_BIN,
             TRACECTL_MPI_LIB, MPI_FORTRAN_BIN);
    id = the_session(2);
    db = open_session(id);
    for (p = out; (p = strstr(p, "rank ")) != NULL; p += 5) {
        if (sscanf(p, "rank %d %31s %lld %lld", &rank, op, &calls, &bytes) != 4)
            continue;
        lines++;
        cr_assert(calls > 0, "%s", out);
        cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = '%s'", rank, op),
                     calls, "rank %d %s calls", rank, op);
        cr_assert_eq(q(db,
                       "SELECT coalesce(sum(mem_bytes), 0) FROM trace WHERE rank = %d AND"
                       " op = '%s'",
                       rank, op),
                     bytes, "rank %d %s bytes", rank, op);
    }
    cr_assert_eq(lines, 28, "%s", out);
    cr_assert_eq(q(db, "SELECT count(*) FROM trace WHERE op NOT IN ('MPI_Allreduce', 'MPI_Bcast',"
                       " 'MPI_Barrier', 'MPI_Send', 'MPI_Recv', 'MPI_Irecv', 'MPI_Isend',"
                       " 'MPI_Test', 'MPI_Wait', 'MPI_Sendrecv_replace', 'tcmpi.recv',"
                       " 'MPI_Waitany', 'MPI_Waitsome', 'MPI_Waitall')"),
                 0);
    /* MPI_PCONTROL(100) at the end of each of the 7 rounds: 8 steps */
    for (rank = 0; rank < 2; rank++)
        cr_assert_eq(q(db, "SELECT count(DISTINCT step) FROM trace WHERE rank = %d", rank), 8);
    /* MPI_STATUS_IGNORE in Fortran: the peer is still the actual source (the Irecvs' is
     * MPI_ANY_SOURCE, completed by MPI_TEST) */
    for (rank = 0; rank < 2; rank++)
        for (int k = 0; k < 3; k++) {
            static const char *const rx[] = {"MPI_Recv", "MPI_Irecv", "tcmpi.recv"};
            cr_assert_eq(
                q(db,
                  "SELECT count(*) FROM " TX " WHERE t.rank = %d AND t.op = '%s'"
                  " AND x.peer = %d AND x.comm = 0",
                  rank, rx[k], 1 - rank),
                q(db, "SELECT count(*) FROM trace WHERE rank = %d AND op = '%s'", rank, rx[k]),
                "rank %d %s", rank, rx[k]);
        }
    /* 7 × 3 + 5 + 1 + 3 + 1 collectives: one sequence over the three bindings */
    cr_assert_eq(seq_mismatches(db), 0);
    cr_assert_eq(q(db, "SELECT count(DISTINCT x.seq) FROM " TX " WHERE x.comm = 0 AND"
                       " x.seq IS NOT NULL"),
                 31);
    /* callsites (issue 29 item 5): the calls of `use mpi` and mpif.h are the program's own
     * call sites; every call has a site (those of mpi_f08 are in Open MPI's module) */
    {
        struct proto_reader r;
        const msgpack_object *cs = obj_get(obj_get(mpi_analysis(id, &r), "mpi"), "callsites");
        const msgpack_object *sites = obj_get(cs, "sites");
        long long site_calls = 0, own = 0;

        for (uint32_t i = 0; i < sites->via.array.size; i++) {
            const msgpack_object *x = &sites->via.array.ptr[i];
            site_calls += (long long)obj_u64(obj_get(x, "calls"));
            own += obj_str_eq(obj_get(x, "module"), MPI_FORTRAN_BIN);
        }
        cr_assert_eq(site_calls, q(db, "SELECT count(*) FROM trace WHERE op GLOB 'MPI_*'"));
        cr_assert_gt(own, 10, "sites in the program: %lld", own);
        proto_reader_deinit(&r);
    }
    sqlite3_close(db);
    free(out);
}
#endif

#else

Test(mpi, skipped_without_mpi)
{
    cr_skip_test("CMake found no MPI: libtracectl-mpi was not built");
}

#endif
