/*
 * export — streams a session's entries to a control connection
 * (["export", {...}] in proto/PROTOCOL.md).
 *
 * One read transaction on the session file gives a consistent snapshot. Each
 * chunk of rows is read and packed on libuv's thread pool; the next chunk is
 * read only once the previous one has been written to the socket, so a slow
 * reader holds at most one chunk (about 4096 rows) in the daemon's memory.
 * The connection reads no further requests until the stream has ended.
 */
#ifndef TRACECTLD_EXPORT_H
#define TRACECTLD_EXPORT_H

#include "conn.h"
#include "session.h"

/*
 * Starts streaming session s to c, in storage order or, with req->by_start,
 * by start time, or with req->by_rank by rank and then start time (a sort by
 * SQLite, which spills to temporary files rather than growing). Errors are
 * replied on c.
 */
void export_start(struct conn *c, struct session *s, const struct proto_request *req);

#endif
