/*
 * test_client.c — libtracectl against a protocol peer made here: a thread
 * that owns a Unix socket in a temporary directory, accepts one producer,
 * decodes what it sends with proto_reader, answers hello with welcome
 * (session 7, process 3) and flush with ack, and records every entry, op
 * definition, metadata pair and bye. Tests then compare what arrived with
 * what the library was given, number for number. Each test removes its
 * socket and directory.
 *
 * The peer can stall (stop reading) to make the library's buffers fill, and
 * can refuse hello with an error.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "proto.h"
#include "tracectl.h"

/* The client refuses a metadata key past the daemon's limit: the same limit. */
_Static_assert(PROTO_MAX_META_KEYS == CONN_MAX_META_KEYS, "libtracectl and the daemon agree");

#define PEER_KEEP 8192 /* entries kept in detail; all are counted */
#define PEER_OPS  64

struct got_entry {
    uint64_t step, start, dur, elements, mem;
    uint32_t op;
    bool op_known; /* its op id was defined before the batch that used it */
    bool has_out;
    tc_shape out;
    size_t n_in;
    tc_shape in[TC_MAX_INPUTS];
    char device[32]; /* "" when nil */
};

/*
 * What an entry's raw msgpack says beyond what proto_reader gives the
 * peer: its field count, whether elements and device were nil, and the
 * 10th element (the ext map), decoded here with msgpack-c alone.
 */
struct raw_entry {
    uint32_t fields;
    bool elements_nil, device_nil, ext_map;
    uint32_t has; /* TC_EXT_* bits of the keys present */
    uint64_t stream, peer, comm, seq, checksum, comm_size, span;
    int64_t tag;
};

struct peer {
    char dir[32], path[64];
    int lfd, fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* set by the test */
    bool stalled, refuse, stop;
    bool die; /* close the connection, unacked, on the next batch */
    /* set by the peer thread, under mu */
    int accepted;
    bool hello, bye, eof, died;
    struct proto_hello h; /* copied from the hello */
    char *ops[PEER_OPS], *cats[PEER_OPS];
    size_t n_ops_msgs;
    struct got_entry *got;
    size_t n_got, n_total, n_batches;
    struct proto_kv meta[16];
    size_t n_meta, n_meta_kv; /* the first 16 kept; every pair counted */
    uint64_t flushes, bye_dropped;
    msgpack_unpacker raw; /* the same bytes, for struct raw_entry */
    struct raw_entry *rx;
    size_t n_rx;
};

static struct peer P;

static void clear_env(void)
{
    unsetenv("TRACECTL_DISABLE");
    unsetenv("TRACECTL_BLOCKING");
    unsetenv("TRACECTL_SOCKET");
}

/* A failed assertion skips a test's own cleanup: leave no socket or directory behind anyway. */
static void remove_files(void)
{
    if (P.path[0])
        unlink(P.path);
    if (P.dir[0])
        rmdir(P.dir);
}

TestSuite(client, .init = clear_env, .fini = remove_files, .timeout = 60);

/* ---- the peer ------------------------------------------------------------ */

static void send_packed(int fd, msgpack_sbuffer *sb)
{
    size_t off = 0;

    while (off < sb->size) {
        ssize_t w = send(fd, sb->data + off, sb->size - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    msgpack_sbuffer_clear(sb);
}

/* Decodes a canonical msgpack shape (an array of uint) from the batch blob. */
static void shape_from(const char *p, size_t len, tc_shape *s)
{
    msgpack_unpacked u;
    size_t off = 0;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, p, len, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    s->ndim = u.data.via.array.size;
    for (uint32_t i = 0; i < s->ndim && i < TC_MAX_DIMS; i++)
        s->dims[i] = u.data.via.array.ptr[i].via.u64;
    msgpack_unpacked_destroy(&u);
}

/* The in_shapes blob is an array of shapes: unpack it and re-split each one. */
static size_t in_shapes_from(const char *p, size_t len, tc_shape *in)
{
    msgpack_unpacked u;
    size_t off = 0, n;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, p, len, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    n = u.data.via.array.size;
    for (size_t i = 0; i < n && i < TC_MAX_INPUTS; i++) {
        const msgpack_object *a = &u.data.via.array.ptr[i];
        in[i].ndim = a->via.array.size;
        for (uint32_t d = 0; d < in[i].ndim && d < TC_MAX_DIMS; d++)
            in[i].dims[d] = a->via.array.ptr[d].via.u64;
    }
    msgpack_unpacked_destroy(&u);
    return n;
}

static void peer_batch(struct peer *p, const struct proto_batch *b)
{
    for (size_t i = 0; i < b->n; i++, p->n_total++) {
        const struct proto_entry *e = &b->entries[i];
        struct got_entry *g;

        if (p->n_got == PEER_KEEP)
            continue;
        g = &p->got[p->n_got++];
        memset(g, 0, sizeof(*g));
        *g = (struct got_entry){.step = e->step,
                                .start = e->start_ns,
                                .dur = e->dur_ns,
                                .elements = e->elements,
                                .mem = e->mem_bytes,
                                .op = e->op_id};
        g->op_known = e->op_id < PEER_OPS && p->ops[e->op_id] != NULL;
        if ((g->has_out = e->out_len > 0))
            shape_from(b->blob + e->out_off, e->out_len, &g->out);
        if (e->in_len > 0)
            g->n_in = in_shapes_from(b->blob + e->in_off, e->in_len, g->in);
        if (e->dev_len > 0)
            snprintf(g->device, sizeof(g->device), "%.*s", (int)e->dev_len, b->blob + e->dev_off);
    }
    p->n_batches++;
}

static void raw_ext_map(struct raw_entry *x, const msgpack_object *m)
{
    static const char *const keys[] = {"stream", "peer",     "tag",       "comm",
                                       "seq",    "checksum", "comm_size", "span"};
    static const uint32_t bits[] = {TC_EXT_STREAM, TC_EXT_PEER,     TC_EXT_TAG,       TC_EXT_COMM,
                                    TC_EXT_SEQ,    TC_EXT_CHECKSUM, TC_EXT_COMM_SIZE, TC_EXT_SPAN};

    x->ext_map = true;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
        size_t j = 0;

        cr_assert_eq(k->type, MSGPACK_OBJECT_STR);
        while (j < 8 && (strlen(keys[j]) != k->via.str.size ||
                         memcmp(keys[j], k->via.str.ptr, k->via.str.size) != 0))
            j++;
        cr_assert_lt(j, 8, "unknown ext key %.*s", (int)k->via.str.size, k->via.str.ptr);
        cr_assert_eq(x->has & bits[j], 0, "ext key given twice");
        x->has |= bits[j];
        if (bits[j] == TC_EXT_TAG) {
            cr_assert(v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                      v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
            x->tag = v->via.i64;
            continue;
        }
        cr_assert_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        *(bits[j] == TC_EXT_STREAM     ? &x->stream
          : bits[j] == TC_EXT_PEER     ? &x->peer
          : bits[j] == TC_EXT_COMM     ? &x->comm
          : bits[j] == TC_EXT_SEQ      ? &x->seq
          : bits[j] == TC_EXT_CHECKSUM ? &x->checksum
          : bits[j] == TC_EXT_SPAN     ? &x->span
                                       : &x->comm_size) = v->via.u64;
    }
}

/* Feeds the bytes the peer read to its own unpacker and notes each batch entry's raw form. */
static void raw_feed(struct peer *p, const char *buf, size_t n)
{
    msgpack_unpacked u;

    cr_assert(msgpack_unpacker_reserve_buffer(&p->raw, n));
    memcpy(msgpack_unpacker_buffer(&p->raw), buf, n);
    msgpack_unpacker_buffer_consumed(&p->raw, n);
    msgpack_unpacked_init(&u);
    while (msgpack_unpacker_next(&p->raw, &u) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *m = &u.data, *l;
        if (m->via.array.size < 2 || m->via.array.ptr[0].via.str.size != 5 ||
            memcmp(m->via.array.ptr[0].via.str.ptr, "batch", 5) != 0)
            continue;
        l = &m->via.array.ptr[1];
        for (uint32_t i = 0; i < l->via.array.size && p->n_rx < PEER_KEEP; i++) {
            const msgpack_object *e = &l->via.array.ptr[i];
            struct raw_entry *x = &p->rx[p->n_rx++];

            memset(x, 0, sizeof(*x));
            x->fields = e->via.array.size;
            x->elements_nil = x->fields <= 4 || e->via.array.ptr[4].type == MSGPACK_OBJECT_NIL;
            x->device_nil = x->fields <= 8 || e->via.array.ptr[8].type == MSGPACK_OBJECT_NIL;
            if (x->fields > 9 && e->via.array.ptr[9].type == MSGPACK_OBJECT_MAP)
                raw_ext_map(x, &e->via.array.ptr[9]);
        }
    }
    msgpack_unpacked_destroy(&u);
}

static void peer_hello(struct peer *p, struct proto_msg *m, msgpack_packer *pk)
{
    p->hello = true;
    free(p->h.session), free(p->h.host), free(p->h.device); /* an earlier connection's */
    proto_kv_free(p->h.meta, p->h.n_meta);
    p->h = m->u.hello;
    memset(&m->u.hello, 0, sizeof(m->u.hello)); /* moved into p->h */
    if (p->refuse)
        proto_pack_error(pk, PROTO_E_VERSION, "refused by the test");
    else
        proto_pack_welcome(pk, 7, 3);
}

/* One decoded message, under p->mu; replies go into pk. */
static void peer_handle(struct peer *p, struct proto_msg *m, msgpack_packer *pk)
{
    switch (m->type) {
    case PROTO_HELLO:
        peer_hello(p, m, pk);
        break;
    case PROTO_OPS:
        p->n_ops_msgs++;
        for (size_t i = 0; i < m->u.ops.n; i++) {
            uint32_t id = m->u.ops.defs[i].id;
            cr_assert(id > 0 && id < PEER_OPS && p->ops[id] == NULL, "op id %u", id);
            p->ops[id] = strdup(m->u.ops.defs[i].name);
            p->cats[id] = m->u.ops.defs[i].category ? strdup(m->u.ops.defs[i].category) : NULL;
        }
        break;
    case PROTO_BATCH:
        if (p->die)
            p->died = true;
        else
            peer_batch(p, &m->u.batch);
        break;
    case PROTO_META:
        p->n_meta_kv += m->u.meta.n;
        for (size_t i = 0; i < m->u.meta.n && p->n_meta < 16; i++) {
            p->meta[p->n_meta++] = m->u.meta.kv[i];
            memset(&m->u.meta.kv[i], 0, sizeof(m->u.meta.kv[i])); /* moved */
        }
        break;
    case PROTO_FLUSH:
        p->flushes++;
        proto_pack_ack(pk, m->u.flush_seq, p->n_total);
        break;
    case PROTO_BYE:
        p->bye = true;
        p->bye_dropped = m->u.bye_dropped;
        break;
    default:
        cr_assert_fail("unexpected message %s", proto_type_name(m->type));
    }
}

/* Reads and handles what is there. Returns false at the end of the stream. */
static bool peer_read(struct peer *p, struct proto_reader *r, msgpack_sbuffer *out)
{
    struct proto_error err;
    struct proto_msg m;
    msgpack_packer pk;
    char *buf = proto_reader_buffer(r, 65536);
    ssize_t n;
    int rc;

    cr_assert_not_null(buf);
    n = recv(p->fd, buf, 65536, 0);
    if (n <= 0)
        return false;
    proto_reader_commit(r, (size_t)n);
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    pthread_mutex_lock(&p->mu);
    raw_feed(p, buf, (size_t)n);
    while (!p->died && (rc = proto_reader_next(r, &m, &err)) > 0) {
        peer_handle(p, &m, &pk);
        proto_msg_free(&m);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->died)
        return false; /* the connection ends here: nothing after it is read or acked */
    cr_assert_geq(rc, 0, "peer: %s: %s", err.code, err.message);
    send_packed(p->fd, out);
    return true;
}

static void *peer_thread(void *arg)
{
    struct peer *p = arg;
    struct proto_reader r;
    msgpack_sbuffer out;
    bool stop = false, stalled;

    proto_reader_init(&r, 0);
    msgpack_sbuffer_init(&out);
    while (!stop) {
        struct pollfd pfd = {.fd = p->fd >= 0 ? p->fd : p->lfd, .events = POLLIN};
        int ready = poll(&pfd, 1, 10);

        pthread_mutex_lock(&p->mu);
        stop = p->stop;
        stalled = p->stalled;
        pthread_mutex_unlock(&p->mu);
        if (p->fd >= 0 && stalled) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL); /* data waits: do not spin on it */
            continue;
        }
        if (ready <= 0 || stop)
            continue;
        if (p->fd < 0) {
            p->fd = accept(p->lfd, NULL, NULL);
            pthread_mutex_lock(&p->mu);
            p->accepted++;
            pthread_mutex_unlock(&p->mu);
        } else if (!peer_read(p, &r, &out)) {
            pthread_mutex_lock(&p->mu);
            p->eof = true;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            close(p->fd);
            p->fd = -1;
        }
    }
    msgpack_sbuffer_destroy(&out);
    proto_reader_deinit(&r);
    return NULL;
}

