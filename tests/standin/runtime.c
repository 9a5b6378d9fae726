/* runtime.c — how the stand-in runtime reaches its driver, as the real one does: at the first
 * call it loads the libcuda.so.1 beside it, takes cuGetProcAddress_v2 with dlsym, asks it for
 * "cuGetProcAddress", and asks the function that came back for every other driver function
 * (never a symbol of its own choosing: whatever hooks dlsym or cuGetProcAddress sees them all).
 * Also the thread's state the runtime keeps: its device, its context made current, its last error. */
#define _GNU_SOURCE
#include "runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_MAX_DEVICES 64

struct rt_driver drv;

static struct {
	int found;            /* every driver function was resolved */
	_Atomic int init_rc;  /* cuInit's answer (a CUresult) */
	_Atomic int ndevices;
	PFN_cuGetProcAddress_v12000 get_proc;
	_Atomic(CUcontext) primary[RT_MAX_DEVICES]; /* retained once per device, kept */
} rt;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static _Thread_local int cur_device;
static _Thread_local cudaError_t last_error;

/* ---- reaching the driver ---- */

/* Which function each slot of drv holds: base name, and whether the per-thread flavour. */
#define LEGACY(name, slot) { name, 0, offsetof(struct rt_driver, slot) }
#define PER_THREAD(name, slot) { name, 1, offsetof(struct rt_driver, slot) }

static const struct {
	const char *name;
	int per_thread;
	size_t off;
} wanted[] = {
	LEGACY("cuInit", Init),
	LEGACY("cuDriverGetVersion", DriverGetVersion),
	LEGACY("cuDeviceGetCount", DeviceGetCount),
	LEGACY("cuCtxGetCurrent", CtxGetCurrent),
	LEGACY("cuCtxSetCurrent", CtxSetCurrent),
	LEGACY("cuCtxSynchronize", CtxSynchronize),
	LEGACY("cuDevicePrimaryCtxRetain", DevicePrimaryCtxRetain),
	LEGACY("cuDevicePrimaryCtxRelease", DevicePrimaryCtxRelease),
	LEGACY("cuDevicePrimaryCtxReset", DevicePrimaryCtxReset),
	LEGACY("cuMemAlloc", MemAlloc),
	LEGACY("cuMemFree", MemFree),
	LEGACY("cuMemGetInfo", MemGetInfo),
	LEGACY("cuIpcGetMemHandle", IpcGetMemHandle),
	LEGACY("cuMemAllocAsync", MemAllocAsync),
	LEGACY("cuMemFreeAsync", MemFreeAsync),
	LEGACY("cuMemsetD8", MemsetD8),
	PER_THREAD("cuMemsetD8", MemsetD8_ptds),
	LEGACY("cuMemsetD8Async", MemsetD8Async),
	PER_THREAD("cuMemsetD8Async", MemsetD8Async_ptsz),
	LEGACY("cuMemcpy", Memcpy),
	PER_THREAD("cuMemcpy", Memcpy_ptds),
	LEGACY("cuMemcpyAsync", MemcpyAsync),
	PER_THREAD("cuMemcpyAsync", MemcpyAsync_ptsz),
	LEGACY("cuPointerGetAttribute", PointerGetAttribute),
	LEGACY("cuMemPoolTrimTo", MemPoolTrimTo),
	LEGACY("cuDeviceGetDefaultMemPool", DeviceGetDefaultMemPool),
	LEGACY("cuMemPoolSetAttribute", MemPoolSetAttribute),
	LEGACY("cuStreamCreate", StreamCreate),
	LEGACY("cuStreamCreateWithPriority", StreamCreateWithPriority),
	LEGACY("cuStreamDestroy", StreamDestroy),
	LEGACY("cuStreamQuery", StreamQuery),
	LEGACY("cuStreamSynchronize", StreamSynchronize),
	PER_THREAD("cuStreamSynchronize", StreamSynchronize_ptsz),
	LEGACY("cuStreamWaitEvent", StreamWaitEvent),
	LEGACY("cuStreamBeginCapture", StreamBeginCapture),
	LEGACY("cuStreamBeginCaptureToGraph", StreamBeginCaptureToGraph),
	LEGACY("cuStreamEndCapture", StreamEndCapture),
	LEGACY("cuStreamIsCapturing", StreamIsCapturing),
	LEGACY("cuThreadExchangeStreamCaptureMode", ThreadExchangeStreamCaptureMode),
	LEGACY("cuEventCreate", EventCreate),
	LEGACY("cuEventDestroy", EventDestroy),
	LEGACY("cuEventRecord", EventRecord),
	LEGACY("cuEventQuery", EventQuery),
	LEGACY("cuEventSynchronize", EventSynchronize),
	LEGACY("cuGraphCreate", GraphCreate),
	LEGACY("cuGraphDestroy", GraphDestroy),
	LEGACY("cuGraphInstantiateWithFlags", GraphInstantiateWithFlags),
	LEGACY("cuGraphInstantiateWithParams", GraphInstantiateWithParams),
	LEGACY("cuGraphExecDestroy", GraphExecDestroy),
	LEGACY("cuGraphClone", GraphClone),
	LEGACY("cuGraphAddChildGraphNode", GraphAddChildGraphNode),
	LEGACY("cuGraphExecChildGraphNodeSetParams", GraphExecChildGraphNodeSetParams),
	LEGACY("cuGraphExecUpdate", GraphExecUpdate),
	LEGACY("cuGraphLaunch", GraphLaunch),
	PER_THREAD("cuGraphLaunch", GraphLaunch_ptsz),
	LEGACY("cuLaunchKernel", LaunchKernel),
	PER_THREAD("cuLaunchKernel", LaunchKernel_ptsz),
	LEGACY("cuLaunchHostFunc", LaunchHostFunc),
	PER_THREAD("cuLaunchHostFunc", LaunchHostFunc_ptsz),
};

