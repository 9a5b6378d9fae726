/* args.c — what every subcommand's command line shares: numbers checked and named when wrong,
 * the answer to an unknown or incomplete option, text wrapped to the terminal's 80 columns.
 * Never exits: callers choose the exit code. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gp_cli_seconds(const char *cmd, const char *opt, const char *val, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (end == val || *end != '\0' || errno != 0 || !isfinite(v) || v <= 0 || v > 86400) {
		fprintf(stderr, "%s: %s %s: not a number of seconds (above 0, at most 86400)\n", cmd,
			opt, val);
		return -1;
	}
	*out = v;
	return 0;
}

int gp_cli_count(const char *cmd, const char *opt, const char *val, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(val, &end, 10);
	if (end == val || *end != '\0' || errno != 0 || v < 1) {
		fprintf(stderr, "%s: %s %s: not a whole number above 0\n", cmd, opt, val);
		return -1;
	}
	*out = v;
	return 0;
}

int gp_cli_bad_option(const char *cmd, char **argv, int c)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		fprintf(stderr, "%s: %s needs a value\n", cmd, arg);
	else if (optopt != 0 && strncmp(arg, "--", 2) != 0)
		fprintf(stderr, "%s: unknown option -%c\n", cmd, optopt);
	else
		fprintf(stderr, "%s: unknown option %s\n", cmd, arg);
	return GP_CLI_ERROR;
}

void gp_cli_wrap(const char *indent, const char *text)
{
	size_t col = 0, width = 80 - strlen(indent);

	fputs(indent, stdout);
	while (*text != '\0') {
		size_t word = strcspn(text, " ");
		if (col > 0 && col + 1 + word > width) {
			printf("\n%s", indent);
			col = 0;
		} else if (col > 0) {
			putchar(' ');
			col++;
		}
		printf("%.*s", (int)word, text);
		col += word;
		text += word;
		text += strspn(text, " ");
	}
	putchar('\n');
}
