/* gpu_common.cuh — helpers shared by the real-GPU tests: result lines, device memory figures,
 * the kernels that write and check patterns, and a way to tell whether the shim is loaded.
 * Each test prints one line per check: "PASS <test> <what>: <figures>" or "FAIL ...", and
 * "INFO ..." for figures that are reported but not asserted; scripts/gpu-check greps them. */
#ifndef GPUPOOL_TESTS_GPU_COMMON_CUH
#define GPUPOOL_TESTS_GPU_COMMON_CUH

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GT_MIB ((size_t)1 << 20)
#define GT_GIB ((size_t)1 << 30)
#define GT_GRID 264 /* 2 blocks per SM on an H200; every kernel uses a grid-stride loop */
#define GT_BLOCK 256

static const char *gt_test = "gpu";
static int gt_failures;

static inline void gt_vline(const char *tag, const char *what, const char *fmt, va_list ap)
{
	printf("%s %s %s: ", tag, gt_test, what);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
}

/* One asserted check: prints PASS or FAIL with the figures, returns cond. */
__attribute__((format(printf, 3, 4))) static inline int gt_check(int cond, const char *what,
								  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	gt_vline(cond ? "PASS" : "FAIL", what, fmt, ap);
	va_end(ap);
	if (!cond)
		gt_failures++;
	return cond;
}

/* A figure worth seeing that is not an assertion. */
__attribute__((format(printf, 2, 3))) static inline void gt_info(const char *what,
								   const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	gt_vline("INFO", what, fmt, ap);
	va_end(ap);
}

/* A CUDA call that must succeed: on failure prints a FAIL line naming it. Returns 1 if ok. */
static inline int gt_ok(cudaError_t e, const char *call)
{
	if (e == cudaSuccess)
		return 1;
	printf("FAIL %s %s: returned %d (%s)\n", gt_test, call, (int)e, cudaGetErrorString(e));
	fflush(stdout);
	gt_failures++;
	cudaGetLastError();
	return 0;
}

/* Summary line and exit status for main(). */
static inline int gt_finish(void)
{
	printf("%s %s: %d failed check(s)\n", gt_failures ? "FAIL" : "PASS", gt_test, gt_failures);
	fflush(stdout);
	return gt_failures ? 1 : 0;
}

static inline uint64_t gt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: the next pseudo-random number of the sequence in *state (seeds replay choices). */
static inline uint64_t gt_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline double gt_gib(size_t bytes)
{
	return (double)bytes / (double)GT_GIB;
}

static inline double gt_mib(size_t bytes)
{
	return (double)bytes / (double)GT_MIB;
}

/* Device free memory as NVML reports it (bytes): it moves with every allocation the way the
 * driver's own figure does, and no entry point of the shim is in its way. */
static inline size_t gt_nvml_free(size_t *total)
{
	struct mem { unsigned version; unsigned long long total, reserved, free, used; };
	static int (*get)(void *, struct mem *);
	static void *dev;
	struct mem m;

	if (get == NULL) {
		int (*init)(void), (*handle)(unsigned, void **);
		void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY), *p;
		if (h == NULL || (p = dlsym(h, "nvmlInit_v2")) == NULL)
			return 0;
		memcpy(&init, &p, sizeof(p));
		if (init() != 0 || (p = dlsym(h, "nvmlDeviceGetHandleByIndex_v2")) == NULL)
			return 0;
		memcpy(&handle, &p, sizeof(p));
		if (handle(0, &dev) != 0 || (p = dlsym(h, "nvmlDeviceGetMemoryInfo_v2")) == NULL)
			return 0;
		memcpy(&get, &p, sizeof(p));
	}
	m.version = (unsigned)sizeof(m) | (2u << 24); /* nvmlMemory_v2 */
	if (get(dev, &m) != 0)
		return 0;
	if (total)
		*total = m.total;
	return m.free;
}

