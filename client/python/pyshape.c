/*
 * pyshape.c — tensor shapes from Python: a shape is a tuple, list or other
 * sequence of ints (0 .. 2^64 - 1), at most TC_MAX_DIMS of them; an entry
 * has an out shape and up to TC_MAX_INPUTS in shapes. The memo lets op()
 * skip parsing the same constant tuples again (struct shape_memo in
 * pyint.h). Runs under the GIL; see pyint.h.
 */
#include "pyint.h"

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

int pyshape_parse(PyObject *out, PyObject *ins, struct shapes *sh)
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

void pyshape_copy(struct shapes *dst, const struct shapes *src)
{
    dst->has_out = src->has_out;
    if (src->has_out)
        shape_copy(&dst->out, &src->out);
    dst->n_in = src->n_in;
    for (size_t i = 0; i < src->n_in; i++)
        shape_copy(&dst->in[i], &src->in[i]);
}

int pyshape_memo_hit(const struct shape_memo *m, PyObject *out, PyObject *ins)
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

void pyshape_memo_clear(struct shape_memo *m)
{
    Py_CLEAR(m->out);
    for (size_t i = 0; i < m->n_in; i++)
        Py_CLEAR(m->in[i]);
    m->n_in = 0;
    m->valid = 0;
}

void pyshape_memo_keep(struct shape_memo *m, PyObject *out, PyObject *ins, const struct shapes *sh)
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
    pyshape_memo_clear(m);
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
    pyshape_copy(&m->sh, sh);
    m->valid = 1;
}
