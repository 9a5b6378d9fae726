/* run.c — `gpupool run [--OPTION VALUE]... -- CMD ARGS...`: sets the GPUPOOL_* variables named by
 * the options (one per row of the options table, checked with its parsers), puts libgpupool.so
 * in front of LD_PRELOAD and executes CMD in place (same pid, so `gpupool stats` finds it). */
#define _GNU_SOURCE
#include "cli.h"
#include "../shim/options.h" /* the table: one source for the variables and these flags */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIB_NAME "libgpupool.so"

/* GPUPOOL_MAX_CACHED -> max-cached */
static void flag_of(const char *name, char *buf, size_t len)
{
	size_t i = 0;

	for (name += strlen("GPUPOOL_"); *name != '\0' && i + 1 < len; name++)
		buf[i++] = *name == '_' ? '-' : (char)tolower((unsigned char)*name);
	buf[i] = '\0';
}

static const struct gp_opt_def *option_of(const char *flag)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	char f[64];

	for (size_t i = 0; i < n; i++) {
		flag_of(t[i].name, f, sizeof(f));
		if (strcmp(f, flag) == 0)
			return &t[i];
	}
	return NULL;
}

void gp_cli_options_help(void)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	char f[64];

	printf("Options of `gpupool run` (each sets the variable named, as LD_PRELOAD users do):\n");
	for (size_t i = 0; i < n; i++) {
		flag_of(t[i].name, f, sizeof(f));
		printf("  --%-24s %s (default: %s)\n      %s\n      accepted: %s\n", f, t[i].name,
		       t[i].def, t[i].help, t[i].accepts);
	}
}

static int exists(const char *path)
{
	return access(path, R_OK) == 0;
}

/* libgpupool.so: --library, else installed beside the command (GP_CLI_LIBDIR relative to its
 * folder), else in the build tree (../shim). The path is made absolute. */
static int find_library(const char *given, char *out)
{
	char exe[PATH_MAX], try[PATH_MAX + 64], *slash;
	ssize_t n;

	if (given != NULL)
		return realpath(given, out) != NULL && exists(out) ? 0 : -1;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash == NULL)
		return -1;
	*slash = '\0';
	snprintf(try, sizeof(try), "%s/%s/%s", exe, GP_CLI_LIBDIR, LIB_NAME);
	if (exists(try) && realpath(try, out) != NULL)
		return 0;
	snprintf(try, sizeof(try), "%s/../shim/%s", exe, LIB_NAME);
	if (exists(try) && realpath(try, out) != NULL)
		return 0;
	return -1;
}

static int is_sanitizer_runtime(const char *entry, size_t len)
{
	static const char *const names[] = { "libasan", "libtsan", "libubsan", "libclang_rt." };
	const char *base = entry;

	for (size_t i = 0; i < len; i++)
		if (entry[i] == '/')
			base = entry + i + 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strncmp(base, names[i], strlen(names[i])) == 0)
			return 1;
	return 0;
}

/* The shim goes first in LD_PRELOAD, after any sanitizer runtime (which must stay first), and
 * only once. */
static int set_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD"), *p;
	size_t keep = 0;
	char *val;
	int rc;

	if (old == NULL || *old == '\0')
		return setenv("LD_PRELOAD", lib, 1);
	for (p = old; *p != '\0';) {
		size_t len = strcspn(p, ": ");
		if (len == strlen(lib) && strncmp(p, lib, len) == 0)
			return 0; /* already there */
		p += len;
		p += strspn(p, ": ");
	}
	for (p = old; *p != '\0';) {
		size_t len = strcspn(p, ": ");
		if (len == 0 || !is_sanitizer_runtime(p, len))
			break;
		p += len;
		p += strspn(p, ": ");
		keep = (size_t)(p - old);
	}
	if (asprintf(&val, "%.*s%s%s%s%s", (int)keep, old, keep && old[keep - 1] != ':' ? ":" : "",
		     lib, old[keep] ? ":" : "", old + keep) < 0)
		return -1;
	rc = setenv("LD_PRELOAD", val, 1);
	free(val);
	return rc;
}

static int usage(void)
{
	fprintf(stderr, "usage: gpupool run [--OPTION VALUE]... [--library PATH] [--] CMD [ARGS...]\n"
			"       (gpupool --help lists the options)\n");
	return GP_CLI_ERROR;
}

int gp_cli_run(int argc, char **argv)
{
	const char *library = NULL;
	char lib[PATH_MAX];
	int i;

	for (i = 1; i < argc; i++) {
		const struct gp_opt_def *d;
		char flag[64];
		const char *arg = argv[i], *eq, *value;

		if (strcmp(arg, "--") == 0) {
			i++;
			break;
		}
		if (strncmp(arg, "--", 2) != 0)
			break; /* the command */
		eq = strchr(arg, '=');
		snprintf(flag, sizeof(flag), "%.*s", (int)(eq ? eq - arg - 2 : (long)strlen(arg + 2)),
			 arg + 2);
		if (eq != NULL)
			value = eq + 1;
		else if (i + 1 < argc)
			value = argv[++i];
		else {
			fprintf(stderr, "gpupool run: --%s needs a value\n", flag);
			return usage();
		}
		if (strcmp(flag, "library") == 0) {
			library = value;
			continue;
		}
		d = option_of(flag);
		if (d == NULL) {
			fprintf(stderr, "gpupool run: unknown option --%s\n", flag);
			return usage();
		}
		if (gp_opt_check(d, value) != 0) {
			fprintf(stderr, "gpupool run: --%s %s is not valid (accepted: %s)\n", flag, value,
				d->accepts);
			return GP_CLI_ERROR;
		}
		if (setenv(d->name, value, 1) != 0) {
			perror("gpupool run: setenv");
			return GP_CLI_ERROR;
		}
	}
	if (i >= argc) {
		fprintf(stderr, "gpupool run: no command given\n");
		return usage();
	}
	if (find_library(library, lib) != 0) {
		if (library != NULL)
			fprintf(stderr, "gpupool run: cannot read the library %s\n", library);
		else
			fprintf(stderr, "gpupool run: cannot find %s in %s/ (or ../shim/) beside the "
					"command; give --library PATH\n", LIB_NAME, GP_CLI_LIBDIR);
		return GP_CLI_ERROR;
	}
	if (set_preload(lib) != 0) {
		perror("gpupool run: setenv LD_PRELOAD");
		return GP_CLI_ERROR;
	}
	execvp(argv[i], argv + i);
	fprintf(stderr, "gpupool run: cannot run %s: %s\n", argv[i], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
