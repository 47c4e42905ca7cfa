/*
 * walvfs — an SQLite VFS over the default one that gathers the writes of a
 * transaction into its write-ahead log into large writes.
 *
 * SQLite writes each WAL frame with two calls, its 24-byte header and its
 * page: a blocks transaction of the ingest benchmark (~1 300 frames) made
 * ~2 600 pwrite(2) calls, ~12 % of the writer thread's time on a VM where
 * a system call costs microseconds. Through this VFS a WAL's writes that
 * follow one another in the file are copied into a buffer (WALVFS_BUF) and
 * written when it is full, when a write goes elsewhere, when any other
 * method is called on the file (read, sync, truncate, size, close, ...), and
 * at the page of a commit frame (the frame whose header holds the database
 * size: the WAL file format, https://sqlite.org/fileformat2.html#walformat)
 * before that write returns. SQLite publishes a commit to other connections
 * (the wal-index header) only after the commit frame's write returned, so
 * every connection, in this process or another, reads only frames that are
 * in the file, and a commit that returned is in the file as it was without
 * this VFS. A failed write is the failed write of the frame that triggered it
 * (the transaction fails and rolls back, as it would without the buffer).
 *
 * Every other file (the database, its rollback journal, temporary files) and
 * every other method go to the default VFS unchanged; files opened through
 * this VFS and through the default one share their locks and wal-index as
 * any two connections of the process do.
 */
#ifndef TRACECTLD_WALVFS_H
#define TRACECTLD_WALVFS_H

#include <stddef.h>

/* The most the unix VFS writes in one call (its seekAndWriteFd() masks the length with 0x1ffff). */
#define WALVFS_BUF 0x1ffffu

/*
 * The VFS's name for sqlite3_open_v2(), registered at the first call (not as
 * the default); NULL (the default VFS) if it could not be.
 */
const char *walvfs_name(void);

#endif
