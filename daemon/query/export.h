/*
 * export — streams a session's entries to a control connection
 * (["export", {...}] in proto/PROTOCOL.md).
 *
 * One read transaction on the session file gives a consistent snapshot. Each
 * chunk of rows (4096 rows or 256 KiB, whichever comes first) is read and
 * packed on libuv's thread pool and sent as a reply, counted in the unread
 * replies (conn.h MEMORY); the next chunk is read only once the previous one
 * has been written to the socket and the unread replies leave room, so a
 * slow reader holds at most one chunk in the daemon's memory, and one that
 * stops reading is closed by --reply-timeout. An export takes one of
 * CONN_MAX_EXPORTS slots while it streams (users.h). The connection reads
 * no further requests until the stream has ended. A stopping daemon
 * interrupts the chunk being read (a progress handler on its connection).
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