/* Makes the temp dir and the socket (listening unless listen_too is false). */
static void peer_bind(struct peer *p, bool listen_too)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    memset(p, 0, sizeof(*p));
    p->fd = -1;
    snprintf(p->dir, sizeof(p->dir), "/tmp/tc_client_XXXXXX");
    cr_assert_not_null(mkdtemp(p->dir));
    snprintf(p->path, sizeof(p->path), "%s/s.sock", p->dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->path);
    p->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(p->lfd, 0);
    cr_assert_eq(bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (listen_too)
        cr_assert_eq(listen(p->lfd, 4), 0);
}

static void peer_start(struct peer *p)
{
    peer_bind(p, true);
    p->got = calloc(PEER_KEEP, sizeof(*p->got));
    cr_assert_not_null(p->got);
    p->rx = calloc(PEER_KEEP, sizeof(*p->rx));
    cr_assert_not_null(p->rx);
    cr_assert(msgpack_unpacker_init(&p->raw, 65536));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    cr_assert_eq(pthread_create(&p->thread, NULL, peer_thread, p), 0);
}

static void peer_set_stalled(struct peer *p, bool stalled)
{
    pthread_mutex_lock(&p->mu);
    p->stalled = stalled;
    pthread_mutex_unlock(&p->mu);
}

/* Waits (up to 10 s) until the producer has closed its connection. */
static void peer_wait_eof(struct peer *p)
{
    struct timespec dl;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&p->mu);
    while (!p->eof && pthread_cond_timedwait(&p->cv, &p->mu, &dl) == 0)
        ;
    cr_assert(p->eof, "the client did not close its connection");
    pthread_mutex_unlock(&p->mu);
}

static void peer_unlink(struct peer *p)
{
    close(p->lfd);
    unlink(p->path);
    cr_assert_eq(rmdir(p->dir), 0, "the test left files in %s", p->dir);
}

static void peer_stop(struct peer *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    if (p->fd >= 0)
        close(p->fd);
    peer_unlink(p);
    for (size_t i = 0; i < PEER_OPS; i++)
        free(p->ops[i]), free(p->cats[i]);
    for (size_t i = 0; i < p->n_meta; i++) /* p->meta is ours: free what it holds */
        free(p->meta[i].key), free(p->meta[i].type == PROTO_V_STR ? p->meta[i].v.s : NULL);
    free(p->h.session), free(p->h.host), free(p->h.device);
    proto_kv_free(p->h.meta, p->h.n_meta);
    free(p->got);
    free(p->rx);
    msgpack_unpacker_destroy(&p->raw);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* A client of the peer with the given ring size (0: default) and mode. */
static tc_client *open_peer(struct peer *p, size_t ring, int blocking)
{
    tc_options o;
    tc_client *c;
    int err = 1;

    tc_options_init(&o);
    o.socket_path = p->path;
    o.session = "unit";
    o.rank = 2;
    o.world = 4;
    o.device = "gpu:2";
    o.host = "node-a";
    o.blocking = blocking;
    o.ring_entries = ring;
    c = tc_open(&o, &err);
    cr_assert_not_null(c);
    cr_assert_eq(err, 0);
    cr_assert_eq(tc_enabled(c), 1);
    return c;
}

static const char *op_name(struct peer *p, uint32_t id)
{
    return id < PEER_OPS && p->ops[id] ? p->ops[id] : "?";
}

/* ---- hello, ops, metadata ----------------------------------------------- */

Test(client, hello_and_session)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);

    cr_assert_eq(tc_session_id(c), 7);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert(P.hello);
    cr_assert_eq(P.h.proto, 1);
    cr_assert_str_eq(P.h.session, "unit");
    cr_assert_eq(P.h.rank, 2);
    cr_assert_eq(P.h.world, 4);
    cr_assert_eq(P.h.pid, getpid());
    cr_assert_str_eq(P.h.host, "node-a");
    cr_assert_str_eq(P.h.device, "gpu:2");
    cr_assert(P.bye);
    cr_assert_eq(P.bye_dropped, 0);
    cr_assert_eq(P.n_total, 0);
    peer_stop(&P);
}

