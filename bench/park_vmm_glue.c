/* park_vmm_glue.c — what bench/park_vmm.cu needs to run the shim's fast park (shim/park_vmm.c,
 * vmm.c, ctx.c, log.c, compiled in, no libgpupool.so) on the real driver: the state and the
 * driver table the shim defines elsewhere, filled from the libcuda.so.1 the program is linked
 * to, and VMM-backed blocks made as the pool makes them. C, because the shim's state is C11
 * (_Atomic, _Alignas), which the benchmark's C++ cannot include. */
#define _GNU_SOURCE
#include "ctx.h"
#include "door/lookup.h"
#include "state.h"
#include "vmm.h"

#include <dlfcn.h>
#include <string.h>

struct gp_shim_state gp_shim = {
	.ctx = { .user_lock = PTHREAD_MUTEX_INITIALIZER },
	.vmm = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.park = { .lock = PTHREAD_MUTEX_INITIALIZER },
};
struct gp_shim_early gp_shim_early;
struct gp_cu gp_cu;

/* The driver initialised, device 0's primary context current and noted, VMM on: 0, or the
 * driver's error. */
int pvb_setup(void)
{
	CUcontext c;
	CUresult e;
	void *p;

#define FILL(cls, name, base, version, flavour, params, args, stream)                              \
	p = dlsym(RTLD_DEFAULT, "cu" #name);                                                       \
	memcpy(&gp_cu.name, &p, sizeof(p));
	GP_DRIVER_ALL(FILL)
#undef FILL
	e = cuInit(0);
	if (e == CUDA_SUCCESS)
		e = cuDevicePrimaryCtxRetain(&c, 0);
	if (e == CUDA_SUCCESS)
		e = cuCtxSetCurrent(c);
	if (e != CUDA_SUCCESS)
		return (int)e;
	gp_ctx_note(0, c);
	gp_shim.life.opts.vmm = GP_VMM_ON;
	gp_vmm_init(GP_VMM_ON);
	return atomic_load(&gp_shim.vmm.on) ? 0 : (int)CUDA_ERROR_NOT_SUPPORTED;
}

/* A VMM-backed block of `bytes` (a multiple of 2 MiB) on device 0, as the pool makes one. */
int pvb_alloc(size_t bytes, unsigned long long *va)
{
	CUdeviceptr p = 0;
	CUresult e = gp_vmm_alloc(0, bytes, &p);

	*va = (unsigned long long)p;
	return (int)e;
}

int pvb_free(unsigned long long va)
{
	return (int)gp_vmm_free((const void *)(uintptr_t)va, 1);
}

/* The ring and workers the park used (the defaults when untuned). */
void pvb_ring(unsigned *slots, size_t *slot_bytes, unsigned *threads)
{
	pthread_mutex_lock(&gp_shim.park.lock);
	*slots = gp_shim.park.slots;
	*slot_bytes = gp_shim.park.slot_bytes;
	*threads = gp_shim.park.threads;
	pthread_mutex_unlock(&gp_shim.park.lock);
}
