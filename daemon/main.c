/*
 * main.c — tracectld: options, signals, start-up and shutdown.
 *
 * Start-up opens the catalog and binds the socket before the loop runs (so
 * a bad data dir or a busy socket is a one-line error and exit 1). SIGINT
 * and SIGTERM stop accepting, close every connection, end live sessions as
 * interrupted, let the store commit everything it received, and exit 0.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "batchpool.h"
#include "bytesize.h"
#include "conn.h"
#include "control.h"
#include "daemon.h"
#include "listener.h"
#include "log.h"
#include "sink.h"
#include "peerhome.h"
#include "peermember.h"
#include "peermsg.h"
#include "sock.h"

/*
 * DEFAULT_QUEUE_HIGH: entries queued for the writer above which producers are
 * paused (until half that). Each takes ~100 bytes, so it is the most of the
 * daemon's RSS under a flood; 128 Ki is ~90 ms of the writer's work at
 * 1.4 M/s, more than its longest pause (a commit) now that checkpoints run
 * beside it (store_ckpt.c).
 */
#define DEFAULT_LINGER_MS  60000
#define DEFAULT_MAX_CONNS  4096
#define DEFAULT_QUEUE_HIGH (128u << 10)
#define DEFAULT_REQUEST_MS 30000
#define DEFAULT_IDLE_MS    60000
#define DEFAULT_REPLY_MS   60000
#define DEFAULT_HEAVY      1000000

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: tracectld [--system] [--socket PATH] [--data-dir DIR] [--log-level LEVEL]\n"
        "                 [--linger SECONDS] [--max-connections N] [--max-live-sessions N]\n"
        "                 [--max-session-bytes SIZE] [--max-user-bytes SIZE]\n"
        "                 [--retain-days DAYS] [--retain-bytes SIZE] [--admin-group NAME]\n"
        "                 [--commit-interval MS] [--request-timeout TIME] [--idle-timeout TIME]\n"
        "                 [--reply-timeout TIME] [--heavy-entries N]\n"
        "                 [--storage-format rows|blocks]\n"
        "                 [--clickhouse URL [--clickhouse-auth FILE] [--clickhouse-host NAME]]\n"
        "                 [--peer-listen ADDR:PORT | --home ADDR:PORT] [--peer-key FILE]\n"
        "                 [--host NAME]\n"
        "\n"
        "The tracectl profiler daemon: receives trace entries from instrumented\n"
        "processes over a Unix socket, stores one SQLite file per session and\n"
        "answers reports. Runs in the foreground; SIGINT/SIGTERM stop it cleanly\n"
        "(SIGHUP, SIGUSR1, SIGUSR2 are ignored).\n"
        "\n"
        "  --system              system-wide service: socket /run/tracectl/tracectl.sock\n"
        "                        (0666), data /var/lib/tracectl; each user sees only\n"
        "                        their own sessions (root and --admin-group see all)\n"
        "  --socket PATH         listening socket (default: $TRACECTL_SOCKET, else\n"
        "                        $XDG_RUNTIME_DIR/tracectl/tracectl.sock, else\n"
        "                        /tmp/tracectl-$UID/tracectl.sock)\n"
        "  --data-dir DIR        where sessions are stored (default:\n"
        "                        $XDG_DATA_HOME/tracectl, else ~/.local/share/tracectl)\n"
        "  --log-level LEVEL     error, warn, info (default) or debug\n"
        "  --linger SECONDS      how long a session whose `world` is not complete\n"
        "                        stays live after its last process left (default 60)\n"
        "  --max-connections N   refuse connections beyond N (default %d, less when\n"
        "                        the fd limit is lower)\n"
        "  --max-live-sessions N refuse hellos that would start session N+1 (default: no limit)\n"
        "  --max-session-bytes SIZE  a session over SIZE on disk keeps what it has and\n"
        "                        drops new entries, counted in `dropped` (default: no cap)\n"
        "  --max-user-bytes SIZE a user whose sessions use SIZE cannot start new ones\n"
        "  --retain-days DAYS    delete ended sessions older than DAYS (default: keep)\n"
        "  --retain-bytes SIZE   delete the oldest ended sessions while all use > SIZE\n"
        "  --admin-group NAME    members see every session (default: tracectl)\n"
        "  --commit-interval MS  under light load, commit a session's entries at most\n"
        "                        this late (default 1000; a flush always commits at once)\n"
        "  --request-timeout TIME  close a connection that started a message and has not\n"
        "                        finished it TIME later (default 30s; 0: never)\n"
        "  --idle-timeout TIME   close a control connection (no hello) that has sent\n"
        "                        nothing for TIME and has nothing pending (default 60s;\n"
        "                        0: never). Producers may idle for ever between messages\n"
        "  --reply-timeout TIME  close a connection whose peer has read none of the\n"
        "                        replies waiting for it for TIME (default 60s; 0: never)\n"
        "  --heavy-entries N     reports on sessions of N entries or more, or that\n"
        "                        scanned as much last time, run at most 2 at once,\n"
        "                        so small ones never wait behind them (default 1000000)\n"
        "  --storage-format F    how new session files store entries: blocks (default)\n"
        "                        of up to 1024, compact and faster to write, read\n"
        "                        through a virtual table (the sqlite3 shell needs\n"
        "                        `.load tracectl_blocks`), or rows, one SQLite row\n"
        "                        each. Existing files keep theirs\n"
        "  --clickhouse URL      stream every stored entry into ClickHouse's HTTP\n"
        "                        interface at URL (http://HOST:8123/), exactly once\n"
        "                        (docs/clickhouse.md). Off by default\n"
        "  --clickhouse-auth FILE  its user:password, the first line of FILE (mode 0600)\n"
        "  --clickhouse-host NAME  the host name of this daemon's rows (default: --host,\n"
        "                        else the host name)\n"
        "  --peer-listen ADDR:PORT  be the home of sessions that span hosts: accept\n"
        "                        members on this TCP address (off by default; ADDR\n"
        "                        may be 0.0.0.0). Needs --peer-key\n"
        "  --home ADDR:PORT      be a member: send the home at ADDR:PORT a snapshot of\n"
        "                        every live session each second. Needs --peer-key\n"
        "  --peer-key FILE       the key both sides hold (mode 0600, 16 to 4096 bytes,\n"
        "                        e.g. openssl rand -hex 32): TLS 1.3 with it as a\n"
        "                        pre-shared key authenticates and encrypts the link.\n"
        "                        With it, a session whose producers set TRACECTL_HOME\n"
        "                        (hello key home) goes to that home instead\n"
        "  --host NAME           this daemon's host name in merged reports (default:\n"
        "                        the host name)\n"
        "  TIME is seconds, or takes ms, s, m suffixes.\n"
        "  SIZE is bytes, or takes K, M, G, T (KiB, MiB, GiB, TiB) suffixes.\n"
        "  -h, --help            this text\n"
        "  -V, --version         the version\n",
        DEFAULT_MAX_CONNS);
}

