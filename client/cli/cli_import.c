/*
 * cli_import.c — `tracectl import FILE...`: the command, its options, and
 * the import of each file as one producer process of the session.
 *
 * For each file in turn: cli_import_kineto scans it (pass 1; a malformed
 * file, one that is not a Kineto trace, or one with nothing to import stops
 * here, before anything is sent), cli_import_send opens a producer
 * connection (hello with the file's rank, and the traced process's pid and
 * host when the file has them), sends the metadata, then pass 2 streams
 * every entry to the daemon as it is parsed, in batches of IMPORT_BATCH; at
 * the end the counts of the replay as metadata, flush → ack (which must
 * count every entry) and bye. Files already imported stay imported when a
 * later one fails.
 *
 * One session. The files of one import are one session: every hello says
 * world = --world, else the number of files, and the first file's process
 * stays connected (flushed, without bye) until the last file is done, so
 * that the session cannot end between two files even when the files say
 * world_size 1. Each bye waits for the daemon to close the connection, so
 * when the import returns, its session has ended (unless --world asked for
 * more processes than were imported, or a file failed: the daemon then
 * keeps the session live for its linger time).
 *
 * Incomplete files. Pass 1 reads the whole file, so a file that is not valid
 * JSON to its end sends nothing at all: no process, no entries. Should pass
 * 2 still fail (the file changed or became unreadable between the passes,
 * or out of memory), the process is abandoned: the entries sent stay, meta
 * {"import.incomplete": true, "import.error": "..."} is sent, and no bye,
 * so the session shows the process as ended without bye and marked
 * incomplete. A daemon error ends the connection without bye too.
 *
 * The launching CPU op of each kernel name is also recorded in the
 * process's metadata, once per kernel name: `launch:<kernel>` =
 * `<cpu op>` (the entry's op stays the kernel's name, with the CPU op's
 * Input Dims as in_shapes). Each entry names its own launcher as well, in
 * its ext map (`launcher`, an op id: proto/PROTOCOL.md "Links between
 * entries"), which is what `report --by launcher` and `export --stacks
 * launcher` read: a kernel name may have several launchers.
 */
#include "cli_import.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_import_intern.h"
#include "cli_classify.h"
#include "cli_import_kineto.h"
#include "cli_import_send.h"

#define IMPORT_MAX_LAUNCH_META 4096 /* launch:<kernel> pairs per file */

const char cli_import_usage[] =
    "Usage: tracectl import FILE... [--session NAME] [--rank R] [--world N] [--cpu-ops]\n"
    "                       [--comm RE] [--compute RE] [--memory RE] [--quiet] [--json]\n"
    "\n"
    "Imports PyTorch profiler (Kineto) Chrome-trace JSON files, plain or .gz, one\n"
    "file per rank, into one session, through the daemon like any producer.\n"
    "GPU kernels, memcpy and memset events (and MTIA device events) become\n"
    "entries on device gpu:<N> (mtia:<N>), with the input shapes of the\n"
    "CPU op that launched them and the step of the ProfilerStep#N that contains\n"
    "it; memcpy/memset carry their bytes; communication kernels (NCCL, ...) are\n"
    "category comm. distributedInfo and deviceProperties become metadata.\n"
    "A malformed file is reported with its byte offset, a file that is not a\n"
    "Kineto trace or has nothing to import is refused, and nothing of it is\n"
    "sent. The session ends when the import is done.\n"
    "\n"
    "Options:\n"
    "  -s, --session NAME  the session (default: the first file's name, without\n"
    "                      .json/.gz)\n"
    "  -r, --rank R        the rank of the first file when the file has no\n"
    "                      distributedInfo.rank (the next files get R+1, ...);\n"
    "                      default: the file's position in the list\n"
    "  -w, --world N       the processes the session has (default: the number of\n"
    "                      files; more keeps it live for the daemon's linger time,\n"
    "                      for ranks imported by another command)\n"
    "      --cpu-ops       also import CPU ops and user annotations (device cpu,\n"
    "                      self time only, so nested time is not counted twice)\n"
    "      --comm RE       ops whose name matches RE (POSIX extended, no case) are\n"
    "                      communication; --compute RE, --memory RE likewise\n"
    "                      (--comm is tried first, then --memory, then --compute;\n"
    "                      else the built-in rules)\n"
    "  -q, --quiet         no progress line and no summary\n"
    "  -j, --json          the summary as JSON: per file its rank, entries and\n"
    "                      session; the totals\n"
    "\n"
    "Example:\n"
    "  tracectl import rank0.json.gz rank1.json.gz --session resnet-run\n";

