/* work.c — proves that GPU work queued through the driver door reaches the shim's work hook, and
 * which stream it counts: a program that finds the driver as a static runtime does (no libcudart;
 * cuGetProcAddress, plain and per-thread flavours) runs, as a child with GPUPOOL_LOG=debug, one
 * kind of work after a first allocation, and its stderr must say "work was queued on a legacy or
 * per-thread default stream" exactly for the work that went to one: a launch on the legacy stream
 * (NULL or CU_STREAM_LEGACY), through cuLaunchKernel_ptsz, on CU_STREAM_PER_THREAD, and a
 * synchronous memset; not for a launch on a stream the program created, a launch the driver
 * refused, or no work at all. A per-thread launch also ends the one stream order ("no longer in
 * one stream order"), a legacy one does not. Each launch reaches the stand-in (its count).
 * Usage: e2e_work <path of the stand-in libcuda.so.1> */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>

#include "e2e.h"

#define LEGACY_LINE "work was queued on a legacy or per-thread default stream"
#define UNORDERED_LINE "no longer in one stream order"

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
			    CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned, CUstream, void **, void **);

static gpa2_fn gpa;

static void *get(const char *name, cuuint64_t flags)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	if (gpa(name, &p, 13000, flags, &st) != CUDA_SUCCESS || p == NULL)
		e2e_fail("cuGetProcAddress(\"%s\") failed", name);
	return p;
}

#define GET(var, name, flags)                                                                      \
	do {                                                                                       \
		void *p_ = get(name, flags);                                                       \
		memcpy(&var, &p_, sizeof(p_));                                                     \
	} while (0)

/* Whether the function fn lies in libgpupool (its address through memcpy: ISO C converts no
 * function pointer to an object pointer). */
#define FROM_GPUPOOL(fn) from_gpupool((void (*)(void))(fn))
static int from_gpupool(void (*fn)(void))
{
	Dl_info info;
	void *p;

	memcpy(&p, &fn, sizeof(p));
	return dladdr(p, &info) != 0 && info.dli_fname != NULL &&
	       strstr(info.dli_fname, "libgpupool") != NULL;
}

/* The stand-in runs a launched "kernel" at once: a host function given the parameters. */
static void kernel(void **params)
{
	(void)params;
}

static void ok(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		e2e_fail("%s failed with CUresult %d", what, (int)rc);
}