static char *default_socket(void)
{
    char buf[PATH_MAX];

    return strdup(sock_default_path(buf, sizeof(buf)));
}

/*
 * $XDG_DATA_HOME/tracectl, else $HOME/.local/share/tracectl, else the same
 * under the home directory of the passwd entry: never a relative path (an
 * unset HOME once made it ./.local/share/tracectl, wherever the daemon was
 * started). A relative XDG_DATA_HOME or HOME is ignored, as the XDG spec
 * says. NULL when no absolute home is found.
 */
static char *default_data_dir(void)
{
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    struct passwd *pw;
    char buf[PATH_MAX];

    if (xdg != NULL && xdg[0] == '/') {
        snprintf(buf, sizeof(buf), "%s/tracectl", xdg);
        return strdup(buf);
    }
    if ((home == NULL || home[0] != '/') && (pw = getpwuid(geteuid())) != NULL)
        home = pw->pw_dir;
    if (home == NULL || home[0] != '/')
        return NULL;
    snprintf(buf, sizeof(buf), "%s/.local/share/tracectl", home);
    return strdup(buf);
}

/*
 * The data directory, when it exists, must be this user's (the daemon's
 * euid) and writable by no one else: another user's files there would be
 * read as this daemon's sessions. A missing one is made 0700 by the store.
 * 0, or -1 with the reason on stderr.
 */
