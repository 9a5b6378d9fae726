/* backend.h — the pool's device, made of the real driver (and, for a thread with no context yet,
 * the real runtime, which makes one). Each call works in the block's device's context and keeps
 * the driver's error for the caller; never called with a pool lock held. */
#ifndef GPUPOOL_BACKEND_H
#define GPUPOOL_BACKEND_H

#include "pool.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

void gp_backend_fill(struct gp_backend *be);
/* The driver's error behind the last GP_ENOMEM or GP_EBACKEND on this thread. */
CUresult gp_backend_last_error(void);
/* Set by the runtime door around its pool calls: real allocations and frees made for them go
 * through the runtime, as the program's own would (its context handling and its sticky last
 * error), the runtime's own call into the driver passing our entry point untouched. */
extern _Thread_local int gp_backend_via_runtime;

/* Whether the last failed allocation on this thread went through the runtime (it then holds
 * the runtime's sticky error, which a successful retry must clear). */
int gp_backend_runtime_failed(void);
/* The runtime's cudaMalloc on device `dev`, the thread's current device put back after: for the
 * misses through the runtime and for a pass-through before the pool is ready. */
cudaError_t gp_backend_runtime_malloc(int dev, size_t bytes, void **out);
/* No capture is underway any more: the real frees a capture made wait are made now. */
void gp_backend_captures_over(void);

#endif
