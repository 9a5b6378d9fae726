/* run.c — `gpupool run [--OPTION VALUE]... -- CMD ARGS...`: sets the GPUPOOL_* variables named by
 * the options (one per row of the options table, checked with its parsers), puts libgpupool.so
 * in front of LD_PRELOAD and executes CMD in place (same pid, so `gpupool stats` finds it).
 * Never starts CMD with a value the shim would refuse. */
#define _GNU_SOURCE
#include "cli.h"
#include "../shim/options.h" /* the table: one source for the variables and these flags */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
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

void gp_cli_options_help(void)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	char f[64];

	printf("Options of `gpupool run` (each sets the variable named, as LD_PRELOAD users do):\n");
	for (size_t i = 0; i < n; i++) {
		char line[512];

		flag_of(t[i].name, f, sizeof(f));
		printf("  --%s  (%s, default %s)\n", f, t[i].name, t[i].def);
		gp_cli_wrap("      ", t[i].help);
		snprintf(line, sizeof(line), "accepted: %s", t[i].accepts);
		gp_cli_wrap("      ", line);
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
			"       (gpupool run --help lists the options)\n");
	return GP_CLI_ERROR;
}

static void help(void)
{
	printf("usage: gpupool run [--OPTION VALUE]... [--library PATH] [--] CMD [ARGS...]\n\n"
	       "Runs CMD in place (the same pid) with libgpupool.so first in LD_PRELOAD and each\n"
	       "option set as its GPUPOOL_* variable. --library PATH: the library to preload\n"
	       "(default: the one installed beside this command).\n\n");
	gp_cli_options_help();
}

enum { OPT_LIBRARY = 1000, OPT_HELP, OPT_TABLE };

/* The long options: --library, --help and one per row of the options table. */
static struct option *long_options(char (*flags)[64], size_t *count)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	struct option *o = calloc(n + 3, sizeof(*o));

	if (o == NULL)
		return NULL;
	o[0] = (struct option){ "library", required_argument, NULL, OPT_LIBRARY };
	o[1] = (struct option){ "help", no_argument, NULL, OPT_HELP };
	for (size_t i = 0; i < n; i++) {
		flag_of(t[i].name, flags[i], sizeof(flags[i]));
		o[i + 2] = (struct option){ flags[i], required_argument, NULL, OPT_TABLE + (int)i };
	}
	*count = n;
	return o;
}

/* One option of the table: checked with its parser, then set as its variable. */
static int set_option(const struct gp_opt_def *d, const char *flag, const char *value)
{
	if (gp_opt_check(d, value) != 0) {
		fprintf(stderr, "gpupool run: --%s %s is not valid (accepted: %s)\n", flag, value,
			d->accepts);
		return GP_CLI_ERROR;
	}
	if (setenv(d->name, value, 1) != 0) {
		perror("gpupool run: setenv");
		return GP_CLI_ERROR;
	}
	return GP_CLI_OK;
}

int gp_cli_run(int argc, char **argv)
{
	const char *library = NULL;
	char lib[PATH_MAX], flags[64][64];
	const struct gp_opt_def *t;
	struct option *opts;
	size_t n;
	int c, rc = GP_CLI_OK;

	t = gp_opt_table(&n);
	if (n > 64 || (opts = long_options(flags, &n)) == NULL)
		return GP_CLI_ERROR;
	optind = 1;
	opterr = 0;
	/* '+': the first word that is not an option is the command; ':': a missing value is ':'. */
	while (rc == GP_CLI_OK && (c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (c == OPT_LIBRARY)
			library = optarg;
		else if (c == 'h' || c == OPT_HELP) {
			free(opts);
			help();
			return GP_CLI_OK;
		} else if (c >= OPT_TABLE && c < OPT_TABLE + (int)n)
			rc = set_option(&t[c - OPT_TABLE], flags[c - OPT_TABLE], optarg);
		else
			rc = gp_cli_bad_option("gpupool run", argv, c) == GP_CLI_ERROR ? usage() : rc;
	}
	free(opts);
	if (rc != GP_CLI_OK)
		return rc;
	if (optind >= argc) {
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
	execvp(argv[optind], argv + optind);
	fprintf(stderr, "gpupool run: cannot run %s: %s\n", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
