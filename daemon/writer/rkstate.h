/*
 * rkstate — what the rank aggregates hold in memory between entries, saved
 * at each commit and read back when a file reopens mid-session or after a
 * crash: the arrivals at open collective instances (rk_open, with the order
 * they opened in) and how many opened so far (info.ranks_opened), the
 * occurrence counts (rk_occ), and each device's exposure state and pending
 * intervals (rk_devstate, rk_pend). Only the rows that changed are written;
 * after a rollback (r->resync) all of it. Writer thread, inside the open
 * transaction. 0 or a negative errno (-EIO: a saved state that cannot be).
 */
#ifndef TRACECTLD_RKSTATE_H
#define TRACECTLD_RKSTATE_H

#include "rk.h"

/* Prepares the statements (the tables exist); rkstate_free() frees them, also on failure. */
int rkstate_prepare(struct ranks *r);
void rkstate_free(struct ranks *r);
/* Saves the state that changed since the last commit. */
int rkstate_save(struct ranks *r);
/* Reloads the state the last commit saved (r empty but for its ops and processes). */
int rkstate_load(struct ranks *r);

#endif
