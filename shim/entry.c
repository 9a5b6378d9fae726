/* entry.c — the exported CUDA entry points. Each has the same shape: make sure the shim is
 * initialised, pass through when it is not active, else call the logic in shim.c or the real
 * function and note what it did. Nothing else in the library is visible (exports.map). */
#include "shim.h"
#include "capture.h"
#include <sys/types.h>
#include "control.h"
#include "fence.h"
#include "graphs.h"
#include "real.h"
#include "../include/gpupool.h"

#define GP_EXPORT __attribute__((visibility("default")))

/* The real runtime is always needed: resolve it even when passing through. */
static int ready(void)
{
	int active = gp_shim_active();
	return active ? 1 : (gp_real_resolve(), 0);
}

GP_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (!ready())
		return gp_real.Malloc ? gp_real.Malloc(devPtr, size) : cudaErrorInitializationError;
	return gp_shim_malloc(devPtr, size);
}

GP_EXPORT cudaError_t cudaFree(void *devPtr)
{
	if (!ready())
		return gp_real.Free ? gp_real.Free(devPtr) : cudaErrorInitializationError;
	return gp_shim_free(devPtr);
}

GP_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamCreate(s);
	if (active)
		gp_shim_stream_created(rc, s, cudaStreamDefault);
	return rc;
}

GP_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamCreateWithFlags(s, flags);
	if (active)
		gp_shim_stream_created(rc, s, flags);
	return rc;
}

GP_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int prio)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamCreateWithPriority(s, flags, prio);
	if (active)
		gp_shim_stream_created(rc, s, flags);
	return rc;
}

GP_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (ready())
		gp_fence_stream_destroying(s);
	return gp_real.StreamDestroy(s);
}

static void capture_begun(cudaStream_t s)
{
	if (gp_capture_begin(s))
		gp_graphs_capture_begin();
}

GP_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamBeginCapture(s, mode);
	if (active && rc == cudaSuccess)
		capture_begun(s);
	return rc;
}

GP_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g,
						    const cudaGraphNode_t *deps,
						    const cudaGraphEdgeData *data, size_t n,
						    enum cudaStreamCaptureMode mode)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamBeginCaptureToGraph(s, g, deps, data, n, mode);
	if (active && rc == cudaSuccess)
		capture_begun(s);
	return rc;
}

GP_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	int active = ready();
	cudaError_t rc = gp_real.StreamEndCapture(s, g);
	/* Ended on the wrong thread, the capture goes on; any other outcome ends it. */
	if (active && rc != cudaErrorStreamCaptureWrongThread && gp_capture_end(s))
		gp_graphs_capture_end(rc == cudaSuccess && g != NULL ? *g : NULL);
	return rc;
}

/* Graph lifetimes (graphs.h). A runtime without the entry point: the call cannot be made. */
#define GP_REAL_OR_FAIL(fn)                                                                 \
	do {                                                                                \
		ready();                                                                    \
		if (gp_real.fn == NULL)                                                     \
			return cudaErrorNotSupported;                                       \
	} while (0)

static cudaError_t instantiated(cudaError_t rc, cudaGraphExec_t *exec, cudaGraph_t g)
{
	if (rc == cudaSuccess && exec != NULL && gp_shim_active())
		gp_graphs_link(g, *exec);
	return rc;
}

GP_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
					   unsigned long long flags)
{
	GP_REAL_OR_FAIL(GraphInstantiate);
	return instantiated(gp_real.GraphInstantiate(exec, g, flags), exec, g);
}

GP_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t g,
						    unsigned long long flags)
{
	GP_REAL_OR_FAIL(GraphInstantiateWithFlags);
	return instantiated(gp_real.GraphInstantiateWithFlags(exec, g, flags), exec, g);
}

GP_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *exec, cudaGraph_t g,
						     cudaGraphInstantiateParams *params)
{
	GP_REAL_OR_FAIL(GraphInstantiateWithParams);
	return instantiated(gp_real.GraphInstantiateWithParams(exec, g, params), exec, g);
}

/* Forgotten before the real destroy: a new graph may get the same handle right after it. */
GP_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	GP_REAL_OR_FAIL(GraphExecDestroy);
	if (gp_shim_active())
		gp_graphs_gone(exec);
	return gp_real.GraphExecDestroy(exec);
}

GP_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	GP_REAL_OR_FAIL(GraphDestroy);
	if (gp_shim_active())
		gp_graphs_gone(g);
	return gp_real.GraphDestroy(g);
}

GP_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t g)
{
	cudaError_t rc;

	GP_REAL_OR_FAIL(GraphClone);
	rc = gp_real.GraphClone(clone, g);
	if (rc == cudaSuccess && clone != NULL && gp_shim_active())
		gp_graphs_link(g, *clone);
	return rc;
}

