/* live.c — see live.h. */
#include "live.h"

#include "session.h"

static void live_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
    proto_pack_str(pk, key);
    msgpack_pack_uint64(pk, v);
}

static void live_session(msgpack_packer *pk, const struct session *s)
{
    const char *why = session_cut_reason(s->interrupted);

    msgpack_pack_map(pk, 9);
    proto_pack_str(pk, "id");
    msgpack_pack_int64(pk, s->id);
    proto_pack_str(pk, "name");
    proto_pack_str(pk, s->name);
    proto_pack_str(pk, "state");
    proto_pack_str(pk, s->live ? "live" : "ended");
    live_u64(pk, "processes", s->processes);
    live_u64(pk, "connected", s->live ? s->connected : 0);
    live_u64(pk, "entries", s->entries);
    live_u64(pk, "dropped", s->dropped);
    proto_pack_str(pk, "interrupted");
    if (s->interrupted != 0)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    proto_pack_str(pk, "interrupted_reason");
    if (why != NULL)
        proto_pack_str(pk, why);
    else
        msgpack_pack_nil(pk);
}

/* Every connected producer of s, by process id (connections are listed newest first). */
static void live_processes(msgpack_packer *pk, struct daemon *d, const struct session *s)
{
    size_t n = 0;

    for (const struct conn *c = d->conns; c != NULL; c = c->next)
        n += c->producer && c->session == s && !c->closed;
    msgpack_pack_array(pk, n);
    for (const struct conn *c = d->conns; c != NULL; c = c->next) {
        if (!c->producer || c->session != s || c->closed)
            continue;
        msgpack_pack_map(pk, 5);
        proto_pack_str(pk, "process_id");
        msgpack_pack_int64(pk, c->process_id);
        proto_pack_str(pk, "rank");
        if (c->rank >= 0)
            msgpack_pack_int64(pk, c->rank);
        else
            msgpack_pack_nil(pk);
        proto_pack_str(pk, "pid");
        msgpack_pack_int64(pk, c->pid);
        live_u64(pk, "entries", c->enqueued);
        proto_pack_str(pk, "step");
        if (c->has_step)
            msgpack_pack_uint64(pk, c->step);
        else
            msgpack_pack_nil(pk);
    }
}

/* Every op of s with calls, in the order of the name table: [name, calls, total_ns]. */
static void live_ops(msgpack_packer *pk, const struct session *s)
{
    const struct strmap *m = &s->ops;
    size_t n = 0;

    for (size_t i = 0; s->op_counts != NULL && i < m->cap; i++)
        n +=
            m->keys[i] != NULL && m->vals[i] < s->n_op_counts && s->op_counts[m->vals[i]].calls > 0;
    msgpack_pack_array(pk, n);
    for (size_t i = 0; s->op_counts != NULL && i < m->cap; i++) {
        const struct session_op_count *k;

        if (m->keys[i] == NULL || m->vals[i] >= s->n_op_counts)
            continue;
        k = &s->op_counts[m->vals[i]];
        if (k->calls == 0)
            continue;
        msgpack_pack_array(pk, 3);
        msgpack_pack_str(pk, m->lens[i]);
        msgpack_pack_str_body(pk, m->keys[i], m->lens[i]);
        msgpack_pack_uint64(pk, k->calls);
        msgpack_pack_uint64(pk, k->total_ns);
    }
}

void live_reply(struct conn *c, struct session *s)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_ok_header(&pk);
    msgpack_pack_map(&pk, 4);
    proto_pack_str(&pk, "session");
    live_session(&pk, s);
    /* the daemon's monotonic clock, so that a client divides by the time between answers */
    live_u64(&pk, "now_ns", session_mono_ns());
    proto_pack_str(&pk, "processes");
    live_processes(&pk, c->d, s);
    proto_pack_str(&pk, "ops");
    live_ops(&pk, s);
    conn_send(c, &sb);
}
