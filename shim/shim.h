/* shim.h — the shim's state and the logic behind the exported entry points.
 * entry.c stays a list of one-line wrappers; everything they need is here. */
#ifndef GPUPOOL_SHIM_H
#define GPUPOOL_SHIM_H

#include "pool.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>

enum gp_state { GP_UNINIT = 0, GP_ACTIVE, GP_PASSTHROUGH };

extern _Atomic int gp_shim_state;
extern struct gp_pool *gp_shim_pool;

int gp_shim_init_slow(void);

/* Ensure init; 1 = serve from the pool, 0 = pass through to the real runtime. */
static inline int gp_shim_active(void)
{
	int s = atomic_load_explicit(&gp_shim_state, memory_order_acquire);
	if (__builtin_expect(s == GP_ACTIVE, 1))
		return 1;
	if (s == GP_PASSTHROUGH)
		return 0;
	return gp_shim_init_slow();
}

cudaError_t gp_shim_malloc(void **ptr, size_t size);
/* The same, on a given device (the pool switches to it for a real allocation). */
cudaError_t gp_shim_malloc_on(int device, void **ptr, size_t size);
cudaError_t gp_shim_free(void *ptr);
/* flags: as given to cudaStreamCreateWithFlags (cudaStreamDefault for cudaStreamCreate). */
void gp_shim_stream_created(cudaError_t rc, cudaStream_t *s, unsigned flags);
void gp_shim_device_set(int device);
void gp_shim_device_reset(void);
void gp_shim_adjust_meminfo(size_t *free_b, size_t *total_b);
void gp_shim_unordered(void);

#endif
