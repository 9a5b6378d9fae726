/* shim.h — the shim's life cycle and the logic behind both doors' entry points: the runtime's
 * (door/runtime.c: cudaMalloc, cudaFree, ...) and the driver's (door/driver.c: cuMemAlloc_v2,
 * ...). The entry points stay lists of short wrappers; everything they need is here. Its state
 * is gp_shim.life (state.h). Never aborts the program: errors are the runtime's or driver's own. */
#ifndef GPUPOOL_SHIM_H
#define GPUPOOL_SHIM_H

#include "account.h"
#include "pool.h"
#include "state.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>

enum gp_state { GP_UNINIT = 0, GP_ACTIVE, GP_PASSTHROUGH };

/* Set while this thread is inside a real runtime call of ours (a miss, a pass-through free):
 * the runtime's own calls into the driver then pass our driver entry points untouched, so that
 * nothing is pooled twice. One per thread: not in gp_shim. */
extern _Thread_local int gp_shim_in_real;
/* The driver door cannot vouch for what it hands out (door/handout.h), or a context of the
 * program's own is current somewhere (gp_shim.life.driver_caution): checked by gp_shim_serves. */
int gp_shim_driver_pooling_slow(void);

int gp_shim_init_slow(void);

/* Ensure init; 1 = serve from the pool, 0 = pass through to the real runtime. */
static inline int gp_shim_active(void)
{
	int s = atomic_load_explicit(&gp_shim.life.state, memory_order_acquire);
	if (__builtin_expect(s == GP_ACTIVE, 1))
		return 1;
	if (s == GP_PASSTHROUGH)
		return 0;
	return gp_shim_init_slow();
}

/* The pool may serve an allocation now (either door): not while the door is blind or a context
 * of the program's own is current, which is looked at only once either has happened. */
static inline int gp_shim_serves(void)
{
	if (__builtin_expect(atomic_load_explicit(&gp_shim.life.driver_caution,
						  memory_order_relaxed), 0))
		return gp_shim_driver_pooling_slow();
	return 1;
}

/* For the driver door's allocation calls: the pool serves this one. */
static inline int gp_shim_pooling(void)
{
	if (__builtin_expect(gp_shim_in_real, 0) || !gp_shim_active())
		return 0;
	return gp_shim_serves();
}

/* For the driver door's frees: whatever context is current and whether or not the door is
 * blind, a block the pool handed out must come back to it (a real free of it would leave the
 * pool's record live); the pool's map sends every other pointer to the real free. */
static inline int gp_shim_freeing(void)
{
	return !__builtin_expect(gp_shim_in_real, 0) && gp_shim_active();
}

/* For streams, captures, graphs and contexts: keep track even before the first allocation
 * (the pool may start later, and must know them), never when passing through for good. */
static inline int gp_shim_tracking(void)
{
	return atomic_load_explicit(&gp_shim.life.state, memory_order_relaxed) != GP_PASSTHROUGH;
}

/* ---- the runtime door ---- */
cudaError_t gp_shim_malloc(void **ptr, size_t size);
/* The same, on a given device (the pool switches to it for a real allocation). */
cudaError_t gp_shim_malloc_on(int device, void **ptr, size_t size);
cudaError_t gp_shim_free(void *ptr);
/* cudaFreeAsync (per_thread: its _ptsz flavour, on the calling thread's default stream for NULL):
 * a block the pool handed out is freed as by gp_shim_free, any other pointer by the real one on
 * its stream. */
cudaError_t gp_shim_free_async(void *ptr, cudaStream_t s, int per_thread);

/* ---- the static runtime door (door/static.c), for a runtime linked into the program ---- */
/* The pool's allocation, as the driver door makes it, on the one device: 0 when it served it; -1
 * when the pool does not take it (several devices, a size it does not serve): the runtime makes
 * it; 1 when the pool failed (out of memory): gp_shim_static_failed. */
