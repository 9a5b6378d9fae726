/* gpupool.h — the public API of libgpupool.so, for programs that want to ask directly.
 * Everything else works without it: LD_PRELOAD the library and send the release signal. */
#ifndef GPUPOOL_H
#define GPUPOOL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Give idle cached GPU memory back to the driver now, on `device` (-1: every device).
 * *bytes (may be NULL) gets how much was released. Returns 0, or -1 when the shim is not
 * active (passing through) or a real free failed. */
int gpupool_release(int device, unsigned long long *bytes);

#ifdef __cplusplus
}
#endif

#endif
