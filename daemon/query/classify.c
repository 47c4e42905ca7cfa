/* classify.c — re-classifying a stored session; see classify.h. */
#include "classify.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "info.h"
#include "ranks.h"
#include "vtab.h"

#define CLASSIFY_BUSY_MS 5000

int classify_rules_init(struct classify_rules *r, const char *comm, const char *compute,
                        const char *memory, char *err, size_t errlen)
{
    const char *pat[3] = {comm, memory, compute};
    static const char *const what[3] = {"comm", "memory", "compute"};

    memset(r, 0, sizeof(*r));
    for (int i = 0; i < 3; i++) {
        int rc;
        if (pat[i] == NULL)
            continue;
        rc = regcomp(&r->re[i], pat[i], REG_EXTENDED | REG_ICASE | REG_NOSUB);
        if (rc != 0) {
            char why[128];
            regerror(rc, &r->re[i], why, sizeof(why));
            snprintf(err, errlen, "classify: --%s '%s': %s", what[i], pat[i], why);
            classify_rules_deinit(r);
            return -EINVAL;
        }
        r->set[i] = 1;
    }
    return 0;
}

void classify_rules_deinit(struct classify_rules *r)
{
    for (int i = 0; i < 3; i++)
        if (r->set[i])
            regfree(&r->re[i]);
    memset(r, 0, sizeof(*r));
}

const char *classify_rules_match(const struct classify_rules *r, const char *name)
{
    static const char *const cats[3] = {"comm", "memory", "compute"};

    for (int i = 0; i < 3; i++)
        if (r->set[i] && regexec(&r->re[i], name, 0, NULL, 0) == 0)
            return cats[i];
    return NULL;
}

static int classify_fail(sqlite3 *db, int rc, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "classify: %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    return -EIO;
}

int classify_session(const char *db_path, const struct classify_rules *r, uint64_t *ops,
                     uint64_t *changed, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *sel = NULL, *upd = NULL;
    char why[256];
    int rc, ret = 0;

    *ops = *changed = 0;
    if ((rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL)) != SQLITE_OK) {
        ret = classify_fail(db, rc, "open", err, errlen);
        goto out;
    }
    sqlite3_busy_timeout(db, CLASSIFY_BUSY_MS);
    if ((rc = vtab_register(db)) != SQLITE_OK) { /* entries of a blocks file */
        ret = classify_fail(db, rc, "open", err, errlen);
        goto out;
    }
    if ((ret = info_schema_check(db, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "classify: %s", why);
        goto out;
    }
    /* The loop marks a session ended before the writer has closed its file: wait for the
     * writer's last transaction (info.ended), on files that have the rank aggregates
     * (up to CLASSIFY_BUSY_MS). */
    for (int i = 0; i < CLASSIFY_BUSY_MS / 10 && info_int(db, "ranks", -1) >= 0 &&
                    info_int(db, "ended", -1) != 1;
         i++)
        usleep(10000);
    /* (a session interrupted by a daemon stop never gets it: after the wait, go on) */
    if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, "SELECT id, name, category FROM ops", -1, &sel, NULL)) !=
            SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, "UPDATE ops SET category = ? WHERE id = ?", -1, &upd, NULL)) !=
            SQLITE_OK) {
        ret = classify_fail(db, rc, "ops", err, errlen);
        goto out;
    }
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(sel, 1);
        const char *old = (const char *)sqlite3_column_text(sel, 2);
        const char *cat = name != NULL ? classify_rules_match(r, name) : NULL;

        (*ops)++;
        if (cat == NULL || (old != NULL && strcmp(old, cat) == 0))
            continue;
        sqlite3_bind_text(upd, 1, cat, -1, SQLITE_STATIC);
        sqlite3_bind_int64(upd, 2, sqlite3_column_int64(sel, 0));
        rc = sqlite3_step(upd);
        sqlite3_reset(upd);
        if (rc != SQLITE_DONE)
            break;
        (*changed)++;
    }
    /* until the rebuild below commits, the rank aggregates no longer match the categories */
    if ((rc != SQLITE_DONE && rc != SQLITE_ROW) ||
        (rc = sqlite3_exec(db, "INSERT OR REPLACE INTO info VALUES ('ranks', 2)", NULL, NULL,
                           NULL)) != SQLITE_OK ||
        (rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        ret = classify_fail(db, rc, "update ops", err, errlen);
        goto out;
    }
    sqlite3_finalize(sel);
    sqlite3_finalize(upd);
    sel = upd = NULL;
    if ((ret = ranks_rebuild(db, why, sizeof(why))) != 0)
        snprintf(err, errlen, "classify: rebuild the rank aggregates: %s", why);
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(upd);
    if (ret < 0 && db != NULL)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return ret;
}
