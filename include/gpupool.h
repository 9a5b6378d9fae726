/* gpupool.h — the public API of libgpupool.so, for programs that want to ask directly.
 * Everything else works without it: LD_PRELOAD the library and send the release signal. */
#ifndef GPUPOOL_H
#define GPUPOOL_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Give idle cached GPU memory back to the driver now, on `device` (-1: every device).
 * *bytes (may be NULL) gets how much was released. Returns 0, or -1 when the shim is not
 * active (passing through), a real free failed, or a CUDA graph capture is underway anywhere in
 * the process (a real free would invalidate it: the release is then made by the control thread
 * once no capture is left, and *bytes is 0). Returns after any release already under way (a
 * signal's, a threshold's) has given its blocks back: what was cached at the call is then back
 * with the driver; *bytes counts only what this call freed. */
int gpupool_release(int device, unsigned long long *bytes);

/* PyTorch's pluggable allocator, for programs that can change one line:
 *   torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(
 *       "/path/to/libgpupool.so", "gpupool_torch_alloc", "gpupool_torch_free"))
 * Signatures as PyTorch calls them (size is ssize_t there). Returns NULL when out of memory. */
struct CUstream_st; /* cudaStream_t, without needing the CUDA headers */
void *gpupool_torch_alloc(ssize_t size, int device, struct CUstream_st *stream);
void gpupool_torch_free(void *ptr, ssize_t size, int device, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
