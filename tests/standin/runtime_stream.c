/* runtime_stream.c — the stand-in runtime's streams, stream capture, events, kernel launches and
 * host functions, each over its driver function (the per-thread default stream flavours over
 * the driver's _ptsz ones). The handles are the driver's own, as in the real runtime. */
#include "runtime.h"

static cudaError_t stream_create(cudaStream_t *pStream, unsigned flags, int priority)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (priority == 0)
		return cu_result(drv.StreamCreate(pStream, flags));
	return cu_result(drv.StreamCreateWithPriority(pStream, flags, priority));
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return stream_create(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return stream_create(pStream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamCreateWithPriority(pStream, flags, priority));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamDestroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamSynchronize(stream));
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamSynchronize_ptsz(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamQuery(stream));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamWaitEvent(stream, event, flags));
}

/* ---- capture: the modes and statuses have the driver's numbers ---- */

_Static_assert((int)cudaStreamCaptureModeGlobal == (int)CU_STREAM_CAPTURE_MODE_GLOBAL &&
		       (int)cudaStreamCaptureModeThreadLocal == (int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
		       (int)cudaStreamCaptureModeRelaxed == (int)CU_STREAM_CAPTURE_MODE_RELAXED,
	       "capture modes");
_Static_assert((int)cudaStreamCaptureStatusNone == (int)CU_STREAM_CAPTURE_STATUS_NONE &&
		       (int)cudaStreamCaptureStatusActive == (int)CU_STREAM_CAPTURE_STATUS_ACTIVE &&
		       (int)cudaStreamCaptureStatusInvalidated ==
			       (int)CU_STREAM_CAPTURE_STATUS_INVALIDATED,
	       "capture statuses");
_Static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData), "edge data");

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamBeginCapture(stream, (CUstreamCaptureMode)mode));
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
					  const cudaGraphNode_t *dependencies,
					  const cudaGraphEdgeData *dependencyData,
					  size_t numDependencies, enum cudaStreamCaptureMode mode)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamBeginCaptureToGraph(stream, graph, dependencies,
						       (const CUgraphEdgeData *)dependencyData,
						       numDependencies, (CUstreamCaptureMode)mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.StreamEndCapture(stream, pGraph));
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (pCaptureStatus == NULL)
		return result(cudaErrorInvalidValue);
	rc = cu_result(drv.StreamIsCapturing(stream, &status));
	*pCaptureStatus = (enum cudaStreamCaptureStatus)status;
	return rc;
}

/* The mode is the driver's, per thread: no context needed. */
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	CUstreamCaptureMode m;
	cudaError_t rc = ready();

	if (rc != cudaSuccess)
		return result(rc);
	if (mode == NULL)
		return result(cudaErrorInvalidValue);
	m = (CUstreamCaptureMode)*mode;
	rc = cu_result(drv.ThreadExchangeStreamCaptureMode(&m));
	if (rc == cudaSuccess)
		*mode = (enum cudaStreamCaptureMode)m;
	return rc;
}

/* ---- events ---- */

/* The flags have the driver's numbers (cudaEventDisableTiming is CU_EVENT_DISABLE_TIMING...). */
static cudaError_t event_create(cudaEvent_t *event, unsigned int flags)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.EventCreate(event, flags));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	return event_create(event, flags);
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return event_create(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.EventDestroy(event));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.EventRecord(event, stream));
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.EventQuery(event));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.EventSynchronize(event));
}

/* ---- launches: `func` is the driver's CUfunction (a host function here, see standin.h) ---- */

static CUfunction function_of(const void *func)
{
	return (CUfunction)(uintptr_t)func;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			     size_t sharedMem, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.LaunchKernel(function_of(func), gridDim.x, gridDim.y, gridDim.z,
					  blockDim.x, blockDim.y, blockDim.z, (unsigned)sharedMem,
					  stream, args, NULL));
}

cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				  size_t sharedMem, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.LaunchKernel_ptsz(function_of(func), gridDim.x, gridDim.y, gridDim.z,
					       blockDim.x, blockDim.y, blockDim.z,
					       (unsigned)sharedMem, stream, args, NULL));
}

/* The function types are the driver's (cudaHostFn_t is CUhostFn). */
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.LaunchHostFunc(stream, fn, userData));
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.LaunchHostFunc_ptsz(stream, fn, userData));
}