/* The stand-in libcuda.so.1 beside this library, loaded as the real runtime loads the driver;
 * the static flavour, linked into a program, has its path built in. */
static void *load_driver(void)
{
#ifdef STANDIN_DRIVER
	void *sh = dlopen(STANDIN_DRIVER, RTLD_NOW | RTLD_GLOBAL);

	if (sh == NULL)
		fprintf(stderr, "standin: %s not loaded: %s\n", STANDIN_DRIVER, dlerror());
	return sh;
#else
	static const char name[] = "libcuda.so.1";
	char path[4096];
	Dl_info self;
	const char *slash;
	size_t dir;
	void *h;

	if (dladdr((void *)&rt, &self) == 0 || self.dli_fname == NULL ||
	    (slash = strrchr(self.dli_fname, '/')) == NULL)
		return NULL;
	dir = (size_t)(slash - self.dli_fname) + 1;
	if (dir + sizeof(name) > sizeof(path))
		return NULL;
	memcpy(path, self.dli_fname, dir);
	memcpy(path + dir, name, sizeof(name));
	h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL)
		fprintf(stderr, "standin: %s not loaded: %s\n", path, dlerror());
	return h;
#endif
}

/* The driver's own cuGetProcAddress, from the one it exports by name. */
static int resolve_get_proc(void *h)
{
	PFN_cuGetProcAddress_v12000 first;
	CUdriverProcAddressQueryResult status;
	void *sym = dlsym(h, "cuGetProcAddress_v2");
	void *fn = NULL;

	if (sym == NULL) {
		fprintf(stderr, "standin: the driver has no cuGetProcAddress_v2\n");
		return -1;
	}
	memcpy(&first, &sym, sizeof(first)); /* dlsym's object pointer: by its bytes */
	if (first("cuGetProcAddress", &fn, RT_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
		    CUDA_SUCCESS ||
	    fn == NULL) {
		fprintf(stderr, "standin: cuGetProcAddress_v2 does not give cuGetProcAddress\n");
		return -1;
	}
	memcpy(&rt.get_proc, &fn, sizeof(rt.get_proc));
	return 0;
}

static int resolve_table(void)
{
	CUdriverProcAddressQueryResult status;
	cuuint64_t flags;
	size_t i;
	void *fn;

	for (i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++) {
		flags = wanted[i].per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
					     : CU_GET_PROC_ADDRESS_DEFAULT;
		fn = NULL;
		if (rt.get_proc(wanted[i].name, &fn, RT_CUDA_VERSION, flags, &status) != CUDA_SUCCESS ||
		    fn == NULL) {
			fprintf(stderr, "standin: the driver does not give %s%s (status %d)\n",
				wanted[i].name, wanted[i].per_thread ? " (per-thread)" : "",
				(int)status);
			return -1;
		}
		memcpy((char *)&drv + wanted[i].off, &fn, sizeof(fn));
	}
	return 0;
}

/* cuInit, and the devices it found; again after a failure that may pass (unloading). */
static CUresult init_driver(void)
{
	CUresult rc = drv.Init(0);
	int n = 0;

	if (rc == CUDA_SUCCESS && drv.DeviceGetCount(&n) != CUDA_SUCCESS)
		n = 0;
	atomic_store(&rt.ndevices, n);
	atomic_store(&rt.init_rc, (int)rc);
	return rc;
}

static void rt_init(void)
{
	void *h = load_driver();

	if (h == NULL)
		return;
	ctl_resolve(h);
	if (resolve_get_proc(h) != 0 || resolve_table() != 0)
		return;
	if (getenv("STANDIN_DRIVER_TOO_OLD") != NULL) {
		dlclose(h); /* as the real runtime does with a driver older than itself */
		return;
	}
	rt.found = 1;
	init_driver();
}

/* ---- the prologue of an entry point ---- */

/* The driver's errors are the runtime's of the same number, for every error the driver returns
 * (CUDA_ERROR_INVALID_CONTEXT is cudaErrorDeviceUninitialized, as in the real runtime). */
_Static_assert((int)CUDA_ERROR_INVALID_VALUE == (int)cudaErrorInvalidValue, "");
_Static_assert((int)CUDA_ERROR_OUT_OF_MEMORY == (int)cudaErrorMemoryAllocation, "");
_Static_assert((int)CUDA_ERROR_NOT_INITIALIZED == (int)cudaErrorInitializationError, "");
_Static_assert((int)CUDA_ERROR_DEINITIALIZED == (int)cudaErrorCudartUnloading, "");
_Static_assert((int)CUDA_ERROR_NO_DEVICE == (int)cudaErrorNoDevice, "");
_Static_assert((int)CUDA_ERROR_INVALID_DEVICE == (int)cudaErrorInvalidDevice, "");
_Static_assert((int)CUDA_ERROR_INVALID_CONTEXT == (int)cudaErrorDeviceUninitialized, "");
_Static_assert((int)CUDA_ERROR_INVALID_HANDLE == (int)cudaErrorInvalidResourceHandle, "");
_Static_assert((int)CUDA_ERROR_ILLEGAL_STATE == (int)cudaErrorIllegalState, "");
_Static_assert((int)CUDA_ERROR_NOT_FOUND == (int)cudaErrorSymbolNotFound, "");
_Static_assert((int)CUDA_ERROR_NOT_READY == (int)cudaErrorNotReady, "");
_Static_assert((int)CUDA_ERROR_LAUNCH_FAILED == (int)cudaErrorLaunchFailure, "");
_Static_assert((int)CUDA_ERROR_NOT_SUPPORTED == (int)cudaErrorNotSupported, "");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED == (int)cudaErrorStreamCaptureUnsupported, "");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_INVALIDATED == (int)cudaErrorStreamCaptureInvalidated, "");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_IMPLICIT == (int)cudaErrorStreamCaptureImplicit, "");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD == (int)cudaErrorStreamCaptureWrongThread, "");
_Static_assert((int)CUDA_ERROR_UNKNOWN == (int)cudaErrorUnknown, "");