Test(client, hello_from_environment)
{
    setenv("TRACECTL_SESSION", "env-session", 1);
    setenv("SLURM_JOB_ID", "999", 1);
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    setenv("PMI_SIZE", "16", 1);
    setenv("TRACECTL_DEVICE", "gpu:5", 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    peer_start(&P);
    setenv("TRACECTL_SOCKET", P.path, 1);
    int err = 1;
    tc_client *c = tc_open(NULL, &err);

    cr_assert_eq(err, 0);
    cr_assert_eq(tc_enabled(c), 1);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_str_eq(P.h.session, "env-session");
    cr_assert_eq(P.h.rank, 5);
    cr_assert_eq(P.h.world, 16);
    cr_assert_str_eq(P.h.device, "gpu:5");
    peer_stop(&P);
}

Test(client, op_interning)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t mm = tc_op(c, "matmul"), ar = tc_op_cat(c, "allreduce", "comm");

    cr_assert_neq(mm, 0);
    cr_assert_neq(ar, 0);
    cr_assert_neq(mm, ar);
    cr_assert_eq(tc_op(c, "matmul"), mm, "the same name gives the same id");
    cr_assert_eq(tc_op_cat(c, "allreduce", "comm"), ar);
    cr_assert_eq(tc_op(c, ""), 0);
    cr_assert_eq(tc_op(c, NULL), 0);
    cr_assert_eq(tc_op(c, "bad\xff"), 0, "not UTF-8");
    tc_record(c, ar, 100, 50, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 5000), 0);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_ops_msgs, 2, "each name is defined once");
    cr_assert_str_eq(P.ops[mm], "matmul");
    cr_assert_null(P.cats[mm]);
    cr_assert_str_eq(P.ops[ar], "allreduce");
    cr_assert_str_eq(P.cats[ar], "comm");
    cr_assert_eq(P.n_total, 1);
    cr_assert(P.got[0].op_known, "ops arrive before the batch that uses them");
    cr_assert_eq(P.got[0].op, ar);
    peer_stop(&P);
}

Test(client, metadata)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);

    cr_assert_eq(tc_meta_str(c, "model", "resnet50"), 0);
    cr_assert_eq(tc_meta_int(c, "batch", -64), 0);
    cr_assert_eq(tc_meta_double(c, "lr", 0.125), 0);
    cr_assert_eq(tc_meta_bool(c, "amp", 1), 0);
    cr_assert_eq(tc_meta_str(c, "", "x"), -EINVAL);
    cr_assert_eq(tc_meta_str(c, "k", NULL), -EINVAL);
    cr_assert_eq(tc_flush(c, 5000), 0);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_meta, 4);
    cr_assert_str_eq(P.meta[0].key, "model");
    cr_assert_eq(P.meta[0].type, PROTO_V_STR);
    cr_assert_str_eq(P.meta[0].v.s, "resnet50");
    cr_assert_str_eq(P.meta[1].key, "batch");
    cr_assert_eq(P.meta[1].type, PROTO_V_INT);
    cr_assert_eq(P.meta[1].v.i, -64);
    cr_assert_str_eq(P.meta[2].key, "lr");
    cr_assert_eq(P.meta[2].type, PROTO_V_FLOAT);
    cr_assert_eq(P.meta[2].v.f, 0.125);
    cr_assert_str_eq(P.meta[3].key, "amp");
    cr_assert_eq(P.meta[3].type, PROTO_V_BOOL);
    cr_assert_eq(P.meta[3].v.b, true);
    peer_stop(&P);
}

/* ---- entries -------------------------------------------------------------- */

#define PER_THREAD 3000

struct producer {
    tc_client *c;
    uint32_t op;
    uint64_t base;
    const char *device;
};

/* Entry i of a producer: start base+i*10, dur i+1, mem i*8, out [i, 4], in [[4, i], [2]]. */
static void *produce(void *arg)
{
    struct producer *pr = arg;

    for (uint64_t i = 0; i < PER_THREAD; i++) {
        tc_shape out = {2, {i, 4}}, in[2] = {{2, {4, i}}, {1, {2}}};
        tc_record(pr->c, pr->op, pr->base + i * 10, i + 1, i * 8, &out, in, 2, pr->device);
    }
    return NULL;
}

static void check_produced(struct peer *p, uint32_t op, uint64_t base, const char *device)
{
    uint64_t i = 0;

    for (size_t k = 0; k < p->n_got; k++) {
        const struct got_entry *g = &p->got[k];
        if (g->op != op)
            continue;
        /* One thread's entries keep their order through its ring. */
        cr_assert_eq(g->start, base + i * 10);
        cr_assert_eq(g->dur, i + 1);
        cr_assert_eq(g->mem, i * 8);
        cr_assert_eq(g->step, 5);
        cr_assert(g->op_known);
        cr_assert(g->has_out);
        cr_assert_eq(g->out.ndim, 2);
        cr_assert_eq(g->out.dims[0], i);
        cr_assert_eq(g->out.dims[1], 4);
        cr_assert_eq(g->elements, i * 4, "nil elements: the product of out_shape");
        cr_assert_eq(g->n_in, 2);
        cr_assert_eq(g->in[0].ndim, 2);
        cr_assert_eq(g->in[0].dims[0], 4);
        cr_assert_eq(g->in[0].dims[1], i);
        cr_assert_eq(g->in[1].ndim, 1);
        cr_assert_eq(g->in[1].dims[0], 2);
        cr_assert_str_eq(g->device, device);
        i++;
    }
    cr_assert_eq(i, PER_THREAD);
}

Test(client, two_threads_exact_entries)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    struct producer pr[2] = {{c, tc_op(c, "matmul"), 1000000, ""},
                             {c, tc_op_cat(c, "conv2d", "compute"), 9000000, "gpu:9"}};
    pthread_t th[2];

    tc_set_step(c, 5);
    for (int t = 0; t < 2; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, produce, &pr[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    cr_assert_eq(tc_flush(c, 10000), 0);
    cr_assert_eq(tc_recorded(c), 2 * PER_THREAD);
    cr_assert_eq(tc_dropped(c), 0);
    pthread_mutex_lock(&P.mu);
    cr_assert_eq(P.n_total, 2 * PER_THREAD, "flush returns once all is acked");
    cr_assert_geq(P.flushes, 1);
    pthread_mutex_unlock(&P.mu);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_str_eq(op_name(&P, pr[0].op), "matmul");
    cr_assert_str_eq(op_name(&P, pr[1].op), "conv2d");
    cr_assert_str_eq(P.cats[pr[1].op], "compute");
    check_produced(&P, pr[0].op, pr[0].base, "");
    check_produced(&P, pr[1].op, pr[1].base, "gpu:9");
    cr_assert(P.bye);
    cr_assert_eq(P.bye_dropped, 0);
    peer_stop(&P);
}

Test(client, steps_count_up)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op(c, "layer_norm");

    for (int s = 0; s < 4; s++) {
        tc_record(c, op, (uint64_t)s, 1, 0, NULL, NULL, 0, NULL);
        tc_record(c, op, (uint64_t)s, 2, 0, NULL, NULL, 0, NULL);
        tc_step(c);
    }
    tc_set_step(c, 100);
    tc_record(c, op, 9, 3, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 9);
    for (size_t k = 0; k < 8; k++) {
        cr_assert_eq(P.got[k].step, k / 2);
        cr_assert_eq(P.got[k].dur, k % 2 + 1);
        cr_assert_not(P.got[k].has_out);
        cr_assert_eq(P.got[k].n_in, 0);
        cr_assert_eq(P.got[k].elements, 0);
        cr_assert_str_eq(P.got[k].device, "");
    }
    cr_assert_eq(P.got[8].step, 100);
    peer_stop(&P);
}

