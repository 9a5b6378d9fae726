/* drvstatic.c — a program that does what nvcc's default static runtime, CuPy and numba do: no
 * libcudart.so in the process; it dlopen()s libcuda.so.1, looks up cuGetProcAddress_v2 with
 * dlsym, asks it for "cuGetProcAddress", and gets every driver function from what that returned.
 * Under LD_PRELOAD=libgpupool.so it proves the driver door: the allocation functions it is handed
 * are gpupool's (and cuMemsetD8, work on a stream), 1000 cuMemAlloc+cuMemFree pairs reach the
 * driver once, cuMemGetInfo counts the cache as free, the release signal gives the cache back, a
 * second stream order switches reuse to fences, and functions gpupool does not wrap come back as
 * the gate's stubs in front of the driver's own (shim/door/gate.h; e2e_gate proves what they
 * do). Run natively with --expect-native, every pair must reach the driver: that run proves the
 * first counted interposition; with --either, whichever it was handed decides what is checked.
 * E2E_CYCLES changes the 1000 (ctest: 100 under the sanitizers, whose shadow memory makes
 * each real 1 MiB allocation of a native run slow).
 * Usage: e2e_drvstatic <path of the stand-in libcuda.so.1> [--expect-native | --either] */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define CYCLES 1000 /* unless E2E_CYCLES says */

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
			    CUdriverProcAddressQueryResult *);

static gpa2_fn gpa;
static void (*counters)(int, struct standin_counters *);

static void *get(const char *name)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	if (gpa(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || p == NULL)
		e2e_fail("cuGetProcAddress(\"%s\") failed", name);
	return p;
}

static const char *library_of(const void *p)
{
	Dl_info info;
	const char *slash;

	if (dladdr(p, &info) == 0 || info.dli_fname == NULL)
		return "?";
	slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

static int from_gpupool(const void *p)
{
	return strstr(library_of(p), "libgpupool") != NULL;
}

/* A function's address as an object pointer, for dladdr. */
#define ADDR(fn) as_addr((void (*)(void))(fn))
static const void *as_addr(void (*fn)(void))
{
	const void *p;

	memcpy(&p, &fn, sizeof(p));
	return p;
}

static struct standin_counters now(void)
{
	struct standin_counters c;

	counters(0, &c);
	return c;
}

struct api {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemGetInfo)(size_t *, size_t *);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
};

