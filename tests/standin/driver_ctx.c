/* driver_ctx.c — the stand-in driver's initialisation, devices and contexts: cuInit, one primary
 * context per device (a stable handle, retained and released, reset with everything in it), and
 * the current context of each thread (a stack, as cuCtxPushCurrent / cuCtxPopCurrent see it).
 * Test-only. */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX_STACK 16

static _Thread_local struct CUctx_st *ctx_stack[CTX_STACK];
static _Thread_local int ctx_depth;

static struct CUctx_st *current_ctx(void)
{
	return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

int ctx_device(void)
{
	struct CUctx_st *c = current_ctx();

	return c != NULL ? c->device : -1;
}

int here(int fallback)
{
	int d = ctx_device();

	if (d >= 0)
		return d;
	return fallback >= 0 ? fallback : 0;
}

/* The context behind a handle, a primary one or a live one of the program's own; NULL if it is
 * none of ours (after check_call: the devices are set up). */
static struct CUctx_st *ctx_of(CUcontext ctx)
{
	int d;

	if (ctx == NULL)
		return NULL;
	for (d = 0; d < st.ndevices; d++)
		if (ctx == &st.dev[d].ctx)
			return &st.dev[d].ctx;
	for (d = 0; d < STANDIN_MAX_OWN_CONTEXTS; d++)
		if (ctx == __atomic_load_n(&st.own_ctx[d], __ATOMIC_ACQUIRE))
			return ctx;
	return NULL;
}

/* ---- initialisation and devices ---- */

CUresult cuInit(unsigned int Flags)
{
	st_setup();
	if (atomic_load(&st_unloading))
		return CUDA_ERROR_DEINITIALIZED;
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (st.ndevices == 0)
		return CUDA_ERROR_NO_DEVICE;
	atomic_store(&st_initialised, 1);
	ckpt_start();
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = st.ndevices;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= st.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

/* The attributes gpupool asks about: the virtual memory API (supported unless STANDIN_NO_VMM=1,
 * read at each call) and GPUDirect RDMA on such memory (not); every other attribute reads 0. */
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult rc = check_call();
	const char *no = getenv("STANDIN_NO_VMM");

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= st.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*pi = attrib == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED &&
	      !(no != NULL && strcmp(no, "1") == 0);
	return CUDA_SUCCESS;
}

/* Every device's memory is host memory: each can reach every other's. */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (canAccessPeer == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= st.ndevices || peerDev < 0 || peerDev >= st.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*canAccessPeer = dev != peerDev;
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (bytes == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (dev < 0 || dev >= st.ndevices)
		rc = CUDA_ERROR_INVALID_DEVICE;
	else
		*bytes = (size_t)st.dev[dev].capacity;
	leave();
	return rc;
}

/* A device's UUID: fixed per ordinal ("STANDIN" and the ordinal in its bytes), as NVML would name
 * the same device. */
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	static const char tag[] = "STANDIN-GPU";
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (uuid == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (dev < 0 || dev >= st.ndevices)
		rc = CUDA_ERROR_INVALID_DEVICE;
	else {
		memset(uuid->bytes, 0, sizeof(uuid->bytes));
		memcpy(uuid->bytes, tag, sizeof(tag) - 1);
		uuid->bytes[15] = (char)dev;
	}
	leave();
	return rc;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

/* "gpupool stand-in <ordinal>", cut to `len` bytes with its NUL, as the driver cuts a name. */
CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= st.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "gpupool stand-in %d", (int)dev);
	return CUDA_SUCCESS;
}

/* ---- the current context ---- */

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx();
	return CUDA_SUCCESS;
}

/* Replaces the top of the thread's stack; NULL pops it (nothing if the stack is empty). */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
	struct CUctx_st *c;
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx_of(ctx);
	if (ctx != NULL && c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == 0) {
		if (c != NULL)
			ctx_stack[ctx_depth++] = c;
		return CUDA_SUCCESS;
	}
	if (c == NULL)
		ctx_depth--;
	else
		ctx_stack[ctx_depth - 1] = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	struct CUctx_st *c;
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx_of(ctx);
	if (c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY; /* a stand-in limit; real stacks are deeper */
	ctx_stack[ctx_depth++] = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx != NULL)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (current_ctx() == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = current_ctx()->device;
	return CUDA_SUCCESS;
}

/* CUDA 13's flavour: the device of `ctx`, NULL meaning the current one. */
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	struct CUctx_st *c;
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx == NULL ? current_ctx() : ctx_of(ctx);
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = c->device;
	return CUDA_SUCCESS;
}

/* Waits for the device: the work queued on its streams before the call completes; then every
 * held event is done (of every device, as the stand-in always did). */