static int child(const char *lib, const char *mode)
{
	CUresult (*init)(unsigned), (*device_get)(CUdevice *, int);
	CUresult (*retain)(CUcontext *, CUdevice), (*set_current)(CUcontext);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t), (*mem_free)(CUdeviceptr);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
	void (*counters)(int, struct standin_counters *);
	struct standin_counters c0, c;
	launch_fn launch, launch_ptsz;
	CUfunction f;
	CUdeviceptr p;
	CUcontext ctx;
	CUdevice dev;
	CUstream s;
	CUresult rc = CUDA_SUCCESS;
	int launched = 1;
	void (*host_fn)(void **) = kernel;
	void *h, *first;

	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		e2e_fail("dlopen(%s): %s", lib, dlerror());
	first = dlsym(h, "standin_get");
	memcpy(&counters, &first, sizeof(first));
	first = dlsym(h, "cuGetProcAddress_v2");
	memcpy(&gpa, &first, sizeof(first));
	GET(gpa, "cuGetProcAddress", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(init, "cuInit", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(device_get, "cuDeviceGet", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(retain, "cuDevicePrimaryCtxRetain", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(set_current, "cuCtxSetCurrent", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(mem_alloc, "cuMemAlloc", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(mem_free, "cuMemFree", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(stream_create, "cuStreamCreate", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(memset8, "cuMemsetD8", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(launch, "cuLaunchKernel", CU_GET_PROC_ADDRESS_DEFAULT);
	GET(launch_ptsz, "cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	if (!FROM_GPUPOOL(launch) || !FROM_GPUPOOL(launch_ptsz) || !FROM_GPUPOOL(memset8) ||
	    launch == launch_ptsz)
		e2e_fail("cuLaunchKernel (plain and per-thread) and cuMemsetD8 are not gpupool's");
	memcpy(&f, &host_fn, sizeof(f)); /* the stand-in's CUfunction */
	ok(init(0), "cuInit");
	ok(device_get(&dev, 0), "cuDeviceGet");
	ok(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	ok(set_current(ctx), "cuCtxSetCurrent");
	ok(mem_alloc(&p, E2E_MIB), "cuMemAlloc"); /* the shim starts: its log level is read */
	counters(0, &c0);
	if (strcmp(mode, "legacy") == 0) {
		rc = launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
	} else if (strcmp(mode, "legacy-handle") == 0) {
		rc = launch(f, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_LEGACY, NULL, NULL);
	} else if (strcmp(mode, "ptsz") == 0) {
		rc = launch_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
	} else if (strcmp(mode, "per-thread-handle") == 0) {
		rc = launch(f, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, NULL, NULL);
	} else if (strcmp(mode, "stream") == 0) {
		ok(stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
		rc = launch(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
	} else if (strcmp(mode, "memset") == 0) {
		ok(memset8(p, 0, E2E_MIB), "cuMemsetD8");
		launched = 0;
	} else if (strcmp(mode, "refused") == 0) {
		if (launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS)
			e2e_fail("the stand-in launched no function");
		launched = 0;
	} else if (strcmp(mode, "none") == 0) {
		launched = 0;
	} else {
		e2e_fail("unknown mode %s", mode);
	}
	ok(rc, mode);
	counters(0, &c);
	if (c.launches - c0.launches != (uint64_t)launched)
		e2e_fail("%s: %llu launches reached the stand-in, not %d", mode,
			 (unsigned long long)(c.launches - c0.launches), launched);
	ok(mem_free(p), "cuMemFree");
	return 0;
}

static const char *lib_path;

/* Runs the child for `mode`; checks that its stderr has the legacy line or not, and the line that
 * says work left one stream order or not. */
static void expect(const char *mode, int legacy, int unordered)
{
	const char *args[] = { "--child", NULL, NULL, NULL };
	static const char *const env[] = { "GPUPOOL_LOG=debug", NULL };
	struct e2e_child ch;
	char buf[128];

	args[1] = lib_path;
	args[2] = mode;
	if (e2e_run_self(args, env, 15000, &ch) != 0)
		e2e_fail("could not start the child");
	if (ch.timed_out || !WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0)
		e2e_fail("%s: the child %s; its stderr: \"%.2000s\"", mode,
			 e2e_status_text(ch.status, buf, sizeof(buf)), ch.err);
	e2e_check((strstr(ch.err, LEGACY_LINE) != NULL) == legacy,
		  "%s: the work hook %s a default stream", mode, legacy ? "saw" : "did not count");
	e2e_check((strstr(ch.err, UNORDERED_LINE) != NULL) == unordered,
		  "%s: work %s one stream order", mode, unordered ? "left" : "stayed in");
}

int main(int argc, char **argv)
{
	if (argc > 3 && strcmp(argv[1], "--child") == 0) {
		e2e_start("e2e_work child");
		return child(argv[2], argv[3]);
	}
	e2e_start("e2e_work");
	if (argc < 2)
		e2e_fail("usage: e2e_work <libcuda.so.1>");
	lib_path = argv[1];
	expect("none", 0, 0);
	expect("legacy", 1, 0);
	expect("legacy-handle", 1, 0);
	expect("memset", 1, 0);
	expect("ptsz", 1, 1);
	expect("per-thread-handle", 1, 1);
	expect("stream", 0, 1);
	expect("refused", 0, 0);
	printf("PASS e2e_work\n");
	return 0;
}
