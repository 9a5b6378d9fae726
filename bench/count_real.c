/* count_real.c — libbench_count.so: counts the cudaMalloc and cudaFree calls that reach the CUDA
 * runtime, for the benchmarks' "real cudaMalloc" column. Preloaded *after* libgpupool.so
 * (LD_PRELOAD="libgpupool.so libbench_count.so"), it is what the shim finds as the next
 * cudaMalloc, so it sees only what gets past the pool; alone, it sees every call. Forwards
 * everything unchanged; never allocates, never logs. Benchmark-only: nothing in the product
 * uses it. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static _Atomic uint64_t mallocs, frees;

/* The next definition after this library: the runtime's. Racing first calls resolve the same
 * pointer, so a plain atomic store is enough. */
static void *next(const char *name, _Atomic(void *) *slot)
{
	void *p = atomic_load_explicit(slot, memory_order_acquire);

	if (p == NULL) {
		p = dlsym(RTLD_NEXT, name);
		atomic_store_explicit(slot, p, memory_order_release);
	}
	return p;
}

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	static _Atomic(void *) slot;
	void *p = next("cudaMalloc", &slot);
	malloc_fn f;
	cudaError_t rc;

	if (p == NULL)
		return cudaErrorInitializationError;
	memcpy(&f, &p, sizeof(f));
	rc = f(devPtr, size);
	if (rc == cudaSuccess)
		atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
	return rc;
}

EXPORT cudaError_t cudaFree(void *devPtr)
{
	static _Atomic(void *) slot;
	void *p = next("cudaFree", &slot);
	free_fn f;
	cudaError_t rc;

	if (p == NULL)
		return cudaErrorInitializationError;
	memcpy(&f, &p, sizeof(f));
	rc = f(devPtr);
	if (rc == cudaSuccess && devPtr != NULL)
		atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
	return rc;
}

/* Successful real cudaMalloc calls so far. */
EXPORT uint64_t bench_count_mallocs(void)
{
	return atomic_load_explicit(&mallocs, memory_order_relaxed);
}

/* Successful real cudaFree calls on a non-NULL pointer so far. */
EXPORT uint64_t bench_count_frees(void)
{
	return atomic_load_explicit(&frees, memory_order_relaxed);
}
