/* pairs.c — a loop of allocation+free pairs for counting the hit path's instructions on the
 * stand-in (scripts/hitpath-instructions runs it under callgrind at N and 2N pairs): no checks,
 * no clock, nothing in the loop but the two calls.
 *     e2e_pairs N [--fenced] [--size BYTES] [--driver]
 * --fenced: create a stream first (reuse then waits for fences); --size: one size for every
 * pair (default: 512 B, 4 KiB, 64 KiB, 1 MiB in turn); --driver: cuMemAlloc+cuMemFree as a
 * static runtime reaches them (the driver door: cuGetProcAddress_v2 found with dlsym on
 * libcuda.so.1, then cuGetProcAddress asked for them) instead of cudaMalloc+cudaFree (the
 * runtime door). 256 pairs warm the cache first. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

static const size_t mixed[] = { 512, 4096, 65536, 1 << 20 };

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *);

static CUresult (*drv_alloc)(CUdeviceptr *, size_t);
static CUresult (*drv_free)(CUdeviceptr);

/* The driver's function `name` as a static runtime gets it; NULL when it cannot. */
static void *driver_fn(gpa_fn gpa, const char *name)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	if (gpa(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
		return NULL;
	return p;
}

static int find_driver_door(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *p;
	gpa_fn gpa;

	if (h == NULL || (p = dlsym(h, "cuGetProcAddress_v2")) == NULL)
		return -1;
	memcpy(&gpa, &p, sizeof(p));
	if ((p = driver_fn(gpa, "cuGetProcAddress")) == NULL)
		return -1;
	memcpy(&gpa, &p, sizeof(p));
	if ((p = driver_fn(gpa, "cuMemAlloc")) == NULL)
		return -1;
	memcpy(&drv_alloc, &p, sizeof(p));
	if ((p = driver_fn(gpa, "cuMemFree")) == NULL)
		return -1;
	memcpy(&drv_free, &p, sizeof(p));
	return 0;
}

static int pair(int driver, size_t size)
{
	CUdeviceptr d = 0;
	void *p = NULL;

	if (driver)
		return drv_alloc(&d, size) != CUDA_SUCCESS || drv_free(d) != CUDA_SUCCESS;
	return cudaMalloc(&p, size) != cudaSuccess || cudaFree(p) != cudaSuccess;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 0;
	size_t size = 0;
	int fenced = 0, driver = 0;
	cudaStream_t s;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--fenced"))
			fenced = 1;
		else if (!strcmp(argv[i], "--driver"))
			driver = 1;
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = (size_t)strtoull(argv[++i], NULL, 10);
		else
			n = -1;
	}
	if (n < 0) {
		fprintf(stderr, "usage: e2e_pairs N [--fenced] [--size BYTES] [--driver]\n");
		return 2;
	}
	/* The runtime's first call makes the context current, for the driver door too. */
	if (cudaFree(NULL) != cudaSuccess || (driver && find_driver_door() != 0)) {
		fprintf(stderr, "e2e_pairs: cannot start CUDA%s\n", driver ? " (the driver door)" : "");
		return 1;
	}
	if (fenced && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
		fprintf(stderr, "e2e_pairs: cannot create a stream\n");
		return 1;
	}
	for (long i = 0; i < 256 + n; i++) {
		if (pair(driver, size ? size : mixed[i & 3])) {
			fprintf(stderr, "e2e_pairs: pair %ld failed\n", i);
			return 1;
		}
	}
	return 0;
}