static int check_data_dir(const char *dir)
{
    struct stat st;

    if (dir == NULL) {
        fprintf(stderr, "tracectld: no data directory: HOME is unset or relative and the "
                        "passwd entry has no absolute home; give --data-dir DIR\n");
        return -1;
    }
    if (lstat(dir, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        fprintf(stderr, "tracectld: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tracectld: data directory %s is not a directory (a symbolic link?)\n",
                dir);
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        fprintf(stderr,
                "tracectld: data directory %s is owned by uid %u with mode %03o: it must be "
                "owned by uid %u and not writable by group or others; refusing to use it\n",
                dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        return -1;
    }
    return 0;
}

static int parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > max || s[0] == '-')
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_limit(int ch, const char *arg, struct daemon_options *o)
{
    unsigned long v;

    switch (ch) {
    case 'n':
        if (parse_ulong(arg, 1000000, &v) < 0 || v == 0)
            return -EINVAL;
        o->max_live = v;
        return 0;
    case 'b':
        return bytesize_parse(arg, &o->max_session_bytes);
    case 'u':
        return bytesize_parse(arg, &o->max_user_bytes);
    case 'r':
        if (parse_ulong(arg, 100000, &v) < 0)
            return -EINVAL;
        o->retain_s = (uint64_t)v * 86400;
        return 0;
    case 'R':
        return bytesize_parse(arg, &o->retain_bytes);
    default:
        return -EINVAL;
    }
}

/* "30s", "500ms", "5m" or plain seconds, up to a day, into *ms. 0 or -1. */
static int parse_duration(const char *s, unsigned long *ms)
{
    char *end;
    unsigned long v, mul;

    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    v = strtoul(s, &end, 10);
    if (errno != 0)
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        mul = 1000;
    else if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else
        return -1;
    if (v > 86400000ul / mul)
        return -1;
    *ms = v * mul;
    return 0;
}

/* --peer-listen, --home, --peer-key, --host (daemon/peer/peerlink.h). 0 or -1 (usage). */
static int parse_peer_arg(struct daemon_options *o, int ch, const char *arg)
{
    char **slot = ch == 'P'   ? &o->peer_listen
                  : ch == 'O' ? &o->home
                  : ch == 'K' ? &o->peer_key
                              : &o->host_name;

    if (ch == 'N' && !peermsg_host_valid(arg, strlen(arg))) {
        fprintf(stderr, "tracectld: --host takes 1 to %d bytes of UTF-8 without '/'\n",
                PEERMSG_MAX_HOST);
        return -1;
    }
    free(*slot);
    *slot = strdup(arg);
    return 0;
}

/* The peer flags together: one role at most, and a key with it. 0 or -1 (usage). */
static int check_peer_args(const struct daemon_options *o)
{
    if (o->peer_listen != NULL && o->home != NULL) {
        fprintf(stderr, "tracectld: --peer-listen and --home exclude each other (a home has no "
                        "home)\n");
        return -1;
    }
    if ((o->peer_listen != NULL || o->home != NULL) && o->peer_key == NULL) {
        fprintf(stderr, "tracectld: %s needs --peer-key FILE\n",
                o->home != NULL ? "--home" : "--peer-listen");
        return -1;
    }
    return 0;
}

/* Returns 0 to run, 1 to exit 0 (help), -1 to exit 2 (usage). */
static int parse_args(int argc, char **argv, struct daemon_options *o)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"data-dir", required_argument, NULL, 'd'},
        {"log-level", required_argument, NULL, 'l'},
        {"linger", required_argument, NULL, 'L'},
        {"max-connections", required_argument, NULL, 'm'},
        {"max-live-sessions", required_argument, NULL, 'n'},
        {"max-session-bytes", required_argument, NULL, 'b'},
        {"max-user-bytes", required_argument, NULL, 'u'},
        {"retain-days", required_argument, NULL, 'r'},
        {"retain-bytes", required_argument, NULL, 'R'},
        {"admin-group", required_argument, NULL, 'g'},
        {"commit-interval", required_argument, NULL, 'C'},
        {"request-timeout", required_argument, NULL, 'T'},
        {"idle-timeout", required_argument, NULL, 'I'},
        {"reply-timeout", required_argument, NULL, 'W'},
        {"heavy-entries", required_argument, NULL, 'H'},
        {"storage-format", required_argument, NULL, 'F'},
        {"clickhouse", required_argument, NULL, 'k'},
        {"clickhouse-auth", required_argument, NULL, 'A'},
        {"clickhouse-host", required_argument, NULL, 'j'},
        {"system", no_argument, NULL, 'S'},
        {"peer-listen", required_argument, NULL, 'P'},
        {"home", required_argument, NULL, 'O'},
        {"peer-key", required_argument, NULL, 'K'},
        {"host", required_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    unsigned long v;
    int ch, li = 0;

    /* li: the index of the long option getopt_long matched, for messages */
    while ((ch = getopt_long(argc, argv, "hV", longopts, &li)) != -1) {
        switch (ch) {
        case 's':
            free(o->socket_path);
            o->socket_path = strdup(optarg);
            break;
        case 'd':
            free(o->data_dir);
            o->data_dir = strdup(optarg);
            break;
        case 'l':
            if (log_set_level_name(optarg) < 0) {
                fprintf(stderr, "tracectld: --log-level must be error, warn, info or debug\n");
                return -1;
            }
            break;
        case 'L':
            if (parse_ulong(optarg, 86400, &v) < 0) {
                fprintf(stderr, "tracectld: --linger takes seconds (0 to 86400)\n");
                return -1;
            }
            o->linger_ms = v * 1000;
            break;
        case 'm':
            if (parse_ulong(optarg, 1000000, &v) < 0 || v == 0) {
                fprintf(stderr, "tracectld: --max-connections takes a number from 1\n");
                return -1;
            }
            o->max_conns = v;
            break;
        case 'n':
        case 'b':
        case 'u':
        case 'r':
        case 'R':
            if (parse_limit(ch, optarg, o) < 0) {
                fprintf(stderr, "tracectld: bad value '%s' for --%s\n", optarg, longopts[li].name);
                return -1;
            }
            break;
        case 'C':
            if (parse_ulong(optarg, 60000, &v) < 0) {
                fprintf(stderr, "tracectld: --commit-interval takes milliseconds (0 to 60000)\n");
                return -1;
            }
            o->commit_ms = v;
            break;
        case 'T':
        case 'I':
        case 'W':
            if (parse_duration(optarg, &v) < 0) {
                fprintf(stderr, "tracectld: --%s takes a time (e.g. 30s, 500ms, 5m; 0: never)\n",
                        longopts[li].name);
                return -1;
            }
            if (ch == 'T')
                o->request_ms = v;
            else if (ch == 'I')
                o->idle_ms = v;
            else
                o->reply_ms = v;
            break;
        case 'H':
            if (parse_ulong(optarg, 1000000000000ul, &v) < 0) {
                fprintf(stderr, "tracectld: --heavy-entries takes a number\n");
                return -1;
            }
            o->heavy_entries = v;
            break;
        case 'F':
            if (strcmp(optarg, "rows") == 0) {
                o->format = STORE_FORMAT_ROWS;
            } else if (strcmp(optarg, "blocks") == 0) {
                o->format = STORE_FORMAT_BLOCKS;
            } else {
                fprintf(stderr, "tracectld: --storage-format takes rows or blocks\n");
                return -1;
            }
            break;
        case 'g':
            free(o->admin_group);
            o->admin_group = strdup(optarg);
            break;
        case 'k':
        case 'A':
        case 'j': {
            char **p = ch == 'k'   ? &o->clickhouse_url
                       : ch == 'A' ? &o->clickhouse_auth
                                   : &o->clickhouse_host;

            free(*p);
            *p = strdup(optarg);
            break;
        }
        case 'S':
            o->system = true;
            break;
        case 'P':
        case 'O':
        case 'K':
        case 'N':
            if (parse_peer_arg(o, ch, optarg) < 0)
                return -1;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case 'V':
            printf("tracectld %s\n", TRACECTL_VERSION);
            return 1;
        default:
            fprintf(stderr, "Try 'tracectld --help'.\n");
            return -1;
        }
    }
    if (o->clickhouse_url == NULL && (o->clickhouse_auth != NULL || o->clickhouse_host != NULL)) {
        fprintf(stderr, "tracectld: --clickhouse-auth and --clickhouse-host need --clickhouse\n");
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "tracectld: unexpected argument '%s'\nTry 'tracectld --help'.\n",
                argv[optind]);
        return -1;
    }
    return check_peer_args(o);
}

