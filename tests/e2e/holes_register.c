/* holes_register.c — a stream that cannot be registered for the fences (no host memory) would be
 * missing from every fence: from then on a freed block is never handed out again on the strength
 * of a fence (a new allocation is made instead). The program's own realloc stands in front of
 * libc's to fail on demand: not in the sanitizer builds, whose runtimes own realloc. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define BYTES (2 * E2E_MIB)

static _Atomic int fail_realloc;

extern void *__libc_realloc(void *, size_t);

void *realloc(void *p, size_t n)
{
	if (atomic_load(&fail_realloc))
		return NULL;
	return __libc_realloc(p, n);
}

static void register_fails(void)
{
	struct standin_counters c0, c;
	cudaStream_t s;
	void *p, *q;
	int reused = 0;

	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	atomic_store(&fail_realloc, 1);
	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
		 "cudaStreamCreateWithFlags (its registration fails)");
	atomic_store(&fail_realloc, 0);
	c0 = e2e_counters();
	for (int i = 0; i < 20; i++) {
		e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc");
		reused += q == p;
		p = q;
		e2e_cuda(cudaFree(q), "cudaFree");
	}
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs >= 19 && reused <= 1,
		  "no fence is trusted any more: 20 allocations made %llu real ones (reused %d)",
		  (unsigned long long)(c.mallocs - c0.mallocs), reused);
	cudaStreamDestroy(s);
}

int main(void)
{
	e2e_start("e2e_holes_register");
	register_fails();
	return 0;
}
