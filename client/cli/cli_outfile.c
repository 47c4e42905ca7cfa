/*
 * cli_outfile — an output file written like a shell redirect (see cli_outfile.h).
 */
#include "cli_outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/*
 * The temporary file, reachable from the signal handler: a signal handler
 * gets no argument, so this is the one place the CLI keeps state in globals.
 * armed is set (with the signals blocked) once tmp names a file that exists.
 */
static char cli_outfile_tmpbuf[PATH_MAX];
static volatile sig_atomic_t cli_outfile_armed;

static const int cli_outfile_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define CLI_OUTFILE_NSIG (sizeof(cli_outfile_signals) / sizeof(cli_outfile_signals[0]))
static struct sigaction cli_outfile_old[CLI_OUTFILE_NSIG];
static bool cli_outfile_caught[CLI_OUTFILE_NSIG];

const char *cli_outfile_tmp(void)
{
    return cli_outfile_armed ? cli_outfile_tmpbuf : NULL;
}

/* Removes the temporary file, then dies of the same signal as if never caught. */
static void cli_outfile_on_signal(int sig)
{
    if (cli_outfile_armed)
        unlink(cli_outfile_tmpbuf);
    cli_outfile_armed = 0;
    for (size_t i = 0; i < CLI_OUTFILE_NSIG; i++) {
        if (cli_outfile_signals[i] == sig)
            sigaction(sig, &cli_outfile_old[i], NULL);
    }
    /* pending until the handler returns (the signal is blocked while it runs) */
    raise(sig);
}

/* Blocks the signals the handler catches; *old receives the mask to restore. */
static void cli_outfile_block(sigset_t *old)
{
    sigset_t set;

    sigemptyset(&set);
    for (size_t i = 0; i < CLI_OUTFILE_NSIG; i++)
        sigaddset(&set, cli_outfile_signals[i]);
    sigprocmask(SIG_BLOCK, &set, old);
}

/* Catches the signals (those not ignored: a job started with them ignored stays so). */
static void cli_outfile_catch(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cli_outfile_on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < CLI_OUTFILE_NSIG; i++) {
        cli_outfile_caught[i] = false;
        if (sigaction(cli_outfile_signals[i], NULL, &cli_outfile_old[i]) != 0 ||
            cli_outfile_old[i].sa_handler == SIG_IGN)
            continue;
        cli_outfile_caught[i] = sigaction(cli_outfile_signals[i], &sa, NULL) == 0;
    }
}

static void cli_outfile_uncatch(void)
{
    for (size_t i = 0; i < CLI_OUTFILE_NSIG; i++) {
        if (cli_outfile_caught[i])
            sigaction(cli_outfile_signals[i], &cli_outfile_old[i], NULL);
        cli_outfile_caught[i] = false;
    }
}

/* A malloc'd copy of link resolved against the directory of `from`; NULL when out of memory. */
static char *cli_outfile_join(const char *from, const char *link)
{
    const char *slash = strrchr(from, '/');
    size_t dir = slash == NULL ? 0 : (size_t)(slash - from) + 1; /* keeps the '/' */
    char *p;

    if (link[0] == '/')
        return strdup(link);
    if ((p = malloc(dir + strlen(link) + 1)) == NULL)
        return NULL;
    memcpy(p, from, dir);
    strcpy(p + dir, link);
    return p;
}

/*
 * Follows the symbolic links at the end of path. Returns 0 with *out (malloc'd)
 * naming what is not a link, *exists telling whether it exists and *st its
 * stat, or a negative errno (-ELOOP, -ENOMEM, lstat's or readlink's error).
 */
static int cli_outfile_resolve(const char *path, char **out, struct stat *st, bool *exists)
{
    char link[PATH_MAX], *cur = strdup(path), *next;
    ssize_t n;

    for (int hops = 0; cur != NULL; hops++) {
        bool absent = lstat(cur, st) != 0;

        if (absent && errno != ENOENT)
            break;
        if (absent || !S_ISLNK(st->st_mode)) {
            *exists = !absent;
            *out = cur;
            return 0;
        }
        if (hops == CLI_OUTFILE_MAX_LINKS) {
            errno = ELOOP;
            break;
        }
        if ((n = readlink(cur, link, sizeof(link))) < 0)
            break;
        if ((size_t)n == sizeof(link)) {
            errno = ENAMETOOLONG;
            break;
        }
        link[n] = '\0';
        next = cli_outfile_join(cur, link);
        free(cur);
        cur = next;
    }
    if (cur == NULL)
        return -ENOMEM;
    n = errno;
    free(cur);
    return (int)-n;
}

