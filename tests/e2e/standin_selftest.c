/* standin_selftest.c — proves the stand-in behaves as the e2e tests assume (run natively, with
 * STANDIN_DEVICES=2): the driver's accounting, out-of-memory and the last error, frees,
 * cudaMallocAsync, per-device events, events that complete only when told, the stream-capture
 * rules, the injected faults (every n-th call fails; unloading); and the driver as the runtime
 * and any other library reach it: cuGetProcAddress (base names, versions, per-thread flavours,
 * unknown names, itself), the context rules, and that a program calling the driver directly
 * and the runtime are counted alike; and VMM (cuMemCreate, cuMemAddressReserve, cuMemMap...):
 * accounting, strict checks, copies across mappings, what the pointer queries answer, and
 * physical memory that keeps its bytes when mapped at a new address; and the streams' work, with
 * kernels held at a gate: launches return at once and the work runs later in stream order
 * (queries, events, the launch delay, the counters), cudaFree, cudaDeviceSynchronize, a
 * synchronous copy and cudaDeviceReset wait for it, the legacy stream's order with blocking,
 * non-blocking and per-thread streams, cudaStreamDestroy with work queued, cudaStreamWaitEvent,
 * captured work not run, manual events over the work, a forked child without its parent's work,
 * an exit while a kernel runs. If this fails, the e2e results say nothing about the shim. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e.h"

static void expect_rc(cudaError_t got, cudaError_t want, const char *what)
{
	e2e_check(got == want, "%s -> %s (want %s)", what, cudaGetErrorName(got), cudaGetErrorName(want));
}

static void accounting(void)
{
	struct standin_counters c;
	size_t free_b = 0, total_b = 0;
	void *a = NULL, *b = NULL, *d = NULL;

	e2e_cuda(cudaMalloc(&a, 1), "cudaMalloc(1)");
	e2e_cuda(cudaMalloc(&b, E2E_MIB), "cudaMalloc(1 MiB)");
	e2e_cuda(cudaMalloc(&d, E2E_MIB + 1), "cudaMalloc(1 MiB + 1)");
	c = e2e_counters();
	e2e_check(c.live_bytes == 512 + E2E_MIB + 2 * E2E_MIB && c.live_allocs == 3 && c.mallocs == 3,
		  "1 B costs 512 B, 1 MiB costs 1 MiB, 1 MiB + 1 costs 2 MiB (live %llu B)",
		  (unsigned long long)c.live_bytes);
	e2e_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	e2e_check(total_b == 1024 * E2E_MIB && free_b == total_b - c.live_bytes,
		  "cudaMemGetInfo: total 1 GiB, free = total - used");
	e2e_check(standin_owns(d) && !standin_owns((char *)d + 1) && standin_size(d) == E2E_MIB + 1,
		  "standin_owns / standin_size see the live allocation");
	memset(d, 0x5a, E2E_MIB + 1); /* "device memory" is host memory */
	e2e_cuda(cudaFree(a), "cudaFree");
	e2e_cuda(cudaFree(b), "cudaFree");
	e2e_cuda(cudaFree(d), "cudaFree");
	c = e2e_counters();
	e2e_check(c.live_bytes == 0 && c.frees == 3, "frees return the bytes");
	expect_rc(cudaFree(NULL), cudaSuccess, "cudaFree(NULL)");
	expect_rc(cudaFree(d), cudaErrorInvalidValue, "a double free");
	expect_rc(cudaFree(&free_b), cudaErrorInvalidValue, "cudaFree(host pointer)");
	e2e_check(e2e_counters().bad_frees == 2, "bad frees are counted");
	(void)cudaGetLastError();
}

static void out_of_memory(void)
{
	void *a = NULL, *b = NULL;
	uint64_t failed = e2e_counters().failed_mallocs;

	standin_set_capacity(0, 8 * E2E_MIB);
	e2e_cuda(cudaMalloc(&a, 6 * E2E_MIB), "cudaMalloc(6 MiB) of 8");
	expect_rc(cudaMalloc(&b, 3 * E2E_MIB), cudaErrorMemoryAllocation, "cudaMalloc(3 MiB) with 2 MiB free");
	expect_rc(cudaPeekAtLastError(), cudaErrorMemoryAllocation, "cudaPeekAtLastError");
	expect_rc(cudaGetLastError(), cudaErrorMemoryAllocation, "cudaGetLastError");
	expect_rc(cudaGetLastError(), cudaSuccess, "cudaGetLastError again (cleared)");
	e2e_check(e2e_counters().failed_mallocs == failed + 1, "the failure is counted");
	e2e_cuda(cudaFree(a), "cudaFree");
	standin_set_capacity(0, 1024 * E2E_MIB);
}

static void async_memory(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	void *a = NULL, *b = NULL;

	e2e_cuda(cudaMallocAsync(&a, E2E_MIB, 0), "cudaMallocAsync");
	e2e_cuda(cudaMallocAsync(&b, E2E_MIB, 0), "cudaMallocAsync");
	e2e_cuda(cudaFreeAsync(a, 0), "cudaFreeAsync");
	e2e_cuda(cudaFree(b), "cudaFree(async pointer)");
	c = e2e_counters();
	e2e_check(c.async_mallocs == c0.async_mallocs + 2 && c.async_frees == c0.async_frees + 1 &&
		  c.frees == c0.frees + 1 && c.mallocs == c0.mallocs && c.live_bytes == 0,
		  "cudaMallocAsync/cudaFreeAsync have their own counters; cudaFree of an async pointer is a free");
}

static void events(void)
{
	cudaStream_t s = NULL;
	cudaEvent_t e = NULL, e2 = NULL;
	void *p = NULL;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
	e2e_cuda(cudaEventCreate(&e2), "cudaEventCreate");
	expect_rc(cudaEventQuery(e), cudaSuccess, "an event never recorded");
	e2e_cuda(cudaEventRecord(e, cudaStreamLegacy), "cudaEventRecord(legacy)");
	expect_rc(cudaEventQuery(e), cudaSuccess, "by default an event completes when recorded");

	standin_set_manual_events(1);
	e2e_cuda(cudaEventRecord(e, 0), "cudaEventRecord(0)");
	expect_rc(cudaEventQuery(e), cudaErrorNotReady, "manual events: recorded, not complete");
	expect_rc(cudaGetLastError(), cudaSuccess, "cudaErrorNotReady is not an error");
	standin_complete_events();
	expect_rc(cudaEventQuery(e), cudaSuccess, "after standin_complete_events");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord(stream)");
	e2e_cuda(cudaEventRecord(e2, cudaStreamPerThread), "cudaEventRecord(per-thread)");
	expect_rc(cudaStreamQuery(s), cudaErrorNotReady, "cudaStreamQuery with work pending");
	e2e_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	expect_rc(cudaEventQuery(e), cudaSuccess, "cudaStreamSynchronize completes the stream's events");
	expect_rc(cudaEventQuery(e2), cudaErrorNotReady, "but not another stream's");
	e2e_cuda(cudaEventSynchronize(e2), "cudaEventSynchronize");
	expect_rc(cudaEventQuery(e2), cudaSuccess, "cudaEventSynchronize completes the event");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	expect_rc(cudaEventQuery(e), cudaSuccess, "cudaDeviceSynchronize completes events");
	e2e_cuda(cudaMalloc(&p, 512), "cudaMalloc");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord");
	e2e_cuda(cudaFree(p), "cudaFree");
	expect_rc(cudaEventQuery(e), cudaSuccess, "cudaFree synchronizes: it completes events");
	standin_set_manual_events(0);
	e2e_cuda(cudaEventDestroy(e), "cudaEventDestroy");
	e2e_cuda(cudaEventDestroy(e2), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	expect_rc(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle, "a destroyed stream is invalid");
}

static void devices(void)
{
	struct standin_counters c1;
	cudaStream_t s1 = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	cudaMemPool_t pool = NULL;
	size_t free_b = 0, total_b = 0;
	void *p = NULL;
	int n = 0, d = -1;

	e2e_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	if (n != 2)
		e2e_fail("run me with STANDIN_DEVICES=2 (got %d devices)", n);
	expect_rc(cudaSetDevice(2), cudaErrorInvalidDevice, "cudaSetDevice(2) of 2");
	(void)cudaGetLastError();
	e2e_cuda(cudaEventCreate(&e0), "cudaEventCreate on device 0");
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaGetDevice(&d), "cudaGetDevice");
	e2e_check(d == 1, "the current device is 1");
	e2e_cuda(cudaStreamCreate(&s1), "cudaStreamCreate on device 1");
	expect_rc(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle,
		  "recording a device-0 event on a device-1 stream");
	expect_rc(cudaEventRecord(e0, 0), cudaErrorInvalidResourceHandle,
		  "recording a device-0 event on device 1's default stream");
	(void)cudaGetLastError();
	e2e_cuda(cudaMalloc(&p, 4 * E2E_MIB), "cudaMalloc on device 1");
	standin_get(1, &c1);
	e2e_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo on device 1");
	e2e_check(c1.live_bytes == 4 * E2E_MIB && e2e_counters().live_bytes == 0 &&
		  free_b == total_b - 4 * E2E_MIB, "each device has its own memory and counters");
	e2e_cuda(cudaDeviceGetDefaultMemPool(&pool, 1), "cudaDeviceGetDefaultMemPool");
	e2e_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
	standin_get(1, &c1);
	e2e_check(c1.pool_trims == 1, "cudaMemPoolTrimTo is counted on its device");
	e2e_cuda(cudaEventCreate(&e1), "cudaEventCreate on device 1");
	e2e_cuda(cudaDeviceReset(), "cudaDeviceReset");
	standin_get(1, &c1);
	e2e_check(c1.live_bytes == 0 && !standin_owns(p), "cudaDeviceReset frees the device's memory");
	expect_rc(cudaStreamDestroy(s1), cudaErrorInvalidResourceHandle,
		  "and destroys its streams");
	expect_rc(cudaEventRecord(e1, 0), cudaErrorInvalidResourceHandle, "and its events");
	(void)cudaGetLastError();
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	e2e_cuda(cudaEventRecord(e0, 0), "but not another device's events");
	e2e_cuda(cudaEventDestroy(e0), "cudaEventDestroy");
}

