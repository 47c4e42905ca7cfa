/* users.c — see users.h. */
#include <stdlib.h>

#include "conn.h"
#include "control.h"
#include "users.h"

struct user *users_get(struct daemon *d, int64_t uid)
{
    struct user *u;

    for (u = d->users; u != NULL; u = u->next) {
        if (u->uid == uid) {
            u->conns++;
            return u;
        }
    }
    if ((u = calloc(1, sizeof(*u))) == NULL)
        return NULL;
    u->uid = uid;
    u->conns = 1;
    u->heavy_id = -1;
    u->next = d->users;
    d->users = u;
    d->n_users++;
    return u;
}

static void users_free(struct daemon *d, struct user *u)
{
    struct user **p;

    for (p = &d->users; *p != u; p = &(*p)->next)
        ;
    *p = u->next;
    d->n_users--;
    free(u);
}

void users_put(struct daemon *d, struct user *u)
{
    if (u != NULL && --u->conns == 0 && u->cost == 0)
        users_free(d, u);
}

void users_free_all(struct daemon *d)
{
    while (d->users != NULL)
        users_free(d, d->users);
}

void users_tick(struct daemon *d)
{
    for (struct user *u = d->users, *next; u != NULL; u = next) {
        next = u->next;
        u->cost -= u->cost >= 64 ? u->cost / 64 : u->cost;
        if (u->conns == 0 && u->cost == 0)
            users_free(d, u);
    }
}

void users_wait(struct conn *c)
{
    struct user *u = c->user;

    if (c->waiting)
        return;
    c->waiting = true;
    c->wait_next = NULL;
    if (u->last != NULL)
        u->last->wait_next = c;
    else
        u->first = c;
    u->last = c;
}

void users_unwait(struct conn *c)
{
    struct user *u = c->user;
    struct conn *prev = NULL;

    if (!c->waiting)
        return;
    for (struct conn *k = u->first; k != c; k = k->wait_next)
        prev = k;
    if (prev != NULL)
        prev->wait_next = c->wait_next;
    else
        u->first = c->wait_next;
    if (u->last == c)
        u->last = prev;
    c->waiting = false;
    c->wait_next = NULL;
}

/* Whether c, waiting in u's queue, may take a slot now (FAIRNESS in users.h). */
static bool users_may_start(struct daemon *d, struct user *u, struct conn *c)
{
    bool shared = d->opt.system; /* several users: keep a slot for the next one */
    bool heavy;

    if (!conn_may_start(c))
        return false;
    if (c->held.type == PROTO_EXPORT)
        return d->n_exports < CONN_MAX_EXPORTS && (!shared || u->exports < CONN_MAX_EXPORTS / 2);
    if (d->n_reports >= CONN_MAX_REPORTS)
        return false;
    if (shared && u->reports >= CONN_MAX_REPORTS - 1)
        return false;
    heavy = control_report_heavy(c, &c->held.u.req);
    if (heavy && (d->n_heavy >= CONN_MAX_HEAVY || (shared && u->heavy >= CONN_MAX_HEAVY - 1)))
        return false;
    return true;
}

/*
 * u's oldest waiting request that may start, or NULL: oldest first within
 * each lane (a report waiting for a heavy slot does not hold up the
 * user's small ones behind it, nor an export its reports).
 */
static struct conn *users_next(struct daemon *d, struct user *u)
{
    for (struct conn *c = u->first; c != NULL; c = c->wait_next)
        if (users_may_start(d, u, c))
            return c;
    return NULL;
}

void users_schedule(struct daemon *d)
{
    /* A granted connection may queue another report of its buffer: the loop below sees it. */
    if (d->scheduling || d->stopping)
        return;
    d->scheduling = true;
    for (;;) {
        struct user *best = NULL;
        struct conn *c = NULL, *k;

        if (d->n_reports >= CONN_MAX_REPORTS && d->n_exports >= CONN_MAX_EXPORTS)
            break; /* every slot is taken: no need to walk the queues */

        for (struct user *u = d->users; u != NULL; u = u->next) {
            if (u->first == NULL || (k = users_next(d, u)) == NULL)
                continue;
            if (best == NULL || u->cost < best->cost ||
                (u->cost == best->cost && u->served < best->served)) {
                best = u;
                c = k;
            }
        }
        if (best == NULL)
            break;
        users_unwait(c);
        best->served = ++d->users_served;
        conn_grant(c); /* it dispatches its report now: n_reports grows */
    }
    d->scheduling = false;
}