cudaError_t from_cu(CUresult rc)
{
	return (cudaError_t)rc;
}

cudaError_t ready(void)
{
	CUresult rc;

	pthread_once(&rt_once, rt_init);
	if (!rt.found)
		return cudaErrorInsufficientDriver;
	if (ctl_unloading())
		return cudaErrorCudartUnloading;
	rc = (CUresult)atomic_load(&rt.init_rc);
	if (rc == CUDA_ERROR_DEINITIALIZED)
		rc = init_driver();
	return from_cu(rc);
}

/* The primary context of `device`, retained the first time (a race retains it twice: harmless,
 * the loser gives its reference back). */
static cudaError_t primary(int device, CUcontext *ctx)
{
	CUcontext expect = NULL;
	CUresult rc;

	if (device < 0 || device >= RT_MAX_DEVICES)
		return cudaErrorInvalidDevice;
	*ctx = atomic_load(&rt.primary[device]);
	if (*ctx != NULL)
		return cudaSuccess;
	rc = drv.DevicePrimaryCtxRetain(ctx, device);
	if (rc != CUDA_SUCCESS)
		return from_cu(rc);
	if (!atomic_compare_exchange_strong(&rt.primary[device], &expect, *ctx)) {
		drv.DevicePrimaryCtxRelease(device);
		*ctx = expect;
	}
	return cudaSuccess;
}

