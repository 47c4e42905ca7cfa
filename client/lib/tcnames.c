/*
 * tcnames.c — what is named once and referred to by number: op names (and
 * their categories), device names, and metadata, each checked against the
 * protocol's limits before it is queued for the writer thread under the
 * client's mutex.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcint.h"

static int grow(void *arrp, size_t *cap, size_t n)
{
    void **arr = arrp;
    size_t ncap;
    void *p;

    if (n < *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    p = realloc(*arr, ncap * sizeof(char *));
    if (p == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Room for op n in both ops and cats (which share cap_ops). 0 or -ENOMEM. */
static int grow_ops(tc_client *c)
{
    size_t cap = c->cap_ops;

    if (c->n_ops < cap)
        return 0;
    if (grow(&c->cats, &cap, c->n_ops) < 0)
        return -ENOMEM;
    return grow(&c->ops, &c->cap_ops, c->n_ops); /* grows to the same cap as cats */
}

int tcnames_check(const char *what, const char *s, size_t min, size_t max, char *why, size_t len)
{
    size_t n;

    if (s == NULL) {
        snprintf(why, len, "%s is missing (NULL)", what);
        return -EINVAL;
    }
    if ((n = strlen(s)) < min) {
        snprintf(why, len, "%s is empty", what);
        return -EINVAL;
    }
    if (n > max) {
        snprintf(why, len, "%s is %zu bytes, over the limit of %zu", what, n, max);
        return -EINVAL;
    }
    if (!proto_utf8_valid(s, n)) {
        snprintf(why, len, "%s is not valid UTF-8", what);
        return -EINVAL;
    }
    return 0;
}

uint32_t tc_op_cat(tc_client *c, const char *name, const char *category)
{
    struct proto_opdef def;
    msgpack_packer pk;
    uint32_t id = 0;
    char why[160];

    if (c == NULL || c->disabled)
        return 0;
    /* The daemon refuses the whole ops message (and closes the connection) for a bad name or
     * category: those get no id. */
    if (tcnames_check("the op name", name, 1, PROTO_MAX_NAME, why, sizeof(why)) < 0 ||
        (category != NULL &&
         tcnames_check("the category", category, 1, PROTO_MAX_CATEGORY, why, sizeof(why)) < 0)) {
        tcclient_refuse("tc_op: %s", why);
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_ops && id == 0; i++)
        if (strcmp(c->ops[i], name) == 0)
            id = (uint32_t)i + 1;
    if (id == 0 && c->n_ops < DROP_CHUNK * DROP_CHUNKS &&
        atomic_load(&c->drops[c->n_ops / DROP_CHUNK]) == NULL)
        /* the drops of the ids from here on; without it they count only in the total */
        atomic_store(&c->drops[c->n_ops / DROP_CHUNK], calloc(DROP_CHUNK, sizeof(struct op_drop)));
    if (id == 0 && grow_ops(c) == 0 && (c->ops[c->n_ops] = strdup(name)) != NULL) {
        c->cats[c->n_ops] = category ? strdup(category) : NULL;
        id = (uint32_t)++c->n_ops;
        def = (struct proto_opdef){.id = id, .name = (char *)name, .category = (char *)category};
        msgpack_packer_init(&pk, &c->control, msgpack_sbuffer_write);
        proto_pack_ops(&pk, &def, 1);
        /* Recording threads may name it from now on (tcrecord.c op_known). */
        atomic_store_explicit(&c->n_ops_pub, id, memory_order_release);
    }
    pthread_mutex_unlock(&c->mu);
    if (id == 0)
        tcclient_refuse("tc_op: out of memory");
    return id;
}

uint32_t tc_op(tc_client *c, const char *name)
{
    return tc_op_cat(c, name, NULL);
}

/*
 * Index+1 of a device name in the client's table, or DEV_BAD for a name the
 * daemon would refuse (over PROTO_MAX_NAME bytes, not UTF-8), a full table or
 * ENOMEM: the writer drops and counts that entry. The lock (which the writer
 * holds while it drains) is taken only when the name is not the one this
 * thread named last: the client's copies never move or change before
 * tc_close, so the ring may keep a pointer to one.
 */
