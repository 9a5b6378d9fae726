/* badfree.c — proves that bad frees get the runtime's own answer and lose nothing:
 * cudaFree(NULL) succeeds; a double free of a pooled pointer returns cudaErrorInvalidValue and
 * the pool keeps working with live data intact; a pointer from cudaMallocAsync passes to the real
 * cudaFree (one real free, success); a host pointer and a pointer inside a block return
 * cudaErrorInvalidValue; nothing aborts. */
#include <stdlib.h>

#include "e2e.h"

int main(void)
{
	struct standin_counters c;
	void *a = NULL, *b = NULL, *keep = NULL, *async = NULL, *host;
	int on_stack = 0;
	cudaError_t rc;

	e2e_start("e2e_badfree");
	rc = cudaFree(NULL);
	e2e_check(rc == cudaSuccess, "cudaFree(NULL) returns cudaSuccess (%s)", cudaGetErrorName(rc));

	e2e_cuda(cudaMalloc(&keep, 2 * E2E_MIB), "cudaMalloc(keep)");
	e2e_fill(keep, 2 * E2E_MIB, 1);
	e2e_cuda(cudaMalloc(&a, E2E_MIB), "cudaMalloc(a)");
	e2e_cuda(cudaFree(a), "cudaFree(a)");
	rc = cudaFree(a);
	e2e_check(rc == cudaErrorInvalidValue, "a double free of a pooled pointer returns "
		  "cudaErrorInvalidValue (%s)", cudaGetErrorName(rc));
	(void)cudaGetLastError();
	c = e2e_counters();
	e2e_check(c.frees == 0, "the double free did not reach the real cudaFree (real frees: %llu)",
		  (unsigned long long)c.frees);

	/* The pool still works: the freed block is handed out once, not twice. */
	e2e_cuda(cudaMalloc(&a, E2E_MIB), "cudaMalloc(a again)");
	e2e_cuda(cudaMalloc(&b, E2E_MIB), "cudaMalloc(b)");
	e2e_check(a != b, "after the double free two live blocks are still distinct");
	e2e_fill(a, E2E_MIB, 2);
	e2e_fill(b, E2E_MIB, 3);
	e2e_check(e2e_verify(a, E2E_MIB, 2) && e2e_verify(keep, 2 * E2E_MIB, 1),
		  "and hold their own data, as does the block that was live throughout");
	e2e_cuda(cudaFree(a), "cudaFree(a)");
	e2e_cuda(cudaFree(b), "cudaFree(b)");

	e2e_cuda(cudaMallocAsync(&async, 4 * E2E_MIB, 0), "cudaMallocAsync");
	rc = cudaFree(async);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess && c.frees == 1 && c.async_mallocs == 1,
		  "a cudaMallocAsync pointer freed with cudaFree reaches the real cudaFree (%s, real frees %llu)",
		  cudaGetErrorName(rc), (unsigned long long)c.frees);

	host = malloc(4096);
	rc = cudaFree(host);
	e2e_check(rc == cudaErrorInvalidValue, "cudaFree of a malloc'd host pointer returns "
		  "cudaErrorInvalidValue (%s)", cudaGetErrorName(rc));
	free(host);
	rc = cudaFree(&on_stack);
	e2e_check(rc == cudaErrorInvalidValue, "cudaFree of a stack address returns "
		  "cudaErrorInvalidValue (%s)", cudaGetErrorName(rc));
	rc = cudaFree((char *)keep + 256);
	e2e_check(rc == cudaErrorInvalidValue, "cudaFree of a pointer inside a live block returns "
		  "cudaErrorInvalidValue (%s)", cudaGetErrorName(rc));
	(void)cudaGetLastError();

	c = e2e_counters();
	e2e_check(c.frees == 1, "none of the bad frees freed real memory (real frees: %llu)",
		  (unsigned long long)c.frees);
	e2e_check(e2e_verify(keep, 2 * E2E_MIB, 1), "the block live throughout kept its data");
	e2e_cuda(cudaFree(keep), "cudaFree(keep)");
	e2e_cuda(cudaMalloc(&a, 2 * E2E_MIB), "cudaMalloc after the bad frees");
	e2e_check(a == keep && e2e_counters().mallocs == c.mallocs,
		  "the pool keeps serving after every kind of bad free: 2 MiB came from its cache, "
		  "the block just freed (no real cudaMalloc)");
	e2e_cuda(cudaFree(a), "cudaFree after the bad frees");
	printf("PASS e2e_badfree\n");
	return 0;
}