static void resolve(struct api *a, void *h)
{
	void *first = dlsym(h, "cuGetProcAddress_v2"), *p;

	if (first == NULL)
		e2e_fail("dlsym(libcuda, \"cuGetProcAddress_v2\"): %s", dlerror());
	memcpy(&gpa, &first, sizeof(gpa));
	p = get("cuGetProcAddress"); /* what a runtime then uses for everything */
	memcpy(&gpa, &p, sizeof(gpa));
#define GET(field, name) do { p = get(name); memcpy(&a->field, &p, sizeof(p)); } while (0)
	GET(Init, "cuInit");
	GET(DeviceGet, "cuDeviceGet");
	GET(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	GET(CtxSetCurrent, "cuCtxSetCurrent");
	GET(MemAlloc, "cuMemAlloc");
	GET(MemFree, "cuMemFree");
	GET(MemGetInfo, "cuMemGetInfo");
	GET(StreamCreate, "cuStreamCreate");
	GET(StreamDestroy, "cuStreamDestroy");
	GET(MemsetD8, "cuMemsetD8");
#undef GET
}

static void ok(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		e2e_fail("%s failed with CUresult %d", what, (int)rc);
}

int main(int argc, char **argv)
{
	int native = argc > 2 && strcmp(argv[2], "--expect-native") == 0;
	int either = argc > 2 && strcmp(argv[2], "--either") == 0;
	int cycles = CYCLES;
	struct standin_counters c0, c;
	struct api a;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p = 0, q = 0;
	CUstream s;
	size_t free0, free1, total;
	void *h, *cnt;

	e2e_start(native ? "e2e_drvstatic_native" : "e2e_drvstatic");
	if (argc < 2)
		e2e_fail("usage: e2e_drvstatic <libcuda.so.1> [--expect-native]");
	e2e_check(dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD) == NULL,
		  "no CUDA runtime library is loaded in this process");
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		e2e_fail("dlopen(%s): %s", argv[1], dlerror());
	cnt = dlsym(h, "standin_get");
	if (cnt == NULL)
		e2e_fail("the stand-in's standin_get is missing");
	memcpy(&counters, &cnt, sizeof(cnt));
	resolve(&a, h);
	if (either) /* whatever it was handed, the rest must be consistent with it */
		native = !from_gpupool(ADDR(a.MemAlloc));
	e2e_check(from_gpupool(ADDR(a.MemAlloc)) == !native && from_gpupool(ADDR(a.MemFree)) == !native,
		  "cuGetProcAddress handed out %s cuMemAlloc/cuMemFree (%s)", native ? "the driver's" :
		  "gpupool's", library_of(ADDR(a.MemAlloc)));
	e2e_check(from_gpupool(ADDR(a.MemsetD8)) == !native,
		  "cuGetProcAddress handed out %s cuMemsetD8 (work on a stream: %s)",
		  native ? "the driver's" : "gpupool's", library_of(ADDR(a.MemsetD8)));
	e2e_check(from_gpupool(ADDR(a.DeviceGet)) == !native && from_gpupool(ADDR(a.Init)) == !native,
		  "cuDeviceGet and cuInit come back as %s (%s)",
		  native ? "the driver's own" : "gpupool's gate stubs in front of the driver's own",
		  library_of(ADDR(a.DeviceGet)));
	ok(a.Init(0), "cuInit");
	ok(a.DeviceGet(&dev, 0), "cuDeviceGet");
	ok(a.PrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	ok(a.CtxSetCurrent(ctx), "cuCtxSetCurrent");

	c0 = now();
	if (getenv("E2E_CYCLES") != NULL && atoi(getenv("E2E_CYCLES")) > 0)
		cycles = atoi(getenv("E2E_CYCLES"));
	for (int i = 0; i < cycles; i++) {
		ok(a.MemAlloc(&p, E2E_MIB), "cuMemAlloc(1 MiB)");
		e2e_fill((void *)(uintptr_t)p, E2E_MIB, (uint64_t)i);
		if (!e2e_verify((void *)(uintptr_t)p, E2E_MIB, (uint64_t)i))
			e2e_fail("cycle %d: the block lost its data before it was freed", i);
		ok(a.MemFree(p), "cuMemFree");
	}
	c = now();
	e2e_check(c.mallocs - c0.mallocs == (native ? (uint64_t)cycles : 1) &&
		  c.frees - c0.frees == (native ? (uint64_t)cycles : 0),
		  "%d x cuMemAlloc(1 MiB)+cuMemFree reached the driver as %llu allocations and %llu "
		  "frees", cycles, (unsigned long long)(c.mallocs - c0.mallocs),
		  (unsigned long long)(c.frees - c0.frees));
	if (native)
		return 0;

	/* The cached block is free memory for this process. */
	ok(a.MemGetInfo(&free0, &total), "cuMemGetInfo");
	e2e_check(c.live_bytes > 0 && free0 == total,
		  "cuMemGetInfo counts the cached block as free (%zu of %zu free, %llu B held)", free0,
		  total, (unsigned long long)c.live_bytes);

	/* A stream: reuse goes through fences from now on, and still hands the block back. */
	ok(a.StreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	ok(a.MemAlloc(&p, E2E_MIB), "cuMemAlloc after a stream");
	ok(a.MemFree(p), "cuMemFree");
	c0 = now();
	for (int i = 0; i < 100; i++) {
		ok(a.MemAlloc(&q, E2E_MIB), "cuMemAlloc (fenced)");
		ok(a.MemFree(q), "cuMemFree (fenced)");
	}
	c = now();
	e2e_check(c.event_records + c.stream_queries > c0.event_records + c0.stream_queries &&
		  c.mallocs - c0.mallocs <= 16,
		  "with a stream, 100 pairs asked the streams (%llu event records, %llu stream queries) "
		  "and reused blocks (%llu new allocations)",
		  (unsigned long long)(c.event_records - c0.event_records),
		  (unsigned long long)(c.stream_queries - c0.stream_queries),
		  (unsigned long long)(c.mallocs - c0.mallocs));
	ok(a.StreamDestroy(s), "cuStreamDestroy");

	/* The release signal gives the cache back to the driver. */
	c0 = now();
	raise(SIGUSR1);
	for (int i = 0; i < 2000 && now().live_bytes > 0; i++)
		e2e_sleep_ms(1);
	c = now();
	ok(a.MemGetInfo(&free1, &total), "cuMemGetInfo");
	e2e_check(c.live_bytes == 0 && c.frees > c0.frees,
		  "SIGUSR1 gave the cache back: %llu B held, %llu real frees",
		  (unsigned long long)c.live_bytes, (unsigned long long)(c.frees - c0.frees));
	return 0;
}
