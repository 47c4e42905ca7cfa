/*
 * bench_util — what the benchmarks share: a real tracectld on a temporary
 * socket and data dir, control requests over the raw protocol (msgpack over
 * the socket, no CLI), the synthetic entries every benchmark records, timing,
 * statistics and the JSON-lines output.
 *
 * Single-threaded callers only (the daemon helpers keep no global state, the
 * JSON helpers write to stdout). Nothing here asserts or exits: functions
 * return 0 or a negative errno, and the benchmark decides.
 */
#ifndef TRACECTL_BENCH_UTIL_H
#define TRACECTL_BENCH_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>

#include "proto.h"
#include "tracectl.h"

/* ---- a real daemon ------------------------------------------------------- */

struct bdaemon {
    pid_t pid;
    char dir[256];       /* the temporary directory holding both */
    char sock[PATH_MAX]; /* dir/tracectl.sock */
    char data[PATH_MAX]; /* dir/data */
};

/*
 * Makes a temporary dir under base (NULL: $TMPDIR, else /tmp) and starts
 * TRACECTLD_BIN there with --log-level warn; returns once it answers on its
 * socket (up to 10 s). 0, or a negative errno (the dir is removed again).
 */
int bdaemon_start(struct bdaemon *d, const char *base);
/* The same with extra tracectld arguments (NULL-terminated; NULL: none). */
int bdaemon_start_args(struct bdaemon *d, const char *base, char *const *args);
/* Sends sig and waits up to 30 s (then SIGKILL). Returns the exit status, 128+signal, or -1. */
int bdaemon_stop(struct bdaemon *d, int sig);
/* Stops the daemon if still running (SIGKILL) and removes its dir. */
void bdaemon_cleanup(struct bdaemon *d);
/* Bytes of sessions/<id>.db plus its -wal (st_size) in the data dir. */
uint64_t bdaemon_session_bytes(const struct bdaemon *d, int64_t id);

/* Removes a directory tree (rm -rf). 0 or a negative errno. */
int bench_rmtree(const char *dir);

/* ---- control requests over the raw protocol ------------------------------- */

struct bctl {
    int fd;
    struct proto_reader r;
};

/* Connects a control connection to sock. 0 or a negative errno. */
int bctl_open(struct bctl *ctl, const char *sock);
void bctl_close(struct bctl *ctl);
/*
 * Sends one request (req NULL: the defaults) and waits up to 30 s for the
 * reply. Returns the result of ["ok", result], borrowed from ctl and valid
 * until the next request; NULL on an error reply, a timeout or a closed
 * connection.
 */
const msgpack_object *bctl_request(struct bctl *ctl, enum proto_type type,
                                   const struct proto_request *req);

/* Map lookup (NULL when absent or not a map), numbers (0 when absent), string compare. */
const msgpack_object *bobj_get(const msgpack_object *map, const char *key);
uint64_t bobj_u64(const msgpack_object *o);
bool bobj_str_eq(const msgpack_object *o, const char *s);
/* The row of `sessions` (a list) whose name is name, newest first: NULL when absent. */
const msgpack_object *bobj_session_row(const msgpack_object *list, const char *name);

/* ---- synthetic entries ------------------------------------------------------ */

/* The op vocabulary, as a PyTorch-like job names them (collectives are classified `comm`). */
#define BENCH_OPS 50
extern const char *const bench_op_names[BENCH_OPS];

/*
 * A model's program: the call sites one training step runs, in order, the
 * same every step and in every rank (as in a real job: the same layers with
 * the same shapes). Each site has an op, an output shape of 1-4 dims, 0-3
 * input shapes, output bytes (elements × 2 or 4) and a typical duration.
 */
#define BENCH_SITES 256

struct bsite {
    uint32_t op; /* index into bench_op_names: skewed towards a few hot ops */
    uint64_t base_ns, mem_bytes, elements;
    tc_shape out;
    tc_shape in[3];
    size_t n_in;
};

struct bprogram {
    struct bsite site[BENCH_SITES];
};

/* The program every benchmark records (deterministic). */
void bench_program_init(struct bprogram *p);

/* A deterministic generator: the same seed gives the same durations. */
struct bgen {
    uint64_t s;
};
void bgen_init(struct bgen *g, uint64_t seed);
uint64_t bgen_next(struct bgen *g);

/* Entry n of a producer: the site it runs (n mod BENCH_SITES) and a duration around its base. */
const struct bsite *bgen_entry(struct bgen *g, const struct bprogram *p, uint64_t n,
                               uint64_t *dur_ns);

/* ---- time, memory, statistics, output ------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);
/*
 * CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID) and of the whole
 * process, in ns: what a burst cost the thread that ran it, without the time
 * it sat descheduled while other threads (the daemon's, the library's writer)
 * had the cores.
 */
uint64_t bench_thread_ns(void);
uint64_t bench_process_ns(void);
/* A field of /proc/<pid>/status in KiB (e.g. "VmHWM", "VmRSS"); -1 when unreadable. */
long bench_proc_kib(pid_t pid, const char *field);
/* utime + stime of a process from /proc/<pid>/stat, in seconds; -1 when unreadable. */
double bench_proc_cpu_s(pid_t pid);

struct bstat {
    double median, min, max;
};
/* Median (mean of the middle two for even n), min and max of v[0..n); sorts v. */
struct bstat bench_stat(double *v, size_t n);

/* One JSON object per line on stdout: bjson_begin(), fields, bjson_end(). */
void bjson_begin(const char *bench, const char *kind);
void bjson_num(const char *key, double v);
void bjson_u64(const char *key, uint64_t v);
void bjson_str(const char *key, const char *v); /* v NULL: null */
void bjson_bool(const char *key, bool v);
/* "key": {"median": .., "min": .., "max": .., "n": ..} */
void bjson_stat(const char *key, struct bstat st, size_t n);
void bjson_end(void);

/* The machine in one line for the human summary: nproc, CPU model, RAM. */
void bench_machine(char *buf, size_t len);

#endif
