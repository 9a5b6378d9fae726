/* freeasync.c — proves that a stream-ordered free of a block the pool handed out is a pool free,
 * exactly as cudaFree / cuMemFree of it, at either door: cudaFreeAsync and cudaFreeAsync_ptsz
 * (runtime), cuMemFreeAsync and cuMemFreeAsync_ptsz (driver, as dlsym on the driver hands them
 * out). The block comes back to the pool (no real free; the next allocation of its size gets it);
 * a second free of it returns invalid value and loses nothing; a pointer the pool does not own
 * (from cudaMallocAsync / cuMemAllocAsync) reaches the real function, once; during a capture the
 * block is held for the graph (a release keeps it until the graph is destroyed); and the _ptsz
 * flavour marks the per-thread default stream used: reuse, immediate before, asks the streams
 * after it. Usage: e2e_freeasync runtime|driver */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "e2e.h"

#define BYTES E2E_MIB
#define PAIRS 20

static int driver_door;
static cudaError_t (*rt_free_async_ptsz)(void *, cudaStream_t);
static CUresult (*cu_free_async)(CUdeviceptr, CUstream);
static CUresult (*cu_free_async_ptsz)(CUdeviceptr, CUstream);
static CUresult (*cu_alloc_async)(CUdeviceptr *, size_t, CUstream);

static void *find(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (p == NULL)
		e2e_fail("dlsym(%s) failed", name);
	return p;
}

static int from_gpupool(void *p)
{
	Dl_info info;

	return dladdr(p, &info) != 0 && info.dli_fname != NULL &&
	       strstr(info.dli_fname, "libgpupool") != NULL;
}

/* The door's free on stream s: 0 for success, 1 for invalid value, 2 for anything else. */
static int free_async(void *p, cudaStream_t s, int ptsz)
{
	int rc;

	if (driver_door) {
		CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
		CUresult r = ptsz ? cu_free_async_ptsz(d, s) : cu_free_async(d, s);
		rc = r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_INVALID_VALUE ? 1 : 2;
	} else {
		cudaError_t r = ptsz ? rt_free_async_ptsz(p, s) : cudaFreeAsync(p, s);
		rc = r == cudaSuccess ? 0 : r == cudaErrorInvalidValue ? 1 : 2;
		cudaGetLastError();
	}
	return rc;
}

/* A pointer the pool does not own: stream-ordered memory of the driver's own pool. */
static void *alloc_async(void)
{
	CUdeviceptr d = 0;
	void *p = NULL;

	if (driver_door) {
		if (cu_alloc_async(&d, BYTES, NULL) != CUDA_SUCCESS)
			e2e_fail("cuMemAllocAsync failed");
		return (void *)(uintptr_t)d;
	}
	e2e_cuda(cudaMallocAsync(&p, BYTES, NULL), "cudaMallocAsync");
	return p;
}

static void find_doors(void)
{
	void *h, *p;

	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)"); /* the runtime loads the driver */
	if (!driver_door) {
		p = dlsym(RTLD_DEFAULT, "cudaFreeAsync_ptsz");
		if (p == NULL || !from_gpupool(p))
			e2e_fail("cudaFreeAsync_ptsz is not gpupool's");
		memcpy(&rt_free_async_ptsz, &p, sizeof(p));
		return;
	}
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		e2e_fail("the runtime has not loaded libcuda.so.1");
	p = find(h, "cuMemFreeAsync");
	e2e_check(from_gpupool(p), "dlsym on the driver hands out gpupool's cuMemFreeAsync");
	memcpy(&cu_free_async, &p, sizeof(p));
	p = find(h, "cuMemFreeAsync_ptsz");
	e2e_check(from_gpupool(p), "dlsym on the driver hands out gpupool's cuMemFreeAsync_ptsz");
	memcpy(&cu_free_async_ptsz, &p, sizeof(p));
	p = find(h, "cuMemAllocAsync");
	memcpy(&cu_alloc_async, &p, sizeof(p));
}

/* Event records and stream queries after PAIRS allocations and frees of BYTES: none while all
 * work is in one stream order (a freed block is reused at once). */
