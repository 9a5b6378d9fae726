/* ctx.c — per-device primary contexts and the program's own contexts (ctx.h). Only driver calls:
 * safe from inside a runtime's call into the driver; never a runtime call. */
#include "ctx.h"
#include "door/lookup.h"
#include "pool.h"
#include "state.h" /* gp_shim.ctx */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

CUcontext gp_ctx_of(int device)
{
	CUcontext c;
	unsigned flags;
	int active = 0;

	if (device < 0 || device >= GP_MAX_DEVICES)
		return NULL;
	c = atomic_load_explicit(&gp_shim.ctx.primary[device], memory_order_acquire);
	if (c != NULL || gp_cu.DevicePrimaryCtxGetState == NULL || gp_cu.DevicePrimaryCtxRetain == NULL)
		return c;
	/* Active already: retaining it creates nothing, and the reference is given back at once. */
	if (gp_cu.DevicePrimaryCtxGetState(device, &flags, &active) != CUDA_SUCCESS || !active ||
	    gp_cu.DevicePrimaryCtxRetain(&c, device) != CUDA_SUCCESS)
		return NULL;
	if (gp_cu.DevicePrimaryCtxRelease_v2 != NULL)
		gp_cu.DevicePrimaryCtxRelease_v2(device);
	atomic_store_explicit(&gp_shim.ctx.primary[device], c, memory_order_release);
	return c;
}

void gp_ctx_note(int device, CUcontext c)
{
	if (device >= 0 && device < GP_MAX_DEVICES && c != NULL &&
	    atomic_load_explicit(&gp_shim.ctx.primary[device], memory_order_relaxed) != c)
		atomic_store_explicit(&gp_shim.ctx.primary[device], c, memory_order_release);
}

void gp_ctx_forget(int device)
{
	if (device >= 0 && device < GP_MAX_DEVICES)
		atomic_store(&gp_shim.ctx.primary[device], NULL);
}

int gp_ctx_current(CUcontext *c)
{
	CUdevice dev;

	*c = NULL;
	if (gp_cu.CtxGetCurrent == NULL || gp_cu.CtxGetCurrent(c) != CUDA_SUCCESS || *c == NULL ||
	    gp_cu.CtxGetDevice(&dev) != CUDA_SUCCESS) {
		*c = NULL;
		return -1;
	}
	return (int)dev;
}

int gp_ctx_enter(int device, int *pushed)
{
	CUcontext want = gp_ctx_of(device), cur = NULL;

	*pushed = 0;
	if (want == NULL)
		return -1;
	if (gp_cu.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want)
		return 0;
	if (gp_cu.CtxPushCurrent_v2(want) != CUDA_SUCCESS)
		return -1;
	*pushed = 1;
	return 0;
}

void gp_ctx_leave(int pushed)
{
	CUcontext popped;

	if (pushed)
		gp_cu.CtxPopCurrent_v2(&popped);
}

void gp_ctx_user_created(CUcontext c)
{
	pthread_mutex_lock(&gp_shim.ctx.user_lock);
	if (atomic_load(&gp_shim.ctx.nuser) < GP_CTX_MAX_USER) {
		atomic_store(&gp_shim.ctx.user[atomic_load(&gp_shim.ctx.nuser)], c);
		atomic_fetch_add(&gp_shim.ctx.nuser, 1);
	} else {
		atomic_store(&gp_shim.ctx.user_overflow, 1);
	}
	pthread_mutex_unlock(&gp_shim.ctx.user_lock);
}

void gp_ctx_user_destroyed(CUcontext c)
{
	pthread_mutex_lock(&gp_shim.ctx.user_lock);
	for (int i = 0, n = atomic_load(&gp_shim.ctx.nuser); i < n; i++) {
		if (atomic_load(&gp_shim.ctx.user[i]) == c) {
			atomic_store(&gp_shim.ctx.user[i], atomic_load(&gp_shim.ctx.user[n - 1]));
			atomic_fetch_sub(&gp_shim.ctx.nuser, 1);
			break;
		}
	}
	pthread_mutex_unlock(&gp_shim.ctx.user_lock);
}

int gp_ctx_in_user(void)
{
	CUcontext cur = NULL;
	int found = 0;

	if (atomic_load_explicit(&gp_shim.ctx.nuser, memory_order_relaxed) == 0 &&
	    !atomic_load_explicit(&gp_shim.ctx.user_overflow, memory_order_relaxed))
		return 0;
	if (atomic_load(&gp_shim.ctx.user_overflow))
		return 1;
	if (gp_cu.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur == NULL)
		return 0;
	for (int i = 0, n = atomic_load(&gp_shim.ctx.nuser); i < n && !found; i++)
		found = atomic_load_explicit(&gp_shim.ctx.user[i], memory_order_relaxed) == cur;
	return found;
}

int gp_ctx_mem_info(int device, size_t *free_b, size_t *total_b)
{
	int pushed, rc;

	if (gp_ctx_enter(device, &pushed) != 0)
		return -1;
	rc = gp_cu.MemGetInfo_v2(free_b, total_b) == CUDA_SUCCESS ? 0 : -1;
	gp_ctx_leave(pushed);
	return rc;
}

int gp_ctx_device_uuid(int device, char *out, size_t len)
{
	const unsigned char *b;
	CUuuid id;

	if (len > 0)
		out[0] = '\0';
	if (len < 41 || gp_cu.DeviceGetUuid_v2 == NULL ||
	    gp_cu.DeviceGetUuid_v2(&id, device) != CUDA_SUCCESS)
		return -1;
	b = (const unsigned char *)id.bytes;
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
	return 0;
}
