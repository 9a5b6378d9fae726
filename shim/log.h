/* log.h — the shim's only way to talk: one line per message on stderr, `gpupool: ` prefix.
 * Silent except errors by default. Safe from any thread; never from a signal handler. */
#ifndef GPUPOOL_LOG_H
#define GPUPOOL_LOG_H

#include <stdatomic.h>

enum gp_log_level { GP_LOG_ERROR = 0, GP_LOG_WARN, GP_LOG_INFO, GP_LOG_DEBUG };

void gp_log_set_level(int level);
int gp_log_enabled(int level);
void gp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same warning at most a few times; then one line saying further ones are suppressed. */
void gp_log_capped(int level, _Atomic int *count, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
