/*
 * test_outfile.c — `tracectl export -o PATH` writes like a shell redirect
 * (client/cli/cli_outfile.h): onto a character device and a FIFO it writes
 * into them, a symbolic link is followed and kept, an existing file keeps
 * its mode, a directory is refused before the daemon is asked, and a CLI
 * killed mid-export leaves no temporary file behind.
 *
 * The bytes expected in each case are those of the same export on stdout,
 * and the CSV's line count is checked against the entries sent. Device
 * nodes are made with mknod(2), so the tests that need one run as root only
 * (skipped with the reason otherwise).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct tdaemon d;

static void stop_and_clean(void)
{
    harness_teardown(&d, SIGTERM);
}

TestSuite(outfile, .fini = stop_and_clean, .timeout = 120);

#define NSMALL 3000 /* entries of the session most tests export */

/* Starts the daemon and stores n entries of one op in one session; returns its id. */
static long long load(size_t n)
{
    long long id;
    int fd;

    harness_daemon_start(&d, NULL);
    fd = raw_producer(d.sock, "outfile", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    for (size_t i = 0; i < n; i += 10000)
        raw_send_batch(fd, 1, n - i < 10000 ? n - i : 10000, i * 1000, 1);
    cr_assert_eq(raw_flush(fd, 1), (long long)n);
    raw_bye(fd, 0);
    return id;
}

/* The export's argv, writing to path (NULL: stdout). ids must outlive it. */
static void export_argv(char *argv[10], char *ids, long long id, const char *path)
{
    int i = 0;

    snprintf(ids, 32, "%lld", id);
    argv[i++] = TRACECTL_BIN;
    argv[i++] = "--socket";
    argv[i++] = d.sock;
    argv[i++] = "export";
    argv[i++] = ids;
    argv[i++] = "--format";
    argv[i++] = "csv";
    if (path != NULL) {
        argv[i++] = "-o";
        argv[i++] = (char *)path;
    }
    argv[i] = NULL;
}

/* What the export writes on stdout, checked to hold a header and n rows. */
static char *export_stdout(long long id, size_t n)
{
    char ids[32], *argv[10], *out = NULL;
    size_t lines = 0;

    export_argv(argv, ids, id, NULL);
    cr_assert_eq(harness_run(&out, argv), 0);
    for (const char *p = out; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    cr_assert_eq(lines, n + 1, "a header and one line per entry");
    return out;
}

/* Starts `tracectl export ... -o path` in a child of uid (stdout and stderr to errpath). */
static pid_t export_start_as(uid_t uid, long long id, const char *path, const char *errpath)
{
    char ids[32], *argv[10];
    pid_t pid;
    int fd;

    export_argv(argv, ids, id, path);
    if ((pid = harness_fork_as(uid, 60)) != 0)
        return pid;
    fd = open(errpath ? errpath : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        _exit(122);
    execv(argv[0], argv);
    _exit(123);
}

static pid_t export_start(long long id, const char *path, const char *errpath)
{
    return export_start_as(geteuid(), id, path, errpath);
}

/* Runs the export to path; returns its exit status. */
static int export_to(long long id, const char *path)
{
    return harness_wait_child(export_start(id, path, NULL));
}

static long long ms_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/*
 * Reads from fd (non-blocking) until want bytes arrived, or 20 s passed;
 * returns what arrived (caller frees) and its length in *got.
 */
static char *read_until(int fd, size_t want, size_t *got)
{
    char *buf = malloc(want + 1);
    long long deadline = ms_now() + 20000;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t n;

    *got = 0;
    while (*got < want && ms_now() < deadline) {
        if (poll(&p, 1, 100) <= 0)
            continue;
        if ((n = read(fd, buf + *got, want - *got)) > 0)
            *got += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            break;
    }
    return buf;
}

/* Entries of dir whose names start with prefix (the leftovers of a temporary file). */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    int n = 0;

    cr_assert_not_null(dp);
    while ((de = readdir(dp)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(dp);
    return n;
}

static bool need_root(void)
{
    if (geteuid() == 0)
        return true;
    cr_skip_test("mknod(2) of a device node needs root; run the suite as root");
    return false;
}

/* ---- special files -------------------------------------------------------------- */

/*
 * Copies of /dev/null's node (1, 3) and /dev/full's (1, 7), made with mknod,
 * stay character devices: the export to the first succeeds, the one to the
 * second fails with ENOSPC, so it did write into the device. A pty's slave
 * (a character device that can be read back, through its master; in raw
 * mode so that the line discipline passes the bytes unchanged) receives
 * exactly the bytes of the export. (A mknod copy of a pty's node cannot be
 * opened: devpts refuses nodes outside it.)
 */
Test(outfile, char_device_is_written_into)
{
    char nul[PATH_MAX], full[PATH_MAX], errpath[PATH_MAX], *want, *got, *msg;
    long long id;
    struct stat st;
    struct termios t;
    size_t want_len, got_len, len;
    int master, slave, rc;
    pid_t cli;

    if (!need_root())
        return;
    id = load(NSMALL);
    want = export_stdout(id, NSMALL);
    want_len = strlen(want);
    snprintf(nul, sizeof(nul), "%s/null", d.dir);
    snprintf(full, sizeof(full), "%s/full", d.dir);
    snprintf(errpath, sizeof(errpath), "%s/stderr", d.dir);
    cr_assert_eq(mknod(nul, S_IFCHR | 0666, makedev(1, 3)), 0, "mknod: %s", strerror(errno));
    cr_assert_eq(mknod(full, S_IFCHR | 0666, makedev(1, 7)), 0, "mknod: %s", strerror(errno));
    cr_assert_eq(export_to(id, nul), 0);
    cr_assert_eq(lstat(nul, &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "the device node was replaced (mode %o)", st.st_mode);
    cr_assert_eq(st.st_rdev, makedev(1, 3));
    cr_assert_eq(harness_wait_child(export_start(id, full, errpath)), 1);
    msg = harness_slurp(errpath, &len);
    cr_assert_not_null(strstr(msg, strerror(ENOSPC)), "stderr: %s", msg);
    free(msg);
    cr_assert_eq(lstat(full, &st), 0);
    cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 7), "/dev/full's copy replaced");
    cr_assert_eq(count_prefixed(d.dir, "null."), 0, "no temporary file");
    cr_assert_eq(count_prefixed(d.dir, "full."), 0, "no temporary file");

    cr_assert_geq(master = posix_openpt(O_RDWR | O_NOCTTY | O_NONBLOCK), 0);
    cr_assert_eq(grantpt(master), 0);
    cr_assert_eq(unlockpt(master), 0);
    cr_assert_geq(slave = open(ptsname(master), O_RDWR | O_NOCTTY), 0);
    cr_assert_eq(tcgetattr(slave, &t), 0);
    cfmakeraw(&t);
    cr_assert_eq(tcsetattr(slave, TCSANOW, &t), 0);
    cli = export_start(id, ptsname(master), errpath);
    got = read_until(master, want_len, &got_len);
    rc = harness_wait_child(cli);
    msg = harness_slurp(errpath, &len);
    cr_assert_eq(rc, 0, "stderr: %s", msg);
    cr_assert_eq(got_len, want_len, "the pty got %zu bytes of %zu", got_len, want_len);
    cr_assert(memcmp(got, want, want_len) == 0, "the pty got other bytes than stdout");
    cr_assert_eq(stat(ptsname(master), &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "the pty's node was replaced");
    close(slave);
    close(master);
    free(msg);
    free(got);
    free(want);
}

Test(outfile, fifo_is_written_into)
{
    char fifo[PATH_MAX], *want, *got;
    size_t want_len, got_len;
    struct stat st;
    long long id = load(NSMALL);
    pid_t cli;
    int fd;

    want = export_stdout(id, NSMALL);
    want_len = strlen(want);
    snprintf(fifo, sizeof(fifo), "%s/pipe", d.dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    /* non-blocking: opens at once, and a CLI that never opens the FIFO fails the test
     * after read_until's deadline instead of hanging it */
    cr_assert_geq(fd = open(fifo, O_RDONLY | O_NONBLOCK), 0);
    cli = export_start(id, fifo, NULL);
    got = read_until(fd, want_len, &got_len);
    cr_assert_eq(harness_wait_child(cli), 0);
    cr_assert_eq(got_len, want_len, "the reader got %zu bytes of %zu", got_len, want_len);
    cr_assert(memcmp(got, want, want_len) == 0, "the reader got other bytes than stdout");
    cr_assert_eq(lstat(fifo, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced (mode %o)", st.st_mode);
    cr_assert_eq(count_prefixed(d.dir, "pipe."), 0, "no temporary file");
    close(fd);
    free(got);
    free(want);
}

/* ---- links and files ------------------------------------------------------------ */

/* A relative link to an existing file, and a dangling one: both kept, their targets written. */
Test(outfile, symlink_is_followed)
{
    char link[PATH_MAX], real[PATH_MAX], dangling[PATH_MAX], fresh[PATH_MAX], buf[64], *want, *got;
    size_t len;
    struct stat st;
    ssize_t n;
    long long id = load(NSMALL);
    FILE *f;

    want = export_stdout(id, NSMALL);
    snprintf(real, sizeof(real), "%s/real.csv", d.dir);
    snprintf(link, sizeof(link), "%s/link.csv", d.dir);
    snprintf(fresh, sizeof(fresh), "%s/fresh.csv", d.dir);
    snprintf(dangling, sizeof(dangling), "%s/dangling.csv", d.dir);
    cr_assert_not_null(f = fopen(real, "w"));
    fputs("old content\n", f);
    fclose(f);
    cr_assert_eq(symlink("real.csv", link), 0);
    cr_assert_eq(symlink("fresh.csv", dangling), 0);

    cr_assert_eq(export_to(id, link), 0);
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link was replaced (mode %o)", st.st_mode);
    cr_assert_eq(n = readlink(link, buf, sizeof(buf) - 1), 8);
    buf[n] = '\0';
    cr_assert_str_eq(buf, "real.csv");
    got = harness_slurp(real, &len);
    cr_assert_str_eq(got, want, "the link's target holds the export");
    free(got);

    cr_assert_eq(export_to(id, dangling), 0);
    cr_assert_eq(lstat(dangling, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the dangling link was replaced");
    got = harness_slurp(fresh, &len);
    cr_assert_str_eq(got, want, "the dangling link's target was created with the export");
    free(got);
    cr_assert_eq(count_prefixed(d.dir, "real.csv."), 0, "no temporary file");
    cr_assert_eq(count_prefixed(d.dir, "fresh.csv."), 0, "no temporary file");
    free(want);
}

Test(outfile, existing_file_keeps_its_mode)
{
    char path[PATH_MAX], *want, *got;
    struct stat st;
    size_t len;
    long long id = load(NSMALL);
    int fd;

    want = export_stdout(id, NSMALL);
    snprintf(path, sizeof(path), "%s/kept.csv", d.dir);
    cr_assert_geq(fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600), 0);
    cr_assert_eq(fchmod(fd, 0640), 0); /* whatever the umask */
    cr_assert_eq(write(fd, "x\n", 2), 2);
    close(fd);
    cr_assert_eq(export_to(id, path), 0);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o, want 640", st.st_mode & 07777);
    got = harness_slurp(path, &len);
    cr_assert_str_eq(got, want);
    cr_assert_eq(count_prefixed(d.dir, "kept.csv."), 0, "no temporary file");
    free(got);
    free(want);
}

/*
 * A regular file the user may not write, in a directory where anyone may
 * (so a rename could replace it): refused with exit 1 and EACCES as `>`
 * refuses it, before the daemon is asked, the file untouched.
 */
Test(outfile, unwritable_file_is_refused)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], err[PATH_MAX + 16], *got;
    long long id;
    size_t len;
    FILE *f;

    if (!need_root())
        return;
    id = load(10);
    snprintf(dir, sizeof(dir), "%s/shared", d.dir);
    snprintf(path, sizeof(path), "%s/ro.csv", dir);
    snprintf(err, sizeof(err), "%s/stderr", dir); /* written by the CLI, as the other user */
    cr_assert_eq(chmod(d.dir, 0711), 0);
    cr_assert_eq(mkdir(dir, 0777), 0);
    cr_assert_eq(chmod(dir, 0777), 0); /* whatever the umask */
    cr_assert_not_null(f = fopen(path, "w"));
    fputs("root's\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(harness_wait_child(export_start_as(65534, id, path, err)), 1);
    got = harness_slurp(err, &len);
    cr_assert_not_null(strstr(got, "cannot write"), "stderr: %s", got);
    cr_assert_not_null(strstr(got, strerror(EACCES)), "stderr: %s", got);
    free(got);
    got = harness_slurp(path, &len);
    cr_assert_str_eq(got, "root's\n", "the file is untouched");
    free(got);
    cr_assert_eq(count_prefixed(dir, "ro.csv."), 0, "no temporary file");
}

/*
 * A directory: exit 1 with "is a directory", before the daemon is asked (also
 * with no daemon at the socket, which would otherwise exit 3), the directory
 * and its file untouched, nothing left beside it.
 */
Test(outfile, directory_is_refused)
{
    char dir[PATH_MAX], inner[PATH_MAX + 8], errpath[PATH_MAX], *msg;
    struct stat st;
    size_t len;
    long long id = load(10);
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/outdir", d.dir);
    snprintf(inner, sizeof(inner), "%s/keep", dir);
    snprintf(errpath, sizeof(errpath), "%s/stderr", d.dir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_not_null(f = fopen(inner, "w"));
    fputs("kept\n", f);
    fclose(f);
    cr_assert_eq(harness_wait_child(export_start(id, dir, errpath)), 1);
    msg = harness_slurp(errpath, &len);
    cr_assert_not_null(strstr(msg, "is a directory"), "stderr: %s", msg);
    free(msg);
    cr_assert_eq(stat(dir, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    msg = harness_slurp(inner, &len);
    cr_assert_str_eq(msg, "kept\n");
    free(msg);
    cr_assert_eq(count_prefixed(d.dir, "outdir."), 0, "no temporary file");
    harness_daemon_stop(&d, SIGTERM);
    d.pid = 0;
    cr_assert_eq(export_to(id, dir), 1, "refused before the daemon is asked");
    cr_assert_eq(export_to(id, ""), 1, "so is an empty path");
}

/*
 * SIGTERM (and SIGINT) while a large export is being written: the CLI dies of
 * the signal and its temporary file is gone; the file that was there before
 * is untouched.
 */
static void killed_mid_export(int sig)
{
    char path[PATH_MAX], *got;
    long long id = load(300000), deadline;
    bool seen = false;
    size_t len;
    pid_t cli;
    FILE *f;

    snprintf(path, sizeof(path), "%s/big.csv", d.dir);
    cr_assert_not_null(f = fopen(path, "w"));
    fputs("before\n", f);
    fclose(f);
    cli = export_start(id, path, NULL);
    /* wait until the temporary file holds part of the export */
    for (deadline = ms_now() + 20000; !seen && ms_now() < deadline;) {
        DIR *dp = opendir(d.dir);
        struct dirent *de;
        struct stat st;

        while ((de = readdir(dp)) != NULL && !seen) {
            char tmp[PATH_MAX * 2];
            snprintf(tmp, sizeof(tmp), "%s/%s", d.dir, de->d_name);
            seen = strncmp(de->d_name, "big.csv.", 8) == 0 && stat(tmp, &st) == 0 && st.st_size > 0;
        }
        closedir(dp);
    }
    cr_assert(seen, "no temporary file with data appeared");
    cr_assert_eq(kill(cli, sig), 0);
    cr_assert_eq(harness_wait_child(cli), 128 + sig, "the CLI dies of the signal");
    cr_assert_eq(count_prefixed(d.dir, "big.csv."), 0, "the temporary file is gone");
    got = harness_slurp(path, &len);
    cr_assert_str_eq(got, "before\n", "the old file is untouched");
    free(got);
}

Test(outfile, sigterm_mid_export_leaves_nothing, .timeout = 240)
{
    killed_mid_export(SIGTERM);
}

Test(outfile, sigint_mid_export_leaves_nothing, .timeout = 240)
{
    killed_mid_export(SIGINT);
}