struct import_opts {
    const char *sock;
    const char *session;
    int64_t rank;  /* --rank, or -1 */
    int64_t world; /* --world, or -1: the number of files */
    bool cpu_ops, quiet, json;
    struct cli_classes classes; /* --comm, --compute, --memory */
};

/* What one file gave, for the summary. */
struct import_result {
    const char *path;
    int64_t rank, pid; /* pid: the traced process's, -1 when the file has none */
    char *host;        /* the traced host, or NULL */
    uint64_t entries;
    int64_t session_id, process_id;
    struct kineto_skipped skipped[KINETO_MAX_SKIPPED];
    size_t n_skipped;
    uint64_t skipped_other;
    uint64_t out_of_range; /* events skipped for their times (kineto.out_of_range) */
};

/* The whole command: the files' results, and the first file's connection held open. */
struct import_run {
    const struct import_opts *o;
    struct import_result *res; /* one per file attempted */
    size_t n_res, n_files;
    struct import_send first; /* flushed, without bye, while first_open */
    bool first_open;
    char error[640]; /* the first failure, for --json */
};

/* One file being imported. */
struct import_job {
    const struct import_opts *o;
    const char *path;
    struct kineto k;
    struct import_send own; /* the connection of every file but the first */
    struct import_send *s;  /* &own, or the run's first */
    struct intern launch;   /* kernel names whose launcher is in the metadata */
    uint64_t total_bytes;   /* the file's size, for progress */
    struct timespec t0;
    bool progress_shown;
};

/* ---- progress ------------------------------------------------------------------- */

static double import_elapsed(const struct import_job *j)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - j->t0.tv_sec) + (double)(now.tv_nsec - j->t0.tv_nsec) / 1e9;
}

/* The one-line progress bar on a terminal's stderr (kineto calls it ≤ 10 times a second). */
static void import_progress(void *arg, bool replay, uint64_t bytes, uint64_t events, bool done)
{
    struct import_job *j = arg;
    double s = import_elapsed(j), mib = 1048576.0;
    uint64_t count = replay ? j->s->sent : events;
    const char *what = replay ? "entries" : "events";
    char bar[21];
    int fill = j->total_bytes ? (int)(20 * bytes / j->total_bytes) : 0;

    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[20] = '\0';
    fprintf(stderr, "\r\033[K%s [%s] %.1f/%.1f MiB, %" PRIu64 " %s, %.0f %s/s",
            replay ? "sending" : "reading", bar, (double)bytes / mib, (double)j->total_bytes / mib,
            count, what, s > 0 ? (double)count / s : 0.0, what);
    if (done && replay)
        fputs("\r\033[K", stderr); /* the summary replaces the bar */
    j->progress_shown = true;
}

/* ---- sending --------------------------------------------------------------------- */

/* Records once per kernel name which CPU op launched it: meta launch:<kernel> = <cpu op>. */
static void import_note_launcher(struct import_job *j, const char *kernel, const char *cpu_op)
{
    size_t before = j->launch.n;
    char key[PROTO_MAX_NAME + 1];
    struct proto_kv kv = {.key = key, .type = PROTO_V_STR, .v.s = (char *)cpu_op};

    if (strlen(kernel) + 7 > PROTO_MAX_NAME || j->launch.n >= IMPORT_MAX_LAUNCH_META)
        return; /* a metadata key is at most 1 KiB */
    if (intern_str(&j->launch, kernel) == INTERN_NONE || j->launch.n == before)
        return;
    snprintf(key, sizeof(key), "launch:%s", kernel);
    import_send_meta(j->s, &kv);
}

static int import_emit(void *arg, const struct kineto_entry *e)
{
    struct import_job *j = arg;
    const char *mine = cli_classes_match(&j->o->classes, e->op);
    uint32_t op = import_send_op(j->s, e->op, mine != NULL ? mine : e->category), launcher = 0;

    if (op == 0)
        return j->s->err;
    if (e->launcher != NULL) {
        import_note_launcher(j, e->op, e->launcher);
        /* the entry names its own launcher too (ext.launcher): the pair above is one per name */
        if ((launcher = import_send_op(j->s, e->launcher, kineto_category(e->launcher, false))) ==
            0)
            return j->s->err;
    }
    return import_send_entry(j->s, op, e->step, e->start_ns, e->dur_ns, e->span_ns, e->mem_bytes,
                             e->in_shapes, e->in_len, e->device, e->stream, launcher);
}