static uint64_t fence_calls(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	void *p;

	for (int i = 0; i < PAIRS; i++) {
		e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	c = e2e_counters();
	return c.event_records + c.stream_queries - c0.event_records - c0.stream_queries;
}

int main(int argc, char **argv)
{
	const char *door = argc > 1 ? argv[1] : "";
	struct standin_counters c0, c;
	e2e_release_fn release;
	cudaStream_t s;
	cudaGraph_t g = NULL;
	void *a, *b, *q;
	uint64_t per_block, calls;

	driver_door = strcmp(door, "driver") == 0;
	if (!driver_door && strcmp(door, "runtime") != 0)
		e2e_fail("usage: e2e_freeasync runtime|driver");
	e2e_start(driver_door ? "e2e_freeasync_driver" : "e2e_freeasync_runtime");
	find_doors();
	release = e2e_shim_release();

	/* A pooled block comes back to the pool and out again, with no real call. */
	e2e_cuda(cudaMalloc(&a, BYTES), "cudaMalloc");
	c0 = e2e_counters();
	e2e_check(free_async(a, NULL, 0) == 0,
		  "the stream-ordered free of a pooled block succeeds");
	e2e_cuda(cudaMalloc(&b, BYTES), "cudaMalloc");
	c = e2e_counters();
	e2e_check(b == a && c.mallocs == c0.mallocs && c.frees == c0.frees &&
			  c.async_frees == c0.async_frees,
		  "the block came back to the pool (reused: %s; real allocations %llu, frees %llu, "
		  "stream-ordered frees %llu)", b == a ? "yes" : "no",
		  (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)(c.frees - c0.frees),
		  (unsigned long long)(c.async_frees - c0.async_frees));

	/* A second free of it: invalid value, and the pool loses nothing. */
	e2e_check(free_async(b, NULL, 0) == 0 && free_async(b, NULL, 0) == 1,
		  "a second stream-ordered free of the block returns invalid value");
	e2e_cuda(cudaMalloc(&a, BYTES), "cudaMalloc");
	c = e2e_counters();
	e2e_check(a == b && c.bad_frees == 0 && c.mallocs == c0.mallocs,
		  "the pool is intact: the block is handed out again, no bad free reached the "
		  "driver");
	e2e_cuda(cudaFree(a), "cudaFree");

	/* A pointer the pool does not own reaches the real function, once. */
	q = alloc_async();
	c0 = e2e_counters();
	e2e_check(free_async(q, NULL, 0) == 0,
		  "the stream-ordered free of another pointer succeeds");
	c = e2e_counters();
	e2e_check(c.async_frees == c0.async_frees + 1 && c.bad_frees == 0,
		  "it reached the real stream-ordered free once (%llu)",
		  (unsigned long long)(c.async_frees - c0.async_frees));

	/* The _ptsz flavour: a pool free, and the per-thread default stream in use from now on. */
	calls = fence_calls();
	e2e_check(calls == 0, "in one stream order, reuse asks no stream (%llu calls)",
		  (unsigned long long)calls);
	e2e_cuda(cudaMalloc(&a, BYTES), "cudaMalloc");
	c0 = e2e_counters();
	e2e_check(free_async(a, NULL, 1) == 0, "the _ptsz free of a pooled block succeeds");
	c = e2e_counters();
	e2e_check(c.frees == c0.frees && c.async_frees == c0.async_frees,
		  "the _ptsz free reached no real free");
	calls = fence_calls();
	e2e_check(calls > 0, "after it, reuse asks the streams (%llu calls): the per-thread "
		  "default stream is in use", (unsigned long long)calls);

	/* During a capture the block is held for the graph. */
	release(0, NULL);
	if (!e2e_wait_live(0, 0, 5000))
		e2e_fail("the release left blocks live");
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&a, BYTES), "cudaMalloc");
	per_block = e2e_counters().live_bytes;
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_check(free_async(a, s, 0) == 0, "the stream-ordered free during a capture succeeds");
	e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
	release(0, NULL);
	e2e_check(e2e_wait_live(1, per_block, 5000), "a release keeps the block the graph holds");
	e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	release(0, NULL);
	e2e_check(e2e_wait_live(0, 0, 5000), "with the graph destroyed, a release gives it back");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	printf("PASS %s\n", driver_door ? "e2e_freeasync_driver" : "e2e_freeasync_runtime");
	return 0;
}
