/* driver_proc.c — cuGetProcAddress of the stand-in driver: base name and CUDA version to the
 * entry point, as the real runtime asks for every driver function it uses. The table lists each
 * base name's variants by the version that introduced them (cudaTypedefs.h: PFN_cuMemAlloc_v3020
 * is cuMemAlloc_v2) and, where there is one, the per-thread default stream flavour. Only the
 * variants this driver has are listed: an older version than the first is not sufficient. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

/* Any function, to be told apart by the caller: void (*)(void) converts to and from every
 * function pointer type (the one cast -Wcast-function-type allows for the purpose). */
typedef void (*proc_fn)(void);
#define FN(f) ((proc_fn)(f))

/* The per-thread flavours came with CUDA 7.0: asked for an older version, the legacy one. */
#define PER_THREAD_SINCE 7000

struct proc_variant {
	int version;         /* the first CUDA version that gets it */
	proc_fn fn;          /* legacy default stream (or no stream at all) */
	proc_fn per_thread;  /* the _ptsz/_ptds flavour, NULL if none */
};

struct proc_entry {
	const char *name;
	struct proc_variant v[2]; /* by version, ascending; v[1].fn NULL if only one */
};

static const struct proc_entry table[] = {
	{ "cuGetProcAddress", { { 11030, FN(cuGetProcAddress), NULL },
				{ 12000, FN(cuGetProcAddress_v2), NULL } } },
	{ "cuInit", { { 2000, FN(cuInit), NULL } } },
	{ "cuDriverGetVersion", { { 2020, FN(cuDriverGetVersion), NULL } } },
	{ "cuDeviceGet", { { 2000, FN(cuDeviceGet), NULL } } },
	{ "cuDeviceGetCount", { { 2000, FN(cuDeviceGetCount), NULL } } },
	{ "cuDeviceGetAttribute", { { 2000, FN(cuDeviceGetAttribute), NULL } } },
	{ "cuDeviceGetName", { { 2000, FN(cuDeviceGetName), NULL } } },
	{ "cuDeviceCanAccessPeer", { { 4000, FN(cuDeviceCanAccessPeer), NULL } } },
	{ "cuDeviceTotalMem", { { 3020, FN(cuDeviceTotalMem_v2), NULL } } },
	{ "cuDeviceGetUuid", { { 9020, FN(cuDeviceGetUuid), NULL },
			       { 11040, FN(cuDeviceGetUuid_v2), NULL } } },
	/* contexts */
	{ "cuCtxGetCurrent", { { 4000, FN(cuCtxGetCurrent), NULL } } },
	{ "cuCtxSetCurrent", { { 4000, FN(cuCtxSetCurrent), NULL } } },
	{ "cuCtxGetDevice", { { 2000, FN(cuCtxGetDevice), NULL },
			      { 13000, FN(cuCtxGetDevice_v2), NULL } } },
	{ "cuCtxPushCurrent", { { 4000, FN(cuCtxPushCurrent_v2), NULL } } },
	{ "cuCtxPopCurrent", { { 4000, FN(cuCtxPopCurrent_v2), NULL } } },
	{ "cuCtxSynchronize", { { 2000, FN(cuCtxSynchronize), NULL },
				{ 13000, FN(cuCtxSynchronize_v2), NULL } } },
	{ "cuCtxCreate", { { 3020, FN(cuCtxCreate_v2), NULL }, { 12050, FN(cuCtxCreate_v4), NULL } } },
	{ "cuCtxDestroy", { { 4000, FN(cuCtxDestroy_v2), NULL } } },
	{ "cuDevicePrimaryCtxRetain", { { 7000, FN(cuDevicePrimaryCtxRetain), NULL } } },
	{ "cuDevicePrimaryCtxRelease", { { 11000, FN(cuDevicePrimaryCtxRelease_v2), NULL } } },
	{ "cuDevicePrimaryCtxReset", { { 11000, FN(cuDevicePrimaryCtxReset_v2), NULL } } },
	{ "cuDevicePrimaryCtxGetState", { { 7000, FN(cuDevicePrimaryCtxGetState), NULL } } },
	/* memory */
	{ "cuMemAlloc", { { 3020, FN(cuMemAlloc_v2), NULL } } },
	{ "cuMemFree", { { 3020, FN(cuMemFree_v2), NULL } } },
	{ "cuMemGetInfo", { { 3020, FN(cuMemGetInfo_v2), NULL } } },
	{ "cuMemAllocManaged", { { 6000, FN(cuMemAllocManaged), NULL } } },
	{ "cuMemAllocPitch", { { 3020, FN(cuMemAllocPitch_v2), NULL } } },
	{ "cuMemAllocAsync", { { 11020, FN(cuMemAllocAsync), FN(cuMemAllocAsync_ptsz) } } },
	{ "cuMemFreeAsync", { { 11020, FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz) } } },
	{ "cuMemsetD8", { { 3020, FN(cuMemsetD8_v2), FN(cuMemsetD8_v2_ptds) } } },
	{ "cuMemsetD8Async", { { 3020, FN(cuMemsetD8Async), FN(cuMemsetD8Async_ptsz) } } },
	{ "cuMemcpy", { { 4000, FN(cuMemcpy), FN(cuMemcpy_ptds) } } },
	{ "cuMemcpyAsync", { { 4000, FN(cuMemcpyAsync), FN(cuMemcpyAsync_ptsz) } } },
	{ "cuMemHostAlloc", { { 2020, FN(cuMemHostAlloc), NULL } } },
	{ "cuMemFreeHost", { { 2000, FN(cuMemFreeHost), NULL } } },
	{ "cuMemGetAddressRange", { { 3020, FN(cuMemGetAddressRange_v2), NULL } } },
	{ "cuIpcGetMemHandle", { { 4010, FN(cuIpcGetMemHandle), NULL } } },
	{ "cuPointerGetAttribute", { { 4000, FN(cuPointerGetAttribute), NULL } } },
	{ "cuPointerGetAttributes", { { 7000, FN(cuPointerGetAttributes), NULL } } },
	/* virtual memory management (driver_vmm.c) */
	{ "cuMemGetAllocationGranularity", { { 10020, FN(cuMemGetAllocationGranularity), NULL } } },
	{ "cuMemCreate", { { 10020, FN(cuMemCreate), NULL } } },
	{ "cuMemRelease", { { 10020, FN(cuMemRelease), NULL } } },
	{ "cuMemAddressReserve", { { 10020, FN(cuMemAddressReserve), NULL } } },
	{ "cuMemAddressFree", { { 10020, FN(cuMemAddressFree), NULL } } },
	{ "cuMemMap", { { 10020, FN(cuMemMap), NULL } } },
	{ "cuMemUnmap", { { 10020, FN(cuMemUnmap), NULL } } },
	{ "cuMemSetAccess", { { 10020, FN(cuMemSetAccess), NULL } } },
	{ "cuMemGetAccess", { { 10020, FN(cuMemGetAccess), NULL } } },
	{ "cuMemPoolTrimTo", { { 11020, FN(cuMemPoolTrimTo), NULL } } },
	{ "cuDeviceGetDefaultMemPool", { { 11020, FN(cuDeviceGetDefaultMemPool), NULL } } },
	{ "cuMemPoolGetAttribute", { { 11020, FN(cuMemPoolGetAttribute), NULL } } },
	{ "cuMemPoolSetAttribute", { { 11020, FN(cuMemPoolSetAttribute), NULL } } },
	/* streams */
	{ "cuStreamCreate", { { 2000, FN(cuStreamCreate), NULL } } },
	{ "cuStreamCreateWithPriority", { { 5050, FN(cuStreamCreateWithPriority), NULL } } },
	{ "cuStreamDestroy", { { 4000, FN(cuStreamDestroy_v2), NULL } } },
	{ "cuStreamQuery", { { 2000, FN(cuStreamQuery), FN(cuStreamQuery_ptsz) } } },
	{ "cuStreamSynchronize", { { 2000, FN(cuStreamSynchronize), FN(cuStreamSynchronize_ptsz) } } },
	{ "cuStreamWaitEvent", { { 3020, FN(cuStreamWaitEvent), FN(cuStreamWaitEvent_ptsz) } } },
	{ "cuStreamBeginCapture", { { 10010, FN(cuStreamBeginCapture_v2),
				      FN(cuStreamBeginCapture_v2_ptsz) } } },
	{ "cuStreamBeginCaptureToGraph", { { 12030, FN(cuStreamBeginCaptureToGraph),
					     FN(cuStreamBeginCaptureToGraph_ptsz) } } },
	{ "cuStreamEndCapture", { { 10000, FN(cuStreamEndCapture), FN(cuStreamEndCapture_ptsz) } } },
	{ "cuStreamIsCapturing", { { 10000, FN(cuStreamIsCapturing), FN(cuStreamIsCapturing_ptsz) } } },
	{ "cuThreadExchangeStreamCaptureMode", { { 10010, FN(cuThreadExchangeStreamCaptureMode),
						   NULL } } },
	/* events */
	{ "cuEventCreate", { { 2000, FN(cuEventCreate), NULL } } },
	{ "cuEventDestroy", { { 4000, FN(cuEventDestroy_v2), NULL } } },
	{ "cuEventRecord", { { 2000, FN(cuEventRecord), FN(cuEventRecord_ptsz) } } },
	{ "cuEventQuery", { { 2000, FN(cuEventQuery), NULL } } },
	{ "cuEventSynchronize", { { 2000, FN(cuEventSynchronize), NULL } } },
	/* graphs */
	{ "cuGraphCreate", { { 10000, FN(cuGraphCreate), NULL } } },
	{ "cuGraphDestroy", { { 10000, FN(cuGraphDestroy), NULL } } },
	{ "cuGraphInstantiateWithFlags", { { 11040, FN(cuGraphInstantiateWithFlags), NULL } } },
	{ "cuGraphInstantiateWithParams", { { 12000, FN(cuGraphInstantiateWithParams),
					      FN(cuGraphInstantiateWithParams_ptsz) } } },
	{ "cuGraphExecDestroy", { { 10000, FN(cuGraphExecDestroy), NULL } } },
	{ "cuGraphClone", { { 10000, FN(cuGraphClone), NULL } } },
	{ "cuGraphAddChildGraphNode", { { 10000, FN(cuGraphAddChildGraphNode), NULL } } },
	{ "cuGraphExecChildGraphNodeSetParams", { { 11010, FN(cuGraphExecChildGraphNodeSetParams),
						    NULL } } },
	{ "cuGraphExecUpdate", { { 12000, FN(cuGraphExecUpdate_v2), NULL } } },
	{ "cuGraphLaunch", { { 10000, FN(cuGraphLaunch), FN(cuGraphLaunch_ptsz) } } },
	/* launches */
	{ "cuLaunchKernel", { { 4000, FN(cuLaunchKernel), FN(cuLaunchKernel_ptsz) } } },
	{ "cuLaunchHostFunc", { { 10000, FN(cuLaunchHostFunc), FN(cuLaunchHostFunc_ptsz) } } },
	/* the checkpoint API (driver_ckpt.c) */
	{ "cuCheckpointProcessGetState", { { 12080, FN(cuCheckpointProcessGetState), NULL } } },
	{ "cuCheckpointProcessLock", { { 12080, FN(cuCheckpointProcessLock), NULL } } },
	{ "cuCheckpointProcessCheckpoint", { { 12080, FN(cuCheckpointProcessCheckpoint), NULL } } },
	{ "cuCheckpointProcessRestore", { { 12080, FN(cuCheckpointProcessRestore), NULL } } },
	{ "cuCheckpointProcessUnlock", { { 12080, FN(cuCheckpointProcessUnlock), NULL } } },
};