/* ---- callbacks ----------------------------------------------------------- */

static void daemon_store_done(struct store *s, struct store_job *job, void *data)
{
    struct daemon *d = data;

    (void)s;
    if (job->type == STORE_DELETE) {
        control_delete_done(job);
    } else if (job->type == STORE_FLUSH) {
        conn_flush_done(job);
    } else {
        if (job->type == STORE_BATCH && job->rc < 0) /* not stored: count the loss */
            session_lost(&d->reg, job->session_id, job->u.batch.b.n);
        store_job_free(job);
    }
}

static void daemon_store_progress(struct store *s, void *data)
{
    (void)s;
    conn_backpressure_check(data);
}

static void daemon_delete(struct daemon *d, struct session *s, const char *why)
{
    struct store_job *job = store_job_new(STORE_DELETE, s->id);

    if (job == NULL)
        return;
    log_info("retention: deleting session %lld (%s): %s", (long long)s->id, s->name, why);
    session_remove(&d->reg, s);
    store_enqueue(d->store, job);
}

/* Deletes ended sessions past the age limit, then the oldest while over the byte cap. */
static void daemon_retention(struct daemon *d)
{
    int64_t now = session_retention_now(&d->reg); /* never a jumped clock: session.h */
    struct session *s, *next, *oldest;
    uint64_t total;

    for (s = d->reg.list; s != NULL && d->opt.retain_s; s = next) {
        next = s->next;
        if (!s->live && now - s->ended_ns > (int64_t)d->opt.retain_s * 1000000000 &&
            !(d->sink != NULL && sink_pending(d->sink, s->id))) /* kept until sent */
            daemon_delete(d, s, "older than --retain-days");
    }
    while (d->opt.retain_bytes && (total = session_user_bytes(&d->reg, -1)) > d->opt.retain_bytes) {
        oldest = NULL;
        for (s = d->reg.list; s != NULL; s = s->next)
            if (!s->live)
                oldest = s; /* the list is newest first */
        if (oldest == NULL)
            break;
        daemon_delete(d, oldest, "over --retain-bytes");
    }
}

