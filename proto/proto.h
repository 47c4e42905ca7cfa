/*
 * proto — the tracectl wire format, version 1 (see proto/PROTOCOL.md).
 *
 * This module owns framing and validation of the msgpack stream and the
 * owned C structs that a decoded message becomes. It depends on msgpack-c
 * and util/utf8.h only: no libuv, no SQLite, no globals, so the daemon, the
 * client library, the CLI, the unit tests and the fuzzer all share it. This
 * header is the public one (the types, decoding, and proto_reader.h and
 * proto_pack.h, included below); the decoders of each message family, the
 * field checks and the byte scanner have internal headers of their own.
 *
 * Reading (proto_reader.h): a struct proto_reader wraps a msgpack_unpacker and bounds each
 * message as bytes arrive. proto_reader_next() yields one owned struct
 * proto_msg at a time (or "need more bytes", or an error with a code and a
 * message). Nothing returned borrows from the unpacker's zone. A batch is
 * decoded in one pass over its bytes (proto/onepass.h); every other message
 * through msgpack-c's object tree.
 *
 * Writing (proto_pack.h): proto_pack_*() append one whole message to a msgpack_packer.
 *
 * Errors: every int function returns 0 or a negative errno (the reader's
 * next functions return 1 for "a message" as well, see there). A decoding
 * error also fills struct proto_error with the wire code to send, and its
 * errno follows the code: -EMSGSIZE for too_large, -EBADMSG for
 * bad_msgpack, -ENOMEM for internal (out of memory), -EPROTO for any other.
 * Packing fails only when the packer's buffer cannot grow: -ENOMEM.
 *
 * Threads: every function is reentrant; a reader belongs to one thread.
 */
#ifndef TRACECTL_PROTO_H
#define TRACECTL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define PROTO_VERSION      1
#define PROTO_MAX_MSG      (4u << 20) /* one message */
#define PROTO_MAX_STR      4096       /* any string */
#define PROTO_MAX_NAME     1024       /* op names, metadata keys and strings */
#define PROTO_MAX_SESSION  256        /* session names */
#define PROTO_MAX_DIMS     16         /* dimensions of one shape */
#define PROTO_MAX_INPUTS   8          /* input shapes of one entry */
#define PROTO_MAX_META     256        /* keys of one meta map */
#define PROTO_MAX_DEPTH    4          /* nesting of arrays/maps in any v1 message */
#define PROTO_MAX_CATEGORY 32         /* an op category: a short word */

/* Distinct metadata keys of one process: the daemon's CONN_MAX_META_KEYS, which
 * libtracectl refuses past (tests/unit/test_client.c asserts the two agree). */
#define PROTO_MAX_META_KEYS 1024

/* Error codes sent in ["error", {"code": ..., "message": ...}]. */
#define PROTO_E_MSGPACK    "bad_msgpack"  /* bytes are not msgpack */
#define PROTO_E_MESSAGE    "bad_message"  /* msgpack, but not a v1 message */
#define PROTO_E_TOO_LARGE  "too_large"    /* over a size limit */
#define PROTO_E_TYPE       "unknown_type" /* unknown message type */
#define PROTO_E_VERSION    "bad_version"  /* hello.proto != 1 */
#define PROTO_E_STATE      "bad_state"    /* e.g. batch before hello, second hello */
#define PROTO_E_UNKNOWN_OP "unknown_op"   /* op id not defined by ops */
#define PROTO_E_REDEFINED  "op_redefined" /* op id redefined with another name */
#define PROTO_E_NO_SESSION "no_session"   /* control request names no session */
#define PROTO_E_LIVE       "session_live" /* delete of a live session */
#define PROTO_E_INTERNAL   "internal"     /* the daemon failed (disk, memory) */
#define PROTO_E_LIMIT      "limit"        /* a daemon limit was reached */