uint32_t tcnames_device(tc_client *c, struct ring *r, const char *name)
{
    uint32_t id = 0;
    char why[160];

    if (r->dev_str != NULL && strcmp(r->dev_str, name) == 0)
        return r->dev_id;
    if (tcnames_check("the device name", name, 1, PROTO_MAX_NAME, why, sizeof(why)) < 0) {
        tcclient_refuse("tc_record: %s; the entry is dropped", why);
        return DEV_BAD;
    }
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_devs && id == 0; i++)
        if (strcmp(c->devs[i], name) == 0)
            id = (uint32_t)i + 1;
    if (id == 0 && c->n_devs < DEVS_MAX && grow(&c->devs, &c->cap_devs, c->n_devs) == 0 &&
        (c->devs[c->n_devs] = strdup(name)) != NULL)
        id = (uint32_t)++c->n_devs;
    if (id != 0) {
        r->dev_str = c->devs[id - 1];
        r->dev_id = id;
    }
    pthread_mutex_unlock(&c->mu);
    if (id == 0)
        tcclient_refuse("tc_record: no room for another device name (at most %d per client, or "
                        "out of memory); the entry is dropped",
                        DEVS_MAX);
    return id != 0 ? id : DEV_BAD;
}

/*
 * Whether key is one this process has set, else takes note of it: 0, or
 * -ENOSPC past PROTO_MAX_META_KEYS (the daemon would end the connection) or
 * -ENOMEM. Under c->mu.
 */
static int meta_key(tc_client *c, const char *key)
{
    char *copy;

    for (size_t i = 0; i < c->n_meta_keys; i++)
        if (strcmp(c->meta_keys[i], key) == 0)
            return 0;
    if (c->n_meta_keys == PROTO_MAX_META_KEYS) {
        tcclient_refuse("tc_meta: a new key past the limit of %d distinct keys per process; "
                        "not sent",
                        PROTO_MAX_META_KEYS);
        return -ENOSPC;
    }
    if ((copy = strdup(key)) == NULL ||
        (c->n_meta_keys == c->n_meta_alloc &&
         grow(&c->meta_keys, &c->cap_meta_keys, c->n_meta_alloc) < 0)) {
        free(copy);
        tcclient_refuse("tc_meta: out of memory");
        return -ENOMEM;
    }
    if (c->n_meta_keys == c->n_meta_alloc)
        c->n_meta_alloc++;
    else
        free(c->meta_keys[c->n_meta_keys]); /* a forked child's, from its parent */
    c->meta_keys[c->n_meta_keys++] = copy;
    return 0;
}

static int meta(tc_client *c, struct proto_kv *kv)
{
    msgpack_packer pk;
    char why[160];
    int rc;

    if (c == NULL || c->disabled)
        return -ENOTCONN;
    if (tcnames_check("the key", kv->key, 1, PROTO_MAX_NAME, why, sizeof(why)) < 0 ||
        (kv->type == PROTO_V_STR &&
         tcnames_check("the value", kv->v.s, 0, PROTO_MAX_NAME, why, sizeof(why)) < 0)) {
        tcclient_refuse("tc_meta: %s", why);
        return -EINVAL;
    }
    pthread_mutex_lock(&c->mu);
    if ((rc = meta_key(c, kv->key)) == 0) {
        msgpack_packer_init(&pk, &c->control, msgpack_sbuffer_write);
        rc = proto_pack_meta(&pk, kv, 1);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_meta_str(tc_client *c, const char *key, const char *value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_STR, .v.s = (char *)value};
    return meta(c, &kv);
}

int tc_meta_int(tc_client *c, const char *key, int64_t value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_INT, .v.i = value};
    return meta(c, &kv);
}

int tc_meta_double(tc_client *c, const char *key, double value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_FLOAT, .v.f = value};
    return meta(c, &kv);
}

int tc_meta_bool(tc_client *c, const char *key, int value)
{
    struct proto_kv kv = {.key = (char *)key, .type = PROTO_V_BOOL, .v.b = value != 0};
    return meta(c, &kv);
}
