/* drvlinked.c — a program linked to libcuda.so.1 itself (no runtime, no lookups): its calls bind
 * to the driver's symbols by name, and under LD_PRELOAD=libgpupool.so to gpupool's. 1000
 * cuMemAlloc+cuMemFree pairs must reach the driver once, a double free gets the driver's error
 * and leaves the pool intact, a stream switches reuse to fences, and once the door goes blind a
 * pooled block still comes back to the pool (new ones pass through). Run natively with
 * --expect-native, every pair must reach the driver. */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define CYCLES 1000

static void ok(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		e2e_fail("%s failed with CUresult %d", what, (int)rc);
}

static struct standin_counters now(void)
{
	struct standin_counters c;

	standin_get(0, &c);
	return c;
}

int main(int argc, char **argv)
{
	int native = argc > 1 && strcmp(argv[1], "--expect-native") == 0;
	struct standin_counters c0, c;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p = 0, q = 0;
	CUstream s;

	e2e_start(native ? "e2e_drvlinked_native" : "e2e_drvlinked");
	ok(cuInit(0), "cuInit");
	ok(cuDeviceGet(&dev, 0), "cuDeviceGet");
	ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	c0 = now();
	for (int i = 0; i < CYCLES; i++) {
		ok(cuMemAlloc(&p, 64 * E2E_KIB), "cuMemAlloc(64 KiB)");
		ok(cuMemFree(p), "cuMemFree");
	}
	c = now();
	e2e_check(c.mallocs - c0.mallocs == (native ? CYCLES : 1) &&
		  c.frees - c0.frees == (native ? CYCLES : 0),
		  "%d x cuMemAlloc(64 KiB)+cuMemFree reached the driver as %llu allocations and %llu "
		  "frees", CYCLES, (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)(c.frees - c0.frees));
	if (native)
		return 0;

	ok(cuMemAlloc(&p, 64 * E2E_KIB), "cuMemAlloc");
	ok(cuMemFree(p), "cuMemFree");
	e2e_check(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE,
		  "a double cuMemFree gets CUDA_ERROR_INVALID_VALUE");
	ok(cuMemAlloc(&q, 64 * E2E_KIB), "cuMemAlloc after the double free");
	e2e_check(q == p, "the pool is intact: the block comes back once");
	ok(cuMemFree(q), "cuMemFree");

	ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	c0 = now();
	for (int i = 0; i < 100; i++) {
		ok(cuMemAlloc(&p, 64 * E2E_KIB), "cuMemAlloc (fenced)");
		ok(cuMemFree(p), "cuMemFree (fenced)");
	}
	c = now();
	e2e_check(c.event_records + c.stream_queries > c0.event_records + c0.stream_queries,
		  "after cuStreamCreate the pairs asked the streams (%llu event records, %llu stream "
		  "queries)", (unsigned long long)(c.event_records - c0.event_records),
		  (unsigned long long)(c.stream_queries - c0.stream_queries));
	ok(cuStreamDestroy(s), "cuStreamDestroy");

	/* A lookup the door cannot vouch for makes it blind: allocations pass through from then on,
	 * but a block the pool handed out before still comes back to the pool, and only once. */
	ok(cuMemAlloc(&p, 64 * E2E_KIB), "cuMemAlloc before the door is blind");
	setenv("STANDIN_PROC_HIDDEN_MEMFREE", "1", 1);
	{
		void *fn = NULL;
		CUdriverProcAddressQueryResult st;

		ok(cuGetProcAddress_v2("cuMemFree", &fn, 12000, 0, &st), "cuGetProcAddress");
	}
	unsetenv("STANDIN_PROC_HIDDEN_MEMFREE");
	c0 = now();
	ok(cuMemFree(p), "cuMemFree of a pooled block once blind");
	e2e_check(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE,
		  "its second free is a double free (the pool kept its record)");
	ok(cuMemAlloc(&q, 64 * E2E_KIB), "cuMemAlloc once blind");
	c = now();
	e2e_check(c.frees == c0.frees && c.bad_frees == c0.bad_frees && c.mallocs == c0.mallocs + 1,
		  "once blind, the pooled block went back to the pool, not the driver (%llu frees, %llu "
		  "bad frees reached it), and a new allocation passed through (%llu)",
		  (unsigned long long)(c.frees - c0.frees),
		  (unsigned long long)(c.bad_frees - c0.bad_frees),
		  (unsigned long long)(c.mallocs - c0.mallocs));
	ok(cuMemFree(q), "cuMemFree of the passed-through block");
	c = now();
	e2e_check(c.frees == c0.frees + 1, "which reaches the driver");
	return 0;
}
