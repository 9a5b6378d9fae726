/* real.h — the shared CUDA runtime, when the program has one, found once at run time (no
 * DT_NEEDED on libcudart): the runtime door's misses on a thread with no context, and the
 * pass-through of what the pool does not serve. Programs with the static runtime have none.
 * dlsym(RTLD_NEXT) first, then an already-loaded libcudart.so.13/.12 by soname (RTLD_NOLOAD:
 * never a second copy); a result that points back into this library is refused. */
#ifndef GPUPOOL_REAL_H
#define GPUPOOL_REAL_H

#include <cuda_runtime_api.h>

struct gp_real {
	cudaError_t (*Malloc)(void **, size_t);
	cudaError_t (*Free)(void *);
	cudaError_t (*GetDevice)(int *);
	cudaError_t (*SetDevice)(int);
	cudaError_t (*GetDeviceCount)(int *);
	cudaError_t (*GetLastError)(void);
	cudaError_t (*MemGetInfo)(size_t *, size_t *);
	cudaError_t (*DeviceSynchronize)(void);
	cudaError_t (*IpcGetMemHandle)(cudaIpcMemHandle_t *, void *);
};

extern struct gp_real gp_real;

/* Resolve every entry once (thread-safe). Returns 0 when at least cudaMalloc and cudaFree
 * were found (else every field is NULL); the others may be NULL and their callers check. */
int gp_real_resolve(void);

/* After a dlsym or dlopen of ours that failed: drop the error it left (glibc keeps a small
 * per-thread record until dlerror() has returned it and is called again). Else the program's
 * next dlerror() reports our lookup, and a thread of ours that exits leaves the record behind
 * (LeakSanitizer caught it once in e2e_plot_trace: 24 bytes from _dlerror_run). */
void gp_dl_forget_error(void);

#endif
