/*
 * pyregion.c — Client.op() and the Region type it returns: what `with
 * client.op(...)` enters. Entering reads the clock and links the region
 * into its thread's chain (giving it a parent when a region of the same
 * client is open around it); leaving records one complete entry on its
 * client. Freed regions are kept for the next op(). The hot path, so op()
 * calls nothing in another file but pyclient_named_op() (and pyshape.c's when
 * given shapes): see the inline helpers in pyint.h. Runs under the GIL,
 * which guards the chain and the free list; see pyint.h.
 */
#include "pyint.h"

/* This thread's innermost open region (the GIL guards it with the chain). */
static _Thread_local Region *region_top;

/*
 * Regions freed lately, kept for the next op() (as CPython keeps floats): a
 * `with` costs no allocation. Guarded by the GIL.
 */
#define REGION_FREE 16
static Region *region_free[REGION_FREE];
static int n_region_free;

/* A Region of op on cl (holding cl) with no shapes, not entered; NULL with an exception set. */
static Region *region_new(Client *cl, uint32_t op, uint64_t mem)
{
    Region *r;

    if (n_region_free == 0) {
        if ((r = PyObject_New(Region, &pyregion_type)) == NULL)
            return NULL;
    } else {
        r = region_free[--n_region_free];
        (void)PyObject_Init((PyObject *)r, &pyregion_type);
    }
    Py_INCREF(cl);
    r->client = cl;
    r->op = op;
    r->mem = mem;
    r->start = 0;
    r->has_checksum = 0;
    r->open = false;
    r->outer = NULL;
    r->sh.has_out = 0;
    r->sh.n_in = 0;
    return r;
}

PyObject *pyregion_op(Client *cl, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"name", "out_shape", "in_shapes", "mem", "category", NULL};
    static PyObject *interned[5];
    PyObject *v[5];
    int64_t op;
    uint64_t mem;
    Region *r;

    if (pycheck_args("op", args, nargs, kwnames, names, interned, 1, v, 5) < 0 ||
        (op = pyclient_named_op(cl, "op", v[0], v[4])) < 0 || pycheck_opt_u64(v[3], &mem) < 0)
        return NULL;
    if ((r = region_new(cl, (uint32_t)op, mem)) == NULL)
        return NULL;
    if (v[1] == NULL && v[2] == NULL)
        return (PyObject *)r; /* no shapes, as region_new left it */
    if (pyshape_memo_hit(&cl->memo, v[1], v[2])) {
        pyshape_copy(&r->sh, &cl->memo.sh);
    } else if (pyshape_parse(v[1], v[2], &r->sh) == 0) {
        pyshape_memo_keep(&cl->memo, v[1], v[2], &r->sh);
    } else {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

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
    if (pycheck_opt_u64(v, &r->checksum) < 0)
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

PyTypeObject pyregion_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracectl.Region",
    .tp_basicsize = sizeof(Region),
    .tp_dealloc = (destructor)region_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One op's span: `with client.op(name): ...` records it on exit.",
    .tp_methods = region_methods,
    .tp_getset = region_getset,
};
