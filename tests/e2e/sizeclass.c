/* sizeclass.c — proves the size-class rules as seen from the runtime: every block handed out is
 * at least the request and at most 12.5% above what the driver would charge for the request
 * (its real size is visible in the stand-in: a pooled block is one whole real allocation);
 * a cached 1 MiB block is not reused for 512 KiB; a freed block is reused for another request of
 * the same class (same fresh size) and a new real cudaMalloc happens only for another class. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "e2e.h"

/* size(p) must be >= bytes and within 12.5% of the driver's charge for bytes, both as a size and
 * as what it costs on the device. */
static void check_bound(const void *p, size_t bytes, const char *what)
{
	uint64_t real = standin_size(p);
	uint64_t charge = standin_charge(bytes);

	if (real == 0)
		e2e_fail("%s: %zu B: the pointer %p is not the start of a real allocation", what, bytes, p);
	if (real < bytes)
		e2e_fail("%s: %zu B served by a real allocation of only %llu B", what, bytes,
			 (unsigned long long)real);
	if (8 * real > 9 * charge)
		e2e_fail("%s: %zu B (driver charge %llu B) served by a block of %llu B: more than 12.5%% waste",
			 what, bytes, (unsigned long long)charge, (unsigned long long)real);
	if (8 * standin_charge(real) > 9 * charge)
		e2e_fail("%s: %zu B (driver charge %llu B) served by a block of %llu B that costs %llu B on "
			 "the device: more than 12.5%% waste", what, bytes, (unsigned long long)charge,
			 (unsigned long long)real, (unsigned long long)standin_charge(real));
}

/* Allocate `first`, free it, allocate `second`. If `second` came from the cache (no real
 * cudaMalloc) its block must fit the bound; if it needed a real cudaMalloc, its class must differ
 * from the cached block's, or the pool failed to reuse a block of the very same class. */
static void check_pair(size_t first, size_t second, int must_not_reuse)
{
	struct standin_counters c0, c1;
	void *a = NULL, *b = NULL;
	uint64_t size_a, size_b;

	e2e_cuda(cudaMalloc(&a, first), "cudaMalloc(first)");
	check_bound(a, first, "first");
	size_a = standin_size(a);
	e2e_cuda(cudaFree(a), "cudaFree(first)");
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&b, second), "cudaMalloc(second)");
	c1 = e2e_counters();
	check_bound(b, second, "second");
	size_b = standin_size(b);
	if (c1.mallocs == c0.mallocs) {
		if (must_not_reuse)
			e2e_fail("a cached %zu B block (real %llu B) was reused for %zu B", first,
				 (unsigned long long)size_a, second);
		e2e_note("%zu B freed (block %llu B), %zu B then served from the cache (block %llu B)",
			 first, (unsigned long long)size_a, second, (unsigned long long)size_b);
	} else {
		if (size_b == size_a)
			e2e_fail("%zu B needed a new real cudaMalloc of %llu B although a freed %zu B block "
				 "of that same class (%llu B) was cached", second,
				 (unsigned long long)size_b, first, (unsigned long long)size_a);
		e2e_note("%zu B freed (block %llu B), %zu B got a new block of another class (%llu B)",
			 first, (unsigned long long)size_a, second, (unsigned long long)size_b);
	}
	/* b stays live, so later pairs see only the blocks they freed themselves (a is the only
	 * cached block of its class unless it was reused). */
}

int main(void)
{
	struct standin_counters c0, c1;
	void *big = NULL, *small = NULL, *p = NULL;
	unsigned seed = 12345;
	size_t bytes;
	int i;

	e2e_start("e2e_sizeclass");

	/* The named cases. */
	e2e_cuda(cudaMalloc(&big, E2E_MIB), "cudaMalloc(1 MiB)");
	e2e_cuda(cudaFree(big), "cudaFree(1 MiB)");
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&small, 512 * E2E_KIB), "cudaMalloc(512 KiB)");
	c1 = e2e_counters();
	e2e_check(c1.mallocs == c0.mallocs + 1 && small != big,
		  "a cached 1 MiB block is not reused for 512 KiB (new real cudaMalloc: %llu)",
		  (unsigned long long)(c1.mallocs - c0.mallocs));
	check_pair(1000000, 990000, 0);
	check_pair(E2E_MIB, 512 * E2E_KIB, 1);

	/* Pairs far apart in size, so each sees only its own cached block. */
	check_pair(600, 590, 0);
	check_pair(3000, 2950, 0);
	check_pair(20000, 19700, 0);
	check_pair(100000, 99000, 0);
	check_pair(5 * E2E_MIB, 5 * E2E_MIB - 10000, 0);
	check_pair(24 * E2E_MIB + 1, 23 * E2E_MIB + 900 * E2E_KIB, 0);
	check_pair(100 * E2E_MIB, 99 * E2E_MIB, 0);
	check_pair(1, 512, 0);

	/* Every block handed out, fresh or cached, fits the bound: 300 log-uniform sizes from
	 * 1 B to 64 MiB, each freed at once so later requests meet a populated cache. */
	for (i = 0; i < 300; i++) {
		double e = (double)rand_r(&seed) / RAND_MAX * 26.0;
		double f = 1.0 + (double)rand_r(&seed) / RAND_MAX;

		bytes = (size_t)(f * (double)((size_t)1 << (size_t)e));
		if (bytes == 0)
			bytes = 1;
		e2e_cuda(cudaMalloc(&p, bytes), "cudaMalloc(random size)");
		check_bound(p, bytes, "random");
		e2e_cuda(cudaFree(p), "cudaFree(random size)");
	}
	e2e_note("300 random sizes from 1 B to 64 MiB: every block is within 12.5%% of the driver's "
		 "charge (each checked)");
	printf("PASS e2e_sizeclass\n");
	return 0;
}
