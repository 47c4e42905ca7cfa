/*
 * pyint.h — what the files of the CPython extension behind the `tracectl`
 * package share: the Client and Region objects, the parsed shapes, and each
 * file's entry points. Internal to client/python (the extension is built
 * with hidden visibility: only PyInit__tracectl is exported).
 *
 * DESIGN
 * A thin binding of libtracectl (tracectl.h) through the Python C API.
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
 * dict (pyclose.c) with the error in it, because a stopped or lost daemon
 * must not end the program it observes. Arguments the daemon would refuse
 * (an op id this client never defined, names, categories, meta, session,
 * rank and world outside proto.h's limits or with a NUL) raise ValueError,
 * TypeError or OverflowError at the call, with a message cut to a line.
 *
 * FILES (one subsystem each; functions another file calls carry the file's
 * name as prefix)
 *   _tracectl.c  the module: open() and the options it checks (arguments,
 *                the environment's session name), now_ns(), checksum()
 *   pyclient.c   the Client type: op ids, op(), record(), meta(), step
 *   pyclose.c    Client.flush(), close() and `with`: the status dict
 *   pyregion.c   the Region type: the per-thread chain, parent/id links,
 *                the free list
 *   pyshape.c    shapes from Python sequences, and the per-client memo
 *   pycheck.c    tracectl.Error, the argument checks against proto.h's
 *                limits, FASTCALL keyword parsing
 */
#ifndef PYINT_H
#define PYINT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracectl.h"

/* ---- pyshape.c ---------------------------------------------------------- */

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

/* Parses out and ins (each NULL or None: absent) into sh. 0, or -1 with an exception set. */
int pyshape_parse(PyObject *out, PyObject *ins, struct shapes *sh);
void pyshape_copy(struct shapes *dst, const struct shapes *src);
/* Whether (out, ins) are the memo's tuples. */
int pyshape_memo_hit(const struct shape_memo *m, PyObject *out, PyObject *ins);
/* Remembers sh as parsed from (out, ins) when they are exact tuples. */
void pyshape_memo_keep(struct shape_memo *m, PyObject *out, PyObject *ins, const struct shapes *sh);
/* Drops the memo's tuples; the memo then hits nothing. */
void pyshape_memo_clear(struct shape_memo *m);

/* ---- pyclient.c, pyregion.c --------------------------------------------- */

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

extern PyTypeObject pyclient_type; /* tracectl.Client */
extern PyTypeObject pyregion_type; /* tracectl.Region */

/*
 * The id of op name on cl for fn() (name NULL: not given, a TypeError),
 * interning it with category (NULL or None: the daemon classifies; else a
 * str checked against PROTO_MAX_CATEGORY) the first time. 0 for a closed,
 * disabled or offline client (which records nothing anyway); -1 with an
 * exception set on error.
 */
int64_t pyclient_named_op(Client *cl, const char *fn, PyObject *name, PyObject *category);
/* Client.op() (see its doc in pyclient.c): a new Region, or NULL with an exception set. */
PyObject *pyregion_op(Client *cl, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ---- pyclose.c ---------------------------------------------------------- */

/* Client.flush(), close(), __exit__ (see their docs in pyclient.c). */
PyObject *pyclose_flush(Client *cl, PyObject *args, PyObject *kw);
PyObject *pyclose_close(Client *cl, PyObject *args, PyObject *kw);
PyObject *pyclose_exit(Client *cl, PyObject *args);

/* ---- pycheck.c ---------------------------------------------------------- */

extern PyObject *pycheck_error; /* tracectl.Error, made by PyInit__tracectl */

/*
 * A tracectl.Error for the negative errno err, about what, with detail (the
 * library's tc_last_error() text; NULL or "": none) after it. Returns a new
 * reference, or NULL with an exception set.
 */
PyObject *pycheck_error_new(int err, const char *what, const char *detail);
/* Raises tracectl.Error for the negative errno err, about what. Returns NULL. */
PyObject *pycheck_raise(int err, const char *what);
/* repr() of s, cut to a line's worth of characters with "..." after. New ref or NULL. */
PyObject *pycheck_repr(PyObject *s);
/*
 * Checks that o is a str of min..max bytes of UTF-8 without a NUL; what names
 * it in the error ("op name", "category", ...). Returns its UTF-8 (owned by
 * o), or NULL with a TypeError or ValueError set.
 */
const char *pycheck_str(PyObject *o, const char *what, Py_ssize_t min, Py_ssize_t max);
/* Raise the TypeError of pycheck_args(); -1. */
int pycheck_too_many(const char *fn, int npos);
/* The keywords part of pycheck_args(); 0 or -1. */
int pycheck_kwargs(const char *fn, PyObject *const *kwvals, PyObject *kwnames,
                   const char *const *names, PyObject **interned, PyObject **vals);

/*
 * The helpers below are inline because op() is the hot path: called in
 * another file, they and region_new cost a `with tc.op(...)` 83 more
 * instructions (callgrind: 172 in the binding instead of 89, of about 2,200).
 */

/* An optional str argument checked as pycheck_str() (NULL when absent or None). 0 or -1. */
static inline int pycheck_opt_str(PyObject *o, const char *what, Py_ssize_t min, Py_ssize_t max,
                                  const char **s)
{
    *s = NULL;
    if (o == NULL || o == Py_None)
        return 0;
    *s = pycheck_str(o, what, min, max);
    return *s != NULL ? 0 : -1;
}

/* An optional unsigned argument (absent or None: 0). 0 or -1. */
static inline int pycheck_opt_u64(PyObject *o, uint64_t *v)
{
    *v = 0;
    if (o == NULL || o == Py_None)
        return 0;
    *v = PyLong_AsUnsignedLongLong(o);
    return *v == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/*
 * Parses a FASTCALL call of fn into vals[nvals] (borrowed; NULL when absent)
 * by the names in names (NULL-terminated), the first npos of which may be
 * positional. interned holds the names as interned str, filled on the first
 * call: the compiler interns the keywords of a call, so a pointer compare
 * finds them; others (a **dict's keys) are compared by value. 0, or -1 with
 * a TypeError set (or what filling interned raised).
 */
static inline int pycheck_args(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, const char *const *names, PyObject **interned,
                               int npos, PyObject **vals, int nvals)
{
    for (int i = 0; i < nvals; i++)
        vals[i] = NULL;
    if (nargs > npos)
        return pycheck_too_many(fn, npos);
    for (Py_ssize_t i = 0; i < nargs; i++)
        vals[i] = args[i];
    if (kwnames == NULL)
        return 0;
    return pycheck_kwargs(fn, args + nargs, kwnames, names, interned, vals);
}

#endif
