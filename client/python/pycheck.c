/*
 * pycheck.c — what the binding refuses, and how it says so: tracectl.Error
 * (an OSError with the library's errno), the checks that refuse at the call
 * what the daemon would refuse, and the parsing of FASTCALL keywords. Runs
 * under the GIL, on the caller's thread; see pyint.h.
 */
#include <errno.h>
#include <string.h>

#include "pyint.h"

PyObject *pycheck_error;

/* ---- errors --------------------------------------------------------------- */

PyObject *pycheck_error_new(int err, const char *what, const char *detail)
{
    PyObject *exc, *errmod, *names, *code = NULL, *msg;
    int e = err < 0 ? -err : err;

    exc = PyObject_CallFunction(pycheck_error, "is", e, strerror(e));
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

PyObject *pycheck_raise(int err, const char *what)
{
    PyObject *exc = pycheck_error_new(err, what, NULL);

    if (exc != NULL) {
        PyErr_SetObject(pycheck_error, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* ---- argument checks ---------------------------------------------------- */

/*
 * What the daemon would refuse is refused here, at the call, because one bad
 * message sent ends the connection and loses everything after it (PROTOCOL.md
 * Part 1, "Limits"). The limits are proto.h's; a message quotes at most the
 * first SHORT_CHARS characters of what it refuses, so that a 10 MiB name
 * gives a one-line error.
 */
#define SHORT_CHARS 40

/* Cut to SHORT_CHARS characters. */
PyObject *pycheck_repr(PyObject *s)
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

const char *pycheck_str(PyObject *o, const char *what, Py_ssize_t min, Py_ssize_t max)
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
    if ((r = pycheck_repr(o)) == NULL)
        return NULL;
    if (n < min || n > max)
        PyErr_Format(PyExc_ValueError, "%s %U is %zd bytes of UTF-8: the limit is %zd..%zd bytes",
                     what, r, n, min, max);
    else
        PyErr_Format(PyExc_ValueError, "%s %U contains a NUL character (not allowed)", what, r);
    Py_DECREF(r);
    return NULL;
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

int pycheck_too_many(const char *fn, int npos)
{
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments", fn, npos);
    return -1;
}

int pycheck_kwargs(const char *fn, PyObject *const *kwvals, PyObject *kwnames,
                   const char *const *names, PyObject **interned, PyObject **vals)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        int k = kw_index(kw, names, interned);
        if (k < 0 && PyErr_Occurred())
            return -1;
        if (k < 0 || vals[k] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated argument %R", fn, kw);
            return -1;
        }
        vals[k] = kwvals[i];
    }
    return 0;
}