static void daemon_tick_cb(uv_timer_t *t)
{
    struct daemon *d = t->data;

    session_tick(&d->reg);
    peerhome_tick(d->peer_home);
    peermember_tick_all(d);
    batchpool_trim();
    conn_trim(d);
    users_tick(d);
    for (struct session *s = d->reg.list; s != NULL; s = s->next)
        if (s->live)
            s->bytes = store_session_bytes(d->store, s->id);
    if (d->ticks++ % 60 == 0)
        daemon_retention(d);
    d->rate[d->rate_pos] = store_stored(d->store);
    d->rate_pos = (d->rate_pos + 1) % (DAEMON_RATE_WINDOW + 1);
    if (d->rate_n <= DAEMON_RATE_WINDOW)
        d->rate_n++;
}

static void daemon_stop(struct daemon *d)
{
    if (d->stopping)
        return;
    d->stopping = true;
    /* Reports and exports running on the thread pool end at their next check (query.h). */
    atomic_store(&d->cancel, true);
    log_info("stopping: committing what was received");
    listener_stop(d);
    peerhome_stop(d->peer_home);
    d->peer_home = NULL;
    peermember_stop_all(d);
    d->reg.stopping = true; /* the sessions the closes below leave are cut short, not ended */
    while (d->conns != NULL)
        conn_close(d->conns);
    session_registry_deinit(&d->reg);
    sink_free(d->sink); /* what it has not sent stays in the session files */
    d->sink = NULL;
    store_free(d->store); /* drains the queue and commits before it returns */
    d->store = NULL;
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    for (size_t i = 0; i < 3; i++)
        uv_close((uv_handle_t *)&d->sigother[i], NULL);
    uv_close((uv_handle_t *)&d->tick, NULL);
    uv_close((uv_handle_t *)&d->conn_timer, NULL);
}

