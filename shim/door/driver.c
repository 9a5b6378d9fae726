/* driver.c — the driver entry points written by hand (table.h's GP_DRIVER_HOOKS), as the door
 * hands them out (handout.c) and as programs linked to libcuda.so.1 bind them. Each has the same
 * shape: the real function must exist (else the driver's "not found"), pass through when the pool
 * is not in play, else call the logic in shim.c or the real function and note what it did. Never
 * a decision of their own: that is shim.c's. */
#include "driver.h"
#include "gate.h"
#include "lookup.h"
#include "shim.h"
#include "vmm.h"

/* ---- memory ---- */

/* Not pooled: the allocation passed through is counted (account.h). */
GP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (GP_MISSING(MemAlloc_v2))
		return CUDA_ERROR_NOT_FOUND;
	if (!gp_shim_pooling())
		return gp_shim_cu_passed(GP_ACCOUNT_UNPOOLED, dptr, bytes,
					 gp_cu.MemAlloc_v2(dptr, bytes));
	return gp_shim_cu_alloc(dptr, bytes);
}

/* Passing through, a pointer counted as passed through is counted no more. */
GP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (GP_MISSING(MemFree_v2))
		return CUDA_ERROR_NOT_FOUND;
	if (!gp_shim_freeing())
		return gp_shim_cu_free_passed(dptr, NULL, 0);
	return gp_shim_cu_free(dptr);
}

/* A block the pool handed out comes back to it, as with cuMemFree; any other pointer is freed by
 * the driver on its stream. */
GP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	if (GP_MISSING(MemFreeAsync))
		return CUDA_ERROR_NOT_FOUND;
	if (!gp_shim_freeing())
		return gp_shim_cu_free_passed(dptr, s, 1);
	return gp_shim_cu_free_async(dptr, s, 0);
}

GP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	if (GP_MISSING(MemFreeAsync_ptsz))
		return CUDA_ERROR_NOT_FOUND;
	if (!gp_shim_freeing())
		return gp_shim_cu_free_passed(dptr, s, 2);
	return gp_shim_cu_free_async(dptr, s, 1);
}

/* Never pooled: counted as it passes (account.h). */
GP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned flags)
{
	if (GP_MISSING(MemAllocManaged))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_cu_passed(GP_ACCOUNT_MANAGED, dptr, bytes,
				 gp_cu.MemAllocManaged(dptr, bytes, flags));
}

GP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
				      size_t height, unsigned elem)
{
	CUresult rc;

	if (GP_MISSING(MemAllocPitch_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.MemAllocPitch_v2(dptr, pitch, width, height, elem);
	return gp_shim_cu_passed(GP_ACCOUNT_PITCHED, dptr,
				 rc == CUDA_SUCCESS && pitch != NULL ? *pitch * height : 0, rc);
}

GP_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
	CUresult rc;

	if (GP_MISSING(MemGetInfo_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.MemGetInfo_v2(free_b, total_b);
	if (rc == CUDA_SUCCESS && gp_shim_pooling())
		gp_shim_cu_meminfo(free_b, total_b);
	return rc;
}

/* The program's own VMM memory: noted, and counted from create to release (account.h). The
 * pool's VMM-backed blocks call the driver's own functions, never these. */
GP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	if (GP_MISSING(MemCreate))
		return CUDA_ERROR_NOT_FOUND;
	gp_shim_vmm_seen();
	return gp_shim_vmm_created(h, bytes, prop, gp_cu.MemCreate(h, bytes, prop, flags));
}

GP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	if (GP_MISSING(MemRelease))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_vmm_release(h);
}

GP_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	if (GP_MISSING(IpcGetMemHandle))
		return CUDA_ERROR_NOT_FOUND;
	if (gp_shim_active())
		gp_shim_ipc_seen((const void *)(uintptr_t)dptr);
	return gp_cu.IpcGetMemHandle(handle, dptr);
}

/* The driver answers the one physical piece a pointer lies in; inside a VMM-backed block that
 * moved pieces together (GPUPOOL_VMM), the block is the allocation the program was given. */
GP_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	CUresult rc;

	if (GP_MISSING(MemGetAddressRange_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.MemGetAddressRange_v2(pbase, psize, dptr);
	if (rc == CUDA_SUCCESS && gp_shim_active())
		gp_vmm_address_range(dptr, pbase, psize);
	return rc;
}

/* ---- streams ---- */

GP_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	CUresult rc;

	if (GP_MISSING(StreamCreate))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.StreamCreate(s, flags);
	if (rc == CUDA_SUCCESS && gp_shim_tracking())
		gp_shim_stream_created(*s, flags);
	return rc;
}

