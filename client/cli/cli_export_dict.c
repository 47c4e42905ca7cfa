/*
 * cli_export_dict — the export stream's dictionaries and rows (see
 * cli_export_dict.h).
 */
#include "cli_export_dict.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_obj.h"

/* Row fields, in the order of proto/PROTOCOL.md "export". */
enum {
    ROW_PROCESS,
    ROW_STEP,
    ROW_OP,
    ROW_DEVICE,
    ROW_START,
    ROW_DUR,
    ROW_ELEMENTS,
    ROW_MEM,
    ROW_OUT_SHAPE,
    ROW_IN_SHAPES,
    ROW_NFIELDS, /* the v1 row; an 11th element, the ext map, may follow */
    ROW_EXT = ROW_NFIELDS
};

__attribute__((format(printf, 3, 4))) static int cli_export_bad(char *err, size_t errsize,
                                                                const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errsize, fmt, ap);
    va_end(ap);
    return -EPROTO;
}

/* Any msgpack integer that fits int64. Returns 0 or -EINVAL. */
static int cli_export_int(const msgpack_object *o, int64_t *out)
{
    if (o != NULL && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return 0;
    }
    return -EINVAL;
}

/* A copy of a msgpack string (NULL for nil or another type, or out of memory: see *oom). */
static char *cli_export_strdup(const msgpack_object *o, bool *oom)
{
    char *s;

    if (o == NULL || o->type != MSGPACK_OBJECT_STR)
        return NULL;
    s = malloc(o->via.str.size + 1);
    if (s == NULL) {
        *oom = true;
        return NULL;
    }
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    return s;
}