enum proto_type {
    PROTO_NONE = 0,
    /* producer → daemon */
    PROTO_HELLO,
    PROTO_OPS,
    PROTO_BATCH,
    PROTO_META,
    PROTO_FLUSH,
    PROTO_BYE,
    /* control → daemon */
    PROTO_SESSIONS,
    PROTO_REPORT,
    PROTO_STATUS,
    PROTO_DELETE,
    PROTO_EXPORT, /* extension: streams a session's entries (proto/PROTOCOL.md) */
    PROTO_LIVE,   /* extension: a live session's counters, for `tracectl top` */
    /* daemon → peer */
    PROTO_WELCOME,
    PROTO_ACK,
    PROTO_OK,
    PROTO_ERROR,
    PROTO_ROWS,     /* extension: one chunk of an export stream */
    PROTO_END,      /* extension: the end of an export stream */
    PROTO_CLASSIFY, /* extension: re-classifies a stored session's ops (proto/PROTOCOL.md) */
};

struct proto_error {
    const char *code; /* one of PROTO_E_*, static */
    char message[200];
};

enum proto_value_type { PROTO_V_NIL, PROTO_V_BOOL, PROTO_V_INT, PROTO_V_FLOAT, PROTO_V_STR };

/*
 * The metadata a forked child of a rank sends when it keeps its parent's rank (a worker of
 * that rank: a DataLoader worker), with its parent's pid: its entries count in its rank's
 * totals but in no step (PROTOCOL.md "Workers").
 */
#define PROTO_META_WORKER_OF "tracectl.worker_of"

/*
 * The metadata a producer sends at each step marker with how long the thread that runs its
 * steps waited on a CPU's run queue in the step that ends: a string "<step> <ns>" (two
 * decimal integers, each 0 .. INT64_MAX, one space). The daemon adds ns to the process's
 * step; another form is kept as metadata only (PROTOCOL.md "Metadata tracectl.cpu_wait").
 */
#define PROTO_META_CPU_WAIT "tracectl.cpu_wait"

/* One metadata pair. Integers are kept as int64 (uint above INT64_MAX is rejected). */
struct proto_kv {
    char *key;
    enum proto_value_type type;
    union {
        bool b;
        int64_t i;
        double f;
        char *s;
    } v;
};

struct proto_hello {
    int64_t proto;
    char *session; /* 1..PROTO_MAX_SESSION bytes of UTF-8, NUL-terminated */
    int64_t rank;  /* -1 when absent */
    int64_t world; /* -1 when absent */
    int64_t pid;   /* -1 when absent */
    char *host;    /* NULL when absent */
    char *device;  /* NULL when absent */
    char *home;    /* NULL when absent: "ADDR:PORT" of the session's home daemon (extension) */
    struct proto_kv *meta;
    size_t n_meta;
};

struct proto_opdef {
    uint32_t id;
    char *name;
    char *category; /* NULL when absent */
};

/*
 * The extension map of an entry (position 9, proto/PROTOCOL.md Part 3): has
 * says which keys were given; the others are 0. Unsigned keys take the whole
 * uint64 range, tag the int64 range.
 */
#define PROTO_EXT_STREAM   (1u << 0) /* the producer's track: a CUDA stream, a thread id */
#define PROTO_EXT_PEER     (1u << 1) /* peer rank of a point-to-point call */
#define PROTO_EXT_TAG      (1u << 2) /* MPI tag (may be negative) */
#define PROTO_EXT_COMM     (1u << 3) /* communicator / process-group id */
#define PROTO_EXT_SEQ      (1u << 4) /* per-communicator collective sequence number */
#define PROTO_EXT_CHECKSUM (1u << 5) /* 64-bit checksum of the op's output */
/* Links between entries (proto/PROTOCOL.md Part 3, "Links between entries"). */
#define PROTO_EXT_ID       (1u << 6) /* this entry's id in its process, for children's parent */
#define PROTO_EXT_PARENT   (1u << 7) /* the id of the entry this one is nested in */
#define PROTO_EXT_LAUNCHER (1u << 8) /* op id of the CPU op that launched it (a kernel) */
/* The ranks of the communicator (proto/PROTOCOL.md Part 3, "ext key comm_size"). */
#define PROTO_EXT_COMM_SIZE (1u << 9) /* 1 .. PROTO_MAX_COMM_SIZE */
#define PROTO_MAX_COMM_SIZE INT32_MAX /* as hello's world */
/* The whole interval of an entry whose dur_ns is its self time (proto/PROTOCOL.md Part 3). */
#define PROTO_EXT_SPAN (1u << 10) /* ns from start_ns, its children included */