static cudaEvent_t other_event;
static enum cudaStreamCaptureMode other_mode;
static cudaError_t other_rc;

static void *other_thread(void *arg)
{
	enum cudaStreamCaptureMode m = other_mode;

	(void)arg;
	cudaThreadExchangeStreamCaptureMode(&m);
	other_rc = cudaEventQuery(other_event);
	return NULL;
}

static cudaError_t query_from_other_thread(enum cudaStreamCaptureMode mode)
{
	pthread_t t;

	other_mode = mode;
	pthread_create(&t, NULL, other_thread, NULL);
	pthread_join(t, NULL);
	return other_rc;
}

static void capture(void)
{
	enum cudaStreamCaptureMode mode;
	enum cudaStreamCaptureStatus status;
	cudaStream_t s = NULL;
	cudaGraph_t g = NULL;
	void *p = NULL;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaEventCreate(&other_event), "cudaEventCreate");

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_cuda(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
	e2e_check(status == cudaStreamCaptureStatusActive, "the stream is capturing");
	expect_rc(cudaStreamIsCapturing(cudaStreamLegacy, &status), cudaErrorStreamCaptureImplicit,
		  "asking the legacy stream while a blocking stream captures");
	expect_rc(cudaMalloc(&p, 512), cudaErrorStreamCaptureUnsupported,
		  "cudaMalloc in global mode on the capturing thread");
	expect_rc(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated,
		  "cudaStreamEndCapture after an illegal call");

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	mode = cudaStreamCaptureModeRelaxed;
	e2e_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
	e2e_cuda(cudaMalloc(&p, 512), "cudaMalloc in relaxed mode during capture");
	e2e_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode back");
	e2e_check(mode == cudaStreamCaptureModeRelaxed, "the exchange returns the previous mode");
	e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
	e2e_check(g != NULL, "a graph handle comes back");
	e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	e2e_cuda(cudaFree(p), "cudaFree");

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	expect_rc(query_from_other_thread(cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported,
		  "cudaEventQuery from another thread (global mode) during a global capture");
	expect_rc(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated,
		  "which invalidates the capture");

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	expect_rc(query_from_other_thread(cudaStreamCaptureModeThreadLocal), cudaSuccess,
		  "cudaEventQuery from another thread in thread-local mode");
	expect_rc(cudaEventRecord(other_event, cudaStreamLegacy), cudaErrorStreamCaptureImplicit,
		  "cudaEventRecord on the legacy stream during the capture");
	expect_rc(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated,
		  "which invalidates the capture");

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_cuda(cudaMallocAsync(&p, 512, s), "cudaMallocAsync on the capturing stream");
	e2e_cuda(cudaFreeAsync(p, s), "cudaFreeAsync on the capturing stream");
	e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
	e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	(void)cudaGetLastError();

	e2e_cuda(cudaEventDestroy(other_event), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

static void faults(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	cudaEvent_t e = NULL;
	void *p[6] = { 0 };
	int i, d = -1, failed = 0;

	standin_set_fault(STANDIN_FAULT_MALLOC, 3, 0);
	for (i = 0; i < 6; i++)
		failed += cudaMalloc(&p[i], 4096) == cudaErrorMemoryAllocation;
	expect_rc(cudaGetLastError(), cudaErrorMemoryAllocation, "an injected cudaMalloc failure sets the last error");
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	c = e2e_counters();
	e2e_check(failed == 2 && p[2] == NULL && p[5] == NULL && standin_faults(STANDIN_FAULT_MALLOC) == 2 &&
		  c.mallocs == c0.mallocs + 4 && c.failed_mallocs == c0.failed_mallocs + 2,
		  "every 3rd cudaMalloc fails (calls 3 and 6 of 6), counted as failed");

	standin_set_fault(STANDIN_FAULT_FREE, 2, 0);
	expect_rc(cudaFree(p[0]), cudaSuccess, "free 1 of every 2");
	expect_rc(cudaFree(p[1]), cudaErrorLaunchFailure, "free 2: the injected error");
	e2e_check(!standin_owns(p[1]), "by default the failed free freed the allocation all the same");
	(void)cudaGetLastError();
	standin_set_free_keeps(1);
	expect_rc(cudaFree(p[3]), cudaSuccess, "free 3");
	expect_rc(cudaFree(p[4]), cudaErrorLaunchFailure, "free 4: the injected error");
	e2e_check(standin_owns(p[4]), "with STANDIN_FAIL_FREE_KEEPS the allocation stays live");
	standin_set_free_keeps(0);
	standin_set_fault(STANDIN_FAULT_FREE, 0, 0);
	e2e_cuda(cudaFree(p[4]), "cudaFree once the fault is off");
	(void)cudaGetLastError();

	e2e_cuda(cudaEventCreate(&e), "cudaEventCreate");
	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 1, cudaErrorInvalidResourceHandle);
	expect_rc(cudaEventRecord(e, 0), cudaErrorInvalidResourceHandle, "cudaEventRecord with its fault, error as given");
	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 0, 0);
	standin_set_fault(STANDIN_FAULT_EVENT_QUERY, 1, 0);
	expect_rc(cudaEventQuery(e), cudaErrorUnknown, "cudaEventQuery with its fault");
	standin_set_fault(STANDIN_FAULT_EVENT_QUERY, 0, 0);
	expect_rc(cudaEventQuery(e), cudaSuccess, "cudaEventQuery once the fault is off");
	e2e_cuda(cudaEventDestroy(e), "cudaEventDestroy");

	standin_set_fault(STANDIN_FAULT_GETDEVICE, 1, 0);
	expect_rc(cudaGetDevice(&d), cudaErrorUnknown, "cudaGetDevice with its fault");
	e2e_check(d == -1, "a failed cudaGetDevice leaves *device alone");
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 0, 0);
	(void)cudaGetLastError();

	e2e_cuda(cudaMalloc(&p[0], 4096), "cudaMalloc");
	standin_set_unloading(1);
	expect_rc(cudaMalloc(&p[1], 4096), cudaErrorCudartUnloading, "unloading: cudaMalloc");
	expect_rc(cudaFree(p[0]), cudaErrorCudartUnloading, "unloading: cudaFree");
	expect_rc(cudaGetDevice(&d), cudaErrorCudartUnloading, "unloading: cudaGetDevice");
	expect_rc(cudaGetLastError(), cudaErrorCudartUnloading, "unloading: cudaGetLastError");
	standin_set_unloading(0);
	e2e_check(standin_owns(p[0]), "unloading did nothing to the allocation");
	e2e_cuda(cudaFree(p[0]), "cudaFree");
	(void)cudaGetLastError();
	c = e2e_counters();
	e2e_check(c.live_allocs == c0.live_allocs && c.live_bytes == c0.live_bytes, "nothing left behind");
}

/* ---- the driver, as a library that preloads itself would reach it ---- */

typedef CUresult (*get_proc_v2)(const char *, void **, int, cuuint64_t,
				CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1)(const char *, void **, int, cuuint64_t);

static void *driver;      /* the libcuda.so.1 the runtime loaded */
static get_proc_v2 get_proc;

static void *driver_sym(const char *name)
{
	void *p = dlsym(driver, name);

	if (p == NULL)
		e2e_fail("the stand-in driver does not export %s", name);
	return p;
}

/* What cuGetProcAddress_v2 gives for (name, version, flags); *status its status. */
static void *proc(const char *name, int version, cuuint64_t flags, CUresult *rc,
		  CUdriverProcAddressQueryResult *status)
{
	void *fn = (void *)&fn; /* not NULL: a miss must clear it */

	*rc = get_proc(name, &fn, version, flags, status);
	return fn;
}

/* name at version with flags resolves to the exported symbol `want`. */
static void expect_proc(const char *name, int version, cuuint64_t flags, const char *want)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult rc;
	void *fn = proc(name, version, flags, &rc, &status);

	e2e_check(rc == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn == driver_sym(want),
		  "cuGetProcAddress(\"%s\", %d, flags %llu) -> %s", name, version,
		  (unsigned long long)flags, want);
}

static void expect_no_proc(const char *name, int version, CUdriverProcAddressQueryResult want,
			   const char *what)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult rc;
	void *fn = proc(name, version, CU_GET_PROC_ADDRESS_DEFAULT, &rc, &status);

	e2e_check(rc == CUDA_ERROR_NOT_FOUND && fn == NULL && status == want,
		  "cuGetProcAddress(\"%s\", %d): CUDA_ERROR_NOT_FOUND, NULL, status %d (%s)", name,
		  version, (int)status, what);
}