static void daemon_signal_cb(uv_signal_t *sig, int signum)
{
    log_info("received %s", signum == SIGINT ? "SIGINT" : "SIGTERM");
    daemon_stop(sig->data);
}

/* SIGHUP, SIGUSR1, SIGUSR2 would kill the daemon and leave its socket: they are logged and
 * otherwise ignored (the log is stderr, which has nothing to reopen). */
static const int daemon_other_signals[3] = {SIGHUP, SIGUSR1, SIGUSR2};

static void daemon_other_signal_cb(uv_signal_t *sig, int signum)
{
    (void)sig;
    log_info("received %s: ignored", signum == SIGHUP    ? "SIGHUP"
                                     : signum == SIGUSR1 ? "SIGUSR1"
                                                         : "SIGUSR2");
}

static int load_row(void *arg, const struct store_catalog_row *row)
{
    struct daemon *d = arg;
    int rc = session_load(&d->reg, row);

    if (rc == 0)
        d->reg.list->bytes = store_session_bytes(d->store, row->id);
    return rc;
}

/*
 * Raises the soft fd limit to the hard one and sizes what needs fds from it:
 * session files open at once (3 fds each; idle ones are closed past that)
 * and, unless --max-connections was given, connections (what is left after
 * the files and a reserve for the catalog, report readers and libuv).
 */
static void daemon_size_fds(struct daemon *d)
{
    struct rlimit rl;
    rlim_t n = 1024;
    size_t files, conns;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        n = rl.rlim_cur;
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
                n = rl.rlim_cur;
        }
    }
    files = n / 16 < 2 ? 2 : n / 16 > 1024 ? 1024 : (size_t)(n / 16);
    store_set_limits(d->store, files, d->opt.commit_ms);
    store_set_format(d->store, d->opt.format);
    if (d->opt.max_conns == 0) {
        conns = n > 3 * files + 40 ? (size_t)n - 3 * files - 32 : 8;
        d->opt.max_conns = conns < DEFAULT_MAX_CONNS ? conns : DEFAULT_MAX_CONNS;
    }
    log_debug("%llu fds: up to %zu session files open, %zu connections", (unsigned long long)n,
              files, d->opt.max_conns);
}

/*
 * The peer role (--peer-listen or --home), if any: loads the key and starts
 * listening or linking. 0, or -1 with the message in err.
 */
