/* driver.c — the stand-in libcuda.so.1: the few driver-API entry points the shim calls
 * (shim/driver.c), answered from the stand-in runtime's state (standin.h says how). The stand-in
 * runtime loads it at its first call, as the real runtime loads the driver. Test-only. */
#include "standin.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

static char contexts[64]; /* the contexts' handles: &contexts[device] */

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	int d = standin_drv_context();

	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = d < 0 || d >= (int)sizeof(contexts) ? NULL : (CUcontext)(void *)&contexts[d];
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	int d = standin_drv_context();

	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (d < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = d;
	return CUDA_SUCCESS;
}

static CUresult from_runtime(int rc)
{
	switch ((cudaError_t)rc) {
	case cudaSuccess: return CUDA_SUCCESS;
	case cudaErrorNotReady: return CUDA_ERROR_NOT_READY;
	case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
	case cudaErrorStreamCaptureUnsupported: return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	case cudaErrorStreamCaptureImplicit: return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	case cudaErrorCudartUnloading: return CUDA_ERROR_DEINITIALIZED;
	default: return CUDA_ERROR_UNKNOWN;
	}
}

/* A default stream means the current context's: none current, no such stream. */
static int no_context_for(CUstream stream)
{
	return (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) &&
	       standin_drv_context() < 0;
}

CUresult cuStreamQuery(CUstream stream)
{
	if (no_context_for(stream))
		return CUDA_ERROR_INVALID_CONTEXT;
	return from_runtime(standin_drv_stream_query(stream));
}

CUresult cuEventRecord(CUevent event, CUstream stream)
{
	if (no_context_for(stream))
		return CUDA_ERROR_INVALID_CONTEXT;
	return from_runtime(standin_drv_event_record(event, stream));
}

CUresult cuEventQuery(CUevent event)
{
	return from_runtime(standin_drv_event_query(event));
}
