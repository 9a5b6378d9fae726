/* replay.c — runs a libFuzzer target's LLVMFuzzerTestOneInput on saved inputs (files, or every
 * file of a directory), without libFuzzer: how the seed corpus and the crashes found become
 * regression tests in every build (gcc, sanitizers, valgrind). A directory's README is skipped.
 * Exits 0 when every input ran. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	buf = malloc((size_t)n + 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned runs = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		struct dirent **names;
		int n;

		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s does not exist\n", argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) != 0)
				return 1;
			runs++;
			continue;
		}
		n = scandir(argv[i], &names, NULL, alphasort);
		for (int k = 0; k < n; k++) {
			char path[4096];

			if (names[k]->d_name[0] != '.' && strcmp(names[k]->d_name, "README") != 0) {
				snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
				if (run_file(path) != 0)
					return 1;
				runs++;
			}
			free(names[k]);
		}
		free(n >= 0 ? names : NULL);
	}
	printf("replay: %u inputs ran without a failure\n", runs);
	return 0;
}
