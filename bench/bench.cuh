/* bench.cuh — helpers shared by the benchmarks (threads, random_alloc, replay): clocks, option
 * lists, the device memory figure as the driver reports it, the shim's and the counting library's
 * entry points found at run time, the cudaMallocAsync pool, and peak tracking.
 * Never link the benchmarks against libgpupool or libbench_count: a run without LD_PRELOAD must
 * measure the plain runtime, and say so. */
#ifndef GPUPOOL_BENCH_CUH
#define GPUPOOL_BENCH_CUH

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MIB ((size_t)1 << 20)
#define BENCH_MAX_LIST 16

enum bench_contender { B_NATIVE, B_ASYNC, B_POOL, B_POOL_FENCED, B_NCONTENDERS };
static const char *const bench_names[B_NCONTENDERS] = { "native", "async", "gpupool",
							"gpupool-fenced" };

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* "1,2,4" -> values; returns how many (0 on a malformed list). */
static inline int bench_parse_list(const char *s, uint64_t *out, int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);
		if (end == s)
			return 0;
		out[n++] = v;
		if (*end == '\0')
			break;
		if (*end != ',')
			return 0;
		s = end + 1;
	}
	return n;
}

/* A symbol found anywhere in the process: the preloaded shim's API, the counting library's. */
static inline void *bench_global_sym(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

static inline int bench_shim_loaded(void)
{
	return bench_global_sym("gpupool_release") != NULL;
}

/* Give the shim's cache back to the driver (between configurations); no-op without the shim. */
static inline void bench_shim_release(void)
{
	typedef int (*release_fn)(int, unsigned long long *);
	void *p = bench_global_sym("gpupool_release");
	release_fn f;

	if (p == NULL)
		return;
	memcpy(&f, &p, sizeof(f));
	f(-1, NULL);
	cudaGetLastError();
}

/* Real cudaMalloc calls so far, from bench/count_real.c when it is preloaded (after the shim, so
 * it sees exactly what gets past it); NULL when it is not. */
typedef uint64_t (*bench_count_fn)(void);

static inline bench_count_fn bench_counter(void)
{
	void *p = bench_global_sym("bench_count_mallocs");
	bench_count_fn f;

	memcpy(&f, &p, sizeof(f));
	return f;
}

/* With the shim preloaded, every way to ask for free memory passes it: cudaMemGetInfo, and the
 * driver's cuMemGetInfo, which the runtime reaches through cuGetProcAddress and dlsym finds in the
 * shim first. By default (GPUPOOL_REPORT_CACHED_AS_FREE) it counts its cached blocks as free, so
 * a pool's peak would leave its idle cache out. A benchmark that measures memory calls this first
 * in main, before any CUDA call: with the shim loaded and that setting not 0, it runs the program
 * again with it 0 (the shim reads its settings when it loads). */
static inline void bench_exact_meminfo(char **argv)
{
	const char *v = getenv("GPUPOOL_REPORT_CACHED_AS_FREE");

	if (!bench_shim_loaded() || (v != NULL && strcmp(v, "0") == 0))
		return;
	if (setenv("GPUPOOL_REPORT_CACHED_AS_FREE", "0", 1) == 0)
		execv("/proc/self/exe", argv);
	fprintf(stderr, "bench: cannot run again with GPUPOOL_REPORT_CACHED_AS_FREE=0: the pool's "
			"idle cache counts as free in the memory figures\n");
}

/* Device-wide used bytes as the driver reports them (the runtime's own cudaMemGetInfo, looked up
 * in libcudart's scope; with the shim loaded, exact only after bench_exact_meminfo). */
static inline size_t bench_device_used(void)
{
	typedef cudaError_t (*meminfo_fn)(size_t *, size_t *);
	static meminfo_fn real;
	size_t f = 0, t = 0;

	if (real == NULL) {
		void *h = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
		void *p = h ? dlsym(h, "cudaMemGetInfo") : NULL;
		if (h)
			dlclose(h); /* NOLOAD took a reference; the program still holds the runtime */
		if (p != NULL) {
			memcpy(&real, &p, sizeof(p));
		} else {
			fprintf(stderr, "bench: libcudart.so.13 not found: memory figures come from the "
					"interposed cudaMemGetInfo\n");
			real = cudaMemGetInfo;
		}
	}
	if (real(&f, &t) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return t - f;
}

/* ---- cudaMallocAsync's default pool ------------------------------------------------------ */

static inline cudaMemPool_t bench_async_pool(void)
{
	cudaMemPool_t pool = NULL;
	int dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return pool;
}

/* Keep memory freed by cudaFreeAsync in the pool across synchronizations: a warm pool. */
static inline int bench_async_warm(void)
{
	cudaMemPool_t pool = bench_async_pool();
	uint64_t keep = UINT64_MAX;

	if (pool == NULL || cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return 0;
}

/* Give the pool's idle memory back and restart its high-water mark (between configurations). */
static inline void bench_async_trim(void)
{
	cudaMemPool_t pool = bench_async_pool();
	uint64_t zero = 0;

	cudaDeviceSynchronize();
	if (pool != NULL) {
		cudaMemPoolTrimTo(pool, 0);
		cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
	}
	cudaGetLastError();
}

/* Highest physical memory the pool held since the last trim (bytes); 0 if unknown. */
static inline size_t bench_async_reserved_high(void)
{
	cudaMemPool_t pool = bench_async_pool();
	uint64_t v = 0;

	if (pool == NULL || cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v) != cudaSuccess)
		cudaGetLastError();
	return (size_t)v;
}

/* ---- peak device memory without timing the measurement ------------------------------------ */

/* Device memory only grows inside a real allocation, so the peak is read right after any
 * allocation that made one: known from the counting library when every real allocation is a
 * cudaMalloc it sees (native); for the pool (`every`) after every allocation, as it also
 * allocates through the driver (cuMemAlloc in a current context, cuMemCreate with GPUPOOL_VMM),
 * which the counting library does not see: gating on its count under-read the pool's peaks.
 * The time spent reading is accounted so it can be left out of the timing. */
static inline int bench_peak_every_alloc(enum bench_contender c)
{
	return c == B_POOL || c == B_POOL_FENCED;
}

struct bench_peak {
	bench_count_fn count;
	int every;        /* read after every allocation */
	uint64_t last;    /* counter value at the last reading */
	size_t peak;      /* bytes, device-wide */
	uint64_t meas_ns; /* time spent reading */
};

static inline void bench_peak_start(struct bench_peak *m, enum bench_contender c)
{
	m->count = bench_counter();
	m->every = bench_peak_every_alloc(c);
	m->last = m->count ? m->count() : 0;
	m->peak = bench_device_used();
	m->meas_ns = 0;
}

static inline void bench_peak_note(struct bench_peak *m)
{
	uint64_t t0, c = 0;
	size_t u;

	if (m->count) {
		c = m->count();
		if (c == m->last && !m->every)
			return;
	}
	t0 = bench_now_ns();
	u = bench_device_used();
	if (u > m->peak)
		m->peak = u;
	m->last = c;
	m->meas_ns += bench_now_ns() - t0;
}

static inline double bench_mib(size_t bytes)
{
	return (double)bytes / (double)BENCH_MIB;
}

#endif