static int daemon_peer_start(struct daemon *d, char *err, size_t errlen)
{
    char *host = d->peer_host;

    if (d->opt.peer_key == NULL)
        return 0;
    if (peerlink_key_load(d->opt.peer_key, d->peer_psk, err, errlen) < 0)
        return -1;
    /* Kept for the links producers ask for later (peermember_route). */
    d->peer_keyed = true;
    if (d->opt.host_name != NULL)
        snprintf(host, sizeof(d->peer_host), "%s", d->opt.host_name);
    else if (gethostname(host, sizeof(d->peer_host) - 1) < 0 ||
             !peermsg_host_valid(host, strlen(host)))
        snprintf(host, sizeof(d->peer_host), "localhost");
    if (d->opt.peer_listen != NULL &&
        (d->peer_home = peerhome_start(d, d->opt.peer_listen, host, d->peer_psk, err, errlen)) ==
            NULL)
        return -1;
    if (d->opt.home != NULL && (d->peer_member = peermember_start(d, d->opt.home, host, d->peer_psk,
                                                                  true, err, errlen)) == NULL)
        return -1;
    return 0;
}

static int daemon_start(struct daemon *d)
{
    char err[512] = "";
    struct group *gr = getgrnam(d->opt.admin_group);
    int rc;

    d->admin_gid = gr != NULL ? (int64_t)gr->gr_gid : -1;
    d->store = store_new(d->loop, d->opt.data_dir, daemon_store_done, daemon_store_progress, d, &rc,
                         err, sizeof(err));
    if (d->store == NULL) {
        fprintf(stderr, "tracectld: %s\n", err);
        return -1;
    }
    if (d->opt.clickhouse_url != NULL &&
        (d->sink =
             sink_new(d->opt.data_dir, d->opt.clickhouse_url, d->opt.clickhouse_auth,
                      /* one name per host: --host unless the sink is given its own */
                      d->opt.clickhouse_host != NULL ? d->opt.clickhouse_host : d->opt.host_name,
                      err, sizeof(err))) == NULL) {
        fprintf(stderr, "tracectld: %s\n", err);
        store_free(d->store);
        return -1;
    }
    daemon_size_fds(d);
    if (session_registry_init(&d->reg, d->loop, d->store, store_last_session_id(d->store),
                              d->opt.linger_ms) < 0) {
        fprintf(stderr, "tracectld: out of memory\n");
        sink_free(d->sink);
        store_free(d->store);
        return -1;
    }
    /*
     * The handlers come before the socket listens: a client may connect as
     * soon as it does (the backlog), and a SIGTERM sent once one could (a
     * test, a service manager) must stop the daemon cleanly, not kill it.
     * One that comes before the loop runs is handled once it does.
     */
    uv_signal_init(d->loop, &d->sigint);
    uv_signal_init(d->loop, &d->sigterm);
    d->sigint.data = d->sigterm.data = d;
    uv_signal_start(&d->sigint, daemon_signal_cb, SIGINT);
    uv_signal_start(&d->sigterm, daemon_signal_cb, SIGTERM);
    for (size_t i = 0; i < 3; i++) {
        uv_signal_init(d->loop, &d->sigother[i]);
        d->sigother[i].data = d;
        uv_signal_start(&d->sigother[i], daemon_other_signal_cb, daemon_other_signals[i]);
    }
    if (store_catalog_load(d->store, load_row, d) < 0 ||
        daemon_peer_start(d, err, sizeof(err)) < 0 || listener_start(d, err, sizeof(err)) < 0 ||
        (rc = store_start(d->store)) < 0) {
        fprintf(stderr, "tracectld: %s\n", err[0] ? err : "cannot start the storage writer");
        peerhome_stop(d->peer_home);
        d->peer_home = NULL;
        peermember_stop_all(d);
        uv_close((uv_handle_t *)&d->sigint, NULL);
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        for (size_t i = 0; i < 3; i++)
            uv_close((uv_handle_t *)&d->sigother[i], NULL);
        session_registry_deinit(&d->reg);
        sink_free(d->sink);
        store_free(d->store);
        return -1;
    }
    if (d->sink != NULL && (rc = sink_start(d->sink)) < 0) {
        log_error("clickhouse: cannot start the sink's thread: %s", strerror(-rc));
        sink_free(d->sink);
        d->sink = NULL;
    }
    session_clock_start(&d->reg, d->opt.retain_s * 1000000000);
    uv_timer_init(d->loop, &d->tick);
    d->tick.data = d;
    uv_timer_start(&d->tick, daemon_tick_cb, 1000, 1000);
    conn_timer_start(d);
    d->started_ms = uv_now(d->loop);
    log_info("tracectld %s listening on %s, data in %s", TRACECTL_VERSION, d->opt.socket_path,
             d->opt.data_dir);
    if (d->sink != NULL)
        log_info("clickhouse: streaming entries to %s", d->opt.clickhouse_url);
    return 0;
}