static CUresult sync_device(const char *fn, int dev)
{
	CUresult rc;

	pthread_mutex_lock(&st.lock);
	st.dev[dev].c.syncs++;
	rc = check_unsafe_call(fn);
	if (rc == CUDA_SUCCESS && device_capturing(dev))
		rc = capture_error(fn, dev, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	if (rc == CUDA_SUCCESS) {
		wait_device(dev);
		complete_all(-1);
	}
	leave();
	return rc;
}

CUresult cuCtxSynchronize(void)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (current_ctx() == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	return sync_device(__func__, current_ctx()->device);
}

/* CUDA 13's flavour: synchronises `ctx`, NULL meaning the current one. */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	struct CUctx_st *c;
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx == NULL ? current_ctx() : ctx_of(ctx);
	if (c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	return sync_device(__func__, c->device);
}

/* ---- primary contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pctx == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (dev < 0 || dev >= st.ndevices) {
		rc = CUDA_ERROR_INVALID_DEVICE;
	} else {
		st.dev[dev].ctx.retained++;
		*pctx = &st.dev[dev].ctx;
	}
	leave();
	return rc;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dev < 0 || dev >= st.ndevices)
		rc = CUDA_ERROR_INVALID_DEVICE;
	else if (st.dev[dev].ctx.retained == 0)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	else
		st.dev[dev].ctx.retained--;
	leave();
	return rc;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags == NULL || active == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (dev < 0 || dev >= st.ndevices) {
		rc = CUDA_ERROR_INVALID_DEVICE;
	} else {
		*flags = 0;
		*active = st.dev[dev].ctx.retained > 0;
	}
	leave();
	return rc;
}

/* Waits until the device has no work left (what other threads queue meanwhile included), then
 * frees every allocation of the device and destroys its streams (per-thread ones too) and events
 * (their handles become invalid), as the driver does with everything in the context. The handle
 * itself stays valid here, and so does whatever thread has it current: the next call uses it
 * afresh. */
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dev < 0 || dev >= st.ndevices) {
		rc = CUDA_ERROR_INVALID_DEVICE;
		goto out;
	}
	drain_device(dev);
	free_device_memory(dev);
	destroy_device_streams(dev);
	destroy_device_events(dev);
	st.dev[dev].resets++;
out:
	leave();
	return rc;
}

/* ---- contexts of the program's own ---- */

/* A context of the program's own on `dev`, pushed current, as cuCtxCreate does. Its allocations
 * are the device's like any other (a destroy does not free them here). */
static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
	struct CUctx_st *c = NULL;
	CUresult rc = enter();
	int i;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pctx == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (dev < 0 || dev >= st.ndevices) {
		rc = CUDA_ERROR_INVALID_DEVICE;
		goto out;
	}
	for (i = 0; i < STANDIN_MAX_OWN_CONTEXTS && st.own_ctx[i] != NULL; i++)
		;
	if (i == STANDIN_MAX_OWN_CONTEXTS || ctx_depth == CTX_STACK ||
	    (c = calloc(1, sizeof(*c))) == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY; /* a stand-in limit */
		goto out;
	}
	c->device = dev;
	c->own = 1;
	__atomic_store_n(&st.own_ctx[i], c, __ATOMIC_RELEASE);
	st.dev[dev].user_contexts++;
	ctx_stack[ctx_depth++] = c;
	*pctx = c;
out:
	leave();
	return rc;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	(void)flags;
	return ctx_create(pctx, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
			CUdevice dev)
{
	(void)flags;
	if (params != NULL)
		return CUDA_ERROR_INVALID_VALUE; /* execution affinity, CIG: not modelled */
	return ctx_create(pctx, dev);
}

/* Popped from the calling thread's stack wherever it is there; another thread that still has it
 * current keeps a handle no call accepts. The record is freed: its handle is invalid now. */
CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult rc = enter();
	int i, j, k;

	if (rc != CUDA_SUCCESS)
		return rc;
	for (i = 0; i < STANDIN_MAX_OWN_CONTEXTS && st.own_ctx[i] != ctx; i++)
		;
	if (ctx == NULL || i == STANDIN_MAX_OWN_CONTEXTS) {
		rc = CUDA_ERROR_INVALID_CONTEXT; /* a primary context is not destroyed this way */
		goto out;
	}
	__atomic_store_n(&st.own_ctx[i], NULL, __ATOMIC_RELEASE);
	st.dev[ctx->device].user_contexts--;
	for (j = 0, k = 0; j < ctx_depth; j++)
		if (ctx_stack[j] != ctx)
			ctx_stack[k++] = ctx_stack[j];
	ctx_depth = k;
	free(ctx);
out:
	leave();
	return rc;
}
