/* runtime.c — the runtime door: the shared runtime's allocation entry points (table.h's
 * GP_RUNTIME_DOOR), the fastest way in for PyTorch and every program built with -cudart shared,
 * and the public gpupool_* API. Everything else the pool needs (streams, captures, graphs,
 * contexts, work) reaches the driver door (handout.c), through which every runtime goes. Each
 * entry point has the same shape: the gate (gate.h), make sure the shim is initialised, pass
 * through when it is not active, else call the logic in shim.c; never a decision of its own. */
#include "shim.h"
#include "backend.h"
#include "capture.h"
#include "control.h"
#include "driver.h"
#include "gate.h"
#include "lookup.h"
#include "../../include/gpupool.h"

/* The real runtime is always needed: resolve it even when passing through. Inline: a hit's
 * cost is the state's load and branch. */
static inline __attribute__((always_inline)) int ready(void)
{
	int active = gp_shim_active();
	return active ? 1 : (gp_real_resolve(), 0);
}

GP_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (!ready())
		return gp_real.Malloc ? gp_real.Malloc(devPtr, size) : cudaErrorInitializationError;
	return gp_shim_malloc(devPtr, size);
}

GP_EXPORT cudaError_t cudaFree(void *devPtr)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (!ready())
		return gp_real.Free ? gp_real.Free(devPtr) : cudaErrorInitializationError;
	return gp_shim_free(devPtr);
}

/* A block the pool handed out comes back to it, as with cudaFree; any other pointer is freed by
 * the runtime on its stream. */
GP_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (!ready())
		return gp_real.FreeAsync ? gp_real.FreeAsync(devPtr, stream) :
					   cudaErrorInitializationError;
	return gp_shim_free_async(devPtr, stream, 0);
}

GP_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (!ready())
		return gp_real.FreeAsync_ptsz ? gp_real.FreeAsync_ptsz(devPtr, stream) :
						cudaErrorInitializationError;
	return gp_shim_free_async(devPtr, stream, 1);
}

/* Passed through unchanged; noted for the takeover mode's warning (gp_shim_ipc_seen). */
GP_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	(void)GP_GATE(GP_GATE_WORK);
	if (ready())
		gp_shim_ipc_seen(devPtr);
	if (gp_real.IpcGetMemHandle == NULL)
		return cudaErrorInitializationError;
	return gp_real.IpcGetMemHandle(handle, devPtr);
}

/* Only asks: while the process is suspended, answered as it was at the suspend (gate.h); else
 * the runtime's own, which reaches the driver door's cuMemGetInfo_v2. */
GP_EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	if (GP_GATE(GP_GATE_QUERY) && gp_suspend_meminfo(free_b, total_b))
		return cudaSuccess;
	if (gp_real_resolve() != 0 || gp_real.MemGetInfo == NULL)
		return cudaErrorInitializationError;
	return gp_real.MemGetInfo(free_b, total_b);
}

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator). The stream is not
 * needed: reuse is fenced against every stream, as for cudaMalloc/cudaFree. */
GP_EXPORT void *gpupool_torch_alloc(ssize_t size, int device, cudaStream_t stream)
{
	void *p = NULL;

	(void)stream;
	(void)GP_GATE(GP_GATE_WORK);
	if (size <= 0)
		return NULL;
	if (!ready())
		return gp_backend_runtime_malloc(device, (size_t)size, &p) == cudaSuccess ? p : NULL;
	return gp_shim_malloc_on(device, &p, (size_t)size) == cudaSuccess ? p : NULL;
}

GP_EXPORT void gpupool_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
{
	(void)size;
	(void)device;
	(void)stream;
	(void)GP_GATE(GP_GATE_WORK);
	if (!ready()) {
		gp_real.Free(ptr);
		return;
	}
	gp_shim_free(ptr);
}

/* During a graph capture a real free would invalidate it: the release is left to the control
 * thread, which makes it once no capture is underway. */
GP_EXPORT int gpupool_release(int device, unsigned long long *bytes)
{
	struct gp_release_result r = { 0, 0, 0, 0 };

	(void)GP_GATE(GP_GATE_WORK);
	if (bytes)
		*bytes = 0;
	if (!ready())
		return -1;
	if (gp_capture_active()) {
		gp_control_request();
		return -1;
	}
	gp_backend_via_runtime = 1; /* real frees as the program's cudaFree would make them */
	gp_control_release_now(gp_shim.life.pool, device, GP_CAUSE_API, &r);
	gp_backend_via_runtime = 0;
	if (bytes)
		*bytes = r.bytes;
	return r.errors ? -1 : 0;
}
