/* pairs.c — a loop of cudaMalloc+cudaFree pairs for counting the hit path's instructions on the
 * stand-in (scripts/hitpath-instructions runs it under callgrind at N and 2N pairs): no checks,
 * no clock, nothing in the loop but the two calls.
 *     e2e_pairs N [--fenced] [--size BYTES]
 * --fenced: create a stream first (reuse then waits for fences); --size: one size for every
 * pair (default: 512 B, 4 KiB, 64 KiB, 1 MiB in turn). 256 pairs warm the cache first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

static const size_t mixed[] = { 512, 4096, 65536, 1 << 20 };

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 0;
	size_t size = 0;
	int fenced = 0;
	cudaStream_t s;
	void *p = NULL;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--fenced"))
			fenced = 1;
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = (size_t)strtoull(argv[++i], NULL, 10);
		else
			n = -1;
	}
	if (n < 0) {
		fprintf(stderr, "usage: e2e_pairs N [--fenced] [--size BYTES]\n");
		return 2;
	}
	if (fenced && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
		fprintf(stderr, "e2e_pairs: cannot create a stream\n");
		return 1;
	}
	for (long i = 0; i < 256 + n; i++) {
		if (cudaMalloc(&p, size ? size : mixed[i & 3]) != cudaSuccess || cudaFree(p) != cudaSuccess) {
			fprintf(stderr, "e2e_pairs: pair %ld failed\n", i);
			return 1;
		}
	}
	return 0;
}
