/*
 * pyclient.c — the Client type, what tracectl.open() returns: op names
 * interned to ids, op() (the hot path: a Region, pyregion.c), record(),
 * region_id(), step, meta(), and the figures as attributes. flush() and
 * close() are pyclose.c's. Runs under the GIL, on the caller's thread; see
 * pyint.h.
 */
#include <stddef.h>
#include <unistd.h>

#include "proto.h"
#include "pyint.h"

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
    if ((s = pycheck_str(name, "op name", 1, PROTO_MAX_NAME)) == NULL)
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

int64_t pyclient_named_op(Client *cl, const char *fn, PyObject *name, PyObject *category)
{
    const char *cat;

    if (name == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() needs a name", fn);
        return -1;
    }
    if (pycheck_opt_str(category, "category", 1, PROTO_MAX_CATEGORY, &cat) < 0)
        return -1;
    return client_op_id(cl, name, cat);
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
    pyshape_memo_clear(&cl->memo);
    Py_XDECREF(cl->last_name);
    Py_TYPE(cl)->tp_free((PyObject *)cl);
}

static PyObject *client_op_id_m(Client *cl, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"name", "category", NULL};
    static PyObject *interned[2];
    PyObject *v[2];
    int64_t op;

    if (pycheck_args("op_id", args, nargs, kwnames, names, interned, 2, v, 2) < 0 ||
        (op = pyclient_named_op(cl, "op_id", v[0], v[1])) < 0)
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
    if (known < 0 || (r = pycheck_repr(o)) == NULL)
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

    if (pycheck_args("record", args, nargs, kwnames, names, interned, 8, v,
                     RECORD_EXT + RECORD_NEXT) < 0)
        return NULL;
    if (v[0] == NULL || v[1] == NULL || v[2] == NULL) {
        PyErr_SetString(PyExc_TypeError, "record() needs op, start_ns and dur_ns");
        return NULL;
    }
    if (pycheck_opt_u64(v[1], &start) < 0 || pycheck_opt_u64(v[2], &dur) < 0 ||
        pycheck_opt_u64(v[3], &mem) < 0 ||
        pycheck_opt_str(v[6], "device", 0, PROTO_MAX_NAME, &device) < 0 ||
        pycheck_opt_str(v[7], "category", 1, PROTO_MAX_CATEGORY, &category) < 0 ||
        pycheck_opt_u64(v[8], &x.checksum) < 0)
        return NULL;
    if (v[8] != NULL && v[8] != Py_None)
        x.has |= TC_EXT_CHECKSUM;
    for (size_t i = 0; i < RECORD_NEXT; i++) {
        PyObject *o = v[RECORD_EXT + i];
        if (o == NULL || o == Py_None)
            continue;
        if (pycheck_opt_u64(o, (uint64_t *)((char *)&x + record_ext[i].off)) < 0)
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
    if (pyshape_parse(v[4], v[5], &sh) < 0)
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
    if ((key = pycheck_str(k, "meta key", 1, PROTO_MAX_NAME)) == NULL)
        return NULL;
    if (PyUnicode_Check(val)) {
        if ((s = pycheck_str(val, "meta value", 0, PROTO_MAX_NAME)) == NULL)
            return NULL;
    } else if (PyLong_Check(val) && !PyBool_Check(val)) {
        if ((i = PyLong_AsLongLong(val)) == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            if ((r = pycheck_repr(val)) != NULL) {
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
        return pycheck_raise(rc, "meta");
    Py_RETURN_NONE;
}
static PyObject *client_enter(Client *cl, PyObject *unused)
{
    Py_INCREF(cl);
    return (PyObject *)cl;
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
    {"op", (PyCFunction)(void (*)(void))pyregion_op, METH_FASTCALL | METH_KEYWORDS,
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
    {"flush", (PyCFunction)(void (*)(void))pyclose_flush, METH_VARARGS | METH_KEYWORDS,
     "flush(timeout=None, strict=False) -> dict\n\nSends everything recorded and waits for the "
     "daemon's ack, at most timeout seconds (None: $TRACECTL_CLOSE_TIMEOUT, else 5; < 0: no "
     "bound). Returns the status: ok, error (None or a tracectl.Error), recorded, dropped, "
     "stored (acknowledged), unconfirmed. Raises the error only with strict=True."},
    {"close", (PyCFunction)(void (*)(void))pyclose_close, METH_VARARGS | METH_KEYWORDS,
     "close(strict=False) -> dict\n\nFlushes, says bye with the dropped count and frees the "
     "client; returns the status as flush() does (a second close() returns it again). A "
     "stopped or lost daemon is no error unless strict=True: then the status's error is "
     "raised, with the status as its .status."},
    {"__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)pyclose_exit, METH_VARARGS, NULL},
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

PyTypeObject pyclient_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracectl.Client",
    .tp_basicsize = sizeof(Client),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A connection to tracectld (see tracectl.open()).",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};
