/*
 * tccpu.c — tc_cpu_wait(): how long the thread that runs the steps waited for
 * a CPU in the step that ends, sent as the metadata PROTO_META_CPU_WAIT
 * ("<step> <ns>"). The delay is the second field of
 * /proc/thread-self/schedstat (ns spent runnable on a run queue), read once
 * per call: one open, read and close, never on a recording call. The last
 * reading and its thread are the client's (guarded by its mutex); tc_open()
 * takes the opening thread's first (tccpu_baseline).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "tcint.h"

/* This thread's id and run-queue delay in ns: true, or false where they cannot be read. */
static bool tccpu_read(long *tid, uint64_t *ns)
{
#ifdef __linux__
    char buf[128], *p, *end;
    ssize_t n;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* "<ns on a CPU> <ns waiting on a run queue> <timeslices>" */
    strtoull(buf, &p, 10);
    if (p == buf || *p != ' ')
        return false;
    errno = 0;
    *ns = strtoull(p + 1, &end, 10);
    if (end == p + 1 || errno != 0)
        return false;
    *tid = (long)syscall(SYS_gettid);
    return true;
#else
    (void)tid;
    (void)ns;
    return false;
#endif
}

void tccpu_baseline(tc_client *c)
{
    long tid;
    uint64_t ns;

    if (tccpu_read(&tid, &ns)) {
        c->cw_tid = tid;
        c->cw_last = ns;
    }
}

int tc_cpu_wait(tc_client *c)
{
    char v[48];
    long tid;
    uint64_t ns, delta = 0;
    bool send;

    if (c == NULL || c->disabled)
        return -ENOTCONN;
    if (!tccpu_read(&tid, &ns))
        return -ENOSYS;
    pthread_mutex_lock(&c->mu);
    send = c->cw_tid == tid && ns >= c->cw_last;
    if (send)
        delta = ns - c->cw_last;
    c->cw_tid = tid;
    c->cw_last = ns;
    pthread_mutex_unlock(&c->mu);
    if (!send)
        return 0; /* a thread's first call: the delay counts from here */
    snprintf(v, sizeof(v), "%llu %llu",
             (unsigned long long)atomic_load_explicit(&c->step, memory_order_relaxed),
             (unsigned long long)delta);
    return tc_meta_str(c, PROTO_META_CPU_WAIT, v);
}