struct proto_ext {
    uint32_t has; /* PROTO_EXT_* bits; 0: no ext (absent, nil or an empty map) */
    int64_t tag;
    uint64_t stream, peer, comm, seq, checksum;
    uint64_t id, parent;
    uint64_t comm_size; /* 1 .. PROTO_MAX_COMM_SIZE */
    uint64_t span;      /* ns */
    uint32_t launcher;  /* an op id: the connection's on the wire, the session's once stored */
};

/*
 * One entry of a batch. Shapes and the device name live in the batch's blob:
 * out_shape/in_shapes as canonical msgpack (an array of uint, an array of
 * arrays of uint) so they can be stored and replayed byte for byte; len 0
 * means nil. elements is already resolved (nil → product of out_shape).
 * An entry's ext map is a struct proto_ext copied into the blob (ext_len 0:
 * none), so entries without one pay 8 bytes for it; read it with
 * proto_entry_ext().
 */
struct proto_entry {
    uint64_t step;
    uint64_t start_ns;
    uint64_t dur_ns;
    uint64_t elements;
    uint64_t mem_bytes;
    uint32_t op_id;
    uint32_t out_off, out_len;
    uint32_t in_off, in_len;
    uint32_t dev_off, dev_len; /* dev_len 0: nil (the process's hello device) */
    uint32_t ext_off, ext_len; /* ext_len 0: no ext; else sizeof(struct proto_ext) */
};

/* Copies e's ext map out of blob into *ext. Returns false (and sets only ext->has, to 0) when it
 * has none. */
bool proto_entry_ext(const struct proto_entry *e, const char *blob, struct proto_ext *ext);

struct proto_batch {
    struct proto_entry *entries;
    size_t n;
    char *blob; /* shapes, device names and ext maps, see struct proto_entry */
    size_t blob_len;
    /* room in entries (entries) and blob (bytes), so that a pool may reuse them; 0: not known
     * (n and blob_len are safe to assume) */
    size_t cap, blob_cap;
};

/* How a control request names a session: by id, or by name (newest of that name). */
struct proto_sessref {
    int64_t id; /* -1 when named */
    char *name; /* NULL when by id */
};

#define PROTO_MAX_RANK_FILTER 256 /* ranks a report analysis may name */

struct proto_request {
    struct proto_sessref session; /* report, delete (and extensions) */
    uint32_t top;                 /* report: default 10 */
    double comm_min_ratio;        /* report: default 0.0 */
    uint64_t mem_threshold;       /* report: default 0 */
    uint32_t ops_limit;           /* report extension: rows of `ops` (and `comm`); 0 = all */
    uint32_t ops_offset;          /* report extension: ops rows skipped first */
    bool by_start; /* export: "order": "start" (by start_ns) instead of storage order */
    /*
     * report extensions (PROTOCOL.md Part 3): the analysis sections ("report analysis"), and
     * the filters, which restrict every section of the report ("report filters")
     */
    struct proto_analysis {
        bool on;                              /* "analysis": true */
        int64_t ranks[PROTO_MAX_RANK_FILTER]; /* "ranks": [R, ...]; n_ranks 0: every rank */
        uint32_t n_ranks;
        bool steps; /* "steps": [A, B]: steps A..B */
        uint64_t step_min, step_max;
        char *device;   /* "device": only this device's entries; NULL: all */
        char *category; /* "category": only this category; NULL: all */
    } analysis;
    /* classify (extension): POSIX extended regexes, matched without case; NULL: not given */
    char *re_comm, *re_compute, *re_memory;
    bool by_rank; /* export: "order": "rank" (by rank, then as "start"); by_start is false */
    bool late;    /* report extension: "late": true, only the late-arrival figures (top) */
};

/*
 * A producer's own figures (PROTOCOL.md Part 3, "client counters"): sent in
 * `flush` (its element 2, a map) and `bye` to a daemon whose welcome said
 * "counters": true. recorded = stored + dropped + unconfirmed + pending at
 * the client; sent counts entries of batches wholly written to the socket,
 * acked the last ack's `stored` the client read. given: the message had them.
 */
