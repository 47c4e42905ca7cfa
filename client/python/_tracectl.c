/*
 * _tracectl.c — the CPython extension behind the `tracectl` package: a thin
 * binding of libtracectl (tracectl.h) through the Python C API.
 *
 * It owns two types. Client wraps one tc_client and keeps a dict of the op
 * names it interned (name → id), so that recording by name costs a dict
 * lookup, not a lock. Region is what `with client.op(...)` enters: it reads
 * the clock on __enter__ and records one complete entry (tc_record) on
 * __exit__, so nested regions each record their own span; tc_begin/tc_end
 * are not used because a begin ends the thread's previous op.
 *
 * Nesting: each thread keeps the chain of its open regions (region_top,
 * innermost first, borrowed: a region unlinks itself on exit and on
 * dealloc). A region entered inside another of the same client is sent with
 * the outer one's id as its `parent`, the outer one with that `id`
 * (tc_region_id, handed out only when a region gets one inside it), through
 * tc_record_ext (PROTOCOL.md "Links between entries"); a region with neither
 * is a plain tc_record, as before. Regions left in another order than they
 * were entered (coroutines) are unlinked wherever they are in the chain.
 * Client.record() takes the ext keys as keywords (stream, peer, comm, seq,
 * id, parent, comm_size, span, and checksum): with any of them it is a tc_record_ext, else a
 * plain tc_record; region_id() hands out tc_region_id()s for bindings above
 * this one (the torch bridge's profiler mode links its module ranges so).
 *
 * op() is the hot path (see docs/BENCHMARKS.md): its keywords are matched by
 * pointer to interned names, a Region embeds its shapes and freed Regions
 * are kept on a free list, and a client remembers its last op name and the
 * exact tuples of its last shapes by identity (shape_memo), so that a loop
 * of `with tc.op("matmul", out_shape=(64, 64), ...)` reads no dict and
 * parses no tuple after its first pass.
 *
 * Every call runs under the GIL, which also guards a client against being
 * closed while another thread records on it: close() takes the pointer out of
 * the object before it releases the GIL to flush. After close() a client
 * records nothing and reports the counts it had when it closed.
 *
 * Errors are tracectl.Error, an OSError whose errno is the library's
 * (positive) errno, with `code` the errno's name and `message` what failed
 * (with tc_last_error()'s text when the client is still there). flush() and
 * close() never raise one unless asked (strict=True): they return a status
 * dict (status_new) with the error in it, because a stopped or lost daemon
 * must not end the program it observes. Arguments the daemon would refuse
 * (an op id this client never defined, names, categories, meta, session,
 * rank and world outside proto.h's limits or with a NUL) raise ValueError,
 * TypeError or OverflowError at the call, with a message cut to a line.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"
#include "tracectl.h"

static PyObject *tc_error; /* tracectl.Error */

/* ---- errors --------------------------------------------------------------- */

/*
 * A tracectl.Error for the negative errno err, about what, with detail (the
 * library's tc_last_error() text; NULL or "": none) after it. Returns a new
 * reference, or NULL with an exception set.
 */
static PyObject *make_err(int err, const char *what, const char *detail)
{
    PyObject *exc, *errmod, *names, *code = NULL, *msg;
    int e = err < 0 ? -err : err;

    exc = PyObject_CallFunction(tc_error, "is", e, strerror(e));
    if (exc == NULL)
        return NULL;
    errmod = PyImport_ImportModule("errno");
    if (errmod != NULL) {
        names = PyObject_GetAttrString(errmod, "errorcode");
        PyObject *key = PyLong_FromLong(e);
        if (names != NULL && key != NULL)
            code = PyDict_GetItemWithError(names, key); /* borrowed: errno.errorcode keeps it */
        Py_XDECREF(key);
        Py_XDECREF(names);
        Py_DECREF(errmod);
    }
    PyErr_Clear();
    if (code == NULL)
        code = Py_None;
    if (detail != NULL && detail[0] != '\0')
        msg = PyUnicode_FromFormat("%s: %s (%.300s)", what, strerror(e), detail);
    else
        msg = PyUnicode_FromFormat("%s: %s", what, strerror(e));
    if (msg == NULL || PyObject_SetAttrString(exc, "code", code) < 0 ||
        PyObject_SetAttrString(exc, "message", msg) < 0) {
        Py_XDECREF(msg);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(msg);
    return exc;
}

/* Raises tracectl.Error for the negative errno err, about what. Returns NULL. */
static PyObject *raise_err(int err, const char *what)
{
    PyObject *exc = make_err(err, what, NULL);

    if (exc != NULL) {
        PyErr_SetObject(tc_error, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* ---- argument checks -------------------------------------------------------- */

/*
 * What the daemon would refuse is refused here, at the call, because one bad
 * message sent ends the connection and loses everything after it (PROTOCOL.md
 * Part 1, "Limits"). The limits are proto.h's; a message quotes at most the
 * first SHORT_CHARS characters of what it refuses, so that a 10 MiB name
 * gives a one-line error.
 */
#define SHORT_CHARS 40

/* repr() of s, cut to SHORT_CHARS characters with "..." after. New ref or NULL. */
static PyObject *short_repr(PyObject *s)
{
    PyObject *head, *r;

    if (!PyUnicode_Check(s)) { /* an int's repr may be long too */
        if ((r = PyObject_Repr(s)) == NULL || PyUnicode_GET_LENGTH(r) <= SHORT_CHARS)
            return r;
        head = PyUnicode_Substring(r, 0, SHORT_CHARS);
        Py_DECREF(r);
        if (head == NULL)
            return NULL;
        r = PyUnicode_FromFormat("%U...", head);
    } else if (PyUnicode_GET_LENGTH(s) <= SHORT_CHARS) {
        return PyObject_Repr(s);
    } else {
        if ((head = PyUnicode_Substring(s, 0, SHORT_CHARS)) == NULL)
            return NULL;
        r = PyUnicode_FromFormat("%R...", head);
    }
    Py_DECREF(head);
    return r;
}

/*
 * Checks that o is a str of min..max bytes of UTF-8 without a NUL; what names
 * it in the error ("op name", "category", ...). Returns its UTF-8 (owned by
 * o), or NULL with a TypeError or ValueError set.
 */
static const char *checked_str(PyObject *o, const char *what, Py_ssize_t min, Py_ssize_t max)
{
    const char *s;
    PyObject *r;
    Py_ssize_t n;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(o, &n)) == NULL)
        return NULL;
    if (n >= min && n <= max && memchr(s, '\0', (size_t)n) == NULL)
        return s;
    if ((r = short_repr(o)) == NULL)
        return NULL;
    if (n < min || n > max)
        PyErr_Format(PyExc_ValueError, "%s %U is %zd bytes of UTF-8: the limit is %zd..%zd bytes",
                     what, r, n, min, max);
    else
        PyErr_Format(PyExc_ValueError, "%s %U contains a NUL character (not allowed)", what, r);
    Py_DECREF(r);
    return NULL;
}

/* An optional str argument checked as checked_str() (NULL when absent or None). 0 or -1. */
static int opt_checked_str(PyObject *o, const char *what, Py_ssize_t min, Py_ssize_t max,
                           const char **s)
{
    *s = NULL;
    if (o == NULL || o == Py_None)
        return 0;
    *s = checked_str(o, what, min, max);
    return *s != NULL ? 0 : -1;
}

/* ---- shapes --------------------------------------------------------------- */

/*
 * One dimension: an int in 0 .. 2^64 - 1 (one above INT64_MAX is taken, and
 * the library drops and counts the entry, as for a C caller). 0, or -1 with a
 * TypeError or OverflowError set.
 */
static int dim_from(PyObject *o, uint64_t *d)
{
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "a shape dimension must be an int, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *d = PyLong_AsUnsignedLongLong(o);
    if (*d == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "shape dimension %R is out of range (0 .. 2**64-1)", o);
        return -1;
    }
    return 0;
}

/*
 * Fills s from a tuple or list of ints, read in place; any other sequence (a
 * subclass too, which may iterate its own way) goes through PySequence_Fast,
 * as before. No Python code runs while the items are read (dim_from calls no
 * __index__), so a list cannot change under the loop. 0, or -1 with an
 * exception set.
 */
static int shape_from(PyObject *o, tc_shape *s)
{
    PyObject *seq = NULL, **items;
    Py_ssize_t n;
    int rc = 0;

    if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o) &&
        (seq = o = PySequence_Fast(o, "a shape must be a sequence of ints")) == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(o);
    items = PySequence_Fast_ITEMS(o);
    if (n > TC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "a shape has at most %d dimensions, not %zd", TC_MAX_DIMS,
                     n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; i < n && rc == 0; i++)
        rc = dim_from(items[i], &s->dims[i]);
    s->ndim = (uint32_t)n;
    Py_XDECREF(seq);
    return rc;
}

