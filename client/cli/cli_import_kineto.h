/*
 * cli_import_kineto — reading one PyTorch-profiler (Kineto) Chrome-trace
 * JSON file, plain or gzip, for `tracectl import`, in bounded memory.
 *
 * The file is streamed twice through zlib's gzread (which reads plain files
 * too) and yajl's callback parser; it is never loaded whole:
 *  1. kineto_scan() checks that the whole file is valid JSON (a malformed
 *     file is reported with its byte offset before anything is sent) and a
 *     Kineto trace (see there), and keeps what the second pass needs to resolve references that may
 * point forwards or backwards in the file (traceEvents come in any order): the CPU ops and user
 * annotations (External id, thread, times, name, Input Dims), the CUDA runtime/driver launch events
 * (correlation, External id, thread, time), the ProfilerStep#N intervals, and the distributedInfo /
 * deviceProperties metadata.
 *  2. kineto_replay() reads the file again and hands each GPU kernel,
 *     memcpy and memset to the caller as an entry as soon as it is parsed,
 *     then, with cpu_ops, every CPU op and user annotation with its self
 *     time.
 *
 * MEMORY. What grows is one 64-byte record per CPU op / user annotation
 * (48, and 16 for the External id index) and one 40-byte record per launch
 * event (both needed because a kernel names its launcher only by id, and
 * that id may appear anywhere in the file), one record per ProfilerStep, and the distinct op names
 * and Input Dims lists (interned: a model repeats the same layers every step). It does not grow
 * with the kernels or with the file's bytes. Metadata is capped at KINETO_MAX_META pairs, each
 * value at most 1 KiB.
 *
 * Mapping (see also README "Importing"):
 *  - GPU events (cat kernel, gpu_memcpy, gpu_memset; the older Kernel,
 *    Memcpy, Memset too, case-insensitively) become entries on device
 *    gpu:<args.device>, MTIA's mtia_ccp_events on mtia:<args.device>; op =
 *    the event's name, cut visibly past PROTO_MAX_NAME bytes (see
 *    name_cut() in the .c); memcpy/memset carry args.bytes as mem_bytes.
 *    Without args.device: <prefix>:<pid> when the pid is below
 *    KINETO_DEVICE_PID (Kineto puts a device's events under pid = its
 *    index), else <prefix>:0; both counted (device_from_pid,
 *    device_default). Other categories of the profiler are not imported;
 *    unknown ones are counted in skipped.
 *  - Its launching CPU op: the cpu_op whose External id is the kernel's
 *    args["External id"]; else, through args.correlation, the launch event
 *    (cuda_runtime / cuda_driver) with that correlation, and then the cpu_op
 *    of the launch's External id or, failing that, the innermost cpu_op on
 *    the launch's thread that contains the launch's start. Its Input Dims
 *    become the entry's in_shapes, its name is given as the launcher.
 *  - step: the N of the ProfilerStep#N (cat cpu_op or user_annotation)
 *    that contains the launching CPU op's start (else the launch event's,
 *    else the GPU event's own): a kernel belongs to the step that issued it
 *    even when the GPU runs it after the CPU has moved on. 0 when none
 *    (v1 entries need a step), counted in steps_unknown.
 *  - ts/dur (µs, possibly with decimals) → ns integers, converted from the
 *    number's text (rounded to the nearest ns), never through a double.
 *  - cpu_ops: CPU ops and user annotations other than ProfilerStep#N are
 *    entries on device `cpu` whose duration is their self time: the
 *    duration minus the parts of it covered by the ops directly nested in
 *    it on the same thread. The self times of nested ops then add up to
 *    the outermost op's duration, so nothing is counted twice.
 * Single-threaded.
 */
#ifndef TRACECTL_CLI_IMPORT_KINETO_H
#define TRACECTL_CLI_IMPORT_KINETO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli_import_intern.h"
#include "proto.h"

#define KINETO_MAX_META    4096 /* metadata pairs kept from one file */
#define KINETO_CAT_MAX     32   /* an event category kept (longer ones are cut) */
#define KINETO_MAX_SKIPPED 8    /* unknown categories counted by name; the rest together */
#define KINETO_MAX_DEPTH   64   /* nesting the parser follows; deeper is refused, naming it */
/*
 * The longest JSON token (a string, a key, a number) read: 64 MiB. yajl is
 * only ever given text that ends at a token boundary (cli_import_cut.h), so
 * an unfinished token is held here until it ends; a longer one stops the
 * file with a clear error rather than holding a gigabyte for a string that
 * no field of a trace needs (names are cut to PROTO_MAX_NAME anyway).
 */
#define KINETO_MAX_TOKEN (64u << 20)

/*
 * The parser's work in the last pass, for the tests: each byte of the
 * (decompressed) text is scanned for token boundaries once and given to
 * yajl once (scanned = fed = the text's length), and the bytes moved to
 * keep an unfinished token whole stay below the text's length: the work is
 * linear in the text, whatever the length of its tokens.
 */
struct kineto_work {
    uint64_t scanned, fed, moved;
};