struct proto_opdrop {
    uint32_t op; /* the connection's op id (the session's, once the daemon mapped it) */
    uint64_t calls, ns, bytes;
    /* of those, counted by design, never meant as entries (elements 4-6 of the row, an
     * extension; 0 when absent): counted <= calls, counted_ns <= ns, counted_bytes <= bytes */
    uint64_t counted, counted_ns, counted_bytes;
};

struct proto_counters {
    bool given;
    uint64_t recorded, dropped, sent, acked;
    /* "ops_dropped": [[op, calls, ns, bytes(, counted, counted_ns, counted_bytes)], ...],
     * what was not sent as entries per op
     * (cumulative); owned by the message (proto_msg_free), NULL: none. */
    struct proto_opdrop *ops;
    size_t n_ops;
};
#define PROTO_MAX_OPDROPS 65536 /* rows of ops_dropped: a connection's op ids */

struct proto_msg {
    enum proto_type type;
    struct proto_counters counters; /* PROTO_FLUSH, PROTO_BYE: the client's, when given */
    union {
        struct proto_hello hello;
        struct {
            struct proto_opdef *defs;
            size_t n;
        } ops;
        struct proto_batch batch;
        struct {
            struct proto_kv *kv;
            size_t n;
        } meta;
        uint64_t flush_seq;
        uint64_t bye_dropped;
        struct proto_request req;
        struct {
            int64_t session_id, process_id;
            bool counters; /* the daemon takes client counters in flush and bye */
        } welcome;
        struct {
            uint64_t seq, stored;
        } ack;
        struct {
            char *code, *message;
        } error;
        /* PROTO_OK: the result is not decoded here; use proto_reader_next_object(). */
    } u;
};

/* Frees what a decoded message owns; the struct itself is the caller's. NULL is a no-op. */
void proto_msg_free(struct proto_msg *m);
void proto_batch_free(struct proto_batch *b);
void proto_kv_free(struct proto_kv *kv, size_t n);

/* Name of a message type as on the wire ("hello", ...), or "?" */
const char *proto_type_name(enum proto_type t);

/*
 * The categories an op counts in (the report's Ranks and Categories sections,
 * and its category filter): compute, comm, memory and wait are themselves,
 * none (NULL) is compute, any other word is other.
 */
enum proto_cat {
    PROTO_CAT_COMPUTE,
    PROTO_CAT_COMM,
    PROTO_CAT_MEMORY,
    PROTO_CAT_WAIT,
    PROTO_CAT_OTHER,
    PROTO_NCAT
};

/* The code of a category name (NULL: none). */
enum proto_cat proto_cat_code(const char *category);
/* The name of a code. */
const char *proto_cat_name(enum proto_cat c);

/* ---- decoding (proto.c) ----------------------------------------------- */

/*
 * Decodes one message from an already unpacked object (used by the above and by the fuzzer).
 * Returns 0, or a negative errno with *err filled (err may be NULL).
 */
int proto_decode(const msgpack_object *o, struct proto_msg *m, struct proto_error *err);

/*
 * Decodes one message from a byte buffer holding exactly one message; as proto_decode.
 * A batch is decoded in one pass (proto/onepass.h); proto_decode_bytes_tree() takes
 * msgpack-c's object tree for every message, with the same results and errors.
 */
int proto_decode_bytes(const char *buf, size_t len, struct proto_msg *m, struct proto_error *err);
int proto_decode_bytes_tree(const char *buf, size_t len, struct proto_msg *m,
                            struct proto_error *err);

/* Sets req to the defaults of PROTOCOL.md (top 10, ratio 0, threshold 0, no session);
 * proto_request.c. */
void proto_request_init(struct proto_request *req);

/* True when s[0..len) is valid UTF-8 (the rule of utf8.h) with no NUL. s may be NULL when len is 0.
 */
bool proto_utf8_valid(const char *s, size_t len);

/* The streaming reader and the encoders, each in a header of its own. */
#include "proto_pack.h"
#include "proto_reader.h"

#endif