int gp_shim_static_alloc(void **ptr, size_t size);
/* After the pool failed: the runtime's own cudaMalloc (`runtime`), made straight to the driver,
 * so that its answer and its sticky error are the runtime's; what it made is counted. */
cudaError_t gp_shim_static_failed(cudaError_t (*runtime)(void **, size_t), void **ptr,
				  size_t size);
/* 0 when the pool took ptr back (or holds it for a capture); -1 when it is not the pool's: the
 * runtime's cudaFree frees it; 1: a double free (cudaErrorInvalidValue, as at the runtime door;
 * the runtime's own free would reach the pool again and count it twice). */
int gp_shim_static_free(void *ptr);

/* ---- the driver door ---- */
CUresult gp_shim_cu_alloc(CUdeviceptr *dptr, size_t size);
/* After a real allocation the pool did not serve, with its result rc (returned): counted as
 * passed through, of `kind` (account.h), `bytes` on the current context's device, unless the
 * shim made it itself (gp_shim_in_real) or passes everything through. */
CUresult gp_shim_cu_passed(enum gp_account_kind kind, CUdeviceptr *dptr, size_t bytes, CUresult rc);
/* The real free of a pointer the pool does not own: cuMemFree_v2 (how 0), cuMemFreeAsync (1) or
 * its _ptsz flavour (2) on stream s; a pointer counted as passed through is counted no more. */
CUresult gp_shim_cu_free_passed(CUdeviceptr dptr, CUstream s, int how);
/* cuMemCreate's result rc (returned): the program's own VMM handle is counted (account.h). */
CUresult gp_shim_vmm_created(CUmemGenericAllocationHandle *h, size_t bytes,
			     const CUmemAllocationProp *prop, CUresult rc);
/* cuMemRelease of a handle: counted no more, then released. */
CUresult gp_shim_vmm_release(CUmemGenericAllocationHandle h);
CUresult gp_shim_cu_free(CUdeviceptr dptr);
/* cuMemFreeAsync and its _ptsz flavour (per_thread), as gp_shim_free_async. */
CUresult gp_shim_cu_free_async(CUdeviceptr dptr, CUstream s, int per_thread);
void gp_shim_cu_meminfo(size_t *free_b, size_t *total_b);
void gp_shim_vmm_seen(void);
/* An IPC memory handle was asked for ptr (either door): in takeover mode, a warning, once; in
 * GPUPOOL_VMM=auto, no VMM-backed blocks from now on (vmm.c). */
void gp_shim_ipc_seen(const void *ptr);
void gp_shim_stream_created(CUstream s, unsigned flags);
/* Before the program's destroy of s: 1 when the real destroy must not be made now (a capture is
 * underway; fence.h): the entry point returns success, and the destroy is made once no capture
 * is left. */
int gp_shim_stream_destroying(CUstream s);
/* A capture counts from before its begin reaches the driver: begin returns whether this call
 * tracks it; begun gets the driver's answer (and undoes a failed begin), ended the end's. */
int gp_shim_capture_begin(CUstream s);
CUresult gp_shim_capture_begun(CUstream s, int tracked, CUresult rc);
CUresult gp_shim_capture_ended(CUstream s, CUgraph *g, CUresult rc);
void gp_shim_graph_link(const void *from, const void *to);
void gp_shim_graph_gone(const void *handle);
/* Before a primary context is reset; after one was released (perhaps for good). */
void gp_shim_device_reset(int device);
void gp_shim_device_released(int device);
CUresult gp_shim_ctx_created(CUcontext *c, CUresult rc);
void gp_shim_ctx_destroying(CUcontext c);
/* A context was made current (a second device may come into use). */
void gp_shim_ctx_current(void);
/* Work was queued on stream `s` (door/work.c, after the call succeeded); per_thread: through a
 * _ptsz/_ptds flavour, where NULL is the calling thread's per-thread default stream. */
void gp_shim_work(CUstream s, int per_thread);
/* The driver door cannot vouch for what it hands out (door/handout.c): pass allocations through. */
void gp_shim_door_blind(void);

#endif
