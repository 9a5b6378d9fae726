/* cpupairs.c — the CPU cost of a warm allocation+free pair, side by side in one process: glibc's
 * malloc+free, cudaMalloc+cudaFree (the runtime door) and cuMemAlloc+cuMemFree as a static
 * runtime reaches them (the driver door), on the stand-in CUDA under LD_PRELOAD=libgpupool.so.
 * Rounds alternate the three (each a timed batch of pairs per size, after a warm-up); the figure
 * is the median ns per pair over the rounds, with the lowest and highest round. Built as
 * e2e_cpupairs_static (E2E_STATIC_RUNTIME), the runtime is linked into the program
 * (libcudart_standin_static.a) and its cudaMalloc+cudaFree reach the static runtime door.
 *     e2e_cpupairs [--pairs N] [--rounds R]       (defaults: 200000 pairs, 11 rounds)
 * Output: a "CPUPAIRS size=... glibc=... runtime=... driver=..." line per size and a markdown
 * table. Under ctest it only has to run (its figures mean nothing on a loaded machine). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define MAX_ROUNDS 101

static const size_t sizes[] = { 512, 4096, 65536, 1 << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
enum who { GLIBC, RUNTIME, DRIVER, NWHO };
#ifdef E2E_STATIC_RUNTIME
static const char *const names[NWHO] = { "glibc", "static", "driver" };
#define RUNTIME_COLUMN "static runtime"
#else
static const char *const names[NWHO] = { "glibc", "runtime", "driver" };
#define RUNTIME_COLUMN "runtime door"
#endif

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *);
static CUresult (*drv_alloc)(CUdeviceptr *, size_t);
static CUresult (*drv_free)(CUdeviceptr);
/* Keeps the compiler from pairing malloc with free away. */
static void *volatile sink;

static void *driver_fn(gpa_fn gpa, const char *name)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	if (gpa(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || p == NULL)
		e2e_fail("cuGetProcAddress(\"%s\") failed", name);
	return p;
}

static void find_driver_door(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *p;
	gpa_fn gpa;

	if (h == NULL || (p = dlsym(h, "cuGetProcAddress_v2")) == NULL)
		e2e_fail("no cuGetProcAddress_v2 in libcuda.so.1");
	memcpy(&gpa, &p, sizeof(p));
	p = driver_fn(gpa, "cuGetProcAddress");
	memcpy(&gpa, &p, sizeof(p));
	p = driver_fn(gpa, "cuMemAlloc");
	memcpy(&drv_alloc, &p, sizeof(p));
	p = driver_fn(gpa, "cuMemFree");
	memcpy(&drv_free, &p, sizeof(p));
}

static void batch(enum who w, size_t size, long pairs)
{
	for (long i = 0; i < pairs; i++) {
		if (w == GLIBC) {
			sink = malloc(size);
			free(sink);
		} else if (w == RUNTIME) {
			void *p = NULL;
			if (cudaMalloc(&p, size) != cudaSuccess || cudaFree(p) != cudaSuccess)
				e2e_fail("cudaMalloc+cudaFree of %zu failed", size);
		} else {
			CUdeviceptr d = 0;
			if (drv_alloc(&d, size) != CUDA_SUCCESS || drv_free(d) != CUDA_SUCCESS)
				e2e_fail("cuMemAlloc+cuMemFree of %zu failed", size);
		}
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static double ns[NWHO][NSIZES][MAX_ROUNDS];
	long pairs = 200000;
	int rounds = 11;

	e2e_start("e2e_cpupairs");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			pairs = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else
			e2e_fail("usage: e2e_cpupairs [--pairs N] [--rounds R]");
	}
	if (pairs <= 0 || rounds <= 0 || rounds > MAX_ROUNDS)
		e2e_fail("--pairs > 0, --rounds 1..%d", MAX_ROUNDS);
	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)");
	find_driver_door();
	for (int w = 0; w < NWHO; w++)
		for (size_t s = 0; s < NSIZES; s++)
			batch((enum who)w, sizes[s], 1000);
	for (int r = 0; r < rounds; r++)
		for (int w = 0; w < NWHO; w++)
			for (size_t s = 0; s < NSIZES; s++) {
				uint64_t t0 = e2e_now_ns();
				batch((enum who)w, sizes[s], pairs);
				ns[w][s][r] = (double)(e2e_now_ns() - t0) / (double)pairs;
			}
	printf("| size | glibc ns (min-max) | " RUNTIME_COLUMN " ns (min-max) | driver door ns "
	       "(min-max) | " RUNTIME_COLUMN " / glibc | driver / glibc |\n"
	       "|---|---|---|---|---|---|\n");
	for (size_t s = 0; s < NSIZES; s++) {
		double med[NWHO];

		printf("| %zu B |", sizes[s]);
		for (int w = 0; w < NWHO; w++) {
			qsort(ns[w][s], (size_t)rounds, sizeof(double), cmp);
			med[w] = ns[w][s][rounds / 2];
			printf(" %.1f (%.1f-%.1f) |", med[w], ns[w][s][0], ns[w][s][rounds - 1]);
		}
		printf(" x%.2f | x%.2f |\n", med[RUNTIME] / med[GLIBC], med[DRIVER] / med[GLIBC]);
	}
	for (size_t s = 0; s < NSIZES; s++) {
		printf("CPUPAIRS size=%zu", sizes[s]);
		for (int w = 0; w < NWHO; w++)
			printf(" %s=%.1f", names[w], ns[w][s][rounds / 2]);
		printf(" pairs=%ld rounds=%d\n", pairs, rounds);
	}
	return 0;
}
