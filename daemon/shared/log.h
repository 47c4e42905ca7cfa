/*
 * log — the daemon's log on stderr (journald picks it up under systemd).
 *
 * One line per event: "tracectld: LEVEL: message". The level is set once at
 * start-up from --log-level, before any thread starts, and only read after,
 * so the one static it keeps is safe to read from the writer thread too.
 */
#ifndef TRACECTLD_LOG_H
#define TRACECTLD_LOG_H

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Returns 0, or -EINVAL when name is not error|warn|info|debug. */
int log_set_level_name(const char *name);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
