/* runtime.h — what the files of the stand-in runtime (runtime*.c, libcudart.so.13) share: the one
 * table of driver functions it got through cuGetProcAddress (never by symbol), the prologue of an
 * entry point (the driver reached, this thread's device's primary context current) and the
 * thread's last error. Internal: standin.h is the API. */
#ifndef STANDIN_RUNTIME_H
#define STANDIN_RUNTIME_H

#include <cudaTypedefs.h> /* cuda.h, and the PFN_ types: the versions asked for */
#include <cuda_runtime_api.h>
#include <stdint.h>

/* The version the runtime asks the driver for: CUDA 13.0's entry points. */
#define RT_CUDA_VERSION 13000

/* Every driver function the runtime uses. The _ptsz/_ptds ones were asked for with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, for the runtime's own per-thread entry points. */
struct rt_driver {
	PFN_cuInit_v2000 Init;
	PFN_cuDriverGetVersion_v2020 DriverGetVersion;
	PFN_cuDeviceGetCount_v2000 DeviceGetCount;
	PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
	PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
	PFN_cuCtxSynchronize_v13000 CtxSynchronize;
	PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
	PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
	PFN_cuDevicePrimaryCtxReset_v11000 DevicePrimaryCtxReset;
	PFN_cuMemAlloc_v3020 MemAlloc;
	PFN_cuMemFree_v3020 MemFree;
	PFN_cuMemGetInfo_v3020 MemGetInfo;
	PFN_cuIpcGetMemHandle_v4010 IpcGetMemHandle;
	PFN_cuMemAllocAsync_v11020 MemAllocAsync;
	PFN_cuMemFreeAsync_v11020 MemFreeAsync;
	PFN_cuMemsetD8_v3020 MemsetD8;
	PFN_cuMemsetD8_v7000_ptds MemsetD8_ptds;
	PFN_cuMemsetD8Async_v3020 MemsetD8Async;
	PFN_cuMemsetD8Async_v7000_ptsz MemsetD8Async_ptsz;
	PFN_cuMemcpy_v4000 Memcpy;
	PFN_cuMemcpy_v7000_ptds Memcpy_ptds;
	PFN_cuMemcpyAsync_v4000 MemcpyAsync;
	PFN_cuMemcpyAsync_v7000_ptsz MemcpyAsync_ptsz;
	PFN_cuPointerGetAttribute_v4000 PointerGetAttribute;
	PFN_cuMemPoolTrimTo_v11020 MemPoolTrimTo;
	PFN_cuDeviceGetDefaultMemPool_v11020 DeviceGetDefaultMemPool;
	PFN_cuMemPoolSetAttribute_v11020 MemPoolSetAttribute;
	PFN_cuStreamCreate_v2000 StreamCreate;
	PFN_cuStreamCreateWithPriority_v5050 StreamCreateWithPriority;
	PFN_cuStreamDestroy_v4000 StreamDestroy;
	PFN_cuStreamQuery_v2000 StreamQuery;
	PFN_cuStreamSynchronize_v2000 StreamSynchronize;
	PFN_cuStreamSynchronize_v7000_ptsz StreamSynchronize_ptsz;
	PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
	PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
	PFN_cuStreamBeginCaptureToGraph_v12030 StreamBeginCaptureToGraph;
	PFN_cuStreamEndCapture_v10000 StreamEndCapture;
	PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
	PFN_cuThreadExchangeStreamCaptureMode_v10010 ThreadExchangeStreamCaptureMode;
	PFN_cuEventCreate_v2000 EventCreate;
	PFN_cuEventDestroy_v4000 EventDestroy;
	PFN_cuEventRecord_v2000 EventRecord;
	PFN_cuEventQuery_v2000 EventQuery;
	PFN_cuEventSynchronize_v2000 EventSynchronize;
	PFN_cuGraphCreate_v10000 GraphCreate;
	PFN_cuGraphDestroy_v10000 GraphDestroy;
	PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiateWithFlags;
	PFN_cuGraphInstantiateWithParams_v12000 GraphInstantiateWithParams;
	PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
	PFN_cuGraphClone_v10000 GraphClone;
	PFN_cuGraphAddChildGraphNode_v10000 GraphAddChildGraphNode;
	PFN_cuGraphExecChildGraphNodeSetParams_v11010 GraphExecChildGraphNodeSetParams;
	PFN_cuGraphExecUpdate_v12000 GraphExecUpdate;
	PFN_cuGraphLaunch_v10000 GraphLaunch;
	PFN_cuGraphLaunch_v10000_ptsz GraphLaunch_ptsz;
	PFN_cuLaunchKernel_v4000 LaunchKernel;
	PFN_cuLaunchKernel_v7000_ptsz LaunchKernel_ptsz;
	PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
	PFN_cuLaunchHostFunc_v10000_ptsz LaunchHostFunc_ptsz;
};

extern struct rt_driver drv;

/* runtime.c */
cudaError_t ready(void);          /* the driver reached and initialised; not unloading */
cudaError_t use_device(void);     /* ready, and this thread's device's context current */
cudaError_t result(cudaError_t rc); /* notes a failure as the thread's last error */
cudaError_t from_cu(CUresult rc); /* the runtime's error for a driver error */
cudaError_t cu_result(CUresult rc); /* result(from_cu(rc)) */
int rt_device(void);              /* this thread's current device */
void rt_set_device(int device);
int rt_device_count(void);
cudaError_t rt_last_error(int clear);
const char *rt_error_name(cudaError_t error);
const char *rt_error_string(cudaError_t error);

/* runtime_control.c: the driver's control API, found in its handle. */
void ctl_resolve(void *driver);
int ctl_unloading(void);
int ctl_inject(int kind);

/* The driver's pointers and handles as the runtime's. */
static inline CUdeviceptr dptr(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

#endif
