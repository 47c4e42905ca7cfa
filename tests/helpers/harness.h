/*
 * harness — what integration tests share: a real tracectld on a temporary
 * socket and data dir, a raw-protocol client (msgpack over the socket, no
 * libtracectl), a runner that captures a command's output, and reading
 * SQLite files (session files, for unit tests too).
 *
 * Every function asserts with Criterion on failure, so tests stay short.
 * harness_daemon_stop() plus harness_cleanup() leave no process and no file.
 */
#ifndef TRACECTL_TEST_HARNESS_H
#define TRACECTL_TEST_HARNESS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>
#include <sqlite3.h>

#include "proto.h"

/*
 * How long the harness waits for what must come (the daemon answering at
 * start, stopping at a signal, a reply, a close): a deadline, not a sleep,
 * so a passing test never waits it out. Generous because `ctest -j8` on two
 * cores under ASan slows the daemon tenfold: a 400,000-entry flush then took
 * over the 5 s this once was.
 */
#define HARNESS_DEADLINE_S 60

struct tdaemon {
    pid_t pid;
    char dir[256];       /* the temporary directory holding both */
    char sock[PATH_MAX]; /* dir/tracectl.sock */
    char data[PATH_MAX]; /* dir/data */
    unsigned nofile;     /* RLIMIT_NOFILE (soft and hard) the daemon runs with; 0: inherited */
};

/*
 * Makes a temp dir and starts tracectld there; extra args end with NULL.
 * TRACECTL_TEST_STORAGE=rows (or blocks) in the environment adds
 * --storage-format rows before them (the row format's lane of scripts/test.sh).
 */
void harness_daemon_start(struct tdaemon *d, ...);
/* Starts it again on the same dir (after a stop or a crash). */
void harness_daemon_restart(struct tdaemon *d, ...);
/* Sends sig and waits; returns the exit status (or 128+signal). */
int harness_daemon_stop(struct tdaemon *d, int sig);
/* Removes the temp dir. */
void harness_cleanup(struct tdaemon *d);
/*
 * A suite's fini: harness_reap() (children first: they may hold
 * connections), then harness_daemon_stop(d, sig) if the daemon runs, then
 * harness_cleanup(d). Safe after a failed assertion.
 */
void harness_teardown(struct tdaemon *d, int sig);

/*
 * Children of a test that cannot outlive it. A daemon started here and every
 * child of harness_fork_as() get SIGKILL when the test process dies (a
 * Criterion timeout kills it without running fini), so none is left holding
 * the test's stdout, which ctest reads to EOF.
 *
 * harness_fork_as() forks; the child takes uid (and gid = uid; 0 stays root),
 * is killed with the test process and at the latest after `seconds` (alarm).
 * Returns 0 in the child, its pid in the parent. The child ends with _exit
 * and makes no Criterion assertion (its failure would run the test runner's
 * paths in the wrong process; should one fail anyway, the child ends in
 * harness_daemon_stop() or harness_cleanup(), which the suite's fini calls,
 * without touching the daemon): it reports through a pipe. harness_wait_child()
 * waits for one and returns its exit status (128 + signal when killed);
 * harness_reap() kills and waits for the rest: call it from the suite's fini.
 */
pid_t harness_fork_as(uid_t uid, unsigned seconds);
int harness_wait_child(pid_t pid);
void harness_reap(void);
/* pipe() with both ends close-on-exec, so no daemon started later holds one; asserts. */
void harness_pipe(int fds[2]);
/* Reads exactly len bytes within `seconds`: 0, or -1 on EOF, error or timeout. */
int harness_read_within(int fd, void *buf, size_t len, int seconds);

/*
 * Runs argv (NULL-terminated) with stdout captured into a malloc'd,
 * NUL-terminated *out (may be NULL to discard) and returns the exit status.
 */
int harness_run(char **out, char *const argv[]);
/*
 * Runs "cd DIR && CMD", CMD formatted from fmt, through /bin/sh; asserts it
 * exits 0 and returns its stdout (caller frees).
 */