GP_EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int priority)
{
	CUresult rc;

	if (GP_MISSING(StreamCreateWithPriority))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.StreamCreateWithPriority(s, flags, priority);
	if (rc == CUDA_SUCCESS && gp_shim_tracking())
		gp_shim_stream_created(*s, flags);
	return rc;
}

/* The first version of the call, with the same arguments. */
GP_EXPORT CUresult cuStreamDestroy(CUstream s)
{
	if (GP_MISSING(StreamDestroy))
		return CUDA_ERROR_NOT_FOUND;
	if (gp_shim_tracking() && gp_shim_stream_destroying(s))
		return CUDA_SUCCESS; /* made once the captures are over */
	return gp_cu.StreamDestroy(s);
}

GP_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	if (GP_MISSING(StreamDestroy_v2))
		return CUDA_ERROR_NOT_FOUND;
	if (gp_shim_tracking() && gp_shim_stream_destroying(s))
		return CUDA_SUCCESS; /* made once the captures are over */
	return gp_cu.StreamDestroy_v2(s);
}

/* ---- captures: counted from before the begin reaches the driver (capture.c) ---- */

GP_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
	int tracked;

	if (GP_MISSING(StreamBeginCapture_v2))
		return CUDA_ERROR_NOT_FOUND;
	tracked = gp_shim_capture_begin(s);
	return gp_shim_capture_begun(s, tracked, gp_cu.StreamBeginCapture_v2(s, mode));
}

GP_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
	int tracked;

	if (GP_MISSING(StreamBeginCapture_v2_ptsz))
		return CUDA_ERROR_NOT_FOUND;
	tracked = gp_shim_capture_begin(s);
	return gp_shim_capture_begun(s, tracked, gp_cu.StreamBeginCapture_v2_ptsz(s, mode));
}

GP_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
					       const CUgraphEdgeData *data, size_t n,
					       CUstreamCaptureMode mode)
{
	int tracked;

	if (GP_MISSING(StreamBeginCaptureToGraph))
		return CUDA_ERROR_NOT_FOUND;
	tracked = gp_shim_capture_begin(s);
	return gp_shim_capture_begun(s, tracked,
				     gp_cu.StreamBeginCaptureToGraph(s, g, deps, data, n, mode));
}

GP_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g,
						    const CUgraphNode *deps,
						    const CUgraphEdgeData *data, size_t n,
						    CUstreamCaptureMode mode)
{
	int tracked;

	if (GP_MISSING(StreamBeginCaptureToGraph_ptsz))
		return CUDA_ERROR_NOT_FOUND;
	tracked = gp_shim_capture_begin(s);
	return gp_shim_capture_begun(s, tracked,
				     gp_cu.StreamBeginCaptureToGraph_ptsz(s, g, deps, data, n, mode));
}

GP_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	if (GP_MISSING(StreamEndCapture))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_capture_ended(s, g, gp_cu.StreamEndCapture(s, g));
}

GP_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
	if (GP_MISSING(StreamEndCapture_ptsz))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_capture_ended(s, g, gp_cu.StreamEndCapture_ptsz(s, g));
}

/* ---- graph lifetimes (graphs.h) ---- */

/* After a call that made `to` from `from` (or put `from` in `to`): `to` holds what `from` holds. */
static CUresult linked(CUresult rc, const void *from, const void *to)
{
	if (rc == CUDA_SUCCESS && to != NULL)
		gp_shim_graph_link(from, to);
	return rc;
}

GP_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err,
					 char *log, size_t len)
{
	CUresult rc;

	if (GP_MISSING(GraphInstantiate_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.GraphInstantiate_v2(exec, g, err, log, len);
	return linked(rc, g, rc == CUDA_SUCCESS && exec != NULL ? *exec : NULL);
}

GP_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g,
					       unsigned long long flags)
{
	CUresult rc;

	if (GP_MISSING(GraphInstantiateWithFlags))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.GraphInstantiateWithFlags(exec, g, flags);
	return linked(rc, g, rc == CUDA_SUCCESS && exec != NULL ? *exec : NULL);
}

GP_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g,
						CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	CUresult rc;

	if (GP_MISSING(GraphInstantiateWithParams))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.GraphInstantiateWithParams(exec, g, params);
	return linked(rc, g, rc == CUDA_SUCCESS && exec != NULL ? *exec : NULL);
}

