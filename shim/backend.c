/* backend.c — struct gp_backend over the real runtime: cudaMalloc/cudaFree on a given device,
 * fences from fence.c, a cheap clock. Called by the pool with no pool lock held. */
#define _GNU_SOURCE
#include "backend.h"
#include "capture.h"
#include "fence.h"
#include "real.h"

#include <time.h>

static _Thread_local cudaError_t last_error __attribute__((tls_model("initial-exec"))); /* pool.c */

cudaError_t gp_backend_last_error(void)
{
	return last_error;
}

static int to_rc(cudaError_t e)
{
	if (e == cudaSuccess)
		return GP_OK;
	last_error = e;
	return e == cudaErrorMemoryAllocation ? GP_ENOMEM : GP_EBACKEND;
}

/* Make `dev` current; *prev gets what to restore (-1: nothing to restore). Returns the
 * runtime's error when it cannot. */
static cudaError_t enter(int dev, int *prev)
{
	cudaError_t e;
	int cur;

	*prev = -1;
	e = gp_real.GetDevice(&cur);
	if (e != cudaSuccess || cur == dev)
		return e;
	e = gp_real.SetDevice(dev);
	if (e == cudaSuccess)
		*prev = cur;
	return e;
}

static void leave(int prev)
{
	if (prev >= 0)
		gp_real.SetDevice(prev);
}

static int be_alloc(void *ctx, int device, size_t bytes, void **out)
{
	cudaError_t e;
	int prev, rc;

	(void)ctx;
	e = enter(device, &prev);
	if (e != cudaSuccess)
		return to_rc(e);
	if (gp_capture_active() && gp_real.ThreadExchangeStreamCaptureMode) {
		/* A miss must work like a hit during a capture: allocate in relaxed mode, as
		 * PyTorch does, so the capture is not invalidated. */
		enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
		gp_real.ThreadExchangeStreamCaptureMode(&mode);
		rc = to_rc(gp_real.Malloc(out, bytes));
		gp_real.ThreadExchangeStreamCaptureMode(&mode);
	} else {
		rc = to_rc(gp_real.Malloc(out, bytes));
	}
	leave(prev);
	return rc;
}

static int be_free(void *ctx, int device, void *ptr, size_t bytes)
{
	int prev, rc;

	(void)ctx;
	(void)bytes;
	/* Tried even when the device could not be made current: cudaFree finds the allocation by
	 * its address, and a block whose free is not tried is lost to the device for good. */
	enter(device, &prev);
	rc = to_rc(gp_real.Free(ptr));
	leave(prev);
	return rc;
}

/* Coarse on purpose: it is read on every free, and idle ages need milliseconds, not ns. */
static uint64_t be_now(void *ctx)
{
	struct timespec ts;

	(void)ctx;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A real cudaFree while a graph is being captured would invalidate the capture. */
static int be_may_release(void *ctx)
{
	(void)ctx;
	return !gp_capture_active();
}

void gp_backend_fill(struct gp_backend *be)
{
	be->ctx = NULL;
	be->alloc = be_alloc;
	be->free = be_free;
	be->fence_record = gp_fence_record;
	be->fence_query = gp_fence_query;
	be->fence_wait = gp_fence_wait;
	be->fence_destroy = gp_fence_destroy;
	be->quiet = gp_fence_quiet;
	be->now_ns = be_now;
	be->may_release = be_may_release;
}
