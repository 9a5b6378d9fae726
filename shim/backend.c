/* backend.c — struct gp_backend over the real driver: cuMemAlloc_v2/cuMemFree_v2 in the block's
 * device's primary context, fences from fence.c, a cheap clock. Called by the pool with no pool
 * lock held. For the runtime door (gp_backend_via_runtime) the real calls go through the runtime
 * instead, as the program's own would; the runtime's own call into the driver then passes our
 * entry point untouched (gp_shim_in_real). Never takes a pool lock itself. */
#define _GNU_SOURCE
#include "backend.h"
#include "clock.h"
#include "capture.h"
#include "ctx.h"
#include "door/lookup.h"
#include "fence.h"
#include "log.h"
#include "policy.h"
#include "shim.h"
#include "state.h"
#include "vmm.h"

#include "grow.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* The thread's last failure, and whether its pool call came through the runtime door: per
 * thread, so not in gp_shim (state.h); see pool.c on initial-exec. */
static _Thread_local CUresult last_error __attribute__((tls_model("initial-exec")));
static _Thread_local int runtime_failed __attribute__((tls_model("initial-exec")));
_Thread_local int gp_backend_via_runtime __attribute__((tls_model("initial-exec")));

CUresult gp_backend_last_error(void)
{
	return last_error;
}

int gp_backend_runtime_failed(void)
{
	return runtime_failed;
}

static int to_rc(CUresult e, int through_runtime)
{
	if (e == CUDA_SUCCESS)
		return GP_OK;
	last_error = e;
	runtime_failed = through_runtime;
	return e == CUDA_ERROR_OUT_OF_MEMORY ? GP_ENOMEM : GP_EBACKEND;
}

/* A miss must work like a hit during a capture: allocate in relaxed mode, as PyTorch does, so
 * the capture is not invalidated. Returns the mode to restore (or -1: nothing to restore). */