/* A character device or FIFO: written into, as `>` does (a FIFO waits for its reader). */
static int cli_outfile_open_special(struct cli_outfile *o, const char *cmd)
{
    int fd = open(o->target, O_WRONLY | O_NOCTTY | O_CLOEXEC);

    if (fd < 0 || (o->f = fdopen(fd, "wb")) == NULL) {
        cli_error("%s: cannot open %s: %s", cmd, o->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}

/*
 * The temporary file beside the target, with the target's mode (and owner,
 * where allowed) when st is not NULL, else 0666 minus the umask.
 */
static int cli_outfile_open_tmp(struct cli_outfile *o, const struct stat *st, const char *cmd)
{
    mode_t mask = umask(0), mode = st != NULL ? st->st_mode & 07777 : 0666 & ~mask;
    sigset_t old;
    int fd, err;

    umask(mask);
    if (strlen(o->target) + sizeof(".XXXXXX") > sizeof(cli_outfile_tmpbuf)) {
        cli_error("%s: cannot create %s: %s", cmd, o->path, strerror(ENAMETOOLONG));
        return CLI_EXIT_ERROR;
    }
    cli_outfile_block(&old);
    strcpy(cli_outfile_tmpbuf, o->target);
    strcat(cli_outfile_tmpbuf, ".XXXXXX");
    if ((fd = mkstemp(cli_outfile_tmpbuf)) >= 0) {
        cli_outfile_catch();
        cli_outfile_armed = 1;
        o->tmp = true;
    }
    err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (fd < 0) {
        cli_error("%s: cannot create a file beside %s: %s", cmd, o->path, strerror(err));
        return CLI_EXIT_ERROR;
    }
    /* The owner first: fchown clears the set-id bits that fchmod then restores. Only root
     * (or the owner, for a group it is in) may; otherwise the file becomes ours. */
    if (st != NULL && (st->st_uid != geteuid() || st->st_gid != getegid()) &&
        fchown(fd, st->st_uid, st->st_gid) != 0)
        (void)fchown(fd, (uid_t)-1, st->st_gid);
    if (fchmod(fd, mode) != 0 || (o->f = fdopen(fd, "wb")) == NULL) {
        cli_error("%s: cannot create %s: %s", cmd, cli_outfile_tmpbuf, strerror(errno));
        close(fd);
        return cli_outfile_close(o, CLI_EXIT_ERROR);
    }
    return CLI_EXIT_OK;
}

int cli_outfile_open(struct cli_outfile *o, const char *path, const char *cmd)
{
    struct stat st;
    bool exists;
    int rc;

    *o = (struct cli_outfile){.f = stdout, .path = path};
    if (path == NULL)
        return CLI_EXIT_OK;
    o->f = NULL;
    if (path[0] == '\0') { /* lstat("") fails with ENOENT: it is no path to create */
        cli_error("%s: cannot open '': %s", cmd, strerror(ENOENT));
        return CLI_EXIT_ERROR;
    }
    if ((rc = cli_outfile_resolve(path, &o->target, &st, &exists)) != 0) {
        cli_error("%s: cannot open %s: %s", cmd, path, strerror(-rc));
        return CLI_EXIT_ERROR;
    }
    if (exists && S_ISREG(st.st_mode) && faccessat(AT_FDCWD, o->target, W_OK, AT_EACCESS) != 0) {
        /* `>` would fail on it; a rename in a writable directory would not */
        cli_error("%s: cannot write %s: %s", cmd, path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    } else if (!exists || S_ISREG(st.st_mode)) {
        rc = cli_outfile_open_tmp(o, exists ? &st : NULL, cmd);
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        rc = cli_outfile_open_special(o, cmd);
    } else {
        cli_error("%s: not writing to %s: %s", cmd, path,
                  S_ISDIR(st.st_mode) ? "it is a directory"
                                      : "it is not a file, a character device or a FIFO");
        rc = CLI_EXIT_ERROR;
    }
    if (rc != CLI_EXIT_OK) {
        free(o->target);
        o->target = NULL;
        o->f = NULL;
    }
    return rc;
}

/* Flushes, syncs and closes the temporary file, then renames or removes it. */
static int cli_outfile_finish_tmp(struct cli_outfile *o, int rc)
{
    sigset_t old;

    if (o->f != NULL && rc == CLI_EXIT_OK &&
        (fflush(o->f) != 0 || ferror(o->f) || fsync(fileno(o->f)) != 0)) {
        cli_error("cannot write %s: %s", o->path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (o->f != NULL && fclose(o->f) != 0 && rc == CLI_EXIT_OK) {
        cli_error("cannot write %s: %s", o->path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    cli_outfile_block(&old);
    if (rc == CLI_EXIT_OK && rename(cli_outfile_tmpbuf, o->target) != 0) {
        cli_error("cannot replace %s: %s", o->path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (rc != CLI_EXIT_OK)
        unlink(cli_outfile_tmpbuf);
    cli_outfile_armed = 0;
    cli_outfile_uncatch();
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int cli_outfile_close(struct cli_outfile *o, int rc)
{
    if (o->target == NULL)
        return rc; /* stdout (cli_main flushes and checks it), or never opened */
    if (o->tmp) {
        rc = cli_outfile_finish_tmp(o, rc);
    } else if (o->f != NULL && (ferror(o->f) | fclose(o->f)) != 0 && rc == CLI_EXIT_OK) {
        cli_error("cannot write %s: %s", o->path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    free(o->target);
    o->target = NULL;
    o->f = NULL;
    o->tmp = false;
    return rc;
}