GP_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t g,
						 const cudaGraphNode_t *deps, size_t n,
						 cudaGraph_t child)
{
	cudaError_t rc;

	GP_REAL_OR_FAIL(GraphAddChildGraphNode);
	rc = gp_real.GraphAddChildGraphNode(node, g, deps, n, child);
	if (rc == cudaSuccess && gp_shim_active())
		gp_graphs_link(child, g); /* the parent holds a copy of the child */
	return rc;
}

GP_EXPORT cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec,
							   cudaGraphNode_t node, cudaGraph_t child)
{
	cudaError_t rc;

	GP_REAL_OR_FAIL(GraphExecChildGraphNodeSetParams);
	rc = gp_real.GraphExecChildGraphNodeSetParams(exec, node, child);
	if (rc == cudaSuccess && gp_shim_active())
		gp_graphs_link(child, exec);
	return rc;
}

GP_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g,
					  cudaGraphExecUpdateResultInfo *info)
{
	cudaError_t rc;

	GP_REAL_OR_FAIL(GraphExecUpdate);
	rc = gp_real.GraphExecUpdate(exec, g, info);
	if (rc == cudaSuccess && gp_shim_active())
		gp_graphs_link(g, exec); /* what it used before stays held too: harmless */
	return rc;
}

GP_EXPORT cudaError_t cudaSetDevice(int device)
{
	int active = ready();
	cudaError_t rc = gp_real.SetDevice(device);
	if (active && rc == cudaSuccess)
		gp_shim_device_set(device);
	return rc;
}

GP_EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	int active = ready();
	cudaError_t rc = gp_real.MemGetInfo(free_b, total_b);
	if (active && rc == cudaSuccess)
		gp_shim_adjust_meminfo(free_b, total_b);
	return rc;
}

GP_EXPORT cudaError_t cudaDeviceReset(void)
{
	if (ready())
		gp_shim_device_reset();
	return gp_real.DeviceReset();
}

/* Per-thread default stream calls: their work is not in the legacy stream's order. */
GP_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *f, dim3 g, dim3 b, void **args,
					    size_t shm, cudaStream_t s)
{
	if (ready())
		gp_shim_unordered();
	return gp_real.LaunchKernel_ptsz(f, g, b, args, shm, s);
}

GP_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n,
					   enum cudaMemcpyKind kind, cudaStream_t s)
{
	if (ready())
		gp_shim_unordered();
	return gp_real.MemcpyAsync_ptsz(dst, src, n, kind, s);
}

GP_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *dst, int v, size_t n, cudaStream_t s)
{
	if (ready())
		gp_shim_unordered();
	return gp_real.MemsetAsync_ptsz(dst, v, n, s);
}

GP_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n,
				      enum cudaMemcpyKind kind)
{
	if (ready())
		gp_shim_unordered();
	return gp_real.Memcpy_ptds(dst, src, n, kind);
}

GP_EXPORT cudaError_t cudaMemset_ptds(void *dst, int v, size_t n)
{
	if (ready())
		gp_shim_unordered();
	return gp_real.Memset_ptds(dst, v, n);
}

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator). The stream is not
 * needed: reuse is fenced against every stream, as for cudaMalloc/cudaFree. */
GP_EXPORT void *gpupool_torch_alloc(ssize_t size, int device, cudaStream_t stream)
{
	void *p = NULL;

	(void)stream;
	if (size <= 0)
		return NULL;
	if (!ready()) {
		int prev = -1;
		if (gp_real.GetDevice(&prev) == cudaSuccess && prev != device)
			gp_real.SetDevice(device);
		if (gp_real.Malloc(&p, (size_t)size) != cudaSuccess)
			p = NULL;
		if (prev >= 0 && prev != device)
			gp_real.SetDevice(prev);
		return p;
	}
	return gp_shim_malloc_on(device, &p, (size_t)size) == cudaSuccess ? p : NULL;
}

GP_EXPORT void gpupool_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
{
	(void)size;
	(void)device;
	(void)stream;
	if (!ready()) {
		gp_real.Free(ptr);
		return;
	}
	gp_shim_free(ptr);
}

GP_EXPORT int gpupool_release(int device, unsigned long long *bytes)
{
	struct gp_release_result r = { 0, 0, 0, 0 };

	if (!ready())
		return -1;
	gp_control_release_now(gp_shim_pool, device, GP_CAUSE_API, &r);
	if (bytes)
		*bytes = r.bytes;
	return r.errors ? -1 : 0;
}