Test(client, record_devices)
{
    static const char *const devs[] = {"gpu:1", "gpu:2", NULL, "", "gpu:1", "gpu:10"};
    static const char *const want[] = {"gpu:1", "gpu:2", "", "", "gpu:1", "gpu:10"};
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op(c, "copy");

    for (int i = 0; i < 6; i++)
        tc_record(c, op, 10, (uint64_t)i, 0, NULL, NULL, 0, devs[i]);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(P.got[i].dur, (uint64_t)i);
        cr_assert_str_eq(P.got[i].device, want[i]);
    }
    peer_stop(&P);
}

Test(client, begin_ends_previous)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t a = tc_op(c, "embedding"), b = tc_op(c, "matmul");
    const tc_shape out = {2, {32, 64}}, in[2] = {{2, {32, 128}}, {2, {128, 64}}};
    struct timespec ms = {0, 1000000};
    uint64_t t0 = tc_now_ns(), t1;

    tc_end(c, 1, NULL, NULL, 0); /* nothing open: no entry */
    tc_begin(c, a);
    nanosleep(&ms, NULL);
    tc_begin(c, b); /* ends a, with no shapes */
    nanosleep(&ms, NULL);
    tc_end(c, 8192, &out, in, 2);
    tc_end(c, 1, NULL, NULL, 0); /* already ended: no entry */
    t1 = tc_now_ns();
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 2);
    const struct got_entry *ea = &P.got[0], *eb = &P.got[1];
    cr_assert_str_eq(op_name(&P, ea->op), "embedding");
    cr_assert_str_eq(op_name(&P, eb->op), "matmul");
    /* within 1 µs of the clock: tc_begin/tc_end may read the TSC (tc_clock), converted */
    cr_assert_geq(ea->start + 1000, t0);
    cr_assert_geq(ea->dur, 1000000);
    cr_assert_eq(ea->start + ea->dur, eb->start, "b begins when a ends");
    cr_assert_eq(ea->mem, 0);
    cr_assert_not(ea->has_out);
    cr_assert_eq(ea->n_in, 0);
    cr_assert_geq(eb->dur, 1000000);
    cr_assert_leq(eb->start + eb->dur, t1 + 1000);
    cr_assert_eq(eb->mem, 8192);
    cr_assert_eq(eb->out.ndim, 2);
    cr_assert_eq(eb->out.dims[0], 32);
    cr_assert_eq(eb->out.dims[1], 64);
    cr_assert_eq(eb->elements, 32 * 64);
    cr_assert_eq(eb->n_in, 2);
    cr_assert_eq(eb->in[0].dims[1], 128);
    cr_assert_eq(eb->in[1].dims[0], 128);
    peer_stop(&P);
}

Test(client, deferred_finalize)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t ops[3] = {tc_op(c, "k0"), tc_op(c, "k1"), tc_op(c, "k2")};
    uint64_t end;

    for (int i = 0; i < 3; i++)
        tc_defer(c, ops[i]);
    end = tc_now_ns() + 5000;
    tc_finalize(c, end);
    tc_finalize(c, end + 1); /* nothing pending */
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(P.got[i].op, ops[i]);
        cr_assert_eq(P.got[i].start + P.got[i].dur, end, "dur = end - start exactly");
        cr_assert_geq(P.got[i].dur, 5000);
        if (i > 0)
            cr_assert_geq(P.got[i].start, P.got[i - 1].start);
    }
    peer_stop(&P);
}

/* ---- loss, flow control and failure --------------------------------------- */

#define FLOOD 300000

Test(client, drops_counted_and_sent_in_bye)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 16, 0);
    uint32_t op = tc_op(c, "flood");
    uint64_t dropped;

    peer_set_stalled(&P, true);

    /* The peer reads nothing: the socket and the writer's buffer fill, then
     * the 16-entry ring, and the rest is dropped, never waited for. */
    for (uint64_t i = 0; i < FLOOD; i++)
        tc_record(c, op, i, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 100), -ETIMEDOUT);
    peer_set_stalled(&P, false);
    cr_assert_eq(tc_flush(c, 20000), 0);
    dropped = tc_dropped(c);
    cr_assert_gt(dropped, 0);
    cr_assert_lt(dropped, FLOOD);
    cr_assert_eq(tc_recorded(c), FLOOD);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert(P.bye);
    cr_assert_eq(P.bye_dropped, dropped, "bye carries the exact count");
    cr_assert_eq(P.n_total + dropped, FLOOD, "every entry is either stored or counted");
    peer_stop(&P);
}

/* Steps move while the ring overflows: a received entry always carries the step it was recorded in.
 */
Test(client, steps_stay_exact_through_drops)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 16, 0);
    uint32_t op = tc_op(c, "flood");
    uint64_t dropped;

    peer_set_stalled(&P, true);
    for (uint64_t i = 0; i < FLOOD; i++) {
        if (i % 100 == 0)
            tc_set_step(c, i / 100);
        tc_record(c, op, i, 1, 0, NULL, NULL, 0, NULL);
    }
    peer_set_stalled(&P, false);
    cr_assert_eq(tc_flush(c, 20000), 0);
    dropped = tc_dropped(c);
    cr_assert_eq(tc_recorded(c), FLOOD, "step changes are not entries");
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total + dropped, FLOOD);
    cr_assert_gt(P.n_got, 0);
    for (size_t k = 0; k < P.n_got; k++)
        cr_assert_eq(P.got[k].step, P.got[k].start / 100, "entry %llu",
                     (unsigned long long)P.got[k].start);
    peer_stop(&P);
}

/* A thread's entries take the step current when each is recorded, whoever moved it. */
static void *record_one(void *arg)
{
    struct producer *pr = arg;

    tc_record(pr->c, pr->op, pr->base, 1, 0, NULL, NULL, 0, NULL);
    return NULL;
}

Test(client, steps_across_threads)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    struct producer pr = {c, tc_op(c, "a"), 0, NULL};
    pthread_t th;

    tc_record(c, pr.op, 100, 1, 0, NULL, NULL, 0, NULL); /* main thread, step 0 */
    tc_set_step(c, 3);
    pr.base = 200;
    cr_assert_eq(pthread_create(&th, NULL, record_one, &pr), 0); /* another thread, step 3 */
    pthread_join(th, NULL);
    tc_record(c, pr.op, 300, 1, 0, NULL, NULL, 0, NULL); /* main thread again, step 3 */
    tc_set_step(c, 0);
    tc_record(c, pr.op, 400, 1, 0, NULL, NULL, 0, NULL); /* back to 0 */
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 4);
    for (size_t k = 0; k < 4; k++) {
        uint64_t want = P.got[k].start == 200 || P.got[k].start == 300 ? 3 : 0;
        cr_assert_eq(P.got[k].step, want, "entry %llu", (unsigned long long)P.got[k].start);
    }
    peer_stop(&P);
}

/* op 0 (tc_op's failure value) is dropped and counted; the connection goes on. */
/* ---- the entry extension map (tc_record_ext) -------------------------------- */

