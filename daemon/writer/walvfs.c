/* walvfs.c — see walvfs.h. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "walvfs.h"

#define WAL_HDR       32 /* the WAL's header, at offset 0 */
#define WAL_FRAME_HDR 24 /* each frame's header, before its page */

/*
 * A file opened through the VFS: the default VFS's file follows the struct
 * (szOsFile). For a WAL, len bytes at off are written to the buffer and not
 * yet to the file.
 */
struct wfile {
    sqlite3_file base;
    sqlite3_file *real;
    unsigned char *buf; /* WALVFS_BUF bytes, allocated at a WAL's first write */
    sqlite3_int64 off;
    size_t len;
    sqlite3_int64 end; /* the end of what was written since the log last started over */
    bool wal;
    bool commit_next; /* the last write was a commit frame's header */
};

static sqlite3_vfs *root; /* the default VFS */

static int wal_flush(struct wfile *w)
{
    int rc;

    if (w->len == 0)
        return SQLITE_OK;
    rc = w->real->pMethods->xWrite(w->real, w->buf, (int)w->len, w->off);
    w->len = 0; /* written or failed: the frames it held fail with this write */
    return rc;
}

/*
 * The frame header's second field is the database's size in pages after the
 * commit for the frame that ends a transaction, 0 for every other frame.
 */
static bool commit_header(const void *p, int amt, sqlite3_int64 off)
{
    const unsigned char *h = p;

    return amt == WAL_FRAME_HDR && off >= WAL_HDR && (h[4] | h[5] | h[6] | h[7]) != 0;
}

/*
 * Appends go to the buffer; a write over what was written before (a page of
 * the transaction written again in place, the frame headers SQLite rewrites
 * after a spill, checksums included) goes to the file at once, after what
 * is pending, so that nothing it writes is left behind at the commit.
 */
static int wal_write(sqlite3_file *f, const void *p, int amt, sqlite3_int64 off)
{
    struct wfile *w = (struct wfile *)f;
    bool commit = w->commit_next;
    int rc = SQLITE_OK;

    w->commit_next = false;
    if (off == 0 && amt == WAL_HDR)
        w->end = 0; /* the log starts over */
    if (w->len > 0 && (off != w->off + (sqlite3_int64)w->len || w->len + (size_t)amt > WALVFS_BUF))
        rc = wal_flush(w);
    if (rc != SQLITE_OK)
        return rc;
    if (off < w->end || (size_t)amt > WALVFS_BUF ||
        (w->buf == NULL && (w->buf = malloc(WALVFS_BUF)) == NULL)) {
        rc = w->real->pMethods->xWrite(w->real, p, amt, off);
        if (rc == SQLITE_OK && off + amt > w->end)
            w->end = off + amt;
        return rc;
    }
    if (w->len == 0)
        w->off = off;
    memcpy(w->buf + w->len, p, (size_t)amt);
    w->len += (size_t)amt;
    w->end = off + amt;
    w->commit_next = commit_header(p, amt, off);
    return commit ? wal_flush(w) : SQLITE_OK;
}

/* ---- methods: a WAL's flush the buffer first; every file's then forward ---- */

#define REAL(f) (((struct wfile *)(f))->real)

static int flushed(sqlite3_file *f)
{
    struct wfile *w = (struct wfile *)f;

    return w->wal ? wal_flush(w) : SQLITE_OK;
}

static int f_close(sqlite3_file *f)
{
    struct wfile *w = (struct wfile *)f;
    int rc = flushed(f), rc2 = REAL(f)->pMethods->xClose(REAL(f));

    free(w->buf);
    w->buf = NULL;
    return rc != SQLITE_OK ? rc : rc2;
}

static int f_read(sqlite3_file *f, void *p, int amt, sqlite3_int64 off)
{
    int rc = fault_io(FAULT_READ);

    if (rc != SQLITE_OK)
        return rc;
    rc = flushed(f);

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xRead(REAL(f), p, amt, off);
}

