/*
 * cli_export_dict — what an export stream means: the dictionaries of its
 * ["ok", {...}] header (session, ops, devices, processes; proto/PROTOCOL.md
 * "export"), copied into owned memory, and the decoding of one row of a
 * ["rows", [...]] chunk against them.
 *
 * The header arrives before any row and is borrowed from the connection's
 * reader only until the next message, so cli_export_dict_init() copies what
 * the formats need. Its size follows the number of ops, devices and
 * processes of the session, never the number of entries. A row is decoded
 * into a struct cli_export_row that points into the dictionary and borrows
 * the row's shapes from the reader (valid until the next message).
 *
 * Single-threaded; no globals.
 */
#ifndef TRACECTL_CLI_EXPORT_DICT_H
#define TRACECTL_CLI_EXPORT_DICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "map.h"

struct cli_export_op {
    char *name;
    char *category; /* "" when the daemon gave none */
};

struct cli_export_dev {
    char *name;
    uint32_t index; /* 1, 2, ... in dictionary order: Chrome's tid (0 is "no device") */
};

struct cli_export_proc {
    bool has_rank, has_pid;
    int64_t rank, pid; /* pid: the process's own pid, as its hello said */
    char *host;        /* NULL when unknown */
    /*
     * The pid shown in trace viewers: the rank, or for a process without
     * one its process id shifted past every known rank, so that it never
     * shares a row with a ranked process.
     */
    int64_t view_pid;
    char *label; /* "rank 0 (node1, pid 4242)", "process 3 (pid 77)", ... */
};

struct cli_export_dict {
    int64_t session_id;
    char *session_name;
    struct cli_export_op *ops;
    struct cli_export_dev *devs;
    struct cli_export_proc *procs;
    size_t n_ops, n_devs, n_procs;
    struct pairmap op_idx, dev_idx, proc_idx; /* daemon id → array index */
};

/* One entry of the stream, resolved against the dictionaries. */
struct cli_export_row {
    const struct cli_export_proc *proc;
    const struct cli_export_op *op;
    const struct cli_export_dev *dev; /* NULL: the entry has no device */
    size_t op_index, proc_index;      /* positions in the dictionary arrays */
    uint64_t step, start_ns, dur_ns, elements, mem_bytes;
    /*
     * The whole interval a timeline draws, from start_ns: dur_ns, or the ext
     * span when it is longer (an entry whose dur_ns is its self time,
     * PROTOCOL.md "ext key span"), at most INT64_MAX so start_ns + span_ns
     * never wraps.
     */
    uint64_t span_ns;
    const msgpack_object *out_shape, *in_shapes; /* borrowed; nil when absent */
    bool has_stream; /* the entry's ext map gave a stream (PROTOCOL.md "entry ext") */
    uint64_t stream;
    bool has_checksum; /* ... and a checksum of the op's output */
    uint64_t checksum;
    /* The MPI keys of the ext map (PROTOCOL.md "Entry ext": peer, tag, comm, seq, comm_size). */
    bool has_peer, has_tag, has_comm, has_seq, has_comm_size;
    uint64_t peer, comm, seq, comm_size;
    int64_t tag;
    /* Links (PROTOCOL.md "Links between entries"): ids are unique within the process. */
    bool has_id, has_parent;
    uint64_t id, parent;
    const struct cli_export_op *launcher; /* the launching CPU op, or NULL */
    size_t launcher_index;                /* its position in the dictionary, when not NULL */
};

/*
 * Copies the dictionaries out of the header result map. Returns 0, -ENOMEM,
 * or -EPROTO with a reason in err (the header is not as proto/PROTOCOL.md
 * says). On error d holds nothing; cli_export_dict_deinit() is still safe.
 */
int cli_export_dict_init(struct cli_export_dict *d, const msgpack_object *header, char *err,
                         size_t errsize);
void cli_export_dict_deinit(struct cli_export_dict *d);

/*
 * Decodes one row. Returns 0, or -EPROTO with a reason in err (not a row of
 * at least ten fields, an op, device or process id the header did not
 * define, or an 11th element, the ext map, that is neither a map nor nil or
 * whose stream, id or parent is not a uint, or whose launcher is not an op
 * of the dictionary). Of the ext map `stream` and the links are read.
 */
int cli_export_row_decode(const struct cli_export_dict *d, const msgpack_object *o,
                          struct cli_export_row *r, char *err, size_t errsize);

/* A shape (an array of uint, or of arrays of uint) as "[32,64]" / "[[32,64],[64]]"; nil as "". */
void cli_export_shape_text(const msgpack_object *shape, char *buf, size_t size);

#endif