static void options_free(struct daemon_options *o)
{
    free(o->socket_path);
    free(o->data_dir);
    free(o->admin_group);
    free(o->peer_listen);
    free(o->home);
    free(o->peer_key);
    free(o->host_name);
    free(o->clickhouse_url);
    free(o->clickhouse_auth);
    free(o->clickhouse_host);
}

int main(int argc, char **argv)
{
    struct daemon d = {0};
    struct batchpool_stats pool;
    uv_loop_t loop;
    int rc;

    signal(SIGPIPE, SIG_IGN); /* a peer that went away is a write error, not a signal */
    if (store_configure() == -EINVAL)
        return 2; /* a test build's $TRACECTLD_FAULT it cannot read: logged */
    d.opt.linger_ms = DEFAULT_LINGER_MS;
    d.opt.max_conns = 0; /* sized from the fd limit unless given */
    d.opt.queue_high = DEFAULT_QUEUE_HIGH;
    d.opt.commit_ms = STORE_DEFAULT_COMMIT_MS;
    d.opt.request_ms = DEFAULT_REQUEST_MS;
    d.opt.idle_ms = DEFAULT_IDLE_MS;
    d.opt.reply_ms = DEFAULT_REPLY_MS;
    d.opt.heavy_entries = DEFAULT_HEAVY;
    d.opt.format = STORE_FORMAT_BLOCKS;
    rc = parse_args(argc, argv, &d.opt);
    if (rc != 0) {
        options_free(&d.opt);
        return rc > 0 ? 0 : 2;
    }
    if (d.opt.socket_path == NULL)
        d.opt.socket_path = d.opt.system ? strdup("/run/tracectl/tracectl.sock") : default_socket();
    if (d.opt.data_dir == NULL)
        d.opt.data_dir = d.opt.system ? strdup("/var/lib/tracectl") : default_data_dir();
    if (d.opt.admin_group == NULL)
        d.opt.admin_group = strdup("tracectl");
    if (check_data_dir(d.opt.data_dir) < 0) {
        options_free(&d.opt);
        return 1;
    }
    /* ignored until the loop's handlers take them over: the socket exists before
     * those are installed, and a client may signal as soon as it sees it */
    for (size_t i = 0; i < 3; i++)
        signal(daemon_other_signals[i], SIG_IGN);
    uv_loop_init(&loop);
    loop.data = &d;
    d.loop = &loop;
    rc = daemon_start(&d) < 0 ? 1 : 0;
    if (rc == 0)
        uv_run(&loop, UV_RUN_DEFAULT);
    else
        uv_run(&loop, UV_RUN_DEFAULT); /* lets the handles closed on failure finish */
    if (uv_loop_close(&loop) != 0)
        log_warn("the loop still had handles at exit");
    batchpool_stats(&pool);
    log_debug("batch arrays: %llu reused, %llu allocated, %llu kept and %llu freed when spent",
              (unsigned long long)pool.taken, (unsigned long long)pool.missed,
              (unsigned long long)pool.kept, (unsigned long long)pool.freed);
    batchpool_drain();
    users_free_all(&d);
    options_free(&d.opt);
    OPENSSL_cleanse(d.peer_psk, sizeof(d.peer_psk));
    return rc;
}