/*
 * The shapes of one entry, parsed from out (a shape or None) and ins (a
 * sequence of shapes, or None; past TC_MAX_INPUTS they are left out, as the
 * library does).
 */
struct shapes {
    tc_shape out;
    tc_shape in[TC_MAX_INPUTS];
    size_t n_in;
    int has_out;
};

static int shapes_from(PyObject *out, PyObject *ins, struct shapes *sh)
{
    PyObject *seq = NULL, *item;
    int rc = 0;

    sh->has_out = 0;
    sh->n_in = 0;
    if (out != NULL && out != Py_None) {
        if (shape_from(out, &sh->out) < 0)
            return -1;
        sh->has_out = 1;
    }
    if (ins == NULL || ins == Py_None)
        return 0;
    if (!PyTuple_CheckExact(ins) && !PyList_CheckExact(ins) &&
        (seq = ins = PySequence_Fast(ins, "in_shapes must be a sequence of shapes")) == NULL)
        return -1;
    /* A shape that is neither tuple nor list may run Python code that changes
     * a list of them: each item is held while read, and the size re-read. */
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(ins) && sh->n_in < TC_MAX_INPUTS;
         i++) {
        item = PySequence_Fast_GET_ITEM(ins, i);
        Py_INCREF(item);
        if ((rc = shape_from(item, &sh->in[sh->n_in])) == 0)
            sh->n_in++;
        Py_DECREF(item);
    }
    Py_XDECREF(seq);
    return rc;
}

/* Copies the dimensions of src that count into dst. */
static void shape_copy(tc_shape *dst, const tc_shape *src)
{
    dst->ndim = src->ndim;
    for (uint32_t d = 0; d < src->ndim; d++)
        dst->dims[d] = src->dims[d];
}

static void shapes_copy(struct shapes *dst, const struct shapes *src)
{
    dst->has_out = src->has_out;
    if (src->has_out)
        shape_copy(&dst->out, &src->out);
    dst->n_in = src->n_in;
    for (size_t i = 0; i < src->n_in; i++)
        shape_copy(&dst->in[i], &src->in[i]);
}

/*
 * The shapes last parsed on a client, by the identity of the exact tuples
 * they came from: a tuple of ints never changes, and a literal shape in a
 * loop is the same constant tuple at each pass, so the next region with the
 * same tuples (in_shapes itself may be a new list of them) copies the parsed
 * dimensions instead of reading them again. Holds its tuples (so that their
 * addresses cannot be reused); exact tuples only, as a subclass could refer
 * back to the client.
 */
struct shape_memo {
    PyObject *out;               /* NULL: no out_shape */
    PyObject *in[TC_MAX_INPUTS]; /* n_in of them */
    size_t n_in;
    int has_in; /* in_shapes was given (it may be empty) */
    int valid;
    struct shapes sh;
};

/* Whether (out, ins) are the memo's tuples. */
static int memo_hit(const struct shape_memo *m, PyObject *out, PyObject *ins)
{
    PyObject **items;

    if (!m->valid || m->out != (out == Py_None ? NULL : out))
        return 0;
    if (ins == NULL || ins == Py_None)
        return !m->has_in;
    if (!m->has_in || (!PyTuple_CheckExact(ins) && !PyList_CheckExact(ins)) ||
        PySequence_Fast_GET_SIZE(ins) != (Py_ssize_t)m->n_in)
        return 0;
    items = PySequence_Fast_ITEMS(ins);
    for (size_t i = 0; i < m->n_in; i++)
        if (items[i] != m->in[i])
            return 0;
    return 1;
}

static void memo_clear(struct shape_memo *m)
{
    Py_CLEAR(m->out);
    for (size_t i = 0; i < m->n_in; i++)
        Py_CLEAR(m->in[i]);
    m->n_in = 0;
    m->valid = 0;
}

/* Remembers sh as parsed from (out, ins) when they are exact tuples. */
static void memo_keep(struct shape_memo *m, PyObject *out, PyObject *ins, const struct shapes *sh)
{
    PyObject **items = NULL;
    Py_ssize_t n = 0;

    if (out != NULL && out != Py_None && !PyTuple_CheckExact(out))
        return;
    if (ins != NULL && ins != Py_None) {
        if (!PyTuple_CheckExact(ins) && !PyList_CheckExact(ins))
            return;
        if ((n = PySequence_Fast_GET_SIZE(ins)) > TC_MAX_INPUTS)
            return;
        items = PySequence_Fast_ITEMS(ins);
        for (Py_ssize_t i = 0; i < n; i++)
            if (!PyTuple_CheckExact(items[i]))
                return;
    }
    memo_clear(m);
    if (out != NULL && out != Py_None) {
        Py_INCREF(out);
        m->out = out;
    }
    m->has_in = ins != NULL && ins != Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        m->in[i] = items[i];
    }
    m->n_in = (size_t)n;
    shapes_copy(&m->sh, sh);
    m->valid = 1;
}