/* Sends meta key = n when n > 0. */
static void import_meta_count(struct import_send *s, const char *key, uint64_t n)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_INT, .v.i = (int64_t)n};

    if (n > 0 && n <= INT64_MAX)
        import_send_meta(s, &kv);
}

/*
 * The file's base name (import.file), who imported it (import.importer_pid,
 * import.importer_host), then distributedInfo.* and deviceProperties.*.
 */
static int import_send_metadata(struct import_job *j)
{
    const char *base = strrchr(j->path, '/') ? strrchr(j->path, '/') + 1 : j->path;
    char name[PROTO_MAX_NAME + 1], host[256] = "";
    struct proto_kv file = {.key = "import.file", .type = PROTO_V_STR, .v.s = name};
    struct proto_kv who[2] = {
        {.key = "import.importer_pid", .type = PROTO_V_INT, .v.i = getpid()},
        {.key = "import.importer_host", .type = PROTO_V_STR, .v.s = host},
    };
    size_t n = strlen(base);

    if (n > PROTO_MAX_NAME) { /* a metadata string is at most 1 KiB: cut on a UTF-8 boundary */
        n = PROTO_MAX_NAME;
        while (n > 0 && ((unsigned char)base[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(name, base, n);
    name[n] = '\0';
    import_send_meta(j->s, &file);
    import_send_meta(j->s, &who[0]);
    if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' &&
        proto_utf8_valid(host, strlen(host)))
        import_send_meta(j->s, &who[1]);
    for (size_t i = 0; i < j->k.n_meta && j->s->err == 0; i++)
        import_send_meta(j->s, &j->k.meta[i]);
    return j->s->err;
}

/*
 * After the entries: what the replay could not tell the daemon otherwise
 * (v1 entries need a step and a device) and what was cut or skipped.
 */
static void import_send_counts(struct import_job *j)
{
    const struct kineto *k = &j->k;
    char key[64];

    import_meta_count(j->s, "import.steps_unknown", k->steps_unknown);
    import_meta_count(j->s, "import.device_from_pid", k->device_from_pid);
    import_meta_count(j->s, "import.device_default", k->device_default);
    import_meta_count(j->s, "import.names_cut", k->names_cut);
    for (size_t i = 0; i < k->n_skipped; i++) {
        snprintf(key, sizeof(key), "import.skipped.%s", k->skipped[i].cat);
        if (proto_utf8_valid(key, strlen(key)))
            import_meta_count(j->s, key, k->skipped[i].n);
    }
    import_meta_count(j->s, "import.skipped_other", k->skipped_other);
    import_meta_count(j->s, "import.out_of_range", k->out_of_range);
}

/* ---- one file ------------------------------------------------------------------------ */

/* Reports a failure once on stderr, and keeps the first one for --json. */
__attribute__((format(printf, 2, 3))) static void import_fail(struct import_run *run,
                                                              const char *fmt, ...)
{
    char msg[sizeof(run->error)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cli_error("import: %s", msg);
    if (run->error[0] == '\0')
        snprintf(run->error, sizeof(run->error), "%s", msg);
}

static int import_open(struct import_job *j, int64_t position, int64_t n_files)
{
    const struct import_opts *o = j->o;
    struct proto_hello h = {.proto = PROTO_VERSION,
                            .session = (char *)o->session,
                            .pid = j->k.pid, /* the traced process's; -1: the daemon takes ours */
                            .host = j->k.host};

    /* rank: the file's own, else --rank + position, else the position */
    if (j->k.rank < 0)
        j->k.rank = o->rank >= 0 ? o->rank + position : position;
    h.rank = j->k.rank;
    h.world = o->world > 0 ? o->world : n_files;
    return import_send_open(j->s, o->sock, &h);
}

/* "foo ×3, bar ×1" for the skipped categories of k, into buf. */
static void import_skipped_text(const struct kineto_skipped *sk, size_t n, uint64_t other,
                                char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s \xc3\x97%" PRIu64, i ? ", " : "",
                                sk[i].cat, sk[i].n);
    if (other > 0 && off < len)
        snprintf(buf + off, len - off, ", others \xc3\x97%" PRIu64, other);
}

static uint64_t import_skipped_total(const struct kineto_skipped *sk, size_t n, uint64_t other)
{
    for (size_t i = 0; i < n; i++)
        other += sk[i].n;
    return other;
}

/* Why a scanned file gives no entry, into buf; false when it gives some. */
static bool import_nothing(const struct import_job *j, char *buf, size_t len)
{
    const struct kineto *k = &j->k;
    char skipped[256];
    size_t off;

    if (k->gpu_events > 0 || (j->o->cpu_ops && k->cpu_events > 0))
        return false;
    if (k->cpu_events > 0) {
        snprintf(buf, len,
                 "no kernel, memcpy or memset events, only %" PRIu64
                 " CPU ops and user annotations: --cpu-ops imports them",
                 k->cpu_events);
        return true;
    }
    import_skipped_text(k->skipped, k->n_skipped, k->skipped_other, skipped, sizeof(skipped));
    off = (size_t)snprintf(
        buf, len, "nothing to import: no kernel, memcpy, memset or CPU op events%s%s%s",
        skipped[0] ? " (skipped, of categories the importer does not know: " : "", skipped,
        skipped[0] ? ")" : "");
    if (k->out_of_range > 0 && off < len)
        snprintf(buf + off, len - off,
                 "; %" PRIu64 " events skipped whose ts or dur is out of range (negative, or past "
                 "2^63 ns)",
                 k->out_of_range);
    return true;
}

static void import_result_fill(struct import_result *r, const struct import_job *j)
{
    const struct kineto *k = &j->k;

    *r = (struct import_result){.path = j->path,
                                .rank = k->rank,
                                .pid = k->pid,
                                .host = k->host ? strdup(k->host) : NULL,
                                .entries = j->s->sent,
                                .session_id = j->s->session_id,
                                .process_id = j->s->process_id,
                                .n_skipped = k->n_skipped,
                                .skipped_other = k->skipped_other,
                                .out_of_range = k->out_of_range};
    memcpy(r->skipped, k->skipped, sizeof(r->skipped));
}

static void import_summary(const struct import_result *r, const char *session)
{
    char skipped[256];

    import_skipped_text(r->skipped, r->n_skipped, r->skipped_other, skipped, sizeof(skipped));
    printf("%s: rank %" PRId64 ", %" PRIu64 " entries into session %" PRId64 " (%s)", r->path,
           r->rank, r->entries, r->session_id, session);
    if (skipped[0] != '\0')
        printf("; skipped %" PRIu64 " events of categories the importer does not know: %s",
               import_skipped_total(r->skipped, r->n_skipped, r->skipped_other), skipped);
    if (r->out_of_range > 0)
        printf("; skipped %" PRIu64 " events whose ts or dur is out of range (negative, or past "
               "2^63 ns)",
               r->out_of_range);
    putchar('\n');
}

/*
 * The import of one opened file: metadata, pass 2, the replay's counts,
 * flush, and bye unless hold (the first file's process stays connected
 * until the last file is done). An exit code.
 */
static int import_stream(struct import_run *run, struct import_job *j, bool hold)
{
    int rc;

    import_send_metadata(j);
    rc = j->s->err ? j->s->err : kineto_replay(&j->k, j->o->cpu_ops, import_emit, j);
    if (rc == 0) {
        import_send_counts(j);
        if (import_send_flush(j->s) == 0 && (hold || import_send_bye(j->s) == 0))
            return CLI_EXIT_OK;
    }
    if (j->s->err != 0) {
        import_fail(run, "%s: %s (the process ends without bye)", j->path, j->s->errmsg);
        return CLI_EXIT_ERROR;
    }
    if (j->k.errmsg[0] == '\0')
        snprintf(j->k.errmsg, sizeof(j->k.errmsg), "%s", strerror(rc < -1 ? -rc : EIO));
    import_send_abandon(j->s, j->k.errmsg);
    import_fail(run, "%s: %s (the process is marked incomplete, without bye)", j->path,
                j->k.errmsg);
    return CLI_EXIT_ERROR;
}

static int import_file(struct import_run *run, const char *path, size_t position)
{
    const struct import_opts *o = run->o;
    struct import_job j = {.o = o, .path = path};
    bool first = position == 0;
    char why[512];
    struct stat st;
    int rc;

    j.own.fd = -1;
    j.s = first ? &run->first : &j.own;
    j.k.path = path;
    if (!o->quiet && isatty(2)) {
        j.k.progress = import_progress;
        j.k.progress_arg = &j;
    }
    if (stat(path, &st) == 0)
        j.total_bytes = (uint64_t)st.st_size;
    clock_gettime(CLOCK_MONOTONIC, &j.t0);
    /* pass 1: the whole file must parse, and be a Kineto trace with something to import,
     * before anything is sent */
    rc = kineto_scan(&j.k);
    if (j.progress_shown)
        fputs("\r\033[K", stderr);
    if (rc < 0 || import_nothing(&j, why, sizeof(why))) {
        import_fail(run, "%s: %s; nothing of it was sent", path, rc < 0 ? j.k.errmsg : why);
        kineto_deinit(&j.k);
        return CLI_EXIT_ERROR;
    }
    if ((rc = import_open(&j, (int64_t)position, (int64_t)run->n_files)) < 0) {
        import_fail(run, "%s: %s", path, j.s->errmsg);
        rc = rc == -ENOENT || rc == -ECONNREFUSED ? CLI_EXIT_NO_DAEMON : CLI_EXIT_ERROR;
    } else {
        clock_gettime(CLOCK_MONOTONIC, &j.t0);
        rc = import_stream(run, &j, first);
    }
    if (rc == CLI_EXIT_OK) {
        import_result_fill(&run->res[run->n_res], &j);
        if (!o->quiet && !o->json)
            import_summary(&run->res[run->n_res], o->session);
        run->n_res++;
    }
    if (first && rc == CLI_EXIT_OK)
        run->first_open = true; /* closed by the run, after the last file */
    else
        import_send_close(j.s);
    intern_deinit(&j.launch);
    kineto_deinit(&j.k);
    return rc;
}

/* ---- the command ------------------------------------------------------------------- */

/* The default session name: the first file's base name without .json... / .gz. */
static void import_default_session(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/');
    char *dot;
    size_t n;

    snprintf(buf, len, "%s", base ? base + 1 : path);
    if ((dot = strstr(buf, ".json")) != NULL || (dot = strstr(buf, ".gz")) != NULL)
        *dot = '\0';
    n = strlen(buf);
    if (n > PROTO_MAX_SESSION) { /* cut on a UTF-8 boundary */
        n = PROTO_MAX_SESSION;
        while (n > 0 && ((unsigned char)buf[n] & 0xc0) == 0x80)
            n--;
        buf[n] = '\0';
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "import");
}

/* A non-negative (or, with positive, a positive) integer option. */
static int import_opt_int(const char *name, const char *arg, bool positive, int64_t *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < (positive ? 1 : 0)) {
        cli_error("import: --%s wants a %s integer, not '%s'", name,
                  positive ? "positive" : "non-negative", arg);
        return CLI_EXIT_USAGE;
    }
    *out = v;
    return CLI_CONTINUE;
}

static void import_pack_str(msgpack_packer *pk, const char *s)
{
    if (s != NULL)
        proto_pack_str(pk, s);
    else
        msgpack_pack_nil(pk);
}

static void import_pack_result(msgpack_packer *pk, const struct import_result *r,
                               const char *session)
{
    msgpack_pack_map(pk, 10);
    proto_pack_str(pk, "file");
    proto_pack_str(pk, r->path);
    proto_pack_str(pk, "rank");
    msgpack_pack_int64(pk, r->rank);
    proto_pack_str(pk, "pid");
    if (r->pid >= 0)
        msgpack_pack_int64(pk, r->pid);
    else
        msgpack_pack_nil(pk);
    proto_pack_str(pk, "host");
    import_pack_str(pk, r->host);
    proto_pack_str(pk, "entries");
    msgpack_pack_uint64(pk, r->entries);
    proto_pack_str(pk, "session_id");
    msgpack_pack_int64(pk, r->session_id);
    proto_pack_str(pk, "session");
    proto_pack_str(pk, session);
    proto_pack_str(pk, "process_id");
    msgpack_pack_int64(pk, r->process_id);
    proto_pack_str(pk, "skipped");
    msgpack_pack_map(pk, r->n_skipped + (r->skipped_other > 0));
    for (size_t i = 0; i < r->n_skipped; i++) {
        proto_pack_str(pk, r->skipped[i].cat);
        msgpack_pack_uint64(pk, r->skipped[i].n);
    }
    if (r->skipped_other > 0) {
        proto_pack_str(pk, "others");
        msgpack_pack_uint64(pk, r->skipped_other);
    }
    proto_pack_str(pk, "out_of_range");
    msgpack_pack_uint64(pk, r->out_of_range);
}

/*
 * --json: {"session_id", "session", "world", "files": [...], "entries",
 * "error"} as one document (session_id null when nothing was imported;
 * error null on success).
 */
static int import_print_json(const struct import_run *run)
{
    const struct import_opts *o = run->o;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t total = 0;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    proto_pack_str(&pk, "session_id");
    if (run->n_res > 0)
        msgpack_pack_int64(&pk, run->res[0].session_id);
    else
        msgpack_pack_nil(&pk);
    proto_pack_str(&pk, "session");
    proto_pack_str(&pk, o->session);
    proto_pack_str(&pk, "world");
    msgpack_pack_int64(&pk, o->world > 0 ? o->world : (int64_t)run->n_files);
    proto_pack_str(&pk, "files");
    msgpack_pack_array(&pk, run->n_res);
    for (size_t i = 0; i < run->n_res; i++) {
        import_pack_result(&pk, &run->res[i], o->session);
        total += run->res[i].entries;
    }
    proto_pack_str(&pk, "entries");
    msgpack_pack_uint64(&pk, total);
    proto_pack_str(&pk, "error");
    import_pack_str(&pk, run->error[0] ? run->error : NULL);
    rc = cli_print_json_packed(&sb, "import");
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* Parses the options into o. Returns CLI_CONTINUE or an exit code. */
static int import_opts_parse(struct cli_ctx *ctx, struct import_opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_LONGOPTS,
        {"session", required_argument, NULL, 's'},
        {"rank", required_argument, NULL, 'r'},
        {"world", required_argument, NULL, 'w'},
        {"cpu-ops", no_argument, NULL, 'c'},
        {"comm", required_argument, NULL, 'C'},
        {"compute", required_argument, NULL, 'P'},
        {"memory", required_argument, NULL, 'M'},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "s:r:w:q", longopts, NULL)) != -1) {
        if (c == 's')
            o->session = optarg;
        else if (c == 'r' && (rc = import_opt_int("rank", optarg, false, &o->rank)) != CLI_CONTINUE)
            return rc;
        else if (c == 'w' &&
                 (rc = import_opt_int("world", optarg, true, &o->world)) != CLI_CONTINUE)
            return rc;
        else if (c == 'c')
            o->cpu_ops = true;
        else if (c == 'C' || c == 'P' || c == 'M') {
            if (cli_classes_add(&o->classes,
                                c == 'C'   ? "comm"
                                : c == 'P' ? "compute"
                                           : "memory",
                                optarg) < 0)
                return CLI_EXIT_USAGE;
        } else if (c == 'q')
            o->quiet = true;
        else if (c != 'r' && c != 'w' && (rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
            return rc;
    }
    o->json = ctx->json;
    if (optind >= argc) {
        cli_error("import: which files? (see 'tracectl import --help')");
        return CLI_EXIT_USAGE;
    }
    if (o->session != NULL && (o->session[0] == '\0' || strlen(o->session) > PROTO_MAX_SESSION)) {
        cli_error("import: a session name is 1 to %d bytes", PROTO_MAX_SESSION);
        return CLI_EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

int cli_import_run(struct cli_ctx *ctx, int argc, char **argv)
{
    struct import_opts o = {.rank = -1, .world = -1};
    struct import_run run = {.o = &o};
    char session[PROTO_MAX_SESSION + 8], sockbuf[PATH_MAX];
    int rc;

    if ((rc = import_opts_parse(ctx, &o, argc, argv)) != CLI_CONTINUE) {
        cli_classes_free(&o.classes);
        return rc;
    }
    if (o.session == NULL) {
        import_default_session(argv[optind], session, sizeof(session));
        o.session = session;
    }
    o.sock = cli_conn_path(ctx->socket, sockbuf, sizeof(sockbuf));
    run.n_files = (size_t)(argc - optind);
    run.first.fd = -1;
    if ((run.res = calloc(run.n_files, sizeof(*run.res))) == NULL) {
        cli_error("import: out of memory");
        return CLI_EXIT_ERROR;
    }
    rc = CLI_EXIT_OK;
    for (size_t i = 0; i < run.n_files && rc == CLI_EXIT_OK; i++)
        rc = import_file(&run, argv[optind + (int)i], i);
    if (run.first_open) {
        /* the first file's process leaves last: the session ends with it */
        if (import_send_bye(&run.first) < 0) {
            import_fail(&run, "%s: %s", run.res[0].path, run.first.errmsg);
            rc = CLI_EXIT_ERROR;
        }
        import_send_close(&run.first);
    }
    if (o.json && import_print_json(&run) != CLI_EXIT_OK && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_ERROR;
    for (size_t i = 0; i < run.n_res; i++)
        free(run.res[i].host);
    free(run.res);
    cli_classes_free(&o.classes);
    return rc;
}
