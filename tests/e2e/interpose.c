/* interpose.c — proves the shim interposes cudaMalloc/cudaFree through LD_PRELOAD: 1000 cycles of
 * cudaMalloc(1 MiB) + cudaFree reach the runtime as exactly one real cudaMalloc and no cudaFree,
 * and a block keeps its data until it is freed. Run natively with --expect-native, the same loop
 * must reach the runtime 1000 times: that run proves the first one counted interposition.
 * E2E_CYCLES changes the 1000 (ctest: 100 under the sanitizers, whose shadow memory makes
 * each real 1 MiB allocation of the native run slow). */
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define CYCLES 1000 /* unless E2E_CYCLES says */

int main(int argc, char **argv)
{
	int native = argc > 1 && strcmp(argv[1], "--expect-native") == 0;
	int cycles = getenv("E2E_CYCLES") != NULL && atoi(getenv("E2E_CYCLES")) > 0 ?
			     atoi(getenv("E2E_CYCLES")) : CYCLES;
	struct standin_counters c0, c;
	void *p = NULL, *a = NULL, *b = NULL;
	uint64_t want_mallocs, want_frees;
	int i;

	e2e_start(native ? "e2e_interpose_native" : "e2e_interpose");
	c0 = e2e_counters();
	for (i = 0; i < cycles; i++) {
		e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc(1 MiB)");
		e2e_fill(p, E2E_MIB, (uint64_t)i);
		if (!e2e_verify(p, E2E_MIB, (uint64_t)i))
			e2e_fail("cycle %d: the block lost its data before it was freed", i);
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	c = e2e_counters();
	want_mallocs = native ? (uint64_t)cycles : 1;
	want_frees = native ? (uint64_t)cycles : 0;
	e2e_check(c.mallocs - c0.mallocs == want_mallocs,
		  "%d x cudaMalloc(1 MiB)+cudaFree reached the runtime as %llu real cudaMalloc (want %llu)",
		  cycles, (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)want_mallocs);
	e2e_check(c.frees - c0.frees == want_frees, "and as %llu real cudaFree (want %llu)",
		  (unsigned long long)(c.frees - c0.frees), (unsigned long long)want_frees);

	/* Two blocks live at once are distinct and keep their own data. */
	e2e_cuda(cudaMalloc(&a, E2E_MIB), "cudaMalloc(a)");
	e2e_fill(a, E2E_MIB, 0xa);
	e2e_cuda(cudaMalloc(&b, E2E_MIB), "cudaMalloc(b)");
	e2e_check(a != b, "two live blocks are distinct (%p, %p)", a, b);
	e2e_fill(b, E2E_MIB, 0xb);
	e2e_check(e2e_verify(a, E2E_MIB, 0xa), "block a keeps its data while b is written");
	e2e_cuda(cudaFree(b), "cudaFree(b)");
	e2e_check(e2e_verify(a, E2E_MIB, 0xa), "block a keeps its data after b is freed");
	e2e_cuda(cudaFree(a), "cudaFree(a)");
	c = e2e_counters();
	if (!native)
		e2e_check(c.mallocs - c0.mallocs == 2 && c.frees == c0.frees,
			  "with two blocks live at once: 2 real cudaMalloc in all, no cudaFree (got %llu, %llu)",
			  (unsigned long long)(c.mallocs - c0.mallocs),
			  (unsigned long long)(c.frees - c0.frees));
	printf("PASS %s\n", native ? "e2e_interpose_native" : "e2e_interpose");
	return 0;
}
