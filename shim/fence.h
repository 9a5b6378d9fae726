/* fence.h — stream registry and the fences the pool waits on.
 * A fence is a set of events recorded on the legacy stream of every device in use and on every
 * stream the process created (through any runtime or the driver: both reach cuStreamCreate),
 * plus the last events of destroyed streams: once all are complete, every GPU operation issued
 * before the fence was recorded is done. A blocking stream (created without
 * CU_STREAM_NON_BLOCKING) gets no event of its own: an event on its device's legacy stream
 * completes only after the work queued on it before (CUDA's implicit synchronization;
 * tests/gpu/gpu_race.cu, phase 4, checks it on the GPU), so one event per device covers them
 * all, the per-thread default streams too. Only driver calls: never a runtime's error state. */
#ifndef GPUPOOL_FENCE_H
#define GPUPOOL_FENCE_H

#include <cuda.h>

/* A stream was created in the calling thread's current context. */
void gp_fence_stream_created(CUstream s, unsigned flags);
void gp_fence_stream_destroying(CUstream s);
void gp_fence_use_device(int device);
/* Before the primary context of `device` is reset: its streams and events are about to be
 * destroyed. Fences that hold its events count them as complete and never touch them again. */
void gp_fence_device_reset(int device);

/* From now on no fence is made (a stream may be unknown): blocks wait for a real free. */
void gp_fence_blind(void);
/* Work was queued on a legacy or per-thread default stream (gp_shim_work, after the call that
 * queued it returned): sets gp_shim.fence.legacy_used. Cheap enough for every such call. */
void gp_fence_note_legacy_work(void);

/* The backend's fence operations (struct gp_backend). */
int gp_fence_record(void *ctx, void **out);
int gp_fence_query(void *ctx, void *fence);
int gp_fence_wait(void *ctx, void *fence);
void gp_fence_destroy(void *ctx, void *fence);
int gp_fence_quiet(void *ctx);

#endif
