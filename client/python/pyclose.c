/*
 * pyclose.c — Client.flush(), close() and the end of a `with` block: the
 * library's call with the GIL released, bounded in time, and the status
 * dict they return (recorded = stored + dropped + unconfirmed), raising the
 * error only when asked (strict=True), because a stopped or lost daemon must
 * not end the program it observes. Runs under the GIL; see pyint.h.
 */
#include <stdlib.h>

#include "pyint.h"

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
        if ((error = pycheck_error_new(rc, what, detail)) == NULL)
            return NULL;
    }
    st = status_new(s, error);
    if (st != NULL && strict && error != Py_None) {
        if (PyObject_SetAttrString(error, "status", st) == 0)
            PyErr_SetObject(pycheck_error, error);
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
PyObject *pyclose_flush(Client *cl, PyObject *args, PyObject *kw)
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
PyObject *pyclose_close(Client *cl, PyObject *args, PyObject *kw)
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
            PyErr_SetObject(pycheck_error, error);
        return NULL;
    }
    return Py_NewRef(st);
}

/* A with block's end closes the client and never raises for it (a lost daemon is no error). */
PyObject *pyclose_exit(Client *cl, PyObject *args)
{
    PyObject *r = pyclose_close(cl, NULL, NULL);

    if (r == NULL && PyTuple_GET_SIZE(args) > 0 && PyTuple_GET_ITEM(args, 0) != Py_None)
        PyErr_Clear(); /* the body's exception goes on; an error here (memory) is secondary */
    if (r == NULL && PyErr_Occurred())
        return NULL;
    Py_XDECREF(r);
    Py_RETURN_FALSE;
}
