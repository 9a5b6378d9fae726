/* options.c — the GPUPOOL_* table and its parsers. The README's variable table and
 * `gpupool --help` are checked against gp_opt_table(). Reads the environment with
 * secure_getenv (ignored in setuid programs); never logs itself: the caller decides. */
#define _GNU_SOURCE
#include "options.h"
#include "log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OPT(field) offsetof(struct gp_options, field)

static const struct gp_opt_def table[] = {
	{ "GPUPOOL_LOG", GP_OPT_LEVEL, "error", "error|warn|info|debug",
	  "What the shim writes to stderr (one line per message, `gpupool:` prefix).", OPT(log_level) },
	{ "GPUPOOL_SIGNAL", GP_OPT_SIGNAL, "USR1", "a signal name (USR1, SIGUSR2) or number, or none",
	  "The signal that makes the process give idle GPU memory back.", OPT(signo) },
	{ "GPUPOOL_DISABLE", GP_OPT_BOOL, "0", "1|0|true|false|yes|no|on|off",
	  "Pass every call straight through to the CUDA runtime (for bisecting problems).",
	  OPT(disable) },
};

const struct gp_opt_def *gp_opt_table(size_t *count)
{
	*count = sizeof(table) / sizeof(table[0]);
	return table;
}

int gp_opt_parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

int gp_opt_parse_level(const char *s, int *out)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (int i = 0; i < 4; i++) {
		if (strcasecmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return -1;
}

int gp_opt_parse_signal(const char *s, int *out)
{
	static const struct {
		const char *name;
		int signo;
	} sigs[] = { { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "HUP", SIGHUP },
		     { "WINCH", SIGWINCH }, { "URG", SIGURG },  { "PWR", SIGPWR } };
	char *end;
	long n;

	if (strcasecmp(s, "none") == 0 || strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	n = strtol(s, &end, 10);
	if (*s != '\0' && *end == '\0') {
		/* SIGKILL and SIGSTOP cannot be caught; the rest below SIGRTMAX can. */
		if (n < 1 || n > SIGRTMAX || n == SIGKILL || n == SIGSTOP)
			return -1;
		*out = (int)n;
		return 0;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		if (strcasecmp(s, sigs[i].name) == 0) {
			*out = sigs[i].signo;
			return 0;
		}
	}
	return -1;
}

static int parse(const struct gp_opt_def *d, const char *s, struct gp_options *o)
{
	int *field = (int *)((char *)o + d->offset);

	switch (d->type) {
	case GP_OPT_BOOL:
		return gp_opt_parse_bool(s, field);
	case GP_OPT_LEVEL:
		return gp_opt_parse_level(s, field);
	case GP_OPT_SIGNAL:
		return gp_opt_parse_signal(s, field);
	}
	return -1;
}

void gp_opt_load(struct gp_options *o, void (*warn)(const char *line))
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct gp_opt_def *d = &table[i];
		const char *v = secure_getenv(d->name);

		parse(d, d->def, o); /* the default always parses */
		if (v == NULL)
			continue;
		if (parse(d, v, o) != 0) {
			char line[384];
			parse(d, d->def, o);
			snprintf(line, sizeof(line), "%s=%s is not valid (accepted: %s); using %s",
				 d->name, v, d->accepts, d->def);
			if (warn)
				warn(line);
		}
	}
}
