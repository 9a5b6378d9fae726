/* print_options.c — prints the GPUPOOL_* table as the README's markdown rows (name, default, one
 * line), or with --usage as docs/USAGE.md's list (every setting in full, wrapped), so a test can
 * check that both document exactly the options the parser knows. */
#include "options.h"

#include <stdio.h>
#include <string.h>

#define WIDTH 100

/* Words of `text` after `col` columns already printed, wrapped at WIDTH with two spaces of
 * indent; `|` escaped where a table needs it (esc). */
static size_t words(const char *text, size_t col)
{
	while (*text != '\0') {
		size_t n = strcspn(text, " ");

		if (col > 2 && col + 1 + n > WIDTH) {
			fputs("\n ", stdout);
			col = 1;
		}
		printf(" %.*s", (int)n, text);
		col += 1 + n;
		text += n;
		text += strspn(text, " ");
	}
	return col;
}

static void usage_entry(const struct gp_opt_def *d)
{
	char head[512];
	size_t col;

	snprintf(head, sizeof(head), "- **`%s`** (default `%s`; accepted: %s):", d->name, d->def,
		 d->accepts);
	fputs("-", stdout);
	col = words(head + 2, 1);
	words(d->help, col);
	putchar('\n');
}

int main(int argc, char **argv)
{
	int usage = argc > 1 && strcmp(argv[1], "--usage") == 0;
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);

	for (size_t i = 0; i < n; i++) {
		if (usage)
			usage_entry(&t[i]);
		else
			printf("| `%s` | `%s` | %s |\n", t[i].name, t[i].def, t[i].brief);
	}
	return 0;
}
