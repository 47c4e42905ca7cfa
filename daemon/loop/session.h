/*
 * session — the session registry: every session this daemon knows, live
 * and ended, newest first, on the loop thread only.
 *
 * A session is live while any of its processes is connected and, when a
 * hello said `world` N, until N processes have joined and left or the
 * linger time (60 s by default) has passed since the last one left. Then it
 * ends: a later hello with the same name starts a new session with a new id.
 * Ids come from a counter seeded with the largest id the catalog ever gave,
 * so the loop never waits for the catalog to hand one out; the store writes
 * the row (STORE_OPEN) and the file behind it.
 *
 * Live sessions intern op and device names into session-wide ids (the ids
 * in the session file); the store learns each new name by a STORE_OP or
 * STORE_DEVICE job queued before the first batch that uses it.
 *
 * LIMITS
 * Every table a peer can grow is bounded per session (README "Limits"),
 * so that one producer cannot grow the daemon's memory (or the writer's
 * tables of the same names) without bound: op names, devices and distinct
 * (out_shape, in_shapes) pairs, by count and by bytes.
 *
 * Shapes are interned here too, by their bytes (a strmap: two distinct pairs
 * never share an id): each batch job carries
 * the session-wide shape id of every entry (store_job.u.batch.shape_ids), so
 * the writer never hashes shapes again; it writes a shapes row the first time
 * it meets an id (the entry's bytes are in the batch).
 */
#ifndef TRACECTLD_SESSION_H
#define TRACECTLD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "map.h"
#include "proto.h"
#include "store.h"

#define SESSION_MAX_OPS         65536       /* distinct op names */
#define SESSION_MAX_OP_BYTES    (8u << 20)  /* their names and categories */
#define SESSION_MAX_DEVICES     4096        /* distinct device names */
#define SESSION_MAX_SHAPES      65536       /* distinct (out_shape, in_shapes) pairs */
#define SESSION_MAX_SHAPE_BYTES (16u << 20) /* their msgpack bytes */
#define SESSION_MAX_OPENING     4           /* new sessions whose files are still being made */
/*
 * Processes (hellos) of one session. The writer keeps state for each until
 * the session ends (the rank aggregates: ~2.3 KiB for a process of one
 * entry, docs/BENCHMARKS.md "Processes per session"), so the cap bounds it.
 */
#define SESSION_MAX_PROCESSES 16384

struct session {
    struct session *next; /* registry list, newest first */
    int64_t id;
    char *name;
    bool live;
    int interrupted;              /* enum session_cut: ended because the daemon stopped */
    int64_t uid;                  /* of the first producer; -1 unknown */
    int64_t started_ns, ended_ns; /* CLOCK_REALTIME at the start; the end is start + elapsed */
    uint64_t started_mono;        /* session_mono_ns() at the start (live sessions) */
    uint64_t processes, entries, dropped;
    uint64_t failed;            /* entries lost to storage errors (in dropped, not in entries) */
    uint64_t refused_processes; /* hellos refused at SESSION_MAX_PROCESSES (while loaded) */
    uint64_t bytes;             /* on disk (file + WAL), refreshed once a second while live */
    uint64_t accepted_bytes; /* what the entries accepted so far will take (session_entry_cost) */

    /* live sessions only */
    uint32_t connected;
    int64_t world;         /* largest `world` any hello gave; -1 none */
    uint64_t linger_until; /* uv_now() ms when it ends if nobody joins; 0 none */
    uint32_t next_op, next_dev;
    struct strmap ops, devices;
    struct strmap shapes; /* (out_shape, in_shapes) bytes -> id; ids 1 .. shapes.len */
    uint64_t op_bytes, shape_bytes;
    /* in front of shapes: recent pairs by a hash of op and bytes, two per set (session.c);
     * NULL until the first */
    struct session_shape_slot *shape_cache;
    /* Calls and time per op id, counted as entries are accepted: what `live` shows. */
    struct session_op_count {
        uint64_t calls, total_ns;
    } * op_counts;
    uint32_t n_op_counts; /* ids below it have a slot */
    /* Op ids that are synchronizing collectives (peerarr_sync_op), a bit each; NULL until the
     * first, freed with the name tables. */
    uint8_t *op_sync;
    /* A member forwarding this session: its collective arrivals for the home (peerarr.h); NULL
     * when not forwarded, and then nothing is queued. */
    struct peerarr_queue *arrq;
};

