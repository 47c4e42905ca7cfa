/*
 * cli_conn — one control connection from the CLI to tracectld: find the
 * socket, connect, send one request, read one reply.
 *
 * Requests are packed with proto_pack_request() into a msgpack_sbuffer and
 * written whole; the reply is framed by a struct proto_reader allowing
 * CLI_CONN_MAX_REPLY bytes (reports can be large) and split into
 * ["ok", result] or ["error", {"code", "message"}]. The result object is
 * borrowed from the connection's reader: it stays valid until the next
 * cli_conn_call() or cli_conn_close().
 *
 * Blocking I/O on the calling thread; no timeouts (a report may take the
 * daemon a while). SIGPIPE is avoided with MSG_NOSIGNAL.
 */
#ifndef TRACECTL_CLI_CONN_H
#define TRACECTL_CLI_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include <msgpack.h>

#include "proto.h"

#define CLI_CONN_MAX_REPLY ((size_t)64 << 20)

struct cli_conn {
    int fd;
    bool reader_ready;
    struct proto_reader reader;
    char why[512]; /* why cli_conn_open failed (sock_connect's reason) */
};

struct cli_conn_reply {
    bool ok;                      /* "ok": result is set; "error": code and message are */
    const msgpack_object *result; /* borrowed, see above */
    char code[64];
    char message[512];
};

/*
 * The socket path: flag when not NULL, else sock_default_path() (sock.h)
 * in buf. Returns flag or buf.
 */
const char *cli_conn_path(const char *flag, char *buf, size_t size);

/*
 * Connects to the Unix socket at path with sock_connect() (sock.h). Returns
 * 0, or a negative errno with the reason in c->why: -ENOENT /
 * -ECONNREFUSED mean no daemon listens there, -ENAMETOOLONG a path too long
 * for sockaddr_un, -EPERM when the socket may be another user's, -ENOMEM;
 * others as lstat(2) or connect(2). On error c is left closed
 * (cli_conn_close is still safe).
 */
int cli_conn_open(struct cli_conn *c, const char *path);

/*
 * The next whole message on the connection (for a request answered by several,
 * like export), borrowed from its reader until the next call. Returns 0, or
 * -EPROTO (why in msg), -ECONNRESET (the daemon closed), -ENOMEM, or what
 * read(2) failed with.
 */
int cli_conn_next(struct cli_conn *c, const msgpack_object **obj, char *msg, size_t size);

/* Closes the socket and frees the reader; safe on a failed or closed connection. */
void cli_conn_close(struct cli_conn *c);

/*
 * Sends one request and waits for its reply. Returns 0 with *rep filled
 * (ok or error), or a negative errno with a reason in rep->message:
 * -EPROTO (the reply is not msgpack or not ["ok", x] / ["error", {...}]),
 * -ECONNRESET (the daemon closed the connection before replying), -ENOMEM,
 * or what write(2)/read(2) failed with.
 */
int cli_conn_call(struct cli_conn *c, enum proto_type type, const struct proto_request *req,
                  struct cli_conn_reply *rep);

#endif
