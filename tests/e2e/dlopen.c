/* dlopen.c — proves libgpupool.so works when a program loads it itself, as PyTorch's
 * CUDAPluggableAllocator does, without LD_PRELOAD: dlopen succeeds (the library's thread-locals
 * are initial-exec, so they must fit the loader's static TLS reserve), the real runtime is found
 * by soname (RTLD_NEXT cannot see a runtime loaded before the library), and the stream-aware
 * entry points gpupool_torch_alloc/gpupool_torch_free pool and reuse blocks.
 *   e2e_dlopen /path/to/libgpupool.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/types.h>

#include "e2e.h"

typedef void *(*alloc_fn)(ssize_t size, int device, cudaStream_t stream);
typedef void (*free_fn)(void *ptr, ssize_t size, int device, cudaStream_t stream);

int main(int argc, char **argv)
{
	struct standin_counters c0, c1;
	alloc_fn alloc_p;
	free_fn free_p;
	void *h, *sym, *a, *b;

	e2e_start("e2e_dlopen");
	if (argc < 2)
		e2e_fail("usage: e2e_dlopen LIBGPUPOOL");
	e2e_cuda(cudaFree(NULL), "cudaFree(NULL): the runtime is up before the library is loaded");
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	e2e_check(h != NULL, "dlopen(libgpupool.so) after start-up: %s", h ? "ok" : dlerror());
	sym = dlsym(h, "gpupool_torch_alloc");
	memcpy(&alloc_p, &sym, sizeof(sym));
	sym = dlsym(h, "gpupool_torch_free");
	memcpy(&free_p, &sym, sizeof(sym));
	e2e_check(alloc_p != NULL && free_p != NULL, "gpupool_torch_alloc and gpupool_torch_free found");

	c0 = e2e_counters();
	a = alloc_p(3 * (ssize_t)E2E_MIB, 0, 0);
	e2e_check(a != NULL && standin_owns(a), "gpupool_torch_alloc: 3 MiB from the runtime");
	e2e_fill(a, 3 * E2E_MIB, 5);
	free_p(a, 3 * (ssize_t)E2E_MIB, 0, 0);
	b = alloc_p(3 * (ssize_t)E2E_MIB, 0, 0);
	c1 = e2e_counters();
	e2e_check(b == a && c1.mallocs == c0.mallocs + 1 && c1.frees == c0.frees,
		  "freed and allocated again: the cached block, one real cudaMalloc in all");
	free_p(b, 3 * (ssize_t)E2E_MIB, 0, 0);
	printf("PASS e2e_dlopen\n");
	return 0;
}