Test(client, ext_entries_exact)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op_cat(c, "MPI_Send", "comm");
    tc_ext all = {.has = TC_EXT_STREAM | TC_EXT_PEER | TC_EXT_TAG | TC_EXT_COMM | TC_EXT_SEQ |
                         TC_EXT_CHECKSUM,
                  .stream = 9,
                  .peer = 3,
                  .comm = 0xfedcba9876543210ull,
                  .seq = 4000000000ull,
                  .checksum = UINT64_MAX,
                  .tag = -1};
    tc_ext p2p = {.has = TC_EXT_PEER | TC_EXT_TAG,
                  .peer = 1ull << 40,
                  .tag = INT64_MIN,
                  .comm = 77 /* not in has: not sent */};
    tc_ext coll = {.has = TC_EXT_COMM | TC_EXT_SEQ, .comm = 5, .seq = 0};
    tc_ext none = {.has = 0, .peer = 1};
    tc_shape out = {1, {6}};

    tc_record_ext(c, op, 100, 1, 80, 10, NULL, NULL, 0, NULL, &all);
    tc_record_ext(c, op, 101, 2, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &p2p);
    tc_step(c);
    tc_record_ext(c, op, 102, 3, 56, 7, NULL, NULL, 0, NULL, NULL);
    tc_record_ext(c, op, 103, 4, 24, TC_ELEMENTS_NONE, &out, NULL, 0, NULL, &none);
    tc_record_ext(c, op, 104, 5, 48, 6, &out, &out, 1, "gpu:7", &coll);
    cr_assert_eq(tc_recorded(c), 5);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 5);
    cr_assert_eq(P.n_rx, 5);
    for (size_t k = 0; k < 5; k++) {
        cr_assert_eq(P.got[k].start, 100 + k);
        cr_assert_eq(P.got[k].dur, 1 + k);
        cr_assert_eq(P.got[k].step, k < 2 ? 0 : 1);
        cr_assert_eq(P.got[k].op, op);
    }
    /* all fields, elements given, the hello device */
    cr_assert_eq(P.rx[0].fields, 10);
    cr_assert_eq(P.rx[0].has, all.has);
    cr_assert_eq(P.rx[0].stream, 9);
    cr_assert_eq(P.rx[0].peer, 3);
    cr_assert_eq(P.rx[0].comm, 0xfedcba9876543210ull);
    cr_assert_eq(P.rx[0].seq, 4000000000ull);
    cr_assert_eq(P.rx[0].checksum, UINT64_MAX);
    cr_assert_eq(P.rx[0].tag, -1);
    cr_assert(P.rx[0].device_nil);
    cr_assert_eq(P.got[0].elements, 10);
    cr_assert_eq(P.got[0].mem, 80);
    /* only peer and tag; elements nil */
    cr_assert_eq(P.rx[1].fields, 10);
    cr_assert_eq(P.rx[1].has, TC_EXT_PEER | TC_EXT_TAG);
    cr_assert_eq(P.rx[1].peer, 1ull << 40);
    cr_assert_eq(P.rx[1].tag, INT64_MIN);
    cr_assert(P.rx[1].elements_nil);
    /* elements without ext: nine fields, no map */
    cr_assert_eq(P.rx[2].fields, 9);
    cr_assert_not(P.rx[2].ext_map);
    cr_assert_not(P.rx[2].elements_nil);
    cr_assert_eq(P.got[2].elements, 7);
    cr_assert_eq(P.got[2].mem, 56);
    /* neither: exactly tc_record's entry (elements from the shape) */
    cr_assert_eq(P.rx[3].fields, 8);
    cr_assert(P.rx[3].elements_nil);
    cr_assert_eq(P.got[3].elements, 6);
    cr_assert(P.got[3].has_out);
    /* shapes, a device of its own and a collective's fields */
    cr_assert_eq(P.rx[4].fields, 10);
    cr_assert_eq(P.rx[4].has, TC_EXT_COMM | TC_EXT_SEQ);
    cr_assert_eq(P.rx[4].comm, 5);
    cr_assert_eq(P.rx[4].seq, 0);
    cr_assert_str_eq(P.got[4].device, "gpu:7");
    cr_assert_eq(P.got[4].n_in, 1);
    cr_assert_eq(P.got[4].in[0].dims[0], 6);
    cr_assert_eq(P.got[4].elements, 6);
    peer_stop(&P);
}

/*
 * A 16-slot ring that fills while the peer stalls: an ext entry's two extra
 * slots wrap around the ring's end with everything else, and each entry
 * arrives with its own fields (seq = tag = start) or is dropped and counted.
 */
Test(client, ext_entries_through_wraps_and_drops)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 16, 0);
    uint32_t op = tc_op(c, "MPI_Allreduce");
    uint64_t dropped;

    peer_set_stalled(&P, true);
    for (uint64_t i = 0; i < FLOOD; i++) {
        tc_ext x = {.has = TC_EXT_SEQ | TC_EXT_TAG | TC_EXT_COMM,
                    .seq = i,
                    .tag = -(int64_t)i,
                    .comm = i * 3};
        if (i % 1000 == 0)
            tc_set_step(c, i / 1000);
        tc_record_ext(c, op, i, 1, i * 8, i, NULL, NULL, 0, NULL, &x);
    }
    peer_set_stalled(&P, false);
    cr_assert_eq(tc_flush(c, 20000), 0);
    dropped = tc_dropped(c);
    cr_assert_gt(dropped, 0);
    cr_assert_eq(tc_recorded(c), FLOOD, "step markers and ext slots are not entries");
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total + dropped, FLOOD);
    cr_assert_eq(P.bye_dropped, dropped);
    cr_assert_gt(P.n_rx, 0);
    for (size_t k = 0; k < P.n_rx; k++) {
        uint64_t i = P.got[k].start;
        cr_assert_eq(P.rx[k].seq, i);
        cr_assert_eq(P.rx[k].tag, -(int64_t)i);
        cr_assert_eq(P.rx[k].comm, i * 3);
        cr_assert_eq(P.got[k].elements, i);
        cr_assert_eq(P.got[k].mem, i * 8);
        cr_assert_eq(P.got[k].step, i / 1000);
    }
    peer_stop(&P);
}

Test(client, ext_elements_over_int64_dropped_and_counted)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op(c, "MPI_Send");
    tc_ext x = {.has = TC_EXT_PEER, .peer = 1};

    tc_record_ext(c, op, 1, 1, 0, (uint64_t)INT64_MAX + 1, NULL, NULL, 0, NULL, &x);
    tc_record_ext(c, op, 2, 1, 0, UINT64_MAX - 1, NULL, NULL, 0, NULL, NULL);
    tc_record_ext(c, op, 3, 1, 0, INT64_MAX, NULL, NULL, 0, NULL, &x);
    cr_assert_eq(tc_flush(c, 5000), 0, "the connection stays up");
    cr_assert_eq(tc_dropped(c), 2);
    cr_assert_eq(tc_recorded(c), 3);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 1);
    cr_assert_eq(P.got[0].start, 3);
    cr_assert_eq(P.got[0].elements, INT64_MAX);
    cr_assert_eq(P.bye_dropped, 2);
    peer_stop(&P);
}

/*
 * comm_size goes in the third ext slot, alone or beside the others, through
 * ring wraps; 0 and 2^31 (the daemon would refuse them) are dropped and
 * counted, the connection stays up.
 */
Test(client, ext_comm_size_sent_and_out_of_range_dropped)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 8, 0);
    uint32_t op = tc_op(c, "MPI_Allreduce");
    tc_ext x = {.has = TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE, .comm = 7};

    for (uint64_t i = 0; i < 10; i++) { /* 4 slots each in a ring of 8: wraps */
        x.seq = i, x.comm_size = 1 + i;
        tc_record_ext(c, op, 10 + i, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
        cr_assert_eq(tc_flush(c, 5000), 0);
    }
    x.comm_size = 0;
    tc_record_ext(c, op, 1, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    x.comm_size = (uint64_t)INT32_MAX + 1;
    tc_record_ext(c, op, 2, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    x = (tc_ext){.has = TC_EXT_COMM_SIZE, .comm_size = INT32_MAX};
    tc_record_ext(c, op, 3, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    cr_assert_eq(tc_flush(c, 5000), 0, "the connection stays up");
    cr_assert_eq(tc_dropped(c), 2);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_rx, 11);
    for (size_t k = 0; k < 10; k++) {
        cr_assert_eq(P.got[k].start, 10 + k);
        cr_assert_eq(P.rx[k].has, TC_EXT_COMM | TC_EXT_SEQ | TC_EXT_COMM_SIZE);
        cr_assert_eq(P.rx[k].comm, 7);
        cr_assert_eq(P.rx[k].seq, k);
        cr_assert_eq(P.rx[k].comm_size, 1 + k);
    }
    cr_assert_eq(P.got[10].start, 3);
    cr_assert_eq(P.rx[10].has, TC_EXT_COMM_SIZE);
    cr_assert_eq(P.rx[10].comm_size, INT32_MAX);
    cr_assert_eq(P.bye_dropped, 2);
    peer_stop(&P);
}

/*
 * span (an op's whole interval beside its self time) goes in the third ext
 * slot's last word, alone or beside comm_size, through ring wraps, over the
 * whole uint64 range.
 */
Test(client, ext_span_sent)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 8, 1);
    uint32_t op = tc_op(c, "aten::linear");
    tc_ext x = {.has = TC_EXT_SPAN | TC_EXT_COMM_SIZE, .comm_size = 3};

    for (uint64_t i = 0; i < 6; i++) { /* 4 slots each in a ring of 8: wraps */
        x.span = i == 5 ? UINT64_MAX : 1000 + i;
        tc_record_ext(c, op, 10 + i, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
        cr_assert_eq(tc_flush(c, 5000), 0);
    }
    x = (tc_ext){.has = TC_EXT_SPAN, .span = 7};
    tc_record_ext(c, op, 20, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_rx, 7);
    for (size_t k = 0; k < 6; k++) {
        cr_assert_eq(P.got[k].start, 10 + k);
        cr_assert_eq(P.rx[k].has, TC_EXT_SPAN | TC_EXT_COMM_SIZE);
        cr_assert_eq(P.rx[k].span, k == 5 ? UINT64_MAX : 1000 + k);
        cr_assert_eq(P.rx[k].comm_size, 3);
    }
    cr_assert_eq(P.rx[6].has, TC_EXT_SPAN);
    cr_assert_eq(P.rx[6].span, 7);
    peer_stop(&P);
}

/* An ext entry needs three slots: a 2-slot ring drops it (and counts it) even in blocking mode. */
Test(client, ext_entry_larger_than_ring)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 2, 1);
    uint32_t op = tc_op(c, "MPI_Barrier");
    tc_ext x = {.has = TC_EXT_SEQ, .seq = 1};

    tc_record_ext(c, op, 1, 1, 0, 0, NULL, NULL, 0, NULL, &x);
    tc_record(c, op, 2, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_dropped(c), 1);
    cr_assert_eq(tc_recorded(c), 2);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 1);
    cr_assert_eq(P.got[0].start, 2);
    cr_assert_eq(P.bye_dropped, 1);
    peer_stop(&P);
}

