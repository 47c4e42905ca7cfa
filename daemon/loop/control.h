/*
 * control — answers control requests (sessions, status, report, delete,
 * export) on a connection; see control.c for which thread does what.
 */
#ifndef TRACECTLD_CONTROL_H
#define TRACECTLD_CONTROL_H

#include "conn.h"

/* Answers m (a PROTO_SESSIONS, _STATUS, _REPORT, _DELETE, _EXPORT or _LIVE request) on c. */
void control_handle(struct conn *c, struct proto_msg *m);
/*
 * Whether a report for req on c is heavy: its session has --heavy-entries
 * entries or more, or the user's last report on it scanned as much as a
 * pass over that many entries would (USERS_HEAVY_STEPS steps per entry:
 * a filtered report reads every entry, several times). Heavy reports run
 * at most CONN_MAX_HEAVY at once, so a small session's report never waits
 * behind them all.
 */
bool control_report_heavy(struct conn *c, const struct proto_request *req);
/* The store finished a STORE_DELETE job (job->cookie is the conn). Frees the job. */
void control_delete_done(struct store_job *job);

#endif
