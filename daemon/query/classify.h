/*
 * classify — re-classifies the ops of a stored session by name (the
 * `classify` request, PROTOCOL.md Part 3) and rebuilds the aggregates that
 * depend on categories (ranks.h). Runs on a libuv worker thread with its own
 * read-write connection to an ended session's file (the writer has closed it).
 */
#ifndef TRACECTLD_CLASSIFY_H
#define TRACECTLD_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>

#include <regex.h>

/* The user's rules, compiled: comm, then memory, then compute (the first that matches wins). */
struct classify_rules {
    regex_t re[3]; /* CLASSIFY_COMM, CLASSIFY_MEMORY, CLASSIFY_COMPUTE */
    int set[3];
};

enum { CLASSIFY_COMM, CLASSIFY_MEMORY, CLASSIFY_COMPUTE };

/*
 * Compiles the given patterns (NULL: not given) as POSIX extended regexes
 * matched without case. 0, or -EINVAL with the reason in err (nothing to
 * free then).
 */
int classify_rules_init(struct classify_rules *r, const char *comm, const char *compute,
                        const char *memory, char *err, size_t errlen);
void classify_rules_deinit(struct classify_rules *r);
/* The category the rules give name, or NULL when none matches. */
const char *classify_rules_match(const struct classify_rules *r, const char *name);

/*
 * Applies the rules to every op of the session file at db_path and rebuilds
 * its rank aggregates. *ops: the ops in the file, *changed: those whose
 * category changed. 0, or a negative errno with a message in err.
 */
int classify_session(const char *db_path, const struct classify_rules *r, uint64_t *ops,
                     uint64_t *changed, char *err, size_t errlen);

#endif
