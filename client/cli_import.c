/*
 * cli_import.c — `tracectl import FILE...`: the command, its options, and
 * the import of each file as one producer process of the session.
 *
 * For each file in turn: cli_import_kineto scans it (pass 1; a malformed
 * file stops here, before anything is sent), cli_import_send opens a
 * producer connection (hello with the file's rank), sends the metadata,
 * then pass 2 streams every entry to the daemon as it is parsed, in batches
 * of IMPORT_BATCH; at the end flush → ack (which must count every entry)
 * and bye. Files already imported stay imported when a later one fails.
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
 * Input Dims as in_shapes).
 */
#include "cli_import.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_import_intern.h"
#include "cli_import_kineto.h"
#include "cli_import_send.h"

#define IMPORT_MAX_LAUNCH_META 4096 /* launch:<kernel> pairs per file */

const char cli_import_usage[] =
    "Usage: tracectl import FILE... [--session NAME] [--rank R] [--cpu-ops] [--quiet]\n"
    "\n"
    "Imports PyTorch profiler (Kineto) Chrome-trace JSON files, plain or .gz, one\n"
    "file per rank, into one session, through the daemon like any producer.\n"
    "GPU kernels, memcpy and memset events become entries on device gpu:<N>,\n"
    "with the input shapes of the CPU op that launched them and the step of the\n"
    "ProfilerStep#N that contains it; communication kernels (NCCL, ...) are\n"
    "category comm. distributedInfo and deviceProperties become metadata.\n"
    "A malformed file is reported with its byte offset and nothing of it is\n"
    "sent.\n"
    "\n"
    "Options:\n"
    "  -s, --session NAME  the session (default: the first file's name, without\n"
    "                      .json/.gz)\n"
    "  -r, --rank R        the rank of the first file when the file has no\n"
    "                      distributedInfo.rank (the next files get R+1, ...);\n"
    "                      default: the file's position in the list\n"
    "      --cpu-ops       also import CPU ops and user annotations (device cpu,\n"
    "                      self time only, so nested time is not counted twice)\n"
    "  -q, --quiet         no progress line and no summary\n"
    "\n"
    "Example:\n"
    "  tracectl import rank0.json.gz rank1.json.gz --session resnet-run\n";

struct import_opts {
    const char *sock;
    const char *session;
    int64_t rank; /* --rank, or -1 */
    bool cpu_ops, quiet;
};

/* One file being imported. */
struct import_job {
    const struct import_opts *o;
    const char *path;
    struct kineto k;
    struct import_send s;
    struct intern launch; /* kernel names whose launcher is in the metadata */
    uint64_t total_bytes; /* the file's size, for progress */
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
    uint64_t count = replay ? j->s.sent : events;
    char bar[21];
    int fill = j->total_bytes ? (int)(20 * bytes / j->total_bytes) : 0;

    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[20] = '\0';
    fprintf(stderr, "\r\033[K%s [%s] %.1f/%.1f MiB, %.0f %s/s", replay ? "sending" : "reading", bar,
            (double)bytes / mib, (double)j->total_bytes / mib, s > 0 ? (double)count / s : 0.0,
            replay ? "entries" : "events");
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
    import_send_meta(&j->s, &kv);
}

static int import_emit(void *arg, const struct kineto_entry *e)
{
    struct import_job *j = arg;
    uint32_t op = import_send_op(&j->s, e->op, e->category);

    if (op == 0)
        return j->s.err;
    if (e->launcher != NULL)
        import_note_launcher(j, e->op, e->launcher);
    return import_send_entry(&j->s, op, e->step, e->start_ns, e->dur_ns, e->in_shapes, e->in_len,
                             e->device, e->stream);
}

