/*
 * cli_conn — one control connection to tracectld (see cli_conn.h).
 */
#include "cli_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli_obj.h"
#include "sock.h"

#define CLI_CONN_CHUNK 65536

const char *cli_conn_path(const char *flag, char *buf, size_t size)
{
    return flag != NULL ? flag : sock_default_path(buf, size);
}

int cli_conn_open(struct cli_conn *c, const char *path)
{
    int rc;

    c->fd = -1;
    c->reader_ready = false;
    c->why[0] = '\0';
    if ((c->fd = sock_connect(path, c->why, sizeof(c->why))) < 0) {
        rc = c->fd;
        c->fd = -1;
        return rc;
    }
    if ((rc = proto_reader_init(&c->reader, CLI_CONN_MAX_REPLY)) < 0) {
        close(c->fd);
        c->fd = -1;
        return rc;
    }
    c->reader_ready = true;
    return 0;
}

void cli_conn_close(struct cli_conn *c)
{
    if (c->reader_ready)
        proto_reader_deinit(&c->reader);
    c->reader_ready = false;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int cli_conn_send(struct cli_conn *c, enum proto_type type, const struct proto_request *req)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = proto_pack_request(&pk, type, req);
    if (rc == 0)
        rc = sock_send_all(c->fd, sb.data, sb.size, -1);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int cli_conn_next(struct cli_conn *c, const msgpack_object **obj, char *msg, size_t size)
{
    struct proto_error err = {0};

    for (;;) {
        int rc = proto_reader_next_object(&c->reader, obj, &err);
        char *buf;
        ssize_t n;

        if (rc > 0)
            return 0;
        if (rc < 0) {
            snprintf(msg, size, "%s: %s", err.code ? err.code : "?", err.message);
            return -EPROTO;
        }
        buf = proto_reader_buffer(&c->reader, CLI_CONN_CHUNK);
        if (buf == NULL)
            return -ENOMEM;
        do
            n = read(c->fd, buf, CLI_CONN_CHUNK);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ECONNRESET;
        proto_reader_commit(&c->reader, (size_t)n);
    }
}

/* Reads until one whole msgpack object has arrived. */
static int cli_conn_read_object(struct cli_conn *c, const msgpack_object **obj,
                                struct cli_conn_reply *rep)
{
    return cli_conn_next(c, obj, rep->message, sizeof(rep->message));
}

static void cli_conn_copy_str(const msgpack_object *o, char *dst, size_t size)
{
    size_t n = 0;

    if (o != NULL && o->type == MSGPACK_OBJECT_STR) {
        n = o->via.str.size < size - 1 ? o->via.str.size : size - 1;
        memcpy(dst, o->via.str.ptr, n);
    }
    dst[n] = '\0';
}

/* Splits ["ok", result] / ["error", {code, message}] into rep. */
static int cli_conn_parse(const msgpack_object *o, struct cli_conn_reply *rep)
{
    const msgpack_object *a;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
        goto bad;
    a = o->via.array.ptr;
    if (cli_obj_str_eq(&a[0], "ok")) {
        rep->ok = true;
        rep->result = &a[1];
        return 0;
    }
    if (!cli_obj_str_eq(&a[0], "error") || a[1].type != MSGPACK_OBJECT_MAP)
        goto bad;
    cli_conn_copy_str(cli_obj_get(&a[1], "code"), rep->code, sizeof(rep->code));
    cli_conn_copy_str(cli_obj_get(&a[1], "message"), rep->message, sizeof(rep->message));
    if (rep->code[0] == '\0')
        snprintf(rep->code, sizeof(rep->code), "unknown");
    return 0;

bad:
    snprintf(rep->message, sizeof(rep->message),
             "unexpected reply (not [\"ok\", result] or [\"error\", {...}])");
    return -EPROTO;
}

int cli_conn_call(struct cli_conn *c, enum proto_type type, const struct proto_request *req,
                  struct cli_conn_reply *rep)
{
    const msgpack_object *o;
    int rc;

    memset(rep, 0, sizeof(*rep));
    rc = cli_conn_send(c, type, req);
    if (rc == 0)
        rc = cli_conn_read_object(c, &o, rep);
    if (rc == 0)
        rc = cli_conn_parse(o, rep);
    if (rc != 0 && rep->message[0] == '\0')
        snprintf(rep->message, sizeof(rep->message), "%s",
                 rc == -ECONNRESET ? "the daemon closed the connection without replying"
                                   : strerror(-rc));
    return rc;
}
