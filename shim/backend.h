/* backend.h — the pool's device, made of the real CUDA runtime. Each call switches to the
 * block's device when needed and back, and keeps the runtime's error for the caller. */
#ifndef GPUPOOL_BACKEND_H
#define GPUPOOL_BACKEND_H

#include "pool.h"

#include <cuda_runtime_api.h>

void gp_backend_fill(struct gp_backend *be);
/* The runtime's error behind the last GP_EBACKEND on this thread. */
cudaError_t gp_backend_last_error(void);

#endif