/* A runtime call that does work: the thread's device's primary context is current from now on,
 * as the runtime makes it (and again if the program made another one current meanwhile). */
cudaError_t use_device(void)
{
	CUcontext want, cur = NULL;
	cudaError_t rc = ready();

	if (rc != cudaSuccess)
		return rc;
	rc = primary(cur_device, &want);
	if (rc != cudaSuccess)
		return rc;
	if (drv.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want)
		return cudaSuccess;
	return from_cu(drv.CtxSetCurrent(want));
}

/* A driver function by name and CUDA version, through the driver's cuGetProcAddress as every
 * other lookup of the runtime's (the flags' and the answers' numbers are the driver's). */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
					     unsigned int cudaVersion, unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	cudaError_t rc = ready();
	CUresult cu;

	if (rc != cudaSuccess)
		return result(rc);
	if (symbol == NULL || funcPtr == NULL)
		return result(cudaErrorInvalidValue);
	*funcPtr = NULL;
	cu = rt.get_proc(symbol, funcPtr, (int)cudaVersion, (cuuint64_t)flags, &status);
	if (driverStatus != NULL)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)status;
	if (cu == CUDA_ERROR_NOT_FOUND)
		return result(cudaErrorSymbolNotFound);
	return cu_result(cu);
}

/* Failed calls set the calling thread's last error, like the runtime (cudaErrorNotReady is a
 * status, not an error). */
cudaError_t result(cudaError_t rc)
{
	if (rc != cudaSuccess && rc != cudaErrorNotReady)
		last_error = rc;
	return rc;
}

cudaError_t cu_result(CUresult rc)
{
	return result(from_cu(rc));
}

cudaError_t rt_last_error(int clear)
{
	cudaError_t rc = last_error;

	if (clear)
		last_error = cudaSuccess;
	return rc;
}

int rt_device(void)
{
	return cur_device;
}

void rt_set_device(int device)
{
	cur_device = device;
}

int rt_device_count(void)
{
	return atomic_load(&rt.ndevices);
}

/* ---- error names ---- */

static const struct {
	cudaError_t code;
	const char *name;
	const char *text;
} errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down" },
	{ cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure" },
	{ cudaErrorUnknown, "cudaErrorUnknown", "unknown error" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error" },
	{ cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
	  "CUDA driver version is insufficient for CUDA runtime version" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorIllegalState, "cudaErrorIllegalState",
	  "the operation cannot be performed in the present state" },
	{ cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
	{ cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
	  "operation not permitted when stream is capturing" },
	{ cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
	  "operation failed due to a previous error during capture" },
	{ cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
	  "operation would make the legacy stream depend on a capturing blocking stream" },
	{ cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
	  "attempt to terminate a thread-local capture sequence from another thread" },
};

const char *rt_error_name(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].name;
	return "unrecognized error code";
}

const char *rt_error_string(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].text;
	return "unrecognized error code";
}