/* Without a daemon each tc_record_ext counts one drop, as tc_record does. */
Test(client, ext_offline_counts_drops)
{
    tc_options o;
    tc_ext x = {.has = TC_EXT_PEER, .peer = 1};
    int err = 0;

    peer_bind(&P, false);
    tc_options_init(&o);
    o.socket_path = P.path;
    tc_client *c = tc_open(&o, &err);
    cr_assert_eq(err, -ECONNREFUSED);
    tc_record_ext(c, 1, 0, 1, 0, 4, NULL, NULL, 0, NULL, &x);
    tc_record_ext(c, 1, 0, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, NULL);
    tc_record_ext(NULL, 1, 0, 1, 0, 4, NULL, NULL, 0, NULL, &x);
    cr_assert_eq(tc_dropped(c), 2);
    cr_assert_eq(tc_close(c), 0);
    peer_unlink(&P);
}

Test(client, op_zero_is_dropped_and_counted)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op(c, "real");

    tc_record(c, 0, 1, 1, 0, NULL, NULL, 0, NULL);
    tc_begin(c, 0);
    tc_end(c, 0, NULL, NULL, 0);
    tc_record(c, op, 2, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), 0);
    cr_assert_eq(tc_dropped(c), 2);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 1);
    cr_assert_eq(P.got[0].start, 2);
    cr_assert_eq(P.bye_dropped, 2);
    peer_stop(&P);
}

/* ---- what the daemon would refuse, refused at the call (issue 26 #3) ------- */

/*
 * An op id the client never defined would end the connection (unknown_op) and
 * lose what follows: every call that makes an entry refuses it, says why, and
 * counts it; the entries around it arrive.
 */
Test(client, undefined_op_refused_at_the_call_stream_goes_on)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t a = tc_op(c, "a"), b = tc_op(c, "b");
    tc_ext x = {.has = TC_EXT_STREAM, .stream = 1};

    cr_assert_eq(a, 1);
    cr_assert_eq(b, 2);
    cr_assert_str_eq(tc_last_refusal(), "", "nothing refused yet");
    tc_record(c, a, 1, 1, 0, NULL, NULL, 0, NULL);
    tc_record(c, b + 1, 2, 1, 0, NULL, NULL, 0, NULL); /* the next id: not handed out */
    cr_assert_str_eq(tc_last_refusal(), "tc_record: op 3 was never defined on this client (it "
                                        "defined 2); the entry is dropped");
    tc_record(c, 99999, 3, 1, 0, NULL, NULL, 0, NULL);
    tc_begin(c, 77);
    cr_assert_str_eq(tc_last_refusal(), "tc_begin: op 77 was never defined on this client (it "
                                        "defined 2); the entry is dropped");
    tc_end(c, 0, NULL, NULL, 0); /* nothing open: nothing more dropped */
    tc_record_ext(c, 50, 4, 1, 0, TC_ELEMENTS_NONE, NULL, NULL, 0, NULL, &x);
    cr_assert_str_eq(tc_last_refusal(), "tc_record_ext: op 50 was never defined on this client "
                                        "(it defined 2); the entry is dropped");
    tc_defer(c, 60);
    cr_assert_str_eq(tc_last_refusal(), "tc_defer: op 60 was never defined on this client (it "
                                        "defined 2); the entry is dropped");
    tc_finalize(c, 100);
    tc_record(c, 0, 5, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_str_eq(tc_last_refusal(), "tc_record: op 0 is no op (tc_op's answer for a name it "
                                        "refused); the entry is dropped");
    tc_record(c, b, 6, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), 0, "the connection goes on");
    cr_assert_eq(tc_dropped(c), 6);
    cr_assert_eq(tc_recorded(c), 8);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 2);
    cr_assert_eq(P.got[0].start, 1);
    cr_assert_eq(P.got[1].start, 6);
    cr_assert(P.got[0].op_known && P.got[1].op_known);
    cr_assert_eq(P.bye_dropped, 6);
    peer_stop(&P);
}

/* A string of n bytes of c (caller frees). */
static char *str_of(size_t n, char ch)
{
    char *s = malloc(n + 1);

    cr_assert_not_null(s);
    memset(s, ch, n);
    s[n] = '\0';
    return s;
}

/* Names over the protocol's limits, empty or not UTF-8: refused, naming the limit. */
Test(client, names_over_the_limit_refused_naming_it)
{
    char *name = str_of(PROTO_MAX_NAME + 1, 'n'), *cat = str_of(PROTO_MAX_CATEGORY + 1, 'c');
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op;

    cr_assert_eq(tc_op(c, name), 0);
    cr_assert_str_eq(tc_last_refusal(), "tc_op: the op name is 1025 bytes, over the limit of 1024");
    cr_assert_eq(tc_op(c, ""), 0);
    cr_assert_str_eq(tc_last_refusal(), "tc_op: the op name is empty");
    cr_assert_eq(tc_op(c, "bad\xff"), 0);
    cr_assert_str_eq(tc_last_refusal(), "tc_op: the op name is not valid UTF-8");
    cr_assert_eq(tc_op_cat(c, "x", cat), 0);
    cr_assert_str_eq(tc_last_refusal(), "tc_op: the category is 33 bytes, over the limit of 32");
    name[PROTO_MAX_NAME] = '\0'; /* 1024 bytes: at the limit */
    cr_assert_neq(op = tc_op(c, name), 0);

    name[PROTO_MAX_NAME] = 'n';
    tc_record(c, op, 1, 1, 0, NULL, NULL, 0, name);
    cr_assert_str_eq(tc_last_refusal(), "tc_record: the device name is 1025 bytes, over the limit "
                                        "of 1024; the entry is dropped");
    cr_assert_eq(tc_meta_int(c, name, 1), -EINVAL);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: the key is 1025 bytes, over the limit of 1024");
    cr_assert_eq(tc_meta_str(c, "k", name), -EINVAL);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: the value is 1025 bytes, over the limit of 1024");
    cr_assert_eq(tc_meta_str(c, "k\xff", "v"), -EINVAL);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: the key is not valid UTF-8");
    cr_assert_eq(tc_meta_str(c, "k", "v\xff"), -EINVAL);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: the value is not valid UTF-8");
    cr_assert_eq(tc_meta_str(c, "k", NULL), -EINVAL);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: the value is missing (NULL)");
    cr_assert_eq(tc_meta_str(c, "k", ""), 0, "an empty value is one");
    tc_record(c, op, 2, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), 0, "the connection goes on");
    cr_assert_eq(tc_dropped(c), 1);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_ops_msgs, 1, "only the name at the limit was sent");
    cr_assert_eq(strlen(P.ops[op]), PROTO_MAX_NAME);
    cr_assert_eq(P.n_meta_kv, 1);
    cr_assert_eq(P.n_total, 1);
    cr_assert_eq(P.got[0].start, 2);
    peer_stop(&P);
    free(name);
    free(cat);
}