GP_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph g,
						     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	CUresult rc;

	if (GP_MISSING(GraphInstantiateWithParams_ptsz))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.GraphInstantiateWithParams_ptsz(exec, g, params);
	return linked(rc, g, rc == CUDA_SUCCESS && exec != NULL ? *exec : NULL);
}

GP_EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph g)
{
	CUresult rc;

	if (GP_MISSING(GraphClone))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.GraphClone(clone, g);
	return linked(rc, g, rc == CUDA_SUCCESS && clone != NULL ? *clone : NULL);
}

/* Forgotten before the real destroy: a new graph may get the same handle right after it. */
GP_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
	if (GP_MISSING(GraphExecDestroy))
		return CUDA_ERROR_NOT_FOUND;
	gp_shim_graph_gone(exec);
	return gp_cu.GraphExecDestroy(exec);
}

GP_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
	if (GP_MISSING(GraphDestroy))
		return CUDA_ERROR_NOT_FOUND;
	gp_shim_graph_gone(g);
	return gp_cu.GraphDestroy(g);
}

/* The parent holds a copy of the child. */
GP_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
					    size_t n, CUgraph child)
{
	if (GP_MISSING(GraphAddChildGraphNode))
		return CUDA_ERROR_NOT_FOUND;
	return linked(gp_cu.GraphAddChildGraphNode(node, g, deps, n, child), child, g);
}

GP_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node,
						      CUgraph child)
{
	if (GP_MISSING(GraphExecChildGraphNodeSetParams))
		return CUDA_ERROR_NOT_FOUND;
	return linked(gp_cu.GraphExecChildGraphNodeSetParams(exec, node, child), child, exec);
}

/* What the executable graph used before stays held too: harmless. */
GP_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g,
					CUgraphExecUpdateResultInfo *info)
{
	if (GP_MISSING(GraphExecUpdate_v2))
		return CUDA_ERROR_NOT_FOUND;
	return linked(gp_cu.GraphExecUpdate_v2(exec, g, info), g, exec);
}

/* ---- contexts ---- */

/* The pool's blocks of the device go with the reset: forgotten before it. */
GP_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	if (GP_MISSING(DevicePrimaryCtxReset_v2))
		return CUDA_ERROR_NOT_FOUND;
	if (gp_shim_tracking())
		gp_shim_device_reset(dev);
	return gp_cu.DevicePrimaryCtxReset_v2(dev);
}

/* The last reference destroys the context, and the blocks with it. */
GP_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult rc;

	if (GP_MISSING(DevicePrimaryCtxRelease_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.DevicePrimaryCtxRelease_v2(dev);
	if (rc == CUDA_SUCCESS && gp_shim_tracking())
		gp_shim_device_released(dev);
	return rc;
}

GP_EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice dev)
{
	if (GP_MISSING(CtxCreate_v2))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_ctx_created(c, gp_cu.CtxCreate_v2(c, flags, dev));
}

GP_EXPORT CUresult cuCtxCreate_v3(CUcontext *c, CUexecAffinityParam *params, int n,
				  unsigned flags, CUdevice dev)
{
	if (GP_MISSING(CtxCreate_v3))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_ctx_created(c, gp_cu.CtxCreate_v3(c, params, n, flags, dev));
}

GP_EXPORT CUresult cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *params, unsigned flags,
				  CUdevice dev)
{
	if (GP_MISSING(CtxCreate_v4))
		return CUDA_ERROR_NOT_FOUND;
	return gp_shim_ctx_created(c, gp_cu.CtxCreate_v4(c, params, flags, dev));
}

GP_EXPORT CUresult cuCtxDestroy_v2(CUcontext c)
{
	if (GP_MISSING(CtxDestroy_v2))
		return CUDA_ERROR_NOT_FOUND;
	gp_shim_ctx_destroying(c);
	return gp_cu.CtxDestroy_v2(c);
}

GP_EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
	CUresult rc;

	if (GP_MISSING(CtxSetCurrent))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.CtxSetCurrent(c);
	if (rc == CUDA_SUCCESS && c != NULL)
		gp_shim_ctx_current();
	return rc;
}

GP_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	CUresult rc;

	if (GP_MISSING(CtxPushCurrent_v2))
		return CUDA_ERROR_NOT_FOUND;
	rc = gp_cu.CtxPushCurrent_v2(c);
	if (rc == CUDA_SUCCESS)
		gp_shim_ctx_current();
	return rc;
}
