/* twodoors.c — one pool behind both doors: blocks allocated through the runtime (cudaMalloc) and
 * freed through the driver (cuMemFree), and the other way round, are one block each; a miss
 * through the runtime reaches the driver once (the runtime's own call into the driver is not
 * pooled again); cudaFree(0) still initialises the runtime (a context is current afterwards), and
 * with no device it returns the runtime's own error. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "e2e.h"

static CUresult (*drv_free)(CUdeviceptr);
static CUresult (*drv_alloc)(CUdeviceptr *, size_t);
static CUresult (*ctx_current)(CUcontext *);

static void find(void **slot, void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (p == NULL)
		e2e_fail("dlsym(libcuda, %s) failed", name);
	*slot = p;
}

int main(int argc, char **argv)
{
	struct standin_counters c0, c;
	CUcontext before = NULL, after = NULL;
	void *h, *p = NULL, *r;
	CUdeviceptr q = 0;
	cudaError_t rc;

	e2e_start("e2e_twodoors");
	if (argc > 1 && strcmp(argv[1], "--no-device") == 0) {
		rc = cudaFree(NULL);
		e2e_check(rc == cudaErrorNoDevice,
			  "with no device, cudaFree(0) returns the runtime's cudaErrorNoDevice (%d)",
			  (int)rc);
		return 0;
	}
	rc = cudaFree(NULL); /* the runtime loads the driver: now it can be looked at */
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		e2e_fail("the runtime has not loaded libcuda.so.1");
	find((void **)&drv_free, h, "cuMemFree_v2");
	find((void **)&drv_alloc, h, "cuMemAlloc_v2");
	find((void **)&ctx_current, h, "cuCtxGetCurrent");
	ctx_current(&after);
	e2e_check(rc == cudaSuccess && after != NULL,
		  "cudaFree(0) reached the runtime: a context is current afterwards");
	(void)before;

	/* Misses through the runtime: one real allocation each, whatever the runtime calls. */
	c0 = e2e_counters();
	for (int i = 1; i <= 10; i++) {
		void *x;
		e2e_cuda(cudaMalloc(&x, (size_t)i * 3 * E2E_MIB), "cudaMalloc");
		e2e_cuda(cudaFree(x), "cudaFree");
	}
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs == 10 && c.live_allocs - c0.live_allocs == 10,
		  "10 misses of 10 sizes through the runtime made 10 real allocations (%llu), now "
		  "cached (%llu live)", (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)(c.live_allocs - c0.live_allocs));

	/* Runtime in, driver out, and back. */
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&p, 256 * E2E_KIB), "cudaMalloc(256 KiB)");
	e2e_check(drv_free((CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS,
		  "a cudaMalloc block freed with cuMemFree");
	e2e_check(drv_alloc(&q, 256 * E2E_KIB) == CUDA_SUCCESS && (void *)(uintptr_t)q == p,
		  "cuMemAlloc of the same size gets that block back");
	e2e_cuda(cudaFree((void *)(uintptr_t)q), "cudaFree of a cuMemAlloc block");
	e2e_cuda(cudaMalloc(&r, 256 * E2E_KIB), "cudaMalloc again");
	e2e_check(r == p, "cudaMalloc gets it back too");
	e2e_cuda(cudaFree(r), "cudaFree");
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs == 1 && c.frees == c0.frees && c.bad_frees == c0.bad_frees,
		  "across the doors it stayed one block: %llu real allocation, %llu real frees, %llu "
		  "bad frees", (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)(c.frees - c0.frees),
		  (unsigned long long)(c.bad_frees - c0.bad_frees));
	return 0;
}
