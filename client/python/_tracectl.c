/*
 * _tracectl.c — the CPython extension behind the `tracectl` package, a thin
 * binding of libtracectl: the module, open() with the checks of its
 * arguments and of the environment's session name, now_ns(), checksum(), and
 * PyInit__tracectl. The design of the whole extension and its files are in
 * pyint.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"
#include "pyint.h"

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
        PyObject *r = pycheck_repr(o);
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
    PyTypeObject *type = &pyclient_type;
    tc_options o;
    Client *cl;
    int err = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOznO!:open", names, &sess, &rank, &world, &dev,
                                     &blocking, &socket, &ring, &PyType_Type, &type))
        return NULL;
    if (!PyType_IsSubtype(type, &pyclient_type)) {
        PyErr_SetString(PyExc_TypeError, "type must be a subclass of Client");
        return NULL;
    }
    /* A session name the daemon refuses would give an offline client: refused here. */
    if (pycheck_opt_str(sess, "session name", 1, PROTO_MAX_SESSION, &session) < 0 ||
        pycheck_opt_str(dev, "device", 0, PROTO_MAX_NAME, &device) < 0 ||
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
        return pycheck_raise(err != 0 ? err : -ENOMEM, "open");
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
    if (start != Py_None && pycheck_opt_u64(start, &h) < 0)
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

    if (PyType_Ready(&pyclient_type) < 0 || PyType_Ready(&pyregion_type) < 0)
        return NULL;
    if ((m = PyModule_Create(&mod_def)) == NULL)
        return NULL;
    pycheck_error = PyErr_NewExceptionWithDoc(
        "tracectl.Error",
        "A libtracectl or daemon error: errno, strerror, code (the errno's name), message.",
        PyExc_OSError, NULL);
    if (pycheck_error == NULL || PyModule_AddObjectRef(m, "Error", pycheck_error) < 0 ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&pyclient_type) < 0 ||
        PyModule_AddObjectRef(m, "Region", (PyObject *)&pyregion_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
