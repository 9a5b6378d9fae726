/* oom.c — proves the out-of-memory retry (run with STANDIN_CAPACITY=64 MiB): with 40 MiB cached
 * and 8 MiB live, cudaMalloc(32 MiB) succeeds because the shim gives cached blocks back and
 * retries, and cudaGetLastError() then reports cudaSuccess; a request that can never fit
 * (128 MiB) returns cudaErrorMemoryAllocation; the live block keeps its data throughout. */
#include "e2e.h"

#define STEP (8 * E2E_MIB)
#define N 6

int main(void)
{
	struct standin_counters c0, c;
	void *blocks[N], *big = NULL, *huge = NULL, *p = NULL;
	size_t free_b = 0, total_b = 0;
	cudaError_t rc;
	int i;

	e2e_start("e2e_oom");
	e2e_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	if (total_b != 64 * E2E_MIB)
		e2e_fail("run me with STANDIN_CAPACITY=67108864 (the device has %zu B)", total_b);
	for (i = 0; i < N; i++)
		e2e_cuda(cudaMalloc(&blocks[i], STEP), "cudaMalloc(8 MiB)");
	e2e_fill(blocks[0], STEP, 42);
	for (i = 1; i < N; i++)
		e2e_cuda(cudaFree(blocks[i]), "cudaFree(8 MiB)");
	c = e2e_counters();
	e2e_check(c.live_bytes >= N * STEP && c.frees == 0,
		  "48 MiB allocated in 8 MiB blocks, 40 MiB of it freed and cached: the device holds %llu B",
		  (unsigned long long)c.live_bytes);
	e2e_check(cudaGetLastError() == cudaSuccess, "no error is pending before the big request");

	rc = cudaMalloc(&big, 32 * E2E_MIB);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess, "cudaMalloc(32 MiB) succeeds on a 64 MiB device with 40 MiB cached "
		  "(%s; the runtime saw %llu failed and %llu real frees)", cudaGetErrorName(rc),
		  (unsigned long long)c.failed_mallocs, (unsigned long long)c.frees);
	rc = cudaGetLastError();
	e2e_check(rc == cudaSuccess, "cudaGetLastError() after the retried allocation is cudaSuccess (%s)",
		  cudaGetErrorName(rc));
	e2e_fill(big, 32 * E2E_MIB, 7);
	e2e_check(e2e_verify(blocks[0], STEP, 42), "the live 8 MiB block kept its data");

	rc = cudaMalloc(&huge, 128 * E2E_MIB);
	e2e_check(rc == cudaErrorMemoryAllocation,
		  "cudaMalloc(128 MiB) on a 64 MiB device returns cudaErrorMemoryAllocation (%s)",
		  cudaGetErrorName(rc));
	(void)cudaGetLastError();
	e2e_check(e2e_verify(big, 32 * E2E_MIB, 7) && e2e_verify(blocks[0], STEP, 42),
		  "the live blocks kept their data after the failed request");

	/* The pool still works afterwards. */
	e2e_cuda(cudaFree(big), "cudaFree(32 MiB)");
	e2e_cuda(cudaMalloc(&p, STEP), "cudaMalloc(8 MiB) after the failure");
	e2e_fill(p, STEP, 9);
	e2e_cuda(cudaFree(p), "cudaFree(8 MiB)");
	e2e_cuda(cudaFree(blocks[0]), "cudaFree(first block)");
	c0 = e2e_counters();
	rc = cudaMalloc(&big, 40 * E2E_MIB);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess && c.failed_mallocs > c0.failed_mallocs && c.frees > c0.frees,
		  "after the failure the pool keeps serving: cudaMalloc(40 MiB) with the other 48 MiB "
		  "cached gave the cache back and retried (%s; %llu failed real cudaMalloc, %llu real "
		  "frees)", cudaGetErrorName(rc), (unsigned long long)(c.failed_mallocs - c0.failed_mallocs),
		  (unsigned long long)(c.frees - c0.frees));
	e2e_cuda(cudaGetLastError(), "cudaGetLastError after the second retried allocation");
	e2e_cuda(cudaFree(big), "cudaFree(40 MiB)");
	printf("PASS e2e_oom\n");
	return 0;
}