char *harness_sh(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An MPI test's environment: Open MPI allowed as root (CI), no TRACECTL_* of the caller's. */
void harness_mpi_env(void);

/* Raw protocol: a blocking client connection. */
int raw_connect(const char *sock);
/* Sends a packed message and resets the buffer. */
void raw_send(int fd, msgpack_sbuffer *sb);
/* Reads one whole message: a decoded reply (0), or -1 on EOF or after HARNESS_DEADLINE_S. */
int raw_recv(int fd, struct proto_reader *r, struct proto_msg *m);
/* Reads one whole message as a generic object (valid until the next read); -1 on EOF. */
int raw_recv_object(int fd, struct proto_reader *r, const msgpack_object **o);
/* True when the peer closed (read returns 0) within HARNESS_DEADLINE_S. */
bool raw_closed(int fd);

/* hello → welcome; returns the connection. *session_id may be NULL. */
int raw_producer(const char *sock, const char *session, int rank, int world, const char *device,
                 long long *session_id);

/* ["ops", [[id, name]]] */
void raw_send_ops(int fd, uint32_t id, const char *name);
/* n entries of op: entry i = [i, op, base + i*1000, dur0 + i]. */
void raw_send_batch(int fd, uint32_t op, size_t n, uint64_t base, uint64_t dur0);
/* flush → ack; returns ack.stored, or -1 when the daemon answered an error or closed. */
long long raw_flush(int fd, uint64_t seq);
/* bye, then checks the daemon closed the connection, and closes fd. */
void raw_bye(int fd, uint64_t dropped);
/*
 * A control request on a new connection (req NULL: defaults). Returns the
 * reply ["ok"|"error", ...] borrowed from r (deinit it after); *fd_out is
 * the connection to close.
 */
const msgpack_object *raw_control(const char *sock, enum proto_type type,
                                  const struct proto_request *req, struct proto_reader *r,
                                  int *fd_out);
/* A session of one producer on sock (world 1, one flushed entry, bye), ended; its id. */
long long raw_one_session(const char *sock, const char *name);
/* The id of the session named name in the daemon at sock's `sessions`; asserts there is one. */
long long raw_session_id(const char *sock, const char *name);
/* The state of session id in `sessions` ("live"/"ended"), waiting up to `seconds` for want. */
void raw_wait_state(const char *sock, long long id, const char *want, int seconds);

/* An empty buffer and a packer writing into it. */
void raw_pack_init(msgpack_sbuffer *sb, msgpack_packer *pk);
/* The reply on fd is an error of `code` with a message that is not empty. */
void raw_expect_error(int fd, const char *code);
/* Session id's row in the `sessions` of the daemon at sock, or NULL (borrowed from r; close fd). */
const msgpack_object *raw_session_row(const char *sock, long long id, struct proto_reader *r,
                                      int *fd);
/*
 * A --system daemon (skips the test unless root), with one more option and
 * its value (opt NULL: none); its directory is opened to other uids.
 */
void harness_system_daemon(struct tdaemon *d, const char *opt, const char *val);
/*
 * As uid (root when 0), a session `name` of n entries on sock whose hello
 * claims pid `claimed`, ended; got[0] = the producer's real pid, got[1] =
 * the session id.
 */
void raw_user_session(const char *sock, uid_t uid, const char *name, int n, int claimed,
                      int got[2]);

/* Generic object helpers for replies: map lookup (NULL when absent) and numbers. */
const msgpack_object *obj_get(const msgpack_object *map, const char *key);
unsigned long long obj_u64(const msgpack_object *o);
double obj_f64(const msgpack_object *o);
/* strcmp-like compare of a msgpack str with s; false when not a str. */
bool obj_str_eq(const msgpack_object *o, const char *s);

/* A number of session id's row in the `sessions` of the daemon at sock (-1: no such row). */
long long harness_sessions_field(const char *sock, long long id, const char *key);
/* A number of the `status` map of the daemon at sock (0 when absent). */
unsigned long long harness_status_u64(const char *sock, const char *key);

/*
 * The first column of the first row of sql over the database at path, read
 * on a read-only connection of its own (busy timeout 5 s): -1 when there is
 * no file, the query fails or gives no row.
 */
long long harness_db_int(const char *path, const char *sql);
/* Runs sql (one or more statements) on db; asserts that it succeeded, with SQLite's message. */
void harness_db_exec(sqlite3 *db, const char *sql);
/* The first column of the first row of sql on db, -1 when it gives no row; asserts it prepares. */
int64_t harness_db_one(sqlite3 *db, const char *sql);
/*
 * The whole file at path, NUL-terminated (caller must free), its length in
 * *len (len may be NULL); asserts that it can be read.
 */
char *harness_slurp(const char *path, size_t *len);
/* True when PRAGMA integrity_check says ok on the database at path. */
bool harness_integrity_ok(const char *path);

/*
 * The daemon's memory and CPU from /proc, for the memory-bound tests. Under
 * AddressSanitizer every allocation carries redzones and shadow, and freed
 * memory sits in a quarantine (256 MiB by default): call
 * harness_asan_small_quarantine() before starting the daemon and scale RSS
 * bounds by HARNESS_RSS_SCALE.
 */
#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_RSS_SCALE 4
#else
#define HARNESS_RSS_SCALE 1
#endif
void harness_asan_small_quarantine(void);
/* A field of /proc/<pid>/status in KiB (VmRSS, VmHWM), or -1. */
long harness_proc_kib(pid_t pid, const char *field);
/* utime + stime of a process in clock ticks, or -1. */
long long harness_cpu_ticks(pid_t pid);
/*
 * Waits until process pid has used no CPU for a whole second (it has done
 * all it can); asserts that it gets there within max_s seconds.
 */
void harness_wait_idle(pid_t pid, int max_s);
/* CLOCK_MONOTONIC in seconds, for deadlines and elapsed times. */
double harness_now_s(void);
/*
 * Sends pid SIGSTOP (stop) or SIGCONT (!stop) and waits, up to 10 s, until
 * /proc shows it stopped or running again (a signal is delivered a little
 * after kill() returns). Asserts it did.
 */
void harness_sigstop(pid_t pid, bool stop);
/* CLOCK_MONOTONIC in seconds, for timing what a test runs. */
double harness_now(void);

#endif
