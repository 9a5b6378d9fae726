/* ctx.h — the driver contexts the pool works in. Pooled memory lives in the primary context of
 * its device; the shim notes each device's (at its first real allocation there) so that other
 * threads (the control thread, a thread with no context) can free, fence and query in it.
 * Contexts the program creates itself (cuCtxCreate) are noted too: allocations made while one of
 * those is current are passed through, never pooled. */
#ifndef GPUPOOL_CTX_H
#define GPUPOOL_CTX_H

#include <cuda.h>

/* The primary context of `device`, as noted or asked of the driver when it is active; NULL when
 * it has none. */
CUcontext gp_ctx_of(int device);
void gp_ctx_note(int device, CUcontext c);
/* The device's primary context was reset or released for good: forget it. */
void gp_ctx_forget(int device);

/* Make `device`'s context current on this thread if it is not (*pushed says to pop it after).
 * 0, or -1 when the device has no context. */
int gp_ctx_enter(int device, int *pushed);
void gp_ctx_leave(int pushed);

/* The calling thread's current context and its device; -1 when none is current. */
int gp_ctx_current(CUcontext *c);

/* Contexts the program created (cuCtxCreate / cuCtxDestroy). */
void gp_ctx_user_created(CUcontext c);
void gp_ctx_user_destroyed(CUcontext c);
/* Whether the calling thread's current context is one of them (cheap while there are none). */
int gp_ctx_in_user(void);
/* Device `device`'s UUID as NVML and nvidia-smi write it ("GPU-" and 36 hex digits and dashes)
 * into out: 0, or -1 (out empty) when the driver cannot say. Needs no context. */
int gp_ctx_device_uuid(int device, char *out, size_t len);
/* Device `device`'s free and total memory, asked in its context (entered and left): 0, or -1
 * when it cannot be entered or does not answer. */
int gp_ctx_mem_info(int device, size_t *free_b, size_t *total_b);

#endif