/* Every entry point the stand-in documents resolves by its base name. */
static const char *const base_names[] = {
	"cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceTotalMem",
	"cuGetProcAddress", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice",
	"cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxSynchronize", "cuDevicePrimaryCtxRetain",
	"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxGetState",
	"cuMemAlloc", "cuMemFree", "cuMemGetInfo", "cuMemAllocAsync", "cuMemFreeAsync",
	"cuMemsetD8", "cuMemsetD8Async", "cuMemcpy", "cuMemcpyAsync", "cuMemGetAddressRange",
	"cuPointerGetAttribute", "cuMemPoolTrimTo", "cuDeviceGetDefaultMemPool",
	"cuMemPoolGetAttribute", "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy",
	"cuStreamQuery", "cuStreamSynchronize", "cuStreamWaitEvent", "cuStreamBeginCapture",
	"cuStreamBeginCaptureToGraph", "cuStreamEndCapture", "cuStreamIsCapturing",
	"cuThreadExchangeStreamCaptureMode", "cuEventCreate", "cuEventDestroy", "cuEventRecord",
	"cuEventQuery", "cuEventSynchronize", "cuGraphCreate", "cuGraphDestroy",
	"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphExecDestroy",
	"cuGraphClone", "cuGraphAddChildGraphNode", "cuGraphExecChildGraphNodeSetParams",
	"cuGraphExecUpdate", "cuGraphLaunch", "cuLaunchKernel", "cuLaunchHostFunc",
	"cuPointerGetAttributes",
	"cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemAddressReserve",
	"cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemGetAccess",
};

