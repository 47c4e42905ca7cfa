/* log.c — see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static enum log_level log_level = LOG_INFO;
static const char *const log_names[] = {"error", "warn", "info", "debug"};

int log_set_level_name(const char *name)
{
    for (int i = LOG_ERROR; i <= LOG_DEBUG; i++) {
        if (strcmp(name, log_names[i]) == 0) {
            log_level = (enum log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    if (level > log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One fprintf per line so that lines from two threads never interleave. */
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ tracectld %s: %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            log_names[level], line);
}