static const struct proc_entry *find(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	return NULL;
}

/* The newest variant `version` gets, NULL if it predates them all. */
static const struct proc_variant *variant(const struct proc_entry *e, int version)
{
	const struct proc_variant *best = NULL;
	size_t i;

	for (i = 0; i < sizeof(e->v) / sizeof(e->v[0]) && e->v[i].fn != NULL; i++)
		if (e->v[i].version <= version)
			best = &e->v[i];
	return best;
}

static int wants_per_thread(cuuint64_t flags)
{
	return (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) &&
	       !(flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM);
}

/* STANDIN_PROC_HIDDEN_MEMFREE=1 (read at each lookup): "cuMemFree" is answered with this
 * forwarder, which is not an exported symbol, as a driver with internal entry points might. */
static CUresult hidden_mem_free(CUdeviceptr dptr)
{
	return cuMemFree_v2(dptr);
}

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			 CUdriverProcAddressQueryResult *symbolStatus)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	const struct proc_entry *e;
	const struct proc_variant *v = NULL;
	proc_fn fn = NULL;
	CUresult rc = CUDA_ERROR_NOT_FOUND;

	if (symbol == NULL || pfn == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	e = find(symbol);
	if (e != NULL) {
		v = variant(e, cudaVersion);
		status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	}
	if (v != NULL) {
		fn = v->fn;
		if (v->per_thread != NULL && wants_per_thread(flags) && cudaVersion >= PER_THREAD_SINCE)
			fn = v->per_thread;
		status = CU_GET_PROC_ADDRESS_SUCCESS;
		rc = CUDA_SUCCESS;
	}
	if (fn != NULL && strcmp(symbol, "cuMemFree") == 0 && getenv("STANDIN_PROC_HIDDEN_MEMFREE") != NULL)
		fn = (proc_fn)hidden_mem_free;
	memcpy(pfn, &fn, sizeof(fn)); /* a function pointer through void *: by its bytes */
out:
	if (symbolStatus != NULL)
		*symbolStatus = status;
	return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* The CUDA 11.3 signature, without the status. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}