static void get_proc_address(void)
{
	const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	CUdriverProcAddressQueryResult status;
	get_proc_v1 v1;
	CUresult rc;
	void *fn, *sym;
	size_t i, n = 0;

	e2e_cuda(cudaFree(NULL), "cudaFree(NULL): the runtime loads its driver");
	driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (driver == NULL)
		e2e_fail("the runtime did not load libcuda.so.1");
	sym = driver_sym("cuGetProcAddress_v2");
	memcpy(&get_proc, &sym, sizeof(sym));

	expect_proc("cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2");
	expect_proc("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
	expect_proc("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
	expect_no_proc("cuGetProcAddress", 11020, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
		       "before CUDA 11.3");
	expect_proc("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
	expect_proc("cuMemAlloc", 3020, pt, "cuMemAlloc_v2");
	expect_no_proc("cuMemAlloc", 3000, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
		       "older than its first variant here");
	expect_no_proc("cuNoSuchEntryPoint", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown");
	expect_no_proc("cuMemAlloc_v2", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
		       "a versioned name is no base name");
	expect_proc("cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2");
	expect_proc("cuStreamBeginCapture", 13000, pt, "cuStreamBeginCapture_v2_ptsz");
	expect_proc("cuStreamBeginCapture", 13000, pt | legacy, "cuStreamBeginCapture_v2");
	expect_proc("cuLaunchKernel", 13000, pt, "cuLaunchKernel_ptsz");
	expect_proc("cuLaunchKernel", 13000, legacy, "cuLaunchKernel");
	expect_proc("cuLaunchHostFunc", 13000, pt, "cuLaunchHostFunc_ptsz");
	expect_proc("cuMemsetD8", 13000, pt, "cuMemsetD8_v2_ptds");
	expect_proc("cuMemcpy", 13000, pt, "cuMemcpy_ptds");
	expect_proc("cuStreamQuery", 13000, pt, "cuStreamQuery_ptsz");
	expect_proc("cuStreamQuery", 6050, pt, "cuStreamQuery");
	expect_proc("cuCtxGetDevice", 12090, 0, "cuCtxGetDevice");
	expect_proc("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2");
	expect_proc("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
	expect_proc("cuGraphExecUpdate", 13000, 0, "cuGraphExecUpdate_v2");

	fn = proc("cuMemFree", 13000, 0, &rc, NULL);
	e2e_check(rc == CUDA_SUCCESS && fn == driver_sym("cuMemFree_v2"), "the status may be NULL");
	e2e_check(get_proc(NULL, &fn, 13000, 0, &status) == CUDA_ERROR_INVALID_VALUE &&
			  get_proc("cuInit", NULL, 13000, 0, &status) == CUDA_ERROR_INVALID_VALUE,
		  "no name or no pfn: CUDA_ERROR_INVALID_VALUE");
	sym = driver_sym("cuGetProcAddress");
	memcpy(&v1, &sym, sizeof(sym));
	fn = NULL;
	e2e_check(v1("cuStreamSynchronize", &fn, 13000, pt) == CUDA_SUCCESS &&
			  fn == driver_sym("cuStreamSynchronize_ptsz"),
		  "cuGetProcAddress (v1) resolves the same way");
	for (i = 0; i < sizeof(base_names) / sizeof(base_names[0]); i++) {
		fn = proc(base_names[i], 13000, 0, &rc, &status);
		if (rc == CUDA_SUCCESS && fn != NULL)
			n++;
		else
			e2e_note("%s does not resolve by its base name", base_names[i]);
	}
	e2e_check(n == sizeof(base_names) / sizeof(base_names[0]),
		  "all %zu documented entry points resolve by base name", n);
}

/* A driver function, resolved as the runtime does. */
static void *resolve(const char *name, cuuint64_t flags)
{
	CUdriverProcAddressQueryResult status;
	CUresult rc;
	void *fn = proc(name, 13000, flags, &rc, &status);

	if (rc != CUDA_SUCCESS)
		e2e_fail("cuGetProcAddress(\"%s\") failed (%d)", name, (int)rc);
	return fn;
}

static struct {
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_device)(CUdevice *, CUcontext);
	CUresult (*ctx_push)(CUcontext);
	CUresult (*ctx_pop)(CUcontext *);
	CUresult (*ctx_sync)(CUcontext);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*release)(CUdevice);
	CUresult (*get_state)(CUdevice, unsigned *, int *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_query)(CUstream);
	CUresult (*event_create)(CUevent *, unsigned);
	CUresult (*launch_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				unsigned, unsigned, CUstream, void **, void **);
	CUresult (*pointer_attribute)(void *, CUpointer_attribute, CUdeviceptr);
} cu;

static void get(void *slot, const char *name, cuuint64_t flags)
{
	void *p = resolve(name, flags);

	memcpy(slot, &p, sizeof(p)); /* an object pointer to a function pointer: by its bytes */
}

static void resolve_driver(void)
{
	get(&cu.ctx_get_current, "cuCtxGetCurrent", 0);
	get(&cu.ctx_set_current, "cuCtxSetCurrent", 0);
	get(&cu.ctx_get_device, "cuCtxGetDevice", 0);
	get(&cu.ctx_push, "cuCtxPushCurrent", 0);
	get(&cu.ctx_pop, "cuCtxPopCurrent", 0);
	get(&cu.ctx_sync, "cuCtxSynchronize", 0);
	get(&cu.retain, "cuDevicePrimaryCtxRetain", 0);
	get(&cu.release, "cuDevicePrimaryCtxRelease", 0);
	get(&cu.get_state, "cuDevicePrimaryCtxGetState", 0);
	get(&cu.mem_alloc, "cuMemAlloc", 0);
	get(&cu.mem_free, "cuMemFree", 0);
	get(&cu.stream_create, "cuStreamCreate", 0);
	get(&cu.stream_query, "cuStreamQuery", 0);
	get(&cu.event_create, "cuEventCreate", 0);
	get(&cu.launch_ptsz, "cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	get(&cu.pointer_attribute, "cuPointerGetAttribute", 0);
}

static CUcontext current_ctx(void)
{
	CUcontext c = NULL;

	if (cu.ctx_get_current(&c) != CUDA_SUCCESS)
		e2e_fail("cuCtxGetCurrent failed");
	return c;
}

/* A thread on which the runtime did no work: no context, and the driver says so. */
static void *no_context_thread(void *arg)
{
	CUdeviceptr d = 0;
	CUstream s = NULL;
	CUevent e = NULL;
	int dev = -1;

	(void)arg;
	e2e_check(current_ctx() == NULL, "a new thread has no context current");
	e2e_cuda(cudaGetDevice(&dev), "cudaGetDevice");
	e2e_check(current_ctx() == NULL, "cudaGetDevice makes none current");
	e2e_check(cu.mem_alloc(&d, 4096) == CUDA_ERROR_INVALID_CONTEXT &&
			  cu.stream_create(&s, 0) == CUDA_ERROR_INVALID_CONTEXT &&
			  cu.event_create(&e, 0) == CUDA_ERROR_INVALID_CONTEXT &&
			  cu.stream_query(NULL) == CUDA_ERROR_INVALID_CONTEXT &&
			  cu.ctx_sync(NULL) == CUDA_ERROR_INVALID_CONTEXT,
		  "without one, cuMemAlloc, cuStreamCreate, cuEventCreate, cuStreamQuery(legacy) and "
		  "cuCtxSynchronize fail with CUDA_ERROR_INVALID_CONTEXT");
	e2e_check(cudaPeekAtLastError() == cudaSuccess, "driver calls leave the last error alone");
	return NULL;
}

/* The runtime makes its device's primary context current when it does work. */
static void *runtime_thread(void *arg)
{
	CUcontext *primary = arg;
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, 4096), "cudaMalloc (new thread)");
	e2e_check(current_ctx() == primary[0], "after a cudaMalloc, device 0's primary context is current");
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_check(current_ctx() == primary[1], "after cudaSetDevice(1), device 1's");
	e2e_check(cu.ctx_set_current(NULL) == CUDA_SUCCESS && current_ctx() == NULL,
		  "cuCtxSetCurrent(NULL) leaves none current");
	e2e_cuda(cudaFree(p), "cudaFree (of device 0's memory, device 1 current)");
	e2e_check(current_ctx() == primary[1], "the next runtime call made device 1's current again");
	return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;

	e2e_check(pthread_create(&t, NULL, fn, arg) == 0, "pthread_create");
	pthread_join(t, NULL);
}

static void contexts(void)
{
	CUcontext primary[2] = { NULL, NULL }, again = NULL, popped = NULL;
	CUdevice dev = -1;
	unsigned flags = 1;
	int active = 0;

	resolve_driver();
	run_thread(no_context_thread, NULL);
	e2e_check(cu.retain(&primary[0], 0) == CUDA_SUCCESS && cu.retain(&primary[1], 1) == CUDA_SUCCESS &&
			  cu.retain(&again, 0) == CUDA_SUCCESS,
		  "cuDevicePrimaryCtxRetain");
	e2e_check(primary[0] != NULL && primary[0] != primary[1] && again == primary[0],
		  "one primary context per device, the same handle each time");
	e2e_check(cu.retain(&again, 2) == CUDA_ERROR_INVALID_DEVICE, "device 2 of 2: none");
	e2e_check(cu.get_state(0, &flags, &active) == CUDA_SUCCESS && flags == 0 && active == 1,
		  "a retained primary context is active");
	e2e_check(current_ctx() == primary[0], "the runtime made device 0's current on this thread");
	e2e_check(cu.ctx_push(primary[1]) == CUDA_SUCCESS && current_ctx() == primary[1] &&
			  cu.ctx_get_device(&dev, NULL) == CUDA_SUCCESS && dev == 1,
		  "cuCtxPushCurrent: device 1's is current");
	e2e_check(cu.ctx_pop(&popped) == CUDA_SUCCESS && popped == primary[1] &&
			  current_ctx() == primary[0],
		  "cuCtxPopCurrent gives it back and device 0's is current again");
	e2e_check(cu.ctx_set_current((CUcontext)(void *)&dev) == CUDA_ERROR_INVALID_CONTEXT,
		  "cuCtxSetCurrent of no context: CUDA_ERROR_INVALID_CONTEXT");
	run_thread(runtime_thread, primary);
	e2e_check(cu.release(0) == CUDA_SUCCESS && cu.release(0) == CUDA_SUCCESS &&
			  cu.release(1) == CUDA_SUCCESS,
		  "cuDevicePrimaryCtxRelease of each retain");
}

static void kernel(void **params)
{
	int *x = params[0];

	(*x)++;
}

static void driver_callers(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	CUdeviceptr d = 0;
	CUfunction f;
	void (*host)(void **) = kernel;
	void *p = NULL, *args[1], *fp;
	int x = 41, dev = -1;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc");
	e2e_check(cu.mem_alloc(&d, E2E_MIB) == CUDA_SUCCESS && standin_owns((void *)(uintptr_t)d),
		  "cuMemAlloc through cuGetProcAddress allocates");
	c = e2e_counters();
	e2e_check(c.mallocs == c0.mallocs + 2 && c.live_allocs == c0.live_allocs + 2,
		  "the runtime's cudaMalloc and the direct cuMemAlloc are both driver calls "
		  "(mallocs +%llu)",
		  (unsigned long long)(c.mallocs - c0.mallocs));
	e2e_check(cu.pointer_attribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				       (CUdeviceptr)(uintptr_t)p + 10) == CUDA_SUCCESS && dev == 0,
		  "cuPointerGetAttribute knows a pointer into the runtime's allocation");
	e2e_cuda(cudaFree((void *)(uintptr_t)d), "cudaFree of the driver's allocation");
	e2e_check(cu.mem_free((CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS,
		  "cuMemFree of the runtime's allocation");
	c = e2e_counters();
	e2e_check(c.frees == c0.frees + 2 && c.live_allocs == c0.live_allocs, "both frees counted");

	standin_set_fault(STANDIN_FAULT_MALLOC, 1, 0);
	e2e_check(cu.mem_alloc(&d, 4096) == CUDA_ERROR_OUT_OF_MEMORY,
		  "an injected MALLOC fault fails the direct cuMemAlloc too");
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	e2e_check(cu.mem_free(12345) == CUDA_ERROR_INVALID_VALUE &&
			  cudaPeekAtLastError() == cudaSuccess,
		  "a failed driver call leaves the runtime's last error alone");
	standin_set_unloading(1);
	e2e_check(cu.mem_alloc(&d, 4096) == CUDA_ERROR_DEINITIALIZED,
		  "unloading: the driver fails with CUDA_ERROR_DEINITIALIZED");
	standin_set_unloading(0);

	memcpy(&fp, &host, sizeof(fp)); /* the host function as the kernel: by its bytes */
	args[0] = &x;
	e2e_cuda(cudaLaunchKernel(fp, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, args, 0, NULL),
		  "cudaLaunchKernel");
	memcpy(&f, &fp, sizeof(f));
	e2e_check(cu.launch_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS,
		  "cuLaunchKernel_ptsz");
	expect_rc(cudaLaunchKernel(NULL, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, args, 0, NULL),
		  cudaErrorInvalidValue, "cudaLaunchKernel of no function");
	(void)cudaGetLastError();
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* the kernels run on streams */
	c = e2e_counters();
	e2e_check(x == 43 && c.launches == c0.launches + 2 && c.kernels_run == c0.kernels_run + 2,
		  "both launches ran the host function and are counted (launches +%llu, run +%llu)",
		  (unsigned long long)(c.launches - c0.launches),
		  (unsigned long long)(c.kernels_run - c0.kernels_run));
}

/* ---- virtual memory management ---- */

static struct {
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*address_free)(CUdeviceptr, size_t);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr);
	CUresult (*get_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*memset)(CUdeviceptr, unsigned char, size_t);
	CUresult (*attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
	CUresult (*host_alloc)(void **, size_t, unsigned);
	CUresult (*free_host)(void *);
} vm;

static void resolve_vmm(void)
{
	get(&vm.granularity, "cuMemGetAllocationGranularity", 0);
	get(&vm.create, "cuMemCreate", 0);
	get(&vm.release, "cuMemRelease", 0);
	get(&vm.reserve, "cuMemAddressReserve", 0);
	get(&vm.address_free, "cuMemAddressFree", 0);
	get(&vm.map, "cuMemMap", 0);
	get(&vm.unmap, "cuMemUnmap", 0);
	get(&vm.set_access, "cuMemSetAccess", 0);
	get(&vm.get_access, "cuMemGetAccess", 0);
	get(&vm.get_range, "cuMemGetAddressRange", 0);
	get(&vm.memcpy, "cuMemcpy", 0);
	get(&vm.memset, "cuMemsetD8", 0);
	get(&vm.attrs, "cuPointerGetAttributes", 0);
	get(&vm.host_alloc, "cuMemHostAlloc", 0);
	get(&vm.free_host, "cuMemFreeHost", 0);
}

static void *at(CUdeviceptr d)
{
	return (void *)(uintptr_t)d;
}

static void expect_cu(CUresult got, CUresult want, const char *what)
{
	e2e_check(got == want, "%s -> %d (want %d)", what, (int)got, (int)want);
}

/* A pattern of n bytes that differs with the seed. */
static void fill(unsigned char *buf, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf[i] = (unsigned char)(i * 31u + seed);
}

static void vmm(void)
{
	const size_t M2 = 2 * E2E_MIB, M4 = 4 * E2E_MIB, M6 = 6 * E2E_MIB;
	CUmemAllocationProp prop = { 0 }, bad = { 0 };
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;
	CUdeviceptr base = 0, base2 = 0, rbase = 0;
	CUpointer_attribute which[3] = { CU_POINTER_ATTRIBUTE_RANGE_SIZE,
					  CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
					  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
	struct cudaPointerAttributes pa;
	struct standin_counters c0, c;
	cudaIpcMemHandle_t ipc;
	unsigned long long flags = 0;
	uint64_t rs = 0, rz = 0, hb = 0;
	size_t g = 0, rsize = 0, msize = 0;
	unsigned char *buf = malloc(M2), *back = malloc(M2);
	unsigned mem_type = 0;
	void *data[3];
	int ord = -1;
	uint64_t failed_creates;

	if (buf == NULL || back == NULL)
		e2e_fail("out of host memory");
	resolve_vmm();
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)");
	c0 = e2e_counters();
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	bad = prop;
	bad.location.id = 2;

	e2e_check(vm.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && g == M2 &&
			  vm.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS && g == M2,
		  "cuMemGetAllocationGranularity: 2 MiB, minimum and recommended");
	expect_cu(vm.granularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE,
		  "granularity of device 2 of 2");

	e2e_check(vm.create(&h1, M2, &prop, 0) == CUDA_SUCCESS && vm.create(&h2, M4, &prop, 0) == CUDA_SUCCESS,
		  "cuMemCreate 2 MiB and 4 MiB");
	expect_cu(vm.create(&h3, 3 * E2E_MIB, &prop, 0), CUDA_ERROR_INVALID_VALUE, "cuMemCreate(3 MiB)");
	expect_cu(vm.create(&h3, M2, &bad, 0), CUDA_ERROR_INVALID_VALUE, "cuMemCreate on device 2 of 2");
	c = e2e_counters();
	e2e_check(c.live_bytes == c0.live_bytes + M6 && c.live_allocs == c0.live_allocs + 2 &&
			  c.vmm_creates == c0.vmm_creates + 2 &&
			  c.vmm_failed_creates == c0.vmm_failed_creates + 2 && c.mallocs == c0.mallocs &&
			  standin_vmm_handles(0) == 2 && standin_vmm_handles(1) == 0,
		  "handles are charged as allocations, counted apart (live +%llu B)",
		  (unsigned long long)(c.live_bytes - c0.live_bytes));

	expect_cu(vm.reserve(&rbase, 3 * E2E_MIB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE,
		  "cuMemAddressReserve(3 MiB)");
	e2e_check(vm.reserve(&base, M6, 0, 0, 0) == CUDA_SUCCESS && base % M2 == 0,
		  "cuMemAddressReserve(6 MiB): 2 MiB aligned");
	e2e_check(e2e_counters().live_bytes == c.live_bytes, "a reservation costs nothing");
	e2e_check(!standin_vmm_mapped(at(base), NULL, NULL, NULL), "nothing mapped yet");
	expect_cu(vm.memset(base, 1, 16), CUDA_ERROR_INVALID_VALUE, "cuMemsetD8 on unmapped space");
	expect_cu(vm.map(base + 1 * E2E_MIB, M2, 0, h1, 0), CUDA_ERROR_INVALID_VALUE, "cuMemMap misaligned");
	expect_cu(vm.map(base + M4, M4, 0, h2, 0), CUDA_ERROR_INVALID_VALUE, "cuMemMap past the reservation");
	expect_cu(vm.map(base, M4, 0, h1, 0), CUDA_ERROR_INVALID_VALUE, "cuMemMap more than the handle");
	e2e_check(vm.map(base, M2, 0, h1, 0) == CUDA_SUCCESS && vm.map(base + M2, M4, 0, h2, 0) == CUDA_SUCCESS,
		  "cuMemMap both handles back to back");
	expect_cu(vm.map(base + M2, M2, 0, h1, 0), CUDA_ERROR_INVALID_VALUE, "cuMemMap over a mapping");
	expect_rc(cudaMemcpy(at(base), buf, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
		  "cudaMemcpy before cuMemSetAccess");
	(void)cudaGetLastError();
	expect_cu(vm.set_access(base, E2E_MIB, &rw, 1), CUDA_ERROR_INVALID_VALUE,
		  "cuMemSetAccess on part of a mapping");
	expect_cu(vm.set_access(base, M6, &rw, 1), CUDA_SUCCESS, "cuMemSetAccess over both mappings");
	e2e_check(vm.get_access(&flags, &rw.location, base + M4) == CUDA_SUCCESS &&
			  flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
		  "cuMemGetAccess: read-write");

	fill(buf, M2, 7);
	e2e_cuda(cudaMemcpy(at(base + E2E_MIB), buf, M2, cudaMemcpyHostToDevice),
		 "cudaMemcpy HtoD across the two mappings");
	memset(back, 0, M2);
	e2e_check(vm.memcpy((CUdeviceptr)(uintptr_t)back, base + E2E_MIB, M2) == CUDA_SUCCESS &&
			  memcmp(buf, back, M2) == 0,
		  "cuMemcpy DtoH across the two mappings reads the bytes back");
	e2e_cuda(cudaMemcpy(at(base + M4), at(base), 4096, cudaMemcpyDeviceToDevice), "cudaMemcpy DtoD");
	e2e_check(memcmp(at(base + M4), at(base), 4096) == 0, "mapped memory is readable by the host");
	expect_rc(cudaMemcpy(at(base + M4), at(base), M4, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue,
		  "cudaMemcpy running past the reservation");
	(void)cudaGetLastError();

	e2e_check(vm.get_range(&rbase, &rsize, base + 1) == CUDA_SUCCESS && rbase == base && rsize == M2,
		  "cuMemGetAddressRange in handle 1: its 2 MiB only");
	e2e_check(vm.get_range(&rbase, &rsize, base + M2 + 5) == CUDA_SUCCESS && rbase == base + M2 &&
			  rsize == M4,
		  "cuMemGetAddressRange in handle 2: its 4 MiB only");
	e2e_check(cu.pointer_attribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, base + 3 * E2E_MIB) == CUDA_SUCCESS &&
			  rsize == M6 &&
			  cu.pointer_attribute(&rbase, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + 3 * E2E_MIB) == CUDA_SUCCESS &&
			  rbase == base &&
			  cu.pointer_attribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + 3 * E2E_MIB) == CUDA_SUCCESS &&
			  mem_type == CU_MEMORYTYPE_DEVICE,
		  "cuPointerGetAttribute: the whole 6 MiB reservation, device memory");
	rsize = 0;
	data[0] = &rsize;
	data[1] = &msize;
	data[2] = &ord;
	e2e_check(vm.attrs(3, which, data, base + M2) == CUDA_SUCCESS && rsize == M6 && msize == M4 && ord == 0,
		  "cuPointerGetAttributes: range 6 MiB, mapping 4 MiB, device 0");
	e2e_check(vm.attrs(3, which, data, (CUdeviceptr)(uintptr_t)buf) == CUDA_SUCCESS && rsize == 0 && ord == 0,
		  "cuPointerGetAttributes of host memory: zeros, no error");
	e2e_cuda(cudaPointerGetAttributes(&pa, at(base + M2)), "cudaPointerGetAttributes");
	e2e_check(pa.type == cudaMemoryTypeDevice && pa.device == 0, "cudaPointerGetAttributes: device 0");
	e2e_check(standin_vmm_mapped(at(base + 3 * E2E_MIB), &rs, &rz, &hb) && rs == base && rz == M6 && hb == M4,
		  "standin_vmm_mapped: the reservation and the handle's 4 MiB");
	e2e_check(!standin_owns(at(base)) && standin_size(at(base)) == 0,
		  "standin_owns / standin_size do not claim VMM memory");

	expect_rc(cudaFree(at(base)), cudaErrorInvalidValue, "cudaFree of VMM memory");
	(void)cudaGetLastError();
	e2e_check(e2e_counters().bad_frees == c0.bad_frees + 1, "counted as a bad free");
	expect_rc(cudaIpcGetMemHandle(&ipc, at(base)), cudaErrorInvalidValue, "cudaIpcGetMemHandle of VMM memory");
	(void)cudaGetLastError();

	failed_creates = e2e_counters().vmm_failed_creates;
	standin_set_capacity(0, 8 * E2E_MIB);
	expect_cu(vm.create(&h3, M4, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate(4 MiB) with 2 MiB free");
	e2e_check(vm.create(&h3, M2, &prop, 0) == CUDA_SUCCESS && vm.release(h3) == CUDA_SUCCESS,
		  "cuMemCreate(2 MiB) fits, cuMemRelease of an unmapped handle");
	standin_set_capacity(0, 1024 * E2E_MIB);
	standin_set_fault(STANDIN_FAULT_MALLOC, 1, 0);
	expect_cu(vm.create(&h3, M2, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate fails by injection");
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	e2e_check(e2e_counters().vmm_failed_creates == failed_creates + 2, "failed creates are counted");
	expect_cu(vm.release(h3), CUDA_ERROR_INVALID_VALUE, "cuMemRelease twice");

	expect_cu(vm.address_free(base, M6), CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree while mapped");
	expect_cu(vm.unmap(base, E2E_MIB), CUDA_ERROR_INVALID_VALUE, "cuMemUnmap of part of a mapping");
	expect_cu(vm.release(h2), CUDA_SUCCESS, "cuMemRelease of a mapped handle");
	e2e_check(e2e_counters().live_bytes == c0.live_bytes + M6 && standin_vmm_handles(0) == 2,
		  "its memory stays while mapped");
	expect_cu(vm.map(base + M2, M2, 0, h2, 0), CUDA_ERROR_INVALID_VALUE, "a released handle cannot be mapped");
	e2e_check(memcmp(at(base + M2), buf + E2E_MIB, E2E_MIB) == 0, "and its bytes are still there");
	expect_cu(vm.unmap(base + M2, M4), CUDA_SUCCESS, "cuMemUnmap of the released handle's mapping");
	e2e_check(e2e_counters().live_bytes == c0.live_bytes + M2 && standin_vmm_handles(0) == 1,
		  "its last mapping gone, its memory goes");
	expect_cu(vm.get_range(&rbase, &rsize, base + M2), CUDA_ERROR_NOT_FOUND, "cuMemGetAddressRange of unmapped space");

	/* physical memory moves: handle 1 leaves its range and keeps its bytes in a new one */
	expect_cu(vm.unmap(base, M2), CUDA_SUCCESS, "cuMemUnmap handle 1");
	e2e_check(vm.reserve(&base2, M4, 0, 0, 0) == CUDA_SUCCESS && base2 != base, "a second reservation");
	e2e_check(vm.map(base2 + M2, M2, 0, h1, 0) == CUDA_SUCCESS && vm.set_access(base2 + M2, M2, &rw, 1) == CUDA_SUCCESS,
		  "handle 1 mapped into it, access granted");
	memset(back, 0, M2);
	e2e_cuda(cudaMemcpy(back, at(base2 + M2 + E2E_MIB), E2E_MIB, cudaMemcpyDeviceToHost),
		 "cudaMemcpy DtoH from the new address");
	e2e_check(memcmp(back, buf, E2E_MIB) == 0, "the bytes written at the old address are there");
	e2e_check(standin_vmm_mapped(at(base2 + M2), &rs, &rz, &hb) && rs == base2 && rz == M4 && hb == M2,
		  "standin_vmm_mapped: the new reservation");

	/* the injected faults of the calls that map and unmap: nothing changes */
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 1, 0);
	expect_cu(vm.unmap(base2 + M2, M2), CUDA_ERROR_UNKNOWN, "cuMemUnmap fails by injection");
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 0, 0);
	standin_set_fault(STANDIN_FAULT_VMM_MAP, 1, 0);
	expect_cu(vm.map(base2, M2, 0, h1, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap fails by injection");
	standin_set_fault(STANDIN_FAULT_VMM_MAP, 0, 0);
	e2e_check(standin_vmm_mapped(at(base2 + M2), NULL, NULL, NULL) &&
			  !standin_vmm_mapped(at(base2), NULL, NULL, NULL) &&
			  standin_faults(STANDIN_FAULT_VMM_UNMAP) == 1 &&
			  standin_faults(STANDIN_FAULT_VMM_MAP) == 1,
		  "still mapped where it was, not mapped where the failed map asked");

	/* pinned host memory: host memory that copies reach, given back once */
	{
		void *pin = NULL;

		c = e2e_counters();
		e2e_check(vm.host_alloc(&pin, 3 * E2E_MIB, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS &&
				  pin != NULL && ((uintptr_t)pin & 4095) == 0,
			  "cuMemHostAlloc: page-aligned host memory");
		e2e_check(vm.memcpy((CUdeviceptr)(uintptr_t)pin, base2 + M2 + E2E_MIB, E2E_MIB) ==
					  CUDA_SUCCESS &&
				  memcmp(pin, buf, E2E_MIB) == 0,
			  "a copy from the device into it");
		expect_cu(vm.free_host(pin), CUDA_SUCCESS, "cuMemFreeHost");
		expect_cu(vm.free_host(pin), CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost twice");
		e2e_check(e2e_counters().pinned_allocs == c.pinned_allocs + 1 &&
				  e2e_counters().pinned_frees == c.pinned_frees + 1 &&
				  e2e_counters().live_bytes == c.live_bytes,
			  "counted, and charged to no device");
	}
	e2e_check(vm.unmap(base2 + M2, M2) == CUDA_SUCCESS && vm.release(h1) == CUDA_SUCCESS &&
			  vm.address_free(base, M6) == CUDA_SUCCESS,
		  "unmap, release, cuMemAddressFree");
	expect_cu(vm.address_free(base2, M2), CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree of the wrong size");
	expect_cu(vm.address_free(base2, M4), CUDA_SUCCESS, "cuMemAddressFree");
	c = e2e_counters();
	e2e_check(c.live_bytes == c0.live_bytes && c.live_allocs == c0.live_allocs && standin_vmm_handles(-1) == 0 &&
			  c.vmm_creates == c0.vmm_creates + 3 && c.vmm_releases == c0.vmm_releases + 3 &&
			  c.vmm_maps == c0.vmm_maps + 3 && c.vmm_unmaps == c0.vmm_unmaps + 3 &&
			  c.vmm_reserves == c0.vmm_reserves + 2 &&
			  c.vmm_address_frees == c0.vmm_address_frees + 2 &&
			  c.vmm_set_access == c0.vmm_set_access + 2,
		  "all gone; creates 3, releases 3, maps 3, unmaps 3, reserves 2, address frees 2, set access 2");
	free(buf);
	free(back);
}

/* ---- the streams' work: kernels in flight, in stream order, and the legacy stream's rules ----
 * A gated kernel waits on a semaphore the test posts: while it is closed, everything that must
 * wait for the kernel is seen waiting (for a while: it would happen soon if a rule were broken),
 * and what must not wait is seen happening (within bounded waits of seconds). */

#define WAIT_MS 10000  /* for what must happen: generous, the machine may be busy */
#define QUIET_MS 100   /* for what must not happen: a broken rule shows itself sooner */
#define GATE_SAFETY_S 30 /* a gate never opened ends its kernel anyway: no process hangs */

static const dim3 one = { 1, 1, 1 };

struct gate {
	sem_t open;    /* the test posts it: the kernel may end */
	sem_t started; /* the kernel posts it when it runs */
	atomic_int ran; /* the kernel ended */
	atomic_int timed_out; /* it ended with its gate never opened */
	void *args[1]; /* its kernelParams: the stand-in does not copy them */
};

static void gate_kernel(void **params)
{
	struct gate *g = params[0];
	struct timespec until;

	sem_post(&g->started);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += GATE_SAFETY_S;
	while (sem_timedwait(&g->open, &until) != 0)
		if (errno != EINTR) {
			atomic_store(&g->timed_out, 1);
			break;
		}
	atomic_store(&g->ran, 1);
}

/* A kernel's CUfunction: the host function itself (an object pointer: by its bytes). */
static const void *kernel_fn(void (*k)(void **))
{
	const void *fn;

	memcpy(&fn, &k, sizeof(fn));
	return fn;
}

/* Queues g's kernel on s, closed. */
static void gate_queue(struct gate *g, cudaStream_t s, const char *what)
{
	sem_init(&g->open, 0, 0);
	sem_init(&g->started, 0, 0);
	atomic_init(&g->ran, 0);
	atomic_init(&g->timed_out, 0);
	g->args[0] = g;
	e2e_cuda(cudaLaunchKernel(kernel_fn(gate_kernel), one, one, g->args, 0, s), what);
}

static int gate_started(struct gate *g)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_MS / 1000;
	return sem_timedwait(&g->started, &until) == 0;
}

/* Queues g's kernel on s and proves the launch came back at once: the kernel runs, closed. */
static void gate_launch(struct gate *g, cudaStream_t s, const char *what)
{
	gate_queue(g, s, what);
	e2e_check(gate_started(g) && !atomic_load(&g->ran),
		  "%s: the launch returned, the kernel runs on the stream's thread, at its gate", what);
}

static int gate_ran(void *g)
{
	return atomic_load(&((struct gate *)g)->ran);
}

/* Waits (bounded) for g's kernel to end once its gate was opened; then g may go. A kernel that
 * ended on its own (GATE_SAFETY_S) means the test waited for something behind its gate. */
static void gate_end(struct gate *g)
{
	if (!e2e_poll(gate_ran, g, WAIT_MS))
		e2e_fail("a gated kernel did not end within %d ms of its gate opening", WAIT_MS);
	if (atomic_load(&g->timed_out))
		e2e_fail("a gated kernel ended after %d s without its gate opening", GATE_SAFETY_S);
	sem_destroy(&g->open);
	sem_destroy(&g->started);
}

static void gate_open(struct gate *g)
{
	sem_post(&g->open);
	gate_end(g);
}

/* A kernel that notes when it ran: `at` its rank among the marks run, 0 not yet. */
struct mark {
	atomic_int at;
	void *args[1];
};

static atomic_int marks_run;

static void mark_kernel(void **params)
{
	struct mark *m = params[0];

	atomic_store(&m->at, atomic_fetch_add(&marks_run, 1) + 1);
}

static void mark_init(struct mark *m)
{
	atomic_init(&m->at, 0);
	m->args[0] = m;
}

static void mark_launch(struct mark *m, cudaStream_t s, const char *what)
{
	mark_init(m);
	e2e_cuda(cudaLaunchKernel(kernel_fn(mark_kernel), one, one, m->args, 0, s), what);
}

static int mark_ran(void *m)
{
	return atomic_load(&((struct mark *)m)->at) != 0;
}

static void host_mark(void *m)
{
	atomic_store(&((struct mark *)m)->at, atomic_fetch_add(&marks_run, 1) + 1);
}

static void time_kernel(void **params)
{
	*(uint64_t *)params[0] = e2e_now_ns();
}

static int event_done(void *e)
{
	return cudaEventQuery((cudaEvent_t)e) == cudaSuccess;
}

/* pred stays false for QUIET_MS: what must wait is waiting. */
static int stays_false(int (*pred)(void *), void *arg)
{
	return !e2e_poll(pred, arg, QUIET_MS);
}

/* A call that must wait for g's kernel: a second thread opens g only once it has seen the call
 * still waiting QUIET_MS after it began. */
struct blocked {
	struct gate *g;
	atomic_int calling, returned, seen_waiting;
};

static int flag_set(void *flag)
{
	return atomic_load((atomic_int *)flag);
}

static void *opener(void *arg)
{
	struct blocked *b = arg;

	if (e2e_poll(flag_set, &b->calling, WAIT_MS) && stays_false(flag_set, &b->returned))
		atomic_store(&b->seen_waiting, 1);
	sem_post(&b->g->open);
	return NULL;
}

static void expect_waits(const char *what, struct gate *g, cudaError_t (*call)(void *), void *arg)
{
	struct blocked b = { .g = g };
	cudaError_t rc;
	pthread_t t;
	int ran;

	atomic_init(&b.calling, 0);
	atomic_init(&b.returned, 0);
	atomic_init(&b.seen_waiting, 0);
	e2e_check(pthread_create(&t, NULL, opener, &b) == 0, "pthread_create");
	atomic_store(&b.calling, 1);
	rc = call(arg);
	ran = atomic_load(&g->ran);
	atomic_store(&b.returned, 1);
	pthread_join(t, NULL);
	expect_rc(rc, cudaSuccess, what);
	e2e_check(ran && atomic_load(&b.seen_waiting),
		  "%s waits for the gated kernel: still waiting %d ms after the call, returned %s "
		  "the kernel ended", what, QUIET_MS, ran ? "after" : "BEFORE");
	gate_end(g); /* the opener opened it */
}

static cudaError_t call_free(void *p)
{
	return cudaFree(p);
}

static cudaError_t call_device_sync(void *unused)
{
	(void)unused;
	return cudaDeviceSynchronize();
}

static cudaError_t call_memcpy(void *buf)
{
	return cudaMemcpy(buf, (char *)buf + 64, 64, cudaMemcpyDefault);
}

static cudaError_t call_stream_sync(void *s)
{
	return cudaStreamSynchronize((cudaStream_t)s);
}

static cudaError_t call_reset(void *unused)
{
	(void)unused;
	return cudaDeviceReset();
}

/* Work runs later, on the stream's thread, in order; queries and events say so. */
static void in_flight(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	cudaStream_t s = NULL;
	cudaEvent_t e1 = NULL, e2 = NULL;
	struct gate g1, g2;
	struct mark m, h;
	char src[64], dst[64];
	uint64_t t0, t1 = 0;
	void *t_args[1] = { &t1 };

	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming), "cudaEventCreate");
	e2e_cuda(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming), "cudaEventCreate");
	gate_launch(&g1, s, "cudaLaunchKernel of a gated kernel");
	e2e_cuda(cudaEventRecord(e1, s), "cudaEventRecord(e1) behind it");
	mark_launch(&m, s, "cudaLaunchKernel of a second kernel");
	mark_init(&h);
	e2e_cuda(cudaLaunchHostFunc(s, host_mark, &h), "cudaLaunchHostFunc");
	memset(src, 7, sizeof(src));
	memset(dst, 0, sizeof(dst));
	e2e_cuda(cudaMemcpyAsync(dst, src, sizeof(dst), cudaMemcpyDefault, s), "cudaMemcpyAsync");
	gate_queue(&g2, s, "cudaLaunchKernel of a second gated kernel");
	e2e_cuda(cudaEventRecord(e2, s), "cudaEventRecord(e2) behind it");
	expect_rc(cudaStreamQuery(s), cudaErrorNotReady, "cudaStreamQuery while a kernel runs");
	expect_rc(cudaEventQuery(e1), cudaErrorNotReady, "cudaEventQuery of an event behind it");
	e2e_check(stays_false(mark_ran, &m) && !mark_ran(&h) && dst[0] == 0,
		  "the kernel, host function and copy queued behind it wait");
	e2e_check(standin_device_busy(0) >= 6 && standin_device_busy(1) == 0,
		  "standin_device_busy: %llu items outstanding on device 0",
		  (unsigned long long)standin_device_busy(0));
	gate_open(&g1);
	e2e_check(e2e_poll(event_done, e1, WAIT_MS) && gate_started(&g2),
		  "its gate open: the event behind it completes, the work queued after runs");
	e2e_check(mark_ran(&m) && mark_ran(&h) && atomic_load(&m.at) < atomic_load(&h.at) &&
			  memcmp(dst, src, sizeof(dst)) == 0,
		  "in queue order: the kernel, then the host function, then the copy");
	e2e_check(stays_false(event_done, e2) && cudaStreamQuery(s) == cudaErrorNotReady,
		  "events complete in stream order: the one behind the second gated kernel waits");
	gate_open(&g2);
	e2e_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	expect_rc(cudaEventQuery(e2), cudaSuccess, "after cudaStreamSynchronize, the last event");
	expect_rc(cudaStreamQuery(s), cudaSuccess, "and cudaStreamQuery: idle");
	c = e2e_counters();
	e2e_check(standin_device_busy(0) == 0 && c.kernels_run == c0.kernels_run + 3 &&
			  c.host_funcs_run == c0.host_funcs_run + 1 &&
			  c.work_queued == c0.work_queued + 7 && c.work_done == c.work_queued,
		  "counted: 3 kernels and a host function run, 7 items queued (with the copy and 2 "
		  "markers), all done (queued +%llu)", (unsigned long long)(c.work_queued - c0.work_queued));

	standin_set_launch_delay_us(200000);
	t0 = e2e_now_ns();
	e2e_cuda(cudaLaunchKernel(kernel_fn(time_kernel), one, one, t_args, 0, s),
		 "cudaLaunchKernel with a launch delay");
	e2e_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	e2e_check(t1 >= t0 + 200000000u, "with a 200 ms launch delay (standin_set_launch_delay_us) "
		  "the kernel started %llu ms after its launch", (unsigned long long)((t1 - t0) / 1000000u));
	standin_set_launch_delay_us(0);
	e2e_cuda(cudaEventDestroy(e1), "cudaEventDestroy");
	e2e_cuda(cudaEventDestroy(e2), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

/* cudaFree, cudaDeviceSynchronize and a synchronous copy wait for the device's work. */
static void waits(void)
{
	cudaStream_t nb = NULL, b = NULL;
	struct gate g;
	void *p = NULL;
	char *buf = NULL;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaStreamCreate(&b), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&p, 4096), "cudaMalloc");
	e2e_cuda(cudaMalloc((void **)&buf, 128), "cudaMalloc");
	gate_launch(&g, nb, "a gated kernel on a non-blocking stream");
	expect_waits("cudaFree", &g, call_free, p);
	gate_launch(&g, nb, "a gated kernel on a non-blocking stream");
	expect_waits("cudaDeviceSynchronize", &g, call_device_sync, NULL);
	gate_launch(&g, b, "a gated kernel on a blocking stream");
	expect_waits("cudaMemcpy (the legacy stream)", &g, call_memcpy, buf);
	gate_launch(&g, b, "a gated kernel on a blocking stream");
	e2e_cuda(cudaMemsetAsync(buf, 1, 8, cudaStreamLegacy), "cudaMemsetAsync(legacy)");
	expect_waits("cudaStreamSynchronize(legacy) after a cudaMemsetAsync on it", &g,
		     call_stream_sync, cudaStreamLegacy);
	gate_launch(&g, nb, "a gated kernel on a non-blocking stream");
	e2e_cuda(call_memcpy(buf), "cudaMemcpy while a non-blocking stream's kernel runs");
	e2e_check(!gate_ran(&g), "cudaMemcpy does not wait for a non-blocking stream");
	gate_open(&g);
	e2e_cuda(cudaFree(buf), "cudaFree");
	e2e_cuda(cudaStreamDestroy(b), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
}

static atomic_int other_pt_synced;

/* Another thread's per-thread default stream is a stream of its own. */
static void *per_thread_other(void *arg)
{
	struct mark *m = arg;

	mark_launch(m, cudaStreamPerThread, "cudaLaunchKernel on another thread's per-thread stream");
	if (cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess)
		atomic_store(&other_pt_synced, 1);
	return NULL;
}

/* The legacy stream waits for the blocking streams' earlier work, and they for its. */
static void legacy_rules(void)
{
	cudaStream_t b = NULL, b2 = NULL, nb = NULL;
	cudaEvent_t el = NULL;
	struct gate g;
	struct mark m1, m2, m3;
	pthread_t t;

	e2e_cuda(cudaStreamCreate(&b), "cudaStreamCreate");
	e2e_cuda(cudaStreamCreateWithPriority(&b2, cudaStreamDefault, 0), "cudaStreamCreateWithPriority");
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaEventCreateWithFlags(&el, cudaEventDisableTiming), "cudaEventCreate");

	gate_launch(&g, nb, "a gated kernel on a non-blocking stream");
	e2e_cuda(cudaEventRecord(el, cudaStreamLegacy), "cudaEventRecord(legacy)");
	e2e_check(e2e_poll(event_done, el, WAIT_MS) && cudaStreamQuery(cudaStreamLegacy) == cudaSuccess,
		  "an event on the legacy stream completes while only a non-blocking stream's kernel "
		  "runs, and the legacy stream is idle");
	gate_open(&g);

	gate_launch(&g, b, "a gated kernel on a blocking stream");
	expect_rc(cudaStreamQuery(cudaStreamLegacy), cudaSuccess,
		  "cudaStreamQuery(legacy): idle while a blocking stream's kernel, queued after the "
		  "legacy stream's last work, runs");
	e2e_cuda(cudaEventRecord(el, cudaStreamLegacy), "cudaEventRecord(legacy)");
	e2e_check(stays_false(event_done, el),
		  "an event on the legacy stream waits for the blocking stream's kernel before it");
	expect_rc(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady,
		  "and now the legacy stream is busy (its marker waits)");
	mark_launch(&m1, b2, "a kernel on another blocking stream after the legacy event");
	mark_launch(&m2, nb, "a kernel on a non-blocking stream after the legacy event");
	e2e_check(e2e_poll(mark_ran, &m2, WAIT_MS), "the non-blocking stream's kernel runs");
	e2e_check(stays_false(mark_ran, &m1),
		  "the other blocking stream's kernel waits for the legacy event (the join)");
	gate_open(&g);
	e2e_check(e2e_poll(event_done, el, WAIT_MS) && e2e_poll(mark_ran, &m1, WAIT_MS),
		  "the gate open: the legacy event completes, then the blocking stream's kernel runs");

	gate_launch(&g, cudaStreamLegacy, "a gated kernel on the legacy stream");
	mark_launch(&m1, b, "a kernel on a blocking stream after it");
	mark_launch(&m2, nb, "a kernel on a non-blocking stream after it");
	e2e_check(e2e_poll(mark_ran, &m2, WAIT_MS), "the non-blocking stream's kernel runs");
	e2e_check(stays_false(mark_ran, &m1),
		  "the blocking stream's kernel waits for the legacy stream's kernel");
	gate_open(&g);
	e2e_check(e2e_poll(mark_ran, &m1, WAIT_MS), "and runs once it ended");

	gate_launch(&g, b, "a gated kernel on a blocking stream");
	mark_launch(&m1, cudaStreamLegacy, "a kernel on the legacy stream after it");
	e2e_check(stays_false(mark_ran, &m1) &&
			  cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady,
		  "the legacy stream's kernel waits for the blocking stream's");
	gate_open(&g);
	e2e_cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize(legacy)");
	e2e_check(mark_ran(&m1), "and runs once it ended");

	/* The per-thread default stream: one per thread, and blocking. */
	gate_launch(&g, cudaStreamPerThread, "a gated kernel on this thread's per-thread stream");
	e2e_check(pthread_create(&t, NULL, per_thread_other, &m3) == 0, "pthread_create");
	pthread_join(t, NULL);
	e2e_check(atomic_load(&other_pt_synced) && mark_ran(&m3),
		  "another thread's per-thread stream ran its kernel and synchronised meanwhile");
	e2e_cuda(cudaEventRecord(el, cudaStreamLegacy), "cudaEventRecord(legacy)");
	e2e_check(stays_false(event_done, el),
		  "a legacy event waits for the per-thread stream's kernel (a blocking stream)");
	gate_open(&g);
	e2e_check(e2e_poll(event_done, el, WAIT_MS), "the gate open, the legacy event completes");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaEventDestroy(el), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(b2), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(b), "cudaStreamDestroy");
}

/* A destroyed stream's work still runs; cudaStreamWaitEvent; captured work does not run. */
static void lifetimes(void)
{
	struct standin_counters c0, c;
	cudaStream_t s = NULL, nb = NULL;
	cudaEvent_t e = NULL;
	cudaGraph_t graph = NULL;
	struct gate g;
	struct mark m;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
	gate_launch(&g, s, "a gated kernel");
	mark_launch(&m, s, "a kernel behind it");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord behind them");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy with work queued");
	e2e_check(!gate_ran(&g) && cudaEventQuery(e) == cudaErrorNotReady,
		  "cudaStreamDestroy returned at once, its work not done");
	gate_open(&g);
	e2e_check(e2e_poll(event_done, e, WAIT_MS) && mark_ran(&m),
		  "the destroyed stream's work ran to its end and its event completed");

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	gate_launch(&g, s, "a gated kernel");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord behind it");
	e2e_cuda(cudaStreamWaitEvent(nb, e, 0), "cudaStreamWaitEvent(non-blocking stream, e)");
	mark_launch(&m, nb, "a kernel after the wait");
	e2e_check(stays_false(mark_ran, &m), "the kernel waits for the event");
	gate_open(&g);
	e2e_check(e2e_poll(mark_ran, &m, WAIT_MS), "and runs once it completed");

	c0 = e2e_counters();
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
	mark_launch(&m, s, "a kernel on a capturing stream");
	e2e_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
	e2e_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c = e2e_counters();
	e2e_check(!mark_ran(&m) && c.launches == c0.launches + 1 && c.work_queued == c0.work_queued,
		  "a captured kernel is counted as a launch, not queued nor run");
	e2e_cuda(cudaEventDestroy(e), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

/* Manual events are an overlay on the work: an event is complete once reached and told. */
static void manual_overlay(void)
{
	cudaStream_t s = NULL;
	cudaEvent_t e = NULL;
	struct gate g;

	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
	standin_set_manual_events(1);
	gate_launch(&g, s, "manual events: a gated kernel");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord behind it");
	standin_complete_events();
	e2e_check(stays_false(event_done, e),
		  "manual events: told complete, an event its stream has not reached stays not ready");
	gate_open(&g);
	e2e_check(e2e_poll(event_done, e, WAIT_MS), "reached and told: complete");
	e2e_cuda(cudaEventRecord(e, s), "cudaEventRecord on the idle stream");
	expect_rc(cudaEventQuery(e), cudaErrorNotReady, "reached at once, not told: not ready");
	expect_rc(cudaStreamQuery(s), cudaErrorNotReady, "and the idle stream is never idle to a query");
	e2e_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	expect_rc(cudaEventQuery(e), cudaSuccess, "synchronised past it: complete");
	standin_set_manual_events(0);
	e2e_cuda(cudaEventDestroy(e), "cudaEventDestroy");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

/* cudaDeviceReset first waits for the device's work: none of it touches freed memory. */
static void reset_waits(void)
{
	cudaStream_t s = NULL;
	struct gate g;

	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate on device 1");
	gate_launch(&g, s, "a gated kernel on device 1");
	expect_waits("cudaDeviceReset", &g, call_reset, NULL);
	e2e_check(standin_device_busy(1) == 0, "device 1 has no work left");
	expect_rc(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle, "the reset destroyed the stream");
	(void)cudaGetLastError();
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
}

/* ThreadSanitizer lets no child forked from a process with threads start one: there the child
 * only checks that the parent's work is gone. */
#if defined(__SANITIZE_THREAD__)
#define CHILD_MAY_START_THREADS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHILD_MAY_START_THREADS 0
#endif
#endif
#ifndef CHILD_MAY_START_THREADS
#define CHILD_MAY_START_THREADS 1
#endif

/* In a forked child: the parent's work did not come along (dropped there, as complete), new
 * work runs; and the child exits at once while a kernel of its waits at a gate never opened.
 * Returns its exit status (exit: the libraries' destructors run, the stand-in's too). */
static int child_after_fork(cudaStream_t s)
{
	struct mark m;
	static struct gate never;

	if (cudaStreamQuery(s) != cudaSuccess || standin_device_busy(-1) != 0 ||
	    cudaDeviceSynchronize() != cudaSuccess)
		return 1;
	if (!CHILD_MAY_START_THREADS)
		return 0;
	mark_init(&m);
	if (cudaLaunchKernel(kernel_fn(mark_kernel), one, one, m.args, 0, s) != cudaSuccess ||
	    cudaStreamSynchronize(s) != cudaSuccess || !mark_ran(&m))
		return 2;
	gate_queue(&never, s, "a gated kernel in the child");
	return gate_started(&never) ? 0 : 3;
}

static int child_gone(void *arg)
{
	struct { pid_t pid; int status; } *c = arg;

	return waitpid(c->pid, &c->status, WNOHANG) == c->pid;
}

static void fork_and_exit(void)
{
	struct { pid_t pid; int status; } child = { -1, -1 };
	cudaStream_t s = NULL;
	struct gate g;

	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	gate_launch(&g, s, "a gated kernel before fork()");
	child.pid = fork();
	if (child.pid == 0)
		exit(child_after_fork(s));
	if (child.pid < 0)
		e2e_fail("fork: %s", strerror(errno));
	if (!e2e_poll(child_gone, &child, WAIT_MS)) {
		kill(child.pid, SIGKILL);
		waitpid(child.pid, NULL, 0);
		e2e_fail("the forked child did not exit within %d ms", WAIT_MS);
	}
	e2e_check(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0,
		  "a forked child: the parent's gated kernel is not its work (idle stream and device, "
		  "cudaDeviceSynchronize returns), a new kernel runs, and it exits at once while a kernel "
		  "of its waits at a gate (exit status %d)",
		  WIFEXITED(child.status) ? WEXITSTATUS(child.status) : -1);
	e2e_check(!gate_ran(&g), "the parent's kernel still waits at its gate");
	gate_open(&g);
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

int main(void)
{
	e2e_start("e2e_standin_selftest");
	e2e_check(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0 &&
		  strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0,
		  "cudaGetErrorName / cudaGetErrorString");
	accounting();
	out_of_memory();
	async_memory();
	events();
	devices();
	capture();
	faults();
	get_proc_address();
	contexts();
	driver_callers();
	vmm();
	in_flight();
	waits();
	legacy_rules();
	lifetimes();
	manual_overlay();
	reset_waits();
	fork_and_exit();
	printf("PASS e2e_standin_selftest\n");
	return 0;
}