struct registry {
    uv_loop_t *loop;
    struct store *store;
    struct session *list;
    int64_t last_id;
    uint64_t linger_ms;
    size_t n_live;
    /* Retention's clock (session_retention_now): a wall time and the monotonic time then. */
    int64_t anchor_wall;
    uint64_t anchor_mono;
    struct store_budget *opening; /* STORE_OPEN jobs queued: one STORE_OPEN_COST each */
    /* The daemon is stopping: producers cut off now leave their sessions live, for
     * session_registry_deinit() to end as interrupted (STORE_CUT_STOP). */
    bool stopping;
};

/* Returns 0 or -ENOMEM. */
int session_registry_init(struct registry *reg, uv_loop_t *loop, struct store *store,
                          int64_t last_id, uint64_t linger_ms);
/*
 * Why a session was cut short (enum store_cut), in one sentence for people: NULL
 * when it was not (STORE_CUT_NONE). The string is static.
 */
const char *session_cut_reason(int cut);
/* Ends every live session (interrupted) and frees everything. */
void session_registry_deinit(struct registry *reg);
/* Adds an ended session read from the catalog. Returns 0 or -ENOMEM. */
int session_load(struct registry *reg, const struct store_catalog_row *row);

/*
 * A producer said hello: joins the live session of that name started by the
 * same uid, or starts one (another user's session of the same name is never
 * joined).
 * Sets *process_id and *dev_id (the hello device's id, 0 without one).
 * Returns the session, or NULL with *err -ENOMEM, -ENOSPC when the
 * session's device table is full, or -EUSERS when it has
 * SESSION_MAX_PROCESSES processes (counted in refused_processes).
 */
struct session *session_join(struct registry *reg, const struct proto_hello *h, int64_t uid,
                             int64_t pid, int64_t *process_id, uint32_t *dev_id, int *err);
/* True while SESSION_MAX_OPENING new sessions wait for their files: a new one must wait. */
bool session_opening_full(const struct registry *reg);
/*
 * Records a producer's own counters (process_counters; PROTOCOL.md Part 3)
 * as of now: k's acked is the last ack the process is known to have had.
 * final: they came with bye. Takes ownership of k->ops (set to NULL), the
 * per-op drops, whose connection op ids it maps through ops (the
 * connection's ids → session ids; an id not there is left out). Out of
 * memory they are left out (a report then shows the previous ones).
 */
void session_counters(struct registry *reg, struct session *s, int64_t process_id,
                      struct proto_counters *k, bool final, const struct u32map *ops);
/*
 * A process left: bye 1 with `bye`, 0 without, 2 cut off by the daemon's stop
 * (processes.bye); `dropped` counts what its client
 * dropped, `refused` what the daemon dropped (already in s->dropped). May
 * end the session.
 */
void session_leave(struct registry *reg, struct session *s, int64_t process_id, int bye,
                   uint64_t dropped, uint64_t refused);
/* The live session a hello of (name, uid) would join, or NULL. */
struct session *session_find_live(struct registry *reg, const char *name, int64_t uid);

/*
 * Session-wide id of an op name into *id, interning it (the store job is
 * charged to `budget`, which may be NULL). Returns 0, -ENOMEM, or -ENOSPC
 * when a new name would pass SESSION_MAX_OPS or SESSION_MAX_OP_BYTES.
 */
int session_op(struct registry *reg, struct session *s, const char *name, const char *category,
               struct store_budget *budget, uint32_t *id);
/* Counts an accepted entry of session op id `op` (live sessions; `live` replies with it). */
void session_count_entry(struct session *s, uint32_t op, uint64_t dur_ns);
/* The same for a device name (len bytes); ids start at 1; limit SESSION_MAX_DEVICES. */
int session_device(struct registry *reg, struct session *s, const char *name, size_t len,
                   struct store_budget *budget, uint32_t *id);
