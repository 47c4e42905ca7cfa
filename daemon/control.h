/*
 * control — answers control requests (sessions, status, report, delete) on a
 * connection; see control.c for which thread does what.
 */
#ifndef TRACECTLD_CONTROL_H
#define TRACECTLD_CONTROL_H

#include "conn.h"

/* Answers m (a PROTO_SESSIONS, _STATUS, _REPORT or _DELETE request) on c. */
void control_handle(struct conn *c, struct proto_msg *m);
/* The store finished a STORE_DELETE job (job->cookie is the conn). Frees the job. */
void control_delete_done(struct store_job *job);

#endif