/* ---- Client --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD tc_client *c; /* NULL once closed */
    PyObject *ops;              /* dict: op name → id */
    PyObject *op_ids;           /* set: the ids in ops, the only ones record() takes */
    PyObject *close_status;     /* what close() returned (NULL before) */
    PyObject *meta_keys;        /* set: the distinct meta keys set in meta_pid */
    pid_t meta_pid;             /* metadata is per process: a forked child starts empty */
    int open_error;             /* the negative errno tc_open gave for an offline client, else 0 */
    uint64_t dropped;           /* the counts at close (tc_close_stats) */
    uint64_t recorded;
    int64_t session_id;
    struct shape_memo memo; /* of op()'s shapes */
    PyObject *last_name;    /* the exact str last looked up in ops (held), or NULL */
    uint32_t last_op;       /* its id */
} Client;

typedef struct region_s {
    PyObject_HEAD Client *client;
    uint32_t op;
    uint64_t mem;
    uint64_t start;
    int has_checksum; /* the block set .checksum: the entry carries it (ext map) */
    uint64_t checksum;
    struct shapes sh;       /* sh.has_out 0 and sh.n_in 0: no shapes */
    struct region_s *outer; /* the region open around it on its thread (borrowed), or NULL */
    bool open;              /* in its thread's chain */
    bool has_parent;
    uint64_t id, parent; /* id 0: none yet */
} Region;

/* This thread's innermost open region (the GIL guards it with the chain). */
static _Thread_local Region *region_top;

static PyTypeObject ClientType;
static PyTypeObject RegionType;

/*
 * Regions freed lately, kept for the next op() (as CPython keeps floats): a
 * `with` costs no allocation. Guarded by the GIL.
 */
#define REGION_FREE 16
static Region *region_free[REGION_FREE];
static int n_region_free;

static Region *region_new(void)
{
    Region *r;

    if (n_region_free == 0)
        return PyObject_New(Region, &RegionType);
    r = region_free[--n_region_free];
    (void)PyObject_Init((PyObject *)r, &RegionType);
    return r;
}

/* Remembers op as the id of name when name is an exact str (its own hash and ==). */
static void client_last_op(Client *cl, PyObject *name, uint32_t op)
{
    PyObject *old = cl->last_name;

    if (!PyUnicode_CheckExact(name))
        return;
    Py_INCREF(name);
    cl->last_name = name;
    cl->last_op = op;
    Py_XDECREF(old);
}

/*
 * The id of op name (a str) on cl, interning it with category (NULL: the
 * daemon classifies) the first time. 0 for a closed, disabled or offline
 * client (which records nothing anyway); -1 with an exception set on error.
 */
static int64_t client_op_id(Client *cl, PyObject *name, const char *category)
{
    PyObject *id;
    const char *s;
    uint32_t op;

    /* A literal name is the same constant str at each pass of a loop. */
    if (name == cl->last_name)
        return cl->last_op;
    if ((id = PyDict_GetItemWithError(cl->ops, name)) != NULL) {
        op = (uint32_t)PyLong_AsUnsignedLong(id);
        client_last_op(cl, name, op);
        return op;
    }
    if (PyErr_Occurred())
        return -1;
    if ((s = checked_str(name, "op name", 1, PROTO_MAX_NAME)) == NULL)
        return -1;
    if (cl->c == NULL)
        return 0;
    /* The library is asked even when it sends nothing (a forked child's copy
     * of a client connects on its first call: tracectl.h); it gives 0 to a
     * disabled or offline client, which is kept like an id. The name and
     * category were checked, so 0 from a connected client is out of memory. */
    op = category != NULL ? tc_op_cat(cl->c, s, category) : tc_op(cl->c, s);
    if (op == 0 && tc_enabled(cl->c)) {
        PyErr_NoMemory();
        return -1;
    }
    if ((id = PyLong_FromUnsignedLong(op)) == NULL)
        return -1;
    if (PyDict_SetItem(cl->ops, name, id) < 0 || PySet_Add(cl->op_ids, id) < 0) {
        Py_DECREF(id);
        return -1;
    }
    Py_DECREF(id);
    client_last_op(cl, name, op);
    return op;
}