/* The daemon takes 1,024 distinct metadata keys per process and ends the connection past it. */
Test(client, metadata_keys_past_the_daemon_limit_refused)
{
    char key[32];

    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    for (int i = 0; i < PROTO_MAX_META_KEYS; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        cr_assert_eq(tc_meta_int(c, key, i), 0, "key %d", i);
    }
    cr_assert_eq(tc_meta_int(c, "one-more", 1), -ENOSPC);
    cr_assert_str_eq(tc_last_refusal(), "tc_meta: a new key past the limit of 1024 distinct keys "
                                        "per process; not sent");
    cr_assert_eq(tc_meta_int(c, "k5", 7), 0, "a key set before may be set again");
    cr_assert_eq(tc_flush(c, 10000), 0);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_meta_kv, PROTO_MAX_META_KEYS + 1);
    peer_stop(&P);
}

/* What the hello would carry is checked before connecting; only the valid open connects. */
Test(client, hello_the_daemon_would_refuse_is_refused_at_open)
{
    static const char *const env[] = {
        "RANK",         "OMPI_COMM_WORLD_RANK", "PMI_RANK",
        "SLURM_PROCID", "WORLD_SIZE",           "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",     "SLURM_NTASKS",         NULL};
    static const struct {
        int64_t rank, world;
        const char *env_rank, *env_world;
        size_t session, device;
        const char *why;
    } cases[] = {
        {4, 4, NULL, NULL, 4, 0, "rank 4 is outside 0 <= rank < world (4)"},
        {-1, -1, "5", "2", 4, 0, "rank 5 is outside 0 <= rank < world (2)"},
        {-1, -1, NULL, "0", 4, 0, "world 0 is outside 1 <= world <= 2147483647"},
        {(int64_t)1 << 40, -1, NULL, NULL, 4, 0, "rank 1099511627776 is over 2147483647"},
        {0, 1, NULL, NULL, 257, 0, "the session name is 257 bytes, over the limit of 256"},
        {0, 1, NULL, NULL, 4, 1025, "the device name is 1025 bytes, over the limit of 1024"},
    };
    char want[256], *session, *device;
    const char *why;
    tc_options o;
    int err;

    for (int i = 0; env[i] != NULL; i++)
        unsetenv(env[i]);
    peer_start(&P);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tc_options_init(&o);
        o.socket_path = P.path;
        o.rank = cases[i].rank;
        o.world = cases[i].world;
        o.session = session = str_of(cases[i].session, 's');
        o.device = device = cases[i].device ? str_of(cases[i].device, 'd') : NULL;
        if (cases[i].env_rank)
            setenv("RANK", cases[i].env_rank, 1);
        if (cases[i].env_world)
            setenv("WORLD_SIZE", cases[i].env_world, 1);
        snprintf(want, sizeof(want), "tc_open: %s (options or environment)", cases[i].why);
        err = 0;
        tc_client *c = tc_open(&o, &err);
        cr_assert_eq(err, -EINVAL, "case %zu", i);
        cr_assert_eq(tc_enabled(c), 0);
        cr_assert_eq(tc_last_error(c, &why), -EINVAL);
        cr_assert_str_eq(why, want);
        cr_assert_str_eq(tc_last_refusal(), want);
        cr_assert_eq(tc_close(c), 0);
        o.blocking = 1;
        cr_assert_null(tc_open(&o, &err), "blocking mode: no client");
        cr_assert_eq(err, -EINVAL);
        unsetenv("RANK");
        unsetenv("WORLD_SIZE");
        free(session);
        free(device);
    }
    tc_options_init(&o);
    o.socket_path = P.path;
    o.session = session = str_of(PROTO_MAX_SESSION, 's'); /* at the limit */
    o.rank = 3;
    o.world = 4;
    tc_client *c = tc_open(&o, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.accepted, 1, "only the valid hello connected");
    cr_assert_eq(strlen(P.h.session), PROTO_MAX_SESSION);
    peer_stop(&P);
    free(session);
}

/* Shape pairs that differ only in where a shape is, or past the limits, stay apart. */
Test(client, shape_pairs_kept_apart_and_cut_to_limits)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 0, 0);
    uint32_t op = tc_op(c, "s");
    tc_shape three = {1, {3}}, big = {TC_MAX_DIMS + 4, {0}}, many[TC_MAX_INPUTS + 3];

    for (size_t d = 0; d < TC_MAX_DIMS + 4 && d < TC_MAX_DIMS; d++)
        big.dims[d] = d + 1;
    for (size_t i = 0; i < TC_MAX_INPUTS + 3; i++)
        many[i] = (tc_shape){1, {i + 10}};
    tc_record(c, op, 0, 1, 0, &three, NULL, 0, NULL);               /* out [3] */
    tc_record(c, op, 1, 1, 0, NULL, &three, 1, NULL);               /* in [[3]] */
    tc_record(c, op, 2, 1, 0, &three, &three, 1, NULL);             /* both */
    tc_record(c, op, 3, 1, 0, &big, NULL, 0, NULL);                 /* ndim cut to TC_MAX_DIMS */
    tc_record(c, op, 4, 1, 0, NULL, many, TC_MAX_INPUTS + 3, NULL); /* inputs cut */
    tc_record(c, op, 5, 1, 0, &three, NULL, 0, NULL);               /* out [3] again */
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 6);
    const struct got_entry *g = P.got;
    cr_assert(g[0].has_out && g[0].out.ndim == 1 && g[0].out.dims[0] == 3 && g[0].n_in == 0);
    cr_assert(!g[1].has_out && g[1].n_in == 1 && g[1].in[0].dims[0] == 3);
    cr_assert(g[2].has_out && g[2].n_in == 1);
    cr_assert_eq(g[3].out.ndim, TC_MAX_DIMS);
    cr_assert_eq(g[3].out.dims[TC_MAX_DIMS - 1], TC_MAX_DIMS);
    cr_assert_eq(g[4].n_in, TC_MAX_INPUTS);
    for (size_t i = 0; i < TC_MAX_INPUTS; i++)
        cr_assert_eq(g[4].in[i].dims[0], i + 10);
    cr_assert(g[5].has_out && g[5].out.dims[0] == 3 && g[5].n_in == 0);
    peer_stop(&P);
}

/* Past SHAPES_MAX (4096) distinct pairs, entries go without shapes; the first keep theirs. */
Test(client, shape_table_full_leaves_shapes_out)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 8192, 1);
    uint32_t op = tc_op(c, "s");

    for (uint64_t i = 0; i < 4100; i++) {
        tc_shape out = {1, {i}};
        tc_record(c, op, i, 1, 0, &out, NULL, 0, NULL);
    }
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 4100);
    for (size_t k = 0; k < 4100; k++) {
        cr_assert_eq(P.got[k].start, k);
        if (k < 4096)
            cr_assert(P.got[k].has_out && P.got[k].out.dims[0] == k, "entry %zu", k);
        else
            cr_assert_not(P.got[k].has_out, "entry %zu", k);
    }
    peer_stop(&P);
}

/* Thread t's entries: 2 rounds of 1000 pairs, out [i, t % 2], in [[i]]: threads t and t + 2 share
 * theirs, so that two threads meet each new pair at about the same time. */
static void *produce_pairs(void *arg)
{
    struct producer *pr = arg;
    uint64_t t = pr->base / 1000000;

    for (uint64_t round = 0; round < 2; round++)
        for (uint64_t i = 0; i < 1000; i++) {
            tc_shape out = {2, {i, t % 2}}, in = {1, {i}};
            tc_record(pr->c, pr->op, pr->base + round * 1000 + i, 1, 0, &out, &in, 1, NULL);
        }
    return NULL;
}

