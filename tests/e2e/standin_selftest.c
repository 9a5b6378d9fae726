/* standin_selftest.c — proves the stand-in runtime behaves as the e2e tests assume (run natively,
 * with STANDIN_DEVICES=2): the driver-like accounting, out-of-memory and the last error, frees,
 * cudaMallocAsync, per-device events, events that complete only when told, and the stream-capture
 * rules, and the injected faults (every n-th call fails; unloading). If this fails, the e2e results
 * say nothing about the shim. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

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
	printf("PASS e2e_standin_selftest\n");
	return 0;
}