static int f_write(sqlite3_file *f, const void *p, int amt, sqlite3_int64 off)
{
    int rc = fault_io(FAULT_WRITE);

    if (rc != SQLITE_OK)
        return rc;
    if (((struct wfile *)f)->wal)
        return wal_write(f, p, amt, off);
    return REAL(f)->pMethods->xWrite(REAL(f), p, amt, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    struct wfile *w = (struct wfile *)f;
    int rc = fault_io(FAULT_TRUNCATE);

    if (rc != SQLITE_OK)
        return rc;
    rc = flushed(f);
    if (w->end > size)
        w->end = size;

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int f_sync(sqlite3_file *f, int flags)
{
    int rc = fault_io(FAULT_SYNC);

    if (rc != SQLITE_OK)
        return rc;
    rc = flushed(f);

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    int rc = flushed(f);

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int f_lock(sqlite3_file *f, int lock)
{
    return REAL(f)->pMethods->xLock(REAL(f), lock);
}

static int f_unlock(sqlite3_file *f, int lock)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), lock);
}

static int f_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int f_control(sqlite3_file *f, int op, void *arg)
{
    int rc = flushed(f);

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int f_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int f_device(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int f_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}

static int f_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);
}

static void f_shm_barrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int f_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
    int rc = flushed(f);

    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFetch(REAL(f), off, amt, pp);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

/* Every file's methods: the default ones are of version 3 (the unix VFS's). */
static const sqlite3_io_methods methods = {
    3,          f_close,       f_read,      f_write,   f_truncate, f_sync,   f_size,
    f_lock,     f_unlock,      f_reserved,  f_control, f_sector,   f_device, f_shm_map,
    f_shm_lock, f_shm_barrier, f_shm_unmap, f_fetch,   f_unfetch,
};

/* ---- the VFS ---------------------------------------------------------------------- */

static int v_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *out)
{
    struct wfile *w = (struct wfile *)f;
    int rc;

    (void)vfs;
    memset(w, 0, sizeof(*w));
    w->real = (sqlite3_file *)(w + 1);
    w->wal = (flags & SQLITE_OPEN_WAL) != 0;
    rc = root->xOpen(root, name, w->real, flags, out);
    if (w->real->pMethods == NULL)
        return rc;                         /* base.pMethods NULL: SQLite will not close it */
    if (w->real->pMethods->iVersion < 3) { /* not the unix VFS: no buffer, no methods to miss */
        w->real->pMethods->xClose(w->real);
        return SQLITE_CANTOPEN;
    }
    w->base.pMethods = &methods;
    return rc;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync)
{
    (void)vfs;
    return root->xDelete(root, name, sync);
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return root->xAccess(root, name, flags, out);
}

static int v_full(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return root->xFullPathname(root, name, n, out);
}

static void *v_dlopen(sqlite3_vfs *vfs, const char *name)
{
    (void)vfs;
    return root->xDlOpen(root, name);
}

static void v_dlerror(sqlite3_vfs *vfs, int n, char *msg)
{
    (void)vfs;
    root->xDlError(root, n, msg);
}

static void (*v_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    (void)vfs;
    return root->xDlSym(root, h, sym);
}

static void v_dlclose(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    root->xDlClose(root, h);
}

static int v_random(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return root->xRandomness(root, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return root->xSleep(root, us);
}

static int v_time(sqlite3_vfs *vfs, double *t)
{
    (void)vfs;
    return root->xCurrentTime(root, t);
}

static int v_error(sqlite3_vfs *vfs, int n, char *msg)
{
    (void)vfs;
    return root->xGetLastError(root, n, msg);
}

static int v_time64(sqlite3_vfs *vfs, sqlite3_int64 *t)
{
    (void)vfs;
    return root->xCurrentTimeInt64(root, t);
}

static sqlite3_vfs walvfs = {
    .iVersion = 2,
    .zName = "tracectl-wal",
    .xOpen = v_open,
    .xDelete = v_delete,
    .xAccess = v_access,
    .xFullPathname = v_full,
    .xDlOpen = v_dlopen,
    .xDlError = v_dlerror,
    .xDlSym = v_dlsym,
    .xDlClose = v_dlclose,
    .xRandomness = v_random,
    .xSleep = v_sleep,
    .xCurrentTime = v_time,
    .xGetLastError = v_error,
    .xCurrentTimeInt64 = v_time64,
};

static const char *registered;

static void walvfs_register(void)
{
    if ((root = sqlite3_vfs_find(NULL)) == NULL || root->iVersion < 2)
        return;
    walvfs.szOsFile = (int)sizeof(struct wfile) + root->szOsFile;
    walvfs.mxPathname = root->mxPathname;
    if (sqlite3_vfs_register(&walvfs, 0) == SQLITE_OK)
        registered = walvfs.zName;
}

const char *walvfs_name(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, walvfs_register);
    return registered;
}