/* Pairs interned by several threads at once, more than fit any small cache, each sent right. */
Test(client, shape_pairs_from_threads_at_once)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 4096, 1);
    uint32_t op = tc_op(c, "s");
    struct producer pr[4];
    pthread_t th[4];

    for (int t = 0; t < 4; t++) {
        pr[t] = (struct producer){c, op, (uint64_t)t * 1000000, NULL};
        cr_assert_eq(pthread_create(&th[t], NULL, produce_pairs, &pr[t]), 0);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 8000);
    for (size_t k = 0; k < 8000; k++) {
        const struct got_entry *g = &P.got[k];
        uint64_t t = g->start / 1000000, i = g->start % 1000;
        cr_assert(g->has_out && g->out.ndim == 2 && g->out.dims[0] == i && g->out.dims[1] == t % 2,
                  "entry %zu", k);
        cr_assert(g->n_in == 1 && g->in[0].ndim == 1 && g->in[0].dims[0] == i, "entry %zu", k);
    }
    peer_stop(&P);
}

static void *produce_blocking(void *arg)
{
    struct producer *pr = arg;

    for (uint64_t i = 0; i < 20000; i++)
        tc_record(pr->c, pr->op, pr->base + i, i, 0, NULL, NULL, 0, NULL);
    return NULL;
}

Test(client, blocking_mode_loses_nothing)
{
    peer_start(&P);
    tc_client *c = open_peer(&P, 16, 1);
    struct producer pr[2] = {{c, tc_op(c, "a"), 0, NULL}, {c, tc_op(c, "b"), 0, NULL}};
    pthread_t th[2];

    for (int t = 0; t < 2; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, produce_blocking, &pr[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    cr_assert_eq(tc_close(c), 0);
    peer_wait_eof(&P);
    cr_assert_eq(P.n_total, 40000);
    cr_assert_eq(P.bye_dropped, 0);
    peer_stop(&P);
}

Test(client, refused_hello)
{
    peer_start(&P);
    pthread_mutex_lock(&P.mu);
    P.refuse = true;
    pthread_mutex_unlock(&P.mu);
    tc_options o;
    int err = 0;

    tc_options_init(&o);
    o.socket_path = P.path;
    tc_client *c = tc_open(&o, &err);
    cr_assert_not_null(c);
    cr_assert_eq(err, -EPROTO);
    cr_assert_eq(tc_enabled(c), 0);
    cr_assert_eq(tc_session_id(c), -1);
    cr_assert_eq(tc_close(c), 0);
    o.blocking = 1;
    cr_assert_null(tc_open(&o, &err));
    cr_assert_eq(err, -EPROTO);
    peer_stop(&P);
}

Test(client, disabled_sends_nothing)
{
    peer_start(&P);
    setenv("TRACECTL_DISABLE", "1", 1);
    tc_options o;
    int err = 1;
    struct timespec wait = {0, 50000000};

    tc_options_init(&o);
    o.socket_path = P.path;
    tc_client *c = tc_open(&o, &err);
    cr_assert_not_null(c);
    cr_assert_eq(err, 0);
    cr_assert_eq(tc_enabled(c), 0);
    cr_assert_eq(tc_op(c, "matmul"), 0);
    tc_begin(c, 1);
    tc_end(c, 0, NULL, NULL, 0);
    tc_record(c, 1, 0, 1, 0, NULL, NULL, 0, NULL);
    tc_defer(c, 1);
    tc_finalize(c, 10);
    tc_step(c);
    cr_assert_eq(tc_meta_int(c, "k", 1), -ENOTCONN);
    cr_assert_eq(tc_flush(c, 10), -ENOTCONN);
    cr_assert_eq(tc_dropped(c), 0, "a disabled client counts nothing");
    cr_assert_eq(tc_recorded(c), 0);
    cr_assert_eq(tc_session_id(c), -1);
    cr_assert_eq(tc_close(c), 0);
    nanosleep(&wait, NULL);
    pthread_mutex_lock(&P.mu);
    cr_assert_eq(P.accepted, 0, "no connection was made");
    pthread_mutex_unlock(&P.mu);
    peer_stop(&P);
}

/* Records 6 entries' worth on an offline client: 3 records, begin-begin-end, a defer. */
static void record_six(tc_client *c)
{
    for (int i = 0; i < 3; i++)
        tc_record(c, 1, 0, 1, 0, NULL, NULL, 0, NULL);
    tc_end(c, 0, NULL, NULL, 0); /* nothing open */
    tc_begin(c, 1);
    tc_begin(c, 2);
    tc_end(c, 0, NULL, NULL, 0);
    tc_defer(c, 1);
    tc_finalize(c, tc_now_ns());
}

Test(client, no_daemon_counts_drops)
{
    struct peer *p = &P;
    tc_options o;
    int err = 0;

    /* A socket file nobody listens on, then no socket file at all. */
    peer_bind(p, false);
    tc_options_init(&o);
    o.socket_path = p->path;
    tc_client *c = tc_open(&o, &err);
    cr_assert_not_null(c);
    cr_assert_eq(err, -ECONNREFUSED);
    cr_assert_eq(tc_enabled(c), 0);
    record_six(c);
    cr_assert_eq(tc_dropped(c), 6);
    cr_assert_eq(tc_flush(c, 10), -ENOTCONN);
    cr_assert_eq(tc_close(c), 0);
    peer_unlink(p);

    c = tc_open(&o, &err);
    cr_assert_eq(err, -ENOENT);
    cr_assert_eq(tc_enabled(c), 0);
    cr_assert_eq(tc_session_id(c), -1);
    record_six(c);
    record_six(c);
    cr_assert_eq(tc_dropped(c), 12);
    cr_assert_eq(tc_close(c), 0);

    o.blocking = 1;
    err = 0;
    cr_assert_null(tc_open(&o, &err), "blocking mode: no client without a daemon");
    cr_assert_eq(err, -ENOENT);
}

/*
 * Issue 10 #8, issue 26 #4: when the connection breaks, every entry not
 * acknowledged as stored is settled — dropped when it never went out whole
 * (the rings, the output buffer), unconfirmed when the socket took it — and
 * everything recorded after is dropped: recorded = stored + dropped +
 * unconfirmed, nothing pending.
 */
Test(client, broken_connection_counts_every_unacked_entry)
{
    struct tc_stats st = TC_STATS_INIT;
    const char *why;

    peer_start(&P);
    tc_client *c = open_peer(&P, 4096, 0);
    uint32_t op = tc_op(c, "matmul");
    for (int i = 0; i < 100; i++)
        tc_record(c, op, (uint64_t)i, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), 0);
    pthread_mutex_lock(&P.mu);
    P.die = true;
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < 500; i++)
        tc_record(c, op, (uint64_t)i, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), -ENOTCONN);
    cr_assert_eq(tc_stats(c, &st), 0);
    cr_assert_eq(st.stored, 100);
    cr_assert_eq(st.dropped + st.unconfirmed, 500, "none of the 500 was acked");
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.sent, 100 + st.unconfirmed);
    cr_assert_eq(tc_dropped(c), st.dropped);
    cr_assert_lt(tc_last_error(c, &why), 0);
    cr_assert_not_null(strstr(why, "connection"), "%s", why);
    for (int i = 0; i < 50; i++)
        tc_record(c, op, (uint64_t)i, 1, 0, NULL, NULL, 0, NULL);
    cr_assert_eq(tc_flush(c, 10000), -ENOTCONN);
    cr_assert_eq(tc_dropped(c), st.dropped + 50);
    cr_assert_eq(tc_recorded(c), 650);
    cr_assert_eq(tc_stats(c, &st), 0);
    cr_assert_eq(st.stored + st.dropped + st.unconfirmed, 650);
    pthread_mutex_lock(&P.mu);
    cr_assert_eq(P.n_total, 100, "the peer stored only the acked 100");
    pthread_mutex_unlock(&P.mu);
    tc_close(c);
    peer_stop(&P);
}

Test(client, null_client)
{
    tc_begin(NULL, 1);
    tc_end(NULL, 0, NULL, NULL, 0);
    tc_record(NULL, 1, 0, 1, 0, NULL, NULL, 0, NULL);
    tc_defer(NULL, 1);
    tc_finalize(NULL, 1);
    tc_step(NULL);
    cr_assert_eq(tc_op(NULL, "x"), 0);
    cr_assert_eq(tc_meta_bool(NULL, "x", 1), -ENOTCONN);
    cr_assert_eq(tc_flush(NULL, 10), -ENOTCONN);
    cr_assert_eq(tc_dropped(NULL), 0);
    cr_assert_eq(tc_recorded(NULL), 0);
    cr_assert_eq(tc_session_id(NULL), -1);
    cr_assert_eq(tc_enabled(NULL), 0);
    cr_assert_eq(tc_close(NULL), 0);
}