/* Device free memory as it really is (bytes); 0 on error. Every CUDA call's figure passes the
 * shim (cudaMemGetInfo reaches its cuMemGetInfo), which may count this process's cached blocks
 * as free (GPUPOOL_REPORT_CACHED_AS_FREE): NVML's does not. */
static inline size_t gt_mem_free(size_t *total)
{
	return gt_nvml_free(total);
}

/* Free memory as the program sees it through the (possibly interposed) cudaMemGetInfo. */
static inline size_t gt_mem_free_reported(void)
{
	size_t f = 0, t = 0;

	if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return f;
}

/* The public API of the shim, found at run time: the tests do not link against it, so that a
 * run without LD_PRELOAD is told apart instead of silently testing the plain runtime. */
typedef int (*gt_release_fn)(int device, unsigned long long *bytes);

static inline gt_release_fn gt_shim_release(void)
{
	void *p = dlsym(RTLD_DEFAULT, "gpupool_release");
	gt_release_fn f;

	__builtin_memcpy(&f, &p, sizeof(f));
	return f;
}

static inline int gt_require_shim(void)
{
	return gt_check(gt_shim_release() != NULL, "shim loaded",
			"gpupool_release %s in the process (LD_PRELOAD=%s)",
			gt_shim_release() ? "found" : "NOT found",
			getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
}

/* Create the context. */
static inline int gt_context(void)
{
	return gt_ok(cudaDeviceSynchronize(), "CUDA context on device 0");
}

/* ---- kernels ---------------------------------------------------------------------------- */

__global__ void gt_fill_kernel(uint32_t *p, size_t n, uint32_t v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

static inline __device__ uint64_t gt_globaltimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Spin for `ns` of wall time, then write `v` everywhere: a kernel still running long after
 * the host moved on, that clobbers its buffer at the very end. */
__global__ void gt_slow_fill_kernel(uint32_t *p, size_t n, uint32_t v, uint64_t ns)
{
	uint64_t t0 = gt_globaltimer();

	while (gt_globaltimer() - t0 < ns)
		;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

__global__ void gt_count_ne_kernel(const uint32_t *p, size_t n, uint32_t v,
				   unsigned long long *count)
{
	unsigned long long mine = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		mine += p[i] != v;
	if (mine)
		atomicAdd(count, mine);
}

static inline int gt_fill(void *p, size_t bytes, uint32_t v, cudaStream_t s)
{
	gt_fill_kernel<<<GT_GRID, GT_BLOCK, 0, s>>>((uint32_t *)p, bytes / 4, v);
	return gt_ok(cudaGetLastError(), "fill kernel launch");
}

/* Words of the buffer that differ from `v` (after all work on the legacy stream), or
 * (unsigned long long)-1 when the check itself failed. The counter comes through cudaMalloc,
 * so it is a pooled block too. */
static inline unsigned long long gt_count_ne(const void *p, size_t bytes, uint32_t v)
{
	unsigned long long *d = NULL, h = ~0ull;

	if (!gt_ok(cudaMalloc((void **)&d, sizeof(*d)), "cudaMalloc(counter)"))
		return h;
	if (gt_ok(cudaMemset(d, 0, sizeof(*d)), "cudaMemset(counter)")) {
		gt_count_ne_kernel<<<GT_GRID, GT_BLOCK>>>((const uint32_t *)p, bytes / 4, v, d);
		if (gt_ok(cudaGetLastError(), "count kernel launch") &&
		    !gt_ok(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy(counter)"))
			h = ~0ull;
	}
	gt_ok(cudaFree(d), "cudaFree(counter)");
	return h;
}

/* Spin for `ns`, then count the words of p that are not v: a kernel that still reads its buffer
 * long after the host moved on (gpu_trust, gpu_join). */
__global__ void slow_count_ne_kernel(const uint32_t *p, size_t n, uint32_t v, uint64_t ns,
				     unsigned long long *count)
{
	uint64_t t0 = gt_globaltimer();
	unsigned long long mine = 0;

	while (gt_globaltimer() - t0 < ns)
		;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		mine += p[i] != v;
	if (mine)
		atomicAdd(count, mine);
}

#endif
