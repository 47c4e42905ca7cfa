/*
 * daemon — the one struct that ties tracectld together, reachable from
 * loop->data. There are no globals: every module gets a struct daemon *.
 *
 * Errors, in every module of daemon/: a function returns 0 or a negative
 * errno (libuv's codes pass through; SQLite's are mapped once, by
 * sql_errno() in shared/sqlutil.h) and says in its header what each path returns.
 * An error is logged where it is handled, once. Bad input from a peer closes
 * that connection with a reason (conn_fail); it never stops the daemon.
 * (main.c's option and start-up steps are the exception: they print their
 * one-line message and return what the process exits with.)
 */
#ifndef TRACECTLD_DAEMON_H
#define TRACECTLD_DAEMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "session.h"
#include "store.h"

#define DAEMON_RATE_WINDOW 10 /* seconds of stored-entry samples for status */

struct conn;
struct sink;
struct user;
struct peerhome;
struct peermember;

struct daemon_options {
    char *socket_path;
    char *data_dir;
    bool system;                /* system-wide: socket 0666, users see only their sessions */
    char *admin_group;          /* members (and root) see every session */
    uint64_t linger_ms;         /* how long a session with missing ranks waits */
    size_t max_conns;           /* connections beyond this get an error */
    size_t max_live;            /* live sessions beyond this: new ones are refused */
    uint64_t max_session_bytes; /* a session over this: new entries dropped and counted */
    uint64_t max_user_bytes;    /* a user over this: new sessions refused */
    uint64_t retain_s;          /* ended sessions older than this are deleted; 0 = keep */
    uint64_t retain_bytes;      /* oldest ended sessions deleted while over this; 0 = no cap */
    uint64_t queue_high;        /* queued entries above which producers are paused */
    uint64_t commit_ms;         /* longest a session's entries wait for a commit (no flush) */
    uint64_t request_ms;        /* a message started and not finished this long: closed; 0 off */
    uint64_t idle_ms;           /* a control connection idle this long: closed; 0 off */
    uint64_t reply_ms;          /* replies pending and none of them read this long: closed */
    uint64_t heavy_entries;     /* a report on a session this big runs in the heavy lane */
    enum store_format format;   /* of new session files (--storage-format) */
    char *clickhouse_url;       /* --clickhouse: the sink (sink.h) is on; NULL: off */
    char *clickhouse_auth;      /* --clickhouse-auth: its user:password file */
    char *clickhouse_host;      /* --clickhouse-host: the name of this host's rows */
    char *peer_listen;          /* --peer-listen ADDR:PORT: the home of members; NULL off */
    char *home;                 /* --home ADDR:PORT: a member of that home; NULL off */
    char *peer_key;             /* --peer-key FILE */
    char *host_name;            /* --host NAME; NULL: the host name */
};

struct daemon {
    uv_loop_t *loop;
    struct daemon_options opt;
    uv_pipe_t listener;
    bool listening;
    uv_poll_t accept_poll;     /* readable: connections to accept (listener.c) */
    uv_timer_t accept_backoff; /* out of descriptors: when to watch again */
    bool accept_paused;        /* backing off; logged once per episode */
    uint64_t cap_logged_ms;    /* when a refused connection was last logged (conn.c) */
    uv_signal_t sigint, sigterm;
    uv_signal_t sigother[3]; /* SIGHUP, SIGUSR1, SIGUSR2: logged and ignored */
    uv_timer_t tick;
    uv_timer_t conn_timer; /* request and idle timeouts (conn_timeouts) */
    struct store *store;
    struct sink *sink; /* NULL: no --clickhouse */
    struct registry reg;
    struct conn *conns; /* every open connection */
    size_t n_conns;
    size_t n_paused; /* producers paused for backpressure */
    /* connections past hello; reply bytes queued on every connection, not yet written */
    size_t n_producers;
    uint64_t unwritten;
    size_t n_reports;   /* report work items in flight */
    size_t n_heavy;     /* of which heavy (control_report_heavy) */
    size_t n_exports;   /* exports streaming */
    struct user *users; /* every user with a connection (users.h) */
    size_t n_users;
    uint64_t users_served; /* report slots given out (users_schedule) */
    bool scheduling;       /* in users_schedule */
    uint64_t trim_bytes;   /* reply bytes freed since the heap was last trimmed (conn_trim) */
    /* Set when stopping: reports and exports on worker threads end at their next check. */
    atomic_bool cancel;
    uint64_t started_ms;
    int64_t admin_gid; /* gid of opt.admin_group, -1 when it does not exist */
    unsigned ticks;
    uint64_t rate[DAEMON_RATE_WINDOW + 1]; /* store_stored() once a second */
    unsigned rate_pos, rate_n;
    bool stopping;
    struct peerhome *peer_home;     /* --peer-listen (peerhome.h); NULL off */
    struct peermember *peer_member; /* --home (peermember.h); NULL off */
    struct peermember *peer_routes; /* homes producers named (hello "home"), a list */
    bool peer_keyed;                /* --peer-key was given and read: peer_psk, peer_host */
    uint8_t peer_psk[32];           /* PEERLINK_PSK_LEN */
    char peer_host[256];            /* --host, else the host name */
};

#endif
