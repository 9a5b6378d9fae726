/* formatcheck_main.c — `formatcheck json|prometheus [FILE]`: validates FILE (or stdin) with the
 * checkers of formatcheck.c for the e2e scripts; exit 0 and "ok" when valid, else 1 and why. */
#include "formatcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	FILE *f = argc > 2 ? fopen(argv[2], "r") : stdin;
	size_t len = 0, cap = 65536, got;
	char *text = malloc(cap), err[256];
	int rc;

	if (argc < 2 || f == NULL || text == NULL) {
		fprintf(stderr, "usage: formatcheck json|prometheus [FILE]\n");
		return 2;
	}
	while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (len + 1 == cap) {
			char *more = realloc(text, cap *= 2);
			if (more == NULL)
				return 2;
			text = more;
		}
	}
	text[len] = '\0';
	if (strcmp(argv[1], "json") == 0)
		rc = formatcheck_json(text, err, sizeof(err));
	else
		rc = formatcheck_prometheus(text, NULL, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("ok   valid %s (%zu bytes)\n", argv[1], len);
	free(text);
	return 0;
}