static int relax(void)
{
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

	if (!gp_capture_active() || gp_cu.ThreadExchangeStreamCaptureMode == NULL ||
	    gp_cu.ThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
		return -1;
	return (int)mode;
}

static void unrelax(int mode)
{
	CUstreamCaptureMode m = (CUstreamCaptureMode)mode;

	if (mode >= 0)
		gp_cu.ThreadExchangeStreamCaptureMode(&m);
}

cudaError_t gp_backend_runtime_malloc(int dev, size_t bytes, void **out)
{
	cudaError_t e;
	int prev = -1;

	e = gp_real.GetDevice(&prev);
	if (e == cudaSuccess && prev != dev)
		e = gp_real.SetDevice(dev);
	if (e == cudaSuccess)
		e = gp_real.Malloc(out, bytes);
	if (prev >= 0 && prev != dev)
		gp_real.SetDevice(prev);
	return e;
}

/* Through the runtime, on `dev`: the runtime's error codes are the driver's for the errors a
 * cudaMalloc returns. */
static int runtime_alloc(int dev, size_t bytes, void **out)
{
	cudaError_t e;

	gp_shim_in_real = 1;
	e = gp_backend_runtime_malloc(dev, bytes, out);
	gp_shim_in_real = 0;
	return to_rc((CUresult)e, 1);
}

/* The first real allocation on a device (every device's first allocation is a miss): the policy
 * learns its caps and thresholds, from its total memory, once; no cost on a hit. */
static void first_on(int device)
{
	uint64_t bit = 1ULL << device;

	if (!(atomic_load_explicit(&gp_shim.life.policy_devices, memory_order_relaxed) & bit) &&
	    !(atomic_fetch_or(&gp_shim.life.policy_devices, bit) & bit))
		gp_policy_device_seen(device);
}

/* A VMM-backed block (GPUPOOL_VMM), in the device's context: the current one, else entered for
 * the call. 1 when it was made or the device is out of memory (*rc says which); 0 when it was
 * not tried (the device's context is not there to enter: the program has not used the device
 * yet) or the API failed otherwise, which turned VMM off: the block is then made the ordinary
 * way. */
static int vmm_alloc(int device, size_t bytes, CUdeviceptr *p, int *rc)
{
	CUcontext cur;
	int pushed = 0;

	if (gp_ctx_current(&cur) != device && gp_ctx_enter(device, &pushed) != 0)
		return 0;
	*rc = to_rc(gp_vmm_alloc(device, bytes, p), 0);
	gp_ctx_leave(pushed);
	return *rc == GP_OK || *rc == GP_ENOMEM || gp_vmm_wanted(device, bytes);
}

/* Through the runtime when the allocation came through its door (its context is the program's
 * current one) or the device's context is not current here; else the driver in the current
 * context; else the driver in the device's context, entered for the call. */
static int ordinary_alloc(int device, size_t bytes, CUdeviceptr *p)
{
	CUcontext cur;
	int pushed, rc, on = gp_backend_via_runtime ? -1 : gp_ctx_current(&cur);

	if (on != device && gp_real.Malloc != NULL) {
		rc = runtime_alloc(device, bytes, (void **)p);
		if (gp_ctx_current(&cur) == device)
			gp_ctx_note(device, cur);
	} else if (on == device) {
		rc = to_rc(gp_cu.MemAlloc_v2(p, bytes), 0);
		gp_ctx_note(device, cur);
	} else if (gp_ctx_enter(device, &pushed) == 0) {
		rc = to_rc(gp_cu.MemAlloc_v2(p, bytes), 0);
		gp_ctx_leave(pushed);
	} else {
		rc = to_rc(CUDA_ERROR_INVALID_CONTEXT, 0);
	}
	return rc;
}

/* A block above 1 MiB is VMM-backed while GPUPOOL_VMM is on; otherwise, or when the API turned
 * out not to work, an ordinary allocation. */
static int be_alloc(void *ctx, int device, size_t bytes, void **out)
{
	CUdeviceptr p = 0;
	int mode, rc, vmm;

	(void)ctx;
	mode = relax();
	first_on(device);
	vmm = gp_vmm_wanted(device, bytes) && vmm_alloc(device, bytes, &p, &rc);
	if (!vmm)
		rc = ordinary_alloc(device, bytes, &p);
	unrelax(mode);
	/* Where a program's real allocations come from, at GPUPOOL_LOG=debug: the pool's misses. */
	if (rc == GP_OK && gp_log_enabled(GP_LOG_DEBUG))
		gp_log(GP_LOG_DEBUG, "device %d: a real allocation of %zu bytes%s", device, bytes,
		       vmm ? " (VMM-backed)" : "");
	*out = (void *)(uintptr_t)p;
	return rc;
}

/* In the device's context, wherever the free comes from (the control thread has none). Tried
 * even when the context cannot be entered: a block whose free is not tried is lost to the
 * device for good. */
static int runtime_free(int dev, void *ptr)
{
	cudaError_t e;
	int prev = -1;

	gp_shim_in_real = 1;
	if (gp_real.GetDevice(&prev) == cudaSuccess && prev != dev)
		gp_real.SetDevice(dev);
	e = gp_real.Free(ptr);
	if (prev >= 0 && prev != dev)
		gp_real.SetDevice(prev);
	gp_shim_in_real = 0;
	return to_rc((CUresult)e, 1);
}

/* A real free asked for while a capture is underway (one begun after the release checked
 * may_release): kept for the end of the captures, since the free would invalidate them. */
static int defer_free(int device, void *ptr, size_t bytes, int settled)
{
	struct gp_deferred_free d = { ptr, bytes, device, settled };
	int rc = GP_OK;

	pthread_mutex_lock(&gp_shim.defer.lock);
	if (gp_grow((void **)&gp_shim.defer.frees, &gp_shim.defer.cap, gp_shim.defer.n + 1,
		    sizeof(d)) == 0)
		gp_shim.defer.frees[gp_shim.defer.n++] = d;
	else
		rc = GP_EBACKEND; /* no host memory: the block stays allocated, never reused */
	pthread_mutex_unlock(&gp_shim.defer.lock);
	if (rc == GP_OK)
		atomic_fetch_add(&gp_shim.defer.bytes, bytes);
	return rc;
}

static int real_free(int device, void *ptr, int settled)
{
	int pushed = 0, rc;

	if (gp_vmm_owns(ptr)) {
		gp_ctx_enter(device, &pushed);
		rc = to_rc(gp_vmm_free(ptr, settled), 0);
		gp_ctx_leave(pushed);
		return rc;
	}
	if (gp_backend_via_runtime && gp_real.Free != NULL)
		return runtime_free(device, ptr);
	gp_ctx_enter(device, &pushed);
	rc = to_rc(gp_cu.MemFree_v2((CUdeviceptr)(uintptr_t)ptr), 0);
	gp_ctx_leave(pushed);
	return rc;
}

static int be_free(void *ctx, int device, void *ptr, size_t bytes, int settled)
{
	int rc;

	(void)ctx;
	if (!gp_capture_gate_enter())
		return defer_free(device, ptr, bytes, settled);
	rc = real_free(device, ptr, settled);
	gp_capture_gate_leave();
	return rc;
}

void gp_backend_captures_over(void)
{
	struct gp_deferred_free d;

	for (;;) {
		pthread_mutex_lock(&gp_shim.defer.lock);
		if (gp_shim.defer.n == 0) {
			pthread_mutex_unlock(&gp_shim.defer.lock);
			return;
		}
		d = gp_shim.defer.frees[--gp_shim.defer.n];
		pthread_mutex_unlock(&gp_shim.defer.lock);
		if (!gp_capture_gate_enter()) { /* another capture began: its end comes back */
			defer_free(d.device, d.ptr, d.bytes, d.settled);
			atomic_fetch_sub(&gp_shim.defer.bytes, d.bytes);
			return;
		}
		real_free(d.device, d.ptr, d.settled);
		gp_capture_gate_leave();
		atomic_fetch_sub(&gp_shim.defer.bytes, d.bytes);
	}
}

static int be_movable(void *ctx, void *ptr)
{
	(void)ctx;
	return gp_vmm_owns(ptr);
}

static int be_remap(void *ctx, int device, size_t bytes, struct gp_piece *src, unsigned n,
		    void **out, size_t *got, int *consumed)
{
	CUdeviceptr p = 0;
	int pushed = 0, rc;

	(void)ctx;
	*consumed = 0;
	if (gp_ctx_enter(device, &pushed) != 0)
		return GP_EBACKEND;
	rc = to_rc(gp_vmm_remap(device, bytes, src, n, &p, got, consumed), 0);
	gp_ctx_leave(pushed);
	*out = (void *)(uintptr_t)p;
	return rc;
}

static int be_split(void *ctx, int device, void *ptr, size_t bytes, size_t take, size_t *tail)
{
	(void)ctx;
	(void)device;
	return to_rc(gp_vmm_split(ptr, bytes, take, tail), 0);
}

static int be_merge(void *ctx, int device, void *const *ptr, const size_t *bytes, unsigned n)
{
	(void)ctx;
	(void)device;
	return to_rc(gp_vmm_merge(ptr, bytes, n), 0);
}

static int be_joinable(void *ctx, void *a, void *b)
{
	(void)ctx;
	return gp_vmm_joinable(a, b);
}

/* A real free while a graph is being captured would invalidate the capture. */
static int be_may_release(void *ctx)
{
	(void)ctx;
	return !gp_capture_active();
}

void gp_backend_fill(struct gp_backend *be)
{
	memset(be, 0, sizeof(*be)); /* every optional call this backend lacks is NULL, ctx too */
	be->alloc = be_alloc;
	be->free = be_free;
	be->fence_record = gp_fence_record;
	be->fence_query = gp_fence_query;
	be->fence_wait = gp_fence_wait;
	be->fence_destroy = gp_fence_destroy;
	be->quiet = gp_fence_quiet;
	be->join = gp_fence_join;
	be->now_ns = gp_pool_coarse_ns; /* coarse: read by frees into the lists; idle ages need ms */
	be->may_release = be_may_release;
	be->movable = atomic_load(&gp_shim.vmm.on) ? be_movable : NULL;
	be->remap = atomic_load(&gp_shim.vmm.on) ? be_remap : NULL;
	be->split = atomic_load(&gp_shim.vmm.on) ? be_split : NULL;
	be->merge = atomic_load(&gp_shim.vmm.on) ? be_merge : NULL;
	be->joinable = atomic_load(&gp_shim.vmm.on) ? be_joinable : NULL;
}
