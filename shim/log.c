/* log.c — logging: level set once from GPUPOOL_LOG, messages formatted into one buffer and
 * written with a single write(2) so lines from different threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#define CAP 3 /* repeats of a capped message */

/* The one variable of the logging, outside gp_shim (state.h): this file is also linked without
 * the shim (the options' unit test and fuzzer, the README check), where there is no gp_shim.
 * Set once by the initialisation; read relaxed by every message. */
static _Atomic int level = GP_LOG_ERROR;
static const char *const names[] = { "error", "warn", "info", "debug" };

void gp_log_set_level(int l)
{
	atomic_store(&level, l);
}

int gp_log_enabled(int l)
{
	return l <= atomic_load_explicit(&level, memory_order_relaxed);
}

static void vlog(int l, const char *suffix, const char *fmt, va_list ap)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "gpupool: %s: ", names[l]);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);

	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	if (suffix) {
		int k = snprintf(buf + len, sizeof(buf) - len, "%s", suffix);
		len += k > 0 ? (size_t)k : 0;
		if (len > sizeof(buf) - 2)
			len = sizeof(buf) - 2;
	}
	/* One line, whatever the message quotes (a setting's value may hold a newline). */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)buf[i] < 0x20 && buf[i] != '\t')
			buf[i] = '?';
	buf[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, len);
	(void)w; /* nowhere to report a failed log write */
}

void gp_log(int l, const char *fmt, ...)
{
	va_list ap;

	if (!gp_log_enabled(l))
		return;
	va_start(ap, fmt);
	vlog(l, NULL, fmt, ap);
	va_end(ap);
}

void gp_log_capped(int l, _Atomic int *count, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!gp_log_enabled(l))
		return;
	n = atomic_fetch_add(count, 1);
	if (n >= CAP)
		return;
	va_start(ap, fmt);
	vlog(l, n == CAP - 1 ? " (further such messages suppressed)" : NULL, fmt, ap);
	va_end(ap);
}
