/* print_options.c — prints the GPUPOOL_* table as the README's markdown rows, so a test can
 * check that the README documents exactly the options the parser knows. */
#include "options.h"

#include <stdio.h>

int main(void)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);

	for (size_t i = 0; i < n; i++) {
		printf("| `%s` | `%s` | ", t[i].name, t[i].def);
		for (const char *c = t[i].accepts; *c; c++) {
			if (*c == '|')
				fputs("\\|", stdout);
			else
				putchar(*c);
		}
		printf(" | %s |\n", t[i].help);
	}
	return 0;
}
