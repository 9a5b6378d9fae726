/* tooold.c — a runtime that finds the driver older than itself unloads it and answers every call
 * cudaErrorInsufficientDriver (the stand-in with STANDIN_DRIVER_TOO_OLD=1, as the real runtime
 * does). Under gpupool every call gets the runtime's own answer, and nothing calls into the
 * driver that is gone (gpupool's table of the driver's functions keeps it loaded). Run with and
 * without LD_PRELOAD=libgpupool.so: the same answers. */
#include "e2e.h"

int main(void)
{
	size_t free_b = 0, total_b = 0;
	void *p = NULL;
	cudaError_t rc;
	int ok = 1;

	e2e_start("e2e_tooold");
	for (int i = 0; i < 3; i++) {
		rc = cudaMalloc(&p, E2E_MIB);
		ok &= rc == cudaErrorInsufficientDriver && p == NULL;
	}
	e2e_check(ok, "three cudaMalloc calls answered cudaErrorInsufficientDriver, nothing handed out");
	rc = cudaFree(NULL);
	e2e_check(rc == cudaErrorInsufficientDriver, "cudaFree(NULL): %s", cudaGetErrorName(rc));
	rc = cudaMemGetInfo(&free_b, &total_b);
	e2e_check(rc == cudaErrorInsufficientDriver, "cudaMemGetInfo: %s", cudaGetErrorName(rc));
	rc = cudaMalloc(&p, E2E_MIB);
	e2e_check(rc == cudaErrorInsufficientDriver, "and cudaMalloc once more: %s",
		  cudaGetErrorName(rc));
	return 0;
}