/* The array `key` of the header whose items are arrays of at least `fields` elements. */
static const msgpack_object_array *cli_export_table(const msgpack_object *header, const char *key,
                                                    uint32_t fields)
{
    const msgpack_object *t = cli_obj_get(header, key);

    if (t == NULL || t->type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    for (uint32_t i = 0; i < t->via.array.size; i++) {
        const msgpack_object *row = &t->via.array.ptr[i];

        if (row->type != MSGPACK_OBJECT_ARRAY || row->via.array.size < fields)
            return NULL;
    }
    return &t->via.array;
}

/* Records id → index; a repeated id is an error. Returns 0, -ENOMEM or -EPROTO. */
static int cli_export_index(struct pairmap *m, const msgpack_object *id, size_t index)
{
    int64_t v;
    bool created;
    uint64_t *slot;

    if (cli_export_int(id, &v) != 0)
        return -EPROTO;
    slot = pairmap_upsert(m, (uint64_t)v, 0, &created);
    if (slot == NULL)
        return -ENOMEM;
    if (!created)
        return -EPROTO;
    *slot = index;
    return 0;
}

static int cli_export_ops(struct cli_export_dict *d, const msgpack_object_array *t)
{
    bool oom = false;
    int rc;

    d->ops = calloc(t->size ? t->size : 1, sizeof(*d->ops));
    if (d->ops == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->size; i++) {
        const msgpack_object *f = t->ptr[i].via.array.ptr;
        struct cli_export_op *op = &d->ops[d->n_ops++];

        op->name = cli_export_strdup(&f[1], &oom);
        op->category = cli_export_strdup(&f[2], &oom);
        if (op->category == NULL && !oom)
            op->category = strdup("");
        if (oom || op->category == NULL)
            return -ENOMEM;
        if (op->name == NULL)
            return -EPROTO;
        if ((rc = cli_export_index(&d->op_idx, &f[0], i)) != 0)
            return rc;
    }
    return 0;
}

static int cli_export_devs(struct cli_export_dict *d, const msgpack_object_array *t)
{
    bool oom = false;
    int rc;

    d->devs = calloc(t->size ? t->size : 1, sizeof(*d->devs));
    if (d->devs == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->size; i++) {
        const msgpack_object *f = t->ptr[i].via.array.ptr;
        struct cli_export_dev *dev = &d->devs[d->n_devs++];

        dev->index = i + 1;
        dev->name = cli_export_strdup(&f[1], &oom);
        if (oom)
            return -ENOMEM;
        if (dev->name == NULL)
            return -EPROTO;
        if ((rc = cli_export_index(&d->dev_idx, &f[0], i)) != 0)
            return rc;
    }
    return 0;
}

/* "rank 0 (node1, pid 4242)"; without a rank "process <id> (...)"; parts left out when unknown. */
static char *cli_export_label(const struct cli_export_proc *p, int64_t id)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    const char *sep = " (";

    if (f == NULL)
        return NULL;
    if (p->has_rank)
        fprintf(f, "rank %" PRId64, p->rank);
    else
        fprintf(f, "process %" PRId64, id);
    if (p->host != NULL) {
        fprintf(f, "%s%s", sep, p->host);
        sep = ", ";
    }
    if (p->has_pid) {
        fprintf(f, "%spid %" PRId64, sep, p->pid);
        sep = ", ";
    }
    if (sep[0] == ',')
        fputc(')', f);
    if (fclose(f) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

static int cli_export_procs(struct cli_export_dict *d, const msgpack_object_array *t)
{
    int64_t max_rank = -1, id = 0;
    bool oom = false;
    int rc;

    d->procs = calloc(t->size ? t->size : 1, sizeof(*d->procs));
    if (d->procs == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->size; i++) {
        const msgpack_object *f = t->ptr[i].via.array.ptr;
        struct cli_export_proc *p = &d->procs[d->n_procs++];

        p->has_rank = cli_export_int(&f[1], &p->rank) == 0 && p->rank >= 0;
        p->has_pid = cli_export_int(&f[2], &p->pid) == 0;
        p->host = cli_export_strdup(&f[3], &oom);
        if (oom)
            return -ENOMEM;
        if (p->has_rank && p->rank > max_rank)
            max_rank = p->rank;
        if ((rc = cli_export_index(&d->proc_idx, &f[0], i)) != 0)
            return rc;
    }
    for (uint32_t i = 0; i < t->size; i++) {
        struct cli_export_proc *p = &d->procs[i];

        cli_export_int(&t->ptr[i].via.array.ptr[0], &id);
        p->view_pid = p->has_rank ? p->rank : max_rank + 1 + id;
        if ((p->label = cli_export_label(p, id)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

static int cli_export_dict_fill(struct cli_export_dict *d, const msgpack_object *header, char *err,
                                size_t errsize)
{
    const msgpack_object *s = cli_obj_get(header, "session");
    const msgpack_object_array *ops = cli_export_table(header, "ops", 3);
    const msgpack_object_array *devs = cli_export_table(header, "devices", 2);
    const msgpack_object_array *procs = cli_export_table(header, "processes", 5);
    bool oom = false;
    int rc;

    if (cli_export_int(cli_obj_get(s, "id"), &d->session_id) != 0 ||
        (d->session_name = cli_export_strdup(cli_obj_get(s, "name"), &oom)) == NULL)
        return oom ? -ENOMEM : cli_export_bad(err, errsize, "the export header has no session");
    if (ops == NULL || devs == NULL || procs == NULL)
        return cli_export_bad(err, errsize,
                              "the export header lacks its ops, devices or "
                              "processes table");
    if ((rc = cli_export_ops(d, ops)) == 0 && (rc = cli_export_devs(d, devs)) == 0)
        rc = cli_export_procs(d, procs);
    if (rc == -EPROTO)
        return cli_export_bad(err, errsize,
                              "the export header has a malformed or repeated "
                              "op, device or process");
    return rc;
}

int cli_export_dict_init(struct cli_export_dict *d, const msgpack_object *header, char *err,
                         size_t errsize)
{
    int rc;

    memset(d, 0, sizeof(*d));
    pairmap_init(&d->op_idx);
    pairmap_init(&d->dev_idx);
    pairmap_init(&d->proc_idx);
    rc = cli_export_dict_fill(d, header, err, errsize);
    if (rc != 0)
        cli_export_dict_deinit(d);
    return rc;
}

void cli_export_dict_deinit(struct cli_export_dict *d)
{
    for (size_t i = 0; i < d->n_ops; i++) {
        free(d->ops[i].name);
        free(d->ops[i].category);
    }
    for (size_t i = 0; i < d->n_devs; i++)
        free(d->devs[i].name);
    for (size_t i = 0; i < d->n_procs; i++) {
        free(d->procs[i].host);
        free(d->procs[i].label);
    }
    free(d->ops);
    free(d->devs);
    free(d->procs);
    free(d->session_name);
    pairmap_deinit(&d->op_idx);
    pairmap_deinit(&d->dev_idx);
    pairmap_deinit(&d->proc_idx);
    memset(d, 0, sizeof(*d));
}

/* A uint field; nil counts as 0 when nil_ok. Returns 0 or -EINVAL. */
static int cli_export_uint(const msgpack_object *o, bool nil_ok, uint64_t *out)
{
    if (nil_ok && o->type == MSGPACK_OBJECT_NIL) {
        *out = 0;
        return 0;
    }
    return cli_obj_u64(o, out);
}

/* Looks up a daemon id in one of the index maps; returns the array index or -1. */
static long cli_export_lookup(const struct pairmap *m, const msgpack_object *id)
{
    int64_t v;
    const uint64_t *idx;

    if (cli_export_int(id, &v) != 0 || (idx = pairmap_get(m, (uint64_t)v, 0)) == NULL)
        return -1;
    return (long)*idx;
}

/* One uint key of a row's ext map into *v (*has: whether it was there). */
static int cli_export_ext_uint(const msgpack_object *ext, const char *key, bool *has, uint64_t *v,
                               char *err, size_t errsize)
{
    const msgpack_object *o = cli_obj_get(ext, key);

    if (o == NULL)
        return 0;
    if (cli_export_uint(o, false, v) != 0)
        return cli_export_bad(err, errsize, "an export row's ext.%s is not a uint", key);
    *has = true;
    return 0;
}

/* The MPI keys of a row's ext map: peer, tag, comm, seq, comm_size. */
static int cli_export_row_mpi(const msgpack_object *ext, struct cli_export_row *r, char *err,
                              size_t errsize)
{
    const msgpack_object *v;
    int rc;

    if ((rc = cli_export_ext_uint(ext, "peer", &r->has_peer, &r->peer, err, errsize)) != 0 ||
        (rc = cli_export_ext_uint(ext, "comm", &r->has_comm, &r->comm, err, errsize)) != 0 ||
        (rc = cli_export_ext_uint(ext, "seq", &r->has_seq, &r->seq, err, errsize)) != 0 ||
        (rc = cli_export_ext_uint(ext, "comm_size", &r->has_comm_size, &r->comm_size, err,
                                  errsize)) != 0)
        return rc;
    if ((v = cli_obj_get(ext, "tag")) != NULL) {
        if (cli_export_int(v, &r->tag) != 0)
            return cli_export_bad(err, errsize, "an export row's ext.tag is not an int64");
        r->has_tag = true;
    }
    return 0;
}

/* The links of a row's ext map: id, parent, launcher (an op of the dictionary). */
static int cli_export_row_links(const struct cli_export_dict *d, const msgpack_object *ext,
                                struct cli_export_row *r, char *err, size_t errsize)
{
    const msgpack_object *v;
    long op;

    if ((v = cli_obj_get(ext, "id")) != NULL) {
        if (cli_export_uint(v, false, &r->id) != 0)
            return cli_export_bad(err, errsize, "an export row's ext.id is not a uint");
        r->has_id = true;
    }
    if ((v = cli_obj_get(ext, "parent")) != NULL) {
        if (cli_export_uint(v, false, &r->parent) != 0)
            return cli_export_bad(err, errsize, "an export row's ext.parent is not a uint");
        r->has_parent = true;
    }
    if ((v = cli_obj_get(ext, "launcher")) != NULL) {
        if ((op = cli_export_lookup(&d->op_idx, v)) < 0)
            return cli_export_bad(err, errsize, "an export row's ext.launcher is an unknown op");
        r->launcher = &d->ops[op];
        r->launcher_index = (size_t)op;
    }
    if ((v = cli_obj_get(ext, "span")) != NULL) {
        uint64_t span;

        if (cli_export_uint(v, false, &span) != 0)
            return cli_export_bad(err, errsize, "an export row's ext.span is not a uint");
        if (span > r->span_ns)
            r->span_ns = span > INT64_MAX ? INT64_MAX : span;
    }
    return 0;
}

int cli_export_row_decode(const struct cli_export_dict *d, const msgpack_object *o,
                          struct cli_export_row *r, char *err, size_t errsize)
{
    const msgpack_object *f;
    long proc, op, dev = -1;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < ROW_NFIELDS)
        return cli_export_bad(err, errsize, "an export row is not an array of %d fields",
                              ROW_NFIELDS);
    f = o->via.array.ptr;
    proc = cli_export_lookup(&d->proc_idx, &f[ROW_PROCESS]);
    op = cli_export_lookup(&d->op_idx, &f[ROW_OP]);
    if (f[ROW_DEVICE].type != MSGPACK_OBJECT_NIL &&
        (dev = cli_export_lookup(&d->dev_idx, &f[ROW_DEVICE])) < 0)
        return cli_export_bad(err, errsize, "an export row names an unknown device");
    if (proc < 0 || op < 0)
        return cli_export_bad(err, errsize, "an export row names an unknown %s",
                              proc < 0 ? "process" : "op");
    if (cli_export_uint(&f[ROW_STEP], false, &r->step) != 0 ||
        cli_export_uint(&f[ROW_START], false, &r->start_ns) != 0 ||
        cli_export_uint(&f[ROW_DUR], false, &r->dur_ns) != 0 ||
        cli_export_uint(&f[ROW_ELEMENTS], true, &r->elements) != 0 ||
        cli_export_uint(&f[ROW_MEM], true, &r->mem_bytes) != 0)
        return cli_export_bad(err, errsize, "an export row has a field of the wrong type");
    r->span_ns = r->dur_ns > INT64_MAX ? INT64_MAX : r->dur_ns;
    r->proc_index = (size_t)proc;
    r->op_index = (size_t)op;
    r->proc = &d->procs[proc];
    r->op = &d->ops[op];
    r->dev = dev < 0 ? NULL : &d->devs[dev];
    r->out_shape = &f[ROW_OUT_SHAPE];
    r->in_shapes = &f[ROW_IN_SHAPES];
    r->has_stream = r->has_checksum = false;
    r->stream = r->checksum = 0;
    r->has_id = r->has_parent = false;
    r->id = r->parent = 0;
    r->has_peer = r->has_tag = r->has_comm = r->has_seq = r->has_comm_size = false;
    r->peer = r->comm = r->seq = r->comm_size = 0;
    r->tag = 0;
    r->launcher = NULL;
    if (o->via.array.size > ROW_EXT && !cli_obj_is_nil(&f[ROW_EXT])) {
        const msgpack_object *v;

        if (f[ROW_EXT].type != MSGPACK_OBJECT_MAP)
            return cli_export_bad(err, errsize, "an export row's ext is not a map");
        if ((v = cli_obj_get(&f[ROW_EXT], "stream")) != NULL) {
            if (cli_export_uint(v, false, &r->stream) != 0)
                return cli_export_bad(err, errsize, "an export row's ext.stream is not a uint");
            r->has_stream = true;
        }
        if ((v = cli_obj_get(&f[ROW_EXT], "checksum")) != NULL) {
            if (cli_export_uint(v, false, &r->checksum) != 0)
                return cli_export_bad(err, errsize, "an export row's ext.checksum is not a uint");
            r->has_checksum = true;
        }
        int rc = cli_export_row_mpi(&f[ROW_EXT], r, err, errsize);

        if (rc != 0)
            return rc;
        return cli_export_row_links(d, &f[ROW_EXT], r, err, errsize);
    }
    return 0;
}

void cli_export_shape_text(const msgpack_object *shape, char *buf, size_t size)
{
    if (cli_obj_is_nil(shape))
        buf[0] = '\0';
    else
        cli_obj_text(shape, buf, size);
}
