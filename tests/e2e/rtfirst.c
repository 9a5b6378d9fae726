/* rtfirst.c — a program linked to both the runtime and libcuda.so.1 whose first CUDA call is the
 * runtime's cudaMalloc, before anything called cuInit: the shim finds the driver loaded but not
 * initialised yet. The runtime initialises it on its first call; the pool must not give up for the
 * process's life because it asked first. 1000 cudaMalloc+cudaFree pairs reach the driver once,
 * and a later cuMemAlloc+cuMemFree through the driver's exported symbols is pooled too. Natively
 * (--expect-native) every pair reaches the driver. */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <string.h>

#include "e2e.h"

#define CYCLES 1000

int main(int argc, char **argv)
{
	int native = argc > 1 && strcmp(argv[1], "--expect-native") == 0;
	struct standin_counters c0, c;
	CUdeviceptr d = 0;
	void *p = NULL;

	e2e_start(native ? "e2e_rtfirst_native" : "e2e_rtfirst");
	c0 = e2e_counters();
	for (int i = 0; i < CYCLES; i++) {
		e2e_cuda(cudaMalloc(&p, 1 << 20), "cudaMalloc");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	c = e2e_counters();
	if (native)
		e2e_check(c.mallocs - c0.mallocs == CYCLES, "natively every pair reaches the driver "
			  "(%llu)", (unsigned long long)(c.mallocs - c0.mallocs));
	else
		e2e_check(c.mallocs - c0.mallocs == 1, "the runtime's first call initialised the "
			  "driver, and the pool served %d pairs with %llu driver allocation(s)",
			  CYCLES, (unsigned long long)(c.mallocs - c0.mallocs));
	c0 = c;
	for (int i = 0; i < CYCLES; i++) {
		if (cuMemAlloc(&d, 1 << 20) != CUDA_SUCCESS || cuMemFree(d) != CUDA_SUCCESS)
			e2e_fail("cuMemAlloc/cuMemFree pair %d failed", i);
	}
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs == (native ? CYCLES : 0), "cuMemAlloc pairs after it: %llu "
		  "driver allocation(s)", (unsigned long long)(c.mallocs - c0.mallocs));
	return 0;
}
