/*
 * test_systemd.c — the systemd units: `systemd-analyze verify` on them, and
 * tracectld started by `systemd-socket-activate` (Debian's systemd package),
 * adopting the socket it is handed (LISTEN_FDS, fd 3) and answering on it.
 * Skipped where those tools are missing.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char dir[64];
static pid_t activator;

static void fini(void)
{
    char cmd[128];

    if (activator > 0) {
        kill(activator, SIGTERM);
        waitpid(activator, NULL, 0);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (dir[0] != '\0')
        cr_assert_eq(system(cmd), 0);
}

TestSuite(systemd, .fini = fini, .timeout = 60);

static bool have(const char *tool)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", tool);
    return system(cmd) == 0;
}

/* Copies a unit, with ExecStart's binary replaced by the built daemon and names renamed. */
static void copy_unit(const char *from, const char *to)
{
    char cmd[2048];

    snprintf(cmd, sizeof(cmd),
             "sed -e 's|^ExecStart=[^ ]*|ExecStart=%s|' -e 's|tracectld\\.socket|tctest.socket|g'"
             " '%s' > '%s'",
             TRACECTLD_BIN, from, to);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(systemd, units_verify)
{
    char cmd[1024], svc[128], sock[128];

    if (!have("systemd-analyze"))
        cr_skip_test("systemd-analyze is not installed");
    snprintf(dir, sizeof(dir), "/tmp/tcsysd.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(svc, sizeof(svc), "%s/tctest.service", dir);
    snprintf(sock, sizeof(sock), "%s/tctest.socket", dir);
    copy_unit(SYSTEMD_BUILD_DIR "/tracectld.service", svc);
    copy_unit(SYSTEMD_SRC_DIR "/tracectld.socket", sock);
    snprintf(cmd, sizeof(cmd), "systemd-analyze verify '%s' '%s' 2>&1", sock, svc);
    char *sh[] = {"sh", "-c", cmd, NULL}, *out = NULL;
    int rc = harness_run(&out, sh);
    cr_assert_eq(rc, 0, "systemd-analyze verify failed:\n%s", out);
    /* a misspelt key is only a warning to verify: any output at all fails here */
    cr_assert_eq(out[0], '\0', "systemd-analyze verify warns:\n%s", out);
    free(out);
    /* the hardening the issue asks for is there */
    const char *want[] = {"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                          "PrivateTmp=yes",      "StateDirectory=",      "DynamicUser=yes"};
    FILE *f = fopen(svc, "r");
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert_not_null(strstr(text, want[i]), "the service lacks %s", want[i]);
}

Test(systemd, socket_activation)
{
    char path[128], data[128];
    struct stat before, after;
    long long id;

    if (!have("systemd-socket-activate"))
        cr_skip_test("systemd-socket-activate is not installed");
    snprintf(dir, sizeof(dir), "/tmp/tcsysd.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/activated.sock", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    activator = fork();
    if (activator == 0) {
        execlp("systemd-socket-activate", "systemd-socket-activate", "-l", path, TRACECTLD_BIN,
               "--socket", path, "--data-dir", data, "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && stat(path, &before) != 0; i++)
        usleep(25000);
    cr_assert_eq(stat(path, &before), 0, "systemd-socket-activate made no socket");

    /* the first connection starts the daemon on the passed socket */
    int fd = raw_producer(path, "activated", 0, 1, "gpu:0", &id);
    raw_send_ops(fd, 1, "matmul");
    raw_send_batch(fd, 1, 300, 0, 10);
    cr_assert_eq(raw_flush(fd, 1), 300);
    raw_bye(fd, 0);
    raw_wait_state(path, id, "ended", 5);
    struct proto_request req;
    struct proto_reader r;
    int cfd;
    proto_request_init(&req);
    req.session.id = id;
    const msgpack_object *o = raw_control(path, PROTO_REPORT, &req, &r, &cfd);
    /* 300 entries of 10..309 ns */
    cr_assert_eq(obj_u64(obj_get(obj_get(&o->via.array.ptr[1], "session"), "total_ns")),
                 300 * 10 + 299 * 300 / 2);
    proto_reader_deinit(&r);
    close(cfd);
    /* the daemon adopted the socket: the same inode, never unlinked and bound again */
    cr_assert_eq(stat(path, &after), 0);
    cr_assert_eq(before.st_ino, after.st_ino, "the daemon replaced the socket it was handed");
    /* SIGTERM: a clean exit, and it leaves systemd's socket file alone */
    kill(activator, SIGTERM);
    int st;
    waitpid(activator, &st, 0);
    activator = 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tracectld did not exit 0");
    cr_assert_eq(stat(path, &after), 0, "the daemon removed a socket it did not create");
}

/* The per-user units, verified the way `systemctl --user` would load them (%t, %h). */
Test(systemd, user_units_verify)
{
    char cmd[1024], svc[128], sock[128];

    if (!have("systemd-analyze"))
        cr_skip_test("systemd-analyze is not installed");
    snprintf(dir, sizeof(dir), "/tmp/tcsysd.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(svc, sizeof(svc), "%s/tctest.service", dir);
    snprintf(sock, sizeof(sock), "%s/tctest.socket", dir);
    copy_unit(SYSTEMD_BUILD_DIR "/user/tracectld.service", svc);
    copy_unit(SYSTEMD_SRC_DIR "/user/tracectld.socket", sock);
    /* a user manager resolves %t from XDG_RUNTIME_DIR: give it one that exists */
    snprintf(cmd, sizeof(cmd), "XDG_RUNTIME_DIR='%s' systemd-analyze --user verify '%s' '%s' 2>&1",
             dir, sock, svc);
    char *sh[] = {"sh", "-c", cmd, NULL}, *out = NULL;
    int rc = harness_run(&out, sh);
    cr_assert_eq(rc, 0, "systemd-analyze --user verify failed:\n%s", out);
    cr_assert_eq(out[0], '\0', "systemd-analyze --user verify warns:\n%s", out);
    free(out);
    FILE *f = fopen(svc, "r");
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_assert_not_null(strstr(text, "--socket %t/tracectl/tracectl.sock"));
    cr_assert_not_null(strstr(text, "--data-dir %h/.local/share/tracectl"));
}
