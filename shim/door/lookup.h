/* lookup.h — the real CUDA driver, found once in the libcuda.so.1 the process has loaded (never
 * loaded by us), into one typed table: the functions our driver entry points stand in front of,
 * and the ones the shim calls itself (fences, contexts, releases). A missing one stays NULL and
 * its callers pass through or return the driver's own "not found" error. */
#ifndef GPUPOOL_CU_H
#define GPUPOOL_CU_H

#include <cuda.h>

struct gp_cu {
	/* What the pool needs, behind our entry points (handout.c, driver.c). */
	CUresult (*MemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*MemFree_v2)(CUdeviceptr);
	CUresult (*MemGetInfo_v2)(size_t *, size_t *);
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*MemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			      unsigned long long);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamCreateWithPriority)(CUstream *, unsigned, int);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamDestroy_v2)(CUstream);
	CUresult (*StreamBeginCapture_v2)(CUstream, CUstreamCaptureMode);
	CUresult (*StreamBeginCapture_v2_ptsz)(CUstream, CUstreamCaptureMode);
	CUresult (*StreamBeginCaptureToGraph)(CUstream, CUgraph, const CUgraphNode *,
					      const CUgraphEdgeData *, size_t, CUstreamCaptureMode);
	CUresult (*StreamBeginCaptureToGraph_ptsz)(CUstream, CUgraph, const CUgraphNode *,
						   const CUgraphEdgeData *, size_t,
						   CUstreamCaptureMode);
	CUresult (*StreamEndCapture)(CUstream, CUgraph *);
	CUresult (*StreamEndCapture_ptsz)(CUstream, CUgraph *);
	CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*GraphInstantiateWithParams)(CUgraphExec *, CUgraph,
					       CUDA_GRAPH_INSTANTIATE_PARAMS *);
	CUresult (*GraphInstantiateWithParams_ptsz)(CUgraphExec *, CUgraph,
						    CUDA_GRAPH_INSTANTIATE_PARAMS *);
	CUresult (*GraphExecDestroy)(CUgraphExec);
	CUresult (*GraphDestroy)(CUgraph);
	CUresult (*GraphClone)(CUgraph *, CUgraph);
	CUresult (*GraphAddChildGraphNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
					   CUgraph);
	CUresult (*GraphExecChildGraphNodeSetParams)(CUgraphExec, CUgraphNode, CUgraph);
	CUresult (*GraphExecUpdate_v2)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
	CUresult (*DevicePrimaryCtxReset_v2)(CUdevice);
	CUresult (*DevicePrimaryCtxRelease_v2)(CUdevice);
	CUresult (*GraphInstantiate_v2)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
	CUresult (*CtxCreate_v2)(CUcontext *, unsigned, CUdevice);
	CUresult (*CtxCreate_v3)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice);
	CUresult (*CtxCreate_v4)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
	CUresult (*CtxDestroy_v2)(CUcontext);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxPushCurrent_v2)(CUcontext);
	/* Work on a per-thread default stream: seeing one means the work is not in one order. */
	CUresult (*LaunchKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				      unsigned, unsigned, CUstream, void **, void **);
	CUresult (*LaunchKernelEx_ptsz)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*LaunchCooperativeKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned,
						 unsigned, unsigned, unsigned, unsigned, CUstream,
						 void **);
	CUresult (*LaunchHostFunc_ptsz)(CUstream, CUhostFn, void *);
	CUresult (*GraphLaunch_ptsz)(CUgraphExec, CUstream);
	CUresult (*Memcpy_ptds)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*MemcpyAsync_ptsz)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyHtoD_v2_ptds)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyDtoH_v2_ptds)(void *, CUdeviceptr, size_t);
	CUresult (*MemcpyDtoD_v2_ptds)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*MemcpyHtoDAsync_v2_ptsz)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemcpyDtoHAsync_v2_ptsz)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyDtoDAsync_v2_ptsz)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemsetD8_v2_ptds)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemsetD32_v2_ptds)(CUdeviceptr, unsigned, size_t);
	CUresult (*MemsetD8Async_ptsz)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*MemsetD32Async_ptsz)(CUdeviceptr, unsigned, size_t, CUstream);
	/* What the shim calls itself. */
	CUresult (*GetProcAddress_v2)(const char *, void **, int, cuuint64_t,
				      CUdriverProcAddressQueryResult *);
	CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*CtxGetCurrent)(CUcontext *);
	CUresult (*CtxGetDevice)(CUdevice *);
	CUresult (*CtxPopCurrent_v2)(CUcontext *);
	CUresult (*CtxSynchronize)(void);
	CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
	CUresult (*EventCreate)(CUevent *, unsigned);
	CUresult (*EventDestroy_v2)(CUevent);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventQuery)(CUevent);
	CUresult (*EventSynchronize)(CUevent);
	CUresult (*StreamQuery)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
	/* The virtual memory API, for VMM-backed blocks (vmm.c). */
	CUresult (*MemRelease)(CUmemGenericAllocationHandle);
	CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
				      unsigned long long);
	CUresult (*MemAddressFree)(CUdeviceptr, size_t);
	CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			   unsigned long long);
	CUresult (*MemUnmap)(CUdeviceptr, size_t);
	CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
						CUmemAllocationGranularity_flags);
	CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
	CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
};

extern struct gp_cu gp_cu;

/* Fill the table from the driver the process has loaded, once it has one (thread-safe; cheap
 * after the first success). 0, or -1 when no libcuda.so.1 is loaded yet. */
int gp_cu_resolve(void);

/* 1 (after saying so once) when the real function in `slot` (a field of gp_cu, for the driver
 * symbol `name`) cannot be found: the caller returns CUDA_ERROR_NOT_FOUND, as a lookup would. */
int gp_cu_missing(void **slot, const char *name);
#define GP_MISSING(field) gp_cu_missing((void **)&gp_cu.field, "cu" #field)

/* For code that may run while a sanitizer's runtime initialises (before its shadow memory
 * exists): no instrumentation. */
#define GP_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* Our constructor has run: from now on the next dlsym may be looked for among the loaded
 * objects (another tool's hook after ours). */
void gp_cu_constructed(void);
/* The next dlsym after ours (handout.c): another tool's hook loaded after us, else libc's; NULL if
 * none. */
void *(*gp_real_dlsym_fn(void))(void *, const char *);
void *gp_real_dlsym(void *handle, const char *name);
/* Whether `p` points into this library (then it is one of our entry points, never the real). */
int gp_is_ours(const void *p);

#endif
