/* fault.c — see fault.h. Debug builds only: a Release build compiles this file to nothing. */
#include "fault.h"

#ifdef TRACECTLD_FAULT_INJECT
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "log.h"

#define N_KINDS 6

static const char *const kind_names[N_KINDS] = {"write",    "sync",   "read",
                                                "truncate", "malloc", "own"};

/*
 * The fault of the current session. Written in main() and on the writer
 * thread only; other threads read nothing but `counted` (theirs: false).
 */
static struct {
    bool configured;  /* $TRACECTLD_FAULT was set: nothing below is written otherwise */
    const char *file; /* $TRACECTLD_FAULT's @FILE, or NULL: the spec is fixed */
    const char *hits; /* $TRACECTLD_FAULT_HITS, or NULL */
    bool on;          /* a spec is set for this session */
    bool persist;
    bool open;    /* count from the session's creation */
    bool pending; /* counting starts at the session's first batch */
    bool armed;   /* counting */
    enum fault_kind kind;
    int code;        /* what a failing I/O call returns */
    unsigned long n; /* the call that fails */
    unsigned long k; /* calls counted since the count started */
} fault;

static _Thread_local bool counted; /* this thread's calls count (fault_thread) */

static sqlite3_mem_methods mem; /* SQLite's own allocator, which the wrapper calls */

/* Appends "failed KIND k" to the hits file (a test's: best effort). */
static void fault_note(unsigned long k)
{
    char line[48];
    int fd, len;

    if (fault.hits == NULL || (fd = open(fault.hits, O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0)
        return;
    len = snprintf(line, sizeof(line), "failed %s %lu\n", kind_names[fault.kind], k);
    if (write(fd, line, (size_t)len) != len)
        log_error("fault: cannot note the failure in %s", fault.hits);
    close(fd);
}

/* Counts one call of kind: true when it must fail. */
static bool fault_hit(enum fault_kind kind)
{
    if (!counted || !fault.armed || kind != fault.kind)
        return false;
    fault.k++;
    if (fault.k < fault.n || (fault.k > fault.n && !fault.persist))
        return false;
    fault_note(fault.k);
    return true;
}

static void *fault_malloc(int n)
{
    return fault_hit(FAULT_MALLOC) ? NULL : mem.xMalloc(n);
}

static void *fault_realloc(void *p, int n)
{
    return fault_hit(FAULT_MALLOC) ? NULL : mem.xRealloc(p, n);
}

static void fault_free(void *p)
{
    mem.xFree(p);
}

static int fault_size(void *p)
{
    return mem.xSize(p);
}

static int fault_roundup(int n)
{
    return mem.xRoundup(n);
}

static int fault_init(void *arg)
{
    return mem.xInit(arg);
}

static void fault_shutdown(void *arg)
{
    mem.xShutdown(arg);
}

/* Does the word [p, end) equal w? */
static bool word_is(const char *p, const char *end, const char *w)
{
    return (size_t)(end - p) == strlen(w) && strncmp(p, w, (size_t)(end - p)) == 0;
}

/* KIND:N[:persist][:full][:open] into `fault`; -EINVAL when it is not that. */
static int fault_parse(const char *spec)
{
    static const int codes[N_KINDS] = {SQLITE_IOERR_WRITE,    SQLITE_IOERR_FSYNC, SQLITE_IOERR_READ,
                                       SQLITE_IOERR_TRUNCATE, SQLITE_NOMEM,       SQLITE_NOMEM};
    const char *p = strchr(spec, ':');
    char *end;
    size_t i;

    fault.on = fault.persist = fault.open = false;
    for (i = 0; p != NULL && i < N_KINDS && !word_is(spec, p, kind_names[i]); i++)
        ;
    if (p == NULL || i == N_KINDS)
        return -EINVAL;
    fault.kind = (enum fault_kind)i;
    fault.code = codes[i];
    errno = 0;
    fault.n = strtoul(p + 1, &end, 10);
    if (errno != 0 || end == p + 1 || fault.n == 0)
        return -EINVAL;
    while (*end == ':') {
        p = end + 1;
        end = strchr(p, ':');
        if (end == NULL)
            end = (char *)p + strlen(p);
        if (word_is(p, end, "persist"))
            fault.persist = true;
        else if (word_is(p, end, "full") && fault.kind < FAULT_MALLOC)
            fault.code = SQLITE_FULL;
        else if (word_is(p, end, "open"))
            fault.open = true;
        else
            return -EINVAL;
    }
    if (*end != '\0')
        return -EINVAL;
    fault.on = true;
    return 0;
}

/* The spec in fault.file for the next session; a missing or empty file: none. */
static void fault_read_file(void)
{
    char spec[64] = "";
    FILE *f = fopen(fault.file, "r");

    fault.on = false;
    if (f == NULL)
        return;
    if (fgets(spec, sizeof(spec), f) != NULL) {
        spec[strcspn(spec, "\n")] = '\0';
        if (spec[0] != '\0' && fault_parse(spec) < 0)
            log_error("fault: %s holds %s: no fault for this session", fault.file, spec);
    }
    fclose(f);
}

int fault_configure(void)
{
    static sqlite3_mem_methods wrap = {fault_malloc,  fault_free, fault_realloc,  fault_size,
                                       fault_roundup, fault_init, fault_shutdown, NULL};
    const char *spec = getenv("TRACECTLD_FAULT");

    if (spec == NULL || *spec == '\0')
        return 0;
    if (spec[0] == '@') {
        fault.file = spec + 1;
    } else if (fault_parse(spec) < 0) {
        log_error("TRACECTLD_FAULT=%s: want KIND:N[:persist][:full][:open] or @FILE, KIND one of"
                  " write, sync, read, truncate, malloc, own",
                  spec);
        return -EINVAL;
    }
    fault.hits = getenv("TRACECTLD_FAULT_HITS");
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &mem) != SQLITE_OK ||
        sqlite3_config(SQLITE_CONFIG_MALLOC, &wrap) != SQLITE_OK)
        return -EBUSY;
    fault.configured = true;
    log_info("fault injection: %s", spec);
    return 0;
}

void fault_thread(void)
{
    counted = true;
}

void fault_open(void)
{
    if (!fault.configured)
        return; /* several writer threads (a test's stores) share this state: never touched */
    fault.armed = false;
    if (fault.file != NULL)
        fault_read_file();
    fault.k = 0;
    fault.pending = fault.on && !fault.open;
    fault.armed = fault.on && fault.open;
}

void fault_batch(void)
{
    if (fault.configured && fault.pending) {
        fault.pending = false;
        fault.armed = true;
    }
}

void fault_end(void)
{
    if (fault.configured)
        fault.armed = fault.pending = false;
}

int fault_io(enum fault_kind kind)
{
    return fault_hit(kind) ? fault.code : SQLITE_OK;
}

bool fault_own(void)
{
    return fault_hit(FAULT_OWN);
}
#else
typedef int fault_unused; /* ISO C: a translation unit is not empty */
#endif