static void client_dealloc(Client *cl)
{
    if (cl->c != NULL) {
        tc_client *c = cl->c;
        cl->c = NULL;
        Py_BEGIN_ALLOW_THREADS tc_close(c);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(cl->ops);
    Py_XDECREF(cl->op_ids);
    Py_XDECREF(cl->close_status);
    Py_XDECREF(cl->meta_keys);
    memo_clear(&cl->memo);
    Py_XDECREF(cl->last_name);
    Py_TYPE(cl)->tp_free((PyObject *)cl);
}

/*
 * Keyword argument i of a FASTCALL call, matched to names (NULL-terminated)
 * and to interned, the same names as interned str (filled on the first call):
 * the compiler interns the keywords of a call, so a pointer compare finds
 * them; others (a **dict's keys) are compared by value. -1: unknown, or an
 * exception set when interned could not be filled.
 */
static int kw_index(PyObject *kw, const char *const *names, PyObject **interned)
{
    if (interned[0] == NULL)
        for (int i = 0; names[i] != NULL; i++)
            if ((interned[i] = PyUnicode_InternFromString(names[i])) == NULL)
                return -1;
    for (int i = 0; names[i] != NULL; i++)
        if (interned[i] == kw)
            return i;
    for (int i = 0; names[i] != NULL; i++)
        if (PyUnicode_CompareWithASCIIString(kw, names[i]) == 0)
            return i;
    return -1;
}

/*
 * Parses a FASTCALL call into vals[] (borrowed; NULL when absent) by the
 * names in names (interned: see kw_index), the first npos of which may be
 * positional. 0 or -1.
 */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, PyObject **interned, int npos, PyObject **vals,
                      int nvals)
{
    for (int i = 0; i < nvals; i++)
        vals[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments", fn, npos);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        vals[i] = args[i];
    if (kwnames == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        int k = kw_index(kw, names, interned);
        if (k < 0 && PyErr_Occurred())
            return -1;
        if (k < 0 || vals[k] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated argument %R", fn, kw);
            return -1;
        }
        vals[k] = args[nargs + i];
    }
    return 0;
}

/* An optional unsigned argument (absent or None: 0). 0 or -1. */
static int opt_u64(PyObject *o, uint64_t *v)
{
    *v = 0;
    if (o == NULL || o == Py_None)
        return 0;
    *v = PyLong_AsUnsignedLongLong(o);
    return *v == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *client_op(Client *cl, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"name", "out_shape", "in_shapes", "mem", "category", NULL};
    static PyObject *interned[5];
    PyObject *v[5];
    const char *category;
    int64_t op;
    uint64_t mem;
    Region *r;

    if (parse_args("op", args, nargs, kwnames, names, interned, 1, v, 5) < 0)
        return NULL;
    if (v[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "op() needs a name");
        return NULL;
    }
    if (opt_checked_str(v[4], "category", 1, PROTO_MAX_CATEGORY, &category) < 0 ||
        (op = client_op_id(cl, v[0], category)) < 0 || opt_u64(v[3], &mem) < 0)
        return NULL;
    if ((r = region_new()) == NULL)
        return NULL;
    Py_INCREF(cl);
    r->client = cl;
    r->op = (uint32_t)op;
    r->mem = mem;
    r->start = 0;
    r->has_checksum = 0;
    r->open = false;
    r->outer = NULL;
    if (v[1] == NULL && v[2] == NULL) {
        r->sh.has_out = 0;
        r->sh.n_in = 0;
    } else if (memo_hit(&cl->memo, v[1], v[2])) {
        shapes_copy(&r->sh, &cl->memo.sh);
    } else if (shapes_from(v[1], v[2], &r->sh) == 0) {
        memo_keep(&cl->memo, v[1], v[2], &r->sh);
    } else {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static PyObject *client_op_id_m(Client *cl, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"name", "category", NULL};
    static PyObject *interned[2];
    PyObject *v[2];
    const char *category;
    int64_t op;

    if (parse_args("op_id", args, nargs, kwnames, names, interned, 2, v, 2) < 0)
        return NULL;
    if (v[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "op_id() needs a name");
        return NULL;
    }
    if (opt_checked_str(v[1], "category", 1, PROTO_MAX_CATEGORY, &category) < 0 ||
        (op = client_op_id(cl, v[0], category)) < 0)
        return NULL;
    return PyLong_FromLongLong(op);
}

/*
 * An op id given to record(): one that op_id() returned on this client (the
 * daemon refuses an id its connection never defined, and ends the connection;
 * another id of this client would name another op). The id, or -1 with a
 * ValueError set.
 */
static int64_t client_known_id(Client *cl, PyObject *o)
{
    int known = PySet_Contains(cl->op_ids, o);
    PyObject *r;

    if (known > 0)
        return (int64_t)PyLong_AsUnsignedLong(o);
    if (known < 0 || (r = short_repr(o)) == NULL)
        return -1;
    PyErr_Format(PyExc_ValueError,
                 "record(): op id %U was not returned by op_id() on this client: pass the op's "
                 "name, or an id op_id() returned",
                 r);
    Py_DECREF(r);
    return -1;
}

/* The ext keywords of record(), in the order of names[] from index RECORD_EXT on. */
#define RECORD_EXT 9
static const struct {
    uint32_t bit;
    size_t off; /* of the field in tc_ext */
} record_ext[] = {
    {TC_EXT_STREAM, offsetof(tc_ext, stream)},
    {TC_EXT_PEER, offsetof(tc_ext, peer)},
    {TC_EXT_COMM, offsetof(tc_ext, comm)},
    {TC_EXT_SEQ, offsetof(tc_ext, seq)},
    {TC_EXT_ID, offsetof(tc_ext, id)},
    {TC_EXT_PARENT, offsetof(tc_ext, parent)},
    {TC_EXT_COMM_SIZE, offsetof(tc_ext, comm_size)},
    {TC_EXT_SPAN, offsetof(tc_ext, span)},
};
#define RECORD_NEXT (sizeof(record_ext) / sizeof(record_ext[0]))

/*
 * record(op, start_ns, dur_ns, mem=0, out_shape=None, in_shapes=None,
 * device=None, category=None, checksum=None, *, stream=None, peer=None,
 * comm=None, seq=None, id=None, parent=None, comm_size=None, span=None): one complete
 * entry; the ext keywords that are not None go in its ext map
 * (tc_record_ext), and with none of them (nor a checksum) it is a plain
 * tc_record. comm_size outside 1 .. 2^31 - 1 is a ValueError.
 */
static PyObject *client_record(Client *cl, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {
        "op",     "start_ns", "dur_ns",   "mem",       "out_shape", "in_shapes",
        "device", "category", "checksum", "stream",    "peer",      "comm",
        "seq",    "id",       "parent",   "comm_size", "span",      NULL};
    static PyObject *interned[RECORD_EXT + RECORD_NEXT];
    PyObject *v[RECORD_EXT + RECORD_NEXT];
    const char *device, *category;
    uint64_t start, dur, mem;
    int64_t op;
    struct shapes sh;
    tc_ext x = {0};

    if (parse_args("record", args, nargs, kwnames, names, interned, 8, v,
                   RECORD_EXT + RECORD_NEXT) < 0)
        return NULL;
    if (v[0] == NULL || v[1] == NULL || v[2] == NULL) {
        PyErr_SetString(PyExc_TypeError, "record() needs op, start_ns and dur_ns");
        return NULL;
    }
    if (opt_u64(v[1], &start) < 0 || opt_u64(v[2], &dur) < 0 || opt_u64(v[3], &mem) < 0 ||
        opt_checked_str(v[6], "device", 0, PROTO_MAX_NAME, &device) < 0 ||
        opt_checked_str(v[7], "category", 1, PROTO_MAX_CATEGORY, &category) < 0 ||
        opt_u64(v[8], &x.checksum) < 0)
        return NULL;
    if (v[8] != NULL && v[8] != Py_None)
        x.has |= TC_EXT_CHECKSUM;
    for (size_t i = 0; i < RECORD_NEXT; i++) {
        PyObject *o = v[RECORD_EXT + i];
        if (o == NULL || o == Py_None)
            continue;
        if (opt_u64(o, (uint64_t *)((char *)&x + record_ext[i].off)) < 0)
            return NULL;
        x.has |= record_ext[i].bit;
    }
    if ((x.has & TC_EXT_COMM_SIZE) && (x.comm_size == 0 || x.comm_size > INT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "record(): comm_size must be 1 .. 2**31 - 1");
        return NULL;
    }
    if (PyLong_Check(v[0])) {
        if ((op = client_known_id(cl, v[0])) < 0)
            return NULL;
    } else if ((op = client_op_id(cl, v[0], category)) < 0) {
        return NULL;
    }
    if (shapes_from(v[4], v[5], &sh) < 0)
        return NULL;
    if (x.has != 0)
        tc_record_ext(cl->c, (uint32_t)op, start, dur, mem, TC_ELEMENTS_NONE,
                      sh.has_out ? &sh.out : NULL, sh.n_in > 0 ? sh.in : NULL, sh.n_in, device, &x);
    else
        tc_record(cl->c, (uint32_t)op, start, dur, mem, sh.has_out ? &sh.out : NULL,
                  sh.n_in > 0 ? sh.in : NULL, sh.n_in, device);
    Py_RETURN_NONE;
}

/* region_id(): a new entry id for record(id=..., parent=...) (tc_region_id); 0 when off. */
static PyObject *client_region_id(Client *cl, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(cl->c != NULL ? tc_region_id(cl->c) : 0);
}

static PyObject *client_step(Client *cl, PyObject *unused)
{
    tc_step(cl->c);
    Py_RETURN_NONE;
}

/* cpu_wait(): the step's wait for a CPU (tc_cpu_wait); a figure lost never fails the job. */
static PyObject *client_cpu_wait(Client *cl, PyObject *unused)
{
    (void)tc_cpu_wait(cl->c);
    Py_RETURN_NONE;
}

static PyObject *client_set_step(Client *cl, PyObject *arg)
{
    uint64_t s = PyLong_AsUnsignedLongLong(arg);

    if (s == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    tc_set_step(cl->c, s);
    Py_RETURN_NONE;
}

/*
 * The daemon takes at most this many distinct metadata keys per process and
 * ends the connection at the next (proto/PROTOCOL.md Part 2, "Daemon
 * limits"); setting a known key again is free.
 */
#define META_KEYS_MAX 1024

/* Counts key among cl's distinct meta keys; 0, or -1 with a ValueError past the limit. */
static int client_meta_key(Client *cl, PyObject *key)
{
    int known;

    if (cl->meta_pid != getpid()) {
        cl->meta_pid = getpid();
        if (PySet_Clear(cl->meta_keys) < 0)
            return -1;
    }
    if ((known = PySet_Contains(cl->meta_keys, key)) != 0)
        return known < 0 ? -1 : 0;
    if (PySet_GET_SIZE(cl->meta_keys) >= META_KEYS_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "meta: this process has set %d distinct keys, the daemon's limit per "
                     "process (setting one of them again is allowed)",
                     META_KEYS_MAX);
        return -1;
    }
    return PySet_Add(cl->meta_keys, key);
}

/*
 * meta(key, value): the key 1..PROTO_MAX_NAME bytes, a str value at most
 * PROTO_MAX_NAME, neither with a NUL; an int in the int64 range. Checked
 * before anything is sent (ValueError, OverflowError, TypeError).
 */
static PyObject *client_meta(Client *cl, PyObject *args)
{
    const char *key, *s = NULL;
    PyObject *k, *val, *r;
    long long i = 0;
    int rc;

    if (!PyArg_ParseTuple(args, "OO:meta", &k, &val))
        return NULL;
    if ((key = checked_str(k, "meta key", 1, PROTO_MAX_NAME)) == NULL)
        return NULL;
    if (PyUnicode_Check(val)) {
        if ((s = checked_str(val, "meta value", 0, PROTO_MAX_NAME)) == NULL)
            return NULL;
    } else if (PyLong_Check(val) && !PyBool_Check(val)) {
        if ((i = PyLong_AsLongLong(val)) == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            if ((r = short_repr(val)) != NULL) {
                PyErr_Format(PyExc_OverflowError,
                             "meta value %U is out of the int64 range (-2**63 .. 2**63-1)", r);
                Py_DECREF(r);
            }
            return NULL;
        }
    } else if (!PyBool_Check(val) && !PyFloat_Check(val)) {
        PyErr_Format(PyExc_TypeError, "a meta value is a str, int, float or bool, not %.100s",
                     Py_TYPE(val)->tp_name);
        return NULL;
    }
    if (cl->c == NULL)
        Py_RETURN_NONE;
    if (client_meta_key(cl, k) < 0)
        return NULL;
    if (PyBool_Check(val))
        rc = tc_meta_bool(cl->c, key, val == Py_True);
    else if (PyLong_Check(val))
        rc = tc_meta_int(cl->c, key, i);
    else if (PyFloat_Check(val))
        rc = tc_meta_double(cl->c, key, PyFloat_AS_DOUBLE(val));
    else
        rc = tc_meta_str(cl->c, key, s);
    if (rc < 0 && tc_enabled(cl->c))
        return raise_err(rc, "meta");
    Py_RETURN_NONE;
}

/*
 * The bound of a flush() given no timeout, in ms: $TRACECTL_CLOSE_TIMEOUT
 * seconds (the bound tc_close() takes from the same variable), else 5 s, so
 * that a stopped daemon never holds the program. A value that is not a
 * number >= 0 is the default.
 */
#define CLOSE_TIMEOUT_MS 5000
static int close_timeout_ms(void)
{
    const char *v = getenv("TRACECTL_CLOSE_TIMEOUT");
    char *end;
    double t;

    if (v == NULL || *v == '\0')
        return CLOSE_TIMEOUT_MS;
    t = strtod(v, &end);
    if (*end != '\0' || !(t >= 0.0))
        return CLOSE_TIMEOUT_MS;
    return t * 1000.0 > 2e9 ? 2000000000 : (int)(t * 1000.0);
}

/*
 * The status flush() and close() return, a dict, from the library's own
 * accounting (tc_stats; tracectl.h): `recorded`, `stored` (acknowledged by
 * the daemon), `dropped` (never sent), `unconfirmed` (sent without an ack
 * when the connection ended, or, while it lasts, not acknowledged yet:
 * tc_stats' unconfirmed + pending), so that recorded = stored + dropped +
 * unconfirmed exactly; `error` (None or the tracectl.Error) and `ok` (error
 * is None). A new reference, or NULL.
 */
static PyObject *status_new(const struct tc_stats *s, PyObject *error)
{
    return Py_BuildValue("{s:O,s:K,s:K,s:K,s:K,s:O}", "ok", error == Py_None ? Py_True : Py_False,
                         "recorded", (unsigned long long)s->recorded, "dropped",
                         (unsigned long long)s->dropped, "stored", (unsigned long long)s->stored,
                         "unconfirmed", (unsigned long long)(s->unconfirmed + s->pending), "error",
                         error);
}

/*
 * The status of a flush or close of cl that returned rc (about what; c the
 * client when it is not freed yet, for its error text; s its figures), as a
 * new reference; with strict and an error, raises the error (its `status`
 * attribute the dict) and returns NULL.
 */
static PyObject *status_or_raise(tc_client *c, int rc, const char *what, const struct tc_stats *s,
                                 int enabled, int strict)
{
    PyObject *error = Py_None, *st;
    const char *detail = NULL;

    if (rc < 0 && enabled) {
        if (c != NULL)
            (void)tc_last_error(c, &detail);
        if ((error = make_err(rc, what, detail)) == NULL)
            return NULL;
    }
    st = status_new(s, error);
    if (st != NULL && strict && error != Py_None) {
        if (PyObject_SetAttrString(error, "status", st) == 0)
            PyErr_SetObject(tc_error, error);
        Py_CLEAR(st);
    }
    if (error != Py_None)
        Py_DECREF(error);
    return st;
}

/* What flush() and close() return after close(): close()'s status again. */
static PyObject *closed_status(Client *cl)
{
    if (cl->close_status == NULL) { /* close() ran out of memory building it */
        struct tc_stats s = TC_STATS_INIT;
        s.recorded = cl->recorded;
        s.dropped = cl->dropped;
        return status_new(&s, Py_None);
    }
    return Py_NewRef(cl->close_status);
}

/* flush(timeout=None, strict=False): see the method's doc below. */
static PyObject *client_flush(Client *cl, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", "strict", NULL};
    PyObject *timeout = Py_None;
    struct tc_stats s = TC_STATS_INIT;
    int ms, rc, strict = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op:flush", names, &timeout, &strict))
        return NULL;
    ms = close_timeout_ms();
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        ms = t < 0 ? -1 : t * 1000.0 > 2e9 ? 2000000000 : (int)(t * 1000.0);
    }
    if (cl->c == NULL)
        return closed_status(cl);
    Py_BEGIN_ALLOW_THREADS rc = tc_flush(cl->c, ms);
    Py_END_ALLOW_THREADS(void) tc_stats(cl->c, &s);
    /* an offline client has nothing to send: no error */
    return status_or_raise(cl->c, rc, "flush", &s, tc_enabled(cl->c), strict);
}

/* close(strict=False): see the method's doc below. */
static PyObject *client_close(Client *cl, PyObject *args, PyObject *kw)
{
    static char *names[] = {"strict", NULL};
    tc_client *c = cl->c;
    struct tc_stats s = TC_STATS_INIT;
    int enabled, rc, strict = 0;
    PyObject *st;

    if (args != NULL && !PyArg_ParseTupleAndKeywords(args, kw, "|p:close", names, &strict))
        return NULL;
    if (c == NULL)
        return closed_status(cl);
    enabled = tc_enabled(c);
    cl->c = NULL;
    /* tc_close's bye carries the final count, taken after its flush; the
     * wait is tc_close's own (TRACECTL_CLOSE_TIMEOUT: tracectl.h). */
    Py_BEGIN_ALLOW_THREADS rc = tc_close_stats(c, &s);
    Py_END_ALLOW_THREADS cl->dropped = s.dropped;
    cl->recorded = s.recorded;
    /* The client is freed: the status holds the error, not the library's text. */
    if ((st = status_or_raise(NULL, rc, "close", &s, enabled, 0)) == NULL)
        return NULL;
    Py_XSETREF(cl->close_status, st);
    if (strict && rc < 0 && enabled) {
        PyObject *error = PyDict_GetItemString(st, "error"); /* borrowed */
        if (PyObject_SetAttrString(error, "status", st) == 0)
            PyErr_SetObject(tc_error, error);
        return NULL;
    }
    return Py_NewRef(st);
}

static PyObject *client_enter(Client *cl, PyObject *unused)
{
    Py_INCREF(cl);
    return (PyObject *)cl;
}

/* A with block's end closes the client and never raises for it (a lost daemon is no error). */
static PyObject *client_exit(Client *cl, PyObject *args)
{
    PyObject *r = client_close(cl, NULL, NULL);

    if (r == NULL && PyTuple_GET_SIZE(args) > 0 && PyTuple_GET_ITEM(args, 0) != Py_None)
        PyErr_Clear(); /* the body's exception goes on; an error here (memory) is secondary */
    if (r == NULL && PyErr_Occurred())
        return NULL;
    Py_XDECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *client_get_dropped(Client *cl, void *unused)
{
    return PyLong_FromUnsignedLongLong(cl->c != NULL ? tc_dropped(cl->c) : cl->dropped);
}

static PyObject *client_get_recorded(Client *cl, void *unused)
{
    return PyLong_FromUnsignedLongLong(cl->c != NULL ? tc_recorded(cl->c) : cl->recorded);
}

static PyObject *client_get_session_id(Client *cl, void *unused)
{
    return PyLong_FromLongLong(cl->c != NULL ? tc_session_id(cl->c) : cl->session_id);
}

static PyObject *client_get_enabled(Client *cl, void *unused)
{
    return PyBool_FromLong(cl->c != NULL && tc_enabled(cl->c));
}

static PyObject *client_get_closed(Client *cl, void *unused)
{
    return PyBool_FromLong(cl->c == NULL);
}

static PyObject *client_get_open_error(Client *cl, void *unused)
{
    return PyLong_FromLong(-cl->open_error);
}

static PyObject *client_get_error_message(Client *cl, void *unused)
{
    const char *msg = NULL;

    if (cl->c == NULL || tc_last_error(cl->c, &msg) == 0 || msg == NULL)
        msg = "";
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
}

static PyMethodDef client_methods[] = {
    {"op", (PyCFunction)(void (*)(void))client_op, METH_FASTCALL | METH_KEYWORDS,
     "op(name, out_shape=None, in_shapes=None, mem=0, category=None) -> Region\n\n"
     "A region to enter with `with`: it records one entry spanning the block."},
    {"op_id", (PyCFunction)(void (*)(void))client_op_id_m, METH_FASTCALL | METH_KEYWORDS,
     "op_id(name, category=None) -> int\n\nThe id of an op name (0 when nothing is recorded)."},
    {"record", (PyCFunction)(void (*)(void))client_record, METH_FASTCALL | METH_KEYWORDS,
     "record(op, start_ns, dur_ns, mem=0, out_shape=None, in_shapes=None, device=None, "
     "category=None, checksum=None, *, stream=None, peer=None, comm=None, seq=None, id=None, "
     "parent=None, comm_size=None, span=None)\n\nRecords one complete entry (start_ns on "
     "time.monotonic_ns()'s clock); checksum: a 64-bit checksum of its output "
     "(tracectl.checksum()). Keywords stream, peer, comm, seq, id, parent, comm_size, span "
     "(ints, None: absent) go in the entry's ext map (PROTOCOL.md Part 3); comm_size, the "
     "ranks of the communicator comm, makes its collectives complete at that many arrivals; "
     "span, the whole interval of an entry whose dur_ns is its self time, is what timelines "
     "draw."},
    {"region_id", (PyCFunction)client_region_id, METH_NOARGS,
     "region_id() -> int\n\nA new entry id, unique in this process, for record(id=...) and "
     "the parent= of the entries nested in it (0 when nothing is recorded)."},
    {"step", (PyCFunction)client_step, METH_NOARGS, "step()\n\nAdvances the step counter."},
    {"set_step", (PyCFunction)client_set_step, METH_O, "set_step(n)\n\nSets the step counter."},
    {"cpu_wait", (PyCFunction)client_cpu_wait, METH_NOARGS,
     "cpu_wait()\n\nSends how long this thread waited for a CPU in the current step (call it "
     "right before step(), from the thread that runs the steps; Linux, else nothing)."},
    {"meta", (PyCFunction)client_meta, METH_VARARGS,
     "meta(key, value)\n\nMetadata of this process: str, int, float or bool."},
    {"flush", (PyCFunction)(void (*)(void))client_flush, METH_VARARGS | METH_KEYWORDS,
     "flush(timeout=None, strict=False) -> dict\n\nSends everything recorded and waits for the "
     "daemon's ack, at most timeout seconds (None: $TRACECTL_CLOSE_TIMEOUT, else 5; < 0: no "
     "bound). Returns the status: ok, error (None or a tracectl.Error), recorded, dropped, "
     "stored (acknowledged), unconfirmed. Raises the error only with strict=True."},
    {"close", (PyCFunction)(void (*)(void))client_close, METH_VARARGS | METH_KEYWORDS,
     "close(strict=False) -> dict\n\nFlushes, says bye with the dropped count and frees the "
     "client; returns the status as flush() does (a second close() returns it again). A "
     "stopped or lost daemon is no error unless strict=True: then the status's error is "
     "raised, with the status as its .status."},
    {"__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"dropped", (getter)client_get_dropped, NULL, "Entries dropped so far.", NULL},
    {"recorded", (getter)client_get_recorded, NULL, "Entries recorded so far.", NULL},
    {"session_id", (getter)client_get_session_id, NULL, "The daemon's session id, or -1.", NULL},
    {"enabled", (getter)client_get_enabled, NULL, "True when entries are being sent.", NULL},
    {"closed", (getter)client_get_closed, NULL, "True after close().", NULL},
    {"open_error", (getter)client_get_open_error, NULL,
     "The errno of a failed connection (an offline client), else 0.", NULL},
    {"error_message", (getter)client_get_error_message, NULL,
     "Why the client sends nothing (the C library's tc_last_error() text), else \"\".", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracectl.Client",
    .tp_basicsize = sizeof(Client),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A connection to tracectld (see tracectl.open()).",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};

/* ---- Region --------------------------------------------------------------- */

/* Takes r out of its thread's chain, wherever it is in it. */
static void region_unlink(Region *r)
{
    if (!r->open)
        return;
    r->open = false;
    if (region_top == r) {
        region_top = r->outer;
        return;
    }
    for (Region *q = region_top; q != NULL; q = q->outer) {
        if (q->outer == r) {
            q->outer = r->outer;
            return;
        }
    }
}

static void region_dealloc(Region *r)
{
    region_unlink(r);
    Py_CLEAR(r->client);
    if (n_region_free < REGION_FREE)
        region_free[n_region_free++] = r;
    else
        PyObject_Free(r);
}

static PyObject *region_enter(Region *r, PyObject *unused)
{
    Region *outer = region_top;

    region_unlink(r); /* entered again without an exit */
    r->id = r->parent = 0;
    r->has_parent = false;
    if (outer != NULL && outer->client == r->client && r->client->c != NULL) {
        if (outer->id == 0)
            outer->id = tc_region_id(r->client->c);
        r->parent = outer->id;
        r->has_parent = outer->id != 0;
    }
    r->outer = outer;
    r->open = true;
    region_top = r;
    r->start = tc_now_ns();
    Py_INCREF(r);
    return (PyObject *)r;
}

static PyObject *region_exit(Region *r, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t end = tc_now_ns();
    struct shapes *sh = &r->sh;
    const tc_shape *out = sh->has_out ? &sh->out : NULL, *in = sh->n_in > 0 ? sh->in : NULL;

    region_unlink(r);
    if (r->start != 0 && r->client->c != NULL) {
        if (r->id == 0 && !r->has_parent && !r->has_checksum) {
            tc_record(r->client->c, r->op, r->start, end - r->start, r->mem, out, in, sh->n_in,
                      NULL);
        } else {
            tc_ext x = {.has = (r->id ? TC_EXT_ID : 0) | (r->has_parent ? TC_EXT_PARENT : 0) |
                               (r->has_checksum ? TC_EXT_CHECKSUM : 0),
                        .id = r->id,
                        .parent = r->parent,
                        .checksum = r->checksum};
            tc_record_ext(r->client->c, r->op, r->start, end - r->start, r->mem, TC_ELEMENTS_NONE,
                          out, in, sh->n_in, NULL, &x);
        }
    }
    r->start = 0;
    r->has_checksum = 0;
    Py_RETURN_FALSE;
}

static PyMethodDef region_methods[] = {
    {"__enter__", (PyCFunction)region_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))region_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *region_get_checksum(Region *r, void *unused)
{
    if (!r->has_checksum)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(r->checksum);
}

static int region_set_checksum(Region *r, PyObject *v, void *unused)
{
    if (v == NULL || v == Py_None) {
        r->has_checksum = 0;
        return 0;
    }
    if (opt_u64(v, &r->checksum) < 0)
        return -1;
    r->has_checksum = 1;
    return 0;
}

static PyGetSetDef region_getset[] = {
    {"checksum", (getter)region_get_checksum, (setter)region_set_checksum,
     "A 64-bit checksum of the block's output (tracectl.checksum()), set inside the block: "
     "the entry carries it. None: none.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RegionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracectl.Region",
    .tp_basicsize = sizeof(Region),
    .tp_dealloc = (destructor)region_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One op's span: `with client.op(name): ...` records it on exit.",
    .tp_methods = region_methods,
    .tp_getset = region_getset,
};

/* ---- module --------------------------------------------------------------- */

/*
 * An int argument of open() in lo .. INT32_MAX (hello's range, PROTOCOL.md),
 * or None (*v left as it is). 0 or -1 with a ValueError or TypeError set.
 */
static int open_int(PyObject *o, const char *what, long long lo, int64_t *v)
{
    long long x;
    int overflow;

    if (o == Py_None)
        return 0;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 || x < lo || x > INT32_MAX) {
        PyObject *r = short_repr(o);
        if (r != NULL) {
            PyErr_Format(PyExc_ValueError, "%s %U is out of range: the limit is %lld .. 2**31-1",
                         what, r, lo);
            Py_DECREF(r);
        }
        return -1;
    }
    *v = x;
    return 0;
}

/*
 * The session name tc_open() will take from the environment when open() is
 * given none (tracectl.h: the first of these that is set and not empty),
 * checked as an argument is: a name over the limit would give an offline
 * client. 0, or -1 with a ValueError set.
 */
static int open_env_session(void)
{
    static const char *const names[] = {"TRACECTL_SESSION", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                                        NULL};

    for (int i = 0; names[i] != NULL; i++) {
        const char *v = getenv(names[i]);
        size_t n = v != NULL ? strlen(v) : 0;

        if (n == 0)
            continue;
        if (n > PROTO_MAX_SESSION) {
            PyErr_Format(PyExc_ValueError,
                         "session name from $%s is %zu bytes: the limit is 1..%d bytes", names[i],
                         n, PROTO_MAX_SESSION);
            return -1;
        }
        return 0;
    }
    return 0;
}

/* open()'s rank and world into o: 0 <= rank < world <= 2**31-1 (each may be None). 0 or -1. */
static int open_rank_world(PyObject *rank, PyObject *world, tc_options *o)
{
    if (open_int(rank, "rank", 0, &o->rank) < 0 || open_int(world, "world", 1, &o->world) < 0)
        return -1;
    if (rank != Py_None && world != Py_None && o->rank >= o->world) {
        PyErr_Format(PyExc_ValueError,
                     "rank %lld is out of range for world %lld: 0 <= rank < world",
                     (long long)o->rank, (long long)o->world);
        return -1;
    }
    return 0;
}

static PyObject *mod_open(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"session", "rank",         "world", "device", "blocking",
                            "socket",  "ring_entries", "type",  NULL};
    const char *session, *device, *socket = NULL;
    PyObject *sess = Py_None, *dev = Py_None, *rank = Py_None, *world = Py_None;
    PyObject *blocking = Py_None;
    Py_ssize_t ring = 0;
    PyTypeObject *type = &ClientType;
    tc_options o;
    Client *cl;
    int err = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOznO!:open", names, &sess, &rank, &world, &dev,
                                     &blocking, &socket, &ring, &PyType_Type, &type))
        return NULL;
    if (!PyType_IsSubtype(type, &ClientType)) {
        PyErr_SetString(PyExc_TypeError, "type must be a subclass of Client");
        return NULL;
    }
    /* A session name the daemon refuses would give an offline client: refused here. */
    if (opt_checked_str(sess, "session name", 1, PROTO_MAX_SESSION, &session) < 0 ||
        opt_checked_str(dev, "device", 0, PROTO_MAX_NAME, &device) < 0 ||
        (sess == Py_None && open_env_session() < 0))
        return NULL;
    tc_options_init(&o);
    o.session = session;
    o.device = device;
    o.socket_path = socket;
    o.ring_entries = ring > 0 ? (size_t)ring : 0;
    if (open_rank_world(rank, world, &o) < 0)
        return NULL;
    if (blocking != Py_None) {
        int b = PyObject_IsTrue(blocking);
        if (b < 0)
            return NULL;
        o.blocking = b;
    }
    if ((cl = (Client *)type->tp_alloc(type, 0)) == NULL)
        return NULL;
    cl->c = NULL;
    cl->dropped = cl->recorded = 0;
    cl->session_id = -1;
    cl->meta_pid = getpid();
    if ((cl->ops = PyDict_New()) == NULL || (cl->op_ids = PySet_New(NULL)) == NULL ||
        (cl->meta_keys = PySet_New(NULL)) == NULL) {
        Py_DECREF(cl);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS cl->c = tc_open(&o, &err);
    Py_END_ALLOW_THREADS cl->open_error = err;
    if (cl->c == NULL) {
        Py_DECREF(cl);
        return raise_err(err != 0 ? err : -ENOMEM, "open");
    }
    cl->session_id = tc_session_id(cl->c);
    return (PyObject *)cl;
}

static PyObject *mod_now_ns(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(tc_now_ns());
}

/*
 * checksum(data, start=None): FNV-1a 64 over a contiguous buffer's bytes
 * (tc_checksum), chained from start when given; the GIL is released over
 * large buffers.
 */
static PyObject *mod_checksum(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"data", "start", NULL};
    PyObject *data, *start = Py_None;
    Py_buffer view;
    uint64_t h = TC_CHECKSUM_INIT;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:checksum", names, &data, &start))
        return NULL;
    if (start != Py_None && opt_u64(start, &h) < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len >= 65536) {
        Py_BEGIN_ALLOW_THREADS h = tc_checksum_add(h, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        h = tc_checksum_add(h, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef mod_methods[] = {
    {"open", (PyCFunction)(void (*)(void))mod_open, METH_VARARGS | METH_KEYWORDS,
     "open(session=None, rank=None, world=None, device=None, blocking=None, socket=None, "
     "ring_entries=0, type=Client) -> Client\n\nUse tracectl.open()."},
    {"now_ns", mod_now_ns, METH_NOARGS, "now_ns() -> int\n\nThe clock entries use."},
    {"checksum", (PyCFunction)(void (*)(void))mod_checksum, METH_VARARGS | METH_KEYWORDS,
     "checksum(data, start=None) -> int\n\nFNV-1a 64 over the bytes of a contiguous buffer "
     "(bytes, bytearray, memoryview, array, numpy array), chained from start: the checksum "
     "of an op's output for `tracectl diff --divergence` (tc_checksum in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_tracectl",
    .m_doc = "The C binding of libtracectl (use `tracectl`).",
    .m_size = -1,
    .m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__tracectl(void);
PyMODINIT_FUNC PyInit__tracectl(void)
{
    PyObject *m;

    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&RegionType) < 0)
        return NULL;
    if ((m = PyModule_Create(&mod_def)) == NULL)
        return NULL;
    tc_error = PyErr_NewExceptionWithDoc(
        "tracectl.Error",
        "A libtracectl or daemon error: errno, strerror, code (the errno's name), message.",
        PyExc_OSError, NULL);
    if (tc_error == NULL || PyModule_AddObjectRef(m, "Error", tc_error) < 0 ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Region", (PyObject *)&RegionType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