/* The file's base name (import.file), then distributedInfo.* and deviceProperties.*. */
static int import_send_metadata(struct import_job *j)
{
    const char *base = strrchr(j->path, '/') ? strrchr(j->path, '/') + 1 : j->path;
    char name[PROTO_MAX_NAME + 1];
    struct proto_kv file = {.key = "import.file", .type = PROTO_V_STR, .v.s = name};
    size_t n = strlen(base);

    if (n > PROTO_MAX_NAME) { /* a metadata string is at most 1 KiB: cut on a UTF-8 boundary */
        n = PROTO_MAX_NAME;
        while (n > 0 && ((unsigned char)base[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(name, base, n);
    name[n] = '\0';
    import_send_meta(&j->s, &file);
    for (size_t i = 0; i < j->k.n_meta && j->s.err == 0; i++)
        import_send_meta(&j->s, &j->k.meta[i]);
    return j->s.err;
}

/* ---- one file ------------------------------------------------------------------------ */

static int import_open(struct import_job *j, int64_t position, int64_t n_files)
{
    const struct import_opts *o = j->o;
    char host[256] = "";
    struct proto_hello h = {
        .proto = PROTO_VERSION, .session = (char *)o->session, .pid = getpid(), .host = host};

    /* rank: the file's own, else --rank + position, else the position */
    if (j->k.rank < 0)
        j->k.rank = o->rank >= 0 ? o->rank + position : position;
    h.rank = j->k.rank;
    h.world = j->k.world > 0 ? j->k.world : n_files;
    gethostname(host, sizeof(host) - 1);
    return import_send_open(&j->s, o->sock, &h);
}

static void import_summary(const struct import_job *j)
{
    printf("%s: rank %" PRId64 ", %" PRIu64 " entries into session %" PRId64 " (%s)\n", j->path,
           j->k.rank, j->s.sent, j->s.session_id, j->o->session);
}

/* The import of one opened file: metadata, pass 2, flush and bye. An exit code. */
static int import_stream(struct import_job *j)
{
    int rc;

    import_send_metadata(j);
    rc = j->s.err ? j->s.err : kineto_replay(&j->k, j->o->cpu_ops, import_emit, j);
    if (rc == 0 && import_send_finish(&j->s) == 0)
        return CLI_EXIT_OK;
    if (j->s.err != 0) {
        cli_error("import: %s: %s (the process ends without bye)", j->path, j->s.errmsg);
        return CLI_EXIT_ERROR;
    }
    if (j->k.errmsg[0] == '\0')
        snprintf(j->k.errmsg, sizeof(j->k.errmsg), "%s", strerror(rc < -1 ? -rc : EIO));
    import_send_abandon(&j->s, j->k.errmsg);
    cli_error("import: %s: %s (the process is marked incomplete, without bye)", j->path,
              j->k.errmsg);
    return CLI_EXIT_ERROR;
}

static int import_file(const struct import_opts *o, const char *path, int64_t position,
                       int64_t n_files)
{
    struct import_job j = {.o = o, .path = path};
    struct stat st;
    int rc;

    j.s.fd = -1;
    j.k.path = path;
    if (!o->quiet && isatty(2)) {
        j.k.progress = import_progress;
        j.k.progress_arg = &j;
    }
    if (stat(path, &st) == 0)
        j.total_bytes = (uint64_t)st.st_size;
    clock_gettime(CLOCK_MONOTONIC, &j.t0);
    /* pass 1: the whole file must parse before anything is sent */
    if (kineto_scan(&j.k) < 0) {
        if (j.progress_shown)
            fputs("\r\033[K", stderr);
        cli_error("import: %s: %s; nothing of it was sent", path, j.k.errmsg);
        kineto_deinit(&j.k);
        return CLI_EXIT_ERROR;
    }
    if ((rc = import_open(&j, position, n_files)) < 0) {
        cli_error("import: %s: %s", path, j.s.errmsg);
        rc = rc == -ENOENT || rc == -ECONNREFUSED ? CLI_EXIT_NO_DAEMON : CLI_EXIT_ERROR;
    } else {
        clock_gettime(CLOCK_MONOTONIC, &j.t0);
        rc = import_stream(&j);
    }
    if (rc == CLI_EXIT_OK && !o->quiet)
        import_summary(&j);
    import_send_close(&j.s);
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

static int import_opt_rank(const char *arg, int64_t *rank)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < 0) {
        cli_error("import: --rank wants a non-negative integer, not '%s'", arg);
        return CLI_EXIT_USAGE;
    }
    *rank = v;
    return CLI_CONTINUE;
}

int cli_import_run(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_LONGOPTS,
        {"session", required_argument, NULL, 's'},
        {"rank", required_argument, NULL, 'r'},
        {"cpu-ops", no_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    struct import_opts o = {.rank = -1};
    char session[PROTO_MAX_SESSION + 8], sockbuf[PATH_MAX];
    int c, rc;

    while ((c = getopt_long(argc, argv, CLI_SHORTOPTS "s:r:q", longopts, NULL)) != -1) {
        if (c == 's')
            o.session = optarg;
        else if (c == 'r' && (rc = import_opt_rank(optarg, &o.rank)) != CLI_CONTINUE)
            return rc;
        else if (c == 'c')
            o.cpu_ops = true;
        else if (c == 'q')
            o.quiet = true;
        else if (c != 'r' && (rc = cli_common_opt(ctx, c, argv)) != CLI_CONTINUE)
            return rc;
    }
    if (optind >= argc) {
        cli_error("import: which files? (see 'tracectl import --help')");
        return CLI_EXIT_USAGE;
    }
    if (o.session != NULL && (o.session[0] == '\0' || strlen(o.session) > PROTO_MAX_SESSION)) {
        cli_error("import: a session name is 1 to %d bytes", PROTO_MAX_SESSION);
        return CLI_EXIT_USAGE;
    }
    if (o.session == NULL) {
        import_default_session(argv[optind], session, sizeof(session));
        o.session = session;
    }
    o.sock = cli_conn_path(ctx->socket, sockbuf, sizeof(sockbuf));
    for (int i = optind; i < argc; i++) {
        rc = import_file(&o, argv[i], i - optind, argc - optind);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    return CLI_EXIT_OK;
}
