/* framework.h — frameworks that keep their own cache (PyTorch, CuPy): asking them to empty it
 * before a release, so their idle segments flow into the pool and go back with the rest;
 * and PyTorch's takeover mode. */
#ifndef GPUPOOL_FRAMEWORK_H
#define GPUPOOL_FRAMEWORK_H

/* At load time, in takeover mode: PYTORCH_NO_CUDA_MEMORY_CACHING=1 unless the user set it. */
void gp_framework_load_takeover(void);
/* At first CUDA use: warn about PyTorch set-ups that never call cudaMalloc. */
void gp_framework_check_config(void);
/* On the control thread, no pool lock held: empty the frameworks' caches. Returns 1 if Python
 * ran the flush, 0 if there is no (live) interpreter. */
int gp_framework_flush(void);
/* On the control thread: trim the runtime's stream-ordered pools (cudaMallocAsync). */
void gp_framework_trim_async_pools(void);

#endif
