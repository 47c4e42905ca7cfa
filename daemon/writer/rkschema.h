/*
 * rkschema — the rank tables (schema/ranks.sql) of a session file: creating
 * them. Writer thread (or `classify`'s worker), when struct ranks is made.
 */
#ifndef TRACECTLD_RKSCHEMA_H
#define TRACECTLD_RKSCHEMA_H

#include "rk.h"

/* Creates the tables if needed. 0 or a negative errno. */
int rkschema_create(struct ranks *r);

#endif
