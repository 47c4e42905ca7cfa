/*
 * live — answers ["live", {"session": S}] (proto/PROTOCOL.md Part 3), what
 * `tracectl top` polls: a live session's counters as the loop thread holds
 * them, without touching the session file, so the answer is current to the
 * last batch received (a report lags by up to --commit-interval) and costs
 * no I/O. Loop thread only.
 *
 * The counters are kept as entries are accepted (conn_count_batch): per
 * connected process its largest step and entries, per session op id its
 * calls and summed duration (session_count_entry). They live only while the
 * session does: an ended session answers with its totals and empty lists.
 */
#ifndef TRACECTLD_LIVE_H
#define TRACECTLD_LIVE_H

#include "conn.h"

/* Sends the live map of session s on control connection c. */
void live_reply(struct conn *c, struct session *s);

#endif
