/* fence.h — stream registry and the fences the pool waits on.
 * A fence is a set of events recorded on every stream the process created (through any runtime or
 * the driver: both reach cuStreamCreate), blocking or not, plus the last events of destroyed
 * streams, plus one on the legacy stream of every device in use when work may be there (fence.c,
 * legacy_wanted): once all are complete, every GPU operation issued before the fence was recorded
 * is done. Blocking streams get events of their own because an event on the legacy stream joins
 * them (each waits for the others' earlier work: CUDA's implicit synchronization), which would stop
 * them from overlapping; such an event still covers the per-thread default streams. No fence
 * call is made while a capture is underway (capture.h's gate). Only driver calls: never a
 * runtime's error state. */
#ifndef GPUPOOL_FENCE_H
#define GPUPOOL_FENCE_H

#include <cuda.h>

/* A stream was created in the calling thread's current context. */
void gp_fence_stream_created(CUstream s, unsigned flags);
/* Before the program's destroy of `s`: its last event goes to the next fence. 1 when the destroy
 * must wait instead (a capture is underway, when no event may be recorded): the caller returns
 * success without the real destroy, which gp_fence_captures_over makes later. */
int gp_fence_stream_destroying(CUstream s);
/* No capture is underway any more: destroys that waited for that are made now. */
void gp_fence_captures_over(void);
void gp_fence_use_device(int device);
/* Before the primary context of `device` is reset: its streams and events are about to be
 * destroyed. Fences that hold its events count them as complete and never touch them again. */
void gp_fence_device_reset(int device);

/* From now on no fence is made (a stream may be unknown): blocks wait for a real free. */
void gp_fence_blind(void);
/* Work was queued on a legacy or per-thread default stream (gp_shim_work, after the call that
 * queued it returned): sets gp_shim.fence.legacy_used. Cheap enough for every such call. */
void gp_fence_note_legacy_work(void);
/* Work was queued on stream `s`, neither a legacy nor a per-thread default one (gp_shim_work,
 * after the call that queued it returned): an atomic add and a fence. */
void gp_fence_note_stream_work(CUstream s);

/* The backend's fence operations (struct gp_backend). */
int gp_fence_record(void *ctx, void **out);
int gp_fence_query(void *ctx, void *fence);
int gp_fence_wait(void *ctx, void *fence);
void gp_fence_destroy(void *ctx, void *fence);
int gp_fence_quiet(void *ctx);
int gp_fence_join(void *ctx, int inflight, void **settle);

#endif