/*
 * The session-wide id of the (out_shape, in_shapes) pair of one entry (blob
 * bytes) into *id, interning a new pair (ids from 1, in order of first use;
 * both lengths 0: no shapes, id 0, always fine). op, the entry's session op
 * id, only finds the pair sooner (the entries of an op mostly repeat its
 * shapes): the id is the same whatever op says. Returns 0, -ENOMEM, or
 * -ENOSPC when a new pair would pass SESSION_MAX_SHAPES or
 * SESSION_MAX_SHAPE_BYTES.
 */
int session_shape(struct session *s, uint32_t op, const char *out, uint32_t out_len, const char *in,
                  uint32_t in_len, uint32_t *id);

/*
 * A session by id, or the newest of that name, among those uid may see (uid
 * -1: all of them). NULL when none.
 */
struct session *session_find(struct registry *reg, const struct proto_sessref *ref, int64_t uid);
/* Bytes on disk of the sessions of uid (-1: all); live ones from their last refresh. */
uint64_t session_user_bytes(struct registry *reg, int64_t uid);
/*
 * The store could not store n entries of session id (they were counted in
 * entries when accepted): they move to dropped and failed.
 */
void session_lost(struct registry *reg, int64_t id, uint64_t n);
/*
 * The byte caps (--max-session-bytes, --max-user-bytes) count what is
 * accepted as it arrives, not what the once-a-second size sampler last saw:
 * a session's size is the larger of its bytes on disk and the estimate of
 * every entry accepted into it (session_entry_cost each, an upper bound of
 * what an entry adds to the file).
 */
#define SESSION_FILE_COST  65536 /* bytes: a new session file, its schema and no entries */
#define SESSION_ENTRY_COST 96    /* bytes: a row of entries at most, with its page overhead */
uint64_t session_entry_cost(const struct proto_entry *e);
uint64_t session_cap_bytes(const struct session *s);
/* The sum of session_cap_bytes over uid's sessions. */
uint64_t session_user_cap_bytes(struct registry *reg, int64_t uid);
/* Removes an ended session from the registry and frees it (after the store deleted it). */
void session_remove(struct registry *reg, struct session *s);
/* Ends sessions whose linger time has passed; call about once a second. */
void session_tick(struct registry *reg);

/*
 * Clocks. Wall-clock times (CLOCK_REALTIME) are what sessions show, but
 * every duration is measured on CLOCK_MONOTONIC: a live session's later
 * times are its start plus the monotonic time since (session_wall_ns), so
 * a wall clock stepped backwards never makes an end precede its start.
 *
 * Retention by age (--retain-days) must not act on a clock that jumped. It
 * reads session_retention_now(): the wall time of an anchor taken at
 * start-up plus the monotonic time since, never more than the wall clock
 * says (a clock stepped forward while running is ignored). The anchor is the
 * wall clock at start-up, unless that is more than the retention age past
 * the newest session the catalog holds: then the clock is not trusted, the
 * anchor is the newest session's time, and the gap is not counted as age
 * (session_clock_anchor, which logs it).
 *
 * Debug builds (the tests) add to the wall clock the offset in seconds
 * written in the file $TRACECTLD_TEST_CLOCK names, to step it without root.
 */
int64_t session_now_ns(void);                     /* CLOCK_REALTIME in ns */
uint64_t session_mono_ns(void);                   /* CLOCK_MONOTONIC in ns */
int64_t session_wall_ns(const struct session *s); /* a live session's now: start + elapsed */
/* The anchor retention counts from, given the wall clock at start-up and the
 * newest session time (0: none); pure, for the tests. */
int64_t session_clock_anchor(int64_t wall_now, int64_t newest, uint64_t retain_ns);
/* Sets reg's anchor from the sessions loaded from the catalog (logs a clock it distrusts). */
void session_clock_start(struct registry *reg, uint64_t retain_ns);
/* Retention's now: min(wall clock, anchor + monotonic time since); pure, for the tests. */
int64_t session_retention_clock(int64_t anchor_wall, uint64_t anchor_mono, int64_t wall_now,
                                uint64_t mono_now);
int64_t session_retention_now(const struct registry *reg);

#endif