/* One entry for the daemon; everything borrowed until the callback returns. */
struct kineto_entry {
    const char *op;        /* the event's name */
    const char *category;  /* "comm", "memory", "compute" */
    const char *launcher;  /* the launching CPU op's name, or NULL */
    const char *device;    /* "gpu:N", "mtia:N" or "cpu" */
    const char *in_shapes; /* packed msgpack array of arrays of uint, or NULL */
    size_t in_len;
    uint64_t step, start_ns, dur_ns;
    uint64_t span_ns;   /* --cpu-ops: the op's whole duration, dur_ns its self time; else 0 */
    uint64_t mem_bytes; /* memcpy/memset: args.bytes; else 0 */
    int64_t stream;     /* the track within the device: a GPU event's args.stream, a CPU op's tid;
                           -1: none (sent as the ext map's stream, PROTOCOL.md "entry ext") */
};

/* Complete events of a category the importer does not know, skipped. */
struct kineto_skipped {
    char cat[KINETO_CAT_MAX];
    uint64_t n;
};

/* Returns 0 to go on, or a negative errno to stop the pass with that error. */
typedef int (*kineto_emit_fn)(void *arg, const struct kineto_entry *e);

/* Called at most ~10 times a second while reading, and once with done. */
typedef void (*kineto_progress_fn)(void *arg, bool replay, uint64_t bytes, uint64_t events,
                                   bool done);

struct kineto_op;
struct kineto_launch;
struct kineto_step;
struct kineto_ext;
struct kineto_parse;

struct kineto {
    /* options, set by the caller before kineto_scan */
    const char *path;
    kineto_progress_fn progress;
    void *progress_arg;
    /* results of the scan */
    int64_t rank, world;   /* distributedInfo; -1 when absent */
    int64_t pid;           /* of the traced process (its first host event's); -1 when none */
    char *host;            /* the top-level host_name / hostname, or NULL */
    struct proto_kv *meta; /* flattened distributedInfo.* and deviceProperties.N.* */
    size_t n_meta, cap_meta;
    uint64_t events, gpu_events; /* complete (X) events, and the device events among them */
    uint64_t cpu_events;         /* CPU ops and user annotations, without ProfilerStep#N */
    uint64_t names_cut;          /* events whose name was cut to PROTO_MAX_NAME */
    uint64_t out_of_range;       /* complete events skipped: ts or dur negative, not a number
                                    of ns in int64, or ts + dur beyond it */
    struct kineto_skipped skipped[KINETO_MAX_SKIPPED]; /* unknown categories */
    size_t n_skipped;
    uint64_t skipped_other; /* skipped events of categories beyond those */
    /* results of the replay */
    uint64_t steps_unknown;   /* entries in no ProfilerStep#N: sent with step 0 */
    uint64_t device_from_pid; /* device events without args.device: on <prefix>:<pid> */
    uint64_t device_default;  /* ... nor a small pid: on <prefix>:0 */
    /* the tables of the scan (see MEMORY above) */
    struct kineto_op *ops; /* sorted by (thread, start) after the scan */
    size_t n_ops, cap_ops;
    struct kineto_ext *by_ext; /* (External id, op) sorted by External id */
    size_t n_by_ext;
    struct kineto_launch *launches; /* sorted by correlation after the scan */
    size_t n_launches, cap_launches;
    struct kineto_step *steps; /* sorted by start after the scan */
    size_t n_steps, cap_steps;
    struct intern names; /* op names */
    struct intern dims;  /* packed Input Dims lists */
    /* the parser */
    struct kineto_parse *p;
    struct kineto_work work;
    char errmsg[512];
};

/*
 * Pass 1: reads the whole file (k->path). Returns 0, or -1 with the reason
 * in k->errmsg: "not valid JSON at byte N: ..." where N counts the bytes of
 * the (decompressed) JSON text up to and including the one where yajl found
 * the error (the text's length when it ends too early); "not a Kineto
 * trace: <why>" for valid JSON that is not a PyTorch profiler trace (no
 * traceEvents, elements that are not events, no event of a profiler
 * category, containers nested deeper than the importer follows); "a JSON
 * string, key or number starting at byte N is longer than 64 MiB"
 * (KINETO_MAX_TOKEN); "cannot open: ..."; "out of memory".
 * Call kineto_deinit() in every case.
 */
int kineto_scan(struct kineto *k);

/*
 * Pass 2: reads the file again and calls emit for each GPU event, then
 * (with cpu_ops) for each CPU op. Returns 0, the first negative value emit
 * returned, or -1 with the reason in k->errmsg (the file changed or could
 * not be read since the scan).
 */
int kineto_replay(struct kineto *k, bool cpu_ops, kineto_emit_fn emit, void *arg);

/*
 * The category tracectl gives an imported op: "comm" when its name has one
 * of the strict communication words (proto_class.h: NCCL/RCCL/MSCCL/gloo
 * kernels and ops, all-reduce, all-gather, reduce-scatter, all-to-all,
 * send-recv; not "broadcast" alone) or starts with MPI_, "memory" for
 * memcpy/memset events, else "compute". Never NULL.
 */
const char *kineto_category(const char *name, bool memory);

void kineto_deinit(struct kineto *k);

#endif
